"""Mutation review 31: code changes the suite let through, each pinned by a test that fails with it.

1. evaluate() acts greedily by default (a sampled action there went unnoticed);
2. a CNN population's (vmapped) loss gives each member its own vf_coef, clip_coef and ent_coef;
3. truncate_csv keeps an older header's rows by column name, not by position;
4. set_rng_state restores Python's and NumPy's random states, not only torch's;
5. a resume's metrics time continues from the checkpoint's elapsed time;
6. a Gymnasium resume under --norm-obs counts the restarted episodes' reset observations.
"""

from __future__ import annotations

import contextlib
import csv
import io
import random

import numpy as np
import pytest
import torch

from proxima import checkpoint as ckpt
from proxima.logger import CSV_COLUMNS, truncate_csv
from proxima.trainer import Trainer, TrainingInterrupted
from tests.cli_helpers import edit_checkpoint, run_main, tiny_cartpole_run
from tests.unit import test_review27_population as pop27


# --- 1. deterministic evaluation is greedy ------------------------------------------------------------------
def _constant_policy(logits: list):
    """A CartPole policy whose logits are ``logits`` for every observation (zero last-layer weights)."""
    from proxima.agent import Agent
    from proxima.envs import make_env

    env = make_env("CartPole-v1", 1)
    obs_space, act_space = env.single_observation_space, env.single_action_space
    env.close()
    agent = Agent(obs_space, act_space)
    last = [m for m in agent.actor.modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(torch.tensor(logits))
    return ckpt.Policy(agent, None, {"env_id": "CartPole-v1"}, obs_space, act_space, "cpu")


def test_default_evaluation_is_the_greedy_rollout():
    # logits (0, 0.01): argmax is always action 1, a sample is action 0 about half the time; over 16
    # episodes a sampled evaluation matching the all-1 rollout's lengths is vanishingly unlikely
    from proxima.envs import make_env
    from proxima.evaluate import evaluate

    episodes, seed = 16, 123
    result = evaluate(_constant_policy([0.0, 0.01]), episodes=episodes, seed=seed)
    env = make_env("CartPole-v1", episodes, seed=seed, training=False)
    try:
        env.reset(seed=seed)
        lengths = torch.zeros(episodes, dtype=torch.int64)
        finished = torch.zeros(episodes, dtype=torch.bool)
        while not finished.all():
            _, _, terminated, truncated, _ = env.step(torch.ones(episodes, dtype=torch.int64))
            lengths += (~finished).to(torch.int64)
            finished |= terminated | truncated
    finally:
        env.close()
    assert result["deterministic"] is True
    assert result["lengths"] == lengths.tolist()
    assert result["returns"] == [float(n) for n in lengths.tolist()]  # CartPole: +1 a step


# --- 2. per-member coefficients reach a vmapped (CNN) population's loss ----------------------------------------
@pytest.mark.parametrize("field", ["vf_coef", "clip_coef", "ent_coef"])
def test_a_cnn_members_loss_uses_its_own_coefficient(small_config, field):
    # An encoder makes the population vmap a template agent (_vmapped_loss) instead of calling stacked
    # layers; review 27's test covers only the stacked (MLP) path. Its whole-run comparison with the
    # single run cannot be reused here: under vmap the members' action samples come from one stream
    # (population.py), so a CNN member does not retrace its single run. The minibatch loss can be
    # compared instead: member p's is ppo_loss of member p's own agent with member p's coefficient.
    from proxima import ppo

    value = pop27.FIELD_VALUES[field]
    with vmapped_pixel_members(small_config, {"seed": 1}, {"seed": 2, field: value}) as (configs, pop, gen, obs, actions, own):
        P, B = actions.shape
        # old log-probs and values off the current ones, so that both clips (policy and value) bite on some samples
        m = {"obs": obs, "actions": actions,
             "logprobs": torch.stack([o[1] for o in own]) + 0.3 * torch.randn(P, B, generator=gen),
             "values": torch.stack([o[3] for o in own]) + 0.5 * torch.randn(P, B, generator=gen),
             "advantages": torch.randn(P, B, generator=gen), "returns": torch.randn(P, B, generator=gen)}
        got = pop._vmapped_loss(m)
        for p, cfg in enumerate(configs):
            want = ppo.ppo_loss(own[p][1], m["logprobs"][p], m["advantages"][p], own[p][3], m["values"][p], m["returns"][p],
                                own[p][2], clip_coef=cfg.clip_coef, vf_coef=cfg.vf_coef, ent_coef=cfg.ent_coef,
                                clip_vloss=cfg.clip_vloss, norm_adv=cfg.norm_adv)
            for k in ("loss", "policy_loss", "value_loss", "entropy", "clipfrac", "vf_clipfrac"):
                torch.testing.assert_close(got[k][p].detach(), want[k], rtol=1e-5, atol=1e-6, msg=f"member {p} {field}: {k}")
            # member 0's coefficient would give member 1 a clearly other loss: the comparison can tell them apart
            other = ppo.ppo_loss(own[p][1], m["logprobs"][p], m["advantages"][p], own[p][3], m["values"][p], m["returns"][p],
                                 own[p][2], **{f: getattr(configs[1 - p], f) for f in ("clip_coef", "vf_coef", "ent_coef")},
                                 clip_vloss=cfg.clip_vloss, norm_adv=cfg.norm_adv)
            assert float((other["loss"] - want["loss"]).abs()) > 1e-3


@contextlib.contextmanager
def vmapped_pixel_members(small_config, *members: dict):
    """A PixelQuadrant CNN population of one member per dict of config overrides, on the vmapped loss
    path (its encoder), with random obs (P, 16, *obs_shape) and actions (P, 16) and each member's own
    agent's (action, logprob, entropy, value) of them: yields (configs, pop, gen, obs, actions, own)."""
    from proxima.population import Population

    configs = [small_config(env_id="PixelQuadrant-v0", encoder="cnn", num_envs=2, num_steps=8, num_minibatches=2,
                            total_timesteps=16, **m) for m in members]
    pop = Population(configs)
    try:
        assert not pop.stacked  # the vmapped path under test
        gen = torch.Generator().manual_seed(0)
        P, B, n = len(configs), 16, int(pop.env.single_action_space.n)
        obs = torch.randint(0, 256, (P, B, *pop.env.obs_shape), generator=gen).to(pop.env.obs_dtype)
        actions = torch.randint(0, n, (P, B), generator=gen)
        agents = [pop.member_agent(p) for p in range(P)]
        with torch.no_grad():
            own = [agents[p].get_action_and_value(obs[p], actions[p]) for p in range(P)]
        yield configs, pop, gen, obs, actions, own
    finally:
        pop.close()


# --- 3. truncate_csv reads an older header by name ---------------------------------------------------------------
def test_truncate_csv_keeps_an_older_headers_cells_under_their_own_columns(tmp_path):
    path = tmp_path / "metrics.csv"
    # an older header: another column order, fewer columns
    path.write_text("global_step,iteration,charts/episodic_return\n64,1,9.5\n128,2,12.0\n")
    truncate_csv(path, 64)
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == CSV_COLUMNS
    assert len(rows) == 1
    assert {k: rows[0][k] for k in ("iteration", "global_step", "charts/episodic_return")} == \
        {"iteration": "1", "global_step": "64", "charts/episodic_return": "9.5"}


# --- 4. every random state comes back ------------------------------------------------------------------------------
@pytest.fixture
def caller_rng():
    """The test's draws leave the process's random states as they were."""
    saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
    yield
    random.setstate(saved[0])
    np.random.set_state(saved[1])
    torch.set_rng_state(saved[2])


def test_set_rng_state_restores_python_numpy_and_torch_states(caller_rng):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    np.random.standard_normal()  # a cached Gaussian: part of NumPy's state too
    buf = io.BytesIO()
    torch.save(ckpt.rng_state(), buf)  # as a checkpoint holds it, loaded weights_only
    want = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    draws = (random.random(), np.random.standard_normal(3).tolist(), torch.rand(3).tolist())
    buf.seek(0)
    ckpt.set_rng_state(torch.load(buf, weights_only=True))
    got = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    assert got[0] == want[0], "python random state"
    assert got[1][0] == want[1][0] and np.array_equal(got[1][1], want[1][1]) and got[1][2:] == want[1][2:], "numpy state"
    assert torch.equal(got[2], want[2]), "torch state"
    assert (random.random(), np.random.standard_normal(3).tolist(), torch.rand(3).tolist()) == draws


# --- 5. a resume's time column continues from the checkpoint's -----------------------------------------------------
def test_a_resumed_runs_time_continues_from_the_checkpoints_elapsed(tmp_path_factory, capsys):
    run_dir = tiny_cartpole_run(tmp_path_factory, "elapsed")  # 2 iterations: its checkpoint at step 128
    # far above what 2 tiny iterations take, so that a clock restarted at 0 cannot reach it
    edit_checkpoint(run_dir, lambda state: state.update(elapsed=1000.0))
    code, _, err = run_main(["resume", str(run_dir), "--total-timesteps", "192", "--quiet"], capsys)
    assert code == 0, err
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = {int(r["global_step"]): float(r["time"]) for r in csv.DictReader(f)}
    assert sorted(rows) == [64, 128, 192]
    assert 1000.0 <= rows[192] < 1000.0 + 300.0, rows


# --- 6. a Gymnasium resume counts its reset observations under --norm-obs ---------------------------------------
def test_a_gymnasium_resume_counts_the_restarted_episodes_observations(tmp_path, small_config):
    cfg = small_config(backend="gymnasium", norm_obs=True, num_envs=2, num_steps=16, total_timesteps=64, num_minibatches=2,
                       update_epochs=1)
    run_dir = tmp_path / "run"
    trainer = Trainer(cfg, run_dir=run_dir, quiet=True)
    try:
        with pytest.raises(TrainingInterrupted):  # after its first iteration's checkpoint
            trainer.run(stop_after=1)
    finally:
        trainer.close()
    state = ckpt.load_checkpoint(run_dir)
    count = float(state["obs_normalizer"]["rms.count"])
    resumed = Trainer(cfg, run_dir=run_dir, resume_state=state, quiet=True)
    try:
        # a fresh run counts its reset's observations once (count_reset); the restarted episodes' are new ones
        assert float(resumed.obs_norm.rms.count) == count + cfg.num_envs
    finally:
        resumed.close()
