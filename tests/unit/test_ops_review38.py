"""Review 38 (logs): the closing progress line's SPS is the run's average, `eval --deterministic` is
the explicit default, float32 values read back short in metrics.csv, and the report says how many
episodes its best/final training return averages and which step a final value is of."""

import csv
import io
import json
import math
import re

import numpy as np
import pytest
import torch

from proxima.logger import CSV_COLUMNS, RunLogger
from proxima.report import build_report
from tests.cli_helpers import error_line, run_main, tiny_cartpole_run


def _rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------------------ 1: progress line SPS
def _progress_lines(monkeypatch, tmp_path, total, rows, close_early=False):
    stream = io.StringIO()  # no terminal: whole lines (LineProgress)
    monkeypatch.setattr("sys.stderr", stream)
    monkeypatch.setattr("proxima.logger.LINE_SECONDS", 1e6)  # the first line and the closing one only
    logger = RunLogger(tmp_path, total_steps=total, progress=True)
    try:
        for i, (step, elapsed, sps) in enumerate(rows, 1):
            logger.log(i, step, {"time": elapsed, "episodes": 2, "charts/SPS": sps, "charts/episodic_return": 21.0})
    finally:
        logger.close()
    return stream.getvalue().splitlines()


def test_the_closing_progress_line_shows_the_runs_average_not_the_last_iterations(monkeypatch, tmp_path):
    # the reviewer's run: 8,192 steps in 2.911 s is 2,814 steps/s; its last iteration ran at 2,922
    first, last = _progress_lines(monkeypatch, tmp_path, 8192, [(4096, 1.5, 2900.0), (8192, 2.911, 2922.0)])
    assert first.endswith("| SPS 2,900 | return 21.0"), first  # a line during the run: the iteration's speed
    assert re.fullmatch(r"step 8,192/8,192 \(100%\) 0:00:0\d \| SPS 2,814 \(run average\) \| return 21\.0", last), last


def test_a_run_stopped_early_closes_with_its_average_too(monkeypatch, tmp_path):
    lines = _progress_lines(monkeypatch, tmp_path, 16384, [(4096, 1.5, 2900.0), (8192, 2.911, 2922.0)])
    assert len(lines) == 2 and lines[-1].startswith("step 8,192/16,384 (50%) ")
    assert lines[-1].endswith("| SPS 2,814 (run average) | return 21.0"), lines


# ------------------------------------------------------------------------------------ 2: eval --deterministic
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return tiny_cartpole_run(tmp_path_factory, "ops38")


def test_eval_takes_deterministic_as_the_explicit_default(run_dir, capsys):
    args = ["eval", str(run_dir), "--episodes", "2", "--json"]
    code, out, err = run_main(args, capsys)
    assert code == 0, err
    code, explicit, err = run_main([*args, "--deterministic"], capsys)
    assert code == 0, err
    default, explicit = json.loads(out), json.loads(explicit)
    assert explicit["deterministic"] is True and explicit["returns"] == default["returns"]


def test_eval_refuses_deterministic_with_stochastic(run_dir, capsys):
    code, _, err = run_main(["eval", str(run_dir), "--deterministic", "--stochastic"], capsys)
    assert error_line(code, err, "--stochastic", "not allowed with argument --deterministic")


def test_eval_help_shows_the_pair(capsys):
    code, out, _ = run_main(["eval", "--help"], capsys)
    assert code == 0
    assert "[--deterministic | --stochastic]" in out and "(the default)" in out


# ------------------------------------------------------------------------------------ 3: float32 cells
LR = float(torch.tensor(2.5e-4))  # 0.0002500000118743628: the optimizer's float32 rate as a float


