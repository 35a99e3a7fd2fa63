"""Review 45b: a lock is read as copied only when the directory it names holds the same trainer's lock;
the read-only way on, the --nproc launcher's notes, eval's '(env kwargs {})' and a member's meta.json
env_backend fallback at their edges."""

from __future__ import annotations

import errno
import json
import os
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from proxima import checkpoint as ckpt
from proxima import launch, rundir
from proxima.diskspace import StorageError
from proxima.evaluate import format_result


def _live_lock(run_dir: Path, recorded: Path, host: str = None) -> dict:
    """A lock in ``run_dir`` as this live process writes it for a run it trains in ``recorded``."""
    owner = {**rundir._owner(recorded), **({"host": host} if host else {})}
    run_dir.mkdir(exist_ok=True)
    (run_dir / rundir.LOCK_NAME).write_text(json.dumps(owner))
    return rundir.read_lock(run_dir)


# ------------------------------------------------------------------ a copied lock
def test_a_lock_is_copied_when_the_directory_it_names_holds_the_same_trainers_lock(tmp_path):
    original, copy = tmp_path / "A", tmp_path / "B"
    _live_lock(original, original)
    info = _live_lock(copy, original)  # cp -r A B while A trains
    assert rundir.lock_copied_from(copy, info) == os.path.realpath(original)
    assert rundir.in_use_message(copy, info).startswith(f"run {copy} is not in use: its lock {copy / rundir.LOCK_NAME} "
                                                        f"was copied from {os.path.realpath(original)}, ")


@pytest.mark.parametrize("theirs", ["none", "empty", "other pid", "other start"])
def test_a_folder_made_at_the_recorded_path_since_is_no_proof_of_a_copy(tmp_path, theirs):
    original, copy = tmp_path / "A", tmp_path / "B"
    info = _live_lock(copy, original)
    original.mkdir()  # cp -r A B; rm -rf A; mkdir A: no trainer of this lock runs in A
    if theirs == "empty":
        (original / rundir.LOCK_NAME).write_text("")
    elif theirs != "none":
        changed = {"pid": info["pid"] + 1} if theirs == "other pid" else {"start": "1"}
        (original / rundir.LOCK_NAME).write_text(json.dumps({**info, **changed}))
    assert rundir.lock_copied_from(copy, info) is None
    message = rundir.in_use_message(copy, info)
    assert message.startswith(f"run {copy} is in use by pid {os.getpid()} (since "), message
    assert "copied" not in message


def test_a_live_run_moved_while_it_trains_is_in_use_not_copied(tmp_path):
    training, moved = tmp_path / "training", tmp_path / "moved"
    _live_lock(training, training)
    os.rename(training, moved)  # its trainer may still write to the moved files
    with pytest.raises(rundir.RunInUseError) as e:
        rundir.check_not_in_use(moved)
    assert str(e.value).startswith(f"run {moved} is in use by pid {os.getpid()} (since ")
    assert "copied" not in str(e.value)


def test_another_hosts_lock_whose_recorded_path_is_here_is_not_copied(tmp_path):
    original, copy = tmp_path / "A", tmp_path / "B"
    _live_lock(original, original, host="elsewhere-" + socket.gethostname())
    info = _live_lock(copy, original, host="elsewhere-" + socket.gethostname())
    assert rundir.lock_copied_from(copy, info) is None
    assert f"is in use by pid {os.getpid()} on host elsewhere-" in rundir.in_use_message(copy, info)


# ------------------------------------------------------------------ a run that cannot be written
def _with_checkpoint(run: Path) -> Path:
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "step_000000000064.pt").write_bytes(b"")
    return run


def test_a_read_only_populations_way_on_is_a_copy_not_init_from(tmp_path):
    pop = _with_checkpoint(tmp_path / "pop")
    (pop / "population.json").write_text("{}")
    way = rundir.read_only_way_on(pop)
    assert f"cp -r {pop} NEW_DIR && chmod -R u+w NEW_DIR && proxima resume NEW_DIR" in way
    assert "--init-from" not in way


