"""Review 33, mutations of logger.py that no test caught: which metrics reach TensorBoard, the header
an empty metrics.csv gets, the progress line's last known return, the last progress line, the wait
that keeps a resumed run's event file after the one it continues, the header width cap, and an event
file a resume empties. (evaluate.py's survivors of the same review were already caught by
test_review27_metrics, test_report_video and test_user_envs, outside the reviewer's set.)"""

from __future__ import annotations

import io
import sys
import time

import pytest

from proxima import logger as run_logging
from proxima.logger import (CSV_COLUMNS, MAX_CSV_COLUMNS, EventFile, LineProgress, RunLogger, _event_records,
                            drop_events_after, read_csv_lines, wait_for_new_second)
from proxima.rundir import RunFileError


def _scalar_tags(run_dir) -> set:
    return {v.tag for p in run_dir.glob("events.out.tfevents.*") for _, e in _event_records(p) for v in e.summary.value}


def test_csv_only_columns_never_reach_tensorboard(tmp_path):
    """time and episodes are CSV columns; a chart of them in TensorBoard is noise next to charts/."""
    log = RunLogger(tmp_path, 100, progress=False)
    log.log(1, 8, {"time": 1.5, "episodes": 3, "charts/SPS": 5.0})
    log.close()
    assert _scalar_tags(tmp_path) == {"charts/SPS"}
    header, row = (tmp_path / "metrics.csv").read_text().splitlines()
    assert dict(zip(header.split(","), row.split(",")))["time"] == "1.5"  # the CSV still has it


def test_an_empty_metrics_csv_gets_its_header(tmp_path):
    """A kill before the header reached the disk leaves an empty file: rows without a header would
    make the first row the header for plot, report and a resume."""
    (tmp_path / "metrics.csv").write_text("")
    log = RunLogger(tmp_path, 100, progress=False)
    log.log(1, 8, {"charts/SPS": 5.0})
    log.close()
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert lines[0] == ",".join(CSV_COLUMNS) and lines[1].startswith("1,8,") and len(lines) == 2


def test_the_progress_line_keeps_the_last_known_return_through_an_iteration_without_episodes(tmp_path, monkeypatch):
    stream = io.StringIO()  # not a terminal: LineProgress, one line per update with an interval of 0
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setattr(run_logging, "LINE_SECONDS", 0.0)
    log = RunLogger(tmp_path, 100, progress=True)
    assert isinstance(log.bar, LineProgress)
    log.log(1, 8, {"charts/SPS": 5.0, "charts/episodic_return": 5.0})
    log.log(2, 16, {"charts/SPS": 5.0, "charts/episodic_return": float("nan")})  # no episode ended
    log.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and lines[-1].startswith("step 16/100 ") and lines[-1].endswith("| return 5.0"), lines


def test_the_last_step_prints_its_line_without_waiting_for_close():
    """A run whose close is never reached (a kill after the last update) still showed 100%."""
    stream = io.StringIO()
    bar = LineProgress(10, 0, stream, interval=1e9)
    bar.update(2)
    assert stream.getvalue().startswith("step 2/10 (20%) ")  # the first update's line
    bar.update(2)
    assert len(stream.getvalue().splitlines()) == 1  # within the interval: no line
    bar.update(6)
    assert stream.getvalue().splitlines()[1].startswith("step 10/10 (100%) ")
    bar.close()
    assert len(stream.getvalue().splitlines()) == 2  # nothing more to show at close


def test_a_resume_in_the_second_of_the_last_event_file_waits_for_the_next_second(tmp_path, monkeypatch):
    """Event files sort by name, which starts with the creation second: a file of the same second
    could sort before the one it continues (by pid), and TensorBoard's Python loader drops points."""
    clock = [1_700_000_000.3]
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        clock[0] += seconds

    (tmp_path / "events.out.tfevents.1700000000.host.1.0").write_bytes(b"")
    with monkeypatch.context() as m:  # a fake clock only while the function runs
        m.setattr(time, "time", lambda: clock[0])
        m.setattr(time, "sleep", sleep)
        wait_for_new_second(tmp_path)
        assert int(clock[0]) == 1_700_000_001 and len(slept) == 1 and slept[0] < 1.0
        clock[0] = 1_700_000_005.5  # a later second than the newest file's: no wait
        wait_for_new_second(tmp_path)
    assert len(slept) == 1


@pytest.mark.parametrize("columns, refused", [(MAX_CSV_COLUMNS, False), (MAX_CSV_COLUMNS + 1, True)])
def test_the_header_width_cap_is_exact(tmp_path, columns, refused):
    path = tmp_path / "metrics.csv"
    path.write_text(",".join(f"c{i}" for i in range(columns)) + "\n" + ",".join(["1"] * columns) + "\n")
    if refused:
        with pytest.raises(RunFileError, match=rf"names {columns} columns \(c0, c1, c2 and {columns - 3} more\)"):
            read_csv_lines(path)
    else:
        lines, bad = read_csv_lines(path)
        assert [len(cells) for _, cells in lines] == [columns, columns] and bad == []


def test_an_event_file_with_only_events_after_the_step_is_removed_not_left_as_a_header(tmp_path):
    """A header-only file is one more empty event file in the run per such resume."""
    early = EventFile(tmp_path)
    early.scalars(4, {"charts/SPS": 1.0})
    early.close()
    late = EventFile(tmp_path)  # the same second and pid: its own name by the counter at its end
    late.scalars(12, {"charts/SPS": 2.0})
    late.close()
    assert late.path != early.path
    assert drop_events_after(tmp_path, 8) == 1
    assert sorted(tmp_path.glob("events.out.tfevents.*")) == [early.path]
    assert [e.step for _, e in _event_records(early.path) if e.summary.value] == [4]
