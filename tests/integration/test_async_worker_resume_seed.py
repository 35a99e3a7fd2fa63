"""A resumed --vector async run's workers draw global-RNG numbers of their own: each worker's np.random,
random and torch CPU streams were seeded from the run's seed and its env index alone, so every resume
replayed the np.random numbers of the run's start (the episodes it restarts, with reset(seed +
iteration), were meant to be new). A fresh run seeds its workers as before; two resumes from one
checkpoint draw alike."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from proxima.envs.gym_adapter import _seed_worker
from tests.cli_helpers import isolated

#: reset's obs is [its np.random draw, its random draw]; with ``log`` each reset appends "pid length" there
DRAWS_ENV = '''
import os
import random

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Draws(gym.Env):
    observation_space = spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, log=None):
        self.log = log

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.length = 0, int(np.random.randint(2, 30))
        if self.log:
            with open(self.log, "a") as f:
                f.write(f"{os.getpid()} {self.length}\\n")
        return np.array([self.length / 30, random.random()], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), float(action), False, self.t >= self.length, {}
'''


def _draws(seed, index, resumed_at=None) -> list:
    """[np.random, random, torch] draws after _seed_worker, the test process's global RNGs put back."""
    states = np.random.get_state(), random.getstate(), torch.random.get_rng_state()
    try:
        if resumed_at is None:
            _seed_worker(seed, index)
        else:
            _seed_worker(seed, index, resumed_at)
        return [np.random.randint(1 << 30, size=4).tolist(), random.random(), torch.rand(2).tolist()]
    finally:
        np.random.set_state(states[0])
        random.setstate(states[1])
        torch.random.set_rng_state(states[2])


def test_a_resumed_workers_streams_differ_from_the_runs_start_and_repeat_for_the_same_iteration():
    """Was _seed_worker(seed, index) alone: a resume at iteration 2 drew the fresh worker's numbers."""
    # a fresh worker (resumed_at 0, the default) seeds as it always did: the words of SeedSequence([seed, index])
    words = np.random.SeedSequence([7, 1]).generate_state(10)
    fresh = _draws(7, 1)
    assert fresh[0] == np.random.RandomState(words[:4]).randint(1 << 30, size=4).tolist()
    assert _draws(7, 1, 0) == fresh
    resumed = _draws(7, 1, 2)
    for got, start in zip(resumed, fresh):  # numpy's, Python's, torch's: each a stream of its own
        assert got != start
    assert _draws(7, 1, 2) == resumed  # the same checkpoint, the same numbers
    assert _draws(7, 1, 3)[0] != resumed[0]  # another iteration, others
    assert _draws(7, 0, 2)[0] != resumed[0]  # each env its own, as at the start
    # a resume at iteration k draws as child k of the fresh worker's SeedSequence (its spawn key), the env's own
    # entropy kept: words of [seed, index + k] would be another env's
    child = np.random.SeedSequence([7, 1]).spawn(3)[2]
    assert resumed[0] == np.random.RandomState(child.generate_state(10)[:4]).randint(1 << 30, size=4).tolist()


def test_a_workers_numpy_and_python_streams_are_not_one_stream():
    """Both are MT19937: seeded from the same words, random.random() would be np.random.random_sample()."""
    states = np.random.get_state(), random.getstate()
    try:
        for resumed_at in (0, 2):
            _seed_worker(7, 1, resumed_at)
            assert np.random.random_sample(3).tolist() != [random.random() for _ in range(3)]
    finally:
        np.random.set_state(states[0])
        random.setstate(states[1])


#: the reset obs of 2 async workers: at the start (seed 5); after reseed_workers(2) and reset(seed 7), as
#: train_state.restore does, on the same vector env and on a second one built afresh; after reseed_workers(3)
#: (a resume from another checkpoint) and the same reset(seed 7); then a sync env's
_VECTOR = """
import json
from proxima.envs.gym_adapter import GymnasiumEnv
from proxima.trainer import seed_everything

out = {}
env = GymnasiumEnv("draws_env:Draws", 2, vector="async", seed=5)
out["start"] = env.reset(seed=5).tolist()
env.reseed_workers(2)
out["resumed"] = env.reset(seed=7).tolist()
env.close()
env = GymnasiumEnv("draws_env:Draws", 2, vector="async", seed=5)
env.reset(seed=5)
env.reseed_workers(2)
out["again"] = env.reset(seed=7).tolist()
env.close()
env = GymnasiumEnv("draws_env:Draws", 2, vector="async", seed=5)
env.reset(seed=5)
env.reseed_workers(3)
out["other"] = env.reset(seed=7).tolist()
env.close()
seed_everything(5)
env = GymnasiumEnv("draws_env:Draws", 2, vector="sync", seed=5)
env.reseed_workers(2)
out["sync"] = env.reset(seed=5).tolist()
env.close()
print(json.dumps(out))
"""


