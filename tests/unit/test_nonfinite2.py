"""Numerical robustness, second round: evaluation refuses NaN/inf from the env (proxima eval, --eval-every,
a population's members), a NaN evaluation mean never becomes the best, the update's last optimizer step
is checked for non-finite weights, float fields beyond float32's range are refused, and the help and
notes of --deterministic and --compile-mode say what they do."""

from __future__ import annotations

import csv
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from cli_helpers import error_line, run_main
from proxima import checkpoint as ckpt
from proxima import evaluate as evaluate_mod
from proxima.adam import Adam
from proxima.config import FIELDS, ConfigError, PPOConfig, validate
from proxima.envs import NativeEnv, classic
from proxima.evaluate import first_episodes
from proxima.trainer import NonFiniteError, Trainer, train

STEPS = 64  # 4 envs x 16 steps per iteration


class Calm(NativeEnv):
    """Box(-1, 1, (3,)) obs, Discrete(2), +1 a step, episodes of 8 steps. A subclass (glitch())
    puts ``value`` into the reward or observation of env ``bad_env`` at its ``bad_step``-th step()
    call, in the ``which``-th instance built with ``num_envs == size`` (an evaluation's envs:
    training builds 4)."""

    field, value, bad_env, bad_step, size, which = None, math.nan, 1, 3, 3, 1
    max_episode_steps = 8
    built: dict = {}

    def __init__(self, num_envs, device="cpu", seed=None):
        super().__init__(num_envs, device, seed)
        self.single_observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.calls = 0
        key = (type(self), num_envs)
        self.built[key] = self.built.get(key, 0) + 1
        self.glitches = self.field is not None and num_envs == self.size and self.built[key] == self.which

    def _sample_initial_state(self, n):
        return {"s": self._uniform((n, 3), -0.5, 0.5)}

    def _dynamics(self, action):
        self.calls += 1
        push = (action.reshape(-1).to(torch.float32) - 0.5).unsqueeze(-1) * 0.1
        s = (0.9 * self.state["s"] + push).clamp(-1.0, 1.0)
        reward = torch.ones(self.num_envs)
        if self.glitches and self.calls == self.bad_step:
            if self.field == "obs":
                s[self.bad_env, 1] = self.value
            else:
                reward[self.bad_env] = self.value
        self.state["s"] = s
        return reward, torch.zeros(self.num_envs, dtype=torch.bool)

    def _observe(self):
        return self.state["s"].clone()


def glitch(field, value=math.nan, which=1, size=3):
    return type("Glitch", (Calm,), dict(field=field, value=value, which=which, size=size, built={}))


def config(**overrides) -> PPOConfig:
    values = dict(env_id="Glitch-v0", num_envs=4, num_steps=16, total_timesteps=4 * STEPS, num_minibatches=2,
                  update_epochs=2, progress=False, checkpoint_every=1, eval_episodes=0, threads=1)
    values.update(overrides)
    return PPOConfig(**values)


def csv_steps(run_dir) -> list:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [int(r["global_step"]) for r in csv.DictReader(f)]


@pytest.fixture
def calm_run(tmp_path, monkeypatch):
    """A healthy run of Glitch-v0 (the calm env); the test then swaps in a glitching one."""
    monkeypatch.setitem(classic.NATIVE_ENVS, "Glitch-v0", glitch(None))
    run_dir = tmp_path / "run"
    train(config(total_timesteps=STEPS), run_dir=run_dir, quiet=True, evaluate_at_end=False)
    return run_dir


# ------------------------------------------------------------------------ 2. proxima eval
@pytest.mark.parametrize("field, value, shown", [("reward", math.nan, "reward nan"), ("reward", math.inf, "reward inf"),
                                                 ("obs", math.nan, "observation [")])
def test_proxima_eval_refuses_a_non_finite_value_with_one_line_and_no_json(field, value, shown, calm_run, monkeypatch, capsys):
    monkeypatch.setitem(classic.NATIVE_ENVS, "Glitch-v0", glitch(field, value))
    code, out, err = run_main(["eval", str(calm_run), "--episodes", "3", "--json"], capsys)
    line = error_line(code, err, f"non-finite {shown}", "from env 1 at evaluation step 3 (its first episode); "
                      "check the env's step() with: proxima check-env Glitch-v0")
    assert line.startswith("proxima eval: error: non-finite ")
    assert out == ""  # no bare NaN in --json


class DuckEnv:
    """A duck-typed env for first_episodes: N envs, episodes of ``length`` steps, reward 1, and a
    ``bad`` callable(step, obs, reward) that may spoil the values of a step."""

    def __init__(self, n=3, length=(4, 6, 8), bad=None):
        self.device, self.n, self.length, self.t, self.bad = torch.device("cpu"), n, torch.tensor(length), 0, bad

    def step(self, action):
        self.t += 1
        obs, reward = torch.zeros(self.n, 2), torch.ones(self.n)
        if self.bad is not None:
            self.bad(self.t, obs, reward)
        return obs, reward, self.t >= self.length, torch.zeros(self.n, dtype=torch.bool), {}


