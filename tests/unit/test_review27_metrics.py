"""Review 27 (test quality): behaviour no earlier test pinned, each checked against a number computed
here, independently of the code under test: the deterministic action of a discrete head, the logged
explained variance, the update's loss metrics under a target_kl stop, the run time carried by a
resume, eval.json's std_return, and the refusal of a finite loss with a non-finite gradient."""

from __future__ import annotations

import csv
import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima import checkpoint as ckpt
from proxima import grad_cpu
from proxima.agent import Agent
from proxima.config import PPOConfig
from proxima.guards import NonFiniteError
from proxima.population import Population, member_configs, to_members
from proxima.trainer import Trainer, TrainingInterrupted, train


def _cfg(**overrides) -> PPOConfig:
    values = dict(env_id="CartPole-v1", backend="native", num_envs=4, num_steps=16, total_timesteps=64,
                  num_minibatches=2, update_epochs=2, progress=False, checkpoint_every=0, eval_episodes=0, threads=1,
                  seed=0)
    values.update(overrides)
    return PPOConfig(**values)


def _explained_variance(values: np.ndarray, returns: np.ndarray) -> float:
    returns, values = returns.astype(np.float64), values.astype(np.float64)
    return float(1.0 - np.var(returns - values) / np.var(returns))


# ------------------------------------------------------------------------------------ 1: deterministic action
@pytest.mark.parametrize("space, bias, want", [
    (gym.spaces.Discrete(4), [0.0, 0.0, 5.0, 0.0], 2),
    # the best action of each dimension is neither the first nor the last of that dimension's logits
    (gym.spaces.MultiDiscrete([2, 4, 3]), [0.0, 5.0, 0.0, 0.0, 5.0, 0.0, 0.0, 5.0, 0.0], [1, 2, 1]),
])
def test_the_deterministic_action_is_each_dimensions_most_likely_one(space, bias, want):
    torch.manual_seed(0)
    agent = Agent(gym.spaces.Box(-1.0, 1.0, (3,), np.float32), space)
    with torch.no_grad():  # logits = the bias whatever the features: the mode is known here
        agent.actor[-1].weight.zero_()
        agent.actor[-1].bias.copy_(torch.tensor(bias))
    got = agent.act(torch.zeros(2, 3), deterministic=True)
    assert got.tolist() == [want, want]


# ------------------------------------------------------------------------------------ 2: explained variance
def test_a_single_runs_explained_variance_is_that_of_its_iterations_batch():
    t = Trainer(_cfg(), quiet=True)
    try:
        out = t.train_iteration()
        got = float(out["explained_variance"])
        values = t.parts.batch["values"].numpy().copy()
        returns = t.parts.batch["returns"].numpy().copy()
    finally:
        t.close()
    want = _explained_variance(values, returns)
    assert got == pytest.approx(want, rel=1e-4, abs=1e-6)
    # the other order of the arguments gives another number: the check above tells them apart
    assert abs(_explained_variance(returns, values) - want) > 1e-2


def test_each_population_members_explained_variance_is_that_of_its_own_batch():
    pop = Population(member_configs(_cfg(), [1, 2]))
    out = pop.train_iteration()
    values = to_members(pop.rollout.values, 2).numpy()
    returns = to_members(pop.returns_buf, 2).numpy()
    for p in range(2):
        want = _explained_variance(values[p], returns[p])
        assert float(out["explained_variance"][p]) == pytest.approx(want, rel=1e-4, abs=1e-6), p
        assert abs(_explained_variance(returns[p], values[p]) - want) > 1e-2


