"""``proxima check-env TARGET``: check a user's env against the Gymnasium API and Proxima's contract.

TARGET is a registered Gymnasium id (``CartPole-v1``) or ``module:ClassName`` importable from the
current directory or PYTHONPATH. A ``module:ClassName`` of a torch-native env (a NativeEnv/BatchedEnv
subclass, docs/native_envs.md) is built with 2 envs on the CPU and checked for what applies to it
(_Checker.run_native): spaces, reset and step shapes and dtypes, finite values, "obs bounds", reset determinism,
the info autoreset fills in, "global rng" (reset and step leave torch's global RNG alone: a draw from
it is seeded by no reset(seed) and shared by every --seeds member), and "state resume" (_Checker.check_resume: a new env given the saved
state_dict() replays the same steps, as a resumed run must). :func:`check_env` builds one env, resets it, runs ``steps`` random
actions (resetting whenever an episode ends) and returns a list of :class:`Violation`, each with
what was expected and what the env actually did. Exceptions raised by user code never escape: they
become a violation naming the call (``reset``/``step``) and the exception. An Atari id (``Pong-v5``)
is checked as Gymnasium's ALE with Proxima's wrappers (atari.ale_env_fn: what ``--backend gymnasium``
trains on); EnvPool's envs are no gymnasium.Env and are not checked.

The checks (names as they appear in the report):

  build              the constructor returns a gymnasium.Env without raising
  spaces declared    observation_space and action_space are gymnasium Spaces, read without raising (a property's
                     exception, a wrapper chain deeper than the stack: train's line, '... reading observation_space')
  spaces supported   observation Box (images: uint8 HWC or CHW, or NHWC/NCHW frame stacks) or Dict of Box; action Discrete,
                     MultiDiscrete, MultiBinary or Box (bounds finite or infinite); none of them empty (Box(-1, 1, (0,)),
                     MultiDiscrete([])). A refused Discrete/Tuple observation is told its fix (FlattenObservation)
  reset              reset(seed=...) does not raise
  reset returns      reset returns (obs, info) with info a dict (a tuple or a list of the two, as Gymnasium's vector
                     envs and so ``proxima train`` take them; an obs returned alone is named as the old gym API)
  reset determinism  two reset(seed=s) give the same obs (a difference is shown at its first key and entry)
  step determinism   reset(seed=s) then one step with the same action, twice, give the same obs, reward,
                     terminated and truncated, and leave self.np_random in the same state after both resets
                     (Gymnasium's check_env compares the step): a reset that ignores its seed while step()
                     draws from self.np_random passes the reset check but not this one. Run after the random
                     steps (2 resets and 2 steps more), when they went through; not with --steps 0 or when
                     reset determinism failed. Both run with Gymnasium's NormalizeObservation/NormalizeReward
                     in the stack frozen (update_running_mean = False), whose updates alone differ each call
  obs keys           a Dict obs has exactly the keys of observation_space (missing and unexpected keys named)
  obs shape          obs.shape == observation_space.shape
  obs dtype          obs dtype casts safely to observation_space.dtype (see below)
  obs finite         no NaN/inf in obs (reported with the step index)
  obs float32 range  a float64 obs stays within float32's range (Proxima casts it to float32)
  obs bounds         observation_space.low <= obs <= observation_space.high
  obs in space       observation_space.contains(obs), for spaces that are neither a Box nor a Dict

A Dict observation is checked key by key: each key's Box gets the Box checks above (obs shape to
obs bounds), and a violation names the key (``obs['vec'][0] = 4.2, above high[0] = 1, at step 3``).
  step               step(action) does not raise
  step returns       step returns 5 values (obs, reward, terminated, truncated, info), a tuple or a list
  reward type        reward is a real scalar (int/float/numpy scalar, a 0-d array of one), not a bool or
                     an array of 1 value
  reward finite      reward is not NaN/inf, nor beyond float32's range (Proxima trains in float32: 1e300 is inf there)
  terminated type    terminated is a bool (Python or numpy, or a 0-d bool array), not 0/1, None or a string
  truncated type     truncated is a bool, as terminated
  info type          info is a dict
  action not mutated step does not modify the action array it was given in place: the array is the
                     caller's. Proxima's training hands each env a copy, so its rollouts are not
                     affected, but a loop of your own that keeps the array would be
  autoreset          after an episode ends, reset() works and a new episode can be stepped

The reward and flag rules are those of ``proxima train`` too (gym_adapter.EnvCalls: FLAG_RULE,
REWARD_RULE) and of Gymnasium's own env checker: a flag that is no bool is read by its truth value
("False", a string, ends every episode; None never ends one), so train refuses it with one line
naming the env index and step, as it refuses a bool reward. A ``sys.exit()`` in the env's
constructor, ``reset`` or ``step`` is that call's violation (``build``, ``reset``, ``step``, with the
exit status), not the end of check-env.

Observation dtype rule: an obs passes when its dtype casts *safely* to the declared dtype
(``np.can_cast(obs.dtype, space.dtype)``), the rule of Gymnasium's ``Box.contains``. So a float32
obs in a float64 Box passes, but a float64 obs in a float32 Box (the common forgotten
``.astype(np.float32)``) *is flagged*: the obs is not in the declared space, Gymnasium's own checker
rejects it, and the fix is one line. Proxima would cast it to float32 and train anyway. A list is
read as ``np.asarray`` reads it, its values as they are; its Python numbers have a kind but no
width, so their kind is what must cast (floats in a float Box pass, floats in an integer or bool
Box are flagged, as ``proxima train`` refuses them: Gymnasium's vector env would truncate them or
fail with numpy's TypeError). A torch
tensor is read as ``np.asarray`` reads it, in its own dtype, as ``proxima train`` reads it; one that
numpy cannot read (on a GPU, requiring grad) is an obs dtype violation, as train refuses it. Its fix is
``astype`` only while every occurrence's values fit the declared dtype: ints outside its range at any step
(int64 3e9 in an int32 Box, which astype wraps to -1294967296, inside the bounds) get "declare a wider dtype or
clip/scale the values", naming the first such value and its step.

Each kind of violation is reported once, at its first occurrence, with how many more steps showed it.

Notes are not violations: they say how Proxima will read an observation that holds pixels but is
not an image to it (a uint8 (84, 84), a stack of 2-channel frames (4, 84, 84, 2), a float32 (84, 84, 3); see
``spaces.image_note``): an MLP on the flattened values, and what to change for the CNN; and when a
Box action space is far from the policy's unit scale (0 outside its bounds, 0 on a bound of a float
Box, where half the early actions clip, a range wider than 100 or narrower than 0.01;
``spaces.action_scale_note``): wrap it in Gymnasium's RescaleAction (an integer Box:
declare a float Box(-1, 1) and map it in the env); when an entry of a float64 (or int32/int64) observation varies over the
observations read but float32, which train casts observations to before --norm-obs, rounds that variation
away (its rounding step at the entry's mean is more than 1% of the entry's std: 1e6 + 0.01 * x;
``gym_adapter.Float64Spread``): subtract the offset; and when the env is wrapped in Gymnasium's
NormalizeObservation or NormalizeReward, whose statistics no checkpoint holds: use --norm-obs/--norm-reward.

Once the env is built and its spaces read as supported, the report's last line (OK or the count of violations) follows
the ``spaces: ...`` line a new run of the env prints (:func:`run_spaces_line`: spaces.spaces_line with the encoder,
hidden sizes and activation of the env's preset, presets.resolve), for the env already built.

``reset`` is called as Gymnasium's vector envs call it, ``reset(seed=s, options=None)``: a reset
without an ``options`` or ``seed`` parameter (gym 0.21's ``def reset(self)``) is a ``reset`` violation
(``proxima train`` could not reset it) whose fix is gym_adapter.RESET_FIX.

An env none of whose episodes ended within --steps (terminated and truncated never true) is not
counted as passing ``autoreset``: reset() is still called mid-episode (as ``reset``) and the note
says what to change (a TimeLimit, or terminated that can become true), as for a native env.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import numbers
import re
import sys
from dataclasses import dataclass
from typing import Any, Optional

import gymnasium as gym
import numpy as np
import torch

from ..check_env_cli import CHECK_STEPS, MAX_CHECK_STEPS
from ..config import MAX_EVAL_STEPS, MAX_SEED, install_hint
from .base import EnvError
from .gym_adapter import (EXIT_FIX, _build, F32_MAX, FLAG_RULE, NORMALIZE_WRAPPERS, REWARD_RULE, is_flag, TENSOR_FIX, Float64Spread, _extra_for,
                          beyond_float32, creator_error, exit_text, float64_spread_note, spread_dtype, int_range_fault, kind_casts,
                          native_only, normalize_wrappers, build_user_native, user_native_class, normalize_wrappers_note, number_text, resolve_env_fn,
                          missing_kwarg_hint, tensor_numpy, unknown_kwarg_line, user_frame, RESET_FIX, RESET_KWARG, time_limit_of,
                          success_flag, unusable_success)
from .spaces import (action_scale_note, check_spaces, image_layout, image_note, obs_layout, pixels_fix, proxima_action_space,
                     spaces_line, spaces_summary, uint8_pixels)
from ..terminal import printable
from ..warnings_guard import quiet_warnings

#: how much of a refused space's line check-env shows: the line ends with its fix (FlattenObservation
#: in a factory, MultiDiscrete([2] * n)), which the usual 300 characters would cut off; so does an obs dtype
#: line that names a Dict key, a value out of range and the step of an episode that showed it
SPACES_LIMIT = 1000
#: ... and of a native env's own lines (NativeEnv's EnvError, its build, its global RNG draws), shown in full
#: as train shows them: their fix and docs link come last
_LONG_CHECKS = ("spaces supported", "obs dtype", "state resume", "build", "reset", "step", "member streams", "global rng")

#: what check-env does with the arguments Proxima passes a native env's constructor (it has no --num-envs
#: nor --device: those are train's), for --env-kwargs that sets one (gym_adapter.build_user_native)
CHECK_SET_BY = {"num_envs": "check-env builds 2 envs (train's --num-envs sets the number)",
                "device": "check-env builds the env on the CPU (train's --device sets the device)",
                "seed": "use --seed"}
#: the steps check-env's state resume check replays on a native env (after its random steps): enough for
#: several autoresets' draws from self.generator, few enough to stay instant
RESUME_STEPS = 20

#: inspect_obs's notes to check_obs beside the violations it found: (the words before the advice of the obs dtype
#: violation it kept, whether that advice is the range one), and the range advice of the first entry whose values
#: astype would wrap, naming where
_DTYPE_HEAD, _DTYPE_WRAPS = "obs dtype: head", "obs dtype: wraps"


#: every check, in report order (documented in the module docstring).
ALL_CHECKS = (
    "build", "spaces declared", "spaces supported", "reset", "reset returns", "reset determinism", "step determinism",
    "obs keys", "obs shape", "obs dtype", "obs finite", "obs float32 range", "obs bounds", "obs in space", "step", "step returns",
    "reward type", "reward finite", "terminated type", "truncated type", "info type",
    "action not mutated", "autoreset", "state resume",
)


@dataclass
class Violation:
    """One broken rule: which check, what was expected, what the env actually did."""

    check: str
    expected: str
    actual: str

    def __str__(self) -> str:
        limit = SPACES_LIMIT if self.check in _LONG_CHECKS else 300
        return f"{self.check}: expected {_one_line(self.expected)}; got {_one_line(self.actual, limit)}"


class Violations(list):
    """A list of :class:`Violation` that also remembers which checks ran (``checks_run``) and the
    notes on the observation space (``notes``)."""

    def __init__(self, items=(), checks_run=(), notes=(), readings=(), spaces=None):
        super().__init__(items)
        self.checks_run = list(checks_run)
        self.notes = list(notes)  #: lines that are not violations (how Proxima reads the observation)
        #: how train reads each image of a supported observation space (nets.image_readings): on the OK
        #: line, or a line of their own before a FAIL report's count
        self.readings = list(readings)
        #: spaces.spaces_line of the env's spaces under its preset's config, as a run of it prints it; None
        #: until the env was built and its spaces read as supported
        self.spaces: Optional[str] = spaces


# --- small helpers ---------------------------------------------------------------------------

def run_spaces_line(target: str, obs_space: gym.spaces.Space, act_space: gym.spaces.Space,
                    native: bool = False) -> Optional[str]:
    """The ``spaces: ...`` line a new run of ``target`` prints (train_state.run_spaces), with the encoder,
    hidden sizes and activation of its preset (presets.resolve: what ``proxima train TARGET`` takes);
    None when the summary cannot be made (the spaces supported check names why). Another exception (a
    bug in the description) is the line train prints for it, ``spaces: not described (<Type>: <line>)``:
    a description never stops the checks, as it never stops a run (train_state.run_spaces)."""
    from ..config import ConfigError
    from ..presets import resolve

    try:
        cfg = resolve(target)
        return spaces_line(spaces_summary(obs_space, act_space, cfg.encoder, cfg.hidden_sizes, cfg.activation, target,
                                          native=native))
    except (EnvError, ConfigError):
        return None
    except Exception as e:  # train's wording (train_state.open_run_dir), without its meta.json
        text = (str(e).strip().splitlines() or [""])[0]
        error = f"{type(e).__name__}: {text}" if text else type(e).__name__
        return f"spaces: not described ({error})"


def _one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line of at most ``limit`` characters: cut at a word with '...', a closing docs link
    ('(docs/native_envs.md)', where the fix is explained) kept whole."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    link = re.search(r" (\(docs/[^ ()]+\))$", text)
    tail = f" {link.group(1)}" if link and len(link.group(1)) < limit // 2 else ""
    budget = limit - 3 - len(tail)
    head = text[: budget + 1]  # a space right after the budget still ends a whole word
    head = head[: head.rfind(" ")] if " " in head else text[:budget]
    return f"{head.rstrip(' ,;:')}...{tail}"


def _exc(e: BaseException) -> str:
    """'Type: message (file.py:LINE)': the line of the user's code that raised, as train names it (user_frame)."""
    at = user_frame(e)
    if isinstance(e, SystemExit):  # "SystemExit: 3" says less than what ended the process and how
        return f"SystemExit: the env called {exit_text(e)}{at}; {EXIT_FIX}"
    msg = _one_line(str(e), 200)
    return f"{type(e).__name__}: {msg}{at}" if msg else f"{type(e).__name__}{at}"


