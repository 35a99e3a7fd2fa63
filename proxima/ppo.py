"""The PPO algorithm, in reading order: collect_rollout, compute_gae, ppo_loss, update.

Everything here stays on ``rollout.device``: no ``.item()``, ``.cpu()`` or numpy, no per-env Python
loops (the only loops are over time steps, epochs and minibatches). Metrics come back as tensors
that the trainer reads once per iteration. Numbered comments cite docs/ppo_notes.md "Core details".
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from .rollout import Rollout


# ---------------------------------------------------------------------------------------------
# 1. Rollout: T steps x N envs, written in place (detail 1: fixed-length segments)
# ---------------------------------------------------------------------------------------------
@torch.no_grad()
def collect_rollout(env, policy_step: Callable, rollout: Rollout, next_obs: torch.Tensor,
                    obs_normalizer=None, reward_scaler=None) -> torch.Tensor:
    """Fill ``rollout`` with T = rollout.num_steps steps of every env; return the last obs.

    policy_step(obs[N, *obs_shape]) -> (action[N, *act_shape], logprob[N], value[N]); obs as the
    network sees it (normalized when ``obs_normalizer`` is given). ``next_obs`` is the raw obs the
    previous rollout ended on. Episode statistics are summed into ``rollout.ep_*`` tensors.

    The normalizer counts each observation once, as Gymnasium's NormalizeObservation does: every
    obs an env step returns is counted here, and ``next_obs`` was counted by the step that returned
    it (or, after a reset, by ``ObsNormalizer.count_reset``), so the first obs is normalized frozen.
    """
    rollout.reset_stats()
    bounds = env.action_bounds  # (low, high) for Box actions, else None
    # the env takes its space's values, the agent acts from 0: a Discrete/MultiDiscrete start is added
    # to what the env gets (None when every start is 0, as in the native envs: nothing added)
    offset = getattr(env, "action_offset", None)  # a duck-typed env without one takes the indices
    obs = obs_normalizer(next_obs, update=False) if obs_normalizer is not None else next_obs
    for t in range(rollout.num_steps):
        action, logprob, value = policy_step(obs)
        rollout.obs[t] = obs
        rollout.actions[t] = action
        rollout.logprobs[t] = logprob
        rollout.values[t] = value
        # Box actions: the env gets the sample clipped to the bounds, the rollout keeps the
        # unclipped one (its log-prob is the Normal density of what was sampled). Clipping here,
        # not in each env: native MountainCarContinuous, like Gymnasium's, charges the action
        # penalty on the action as given.
        env_action = action if bounds is None else torch.clamp(action, bounds[0], bounds[1])
        if offset is not None:
            env_action = env_action + offset
        raw_next, reward, terminated, truncated, info = env.step(env_action)
        done = terminated | truncated
        rollout.raw_rewards[t] = reward
        rollout.rewards[t] = reward_scaler(reward, done) if reward_scaler is not None else reward
        rollout.terminated[t] = terminated
        rollout.dones[t] = done
        # V(final_obs) bootstraps truncated episodes; evaluated in one batch after the loop
        final = info["final_obs"]
        obs = obs_normalizer(raw_next) if obs_normalizer is not None else raw_next
        rollout.final_obs[t] = obs_normalizer(final, update=False) if obs_normalizer is not None else final
        rollout.add_episode_stats(info["episode_return"], info["episode_length"], done)
        next_obs = raw_next
    return next_obs


# ---------------------------------------------------------------------------------------------
# 2. GAE (detail 5), time-major, terminated and done kept apart
# ---------------------------------------------------------------------------------------------
def next_values(values: torch.Tensor, final_obs: torch.Tensor, dones: torch.Tensor, terminated: torch.Tensor,
                value_of: Callable, max_rows: Optional[int] = None) -> torch.Tensor:
    """V(s_{t+1}) of every step, (T, N), for compute_gae.

    values: (T, N) V(s_t) as the rollout computed it; final_obs: (T, N, *obs_shape) the obs that
    followed step t; dones, terminated: (T, N) bool, ``terminated`` as compute_gae takes it (no
    bootstrap there, so the value is unused); value_of(obs (k, N, *obs_shape)) -> (k, N).
    max_rows: the most rows one value_of call may take (the callers pass the update's
    minibatch rows); None: no bound.

    On the CPU a running episode's next state is the next step's obs, whose value the rollout has
    already computed (values[t + 1]: the same network on the same obs, equal within float
    rounding; MKL's result for a row can depend on where in a batch the row sits). So the critic runs again only on the last step's obs and on the steps where an
    episode was truncated (its final obs, not the reset obs that follows), k batches of N rows,
    a shape the host knows on the CPU. At 4,096 CartPole envs x 16 steps this skips a 65,536-row
    critic pass, ~10 ms of a ~400 ms iteration. Elsewhere (CUDA) every step's final obs is
    evaluated, in chunks of whole steps (``values_in_chunks``): fixed shapes, which a CUDA graph needs.
    """
    if values.device.type != "cpu":
        return values_in_chunks(final_obs, value_of, max_rows)
    out = torch.empty_like(values)
    out[-1:] = value_of(final_obs[-1:])
    if values.shape[0] > 1:
        out[:-1] = values[1:]
        cut = dones[:-1] & ~terminated[:-1]  # (T-1, N): truncated before the last step, bootstrapped
        steps = cut.any(1).nonzero().squeeze(1)
        if steps.numel():
            # as many steps as were cut, up to all T-1 with staggered time limits: chunked as off the CPU
            # (sizing counts one chunk); each row's value is the same in any batch here (the MLP kernel)
            out[steps] = torch.where(cut[steps], values_in_chunks(final_obs[steps], value_of, max_rows), out[steps])
    return out


def bootstrap_steps(num_steps: int, rows_per_step: int, max_rows: Optional[int]) -> int:
    """Steps per value_of call of ``values_in_chunks``: the most whole steps of ``rows_per_step``
    rows within ``max_rows`` (all of them when None), at least one. sizing.py counts one such chunk."""
    if max_rows is None:
        return num_steps
    return max(1, min(num_steps, max_rows // max(rows_per_step, 1)))


def values_in_chunks(final_obs: torch.Tensor, value_of: Callable, max_rows: Optional[int]) -> torch.Tensor:
    """value_of over every step of final_obs (T, N, *obs_shape) -> (T, N), k whole steps a call
    (``bootstrap_steps``). One pass over all T x N rows would hold the critic's activations for the
    whole batch at once (a Nature CNN's on 84x84x4 frames: ~195 KiB a row, ~24 GiB at 1,024 envs x
    128 steps), far more than the one minibatch the memory check counts. The chunks' shapes come
    from T, N and max_rows alone (the last one may be shorter, the same every iteration): no host
    read, so a captured CUDA graph replays them. Equal to one value_of call over all steps bit for
    bit where value_of's result for a row does not depend on the batch around it; a BLAS that picks
    another kernel for another batch size rounds within float precision."""
    num_steps = final_obs.shape[0]
    k = bootstrap_steps(num_steps, final_obs.shape[1], max_rows)
    if k >= num_steps:
        return value_of(final_obs)
    return torch.cat([value_of(final_obs[start:start + k]) for start in range(0, num_steps, k)])


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor,
                terminated: torch.Tensor, done: torch.Tensor, gamma: float, lam: float):
    """Generalized advantage estimation.

    Args (all (T, N); T may be the token axis in RLHF):
        rewards: float reward received after step t.
        values: V(s_t).
        next_values: V(s_{t+1}) of the obs that followed step t (for a finished episode, the value
            of its final obs; ignored where ``terminated``).
        terminated: bool, the episode ended in a terminal state: no bootstrap.
        done: bool, terminated | truncated: the GAE trace is cut after t.
    Returns:
        (advantages, returns), both (T, N) in the dtype of ``values`` (float32 in training; float64
        inputs give float64); returns = advantages + values.
    """
    if not (rewards.shape == values.shape == next_values.shape == terminated.shape == done.shape):
        raise ValueError(
            f"compute_gae: shapes differ: rewards {tuple(rewards.shape)}, values {tuple(values.shape)}, "
            f"next_values {tuple(next_values.shape)}, terminated {tuple(terminated.shape)}, done {tuple(done.shape)}"
        )
    for name, x in (("terminated", terminated), ("done", done)):
        if x.dtype != torch.bool:  # CleanRL's dones are float; torch.where's own error names neither
            raise ValueError(f"compute_gae: {name} must be bool (got {str(x.dtype).replace('torch.', '')}): "
                             f"pass {name}.bool()")
    zero = torch.zeros_like(values[0])
    # torch.where, not a multiply by (1 - terminated): a NaN/inf next value at a terminal step must not leak
    bootstrap = torch.where(terminated, zero.expand_as(next_values), next_values)
    deltas = rewards + gamma * bootstrap - values
    advantages = torch.empty_like(values)
    last = zero
    for t in range(rewards.shape[0] - 1, -1, -1):
        last = deltas[t] + gamma * lam * torch.where(done[t], zero, last)
        advantages[t] = last
    return advantages, advantages + values


# ---------------------------------------------------------------------------------------------
# 3. The loss (details 7-10, 12)
# ---------------------------------------------------------------------------------------------
def _check_shape(name: str, x: torch.Tensor, shape: torch.Size) -> None:
    if x.shape != shape:
        raise ValueError(f"ppo_loss: {name} has shape {tuple(x.shape)}, expected {tuple(shape)}; "
                         "a [B] vs [B, 1] mix would broadcast to [B, B]")


def _coef(c):
    """A loss coefficient as (reductions, elementwise): a float twice, or a (P,) tensor and its (P, 1) view."""
    return (c, c.unsqueeze(-1)) if torch.is_tensor(c) and c.dim() > 0 else (c, c)


def ppo_loss(new_logprob: torch.Tensor, old_logprob: torch.Tensor, advantages: torch.Tensor,
             new_values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
             entropy: torch.Tensor, *, clip_coef, vf_coef, ent_coef,
             clip_vloss: bool = True, norm_adv: bool = True, mask: Optional[torch.Tensor] = None,
             vf_clip_coef: Optional[float] = None) -> dict:
    """Clipped-surrogate PPO loss over a minibatch of B samples.

    All inputs are (B,) (log-probs and entropies already summed over action dims), or (P, B) for a
    population of P independent members: every mean runs over the last axis, so each member gets
    its own loss (P,), and the coefficients may then be (P,) tensors, one value per member, the
    switches ``clip_vloss`` and ``norm_adv`` (P,) bool tensors (a population's swept switches). ``mask``
    (B,) bool selects valid samples (RLHF: response tokens); None means all. Returns a dict of
    tensors of the leading shape (scalars for (B,) inputs): loss, policy_loss, value_loss, entropy,
    approx_kl, clipfrac, vf_clipfrac, ratio.
    """
    return ppo_loss_with_terms(new_logprob, old_logprob, advantages, new_values, old_values, returns, entropy,
                               clip_coef=clip_coef, vf_coef=vf_coef, ent_coef=ent_coef, clip_vloss=clip_vloss,
                               norm_adv=norm_adv, mask=mask, vf_clip_coef=vf_clip_coef)[0]


def ppo_loss_with_terms(new_logprob: torch.Tensor, old_logprob: torch.Tensor, advantages: torch.Tensor,
                        new_values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                        entropy: torch.Tensor, *, clip_coef, vf_coef, ent_coef,
                        clip_vloss: bool = True, norm_adv: bool = True, mask: Optional[torch.Tensor] = None,
                        vf_clip_coef: Optional[float] = None) -> tuple:
    """(ppo_loss's dict, the per-sample terms it was reduced from: ``ppo_terms``' dict, its
    advantages normalized when norm_adv). loss_cpu.py builds its closed-form gradients from them."""
    inputs = (("new_logprob", new_logprob), ("old_logprob", old_logprob), ("advantages", advantages),
              ("new_values", new_values), ("old_values", old_values), ("returns", returns), ("entropy", entropy))
    shapes = [x.shape for _, x in inputs]
    shape = max(shapes, key=shapes.count)  # the odd one out is the one named
    b = shape[-1]
    for name, x in inputs:
        _check_shape(name, x, shape)
    clip_coef, clip_el = _coef(clip_coef)
    if mask is None:
        def mean(x, keepdim=False):
            return x.mean(-1, keepdim=keepdim)

        bessel = b / max(b - 1, 1)
    else:
        if len(shape) != 1:
            raise ValueError(f"ppo_loss: a mask needs (B,) inputs, got {tuple(shape)}")
        _check_shape("mask", mask, shape)
        mask = mask.to(torch.bool)
        # padded entries may hold NaN/inf: zero them with torch.where (a multiply by the mask
        # would leak NaN into the loss and the gradients)
        new_logprob, old_logprob, advantages, new_values, old_values, returns, entropy = (
            torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))
            for x in (new_logprob, old_logprob, advantages, new_values, old_values, returns, entropy))
        denom = mask.sum().clamp_min(1)
        bessel = denom / (denom - 1).clamp_min(1)

        def mean(x, keepdim=False):
            return torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum() / denom

    if torch.is_tensor(norm_adv):  # a population's per-member switch: each member's advantages as its run's
        advantages = torch.where(_coef(norm_adv)[1], normalize_advantages(advantages, mean, bessel), advantages)
    elif norm_adv:  # detail 7: per-minibatch normalization
        advantages = normalize_advantages(advantages, mean, bessel)
    _, vclip = _coef(clip_coef if vf_clip_coef is None else vf_clip_coef)
    _, clip_vloss = _coef(clip_vloss)  # a population's (P,) switch as (P, 1); a bool as it is
    t = ppo_terms(new_logprob, old_logprob, advantages, new_values, old_values, returns, clip_el, vclip, clip_vloss)
    policy_loss, value_loss, ent = mean(t["pg_loss"]), mean(t["v_loss"]), mean(entropy)
    with torch.no_grad():
        monitored = {k: mean(v) for k, v in monitor_terms(t, clip_el, clip_vloss).items()}
    loss = policy_loss - ent_coef * ent + vf_coef * value_loss  # detail 10
    out = {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "entropy": ent, **monitored}
    return out, t


def monitor_terms(t: dict, clip_el, clip_vloss: bool) -> dict:
    """The per-sample terms of the update's monitoring metrics, from ``ppo_terms``' dict: approx_kl
    (detail 12, the k3 estimator), old_approx_kl (-logratio: CleanRL's k1 estimator, unbiased but
    noisy and can go negative, logged beside k3 for comparison with CleanRL's charts), clipfrac and
    vf_clipfrac as 0/1 floats (vf_clipfrac: the value loss took the clipped branch; all 0 without
    clip_vloss, which the trainer then logs blank), ratio. ppo_loss averages them; grad_cpu.py sums
    them block by block."""
    ratio = t["ratio"]
    # the clamp must have moved the delta too: where it did not, old + (new - old) can still round a
    # hair away from new, and the max would count that rounding as clipping (1 in ~8 samples of a
    # CNN population's minibatch with a range nothing reached; tests/unit/test_metrics41.py)
    if torch.is_tensor(clip_vloss):  # a population's per-member switch, (P, 1) bool
        vf_clipped = ((t["v_delta_clipped"] != t["v_delta"]) & (t["v_clipped"] > t["v_unclipped"]) & clip_vloss).float()
    else:
        vf_clipped = ((t["v_delta_clipped"] != t["v_delta"]) & (t["v_clipped"] > t["v_unclipped"])).float() \
            if clip_vloss else torch.zeros_like(ratio)
    # expm1, not ratio - 1: in float32 exp(3e-8) rounds to 1.0, so (ratio - 1) - logratio went
    # negative for tiny logratios; expm1(x) - x is >= 0 to the last bit (as rlhf/kl.py's k3)
    return {"approx_kl": torch.expm1(t["logratio"]) - t["logratio"], "old_approx_kl": -t["logratio"],
            "clipfrac": ((ratio - 1.0).abs() > clip_el).float(), "vf_clipfrac": vf_clipped, "ratio": ratio}


def normalize_advantages(advantages: torch.Tensor, mean: Callable, bessel) -> torch.Tensor:
    """(A - mean A) / (std A + 1e-8) over the minibatch (detail 7); ``mean`` reduces the last axis
    (over the selected samples under a mask), ``bessel`` = n / (n - 1) of those samples."""
    mu = mean(advantages, keepdim=True)
    # Bessel-corrected over the selected samples, as torch.std and rlhf.masked.masked_var
    var = mean((advantages - mu) ** 2, keepdim=True) * bessel
    return (advantages - mu) / (var.sqrt() + 1e-8)


def ppo_terms(new_logprob: torch.Tensor, old_logprob: torch.Tensor, advantages: torch.Tensor,
              new_values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
              clip_el, vclip, clip_vloss: bool) -> dict:
    """The per-sample terms of the PPO loss, each of the inputs' shape: advantages (as given,
    already normalized where they should be), logratio, ratio, ratio_clipped, unclipped (-A r),
    clipped (-A clip(r)), pg_loss, v_unclipped, v_delta, v_delta_clipped, v_clipped_pred,
    v_clipped and v_loss. ``clip_el``/``vclip``: the clip ranges, floats or (P, 1) tensors;
    ``clip_vloss``: a bool, or a (P, 1) bool tensor (one switch per member).
    ppo_loss averages them; grad_cpu.py sums them block by block; loss_cpu.py builds its
    closed-form gradients from them."""
    logratio = new_logprob - old_logprob
    ratio = logratio.exp()
    ratio_clipped = torch.clamp(ratio, 1 - clip_el, 1 + clip_el)
    unclipped, clipped = -advantages * ratio, -advantages * ratio_clipped
    pg_loss = torch.max(unclipped, clipped)  # detail 8

    v_unclipped = (new_values - returns) ** 2
    v_delta = new_values - old_values
    v_delta_clipped = torch.clamp(v_delta, -vclip, vclip)
    v_clipped_pred = old_values + v_delta_clipped
    v_clipped = (v_clipped_pred - returns) ** 2
    if torch.is_tensor(clip_vloss):  # a population's per-member switch, (P, 1) bool: no host read of it
        v_loss = 0.5 * torch.where(clip_vloss, torch.max(v_unclipped, v_clipped), v_unclipped)
    else:
        v_loss = 0.5 * (torch.max(v_unclipped, v_clipped) if clip_vloss else v_unclipped)  # detail 9
    return {"advantages": advantages, "logratio": logratio, "ratio": ratio, "ratio_clipped": ratio_clipped,
            "unclipped": unclipped, "clipped": clipped, "pg_loss": pg_loss, "v_unclipped": v_unclipped,
            "v_delta": v_delta, "v_delta_clipped": v_delta_clipped, "v_clipped_pred": v_clipped_pred,
            "v_clipped": v_clipped, "v_loss": v_loss}


# ---------------------------------------------------------------------------------------------
# 4. The update: epochs x minibatches (details 6, 11; optional target_kl stop)
# ---------------------------------------------------------------------------------------------
def update(agent, optimizer: torch.optim.Optimizer, batch: dict, cfg, grad_step: Optional[Callable] = None,
           generator: Optional[torch.Generator] = None, permutation: Optional[Callable] = None) -> dict:
    """Run ``cfg.update_epochs`` epochs of ``cfg.num_minibatches`` minibatches over ``batch``.

    batch: flat (B, ...) tensors obs, actions, logprobs, advantages, returns, values.
    grad_step(mb) -> dict of loss terms: one optimizer step on a minibatch (``make_grad_step``; the
    trainer may pass a compiled one). permutation(b, device, generator) -> (b,) indices of one epoch
    (default ``minibatch_permutation``; a population passes per-member ones). Returns the mean of each loss term over the minibatches run,
    plus ``minibatch_updates`` (float32 tensor: how many minibatch steps ran, epochs x minibatches unless
    target_kl stopped the loop), ``nonfinite`` (bool tensor: some loss or gradient was NaN/inf) and, given an ``agent``,
    ``nonfinite_weights`` (bool tensor: a parameter is NaN/inf after the last step). ValueError when the batch
    of B rows does not split into ``cfg.num_minibatches`` equal minibatches (B not a multiple of it,
    or fewer rows than minibatches); the config's check makes B a multiple for training.
    """
    if grad_step is None:
        grad_step = make_grad_step(agent, optimizer, cfg)
    if permutation is None:
        permutation = minibatch_permutation
    b = batch["obs"].shape[0]
    if cfg.num_minibatches < 1 or b < cfg.num_minibatches or b % cfg.num_minibatches:
        raise ValueError(f"update: a batch of {b} rows does not split into num_minibatches={cfg.num_minibatches} "
                         "equal minibatches (num_minibatches must divide the batch)")
    mb_size = b // cfg.num_minibatches
    totals: dict = {}
    n = 0
    for _epoch in range(cfg.update_epochs):
        perm = permutation(b, batch["obs"].device, generator)  # detail 6, on the device
        for start in range(0, b, mb_size):
            mb_inds = perm[start:start + mb_size]
            # index_select, not v[mb_inds]: the same rows, and on the CPU 3-4x faster for (B, 4) and (B,)
            # tensors (a micro-timing; its share of the iteration is in benchmarks/results/vs-purejaxrl-cpu.md)
            mb = {k: v.index_select(0, mb_inds) for k, v in batch.items()}
            out = grad_step(mb)
            for k, v in out.items():
                if k not in totals:  # a copy, never the step's own output: a replayed step overwrites that
                    totals[k] = v.clone()
                elif k == "nonfinite":
                    totals[k] |= v
                else:
                    totals[k] += v
            n += 1
            # the one host sync of the update, only when target_kl is set
            if cfg.target_kl is not None and bool(out["approx_kl"] > cfg.target_kl):
                return _with_weights_check(agent, _means(totals, n))
    return _with_weights_check(agent, _means(totals, n))


def _means(totals: dict, n: int) -> dict:
    """The loss terms' means over the ``n`` minibatches run, ``nonfinite`` as or-ed, and
    ``minibatch_updates``: ``n`` itself, so that a --target-kl stop shows in the logs. A fill of the
    Python count, not a tensor made from it: no host-to-device copy, which a CUDA graph records as a
    constant (the replayed update never stops early, so ``n`` is then always epochs x minibatches)."""
    out = {k: (v / n if k != "nonfinite" else v) for k, v in totals.items()}
    # approx_kl's shape: one count per member for a population; any term for a grad_step without it
    like = totals["approx_kl"] if "approx_kl" in totals else next(iter(totals.values()), None)
    if like is not None:
        out["minibatch_updates"] = torch.full_like(like, n, dtype=torch.float32)
    return out


def _with_weights_check(agent, metrics: dict) -> dict:
    """``metrics`` plus ``nonfinite_weights`` when there is an ``agent`` (a population passes None:
    its MemberAdam refuses a step that would make a member's weights non-finite). Each step's
    ``nonfinite`` judges the loss and gradient norm computed before its optimizer step, so an
    overflowing last step (a huge --lr) would otherwise leave inf/NaN weights for the checkpoint.
    One fused reduction on the device, read with the iteration's other metrics: no host sync here,
    and nothing a CUDA graph cannot record (the whole update is captured, this check with it)."""
    if agent is None:
        return metrics
    params = [p.detach() for p in agent.parameters()]
    if params:
        # the inf-norm: propagates NaN (max_propagate_nan on CUDA) and, unlike a 2-norm, cannot
        # overflow for finite weights, so only a truly non-finite weight trips it
        largest = torch.stack(torch._foreach_norm(params, float("inf")))
        metrics["nonfinite_weights"] = ~torch.isfinite(largest).all()
    return metrics


def minibatch_permutation(b: int, device: torch.device, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """A random permutation of range(b) on ``device`` (detail 6). On CUDA the argsort of uniform
    float64 keys, which a CUDA graph can record (randperm of a small n runs on the host there);
    elsewhere randperm."""
    if device.type == "cuda":
        return _argsort_permutation(b, device, generator)
    return torch.randperm(b, device=device, generator=generator)


def _argsort_permutation(b: int, device: torch.device, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """minibatch_permutation's CUDA body, a function of its own so that the CPU-only test suite can check it too."""
    return torch.argsort(torch.rand(b, device=device, dtype=torch.float64, generator=generator))


def make_grad_step(agent, optimizer, cfg, autocast=None, scaler=None, side=None) -> Callable:
    """One minibatch: forward, ppo_loss, backward, global grad-norm clip (detail 11), Adam step.
    ``side``: a side_thread.SideThread that computes the critic's half where grad_cpu covers the agent."""
    from .grad_cpu import BlockGradients
    from .loss_cpu import ppo_loss as loss_fn  # ppo_loss; on the CPU with a closed-form backward (loss_cpu.py)

    params = [p for p in agent.parameters() if p.requires_grad]
    # on the CPU, a discrete MLP agent's minibatch without autograd (grad_cpu.py): the same ops, the same gradients
    blocks = BlockGradients.for_agent(agent, cfg, autocast, scaler, side)

    def grad_step(mb: dict) -> dict:
        if blocks is not None and blocks.covers(mb):
            optimizer.zero_grad(set_to_none=True)
            out = blocks(mb)  # sets every parameter's .grad
        else:
            with autocast() if autocast is not None else _nullcontext():
                _, newlogprob, entropy, newvalue = agent(mb["obs"], mb["actions"])  # forward: DDP-friendly
            out = loss_fn(newlogprob.float(), mb["logprobs"], mb["advantages"], newvalue.float(), mb["values"],
                          mb["returns"], entropy.float(), clip_coef=cfg.clip_coef, vf_coef=cfg.vf_coef,
                          ent_coef=cfg.ent_coef, clip_vloss=cfg.clip_vloss, norm_adv=cfg.norm_adv,
                          vf_clip_coef=cfg.vf_clip_coef)
            optimizer.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.scale(out["loss"]).backward()
                scaler.unscale_(optimizer)
            else:
                out["loss"].backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
            nonfinite = ~torch.isfinite(out["loss"])  # fp16 overflow is the scaler's to handle
        else:
            optimizer.step()
            nonfinite = ~(torch.isfinite(out["loss"]) & torch.isfinite(grad_norm))
        metrics = {k: v.detach() for k, v in out.items() if k != "loss"}
        metrics["grad_norm"] = grad_norm.detach()
        metrics["nonfinite"] = nonfinite
        return metrics

    return grad_step


def action_metrics(actions: torch.Tensor, bounds: Optional[tuple], logstd: Optional[torch.Tensor],
                   members: Optional[int] = None) -> dict:
    """The policy's Box-action metrics of an iteration, on the device (read with the update's metrics):
    ``action_std``, the mean of exp(logstd) over the action dims (the Normal head's std after the
    update), and, given ``bounds``, ``action_clip_frac``, the share of the rollout's sampled action
    components outside [low, high] (what collect_rollout clamps before the env sees them).

    actions: (T, members * N, *act_shape), member-major; bounds: (low, high) flat (A,) or None;
    logstd: (1, A), or (members, 1, A) for a population. Returns 0-d tensors, or (members,) ones
    with ``members``; {} without a logstd (discrete heads: the trainer logs both blank). Once per
    iteration over the action buffer, never per env step."""
    if logstd is None:
        return {}
    logstd = logstd.detach()
    flat = actions.reshape(actions.shape[0], members or 1, -1, logstd.shape[-1])  # (T, P, N, A)
    out = {"action_std": logstd.exp().reshape(members or 1, -1).mean(1)}
    if bounds is not None:
        outside = (flat < bounds[0]) | (flat > bounds[1])
        out["action_clip_frac"] = outside.float().mean((0, 2, 3))
    if members is None:
        out = {k: v.reshape(()) for k, v in out.items()}
    return out


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def explained_variance(values: torch.Tensor, returns: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    """1 - Var(returns - values) / Var(returns), as a tensor; NaN where the returns do not vary
    (CleanRL's Var(returns) == 0), judged relative to their scale: returns = advantages + values in
    float32 leave a rounding variance of about eps^2 x mean(returns^2) (eps^2 ~ 1.4e-14) where the
    true one is 0, which would log an explained variance of -1e13 instead of "undefined"; 16 times
    that is the cut-off (returns 1000 +- 0.2 still vary: a spread of 2e-4 is ~10^7 eps). ``dim``: one value per slice
    along the other dimensions (a population's (P, M) -> (P,)); None: one over all."""
    over = {} if dim is None else {"dim": dim}
    var_y = returns.var(**over)
    flat = var_y <= 16 * torch.finfo(returns.dtype).eps ** 2 * returns.pow(2).mean(**over)
    return (1 - (returns - values).var(**over) / var_y).masked_fill(flat, float("nan"))