# ------------------------------------------------------------------------------------ 3: target_kl's metrics
def test_a_target_kl_stop_averages_the_loss_metrics_over_the_minibatches_run():
    # approx_kl is 0 on the first minibatch (ratio 1) and above 1e-6 on the second: the update stops
    # after 2 of its 3 x 4 planned minibatches
    t = Trainer(_cfg(update_epochs=3, num_minibatches=4, lr=1e-2, target_kl=1e-6), quiet=True)
    names = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "grad_norm")
    steps = []
    try:
        real_grad_step = t.grad_step

        def grad_step(mb):
            out = real_grad_step(mb)
            steps.append({k: float(out[k]) for k in names})
            return out

        t.grad_step = grad_step
        out = {k: float(v) for k, v in t.train_iteration().items() if v.dim() == 0}
    finally:
        t.close()
    assert len(steps) == 2
    for k in names:
        assert out[k] == pytest.approx(sum(s[k] for s in steps) / len(steps), rel=1e-5, abs=1e-7), k
    assert out["value_loss"] > 0 and out["grad_norm"] > 0  # not a mean that 0s would also pass


# ------------------------------------------------------------------------------------ 4: run time on resume
def test_a_resumed_run_carries_on_the_checkpoints_run_time(tmp_path):
    cfg = _cfg(total_timesteps=4 * 64, checkpoint_every=1)
    run_dir = tmp_path / "run"
    t = Trainer(cfg, run_dir=run_dir, quiet=True)
    try:
        with pytest.raises(TrainingInterrupted):
            t.run(stop_after=2)
    finally:
        t.close()
    state = ckpt.load_checkpoint(run_dir)
    state["elapsed"] = 1000.0  # far above what 2 iterations take: a restart at 0 cannot reach it
    resumed = Trainer(cfg, run_dir=run_dir, resume_state=state, quiet=True)
    try:
        assert resumed.elapsed == 1000.0
        resumed.run()
    finally:
        resumed.close()
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["global_step"]) for r in rows] == [64, 128, 192, 256]
    assert all(float(r["time"]) < 1000.0 for r in rows[:2])
    assert all(float(r["time"]) >= 1000.0 for r in rows[2:])


# ------------------------------------------------------------------------------------ 5: eval.json's std_return
def test_eval_json_std_return_is_the_population_std_of_its_returns(tmp_path):
    run_dir, _ = train(_cfg(env_id="Pendulum-v1", total_timesteps=64, eval_episodes=4, checkpoint_every=1,
                            run_dir=str(tmp_path / "run")), quiet=True)
    result = json.loads((run_dir / "eval.json").read_text())
    returns = np.asarray(result["returns"], dtype=np.float64)
    assert len(returns) == 4 and np.std(returns) > 1.0  # Pendulum's episodes differ: ddof 0 and 1 differ too
    assert result["std_return"] == pytest.approx(float(np.std(returns)), rel=1e-6)
    assert result["mean_return"] == pytest.approx(float(np.mean(returns)), rel=1e-6)


# ------------------------------------------------------------------------------------ 7: a NaN gradient
def test_a_finite_loss_with_a_nan_gradient_is_refused_as_a_non_finite_gradient(tmp_path, monkeypatch):
    # CartPole's CPU grad step: grad_cpu's block path sets every gradient; one entry of the last
    # minibatch's of iteration 2 made NaN after it, its loss finite. The Adam step then makes the
    # weights NaN too: the refusal must still name the gradient, not (later, vaguer) the weights
    real_grads, calls = grad_cpu.BlockGradients.__call__, []

    def nan_gradient_in_iteration_2(self, mb):
        out = real_grads(self, mb)
        calls.append(bool(torch.isfinite(out["loss"])))
        if len(calls) == 2 * 2 * 2:  # 2 epochs x 2 minibatches per iteration
            next(self.critic_net.parameters()).grad.view(-1)[0] = math.nan
        return out

    monkeypatch.setattr(grad_cpu.BlockGradients, "__call__", nan_gradient_in_iteration_2)
    t = Trainer(_cfg(total_timesteps=3 * 64), run_dir=tmp_path / "run", quiet=True)
    try:
        with pytest.raises(NonFiniteError) as e:
            t.run()
    finally:
        t.close()
    assert calls == [True] * 8  # the loss itself was finite on every step
    assert str(e.value).startswith("non-finite loss or gradient in the update at global step 128 (iteration 2); ")
