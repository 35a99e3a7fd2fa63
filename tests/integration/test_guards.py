"""Guards (issue 5, item 6): NaN/inf in an observation or reward from any env, or in the loss or the
gradients, stops the run with one line naming the field, the env index and the global step (exit 2
from the CLI), and the last good checkpoint stays loadable; --debug-checks also validates every
action and observation against the spaces."""

from __future__ import annotations

import csv
import math
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from cli_helpers import bad_action_at_call_5, without_spaces_line
from proxima import checkpoint as ckpt
from proxima import cli, grad_cpu
from proxima.config import PPOConfig
from proxima.envs import EnvError, NativeEnv, classic
from proxima.trainer import DebugCheckError, NonFiniteError, train

STEPS = 64  # 4 envs x 16 steps per iteration


class GlitchEnv(NativeEnv):
    """A tiny torch env (Box(-1, 1, (3,)) obs, Discrete(2), +1 a step, never ends) that, on its
    ``bad_step``-th call of step() (1-based), puts ``value`` into one field of env ``bad_env``:
    ``obs`` (the returned observation), ``final`` (the last obs of an episode that ends there), or
    ``reward``; ``reset`` glitches the first observation instead."""

    field, value, bad_env, bad_step = "obs", math.nan, 2, 37
    max_episode_steps = 10_000

    def __init__(self, num_envs, device="cpu", seed=None):
        super().__init__(num_envs, device, seed)
        self.single_observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.calls = 0

    def _sample_initial_state(self, n):
        s = self._uniform((n, 3), -0.5, 0.5)
        if self.field == "reset" and self.calls == 0:
            s[self.bad_env, 1] = self.value
        return {"s": s}

    def _dynamics(self, action):
        self.calls += 1
        push = (action.reshape(-1).to(torch.float32) - 0.5).unsqueeze(-1) * 0.1
        s = (0.9 * self.state["s"] + push).clamp(-1.0, 1.0)
        reward = torch.ones(self.num_envs)
        terminated = torch.zeros(self.num_envs, dtype=torch.bool)
        if self.calls == self.bad_step:
            if self.field in ("obs", "final"):
                s[self.bad_env, 1] = self.value
            if self.field == "final":
                terminated[self.bad_env] = True  # autoreset: only info["final_obs"] holds the value
            if self.field == "reward":
                reward[self.bad_env] = self.value
        self.state["s"] = s
        return reward, terminated

    def _observe(self):
        return self.state["s"].clone()


def glitch(field, value=math.nan, bad_env=2, bad_step=37):
    return type("Glitch", (GlitchEnv,), dict(field=field, value=value, bad_env=bad_env, bad_step=bad_step))


def config(env_id: str, **overrides) -> PPOConfig:
    values = dict(env_id=env_id, num_envs=4, num_steps=16, total_timesteps=6 * STEPS, num_minibatches=2, update_epochs=2,
                  progress=False, checkpoint_every=1, eval_episodes=0, threads=1)
    values.update(overrides)
    return PPOConfig(**values)


def csv_steps(run_dir: Path) -> list[int]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [int(r["global_step"]) for r in csv.DictReader(f)]


def assert_last_good_checkpoint(run_dir: Path, step: int) -> None:
    """Nothing was written for the bad iteration; the last checkpoint loads and holds finite weights."""
    assert [p.name for p in ckpt.list_checkpoints(run_dir)][-1] == f"step_{step:012d}.pt"
    state = ckpt.load_checkpoint(run_dir)
    assert state["global_step"] == step
    assert all(torch.isfinite(p).all() for p in state["agent"].values())
    assert csv_steps(run_dir) == list(range(STEPS, step + 1, STEPS))


