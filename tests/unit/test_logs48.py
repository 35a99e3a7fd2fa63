"""Review 48 (a run's logs read by a CleanRL/SB3 user): the progress line names the episodes its rolling return
is over (105, not "100 ep"), shows a sparse return's digits (0.0288, not 0.0), the terminal's bar shows exact
steps and one speed, the hyperparameters table spells values as config.yaml does, the quickstart notebook says
how many episodes its training return covers, and docs/cli.md no longer calls charts/success_rate SB3's."""

import csv
import fcntl
import io
import json
import os
import pty
import re
import struct
import termios
from pathlib import Path

import pytest

from proxima import logger as run_logging
from proxima.config import PPOConfig, dump_yaml
from proxima.logger import CSV_COLUMNS, ROLLING_RETURN, RunLogger, hyperparameters_table
from proxima.report import build_report

ROOT = Path(__file__).resolve().parents[2]
TAG = "hyperparameters/text_summary"


def _lines(tmp_path, monkeypatch, rows) -> list:
    """The plain progress lines (no terminal, a line per update) of a rolling logger fed ``rows`` of
    (episodes, mean return)."""
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    monkeypatch.setattr("proxima.logger.LINE_SECONDS", 0.0)
    logger = RunLogger(tmp_path, 100 * len(rows), progress=True, rolling=True)
    try:
        for i, (n, ret) in enumerate(rows):
            logger.log(i + 1, 100 * (i + 1), {"episodes": n, "charts/episodic_return": ret, "charts/SPS": 100.0})
    finally:
        logger.close()
    return stream.getvalue().splitlines()


def _rows(run_dir) -> list:
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------ (a) the episodes the return is over
def test_a_full_window_of_105_episodes_is_labelled_105_as_the_report_says(tmp_path, monkeypatch):
    # 50 + 50 + 5: dropping the oldest 50 would leave 55 < 100, so the window holds all 105
    lines = _lines(tmp_path, monkeypatch, [(50, 30.0), (50, 40.0), (5, 60.0)])
    assert lines[-1].endswith("| return (105 ep) 36.2"), lines  # (1500 + 2000 + 300) / 105 = 36.19
    assert float(_rows(tmp_path)[-1][ROLLING_RETURN]) == pytest.approx(3800 / 105)
    (tmp_path / "config.yaml").write_text("env_id: Fake-v0\nseed: 1\nnum_envs: 4\nnum_steps: 25\ntotal_timesteps: 300\n")
    text = build_report([tmp_path], out=tmp_path / "r.md", episodes=0).read_text()
    final = next(line for line in text.splitlines() if line.startswith(f"| final {ROLLING_RETURN} |"))
    assert "36.19 (last 105 episodes)" in final, final


def test_one_iteration_of_150_episodes_is_labelled_150_not_100(tmp_path, monkeypatch):
    lines = _lines(tmp_path, monkeypatch, [(2, -1188.8), (150, 10.0)])
    assert lines[0].endswith("| return (2 ep) -1188.8"), lines
    assert lines[1].endswith("| return (150 ep) 10.0"), lines


# ------------------------------------------------------------------------ (b) a sparse return's digits
def test_a_return_below_one_shows_three_significant_digits_not_zero(tmp_path, monkeypatch):
    lines = _lines(tmp_path, monkeypatch, [(125, 0.0288)])
    assert lines[-1].endswith("| return (125 ep) 0.0288"), lines
    assert float(_rows(tmp_path)[-1][ROLLING_RETURN]) == 0.0288


@pytest.mark.parametrize("value, shown", [(38.5714, "38.6"), (-978.8, "-978.8"), (500.0, "500.0"), (21.0, "21.0"),
                                          (1.0, "1.0"), (1.25, "1.25"), (0.028834, "0.0288"), (-0.5, "-0.5"),
                                          (0.0, "0.0"), (1e-7, "0.0000001")])
def test_returns_keep_one_decimal_and_three_significant_digits_without_an_exponent(value, shown):
    assert run_logging.return_text(value) == shown


# ------------------------------------------------------------------------ (c) the terminal's bar
class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_terminal_bar_shows_exact_steps_and_one_speed(tmp_path, monkeypatch):
    stream = Terminal()
    monkeypatch.setattr("sys.stderr", stream)
    logger = RunLogger(tmp_path, 4096, progress=True, rolling=True)
    logger.bar.mininterval, logger.bar.miniters, logger.bar.dynamic_miniters = 0, 0, False  # a frame per update
    try:
        for i in range(1, 5):
            logger.log(i, 1024 * i, {"episodes": 30, "charts/episodic_return": 20.0, "charts/SPS": 1769.0, "time": 0.5 * i})
    finally:
        logger.close()
    last = [frame for frame in stream.getvalue().split("\r") if "SPS" in frame][-1].rstrip()
    assert re.search(r"\| 4,096/4,096 \[\d\d:\d\d<\d\d:\d\d, SPS 2,048 \(run average\) \| return \(120 ep\) 20\.0\]$", last), last
    assert "k/" not in last and "step/s" not in last and last.count("SPS") == 1, last


