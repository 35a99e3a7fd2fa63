"""A damaged line of metrics.csv costs that line alone: each physical line is read on its own
(logger.read_csv_lines), by plot/report (skipped with a note naming the line) and by a resume
(dropped and counted in its note, the rows after it kept). A last row a kill cut short is dropped
without a note, as before."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from proxima import cli
from proxima.logger import CSV_COLUMNS, truncate_csv
from proxima.plot import read_metrics

from cli_helpers import run_main

SMALL = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1",
         "--eval-episodes", "0", "--threads", "1", "--no-progress", "--quiet"]
ITERATIONS, PER_ITERATION = 10, 64  # the trained run: 10 rows, global steps 64 ... 640


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished 10-iteration CartPole run (checkpoint at step 640), copied by each test."""
    run = tmp_path_factory.mktemp("csvdamage") / "run"
    assert cli.main(["train", "CartPole-v1", "--run-dir", str(run), "--total-timesteps", str(ITERATIONS * PER_ITERATION),
                     *SMALL]) == 0
    return run


@pytest.fixture
def run(trained, tmp_path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "run"))


def _edit_line(path: Path, number: int, edit) -> None:
    """Apply ``edit`` to line ``number`` (1-based, the header is line 1) of a file, as a hand edit would."""
    lines = path.read_bytes().split(b"\n")
    lines[number - 1] = edit(lines[number - 1])
    path.write_bytes(b"\n".join(lines))


def _stray_quote(line: bytes) -> bytes:
    """A quote at the start of the second field (``8,"1024,...``): it opens a quoted field that, read
    by one csv.reader over the whole file, swallows every later line."""
    first, rest = line.split(b",", 1)
    return first + b',"' + rest


def _steps(path: Path) -> list:
    with open(path, newline="") as f:
        return [int(r["global_step"]) for r in csv.DictReader(f)]


def _rows(n: int, damage=None) -> list:
    """The lines of a metrics.csv of ``n`` whole rows (global step 128 per iteration), CSV_COLUMNS header."""
    out = [",".join(CSV_COLUMNS)]
    for i in range(1, n + 1):
        cells = [str(i), str(i * 128), f"{0.01 * i:.2f}", "1", f"{i:.1f}", "20.0", "5000.0", "0.00025",
                 "-0.01", "0.5", "0.69", "0.001", "0.02", "0.1", "2"]
        cells += [""] * (len(CSV_COLUMNS) - len(cells))  # the later columns (success rate, eval/*) blank
        out.append(",".join(cells))
    return out


def _write(path: Path, lines: list, end: str = "\r\n") -> Path:
    path.write_text(end.join(lines) + end, newline="")
    return path


# ------------------------------------------------------------------------------------ plot and report
def test_stray_quote_mid_file_plot_and_report_read_every_other_row(run, tmp_path, capsys):
    metrics = run / "metrics.csv"
    _edit_line(metrics, 9, _stray_quote)  # iteration 8, step 512
    expected = [s for s in range(PER_ITERATION, (ITERATIONS + 1) * PER_ITERATION, PER_ITERATION) if s != 512]

    image = tmp_path / "c.png"
    code, _, err = run_main(["plot", str(run), "--out", str(image)], capsys)
    assert code == 0 and image.is_file()
    assert err.splitlines() == [f"proxima: note: {metrics}: line 9 (2 cell(s), the header has {len(CSV_COLUMNS)}) "
                                "is not a metrics row Proxima wrote; skipped"]
    assert read_metrics(run)["global_step"].tolist() == expected  # 9 rows: only line 9 is lost
    assert read_metrics(run)["iteration"].tolist() == [1, 2, 3, 4, 5, 6, 7, 9, 10]
    assert capsys.readouterr().err == ""  # noted once per file (a report reads a run several times)

    _edit_line(metrics, 9, lambda line: line)  # same content, a new modification time: noted again
    report = tmp_path / "r.md"
    code, _, err = run_main(["report", str(run), "--episodes", "0", "--out", str(report)], capsys)
    assert code == 0 and err.count("line 9") == 1, err
    text = report.read_text()
    assert "| steps | 640 |" in text and "| iterations | 10 |" in text  # the whole run, not one cut at the quote


def test_a_short_middle_row_is_skipped_by_plot_and_counted_by_resume(tmp_path, capsys):
    lines = _rows(6)
    lines[3] = lines[3].rsplit(",", 3)[0]  # line 4 (step 384): 3 cells short of the header's
    path = _write(tmp_path / "metrics.csv", lines)
    (tmp_path / "config.yaml").write_text("env_id: CartPole-v1\n")

    assert read_metrics(tmp_path)["global_step"].tolist() == [128, 256, 512, 640, 768]
    err = capsys.readouterr().err
    assert err == f"proxima: note: {path}: line 4 ({len(CSV_COLUMNS) - 3} cell(s), the header has {len(CSV_COLUMNS)}) is not a metrics row Proxima wrote; skipped\n"

    truncate_csv(path, 640)
    assert _steps(path) == [128, 256, 512, 640]
    err = capsys.readouterr().err
    assert f"proxima: note: {path}: dropped 1 line(s) that are not rows Proxima wrote" in err and "line 4)" in err