def test_reseed_workers_gives_each_async_worker_new_draws_and_leaves_sync_envs_alone(tmp_path):
    """The worker end of the resume: each worker's global RNGs reseeded for the iteration resumed at."""
    (tmp_path / "draws_env.py").write_text(DRAWS_ENV)
    result = isolated(["-c", "import sys; sys.path.insert(0, '.')\n" + _VECTOR], tmp_path)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    for env in (0, 1):
        assert out["resumed"][env][0] != out["start"][env][0], out  # np.random
        assert out["resumed"][env][1] != out["start"][env][1], out  # random
    assert out["again"] == out["resumed"]
    for env in (0, 1):  # the iteration resumed at is part of the workers' seeds, not only whether it is a resume
        assert out["other"][env][0] != out["resumed"][env][0], out
    # --vector sync: the envs draw from the main process's stream, which the resume restores itself
    assert [round(row[0] * 30) for row in out["sync"]] == np.random.RandomState(5).randint(2, 30, size=2).tolist()


def _lengths(log) -> dict:
    """{worker pid: [the episode lengths its resets drew]}, in the order each worker drew them."""
    drawn: dict = {}
    for line in log.read_text().splitlines():
        pid, length = line.split()
        drawn.setdefault(pid, []).append(int(length))
    return drawn


def test_a_worker_gone_before_the_resume_is_named_at_resume(tmp_path):
    """Reseeding is the resume's first call into the workers: a worker that died is told there, not at reset."""
    (tmp_path / "draws_env.py").write_text(DRAWS_ENV)
    program = """
import os, signal, sys
sys.path.insert(0, ".")
from proxima.envs.base import EnvError
from proxima.envs.gym_adapter import GymnasiumEnv

env = GymnasiumEnv("draws_env:Draws", 2, vector="async", seed=5)
env.reset(seed=5)
worker = env.envs.processes[0]
os.kill(worker.pid, signal.SIGKILL)
worker.join(10)
try:
    env.reseed_workers(2)
except EnvError as e:
    print(e)
else:
    print("no error")
env.close()
"""
    result = isolated(["-c", program], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == (
        "env 'draws_env:Draws' (--vector async): the worker process of env 0 ended at resume (killed by SIGKILL: "
        "out of memory (the kernel's OOM killer), or killed by hand?)")


#: a 2-iteration async run (2 envs x 16 steps; a population: 2 members' 2 envs each), then two resumes to
#: 4 iterations from copies of its checkpoint; each run's draws moved from the env's log to a file of its own;
#: the seed flags are the program's arguments
_RUNS = """
import shutil, sys
from pathlib import Path
sys.path.insert(0, ".")
from proxima import cli

log = Path("draws.log")
args = ["--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--eval-episodes", "0",
        "--no-progress", "--threads", "1", "--quiet"]
code = cli.main(["train", "draws_env:Draws", "--vector", "async", "--num-envs", "2", *sys.argv[1:], "--env-kwargs",
                 '{"log": "%s"}' % log.resolve(), "--total-timesteps", "64", "--run-dir", "A", *args])
assert code == 0, code
log.rename("fresh.log")
shutil.copytree("A", "B")
for run in ("A", "B"):
    code = cli.main(["resume", run, "--trust-run", "--total-timesteps", "128", "--quiet", "--no-progress"])
    assert code == 0, code
    log.rename(run + ".log")
"""


# a population restores through Population.load_state_dict, not train_state.restore: it reseeds its workers too
@pytest.mark.parametrize("seeds, workers", [(["--seed", "3"], 2), (["--seeds", "1,2"], 4)], ids=["run", "population"])
def test_a_resumed_async_run_draws_anew_and_two_resumes_draw_alike(tmp_path, seeds, workers):
    """The reviewer's run (probes:GlobalLog): every resume's workers drew the numbers the run's start had drawn."""
    (tmp_path / "draws_env.py").write_text(DRAWS_ENV)
    result = isolated(["-c", _RUNS, *seeds], tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr
    # the worker of env i is not known by its pid: each run's sequences compared as a set
    fresh, a, b = (sorted(_lengths(tmp_path / f"{name}.log").values()) for name in ("fresh", "A", "B"))
    assert len(fresh) == len(a) == len(b) == workers
    for drawn in a:
        # its first reset is the trainer's at construction (the run's seed alone), whose episodes restore's reset replaces
        after = drawn[1:]
        assert len(after) >= 2, a
        # restore's reset is the first draw of the reseeded stream: reseeded after it, it drew the fresh run's 2nd number
        assert all(after[0] != start[1] for start in fresh), (a, fresh)
        assert all(after != start[1:1 + len(after)] and after != start[:len(after)] for start in fresh), (a, fresh)
    assert a == b  # two resumes from one checkpoint draw the same numbers
