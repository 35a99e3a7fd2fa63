"""Review 45 of run directories, checkpoints and evaluation.

1. A copy of a run still training (``cp -r``) carries its lock: the copy is not in use, and its
   resume and report say where the lock was copied from and that deleting the copy's lock is safe
   (before: "in use by pid P ... stop it", which stopped the original).
2. A run that cannot be written (a read-only filesystem or folder) can be evaluated, not resumed:
   the lock's error line gives the ways on (a writable copy, or --init-from).
3. ``proxima eval POP`` leaves a member whose checkpoint is damaged or missing out, named, and
   evaluates the others (before: one error line, nothing evaluated).
4. ``--keep-checkpoints 0`` keeps every checkpoint (before: "must be at least 1").
"""

from __future__ import annotations

import errno
import json
import os
import shutil

import pytest
import yaml

from cli_helpers import TINY_POP, TINY_RUN, error_line, one_error_line, run_main, snapshot
from proxima import checkpoint as ckpt
from proxima import cli
from proxima import rundir
from proxima.config import PPOConfig, validate


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 2-iteration (128-step) CartPole run with its two checkpoints."""
    run = tmp_path_factory.mktemp("review45") / "run"
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "128",
                                             "--checkpoint-every", "1", "--run-dir", str(run), "--quiet"]) == 0
    return run


@pytest.fixture
def original(finished, tmp_path):
    run = tmp_path / "live2"
    shutil.copytree(finished, run)
    return run


@pytest.fixture
def training(original):
    """``original`` locked by a live trainer (this process), as while it trains."""
    lock = rundir.RunLock(original)
    lock.acquire()
    yield original
    lock.release()


def _lock_line(copy, original) -> str:
    lock = copy / rundir.LOCK_NAME
    since = json.loads(lock.read_text())["since"]
    return (f"its lock {lock} was copied from {original.resolve()}, whose trainer (pid {os.getpid()}, since {since}) "
            f"still runs there; deleting this copy's lock is safe (the run in {original.resolve()} goes on): rm {lock}")


# ------------------------------------------------------------------------------ 1. a copied lock
def test_the_lock_records_the_run_directorys_resolved_path(training, tmp_path):
    info = rundir.read_lock(training)
    assert info["run_dir"] == os.path.realpath(training) and info["pid"] == os.getpid()


def test_resume_of_a_copy_of_a_run_still_training_says_the_lock_was_copied_and_is_safe_to_delete(training, tmp_path,
                                                                                                  capsys):
    copy = tmp_path / "livecopy"
    shutil.copytree(training, copy)
    code, out, err = run_main(["resume", str(copy), "--total-timesteps", "192", "--quiet"], capsys)
    assert code == 2, err
    assert one_error_line(err, "proxima resume") == f"run {copy} is not in use: {_lock_line(copy, training)}, then try again"
    assert "stop it" not in err
    (copy / rundir.LOCK_NAME).unlink()  # as the line says: the copy then resumes, the original's lock untouched
    code, _, err = run_main(["resume", str(copy), "--total-timesteps", "192", "--quiet"], capsys)
    assert code == 0, err
    assert ckpt.list_checkpoints(copy)[-1].name == "step_000000000192.pt"
    assert rundir.read_lock(training)["pid"] == os.getpid()


def test_report_of_a_copy_of_a_run_still_training_says_stopped_with_the_lock_to_delete_not_in_progress(training, tmp_path,
                                                                                                       capsys):
    copy = tmp_path / "livecopy"
    shutil.copytree(training, copy)
    config = yaml.safe_load((copy / "config.yaml").read_text())
    (copy / "config.yaml").write_text(yaml.safe_dump({**config, "total_timesteps": 256}, sort_keys=False))  # 128 of 256
    code, _, err = run_main(["report", str(copy), "--episodes", "0"], capsys)
    assert code == 0, err
    [row] = [line for line in (copy / "report.md").read_text().splitlines() if line.startswith("| steps |")]
    assert row == (f"| steps | 128 of 256 steps so far (stopped; no process trains it: {_lock_line(copy, training)}; "
                   f"then `proxima resume {copy}` continues it) |")
    assert "locked by pid" not in row


def test_the_run_itself_still_in_use_by_another_path_to_it_is_refused_as_before(training, tmp_path, capsys):
    link = tmp_path / "link"
    link.symlink_to(training)
    code, _, err = run_main(["resume", str(link), "--total-timesteps", "192", "--quiet"], capsys)
    assert error_line(code, err, f"is in use by pid {os.getpid()} (since ")
    assert "copied" not in err


def test_a_lock_of_an_older_proxima_without_the_directory_reads_as_in_use_as_before(original, tmp_path, capsys):
    copy = tmp_path / "livecopy"
    shutil.copytree(original, copy)
    (copy / rundir.LOCK_NAME).write_text(json.dumps(rundir._owner()))  # no run_dir recorded
    code, _, err = run_main(["resume", str(copy), "--total-timesteps", "192", "--quiet"], capsys)
    assert error_line(code, err, f"run {copy} is in use by pid {os.getpid()} (since ")


# ------------------------------------------------------------------------------ 2. a run that cannot be written
def _lock_unwritable(monkeypatch, code: int) -> None:
    """The lock's file cannot be made in the run directory, as on a read-only filesystem (EROFS) or folder
    (EACCES); a chmod does neither for root, so the write itself is made to fail."""
    def refuse(path, text):
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(rundir, "_write_new_file", refuse)


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES], ids=["EROFS", "EACCES"])
def test_resume_of_a_run_that_cannot_be_written_says_how_to_train_on(original, monkeypatch, capsys, code):
    _lock_unwritable(monkeypatch, code)
    before = snapshot(original)
    status, _, err = run_main(["resume", str(original), "--total-timesteps", "192", "--quiet"], capsys)
    assert status == 2, err
    assert one_error_line(err, "proxima resume") == (
        f"{original / rundir.LOCK_NAME}: could not take the run's lock ({os.strerror(code)}); the run can be evaluated "
        f"where it is (proxima eval {original}); to train on, copy it to a writable place and resume there: "
        f"cp -r {original} NEW_DIR && chmod -R u+w NEW_DIR && proxima resume NEW_DIR, or start a new run from its weights: "
        f"proxima train CartPole-v1 --init-from {original}")
    assert snapshot(original) == before


def test_resume_from_a_chmod_read_only_run_directory_says_how_to_train_on(original, capsys):
    os.chmod(original, 0o555)
    try:
        if os.access(original, os.W_OK):
            pytest.skip("chmod does not keep this user (root) from writing")
        code, _, err = run_main(["resume", str(original), "--total-timesteps", "192", "--quiet"], capsys)
    finally:
        os.chmod(original, 0o755)
    assert error_line(code, err, "could not take the run's lock (Permission denied)",
                      f"chmod -R u+w {original} && proxima resume {original}", "--init-from")


def test_a_new_run_in_a_folder_that_cannot_be_written_gets_no_advice_about_a_run(tmp_path, monkeypatch, capsys):
    _lock_unwritable(monkeypatch, errno.EROFS)
    run = tmp_path / "new"
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(run), "--quiet"],
                            capsys)
    assert error_line(code, err, f"{run / rundir.LOCK_NAME}: could not take the run's lock (Read-only file system)")
    assert "cp -r" not in err and "--init-from" not in err


# ------------------------------------------------------------------------------ 3. a damaged member
@pytest.fixture(scope="module")
def population(tmp_path_factory):
    run = tmp_path_factory.mktemp("review45pop") / "pop"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-3", "--run-dir", str(run),
                                             "--total-timesteps", "64", "--eval-episodes", "0", "--quiet", *TINY_POP]) == 0
    return run


@pytest.fixture
def popd(population, tmp_path):
    run = tmp_path / "popd"
    shutil.copytree(population, run)
    return run


def _truncate(path) -> None:
    with open(path, "r+b") as f:
        f.truncate(1000)


def test_eval_of_a_population_leaves_a_damaged_member_out_names_it_and_evaluates_the_others(popd, capsys):
    damaged = ckpt.list_checkpoints(popd / "m001-seed2")[-1]
    _truncate(damaged)
    code, out, err = run_main(["eval", str(popd), "--episodes", "1", "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert [m["dir"] for m in result["members"]] == ["m000-seed1", "m002-seed3"]
    [setting] = result["settings"]
    why = f"checkpoints/{damaged.name}: truncated checkpoint (1000 bytes, the end of the archive is missing)"
    assert setting["left_out"] == [["m001-seed2", why]]
    assert setting["n"] == 2 and setting["members"] == ["m000-seed1", "m001-seed2", "m002-seed3"]
    assert setting["mean_returns"][1] is None
    assert err.splitlines() == [f"proxima: note: {popd / 'm001-seed2'}: left out, not evaluated: {why}; "
                                "the other members are evaluated"]
    code, out, _ = run_main(["eval", str(popd), "--episodes", "1"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == ["m000-seed1", "m002-seed3"]
    assert "(2 of 3 members, seeds only)" in lines[2] and lines[2].endswith(f"; left out: m001-seed2 ({why})")


def test_eval_of_a_population_leaves_a_member_without_a_checkpoint_out(popd, capsys):
    for path in ckpt.list_checkpoints(popd / "m002-seed3"):
        path.unlink()
    code, out, err = run_main(["eval", str(popd), "--episodes", "1", "--json"], capsys)
    assert code == 0, err
    [setting] = json.loads(out)["settings"]
    assert setting["left_out"] == [["m002-seed3", "no checkpoint (checkpoints/step_*.pt) to evaluate"]]


def test_eval_of_a_population_none_of_whose_checkpoints_loads_is_the_first_members_line(popd, capsys):
    for member in ("m000-seed1", "m001-seed2", "m002-seed3"):
        _truncate(ckpt.list_checkpoints(popd / member)[-1])
    first = ckpt.list_checkpoints(popd / "m000-seed1")[-1]
    code, out, err = run_main(["eval", str(popd), "--episodes", "1"], capsys)
    assert one_error_line(err, "proxima eval") == f"{first}: truncated checkpoint (1000 bytes, the end of the archive is missing)"
    assert code == 2 and out == ""


# ------------------------------------------------------------------------------ 4. --keep-checkpoints 0
def _steps(run) -> list:
    return [int(p.name[len("step_"):-len(".pt")]) for p in ckpt.list_checkpoints(run)]


def test_keep_checkpoints_0_keeps_every_checkpoint_and_a_resume_with_a_k_prunes_to_k(tmp_path, capsys):
    run = tmp_path / "all"
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "320", "--checkpoint-every", "1",
                             "--keep-checkpoints", "0", "--run-dir", str(run), "--quiet"], capsys)
    assert code == 0, err
    assert _steps(run) == [64, 128, 192, 256, 320]  # the default would keep 3
    assert yaml.safe_load((run / "config.yaml").read_text())["keep_checkpoints"] == 0
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "384", "--keep-checkpoints", "2", "--quiet"], capsys)
    assert code == 0, err
    assert _steps(run) == [320, 384]
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "576", "--keep-checkpoints", "0", "--quiet"], capsys)
    assert code == 0, err
    assert _steps(run) == [320, 384, 448, 512, 576]


def test_keep_checkpoints_0_keeps_every_checkpoint_of_a_population_and_its_members(tmp_path, capsys):
    run = tmp_path / "pop"
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(run), "--total-timesteps", "160",
                             "--checkpoint-every", "1", "--keep-checkpoints", "0", "--eval-episodes", "0", "--quiet",
                             *TINY_POP], capsys)
    assert code == 0, err
    steps = [32, 64, 96, 128, 160]
    assert _steps(run) == steps and _steps(run / "m000-seed1") == steps and _steps(run / "m001-seed2") == steps


def test_keep_checkpoints_0_is_taken_from_python_too():
    validate(PPOConfig(keep_checkpoints=0), python=True)  # -1 is refused: test_review31_mutdist


def test_keep_checkpoints_help_says_0_keeps_every_one(capsys):
    code, out, _ = run_main(["train", "--help"], capsys)
    assert code == 0 and "(0: keep every" in " ".join(out.split())
