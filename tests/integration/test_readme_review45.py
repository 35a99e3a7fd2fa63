"""Review 45 of the restructured README: ``train(PPOConfig(env_id=...))`` of an env with a tuned default
preset says the preset is not applied and how to apply it (the CLI applies it; Python did so silently
not); a run stopped by a signal ends stdout with ``run directory: D`` as a finished run does, so a batch
script's ``RUN=$(proxima train ... | tail -1)`` requeues with it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import proxima
import warm_python
from proxima import PPOConfig, train
from tests.cli_helpers import TINY_POP, TINY_RUN, run_main

#: the smallest Pendulum run: one iteration of PPOConfig's 4 envs x 128 steps, no evaluation, no progress line
TINY_PENDULUM = dict(env_id="Pendulum-v1", total_timesteps=1024, num_steps=16, update_epochs=1, num_minibatches=2,
                     eval_episodes=0, progress=False, threads=1)

UNAPPLIED = "proxima: note: Pendulum-v1 has a tuned preset (default) that PPOConfig(...) does not apply: "


def _notes(err: str) -> list:
    return [line for line in err.splitlines() if line.startswith(UNAPPLIED)]


# -- 1. train(PPOConfig(...)) names the tuned preset it leaves out, and the call that applies it -----------------

def test_python_train_of_an_env_with_a_tuned_preset_says_the_preset_is_not_applied_and_the_call_that_applies_it(
        tmp_path, capsys):
    train(PPOConfig(**TINY_PENDULUM), run_dir=tmp_path / "untuned")
    [note] = _notes(capsys.readouterr().err)
    assert note == (UNAPPLIED + "it sets num_envs=32, lr=0.0005, gamma=0.95, ent_coef=0.0, norm_obs=True, norm_reward=True, where this run keeps PPOConfig's defaults; "
                    "`cfg = proxima.presets.resolve('Pendulum-v1'); cfg.total_timesteps = 4096` (at least its batch, 32 envs "
                    "x 128 steps) applies it as `proxima train Pendulum-v1` does (your own fields set on cfg after it)")
    trained = yaml.safe_load((tmp_path / "untuned" / "config.yaml").read_text())
    assert (trained["num_envs"], trained["gamma"], trained["norm_obs"]) == (4, 0.99, False)  # what the note says

    # (update_epochs and num_minibatches, which the caller set, are the caller's: not listed)
    # the suggested call, as a user pastes it, trains with the preset, and says nothing more of it
    names = {"proxima": proxima}
    exec(re.search(r"`(cfg = proxima\.presets\.resolve[^`]*)`", note).group(1), names)
    cfg = names["cfg"]
    cfg.eval_episodes, cfg.progress, cfg.update_epochs = 0, False, 1
    train(cfg, run_dir=tmp_path / "tuned")
    assert _notes(capsys.readouterr().err) == []
    tuned = yaml.safe_load((tmp_path / "tuned" / "config.yaml").read_text())
    assert (tuned["num_envs"], tuned["gamma"], tuned["lr"], tuned["norm_obs"], tuned["norm_reward"]) == (32, 0.95, 5e-4, True, True)
    assert tuned["total_timesteps"] == 4096


def test_no_preset_note_when_the_config_already_holds_the_presets_values_or_asked_for_none(tmp_path, capsys):
    preset = proxima.presets.preset_config("Pendulum-v1", "default")
    preset.pop("total_timesteps")
    train(PPOConfig(**{**TINY_PENDULUM, **preset, "num_steps": 32}), run_dir=tmp_path / "by_hand")
    cfg = proxima.presets.resolve("Pendulum-v1", "none", PPOConfig(**TINY_PENDULUM))  # the default preset refused by name
    train(cfg, run_dir=tmp_path / "none")
    train(PPOConfig(**{**TINY_PENDULUM, "env_id": "CartPole-v1"}), run_dir=tmp_path / "cartpole")  # its default is PPOConfig's
    err = capsys.readouterr().err
    assert "has a tuned preset" not in err, err


def test_the_command_line_applies_the_preset_and_says_no_such_note(tmp_path, capsys):
    code, _, err = run_main(["train", "Pendulum-v1", "--preset", "none", "--dry-run"], capsys)
    assert code == 0, err
    assert "does not apply" not in err, err


# -- 2. a stopped run ends stdout with its run directory, as a finished one -------------------------------------

def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def _rows(metrics: list) -> int:
    return max((len(p.read_text().splitlines()) - 1 for p in metrics if p.exists()), default=0)


def _stopped(args: list, cwd: Path, metrics, more_than: int, signum: int) -> tuple:
    """``proxima ARGS`` run until a file of ``metrics()`` has more than ``more_than`` rows, then sent
    ``signum``: (exit code, stdout, stderr)."""
    proc = warm_python.Popen([sys.executable, "-m", "proxima", *args], cwd=cwd, env=_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while _rows(metrics()) <= more_than:
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"ended early ({proc.returncode}): {err[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("no metrics.csv row in time")
        time.sleep(0.05)
    proc.send_signal(signum)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"no exit after {signal.Signals(signum).name}")
    return proc.returncode, out, err


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_run_stopped_by_a_signal_ends_stdout_with_its_run_directory_as_train_and_resume_do(tmp_path):
    run = tmp_path / "runs" / "x"
    metrics = lambda: [run / "metrics.csv"]  # noqa: E731
    long = ["--total-timesteps", "100000000"]
    # --quiet: the only line on stdout, the directory as typed (the stop line's `proxima resume runs/x`)
    code, out, err = _stopped(["train", "CartPole-v1", *TINY_RUN, *long, "--run-dir", "runs/x", "--quiet"], tmp_path,
                              metrics, 0, signal.SIGINT)
    assert code == 130, err
    assert "continue with: proxima resume runs/x" in err.splitlines()[-1], err
    assert out == "run directory: runs/x\n"

    rows = _rows(metrics())
    code, out, err = _stopped(["resume", "runs/x"], tmp_path, metrics, rows, signal.SIGTERM)
    assert code == 143, err
    assert "stopped by SIGTERM; checkpoint: " in err, err
    assert out.splitlines()[-1] == "run directory: runs/x", out


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_population_stopped_by_a_signal_ends_stdout_with_its_directory(tmp_path):
    pop = tmp_path / "pop"
    code, out, err = _stopped(["train", "CartPole-v1", "--seeds", "1-2", *TINY_POP, "--eval-episodes", "0",
                               "--total-timesteps", "100000000", "--run-dir", str(pop)], tmp_path,
                              lambda: list(pop.glob("*/metrics.csv")), 0, signal.SIGINT)
    assert code == 130, err
    assert f"continue with: proxima resume {pop}" in err, err
    assert out.splitlines()[-1] == f"run directory: {pop}", out
