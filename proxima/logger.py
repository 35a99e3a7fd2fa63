"""Run logging: TensorBoard events, metrics.csv (one row per iteration) and a progress bar.

Metric names follow the common convention (DESIGN.md): charts/episodic_return,
charts/episodic_length, charts/SPS, charts/learning_rate, losses/policy_loss, losses/value_loss,
losses/entropy, losses/approx_kl, losses/clipfrac, losses/explained_variance.
On resume from global step S, events and CSV rows after S are dropped before logging continues, so
neither file holds a duplicate or a gap.
"""

from __future__ import annotations

import csv
import math
import os
import sys
from pathlib import Path
from typing import Optional

from .atomic import atomic_open
from .diskspace import write_error

try:  # tensorboard's own proto (torch.utils.tensorboard needs the tensorboard package anyway)
    from tensorboard.compat.proto.summary_pb2 import Summary
except ImportError:  # pragma: no cover - tensorboard is a dependency
    Summary = None

CSV_COLUMNS = [
    "iteration", "global_step", "time", "episodes",
    "charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/learning_rate",
    "losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/approx_kl", "losses/clipfrac",
    "losses/explained_variance", "eval/mean_return", "eval/std_return",
]


def read_csv_rows(path: Path) -> tuple:
    """(rows, unreadable): the rows of a CSV file that is data (a run directory may come from anyone):
    bytes that are not UTF-8 are read as U+FFFD, and a line the csv module refuses (a field over its
    size limit, a stray quote) is skipped and counted instead of raising."""
    rows, unreadable = [], 0
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.reader(f)
        while True:
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error:
                unreadable += 1
                continue
            if any("\ufffd" in cell for cell in row):  # not UTF-8: not a row Proxima wrote
                unreadable += 1
                continue
            rows.append(row)
    return rows, unreadable


def truncate_csv(path: Path, max_step: int) -> None:
    """Keep the rows with global_step <= max_step under the current header (rewritten atomically).

    A file left empty or cut short by a kill (no header, a half row) becomes a whole CSV again;
    rows of an older header are kept by column name. The file is data: a line that is not CSV
    text Proxima wrote (bytes that are not UTF-8, a field too long for the csv module, a row
    without a step) is dropped with a note on stderr naming the file, not a traceback. The file is
    replaced, never written through a symbolic link (atomic.py).
    """
    if not os.path.lexists(path):
        return
    header, kept = rows_up_to(path, "global_step", max_step)
    kept = [dict(zip(header, r)) for r in kept]
    with atomic_open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(kept)


def logged_past(path: Path, step: int) -> bool:
    """Whether the metrics CSV at ``path`` holds a row past global step ``step``: a run killed after
    logging past its last checkpoint, resumed with nothing left to train, must still drop it."""
    if not os.path.lexists(path):
        return False
    rows, _ = read_csv_rows(path)
    if not rows or "global_step" not in rows[0]:
        return False
    col = rows[0].index("global_step")
    return any(len(r) > col and (_int_or_none(r[col]) or 0) > step for r in rows[1:])


def rows_up_to(path: Path, step_column: str, max_step: int) -> tuple:
    """(header, rows) of a metrics CSV that is data, keeping the whole rows (as many cells as the
    header; a kill can cut the last one short) whose ``step_column`` is at most ``max_step``. A line
    that is not a row Proxima wrote (not UTF-8, not CSV, no step; every line of a file without the
    step column in its header) is dropped with one note naming the file. Shared by the PPO and RLHF
    resumes; header [] when there is none to keep."""
    rows, unreadable = read_csv_rows(path)
    header, body = (rows[0], rows[1:]) if rows and step_column in rows[0] else ([], [])
    if not header and len(rows) > 1:  # (one line alone: a header a kill cut short)
        unreadable += len(rows)  # no header of Proxima's: none of its rows can be read by name
    col = header.index(step_column) if header else 0
    whole = [r for r in body if len(r) == len(header)]
    unreadable += sum(1 for r in whole if _int_or_none(r[col]) is None)
    kept = [r for r in whole if _int_or_none(r[col]) is not None and _int_or_none(r[col]) <= max_step]
    if unreadable:
        print(f"proxima: note: {path}: dropped {unreadable} line(s) that are not rows Proxima wrote (not UTF-8 text, "
              "not CSV, or without a step); the other rows are kept", file=sys.stderr)
    return header, kept


def _int_or_none(text: str) -> Optional[int]:
    try:
        return int(text)
    except (ValueError, TypeError):
        return None


