"""A resume under torchrun stopped while it sets up (its envs being built): every rank says the run is
as its last checkpoint left it; none says "nothing was kept" of a run that is untouched."""

from __future__ import annotations

import signal
import sys
import textwrap

import pytest

from distributed_helpers import SMALL, STEPS_PER_ITER, pythonpath, run

ENV = textwrap.dedent("""
    import os, signal, time
    import gymnasium as gym

    class StopWhileBuilt(gym.Wrapper):
        # with STOP_WHILE_BUILT set, rank 0 signals torchrun (which passes the stop to every rank)
        # while every rank is building its envs
        def __init__(self):
            super().__init__(gym.make("CartPole-v1"))
            if os.environ.get("STOP_WHILE_BUILT") and "RANK" in os.environ:
                if os.environ["RANK"] == "0" and not os.environ.get("_SIGNALLED"):
                    os.environ["_SIGNALLED"] = "1"
                    os.kill(os.getppid(), signal.SIGTERM)
                time.sleep(3)
""")


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_a_resume_stopped_while_its_envs_are_built_leaves_the_run_as_it_was_on_every_rank(tmp_path):
    (tmp_path / "stop_env.py").write_text(ENV)
    env_id = "stop_env:StopWhileBuilt"
    args = [*SMALL, "--num-envs", "2", "--run-dir", "R"]
    done = run([sys.executable, "-m", "proxima", "train", env_id, "--nproc", "2", *args, "--total-timesteps",
                str(STEPS_PER_ITER // 4)], tmp_path, PYTHONPATH=pythonpath(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    before = sorted(p.name for p in (tmp_path / "R" / "checkpoints").iterdir())
    res = run([sys.executable, "-m", "proxima", "resume", "R", "--total-timesteps", str(STEPS_PER_ITER), "--env", env_id],
              tmp_path, PYTHONPATH=pythonpath(tmp_path), STOP_WHILE_BUILT=1)
    assert res.returncode == 128 + signal.SIGTERM, res.stderr[-3000:]
    lines = [line for line in res.stderr.splitlines() if line.startswith("proxima: stopped by SIGTERM")]
    assert len(lines) == 2, res.stderr[-3000:]  # one per rank
    for line in lines:  # (a rank still learning from rank 0 what the resume continues leaves the checkpoint to rank 0)
        assert line.startswith("proxima: stopped by SIGTERM; before training started; the run is as its last checkpoint "
                               "left it"), res.stderr[-3000:]
    assert any("left it; checkpoint: " in line for line in lines), res.stderr[-3000:]
    assert "nothing was kept" not in res.stderr and "Traceback" not in res.stderr
    assert sorted(p.name for p in (tmp_path / "R" / "checkpoints").iterdir()) == before
    assert not (tmp_path / "R" / ".proxima.lock").exists()
