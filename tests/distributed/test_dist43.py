"""Multi-process failures of review 43: a torchrun --max-restarts restart resumes instead of hanging."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
from distributed_helpers import pythonpath, run

#: a CartPole whose rank 1 raises once, at its 161st env step, unless the marker file exists (which it
#: creates first), so torchrun's restart of the job runs clean
ONCE_ENV = '''
import os
import gymnasium as gym

class FailOnce(gym.Wrapper):
    def __init__(self, **kw):
        super().__init__(gym.make("CartPole-v1"))
        self.n = 0

    def step(self, action):
        self.n += 1
        marker = os.path.join(os.path.dirname(__file__), "failed-once")
        if os.environ.get("RANK") == "1" and self.n > 160 and not os.path.exists(marker):
            open(marker, "w").close()
            raise ValueError("env failed once on rank 1")
        return self.env.step(action)
'''


@pytest.mark.slow  # two 2-process starts, ~35 s on 2 cores: the slow tier, as test_rank_failure41's repro
def test_max_restarts_restart_resumes_from_the_newest_checkpoint_and_finishes(tmp_path):
    """torch's agent keeps one store for every attempt: the restarted ranks read the dead attempt's gloo
    addresses and hung (or failed connecting) instead of resuming. 2 ranks x 2 envs x 32 steps = 128 steps an
    iteration; rank 1 fails in iteration 6, after the checkpoint of iteration 4; the restart resumes there and
    ends at the total with one metrics.csv row per iteration (~35 s)."""
    (tmp_path / "onceenv.py").write_text(ONCE_ENV)
    res = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "--max-restarts", "1", "-m", "proxima", "train", "onceenv:FailOnce", "--num-envs", "2",
               "--num-steps", "32", "--total-timesteps", "1024", "--checkpoint-every", "2", "--resume", "auto",
               "--run-dir", "r", "--eval-episodes", "0", "--no-progress", "--threads", "1"], tmp_path, timeout=150,
              PYTHONPATH=pythonpath(tmp_path), PROXIMA_DIST_TIMEOUT=30)
    assert res.returncode == 0, res.stderr[-4000:]
    assert (tmp_path / "failed-once").exists()  # the restart did happen
    resumed = [line for line in res.stderr.splitlines() if line.startswith("proxima: resuming ")]
    assert len(resumed) == 1 and resumed[0].endswith("/r at global step 512 (iteration 4)"), res.stderr[-4000:]
    with open(tmp_path / "r" / "metrics.csv", newline="") as f:
        steps = [int(row["global_step"]) for row in csv.DictReader(f)]
    assert steps == [128 * i for i in range(1, 9)]
    assert Path(tmp_path / "r" / "checkpoints" / "step_000000001024.pt").exists()


class _Agent:
    def __init__(self, restarts_left: int, ranks):
        self._remaining_restarts, self.ranks = restarts_left, ranks


class _Ranks:
    def __init__(self, failures: dict):
        self._failures, self.closed = failures, 0


def test_torchrun_marks_the_teardown_when_torch_closes_the_ranks_on_a_failure_with_no_restart_left(tmp_path):
    """torch's SubprocessContext._poll closes (SIGTERMs) the other ranks the moment one fails, before the agent's
    _stop_workers wrote the marker: rank 0, still setting up, said "stopped by SIGTERM; before training started;
    nothing was kept" after rank 1's error. The marker now comes first; with a restart left, none (the job goes on)."""
    from proxima import torchrun

    marker = tmp_path / "torn-down"

    def poll(agent):  # torch's _monitor_workers: its _poll closes the ranks when one failed
        agent.ranks.close()

    def close(ranks):
        ranks.closed += 1
        return marker.exists()

    monitor, closing = torchrun.failure_close_marking(str(marker), poll, close)
    _Ranks.close = closing
    try:
        monitor(_Agent(1, _Ranks({1: "exit 2"})))  # a restart left: torch restarts the ranks, no teardown
        assert not marker.exists()
        monitor(_Agent(0, _Ranks({})))  # all ranks done, none failed: nothing to mark
        assert not marker.exists()
        ranks = _Ranks({1: "exit 2"})
        monitor(_Agent(0, ranks))
        assert marker.exists() and ranks.closed == 1
    finally:
        del _Ranks.close


def test_teardown_sigterm_as_a_rank_sets_up_leaves_the_lost_contact_line_to_the_failure(monkeypatch, tmp_path):
    """OutsideLoop (setup, before the loop) raised "stopped by SIGTERM; before training started; nothing was kept"
    for torchrun's teardown; the rank's next collective fails instead and names the lost peer."""
    import os
    import signal

    from proxima.signals import OutsideLoop

    marker = tmp_path / "torn-down"
    marker.touch()
    monkeypatch.setenv("PROXIMA_TEARDOWN_FILE", str(marker))
    outside = OutsideLoop()
    with outside:
        os.kill(os.getpid(), signal.SIGTERM)  # no TrainingInterrupted
        os.kill(os.getpid(), signal.SIGINT)  # and nothing after it: the failure is the line to read
    assert outside.signum == 0
