"""Review 45 of distributed training on CPU, end to end: a `train --nproc 2 --threads 2` job on a machine
that gives it one CPU (its affinity mask, as `taskset -c 0` does) notes the 4 threads on 1 CPU once (the
launcher's, not one per rank), records Proxima's compile cache in meta.json (DDP's import of torch._dynamo
had set torch's /tmp folder), and ends with a 'train on:' command that continues it: the stop line's
`proxima train --resume RUN --nproc 2`, where `proxima resume RUN` (the line before) refuses a run of more
processes than CPUs. The fast parts are tests/unit/test_dist_review45.py.

Two 2-process jobs (gloo) of one iteration each, 20-60 s together on a shared 2-core machine: marked
slow as the other multi-process jobs are (pyproject's markers)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest
from distributed_helpers import LIMIT, env

FLAGS = ["--num-envs", "8", "--num-steps", "32", "--num-minibatches", "4", "--update-epochs", "1", "--eval-episodes", "0",
         "--checkpoint-every", "0", "--no-progress", "--threads", "2"]


def _one_cpu() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def _run(words: list, cwd, home) -> subprocess.CompletedProcess:
    """``proxima WORDS`` on one CPU, with a home of its own and no inductor cache setting of the caller's."""
    e = {k: v for k, v in env(HOME=home).items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME")}
    return subprocess.run([sys.executable, "-m", "proxima", *words], cwd=cwd, env=e, capture_output=True, text=True,
                          timeout=LIMIT, preexec_fn=_one_cpu)


@pytest.mark.slow  # two 2-process jobs: see the module's docstring
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs an affinity mask to give the job one CPU")
def test_an_nproc_job_beyond_the_cpus_notes_its_threads_once_keeps_the_cache_and_trains_on_as_told(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    done = _run(["train", "CartPole-v1", "--nproc", "2", *FLAGS, "--total-timesteps", "512", "--run-dir", "run"], tmp_path, home)
    assert done.returncode == 0, done.stderr[-4000:]
    assert [line for line in done.stderr.splitlines() if "more than" in line] == [
        "proxima: note: --threads 2 in each of 2 processes (4 threads) is more than the 1 CPU this process may use: the "
        "threads take turns on them, which is usually slower than --threads 1"], done.stderr[-4000:]
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    # was "/tmp/torchinductor_root (0.0 MiB)": a --compile job compiled cold every launch
    assert meta["machine"]["compile"]["cache"].startswith(f"{home / '.cache' / 'proxima' / 'inductor'} ("), meta["machine"]
    train_on = done.stdout.splitlines()[-2]
    # was `proxima resume run --total-timesteps 1024`, which refuses 2 processes on 1 CPU (exit 2)
    assert train_on == "train on: proxima train --resume run --nproc 2 --total-timesteps 1024", done.stdout
    words = shlex.split(train_on.removeprefix("train on: "))
    assert words[0] == "proxima"
    done = _run(words[1:], tmp_path, home)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.splitlines()[-2:] == ["train on: proxima train --resume run --nproc 2 --total-timesteps 2048",
                                             "run directory: run"], done.stdout
