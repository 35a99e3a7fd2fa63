"""An env that draws from numpy's global RNG, Python's ``random`` or torch's generator (hand-written research
code does) evaluates to the same numbers every time: the run's eval.json, `proxima eval --json` and
evaluate() agree, and the caller's streams go on as they were, whether the evaluation returns or raises."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from tests.cli_helpers import TINY_RUN, module_written_in, run_main

#: episode length from np.random and torch's generator in reset, rewards from random in step: each
#: stream changes the returns, so a stream evaluate() leaves unseeded makes them differ between calls
ENVS = '''
import random

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces


class Drawn(gym.Env):
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.length = int(np.random.randint(3, 30)) + int(torch.randint(0, 5, ()))
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), random.random(), self.t >= self.length, False, {}


class Told(gym.Env):
    """One-step episodes whose reward is the np.random number its reset drew: the stream, read off the returns."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.drawn = float(np.random.rand())
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), self.drawn, True, False, {}
'''
MODULE = "evalrng_envs"


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, MODULE, ENVS)


def train(capsys, *extra) -> str:
    args = [a for a in TINY_RUN if a not in ("--eval-episodes", "0")]  # this run evaluates at its end
    code, _, err = run_main(["train", f"{MODULE}:Drawn", "--backend", "gymnasium", *args, "--eval-episodes", "4",
                             "--total-timesteps", "64", "--run-dir", "R", "--quiet", *extra], capsys)
    assert code == 0, err
    return "R"


def caller_draws() -> tuple:
    return np.random.random(), random.random(), float(torch.rand(()))


# --eval-every 64: eval.json is the last iteration's evaluation (Trainer._evaluate_on_main), not finish_run's
@pytest.mark.parametrize("extra", [(), ("--eval-every", "64")], ids=["end-of-run", "eval-every"])
def test_eval_json_cli_and_evaluate_give_the_same_returns(capsys, extra):
    from proxima import load
    from proxima.evaluate import evaluate

    run = train(capsys, *extra)
    recorded = json.loads(open(f"{run}/eval.json").read())["returns"]
    policy = load(run, trust_env=True)
    first, second = evaluate(policy, episodes=4)["returns"], evaluate(policy, episodes=4)["returns"]
    code, out, err = run_main(["eval", run, "--trust-run", "--json"], capsys)
    assert code == 0, err
    assert recorded == first == second == json.loads(out)["returns"]
    assert len(set(recorded)) > 1  # the env's draws made the episodes differ: a constant would prove nothing
    # another seed is other draws: the seed chooses them, not a fixed stream
    assert evaluate(policy, episodes=4, seed=7)["returns"] != recorded


def test_evaluate_leaves_the_callers_streams_as_they_were(capsys):
    from proxima import load
    from proxima.evaluate import EvaluationStopped, evaluate

    policy = load(train(capsys), trust_env=True)
    for stop in (None, lambda: True):  # a result, and an evaluation abandoned after its envs' resets drew
        np.random.seed(11), random.seed(11), torch.manual_seed(11)
        saved = np.random.get_state(), random.getstate(), torch.get_rng_state()
        if stop is None:
            evaluate(policy, episodes=4)
        else:
            with pytest.raises(EvaluationStopped):
                evaluate(policy, episodes=4, stop=stop)
        after = caller_draws()
        np.random.set_state(saved[0]), random.setstate(saved[1]), torch.set_rng_state(saved[2])
        assert after == caller_draws()


def test_evaluate_seeds_numpys_stream_with_the_eval_seed_itself(capsys):
    """global_streams(seed), as seed_everything(seed) seeds a run: `proxima eval --seed S` of an env drawing from
    np.random draws what a script that calls np.random.seed(S) draws (the env seeds themselves are S + i)."""
    from proxima import load
    from proxima.evaluate import evaluate

    code, _, err = run_main(["train", f"{MODULE}:Told", "--backend", "gymnasium", *TINY_RUN, "--total-timesteps", "64",
                             "--run-dir", "T", "--quiet"], capsys)
    assert code == 0, err
    policy = load("T", trust_env=True)
    for seed in (5, 123):
        # the sync vector env resets envs 0 and 1 in order: the stream's first two numbers (rewards are float32)
        want = np.random.RandomState(seed).rand(2).astype(np.float32).tolist()
        assert evaluate(policy, episodes=2, seed=seed)["returns"] == want, seed