def test_a_pty_with_columns_but_no_lines_gets_progress_lines_not_an_empty_bar(tmp_path, monkeypatch):
    leader, follower = pty.openpty()  # `script` after `stty cols 120`: 120 columns, 0 lines (tqdm drew nothing)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 0, 120, 0, 0))
    stream = os.fdopen(follower, "w", buffering=1)
    try:
        assert tuple(os.get_terminal_size(follower)) == (120, 0)
        monkeypatch.setattr("sys.stderr", stream)
        logger = RunLogger(tmp_path, 200, progress=True, rolling=True)
        try:
            logger.log(1, 200, {"episodes": 3, "charts/episodic_return": 20.0, "charts/SPS": 100.0, "time": 1.0})
        finally:
            logger.close()
        stream.flush()
        out = os.read(leader, 65536).decode().replace("\r\n", "\n")
    finally:
        stream.close()
        os.close(leader)
    assert isinstance(logger.bar, run_logging.LineProgress)
    assert re.fullmatch(r"step 200/200 \(100%\) 0:00:0\d \| SPS 200 \(run average\) \| return \(3 ep\) 20\.0\n", out), out


# ------------------------------------------------------------------------ (e) the hyperparameters table
def _tables(run_dir) -> list:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    if TAG not in acc.Tags()["tensors"]:
        return []
    return [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(TAG)]


def test_the_hyperparameters_table_spells_values_as_config_yaml_does():
    config = PPOConfig(env_id="CartPole-v1", lr=1e-5, target_kl=None, hidden_sizes=[64, 64]).to_dict()
    cells = dict(line.strip("|").split("|", 1) for line in hyperparameters_table(config).splitlines()[2:])
    assert (cells["anneal_lr"], cells["target_kl"], cells["hidden_sizes"], cells["env_kwargs"]) == ("true", "null", "[64, 64]", "{}")
    assert cells["lr"] == "1.0e-05"
    for name, value in config.items():  # every scalar field: config.yaml's own text for it
        if not isinstance(value, (list, dict)):
            assert f"{name}: {cells[name]}\n" == dump_yaml({name: value}), name


def test_a_resume_of_a_run_whose_table_has_python_reprs_writes_no_second_table(tmp_path, monkeypatch):
    config = PPOConfig(env_id="CartPole-v1").to_dict()
    old = run_logging._table(config, repr)  # what a Proxima before this change wrote: True, None, [64, 64]
    monkeypatch.setattr(run_logging, "hyperparameters_table", lambda c: old)
    logger = RunLogger(tmp_path, 128, progress=False, config=config)
    logger.log(1, 64, {"charts/SPS": 1.0})
    logger.close()
    monkeypatch.undo()
    logger = RunLogger(tmp_path, 128, resume_step=64, progress=False, config=config)
    logger.log(2, 128, {"charts/SPS": 1.0})
    logger.close()
    assert _tables(tmp_path) == [(0, old)]
    logger = RunLogger(tmp_path, 192, resume_step=128, progress=False, config={**config, "total_timesteps": 192})
    logger.log(3, 192, {"charts/SPS": 1.0})
    logger.close()  # a changed field: the new table, in YAML's spelling
    assert [step for step, _ in _tables(tmp_path)] == [0, 128] and "|anneal_lr|true|" in _tables(tmp_path)[1][1]


# ------------------------------------------------------------------------ (f) the quickstart notebook
def test_the_notebook_says_how_many_episodes_its_training_return_covers(tmp_path, capsys):
    with open(tmp_path / "metrics.csv", "w", newline="") as f:  # 45 episodes ended: no "100+" window
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        w.writerow({"iteration": 1, "global_step": 512, "time": 1.0, "episodes": 30, "charts/episodic_return": 20.0,
                    ROLLING_RETURN: 20.0})
        w.writerow({"iteration": 2, "global_step": 1024, "time": 2.0, "episodes": 15, "charts/episodic_return": 26.0,
                    ROLLING_RETURN: 22.0})
    cells = json.loads((ROOT / "notebooks" / "quickstart.ipynb").read_text())["cells"]
    assert all(not c.get("outputs") for c in cells if c["cell_type"] == "code")  # the repo keeps no outputs
    metrics_cell = next("".join(c["source"]) for c in cells if c["cell_type"] == "code" and "metrics.csv" in "".join(c["source"]))
    exec(metrics_cell, {"run_dir": tmp_path})
    printed = capsys.readouterr().out.splitlines()[-1]
    assert printed == "2 iterations, 1,024 steps in 2.0 s; training return (mean of the last 45 episodes): 22.0"


# ------------------------------------------------------------------------ (d) charts/success_rate's doc
def test_the_docs_say_charts_success_rate_is_one_iterations_not_sb3s_last_100():
    text = " ".join((ROOT / "docs" / "cli.md").read_text().split())
    assert "`charts/success_rate` (SB3's `rollout/success_rate`)" not in text
    assert ("It is one iteration's, not SB3's `rollout/success_rate` (the mean over the last 100 episodes" in text)
