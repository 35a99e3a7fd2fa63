"""An own Gymnasium env's numbers, review 48. (1) An --eval-every evaluation logs its success rate as
eval/success_rate beside eval/mean_return (metrics.csv and TensorBoard): the mean of info["is_success"] over its
episodes that reported one, eval.json's success_rate for the same evaluation; blank, with no point, where none did.
(2) A factory's own gymnasium.wrappers.TransformReward or ClipReward with no RecordEpisodeStatistics inside it: the
adapter records no statistics of its own, so the returns train logs and eval prints are of the transformed rewards
(10x CartPole's under a x10 scale), and the train start, a resume and the eval line say so; CleanRL's order
(the recorder inside) logs the env's own returns and says nothing."""

from __future__ import annotations

import csv
import json

import gymnasium as gym
import pytest

from proxima.logger import _event_records
from tests.cli_helpers import TINY_RUN, module_written_in, run_main

COLUMN = "eval/success_rate"

#: 3-step episodes whose last step reports info["is_success"] by the seed the episode was reset with: seed % 3 == 0
#: reports nothing, 1 success, 2 failure (mid-episode steps say True: never an outcome). An evaluation resets env i
#: with episode_seeds(seed, episodes)[i], so its rate is known without the policy. quiet=True reports nothing ever.
ENVS = '''
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Succ(gym.Env):
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, quiet=False):
        self.quiet, self.outcome = quiet, 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.outcome = seed % 3
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        end = self.t >= 3
        info = {"is_success": True}
        if end:
            info = {} if self.quiet or self.outcome == 0 else {"is_success": self.outcome == 1}
        return np.zeros(2, np.float32), 1.0, end, False, info


def make_scaled():  # a user's own scale, nothing recording the env's own rewards
    return gym.wrappers.TransformReward(gym.make("CartPole-v1"), lambda r: 10.0 * r)


def make_clipped():
    return gym.wrappers.ClipReward(gym.make("CartPole-v1"), 0.0, 0.5)


def make_recorded():  # CleanRL's order: RecordEpisodeStatistics inside the reward clip
    env = gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1"))
    return gym.wrappers.TransformReward(env, lambda r: np.clip(10.0 * r, -10.0, 10.0))
'''

EVAL_RUN = [*[a for a in TINY_RUN if a not in ("--eval-episodes", "0")], "--eval-episodes", "4", "--eval-every", "64",
            "--seed", "1", "--total-timesteps", "128"]


@pytest.fixture
def envs(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "own48_envs", ENVS)


def _rows(path) -> tuple[list, list]:
    with open(path, newline="") as f:
        r = csv.reader(f)
        header = next(r)
        return header, [dict(zip(header, row)) for row in r]


def _points(run_dir, tag: str) -> list:
    return [(e.step, v.simple_value) for p in sorted(run_dir.glob("events.out.tfevents.*"))
            for _, e in _event_records(p) for v in e.summary.value if v.tag == tag]


def _expected_rate(seed: int, episodes: int) -> float:
    from proxima.evaluate import episode_seeds

    outcomes = [s % 3 for s in episode_seeds(seed + 1_000_000, episodes)]
    reported = [o == 1 for o in outcomes if o != 0]
    return sum(reported) / len(reported)


def test_eval_every_logs_the_success_rate_of_the_episodes_that_reported_it(envs, tmp_path, capsys):
    run = tmp_path / "run"
    code, _, err = run_main(["train", "own48_envs:Succ", *EVAL_RUN, "--run-dir", str(run), "--quiet"], capsys)
    assert code == 0, err
    rate = _expected_rate(1, 4)
    assert rate == pytest.approx(1 / 3)  # seeds % 3: 2, 0, 2, 1 -> one success of the three that reported
    header, rows = _rows(run / "metrics.csv")
    assert COLUMN in header and [r["global_step"] for r in rows] == ["64", "128"]
    assert [float(r[COLUMN]) for r in rows] == [rate, rate]  # written in full, as eval/mean_return is
    assert all(float(r["eval/mean_return"]) == 3.0 for r in rows)  # the column sits on the evaluation's row
    assert _points(run, COLUMN) == [(64, pytest.approx(rate)), (128, pytest.approx(rate))]
    # the last iteration's evaluation is eval.json's: the same rate, from the same episodes
    result = json.loads((run / "eval.json").read_text())
    assert result["success_rate"] == float(rows[-1][COLUMN]) and result["success_episodes"] == 3


