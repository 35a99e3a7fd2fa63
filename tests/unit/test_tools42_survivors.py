"""Survivors of the mutation review of the doctor, check-env, bench, stop-line and log-restore changes:
each test here fails with one mutation of the product code that the earlier tests let through."""

from __future__ import annotations

import re
import sys

import pytest
import torch

from proxima import doctor
from tests.cli_helpers import module_written_in, run_main

RESTORED = "was deleted while the run trained; restored with everything logged to it so far, and the run logs on there"


def _logger(run_dir, **kw):
    from proxima.logger import RunLogger

    return RunLogger(run_dir, 400, progress=False, flush_seconds=3600.0, **kw)  # a population's: rows stay buffered


def _log(log, iteration: int) -> None:
    log.log(iteration, 100 * iteration, {"charts/SPS": float(iteration), "losses/value_loss": 0.5})


def _csv_steps(run_dir) -> list:
    from proxima.logger import CSV_COLUMNS

    lines = (run_dir / "metrics.csv").read_text().splitlines()
    assert lines[0] == ",".join(CSV_COLUMNS)
    return [int(r.split(",")[1]) for r in lines[1:]]


# ------------------------------------------------------------------ 1, 11. metrics.csv deleted under a buffering logger
def test_buffered_rows_of_a_metrics_csv_deleted_before_close_are_all_restored(tmp_path):
    log = _logger(tmp_path)
    for i in (1, 2, 3):
        _log(log, i)
    (tmp_path / "metrics.csv").unlink()
    log.close()
    assert _csv_steps(tmp_path) == [100, 200, 300]


def test_buffered_rows_of_a_metrics_csv_deleted_mid_run_are_restored_and_the_old_handle_closed(tmp_path, capsys):
    log = _logger(tmp_path)
    for i in (1, 2, 3):
        _log(log, i)
    old = log._csv_file
    (tmp_path / "metrics.csv").unlink()
    _log(log, 4)
    assert old.closed  # one open handle per file: a restore left the unlinked inode's open for the run's life
    log.flush()
    assert _csv_steps(tmp_path) == [100, 200, 300, 400]
    log.close()
    assert _csv_steps(tmp_path) == [100, 200, 300, 400]
    assert capsys.readouterr().err == f"proxima: note: {tmp_path / 'metrics.csv'} {RESTORED}\n"


def test_a_file_made_at_a_deleted_metrics_csvs_name_is_replaced_not_appended_to(tmp_path):
    log = _logger(tmp_path)
    _log(log, 1)
    (tmp_path / "metrics.csv").unlink()
    (tmp_path / "metrics.csv").write_text("someone,else\n")
    _log(log, 2)
    log.close()
    assert _csv_steps(tmp_path) == [100, 200]


# ------------------------------------------------------------------ 2. events file deleted after the last row
def test_an_events_file_deleted_after_the_last_row_is_restored_at_close_with_every_scalar(tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = _logger(tmp_path)
    for i in (1, 2, 3):
        _log(log, i)
    events = next(tmp_path.glob("events.out.tfevents.*"))
    events.unlink()
    log.close()
    assert capsys.readouterr().err == f"proxima: note: {events} {RESTORED}\n"
    acc = EventAccumulator(str(events))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("charts/SPS")] == [(100, 1.0), (200, 2.0), (300, 3.0)]


# ------------------------------------------------------------------ 11. a restore that fails at close
def test_a_restore_that_fails_at_close_closes_both_files_and_raises_one_named_error(tmp_path, monkeypatch):
    from proxima import logger
    from proxima.diskspace import StorageError

    log = _logger(tmp_path)
    _log(log, 1)
    csv_file, events_file = log._csv_file, log._events._file
    (tmp_path / "metrics.csv").unlink()
    events = next(tmp_path.glob("events.out.tfevents.*"))
    events.unlink()

    def full(path, mode):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(logger, "atomic_open", full)
    with pytest.raises(StorageError) as raised:
        log.close()
    assert csv_file.closed and events_file.closed
    assert str(raised.value).startswith(f"{events}: could not write TensorBoard events (No space left on device")
    assert "\n" not in str(raised.value)


# ------------------------------------------------------------------ 3, 9, 10. doctor's pip and GPU hints
def test_doctor_optional_package_hint_is_a_whole_pip_command(monkeypatch):
    monkeypatch.setattr(doctor, "_package", lambda name: (None, False, "not installed"))
    hints = doctor.collect()["hints"]
    assert (f"tensorboard not installed: install it from the repository root with: {doctor.pip()} install -c "
            f"requirements.lock -e . ({doctor._WHAT_NEEDS['tensorboard']})" in hints), hints  # the locked one (review 49)


def test_doctor_sees_nvidia_through_nvidia_smi_alone(monkeypatch):
    monkeypatch.setattr(doctor.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(doctor.shutil, "which", lambda name: "/usr/bin/nvidia-smi" if name == "nvidia-smi" else None)
    assert doctor.nvidia_visible() is True
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    hint = doctor.cuda_reason(doctor.collect())
    assert "no NVIDIA GPU or driver is visible" not in hint
    assert "install PyPI's CUDA build" in hint or sys.platform != "linux", hint


def test_doctor_says_python_m_pip_for_a_dot_venv_without_bin_pip(monkeypatch, tmp_path):
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / ".venv"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / ".venv" / "bin" / "python"))
    assert doctor.pip() == f"{tmp_path / '.venv' / 'bin' / 'python'} -m pip"


