"""An env that never ends its episodes: the end-of-run evaluation plays each episode to the step cap
(100,000 steps), silently for minutes; the run says so before it starts, and how to skip it."""
import pytest

from tests.cli_helpers import TINY_RUN, module_written_in, run_main

ENDLESS = '''
import gymnasium as gym
import numpy as np


class Endless(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 1.0, False, False, {}
'''


@pytest.fixture
def endless(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "endless35", ENDLESS)


@pytest.fixture
def no_evaluation(monkeypatch):
    """evaluate() answers at once: the note is printed before the evaluation starts, which is what counts."""
    import proxima.evaluate

    monkeypatch.setattr(proxima.evaluate, "evaluate", lambda policy, episodes, **kw: {
        "env_id": "x", "episodes": episodes, "mean_return": 0.0, "std_return": 0.0, "returns": [0.0] * episodes,
        "lengths": [1] * episodes, "deterministic": True})


NOTE = ("proxima: note: no training episode ended in the 128 steps trained; the end-of-run evaluation plays 3 episodes "
        "of up to 100,000 steps each, which may take long (--eval-episodes 0 skips it; give the env a time limit)")


def test_a_run_whose_episodes_never_ended_says_what_the_evaluation_will_cost(endless, no_evaluation, tmp_path, capsys):
    args = ["train", "endless35:Endless", *TINY_RUN, "--total-timesteps", "128", "--eval-episodes", "3"]
    code, _, err = run_main([*args, "--run-dir", str(tmp_path / "a")], capsys)
    assert code == 0, err
    assert NOTE in err.splitlines()
    code, _, err = run_main([*args, "--run-dir", str(tmp_path / "b"), "--quiet"], capsys)
    assert code == 0 and "no training episode ended" not in err


def test_no_note_where_episodes_ended(no_evaluation, tmp_path, capsys):
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "128", "--eval-episodes", "3",
                             "--run-dir", str(tmp_path / "c")], capsys)
    assert code == 0 and "no training episode ended" not in err
