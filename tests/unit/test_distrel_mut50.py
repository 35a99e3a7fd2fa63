"""Mutation tests (review 50, distributed and reliability): the words of a failed job's last line for a
rank that exited 143 or was killed after the first, a peer's view of ranks that exited with Proxima's own
codes, the settings-differ warning's two-rank, many-field and missing-field cases, a WORLD_SIZE with only
one of MASTER_ADDR/MASTER_PORT, the port-in-use line's three error texts and two rendezvous flags, the
--checkpoint-every 0 cadence words (minutes 0, fractional minutes, the Python field names), a finished
run's --keep-checkpoints pruning (K 0, K equal to what it holds, the count removed, the Python wording),
a loose non-checkpoint file outside any run keeping checkpoint's own line, --dry-run on ranks other than 0
of a torchrun started by hand, a --nproc resume of a live run naming its torchrun, a live run read to resume
(in use) or to evaluate (wait), and a second interrupt's lock removal and run directory line."""

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import proxima
from proxima import checkpoint as ckpt
from proxima import distributed, run_setup, torchrun, train_state
from proxima.rundir import LOCK_NAME
from proxima.signals import _PYTHON_CALLER, TEARDOWN_ENV, SignalGuard
from tests.cli_helpers import run_main

#: the checkout whose proxima these tests import (a clone's, for a mutant)
CODE = Path(proxima.__file__).resolve().parents[1]


# -- torchrun.child_failure_exit / distributed.killed_peers --------------------------------------------------

def test_a_rank_ended_by_torchruns_sigterm_reads_exited_143_and_only_a_later_forced_kill_drops_the_oom_hint(capsys):
    failures = {0: SimpleNamespace(exitcode=1, pid=1), 1: SimpleNamespace(exitcode=143, pid=2),
                2: SimpleNamespace(exitcode=-9, pid=3), 3: SimpleNamespace(exitcode=-9, pid=4)}
    assert torchrun.child_failure_exit(failures, first=0, forced={3}) == 1
    assert capsys.readouterr().err == (
        "proxima: the job failed: rank 0 (first) exited 1; rank 1 exited 143; rank 2 was killed by torchrun after its "
        "shutdown timeout (it did not stop on SIGTERM); rank 3 was killed by SIGKILL (often the out-of-memory killer: "
        "check dmesg or the job's memory limit; it printed nothing); each rank's own lines above say why\n")


def test_killed_peers_names_foreign_exit_codes_and_signals_but_not_proxima_own_codes(tmp_path):
    marker = tmp_path / "torn-down"
    marker.write_text("1 1\n2 3\n3 143\n4 -9\n5 2\n")  # 1, 143 and 2: Proxima's own exits, after its own line
    killed = distributed.killed_peers({TEARDOWN_ENV: str(marker), "RANK": "0", "LOCAL_RANK": "0"})
    assert killed == {2: 3, 4: "SIGKILL"}


# -- distributed.settings_differ_line ------------------------------------------------------------------------

def test_settings_differ_line_warns_for_two_ranks():
    assert distributed.settings_differ_line([{"seed": 1}, {"seed": 2}]) == (
        "proxima: warning: the ranks were not started with the same settings: --seed is 1 on rank 0 but 2 on rank 1; "
        "every rank trains with rank 0's (start every rank with the same command)")


def test_settings_differ_line_names_six_fields_then_counts_the_rest_and_pluralises_ranks():
    names = [f"f{i}" for i in range(8)]
    base = {n: 0 for n in names}
    line = distributed.settings_differ_line([base, {n: 1 for n in names}, dict(base, f0=2), dict(base, f0=3)])
    parts = line.split(": ", 3)[3].split("; ")
    assert parts[0] == "--f0 is 0 on rank 0 but 1 on rank 1 (and on 2 more ranks)"
    assert parts[1:6] == [f"--f{i} is 0 on rank 0 but 1 on rank 1" for i in range(1, 6)]
    assert parts[6] == "and 2 more setting(s)"
    seven = distributed.settings_differ_line([{n: 0 for n in names[:7]}, {n: 1 for n in names[:7]}])
    assert "; and 1 more setting(s); every rank" in seven
    six = distributed.settings_differ_line([{n: 0 for n in names[:6]}, {n: 1 for n in names[:6]}])
    assert "more setting" not in six and "--f5 is 0 on rank 0 but 1 on rank 1; every rank" in six


