"""A new RLHF run stopped (SIGINT/SIGTERM) or failed before its first PPO step keeps nothing: no run
directory, no lock, so the same command runs again; a resume stopped as it sets up leaves the run
as it was. Real signals, sent by the process to itself at an exact point (as tests/rlhf/test_signals.py)."""

from __future__ import annotations

import hashlib
import os
import signal
import sys
from pathlib import Path

import pytest

from proxima.rlhf import rundir
import warm_python

#: run as `python -c INJECT SIG ARGS...`: `proxima ARGS`, signalling SIG to itself as the run's MetricsLogger
#: starts (a new run: after config.yaml/meta.json, before step 1; a resume: before it truncates any log)
INJECT = """
import os, signal, sys
sig = getattr(signal, "SIG" + sys.argv[1])
import proxima.rlhf.rundir as R
orig = R.MetricsLogger.__init__
def patched(self, *a, **k):
    os.kill(os.getpid(), sig)
    return orig(self, *a, **k)
R.MetricsLogger.__init__ = patched
from proxima.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _tiny_args(assets, *extra: str) -> list:
    return ["--policy", str(assets / "model"), "--prompts", str(assets / "prompts.txt"), "--reward",
            "proxima.rlhf.demo:keyword_sentiment", "--batch-size", "4", "--max-new-tokens", "4", "--update-epochs", "1",
            "--steps", "1", "--print-every", "0", "--sample-every", "0", "--no-plot", "--threads", "1", *extra]


def _signal_self(sig):
    def send(*args, **kwargs):
        os.kill(os.getpid(), sig)
        raise AssertionError("the signal did not stop the run where it landed")
    return send


def _stop_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert lines, "no stop line on stderr"
    return lines[-1]


def _files(run_dir: Path) -> dict:
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(run_dir.rglob("*"))}


@pytest.mark.parametrize("where", ["models", "run_files"])
def test_sigint_before_the_first_step_keeps_nothing_and_the_same_command_runs(assets, tmp_path, monkeypatch, capsys, where):
    from proxima.rlhf.__main__ import main
    from proxima.rlhf import trainer

    if where == "models":  # while the models load (the run directory is not made yet)
        monkeypatch.setattr(trainer.RLHFTrainer, "__init__", _signal_self(signal.SIGINT))
    else:  # after config.yaml and meta.json, as the logs open, before step 1
        monkeypatch.setattr(rundir.MetricsLogger, "__init__", _signal_self(signal.SIGINT))
    args = _tiny_args(assets, "--run-dir", str(tmp_path / "run"))
    assert main(args) == 130
    assert _stop_line(capsys.readouterr().err) == "proxima: stopped by SIGINT; before training started; nothing was kept"
    assert not (tmp_path / "run").exists()
    monkeypatch.undo()
    assert main(args) == 0, capsys.readouterr().err
    assert rundir.list_checkpoints(tmp_path / "run")[-1].name == "step_000001.pt"


def test_sigterm_after_the_run_files_removes_the_default_run_directory_not_runs(assets, tmp_path):
    (tmp_path / "runs").mkdir()  # there before: it stays
    proc = warm_python.run([sys.executable, "-c", INJECT, "TERM", "rlhf", *_tiny_args(assets)], cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 143, proc.stderr[-3000:]
    assert _stop_line(proc.stderr) == "proxima: stopped by SIGTERM; before training started; nothing was kept"
    assert (tmp_path / "runs").is_dir() and list((tmp_path / "runs").iterdir()) == []


@pytest.mark.parametrize("where", ["pretraining", "run_files"])
def test_a_demo_stopped_before_the_first_step_removes_its_run_directory(tmp_path, monkeypatch, capsys, where):
    from proxima.rlhf import demo
    from proxima.rlhf.__main__ import main

    monkeypatch.chdir(tmp_path)
    if where == "pretraining":  # the tiny model's, before train_rlhf
        monkeypatch.setattr(demo, "pretrain", _signal_self(signal.SIGINT))
    else:  # train_rlhf's config.yaml and meta.json written beside demo/, before step 1
        monkeypatch.setattr(rundir.MetricsLogger, "__init__", _signal_self(signal.SIGINT))
    assert main(["--demo", "--demo-pretrain-steps", "1", "--threads", "1"]) == 130
    assert _stop_line(capsys.readouterr().err) == "proxima: stopped by SIGINT; before training started; nothing was kept"
    assert not (tmp_path / "runs").exists()  # the demo made runs/ too: taken back, empty


def test_an_error_after_the_run_files_before_the_first_step_leaves_no_directory(assets, tmp_path, monkeypatch, capsys):
    from proxima.diskspace import StorageError
    from proxima.rlhf.__main__ import main

    def fail(*args, **kwargs):
        raise StorageError(f"{tmp_path / 'run' / 'events.out.tfevents.x'}: could not open the run's logs (disk full)")

    monkeypatch.setattr(rundir.MetricsLogger, "__init__", fail)
    assert main(_tiny_args(assets, "--run-dir", str(tmp_path / "run"))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("proxima rlhf: error: ") and "could not open the run's logs" in err[0], err
    assert not (tmp_path / "run").exists()


def test_a_resume_stopped_as_it_sets_up_leaves_the_run_as_it_was(assets, tmp_path, monkeypatch):
    from proxima.rlhf import loop, train_rlhf
    from proxima.rlhf.config import RLHFConfig
    from proxima.signals import TrainingInterrupted

    real_save = loop.save_checkpoint

    def save(t, run_dir):  # stopped after step 1 of 2: a run to resume
        real_save(t, run_dir)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(loop, "save_checkpoint", save)
    run = tmp_path / "run"
    cfg = RLHFConfig(policy=str(assets / "model"), prompts=str(assets / "prompts.txt"),
                     reward="proxima.rlhf.demo:keyword_sentiment", batch_size=4, max_new_tokens=4, update_epochs=1,
                     steps=2, checkpoint_every=1, print_every=0, sample_every=0, plot=False, run_dir=str(run))
    with pytest.raises(TrainingInterrupted):
        train_rlhf(cfg)
    before = _files(run)
    # --steps 3: config.yaml records it as the resume starts, and has it back as it was once the resume stops
    proc = warm_python.run([sys.executable, "-c", INJECT, "TERM", "resume", str(run), "--steps", "3"], cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 143, proc.stderr[-3000:]
    last = run / "checkpoints" / "step_000001.pt"
    assert _stop_line(proc.stderr) == (f"proxima: stopped by SIGTERM; before training started; the run is as its last "
                                       f"checkpoint left it; checkpoint: {last}; continue with: proxima resume {run}")
    assert _files(run) == before  # byte for byte, and no lock left


def test_a_demo_stopped_in_a_given_run_dir_keeps_a_demo_folder_that_was_there(tmp_path, monkeypatch, capsys):
    """The demo's files go to RUN/demo/: a stop took back RUN/demo whole, a user's own demo/ folder (in a
    --run-dir that was there before) with it, and a run wrote its model and prompts over the user's files."""
    from proxima.rlhf import demo
    from proxima.rlhf.__main__ import main

    run_dir = tmp_path / "X"
    (run_dir / "demo").mkdir(parents=True)
    (run_dir / "demo" / "notes.txt").write_text("mine")
    (run_dir / "other.txt").write_text("mine too")
    monkeypatch.setattr(demo, "pretrain", _signal_self(signal.SIGINT))
    assert main(["--demo", "--demo-pretrain-steps", "1", "--threads", "1", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"proxima rlhf: error: --run-dir {run_dir}: holds a demo/ entry, where the demo writes its model and "
                   "prompts; choose another --run-dir (or move demo/ away)"], err
    # refused before anything was written into it (the demo's model and prompts.txt once replaced a user's)
    assert sorted(p.name for p in (run_dir / "demo").iterdir()) == ["notes.txt"]
    assert (run_dir / "demo" / "notes.txt").read_text() == "mine" and (run_dir / "other.txt").read_text() == "mine too"