def test_float32_values_are_written_short_and_read_back_as_the_same_float32(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = RunLogger(tmp_path, total_steps=64, progress=False)
    loss = float(torch.tensor(36.64945983886719))
    logger.log(1, 64, {"time": 0.128, "episodes": 3, "charts/episodic_return": 20.304347826086957,
                       "charts/learning_rate": LR, "losses/value_loss": loss})
    logger.close()
    (row,) = _rows(tmp_path)
    assert row["charts/learning_rate"] == "0.00025" and float(row["charts/learning_rate"]) == 2.5e-4
    assert row["losses/value_loss"] == "36.64946" and np.float32(row["losses/value_loss"]) == np.float32(loss)
    assert row["charts/episodic_return"] == "20.304347826086957"  # a float64 mean keeps its digits
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert [e.value for e in acc.Scalars("charts/learning_rate")] == [np.float32(LR)]  # TensorBoard's as before


def test_eval_returns_keep_every_digit_for_the_resume_to_match_best_pt(tmp_path):
    best = float(np.float32(0.1))  # a float32 value, as best.pt records it in full
    logger = RunLogger(tmp_path, total_steps=64, progress=False)
    logger.log(1, 64, {"time": 0.1, "episodes": 0, "eval/mean_return": best, "eval/std_return": 0.0})
    logger.close()
    assert float(_rows(tmp_path)[0]["eval/mean_return"]) == best


def test_a_resume_keeps_rows_written_the_long_way(tmp_path, capsys):
    with open(tmp_path / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for i in (1, 2, 3):
            w.writerow({"iteration": i, "global_step": 64 * i, "time": 0.1 * i, "episodes": 1,
                        "charts/learning_rate": LR})
    logger = RunLogger(tmp_path, total_steps=192, resume_step=128, progress=False)
    logger.log(3, 192, {"time": 0.3, "episodes": 1, "charts/learning_rate": LR})
    logger.close()
    rows = _rows(tmp_path)
    assert [r["global_step"] for r in rows] == ["64", "128", "192"]
    assert [r["charts/learning_rate"] for r in rows] == [repr(LR), repr(LR), "0.00025"]
    assert len({np.float32(r["charts/learning_rate"]) for r in rows}) == 1


# ------------------------------------------------------------------------------------ 5: report's best/final
def _run(tmp_path, returns, episodes):
    d = tmp_path / "R"
    d.mkdir()
    (d / "config.yaml").write_text("env_id: Fake-v0\nseed: 1\nnum_envs: 4\nnum_steps: 128\ntotal_timesteps: 2048\n")
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for i, (r, e) in enumerate(zip(returns, episodes)):
            w.writerow({"iteration": i + 1, "global_step": 512 * (i + 1), "time": 0.1 * (i + 1), "episodes": e,
                        "charts/episodic_return": r})
    return d


def _cell(text, name):
    line = next(line for line in text.splitlines() if line.startswith(f"| {name} |"))
    return line.split(" | ")[1].rstrip(" |")


def test_the_report_says_how_many_episodes_best_and_final_average(tmp_path):
    d = _run(tmp_path, [20.0, 213.0, 150.0, 181.0], [12, 3, 7, 1])
    text = build_report([d], out=tmp_path / "r.md", episodes=0).read_text()
    assert _cell(text, "best charts/episodic_return") == "213.00 at step 1,024 (3 episodes)"
    assert _cell(text, "final charts/episodic_return") == "181.00 (1 episode)"  # the last row's: no step needed


def test_a_final_value_from_an_earlier_row_names_its_step(tmp_path):
    d = _run(tmp_path, [-1200.0, -1050.89, "", ""], [0, 4, 0, 0])
    text = build_report([d], out=tmp_path / "r.md", episodes=0).read_text()
    assert _cell(text, "final charts/episodic_return") == "-1050.89 at step 1,024 (4 episodes)"


def _run_of(tmp_path, columns):
    """A run directory whose metrics.csv has one row per value of ``columns``' equal-length lists."""
    d = tmp_path / "R"
    d.mkdir()
    (d / "config.yaml").write_text("env_id: Fake-v0\nseed: 1\nnum_envs: 4\nnum_steps: 128\ntotal_timesteps: 2048\n")
    n = len(next(iter(columns.values())))
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for i in range(n):
            w.writerow({"iteration": i + 1, "global_step": 512 * (i + 1), "time": 0.1 * (i + 1),
                        **{k: v[i] for k, v in columns.items()}})
    return d


def test_a_loss_in_the_report_names_no_episodes(tmp_path):
    # a loss is over the iteration's minibatches, not its episodes: "(4 episodes)" beside it would mislead
    d = _run_of(tmp_path, {"episodes": [4, 4, 4], "charts/episodic_return": [1.0, 2.0, 3.0],
                           "losses/value_loss": [0.5, 2.0, 1.0]})
    text = build_report([d], out=tmp_path / "r.md", episodes=0, metric="losses/value_loss").read_text()
    assert _cell(text, "max losses/value_loss") == "2.00 at step 1,024"
    assert _cell(text, "min losses/value_loss") == "0.50 at step 512"
    assert _cell(text, "final losses/value_loss") == "1.00"


def test_a_best_row_with_a_blank_episodes_cell_names_no_count(tmp_path):
    d = _run_of(tmp_path, {"episodes": [3, "", 2], "charts/episodic_return": [20.0, 213.0, 150.0]})
    text = build_report([d], out=tmp_path / "r.md", episodes=0).read_text()
    assert _cell(text, "best charts/episodic_return") == "213.00 at step 1,024"
    assert _cell(text, "final charts/episodic_return") == "150.00 (2 episodes)"


def test_the_min_and_max_rows_each_name_their_own_episodes(tmp_path):
    d = _run_of(tmp_path, {"episodes": [1, 7, 3], "charts/episodic_length": [10.0, 50.0, 30.0]})
    text = build_report([d], out=tmp_path / "r.md", episodes=0, metric="charts/episodic_length").read_text()
    assert _cell(text, "min charts/episodic_length") == "10.00 at step 512 (1 episode)"
    assert _cell(text, "max charts/episodic_length") == "50.00 at step 1,024 (7 episodes)"


# ------------------------------------------------------------------------------------ 3b: csv_cell
def test_a_nan_cell_is_blank():
    from proxima.logger import csv_cell

    assert csv_cell("charts/episodic_return", math.nan) == "" and csv_cell("losses/value_loss", math.nan) == ""


def test_a_float64_that_happens_to_be_a_float32_value_keeps_every_digit(tmp_path):
    # 123456792.0 is exactly a float32; written as one (1.2345679e+08) it would read back as 123456790.0
    logger = RunLogger(tmp_path, total_steps=64, progress=False)
    logger.log(1, 64, {"time": 2097152.25, "episodes": 1, "charts/episodic_return": 123456792.0,
                       "charts/learning_rate": LR})
    logger.close()
    (row,) = _rows(tmp_path)
    assert float(row["charts/episodic_return"]) == 123456792.0
    assert float(row["time"]) == 2097152.25  # as float32 text (2.0971522e+06) a quarter second off
    assert row["charts/learning_rate"] == "0.00025"  # the float32 rate stays short
