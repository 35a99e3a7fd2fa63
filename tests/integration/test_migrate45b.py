"""A make_env trained as it is, review 45's second pass: an env whose own NormalizeReward scales the rewards the
evaluation sums (no RecordEpisodeStatistics inside it) says its returns are of scaled rewards, on the eval line and
in eval.json, and says nothing of a NormalizeObservation it does not have; one whose RecordEpisodeStatistics sits
inside the NormalizeReward (CleanRL's stack) is evaluated on the game's rewards, without the caveat; a resume's
refusal of a typed --learning-rate names --learning-rate."""

import json

import gymnasium as gym
import pytest

from tests.cli_helpers import error_line, module_written_in, run_main, tiny_cartpole_run

FACTORIES = '''
import gymnasium as gym


def make_rew(**kwargs):  # NormalizeReward alone, nothing recording the game's rewards
    return gym.wrappers.NormalizeReward(gym.wrappers.ClipAction(gym.make("Pendulum-v1", **kwargs)), gamma=0.99)


def make_rew_recorded(**kwargs):  # CleanRL's order: RecordEpisodeStatistics inside the NormalizeReward
    env = gym.wrappers.RecordEpisodeStatistics(gym.make("Pendulum-v1", **kwargs))
    return gym.wrappers.NormalizeReward(gym.wrappers.ClipAction(env), gamma=0.99)


def make_plain(**kwargs):
    return gym.wrappers.ClipAction(gym.make("Pendulum-v1", **kwargs))
'''

TINY = ["--num-envs", "2", "--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1",
        "--no-progress", "--eval-episodes", "2", "--total-timesteps", "128"]
SCALED = ("(returns of the rewards the env's own NormalizeReward scaled, not the game's; a RecordEpisodeStatistics "
          "inside it records the game's: see docs/migrating.md#bring-your-make_env)")


@pytest.fixture
def factories(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "cleanrl_mig45bi", FACTORIES)


def _eval_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("eval "))


def test_eval_of_an_env_scaling_its_own_rewards_says_the_returns_are_scaled(factories, tmp_path, capsys):
    run = tmp_path / "r"
    code, out, err = run_main(["train", "cleanrl_mig45bi:make_rew", *TINY, "--run-dir", str(run)], capsys)
    assert code == 0, err
    assert _eval_line(out).endswith(f"over 2 episodes (deterministic) {SCALED}")
    assert "NormalizeObservation" not in _eval_line(out)
    result = json.loads((run / "eval.json").read_text())
    assert result["env_rewards_scaled"] is True and "env_normalizer_restarted" not in result
    # the same episodes (NormalizeReward changes no observation) on the plain env: the game's returns, ten times larger
    code, out, err = run_main(["eval", str(run), "--env", "cleanrl_mig45bi:make_plain", "--episodes", "2", "--json"], capsys)
    assert code == 0, err
    plain = json.loads(out)
    assert "env_rewards_scaled" not in plain and plain["lengths"] == result["lengths"]
    assert plain["mean_return"] < 5 * result["mean_return"] < 0
    code, out, err = run_main(["eval", str(run), "--env", "cleanrl_mig45bi:make_rew", "--episodes", "2"], capsys)
    assert code == 0 and out.splitlines()[0].endswith(SCALED), out


def test_eval_of_an_env_recording_inside_its_normalize_reward_has_no_caveat(factories, tmp_path, capsys):
    run = tmp_path / "r"
    code, out, err = run_main(["train", "cleanrl_mig45bi:make_rew_recorded", *TINY, "--run-dir", str(run)], capsys)
    assert code == 0, err
    assert _eval_line(out).endswith("over 2 episodes (deterministic)")
    result = json.loads((run / "eval.json").read_text())
    assert "env_rewards_scaled" not in result and "env_normalizer_restarted" not in result
    assert result["mean_return"] < -200  # the game's rewards: Pendulum's are -16.3 to 0 a step, 200 steps an episode


def test_rewards_scaled_reads_where_the_recorder_sits():
    from proxima.envs.gym_adapter import rewards_scaled

    base = gym.make("Pendulum-v1")
    record, normalize = gym.wrappers.RecordEpisodeStatistics, gym.wrappers.NormalizeReward
    assert rewards_scaled(normalize(base)) is True
    assert rewards_scaled(record(normalize(base))) is True  # it records the scaled rewards
    assert rewards_scaled(normalize(record(base))) is False
    assert rewards_scaled(record(normalize(record(base)))) is False  # the innermost recorder's figures are evaluated
    assert rewards_scaled(base) is False and rewards_scaled(gym.wrappers.NormalizeObservation(base)) is False


def test_a_resumes_refusal_of_a_typed_learning_rate_names_learning_rate(tmp_path_factory, capsys):
    run = tiny_cartpole_run(tmp_path_factory, "lr45b")
    for argv in (["resume", str(run)], ["train", "--resume", str(run)]):
        code, _, err = run_main([*argv, "--total-timesteps", "256", "--learning-rate", "-1"], capsys)
        line = error_line(code, err, "error: --learning-rate -1.0: cannot change when resuming (the run was trained with "
                                     "0.00025)")
        assert "--lr" not in line
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--lr", "-1"], capsys)
    error_line(code, err, "error: --lr -1.0: cannot change when resuming")