def test_eperm_gets_the_way_on_too(tmp_path):
    run = _with_checkpoint(tmp_path / "run")
    error = rundir.lock_write_error(run, OSError(errno.EPERM, os.strerror(errno.EPERM)))
    assert str(error).endswith(f"cp -r {run} NEW_DIR && chmod -R u+w NEW_DIR && proxima resume NEW_DIR, or start a new run from its weights: "
                               f"proxima train ENV_ID --init-from {run}"), str(error)


def test_the_launchers_check_of_a_run_with_checkpoints_ends_with_init_from(monkeypatch, tmp_path):
    run = _with_checkpoint(tmp_path / "run")
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(f_flag=os.ST_RDONLY))
    with pytest.raises(StorageError) as e:
        launch._check_writable(run)
    assert str(e.value).startswith(f"{run / rundir.LOCK_NAME}: could not take the run's lock (Read-only file system); ")
    assert str(e.value).endswith(f"--init-from {run}")


def _fake_nproc_run(monkeypatch) -> None:
    """/proc as launch reads it: rank 0 (pid 100) holds the lock, under torchrun (200) under proxima's launcher (300)."""
    procs = {100: ("100 (python) S 200 100 100", b""),
             200: ("200 (python) S 300 300 300", b"/venv/bin/python\0-m\0proxima.torchrun\0"),
             300: ("300 (proxima) S 1 1", b"/venv/bin/python\0/venv/bin/proxima\0train\0--nproc\0002\0")}

    class FakePath:
        def __init__(self, path):
            self.pid = int(str(path).split("/")[2])

        def read_text(self):
            return procs[self.pid][0]

        def read_bytes(self):
            return procs[self.pid][1]

    monkeypatch.setattr(launch, "Path", FakePath)
    monkeypatch.setattr(rundir, "read_lock", lambda run_dir: {"pid": 100})
    monkeypatch.setattr(rundir, "holder_alive", lambda info: True)


def test_the_launcher_note_is_left_out_for_a_copied_lock_of_a_live_nproc_run(monkeypatch):
    _fake_nproc_run(monkeypatch)
    assert "signalling its launcher, pid 300" in launch._launcher_note(os.devnull)  # the run itself: named
    monkeypatch.setattr(rundir, "lock_copied_from", lambda run_dir, info: "/elsewhere/A")
    assert launch._launcher_note(os.devnull) == ""  # its holder trains the original: never to be stopped for a copy


# ------------------------------------------------------------------ eval's line, a member's meta.json
def test_format_result_says_empty_env_kwargs_given():
    line = format_result({"env_id": "Pendulum-v1", "env_kwargs": {}, "mean_return": -150.0, "std_return": 1.0,
                          "episodes": 2, "deterministic": True})
    assert line.startswith("Pendulum-v1 (env kwargs {}): -150.00 +- 1.00 over 2 episodes")


@pytest.mark.parametrize("meta", [None, {"env_backend": None}, {"command": ["proxima"]}], ids=["missing", "null", "absent"])
def test_a_members_meta_json_without_an_env_backend_reads_as_none_without_a_note(tmp_path, capsys, meta):
    member = tmp_path / "m000-seed1"
    (member / "checkpoints").mkdir(parents=True)
    if meta is not None:
        (member / "meta.json").write_text(json.dumps(meta))
    assert ckpt._meta_backend(member / "checkpoints" / "step_000000000064.pt") is None
    assert capsys.readouterr().err == ""


def test_a_members_meta_json_with_another_env_backend_gets_one_note(tmp_path, capsys):
    member = tmp_path / "m000-seed1"
    (member / "checkpoints").mkdir(parents=True)
    (member / "meta.json").write_text(json.dumps({"env_backend": "bogus"}))
    assert ckpt._meta_backend(member / "checkpoints" / "step_000000000064.pt") is None
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"proxima: note: {member / 'meta.json'}: its env_backend is 'bogus', none of ")
