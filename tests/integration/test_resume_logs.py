"""A resume's logs, as TensorBoard's default (fast) loader and metrics.csv show them: the events
after the resumed step are gone from the run's event files themselves (not hidden by a purge marker
only the Python loader honours), and a resume from an older checkpoint keeps what it drops in
checkpoints/abandoned-TIME/ (metrics.csv's rows verbatim, the event files whole)."""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from proxima import checkpoint as ckpt
from proxima import cli
from proxima.diskspace import StorageError
from proxima.logger import RunLogger, set_aside_logs

SMALL = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1",
         "--no-progress"]


def event_points(folder: Path) -> list:
    """(tag, step, value, wall_time) of every scalar in every event file directly in ``folder``, read
    with a plain EventFileLoader file by file (what the fast loader sees: nothing purged)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    points = []
    for path in sorted(folder.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for v in event.summary.value:
                if v.metadata.plugin_data.plugin_name == "scalars":
                    points.append((v.tag, event.step, float(tensor_util.make_ndarray(v.tensor)), event.wall_time))
    return points


def csv_lines(path: Path) -> list:
    with open(path, newline="") as f:
        return f.read().splitlines()


def csv_rows(path: Path) -> list:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def assert_events_match_csv(run: Path) -> None:
    """Every scalar in the run's event files is metrics.csv's value at its step, once."""
    rows = {int(r["global_step"]): r for r in csv_rows(run / "metrics.csv")}
    points = event_points(run)
    assert len({(tag, step) for tag, step, _, _ in points}) == len(points)  # no step twice for a tag
    for tag, step, value, _ in points:
        assert rows[step][tag] != "", (tag, step)
        assert value == float(np.float32(float(rows[step][tag]))), (tag, step)


def test_a_resume_from_an_older_checkpoint_keeps_the_dropped_rows_and_events_in_its_abandoned_folder(tmp_path, capsys):
    run = tmp_path / "R"
    assert cli.main(["train", "CartPole-v1", "--run-dir", str(run), "--total-timesteps", "384", "--checkpoint-every", "1",
                     "--keep-checkpoints", "10", "--eval-every", "128", "--eval-episodes", "1", *SMALL]) == 0
    lines = csv_lines(run / "metrics.csv")
    before = {p.name: p.read_bytes() for p in run.glob("events.out.tfevents.*")}
    assert {step for tag, step, _, _ in event_points(run) if tag == "eval/mean_return"} == {128, 256, 384}
    capsys.readouterr()
    started = time.time()
    assert cli.main(["resume", str(ckpt.checkpoint_path(run, 128)), "--eval-every", "0", "--quiet"]) == 0
    err = capsys.readouterr().err

    [dest] = (run / "checkpoints").glob("abandoned-*")
    # metrics.csv: the dropped rows, verbatim under the header, in the abandoned folder; the note names it
    assert csv_lines(dest / "metrics.csv") == [lines[0]] + lines[3:]
    assert [int(r["global_step"]) for r in csv_rows(dest / "metrics.csv")] == [192, 256, 320, 384]
    assert f"metrics.csv's 4 row(s) after step 128 ({dest / 'metrics.csv'})" in err
    assert "the 1 TensorBoard event file(s) holding events after it, whole" in err
    assert [int(r["global_step"]) for r in csv_rows(run / "metrics.csv")] == [64, 128, 192, 256, 320, 384]
    assert csv_lines(run / "metrics.csv")[:3] == lines[:3]  # the rows up to the checkpoint, as they were
    # the event files, whole, in the abandoned folder
    assert {p.name: p.read_bytes() for p in dest.glob("events.out.tfevents.*")} == before

    # the run's event files, every file read plainly: nothing logged after step 128 before the resume
    points = event_points(run)
    assert [(tag, step) for tag, step, _, wall in points if step > 128 and wall < started] == []
    assert {step for tag, step, _, _ in points if tag.startswith("eval/")} == {128}  # --eval-every 0 since
    assert {step for tag, step, _, _ in points if tag == "losses/value_loss"} == {64, 128, 192, 256, 320, 384}
    assert_events_match_csv(run)  # steps <= 128: the values logged then; later: the resumed run's
    old = {(tag, step): value for tag, step, value, _ in event_points(dest)}
    kept = [(tag, step, value) for tag, step, value, _ in points if step <= 128]
    assert kept and all(old[tag, step] == value for tag, step, value in kept)


def test_a_resume_after_a_kill_drops_the_events_logged_after_the_checkpoint_from_the_files(tmp_path, capsys):
    run = tmp_path / "R"
    assert cli.main(["train", "CartPole-v1", "--run-dir", str(run), "--total-timesteps", "256", "--checkpoint-every", "2",
                     "--eval-every", "64", "--eval-episodes", "1", *SMALL]) == 0
    ckpt.checkpoint_path(run, 256).unlink()  # as a kill after logging iterations 3 and 4, before their checkpoint
    for p in run.glob("checkpoints/best.pt"):
        p.unlink()
    lines = csv_lines(run / "metrics.csv")
    capsys.readouterr()
    started = time.time()
    assert cli.main(["resume", str(run), "--eval-every", "0", "--quiet"]) == 0
    assert list((run / "checkpoints").glob("abandoned-*")) == []  # nothing abandoned: the documented drop
    assert csv_lines(run / "metrics.csv")[:3] == lines[:3]
    points = event_points(run)
    assert [(tag, step) for tag, step, _, wall in points if step > 128 and wall < started] == []
    assert {step for tag, step, _, _ in points if tag == "eval/mean_return"} == {64, 128}
    assert_events_match_csv(run)
    assert [name for name in os.listdir(run) if "tfevents" in name and not name.startswith("events.out.")] == []


def test_purge_markers_of_an_earlier_resume_are_applied_to_the_files(tmp_path):
    """Event files an older Proxima wrote: a resume from step 2 left a SessionLog START at step 3
    (purge_step) before re-logging steps 3..6. The next resume (from step 4) rewrites the files with
    each step once, the later value, as TensorBoard's Python loader would show them."""
    from torch.utils.tensorboard import SummaryWriter

    run = tmp_path / "R"
    for n, (purge, values) in enumerate([(None, {s: float(s) for s in range(1, 6)}),
                                         (3, {s: 10.0 * s for s in range(3, 7)})]):
        writer = SummaryWriter(str(run), purge_step=purge)
        for step, value in values.items():
            writer.add_scalar("charts/x", value, step)
        writer.close()
        [new] = [p for p in run.glob("events.out.tfevents.*") if not p.name.startswith("events.out.tfevents.000")]
        new.rename(run / f"events.out.tfevents.000000010{n}.host.1.{n}")  # their order, whatever the clock
    RunLogger(run, total_steps=10, resume_step=4, progress=False).close()
    assert [(tag, step, value) for tag, step, value, _ in event_points(run)] == [
        ("charts/x", 1, 1.0), ("charts/x", 2, 2.0), ("charts/x", 3, 30.0), ("charts/x", 4, 40.0)]
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    events = [e for p in sorted(run.glob("events.out.tfevents.*")) for e in EventFileLoader(str(p)).Load()]
    assert not any(e.HasField("session_log") for e in events)  # the marker applied, not left