def test_eval_success_rate_is_blank_where_no_evaluation_episode_reported_it(envs, tmp_path, capsys):
    run = tmp_path / "run"
    code, _, err = run_main(["train", "own48_envs:Succ", *EVAL_RUN, "--run-dir", str(run), "--quiet",
                             "--env-kwargs", '{"quiet": true}'], capsys)
    assert code == 0, err
    _, rows = _rows(run / "metrics.csv")
    assert [r["eval/mean_return"] for r in rows] == ["3.0", "3.0"]  # evaluated: the blank is of success alone
    assert [r[COLUMN] for r in rows] == ["", ""] and [r["charts/success_rate"] for r in rows] == ["", ""]
    assert _points(run, COLUMN) == [] and len(_points(run, "eval/mean_return")) == 2
    assert "success_rate" not in json.loads((run / "eval.json").read_text())


def test_rows_without_an_evaluation_leave_the_column_blank(envs, tmp_path, capsys):
    run = tmp_path / "run"
    argv = [a for a in EVAL_RUN if a != "64"]
    argv[argv.index("--eval-every") + 1:argv.index("--eval-every") + 1] = ["128"]
    code, _, err = run_main(["train", "own48_envs:Succ", *argv, "--run-dir", str(run), "--quiet"], capsys)
    assert code == 0, err
    _, rows = _rows(run / "metrics.csv")
    assert [r[COLUMN] for r in rows] == ["", str(_expected_rate(1, 4))]
    assert [bool(r["eval/mean_return"]) for r in rows] == [False, True]


# (2) TransformReward / ClipReward inside the factory

TINY = ["--num-envs", "2", "--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1",
        "--no-progress", "--eval-episodes", "2", "--total-timesteps", "128"]
DOC = "see docs/migrating.md#bring-your-make_env"


def _start_note(names: str, it: str = "it") -> str:
    return (f"proxima: note: charts/episodic_return (the return shown, and --stop-return's) sums the rewards after your "
            f"env's own {names}, not the env's own: apply RecordEpisodeStatistics before {it} (CleanRL's order) for "
            f"the env's own returns ({DOC})")


def _eval_note(names: str, it: str = "it") -> str:
    return (f" (returns of the rewards after the env's own {names}, not the env's own; a RecordEpisodeStatistics "
            f"inside {it} records the env's own: {DOC})")


def _eval_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("eval "))


def test_the_adapter_sums_the_rewards_after_a_transform_reward():
    """The experiment behind the note: the adapter adds no RecordEpisodeStatistics of its own, so without
    one inside the user's TransformReward its episode returns are of the transformed rewards."""
    import torch

    from proxima.envs.gym_adapter import GymnasiumEnv

    def first_return(fn) -> tuple:
        env = GymnasiumEnv("x", 1, env_fn=fn, seed=0)
        try:
            env.reset(seed=0)
            for _ in range(200):
                _, _, _, _, info = env.step(torch.zeros(1, 1))
            return float(info["episode_return"][0]), int(info["episode_length"][0])
        finally:
            env.close()

    base = lambda: gym.make("Pendulum-v1")  # noqa: E731 - 200-step episodes, rewards in [-16.3, 0]
    own, length = first_return(base)
    assert length == 200 and own < -100
    assert first_return(lambda: gym.wrappers.TransformReward(base(), lambda r: 10 * r))[0] == pytest.approx(10 * own, rel=1e-5)
    inside = lambda: gym.wrappers.TransformReward(gym.wrappers.RecordEpisodeStatistics(base()), lambda r: 10 * r)  # noqa: E731
    assert first_return(inside)[0] == pytest.approx(own, rel=1e-6)


