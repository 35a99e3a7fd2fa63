"""Review 28 of the Gymnasium adapter: async workers' global RNGs, an env constructor that raises
(sync and async), the healthy workers closed after one env raised mid-run, floats for an integer
Box (a list too), and gymnasium.wrappers.ClipAction in a user's factory (envs:
tests/fixtures/review28_envs.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cli_helpers import isolated, one_error_line, run_main, without_spaces_line

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SMALL = ["--seed", "7", "--num-envs", "3", "--num-steps", "8", "--num-minibatches", "2", "--total-timesteps", "48",
         "--eval-episodes", "0", "--run-dir", "D", "--no-progress"]


def fixture_line(text: str) -> int:
    """The line of review28_envs.py holding ``text``: what an error names as the user's file:line."""
    lines = (FIXTURES / "review28_envs.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


@pytest.fixture(autouse=True)
def fixtures_on_path(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.chdir(tmp_path)




# ------------------------------------------------------------------------------ 1. async workers' global RNGs
#: the reset obs [np.random.rand(), random.random()] of 3 GlobalDraws envs, per (vector, seed), the main
#: process seeded as the trainer seeds it (seed_everything)
DRAWS = """
import json
from proxima.envs.gym_adapter import GymnasiumEnv
from proxima.trainer import seed_everything
out = []
for vector, seed in [("async", 1), ("async", 1), ("async", 2), ("sync", 1)]:
    seed_everything(seed)
    env = GymnasiumEnv("review28_envs:GlobalDraws", 3, vector=vector, seed=seed)
    out.append(env.reset(seed=seed).tolist())
    env.close()
print(json.dumps(out))
"""


def test_async_workers_draw_their_own_global_numbers_the_same_for_the_same_seed(tmp_path):
    """Forked workers all started with the main process's np.random state: every env drew 0.417.. (seed 1);
    Python's random, reseeded from the OS at fork, differed from run to run."""
    import numpy as np

    result = isolated(["-c", DRAWS], tmp_path)
    assert result.returncode == 0, result.stderr
    first, again, other, sync = json.loads(result.stdout.strip().splitlines()[-1])
    for column in (0, 1):  # numpy's, Python's
        assert len({row[column] for row in first}) == 3, first  # each env its own numbers
    assert first == again  # the run's seed decides them
    assert first != other
    # --vector sync is as it was: the envs draw, in turn, from the main process's stream
    expected = np.random.RandomState(1).random_sample(3).astype(np.float32).tolist()
    assert [row[0] for row in sync] == expected


# ------------------------------------------------------------------------------ 2. a constructor that raises
@pytest.mark.parametrize("vector, fail_at, index", [("sync", 3, "1"), ("async", 4, "[012]")])
def test_a_constructor_that_raises_is_one_line_and_the_envs_built_are_closed(tmp_path, vector, fail_at, index):
    """Construction 1 is train's probe; under sync 2, 3, 4 are envs 0, 1, 2; under async 2 is the vector
    env's own probe of env 0 (in the main process) and 3, 4, 5 the workers' envs, in any order. Sync left
    the envs built before the failing one open and named no env nor line; async printed the worker's
    traceback, then "raised ConnectionResetError", and left the other workers' envs open."""
    log = tmp_path / "close.log"
    result = isolated(["-m", "proxima", "train", "review28_envs:BuildFails", *SMALL, "--vector", vector,
                       "--env-kwargs", json.dumps({"log": str(log), "fail_at": fail_at})], tmp_path)
    assert result.returncode == 2, result.stderr
    line = one_error_line(result.stderr, "proxima train")
    at = fixture_line("raise RuntimeError(f\"no licence")
    assert re.fullmatch(rf"building env {index} of 'review28_envs:BuildFails' raised RuntimeError: no licence for "
                        rf"construction {fail_at} \(review28_envs\.py:{at}\)", line), line
    events = log.read_text().splitlines()
    built = {e.split()[1] for e in events if e.startswith("build ")}
    closed = {e.split()[1] for e in events if e.startswith("close ")}
    assert str(fail_at) not in built and len(built) == (2 if vector == "sync" else 4), events
    assert closed == built, events
    assert not (tmp_path / "D").exists()  # no run directory for a run that never started


# ------------------------------------------------------------------------------ 3. the healthy workers closed
def test_after_one_env_raises_mid_run_under_async_the_other_envs_are_closed(tmp_path):
    """The error ended every worker with terminate=True: envs 0 and 2 (seeded 7 and 9) never ran close()."""
    log = tmp_path / "close.log"
    result = isolated(["-m", "proxima", "train", "review28_envs:StepFails", *SMALL, "--vector", "async",
                       "--env-kwargs", json.dumps({"log": str(log), "bad_seed": 8})], tmp_path)
    assert result.returncode == 2, result.stderr
    line = one_error_line(without_spaces_line(result.stderr), "proxima train")  # the run started: its spaces line first
    at = fixture_line('raise RuntimeError(f"step boom')
    assert line.startswith(f"env 'review28_envs:StepFails': env 1 raised RuntimeError: step boom in the env seeded 8 "
                           f"(review28_envs.py:{at}) at env step 3 "), line
    closed = set(log.read_text().splitlines())
    assert {"close seed=7", "close seed=8", "close seed=9"} <= closed, closed


# ------------------------------------------------------------------------------ 4. floats for an integer Box
def _fix(kind: str) -> str:
    """The advice for floats in an integer Box: rounding on purpose, not astype, which drops the fractions too."""
    name = "np.asarray(obs)" if kind == "list" else "obs"
    return (f"(a float would lose its fraction): declare a float Box, or round on purpose: "
            f"return np.rint({name}).astype(np.int64)")


def train_line(kind: str) -> str:
    kwargs = json.dumps({"kind": kind})
    return (f"env 'review28_envs:IntFedFloats': env 0 returned an observation of dtype float64 at reset (after env step 0); "
            f"obs dtype: observation_space.dtype is int64, and float64 does not cast safely to int64 {_fix(kind)} "
            f"(check with: proxima check-env review28_envs:IntFedFloats --env-kwargs '{kwargs}')")


@pytest.mark.parametrize("kind", ["list", "array"])
def test_check_env_and_train_refuse_floats_for_an_integer_box_in_one_line(capsys, kind):
    """A list of floats passed check-env (read cast to int64) and crashed train with numpy's TypeError;
    a float64 array got check-env's diagnosis after the TypeError, at reset only."""
    kwargs = json.dumps({"kind": kind})
    code, out, err = run_main(["check-env", "review28_envs:IntFedFloats", "--env-kwargs", kwargs], capsys)
    assert code == 1, out + err
    assert out.splitlines()[0].startswith(
        "FAIL obs dtype: expected dtype int64 (observation_space.dtype); got dtype float64 at reset(seed=0) "
        f"(does not cast safely to int64 {_fix(kind)})"), out
    code, _, err = run_main(["train", "review28_envs:IntFedFloats", *SMALL, "--env-kwargs", kwargs], capsys)
    assert code == 2, err
    assert one_error_line(err, "proxima train") == train_line(kind)


def test_floats_for_an_integer_box_are_refused_under_async_too(tmp_path):
    """Async's shared memory cast the list to int64 without a word: the run trained on truncated obs."""
    result = isolated(["-m", "proxima", "train", "review28_envs:IntFedFloats", *SMALL, "--vector", "async",
                       "--env-kwargs", json.dumps({"kind": "list"})], tmp_path)
    assert result.returncode == 2, result.stderr
    line = one_error_line(result.stderr, "proxima train")
    assert re.sub(r"env [012] returned", "env 0 returned", line) == train_line("list"), line


# ------------------------------------------------------------------------------ 5. ClipAction
#: how a run and check-env read ClipAction's Box(-inf, inf) over the env's Box(-0.5, 0.5)
CLIP_READING = ("action Box(1,) float32 [-inf, inf] -> Gaussian, 1 dim, unclipped (gymnasium.wrappers.ClipAction clips "
                "to [-0.5, 0.5])")


def test_clip_action_in_the_factory_is_taken_and_read_as_clipping_to_the_env_bounds(capsys):
    # was refused ("drop gymnasium.wrappers.ClipAction"): CleanRL's continuous make_env wraps every env in it
    code, _, err = run_main(["train", "review28_envs:clipped", *SMALL], capsys)
    assert code == 0, err
    assert CLIP_READING in err
    code, out, err = run_main(["check-env", "review28_envs:clipped"], capsys)
    assert code == 0, out + err
    assert CLIP_READING in out and out.splitlines()[-1].startswith("OK: review28_envs:clipped passes"), out
