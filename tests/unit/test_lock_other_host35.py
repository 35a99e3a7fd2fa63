"""A run's lock written on another host (a restarted container or job pod comes back under a new
hostname): refreshed by its holder's heartbeat, taken over once not refreshed for STALE_SECONDS,
refused with the file to delete while fresh; same-host locks keep their pid check."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import threading
import time

import pytest

from proxima import population_report, rundir
from tests.cli_helpers import TINY_RUN, error_line, run_main

FOREIGN = {"pid": 19842, "host": "pod-a1b2", "since": "2030-01-02T03:04:05"}
STALE = 600  # seconds: the ten minutes the docs and the notes promise (rundir.STALE_SECONDS)


def _write_lock(run, owner: dict, age: float):
    run.mkdir(parents=True, exist_ok=True)
    lock = run / rundir.LOCK_NAME
    lock.write_text(json.dumps(owner))
    then = time.time() - age
    os.utime(lock, (then, then))
    return lock


def _heartbeat_threads() -> set:
    return {t for t in threading.enumerate() if t.name == "proxima-lock-heartbeat"}


def test_a_lock_from_another_host_not_refreshed_for_ten_minutes_is_taken_over_with_a_note(tmp_path, capsys):
    run = tmp_path / "run"
    _write_lock(run, FOREIGN, age=STALE + 60)
    lock = rundir.RunLock(run)
    lock.acquire()
    try:
        assert lock.held and rundir.read_lock(run)["pid"] == os.getpid()
        assert capsys.readouterr().err == (f"proxima: note: {run}: took over the lock left by pid 19842 on host pod-a1b2 "
                                           "(since 2030-01-02T03:04:05), not refreshed for 11 minutes\n")
    finally:
        lock.release()
    assert rundir.read_lock(run) is None


def test_a_fresh_lock_from_another_host_is_refused_naming_the_file_to_delete(tmp_path):
    run = tmp_path / "my run"  # a space: the path to delete is shell-quoted
    path = _write_lock(run, FOREIGN, age=90)
    before = path.stat().st_mtime
    with pytest.raises(rundir.RunDirError) as e:
        rundir.RunLock(run).acquire()
    assert str(e.value) == (
        f"run {run} is in use by pid 19842 on host pod-a1b2 (since 2030-01-02T03:04:05; lock refreshed 1 minute ago), "
        "which cannot be checked from this host: wait for it to finish, or, if no process on host pod-a1b2 runs it any "
        f"more (a container or job that was restarted), delete {shlex.quote(str(path))} (a lock not refreshed for "
        "10 minutes is taken over)")
    assert json.loads(path.read_text()) == FOREIGN and path.stat().st_mtime == before  # left as it was


def test_resume_auto_in_a_restarted_container_trains_after_a_stale_lock_and_exits_2_on_a_fresh_one(tmp_path, capsys):
    run = tmp_path / "runs" / "pod"
    argv = ["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(run), "--resume", "auto"]
    _write_lock(run, FOREIGN, age=60)
    code, _, err = run_main(argv, capsys)
    error_line(code, err, "is in use by pid 19842 on host pod-a1b2", f"delete {run / rundir.LOCK_NAME} ")
    assert not (run / "metrics.csv").exists()

    _write_lock(run, FOREIGN, age=STALE + 1)
    code, _, err = run_main(argv, capsys)
    assert code == 0, err
    assert f"took over the lock left by pid 19842 on host pod-a1b2 (since 2030-01-02T03:04:05), not refreshed for 10 minutes" in err
    assert (run / "metrics.csv").is_file() and not (run / rundir.LOCK_NAME).exists()


def test_report_calls_a_run_in_progress_only_while_another_hosts_lock_is_fresh(tmp_path):
    run = tmp_path / "run"
    _write_lock(run, FOREIGN, age=30)
    assert population_report.progress_status(run, 64, 128) == \
        "in progress: locked by pid 19842 on host pod-a1b2 since 2030-01-02T03:04:05"
    _write_lock(run, FOREIGN, age=STALE + 1)
    assert population_report.progress_status(run, 64, 128) == "stopped before its first checkpoint"


def test_same_host_locks_go_by_the_process_not_the_age(tmp_path, capsys):
    me = {"pid": os.getpid(), "host": socket.gethostname(), "start": rundir._process_start(os.getpid()), "since": "T"}
    live = tmp_path / "live"
    _write_lock(live, me, age=10 * STALE)  # never refreshed, yet its process runs
    with pytest.raises(rundir.RunDirError) as e:
        rundir.RunLock(live).acquire()
    assert str(e.value) == (f"run {live} is in use by pid {os.getpid()} (since T); wait for it to finish or stop it (a lock "
                            f"left by a process that is gone is taken over; {live / rundir.LOCK_NAME})")

    dead = tmp_path / "dead"
    _write_lock(dead, {**me, "start": "1"}, age=0)  # just refreshed, but another process of that pid
    lock = rundir.RunLock(dead)
    lock.acquire()
    lock.release()
    assert f"took over the lock left by pid {os.getpid()} (since T), which is no longer running" in capsys.readouterr().err


def test_taking_over_puts_back_another_hosts_lock_refreshed_since_it_was_read(tmp_path, capsys):
    run = tmp_path / "run"
    path = _write_lock(run, FOREIGN, age=STALE + 60)
    stale = rundir.read_lock(run)
    os.utime(path)  # its holder beat between our read and our rename
    rundir.RunLock(run)._take_over(stale)
    assert rundir.read_lock(run) == FOREIGN
    assert "took over" not in capsys.readouterr().err


def test_the_heartbeat_refreshes_only_its_own_lock_and_stops_on_release(tmp_path, monkeypatch):
    monkeypatch.setattr(rundir, "HEARTBEAT_SECONDS", 0.02, raising=False)
    run = tmp_path / "run"
    before = _heartbeat_threads()
    lock = rundir.RunLock(run)
    lock.acquire()
    path = run / rundir.LOCK_NAME
    try:
        (beat,) = _heartbeat_threads() - before
        old = time.time_ns() - 1000 * 10**9
        os.utime(path, ns=(old, old))
        deadline = time.time() + 5
        while path.stat().st_mtime < time.time() - 60 and time.time() < deadline:
            time.sleep(0.02)
        assert path.stat().st_mtime > time.time() - 60, "the holder's heartbeat did not refresh its lock"

        def put(text: str) -> None:  # a new file at the name, as another process would put its lock there
            tmp = run / "put.tmp"
            tmp.write_text(text)
            os.utime(tmp, ns=(old, old))
            os.replace(tmp, path)

        mine = path.read_text()
        put(json.dumps(FOREIGN))  # someone else's lock at the name now: never refreshed for us
        time.sleep(0.2)
        assert path.stat().st_mtime_ns == old
        put(mine)
    finally:
        lock.release()
    beat.join(timeout=5)
    assert not beat.is_alive() and not path.exists()


def test_the_heartbeat_does_not_keep_a_process_alive(tmp_path):
    """A trainer that ends without release() (an exception past it, os._exit aside) still exits."""
    code = f"from proxima import rundir; rundir.RunLock({str(tmp_path / 'run')!r}).acquire(); print('held')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert (done.returncode, done.stdout) == (0, "held\n"), done.stderr
