"""doctor's CUDA hint on a machine without an NVIDIA GPU, check-env naming the user's line, bench's
--num-envs duplicates, legend and --out folder, the progress line's return window, Python-API notes
worded by field, and a metrics.csv deleted while the run trains."""

from __future__ import annotations

import re
import sys

import pytest
import torch

from proxima import doctor


def _cpu_torch(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)


def test_doctor_without_an_nvidia_device_says_the_cpu_build_is_right(monkeypatch):
    _cpu_torch(monkeypatch)
    monkeypatch.setattr(doctor, "nvidia_visible", lambda: False)
    hints = [h for h in doctor.collect()["hints"] if h.startswith("CUDA not usable")]
    assert len(hints) == 1
    assert "the right one here: no NVIDIA GPU or driver is visible (no /dev/nvidia*, no nvidia-smi)" in hints[0]
    assert "to train on GPUs" not in hints[0]
    # the install line stays, for a machine that has a GPU
    assert "on a machine with an NVIDIA GPU and driver, install PyPI's CUDA build" in hints[0] or sys.platform != "linux"


@pytest.mark.skipif(sys.platform != "linux", reason="PyPI's torch is the CUDA build on Linux only")
def test_doctor_cuda_hint_names_the_running_interpreters_pip(monkeypatch, tmp_path):
    _cpu_torch(monkeypatch)
    monkeypatch.setattr(doctor, "nvidia_visible", lambda: True)
    monkeypatch.setattr(sys, "executable", "/opt/py 3/bin/python3")
    monkeypatch.setattr(sys, "prefix", "/opt/py 3")
    monkeypatch.chdir(tmp_path)
    hint = doctor.cuda_reason(doctor.collect())
    assert hint.endswith("install PyPI's CUDA build: '/opt/py 3/bin/python3' -m pip uninstall -y torch && "
                         "'/opt/py 3/bin/python3' -m pip install torch==2.13.0 --index-url https://pypi.org/simple")


def test_doctor_says_dot_venv_pip_from_the_repositorys_venv(monkeypatch, tmp_path):
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "pip").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / ".venv"))
    assert doctor.pip() == ".venv/bin/pip"


def test_no_doctor_hint_says_a_bare_pip(monkeypatch):
    _cpu_torch(monkeypatch)
    monkeypatch.setattr(doctor, "nvidia_visible", lambda: True)
    monkeypatch.setattr(doctor, "_package", lambda name: (None, False, "not installed"))  # every install hint
    monkeypatch.setattr(torch, "__version__", "2.12.0")  # and the pin hint
    hints = doctor.collect()["hints"]
    assert sum("pip" in h for h in hints) >= 10
    bare = [h for h in hints if re.search(r"(^|[:;&] )pip ", h)]
    assert bare == []


RAISES_ENV = '''import gymnasium as gym
import numpy as np


class Raises(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t > 5:
            raise RuntimeError("boom in step")
        return np.zeros(2, np.float32), 0.0, False, False, {}
'''


@pytest.fixture
def raises_env(tmp_path, monkeypatch):
    from tests.cli_helpers import module_written_in

    yield from module_written_in(tmp_path, monkeypatch, "myenvs42", RAISES_ENV)


def test_check_env_names_the_user_line_that_raised(raises_env, capsys):
    from tests.cli_helpers import run_main

    code, out, err = run_main(["check-env", "myenvs42:Raises"], capsys)
    assert code == 1
    fails = [ln for ln in (out + err).splitlines() if ln.startswith("FAIL step")]
    assert fails == ["FAIL step: expected step(action) returns without raising; got step(0) at step 6 raised "
                     "RuntimeError: boom in step (myenvs42.py:17)"]


@pytest.fixture
def measured_sizes(monkeypatch):
    """bench_lines replaced by a recorder (no Trainer is built): the sizes bench went on to measure."""
    from proxima import bench

    sizes = []

    def fake_lines(args, backends, n):
        sizes.append(n)
        return [(bench.Line(b, n, samples={"env": [2000.0], "rollout": [900.0, 1000.0], "train": [100.0]}),
                 bench.bench_config(args, b, n), torch.device("cpu")) for b in backends]

    monkeypatch.setattr(bench, "bench_lines", fake_lines)
    return sizes


