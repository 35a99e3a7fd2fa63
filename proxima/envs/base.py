"""The BatchedEnv contract, and the base class of the torch-native envs.

Contract (DESIGN.md): ``reset(seed=None) -> obs[N, ...]``; ``step(action[N, ...]) -> obs,
reward[N], terminated[N], truncated[N], info`` — all torch tensors on ``env.device`` (obs float32,
or uint8 for images, see spaces.py; rewards float32, flags bool). ``step`` takes actions as
``single_action_space`` defines them, which is what ``Policy.act`` returns: a Discrete's and a
MultiDiscrete's values with their ``start`` (Discrete(3, start=1): 1..3), a Box's values (clipped to
its bounds), flat (N, size) or in the space's shape; a NativeEnv's ``_dynamics`` gets them in one
layout, flat (N, size), as training, check-env and ``Policy.act`` all give them. The agent acts in index space (0..n-1): its
loops add ``action_offset`` (None when every start is 0, as in every native env). Autoreset is *same-step*: for an env that finished, the returned obs
is the first obs of its next episode and ``info["final_obs"]`` (N, ...) holds the last obs of the
finished one (rows of unfinished envs equal the returned obs). ``info["episode_return"]`` and
``info["episode_length"]`` (N,) hold the undiscounted return and length of the episodes that just
ended (rows of unfinished envs are 0); ``done = terminated | truncated`` says which rows count.
A step that ends an episode both ways may set both flags (Gymnasium's TimeLimit does; the adapter
passes them on) or only ``terminated`` (the native envs): terminated wins wherever it matters (no
bootstrap, ppo.next_values and compute_gae), so the two are equivalent to the trainer.
"""

from __future__ import annotations

import math
import numbers
import operator
from functools import cached_property
from typing import Callable, Optional

import gymnasium as gym
import torch

from ..config import ConfigError, ProximaError, _short_repr


class EnvError(ProximaError, RuntimeError):
    """An environment broke the contract or cannot be built; the message says what to do."""


#: the largest seed an env takes: torch.Generator.manual_seed's (an unsigned 64-bit integer)
MAX_ENV_SEED = 2**64 - 1


def env_seed(seed, call: str) -> Optional[int]:
    """``seed`` as an int (None as None), or a ConfigError naming ``call`` (``make_env``, ``env 'X': reset``):
    a seed of 1.5, '1', True or a negative one was seeded as 1 or refused in Gymnasium's words, and one past
    2**64 - 1 failed in torch's 'Overflow when unpacking long long'."""
    if seed is None:
        return None
    if not isinstance(seed, bool) and getattr(seed, "ndim", 0) == 0:  # torch.tensor([3]) refused as np.array([3]) is
        try:
            value = operator.index(seed)  # int, numpy's integers, a 0-d integer tensor
        except TypeError:
            value = None
        if value is not None and 0 <= value <= MAX_ENV_SEED:
            return value
    raise ConfigError(f"{call}(seed={seed!r}): must be None or an integer from 0 to 2**64 - 1")


class BatchedEnv:
    """N environments stepped together; tensors in, tensors out, on one device."""

    env_id: str
    num_envs: int
    device: torch.device
    single_observation_space: gym.spaces.Space
    single_action_space: gym.spaces.Space
    #: True when state_dict() captures everything needed to continue bit-identically.
    can_save_state: bool = False
    #: whether step() checks its actions against the action space (NativeEnv: on; Gymnasium's envs check their own)
    check_actions: bool = False
    backend: str = "base"

    def reset(self, seed: Optional[int] = None) -> torch.Tensor:
        raise NotImplementedError

    def step(self, action: torch.Tensor):
        """Step every env with ``action`` (N, ...) in the action space's own values (see the module's docstring)."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def render(self, index: int = 0):
        """An rgb_array frame (H, W, 3) uint8 of env ``index``, or None when not supported."""
        return None

    def close(self) -> None:
        pass

    @cached_property
    def action_bounds(self) -> Optional[tuple]:
        """(low, high) flat float32 tensors on the env's device for a Box action space, else None.

        Built once (a host-to-device copy), so the rollout's clamp to the bounds costs one op.
        """
        space = self.single_action_space
        if not isinstance(space, gym.spaces.Box):
            return None
        as_t = lambda x: torch.as_tensor(x.reshape(-1), dtype=torch.float32, device=self.device)  # noqa: E731
        return as_t(space.low), as_t(space.high)

    @cached_property
    def action_offset(self) -> Optional[torch.Tensor]:
        """The Discrete/MultiDiscrete ``start`` to add to the agent's index actions before ``step``, a
        tensor on the env's device built once; None where every start is 0 (every native env: their
        rollout, which CUDA graphs capture, gets no extra op)."""
        from .spaces import action_offset

        return action_offset(self.single_action_space, self.device)

    @property
    def obs_shape(self) -> tuple:
        """Per-env shape of the obs tensor: (obs_dim,), an image's shape, or (D,) for packed Dict keys."""
        from .spaces import obs_layout

        return obs_layout(self.single_observation_space, getattr(self, "env_id", "env")).shape

    @property
    def obs_dtype(self) -> torch.dtype:
        """dtype of the obs tensor: torch.uint8 for images (kept as pixels), else torch.float32."""
        from .spaces import obs_layout

        return obs_layout(self.single_observation_space, getattr(self, "env_id", "env")).dtype

    @property
    def action_shape(self) -> tuple:
        return tuple(self.single_action_space.shape or ())

    def _name(self) -> str:
        return f"env '{getattr(self, 'env_id', None) or type(self).__name__}'"

    def _check_obs_space(self) -> None:
        """EnvError unless the observation space is a Box. _observe() returns one packed tensor, and
        the order it packs a Dict's keys in is the env's own, while Gymnasium's Dict sorts its keys
        and Policy.act packs a dict in that order: a deployed policy would read its features
        swapped, with no error anywhere. A Box of any dtype is read as float32 (a uint8 image as
        pixels), as _check_obs demands of _observe()."""
        space = getattr(self, "single_observation_space", None)
        if isinstance(space, gym.spaces.Box):
            return
        raise EnvError(f"{self._name()}: observation space {space} is not a Box: a native env's observations are one "
                       "(N, ...) tensor; declare a flat float32 Box and pack the features into it in _observe(), or write "
                       "a gymnasium.Env (the Gymnasium backend) for Dict observations (docs/native_envs.md)")


