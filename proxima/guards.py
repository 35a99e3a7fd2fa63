"""Guards around the env: NaN/inf in observations and rewards (always, without host syncs) and
``--debug-checks`` (every action and observation against the spaces, one sync per step).
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from .config import ProximaError
from .envs import EnvError
from .envs.gym_adapter import check_env_cmd


class NonFiniteError(ProximaError, RuntimeError):
    """NaN/inf met in an observation, reward, loss or gradient; names the field, env and step."""


class DebugCheckError(EnvError):
    """--debug-checks: an action or observation outside its space; names the env, the step and the value."""


def fmt_values(x: torch.Tensor, limit: int = 8) -> str:
    """A small tensor as a short one-line list (for error messages; syncs)."""
    vals = x.detach().reshape(-1).to("cpu", torch.float64).tolist()
    text = ", ".join(f"{v:.6g}" for v in vals[:limit]) + (", ..." if len(vals) > limit else "")
    return f"[{text}]" if x.dim() > 0 else text


class EnvGuard:
    """The env as collect_rollout steps it: ``env.step`` plus the trainer's guards.

    Always, without a host sync: for each step t, which envs returned a non-finite observation or
    final observation, recorded on the device *before* normalization (a NaN would poison the running
    statistics and with them every env's normalized obs). check_rollout reads these
    flags once per iteration (check_rollout), together with the raw rewards of the rollout.

    With ``--debug-checks`` (one sync per step): each action is checked against the action space
    before the step (Box actions for shape and finiteness only: the env clips them to the bounds,
    docs/ppo_notes.md), and the observation, final observation, reward and flags against the contract
    after it; the first violation raises at once, naming the env index, the global step and the value.
    """

    def __init__(self, trainer):
        self.env, self.trainer = trainer.env, trainer
        T, N = trainer.rollout.num_steps, trainer.rollout.num_envs
        self.T, self.N, self.ws = T, N, trainer.dist.world_size
        self.obs_ok = torch.ones((T, N), dtype=torch.bool, device=trainer.device)
        self.final_ok = torch.ones((T, N), dtype=torch.bool, device=trainer.device)
        self.debug = bool(trainer.cfg.debug_checks)
        self.check_cmd = check_env_cmd(trainer.cfg.env_id, trainer.cfg.env_kwargs)  # with the run's --env-kwargs: its env
        self.t, self.step0 = 0, 0
        if self.debug:
            import gymnasium as gym

            obs_space = self.env.single_observation_space
            self.obs_shape, self.obs_dtype = tuple(self.env.obs_shape), self.env.obs_dtype
            self.low = self.high = None
            self.keys: Optional[list] = None  # a Dict: (key, first column, size) of each key in the packed obs
            #: (key, first column, shape as declared) of each obs part of 2 dims or more (an image): a bad pixel is named
            #: by its coordinates, obs[32, 0, 0], as check-env names it, not by its flat column
            self.grids: list = []
            if isinstance(obs_space, gym.spaces.Box):
                low, high = obs_space.low, obs_space.high
                shape = tuple(getattr(obs_space, "declared", obs_space).shape)  # a flattened float image: its own shape
                if len(shape) > 1:
                    self.grids = [(None, 0, shape)]
            elif isinstance(obs_space, gym.spaces.Dict):
                # the packed (N, D) obs holds the keys side by side (envs/spaces.py): their bounds, flattened, in that order
                from .envs.spaces import obs_layout

                parts = obs_layout(obs_space, trainer.cfg.env_id).parts
                subs = [obs_space.spaces[p.key] for p in parts]
                low = np.concatenate([np.broadcast_to(b.low, b.shape).reshape(-1).astype(np.float64) for b in subs])
                high = np.concatenate([np.broadcast_to(b.high, b.shape).reshape(-1).astype(np.float64) for b in subs])
                self.keys = [(p.key, p.offset, p.size) for p in parts]
                self.grids = [(p.key, p.offset, tuple(p.shape)) for p in parts if len(p.shape) > 1]
            else:
                low = high = None
            if low is not None:
                self.low = torch.as_tensor(np.asarray(low, dtype=np.float64).reshape(-1), device=trainer.device)
                self.high = torch.as_tensor(np.asarray(high, dtype=np.float64).reshape(-1), device=trainer.device)

    def __getattr__(self, name):  # everything but step() is the env's
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    def begin(self, step0: int) -> None:
        self.t, self.step0 = 0, step0
        self.obs_ok.fill_(True)
        self.final_ok.fill_(True)

    def global_step_at(self, t: int) -> int:
        """The run's global step once step t of this rollout is done."""
        return self.step0 + (t + 1) * self.N * self.ws

    def where(self, t: int, n: int) -> str:
        """'env n at global step S (env step k)' for the transition of step t of this rollout."""
        rank = f" (rank {self.trainer.dist.rank})" if self.ws > 1 else ""
        return f"env {n}{rank} at global step {self.global_step_at(t)} (env step {self.step0 // (self.N * self.ws) + t + 1})"

    def where_reset(self, t: int, n: int) -> str:
        """'env n at reset (after env step k, global step S)': the observation of step t that env n's
        autoreset returned, as the adapter names an exception in that reset ('at reset (after env step k)')."""
        rank = f" (rank {self.trainer.dist.rank})" if self.ws > 1 else ""
        return (f"env {n}{rank} at reset (after env step {self.step0 // (self.N * self.ws) + t + 1}, "
                f"global step {self.global_step_at(t)})")

    def _obs_line(self, t: int, n: int, values: str, from_reset: bool, cmd: str) -> str:
        """The NonFiniteError line of env n's observation of step t; ``from_reset``: its episode ended
        with that step and the final observation step() returned was finite, so the bad one is the
        autoreset's reset() (the same-step autoreset hands it over as that step's observation)."""
        if from_reset:
            return f"non-finite observation{values} from {self.where_reset(t, n)}; check the env's reset() with: {cmd}"
        return f"non-finite observation{values} from {self.where(t, n)}; check the env's step() with: {cmd}"

    def step(self, action: torch.Tensor):
        t = self.t
        if self.debug:
            self._check_action(action, t)
        obs, reward, terminated, truncated, info = self.env.step(action)
        # integer observations (pixels) are always finite: their rows keep begin()'s True. The dtype is
        # fixed for the run, so a CUDA graph captures the same ops, or none, on every replay
        if t < self.T and obs.is_floating_point():
            torch.all(torch.isfinite(obs.reshape(self.N, -1)), -1, out=self.obs_ok[t])
            torch.all(torch.isfinite(info["final_obs"].reshape(self.N, -1)), -1, out=self.final_ok[t])
        if self.debug:
            self._check_result(obs, reward, terminated, truncated, info, t)
        self.t += 1
        return obs, reward, terminated, truncated, info

    # --- --debug-checks (syncs) ---
    def check_rollout(self, raw_rewards: torch.Tensor, env_id: str) -> None:
        """NaN/inf in what the envs returned this iteration -> NonFiniteError naming the field, the env
        index and the global step. Observations are judged raw (the flags above), rewards raw
        (raw_rewards (T, N)). One host sync per iteration; the search runs only on failure."""
        error = self._nonfinite(raw_rewards, env_id, self.T)
        if error is not None:
            raise error

    def nonfinite_so_far(self, raw_rewards: torch.Tensor, env_id: str) -> Optional[NonFiniteError]:
        """After the env raised during step ``self.t`` of the rollout: the NonFiniteError
        check_rollout would have raised for the steps before it (their flags and rewards are
        written; the later ones are the last iteration's), else None."""
        t = min(self.t, self.T)
        return self._nonfinite(raw_rewards, env_id, t) if t > 0 else None

    def _nonfinite(self, raw_rewards: torch.Tensor, env_id: str, steps: int) -> Optional[NonFiniteError]:
        fields = (("observation", ~self.obs_ok[:steps]), ("final observation", ~self.final_ok[:steps]),
                  ("reward", ~torch.isfinite(raw_rewards[:steps])))
        found = first_bad(fields)
        if found is None:
            return None
        t, field, n = found
        # check-env's default 200 steps would pass an env that turns NaN later: its --steps reach this env step
        cmd = check_env_cmd(env_id, self.trainer.cfg.env_kwargs, steps=self.step0 // (self.N * self.ws) + t + 1)
        if field == "observation":
            # at one step first_bad names the observation before the final one: the reset is to blame only where
            # the step ended the episode and returned a finite final observation (collect_rollout has written
            # the dones of every step up to t by now)
            dones = getattr(self.trainer.rollout, "dones", None)
            from_reset = dones is not None and bool(dones[t, n]) and bool(self.final_ok[t, n])
            return NonFiniteError(self._obs_line(t, n, "", from_reset, cmd))
        value = f" {fmt_values(raw_rewards[t, n])}" if field == "reward" else ""
        return NonFiniteError(f"non-finite {field}{value} from {self.where(t, n)}; check the env's step() with: {cmd}")

    def _fail(self, message: str):
        raise DebugCheckError(f"--debug-checks: {message}")

    def _check_action(self, action: torch.Tensor, t: int) -> None:
        import gymnasium as gym

        from .envs.spaces import index_space

        space, N = index_space(self.env.single_action_space), self.N  # a MultiBinary's bits: MultiDiscrete([2] * n)
        shown = self.env.single_action_space  # the messages name the env's space (MultiBinary((2, 3))), not the agent's
        step = self.step0 + (t + 1) * N * self.ws
        if not torch.is_tensor(action):
            self._fail(f"actions at global step {step} are a {type(action).__name__}, expected a torch tensor")
        if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
            if action.dtype.is_floating_point or action.dtype == torch.bool:
                self._fail(f"actions at global step {step} have dtype {action.dtype}, expected an integer dtype for {shown}")
            if isinstance(space, gym.spaces.Discrete):
                if tuple(action.shape) not in ((N,), (N, 1)):
                    self._fail(f"actions at global step {step} have shape {tuple(action.shape)}, expected ({N},) for {shown}")
                # the env gets the space's values, start..start+n-1 (collect_rollout added env.action_offset)
                a = action.reshape(N, 1)
                low = torch.full((1,), int(space.start), dtype=torch.int64, device=a.device)
                high = low + int(space.n) - 1
            else:
                nvec = np.asarray(space.nvec).reshape(-1)
                if tuple(action.shape) != (N, nvec.size):
                    self._fail(f"actions at global step {step} have shape {tuple(action.shape)}, expected ({N}, {nvec.size}) for {shown}")
                a = action
                low = torch.as_tensor(np.asarray(space.start, dtype=np.int64).reshape(-1), device=a.device)
                high = low + torch.as_tensor(nvec, device=a.device) - 1
            bad = ((a < low) | (a > high)).any(-1)
            if bool(bad.any()):
                n = int(torch.nonzero(bad)[0, 0])
                value = fmt_values(action[n])
                starts = np.asarray(space.start).reshape(-1)
                note = f" (values {fmt_values(low)}..{fmt_values(high)})" if starts.any() else ""
                if isinstance(shown, gym.spaces.MultiBinary):  # the agent's action is the bits flat
                    note = f" (its {nvec.size} bits flat, each 0 or 1)"
                self._fail(f"action {value} of {self.where(t, n)} is outside the action space {shown}{note}")
        elif isinstance(space, gym.spaces.Box):
            size = int(np.prod(space.shape))
            if action.shape[:1] != (N,) or action.numel() != N * size:
                self._fail(f"actions at global step {step} have shape {tuple(action.shape)}, expected ({N}, {size}) for {shown}")
            bad = ~torch.isfinite(action.reshape(N, -1).float()).all(-1)
            if bool(bad.any()):
                n = int(torch.nonzero(bad)[0, 0])
                self._fail(f"action {fmt_values(action[n])} of {self.where(t, n)} is not finite (the policy produced NaN/inf)")

    def check_reset(self, obs: torch.Tensor, global_step: int) -> None:
        """--debug-checks: the observations (N, ...) the run starts from (a reset's, or a checkpoint's)
        against the observation space, as every step's are (check_reset has found them finite)."""
        if self.debug:
            rank = f" (rank {self.trainer.dist.rank})" if self.ws > 1 else ""
            self._check_obs("observation", obs, None, 0, at=f"reset (global step {global_step}){rank}")

    def _check_obs(self, field: str, x: torch.Tensor, ok: Optional[torch.Tensor], t: int, at: Optional[str] = None,
                   from_reset=None) -> None:
        """``at``: where the observations come from when not step t of this rollout (check_reset's 'reset (global step S)');
        ``from_reset(n)``: whether env n's observation is its autoreset's (_check_result), asked only of a non-finite one."""
        N = self.N
        when = at or f"global step {self.step0 + (t + 1) * N * self.ws}"
        where = (lambda n: f"env {n} at {at}") if at else (lambda n: self.where(t, n))
        if not torch.is_tensor(x) or tuple(x.shape) != (N, *self.obs_shape):
            shape = tuple(x.shape) if torch.is_tensor(x) else type(x).__name__
            self._fail(f"{field}s at {when} have shape {shape}, expected {(N, *self.obs_shape)}")
        if x.dtype != self.obs_dtype:
            self._fail(f"{field}s at {when} have dtype {x.dtype}, expected {self.obs_dtype}")
        flat = x.reshape(N, -1)
        if ok is not None and not bool(ok.all()):
            n = int(torch.nonzero(~ok)[0, 0])
            if from_reset is not None:
                raise NonFiniteError(self._obs_line(t, n, f" {fmt_values(flat[n])}", from_reset(n), self.check_cmd))
            raise NonFiniteError(f"non-finite {field} {fmt_values(flat[n])} from {where(n)}; "
                                 f"check the env's step() with: {self.check_cmd}")
        if self.low is not None:
            xd = flat.to(torch.float64)
            below, above = xd < self.low, xd > self.high
            bad = (below | above).any(-1)
            if bool(bad.any()):
                n = int(torch.nonzero(bad)[0, 0])
                k = int(torch.nonzero(below[n] | above[n])[0, 0])
                side = f"< low {float(self.low[k]):.6g}" if bool(below[n, k]) else f"> high {float(self.high[k]):.6g}"
                what = f"component {k}"
                shown = f" {fmt_values(flat[n])}"
                if self.keys is not None:  # name the Dict key and the entry within it
                    key, offset, size = next(part for part in self.keys if part[1] <= k < part[1] + part[2])
                    what = f"obs['{key}'] entry {k - offset}"
                    shown = f" {fmt_values(flat[n, offset:offset + size])}"  # the values shown: that key's
                grid = next((g for g in self.grids if g[1] <= k < g[1] + math.prod(g[2])), None)
                if grid is not None:  # an image: its coordinates, and no list of its first pixels (a row of zeros says nothing)
                    key, offset, shape = grid
                    index = ", ".join(str(int(i)) for i in np.unravel_index(k - offset, shape))
                    size = math.prod(shape)
                    out = int((below[n, offset:offset + size] | above[n, offset:offset + size]).sum())
                    what, shown = ("obs" if key is None else f"obs['{key}']") + f"[{index}]", ""
                    side += f"; {out:,} of its {size:,} entries out of bounds"
                self._fail(f"{field}{shown} of {where(n)} is outside the observation space "
                           f"({what} = {float(xd[n, k]):.6g} {side})")

    def _check_result(self, obs, reward, terminated, truncated, info, t: int) -> None:
        N = self.N
        step = self.step0 + (t + 1) * N * self.ws

        def from_reset(n: int) -> bool:  # env n's episode ended with this step and its final observation is finite
            flags = [x for x in (terminated, truncated) if torch.is_tensor(x) and tuple(x.shape) == (N,)]
            return len(flags) == 2 and bool(flags[0][n] | flags[1][n]) and bool(self.final_ok[t, n])

        self._check_obs("observation", obs, self.obs_ok[t] if t < self.T else None, t, from_reset=from_reset)
        self._check_obs("final observation", info["final_obs"], self.final_ok[t] if t < self.T else None, t)
        for name, x in (("reward", reward), ("terminated", terminated), ("truncated", truncated)):
            if not torch.is_tensor(x) or tuple(x.shape) != (N,):
                shape = tuple(x.shape) if torch.is_tensor(x) else type(x).__name__
                self._fail(f"{name} at global step {step} has shape {shape}, expected ({N},)")
        if reward.dtype != torch.float32:
            self._fail(f"reward at global step {step} has dtype {reward.dtype}, expected torch.float32")
        for name, x in (("terminated", terminated), ("truncated", truncated)):
            if x.dtype != torch.bool:
                self._fail(f"{name} at global step {step} has dtype {x.dtype}, expected torch.bool")
        bad = ~torch.isfinite(reward)
        if bool(bad.any()):
            n = int(torch.nonzero(bad)[0, 0])
            raise NonFiniteError(f"non-finite reward {fmt_values(reward[n])} from {self.where(t, n)}; "
                                 f"check the env's step() with: {self.check_cmd}")


def first_bad(fields) -> Optional[tuple]:
    """fields: ((name, bad (T, N) bool), ...) -> (t, name, n) of the earliest bad entry (at the same
    step, the field listed first), or None when all are fine. One host read; the search only on failure."""
    if not bool(torch.stack([bad.any() for _, bad in fields]).any()):
        return None
    first = None
    for order, (field, bad) in enumerate(fields):
        if bool(bad.any()):
            ts, ns = torch.nonzero(bad, as_tuple=True)
            key = (int(ts[0]), order)
            if first is None or key < first[0]:
                first = (key, field, int(ns[0]))
    (t, _), field, n = first
    return t, field, n


def check_reset(obs: torch.Tensor, global_step: Optional[int], env_id: Optional[str], env_kwargs: Optional[dict] = None,
                at: Optional[str] = None, name=None) -> None:
    """NaN/inf in the observations (N, ...) of a reset -> NonFiniteError naming the env (one host sync);
    its check-env command holds ``env_kwargs`` (the run's --env-kwargs; none without ``env_id``).
    ``at``: where (default ``reset (global step S)``); ``name(n)``: the env (default ``env n``), as an
    evaluation names them (evaluate.first_episodes)."""
    bad = ~torch.isfinite(obs.reshape(obs.shape[0], -1)).all(-1)
    if bool(bad.any()):
        n = int(torch.nonzero(bad)[0, 0])
        where = at or f"reset (global step {global_step})"
        hint = "" if env_id is None else f"; check the env's reset() with: {check_env_cmd(env_id, env_kwargs)}"
        raise NonFiniteError(f"non-finite observation {fmt_values(obs[n])} from {name(n) if name else f'env {n}'} at {where}"
                             f"{hint}")