def test_first_episodes_judges_only_what_counts_and_names_env_step_and_member():
    def act(obs):
        return torch.zeros(obs.shape[0], dtype=torch.int64)

    def late(t, obs, reward):  # env 0 ended at step 4: its NaN at step 5 counts for nothing
        if t == 5:
            reward[0] = math.nan
            obs[0, 1] = math.inf

    returns, lengths, finished = first_episodes(DuckEnv(bad=late), torch.zeros(3, 2), act, 100)
    assert returns.tolist() == [4.0, 6.0, 8.0] and bool(finished.all())

    def early(t, obs, reward):
        if t == 5:
            obs[2, 0] = math.nan

    with pytest.raises(NonFiniteError) as info:
        first_episodes(DuckEnv(bad=early), torch.zeros(3, 2), act, 100, env_name=lambda n: f"member 0 env {n}")
    assert str(info.value) == "non-finite observation [nan, 0] from member 0 env 2 at evaluation step 5 (its first episode)"
    start = torch.zeros(3, 2)
    start[1, 0] = math.nan
    with pytest.raises(NonFiniteError) as info:
        first_episodes(DuckEnv(), start, act, 100, env_id="Glitch-v0")
    assert str(info.value) == ("non-finite observation [nan, 0] from env 1 at the evaluation's reset; "
                               "check the env's reset() with: proxima check-env Glitch-v0")


# ------------------------------------------------------------------------ 2. --eval-every
def test_a_nan_in_an_eval_every_evaluation_stops_the_run_like_a_nan_in_training(tmp_path, monkeypatch):
    monkeypatch.setitem(classic.NATIVE_ENVS, "Glitch-v0", glitch("reward", which=2))  # the second evaluation's envs
    run_dir = tmp_path / "run"
    with pytest.raises(NonFiniteError) as info:
        train(config(eval_every=STEPS, eval_episodes=3), run_dir=run_dir, quiet=True, evaluate_at_end=False)
    last = ckpt.checkpoint_path(run_dir, STEPS)
    assert str(info.value) == ("non-finite reward nan from env 1 at evaluation step 3 (its first episode); check the env's "
                               f"step() with: proxima check-env Glitch-v0; in the --eval-every evaluation at global step "
                               f"{2 * STEPS}; last good checkpoint: {last}")
    # nothing was written for the bad iteration: no row, no checkpoint, best.pt is the first evaluation's
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == [last.name]
    assert csv_steps(run_dir) == [STEPS]
    best = torch.load(ckpt.best_checkpoint_path(run_dir), weights_only=False)
    assert best["global_step"] == STEPS and best["best_eval"] == 8.0


def test_the_end_of_run_evaluation_refuses_a_nan_and_writes_no_eval_json(tmp_path, monkeypatch):
    monkeypatch.setitem(classic.NATIVE_ENVS, "Glitch-v0", glitch("reward"))
    run_dir = tmp_path / "run"
    with pytest.raises(NonFiniteError) as info:
        train(config(total_timesteps=STEPS, eval_episodes=3), run_dir=run_dir, quiet=True)
    assert str(info.value).startswith("non-finite reward nan from env 1 at evaluation step 3 (its first episode);")
    assert str(info.value).endswith(f"; training finished, its checkpoints are kept ({ckpt.checkpoint_path(run_dir, STEPS)})")
    assert not (run_dir / "eval.json").exists()


# ------------------------------------------------------------------------ 1. best_eval
def test_a_non_finite_evaluation_mean_is_never_a_new_best(tmp_path, monkeypatch):
    monkeypatch.setitem(classic.NATIVE_ENVS, "Glitch-v0", glitch(None))
    trainer = Trainer(config(eval_every=STEPS, eval_episodes=2), run_dir=tmp_path / "run")
    try:
        trainer.best_eval = None
        for mean in (math.nan, math.inf, -math.inf):
            monkeypatch.setattr(evaluate_mod, "evaluate", lambda *a, m=mean, **k: {"mean_return": m, "std_return": 0.0})
            _, _, best, improved = trainer._evaluate_on_main()
            assert (best, improved) == (None, False)
        monkeypatch.setattr(evaluate_mod, "evaluate", lambda *a, **k: {"mean_return": 3.0, "std_return": 0.0})
        assert trainer._evaluate_on_main() == (3.0, 0.0, 3.0, True)
        trainer.best_eval = 3.0
        monkeypatch.setattr(evaluate_mod, "evaluate", lambda *a, **k: {"mean_return": math.nan, "std_return": 0.0})
        assert trainer._evaluate_on_main()[2:] == (3.0, False)
    finally:
        trainer.close()


