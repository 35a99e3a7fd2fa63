"""``proxima check-env TARGET``: check a user's env against the Gymnasium API and Proxima's contract.

TARGET is a registered Gymnasium id (``CartPole-v1``) or ``module:ClassName`` importable from the
current directory or PYTHONPATH. :func:`check_env` builds one env, resets it, runs ``steps`` random
actions (resetting whenever an episode ends) and returns a list of :class:`Violation`, each with
what was expected and what the env actually did. Exceptions raised by user code never escape: they
become a violation naming the call (``reset``/``step``) and the exception.

The checks (names as they appear in the report):

  build              the constructor returns a gymnasium.Env without raising
  spaces declared    observation_space and action_space are gymnasium Spaces
  spaces supported   observation Box (images: uint8 HWC or CHW) or Dict of Box; action Discrete,
                     MultiDiscrete or Box with finite bounds
  reset              reset(seed=...) does not raise
  reset returns      reset returns (obs, info) with info a dict
  reset determinism  two reset(seed=s) give the same obs
  obs shape          obs.shape == observation_space.shape
  obs dtype          obs dtype casts safely to observation_space.dtype (see below)
  obs finite         no NaN/inf in obs (reported with the step index)
  obs float32 range  a float64 obs stays within float32's range (Proxima casts it to float32)
  obs bounds         observation_space.low <= obs <= observation_space.high
  obs in space       observation_space.contains(obs), for spaces that are not a Box
  step               step(action) does not raise
  step returns       step returns 5 values (obs, reward, terminated, truncated, info)
  reward type        reward is a real scalar (int/float/numpy scalar), not an array or a bool
  reward finite      reward is not NaN/inf
  terminated type    terminated is a bool (Python or numpy)
  truncated type     truncated is a bool
  info type          info is a dict
  action not mutated step does not modify the action array it was given in place (Proxima passes
                     views of its rollout buffers: an in-place edit corrupts the stored actions)
  autoreset          after an episode ends, reset() works and a new episode can be stepped

Observation dtype rule: an obs passes when its dtype casts *safely* to the declared dtype
(``np.can_cast(obs.dtype, space.dtype)``), the rule of Gymnasium's ``Box.contains``. So a float32
obs in a float64 Box passes, but a float64 obs in a float32 Box (the common forgotten
``.astype(np.float32)``) *is flagged*: the obs is not in the declared space, Gymnasium's own checker
rejects it, and the fix is one line. Proxima would cast it to float32 and train anyway.

Each kind of violation is reported once, at its first occurrence, with how many more steps showed it.
"""

from __future__ import annotations

import argparse
import copy
import numbers
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Optional

import gymnasium as gym
import numpy as np

from .base import EnvError
from .gym_adapter import _extra_for, check_spaces, resolve_env_fn

#: every check, in report order (documented in the module docstring).
ALL_CHECKS = (
    "build", "spaces declared", "spaces supported", "reset", "reset returns", "reset determinism",
    "obs shape", "obs dtype", "obs finite", "obs float32 range", "obs bounds", "obs in space", "step", "step returns",
    "reward type", "reward finite", "terminated type", "truncated type", "info type",
    "action not mutated", "autoreset",
)


@dataclass
class Violation:
    """One broken rule: which check, what was expected, what the env actually did."""

    check: str
    expected: str
    actual: str

    def __str__(self) -> str:
        return f"{self.check}: expected {_one_line(self.expected)}; got {_one_line(self.actual)}"


class Violations(list):
    """A list of :class:`Violation` that also remembers which checks ran (``checks_run``)."""

    def __init__(self, items=(), checks_run=()):
        super().__init__(items)
        self.checks_run = list(checks_run)


# --- small helpers ---------------------------------------------------------------------------

def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _exc(e: BaseException) -> str:
    msg = _one_line(str(e), 200)
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


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


# --- the checker ---------------------------------------------------------------------------