def _bound(values) -> str:
    """A Box's low or high for a line: the one number when every element shares it, else the array's list."""
    flat = values.reshape(-1)
    return f"{float(flat[0]):g}" if (flat == flat[0]).all() else str([float(v) for v in flat])


class NativeEnv(BatchedEnv):
    """Base of torch-native envs: subclasses hold their state as (N, ...) tensors.

    A subclass implements:
      * ``_sample_initial_state(n) -> dict[str, Tensor]`` drawn from ``self.generator``;
      * ``_dynamics(action) -> (reward[N] float32, terminated[N] bool)`` that advances ``self.state``;
      * ``_observe() -> obs[N, ...]`` float32 (uint8 for an image space, see spaces.py);
    and sets ``max_episode_steps`` (its time limit; 0 or None: no time limit, episodes end only by
    ``terminated``). This class does time limits, same-step autoreset, final_obs and episode
    statistics with ``torch.where`` only: no host syncs, no per-env Python loops. The first reset()
    and step() check the dtypes and shapes the hooks return (EnvError naming the hook and the field):
    a float64 obs or reward would otherwise fail deep inside the network. A guide: docs/native_envs.md.
    """

    backend = "native"
    can_save_state = True
    #: called in step() after the dynamics, before the same-step autoreset (the state a finished env
    #: reached is still there): evaluate()'s video takes an episode's final frame here; None: nothing
    before_autoreset: Optional[Callable[[], None]] = None
    #: the time limit in steps; 0 or None: none (only ``terminated`` ends an episode)
    max_episode_steps: Optional[int] = 0
    #: every random draw goes through ``_uniform``, ``_normal`` or ``_randint``, so rows can be split into
    #: per-member streams (``use_member_streams``, populations); an env drawing from ``self.generator``
    #: directly sets False
    supports_member_streams: bool = True
    #: step() refuses an action outside the action space (a Discrete action out of range or not a whole
    #: number, a NaN/inf one) with an EnvError naming the env index, as Gymnasium's envs refuse it. A host
    #: sync per step: off for an env built by its class, on for make_env's (a user's own actions), and the
    #: trainer turns it off again (its actions come from the policy's distribution)
    check_actions: bool = False

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", seed: Optional[int] = None):
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device)
        seed = env_seed(seed, type(self).__name__)
        if seed is None:  # as Gymnasium: unseeded envs must not all replay the same episodes
            self.generator.seed()  # from std::random_device (the OS's entropy)
        else:
            self.generator.manual_seed(seed)
        self.state: dict[str, torch.Tensor] = {}
        n = self.num_envs
        self.elapsed = torch.zeros(n, dtype=torch.int64, device=self.device)
        self.ep_return = torch.zeros(n, dtype=torch.float32, device=self.device)
        self.member_generators: Optional[list] = None
        self._member_offsets: list = []
        # the hooks' outputs are checked once (metadata only, no host sync): the first reset and step
        self._reset_checked = self._step_checked = False
        #: (N, size) where _observe() returns the declared shape of a Box the agent reads flat (a scalar
        #: Box(()): (N,) read as (N, 1)), set by the first reset's check; None: its obs as they come
        self._obs_rows: Optional[tuple] = None

    def _one_env_action(self, action):
        """``action`` as a batch of one where a one-env env is given its env's lone action without the env
        dimension (CartPole's ``torch.tensor(1)``, a Box(6,)'s (6,), a Box(1,)'s 0-d number), which its
        ``_dynamics`` took before the action check came in; any other ``action`` as given."""
        space = self.single_action_space
        if self.num_envs != 1 or not isinstance(space, (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete,
                                                        gym.spaces.MultiBinary)):
            return action
        a = self._action_tensor(action)
        lone = (a.shape == space.shape and (a.dim() == 0 or a.shape[0] != 1)) or (a.dim() == 0 and math.prod(space.shape) == 1)
        return a.reshape(1, *space.shape).to(self.device) if lone else action

    def _check_actions(self, action) -> None:
        """EnvError, one line naming the env index, the action and what the space takes, for actions that
        are not one per env or that the action space does not hold: a Discrete/MultiDiscrete/MultiBinary
        action out of range, fractional or NaN (an integer-valued float, 1.0, is the integer; a bool is 0
        or 1), a NaN/inf Box action (finite ones out of bounds are not refused: the built-in envs clip
        them, as Gymnasium's Pendulum does, and a user's ``_dynamics`` gets them as given)."""
        space = self.single_action_space
        a = self._action_tensor(action)
        per_env = int(math.prod(space.shape)) if space.shape else 1
        if a.dim() == 0 or a.shape[0] != self.num_envs or a.numel() != self.num_envs * per_env:
            shape = (self.num_envs, *space.shape) if space.shape else (self.num_envs,)
            raise EnvError(f"{self._name()}: step() got actions of shape {tuple(a.shape)}; it takes one action for each "
                           f"of its {self.num_envs} envs, shape {shape}")
        flat = a.reshape(self.num_envs, per_env)
        finite = torch.isfinite(flat) if flat.is_floating_point() else torch.ones_like(flat, dtype=torch.bool)
        if isinstance(space, gym.spaces.Box):
            bad, takes = ~finite, f"a finite number ({self._box_bounds(space)})"
        elif isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
            if isinstance(space, gym.spaces.Discrete):
                low, high = int(space.start), int(space.start) + int(space.n) - 1
                lows = highs = None
                takes = f"a whole number from {low} to {high}"
            elif isinstance(space, gym.spaces.MultiBinary):
                low, high, lows, highs = 0, 1, None, None
                takes = "0 or 1"
            else:
                start = getattr(space, "start", None)
                start = torch.zeros(per_env, dtype=torch.int64) if start is None else torch.as_tensor(start.reshape(-1))
                lows, highs = start, start + torch.as_tensor(space.nvec.reshape(-1)) - 1
                takes = None
            # compared in int64 (a bool as 0/1) and float32 at least: torch casts the bounds to the action's dtype,
            # so a uint8 action met Discrete(3, start=-1)'s -1 as 255 and Discrete(300)'s 299 as 43
            if not flat.is_floating_point():
                values = flat.to(torch.int64)
            else:
                values = flat if flat.dtype in (torch.float32, torch.float64) else flat.float()
            whole = finite & (values == values.round()) if values.is_floating_point() else finite
            lo = lows.to(flat.device) if lows is not None else low
            hi = highs.to(flat.device) if highs is not None else high
            bad = ~whole | (values < lo) | (values > hi)
        else:
            return
        if not bool(bad.any()):  # the one host sync (make_env's users only: the trainer turns the check off)
            return
        env, col = (int(i) for i in bad.nonzero()[0])
        value = flat[env, col].item()
        value = f"{value:.6g}" if isinstance(value, float) else value  # 0.7, not float32's 0.699999988...
        if takes is None:  # MultiDiscrete: column col's own range
            takes = f"a whole number from {int(lows[col])} to {int(highs[col])} at position {col}"
        at = f" (position {col})" if per_env > 1 and not isinstance(space, gym.spaces.MultiDiscrete) else ""
        shown = " ".join(str(space).split())  # a 2-D MultiDiscrete's repr holds a newline: the line stays one line
        raise EnvError(f"{self._name()}: env {env} was given action {value}{at}; {shown} takes {takes}")

    def _action_tensor(self, action) -> torch.Tensor:
        """``action`` as a tensor, or an EnvError in the action check's words for what no action can be: one that
        torch cannot read (a dict, a str or object array, 2**70), a complex number (torch read 1+5j as 1), a sparse
        tensor, or one that requires grad (step's in-place writes raised autograd's error on every later step)."""
        try:
            a = action if isinstance(action, torch.Tensor) else torch.as_tensor(action)
        except (TypeError, ValueError, RuntimeError, OverflowError):
            a, why = None, "something torch cannot read as numbers"
        if a is None:
            pass
        elif a.layout != torch.strided:
            why = f"a {str(a.layout).replace('torch.', '')} tensor"
        elif a.is_complex() or a.dtype in (torch.quint8, torch.qint8, torch.qint32):
            why = f"{str(a.dtype).replace('torch.', '')} numbers"
        elif a.requires_grad:
            why = "a tensor that requires grad (detach() it, or act under torch.no_grad())"
        else:
            return a
        shown = " ".join(_short_repr(action).split())
        space = " ".join(str(self.single_action_space).split())
        raise EnvError(f"{self._name()}: step() was given {shown}, {why}; {space} takes a tensor of numbers, "
                       f"one action for each of its {self.num_envs} envs")

    def _box_bounds(self, space) -> str:
        """What the action-check line says of a Box's bounds: a built-in env clips an action to them (its
        ``_dynamics`` does, as Gymnasium's Pendulum), a user's own env gets it as given."""
        from . import NATIVE_ENVS  # the built-in classes: imported here, on the error's path alone

        bounds = f"[{_bound(space.low)}, {_bound(space.high)}]"
        return f"out of {bounds} is clipped" if type(self) in NATIVE_ENVS.values() else f"its bounds are {bounds}"

    def use_member_streams(self, seeds) -> bool:
        """Split the N rows into len(seeds) equal blocks, block p drawing its random numbers from its
        own generator seeded ``seeds[p]``: the draws a lone env of N / len(seeds) rows seeded
        ``seeds[p]`` makes, so population member p steps through the episodes the single run with
        that seed steps through. False (nothing changed) where the env cannot. A later
        ``reset(seed=s)`` re-seeds block p with ``s + seeds[p] - seeds[0]``: ``s = seeds[0] + k``
        gives each block what a lone env's ``reset(seed=seeds[p] + k)`` draws (a resume's reseed)."""
        if not self.supports_member_streams or self.num_envs % len(seeds):
            return False
        self.member_generators = []
        for seed in seeds:
            g = torch.Generator(device=self.device)
            g.manual_seed(int(seed))
            self.member_generators.append(g)
        self._member_offsets = [int(seed) - int(seeds[0]) for seed in seeds]
        return True

    # --- subclass hooks ---
    # a bare NotImplementedError printed nothing after its name: these say which hook is missing
    def _sample_initial_state(self, n: int) -> dict[str, torch.Tensor]:
        raise NotImplementedError(f"{type(self).__name__} must implement _sample_initial_state(n) -> dict of (n, ...) "
                                  "tensors; docs/native_envs.md")

    def _dynamics(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError(f"{type(self).__name__} must implement _dynamics(action) -> (reward[N], terminated[N]); "
                                  "docs/native_envs.md")

    def _observe(self) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement _observe() -> obs[N, ...]; docs/native_envs.md")

    def render(self, index: int = 0):
        """An (H, W, 3) uint8 frame of row ``index`` (its video plays at ``render_fps``, else 30); a
        subclass that can draw overrides this. Here: EnvError, worded for a native env (BatchedEnv's None
        would read as Gymnasium's render_mode='rgb_array' missing, which a native env has no use for)."""
        raise EnvError(f"{self._name()} renders no frames: a native env implements render(self, index) -> an (H, W, 3) "
                       "uint8 frame of row index (and sets render_fps) for --video; docs/native_envs.md")

    # --- helpers for subclasses: every random draw through one of these ---
    def _uniform(self, shape, low: float, high: float) -> torch.Tensor:
        """float32 uniform in [low, high) of ``shape`` (``shape[0]`` the rows), from self.generator or,
        with member streams on, each member's block of rows from its own generator."""
        return low + (high - low) * self._draw(torch.rand, shape, dtype=torch.float32)

    def _normal(self, shape, mean: float = 0.0, std: float = 1.0) -> torch.Tensor:
        """float32 Gaussian N(mean, std**2) of ``shape``, drawn as :meth:`_uniform` draws; ``mean`` and
        ``std`` numbers or tensors that broadcast against ``shape``."""
        x = self._draw(torch.randn, shape, dtype=torch.float32)
        # skipped only for the plain numbers 0 and 1: comparing a tensor would be ambiguous (several
        # values) or a host sync (one value, on a GPU) in every step
        plain = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (mean, std))
        return x if plain and mean == 0.0 and std == 1.0 else mean + std * x

    def _randint(self, low: int, high: int, shape) -> torch.Tensor:
        """int64 integers in [low, high) of ``shape`` (torch.randint's order), drawn as :meth:`_uniform` draws."""
        return self._draw(lambda size, **kw: torch.randint(int(low), int(high), size, **kw), shape, dtype=torch.int64)

    def _draw(self, sample: Callable, shape, dtype: torch.dtype) -> torch.Tensor:
        """``sample(shape, generator=..., device=..., dtype=...)`` from self.generator, or with member streams on
        (and ``shape[0]`` the num_envs rows) each member's block of rows from its own generator: the draws a
        lone env of that block's rows makes, so a population's member equals its single run."""
        shape = tuple(shape)
        if self.member_generators is not None and shape and shape[0] == self.num_envs:
            n = self.num_envs // len(self.member_generators)
            return torch.cat([sample((n, *shape[1:]), generator=g, device=self.device, dtype=dtype)
                              for g in self.member_generators])
        return sample(shape, generator=self.generator, device=self.device, dtype=dtype)

    # --- the contract ---
    # State tensors are persistent buffers, updated in place (``out=``, ``copy_``, ``masked_fill_``):
    # a CUDA graph captured around step() reads and writes the same memory on every replay, and an
    # attribute rebound to a fresh tensor would leave the replayed graph reading stale input.
    def reset(self, seed: Optional[int] = None) -> torch.Tensor:
        seed = env_seed(seed, f"{self._name()}: reset")
        if seed is not None:
            self.generator.manual_seed(seed)
            # with member streams on, _uniform/_normal/_randint draw from these, not self.generator
            for g, offset in zip(self.member_generators or (), self._member_offsets):
                g.manual_seed(int(seed) + offset)
        if not self._reset_checked:
            self._check_obs_space()
        fresh = self._sample_initial_state(self.num_envs)
        if not self._reset_checked:
            self._check_initial_state(fresh)
        if self.state.keys() == fresh.keys() and all(self.state[k].shape == v.shape for k, v in fresh.items()):
            for key, value in fresh.items():
                self.state[key].copy_(value)
        else:  # copies, as load_state_dict adopts: a start kept on self (return {"pos": self.start}) would
            # become the buffer the autoreset writes, and no finished env would start from it again
            self.state = {key: value.clone() for key, value in fresh.items()}
        self.elapsed.zero_()
        self.ep_return.zero_()
        obs = self._observe()
        if not self._reset_checked:
            self._check_limit()
            self._check_obs(obs, "_observe() (first reset)")
            self._reset_checked = True
        if self._obs_rows is not None:
            obs = obs.reshape(self._obs_rows)
        return obs

    def step(self, action: torch.Tensor):
        if not self.state:  # a dict's truth, no tensor read: free under graph capture
            raise EnvError(f"{getattr(self, 'env_id', type(self).__name__)}: call reset() before step()")
        if self.check_actions:  # off in training (no host sync there); on for a make_env user's own actions
            action = self._one_env_action(action)
            self._check_actions(action)
        state = self.state  # _dynamics may rebind self.state itself (refused by _check_state_kept)
        buffers = dict(state)  # the persistent tensors; _dynamics may rebind self.state[key]
        try:
            return self._step_body(action, buffers)
        except BaseException:  # the buffers back in place: one failed step leaves the env usable (rebound keys put back)
            state.update(buffers)
            self.state = state
            raise

    def _step_body(self, action, buffers: dict):
        """step()'s body, from ``_dynamics`` on: ``buffers`` the persistent tensors before it ran."""
        out = self._dynamics(action)
        if not self._step_checked:
            self._check_dynamics(out)
            self._check_state_kept(buffers)
        reward, terminated = out
        if self.before_autoreset is not None:
            self.before_autoreset()
        self.elapsed += 1
        self.ep_return += reward
        if self.max_episode_steps:
            truncated = (self.elapsed >= self.max_episode_steps) & ~terminated
        else:  # no time limit: `elapsed >= 0` would end every episode after one step
            truncated = torch.zeros_like(terminated)
        done = terminated | truncated
        final_obs = self._observe()
        if self._obs_rows is not None:
            final_obs = self._rows(final_obs)
        episode_return = torch.where(done, self.ep_return, torch.zeros_like(self.ep_return))
        episode_length = torch.where(done, self.elapsed, torch.zeros_like(self.elapsed))
        # same-step autoreset: draw fresh states for all rows, keep them where done, written back
        # into the persistent buffers
        fresh = self._sample_initial_state(self.num_envs)
        for key, buffer in buffers.items():
            mask = done.view(-1, *([1] * (buffer.dim() - 1)))
            torch.where(mask, fresh[key], self.state[key], out=buffer)
            self.state[key] = buffer
        self.elapsed.masked_fill_(done, 0)
        self.ep_return.masked_fill_(done, 0.0)
        obs = self._observe()
        if self._obs_rows is not None:
            obs = self._rows(obs)
        if not self._step_checked:
            self._check_obs(final_obs, "_observe() (first step)")
            self._check_alias(final_obs, obs)
            self._check_flags_alias(reward, terminated)
            self._step_checked = True
        info = {"final_obs": final_obs, "episode_return": episode_return, "episode_length": episode_length}
        return obs, reward, terminated, truncated, info

    def _rows(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs`` in the declared shape (a scalar Box's (N,)) as the flat (N, size) rows the agent reads: a view."""
        if not self._step_checked:
            self._check_obs(obs, "_observe() (first step)")
        return obs.reshape(self._obs_rows)

    # --- the hooks' outputs, checked once ---
    def _check_limit(self) -> None:
        limit = self.max_episode_steps
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, numbers.Integral) or limit < 0):
            raise EnvError(f"{self._name()}: max_episode_steps = {limit!r}; set it to the time limit in steps, an integer "
                           "of 1 or more (0 or None: no time limit)")

    def _check_tensor(self, x, what: str, dtypes: tuple, shape: tuple, fix: str, shape_fix: str) -> None:
        """EnvError unless ``x`` is a tensor of one of ``dtypes``, of ``shape`` (num_envs first), on the env's
        device; ``fix`` ends a type or dtype fault's line, ``shape_fix`` a shape fault's (a dtype hint there
        would send the user to a cast that fixes nothing)."""
        if not isinstance(x, torch.Tensor):
            raise EnvError(f"{self._name()}: {what}: a {type(x).__name__}, expected a torch.Tensor; {fix}")
        if x.dtype not in dtypes:
            raise EnvError(f"{self._name()}: {what}: dtype {x.dtype}, expected {dtypes[0]}; {fix}")
        if tuple(x.shape) != shape:
            raise EnvError(f"{self._name()}: {what}: shape {tuple(x.shape)}, expected {shape} (num_envs first); {shape_fix}")
        self._check_device(x, what)

    def _check_device(self, x: torch.Tensor, what: str) -> None:
        # torch.device("cuda") names no index, its tensors' device does ("cuda:0"): the same device; a
        # CPU tensor names none, whatever the env's device says (cpu:0 is the one CPU)
        if x.device.type != self.device.type or (x.device.type != "cpu" and self.device.index not in (None, x.device.index)):
            raise EnvError(f"{self._name()}: {what}: on {x.device}, expected the env's device {self.device}; create it on "
                           "self.device")

    def _check_obs(self, obs, hook: str) -> None:
        dtype = self.obs_dtype
        what = f"the observations of {hook}"
        if not isinstance(obs, torch.Tensor):  # a dict of features: ".float()" would not help
            raise EnvError(f"{self._name()}: {what}: a {type(obs).__name__}, expected a torch.Tensor; a native env's "
                           f"observations are one (num_envs, {', '.join(map(str, self.obs_shape))}) tensor: pack the "
                           "features into it (torch.cat) as the flat Box it declares (docs/native_envs.md)")
        # a non-image Box of any dtype (float64, int) is read as float32: say so, as the dtype check demands it
        fix = ("return float32 observations (.float()): a native env's are float32 whatever its Box's dtype"
               if dtype == torch.float32 else "return uint8 pixels, as the image observation space declares")
        shape = (self.num_envs, *self.obs_shape)
        # a Box the agent reads flat may come in its declared shape: a scalar Box(())'s (N,) is (N, *()),
        # read as (N, 1); taken at the first reset (then every obs is), or where the first reset took it
        declared = (self.num_envs, *self.single_observation_space.shape)
        as_declared = (declared != shape and tuple(obs.shape) == declared
                       and (not self._reset_checked or self._obs_rows is not None))
        # a shape fault is no dtype fault: the cast hint would fix nothing here
        if declared != shape:
            shape_fix = (f"return one row per env, each of the shape {declared[1:]} that single_observation_space "
                         f"declares (or flat, {tuple(self.obs_shape)})")
        elif len(self.obs_shape) == 1:
            shape_fix = (f"return one row per env, each of the shape {tuple(self.obs_shape)} that single_observation_space "
                         "declares (stack (num_envs,) features with torch.stack(..., dim=1))")
        else:
            shape_fix = f"return one row per env, each of the shape {tuple(self.obs_shape)} that single_observation_space declares"
        self._check_tensor(obs, what, (dtype,), declared if as_declared else shape, fix, shape_fix)
        if as_declared and not self._reset_checked:
            self._obs_rows = shape

    def _check_initial_state(self, state) -> None:
        """EnvError unless _sample_initial_state(n) gave a dict of (num_envs, ...) tensors on the env's device, each
        row its own memory: the autoreset writes them row by row with torch.where(..., out=buffer)."""
        hook = "_sample_initial_state()"
        if not isinstance(state, dict):
            raise EnvError(f"{self._name()}: {hook} returned a {type(state).__name__}, expected a dict of (num_envs, ...) "
                           "tensors, one per state variable; return {'name': tensor, ...} (docs/native_envs.md)")
        if not state:
            raise EnvError(f"{self._name()}: {hook} returned an empty dict, expected at least one (num_envs, ...) tensor "
                           "(step() reads an empty state as never reset); return {'name': tensor, ...}")
        for key, x in state.items():
            what = f"state[{key!r}] of {hook}"
            if not isinstance(x, torch.Tensor):
                raise EnvError(f"{self._name()}: {what}: a {type(x).__name__}, expected a (num_envs, ...) torch.Tensor; "
                               "hold every state variable as a tensor with one row per env")
            if x.dim() == 0 or x.shape[0] != self.num_envs:
                raise EnvError(f"{self._name()}: {what}: shape {tuple(x.shape)}, expected ({self.num_envs}, ...) (num_envs "
                               "first); return one row per env: _sample_initial_state(n) draws n rows")
            self._check_device(x, what)
            shared = [d for d, (size, stride) in enumerate(zip(x.shape, x.stride())) if size > 1 and stride == 0]
            if shared:
                raise EnvError(f"{self._name()}: {what}: an expanded tensor (stride 0 in dim {shared[0]}), whose rows share "
                               "one memory location that the autoreset writes row by row; return a tensor of its own "
                               "(.expand(...).clone(), or .repeat(...))")

    def _check_state_kept(self, before: dict) -> None:
        """EnvError unless _dynamics() left self.state with the keys, dtypes, shapes and device it had at reset:
        the autoreset writes each new episode's start (drawn by _sample_initial_state) into those buffers."""
        state, hook = self.state, "_dynamics()"
        if not isinstance(state, dict):
            raise EnvError(f"{self._name()}: {hook} set self.state to a {type(state).__name__}, expected the dict of "
                           "_sample_initial_state(); assign its keys (self.state['name'] = ...), not self.state")
        for key in state.keys() - before.keys():
            raise EnvError(f"{self._name()}: {hook} added state[{key!r}], a key _sample_initial_state() does not return: "
                           "the state's keys are fixed at reset, where each episode's start is drawn; return "
                           f"{key!r} from _sample_initial_state(n) too, with its start value")
        for key in before.keys() - state.keys():
            raise EnvError(f"{self._name()}: {hook} removed state[{key!r}]; keep every key of _sample_initial_state() in "
                           "self.state (assign it a new tensor, never del or pop it)")
        for key, old in before.items():
            x, what = state[key], f"state[{key!r}] after {hook}"
            if not isinstance(x, torch.Tensor):
                raise EnvError(f"{self._name()}: {what}: a {type(x).__name__}, expected a torch.Tensor as at reset; "
                               "assign it a tensor")
            if x.dtype != old.dtype:
                raise EnvError(f"{self._name()}: {what}: dtype {x.dtype}, expected {old.dtype} as at reset "
                               "(_sample_initial_state()); keep each key's dtype from reset to step (cast back, or draw "
                               "its start in the dtype _dynamics writes)")
            if x.shape != old.shape:
                raise EnvError(f"{self._name()}: {what}: shape {tuple(x.shape)}, expected {tuple(old.shape)} as at reset "
                               "(_sample_initial_state()); keep each key's shape from reset to step")
            self._check_device(x, what)

    def _check_alias(self, final_obs: torch.Tensor, obs: torch.Tensor) -> None:
        # an _observe() that returns a state buffer (or a view of one) makes final_obs the memory the
        # autoreset then overwrites: the trainer would bootstrap a truncation from the next episode's
        # start. Storage pointers are metadata: no host sync, safe under graph capture.
        def storage(x: torch.Tensor) -> int:
            return x.untyped_storage().data_ptr()

        buffers = {storage(v): f"state[{k!r}]" for k, v in self.state.items() if isinstance(v, torch.Tensor)}
        shared = [buffers[storage(x)] for x in (final_obs, obs) if storage(x) in buffers]
        if storage(final_obs) == storage(obs):
            shared.append("the next obs")
        shared = [name for name in dict.fromkeys(shared) if storage(final_obs)]  # an empty tensor holds no memory
        if shared:
            raise EnvError(f"{self._name()}: _observe() returned a tensor that shares memory with {', '.join(shared)}, so "
                           "a later step overwrites it (final_obs becomes the next episode's start); return a new tensor "
                           "(.clone()), never the state itself or a view of it (docs/native_envs.md)")

    def _check_flags_alias(self, reward: torch.Tensor, terminated: torch.Tensor) -> None:
        # gymnax style (return self.state["r"], self.state["done"]): the autoreset writes the next episode's
        # start into those buffers before step() returns them, so the trainer reads terminated False and the
        # start's reward. Storage pointers only, as _check_alias.
        buffers = {x.untyped_storage().data_ptr(): key for key, x in self.state.items() if isinstance(x, torch.Tensor)}
        for what, x in (("reward", reward), ("terminated", terminated)):
            key = buffers.get(x.untyped_storage().data_ptr()) if x.numel() else None
            if key is not None:
                raise EnvError(f"{self._name()}: the {what} of _dynamics() shares memory with state[{key!r}], which the "
                               f"autoreset overwrites with the next episode's start before step() returns it (the "
                               f"trainer would read the start's {what}); return a new tensor (.clone()), never the "
                               "state itself or a view of it (docs/native_envs.md)")

    def _check_dynamics(self, out) -> None:
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            got = f"{len(out)} values" if isinstance(out, (tuple, list)) else type(out).__name__
            raise EnvError(f"{self._name()}: _dynamics() returned {got}; return (reward, terminated), two (num_envs,) tensors")
        reward, terminated = out
        n = (self.num_envs,)
        self._check_tensor(reward, "the reward of _dynamics()", (torch.float32,), n, "return a float32 (num_envs,) tensor (.float())",
                           "return one reward per env: a (num_envs,) tensor")
        self._check_tensor(terminated, "the terminated of _dynamics()", (torch.bool,), n,
                           "return a bool (num_envs,) tensor (a comparison, or .bool())",
                           "return one flag per env: a (num_envs,) tensor")

    @classmethod
    def overridden_contract(cls) -> Optional[str]:
        """The line for a subclass that overrides reset() or step() (Gymnasium style, whose tuples failed far
        from their cause), None for one that keeps them: they do what the trainer relies on."""
        does = {"reset": ("seeding, the state buffers", "_sample_initial_state(n) and _observe()"),
                "step": ("time limit, autoreset, episode statistics", "_dynamics(action)")}
        names = [name for name in does if getattr(cls, name, None) is not getattr(NativeEnv, name)]
        if not names:
            return None
        if len(names) == 1:
            (name,) = names
            what, hooks = does[name]
            return (f"{cls.__name__} overrides {name}(): NativeEnv.{name} ({what}) is not to be overridden, implement "
                    f"{hooks} instead (docs/native_envs.md)")
        return (f"{cls.__name__} overrides reset() and step(): NativeEnv.reset/step (seeding, the state buffers, time "
                "limit, autoreset, episode statistics) are not to be overridden, implement _sample_initial_state(n), "
                "_dynamics(action) and _observe() instead (docs/native_envs.md)")

    def state_dict(self) -> dict:
        return {
            "state": {k: v.clone() for k, v in self.state.items()},
            "elapsed": self.elapsed.clone(),
            "ep_return": self.ep_return.clone(),
            "generator": self.generator.get_state(),
            **({"member_generators": [g.get_state() for g in self.member_generators]} if self.member_generators else {}),
        }

    def load_state_dict(self, sd: dict) -> None:
        # copied into the existing buffers where they exist (see step(): captured graphs hold them)
        state = {k: v.to(self.device) for k, v in sd["state"].items()}
        if self.state.keys() == state.keys() and all(self.state[k].shape == v.shape for k, v in state.items()):
            for key, value in state.items():
                self.state[key].copy_(value)
        else:
            self.state = {k: v.clone() for k, v in state.items()}
        self.elapsed.copy_(sd["elapsed"].to(self.device))
        self.ep_return.copy_(sd["ep_return"].to(self.device))
        self.generator.set_state(sd["generator"].cpu())
        if self.member_generators and "member_generators" in sd:
            for g, st in zip(self.member_generators, sd["member_generators"]):
                g.set_state(st.cpu())