# ------------------------------------------------------------------------ 2. a population's members
def test_proxima_eval_of_a_population_names_the_member_whose_env_returned_nan(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(classic.NATIVE_ENVS, "Glitch-v0", glitch(None))
    run = tmp_path / "pop"
    code, _, err = run_main(["train", "Glitch-v0", "--seeds", "1-2", "--num-envs", "4", "--num-steps", "16",
                             "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", str(STEPS),
                             "--eval-episodes", "0", "--no-progress", "--quiet", "--run-dir", str(run)], capsys)
    assert code == 0, err
    monkeypatch.setitem(classic.NATIVE_ENVS, "Glitch-v0", glitch("reward", which=2))  # the second member's envs
    code, out, err = run_main(["eval", str(run), "--episodes", "3", "--json"], capsys)
    error_line(code, err, f"{run / 'm001-seed2'}: non-finite reward nan from env 1 at evaluation step 3 (its first episode)")
    assert out == ""


# ------------------------------------------------------------------------ 3. the last optimizer step
def test_weights_made_non_finite_by_the_last_step_stop_the_run_before_any_checkpoint(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code, out, err = run_main(["train", "CartPole-v1", "--lr", "1e38", "--no-anneal-lr", "--num-envs", "4", "--num-steps", "16",
                               "--num-minibatches", "1", "--update-epochs", "1", "--total-timesteps", str(2 * STEPS),
                               "--run-dir", str(run_dir), "--no-progress", "--eval-episodes", "0", "--threads", "1"], capsys)
    line = error_line(code, err)
    assert line == ("proxima train: error: non-finite weights after the update's last optimizer step at global step 64 "
                    "(iteration 1); no checkpoint was written yet (--checkpoint-every N writes one every N iterations); "
                    "try a lower --lr")
    assert ckpt.list_checkpoints(run_dir) == []


def test_the_last_step_of_a_later_iteration_names_the_last_good_checkpoint(tmp_path, monkeypatch):
    real_step, calls = Adam.step, []

    def overflow_on_the_last_step_of_iteration_2(self):
        real_step(self)
        calls.append(1)
        if len(calls) == 2 * 2 * 2:  # 2 epochs x 2 minibatches per iteration
            with torch.no_grad():
                self.param_groups[0]["params"][0].mul_(math.inf)

    monkeypatch.setattr(Adam, "step", overflow_on_the_last_step_of_iteration_2)
    monkeypatch.setitem(classic.NATIVE_ENVS, "Glitch-v0", glitch(None))
    run_dir = tmp_path / "run"
    with pytest.raises(NonFiniteError) as info:
        train(config(), run_dir=run_dir, quiet=True, evaluate_at_end=False)
    last = ckpt.checkpoint_path(run_dir, STEPS)
    assert str(info.value) == (f"non-finite weights after the update's last optimizer step at global step {2 * STEPS} "
                               f"(iteration 2); last good checkpoint: {last}; try a lower lr")  # train(): the field
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == [last.name] and csv_steps(run_dir) == [STEPS]


# ------------------------------------------------------------------------ 4. float32's range
@pytest.mark.parametrize("field, flag", [("lr", "--lr"), ("max_grad_norm", "--max-grad-norm"), ("clip_coef", "--clip-coef"),
                                         ("vf_coef", "--vf-coef"), ("target_kl", "--target-kl")])
def test_a_float_beyond_float32s_range_is_refused_naming_the_flag(field, flag):
    with pytest.raises(ConfigError) as info:
        validate(PPOConfig(**{field: 1e39}))
    assert str(info.value).startswith(f"{flag} 1e+39: must be at most 3.403e+38 (float32's largest value")
    validate(PPOConfig(**{field: 3e38}))  # the largest float32s themselves pass


def test_cli_lr_beyond_float32_exits_2_with_one_line_and_no_run_dir(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code, _, err = run_main(["train", "CartPole-v1", "--lr", "1e39", "--total-timesteps", str(STEPS), "--num-envs", "4",
                             "--num-steps", "16", "--run-dir", str(run_dir), "--no-progress"], capsys)
    error_line(code, err, "--lr 1e+39: must be at most 3.403e+38")
    assert not run_dir.exists()


# ------------------------------------------------------------------------ 5, 6. help and notes
def test_deterministic_help_says_it_matters_with_compile_on_the_cpu_too():
    text = FIELDS["deterministic"].metadata["help"]
    assert "--compile" in text and "CPU too" in text and "only" not in text


def test_compile_mode_without_compile_gets_a_note(tmp_path, capsys):
    argv = ["train", "CartPole-v1", "--total-timesteps", str(STEPS), "--num-envs", "4", "--num-steps", "16",
            "--no-progress", "--eval-episodes", "0"]  # not --quiet, which drops the note (test_review27_cli_docs)
    code, _, err = run_main(argv + ["--compile-mode", "max-autotune", "--run-dir", str(tmp_path / "a")], capsys)
    assert code == 0, err
    assert "proxima: note: --compile-mode max-autotune has no effect without --compile" in err.splitlines()
    code, _, err = run_main(argv + ["--run-dir", str(tmp_path / "b")], capsys)
    assert code == 0 and "--compile-mode" not in err
