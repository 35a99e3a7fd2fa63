"""Writes stopped by a file size limit (EFBIG, "File too large": ulimit -f, a scheduler's limit, FAT32's
4 GiB): the line names the file that failed (a resume's rewrite of the TensorBoard events, not
metrics.csv), says what to do and the size needed; and `proxima report`'s steps row of a killed run
names the checkpoint a resume continues from.

The limit is real (resource.setrlimit(RLIMIT_FSIZE) in a child Python): Python ignores SIGXFSZ at
startup, so a write past the limit fails with EFBIG instead of killing the process."""

from __future__ import annotations

import csv
import errno
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

from proxima import diskspace
from proxima.logger import CSV_COLUMNS, RunLogger
from tests.cli_helpers import run_main

LIMIT = 8 * 1024  # bytes; `ulimit -f 8` in bash


def _under_file_size_limit(code: str, limit: int = LIMIT) -> str:
    """stdout of ``code`` run by a child Python whose files may be at most ``limit`` bytes."""
    script = "import resource\nresource.setrlimit(resource.RLIMIT_FSIZE, ({0}, {0}))\n".format(limit) + textwrap.dedent(code)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _logged_run(run_dir: Path, iterations: int = 60, batch: int = 128) -> None:
    """A run's metrics.csv and TensorBoard events, one row per iteration of ``batch`` steps."""
    logger = RunLogger(run_dir, iterations * batch, progress=False)
    for i in range(1, iterations + 1):
        extra = {f"custom/m{k}": float(k * i) for k in range(10)}  # events only: metrics.csv keeps its columns
        logger.log(i, i * batch, {"charts/episodic_return": 10.0 + i, "losses/value_loss": 1.0 / i,
                                  "losses/policy_loss": -0.01 * i, "losses/entropy": 0.69, "episodes": 1, **extra})
    logger.close()


# ------------------------------------------------------------------------ 1: a resume's events rewrite
def test_a_resume_that_cannot_rewrite_the_events_names_the_events_file_and_leaves_no_temp_file(tmp_path):
    run = tmp_path / "uf"
    _logged_run(run)
    (events,) = run.glob("events.out.tfevents.*")
    before = events.read_bytes()
    assert len(before) > 2 * LIMIT and (run / "metrics.csv").stat().st_size < LIMIT  # the events fail, not the CSV

    line = _under_file_size_limit(f"""
        from pathlib import Path
        from proxima.diskspace import StorageError
        from proxima.logger import RunLogger
        try:
            RunLogger(Path({str(run)!r}), 60 * 128, resume_step=40 * 128, progress=False)
        except StorageError as e:
            print(e)
        """)
    assert line.startswith(f"{events}: could not rewrite TensorBoard events without the steps a resume trains again "
                           "(File too large); this process may write files of at most 8.0 KiB (its file size limit: "
                           "ulimit -f, or a scheduler's): raise the limit"), line
    assert "metrics.csv" not in line
    need = line.rsplit("; the rewrite needs ", 1)[1]
    assert need.endswith(" KiB") and LIMIT / 1024 < float(need.split()[0]) < len(before) / 1024
    assert events.read_bytes() == before  # left as it was
    assert not [p.name for p in run.iterdir() if "events-rewrite" in p.name]


# ------------------------------------------------------------------------ 2: EFBIG's advice and size
def test_a_checkpoint_past_the_file_size_limit_says_the_limit_and_the_size_it_needs(tmp_path):
    path = tmp_path / "checkpoints" / "step_000000000512.pt"
    line = _under_file_size_limit(f"""
        import torch
        from proxima.checkpoint import CheckpointError, atomic_torch_save
        try:
            atomic_torch_save({{"w": torch.zeros(16384)}}, {str(path)!r})
        except CheckpointError as e:
            print(e)
        """)
    assert line.startswith(f"{path}: could not write checkpoint (File too large); this process may write files of "
                           "at most 8.0 KiB (its file size limit: ulimit -f, or a scheduler's): raise the limit (or "
                           "choose a folder on another filesystem) and try again; the checkpoint needs "), line
    assert re.search(r"; the checkpoint needs 6[4-9]\.\d KiB; there is no earlier checkpoint$", line), line  # 64 KiB of floats
    assert "free there" not in line
    assert list(path.parent.iterdir()) == []  # the cut temp file is gone


def test_efbig_without_a_process_limit_points_at_the_filesystems_largest_file(tmp_path, monkeypatch):
    monkeypatch.setattr(diskspace, "file_size_limit", lambda: None)
    line = diskspace.describe(tmp_path / "events.out.tfevents.1", OSError(errno.EFBIG, "File too large"),
                              "could not write TensorBoard events")
    assert line == (f"{tmp_path / 'events.out.tfevents.1'}: could not write TensorBoard events (File too large); the "
                    "file reached a file size limit, the filesystem's largest file (FAT32's is 4 GiB) or another's: "
                    "choose a folder on another filesystem (or raise the limit) and try again")


def test_the_file_size_limit_is_read_from_the_process(monkeypatch):
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda what: (100 * 1024, resource.RLIM_INFINITY))
    assert diskspace.file_size_limit() == 100 * 1024
    monkeypatch.setattr(resource, "getrlimit", lambda what: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert diskspace.file_size_limit() is None


# ------------------------------------------------------------------------ 3: report's steps row of a killed run
def _write_run(d: Path, steps, total: int) -> Path:
    d.mkdir(parents=True)
    cfg = {"env_id": "Fake-v0", "seed": 1, "num_envs": 4, "num_steps": 128, "total_timesteps": total}
    (d / "config.yaml").write_text("".join(f"{k}: {v}\n" for k, v in cfg.items()))
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for i, s in enumerate(steps):
            w.writerow({"iteration": i + 1, "global_step": s, "time": 0.1 * (i + 1), "episodes": 1,
                        "charts/episodic_return": 20.0 + i})
    return d


def _steps_row(run: Path, capsys) -> str:
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    return next(line for line in (run / "report.md").read_text().splitlines() if line.startswith("| steps |"))


def test_a_killed_runs_steps_row_names_the_checkpoint_a_resume_continues_from(tmp_path, capsys):
    run = _write_run(tmp_path / "sk", [512 * i for i in range(1, 8)], total=20480)  # logged to 3,584
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "step_000000003072.pt").write_bytes(b"not read")  # the kill came 512 steps after it
    resume = f"proxima resume {shlex.quote(str(run))}"
    assert _steps_row(run, capsys) == (f"| steps | 3,584 of 20,480 steps logged so far; last checkpoint at 3,072 "
                                       f"(stopped; `{resume}` continues it from there) |")

    (run / "checkpoints" / "step_000000003584.pt").write_bytes(b"not read")  # a stop's checkpoint: at the last row
    assert _steps_row(run, capsys) == f"| steps | 3,584 of 20,480 steps so far (stopped; `{resume}` continues it) |"
