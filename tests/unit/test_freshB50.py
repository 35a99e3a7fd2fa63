"""Fresh-eyes review 50 (B): train --dry-run decides "one process or several" as the run does; the ranks' "settings
differ" warning leaves out a --device index (each rank trains on cuda:LOCAL_RANK) and names PPOConfig's fields from
Python; one helper removes a run's own lock (RunLock.release, a second stop's exit); sb3_compare.py and learning.py
record times with their UTC offset; a resume that cannot rewrite metrics.csv names metrics.csv, not its temporary."""
from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import proxima
from proxima import distributed, rundir
from proxima.signals import SignalGuard

SRC = Path(proxima.__file__).resolve().parents[1]  # the proxima under test (PYTHONPATH for an older copy)
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
STRAY = ("WORLD_SIZE=2 is set but this process was not started by torchrun (no MASTER_ADDR/MASTER_PORT): unset "
         "WORLD_SIZE and RANK (or use --nproc K to start K processes)")


def _proxima(args, cwd, **extra) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(SRC), **extra)
    return subprocess.run([sys.executable, "-m", "proxima", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


# --- 3: the dry run and the run decide alike ------------------------------------------------------------------
DRY = ["train", "CartPole-v1", "--num-envs", "4", "--total-timesteps", "1024", "--dry-run"]


def test_dry_run_with_a_world_size_but_no_rank_is_one_process_as_the_run_is(tmp_path):
    out = _proxima(DRY, tmp_path, WORLD_SIZE="2")
    assert out.returncode == 0, out.stderr
    assert "# batch 512 (num_envs 4 x num_steps 128), minibatch 128, 2 iterations = 1,024 steps" in out.stdout
    # MASTER_ADDR/MASTER_PORT too: still no RANK, so the run trains as one process, and the dry run says so
    out = _proxima(DRY, tmp_path, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="29511")
    assert out.returncode == 0, out.stderr
    assert "# batch 512 (num_envs 4 x num_steps 128), minibatch 128, 2 iterations = 1,024 steps" in out.stdout
    assert "2 processes" not in out.stdout + out.stderr


def test_dry_run_with_a_stray_rank_and_world_size_is_refused_as_the_run_is(tmp_path):
    dry = _proxima(DRY, tmp_path, WORLD_SIZE="2", RANK="0")
    run = _proxima(DRY[:-1] + ["--run-dir", "r"], tmp_path, WORLD_SIZE="2", RANK="0")
    assert dry.returncode == run.returncode == 2
    assert dry.stderr.splitlines() == run.stderr.splitlines() == [f"proxima train: error: {STRAY}"]


def test_joins_group_needs_rank_and_several_processes():
    assert distributed.joins_group({"RANK": "0", "WORLD_SIZE": "2"})
    assert not distributed.joins_group({"WORLD_SIZE": "2"})
    assert not distributed.joins_group({"RANK": "0", "WORLD_SIZE": "1"})
    assert not distributed.joins_group({"RANK": "0", "WORLD_SIZE": "two"})


def test_stray_world_size_reads_the_environ_it_is_given():
    assert distributed.stray_world_size({"WORLD_SIZE": "2"}) == STRAY
    assert distributed.stray_world_size({"WORLD_SIZE": "two"}) is None
    assert distributed.stray_world_size({"WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "x"}) is None


# --- 4: the ranks' "settings differ" warning ------------------------------------------------------------------
BASE = {"env_id": "CartPole-v1", "num_envs": 4, "device": "cuda:0"}


def test_a_device_index_per_rank_is_no_difference():
    """DistContext.device_for puts every rank on cuda:LOCAL_RANK whatever index it was given."""
    assert distributed.settings_differ_line([BASE, dict(BASE, device="cuda:1")]) is None
    assert distributed.settings_differ_line([dict(BASE, device="cuda"), dict(BASE, device="cuda:3")], python=True) is None
    line = distributed.settings_differ_line([BASE, dict(BASE, device="cpu")], python=False)
    assert line == ("proxima: warning: the ranks were not started with the same settings: --device is cuda:0 on rank 0 "
                    "but cpu on rank 1; every rank trains with rank 0's (start every rank with the same command)")


def test_from_python_the_warning_names_ppoconfig_fields():
    line = distributed.settings_differ_line([BASE, dict(BASE, num_envs=8, device="cuda:1")], python=True)
    assert line == ("proxima: warning: the ranks were not started with the same settings: PPOConfig.num_envs is 4 on "
                    "rank 0 but 8 on rank 1; every rank trains with rank 0's (start every rank with the same PPOConfig)")


# --- 6: one helper removes this process's lock ----------------------------------------------------------------
def _lock(run: Path, pid: int) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / rundir.LOCK_NAME).write_text(f'{{"pid": {pid}, "host": "{socket.gethostname()}", "since": "x"}}')


def test_remove_own_lock_removes_only_this_process_s_lock(tmp_path):
    _lock(tmp_path / "mine", os.getpid())
    _lock(tmp_path / "other", os.getpid() + 1)
    assert rundir.remove_own_lock(tmp_path / "mine") is True
    assert not (tmp_path / "mine" / rundir.LOCK_NAME).exists()
    assert rundir.remove_own_lock(tmp_path / "other") is False
    assert (tmp_path / "other" / rundir.LOCK_NAME).exists()
    assert rundir.remove_own_lock(tmp_path / "none") is False


def test_run_lock_release_and_a_second_stop_leave_no_lock(tmp_path, capfd):
    lock = rundir.RunLock(tmp_path / "a")
    lock.acquire()
    assert (tmp_path / "a" / rundir.LOCK_NAME).exists()
    lock.release()
    assert not (tmp_path / "a" / rundir.LOCK_NAME).exists()
    _lock(tmp_path / "b", os.getpid())
    SignalGuard(lambda: tmp_path / "b" / "checkpoints" / "step_000000000512.pt")._leave_run()
    assert not (tmp_path / "b" / rundir.LOCK_NAME).exists()
    assert capfd.readouterr().out.endswith(f"run directory: {tmp_path / 'b'}\n")


# --- 8: benchmark times with their UTC offset -----------------------------------------------------------------
OFFSET = r"[+-]\d\d:\d\d"


def test_sb3_compare_records_its_start_with_the_utc_offset(monkeypatch, tmp_path, capsys):
    import json

    import sb3_compare

    monkeypatch.setattr(sb3_compare, "ensure_bench_venv", lambda: None)
    monkeypatch.setattr(sb3_compare, "proxima_train_sps", lambda *a: [100000.0, 110000.0, 120000.0])
    monkeypatch.setattr(sb3_compare, "proxima_fast_solve", lambda seed, workdir: {
        "seed": seed, "wall": 8.0, "cpu": 7.0, "eval": 500.0, "command": "proxima train CartPole-v1 --preset fast"})

    def worker(cmd, *a, **k):  # SB3's throughput, then a failed solve: the report is written with what was measured
        if "sps" in cmd:
            result = {"sps": [4000.0, 4100.0, 4200.0], "sb3": "2.9.0", "torch": "2.13.0"}
            return subprocess.CompletedProcess(cmd, 0, "SB3RESULT " + json.dumps(result) + "\n", "")
        return subprocess.CompletedProcess(cmd, 1, "", "RuntimeError: boom\n")

    monkeypatch.setattr(subprocess, "run", worker)
    out = tmp_path / "sb3.md"
    assert sb3_compare.main(["--seeds", "1", "--sb3-seeds", "1", "--out", str(out)]) == 2
    assert re.search(rf"^Recorded \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d{OFFSET} by `", out.read_text(), re.M), out.read_text()


def test_learning_code_line_dates_the_file_with_the_utc_offset():
    import learning

    assert re.search(rf" on \d{{4}}-\d\d-\d\d \d\d:\d\d{OFFSET}, and rows of earlier runs", learning.code_line())


# --- 10: a rewrite's temporary is named as the file it replaces -----------------------------------------------
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("chattr"), reason="chattr +i needs root")
def test_resume_with_an_immutable_metrics_csv_names_metrics_csv(tmp_path):
    run = tmp_path / "r"
    out = _proxima(["train", "CartPole-v1", "--num-envs", "4", "--num-steps", "64", "--total-timesteps", "512",
                    "--checkpoint-every", "1", "--run-dir", str(run)], tmp_path)
    assert out.returncode == 0, out.stderr
    if subprocess.run(["chattr", "+i", str(run / "metrics.csv")], capture_output=True).returncode != 0:
        pytest.skip("this filesystem has no immutable flag")
    try:
        out = _proxima(["resume", str(run), "--total-timesteps", "1024"], tmp_path)
    finally:
        subprocess.run(["chattr", "-i", str(run / "metrics.csv")], check=True)
    assert out.returncode != 0
    assert out.stderr.splitlines()[-1].startswith(
        f"proxima resume: error: {run / 'metrics.csv'}: could not open the run's logs (Operation not permitted)")


def test_a_failed_replace_of_the_logs_names_the_file_replaced():
    from proxima.logger import _replaced_file

    folder = Path("/runs/r")
    err = PermissionError(errno.EPERM, "Operation not permitted", str(folder / ".metrics.csv.4b3be8d1d7d4.tmp"),
                          None, str(folder / "metrics.csv"))
    assert _replaced_file(err, folder / "x") == folder / "metrics.csv"
    err = PermissionError(errno.EACCES, "Permission denied", str(folder / ".metrics.csv.4b3be8d1d7d4.tmp"))
    assert _replaced_file(err, folder / "x") == folder / "metrics.csv"  # the temporary not even made
    assert _replaced_file(OSError(errno.EIO, "I/O error"), folder / "metrics.csv") == folder / "metrics.csv"