class _Checker:
    def __init__(self, target: str, steps: int, seed: int, env_kwargs: Optional[dict] = None):
        self.target, self.steps, self.seed = target, int(steps), int(seed)
        self.env_kwargs = dict(env_kwargs or {})
        self.ran: list[str] = []
        self.found: dict[str, list] = {}  # check -> [Violation, count of later occurrences]

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
        return Violations(out, ran)

    # --- observations ---
    def check_obs(self, obs: Any, where: str) -> None:
        space = self.obs_space
        if not isinstance(space, gym.spaces.Box):
            bad = _nonfinite(obs)
            if bad:
                name, value, n = bad
                self.bad("obs finite", "finite observation values", f"{name} = {_scalar(value)} {where}" + (f" ({n} non-finite entries)" if n > 1 else ""))
                return
            self.ok("obs finite")
            try:
                inside = bool(space.contains(obs))
            except Exception as e:
                inside, why = False, f"observation_space.contains(obs) raised {_exc(e)}"
            else:
                why = f"{_describe(obs)} is not in it"
            if inside:
                self.ok("obs in space")
            else:
                self.bad("obs in space", f"obs in observation_space {space}", f"{why} {where}")
            return
        if isinstance(obs, np.ndarray):
            arr = obs
        else:
            try:
                arr = np.asarray(obs, dtype=space.dtype)
            except Exception:
                self.bad("obs shape", f"an array of shape {space.shape} dtype {space.dtype}", f"{_describe(obs)} {where}")
                return
        if arr.shape != space.shape:
            self.bad("obs shape", f"shape {space.shape} (observation_space.shape)", f"shape {arr.shape} {where}")
            return
        self.ok("obs shape")
        if arr.dtype.kind not in "biuf" or not np.can_cast(arr.dtype, space.dtype):
            self.bad("obs dtype", f"dtype {space.dtype} (observation_space.dtype)",
                     f"dtype {arr.dtype} {where} (does not cast safely to {space.dtype}: return obs.astype(np.{space.dtype}))")
            return
        self.ok("obs dtype")
        bad = _nonfinite(arr)
        if bad:
            name, value, n = bad
            self.bad("obs finite", "finite observation values", f"{name} = {_scalar(value)} {where}" + (f" ({n} non-finite entries)" if n > 1 else ""))
            return
        self.ok("obs finite")
        if arr.dtype.kind == "f" and arr.dtype.itemsize > 4 and space.dtype != np.uint8:
            big = np.abs(arr) > np.finfo(np.float32).max
            if big.any():
                i = int(np.flatnonzero(big.reshape(-1))[0])
                self.bad("obs float32 range", "obs values within float32's range (+-3.4e38): Proxima trains in float32",
                         f"obs{_index(i, arr.shape)} = {_scalar(arr.reshape(-1)[i])} {where}")
                return
            self.ok("obs float32 range")
        low, high = np.broadcast_to(space.low, space.shape), np.broadcast_to(space.high, space.shape)
        out = (arr < low) | (arr > high)
        if out.any():
            i = int(np.flatnonzero(out.reshape(-1))[0])
            idx = _index(i, arr.shape)
            lo, hi, v = low.reshape(-1)[i], high.reshape(-1)[i], arr.reshape(-1)[i]
            side = f"below low{idx} = {_scalar(lo)}" if v < lo else f"above high{idx} = {_scalar(hi)}"
            n = int(out.sum())
            self.bad("obs bounds", f"obs{idx} in [{_scalar(lo)}, {_scalar(hi)}] (observation_space low/high)",
                     f"obs{idx} = {_scalar(v)}, {side}, {where}" + (f" ({n} of {arr.size} entries out of bounds)" if n > 1 else ""))
            return
        self.ok("obs bounds")

    # --- calls into user code ---
    def do_reset(self, env: gym.Env, check: str, context: str = "", **kw) -> tuple[bool, Any]:
        """Call env.reset(**kw) and check what it returns; (False, None) when it raised."""
        call = f"reset({', '.join(f'{k}={v}' for k, v in kw.items())})"
        at = f"{call} {context}" if context else call
        try:
            out = env.reset(**kw)
        except Exception as e:
            expected = "reset() works again after an episode ends" if check == "autoreset" else f"{call} returns (obs, info)"
            self.bad(check, expected, f"{at} raised {_exc(e)}")
            return False, None
        self.ok(check)
        at = "at " + at
        if isinstance(out, tuple) and len(out) == 2:
            obs, info = out
            if isinstance(info, dict):
                self.ok("reset returns")
            else:
                self.bad("reset returns", "reset returns (obs, info) with info a dict", f"info is {_describe(info)} {at}")
        else:
            obs = out
            hint = " (the old gym API returned obs alone; return obs, {})" if not isinstance(out, tuple) else ""
            self.bad("reset returns", "reset returns a tuple (obs, info)", f"{_describe(out)} {at}{hint}")
        self.check_obs(obs, at)
        return True, obs

    def run(self) -> Violations:
        from . import atari

        game = atari.game_name(self.target)
        if game is not None:  # Atari: the wrapped ALE env Proxima trains on (Gymnasium backend)
            if not atari.has_ale():
                raise EnvError(f"check-env '{self.target}' needs ale-py and opencv; {atari.INSTALL}")
            env_fn = atari.ale_env_fn(game, None, training=True)
        else:
            env_fn = resolve_env_fn(self.target, env_kwargs=self.env_kwargs)  # EnvError: the caller reports it (exit 2)
        if ":" not in self.target and game is None:  # build registered ids without Gymnasium's passive checker: we report precisely instead
            target, kwargs = self.target, self.env_kwargs

            def env_fn() -> gym.Env:
                return gym.make(target, disable_env_checker=True, **kwargs)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                env = env_fn()
            except gym.error.DependencyNotInstalled as e:
                extra = _extra_for(self.target)
                hint = f"install it with: pip install 'proxima[{extra}]'" if extra else _one_line(str(e))
                raise EnvError(f"env '{self.target}' needs an optional dependency: {hint}") from None
            except EnvError as e:
                self.bad("build", "a gymnasium.Env instance", _one_line(str(e)))
                return self.result()
            except Exception as e:
                self.bad("build", "the constructor returns a gymnasium.Env", f"{self.target.partition(':')[2] or self.target}() raised {_exc(e)}")
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

    def check(self, env: gym.Env) -> None:
        obs_space = getattr(env, "observation_space", None)
        act_space = getattr(env, "action_space", None)
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
        try:
            check_spaces(self.target, obs_space, act_space)
            self.ok("spaces supported")
        except EnvError as e:
            msg = str(e)
            prefix = f"env '{self.target}': "
            self.bad("spaces supported", "observation Box or Dict of Box; action Discrete, MultiDiscrete or Box with finite bounds",
                     msg[len(prefix):] if msg.startswith(prefix) else msg)

        # reset(seed) and its determinism
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
        if _same(first, again):
            self.ok("reset determinism")
        else:
            show = _fmt_array if isinstance(first, np.ndarray) and isinstance(again, np.ndarray) else _describe
            self.bad("reset determinism", f"reset(seed={self.seed}) twice gives the same obs (draw randomness from self.np_random after super().reset(seed=seed))",
                     f"first {show(first)}, then {show(again)}")
        if self.steps <= 0:
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
            ok, _ = self.do_reset(env, "autoreset", f"after {self.steps} steps")
            if ok:
                self.do_step(env, "at the first step after reset()")

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
        except Exception as e:
            shown = _fmt_array(action) if isinstance(action, (np.ndarray, np.generic)) else repr(action)
            self.bad("step", "step(action) returns without raising", f"step({shown}) {where} raised {_exc(e)}")
            return None
        self.ok("step")
        if _same(before, action):
            self.ok("action not mutated")
        else:
            self.bad("action not mutated", f"the action passed to step() unchanged ({_fmt_array(before)})",
                     f"step() changed it in place to {_fmt_array(action)} {where}; copy it first (np.clip(a, lo, hi) rather than a.clip(..., out=a))")
        if not isinstance(out, tuple) or len(out) != 5:
            n = len(out) if isinstance(out, (tuple, list)) else None
            got = f"{n} values {where}" if n is not None else f"{_describe(out)} {where}"
            if n == 4:
                got += ": the old gym API (obs, reward, done, info); return terminated and truncated instead of done"
            self.bad("step returns", "5 values (obs, reward, terminated, truncated, info)", got)
            return None
        self.ok("step returns")
        obs, reward, terminated, truncated, info = out
        self.check_obs(obs, where)
        real = isinstance(reward, (numbers.Real, np.integer, np.floating)) and not isinstance(reward, (bool, np.bool_))
        got = f"{_describe(reward)} {where}"
        if isinstance(reward, np.ndarray):
            real = reward.ndim == 0 and reward.dtype.kind in "iuf"
            if reward.ndim:
                got += " (return float(reward))"
        if real:
            self.ok("reward type")
            if np.isfinite(float(reward)):
                self.ok("reward finite")
            else:
                self.bad("reward finite", "a finite reward", f"reward = {float(reward):g} {where}")
        else:
            self.bad("reward type", "reward: a real scalar (float, int or numpy scalar)", got)
        flags = []
        for name, flag in (("terminated", terminated), ("truncated", truncated)):
            if isinstance(flag, (bool, np.bool_)):
                self.ok(f"{name} type")
                flags.append(bool(flag))
            else:
                self.bad(f"{name} type", f"{name}: a bool (Python or numpy)", f"{_describe(flag)} {where}")
                try:
                    flags.append(bool(flag))
                except Exception:
                    flags.append(False)
        if isinstance(info, dict):
            self.ok("info type")
        else:
            self.bad("info type", "info: a dict", f"{_describe(info)} {where}")
        return any(flags)


