"""Populations: P independent PPO agents (seeds, swept hyperparameters) trained as one batched program.

The algorithm is ppo.py's, parametrized, never copied (DESIGN.md "Growing without forking the loop"):

* parameters carry a leading member axis P, stacked from P ``Agent``s built with each member's
  seed. An MLP agent (flat observations) becomes one Agent whose Linear layers are
  ``nets.StackedLinear`` (one batched matmul for all members), so its own methods take (P, B, ...)
  inputs: no per-call transform, the fast path. An agent with an encoder (CNN, Dict) is called by
  ``vmap`` over ``functional_call`` of one template Agent (``torch.func.stack_module_state``);
* one env of P*N rows, member p owning rows [p*N, (p+1)*N); ``ppo.collect_rollout`` fills a
  (T, P*N) rollout exactly as for one run;
* ``ppo.compute_gae`` gets gamma and lambda as (P*N,) tensors (one value per row);
* ``ppo.update`` runs its epochs and minibatches with a per-member permutation (each member's
  minibatch is drawn from its own data by its own permutation); the minibatch step is
  ``ppo.ppo_loss`` over (P, mb) inputs (vmapped for encoder agents) with per-member clip/vf/ent
  coefficients and norm_adv/clip_vloss switches ((P,) bool tensors); the summed loss
  gives each member the gradient of its own loss only; the gradient norm is clipped per member;
  ``member_adam.MemberAdam`` is P independent Adams over the stacked parameters (per-member
  learning rates and step counts); ``target_kl`` stops a member's update after the minibatch whose
  approx_kl exceeds it, as a single run's update stops, decided on the device (an active mask that
  skips the member's later Adam steps), so no member waits on another; once none is active the
  rest of the update is skipped (a host read of the mask: per minibatch on CPU, per epoch on CUDA,
  none under CUDA graphs);
* a member whose loss, gradient or Adam step is non-finite takes no step and is frozen for good
  (``diverged``), the others training on; population_run.py records it. A frozen member's
  normalizer statistics are frozen too (``_keep_frozen_statistics``: also where its env's NaN
  reached them), so its checkpoint holds finite ones, which ``proxima eval`` loads.

A member's first iteration equals a single run with the same seed up to float rounding (test:
tests/unit/test_population.py): the same initial parameters, the same env rows and the same
action samples and permutations for a population of one; vmapped (batched) matmuls and the
learning-rate scaling of the Adam step round differently in the last bits. That holds for MLP
agents (stacked); an encoder agent (CNN) runs under vmap, whose samples come from one stream, so
its actions differ from the single run's from the first step on.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
from typing import Optional, Sequence

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from . import ppo
from .agent import Agent, action_dtype, action_shape
from .member_adam import MemberAdam
from .normalize import ObsNormalizer, RewardScaler
from .nets import stack_mlp_agents
from .config import ConfigError, PPOConfig, batch_size, num_iterations, validate
from .envs import make_env
from .envs.base import EnvError
from .rollout import Rollout

#: numbers that may differ between members: each lives as a (P,) float32 tensor (Population.coef)
PER_MEMBER_NUMBERS = ("lr", "ent_coef", "clip_coef", "vf_clip_coef", "vf_coef", "gamma", "gae_lambda", "max_grad_norm", "target_kl")
#: PPO switches that may differ between members (CleanRL's ablations of details 4, 7 and 9): each lives as
#: a (P,) bool tensor (Population.switch), applied by torch.where, never by a Python branch per member
PER_MEMBER_SWITCHES = ("norm_adv", "anneal_lr", "clip_vloss")
#: fields that may differ between members (--sweep FIELD=...)
PER_MEMBER_FIELDS = PER_MEMBER_NUMBERS + PER_MEMBER_SWITCHES
#: fields every member shares apart from these and the seed (shapes, env, schedule, switches)
_MEMBER_OWN = set(PER_MEMBER_FIELDS) | {"seed", "run_dir"}


# ---------------------------------------------------------------------------------------------
# layout helpers: rows of the (T, P*N) rollout <-> (P, T*N) per-member samples
# ---------------------------------------------------------------------------------------------
def to_members(x: torch.Tensor, members: int) -> torch.Tensor:
    """(T, P*N, ...) time-major rollout tensor -> (P, T*N, ...) per-member samples (t-major within a member)."""
    t, pn = x.shape[:2]
    n = pn // members
    return x.reshape(t, members, n, *x.shape[2:]).transpose(0, 1).reshape(members, t * n, *x.shape[2:])


def from_members(x: torch.Tensor, num_steps: int) -> torch.Tensor:
    """(P, T*N, ...) -> (T, P*N, ...), the inverse of :func:`to_members`."""
    p, tn = x.shape[:2]
    n = tn // num_steps
    return x.reshape(p, num_steps, n, *x.shape[2:]).transpose(0, 1).reshape(num_steps, p * n, *x.shape[2:])


def member_permutation(members: int, samples: int, num_envs: int, device: torch.device,
                       generator: Optional[torch.Generator] = None, num_minibatches: int = 1) -> torch.Tensor:
    """The permutation ``ppo.update`` walks for a population, (P * T*N,) int64.

    Each member draws its own permutation of its T*N samples (``ppo.minibatch_permutation``) from
    ``generator``: one generator, or a sequence of P (member p's from its own stream, as the single
    run with its seed draws it), mapped to the rows of the flat (T*P*N,) batch.
    Minibatch j (the j-th contiguous slice of P*mb indices, mb = T*N / num_minibatches) holds the
    j-th mb samples of member 0, then of member 1, ...: the grad step views it as (P, mb).
    """
    if not isinstance(generator, (list, tuple)) and torch.device(device).type == "cuda":
        # one stream for all (no per-member streams on a GPU): one batched draw, capturable
        per_member = torch.argsort(torch.rand(members, samples, device=device, dtype=torch.float64, generator=generator), dim=1)
    else:
        gens = list(generator) if isinstance(generator, (list, tuple)) else [generator] * members
        per_member = torch.stack([torch.arange(samples, device=device) if isinstance(g, _NoDraw)
                                  else ppo.minibatch_permutation(samples, device, g) for g in gens])  # (P, T*N)
    offsets = torch.arange(members, device=device).unsqueeze(1) * num_envs
    rows = (per_member // num_envs) * (members * num_envs) + offsets + per_member % num_envs
    return rows.reshape(members, num_minibatches, -1).transpose(0, 1).reshape(-1)


class PopulationRollout(Rollout):
    """A (T, P*N) rollout whose episode statistics are kept per member: ep_*_sum, ep_count (P,)."""

    def __init__(self, members: int, num_steps: int, num_envs: int, *args, **kwargs):
        super().__init__(num_steps, members * num_envs, *args, **kwargs)
        self.members = members
        f32 = dict(dtype=torch.float32, device=self.device)
        self.ep_return_sum = torch.zeros(members, **f32)
        self.ep_length_sum = torch.zeros(members, **f32)
        self.ep_count = torch.zeros(members, **f32)

    def add_episode_stats(self, episode_return, episode_length, done) -> None:
        p = self.members
        self.ep_return_sum += episode_return.reshape(p, -1).sum(1)
        self.ep_length_sum += episode_length.reshape(p, -1).sum(1).to(torch.float32)
        # rows with a length, not done rows: as RolloutBuffer.add_episode_stats (Atari's lost lives end
        # episodes that are no game; they report length 0)
        self.ep_count += (episode_length.reshape(p, -1) > 0).sum(1)


class _Method(nn.Module):
    """Calls one method of a template Agent, so functional_call can reach more than forward()."""

    def __init__(self, agent: Agent):
        super().__init__()
        self.agent = agent

    def forward(self, method: str, *args):
        return getattr(self.agent, method)(*args)


# ---------------------------------------------------------------------------------------------
class Population:
    """P members of one PPOConfig shape, differing in seed and the PER_MEMBER_FIELDS.

    ``configs``: one PPOConfig per member (validated; they may differ only in the seed and
    PER_MEMBER_FIELDS). Holds the stacked parameters ``params`` ({name: (P, ...)}), the Adam over
    them, the (P*N)-row env and the (T, P*N) rollout, and runs iterations with ``train_iteration``.
    """

    def __init__(self, configs: Sequence[PPOConfig], device="cpu", python: bool = False):
        if not configs:
            raise ConfigError("--seeds: a population needs at least one member")
        check_members(configs, python=python)
        self.configs = list(configs)
        base = self.cfg = configs[0]
        P, N, T = len(configs), base.num_envs, base.num_steps
        self.members, self.device = P, torch.device(device)
        from .trainer import _check_cudagraphs

        _check_cudagraphs(base, self.device, 1)  # --cudagraphs: CUDA only, and what it cannot combine with
        torch.set_num_threads(base.threads)
        flush = getattr(base, "flush_denormal", None)  # as Trainer does, where the config has the switch
        if flush is not None:
            torch.set_flush_denormal(flush)
        if base.keep_host_memory and self.device.type == "cpu":  # as Trainer does (hostmem.py)
            from .hostmem import keep_freed_memory

            keep_freed_memory()
        # the order of a single run (Trainer): seed, env, agent, reset; for a population of one the
        # global RNG stream (action samples, permutations) is then the single run's
        from .trainer import seed_everything

        seed_everything(base.seed)
        self.env = make_env(base.env_id, P * N, self.device, base.backend, base.vector, seed=base.seed, env_kwargs=base.env_kwargs)
        self.env.check_actions = False  # actions from the policy's distribution: no host sync a step to check them
        obs_space, act_space = self.env.single_observation_space, self.env.single_action_space
        from .run_setup import check_log_std_init
        from .trainer import _python_words

        try:  # a single run's refusal (a non-Box action has no log std), one text; --init-from is UNSUPPORTED
            with _python_words(python):
                check_log_std_init(base, act_space, init_from=False)
        except ConfigError:
            self.env.close()
            raise
        agents, streams = [], []
        for c in configs:
            torch.manual_seed(c.seed)  # member k's initial parameters are a single run's with seed k
            # log_std_init is one value for every member (check_members): each starts as its single run does
            agents.append(Agent(obs_space, act_space, base.hidden_sizes, base.activation, base.encoder,
                                c.log_std_init).to(self.device))
            # member k's own random stream: where the single run's global generator stands after its init
            g = torch.Generator(device=self.device)
            if self.device.type == "cpu":
                g.set_state(torch.get_rng_state())
            else:  # the agent is initialized on the CPU: the device's generator is still at seed k
                g.manual_seed(c.seed)
            streams.append(g)
        self.encoder_kind = agents[0].encoder_kind
        if base.norm_obs and agents[0].has_pixels:
            from .run_setup import check_norm_obs

            self.env.close()
            check_norm_obs(base, True)  # a single run's refusal, one text
        # an MLP agent: one Agent with stacked Linear layers, called directly; else vmap over a template
        self.stacked = agents[0].encoder is None and not any(True for _ in agents[0].buffers())
        # per-member random streams (action samples, minibatch permutations, env resets): member k
        # then draws exactly the single run k's numbers, so its iterations equal that run's (to the
        # rounding of batched matmuls). Under vmap (encoder agents) samples come from one stream.
        self.member_generators: Optional[list] = None
        if self.stacked:
            self.agent = stack_mlp_agents(agents)
            self.params, self.buffers = dict(self.agent.named_parameters()), {}
            # on CPU only: on a GPU, P generators would mean P kernel launches for every random draw
            self.member_generators = streams if self.device.type == "cpu" else None
        else:
            self.agent = None
            params, buffers = stack_module_state(agents)
            self.params = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
            self.buffers = {k: v.detach().clone() for k, v in buffers.items()}
        self.template = _Method(copy.deepcopy(agents[0]).to("meta"))
        # the same tensors under the template's names (updated in place by Adam, so built once)
        self._prefixed_params = {"agent." + k: v for k, v in self.params.items()}
        self._prefixed_buffers = {"agent." + k: v for k, v in self.buffers.items()}
        self._vmapped: dict = {}
        self.agent_template = agents[0]  # a real Agent: unstacked members are loaded into copies of it
        self._member_keys: Optional[list] = None  # its state_dict's keys, in order (member_state_dict)
        # per-member scalars, (P,) float32
        # target_kl None: never stop (inf); vf_clip_coef None: the member's own clip_coef, as a single run's
        absent = {"target_kl": lambda c: math.inf, "vf_clip_coef": lambda c: c.clip_coef}
        col = lambda name: torch.tensor([absent[name](c) if getattr(c, name) is None else float(getattr(c, name)) for c in configs],  # noqa: E731
                                        dtype=torch.float32, device=self.device)
        self.coef = {name: col(name) for name in PER_MEMBER_NUMBERS}
        # per-member switches, (P,) bool: where a member's single run takes a branch, the batch takes both
        # and torch.where keeps each member's own (the same ops: a member's loss is its run's bit for bit)
        self.switch = {name: torch.tensor([bool(getattr(c, name)) for c in configs], device=self.device)
                       for name in PER_MEMBER_SWITCHES}
        # each switch as the loss takes it: a Python bool where every member agrees (the path, and the
        # cost, of a population without that switch swept), else the (P,) tensor
        self._loss_switch = {name: self.switch[name] if len({bool(getattr(c, name)) for c in configs}) > 1
                             else bool(getattr(base, name)) for name in PER_MEMBER_SWITCHES}
        self.lr_now = self.coef["lr"].clone()  # annealed in place (detail 4)
        # the learning rates in float64: annealed from these and rounded once, as the single run's
        # frac * cfg.lr (a Python float) is, not from their float32 roundings
        self._lr64 = torch.tensor([float(c.lr) for c in configs], dtype=torch.float64, device=self.device)
        # the same schedule on the host, the members' logged charts/learning_rate: exactly a single run's
        # Trainer.scheduled_lr (frac * cfg.lr), with no read of the device's float32 rates
        self.scheduled_lrs: list = [float(c.lr) for c in configs]
        # P independent Adams (eps 1e-5, detail 3) with per-member learning rates and step counts
        self.optimizer = MemberAdam(list(self.params.values()), P, eps=1e-5)
        # members still updating in this update (target_kl stops a member's epochs, per member)
        self.active = torch.ones(P, dtype=torch.bool, device=self.device)
        # members frozen for good: a non-finite loss, gradient or Adam step (or env output) was theirs;
        # they take no Adam step again, so the others train on (population_run.py records why and when)
        self.diverged = torch.zeros(P, dtype=torch.bool, device=self.device)
        self.diverged_at: list = [None] * P  # host side: {"iteration", "global_step", "reason"} per diverged member
        self._steps_run = torch.zeros(P, dtype=torch.float32, device=self.device)
        self._update_cfg = dataclasses.replace(base, target_kl=None)  # ppo.update's host check: off
        self._stops = any(c.target_kl is not None for c in configs)
        # once every member has stopped (target_kl), the update's remaining minibatches are skipped:
        # learning that needs a host read of the active mask, which a CUDA graph cannot make (and
        # which only a member with a target_kl needs). On CPU it is read after every minibatch (free);
        # on CUDA once per epoch.
        self.host_stop_check = self._stops and not base.cudagraphs
        self._all_stopped = False
        self._idle_metrics: Optional[dict] = None
        self.rollout = PopulationRollout(P, T, N, self.env.obs_shape, action_shape(act_space), action_dtype(act_space),
                                         self.device, obs_dtype=torch.float32 if base.norm_obs else self.env.obs_dtype)
        # running normalizers (docs/ppo_notes.md), one set of statistics per member over its own rows
        self.obs_norm = ObsNormalizer(self.env.obs_shape, base.clip_obs, groups=P).to(self.device) if base.norm_obs else None
        self.reward_scaler = None
        if base.norm_reward:  # each member's discounted return with its own gamma (float64, as a single run's float)
            gammas = torch.tensor([c.gamma for c in configs], dtype=torch.float64, device=self.device).repeat_interleave(N)
            self.reward_scaler = RewardScaler(P * N, gammas, base.clip_reward, groups=P).to(self.device)
        rows = lambda x: x.repeat_interleave(N)  # noqa: E731  (P,) -> (P*N,): one value per env row
        self.gamma_rows, self.lam_rows = rows(self.coef["gamma"]), rows(self.coef["gae_lambda"])
        self.advantages_buf = torch.zeros_like(self.rollout.values)
        self.returns_buf = torch.zeros_like(self.rollout.values)
        self.batch = self.rollout.flatten(self.advantages_buf, self.returns_buf)
        self.num_iterations = num_iterations(base)
        self.steps_per_member = batch_size(base)
        self.iteration = 0
        seeds = [c.seed for c in configs]
        env_streams = self.member_generators is not None and hasattr(self.env, "use_member_streams") and self.env.use_member_streams(seeds)
        if env_streams and len(seeds) > 1:
            try:
                refuse_shared_env_stream(base, seeds, self.device)
            except BaseException:
                self.env.close()
                raise
        self.next_obs = (self.env.reset() if env_streams else self.env.reset(seed=base.seed)).clone()
        # why member k's draws are not the single run k's (None: they are; population.json and a note say so)
        self.shared_stream_why: Optional[str] = (
            None if env_streams else
            f"a {self.encoder_kind} agent's actions are sampled under vmap from one generator for all members" if not self.stacked
            else f"on {self.device.type} the members share one generator" if self.member_generators is None
            else f"the {base.backend} env ({base.env_id}) draws every member's env randomness from one generator")
        if self.obs_norm is not None:
            self.obs_norm.count_reset(self.next_obs)
        self._build_parts()

    # --- vmapped calls of the template agent -----------------------------------------------------
    def _call(self, method: str, *args, randomness: str = "error"):
        """Agent.method over members: args (P, B, ...) -> outputs (P, B, ...)."""
        if self.stacked:
            return getattr(self.agent, method)(*args)
        key = (method, randomness)
        fn = self._vmapped.get(key)
        if fn is None:  # built once per method: vmap and functional_call cost host time per call

            def one(params, buffers, *xs):
                return functional_call(self.template, (params, buffers), (method, *xs))

            fn = self._vmapped[key] = vmap(one, randomness=randomness)
        return fn(self._prefixed_params, self._prefixed_buffers, *args)

    @torch.no_grad()
    def policy_step(self, obs: torch.Tensor):
        """collect_rollout's acting step: obs (P*N, ...) -> action (P*N, ...), logprob (P*N,), value (P*N,)."""
        P = self.members
        obs = obs.reshape(P, -1, *obs.shape[1:])
        if self.stacked:
            action, logprob, value = self.agent.policy_step(obs, self.member_generators)
        else:
            action, logprob, value = self._call("policy_step", obs, randomness="different")
        flat = lambda x: x.reshape(-1, *x.shape[2:])  # noqa: E731
        return flat(action), flat(logprob), flat(value)

    # --- the three parts of an iteration --------------------------------------------------------
    def collect(self) -> None:
        saved = self._statistics_now()
        last = ppo.collect_rollout(self.env, self.policy_step, self.rollout, self.next_obs, self.obs_norm, self.reward_scaler)
        self.next_obs.copy_(last)
        self._keep_frozen_statistics(saved)

    def _statistics_now(self) -> list:
        """Copies of the running statistics kept per member: [(mean, var)] (P, ...) of the observation
        normalizer and the reward scaler, those present (their count is one for all members, which
        see equally many rows)."""
        return [(m.rms.mean.clone(), m.rms.var.clone()) for m in (self.obs_norm, self.reward_scaler) if m is not None]

    @torch.no_grad()
    def _keep_frozen_statistics(self, saved: list) -> None:
        """Put ``saved`` (_statistics_now before the update) back for a diverged member, and for one whose
        statistics went NaN or inf (its env returned NaN: env_failures freezes it after this iteration):
        a frozen member keeps its last finite statistics, so its checkpoint holds finite ones, which
        ``proxima eval`` loads (it refuses NaN statistics as a damaged file). The others' are kept
        bit for bit. Per member row on the device: no host read, capturable in the rollout's graph."""
        modules = [m for m in (self.obs_norm, self.reward_scaler) if m is not None]
        for m, (mean, var) in zip(modules, saved):
            finite = (torch.isfinite(m.rms.mean.reshape(self.members, -1)).all(1)
                      & torch.isfinite(m.rms.var.reshape(self.members, -1)).all(1))
            keep = (self.diverged | ~finite).reshape(-1, *(1,) * (mean.dim() - 1))
            m.rms.mean.copy_(torch.where(keep, mean, m.rms.mean))
            m.rms.var.copy_(torch.where(keep, var, m.rms.var))

    @torch.no_grad()
    def advantages(self) -> torch.Tensor:
        """GAE into the static buffers; returns the explained variance per member (P,)."""
        ro, cfg, P = self.rollout, self.cfg, self.members
        terminated = ro.terminated if cfg.bootstrap_truncation else ro.dones

        def value_of(obs):  # (k, P*N, *obs_shape) -> (k, P*N)
            return from_members(self._call("get_value", to_members(obs, P)), obs.shape[0])

        # off the CPU the critic runs over every final obs: no more rows at once than the update's
        # minibatch of all members (P x T*N / num_minibatches), whose activations the memory check counts
        next_values = ppo.next_values(ro.values, ro.final_obs, ro.dones, terminated, value_of,
                                      max_rows=ro.values.numel() // cfg.num_minibatches)
        adv, ret = ppo.compute_gae(ro.rewards, ro.values, next_values, terminated, ro.dones, self.gamma_rows, self.lam_rows)
        self.advantages_buf.copy_(adv)
        self.returns_buf.copy_(ret)
        values, returns = to_members(ro.values, P), to_members(ret, P)
        return ppo.explained_variance(values, returns, dim=1)

    def update(self) -> dict:
        """ppo.update over every member; a member stopped by its target_kl skips the rest (its loss
        terms are then the mean over the minibatches it ran, as a single run's)."""
        cfg, P = self.cfg, self.members
        self.active.copy_(~self.diverged)  # a diverged member never steps again
        self._steps_run.zero_()
        self._all_stopped = False
        stops = self._stops

        def permutation(b, device, generator=None):
            gens = self.member_generators
            if gens is not None and stops and device.type == "cpu":
                # a stopped member's single run draws no more permutations: neither does it here,
                # so its stream stays the single run's (a free host read on CPU; on CUDA all draw)
                gens = [g if on else _NO_DRAW for g, on in zip(gens, self.active.tolist())]
            perm = member_permutation(P, b // P, cfg.num_envs, device, gens or generator, cfg.num_minibatches)
            if self.host_stop_check and device.type != "cpu":
                # once per epoch on a GPU, after the draw (so the random stream is what it would be
                # without the check, and what a graphed update draws): a stopped epoch is skipped
                self._all_stopped = not bool(self.active.any())
            return perm

        out = ppo.update(None, self.optimizer, self.batch, self._update_cfg, grad_step=self.grad_step, permutation=permutation)
        minibatches = cfg.update_epochs * cfg.num_minibatches  # ppo.update divided every sum by this
        scale = minibatches / self._steps_run.clamp(min=1.0)
        out = {k: (v if k == "nonfinite" else v * scale) for k, v in out.items()}
        # each member's own count: ppo.update's is every minibatch, which a stopped member skipped
        out["minibatch_updates"] = self._steps_run.clone()
        return out

    def grad_step(self, mb: dict) -> dict:
        """One minibatch of every member: mb rows member-major (P*mb, ...) as member_permutation lays
        them out. Returns each loss term as a (P,) tensor, grad_norm (P,) and nonfinite (P,) bool."""
        if self._all_stopped:  # every member has stopped this update: what _step would add, zeros
            return self._idle_metrics
        P = self.members
        m = {k: v.reshape(P, -1, *v.shape[1:]) for k, v in mb.items()}  # (P, mb, ...), a view
        coef, switch = self.coef, self._loss_switch
        if self.stacked:
            _, newlogprob, entropy, newvalue = self.agent(m["obs"], m["actions"])
            out = ppo.ppo_loss(newlogprob, m["logprobs"], m["advantages"], newvalue, m["values"], m["returns"], entropy,
                               clip_coef=coef["clip_coef"], vf_coef=coef["vf_coef"], ent_coef=coef["ent_coef"],
                               clip_vloss=switch["clip_vloss"], norm_adv=switch["norm_adv"], vf_clip_coef=coef["vf_clip_coef"])
        else:
            out = self._vmapped_loss(m)
        return self._step(out)

    def _vmapped_loss(self, m: dict) -> dict:
        # the switches go in as (P,) tensors (each member's a 0-d one under vmap: torch.where, no branch),
        # or stay Python bools where every member agrees
        switch = self._loss_switch
        swept = [name for name in ("clip_vloss", "norm_adv") if torch.is_tensor(switch[name])]

        def member_loss(params, buffers, obs, actions, logprobs, advantages, values, returns, clip, vf, ent, vclip, *on):
            _, newlogprob, entropy, newvalue = functional_call(self.template, (params, buffers), ("forward", obs, actions))
            flags = {**{n: switch[n] for n in ("clip_vloss", "norm_adv")}, **dict(zip(swept, on))}
            return ppo.ppo_loss(newlogprob, logprobs, advantages, newvalue, values, returns, entropy, clip_coef=clip,
                                vf_coef=vf, ent_coef=ent, vf_clip_coef=vclip, **flags)

        out = vmap(member_loss)(self._prefixed_params, self._prefixed_buffers, m["obs"], m["actions"], m["logprobs"],
                                m["advantages"], m["values"], m["returns"], self.coef["clip_coef"], self.coef["vf_coef"],
                                self.coef["ent_coef"], self.coef["vf_clip_coef"], *(switch[n] for n in swept))
        return out

    def _step(self, out: dict) -> dict:
        """Backward of the summed member losses, per-member clip and Adam step of the active members;
        then target_kl: a member whose approx_kl exceeds its own stops after this step. A member whose
        loss or gradient is non-finite, or whose Adam step would make its weights so, takes no step:
        it is marked diverged (``nonfinite`` and ``self.diverged``) and frozen from then on. Every op
        is per member row, so a NaN in one member's row never reaches another's."""
        self.optimizer.zero_grad()
        out["loss"].sum().backward()  # member p's loss reaches only member p's slices of the parameters
        grad = self.optimizer.flat_grad()  # (P, D): every parameter of a member in one row
        grad_norm = grad.norm(dim=1)  # detail 11, per member: torch.nn.utils.clip_grad_norm_'s global norm
        grad = grad * (self.coef["max_grad_norm"] / (grad_norm + 1e-6)).clamp(max=1.0).unsqueeze(1)
        active = self.active.clone()
        finite = torch.isfinite(out["loss"].detach()) & torch.isfinite(grad_norm)
        stepped = self.optimizer.step(grad, self.lr_now, active & finite)
        on = stepped.to(torch.float32)
        self._steps_run += on
        metrics = {k: v.detach() * on for k, v in out.items() if k != "loss"}  # a stopped member adds nothing
        metrics["grad_norm"] = grad_norm * on
        bad = active & ~stepped
        metrics["nonfinite"] = bad
        self.diverged |= bad
        self.active &= ~bad
        self.active &= ~(out["approx_kl"].detach() > self.coef["target_kl"])  # detail 12's early stop, per member
        if self.host_stop_check and self._idle_metrics is None:
            self._idle_metrics = {k: torch.zeros_like(v) for k, v in metrics.items()}
        if self.host_stop_check and self.device.type == "cpu":
            self._all_stopped = not bool(self.active.any())  # a free read on CPU: end the update when none is left
        return metrics

    # --- the iteration as three parts over static buffers (graphs.py's protocol) --------------
    def _part_advantages(self) -> None:
        self.explained_variance.copy_(self.advantages())

    def _part_update(self) -> None:
        out = self.update()
        if self.metrics is None:
            self.metrics = {k: torch.zeros_like(v) for k, v in out.items()}
        for k, v in out.items():
            self.metrics[k].copy_(v)

    def _build_parts(self) -> None:
        """The rollout, advantages and update callables: eager, or with ``cudagraphs`` each captured
        once as a CUDA graph and replayed (graphs.Replay), as a single run's iteration."""
        self.explained_variance = torch.zeros(self.members, dtype=torch.float32, device=self.device)
        self.metrics: Optional[dict] = None
        self._parts = (self.collect, self._part_advantages, self._part_update)
        if self.cfg.cudagraphs:
            from .graphs import Replay

            env_gen = getattr(self.env, "generator", None)
            generators = (env_gen,) if isinstance(env_gen, torch.Generator) and env_gen.device.type == "cuda" else ()
            pool = torch.cuda.graph_pool_handle()
            rollout = Replay(self.collect, self.device, generators=generators, pool=pool) if self.env.backend == "native" else self.collect
            self._parts = (rollout, Replay(self._part_advantages, self.device, pool=pool), Replay(self._part_update, self.device, pool=pool))

    def train_iteration(self) -> dict:
        """One iteration of every member. Returns per-member (P,) tensors: the update's loss terms,
        explained_variance, ep_return_sum, ep_length_sum, ep_count, and for Box actions action_std and
        action_clip_frac (copies: the parts' buffers are overwritten by the next iteration)."""
        anneal = self._loss_switch["anneal_lr"]
        if anneal is not False:  # detail 4, per member: one that does not anneal keeps its lr
            frac = 1.0 - self.iteration / self.num_iterations
            self.lr_now.copy_(frac * self._lr64 if anneal is True else torch.where(anneal, frac * self._lr64, self._lr64))
            self.scheduled_lrs = [frac * c.lr if c.anneal_lr else c.lr for c in self.configs]
        rollout, advantages, update = self._parts
        rollout()
        advantages()
        update()
        ro = self.rollout
        out = {k: v.clone() for k, v in self.metrics.items()}
        clip_vloss = self._loss_switch["clip_vloss"]
        if clip_vloss is False:  # as a single run's: blank, not a 0 that reads as "never clipped"
            out.pop("vf_clipfrac", None)
        elif clip_vloss is not True:  # swept: blank (NaN) for the members that do not clip
            out["vf_clipfrac"] = torch.where(clip_vloss, out["vf_clipfrac"], torch.full_like(out["vf_clipfrac"], math.nan))
        out.update(explained_variance=self.explained_variance.clone(), ep_return_sum=ro.ep_return_sum.clone(),
                   ep_length_sum=ro.ep_length_sum.clone(), ep_count=ro.ep_count.clone())
        # Box actions: each member's head std (P, 1, A) -> (P,) and its envs' clipped share of the rollout
        out.update(ppo.action_metrics(ro.actions, self.env.action_bounds, self.params.get("actor_logstd"), self.members))
        self.iteration += 1
        return out

    # --- what the envs returned ----------------------------------------------------------------
    def env_failures(self, member_names: Optional[Sequence[str]] = None) -> list:
        """NaN/inf in the last rollout's rewards or observations of members not yet diverged:
        [(member, message)], the message naming the field, the member, its env index and its step,
        as a single run's guard does (its first bad value). One host read per iteration, outside the
        parts (a CUDA graph cannot raise); the search runs only on failure. A member recorded as
        diverged (diverged_at) is not reported again: it acts on frozen weights, and its env may go on
        returning NaN.

        What a step returned is judged as the rollout kept it: the observation the member acts on next
        (a reset's where the episode ended), and, where the step ended an episode (dones), the final
        observation too. Without --norm-obs the rollout holds them raw and the message shows the env's
        values. With --norm-obs it holds them normalized (the hot loop keeps no raw copy), so the
        message says "normalized" and shows those, but for the last step's observation (next_obs,
        raw). An observation's NaN/inf enters its member's running statistics at that step, which
        makes that component NaN in every env of the member: with more than one env the env that
        returned it cannot be told, and the message says so instead of naming the first. (A final
        observation never enters them: its NaN is found in its own env; its inf is clipped to
        +-clip_obs and is not found.)"""
        from .envs.gym_adapter import check_env_cmd
        from .guards import first_bad, fmt_values

        ro, P = self.rollout, self.members
        T, PN = ro.raw_rewards.shape
        N = PN // P
        normalized = self.obs_norm is not None

        def rows_bad(x):  # (k, P*N, ...) -> (k, P*N) bool
            k = x.shape[0]
            return ~torch.isfinite(x.reshape(k, PN, -1)).all(-1) if x.dtype.is_floating_point else torch.zeros(k, PN, dtype=torch.bool, device=x.device)

        # row s of these (T + 1, P*N) masks: what each env returned with its s-th step of this rollout
        # (s = 0: the observation the rollout started from); ro.obs[s] is step s-1's next observation,
        # next_obs step T-1's, ro.final_obs[s-1] equals it where no episode ended (judged once, as it)
        none = torch.zeros(1, PN, dtype=torch.bool, device=ro.raw_rewards.device)
        fields = (("observation", torch.cat([rows_bad(ro.obs), rows_bad(self.next_obs.unsqueeze(0))])),
                  ("final observation", torch.cat([none, rows_bad(ro.final_obs) & ro.dones])),
                  ("reward", torch.cat([none, ~torch.isfinite(ro.raw_rewards)])))
        members_bad = torch.stack([bad.reshape(T + 1, P, N).any(2).any(0) for _, bad in fields]).any(0)
        if not bool(members_bad.any()):
            return []
        out = []
        for p in members_bad.nonzero()[:, 0].tolist():
            if self.diverged_at[p] is not None:  # diverged before this rollout (a NaN reward of this one froze it too:
                continue                         # its update's loss went NaN, but the env is the cause to name)
            own = [(name, bad[:, p * N:(p + 1) * N]) for name, bad in fields]
            s, field, n = first_bad(own)
            row = p * N + n
            step = (self.iteration - 1) * self.steps_per_member + s * N
            if field == "reward":
                got, raw = ro.raw_rewards[s - 1, row], True
            elif field == "final observation":
                got, raw = ro.final_obs[s - 1, row], not normalized
            else:
                got, raw = (self.next_obs[row], True) if s == T else (ro.obs[s, row], not normalized)
            name = f" ({member_names[p]})" if member_names else ""
            check = f"check the env's step() with: {check_env_cmd(self.cfg.env_id, self.cfg.env_kwargs)}"
            if field == "observation" and not raw and N > 1 and bool(own[0][1][s].all()):
                # every env's row went bad at once: the member's statistics took the value in (see above)
                member_obs = (ro.obs[s, p * N:(p + 1) * N]).reshape(N, -1)
                cols = (~torch.isfinite(member_obs)).all(0).nonzero()[:, 0].tolist()
                which = f" in component{'s' if len(cols) > 1 else ''} {', '.join(map(str, cols))}" if cols else ""
                out.append((p, f"non-finite observation{which} from at least one of the {N} envs of member {p}{name} at step "
                               f"{step:,} of that member (--norm-obs took it into the member's running statistics, so every "
                               f"env's normalized observation is non-finite there and neither the env nor the raw value is "
                               f"known); {check}"))
                continue
            label = field if raw else f"normalized {field}"
            if field == "observation" and s > 0 and bool(ro.dones[s - 1, row]) and not bool(own[1][1][s, n]):
                # the step ended the episode with a finite final observation: the bad one is the autoreset's reset()
                # (with --norm-obs that final observation was normalized with the NaN taken in, so step() stays named)
                out.append((p, f"non-finite {label} {fmt_values(got)} from env {n} of member {p}{name} at reset (after step "
                               f"{step:,} of that member); check the env's reset() with: "
                               f"{check_env_cmd(self.cfg.env_id, self.cfg.env_kwargs)}"))
                continue
            out.append((p, f"non-finite {label} {fmt_values(got)} from env {n} of member {p}{name} at step {step:,} "
                           f"of that member; {check}"))
        return out

    def mark_diverged(self, member: int, reason: str, iteration: Optional[int] = None) -> None:
        """Freeze ``member`` for good (population_run.py: a NaN/inf from its env, or a non-finite
        update that _step already froze), recording when and why."""
        iteration = self.iteration if iteration is None else iteration
        self.diverged[member] = True
        if self.diverged_at[member] is None:
            self.diverged_at[member] = {"iteration": int(iteration), "global_step": int(iteration * self.steps_per_member),
                                        "reason": str(reason)}

    # --- state (checkpoints; population_run.py writes and reads them) -------------------------
    def state_dict(self) -> dict:
        """Everything an iteration reads that a fresh Population of the same configs lacks: stacked
        parameters and buffers, the Adam state, the annealed learning rates, the iteration, the
        native env's state and generator, the last observation and the RNG streams."""
        from . import checkpoint as ckpt

        return {"params": {k: v.detach().clone() for k, v in self.params.items()},
                "buffers": {k: v.clone() for k, v in self.buffers.items()},
                "optimizer": self.optimizer.state_dict(), "lr_now": self.lr_now.clone(), "iteration": self.iteration,
                "env_backend": self.env.backend, "env": self.env.state_dict() if self.env.can_save_state else None,
                "next_obs": self.next_obs.clone(), "rng": ckpt.rng_state(),
                "obs_normalizer": self.obs_norm.state_dict() if self.obs_norm is not None else None,
                "reward_scaler": self.reward_scaler.state_dict() if self.reward_scaler is not None else None,
                "member_rng": [g.get_state() for g in self.member_generators or []],
                "diverged": self.diverged.clone(), "diverged_at": [None if d is None else dict(d) for d in self.diverged_at]}

    def load_state_dict(self, state: dict) -> None:
        """Put ``state_dict()``'s values back, copying into the existing tensors; ValueError naming
        the first piece that does not fit these configs."""
        from . import checkpoint as ckpt

        for kind, own in (("params", self.params), ("buffers", self.buffers)):
            got = state[kind]
            if got.keys() != own.keys():
                raise ValueError(f"{kind} {sorted(set(got) ^ set(own))[:3]} differ from this population's")
            for name, value in got.items():
                if value.shape != own[name].shape:
                    raise ValueError(f"{name} has shape {tuple(value.shape)}, this population's {tuple(own[name].shape)}")
                with torch.no_grad():
                    own[name].copy_(value)
        self.optimizer.load_state_dict(state["optimizer"])
        self.lr_now.copy_(state["lr_now"])
        for module, key in ((self.obs_norm, "obs_normalizer"), (self.reward_scaler, "reward_scaler")):
            if module is not None:
                module.load_state_dict(state[key])
        for g, st in zip(self.member_generators or [], state.get("member_rng", [])):
            g.set_state(st.cpu())
        # members frozen by a divergence (absent from checkpoints written before members could be)
        diverged, at = state.get("diverged"), state.get("diverged_at")
        if diverged is not None:
            if not torch.is_tensor(diverged) or diverged.shape != self.diverged.shape or diverged.dtype != torch.bool:
                raise ValueError(f"diverged is not a ({self.members},) bool tensor")
            if (not isinstance(at, list) or len(at) != self.members
                    or not all(d is None or (isinstance(d, dict) and isinstance(d.get("reason"), str)
                                             and all(isinstance(d.get(k), int) for k in ("iteration", "global_step"))) for d in at)):
                raise ValueError(f"diverged_at is not a list of {self.members} entries (None or iteration, global_step, reason)")
            self.diverged.copy_(diverged)
            self.diverged_at = [None if d is None else {k: d[k] for k in ("iteration", "global_step", "reason")} for d in at]
        self.iteration = int(state["iteration"])
        if state.get("env") is not None and self.env.can_save_state and state.get("env_backend") == self.env.backend:
            self.env.load_state_dict(state["env"])
            self.next_obs.copy_(state["next_obs"])
            ckpt.set_rng_state(state["rng"])
        else:  # Gymnasium envs cannot save their state: episodes restart, as for a single run (told once)
            print(f"proxima: note: {self.env.backend} envs cannot restore their state; the resumed population restarts "
                  "episodes", file=sys.stderr)
            ckpt.set_rng_state(state["rng"])
            # async workers' global RNGs too, before the reset that draws from them (as train_state.restore
            # does): else every resume's restarted episodes would draw the np.random numbers of the run's start
            reseed_workers = getattr(self.env, "reseed_workers", None)
            if reseed_workers is not None:
                reseed_workers(self.iteration)
            self.next_obs.copy_(self.env.reset(seed=self.cfg.seed + self.iteration))
            if self.obs_norm is not None:
                saved = self._statistics_now()
                self.obs_norm.count_reset(self.next_obs)
                self._keep_frozen_statistics(saved)  # a diverged member's statistics stay its last finite ones
            if self.reward_scaler is not None:  # new episodes: their discounted returns start at 0
                self.reward_scaler.returns.zero_()

    # --- evaluation of every member at once --------------------------------------------------------
    @torch.no_grad()
    def evaluate_members(self, episodes: int, seeds: Sequence[int], max_steps: Optional[int] = None) -> Optional[list]:
        """What ``evaluate.evaluate`` returns for each member's policy (``episodes`` deterministic
        episodes, one per env, env seed ``seeds[p]``), computed in one batched env of P x episodes
        rows whose block p draws as a lone eval env seeded ``seeds[p]`` would, with the stacked
        agent acting for all: one evaluation's cost instead of P. None where that is not possible
        (an encoder agent, an env without per-member streams): evaluate members one by one then.
        That is decided before any env is built: for a Gymnasium or Atari backend no env is made here."""
        if len(seeds) != self.members:
            raise ValueError(f"evaluate_members: {len(seeds)} seeds for {self.members} members")
        if not self.stacked:
            return None
        # the eval env resolves to the training env's backend and class (same id, backend, kwargs):
        # asking the training env spares building P x E envs (with --vector async, P x E worker
        # processes) only to throw them away when they are not native
        if self.env.backend != "native" or not getattr(self.env, "supports_member_streams", False):
            return None
        from .evaluate import MAX_STEPS, first_episodes, summarize

        P, E = self.members, episodes
        max_steps = MAX_STEPS if max_steps is None else max_steps
        env = make_env(self.cfg.env_id, P * E, self.device, self.cfg.backend, self.cfg.vector, seed=int(seeds[0]),
                       training=False, env_kwargs=self.cfg.env_kwargs)
        try:
            if env.backend != "native" or not env.use_member_streams(list(seeds)):
                return None
            env.check_actions = False  # actions from the policies, as evaluate's: no host read a step to check them
            obs = env.reset()
            bounds = env.action_bounds

            def act(obs: torch.Tensor) -> torch.Tensor:
                if self.obs_norm is not None:  # frozen, each member's own statistics
                    obs = self.obs_norm(obs, update=False)
                action = self.agent.act(obs.reshape(P, E, *obs.shape[1:]), deterministic=True)
                action = action.reshape(P * E, *action.shape[2:])
                # as Policy.act: the env gets the action clipped to its bounds
                return action if bounds is None else torch.clamp(action, bounds[0], bounds[1])

            # a NaN/inf names the member and its env, not the batched env's row p * E + e
            returns, lengths, finished = first_episodes(env, obs, act, max_steps, env_id=self.cfg.env_id,
                                                        env_kwargs=self.cfg.env_kwargs,
                                                        env_name=lambda n: f"member {n // E} env {n % E}")
        finally:
            env.close()
        rows = [slice(p * E, (p + 1) * E) for p in range(P)]
        # each member's eval.json records its seed and the backend built, as evaluate() records them one by one
        return [summarize(self.cfg.env_id, returns[r], lengths[r], True, finished[r], max_steps, seed=int(seeds[p]),
                          backend=env.backend) for p, r in enumerate(rows)]

    # --- members as plain Agents ----------------------------------------------------------------
    def member_obs_normalizer(self, index: int) -> Optional[ObsNormalizer]:
        """Member ``index``'s observation normalizer as a single run's (None without --norm-obs)."""
        return self.obs_norm.member(index) if self.obs_norm is not None else None

    def member_agent(self, index: int) -> Agent:
        """A plain Agent holding member ``index``'s current parameters (for evaluation and export)."""
        agent = copy.deepcopy(self.agent_template)
        agent.load_state_dict(self.member_state_dict(index))
        return agent

    def member_state_dict(self, index: int) -> dict:
        """``member_agent(index).state_dict()`` (the same keys, in its order, and values) without
        building the Agent: a population checkpoint saves P of them, and P deep copies of the template
        took most of a large population's save."""
        if self._member_keys is None:
            self._member_keys = list(self.agent_template.state_dict())
        stacked = {**self.params, **self.buffers}
        return {k: stacked[k][index].detach().clone() for k in self._member_keys}

    def close(self) -> None:
        self.env.close()
        if getattr(self.cfg, "flush_denormal", False):  # as Trainer.close: FTZ is off by default
            torch.set_flush_denormal(False)


def refuse_shared_env_stream(cfg: PPOConfig, seeds: Sequence[int], device: torch.device) -> None:
    """EnvError unless a native env with member streams on leaves ``self.generator`` alone over a reset and a
    step: check-env's 'member streams' check, on a probe env of two rows (milliseconds, the global RNGs put
    back, so the members draw what they would have). An env that draws from it directly while ``supports_member_streams`` says it does not gives every
    member one stream: member k silently steps through other episodes than ``--seed k`` alone, and the note
    that says members share a stream is not printed. Nor may the reset and step draw from torch's global RNG
    (the CPU's, and the device's on CUDA): reset(seed) seeds none of it and every member shares it, so no
    member would replay its single run (check-env's 'global rng')."""
    import random

    import numpy as np

    from .envs.checker import native_actions

    # the global streams the members' runs go on to draw from, as seed_everything left them (the CPU's, and
    # the env's own GPU's on CUDA: forking every GPU's would create a context on each)
    python_state, numpy_state = random.getstate(), np.random.get_state()
    cuda = device.type == "cuda"
    with torch.random.fork_rng(devices=[device] if cuda else []):
        probe = make_env(cfg.env_id, 2, device, cfg.backend, cfg.vector, seed=int(seeds[0]), training=False,
                         env_kwargs=cfg.env_kwargs)
        try:
            if not probe.use_member_streams(list(seeds[:2])):
                return
            before = probe.generator.get_state()
            global_before = [torch.get_rng_state()] + ([torch.cuda.get_rng_state(device)] if cuda else [])
            probe.reset()
            probe.step(native_actions(probe.single_action_space, 2).to(device))
            drew = not torch.equal(before, probe.generator.get_state())
            global_after = [torch.get_rng_state()] + ([torch.cuda.get_rng_state(device)] if cuda else [])
            drew_global = any(not torch.equal(a, b) for a, b in zip(global_before, global_after))
        finally:
            probe.close()
            random.setstate(python_state)
            np.random.set_state(numpy_state)
    if drew_global:
        raise EnvError(f"env '{cfg.env_id}' draws from torch's global random stream in _dynamics/_sample_initial_state: members "
                       "of a population would not equal their single runs; draw through self._uniform / self._normal / "
                       "self._randint (docs/native_envs.md)")
    if drew:
        raise EnvError(f"env '{cfg.env_id}': with --seeds its reset() or step() drew from self.generator, so every member "
                       "would share one random stream and member k would not step through the episodes of --seed k "
                       "alone; draw through self._uniform (each member's rows from its own stream), or set "
                       f"supports_member_streams = False on {type(probe).__name__} (members then share one stream, and a "
                       f"note says so); `proxima check-env {cfg.env_id}` finds the same")


class _NoDraw:
    """Stands for a stopped member's generator in member_permutation: its rows' order, no draw."""


_NO_DRAW = _NoDraw()


def check_members(configs: Sequence[PPOConfig], resume: bool = False, python: bool = False) -> None:
    """Raise ConfigError when members differ in a field that is not per-member, or ask for what a
    population does not support yet (one line naming the flag; ``python``: a member's refused value as
    validate's Python caller's line, ``PPOConfig.gamma = 2.0``)."""
    base = configs[0]
    if len({c.clip_vloss for c in configs}) > 1:  # before validate's line, which names a --no-clip-vloss not typed
        _refuse_unclipped_range([c.vf_clip_coef for c in configs if not c.clip_vloss])
    for c in configs:
        try:
            validate(c, resume=resume, python=python)  # a resume's refusal says what a resume may change
        except ConfigError as e:  # a swept value's refusal names --sweep, which the user typed, not --gamma
            name = str(e).partition(" ")[0][2:].replace("-", "_")
            if str(e).startswith("--") and name in PER_MEMBER_FIELDS and len({repr(getattr(o, name)) for o in configs}) > 1:
                raise ConfigError(f"--sweep {name}: value {getattr(c, name)!r}: {str(e).partition(': ')[2]}") from None
            raise
    for f in dataclasses.fields(PPOConfig):
        if f.name in _MEMBER_OWN:
            continue
        values = {repr(getattr(c, f.name)) for c in configs}
        if len(values) > 1:
            raise ConfigError(f"--sweep {f.name}: {not_sweepable_why(f.name)}; "
                              f"only {', '.join(PER_MEMBER_FIELDS)} can differ between members")
    switched = unsupported_switches(base)
    if switched:
        name, why = switched[0]
        if python:  # train_population(PPOConfig(init_from=...), seeds=...): the field the script set, not a flag
            raise ConfigError(f"PPOConfig.{name} = {getattr(base, name)!r}: not supported with train_population's "
                              f"seeds/sweep ({why}); leave it at {UNSUPPORTED[name][0]!r}")
        raise ConfigError(f"--{name.replace('_', '-')} is not supported with --seeds/--sweep ({why}); drop it")
    seeds = [(c.seed, tuple(getattr(c, n) for n in PER_MEMBER_FIELDS)) for c in configs]
    if len(set(seeds)) != len(seeds):
        raise ConfigError("--seeds: two members have the same seed and settings; give distinct seeds")


#: switches a population does not run (yet): field -> (its off value, why); a population refuses
#: them rather than train without them (check_members; on resume, population_run.resume_population)
UNSUPPORTED = {
    "compile": (False, "not wired for populations yet"),
    "amp": ("none", "not wired for populations yet"),
    "debug_checks": (False, "not wired for populations yet"),
    "eval_every": (0, "no periodic evaluation or best.pt for members yet; `proxima eval RUN` evaluates every member"),
    "plot": (False, "`proxima plot RUN` or `proxima report RUN` draws the members' curves"),
    "init_from": (None, "not wired for populations yet: members start from fresh networks"),
}


def unsupported_switches(cfg: PPOConfig) -> list:
    """[(field, why)] of the UNSUPPORTED switches ``cfg`` turns on."""
    return [(name, why) for name, (off, why) in UNSUPPORTED.items() if getattr(cfg, name) != off]


def member_configs(base: PPOConfig, seeds: Sequence[int], sweep: Optional[dict] = None) -> list:
    """The members of ``--seeds`` crossed with ``--sweep``: settings outer, seeds inner.

    sweep: {field: [values]} of PER_MEMBER_FIELDS (checked here); every combination of values is
    one setting, trained with every seed. Each member keeps ``base``'s record of the values a preset
    or --config file set (config.source_of), which dataclasses.replace drops, so a refusal or note
    names a preset's or file's value for a member as it does for a single run."""
    import itertools

    from .config import unknown_attribute

    refused = unknown_attribute(base)  # dataclasses.replace would drop it unread, as train() refuses it
    if refused is not None:
        raise refused
    sweep = dict(sweep or {})
    for name in sweep:
        check_sweep_field(name)
    if False in sweep.get("clip_vloss", ()):  # before validate's line, which names a --no-clip-vloss not typed
        _refuse_unclipped_range(sweep.get("vf_clip_coef", [base.vf_clip_coef]), *_range_given(base, sweep))
    names = list(sweep)
    sources = getattr(base, "_sources", None)
    out = []
    for combo in itertools.product(*(sweep[n] for n in names)) if names else [()]:
        for seed in seeds:
            member = dataclasses.replace(base, seed=int(seed), **dict(zip(names, combo)))
            if sources:  # a swept value differs from the recorded one, so source_of stops naming the file for it
                member._sources = dict(sources)
            if getattr(base, "_preset", None) is not None:  # --preset none, which meta.json records (preset_applied)
                member._preset = base._preset
            out.append(member)
    return out


def _refuse_unclipped_range(ranges: Sequence, given: Optional[str] = None, fix: Optional[str] = None) -> None:
    """ConfigError when a member that --sweep clip_vloss turns off would get a vf_clip_coef (``ranges``:
    those members' values): the range of a clip it does not make, which a single run refuses too.
    ``given``/``fix``: where the range came from and what to do there (_range_given), else the value alone."""
    values = [r for r in ranges if r is not None]
    if values:
        from .signals import from_python

        python = from_python()
        off, on = ("clip_vloss=False", "clip_vloss=True") if python else ("clip_vloss=false", "clip_vloss=true")
        given = given or f"vf_clip_coef {_fmt(values[0])}"
        fix = fix or ("set vf_clip_coef=None" if python else "drop --vf-clip-coef")
        raise ConfigError(f"{'sweep[' + repr('clip_vloss') + ']' if python else '--sweep clip_vloss'}: {given} sets the range "
                          f"of the value clip that the {off} members turn off; {fix} (the clip then takes clip_coef, as "
                          f"CleanRL's) or sweep vf_clip_coef in a population of {on} alone")


def _range_given(base: PPOConfig, sweep: dict) -> tuple:
    """(where the vf_clip_coef that clip_vloss=false members would get came from, what to do there): the
    sweep, a --config file or preset (config.source_of), the flag typed or, from Python, the config's field;
    each named as its user wrote it, never a --vf-clip-coef that came from vfc.yaml."""
    from .config import source_of
    from .signals import from_python

    python = from_python()
    if "vf_clip_coef" in sweep:
        values = sweep["vf_clip_coef"]
        if python:
            return f"sweep={{'vf_clip_coef': {values!r}}}", "drop vf_clip_coef from the sweep"
        return f"--sweep vf_clip_coef={','.join('none' if v is None else _fmt(v) for v in values)}", \
            "drop that --sweep"
    value, source = _fmt(base.vf_clip_coef), source_of(base, "vf_clip_coef")
    if source is not None and source.startswith("preset "):
        return f"{source} (vf_clip_coef {value})", "set vf_clip_coef=None" if python else "add --vf-clip-coef none"
    if source is not None:
        return (f"{'' if python else '--config '}{source} (vf_clip_coef {value})",
                "set vf_clip_coef=None" if python else f"drop vf_clip_coef from {source}")
    if python:
        return f"PPOConfig.vf_clip_coef = {value}", "leave vf_clip_coef at None"
    return f"--vf-clip-coef {value}", "drop --vf-clip-coef"


def check_sweep_field(name: str) -> None:
    """One line for a field that cannot be swept in one batched program."""
    from .config import FIELDS

    if name not in FIELDS:
        raise ConfigError(f"--sweep {name}: not a config field; sweepable: {', '.join(PER_MEMBER_FIELDS)}")
    if name == "seed":
        raise ConfigError("--sweep seed: give seeds with --seeds (e.g. --seeds 1-8)")
    if name not in PER_MEMBER_FIELDS:
        raise ConfigError(f"--sweep {name}: {not_sweepable_why(name)}; "
                          f"sweepable: {', '.join(PER_MEMBER_FIELDS)}; run one population per value of {name}")


#: fields no member can have its own value of, which change no shape: settings of the one process that
#: trains every member, and the single run's early stop, which a population does not make
_RUN_WIDE = {"device", "threads", "flush_denormal", "keep_host_memory", "deterministic", "compile", "compile_mode",
             "cudagraphs", "vector", "amp", "run_dir", "init_from", "checkpoint_every", "checkpoint_minutes", "keep_checkpoints",
             "eval_episodes", "eval_every", "progress", "debug_checks", "plot", "stop_return", "stop_episodes"}
#: fields that change no shape either, but whose one value (one normalizer module, one GAE cut, one clamp)
#: the population applies to all members: they could be per member, and are not yet
_SHARED_YET = {"bootstrap_truncation", "norm_obs", "norm_reward", "clip_obs", "clip_reward", "log_std_init"}


def not_sweepable_why(name: str) -> str:
    """Why field ``name`` (no PER_MEMBER_FIELDS) is one value for every member, in a few words."""
    if name in _RUN_WIDE:
        return "is a setting of the whole run (one process trains every member), not of a member"
    if name in _SHARED_YET:
        return "is one setting for every member of a population (not per member yet)"
    if name in ("total_timesteps", "update_epochs"):  # no shape: the iterations, the epochs of each update
        return ("changes the shapes or the env of the batched program (here: the length of its loop, which every "
                "member runs together)")
    return "changes the shapes or the env of the batched program"  # the env and its rows, the buffers, the network


def estimate_bytes(cfg: PPOConfig, members: int, obs_size: int, act_size: int, native: bool, layout=None) -> int:
    """Lower bound of a population's memory: sizing.estimate_bytes of its P*N env rows, plus P
    members' sizing.network_bytes (each member's weights with gradients and Adam state, and its
    minibatch's activations). ``layout`` (the probe's ObsLayout) costs the obs as the rollout
    holds it (uint8 pixels at a byte) and the network as the config builds it (the CNN on an
    image), as sizing.check_fits does for a single run; None: float32 obs, MLPs."""
    from . import sizing

    rows = dataclasses.replace(cfg, num_envs=members * cfg.num_envs)
    return (sizing.estimate_bytes(rows, obs_size, act_size, native, layout)
            + members * sizing.network_bytes(cfg, obs_size, act_size, layout))


#: host memory a member takes beyond estimate_bytes, whatever the device: its Python objects, logger,
#: directory and checkpoint pieces. A lower bound of the ~0.66 MB measured (CartPole, --num-envs 2:
#: 2,000 members peaked at 2.0 GB RSS, one at 0.27 GB, estimate_bytes counting 0.22 MB a member);
#: without it 100,001 members were costed at 22 GB (~88 GB at the rate measured), taken as fitting in
#: 22.6 GB free, and the run sat silent for minutes building them
MEMBER_HOST_BYTES = 512 * 1024


#: bytes a member adds to the population checkpoint beside its weights and Adam state, and to its own
#: checkpoint beside its weights, as measured (CartPole, 64x64 MLPs: 121 KB and 42.7 KB a member, of which
#: 110 KB and 36.6 KB weights): its two RNG states (torch's, 5,056 bytes each) and its pickled config
MEMBER_CHECKPOINT_EXTRA = 11_000
MEMBER_FILE_EXTRA = 6_000
#: the population checkpoint's own part (global RNG states, versions, spaces): ~28 KB measured
POPULATION_CHECKPOINT_BASE = 28_000


def checkpoint_bytes(cfg: PPOConfig, members: int, obs_size: int, act_size: int, layout=None) -> int:
    """About the bytes one save writes (population_run.save_population): the population checkpoint
    (each member's weights and Adam's two moments, its RNG states, its next observations) plus each
    member's own checkpoint (its weights: what ``proxima eval`` of a member loads)."""
    from . import sizing

    params = sizing.network_terms(cfg, obs_size, act_size, layout)[0] // 16  # 4 float32 copies there
    next_obs = cfg.num_envs * obs_size * sizing.obs_bytes(cfg, layout)
    norm = 2 * 8 * obs_size if cfg.norm_obs else 0  # running mean and var, float64
    per_member = (3 * 4 * params + next_obs + norm + MEMBER_CHECKPOINT_EXTRA) + (4 * params + norm + MEMBER_FILE_EXTRA)
    return POPULATION_CHECKPOINT_BASE + members * per_member


def checkpoints_kept(cfg: PPOConfig) -> int:
    """How many checkpoints a run of ``cfg`` ends holding: --keep-checkpoints K (0: every one written,
    each --checkpoint-every iterations and at the end; --checkpoint-minutes may add more), at most one
    an iteration."""
    from .config import num_iterations

    iterations = max(num_iterations(cfg), 1)
    every = cfg.checkpoint_every
    written = (iterations // every if every else 0) + (1 if not every or iterations % every else 0)
    if cfg.checkpoint_minutes > 0:  # timed ones too: up to one an iteration
        written = iterations
    return min(cfg.keep_checkpoints, written) if cfg.keep_checkpoints > 0 else written


def _memory_need(cfg: PPOConfig, members: int, device: torch.device, sizes) -> tuple:
    """(bytes needed on ``device``, of which the evaluation's envs, host bytes beside) that
    check_population_fits weighs: on the CPU the members' host state is part of the first."""
    from .sizing import eval_bytes

    host = members * MEMBER_HOST_BYTES
    obs_size, act_size, native = sizes
    evals = eval_bytes(cfg, obs_size, native)
    need = estimate_bytes(cfg, members, obs_size, act_size, native, getattr(sizes, "layout", None)) + evals
    return (need + host, evals, 0) if device.type == "cpu" else (need, evals, host)


def population_estimate(cfg: PPOConfig, members: int, device: torch.device, probe=None, run_dir=None) -> dict:
    """What a population of ``members`` like ``cfg`` takes, for a dry run to show (check_population_fits
    refuses on the same numbers): memory_bytes (a lower bound) on ``device`` against memory_free_bytes
    there (None: unknown), on a GPU host_memory_bytes against host_free_bytes too; checkpoint_bytes
    (about what one save writes: checkpoint_bytes), checkpoints_kept and kept_checkpoint_bytes (what
    those hold at the end), disk_free_bytes where ``run_dir`` would be (None: unknown)."""
    from .diskspace import free_bytes
    from .sizing import free_memory

    sizes = probe() if probe is not None else (1, 1, True)
    need, _, host = _memory_need(cfg, members, device, sizes)
    per_save = checkpoint_bytes(cfg, members, sizes[0], sizes[1], getattr(sizes, "layout", None))
    kept = checkpoints_kept(cfg)
    out = {"device": str(device), "memory_bytes": need, "memory_free_bytes": free_memory(device)}
    if device.type != "cpu":
        out.update(host_memory_bytes=host, host_free_bytes=free_memory(torch.device("cpu")))
    out.update(checkpoint_bytes=per_save, checkpoints_kept=kept, kept_checkpoint_bytes=kept * per_save,
               disk_free_bytes=free_bytes(run_dir) if run_dir is not None else None)
    return out


def estimate_line(estimate: dict, members: int, keep_checkpoints: int) -> str:
    """population_estimate as the note a dry run prints on stderr."""
    from .diskspace import human_bytes

    def free(key: str) -> str:
        return f"{human_bytes(estimate[key])} available" if estimate.get(key) is not None else "available memory unknown"

    host = (f", and ~{human_bytes(estimate['host_memory_bytes'])} of host memory ({free('host_free_bytes')})"
            if "host_memory_bytes" in estimate else "")
    kept = estimate["checkpoints_kept"]
    keep = f"--keep-checkpoints {keep_checkpoints}" if keep_checkpoints > 0 else "--keep-checkpoints 0 keeps every one"
    disk = f"; {human_bytes(estimate['disk_free_bytes'])} free there" if estimate.get("disk_free_bytes") is not None else ""
    return (f"proxima: estimate: {members:,} member{'' if members == 1 else 's'} need at least "
            f"~{human_bytes(estimate['memory_bytes'])} of memory on {estimate['device']} ({free('memory_free_bytes')}){host}; "
            f"each checkpoint writes ~{human_bytes(estimate['checkpoint_bytes'])} to disk (the population's file and each "
            f"member's weights), up to ~{human_bytes(estimate['kept_checkpoint_bytes'])} for the {kept:,} kept "
            f"({keep}){disk}")


def check_population_fits(cfg: PPOConfig, members: int, device: torch.device, probe=None) -> None:
    """Refuse a population that surely does not fit in ``device``'s free memory, before allocating
    (and, on a GPU, whose members' host state does not fit in the host's: MEMBER_HOST_BYTES each).

    The end-of-run evaluation's envs (sizing.eval_bytes: E = --eval-episodes) count once: it runs
    while the population is held, member by member (E envs at a time), or, where it can, all members
    in one native env of P x E rows (Population.evaluate_members): at least E envs either way."""
    from .diskspace import human_bytes
    from .sizing import free_memory

    host = members * MEMBER_HOST_BYTES
    if device.type != "cpu":
        host_free = free_memory(torch.device("cpu"))
        if host_free is not None and host > host_free:
            raise ConfigError(f"--seeds/--sweep: {members:,} members need ~{human_bytes(host)} of host memory (each "
                              f"member's own state, logs and checkpoint pieces), {human_bytes(host_free)} free; train "
                              "fewer members at once")
    free = free_memory(device)
    if free is None:
        return
    need, evals, _ = _memory_need(cfg, members, device, probe() if probe is not None else (1, 1, True))
    if need > free and evals >= need / 2:  # the evaluation's envs are what does not fit (--eval-episodes 10**11)
        raise ConfigError(f"--eval-episodes {cfg.eval_episodes:,}: the evaluation builds one env per episode, ~{human_bytes(evals)} "
                          f"on {device} (~{human_bytes(need)} in all), {human_bytes(free)} free; lower --eval-episodes")
    if need > free:
        raise ConfigError(f"--seeds/--sweep: {members:,} members x {cfg.num_envs} envs x {cfg.num_steps} steps needs "
                          f"~{human_bytes(need)} on {device}, {human_bytes(free)} free; train fewer members at once "
                          "or lower --num-envs/--num-steps")


#: the most members --seeds may name (memory is checked later, per member: sizing.check_fits)
MAX_MEMBERS = 1_000_000


def parse_seeds(spec: str) -> list:
    """``1-16`` -> [1..16]; ``1,5,9`` -> [1, 5, 9]; ``3`` -> [3]; pieces may mix (``1-4,9``)."""
    from .config import MAX_SEED

    seeds = []
    for piece in str(spec).split(","):
        piece = piece.strip()
        try:
            if "-" in piece[1:]:
                lo, hi = piece.split("-", 1) if not piece.startswith("-") else (piece, "")
                lo, hi = int(lo), int(hi)
                if hi < lo:
                    raise ValueError
                if len(seeds) + hi - lo + 1 > MAX_MEMBERS:  # before a list of billions is built
                    raise ConfigError(f"--seeds {spec!r}: {len(seeds) + hi - lo + 1:,} seeds; a population holds at most {MAX_MEMBERS:,}")
                seeds.extend(range(lo, hi + 1))
            else:
                seeds.append(int(piece))
        except ConfigError:
            raise
        except ValueError:
            raise ConfigError(f"--seeds {spec!r}: expected seeds like 1-16 or 1,5,9 (a range low-high, ascending)") from None
    bad = [s for s in seeds if not 0 <= s <= MAX_SEED]
    if bad:
        raise ConfigError(f"--seeds {spec!r}: seed {bad[0]} is outside 0..{MAX_SEED:,}")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {spec!r}: a seed is repeated")
    return seeds


def parse_sweep(items: Sequence[str]) -> dict:
    """[``lr=1e-3,3e-4``, ``ent_coef=0,0.01``] -> {"lr": [0.001, 0.0003], "ent_coef": [0.0, 0.01]} (typed, checked)."""
    from .config import ALIASES, coerce

    out: dict = {}
    for item in items:
        name, sep, values = str(item).partition("=")
        name = name.strip().lstrip("-").replace("-", "_")
        name = ALIASES.get(name, name)  # learning_rate=1e-3,3e-4 is lr's, as --learning-rate is --lr
        if not sep or not values.strip():
            raise ConfigError(f"--sweep {item!r}: expected FIELD=v1,v2 (e.g. --sweep lr=1e-3,3e-4)")
        check_sweep_field(name)
        if name in out:
            raise ConfigError(f"--sweep {name}: given twice; list all its values in one --sweep {name}=v1,v2")
        texts = [v.strip() for v in values.split(",")]
        vals = []
        for text in texts:
            try:
                vals.append(coerce(name, text, source="flag"))
            except ConfigError as e:  # coerce names the flag --lr, which the user did not type: name the --sweep item
                flag = f"--{name.replace('_', '-')} {text!r}: "
                why = str(e)[len(flag):] if str(e).startswith(flag) else str(e)
                raise ConfigError(f"--sweep {item}: {text!r}: {why}") from None
        if len(set(vals)) != len(vals):
            raise ConfigError(f"--sweep {name}: a value is repeated")
        # labels, member directory names and the closing summary print values with 6 significant digits:
        # two values printed alike would read as one setting
        printed: dict = {}
        for text, v in zip(texts, vals):
            if _fmt(v) in printed:
                raise ConfigError(f"--sweep {name}: {printed[_fmt(v)]} and {text} print the same ({name}={_fmt(v)}); "
                                  "give values that differ in 6 significant digits")
            printed[_fmt(v)] = text
        out[name] = vals
    return out


def _fmt(value) -> str:
    """A swept value as labels, member directory names and --sweep spell it: ``0.001``, ``true``."""
    if isinstance(value, bool):  # --sweep norm_adv=true,false, not Python's True
        return "true" if value else "false"
    return f"{value:g}" if isinstance(value, float) and math.isfinite(value) else str(value)
