"""Two run-directory defects a review found (docs/reliability.md):

* a run directory made read-only mid-run (chmod a-w, a read-only remount): the lock could not be
  removed in train()'s final cleanup, and that PermissionError replaced what the run ended with (rc 0,
  a stop's 130 and its line, an eval.json StorageError's one line) by a traceback and rc 1. As root
  chmod stops nothing, so the lock's unlink is refused by a patch, as the reviewer's ro.sh saw it;
* the stop line's "continue with" command for a ``module:Class`` env, which resume refuses without
  ``--env``: the command it suggested failed with exit 2."""

from __future__ import annotations

import errno
import inspect
import json
import os
import shlex
import subprocess
import sys

import pytest
from cli_helpers import TINY_ENV, error_line, run_main

from proxima.rundir import LOCK_NAME

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and permissions")

TINY = ["--total-timesteps", "64", "--num-envs", "2", "--num-steps", "32", "--threads", "1", "--no-progress"]


def _refusing_lock(real):
    """os.unlink (Path.unlink calls it) refusing the run's lock, as in a run directory made read-only."""
    def unlink(path, *args, **kwargs):
        if os.path.basename(os.fspath(path)) == LOCK_NAME:
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real(path, *args, **kwargs)
    return unlink


@pytest.fixture
def lock_stays(monkeypatch):
    monkeypatch.setattr(os, "unlink", _refusing_lock(os.unlink))


@pytest.fixture
def stop_after_first(monkeypatch):
    """Trainer.run's test hook: a SIGINT during the first iteration (checkpoint, then the stop)."""
    from proxima.trainer import Trainer

    real = Trainer.run
    monkeypatch.setattr(Trainer, "run", lambda self, resumed=False, stop_after=None, callback=None: real(self, resumed=resumed, stop_after=1, callback=callback))


def _note_lines(err: str, run) -> list:
    lines = [ln for ln in err.splitlines() if "could not remove the run's lock file" in ln]
    for ln in lines:
        assert ln.startswith("proxima: note: ") and str(run / LOCK_NAME) in ln and "stale" in ln, ln
    return lines


