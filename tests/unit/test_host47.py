"""Review 47's hostile inputs: an unprintable info['is_success'], a hand-edited eval.json's success
fields, a module of many env classes, a best.pt that is no file, and a zip of a million records."""

from __future__ import annotations

import json
import time

import pytest

from tests.cli_helpers import TINY_RUN, module_written_in, run_main

HOST_ENV = '''
import gymnasium as gym
import numpy as np


class BadRepr:
    def __repr__(self):
        raise RuntimeError("repr boom")


class BigList(list):
    pass


VALUES = {"repr": BadRepr, "huge": lambda: 10 ** 5000, "list": lambda: [1.0] * 10 ** 6,
          "sublist": lambda: BigList([2.0] * 10 ** 6)}


class E(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, mode="repr"):
        self.mode = mode

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        done = self.t >= 8
        return np.zeros(2, np.float32), 1.0, done, False, ({"is_success": VALUES[self.mode]()} if done else {})
'''


@pytest.fixture
def host_env(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "host47_env", HOST_ENV)


@pytest.mark.parametrize("mode, shown", [("repr", "<unprintable BadRepr> (BadRepr)"),
                                         ("huge", "<unprintable int> (int)"),
                                         ("list", "[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, ...] (list)"),
                                         ("sublist", "[2.0, 2.0, 2.0, 2.0, 2.0, 2.0, ...] (BigList)")])
def test_an_unprintable_or_huge_is_success_trains_with_one_bounded_note(host_env, tmp_path, capsys, mode, shown):
    run = tmp_path / "run"
    code, _, err = run_main(["train", "host47_env:E", *TINY_RUN, "--seed", "1", "--total-timesteps", "64",
                             "--run-dir", str(run), "--quiet", "--env-kwargs", json.dumps({"mode": mode})], capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if "is_success" in line]
    assert notes == [f"proxima: note: env 'host47_env:E': env 0's info['is_success'] = {shown} at env step 8 is no bool "
                     "or number in [0, 1]: such values are left out of charts/success_rate (this note is not repeated)"], err


def test_the_short_repr_is_bounded_and_never_raises():
    from proxima.envs.gym_adapter import _short_repr

    class Loud(list):
        def __repr__(self):
            raise AssertionError("the whole repr was built")

    assert _short_repr(Loud([1] * 10)) == "[1, 1, 1, 1, 1, 1, ...]"
    assert _short_repr(10 ** 400) == "100000000000000000...0000000000000000000"
    assert _short_repr("x" * 1000) == "'xxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxx'"
    assert _short_repr({"a": "b  \n c"}) == r"{'a': 'b \n c'}"
    start = time.perf_counter()
    for _ in range(100):
        _short_repr([0.5] * 10 ** 5)
    assert time.perf_counter() - start < 0.5


def _line(**fields) -> str:
    from proxima.evaluate import format_result

    return format_result({"env_id": "CartPole-v1", "mean_return": 9.0, "std_return": 1.0, "episodes": 10,
                          "deterministic": True, **fields})


@pytest.mark.parametrize("fields", [{"success_rate": 1e308}, {"success_rate": float("nan")}, {"success_rate": float("inf")},
                                    {"success_rate": -5.0}, {"success_rate": 7.0}, {"success_rate": "x"},
                                    {"success_rate": 0.5, "success_episodes": -3},
                                    {"success_rate": 0.5, "success_episodes": 10 ** 30},
                                    {"success_rate": 0.5, "success_episodes": 0},
                                    {"success_rate": 0.5, "success_episodes": 11},
                                    {"success_rate": 0.5, "success_episodes": 2.0},
                                    {"success_rate": 0.5, "success_episodes": True}])
def test_a_hand_edited_success_rate_is_left_out_of_the_line(fields):
    assert _line(**fields) == "CartPole-v1: 9.00 +- 1.00 over 10 episodes (deterministic)"


def test_a_success_rate_an_evaluation_writes_is_shown():
    assert _line(success_rate=1) == "CartPole-v1: 9.00 +- 1.00 over 10 episodes (deterministic); success rate 1.00"
    # 9 of 10: success_episodes is written only when fewer than all reported (10 of 10 is left out: test_left50)
    assert _line(success_rate=0.0, success_episodes=9) == ("CartPole-v1: 9.00 +- 1.00 over 10 episodes (deterministic); "
                                                           "success rate 0.00 over the 9 episodes that reported "
                                                           "info['is_success']")
    assert _line(success_rate=0.25, success_episodes=4).endswith("; success rate 0.25 over the 4 episodes that reported "
                                                                 "info['is_success']")


def test_a_module_of_many_env_classes_is_named_with_20_of_them_in_linear_time(tmp_path, monkeypatch):
    from proxima.envs.gym_adapter import _module_id_hint

    n = 20_000  # each a subclass of the one before: the old list scan took n**2 / 2 comparisons
    lines = ["import gymnasium as gym", "class E0(gym.Env): pass", *(f"class E{i}(E{i - 1}): pass" for i in range(1, n))]
    (tmp_path / "host47_many.py").write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(tmp_path)
    start = time.perf_counter()
    hint = _module_id_hint("host47_many")
    took = time.perf_counter() - start
    names = ", ".join(f"E{i}" for i in range(20))
    assert hint == (f"'host47_many' is a module ({tmp_path / 'host47_many.py'}), not an env id: name the env class in it, "
                    f"host47_many:ClassName, e.g. host47_many:E0 (its env classes: {names} and 19,980 more)")
    assert took < 6, took


@pytest.mark.parametrize("kind, said", [("dir", "is a directory"), ("fifo", "is not a regular file")])
def test_a_best_pt_that_is_no_file_is_named_as_such(tmp_path, capsys, kind, said):
    import os

    import proxima
    from proxima.checkpoint import CheckpointError

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("eval_every: 512\n")
    best = run / "checkpoints" / "best.pt"
    best.mkdir() if kind == "dir" else os.mkfifo(best)
    with pytest.raises(CheckpointError) as e:
        proxima.load(run, best=True)
    assert str(e.value) == f"{best} {said}, not a checkpoint"
    code, _, err = run_main(["eval", str(run), "--best"], capsys)
    assert code != 0 and err.strip().endswith(f"{best} {said}, not a checkpoint"), err
