"""Run directories on a shared cluster (fixer J1, session 48).

1. ``--overwrite`` and ``--resume auto`` on a ``--run-dir`` that is a symbolic link (to scratch) move
   the old run aside where the link leads and keep the link (before: the link itself was renamed and
   the new run written in a new folder at the link's place, on home).
2. A run whose files are read-only gets advice that works: its copy is made writable (``cp -r``
   keeps a read-only run's permission bits, so the copy refused the same way forever), and a run that
   is read-only only by its own bits, and the user's, is told to ``chmod -R u+w`` it.
3. A ``--run-dir`` that cannot be created says so, naming the folder that refused it (before: a lock
   problem inside a folder that does not exist).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import TINY_RUN, error_line, one_error_line, run_main
from proxima import rundir
from proxima.diskspace import StorageError

ROOT = Path(__file__).resolve().parents[2]
# root keeps writing a chmod 555 folder: without these capabilities it is refused as any user is
DROP = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner"]


def _a_run(folder: Path) -> Path:
    """The start-up files of a Proxima run that wrote no checkpoint (what --resume auto moves aside)."""
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text('{"kind": "ppo"}')
    (folder / "config.yaml").write_text("env_id: CartPole-v1\n")
    (folder / "metrics.csv").write_text("step\n")
    return folder


def _with_checkpoint(run: Path) -> Path:
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "step_000000000064.pt").write_bytes(b"")
    return run


def _old_folders(folder: Path, name: str) -> list:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(f"{name}.old-"))


# ------------------------------------------------------------------------------- 1. a run directory given as a link
@pytest.mark.parametrize("overwrite, note", [(True, None), (False, "--resume auto found no checkpoint to continue")],
                         ids=["overwrite", "resume-auto"])
def test_moving_aside_a_linked_run_dir_keeps_the_link_and_moves_the_run_where_it_leads(tmp_path, capsys, overwrite, note):
    scratch, home = tmp_path / "scratch", tmp_path / "home"
    target = _a_run(scratch / "real")
    home.mkdir()
    link = home / "lnk"
    link.symlink_to(target)
    session = rundir.RunSession()
    try:
        assert session.claim_fresh(link, overwrite=overwrite, restart_note=note) == link
    finally:
        session.release()
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert sorted(p.name for p in home.iterdir()) == ["lnk"]  # nothing moved or made beside the link
    old = _old_folders(scratch, "real")
    assert len(old) == 1 and sorted(p.name for p in (scratch / old[0]).iterdir()) == ["config.yaml", "meta.json", "metrics.csv"]
    assert target.is_dir() and not target.is_symlink() and list(target.iterdir()) == []
    why = note or "--overwrite"
    assert f"proxima: {why}: moved the old {link} (a link to {target}, kept) to {scratch / old[0]}" in capsys.readouterr().err


def test_a_new_run_over_a_linked_run_dir_is_written_where_the_link_leads(tmp_path, capsys):
    target = _a_run(tmp_path / "scratch" / "real")
    link = tmp_path / "lnk"
    link.symlink_to(target)
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(link),
                             "--overwrite"], capsys)
    assert code == 0, err
    assert link.is_symlink() and (target / "metrics.csv").read_text().count("\n") > 1  # the new run's rows
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lnk", "scratch"]
    assert len(_old_folders(tmp_path / "scratch", "real")) == 1


def test_a_linked_run_dir_whose_target_cannot_be_moved_is_one_line_and_nothing_moves(tmp_path, monkeypatch):
    target = _a_run(tmp_path / "real")
    link = tmp_path / "lnk"
    link.symlink_to(target)

    def refuse(src, dst):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(src))

    monkeypatch.setattr(os, "rename", refuse)
    with pytest.raises(rundir.RunDirError) as e:
        rundir.move_aside(link)
    assert str(e.value).startswith(f"{link}: a link to {target}, which could not be moved aside to real.old-")
    assert str(e.value).endswith(" (Permission denied); empty that folder yourself, or choose another --run-dir")
    assert link.is_symlink() and sorted(p.name for p in target.iterdir()) == ["config.yaml", "meta.json", "metrics.csv"]


def test_a_new_folder_that_cannot_be_made_where_the_link_leads_puts_the_old_run_back(tmp_path, monkeypatch):
    target = _a_run(tmp_path / "real")
    link = tmp_path / "lnk"
    link.symlink_to(target)

    def refuse(path, mode=0o777):
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), str(path))

    monkeypatch.setattr(os, "mkdir", refuse)
    with pytest.raises(rundir.RunDirError) as e:
        rundir.move_aside(link)
    assert str(e.value) == (f"{link}: a link to {target}, where no new folder could be made after moving the old run aside "
                            f"({os.strerror(errno.EDQUOT)}); the old run was put back in {target}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lnk", "real"] and (target / "meta.json").is_file()


def test_a_run_dir_that_is_no_link_is_still_renamed_itself(tmp_path):
    run = _a_run(tmp_path / "run")
    dest = rundir.move_aside(run)
    assert dest.parent == tmp_path and dest.name.startswith("run.old-") and not run.exists()
    assert (dest / "meta.json").is_file()


# ------------------------------------------------------------------------------------ 2. a read-only run's way on
def test_the_copy_of_a_read_only_run_is_made_writable_before_its_resume(tmp_path, monkeypatch):
    run = _with_checkpoint(tmp_path / "run")
    run.chmod(0o555)
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(run).st_uid + 1)  # someone else's run
    try:
        error = rundir.lock_write_error(run, PermissionError(errno.EACCES, os.strerror(errno.EACCES)))
    finally:
        run.chmod(0o755)
    assert str(error) == (f"{run / rundir.LOCK_NAME}: could not take the run's lock (Permission denied); the run can be "
                          f"evaluated where it is (proxima eval {run}); to train on, copy it to a writable place and resume "
                          f"there: cp -r {run} NEW_DIR && chmod -R u+w NEW_DIR && proxima resume NEW_DIR, or start a new "
                          f"run from its weights: proxima train ENV_ID --init-from {run}")


def test_a_run_read_only_by_its_own_bits_and_yours_is_told_to_chmod_it(tmp_path):
    run = _with_checkpoint(tmp_path / "copy")
    (run / "config.yaml").write_text("env_id: CartPole-v1\n")
    run.chmod(0o555)  # what `cp -r` of a read-only run makes
    try:
        error = rundir.lock_write_error(run, PermissionError(errno.EACCES, os.strerror(errno.EACCES)))
    finally:
        run.chmod(0o755)
    assert str(error) == (f"{run / rundir.LOCK_NAME}: could not take the run's lock (Permission denied); {run} is yours "
                          "and read-only by its permission bits (cp -r copies a read-only run's bits too): make it "
                          f"writable and resume: chmod -R u+w {run} && proxima resume {run}; or evaluate it where it is "
                          f"(proxima eval {run}), or start a new run from its weights: proxima train CartPole-v1 "
                          f"--init-from {run}")


def test_a_read_only_filesystem_is_never_told_to_chmod(tmp_path):
    run = _with_checkpoint(tmp_path / "run")
    run.chmod(0o555)
    try:
        error = rundir.lock_write_error(run, OSError(errno.EROFS, os.strerror(errno.EROFS)))
    finally:
        run.chmod(0o755)
    assert "chmod -R u+w NEW_DIR && proxima resume NEW_DIR" in str(error) and f"chmod -R u+w {run}" not in str(error)


def _needs_setpriv():
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv (to drop the capabilities that let root write a read-only folder)")


def _proxima(*args, cwd):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return subprocess.run([*DROP, sys.executable, "-m", "proxima", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_following_the_read_only_runs_advice_trains_on(tmp_path):
    _needs_setpriv()
    run = tmp_path / "rob"
    done = _proxima("train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(run), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    subprocess.run(["chmod", "-R", "a-w", str(run)], check=True)
    refused = _proxima("resume", str(run), "--total-timesteps", "128", cwd=tmp_path)
    advice = error_line(refused.returncode, refused.stderr, "could not take the run's lock (Permission denied)")
    assert "make it writable and resume: " in advice, advice  # root owns the run: its chmod, not a copy
    way = advice.split("make it writable and resume: ", 1)[1].split(";", 1)[0]
    assert way == f"chmod -R u+w {run} && proxima resume {run}"
    subprocess.run(["cp", "-r", str(run), str(tmp_path / "copy")], check=True)  # the copy is read-only too
    refused = _proxima("resume", str(tmp_path / "copy"), "--total-timesteps", "128", cwd=tmp_path)
    assert f"chmod -R u+w {tmp_path / 'copy'} && proxima resume" in refused.stderr, refused.stderr
    subprocess.run([*DROP, "chmod", "-R", "u+w", str(tmp_path / "copy")], check=True)
    trained = _proxima("resume", str(tmp_path / "copy"), "--total-timesteps", "128", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr
    assert any(p.name.endswith("128.pt") for p in (tmp_path / "copy" / "checkpoints").iterdir())
    assert not stat.S_IMODE(os.stat(run).st_mode) & stat.S_IWUSR  # the original stays as it was


# ------------------------------------------------------------------------------- 3. a run directory never created
def test_a_run_dir_whose_folder_refuses_it_says_it_cannot_be_created(tmp_path, monkeypatch):
    (tmp_path / "ro").mkdir()
    run = tmp_path / "ro" / "run"

    def refuse(path, mode=0o777):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    monkeypatch.setattr(os, "mkdir", refuse)
    with pytest.raises(StorageError) as e:
        rundir.RunSession().claim_fresh(run)
    assert str(e.value) == f"--run-dir {run}: cannot create it (Permission denied in {tmp_path / 'ro'}); choose another --run-dir"
    assert list((tmp_path / "ro").iterdir()) == []


def test_a_run_dir_in_a_chmod_555_folder_is_one_line_naming_that_folder(tmp_path):
    _needs_setpriv()
    (tmp_path / "ro").mkdir(mode=0o555)
    done = _proxima("train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", "ro/run", cwd=tmp_path)
    assert error_line(done.returncode, done.stderr, "").split("error: ", 1)[1] == \
        "--run-dir ro/run: cannot create it (Permission denied in ro); choose another --run-dir"


def test_a_run_dir_that_is_a_link_to_nowhere_says_so(tmp_path, capsys):
    link = tmp_path / "lnk"
    link.symlink_to(tmp_path / "gone")
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(link)], capsys)
    assert code == 2
    assert one_error_line(err, "proxima train") == (f"--run-dir {link}: is a symbolic link to {tmp_path / 'gone'}, which "
                                                    "leads to no folder; create the folder it names, or choose another --run-dir")


def test_from_python_the_line_names_run_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(rundir, "from_python", lambda: True)
    error = rundir.lock_write_error(tmp_path / "a" / "b", OSError(errno.EROFS, os.strerror(errno.EROFS)))
    assert str(error) == (f"run_dir {tmp_path / 'a' / 'b'}: cannot create it (Read-only file system in {tmp_path}); "
                          "choose another run_dir")
