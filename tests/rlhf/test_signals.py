"""SIGINT/SIGTERM stop an RLHF run as they stop `proxima train` (docs/reliability.md, Signals): the step
finishes, a checkpoint is written, one line names it, exit 128 + signum; a resume ends where an
uninterrupted run ends; a signal while a checkpoint is written stops there, not a step later."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from proxima.rlhf import rundir
from proxima.rlhf.rundir import read_metrics
import warm_python

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _rlhf(assets, run_dir: Path, *extra: str, **env) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "proxima", "rlhf", "--policy", str(assets / "model"), "--prompts", str(assets / "prompts.txt"),
            "--reward", "signalling_reward:score", "--run-dir", str(run_dir), "--batch-size", "4", "--max-new-tokens", "4",
            "--update-epochs", "1", "--steps", "4", "--checkpoint-every", "3", "--print-every", "0", "--no-plot",
            "--threads", "1", *extra]
    return subprocess.run(args, env=_env(**env), capture_output=True, text=True, timeout=300)


def _env(**extra) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(FIXTURES), **extra}


def _weights(run_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "policy" / "model.safetensors"))


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_sigterm_stops_after_the_step_with_143_and_the_resume_ends_as_an_uninterrupted_run(assets, tmp_path):
    straight = _rlhf(assets, tmp_path / "straight")
    assert straight.returncode == 0, straight.stderr[-3000:]
    stopped = _rlhf(assets, tmp_path / "run", SIGNAL_AT="3", SIGNAL="TERM")  # call 3: step 2's reward
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    line = stopped.stderr.strip().splitlines()[-1]
    assert line == (f"proxima: stopped by SIGTERM; checkpoint: {tmp_path / 'run' / 'checkpoints' / 'step_000002.pt'}; "
                    f"continue with: proxima resume --trust-run {tmp_path / 'run'} "
                    f"(resume('{tmp_path / 'run'}', trust_run=True) in Python)"), stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr
    resumed = warm_python.run([sys.executable, "-m", "proxima", "resume", str(tmp_path / "run"), "--trust-run"],
                             env=_env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert read_metrics(tmp_path / "run")["step"] == [1.0, 2.0, 3.0, 4.0]
    a, b = _weights(tmp_path / "straight"), _weights(tmp_path / "run")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_signal_while_a_checkpoint_is_written_stops_at_that_checkpoint(assets, tmp_path, monkeypatch):
    """SIGINT as step 3's periodic checkpoint is written: the run stops at step 3 (exit 130), not after step 4."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    from proxima.rlhf import loop, train_rlhf
    from proxima.rlhf.config import RLHFConfig
    from proxima.signals import TrainingInterrupted

    real_save = loop.save_checkpoint

    def save(t, run_dir):
        real_save(t, run_dir)
        if t.step == 3:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(loop, "save_checkpoint", save)
    cfg = RLHFConfig(policy=str(assets / "model"), prompts=str(assets / "prompts.txt"), reward="signalling_reward:score",
                     batch_size=4, max_new_tokens=4, update_epochs=1, steps=5, checkpoint_every=3, print_every=0, plot=False,
                     run_dir=str(tmp_path / "run"))
    with pytest.raises(TrainingInterrupted) as info:
        train_rlhf(cfg)
    assert info.value.exit_code == 130 and info.value.checkpoint.name == "step_000003.pt"
    assert [p.name for p in rundir.list_checkpoints(tmp_path / "run")] == ["step_000003.pt"]