def one_error_line(err: str, prog: str = "proxima train") -> str:
    """The one line a failed run printed besides the spaces line at its start."""
    lines = [line for line in without_spaces_line(err).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{prog}: error: ")
    return lines[0][len(f"{prog}: error: "):]


# ------------------------------------------------------------------------------------ env values
CASES = {
    # id: (field, value, config overrides, expected start of the message)
    "nan-obs": ("obs", math.nan, {}, "non-finite observation from env 2 at global step 148 (env step 37)"),
    # normalization would spread one NaN to every env's normalized obs: the guard judges raw obs
    "nan-obs-norm-obs": ("obs", math.nan, {"norm_obs": True}, "non-finite observation from env 2 at global step 148 (env step 37)"),
    "inf-reward-norm-reward": ("reward", math.inf, {"norm_reward": True}, "non-finite reward inf from env 2 at global step 148 (env step 37)"),
    "nan-final-obs": ("final", math.nan, {}, "non-finite final observation from env 2 at global step 148 (env step 37)"),
    "nan-obs-debug-checks": ("obs", math.nan, {"debug_checks": True},
                             "non-finite observation [0.0"),  # value shown; checked below
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_non_finite_env_value_names_field_env_and_step(case, tmp_path, monkeypatch):
    field, value, overrides, expected = CASES[case]
    monkeypatch.setitem(classic.NATIVE_ENVS, "Glitch-v0", glitch(field, value))
    run_dir = tmp_path / "run"
    with pytest.raises(NonFiniteError) as info:
        train(config("Glitch-v0", **overrides), run_dir=run_dir, quiet=True, evaluate_at_end=False)
    message = str(info.value)
    last = ckpt.checkpoint_path(run_dir, 2 * STEPS)
    if case == "nan-obs-debug-checks":  # caught during the step itself, with the observation's value
        assert message.startswith("non-finite observation [") and ", nan, " in message
        assert "from env 2 at global step 148 (env step 37)" in message
    else:
        assert message.startswith(expected), message
    assert message.endswith(f"check the env's step() with: proxima check-env Glitch-v0; last good checkpoint: {last}")
    assert "\n" not in message
    assert_last_good_checkpoint(run_dir, 2 * STEPS)


def test_non_finite_reset_observation(tmp_path, monkeypatch):
    monkeypatch.setitem(classic.NATIVE_ENVS, "Glitch-v0", glitch("reset", bad_env=1))
    with pytest.raises(NonFiniteError) as info:
        train(config("Glitch-v0"), run_dir=tmp_path / "run", quiet=True, evaluate_at_end=False)
    assert str(info.value).startswith("non-finite observation [")
    assert "from env 1 at reset (global step 0); check the env's reset() with: proxima check-env Glitch-v0; no checkpoint was written yet" in str(info.value)


NAN_REWARD_ENV = textwrap.dedent("""
    import gymnasium as gym
    import numpy as np

    class NaNReward(gym.Env):
        '''Gymnasium env that returns a NaN reward from env 1 (the one reset with seed 1) at its 20th step.'''

        observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            if seed is not None:
                self.index, self.t = seed, 0  # `--seed 0`: vector env i is first reset with seed i
            return np.zeros(2, np.float32), {}

        def step(self, action):
            self.t += 1
            reward = float("nan") if (self.index, self.t) == (1, 20) else 1.0
            return np.full(2, 0.1, np.float32), reward, False, False, {}
""")


def test_cli_nan_reward_from_a_gymnasium_env_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "nan_reward_env.py").write_text(NAN_REWARD_ENV)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    run_dir = tmp_path / "run"
    argv = ["train", "nan_reward_env:NaNReward", "--seed", "0", "--num-envs", "2", "--num-steps", "16",
            "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", "128", "--run-dir", str(run_dir),
            "--no-progress", "--checkpoint-every", "1", "--eval-episodes", "0"]
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    message = one_error_line(captured.err)
    last = ckpt.checkpoint_path(run_dir, 32)
    assert message == ("non-finite reward nan from env 1 at global step 40 (env step 20); check the env's step() with: "
                       f"proxima check-env nan_reward_env:NaNReward; last good checkpoint: {last}")
    state = ckpt.load_checkpoint(run_dir)
    assert state["global_step"] == 32 and all(torch.isfinite(p).all() for p in state["agent"].values())
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == [last.name]


# ------------------------------------------------------------------------------------ loss / gradients
def test_cli_nan_loss_exits_2_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch, capsys):
    # CartPole's CPU grad step: grad_cpu's block path (the loss and the gradients it sets)
    real_grads, calls = grad_cpu.BlockGradients.__call__, []

    def loss_goes_nan_in_iteration_3(self, mb):
        out = real_grads(self, mb)
        calls.append(1)
        if len(calls) > 2 * 2 * 2:  # 2 epochs x 2 minibatches per iteration
            out["loss"] = out["loss"] * math.nan
        return out

    monkeypatch.setattr(grad_cpu.BlockGradients, "__call__", loss_goes_nan_in_iteration_3)
    run_dir = tmp_path / "run"
    argv = ["train", "CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "2",
            "--total-timesteps", str(6 * STEPS), "--run-dir", str(run_dir), "--no-progress", "--checkpoint-every", "1",
            "--eval-episodes", "0"]
    assert cli.main(argv) == 2
    message = one_error_line(capsys.readouterr().err)
    last = ckpt.checkpoint_path(run_dir, 2 * STEPS)
    assert message == (f"non-finite loss or gradient in the update at global step {3 * STEPS} (iteration 3); "
                       f"last good checkpoint: {last}; try a lower --lr or --max-grad-norm, or --norm-obs/--norm-reward")
    assert_last_good_checkpoint(run_dir, 2 * STEPS)