# ------------------------------------------------------------------------------------ 1. a lock that cannot be removed
def test_a_finished_run_whose_lock_cannot_be_removed_exits_0_and_the_next_resume_takes_the_lock_over(tmp_path, capsys):
    """In its own process, so its exit status is the real one and its pid is gone afterwards, as after a
    real run: the lock it left is then stale, and a resume takes it over."""
    run = tmp_path / "run"
    script = "\n".join([f"import errno, os, sys\nLOCK_NAME = {LOCK_NAME!r}", inspect.getsource(_refusing_lock),
                        "os.unlink = _refusing_lock(os.unlink)", "from proxima.cli import main", "sys.exit(main(sys.argv[1:]))"])
    proc = subprocess.run([sys.executable, "-c", script, "train", "CartPole-v1", *TINY, "--eval-episodes", "1",
                           "--run-dir", str(run)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(_note_lines(proc.stderr, run)) == 1, proc.stderr
    assert (run / "eval.json").is_file()
    assert (run / LOCK_NAME).is_file()  # left, as the note says
    pid = json.loads((run / LOCK_NAME).read_text())["pid"]  # the finished process's

    code, _, err = run_main(["resume", str(run), "--total-timesteps", "128", "--eval-episodes", "0", "--no-progress"], capsys)
    assert code == 0, err
    assert f"took over the lock left by pid {pid}" in err, err
    assert not (run / LOCK_NAME).exists()


def test_a_sigint_stopped_run_whose_lock_cannot_be_removed_exits_130_with_its_stop_line(tmp_path, capsys, lock_stays,
                                                                                          stop_after_first):
    run = tmp_path / "run"
    code, _, err = run_main(["train", "CartPole-v1", *TINY, "--run-dir", str(run)], capsys)
    assert code == 130, err
    assert "Traceback" not in err, err
    # its one iteration was its last: the line says training is complete (day review 31)
    assert (f"proxima: stopped by SIGINT; after the final checkpoint, before the end-of-run evaluation; training is "
            f"complete; checkpoint: {run}/checkpoints/step_000000000064.pt; continue with: proxima resume {run} (it "
            "trains nothing more and evaluates)\n") in err, err
    assert len(_note_lines(err, run)) == 1, err


def test_an_eval_json_that_cannot_be_written_keeps_its_one_error_line_when_the_lock_stays(tmp_path, monkeypatch, capsys,
                                                                                          lock_stays):
    from proxima import atomic

    real = atomic.write_atomic

    def refuse_eval(path, *args, **kwargs):
        if os.path.basename(os.fspath(path)) == "eval.json":
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(atomic, "write_atomic", refuse_eval)
    run = tmp_path / "run"
    code, _, err = run_main(["train", "CartPole-v1", *TINY, "--eval-episodes", "1", "--run-dir", str(run)], capsys)
    line = error_line(code, err, f"{run}/eval.json", "the run's checkpoints are kept")
    assert line.startswith("proxima train: error: "), line
    assert len(_note_lines(err, run)) == 1, err


# ------------------------------------------------------------------------------------ 2. the stop line of a module env
def test_the_stop_line_of_a_module_env_run_names_the_env_and_its_command_resumes(tmp_path, monkeypatch, capsys,
                                                                                  stop_after_first):
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "fix25_tiny_env.py").write_text(TINY_ENV)
    monkeypatch.syspath_prepend(str(mods))
    monkeypatch.delitem(sys.modules, "fix25_tiny_env", raising=False)
    run = tmp_path / "run"
    code, _, err = run_main(["train", "fix25_tiny_env:Tiny", *TINY, "--eval-episodes", "0", "--run-dir", str(run)], capsys)
    assert code == 130, err
    stop = [ln for ln in err.splitlines() if ln.startswith("proxima: stopped by SIGINT")]
    assert len(stop) == 1, err
    command = f"proxima resume --env fix25_tiny_env:Tiny {run}"
    assert stop[0].endswith(f"continue with: {command} (it trains nothing more and evaluates)"), stop[0]  # its last iteration

    monkeypatch.undo()  # the command as given, without the test hook
    monkeypatch.syspath_prepend(str(mods))
    code, _, err = run_main(shlex.split(command)[1:] + ["--total-timesteps", "128", "--eval-episodes", "0"], capsys)
    assert code == 0, err


def test_the_continue_command_names_env_only_for_a_module_env_population_included(tmp_path):
    from proxima.signals import checkpoint_line

    run = tmp_path / "pop"
    (run / "checkpoints").mkdir(parents=True)
    (run / "population.json").write_text('{"kind": "ppo-population", "env_id": "my_envs:Walker", "members": 2}')
    ckpt = run / "checkpoints" / "step_000000000064.pt"
    assert checkpoint_line(ckpt) == f"checkpoint: {ckpt}; continue with: proxima resume --env my_envs:Walker {run}"

    single = tmp_path / "single"
    (single / "checkpoints").mkdir(parents=True)
    (single / "config.yaml").write_text("env_id: CartPole-v1\nseed: 1\n")
    ckpt = single / "checkpoints" / "step_000000000064.pt"
    assert checkpoint_line(ckpt) == f"checkpoint: {ckpt}; continue with: proxima resume {single}"
    (single / "config.yaml").write_text("model: tiny\nsteps: 2\n")  # no env id (an RLHF run's): as before
    assert checkpoint_line(ckpt) == f"checkpoint: {ckpt}; continue with: proxima resume {single}"
    (single / "config.yaml").write_text("env_id: [unclosed\n")  # unreadable: the line as before, never an error
    assert checkpoint_line(ckpt) == f"checkpoint: {ckpt}; continue with: proxima resume {single}"