def _logged_run(run: Path, steps) -> None:
    logger = RunLogger(run, total_steps=1000, progress=False)
    for i, step in enumerate(steps, 1):
        logger.log(i, step, {"time": 0.1 * i, "episodes": i, "charts/episodic_return": 10.0 + i, "charts/SPS": 100.0})
    logger.close()


def test_a_failure_while_setting_the_logs_aside_loses_nothing(tmp_path, monkeypatch):
    run, dest = tmp_path / "R", tmp_path / "R" / "checkpoints" / "abandoned-1"
    _logged_run(run, [64, 128, 192, 256])
    dest.mkdir(parents=True)
    lines = csv_lines(run / "metrics.csv")
    [events] = run.glob("events.out.tfevents.*")
    original = events.read_bytes()
    replace = os.replace

    def failing(src, dst):
        if "events-rewrite" in str(src):
            raise OSError(28, "No space left on device", str(dst))
        return replace(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(StorageError) as info:
        set_aside_logs(run, 128, dest)
    assert "\n" not in str(info.value) and "could not set aside the abandoned timeline's logs" in str(info.value)
    assert events.read_bytes() == original  # the run's file as it was, and a whole copy set aside
    assert (dest / events.name).read_bytes() == original
    assert [p.name for p in run.iterdir() if p.name.startswith(".")] == []  # no temporary file left
    assert csv_lines(dest / "metrics.csv") == [lines[0], *lines[3:]] and csv_lines(run / "metrics.csv") == lines[:3]
    monkeypatch.undo()
    # done again (the retry of that resume): the run's file now ends at step 128, the copy is whole
    again = dest.with_name("abandoned-2")
    again.mkdir()
    assert set_aside_logs(run, 128, again) == "the 1 TensorBoard event file(s) holding events after step 128, whole"
    assert [step for tag, step, _, _ in event_points(run) if tag == "charts/SPS"] == [64, 128]
    assert [step for tag, step, _, _ in event_points(again) if tag == "charts/SPS"] == [64, 128, 192, 256]


def test_a_population_resumed_from_an_older_checkpoint_keeps_each_members_dropped_logs(tmp_path, capsys):
    run = tmp_path / "P"
    flags = ["--total-timesteps", "256", "--eval-episodes", "0", "--checkpoint-every", "1", "--keep-checkpoints", "10",
             *SMALL, "--quiet"]
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(run), *flags]) == 0
    members = [run / m["dir"] for m in json.loads((run / "population.json").read_text())["member_dirs"]]
    lines = {d: csv_lines(d / "metrics.csv") for d in members}
    capsys.readouterr()
    started = time.time()
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--resume", str(ckpt.checkpoint_path(run, 128)), *flags]) == 0
    assert "with their metrics.csv rows and TensorBoard event files from after that step" in capsys.readouterr().err
    for d in members:
        [dest] = (d / "checkpoints").glob("abandoned-*")
        assert csv_lines(dest / "metrics.csv") == [lines[d][0], *lines[d][3:]]
        assert [step for tag, step, _, _ in event_points(dest) if tag == "charts/SPS"] == [64, 128, 192, 256]
        assert [(tag, step) for tag, step, _, wall in event_points(d) if step > 128 and wall < started] == []
        assert_events_match_csv(d)