def check_env(target: str, steps: int = 200, seed: int = 0, env_kwargs: Optional[dict] = None) -> list[Violation]:
    """Check ``target`` (a Gymnasium id or ``module:ClassName``, built with ``env_kwargs``) and
    return its violations.

    Raises :class:`EnvError` only when the target cannot be resolved (unknown id, missing module
    or attribute, missing optional dependency); everything the env itself does wrong, exceptions
    included, comes back as a :class:`Violation`. The returned list's ``checks_run`` names the
    checks that were exercised.
    """
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    return _Checker(target, steps, seed, env_kwargs).run()


def format_violations(target: str, violations: list[Violation], checks: Optional[int] = None) -> str:
    """One line per violation (check: expected ...; got ...), then an OK or a count line."""
    if checks is None:
        ran = getattr(violations, "checks_run", None)
        checks = len(ran) if ran is not None else len(ALL_CHECKS)
    if not violations:
        return f"OK: {target} passes {checks} checks"
    lines = [f"FAIL {v}" for v in violations]
    lines.append(f"{len(violations)} violation(s) in {target}")
    return "\n".join(lines)


# --- CLI -----------------------------------------------------------------------------------

def register(subparsers) -> argparse.ArgumentParser:
    """Add ``check-env TARGET [--steps N] [--seed S]`` to an argparse subparsers object."""
    p = subparsers.add_parser(
        "check-env",
        help="Check your env against the Gymnasium API and Proxima's contract.",
        description="Check an env (a Gymnasium id or module:ClassName) against the Gymnasium API and Proxima's "
        "contract: spaces, reset(seed) determinism, obs shape/dtype/bounds, finite values, the 5-tuple step, autoreset. "
        "Exit status: 0 clean, 1 violations, 2 the target cannot be resolved.",
    )
    p.add_argument("target", metavar="TARGET", help="Gymnasium id (CartPole-v1) or module:ClassName of your gymnasium.Env.")
    p.add_argument("--steps", type=int, default=200, metavar="N", help="Random steps to run, with resets when episodes end (default 200).")
    p.add_argument("--seed", type=int, default=0, help="Seed of reset() and of the random actions (default 0).")
    p.add_argument("--env-kwargs", default="", metavar="JSON",
                   help="Keyword arguments of the env's constructor as JSON, as for `proxima train --env-kwargs`.")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Print the report; 0 when clean, 1 on violations, 2 when the target cannot be resolved."""
    steps = getattr(args, "steps", 200)
    if steps < 0:
        print(f"proxima check-env: error: --steps must be >= 0, got {steps}", file=sys.stderr)
        return 2
    from ..config import ConfigError, coerce

    try:
        kwargs = coerce("env_kwargs", getattr(args, "env_kwargs", ""), "--env-kwargs")
        violations = check_env(args.target, steps=steps, seed=getattr(args, "seed", 0), env_kwargs=kwargs)
    except (EnvError, ConfigError) as e:
        print(f"proxima check-env: error: {_one_line(str(e), 500)}", file=sys.stderr)
        return 2
    print(format_violations(args.target, violations))
    return 1 if violations else 0