def _fmt_array(x: np.ndarray) -> str:
    with np.printoptions(precision=4, threshold=8, edgeitems=3, linewidth=10_000):
        return _one_line(np.array2string(np.asarray(x), separator=", "), 120)


def _describe(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return f"ndarray of shape {x.shape} dtype {x.dtype}"
    if isinstance(x, tuple):
        return f"tuple of {len(x)} values ({', '.join(type(v).__name__ for v in x)})"
    if isinstance(x, (dict, list)):
        return f"{type(x).__name__} of {len(x)} items"
    if isinstance(x, np.generic):
        return f"{type(x).__name__} {x}"
    return _one_line(f"{type(x).__name__} {x!r}", 80)


def _scalar(v: Any) -> str:
    return f"{v.item() if isinstance(v, np.generic) else v:g}" if isinstance(v, (float, np.floating)) else str(v)


def _index(i, shape) -> str:
    idx = np.unravel_index(i, shape) if shape else ()
    return "[" + ", ".join(str(int(k)) for k in idx) + "]" if idx else ""


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):  # np.asarray reads not every tensor (grad, a GPU's)
        try:
            a, b = a.detach().cpu().double(), b.detach().cpu().double()
        except Exception:  # a device it cannot leave (meta): no values to tell apart; the obs dtype check names it
            return True
    try:
        x, y = np.asarray(a), np.asarray(b)
        if x.shape != y.shape:
            return False
        if x.dtype.kind in "fc" or y.dtype.kind in "fc":
            return bool(np.array_equal(x, y, equal_nan=True))
        return bool(np.array_equal(x, y))
    except Exception:
        return a is b or a == b


def _nonfinite(x: Any, prefix: str = "obs") -> Optional[tuple[str, Any, int]]:
    """(first non-finite entry's name, its value, how many) or None; recurses into dicts/tuples."""
    if isinstance(x, dict):
        for k, v in x.items():
            r = _nonfinite(v, f"{prefix}[{k!r}]")
            if r:
                return r
        return None
    if isinstance(x, (tuple, list)) and x and not isinstance(x[0], numbers.Number):
        for k, v in enumerate(x):
            r = _nonfinite(v, f"{prefix}[{k}]")
            if r:
                return r
        return None
    try:
        arr = np.asarray(x)
        if arr.dtype.kind not in "fc":
            return None
        bad = ~np.isfinite(arr)
    except Exception:
        return None
    if not bad.any():
        return None
    i = int(np.flatnonzero(bad.reshape(-1))[0])
    return prefix + _index(i, arr.shape), arr.reshape(-1)[i], int(bad.sum())


def _transposed(got: tuple, want: tuple, name: str, declared: str) -> str:
    """The fix when an image comes channels first where the space declares them last, or the reverse."""
    if len(want) == 3 and len(got) == 3:
        if got == (want[2], want[0], want[1]):
            return f" (channels first where {declared} declares them last: return {name}.transpose(1, 2, 0))"
        if got == (want[1], want[2], want[0]):
            return f" (channels last where {declared} declares them first: return {name}.transpose(2, 0, 1))"
    return ""


#: _dtype_fix's default: look the range fault up (a caller that has it passes it, None too)
_FIND = object()