def test_bench_refuses_a_size_listed_twice(measured_sizes, capsys):
    from tests.cli_helpers import one_error_line, run_main

    code, out, err = run_main(["bench", "CartPole-v1", "--backend", "native", "--num-envs", "4,16,4"], capsys)
    assert code == 2 and measured_sizes == [] and out == ""
    assert one_error_line(err, "proxima bench") == "--num-envs '4,16,4': 4 is listed twice; list each size once"


def test_bench_prints_a_legend_under_its_table(measured_sizes, capsys):
    from tests.cli_helpers import run_main

    code, out, err = run_main(["bench", "CartPole-v1", "--backend", "native", "--num-envs", "4"], capsys)
    assert code == 0, err
    rows = out.splitlines()
    assert rows[0].startswith("CartPole-v1 on cpu: threads ")  # the switches line above the table (test_accel43)
    assert rows[3].split() == ["native", "4", "2.0k", "(2.0k-2.0k)", "950", "(900-1.0k)", "100", "(100-100)"]
    assert rows[4:] == [
        "env: env.step with random actions, no policy; rollout: collect_rollout with the policy; "
        "train: whole iterations (rollout + GAE + update)",
        "cells: steps/s, median (min-max) over the timed rounds; "
        "train x gym: train steps/s over Gymnasium's at the same num_envs"]


def test_bench_refuses_an_out_file_in_a_missing_folder_before_measuring(measured_sizes, capsys, tmp_path):
    from tests.cli_helpers import one_error_line, run_main

    out_file = tmp_path / "no" / "such" / "x.md"
    code, out, err = run_main(["bench", "CartPole-v1", "--backend", "native", "--num-envs", "4", "--out", str(out_file)],
                              capsys)
    assert code == 2 and measured_sizes == [] and out == ""
    assert one_error_line(err, "proxima bench") == (
        f"--out {out_file}: folder {tmp_path / 'no' / 'such'} does not exist; create it first "
        f"(mkdir -p {tmp_path / 'no' / 'such'}) or give a file in an existing folder")
    assert list(tmp_path.iterdir()) == []


def test_the_progress_line_names_its_return_window(tmp_path, monkeypatch):
    import io

    from proxima.logger import RunLogger

    stream = io.StringIO()  # not a terminal: LineProgress, whole lines
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setattr("proxima.logger.LINE_SECONDS", 0.0)
    log = RunLogger(tmp_path, 100, progress=True, rolling=True)
    log.log(1, 50, {"charts/SPS": 5.0, "episodes": 2, "charts/episodic_return": 20.0})
    log.log(2, 100, {"charts/SPS": 5.0, "episodes": 2, "charts/episodic_return": 40.0})
    log.close()
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("| SPS 5 | return (2 ep) 20.0"), lines
    assert lines[-1].endswith("| return (4 ep) 30.0"), lines


def test_the_stop_return_line_says_its_window_apart_from_the_progress_bars():
    from proxima.config import PPOConfig
    from proxima.trainer import stop_return_line

    cfg = PPOConfig(stop_return=500.0)
    assert stop_return_line(cfg, 182_784, 357, 500.0) == (
        "proxima: stopped at global step 182,784 (iteration 357): the last 20+ training episodes averaged 500.0 >= "
        "--stop-return 500 (the progress bar's and `proxima report`'s return averages the last 100, older episodes too, "
        "so it can read lower)")
    cfg.progress = False  # no bar: the report's number still differs, and the line says why
    assert stop_return_line(cfg, 64, 1, 12.0, python=True) == (
        "proxima: stopped at global step 64 (iteration 1): the last 20+ training episodes averaged 12.0 >= stop_return=500 "
        "(`proxima report`'s charts/episodic_return_100 averages the last 100, older episodes too, so it can read lower)")


def _tiny_config(**kw):
    from proxima.config import PPOConfig

    return PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1, eval_episodes=0,
                     progress=False, threads=1, **kw)