#: the methods a NativeEnv subclass writes, which NativeEnv.reset and step call
NATIVE_HOOKS = ("_sample_initial_state", "_dynamics", "_observe")


def native_failure(e: BaseException, env_id: str, when: str) -> Optional[EnvError]:
    """The one line for ``e`` raised by a NativeEnv hook (the frame NativeEnv.reset or step called), as the
    Gymnasium adapter words an env's exception: "env 'ID': native env raised RuntimeError: boom in _dynamics
    (my_env.py:41) at WHEN". A batched env steps every row in one call, so no env index is named. None for
    an EnvError (already its line) or an exception from elsewhere (Proxima's own, the agent's). Read only once
    something raised: the step itself gains nothing."""
    import os
    import traceback

    from .gym_adapter import user_frame

    if isinstance(e, EnvError) or not isinstance(e, Exception):
        return None
    here = os.path.realpath(__file__)
    frames = traceback.extract_tb(e.__traceback__)
    for outer, inner in zip(frames, frames[1:]):
        if outer.name in ("reset", "step", "_step_body") and inner.name in NATIVE_HOOKS and os.path.realpath(outer.filename) == here:
            message = " ".join(str(e).split())
            message = message if len(message) <= 200 else message[:197] + "..."
            return EnvError(f"env '{env_id}': native env raised {type(e).__name__}"
                            f"{': ' + message if message else ''} in {inner.name}{user_frame(e)} at {when}")
    return None