def test_settings_differ_line_names_a_field_only_one_rank_was_given_as_none():
    line = distributed.settings_differ_line([{"seed": 1}, {"seed": 1, "lr": 0.1}])
    assert "--lr is (none) on rank 0 but 0.1 on rank 1;" in line
    line = distributed.settings_differ_line([{"seed": 1, "lr": 0.1}, {"seed": 1}])
    assert "--lr is 0.1 on rank 0 but (none) on rank 1;" in line


# -- distributed.stray_world_size -----------------------------------------------------------------------------

def test_a_world_size_with_only_one_of_master_addr_and_port_is_still_stray_and_an_unparsable_one_is_not():
    for extra in ({"MASTER_ADDR": "n0"}, {"MASTER_PORT": "29500"}):
        assert distributed.stray_world_size({"WORLD_SIZE": "3", **extra}) == (
            "WORLD_SIZE=3 is set but this process was not started by torchrun (no MASTER_ADDR/MASTER_PORT): unset "
            "WORLD_SIZE and RANK (or use --nproc K to start K processes)")
    assert distributed.stray_world_size({"WORLD_SIZE": "two"}) is None
    assert distributed.stray_world_size({}) is None


# -- torchrun.port_in_use_line --------------------------------------------------------------------------------

TORCH_EADDRINUSE = ("The server socket has failed to listen on any local network address. port: 29500, useIpv6: 0, "
                    "code: -98, name: EADDRINUSE, message: address already in use")


def test_port_in_use_line_names_the_port_and_the_flag_of_the_rendezvous_used():
    static = ["--nproc-per-node", "2", "--master-port", "29500", "train.py"]
    assert torchrun.port_in_use_line(RuntimeError(TORCH_EADDRINUSE), static) == (
        "proxima: port 29500 on this machine is in use (another job?): pick another --master-port")
    # a text that says it without torch's EADDRINUSE name is known too; the c10d rendezvous names its endpoint
    c10d = ["--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:29400", "train.py"]
    line = torchrun.port_in_use_line(RuntimeError("bind: Address already in use (port: 29400)"), c10d)
    # (it read "pick another the port of --rdzv-endpoint" until session 50 reworded it)
    assert line == "proxima: port 29400 on this machine is in use (another job?): give --rdzv-endpoint another port"
    assert torchrun.port_in_use_line(RuntimeError("connection refused (port: 29500)"), static) is None


# -- checkpoint._cadence ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("every, minutes, python, words", [
    (0, 0, False, "with --checkpoint-every 0 and --checkpoint-minutes 0, one is written only at the end"),
    (0, 2.5, False, "with --checkpoint-every 0, one is written every 2.5 minutes (--checkpoint-minutes) and at the end"),
    (0, 2.5, True, "with checkpoint_every 0, one is written every 2.5 minutes (checkpoint_minutes) and at the end"),
    (5, 3, False, "one is written every --checkpoint-every N iterations and at the end"),
    (5, 3, True, "one is written every checkpoint_every iterations and at the end"),
])
def test_cadence_words_follow_the_runs_config(every, minutes, python, words, tmp_path):
    (tmp_path / "config.yaml").write_text(f"checkpoint_every: {every}\ncheckpoint_minutes: {minutes}\n")
    assert ckpt._cadence(tmp_path, python) == words


# -- train_state._prune_untrained (a finished run's resume with --keep-checkpoints K) ------------------------------

def _run_with(tmp_path, n: int, keep: int):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    for i in range(1, n + 1):
        (run / "checkpoints" / f"step_{i * 64:012d}.pt").write_bytes(b"x")
    return SimpleNamespace(cfg=SimpleNamespace(keep_checkpoints=keep), run_dir=run, last_checkpoint=None)


def _names(t) -> list:
    return [p.name for p in ckpt.list_checkpoints(t.run_dir)]


