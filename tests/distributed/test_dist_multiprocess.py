"""Two processes on CPU (gloo), launched the way a user does it: `proxima train ... --nproc 2`.

One reference run feeds three checks: the ranks end with identical weights (DDP averaged every
gradient, including when target_kl stops an epoch early); a run stopped by SIGTERM and resumed ends
bit-identical to the uninterrupted one (every rank restored its own envs and RNG from the same
checkpoint); a rank that raises ends the job in bounded time.
"""

from __future__ import annotations

import re
import signal
import sys
import time

import pytest
import torch
from distributed_helpers import SMALL, STEPS_PER_ITER, csv_rows, load_params, run, same_params, start, stop, train_cmd, wait_for_rows

ITERS = 8  # the stop comes after iteration 2: 6 iterations of margin, a periodic checkpoint at 4
#: normalizers (per-rank statistics in the checkpoint), target_kl (the early stop must be decided
#: identically on both ranks or one waits forever), periodic checkpoints (gathered per-rank state)
ARGS = [*SMALL, "--total-timesteps", str(ITERS * STEPS_PER_ITER), "--norm-obs", "--norm-reward",
        "--target-kl", "0.0005", "--checkpoint-every", "4"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("dist")


@pytest.fixture(scope="module")
def reference(workdir):
    """An uninterrupted 2-process run with the default (time-stamped) run directory."""
    cwd = workdir / "ref"
    cwd.mkdir()
    res = run(train_cmd(*ARGS), cwd, PROXIMA_DEBUG_DUMP_PARAMS=cwd / "dump")
    assert res.returncode == 0, res.stderr[-4000:]
    return cwd


def test_ranks_hold_identical_parameters(reference):
    r0, r1 = load_params(reference / "dump", 0), load_params(reference / "dump", 1)
    assert r0["world_size"] == r1["world_size"] == 2
    assert r0["iteration"] == r1["iteration"] == ITERS
    assert r0["global_step"] == r1["global_step"] == ITERS * STEPS_PER_ITER  # counted over both ranks
    assert same_params(r0["params"], r1["params"])
    # the time-stamped default run directory is rank 0's on every rank, and only rank 0 wrote one
    assert r0["run_dir"] == r1["run_dir"]
    runs = list((reference / "runs").iterdir())
    assert [str(p.relative_to(reference)) for p in runs] == [r0["run_dir"]]
    assert csv_rows(runs[0] / "metrics.csv") == ITERS


def test_checkpoint_holds_every_rank(reference):
    from proxima.checkpoint import load_checkpoint

    run_dir = next((reference / "runs").iterdir())
    state = load_checkpoint(run_dir)
    assert state["world_size"] == 2 and state["global_step"] == ITERS * STEPS_PER_ITER
    ranks = state["ranks"]
    assert len(ranks) == 2
    assert torch.equal(ranks[0]["next_obs"], state["next_obs"])  # rank 0's pieces at the top level too
    assert not torch.equal(ranks[0]["next_obs"], ranks[1]["next_obs"])  # distinct env seeds per rank
    # the normalizer statistics are merged across ranks every iteration; the reward scaler's running returns are per rank
    assert torch.equal(ranks[0]["obs_normalizer"]["rms.mean"], ranks[1]["obs_normalizer"]["rms.mean"])
    assert not torch.equal(ranks[0]["reward_scaler"]["returns"], ranks[1]["reward_scaler"]["returns"])
    # a 2-process checkpoint refuses a 1-process resume with an actionable message
    from proxima.checkpoint import CheckpointError
    from proxima.trainer import train

    with pytest.raises(CheckpointError, match=r"written by 2 process\(es\), resumed with 1; use the same --nproc \(proxima resume "
                       + re.escape(str(run_dir)) + " starts 2;"):
        train(None, resume=run_dir, quiet=True)


def test_sigterm_stops_all_ranks_and_resume_is_exact(reference, workdir):
    cwd = workdir / "resume"
    cwd.mkdir()
    dump = cwd / "dump"
    proc = start(train_cmd(*ARGS, "--run-dir", "run"), cwd, PROXIMA_DEBUG_DUMP_PARAMS=dump)
    wait_for_rows(cwd / "run" / "metrics.csv", 2, proc)
    rc, out, err = stop(proc, signal.SIGTERM)
    assert rc == 143, err[-4000:]
    assert err.count("proxima: stopped by SIGTERM; checkpoint: run/checkpoints/step_") == 1  # rank 0's (signals.says_stops)
    assert "Traceback" not in err and "SignalException" not in err, err[-4000:]  # a stop, not a crash
    assert not dump.exists()  # neither rank finished
    from proxima.checkpoint import list_checkpoints, load_checkpoint

    state = load_checkpoint(list_checkpoints(cwd / "run")[-1])
    stopped_at = state["iteration"]
    assert 2 <= stopped_at < ITERS, "the run finished before the signal; make it longer"
    assert len(state["ranks"]) == 2

    # `proxima resume` by itself: it reads the process count from the checkpoint and starts both ranks
    res = run([sys.executable, "-m", "proxima", "resume", "run"], cwd, PROXIMA_DEBUG_DUMP_PARAMS=dump)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "proxima resume: run was written by 2 processes: resuming with 2 processes on this machine" in res.stderr
    assert f"at global step {stopped_at * STEPS_PER_ITER:,} (iteration {stopped_at})" in res.stderr
    r0, r1 = load_params(dump, 0), load_params(dump, 1)
    assert same_params(r0["params"], r1["params"])
    ref = load_params(reference / "dump", 0)
    assert r0["global_step"] == ref["global_step"]
    assert same_params(r0["params"], ref["params"]), "stop + resume diverged from the uninterrupted run"
    assert csv_rows(cwd / "run" / "metrics.csv") == ITERS



def test_failing_rank_ends_the_job(workdir):
    cwd = workdir / "fail"
    cwd.mkdir()
    proc = start(train_cmd(*SMALL, "--total-timesteps", str(200 * STEPS_PER_ITER), "--run-dir", "run"), cwd,
                 PROXIMA_TEST_FAIL_RANK=1, PROXIMA_TEST_FAIL_ITER=2, PROXIMA_DIST_TIMEOUT=120)
    wait_for_rows(cwd / "run" / "metrics.csv", 1, proc)  # iteration 1 done; rank 1 raises at the start of 2
    t0 = time.monotonic()
    try:
        out, err = proc.communicate(timeout=120)
    except Exception:
        proc.kill()
        raise
    elapsed = time.monotonic() - t0
    assert proc.returncode != 0
    assert elapsed < 60, f"the job took {elapsed:.0f} s to end after a rank failed"
    assert "proxima: rank 1 failed: RuntimeError: test failure injected on rank 1 at iteration 2" in err
    # rank 0 ends one of two ways, a race between gloo and torchrun: it notices the lost peer in a
    # collective and says so, or torchrun, seeing rank 1 exit, stops it first (SIGTERM) and says so
    # (the line "lost contact" is unit-tested in test_dist_launch.py)
    assert ("proxima: rank 0 stopped: lost contact with another rank" in err
            or "closing signal SIGTERM" in err), err[-3000:]
    assert csv_rows(cwd / "run" / "metrics.csv") <= 2