def test_python_resume_notes_name_fields_not_flags(tmp_path, capsys):
    from proxima import train

    run_dir = tmp_path / "run"
    train(_tiny_config(total_timesteps=128), run_dir=run_dir, quiet=True, evaluate_at_end=False)
    capsys.readouterr()
    train(_tiny_config(total_timesteps=128), resume=run_dir, evaluate_at_end=False)
    notes = [ln for ln in capsys.readouterr().err.splitlines() if "note:" in ln]
    checkpoint = run_dir / "checkpoints" / "step_000000000128.pt"
    assert notes == [f"proxima: note: {checkpoint}: the run is complete (128 steps); a larger total_timesteps extends it"]
    train(_tiny_config(total_timesteps=192), resume=run_dir, quiet=True, evaluate_at_end=False)
    notes = [ln for ln in capsys.readouterr().err.splitlines() if "note:" in ln]
    assert len(notes) == 1 and notes[0].startswith("proxima: note: anneal_lr=True: the learning rate schedule is recomputed "
                                                   "over the resume's total (192 steps)"), notes


def test_python_resume_of_a_run_stopped_at_its_target_names_the_field(tmp_path, capsys):
    from proxima import train

    run_dir = tmp_path / "run"
    train(_tiny_config(total_timesteps=640, stop_return=1.0, stop_episodes=1), run_dir=run_dir, quiet=True,
          evaluate_at_end=False)
    capsys.readouterr()
    train(_tiny_config(total_timesteps=640, stop_return=1.0, stop_episodes=1), resume=run_dir, evaluate_at_end=False)
    notes = [ln for ln in capsys.readouterr().err.splitlines() if "note:" in ln]
    assert len(notes) == 1 and re.fullmatch(
        rf"proxima: note: {re.escape(str(run_dir))}/checkpoints/step_\d+\.pt: the run stopped at stop_return=1 \(its last 1\+ training episodes "
        r"averaged [\d.]+\); stop_return=None or a higher target trains on", notes[0]), notes


def test_metrics_csv_and_events_deleted_while_logging_are_restored_with_every_row(tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from proxima.logger import CSV_COLUMNS, RunLogger

    log = RunLogger(tmp_path, 300, progress=False, rolling=True)
    log.log(1, 100, {"charts/SPS": 5.0, "episodes": 1, "charts/episodic_return": 10.0})
    (tmp_path / "metrics.csv").unlink()
    events = next(tmp_path.glob("events.out.tfevents.*"))
    events.unlink()
    log.log(2, 200, {"charts/SPS": 5.0, "episodes": 1, "charts/episodic_return": 20.0})
    log.log(3, 300, {"charts/SPS": 5.0, "episodes": 1, "charts/episodic_return": 30.0})
    (tmp_path / "metrics.csv").unlink()  # after the last row (during the final evaluation): restored at close
    log.close()
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert rows[0] == ",".join(CSV_COLUMNS)
    assert [r.split(",")[:2] for r in rows[1:]] == [["1", "100"], ["2", "200"], ["3", "300"]]
    restored = ("was deleted while the run trained; restored with everything logged to it so far, and the run logs "
                "on there")
    assert capsys.readouterr().err.splitlines() == [f"proxima: note: {events} {restored}",
                                                    *[f"proxima: note: {tmp_path / 'metrics.csv'} {restored}"] * 2]
    acc = EventAccumulator(str(events))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("charts/SPS")] == [(100, 5.0), (200, 5.0), (300, 5.0)]


def test_a_training_run_whose_metrics_csv_is_deleted_keeps_every_row(tmp_path, capsys):
    from proxima import train

    run_dir = tmp_path / "run"

    def delete_at_2(row):
        if row["iteration"] == 2:
            (run_dir / "metrics.csv").unlink()

    train(_tiny_config(total_timesteps=256), run_dir=run_dir, quiet=True, evaluate_at_end=False, callback=delete_at_2)
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    assert [int(r.split(",")[0]) for r in rows[1:]] == [1, 2, 3, 4]
    assert sum("metrics.csv was deleted while the run trained" in ln for ln in capsys.readouterr().err.splitlines()) == 1