def test_rewards_transformed_names_the_wrappers_outside_the_innermost_recorder():
    from proxima.envs.gym_adapter import rewards_transformed

    base = gym.make("CartPole-v1")
    record, clip = gym.wrappers.RecordEpisodeStatistics, gym.wrappers.ClipReward
    scale = lambda env: gym.wrappers.TransformReward(env, lambda r: 2 * r)  # noqa: E731
    assert rewards_transformed(scale(base)) == ["TransformReward"]
    assert rewards_transformed(clip(base, -1, 1)) == ["ClipReward"]
    assert rewards_transformed(clip(scale(base), -1, 1)) == ["ClipReward", "TransformReward"]  # outermost first
    assert rewards_transformed(record(scale(base))) == ["TransformReward"]  # it records the scaled rewards
    assert rewards_transformed(scale(record(base))) == []  # CleanRL's order
    assert rewards_transformed(record(scale(record(base)))) == []  # the innermost recorder's figures are logged
    assert rewards_transformed(base) == [] and rewards_transformed(gym.wrappers.NormalizeReward(base)) == []


@pytest.mark.parametrize("factory, names, factor", [("make_scaled", ["TransformReward"], 10.0),
                                                    ("make_clipped", ["ClipReward"], 0.5)])
def test_train_resume_and_eval_say_the_returns_are_of_the_transformed_rewards(envs, tmp_path, capsys, factory, names,
                                                                              factor):
    env, run = f"own48_envs:{factory}", tmp_path / "r"
    code, out, err = run_main(["train", env, *TINY, "--run-dir", str(run)], capsys)
    assert code == 0, err
    assert _start_note(names[0]) in err.splitlines()
    assert _eval_line(out).endswith(f"over 2 episodes (deterministic){_eval_note(names[0])}")
    result = json.loads((run / "eval.json").read_text())
    assert result["env_rewards_transformed"] == names and "env_rewards_scaled" not in result
    # CartPole's reward is 1 a step: the returns are the transformed ones, factor x the lengths
    assert result["returns"] == [factor * n for n in result["lengths"]]
    _, rows = _rows(run / "metrics.csv")
    done = [r for r in rows if r["charts/episodic_return"]]
    assert done and all(float(r["charts/episodic_return"]) == pytest.approx(factor * float(r["charts/episodic_length"]))
                        for r in done)
    code, out, err = run_main(["resume", str(run), "--env", env, "--total-timesteps", "256"], capsys)
    assert code == 0, err
    assert _start_note(names[0]) in err.splitlines()
    code, out, err = run_main(["eval", str(run), "--env", env, "--episodes", "2"], capsys)
    assert code == 0, err
    assert out.splitlines()[0].endswith(_eval_note(names[0])), out


def test_cleanrls_order_logs_the_envs_own_returns_without_a_note(envs, tmp_path, capsys):
    run = tmp_path / "r"
    code, out, err = run_main(["train", "own48_envs:make_recorded", *TINY, "--run-dir", str(run)], capsys)
    assert code == 0, err
    assert "TransformReward" not in err and "TransformReward" not in out
    assert _eval_line(out).endswith("over 2 episodes (deterministic)")
    result = json.loads((run / "eval.json").read_text())
    assert "env_rewards_transformed" not in result and result["returns"] == [float(n) for n in result["lengths"]]


def test_the_eval_note_names_both_wrappers_and_ignores_a_hand_edited_field():
    from proxima.evaluate import format_result

    result = {"env_id": "x", "mean_return": 1.0, "std_return": 0.0, "episodes": 2, "deterministic": True}
    both = {**result, "env_rewards_transformed": ["ClipReward", "TransformReward"]}
    assert format_result(both).endswith(_eval_note("ClipReward and TransformReward", "them"))
    for edited in ("ClipReward", [], [1], ["a b"], None):
        assert format_result({**result, "env_rewards_transformed": edited}) == "x: 1.00 +- 0.00 over 2 episodes (deterministic)"