def _dtype_fix(arr: np.ndarray, space: gym.spaces.Box, name: str, fault: Any = _FIND, at: str = "") -> str:
    """How to return ``arr`` in ``space``'s dtype. Float pixels in [0, 1] where a uint8 space goes
    up to 255 are scaled first: a bare astype(np.uint8) would turn every pixel into 0; other float pixels
    of an image get the uint8 cast train's check names (never a float Box: Box(0, 255) float is no image,
    but an MLP's unscaled vector). ``fault`` is
    int_range_fault's for ``arr``; ``at`` names the occurrence of a value out of range when it is not
    the one the line names first (check-env's later steps)."""
    unit = (space.dtype == np.uint8 and arr.dtype.kind == "f" and arr.size > 0 and bool(np.all(space.high > 1))
            and bool(np.all((arr >= 0) & (arr <= 1))))
    if unit:
        return f"does not cast safely to uint8; its values lie in [0, 1]: {pixels_fix(name, True)}"
    if arr.dtype.kind == "f" and image_layout(space) is not None:
        # an image: a float Box(0, 255) would be no image but an MLP's unscaled vector, so only the uint8 cast, train's words
        return f"does not cast safely to uint8: return {uint8_pixels(space, name, arr)[1]}"
    if arr.dtype.kind == "f" and space.dtype.kind in "iub":  # astype would drop the fractions this refusal is about
        return (f"does not cast safely to {space.dtype} (a float would lose its fraction): declare a float Box, or round "
                f"on purpose: return np.rint({name}).astype(np.{space.dtype})")
    fault = int_range_fault(arr, space.dtype) if fault is _FIND else fault
    if fault is not None:  # astype would wrap the very values that do not fit
        i, value, wrapped, holds = fault
        limits = np.iinfo(space.dtype)
        at = f", {at}," if at else ""
        # an image stays uint8 (a uint16 Box is no image: an MLP over flattened pixels), so no wider dtype for it
        fix = ("clip/scale the pixels to 0..255 in the env: return np.clip(obs, 0, 255).astype(np.uint8)".replace("obs", name)
               if image_layout(space) is not None else f"declare a wider dtype ({holds}) or clip/scale the values in the env")
        return (f"does not cast safely to {space.dtype}; {name}{_index(i, arr.shape)} = {value}{at} is outside its range "
                f"[{limits.min}, {limits.max}] (astype would make it {wrapped}): {fix}")
    return f"does not cast safely to {space.dtype}: return {name}.astype(np.{space.dtype})"