def _wait_for_new_second(run_dir: Path) -> None:
    """TensorBoard reads a folder's event files in name order, and names start with the creation
    second: a resumed run's file must not share the second of the file it continues (else the pid
    decides the order and the purge of steps logged after the checkpoint can be applied too early)."""
    import time

    stamps = [_int_or_none(p.name.split(".")[3]) for p in run_dir.glob("events.out.tfevents.*") if p.name.count(".") >= 4]
    newest = max((t for t in stamps if t is not None), default=None)
    if newest is not None and int(time.time()) == newest:  # at most one second; a clock set back is left alone
        time.sleep(max(0.0, newest + 1 - time.time()) + 0.01)


def _quiet_writer_thread(writer) -> None:
    """TensorBoard writes from a thread that hands a failed write (disk full) to the next add_scalar,
    where RunLogger turns it into one line; the thread's own traceback on stderr is not printed."""
    import threading

    worker = getattr(getattr(getattr(writer.file_writer, "event_writer", None), "_async_writer", None), "_worker", None)
    if worker is None:
        return
    previous = threading.excepthook

    def hook(args) -> None:
        if args.thread is worker and issubclass(args.exc_type, OSError):
            return
        previous(args)

    threading.excepthook = hook


class RunLogger:
    """Writes one TensorBoard scalar set and one CSV row per iteration; rank 0 only."""

    def __init__(self, run_dir: Path, total_steps: int, resume_step: Optional[int] = None, progress: bool = True):
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir = Path(run_dir)
        self.csv_path = self.run_dir / "metrics.csv"
        from .rundir import check_own_entries

        check_own_entries(self.run_dir, ("metrics.csv",))  # a link planted there would be appended to
        try:
            if resume_step is not None:
                truncate_csv(self.csv_path, resume_step)
                _wait_for_new_second(self.run_dir)
            # purge_step drops events at steps > resume_step that a killed run logged after its checkpoint
            self.writer = SummaryWriter(str(self.run_dir), purge_step=None if resume_step is None else resume_step + 1)
            _quiet_writer_thread(self.writer)
            # a file killed before its header reached the disk is empty: it gets the header now
            new = not self.csv_path.exists() or self.csv_path.stat().st_size == 0
            self._csv_file = open(self.csv_path, "a", newline="")
            self._csv = csv.DictWriter(self._csv_file, fieldnames=CSV_COLUMNS, extrasaction="ignore")
            if new:
                self._csv.writeheader()
                self._csv_file.flush()
        except OSError as e:
            raise write_error(e.filename or self.csv_path, e, "could not open the run's logs") from None
        self.last_return = math.nan
        self.bar = None
        if progress:
            from tqdm import tqdm

            self.bar = tqdm(total=total_steps, initial=resume_step or 0, unit="step", unit_scale=True,
                            dynamic_ncols=True, file=sys.stderr, smoothing=0.1, mininterval=0.5)

    def log(self, iteration: int, global_step: int, metrics: dict) -> None:
        """metrics: name -> float (NaN = not measured this iteration, e.g. no episode finished)."""
        try:
            # one event holding every scalar of the iteration: add_scalar writes one event per value,
            # ~6x the host time (a population logs P members every iteration)
            values = [Summary.Value(tag=name, simple_value=float(value)) for name, value in metrics.items()
                      if "/" in name and value is not None and math.isfinite(value)]
            if values:
                self.writer.file_writer.add_summary(Summary(value=values), global_step)
        except OSError as e:  # the event writer's thread hands its write error to the next call
            raise write_error(self._event_file(), e, "could not write TensorBoard events") from None
        row = {"iteration": iteration, "global_step": global_step, **metrics}
        try:
            self._csv.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()})
            self._csv_file.flush()
        except OSError as e:
            raise write_error(self.csv_path, e) from None
        ret = metrics.get("charts/episodic_return", math.nan)
        if math.isfinite(ret):
            self.last_return = ret
        if self.bar is not None:
            self.bar.update(global_step - self.bar.n)
            self.bar.set_postfix_str(f"SPS {metrics.get('charts/SPS', 0):,.0f} | return {self.last_return:.1f}", refresh=False)

    def text(self, tag: str, text: str, step: int) -> None:
        self.writer.add_text(tag, text, step)

    def _event_file(self) -> Path:
        try:
            return Path(self.writer.file_writer.event_writer._file_name)
        except AttributeError:
            return self.run_dir / "events.out.tfevents.*"

    def close(self) -> None:
        """Flush and close both files; a failure is raised (StorageError) after all were closed."""
        if self.bar is not None:
            self.bar.close()
        error = None
        for what, close in (("TensorBoard events", self._close_writer), ("metrics", self._csv_file.close)):
            try:
                close()
            except OSError as e:
                error = error or write_error(self._event_file() if what != "metrics" else self.csv_path, e, f"could not write {what}")
        if error is not None:
            raise error

    def _close_writer(self) -> None:
        self.writer.flush()
        self.writer.close()