def test_prune_untrained_removes_the_oldest_and_counts_them(tmp_path, capsys):
    t = _run_with(tmp_path, 5, 2)
    train_state._prune_untrained(t)
    assert _names(t) == ["step_000000000256.pt", "step_000000000320.pt"]
    assert capsys.readouterr().err == (
        f"proxima: note: --keep-checkpoints 2: removed the run's 3 oldest checkpoint(s) from {t.run_dir / 'checkpoints'}, "
        "keeping the newest 2 (the run trains nothing more, and writes no checkpoint)\n")


@pytest.mark.parametrize("n, keep", [(3, 0), (3, 3), (2, 3)])
def test_prune_untrained_leaves_a_run_alone_for_k_0_or_k_it_already_holds(n, keep, tmp_path, capsys):
    t = _run_with(tmp_path, n, keep)
    train_state._prune_untrained(t)
    assert len(_names(t)) == n
    assert capsys.readouterr().err == ""


def test_prune_untrained_from_python_names_the_field(tmp_path, capsys):
    t = _run_with(tmp_path, 3, 1)
    token = _PYTHON_CALLER.set(True)
    try:
        train_state._prune_untrained(t)
    finally:
        _PYTHON_CALLER.reset(token)
    assert _names(t) == ["step_000000000192.pt"]
    assert capsys.readouterr().err.startswith(
        "proxima: note: keep_checkpoints=1: removed the run's 2 oldest checkpoint(s) from ")


# -- run_setup._refuse_non_checkpoint --------------------------------------------------------------------------------

def test_a_loose_non_checkpoint_outside_any_run_keeps_checkpoints_own_line_and_a_missing_file_is_left_to_the_load(tmp_path):
    junk = tmp_path / "model.pt"
    junk.write_text("hello")
    with pytest.raises(ckpt.CheckpointError) as e:
        run_setup._refuse_non_checkpoint(junk)
    assert str(e.value) == f"{junk}: not a Proxima checkpoint (not a torch zip archive)"
    assert run_setup._refuse_non_checkpoint(tmp_path / "missing.pt") is None
    assert run_setup._refuse_non_checkpoint(tmp_path) is None  # a folder: no file to read here


# -- train --dry-run under a torchrun started by hand (cli._torchrun_world) ----------------------------------------

DRY = ["train", "CartPole-v1", "--num-envs", "4", "--num-steps", "32", "--total-timesteps", "4096", "--dry-run"]