def _difference(a: Any, b: Any, name: str = "obs") -> str:
    """Two observations that differ, shown at their first differing key and entry."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{name} with keys {list(a)}, then {list(b)}"
        key = next((k for k in a if not _same(a[k], b[k])), None)
        if key is not None:
            return _difference(a[key], b[key], f"{name}[{key!r}]")
    try:
        x, y = np.asarray(a), np.asarray(b)
        if x.dtype.kind not in "biuf" or y.dtype.kind not in "biuf":
            raise TypeError
    except Exception:
        return f"first {_describe(a)}, then {_describe(b)}"
    head = "" if name == "obs" else f"{name}: "
    if x.shape != y.shape:
        return f"{head}first shape {x.shape}, then {y.shape}"
    differ = (x != y) & ~(np.isnan(x) & np.isnan(y)) if x.dtype.kind == "f" and y.dtype.kind == "f" else x != y
    i = int(np.flatnonzero(np.asarray(differ).reshape(-1))[0]) if np.any(differ) else 0
    at = f"{name}{_index(i, x.shape)}"
    return f"{head}first {_fmt_array(x)}, then {_fmt_array(y)} ({at} = {_scalar(x.reshape(-1)[i])}, then {_scalar(y.reshape(-1)[i])})"


def _image_notes(space: gym.spaces.Space, name: str = "obs", declared: str = "observation_space", single: bool = True):
    """The notes of ``space`` and of a Dict's keys: spaces.image_note's words, named by key (``single``
    False: a Dict's key, whose float image --encoder cnn does not read, so the note says only uint8)."""
    if isinstance(space, gym.spaces.Dict):
        for k, sub in space.spaces.items():
            yield from _image_notes(sub, f"{name}[{k!r}]", f"{declared}[{k!r}]", single=False)
        return
    note = image_note(space, name, single=single)
    if note:
        yield f"{declared}: {note[0]}; {note[1]}"


# --- the checker ---------------------------------------------------------------------------

class _Checker:
    def __init__(self, target: str, steps: int, seed: int, env_kwargs: Optional[dict] = None):
        self.target, self.steps, self.seed = target, int(steps), int(seed)
        self.env_kwargs = dict(env_kwargs or {})
        self.ran: list[str] = []
        self.takes_options = True  # False once reset(seed=..., options=None) was refused (reported once)
        self.found: dict[str, list] = {}  # check -> [Violation, count of later occurrences]
        # the obs dtype violation's words before its advice, and whether that advice already is the range one
        self.dtype_head: Optional[str] = None
        self.dtype_wraps = False
        self.dtype_key: Optional[str] = None  # the obs part (obs, obs['key']) the head names
        self.notes: list[str] = []
        self.readings: list[str] = []
        self.spaces: Optional[str] = None  #: Violations.spaces
        #: the spread of each float64 obs part (obs, obs['pos']) over the observations read: float32 may lose it
        self.spreads: dict = {}

    def ok(self, check: str) -> None:
        if check not in self.ran:
            self.ran.append(check)

    def bad(self, check: str, expected: str, actual: str) -> None:
        self.ok(check)
        if check in self.found:
            self.found[check][1] += 1
        else:
            self.found[check] = [Violation(check, expected, actual), 0]

    def result(self) -> Violations:
        out = []
        for check in ALL_CHECKS + tuple(c for c in self.found if c not in ALL_CHECKS):
            if check in self.found:
                v, more = self.found[check]
                if more:
                    v.actual += f" (and {more} more time{'s' if more > 1 else ''})"
                out.append(v)
        ran = [c for c in ALL_CHECKS if c in self.ran]
        return Violations(out, ran, self.notes + self.spread_notes(), self.readings, self.spaces)

    def spread_notes(self) -> list:
        """The notes on float64 obs parts whose variation float32, which train casts them to, loses."""
        notes = []
        for name, (shape, spread) in self.spreads.items():
            note = float64_spread_note(name, shape, spread, f"over the {spread.n} observations check-env read")
            if note:
                notes.append(note)
        return notes

    # --- observations ---
    def check_obs(self, obs: Any, where: str) -> None:
        found: dict = {}
        self.inspect_obs(obs, self.obs_space, "obs", "observation_space", where, found)
        head, wraps = found.pop(_DTYPE_HEAD, None), found.pop(_DTYPE_WRAPS, None)
        if head is not None and "obs dtype" not in self.found:
            self.dtype_head, self.dtype_wraps, self.dtype_key = head
        for check, (expected, actual) in found.items():  # per check, the first key that broke it
            self.bad(check, expected, actual)
        if wraps is not None and self.dtype_head is not None and not self.dtype_wraps:
            # the astype advice of an earlier, in-range occurrence would wrap these values into ones the bounds may
            # well take (int32: 3e9 becomes -1294967296), and the env would pass check-env feeding garbage
            text, key = wraps
            violation = self.found["obs dtype"][0]
            if key == self.dtype_key:
                violation.actual = f"{self.dtype_head} ({text})"
            else:  # another key of a Dict: the head's own advice stands, this key's range clause goes beside it
                violation.actual = f"{violation.actual}; {key} too: {text}"
            self.dtype_wraps = True

    def inspect_obs(self, x: Any, space: gym.spaces.Space, name: str, declared: str, where: str, found: dict) -> None:
        """Check ``x`` (``name``: obs, obs['vec']) against ``space`` (``declared``: observation_space,
        observation_space['vec']): the checks it passes are recorded, its violations go to ``found``
        (check -> (expected, actual), the first per check, so a (and N more times) count stays a
        count of observations). A Dict's keys are checked by name, each sub-Box as a plain Box."""
        def bad(check: str, expected: str, actual: str) -> None:
            found.setdefault(check, (expected, actual))

        who = "" if name == "obs" else f"{name} "  # a plain Box's words stay short: "shape (4,) at step 1"
        if isinstance(space, gym.spaces.Dict):
            keys = ", ".join(repr(k) for k in space.spaces)
            if not isinstance(x, dict):
                bad("obs keys", f"a dict with the keys {declared} declares ({keys})", f"{who}{_describe(x)} {where}")
                return
            missing = [k for k in space.spaces if k not in x]
            extra = [k for k in x if k not in space.spaces]
            if missing or extra:
                wrong = [f"missing key {k!r}" for k in missing] + [f"unexpected key {k!r}" for k in extra]
                fix = ([f"return {', '.join(f'{name}[{k!r}]' for k in missing)} too"] if missing else []) + (
                    [f"declare {', '.join(repr(k) for k in extra)} in {declared} or leave {'it' if len(extra) == 1 else 'them'} out"] if extra else [])
                bad("obs keys", f"the keys {declared} declares ({keys})", f"{who}{', '.join(wrong)} {where} ({'; '.join(fix)})")
            else:
                self.ok("obs keys")
            for k, sub in space.spaces.items():
                if k in x:
                    self.inspect_obs(x[k], sub, f"{name}[{k!r}]", f"{declared}[{k!r}]", where, found)
            return
        if not isinstance(space, gym.spaces.Box):
            nonfinite = _nonfinite(x, name)
            if nonfinite:
                at, value, n = nonfinite
                bad("obs finite", "finite observation values", f"{at} = {_scalar(value)} {where}" + (f" ({n} non-finite entries)" if n > 1 else ""))
                return
            self.ok("obs finite")
            try:
                inside = bool(space.contains(x))
            except Exception as e:
                inside, why = False, f"{declared}.contains({name}) raised {_exc(e)}"
            else:
                why = f"{who}{_describe(x)} is not in it"
            if inside:
                self.ok("obs in space")
            else:
                bad("obs in space", f"{name} in {declared} {space}", f"{why} {where}")
            return
        if isinstance(x, np.ndarray):
            arr = x
        elif isinstance(x, torch.Tensor):  # its own dtype, as train reads it (tensor_numpy), not cast to the space's
            arr, what = tensor_numpy(x)
            if arr is None:
                bad("obs dtype", f"{name}: a numpy array of dtype {space.dtype} ({declared}.dtype)", f"{who}{what} {where} ({TENSOR_FIX})")
                return
        else:  # a list: its own numbers, not cast to the space's dtype (floats cast to int would hide both faults)
            try:
                arr = np.asarray(x)
            except Exception:
                bad("obs shape", f"{name}: an array of shape {space.shape} dtype {space.dtype}", f"{who}{_describe(x)} {where}")
                return
        if arr.shape != space.shape:
            bad("obs shape", f"shape {space.shape} ({declared}.shape)", f"{who}shape {arr.shape} {where}{_transposed(arr.shape, space.shape, name, declared)}")
            return
        self.ok("obs shape")
        listed = not isinstance(x, (np.ndarray, torch.Tensor))
        # a list's Python numbers have a kind but no width: a list of floats is no float64 obs in a float32 Box
        casts = kind_casts(arr.dtype, space.dtype) if listed else np.can_cast(arr.dtype, space.dtype)
        if arr.dtype.kind not in "biuf" or not casts:
            tensor = isinstance(x, torch.Tensor)
            got, fixed = ((f"a torch tensor of dtype {x.dtype}", f"{name}.detach().cpu().numpy()") if tensor else
                          (f"dtype {arr.dtype}", f"np.asarray({name})" if listed else name))
            fault = int_range_fault(arr, space.dtype)
            head = f"{who}{got} {where}"
            if "obs dtype" not in found:
                found[_DTYPE_HEAD] = (head, fault is not None, name)
            bad("obs dtype", f"dtype {space.dtype} ({declared}.dtype)", f"{head} ({_dtype_fix(arr, space, fixed, fault)})")
            if fault is not None:
                found.setdefault(_DTYPE_WRAPS, (_dtype_fix(arr, space, fixed, fault, where), name))
            if arr.dtype.kind not in "biuf":
                return
            # numbers of another dtype: their values are still checked (NaN, range, bounds compare as numbers
            # whatever the dtype), so a dtype fault does not hide the faults a cast would turn into garbage
        else:
            self.ok("obs dtype")
        nonfinite = _nonfinite(arr, name)
        if nonfinite:
            at, value, n = nonfinite
            bad("obs finite", "finite observation values", f"{at} = {_scalar(value)} {where}" + (f" ({n} non-finite entries)" if n > 1 else ""))
            return
        self.ok("obs finite")
        if arr.dtype.kind == "f" and arr.dtype.itemsize > 4 and space.dtype != np.uint8:
            big = np.abs(arr) > F32_MAX
            if big.any():
                i = int(np.flatnonzero(big.reshape(-1))[0])
                bad("obs float32 range", "obs values within float32's range (+-3.4e38): Proxima trains in float32",
                    f"{name}{_index(i, arr.shape)} = {_scalar(arr.reshape(-1)[i])} {where}")
                return
            self.ok("obs float32 range")
            if arr.ndim == 0 or arr.shape == tuple(space.shape):  # the shape every observation of the part has
                self.spreads.setdefault(name, (arr.shape, Float64Spread(arr.dtype)))[1].add(arr[None])
        elif np.dtype(space.dtype).kind in "iu" and spread_dtype(space.dtype) and arr.dtype.kind in "iu":
            # an int64 counter or timestamp loses its +1 steps in float32 as a float64 one does
            self.spreads.setdefault(name, (arr.shape, Float64Spread(space.dtype)))[1].add(arr[None])
        low, high = np.broadcast_to(space.low, space.shape), np.broadcast_to(space.high, space.shape)
        out = (arr < low) | (arr > high)
        if out.any():
            i = int(np.flatnonzero(out.reshape(-1))[0])
            idx = _index(i, arr.shape)
            lo, hi, v = low.reshape(-1)[i], high.reshape(-1)[i], arr.reshape(-1)[i]
            side = f"below low{idx} = {_scalar(lo)}" if v < lo else f"above high{idx} = {_scalar(hi)}"
            n = int(out.sum())
            bad("obs bounds", f"{name}{idx} in [{_scalar(lo)}, {_scalar(hi)}] ({declared} low/high)",
                f"{name}{idx} = {_scalar(v)}, {side}, {where}" + (f" ({n} of {arr.size} entries out of bounds)" if n > 1 else ""))
            return
        self.ok("obs bounds")

    # --- calls into user code ---
    def do_reset(self, env: gym.Env, check: str, context: str = "", **kw) -> tuple[bool, Any]:
        """Call env.reset(**kw) and check what it returns; (False, None) when it raised. A seeded
        reset is called as Gymnasium's vector envs call it (so ``proxima train`` does):
        ``reset(seed=s, options=None)``; a reset that takes no ``options`` is a violation of its own,
        reported once, and is then called without it so the other checks still run."""
        call = f"reset({', '.join(f'{k}={v}' for k, v in kw.items())})"
        at = f"{call} {context}" if context else call
        try:
            try:
                out = env.reset(**kw, options=None) if "seed" in kw and self.takes_options else env.reset(**kw)
            except TypeError as e:
                missing = RESET_KWARG.search(str(e)) if "seed" in kw and self.takes_options else None
                if missing is None:
                    raise
                expected = (f"reset(seed={kw['seed']}, options=None) to work, as Gymnasium's vector envs (and so "
                            "proxima train) call it")
                fix = f"{_exc(e)} (declare the parameters: {RESET_FIX})"
                if missing.group(1) == "seed":  # gym 0.21's reset(self): nothing seeds it, so nothing after it is checked
                    self.bad("reset", expected, fix)
                    return False, None
                self.takes_options = False
                self.bad("reset", expected, fix)
                out = env.reset(**kw)
        except (Exception, SystemExit) as e:  # a sys.exit() in reset is its violation, not check-env's end
            expected = "reset() works again after an episode ends" if check == "autoreset" else f"{call} returns (obs, info)"
            self.bad(check, expected, f"{at} raised {_exc(e)}")
            return False, None
        self.ok(check)
        at = "at " + at
        obs, _, violation = reset_returns(out, self.obs_space, at)
        if violation is None:
            self.ok("reset returns")
        else:
            self.bad(violation.check, violation.expected, violation.actual)
        if obs is NO_OBS:  # neither (obs, info) nor an obs alone (a tuple of 3): no obs to check
            return True, None
        self.check_obs(obs, at)
        return True, obs

    def run(self) -> Violations:
        from . import atari

        game = atari.game_name(self.target)
        if game is not None:  # Atari: the wrapped ALE env --backend gymnasium trains on; EnvPool's is no gymnasium.Env
            # --env-kwargs: the ALE settings an Atari run takes (atari.atari_settings refuses others, exit 2),
            # checked first, as train does: a bad key is told before an install that would not fix it
            settings = atari.atari_settings(self.target, self.env_kwargs)
            if not atari.has_ale():
                also = " (EnvPool, installed, is not checked)" if atari.has_envpool() else ""
                raise EnvError(f"check-env '{self.target}' checks Gymnasium's ALE build of the game (--backend gymnasium's)"
                               f"{also} and needs ale-py and opencv; {atari.INSTALL}")
            env_fn = atari.ale_env_fn(game, None, training=True, settings=settings)
        elif ":" in self.target and (native := user_native_class(self.target)) is not None:  # EnvError: import failed (exit 2)
            return self.run_native(native)
        elif native_only(self.target):  # resolve_env_fn's line speaks of --backend, which check-env has not
            raise EnvError(f"'{self.target}' is a torch-native env with no Gymnasium version: check-env checks Gymnasium "
                           f"envs (a registered id or module:ClassName), so there is nothing to check; proxima train runs "
                           f"it with --backend native (or auto)")
        else:
            env_fn = resolve_env_fn(self.target, env_kwargs=self.env_kwargs)  # EnvError: the caller reports it (exit 2)
        if ":" not in self.target and game is None:  # build registered ids without Gymnasium's passive checker: we report precisely instead
            target, kwargs = self.target, self.env_kwargs

            def unchecked() -> gym.Env:
                return gym.make(target, disable_env_checker=True, **kwargs)

            env_fn = unchecked  # resolve_env_fn above still ran: an unknown id is its EnvError (exit 2)

        with quiet_warnings():
            try:
                env = env_fn()
            except gym.error.DependencyNotInstalled as e:
                extra = _extra_for(self.target)
                hint = install_hint(extra) if extra else _one_line(str(e))
                raise EnvError(f"env '{self.target}' needs an optional dependency: {hint}") from None
            except EnvError as e:
                self.bad("build", "a gymnasium.Env instance", _one_line(str(e)))
                return self.result()
            except (Exception, SystemExit) as e:
                line = unknown_kwarg_line(self.target, e, self.env_kwargs)
                if line is not None:  # the user's --env-kwargs, not the env, is what to fix
                    raise EnvError(line) from None
                self.bad("build", "the constructor returns a gymnasium.Env",
                         f"{self.target.partition(':')[2] or self.target}() raised {_exc(creator_error(e))}"
                         f"{missing_kwarg_hint(creator_error(e), self.target)}")
                return self.result()
            self.ok("build")
            try:
                self.check(env)
            finally:
                try:
                    env.close()
                except Exception:
                    pass
        return self.result()

    # --- a user's own torch-native env (module:Class of a BatchedEnv subclass) ---
    def run_native(self, cls: type) -> Violations:
        """Check a native env as train builds it (2 envs, on the CPU): what carries over from the Gymnasium
        checks (spaces, reset and step shapes and dtypes, finite values, reset determinism, autoreset);
        NativeEnv checks its hooks' dtypes and shapes once itself, and those lines are the violations."""
        n = 2
        try:
            env = build_user_native(cls, self.target, n, "cpu", self.seed, self.env_kwargs, set_by=CHECK_SET_BY)
        except EnvError as e:
            if str(e).startswith("--env-kwargs"):  # the user's flag, not the env, is what to fix (exit 2)
                raise
            self.bad("build", f"{cls.__name__}(num_envs, device, seed) builds a native env with supported spaces",
                     _one_line(str(e), SPACES_LIMIT))
            return self.result()
        for check in ("build", "spaces declared", "spaces supported"):
            self.ok(check)
        from ..nets import image_readings

        # a native env's images reach the same encoders as a Gymnasium env's: said alike
        self.readings = image_readings(obs_layout(env.single_observation_space, self.target), "auto")
        self.spaces = run_spaces_line(self.target, env.single_observation_space, env.single_action_space,
                                      native=getattr(env, "backend", None) == "native")
        try:
            self.check_native(env, n)
        finally:
            with contextlib.suppress(Exception):
                env.close()
        return self.result()

    def native_call(self, check: str, fn, *args, at: str = ""):
        """fn(*args), or None with the violation: an EnvError is NativeEnv's own line on its hooks' outputs.
        ``at``: where, after what raised (' at step 7', as the Gymnasium checks name a step's failure)."""
        try:
            return fn(*args)
        except EnvError as e:
            self.bad(check, "the contract of docs/native_envs.md", _one_line(str(e), SPACES_LIMIT))
        except (Exception, SystemExit) as e:
            self.bad(check, f"{fn.__name__}() does not raise", f"{_exc(e)}{at}")
        return None

    def native_obs(self, obs, n: int, where: str) -> bool:
        shape = (n, *obs_layout(self.obs_space, self.target).shape)
        if not isinstance(obs, torch.Tensor):
            self.bad("obs dtype", "a torch.Tensor", f"{type(obs).__name__} {where}")
            return False
        self.ok("obs shape")
        if tuple(obs.shape) != shape:
            self.bad("obs shape", f"{shape} (num_envs first)", f"{tuple(obs.shape)} {where}")
            return False
        self.ok("obs dtype")
        if obs.is_floating_point():
            self.ok("obs finite")
            bad = ~torch.isfinite(obs)
            if bool(bad.any()):
                i = tuple(int(k) for k in bad.nonzero()[0])
                self.bad("obs finite", "finite values", f"obs{list(i)} = {float(obs[i])} {where}")
                return False
        return self.native_bounds(obs, n, where)

    def native_bounds(self, obs: torch.Tensor, n: int, where: str) -> bool:
        """"obs bounds" as the Gymnasium checks word it, for a native env's Box: training's --debug-checks stops at
        the first observation outside the space, and the space is what an observation normalizer and a user read."""
        space = self.obs_space
        if not isinstance(space, gym.spaces.Box):
            return True
        low = np.broadcast_to(space.low, space.shape).reshape(-1).astype(np.float64)
        high = np.broadcast_to(space.high, space.shape).reshape(-1).astype(np.float64)
        values = obs.detach().reshape(n, -1).to(torch.float64).cpu().numpy()
        if values.shape[1] != low.size:
            return True
        self.ok("obs bounds")
        out = (values < low) | (values > high)
        if not out.any():
            return True
        env, j = (int(k) for k in np.argwhere(out)[0])
        idx = _index(j, tuple(space.shape))
        v, lo, hi = values[env, j], low[j], high[j]
        side = f"below low{idx} = {_scalar(lo)}" if v < lo else f"above high{idx} = {_scalar(hi)}"
        count = int(out.sum())
        self.bad("obs bounds", f"obs{idx} in [{_scalar(lo)}, {_scalar(hi)}] (single_observation_space low/high)",
                 f"obs{idx} = {_scalar(v)} of env {env}, {side}, {where}"
                 + (f" ({count} of {out.size} entries out of bounds)" if count > 1 else ""))
        return False

    def check_member_streams(self, env, n: int, act_space) -> None:
        """With member streams on (--seeds), draws go to the members' generators, never self.generator: an
        env whose reset or autoreset still moves it draws directly and gives every member one shared stream."""
        if not getattr(env, "supports_member_streams", False) or not hasattr(env, "use_member_streams"):
            return
        if not env.use_member_streams([self.seed + k for k in range(n)]):
            return
        before = env.generator.get_state()
        action = native_actions(act_space, n)
        if self.native_call("member streams", env.reset) is None or self.native_call("member streams", env.step, action) is None:
            return
        self.ok("member streams")
        if not torch.equal(before, env.generator.get_state()):
            self.bad("member streams", "with --seeds' member streams on, no draw from self.generator (draw through "
                     "self._uniform, or set supports_member_streams = False)",
                     "reset() or step() drew from self.generator, so --seeds members would share one stream")

    def check_resume(self, env, n: int, act_space) -> None:
        """A resume as train's makes it (train_state.capture and restore): env.state_dict() and the global RNG
        states through torch.save and torch.load(weights_only=True), RESUME_STEPS steps of fixed actions, then
        a fresh env built and reset as the resumed run's trainer builds it, the RNG states and the env state
        loaded, the same actions replayed: every obs, reward, terminated and truncated must be the same. State
        kept outside self.state (an attribute a step changes) passes every other check, and a resumed run
        silently steps through other episodes than the uninterrupted one."""
        if not getattr(env, "can_save_state", False):  # its resume restarts episodes (told): nothing promised
            return
        import io

        from .. import checkpoint as ckpt

        def stored(obj):  # what a checkpoint file gives back
            buffer = io.BytesIO()
            torch.save(obj, buffer)
            buffer.seek(0)
            return torch.load(buffer, weights_only=True)

        expected = (f"the same obs, reward, terminated and truncated when {RESUME_STEPS} steps are replayed on a new env "
                    "given the state_dict() saved before them, as a resumed run replays them")
        try:
            saved, rng = stored(env.state_dict()), stored(ckpt.rng_state())
        except (Exception, SystemExit) as e:  # a checkpoint could not save it either
            self.bad("state resume", expected, f"state_dict() cannot be saved in a checkpoint: {_exc(e)}")
            return
        actions = [native_actions(act_space, n) for _ in range(RESUME_STEPS)]
        first = []
        for action in actions:
            out = self.native_call("state resume", env.step, action.clone())
            if out is None:
                return
            first.append(out[:4])
        try:
            fresh = build_user_native(type(env), self.target, n, "cpu", self.seed, self.env_kwargs, set_by=CHECK_SET_BY)
            fresh.reset(seed=self.seed)  # the resumed trainer's first reset, before the checkpoint is loaded
            ckpt.set_rng_state(rng)
            fresh.load_state_dict(saved)
        except (Exception, SystemExit) as e:
            self.bad("state resume", expected, f"a new env did not take the saved state_dict(): {_exc(e)}")
            return
        self.ok("state resume")
        try:
            for t, (action, before) in enumerate(zip(actions, first), 1):
                out = self.native_call("state resume", fresh.step, action.clone())
                if out is None:
                    return
                for name, a, b in zip(("obs", "reward", "terminated", "truncated"), before, out[:4]):
                    if not _same(a, b):
                        self.bad("state resume", expected,
                                 f"{type(env).__name__}'s {name} at step {t} of the {RESUME_STEPS} replayed after "
                                 f"load_state_dict() differs from the first run's ({_difference(a, b, name)}): a resumed run "
                                 "would diverge from the uninterrupted one; keep everything "
                                 "that changes between steps in self.state (a dict of (num_envs, ...) tensors, saved with "
                                 "self.generator), not in other attributes (docs/native_envs.md)")
                        return
        finally:
            with contextlib.suppress(Exception):
                fresh.close()

    def check_native(self, env, n: int) -> None:
        self.obs_space, act_space = env.single_observation_space, env.single_action_space
        rng = _global_rng()
        obs = self.native_call("reset", env.reset, self.seed)
        if obs is None or not self.native_obs(obs, n, "at reset"):
            return
        self.ok("reset")
        again = self.native_call("reset", env.reset, self.seed)
        if again is None:
            return
        self.ok("reset determinism")
        self.ok("global rng")
        drew = _global_rng_moved(rng)
        if not torch.equal(obs, again):
            self.bad("reset determinism", "reset(seed) twice gives the same obs (draw through self._uniform, self._normal, "
                     "self._randint or self.generator)", f"different obs{'; ' + GLOBAL_RNG_LINE.format(call='reset()') if drew else ''}")
        elif drew:
            self.bad("global rng", "reset() and step() leave torch's global RNG alone", GLOBAL_RNG_LINE.format(call="reset()"))
        elif n > 1 and bool((obs == obs[:1]).all()):  # legal for a deterministic start, but usually an unseeded draw
            self.notes.append("every row of reset() gives the same obs: if the start states should be random, draw them "
                              "through self._uniform in _sample_initial_state")
        if self.steps <= 0:  # said, as for a Gymnasium env: an OK after no step is not the whole check passing
            self.notes.append("--steps 0: the env was built and reset, never stepped; the checks of step() did not run")
            return
        act_space.seed(self.seed)
        ended = False
        rng = _global_rng()
        for t in range(1, self.steps + 1):
            action = native_actions(act_space, n)
            out = self.native_call("step", env.step, action, at=f" at step {t}")
            if out is None:
                return
            self.ok("step")
            self.ok("step returns")
            if not (isinstance(out, (tuple, list)) and len(out) == 5):
                self.bad("step returns", "5 values (obs, reward, terminated, truncated, info)", f"{_describe(out)} at step {t}")
                return
            obs, reward, terminated, truncated, info = out
            if not self.native_obs(obs, n, f"at step {t}"):
                return
            for check, x, dtype in (("reward type", reward, torch.float32), ("terminated type", terminated, torch.bool),
                                    ("truncated type", truncated, torch.bool)):
                self.ok(check)
                if not isinstance(x, torch.Tensor) or x.dtype != dtype or tuple(x.shape) != (n,):
                    got = (f"{x.dtype} {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__)
                    self.bad(check, f"a {dtype} tensor of shape ({n},)", f"{got} at step {t}")
                    return
            self.ok("reward finite")
            if not bool(torch.isfinite(reward).all()):
                self.bad("reward finite", "finite rewards", f"{reward.tolist()} at step {t}")
                return
            self.ok("info type")
            keys = ("final_obs", "episode_return", "episode_length")
            if not isinstance(info, dict) or any(k not in info for k in keys):
                missing = ", ".join(k for k in keys if k not in info) if isinstance(info, dict) else ""
                have = f"a dict without {missing}" if missing else f"a {type(info).__name__}"
                self.bad("info type", f"a dict with {', '.join(keys)} (NativeEnv.step's autoreset)",
                         f"{have} at step {t}")
                return
            done = terminated | truncated
            if bool(done.any()):
                ended = True
                self.ok("autoreset")
                lengths = info["episode_length"][done]
                if not bool((lengths > 0).all()) or tuple(info["final_obs"].shape) != tuple(obs.shape):
                    self.bad("autoreset", "an ended episode's length >= 1 and final_obs shaped as obs",
                             f"lengths {lengths.tolist()}, final_obs {tuple(info['final_obs'].shape)} at step {t}")
                    return
        if not drew and _global_rng_moved(rng):  # a reset's draw is told above (the autoreset draws it again)
            self.bad("global rng", "reset() and step() leave torch's global RNG alone", GLOBAL_RNG_LINE.format(call="step()"))
        self.check_resume(env, n, act_space)
        self.check_member_streams(env, n, act_space)
        if self.steps and not ended:
            self.notes.append(no_episode_ended_note(self.steps, getattr(env, "max_episode_steps", None)))

    def check(self, env: gym.Env) -> None:
        try:
            # train's line (gym_adapter._build): a property that raises, or a wrapper chain deeper than the stack
            obs_space, act_space = (_build(lambda: getattr(env, name, None), self.target, self.env_kwargs, reading=name)
                                    for name in ("observation_space", "action_space"))
        except EnvError as e:
            self.bad("spaces declared", "observation_space and action_space read without raising", str(e))
            return
        wrong = [
            f"{name} " + ("missing (set it in __init__)" if space is None else f"is {_describe(space)}")
            for name, space in (("observation_space", obs_space), ("action_space", act_space))
            if not isinstance(space, gym.spaces.Space)
        ]
        if wrong:
            self.bad("spaces declared", "observation_space and action_space: gymnasium.spaces.Space instances", ", ".join(wrong))
            return
        self.ok("spaces declared")
        self.obs_space, self.act_space = obs_space, act_space
        self.notes = list(_image_notes(obs_space))
        scale = action_scale_note(proxima_action_space(act_space, env), self.target)  # a ClipAction's: the Box it clips to
        if scale:
            self.notes.append(scale)
        wrapped = normalize_wrappers(env)
        if wrapped:
            self.notes.append(normalize_wrappers_note(self.target, wrapped))
            names = " and ".join(f"gymnasium.wrappers.{n}" for n in wrapped)
            self.notes.append(f"reset and step determinism were checked with the running statistics of {names} frozen "
                              "(update_running_mean = False): their updates alone change every call's output, which is "
                              "no fault of the env")
        try:
            check_spaces(self.target, obs_space, act_space)
            self.ok("spaces supported")
            from ..nets import image_readings  # nets imports torch's nn: imported once the spaces are known

            self.readings = image_readings(obs_layout(obs_space, self.target), "auto")
            self.spaces = run_spaces_line(self.target, obs_space, proxima_action_space(act_space, env))
        except EnvError as e:
            msg = str(e)
            prefix = f"env '{self.target}': "
            self.bad("spaces supported", "observation Box or Dict of Box; action Discrete, MultiDiscrete, MultiBinary or Box",
                     msg[len(prefix):] if msg.startswith(prefix) else msg)

        # reset(seed) and its determinism
        with frozen_normalizers(env) as unfrozen:
            ok, first = self.do_reset(env, "reset", seed=self.seed)
            if not ok:
                return
            try:
                first = copy.deepcopy(first)  # an env may hand back (and later overwrite) its own buffer
            except Exception:
                pass
            ok, again = self.do_reset(env, "reset", "(second call)", seed=self.seed)
            if not ok:
                return
        if unfrozen:
            self.notes.append(_unfrozen_note(unfrozen))
        elif _same(first, again):
            self.ok("reset determinism")
        else:
            self.bad("reset determinism", f"reset(seed={self.seed}) twice gives the same obs (draw randomness from self.np_random after super().reset(seed=seed))",
                     _difference(first, again))
        if self.steps <= 0:  # said, so that an OK after no step is not read as the whole check passing
            self.notes.append("--steps 0: the env was built and reset, never stepped; the checks of step() did not run")
            return

        try:
            act_space.seed(self.seed)
        except Exception:
            pass
        ended = 0
        episode, ep_step = 1, 0
        for t in range(1, self.steps + 1):
            ep_step += 1
            where = f"at step {t}" + (f" (step {ep_step} of episode {episode})" if episode > 1 else "")
            done = self.do_step(env, where)
            if done is None:
                return
            if done:
                ended += 1
                ok, _ = self.do_reset(env, "autoreset", f"after the episode ended at step {t}")
                if not ok:
                    return
                episode, ep_step = episode + 1, 0
        if ended == 0:  # no episode ended within the budget: still check that reset() mid-episode and a step work
            ok, _ = self.do_reset(env, "reset", f"after {self.steps} steps")  # not autoreset: no episode ended
            if not ok or self.do_step(env, "at the first step after reset()") is None:
                return
            self.notes.append(no_episode_ended_note(self.steps, time_limit_of(env), gymnasium=True))
        if "reset determinism" not in self.found:  # a reset that differs: the same cause and fix, reported once
            with frozen_normalizers(env) as unfrozen:
                if not unfrozen:
                    self.check_step_determinism(env)

    def do_step(self, env: gym.Env, where: str) -> Optional[bool]:
        """One random step; returns whether the episode ended, or None when checking must stop."""
        try:
            action = self.act_space.sample()
        except Exception as e:
            self.bad("step", "action_space.sample() returns an action", f"raised {_exc(e)}")
            return None
        before = copy.deepcopy(action)
        try:
            out = env.step(action)
        except (Exception, SystemExit) as e:  # a sys.exit() in step is its violation, not check-env's end
            shown = _fmt_array(action) if isinstance(action, (np.ndarray, np.generic)) else repr(action)
            self.bad("step", "step(action) returns without raising", f"step({shown}) {where} raised {_exc(e)}")
            return None
        self.ok("step")
        if _same(before, action):
            self.ok("action not mutated")
        else:
            self.bad("action not mutated", f"the action passed to step() unchanged ({_fmt_array(before)}): it is the caller's",
                     f"step() changed it in place to {_fmt_array(action)} {where}; copy it first (np.clip(a, lo, hi), not "
                     "a.clip(..., out=a)): Proxima's training steps each env with a copy, its rollouts are safe, but a "
                     "caller's own array would change")
        violation = step_returns_violation(out, where)
        if violation is not None:
            self.bad(violation.check, violation.expected, violation.actual)
            return None
        self.ok("step returns")
        obs, reward, terminated, truncated, info = out
        self.check_obs(obs, where)
        real = isinstance(reward, (numbers.Real, np.integer, np.floating)) and not isinstance(reward, (bool, np.bool_))
        got = f"{_describe(reward)} {where}"
        if isinstance(reward, np.ndarray):
            real = reward.ndim == 0 and reward.dtype.kind in "iuf"
            if reward.ndim or reward.dtype == np.bool_:
                got += " (return float(reward))"
        elif isinstance(reward, (bool, np.bool_)):
            got += " (return float(reward))"
        if real:
            self.ok("reward type")
            if beyond_float32(reward):  # finite (10**400 too), but inf in Proxima's float32 rollouts
                self.bad("reward finite", f"a finite reward within float32's range (+-{F32_MAX:.3g}): Proxima trains in float32",
                         f"reward = {number_text(reward)} {where}")
            elif np.isfinite(float(reward)):
                self.ok("reward finite")
            else:
                self.bad("reward finite", "a finite reward", f"reward = {float(reward):g} {where}")
        else:
            self.bad("reward type", f"reward: {REWARD_RULE}, which proxima train takes", got)
        flags = []
        for name, flag in (("terminated", terminated), ("truncated", truncated)):
            if is_flag(flag):
                self.ok(f"{name} type")
                flags.append(bool(flag))
            else:
                self.bad(f"{name} type", f"{name}: {FLAG_RULE}, which proxima train takes", f"{_describe(flag)} {where}")
                try:
                    flags.append(bool(flag))
                except Exception:
                    flags.append(False)
        if isinstance(info, dict):
            self.ok("info type")
            if any(flags) and "is_success" in info:
                self.note_success(info["is_success"], where)
        else:
            self.bad("info type", "info: a dict", f"{_describe(info)} {where}")
        return any(flags)

    def note_success(self, value, where: str) -> None:
        """A note (once) for an episode's last info["is_success"] that training reads as no success rate
        (gym_adapter.success_flag: a bool or a number in [0, 1]), as train notes it: legal, but left out."""
        flag = success_flag(value)
        if flag is None or not np.isnan(flag) or getattr(self, "_success_noted", False):
            return
        self._success_noted = True
        self.notes.append(f"info['is_success'] = {unusable_success(value)} {where} is no bool or number in [0, 1]: "
                          "training leaves such values out of charts/success_rate (return a bool, or a number in [0, 1])")

    def check_step_determinism(self, env: gym.Env) -> None:
        """reset(seed=s) then step(a), twice, with ``a`` the seeded action space's first sample (the checks
        of Gymnasium's check_env): the same obs, reward, terminated and truncated, and self.np_random in
        the same state after both resets. That state tells a reset that does not re-seed self.np_random
        from one whose steps happen to draw alike (a slip of probability 0.3 agrees 58% of the time).
        Run after the random steps, so that each of their faults is reported where it happens (an env
        that breaks at its first step of all is named at step 1, not as a difference here); quiet: a
        reset or step that raises here, or returns no 5 values, leaves this check out. An env registered
        ``nondeterministic=True`` (real hardware, a remote simulator) is left out too, as Gymnasium's check does."""
        spec = getattr(env, "spec", None) or getattr(getattr(env, "unwrapped", None), "spec", None)
        if getattr(spec, "nondeterministic", False) is True:
            return
        try:
            self.act_space.seed(self.seed)
            action = self.act_space.sample()
        except Exception:
            return
        runs = []
        for _ in range(2):
            try:
                if self.takes_options:
                    env.reset(seed=self.seed, options=None)
                else:
                    env.reset(seed=self.seed)
            except (Exception, SystemExit):
                return
            rng = _rng_state(env)
            out = _quiet_step(env, action)
            if out is None:
                return
            runs.append((out, rng))
        (first, rng), (again, rng_again) = runs
        names = ("obs", "reward", "terminated", "truncated")
        differ = next((i for i in range(4) if not _same(first[i], again[i])), None)
        if differ is None and _same(rng, rng_again):
            self.ok("step determinism")
            return
        shown = _fmt_array(action) if isinstance(action, (np.ndarray, np.generic)) else _one_line(repr(action), 60)
        if differ is None:
            what = (f"self.np_random in another state after the second reset(seed={self.seed}) than after the first: "
                    f"step({shown}) drew from it in between and reset() did not re-seed it")
        else:
            if names[differ] == "obs":
                what = _difference(first[0], again[0])
                what = what if what.startswith("obs") else f"obs {what}"
            else:
                what = f"{names[differ]} {_describe(first[differ])}, then {_describe(again[differ])}"
            what += f" at the first step after each reset(seed={self.seed})"
        self.bad("step determinism",
                 f"reset(seed={self.seed}) then step({shown}), twice, gives the same obs, reward, terminated and truncated "
                 f"(call super().reset(seed=seed) in reset() and draw randomness from self.np_random)", what)


@contextlib.contextmanager
def frozen_normalizers(env: gym.Env):
    """Freeze the running statistics of Gymnasium's normalization wrappers (gym_adapter.NORMALIZE_WRAPPERS)
    in ``env``'s stack for the determinism checks, and restore them after: each reset or step updates
    them, so two calls with the same seed differ by the wrapper alone. Yields the names of those that
    cannot be frozen (a Gymnasium before 1.0 has no update_running_mean), whose checks are left out."""
    frozen, unfrozen = [], []
    layer = env
    while isinstance(layer, gym.Wrapper):
        for name in NORMALIZE_WRAPPERS:
            cls = getattr(gym.wrappers, name, None)
            if cls is None or not isinstance(layer, cls):
                continue
            if hasattr(layer, "update_running_mean"):
                frozen.append((layer, layer.update_running_mean))
                layer.update_running_mean = False
            elif name not in unfrozen:
                unfrozen.append(name)
        layer = layer.env
    try:
        yield unfrozen
    finally:
        for layer, setting in frozen:
            layer.update_running_mean = setting


def _unfrozen_note(names: list) -> str:
    wrappers = " and ".join(f"gymnasium.wrappers.{n}" for n in names)
    return (f"reset and step determinism were not checked: {wrappers} updates its running statistics at every call "
            "and this Gymnasium cannot freeze them (update_running_mean is Gymnasium 1.0's)")


#: what :func:`reset_returns` gives as the obs of a return that holds none it can tell (a tuple of 3)
NO_OBS = object()


#: a native env that drew from torch's global RNG (torch.rand/randn/randint without generator=)
GLOBAL_RNG_LINE = ("{call} drew from torch's global RNG (torch.rand, randn or randint without generator=), which "
                   "reset(seed) does not seed and every --seeds member shares, so members do not replay their single "
                   "runs; draw through self._uniform, self._normal or self._randint (docs/native_envs.md)")


def _global_rng() -> list:
    """torch's global RNG states: the CPU's, and each GPU's where CUDA is already in use (reading them does
    not start it)."""
    states = [torch.get_rng_state()]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states += list(torch.cuda.get_rng_state_all())
    return states


def _global_rng_moved(before: list) -> bool:
    return any(not torch.equal(a, b) for a, b in zip(before, _global_rng()))


def native_actions(space: gym.spaces.Space, n: int) -> torch.Tensor:
    """``n`` samples of ``space`` in the layout training steps a native env with (ppo.collect_rollout:
    the agent's actions, clipped and offset by the space's start), which ``proxima eval`` and
    Policy.act give it too: a Discrete's (n,) int64, a MultiDiscrete's and a MultiBinary's flat (n, K)
    int64, a Box's flat (n, prod(shape)) float32, whatever the space's own shape and dtype. The
    space's own samples ((n, 2, 2) for MultiDiscrete([[2, 3], [4, 2]]), float64 for a float64 Box)
    passed an env written for them that then failed in training, and failed one written for this."""
    batch = np.stack([np.asarray(space.sample()) for _ in range(n)])
    if isinstance(space, gym.spaces.Discrete):
        return torch.as_tensor(batch.reshape(n), dtype=torch.int64)
    dtype = torch.float32 if isinstance(space, gym.spaces.Box) else torch.int64
    return torch.as_tensor(batch.reshape(n, -1)).to(dtype)


def _reads_as_obs(out: Any, space: gym.spaces.Space) -> bool:
    """Whether ``out`` (a tuple or list that reset returned) is itself an observation of ``space``:
    numbers of a Box's shape (a 2-vector returned alone as [x, y]), or what another space contains."""
    try:
        if isinstance(space, gym.spaces.Box):
            arr = np.asarray(out)
            return arr.dtype.kind in "biuf" and arr.shape == space.shape
        return bool(space.contains(out))
    except Exception:
        return False


def reset_returns(out: Any, space: gym.spaces.Space, where: str) -> tuple[Any, Any, Optional[Violation]]:
    """(obs, info, the "reset returns" violation or None) of what reset() returned ``where``; the rule
    check-env and the trainer (gym_adapter.EnvCalls) both apply, and the words of both.

    A tuple or a list of 2 is (obs, info) when info is a dict or when it is not itself an observation
    of ``space`` (then info is the violation); an obs returned alone (the old gym API: anything but a
    tuple or list, a dict of a Dict space among them, or a tuple or list that is an observation, [x, y]
    of a Box (2,)) is the violation and comes back as the obs, to be checked as one; any other tuple
    or list (3 values) is the violation with the obs :data:`NO_OBS`."""
    pair = isinstance(out, (tuple, list)) and len(out) == 2
    if pair and (isinstance(out[1], dict) or not _reads_as_obs(out, space)):
        obs, info = out
        if isinstance(info, dict):
            return obs, info, None
        return obs, info, Violation("reset returns", "reset returns (obs, info) with info a dict", f"info is {_describe(info)} {where}")
    alone = not isinstance(out, (tuple, list)) or _reads_as_obs(out, space)
    hint = " (the old gym API returned obs alone; return obs, {})" if alone else ""
    return (out if alone else NO_OBS), None, Violation("reset returns", "reset returns a tuple (obs, info)", f"{_describe(out)} {where}{hint}")


def _rng_state(env: gym.Env) -> Optional[dict]:
    """A copy of the state of the env's self.np_random (env.unwrapped's: Gymnasium's wrappers hand it
    on); None when it has none to read."""
    try:
        return copy.deepcopy(env.unwrapped.np_random.bit_generator.state)
    except Exception:
        return None


def _quiet_step(env: gym.Env, action: Any) -> Optional[tuple]:
    """A copy of (obs, reward, terminated, truncated) of env.step(a copy of ``action``), or None when it
    raised or returned something else than 5 values."""
    try:
        out = env.step(copy.deepcopy(action))
        if isinstance(out, (tuple, list)) and len(out) == 5:
            return copy.deepcopy(tuple(out[:4]))
    except (Exception, SystemExit):
        pass
    return None


def step_returns_violation(out: Any, where: str) -> Optional[Violation]:
    """The "step returns" violation of what step() returned ``where`` ('at step 3'), None for 5 values
    (a tuple, or a list as Gymnasium's vector envs and so the trainer take it); also the words of the
    trainer's line for it (gym_adapter.EnvCalls)."""
    if isinstance(out, (tuple, list)) and len(out) == 5:
        return None
    n = len(out) if isinstance(out, (tuple, list)) else None
    got = f"{n} values {where}" if n is not None else f"{_describe(out)} {where}"
    if n == 4 and is_flag(out[2]) and is_flag(out[3]) and not isinstance(out[3], dict):
        # (obs, reward, terminated, truncated): both flags are there, what is missing is the info dict
        got += ": info is missing: return obs, reward, terminated, truncated, info ({})"
    elif n == 4:
        got += ": the old gym API (obs, reward, done, info); return terminated and truncated instead of done"
    return Violation("step returns", "5 values (obs, reward, terminated, truncated, info)", got)


def no_episode_ended_note(steps: int, limit, gymnasium: bool = False) -> str:
    """The note for an env none of whose episodes ended in check-env's ``steps``: autoreset went unchecked,
    and an env that never ends one runs train's final evaluation into its step cap. ``limit``: the env's
    max_episode_steps (a Gymnasium env's TimeLimit), None where it has none."""
    # more steps reach a time limit beyond them; with none, only the env's own termination can end one
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > steps:
        advice = f"give --steps above {limit}"
    elif limit:
        advice = "give more --steps"
    elif gymnasium:
        advice = ("no time limit: give more --steps if its episodes end later, else wrap it in gymnasium.wrappers."
                  "TimeLimit(env, max_episode_steps=N) in a module:function factory (or gymnasium.register it with "
                  "max_episode_steps), or check that terminated can become true "
                  f"(an episode that never ends plays train's final evaluation to its {MAX_EVAL_STEPS:,}-step cap)")
    else:
        advice = "no time limit: set max_episode_steps, or check that terminated can become true"
    return f"no episode ended in {steps} steps (max_episode_steps = {limit!r}): autoreset was not checked; {advice}"


def check_env(target: str, steps: int = CHECK_STEPS, seed: int = 0, env_kwargs: Optional[dict] = None) -> list[Violation]:
    """Check ``target`` (a Gymnasium id or ``module:ClassName``, built with ``env_kwargs``) and
    return its violations.

    Raises :class:`EnvError` only when the target cannot be resolved (unknown id, missing module
    or attribute, missing optional dependency); everything the env itself does wrong, exceptions
    included, comes back as a :class:`Violation`. The returned list's ``checks_run`` names the
    checks that were exercised.
    """
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(seed_error(seed))
    return _Checker(target, steps, seed, env_kwargs).run()


def format_violations(target: str, violations: list[Violation], checks: Optional[int] = None) -> str:
    """One line per violation (check: expected ...; got ...), one per note, one per image reading
    (nets.image_readings) where a check failed, the ``spaces: ...`` line a run of the env prints (where its
    spaces were read: Violations.spaces), then an OK (the readings appended) or a count line."""
    if checks is None:
        ran = getattr(violations, "checks_run", None)
        checks = len(ran) if ran is not None else len(ALL_CHECKS)
    notes = [f"NOTE {_one_line(n, 600)}" for n in getattr(violations, "notes", ())]
    spaces = [violations.spaces] if getattr(violations, "spaces", None) else []
    if not violations:  # and how train reads an image, which nothing else says (nets.image_readings)
        readings = "".join(f"; {r}" for r in getattr(violations, "readings", ()))
        return "\n".join(notes + spaces + [f"OK: {target} passes {checks} checks{readings}"])
    # how train would read each image, on failure too: while fixing an env is when its layout matters
    lines = [f"FAIL {v}" for v in violations] + notes + list(getattr(violations, "readings", ())) + spaces
    lines.append(f"{len(violations)} violation(s) in {target}")
    return "\n".join(lines)


# --- CLI (the parser: proxima.check_env_cli.register, imported above) ---------------------------

def seed_error(seed: int) -> str:
    """Why --seed ``seed`` is refused: proxima train's words (config.validate), so that check-env takes
    the seeds a run takes, and a seed numpy refuses is not blamed on the env's reset()."""
    return f"--seed {seed}: must be an integer from 0 to {MAX_SEED:,} (numpy seeds are 32-bit; ranks and evaluation add offsets)"


def run(args: argparse.Namespace) -> int:
    """Print the report; 0 when clean, 1 on violations, 2 when the target cannot be resolved."""
    steps = getattr(args, "steps", CHECK_STEPS)
    if steps < 0:
        print(f"proxima check-env: error: --steps must be >= 0, got {steps}", file=sys.stderr)
        return 2
    if steps > MAX_CHECK_STEPS:  # a typo of 1e23 steps ran until killed, printing nothing
        print(f"proxima check-env: error: --steps {steps}: must be at most {MAX_CHECK_STEPS:,} (random steps of the check)",
              file=sys.stderr)
        return 2
    seed = getattr(args, "seed", 0)
    if not 0 <= seed <= MAX_SEED:
        print(f"proxima check-env: error: {seed_error(seed)}", file=sys.stderr)
        return 2
    from ..config import ConfigError, coerce

    try:
        kwargs = coerce("env_kwargs", getattr(args, "env_kwargs", None), "flag")  # worded as train's --env-kwargs
        violations = check_env(args.target, steps=steps, seed=seed, env_kwargs=kwargs)
    except (EnvError, ConfigError) as e:
        print(f"proxima check-env: error: {printable(_one_line(str(e), 500))}", file=sys.stderr)
        return 2
    print(format_violations(args.target, violations))
    return 1 if violations else 0