def test_a_2000_row_file_with_a_stray_quote_loses_one_row(tmp_path, capsys):
    lines = _rows(2000)
    lines[5] = _stray_quote(lines[5].encode()).decode()  # line 6: the rest of the file is > the csv field limit
    path = _write(tmp_path / "metrics.csv", lines)

    steps = read_metrics(tmp_path)["global_step"]
    assert len(steps) == 1999 and 640 not in steps and steps[-1] == 2000 * 128
    assert "line 6 (2 cell(s)" in capsys.readouterr().err

    truncate_csv(path, 1500 * 128)
    steps = _steps(path)
    assert len(steps) == 1499 and 640 not in steps and steps[-1] == 1500 * 128
    err = capsys.readouterr().err
    assert "dropped 1 line(s)" in err and "line 6)" in err


def test_a_last_row_cut_short_by_a_kill_is_dropped_without_a_note(tmp_path, capsys):
    lines = _rows(6)
    lines[6] = lines[6][:9]  # the last row, cut short by a kill: "6,768,0."
    path = tmp_path / "metrics.csv"
    path.write_text("\r\n".join(lines), newline="")  # no newline after it
    (tmp_path / "config.yaml").write_text("env_id: CartPole-v1\n")
    lines[3] = lines[3].rsplit(",", 1)[0]  # and a middle row short of a cell (line 4): counted, unlike the last
    damaged = "\r\n".join(lines)

    assert read_metrics(tmp_path)["global_step"].tolist() == [128, 256, 384, 512, 640]
    assert capsys.readouterr().err == ""  # what a kill leaves is expected
    truncate_csv(path, 10_000)
    assert _steps(path) == [128, 256, 384, 512, 640] and capsys.readouterr().err == ""

    path.write_text(damaged, newline="")
    assert read_metrics(tmp_path)["global_step"].tolist() == [128, 256, 512, 640]
    assert f"line 4 ({len(CSV_COLUMNS) - 1} cell(s)" in capsys.readouterr().err  # the middle row noted, the last one not
    truncate_csv(path, 10_000)
    assert _steps(path) == [128, 256, 512, 640]
    err = capsys.readouterr().err
    assert "dropped 1 line(s)" in err and "line 4)" in err


# ------------------------------------------------------------------------------------ resume
def test_resume_past_a_stray_quote_keeps_every_later_row_and_notes_the_drop(run, capsys):
    metrics = run / "metrics.csv"
    _edit_line(metrics, 4, _stray_quote)  # iteration 3, step 192
    with open(metrics, "ab") as f:
        f.write(b"11,70")  # and a row past the checkpoint that a kill cut short: dropped, not counted
    code, _, err = run_main(["resume", str(run), "--total-timesteps", str(12 * PER_ITERATION), "--quiet"], capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if "metrics.csv" in line]
    assert len(notes) == 1 and f"{metrics}: dropped 1 line(s)" in notes[0] and "line 4)" in notes[0], err
    assert _steps(metrics) == [s for s in range(PER_ITERATION, 13 * PER_ITERATION, PER_ITERATION) if s != 192]


def test_rlhf_metrics_skip_a_stray_quote_and_a_short_row_and_keep_the_rest(tmp_path, capsys):
    """proxima.rlhf.rundir.read_metrics (the RLHF curve) read the file with one csv reader: a quote swallowed
    every later row."""
    from proxima.rlhf.rundir import read_metrics

    rows = ["step,objective/scores,objective/kl"] + [f"{i},{i / 10},{i / 100}" for i in range(1, 8)]
    rows[3] = '3,"0.3,0.03'  # a hand-edited quote on line 4
    rows[6] = "6,0.6"  # a middle row cut short (line 7)
    (tmp_path / "metrics.csv").write_text("\n".join(rows) + "\n8,0")  # and a last row cut short by a kill
    m = read_metrics(tmp_path)
    assert m["step"] == [1.0, 2.0, 4.0, 5.0, 7.0] and m["objective/kl"] == [0.01, 0.02, 0.04, 0.05, 0.07]
    assert read_metrics(tmp_path)["step"] == m["step"]  # read again (the curve, then the summary): one note
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "metrics.csv: lines 4, 7 are not metrics rows Proxima wrote; skipped" in err[0], err


@pytest.mark.parametrize("end", ["\r", "\n", "\r\n"])
def test_every_line_ending_reads_every_row(tmp_path, capsys, end):
    """Lines ending in a lone CR (a CSV saved by a Mac spreadsheet) were one damaged line once lines were
    read one by one: plot refused the file and a resume kept its header alone."""
    from proxima.rlhf.rundir import read_metrics as rlhf_metrics

    path = _write(tmp_path / "metrics.csv", _rows(6), end=end)
    assert read_metrics(tmp_path)["global_step"].tolist() == [128, 256, 384, 512, 640, 768]
    (tmp_path / "rlhf").mkdir()
    _write(tmp_path / "rlhf" / "metrics.csv", ["step,objective/kl", "1,0.5", "2,0.25"], end=end)
    assert rlhf_metrics(tmp_path / "rlhf")["step"] == [1.0, 2.0]
    truncate_csv(path, 640)
    assert _steps(path) == [128, 256, 384, 512, 640]
    assert capsys.readouterr().err == ""