# ------------------------------------------------------------------ 4. the stop line, in the caller's words
def _stop_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("proxima: stopped at global step")]
    assert len(lines) == 1, err
    return lines[0]


def test_a_python_run_stopped_at_its_target_names_the_field(tmp_path, capsys):
    from proxima import train
    from proxima.config import PPOConfig

    cfg = PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1, eval_episodes=0,
                    progress=False, threads=1, total_timesteps=640, stop_return=1.0, stop_episodes=1)
    train(cfg, run_dir=tmp_path / "run", evaluate_at_end=False)
    assert re.fullmatch(r"proxima: stopped at global step \d+ \(iteration \d+\): the last 1\+ training episodes "
                        r"averaged [\d.]+ >= stop_return=1 \(`proxima report`'s charts/episodic_return_100 averages the last 100, "
                        r"older episodes too, so it can read lower\)", _stop_line(capsys.readouterr().err))


def test_a_cli_run_stopped_at_its_target_names_the_flag(tmp_path, capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2",
                             "--update-epochs", "1", "--eval-episodes", "0", "--no-progress", "--total-timesteps", "640",
                             "--stop-return", "1", "--stop-episodes", "1", "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 0, err
    assert re.fullmatch(r"proxima: stopped at global step \d+ \(iteration \d+\): the last 1\+ training episodes "
                        r"averaged [\d.]+ >= --stop-return 1 \(`proxima report`'s charts/episodic_return_100 averages the last "
                        r"100, older episodes too, so it can read lower\)", _stop_line(err))


# ------------------------------------------------------------------ 5. the vector note on resume
@pytest.mark.parametrize("python, given", [(True, "vector='async'"), (False, "--vector async")])
def test_the_vector_note_of_a_native_runs_resume_is_in_the_callers_words(python, given, capsys):
    from proxima.config import PPOConfig
    from proxima.run_setup import apply_resume_overrides
    from proxima.signals import hold_python_caller

    release = hold_python_caller(python)
    try:
        apply_resume_overrides(PPOConfig(env_id="CartPole-v1"), {"vector": "async"},
                               {"env_backend": "native", "global_step": 0, "iteration": 0, "path": "run"}, notes=False)
    finally:
        release()
    assert capsys.readouterr().err == (f"proxima: note: {given}: applies to the gymnasium backend only; the run's "
                                       "backend (native) ignores it\n")


# ------------------------------------------------------------------ 6. check-env names the line of a bare raise or exit
ENDS_ENV = '''import gymnasium as gym
import numpy as np


class Ends(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        raise SystemExit(3)


class Bare(Ends):
    def step(self, action):
        raise RuntimeError()
'''


@pytest.fixture
def ends_env(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "myenvs42s", ENDS_ENV)


@pytest.mark.parametrize("cls, raised", [
    ("Ends", "SystemExit: the env called sys.exit(3) (exit status 3) (myenvs42s.py:14); raise an exception instead"),
    ("Bare", "RuntimeError (myenvs42s.py:19)"),
])
def test_check_env_names_the_line_of_an_exit_or_a_bare_exception(ends_env, capsys, cls, raised):
    code, out, err = run_main(["check-env", f"myenvs42s:{cls}"], capsys)
    assert code == 1
    fails = [ln for ln in (out + err).splitlines() if ln.startswith("FAIL step")]
    assert len(fails) == 1 and f"raised {raised}" in fails[0], out + err


# ------------------------------------------------------------------ 7, 8. bench's --out folder and a cut-short table
@pytest.fixture
def fake_sizes(monkeypatch):
    """bench_lines replaced: sizes 4 measured (no Trainer built), any later size interrupted (Ctrl-C)."""
    from proxima import bench

    sizes = []

    def fake_lines(args, backends, n):
        sizes.append(n)
        if len(sizes) > 1:
            raise KeyboardInterrupt
        return [(bench.Line(b, n, samples={"env": [2000.0], "rollout": [900.0, 1000.0], "train": [100.0]}),
                 bench.bench_config(args, b, n), torch.device("cpu")) for b in backends]

    monkeypatch.setattr(bench, "bench_lines", fake_lines)
    return sizes


def test_bench_quotes_a_missing_out_folder_with_a_space_in_its_mkdir(fake_sizes, capsys, tmp_path):
    from tests.cli_helpers import one_error_line

    folder = tmp_path / "my results"
    code, out, err = run_main(["bench", "CartPole-v1", "--backend", "native", "--num-envs", "4",
                               "--out", str(folder / "x.md")], capsys)
    assert code == 2 and fake_sizes == [] and out == ""
    assert f"(mkdir -p '{folder}')" in one_error_line(err, "proxima bench")


def test_bench_cut_short_prints_the_legend_under_its_partial_table(fake_sizes, capsys):
    code, out, err = run_main(["bench", "CartPole-v1", "--backend", "native", "--num-envs", "4,16"], capsys)
    assert (code, fake_sizes) == (130, [4, 16]), err
    rows = out.splitlines()
    assert rows[0].startswith("CartPole-v1 on cpu: threads ")  # the switches line above the table
    assert rows[3].split()[:2] == ["native", "4"]
    assert rows[4:] == [
        "env: env.step with random actions, no policy; rollout: collect_rollout with the policy; "
        "train: whole iterations (rollout + GAE + update)",
        "cells: steps/s, median (min-max) over the timed rounds; "
        "train x gym: train steps/s over Gymnasium's at the same num_envs",
        "stopped at 16 envs (native): interrupted (SIGINT); not measured: 16 envs"]