@pytest.mark.parametrize("rank", ["1", "2"])
def test_dry_run_on_any_rank_but_0_prints_nothing(rank, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", rank)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    assert run_main(DRY, capsys) == (0, "", "")


def test_dry_run_on_rank_0_counts_the_jobs_processes_and_a_stray_world_size_is_refused(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    code, out, err = run_main(DRY, capsys)
    assert code == 0, err
    assert out.count("env_id: CartPole-v1") == 1
    assert "proxima: 3 processes x 4 envs x 32 steps = 384 steps per iteration" in err
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    code, out, err = run_main(DRY, capsys)
    assert (code, out) == (2, "")
    assert err == ("proxima train: error: WORLD_SIZE=3 is set but this process was not started by torchrun (no "
                   "MASTER_ADDR/MASTER_PORT): unset WORLD_SIZE and RANK (or use --nproc K to start K processes)\n")


# -- launch._check: a --nproc resume of a live --nproc run before its first checkpoint -------------------------------

FAKE_TORCHRUN = ("import subprocess, sys\n"
                 "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
                 "print(p.pid, flush=True)\n"
                 "p.wait()\n")


def test_a_nproc_resume_of_a_live_multi_process_run_without_a_checkpoint_names_the_torchrun_to_signal(tmp_path):
    run = tmp_path / "u3"
    (run / "checkpoints").mkdir(parents=True)
    for name in ("config.yaml", "meta.json", "metrics.csv"):  # what a run writes before its first checkpoint
        (run / name).write_text("")
    # rank 0 of a torchrun started by hand: its parent's command line names proxima.torchrun
    torchrun_proc = subprocess.Popen([sys.executable, "-c", FAKE_TORCHRUN, "proxima.torchrun"], stdout=subprocess.PIPE,
                                     text=True)
    try:
        rank0 = int(torchrun_proc.stdout.readline())
        since = "2026-12-08T00:00:00"
        (run / ".proxima.lock").write_text(json.dumps({"pid": rank0, "host": socket.gethostname(), "since": since}))
        out = subprocess.run([sys.executable, "-m", "proxima", "train", "CartPole-v1", "--resume", "u3", "--nproc", "2",
                              "--total-timesteps", "4096"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(CODE), "OMP_NUM_THREADS": "1"})
    finally:
        os.kill(rank0, signal.SIGKILL) if "rank0" in locals() else None
        torchrun_proc.kill()
        torchrun_proc.wait()
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == [
        f"proxima train: error: run u3 is in use by pid {rank0} (since {since}); wait for it to finish or stop it (a lock "
        f"left by a process that is gone is taken over; u3/.proxima.lock); pid {rank0} is rank 0 of a multi-process "
        f"run: stop the run by signalling its torchrun, pid {torchrun_proc.pid}"]


# -- signals.SignalGuard._leave_run (a second interrupt's way out) ---------------------------------------------------

def _guarded_run(tmp_path, pid=None, host=None):
    run = tmp_path / "R"
    (run / "checkpoints").mkdir(parents=True)
    last = run / "checkpoints" / "step_000000000064.pt"
    last.write_bytes(b"x")
    lock = {"pid": os.getpid() if pid is None else pid, "host": host or socket.gethostname(),
            "since": "2026-12-08T00:00:00"}
    (run / LOCK_NAME).write_text(json.dumps(lock))
    return run, last


def test_a_second_interrupt_removes_its_own_lock_and_ends_stdout_with_the_run_directory(tmp_path, capfd, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    run, last = _guarded_run(tmp_path)
    SignalGuard(lambda: last)._leave_run()
    assert not (run / LOCK_NAME).exists()
    assert capfd.readouterr().out == f"run directory: {run}\n"


@pytest.mark.parametrize("pid, host", [(1, None), (None, "another-host.example")])
def test_a_second_interrupt_leaves_a_lock_another_process_holds(pid, host, tmp_path, capfd, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    run, last = _guarded_run(tmp_path, pid, host)
    SignalGuard(lambda: last)._leave_run()
    assert (run / LOCK_NAME).exists()
    assert capfd.readouterr().out == f"run directory: {run}\n"


def test_a_second_interrupt_prints_the_line_on_rank_0_only_and_nothing_without_a_checkpoint(tmp_path, capfd,
                                                                                            monkeypatch):
    run, last = _guarded_run(tmp_path)
    monkeypatch.setenv("RANK", "1")
    SignalGuard(lambda: last)._leave_run()
    assert not (run / LOCK_NAME).exists()  # the lock is this process's: removed on any rank
    assert capfd.readouterr().out == ""
    monkeypatch.setenv("RANK", "0")
    run, _ = _guarded_run(tmp_path / "b")
    SignalGuard(lambda: None)._leave_run()  # no checkpoint on disk: no line, and the lock is left to the exit's cleanup
    assert (run / LOCK_NAME).exists()
    assert capfd.readouterr().out == ""


# -- checkpoint: a live run before its first checkpoint, read to resume or to evaluate ------------------------------

def test_loading_a_live_run_without_a_checkpoint_to_resume_says_it_is_in_use_and_to_evaluate_says_wait(tmp_path):
    run = tmp_path / "u3"
    (run / "checkpoints").mkdir(parents=True)
    for name in ("config.yaml", "meta.json", "metrics.csv"):
        (run / name).write_text("")
    (run / LOCK_NAME).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                             "since": "2026-12-08T00:00:00"}))
    in_use = (f"run {run} is in use by pid {os.getpid()} (since 2026-12-08T00:00:00); wait for it to finish or stop it "
              f"(a lock left by a process that is gone is taken over; {run / LOCK_NAME})")
    for load in (ckpt.load_resumable, lambda p: ckpt.resolve_checkpoint(p, resuming=True)):
        with pytest.raises(ckpt.CheckpointError) as e:
            load(run)
        assert str(e.value) == in_use
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.resolve_checkpoint(run)  # eval: the first checkpoint is coming
    assert str(e.value).startswith(f"{run}: the run is in progress and has no checkpoint yet")