# ------------------------------------------------------------------------------------ --debug-checks
def test_debug_checks_obs_outside_the_space_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(classic.NATIVE_ENVS, "Glitch-v0", glitch("obs", value=5.0, bad_env=1, bad_step=10))
    run_dir = tmp_path / "run"
    argv = ["train", "Glitch-v0", "--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1",
            "--total-timesteps", str(2 * STEPS), "--run-dir", str(run_dir), "--no-progress", "--eval-episodes", "0"]
    assert cli.main(argv + ["--debug-checks"]) == 2
    message = one_error_line(capsys.readouterr().err)
    assert message.startswith("--debug-checks: observation [")
    assert message.endswith("of env 1 at global step 40 (env step 10) is outside the observation space (component 1 = 5 > high 1); "
                            "no checkpoint was written yet (--checkpoint-every N writes one every N iterations)")
    # without the flag the same (finite) value is not an error
    assert cli.main(argv + ["--run-dir", str(tmp_path / "plain")]) == 0


def test_debug_checks_the_reset_observation_against_the_space(tmp_path, monkeypatch, capsys):
    """The observation the run starts from too, not only what step() returns: an env whose episodes never
    end would otherwise train on an out-of-space reset observation unnoticed."""
    monkeypatch.setitem(classic.NATIVE_ENVS, "Glitch-v0", glitch("reset", value=5.0, bad_env=1))
    argv = ["train", "Glitch-v0", "--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1",
            "--total-timesteps", str(2 * STEPS), "--run-dir", str(tmp_path / "run"), "--no-progress", "--eval-episodes", "0"]
    assert cli.main(argv + ["--debug-checks"]) == 2
    message = one_error_line(capsys.readouterr().err)
    assert message.startswith("--debug-checks: observation [") and message.endswith(
        "of env 1 at reset (global step 0) is outside the observation space (component 1 = 5 > high 1); no checkpoint was "
        "written yet (--checkpoint-every N writes one every N iterations)"), message
    assert not (tmp_path / "run").exists()


def test_debug_checks_action_outside_the_space(tmp_path, monkeypatch):
    bad_action_at_call_5(monkeypatch, 2)  # CartPole's space is Discrete(2)
    with pytest.raises(DebugCheckError) as info:
        train(config("CartPole-v1", debug_checks=True), run_dir=tmp_path / "run", quiet=True, evaluate_at_end=False)
    assert isinstance(info.value, EnvError)  # the CLI's exit-2 family
    assert str(info.value).startswith("--debug-checks: action 2 of env 3 at global step 20 (env step 5) is outside the action space Discrete(2);")


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_debug_checks_pass_on_a_healthy_run(env_id, tmp_path):
    # Pendulum: Gaussian samples beyond the Box bounds are fine (the env clips them; PPO stores the sample)
    train(config(env_id, debug_checks=True, total_timesteps=STEPS, norm_obs=True), run_dir=tmp_path / "run", quiet=True,
          evaluate_at_end=False)
    assert ckpt.load_checkpoint(tmp_path / "run")["global_step"] == STEPS
