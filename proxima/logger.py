"""Run logging: TensorBoard events, metrics.csv (one row per iteration) and a progress bar (on a
terminal; elsewhere a plain progress line after the first iteration, then every LINE_SECONDS, and at
the end).

Metric names follow the common convention (DESIGN.md): charts/episodic_return,
charts/episodic_length, charts/SPS, charts/learning_rate, losses/policy_loss, losses/value_loss,
losses/entropy, losses/approx_kl, losses/clipfrac, losses/explained_variance, losses/minibatch_updates
(the minibatch gradient steps the update ran: update_epochs x num_minibatches, fewer where --target-kl
stopped it; blank in rows a run logged before the column existed), charts/success_rate (the share
of the iteration's finished episodes whose last step's info["is_success"] was true, of those that
reported it; blank where none did: native envs, Gymnasium envs that report none, older rows),
charts/episodic_return_100 (the rolling training return, RollingReturn; a run's and a population member's
logger, RunLogger(rolling=True); blank in a logger without it and in a row whose episodes are not counted: a
diverged population member's), losses/old_approx_kl (CleanRL's -logratio mean beside the k3
approx_kl), losses/grad_norm (the global gradient norm before the --max-grad-norm clip),
losses/vf_clipfrac (the share of samples whose value loss took the clipped branch; blank without
--clip-vloss), charts/action_std and charts/action_clip_frac (Box actions: the Normal head's mean std
after the update, the share of sampled action components outside the bounds; blank for discrete
actions), eval/success_rate (beside eval/mean_return on an --eval-every evaluation's row: the share of its
episodes whose last step's info["is_success"] was true, of those that reported it, eval.json's success_rate;
blank where none did, as charts/success_rate). The losses/* values are means over every minibatch the update
ran; every new column is blank in rows logged before it existed.
On resume from global step S, events and CSV rows after S are dropped before logging continues, so
neither file holds a duplicate or a gap. The event files themselves are rewritten (drop_events_after):
TensorBoard's default (fast) loader ignores the purge markers SummaryWriter(purge_step=...) writes, so
a marker would leave points the resumed run does not log again (eval/* after --eval-every changed,
episode returns that now end at other iterations) on the charts. A resume from an older checkpoint
(checkpoint.set_aside_newer) keeps what it drops: the rows after S go to
checkpoints/abandoned-TIME/metrics.csv and the event files it rewrites go there whole
(set_aside_logs); a resume after a kill drops the rows and events logged after the last checkpoint.
"""

from __future__ import annotations

import collections
import contextlib
import csv
import itertools
import math
import operator
import os
import re
import stat
import shutil
import socket
import struct
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple, Optional

from .atomic import atomic_open
from .diskspace import write_error

try:  # tensorboard's own proto (torch.utils.tensorboard needs the tensorboard package anyway)
    from tensorboard.compat.proto.event_pb2 import Event
except ImportError:  # pragma: no cover - tensorboard is a dependency
    Event = None

CSV_COLUMNS = [
    "iteration", "global_step", "time", "episodes",
    "charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/learning_rate",
    "losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/approx_kl", "losses/clipfrac",
    "losses/explained_variance", "losses/minibatch_updates", "charts/success_rate", "eval/mean_return", "eval/std_return",
    "charts/episodic_return_100",
    # appended, not grouped: a column's position in older files stays where scripts read it
    "losses/old_approx_kl", "losses/grad_norm", "losses/vf_clipfrac", "charts/action_std", "charts/action_clip_frac",
    "eval/success_rate",
]
#: the rolling training return (RollingReturn): "charts/" beside the per-iteration return it smooths, "_100"
#: for its window (Stable-Baselines3's rollout/ep_rew_mean is the same idea over exactly 100 episodes)
ROLLING_RETURN = "charts/episodic_return_100"
#: the fewest finished episodes the rolling return's window holds once that many have finished
ROLLING_EPISODES = 100


class RollingReturn:
    """The mean return of the most recent finished episodes, over the fewest most recent iterations
    that hold at least ``size`` of them (all of them until ``size`` have finished): the trainer reads
    only each iteration's episode count and return sum on the host (no per-episode returns, no
    per-step reads), so an iteration's episodes are indivisible and the window holds ``size`` to
    ``size`` + (its oldest iteration's count - 1) episodes. NaN until an episode has finished.

    The one window of a run, kept twice: the logger's ROLLING_RETURN (``size`` ROLLING_EPISODES) is fed
    exactly the (count, mean) pairs metrics.csv holds (``episodes``, ``charts/episodic_return``: every
    digit of a float64, csv_cell), so a resume rebuilt from the file's rows (``add_row``) computes what
    an uninterrupted run would, bit for bit; --stop-return's (trainer.ReturnTarget, ``size``
    --stop-episodes) is fed each iteration's return sum (``add_sum``), and ``sums()`` is what its
    checkpoints record as ``return_window`` and give back to ``sums`` on resume."""

    def __init__(self, size: int = ROLLING_EPISODES, sums=()):
        self.size = int(size)
        # (return sum, count, mean return) of recent iterations, oldest first: the sums make the mean (fsum: exact,
        # then one rounding) and the checkpoint; the means a sum that overflowed does not hold (_scaled_mean)
        self._iterations: collections.deque = collections.deque()
        self.episodes = 0
        for return_sum, count in sums:
            self.add_sum(return_sum, count)

    def add(self, count, mean) -> float:
        """One iteration's finished episodes (count, their mean return); an iteration without any (count 0,
        NaN, blank) or with a value no run logs (a negative or fractional count, a non-finite mean) adds
        nothing. Returns the window's mean."""
        if _logged(count, mean):
            # c * m: the products the mean's fsum has always summed (the column's digits stay as logged)
            self._add(int(count) * float(mean), int(count), float(mean))
        return self.mean

    def add_sum(self, return_sum, count) -> float:
        """One iteration's finished episodes as (their return sum, count), as the trainer has them; what
        ``add`` skips is skipped here too. Returns the window's mean."""
        if _logged(count, return_sum):
            self._add(float(return_sum), int(count), float(return_sum) / int(count))
        return self.mean

    def _add(self, return_sum: float, count: int, mean: float) -> None:
        self._iterations.append((return_sum, count, mean))
        self.episodes += count
        # the window holds `size` without its oldest iteration; never the newest one dropped (a size < 1, from a
        # hand-edited checkpoint's stop_episodes, emptied the window, then read its [0]: IndexError)
        while len(self._iterations) > 1 and self.episodes - self._iterations[0][1] >= self.size:
            self.episodes -= self._iterations.popleft()[1]

    def add_row(self, row: dict) -> float:
        """One metrics.csv row ({column: cell text}) of a reopened run; a cell that is no number adds nothing."""
        def number(name):
            try:
                return float(row.get(name) or "nan")
            except (TypeError, ValueError):
                return math.nan
        return self.add(number("episodes"), number("charts/episodic_return"))

    def sums(self) -> list:
        """The window as [(return sum, count)], oldest first (a checkpoint's ``return_window``)."""
        return [(s, c) for s, c, _ in self._iterations]

    @property
    def mean(self) -> float:
        # fsum: the same number whatever order the sums were taken in (the rebuild adds the same pairs anyway);
        # the plain weighted sum keeps ordinary means exact ((90 x 10 + 10 x 110) / 100 is 20.0, every digit)
        if not self.episodes:
            return math.nan
        try:
            mean = math.fsum(s for s, _, _ in self._iterations) / self.episodes
        except (OverflowError, ValueError):  # a partial sum past float64 ("-inf + inf" where c * m overflowed both ways)
            mean = math.inf
        return mean if math.isfinite(mean) else self._scaled_mean()

    def _scaled_mean(self) -> float:
        """The mean of returns near float64's limit (a hand-edited file), where c * m or its sum overflows
        although the mean, which lies between the smallest and largest return, does not: every term scaled
        to at most 1 (weight c / episodes <= 1 times m / the largest |m|), so nothing can overflow or raise
        and a logging column never stops a run."""
        largest = max(abs(m) for _, _, m in self._iterations)  # not 0: a window of zeros sums to 0.0 exactly
        # each rounded term is at most its rounded weight, and those sum within 2**-53 of 1: fsum rounds to <= 1
        return math.fsum((c / self.episodes) * (m / largest) for _, c, m in self._iterations) * largest


def _logged(count, value) -> bool:
    """Whether an iteration's (count, mean or sum of returns) is one a run logs: a whole count above 0 (an int,
    a float, CSV text's float) and a finite value."""
    try:
        return float(count).is_integer() and int(count) > 0 and math.isfinite(float(value))
    except (TypeError, ValueError, OverflowError):
        return False


def episodes_not_counted(count) -> bool:
    """Whether an iteration's episode count is NaN (or None): not counted, unlike 0 (none finished)."""
    if count is None:
        return True
    try:
        return math.isnan(float(count))
    except (TypeError, ValueError, OverflowError):
        return False


class BadLine(NamedTuple):
    """A line of a CSV file that is not a CSV row: its number (1-based), why, and whether it is
    bytes that are not UTF-8 (plot refuses such a file; a resume drops the line)."""
    line: int
    why: str
    not_utf8: bool = False


#: columns a metrics.csv header may name: a PPO run logs len(CSV_COLUMNS) (a population's members each the
#: same), an RLHF run "step" and its few dozen metrics; a header past this is no file of a run, and reading
#: its rows would cost memory and a --metric error listing every name
MAX_CSV_COLUMNS = 256
#: a file up to this size has its rows read as lists of str (~26x its size, fast to read cell by cell);
#: a larger one as CsvCells (a few times its size)
_LIST_BYTES = 8 << 20
#: bytes of the file looked at in one piece when finding its lines and cells (bounds the temporary arrays)
_CHUNK = 1 << 18


class CsvCells(Sequence):
    """The cells of one line of a CSV file, read from the file's bytes when asked for: a list of str
    per row costs ~26x the file (a 60 MB metrics.csv took 1.8 GB to plot), these the file's bytes
    and 4 bytes a cell (_CsvTable)."""
    __slots__ = ("_table", "_i")

    def __init__(self, table: "_CsvTable", i: int):
        self._table, self._i = table, i

    def __len__(self) -> int:
        return self._table.count[self._i] + 1

    def __getitem__(self, j):
        # plot reads every cell of a column, row after row: one call, no helper, per cell
        t, i = self._table, self._i
        if type(j) is not int:
            if isinstance(j, slice):
                return list(self)[j]
            j = operator.index(j)
        k = t.count[i]
        if j < 0:
            j += k + 1
        if not 0 <= j <= k:
            raise IndexError("cell index out of range")
        c = t.first[i] + j
        return t.data[t.start[i] if j == 0 else t.commas[c - 1] + 1:t.end[i] if j == k else t.commas[c]].decode("utf-8")

    def __iter__(self):
        return iter(self._table.cells(self._i))

    def __eq__(self, other):
        return isinstance(other, (list, tuple, CsvCells)) and list(self) == list(other)

    __hash__ = None

    def __repr__(self) -> str:
        return repr(list(self))


class _CsvTable:
    """The file's bytes and, per line kept, where it starts and ends and where its commas are: the
    cells are sliced and decoded when read (the file's lines are checked UTF-8 and without quotes
    first; a line with a quote is parsed by the csv module and kept as its list)."""

    def __init__(self, data: bytes, starts, ends, comma_first, comma_count, commas):
        import numpy as np

        def packed(values):  # 4 bytes an entry, read back as plain ints (a numpy scalar per cell read is slow), not copied
            return memoryview(np.ascontiguousarray(values, dtype=np.uintc))

        self.data = data
        self.start, self.end, self.first, self.count = map(packed, (starts, ends, comma_first, comma_count))
        self.commas = packed(commas)


    def cells(self, i: int) -> list:
        return self.data[self.start[i]:self.end[i]].decode("utf-8").split(",")


def read_csv_lines(path: Path) -> tuple:
    """([(line number, cells)], [BadLine]): every physical line of a CSV file that is data (a run
    directory may come from anyone), each parsed on its own, so a damaged line costs that line
    alone. Proxima writes only numbers and fixed header names to its metrics.csv files, so one row is
    one line; a csv.reader over the whole file would let a hand-edited ``"`` open a quoted field
    that swallows every later line. A line that is not UTF-8 text or that the csv module refuses
    (a field over its size limit, a carriage return inside) is a BadLine; blank lines are neither.
    Lines are numbered from 1, as editors number them. The cells are CsvCells (a sequence of str
    read from the file's bytes when asked for), a list for a line with a quote: the file near its
    2 GiB cap is read in a few times its size. OSError when the file cannot be read:
    rundir.RunFileError (one line naming it) for a FIFO planted at its name, which a plain read
    would block on forever, a file over rundir.LOG_MAX_BYTES (a sparse file claiming terabytes), or
    a header of more than MAX_CSV_COLUMNS columns (no run logs that many)."""
    import numpy as np

    from . import rundir

    data = rundir.read_run_bytes(path, rundir.LOG_MAX_BYTES)
    starts, ends = _line_bounds(data, np)
    _check_header_width(path, data, starts, ends, np)
    keep = ends > starts  # blank lines are neither rows nor bad
    commas = _positions(data, ord(","), np)
    bad, special, limit = [], {}, csv.field_size_limit()
    for i in _lines_to_parse(data, starts, ends, np):  # not UTF-8, a quote, a field past the csv module's limit
        s, e = int(starts[i]), int(ends[i])
        try:
            text = data[s:e].decode("utf-8")
        except UnicodeDecodeError as err:
            bad.append(BadLine(i + 1, f"not UTF-8 text: byte 0x{data[s + err.start]:02x} at offset {s + err.start}", True))
            keep[i] = False
            continue
        if '"' not in text:  # a long line: its fields are the gaps between commas (no list of a million cells)
            a, b = np.searchsorted(commas, [s, e])
            edges = np.concatenate([[s - 1], commas[a:b].astype(np.int64), [e]])
            if int(np.diff(edges).max()) - 1 > limit:
                bad.append(BadLine(i + 1, f"not CSV: field larger than field limit ({limit})"))
                keep[i] = False
            continue
        try:
            special[i] = next(csv.reader((text,)), [])
        except csv.Error as err:
            bad.append(BadLine(i + 1, f"not CSV: {err}"))
            keep[i] = False
    kept = np.flatnonzero(keep)
    first = np.searchsorted(commas, starts[kept])
    count = np.searchsorted(commas, ends[kept]) - first
    table = _CsvTable(data, starts[kept], ends[kept], first, count, commas)
    if len(data) <= _LIST_BYTES:  # a list of str per row reads faster, and a file this small costs little so
        lines = [(n + 1, special[n] if n in special else table.cells(j)) for j, n in enumerate(kept.tolist())]
    else:
        lines = [(n + 1, special[n] if n in special else CsvCells(table, j)) for j, n in enumerate(kept.tolist())]
    return lines, bad


def _check_header_width(path: Path, data: bytes, starts, ends, np) -> None:
    """RunFileError when the first line that is not blank names more than MAX_CSV_COLUMNS columns:
    refused before its rows are read, in one line that names three of them."""
    from .rundir import RunFileError

    full = np.flatnonzero(ends > starts)
    if not len(full):
        return
    s, e = int(starts[full[0]]), int(ends[full[0]])
    if data.count(b",", s, e) < MAX_CSV_COLUMNS:
        return
    try:
        text = data[s:e].decode("utf-8")
        names = text.split(",") if '"' not in text else next(csv.reader((text,)))
    except (UnicodeDecodeError, csv.Error):
        return  # not a header at all: the readers refuse it in their own words
    if len(names) > MAX_CSV_COLUMNS:
        shown = ", ".join(name[:40] for name in names[:3])
        raise RunFileError(f"{path}: its header (line {int(full[0]) + 1}) names {len(names):,} columns ({shown} and "
                           f"{len(names) - 3:,} more), more than the {MAX_CSV_COLUMNS} a run logs; it is no metrics.csv "
                           "Proxima wrote (was it edited?)")


def _positions(data: bytes, byte: int, np):
    """Offsets (uint32: the file is under 4 GiB) of every ``byte`` in ``data``, found a piece at a time."""
    view, found = np.frombuffer(data, dtype=np.uint8), np.empty(data.count(bytes([byte])), dtype=np.uintc)
    at = 0
    for a in range(0, len(data), _CHUNK):
        piece = np.flatnonzero(view[a:a + _CHUNK] == byte)
        found[at:at + len(piece)] = piece + a
        at += len(piece)
    return found


def _line_bounds(data: bytes, np) -> tuple:
    """(starts, ends) of the physical lines of ``data``, the end before its \\n, \\r\\n or \\r, as
    bytes.splitlines (and the csv module) splits them."""
    nl, cr = _positions(data, 10, np), _positions(data, 13, np)
    crlf = np.zeros(len(cr), dtype=bool)
    if len(cr):
        after = cr.astype(np.int64) + 1
        inside = after < len(data)
        crlf[inside] = np.frombuffer(data, dtype=np.uint8)[after[inside]] == 10
    lone_nl = np.setdiff1d(nl, cr[crlf] + np.uintc(1), assume_unique=True)
    ends = np.sort(np.concatenate([cr, lone_nl]))
    next_start = ends + 1 + np.isin(ends, cr[crlf]).astype(np.uintc)
    starts = np.concatenate([np.zeros(1, dtype=np.uintc), next_start]).astype(np.uintc)
    if len(next_start) and int(next_start[-1]) == len(data):  # the last line ends with its line end
        starts = starts[:-1]
    else:
        ends = np.concatenate([ends, np.array([len(data)], dtype=np.uintc)])
    return starts, ends


def _lines_to_parse(data: bytes, starts, ends, np) -> list:
    """Indices of the lines the commas alone do not split as the csv module does: bytes that are
    not UTF-8, a quote, a line longer than the csv module's field limit (the module refuses a longer
    field); the others' cells are what lies between their commas."""
    lines = set()

    def line_of(offsets):
        return np.searchsorted(starts, offsets, side="right") - 1

    lines.update(line_of(_positions(data, ord('"'), np)).tolist())
    lines.update(np.flatnonzero((ends - starts) > csv.field_size_limit()).tolist())
    for a in range(0, len(data), _CHUNK):  # UTF-8 is checked a piece at a time; a piece that fails, line by line
        i, j = np.searchsorted(starts, [a, a + _CHUNK])
        if i == j:
            continue
        try:
            data[int(starts[i]):int(ends[j - 1])].decode("utf-8")
        except UnicodeDecodeError:
            for k in range(i, j):
                try:
                    data[int(starts[k]):int(ends[k])].decode("utf-8")
                except UnicodeDecodeError:
                    lines.add(k)
    return sorted(lines)


def whole_rows(lines: list, bad: list) -> tuple:
    """(header, [(line number, cells)] of the rows with the header's number of cells, {line number: why}
    of the lines that are not rows) of read_csv_lines' result: the first parsed line is the header; a
    last line with fewer cells than it is a row a kill cut short, neither kept nor counted. Shared by
    the resume (rows_up_to), plot/report (plot.read_metrics) and the RLHF curve."""
    skipped = {b.line: b.why for b in bad}
    if not lines:
        return [], [], skipped
    (_, header), body = lines[0], lines[1:]
    header = list(header)  # read by name many times: a list, not CsvCells
    last = max([n for n, _ in lines] + list(skipped))
    rows = []
    for n, cells in body:
        if len(cells) == len(header):
            rows.append((n, cells))
        elif not (n == last and len(cells) < len(header)):
            skipped[n] = f"{len(cells)} cell(s), the header has {len(header)}"
    return header, rows, skipped


def line_numbers(numbers: list) -> str:
    """Line numbers for a note: 'line 9', 'lines 4, 9, 12' (the first five, then how many more)."""
    shown = ", ".join(map(str, numbers[:5])) + (f" and {len(numbers) - 5} more" if len(numbers) > 5 else "")
    return f"line{'s' if len(numbers) > 1 else ''} {shown}"


_NOTED: set = set()


def note_skipped(path: Path, stat: os.stat_result, skipped: dict) -> None:
    """One line on stderr naming the file and the lines of it ({line: why}) that are not metrics rows
    (plot, report, the RLHF curve and summary), once for a file's content however often it is read."""
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key in _NOTED:
        return
    _NOTED.add(key)
    numbers = sorted(skipped)
    why = f" ({skipped[numbers[0]]})" if len(numbers) == 1 else ""
    sys.stderr.write(f"proxima: note: {path}: {line_numbers(numbers)}{why} "
                     f"{'is not a metrics row' if len(numbers) == 1 else 'are not metrics rows'} Proxima wrote; skipped\n")


def read_csv_rows(path: Path) -> tuple:
    """(rows, unreadable): the rows of a CSV file that is data (read_csv_lines: each line on its
    own): a line that is not UTF-8 text or that the csv module refuses (a field over its size limit)
    is skipped and counted instead of raising."""
    lines, bad = _resume_lines(path)
    return [cells for _, cells in lines], len(bad)


def _resume_lines(path: Path) -> tuple:
    """read_csv_lines for a resume, whose callers turn an OSError into "could not write/open" with
    the free space: a file that is no readable regular file within its cap (rundir.RunFileError) is
    a RunDirError naming it instead, one line that stops the resume before it rewrites the file."""
    from .rundir import RunDirError, RunFileError

    try:
        return read_csv_lines(path)
    except RunFileError as e:
        raise RunDirError(f"{e}; proxima resume reads and rewrites it") from None


def check_logs_readable(run_dir: Path) -> None:
    """RunDirError naming metrics.csv or an event file of ``run_dir`` that is there but is no regular
    file within rundir.LOG_MAX_BYTES (a FIFO, a sparse file planted at the name): what the resume's
    logger would refuse, found before the resume rewrites config.yaml or meta.json. A file that
    passes is not read here (stat only)."""
    from . import rundir

    for path in [Path(run_dir) / "metrics.csv", *_event_files(run_dir)]:
        try:
            info = os.stat(path)
        except FileNotFoundError:
            continue
        except OSError:
            info = None
        if info is None or not stat.S_ISREG(info.st_mode) or info.st_size > rundir.LOG_MAX_BYTES:
            try:  # its refusal in the readers' own words (it waits on no FIFO, reads no oversized file)
                rundir.read_run_bytes(path, rundir.LOG_MAX_BYTES)
            except rundir.RunFileError as e:
                raise rundir.RunDirError(f"{e}; proxima resume reads and rewrites it") from None
            except OSError:
                pass  # gone or unreadable meanwhile: the logger says so in its own words


def truncate_csv(path: Path, max_step: int) -> list:
    """Keep the rows with global_step <= max_step under the current header (rewritten atomically);
    returns them, in file order, as {column: cell text} of the file's header ([] without a file).

    A file left empty or cut short by a kill (no header, a half row) becomes a whole CSV again;
    rows of an older header are kept by column name. The file is data: a line that is not a row
    Proxima wrote (bytes that are not UTF-8, a field too long for the csv module, a hand-edited
    quote or cell, a row without a step) is dropped with a note on stderr naming the file and the
    line, not a traceback; the rows around it are kept. The file is replaced, never written through
    a symbolic link (atomic.py).
    """
    if not os.path.lexists(path):
        return []
    header, kept = rows_up_to(path, "global_step", max_step)
    kept = [dict(zip(header, r)) for r in kept]
    with atomic_open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(kept)
    return kept


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
    that is not a row Proxima wrote (not UTF-8, not CSV, a number of cells other than the header's,
    no step; every line of a file without the step column in its header) is dropped with one note
    naming the file and the lines; the rows after it are kept (each line is read on its own,
    read_csv_lines). Shared by the PPO and RLHF resumes; header [] when there is none to keep."""
    header, kept, _, unreadable = _split_rows(path, step_column, max_step)
    if unreadable:
        print(f"proxima: note: {path}: dropped {len(unreadable)} line(s) that are not rows Proxima wrote (not UTF-8 text, "
              f"not CSV, a wrong number of cells, or without a step: {line_numbers(unreadable)}); the other rows are kept",
              file=sys.stderr)
    return header, kept


def _split_rows(path: Path, step_column: str, max_step: int) -> tuple:
    """(header, rows up to max_step, rows after it, numbers of the lines that are not rows):
    rows_up_to's reading, silent. A last line with fewer cells than the header is what a kill
    leaves (a row cut short): it is dropped and not counted."""
    lines, bad = _resume_lines(path)
    header, rows, skipped = whole_rows(lines, bad)
    if step_column not in header:  # no header of Proxima's: none of its rows can be read by name
        extra = [n for n, _ in lines] if len(lines) > 1 else []  # (one line alone: a header a kill cut short)
        return [], [], [], sorted({b.line for b in bad} | set(extra))
    col = header.index(step_column)
    unreadable, kept, after = list(skipped), [], []
    for n, r in rows:
        step = _int_or_none(r[col])
        if step is None:
            unreadable.append(n)
        else:
            (kept if step <= max_step else after).append(r)
    return header, kept, after, sorted(unreadable)


def set_aside_logs(run_dir: Path, step: int, dest: Path) -> str:
    """A resume from an older checkpoint (global step ``step``; checkpoint.set_aside_newer moved the
    newer checkpoints into ``dest``, RUN/checkpoints/abandoned-TIME/): what the run logged after
    ``step`` belongs to that abandoned timeline and is kept with it. metrics.csv's rows after
    ``step`` are written, verbatim under the file's header, to ``dest``/metrics.csv before they leave
    metrics.csv; the event files holding events after ``step`` are copied whole into ``dest`` before
    the run's own are rewritten without them (drop_events_after). A kill at any point loses nothing
    (at worst a row or an event file is in both places). Returns the words for set_aside_newer's note
    ("" when nothing was logged after ``step``). StorageError (one line) when a file cannot be written."""
    from .atomic import leads_outside

    run_dir, dest = Path(run_dir), Path(dest)
    csv_path, said = run_dir / "metrics.csv", []
    try:
        # a link planted at metrics.csv is not the run's: RunLogger refuses it with its own line
        if os.path.lexists(csv_path) and not leads_outside(csv_path, run_dir):
            header, _, after, _ = _split_rows(csv_path, "global_step", step)
            if after:
                with atomic_open(dest / "metrics.csv", "w", newline="") as f:
                    csv.writer(f).writerows([header, *after])
                truncate_csv(csv_path, step)
                said.append(f"metrics.csv's {len(after)} row(s) after step {step:,} ({dest / 'metrics.csv'})")
        files = drop_events_after(run_dir, step, dest)
    except OSError as e:
        raise write_error(e.filename or dest, e, "could not set aside the abandoned timeline's logs") from None
    if files:
        said.append(f"the {files} TensorBoard event file(s) holding events after {'it' if said else f'step {step:,}'}, whole")
    return " and ".join(said)


def _event_files(run_dir: Path) -> list:
    """The run's event files in the order TensorBoard reads them (by name); links are not the run's own."""
    return sorted(p for p in Path(run_dir).glob("events.out.tfevents.*") if p.is_file() and not p.is_symlink())


def _event_records(path: Path) -> list:
    """[(record bytes, Event)]: the whole records of an event file (TFRecord framing), in order, up
    to the first one that is cut short (a kill while writing) or not an Event; the bytes are kept
    as they are, to be written back unchanged. A file over rundir.LOG_MAX_BYTES (a sparse file
    planted at an event file's name) is a RunDirError naming it, not a MemoryError."""
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    from . import rundir

    try:
        data = rundir.read_run_bytes(path, rundir.LOG_MAX_BYTES)
    except rundir.RunFileError as e:  # not an OSError for the callers: they would call it a full disk
        raise rundir.RunDirError(f"{e}; proxima resume reads and rewrites it") from None
    records, pos = [], 0
    while pos + 12 <= len(data):
        header = data[pos:pos + 8]
        length = struct.unpack("<Q", header)[0]
        end = pos + 12 + length + 4
        if struct.unpack("<I", data[pos + 8:pos + 12])[0] != masked_crc32c(header) or end > len(data):
            break
        try:
            event = Event.FromString(data[pos + 12:pos + 12 + length])
        except DecodeError:
            break
        records.append((data[pos:end], event))
        pos = end
    return records


def drop_events_after(run_dir: Path, step: int, dest: Optional[Path] = None) -> int:
    """Rewrite the run's event files without the events after global step ``step``; returns how many
    files were changed (_drop_events_after's count)."""
    return _drop_events_after(run_dir, step, dest)[0]


def _drop_events_after(run_dir: Path, step: int, dest: Optional[Path] = None) -> tuple:
    """(files changed, the kept events in file order): drop_events_after, whose kept events a resume reads
    again (the last hyperparameters text: _last_text) without parsing the files a second time. TensorBoard's fast loader (its default) shows every event in the files: only
    a rewrite hides the points a resumed run does not log again. A purge marker of an earlier resume
    (SessionLog START at step p, written by SummaryWriter(purge_step=p)) is applied as TensorBoard's
    Python loader applies it (the events before it at steps >= p go) and dropped.

    Only files holding such events are touched, each on its own: the kept records (unchanged bytes,
    header first) are written to a temporary name TensorBoard does not read, fsynced, then renamed
    over the file, so a kill leaves either the old file or the new one, never both or half of one.
    A file left with no event is removed. ``dest`` (a resume from an older checkpoint): each file is
    first linked (or copied) whole into it; None (a resume after a kill): the dropped events go, as
    metrics.csv's rows after the checkpoint do."""
    from tensorboard.compat.proto.event_pb2 import SessionLog

    from .atomic import _fsync_folder

    files = _event_files(run_dir)
    records = [_event_records(p) for p in files]
    keep, purged_from = [], math.inf  # the smallest purge marker step met so far, walking back from the end
    for recs in reversed(records):
        flags = []
        for _, event in reversed(recs):
            if event.HasField("file_version"):
                flags.append(True)
            elif event.HasField("session_log") and event.session_log.status == SessionLog.START:
                purged_from = min(purged_from, event.step)
                flags.append(False)
            else:
                flags.append(event.step <= step and event.step < purged_from)
        keep.append(flags[::-1])
    keep.reverse()
    changed = 0
    kept_events = [event for recs, flags in zip(records, keep) for (_, event), k in zip(recs, flags) if k]
    for path, recs, flags in zip(files, records, keep):
        if all(flags):
            continue
        if dest is not None:
            _copy_whole(path, Path(dest))
        kept = [raw for (raw, event), k in zip(recs, flags) if k and not event.HasField("file_version")]
        _rewrite_events(path, [raw for (raw, _), k in zip(recs, flags) if k] if kept else None,
                        "could not rewrite TensorBoard events without the steps a resume trains again" if dest is None
                        else "could not set aside the abandoned timeline's logs")
        changed += 1
    if changed:
        _fsync_folder(Path(run_dir))
    return changed, kept_events


def _rewrite_events(path: Path, records: Optional[list], what: str) -> None:
    """Replace the event file ``path`` by ``records`` (raw bytes, in order), or remove it (None). A write that
    fails is a StorageError naming ``path`` and ``what`` was being done (a write error carries no file name:
    RunLogger's line would name metrics.csv), with the size the rewrite needs where room or a file size
    limit stopped it; the temporary file is gone (atomic_open) and ``path`` is as it was."""
    from .diskspace import human_bytes, is_out_of_room

    try:
        if records is None:
            path.unlink()
            return
        with atomic_open(path, "wb", temp_like="events-rewrite") as f:  # no "tfevents" in the name: TensorBoard never reads it
            f.writelines(records)
    except OSError as e:
        need = f"; the rewrite needs {human_bytes(sum(map(len, records)))}" if records and is_out_of_room(e) else ""
        raise write_error(path, e, what, need) from None


def _copy_whole(path: Path, dest: Path) -> None:
    """``path`` into the folder ``dest`` under its own name (a hard link where the filesystem has
    them, else a copy), before the run's own is rewritten."""
    target, n = dest / path.name, 2
    while os.path.lexists(target):
        target, n = dest / f"{path.name}-{n}", n + 1
    try:
        os.link(path, target)
    except OSError:
        shutil.copy2(path, target)


def _int_or_none(text: str) -> Optional[int]:
    try:
        return int(text)
    except (ValueError, TypeError):
        return None


def wait_for_new_second(run_dir: Path) -> None:
    """TensorBoard reads a folder's event files in name order, and names start with the creation
    second: a resumed run's file must not share the second of the file it continues (else the pid
    could put it first, and TensorBoard's Python loader takes a step lower than the one before for a
    restart and drops the points logged after it)."""
    import time

    stamps = [_int_or_none(p.name.split(".")[3]) for p in run_dir.glob("events.out.tfevents.*") if p.name.count(".") >= 4]
    newest = max((t for t in stamps if t is not None), default=None)
    if newest is not None and int(time.time()) == newest:  # at most one second; a clock set back is left alone
        time.sleep(max(0.0, newest + 1 - time.time()) + 0.01)


#: bytes one lookup table of _crc32c covers; longer data is taken in pieces of this size
_CRC_SPAN = 1024
_crc_tables: Optional[tuple] = None


def _crc_lookup() -> tuple:
    """(table, offsets, byte table, numpy) for _crc32c, built once (~1 MiB, a few ms): table[d * 256 + b] is the CRC-32C
    register after byte b followed by d zero bytes, from 0; offsets[_CRC_SPAN - L + i] is the row
    (times 256) of byte i of L bytes. CRC-32C is linear over GF(2), so the register after L bytes is
    the XOR of each byte's entry: one numpy gather instead of a Python loop over every byte."""
    global _crc_tables
    if _crc_tables is None:
        import numpy as np
        from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import CRC_TABLE  # ~0.2 s to import: when first needed

        base = np.array(CRC_TABLE, dtype=np.uint32)
        table = np.empty((_CRC_SPAN, 256), dtype=np.uint32)
        table[0] = base
        for d in range(1, _CRC_SPAN):
            table[d] = base[table[d - 1] & 0xFF] ^ (table[d - 1] >> 8)
        offsets = np.arange(_CRC_SPAN - 1, -1, -1, dtype=np.intp) * 256
        _crc_tables = (table.reshape(-1), offsets, CRC_TABLE, np)
    return _crc_tables


def _crc32c(data: bytes) -> int:
    """CRC-32C of ``data``, as tensorboard's crc32c computes it (its pure-Python loop over every byte
    took ~0.2 ms for one iteration's event: a population's P events per iteration would spend most of
    the iteration there)."""
    table, offsets, byte_table, np = _crc_lookup()
    reg = 0xFFFFFFFF
    for start in range(0, len(data), _CRC_SPAN):
        piece = data[start:start + _CRC_SPAN]
        n = len(piece)
        if n < 4:  # too short to take the register in through its first four bytes
            for b in piece:
                reg = byte_table[(reg ^ b) & 0xFF] ^ (reg >> 8)
            continue
        got = int(np.bitwise_xor.reduce(table.take(offsets[_CRC_SPAN - n:] + np.frombuffer(piece, dtype=np.uint8))))
        # the register going in acts as four bytes XORed onto the piece's first four
        row = (n - 1) * 256
        for k in range(4):
            got ^= int(table[row - k * 256 + ((reg >> (8 * k)) & 0xFF)])
        reg = got
    return reg ^ 0xFFFFFFFF


def _masked_crc32c(data: bytes) -> int:
    x = _crc32c(data)
    return (((x >> 15) | (x << 17)) + 0xA282EAD8) & 0xFFFFFFFF


_record_heads: dict = {}


def _record(data: bytes) -> bytes:
    """One TFRecord: length, its masked CRC, the data, its masked CRC (what tensorboard's RecordWriter writes)."""
    head = _record_heads.get(len(data))
    if head is None:
        length = struct.pack("<Q", len(data))
        head = _record_heads.setdefault(len(data), length + struct.pack("<I", _masked_crc32c(length)))
    return head + data + struct.pack("<I", _masked_crc32c(data))


def _uid() -> int:
    """The last part of an event file's name: tensorboard's own counter where it has one, so a
    SummaryWriter in this process never picks the same name."""
    try:
        from tensorboard.summary.writer.event_file_writer import _global_uid
    except ImportError:  # pragma: no cover - a tensorboard without it
        return next(_own_uid)
    return _global_uid.get()


_own_uid = itertools.count()


def reopen_if_deleted(file, path: Path, mode: str, **kw):
    """``file`` (open for reading too) when its name still links to it, else a new file object on a
    copy of everything it holds, written back at ``path`` (all or nothing, atomic_open), ``file``
    closed. A run's logs deleted while it trains (``rm RUN/metrics.csv``) kept taking rows into the
    unlinked inode, all lost at exit without a word; one fstat an iteration tells (st_nlink 0)."""
    fd = file.fileno()
    if os.fstat(fd).st_nlink > 0:
        return file
    file.flush()
    size, chunks, at = os.fstat(fd).st_size, [], 0
    while at < size:  # pread: the handle's own position is left alone
        chunk = os.pread(fd, size - at, at)
        if not chunk:
            break
        chunks.append(chunk)
        at += len(chunk)
    with atomic_open(path, "wb") as out:
        out.write(b"".join(chunks))
    new = open(path, mode, **kw)
    file.close()
    print(f"proxima: note: {path} was deleted while the run trained; restored with everything logged to it "
          "so far, and the run logs on there", file=sys.stderr)
    return new


class EventFile:
    """A TensorBoard event file written in the caller's thread, as SummaryWriter names and frames
    one (events.out.tfevents.SECONDS.HOST.PID.N; a file_version event, then one record per event):
    the package's one TensorBoard writer (PPO's RunLogger, RLHF's MetricsLogger).
    SummaryWriter's thread opened, appended to and closed the file for every event and computed its
    checksums byte by byte in Python: with P loggers (a population) that was most of an iteration's
    host time, and a failed write (disk full) reached the caller only at its next call, the thread's
    traceback printed meanwhile. Here events go to a buffered file that ``flush()`` hands to the OS;
    an OSError (disk full) is raised by the call that writes or flushes, with ``filename`` set to the
    file. A file whose header could not be written is removed: it would hold no event; so is one
    closed holding nothing but its header (a resume that failed before its first row, a resume with
    nothing to log): else each such attempt left one more empty file in the run."""

    def __init__(self, run_dir: Path):
        from tensorboard.compat.proto.event_pb2 import SourceMetadata

        name = "events.out.tfevents.%010d.%s.%s.%s" % (time.time(), socket.gethostname(), os.getpid(), _uid())
        self.path = Path(run_dir) / name
        # a new file (never one, or a link, already at the name), readable: reopen_if_deleted copies it back
        self._file = open(self.path, "xb+")
        try:
            self.add(Event(wall_time=time.time(), file_version="brain.Event:2",
                           source_metadata=SourceMetadata(writer="tensorboard.summary.writer.event_file_writer")))
            self.flush()
            self.holds_events = False  # the header alone: close() removes the file
        except BaseException:
            try:
                self._file.close()
            except OSError:
                pass  # the error on its way says the same
            self.path.unlink(missing_ok=True)
            raise

    def add(self, event) -> None:
        self.holds_events = True  # set before the write: a record half written is not a header-only file
        try:
            self._file.write(_record(event.SerializeToString()))
        except OSError as e:
            raise self._named(e)

    def scalars(self, step: int, values: dict) -> None:
        """One event holding every finite value of ``values`` (tag -> number; NaN is "not measured"):
        add_scalar writes one event per value, ~6x the host time (a population logs P members every
        iteration). TensorBoard shows them as add_scalar's (simple_value)."""
        shown = [{"tag": tag, "simple_value": float(value)} for tag, value in values.items()
                 if value is not None and math.isfinite(value)]
        if shown:
            self.add(Event(wall_time=time.time(), step=step, summary={"value": shown}))

    def text(self, tag: str, text: str, step: int) -> None:
        """A text summary, the one SummaryWriter.add_text writes (TensorBoard's Text tab, markdown)."""
        from torch.utils.tensorboard.summary import text as text_summary

        self.add(Event(wall_time=time.time(), step=step, summary=text_summary(tag, text)))

    def reopen_if_deleted(self) -> None:
        """Write the file back at its name when it was deleted while open (reopen_if_deleted)."""
        try:
            self._file = reopen_if_deleted(self._file, self.path, "ab+")
        except OSError as e:
            raise self._named(e)

    def _named(self, e: OSError) -> OSError:
        if e.filename is None:  # a buffered write's error names no file; the user's one line names this one
            e.filename = str(self.path)
        return e

    def flush(self) -> None:
        try:
            self._file.flush()
        except OSError as e:
            raise self._named(e)

    def close(self) -> None:
        try:
            self._file.close()  # closed even when its last flush fails
        except OSError as e:
            raise self._named(e)
        finally:
            if not self.holds_events:
                with contextlib.suppress(OSError):
                    self.path.unlink()


def _is_terminal(stream) -> bool:
    """Whether ``stream`` redraws a '\\r' frame in place: a tty, or a Jupyter cell's output (ipykernel's
    stream says it is no tty, but its front end draws tqdm's frames in place). A tty that reports 0
    columns (a pty never given a size: ``script``, some CI runners, ``docker exec -t`` before its
    resize) is not one: tqdm sizes its frame to the width and would draw a bare '\\r' each time; nor is one
    that reports 0 lines."""
    if type(stream).__module__.startswith("ipykernel"):
        return True
    try:
        if not stream.isatty():
            return False
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):  # no descriptor to ask: tqdm cannot ask either, and draws unsized
        return True
    # 0 lines too (``script`` after ``stty cols 120``): tqdm reads it as -1 rows and draws no frame at all
    return size.columns > 0 and size.lines > 0


#: tqdm's frame on a terminal: its default but for the steps, written whole with commas, and its rate left out
BAR_FORMAT = "{l_bar}{bar}| {n:,}/{total:,} [{elapsed}<{remaining}{postfix}]"

#: seconds between two progress lines where stderr is not a terminal
LINE_SECONDS = 30.0


class LineProgress:
    """The progress bar where stderr is not a terminal (a log file, a pipe): tqdm's '\\r' frames there
    pile up on one physical line that grows all run (~0.5 MB an hour). Instead one newline-terminated
    line after the first update (a job's log shows at once that training runs, and its speed), then at
    most every ``interval`` seconds, and one at the end (the last step, or ``close``), each
    with the postfix set before the update it follows. The attributes RunLogger uses of tqdm's
    (``n``, ``total``, ``update``, ``set_postfix_str``, ``close``) and nothing more."""

    def __init__(self, total: int, initial: int, file, interval: Optional[float] = None):
        self.total, self.n, self.file = total, initial, file
        self.interval = float(LINE_SECONDS if interval is None else interval)
        self.postfix = ""
        self._start = time.monotonic()
        self._due = self._start  # the first update's line is due at once
        self._shown = initial  # no line until a step is made: a resume's first line is its first progress

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text  # shown with the next line, never on its own

    def update(self, steps: int) -> None:
        self.n += steps
        now = time.monotonic()
        if now >= self._due or self.n >= self.total:
            self._line(now)

    def close(self) -> None:
        if self.n != self._shown:  # stopped early (--stop-return, Ctrl-C) since the last line
            self._line(time.monotonic())

    def _line(self, now: float) -> None:
        seconds = int(now - self._start)
        elapsed = f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        text = f"step {self.n:,}/{self.total:,}{share} {elapsed}" + (f" | {self.postfix}" if self.postfix else "")
        try:
            self.file.write(text + "\n")
            self.file.flush()
        except (OSError, ValueError):  # a full disk or a closed stream: progress is not worth a failed run
            pass
        self._shown, self._due = self.n, now + self.interval


#: metrics.csv columns whose values are float32 by construction (the losses and the action statistics,
#: computed and averaged in float32): csv_cell writes them short. charts/learning_rate too: a run logs
#: its schedule's float64 rate, written in full unless float32 holds it exactly (then in float32's
#: shortest text, within float32's precision of the rate: 2**-12 as 0.00024414062), while RLHF passes
#: the optimizer's float32 one. Every other float is a float64 computation (time, SPS, an episodic
#: mean) that merely may equal a float32 value (123456792.0), whose float32 text (1.2345679e+08) would
#: read back as another number
FLOAT32_COLUMNS = ("charts/learning_rate", "losses/", "charts/action_std", "charts/action_clip_frac")


def csv_cell(name: str, value):
    """A metrics.csv cell: "" for NaN (not measured). A float of a FLOAT32_COLUMNS column in the
    shortest text that reads back as the same float32 (0.00025, not 0.0002500000118743628): a rate set
    with up to 6 significant digits reads back (float()) as exactly the number set, though its text may
    differ from the config's (1e-05 for 0.00001). Every other float keeps every digit: a float64 reads
    back exactly, and a resume matches eval/mean_return exactly against best.pt's best_eval
    (train_state._scored_best)."""
    if type(value) is not float:
        return value
    if math.isnan(value):
        return ""
    if not name.startswith(FLOAT32_COLUMNS) or not math.isfinite(value):
        return value
    try:
        single = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:  # beyond float32's range: no float32 value
        return value
    if single != value:
        return value
    import numpy as np

    return str(np.float32(value))


def return_text(value: float) -> str:
    """A return as the progress line shows it: one decimal (38.6, -978.8, 500.0), more below 10 in magnitude,
    to 3 significant digits without trailing zeros (0.0288 where .1f showed 0.0, 1.25, 1.0, 0.0000001), an exponent
    only outside [1e-7, 1e8) in magnitude (1e-300 and 1.23e+08, where fixed point wrote hundreds of digits): at
    most 12 characters for any finite float."""
    if value == 0 or not math.isfinite(value):
        return f"{value:.1f}"
    if not 1e-7 <= abs(value) < 1e8:
        return f"{value:.3g}"
    decimals = max(1, 2 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


#: the TensorBoard text tag of a run's config (CleanRL's writer.add_text("hyperparameters", ...))
HYPERPARAMETERS = "hyperparameters"


def hyperparameters_table(config: dict) -> str:
    """``config`` (field -> value) as CleanRL's markdown table, |param|value|, one row per field in its order;
    a value in YAML's spelling, as config.yaml writes it (true, null, 1.0e-05, .inf, a string quoted where YAML
    would read it as another value: '1e-3', 'yes', ''), a list or a dict in YAML's one-line flow style ([64, 64],
    {}); a value's "|" and line breaks escaped (a table cell is one line)."""
    return _table(config, _yaml_text, _yaml_text)


def _table(config: dict, text_of, string_of=str) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\r", " ").replace("\n", " ")

    return "|param|value|\n|-|-|\n" + "\n".join(
        f"|{cell(str(k))}|{cell(string_of(v) if isinstance(v, str) else text_of(v))}|" for k, v in config.items())


def _yaml_text(value) -> str:
    """``value`` as config.yaml spells it (config.dump_yaml's dumper), a list or dict on one line. A bool, None,
    int or float, a list of them, and a string PyYAML writes plain (CartPole-v1), spelled here as PyYAML's
    SafeRepresenter does (a PPOConfig's fields but env_kwargs and the rare string it quotes), without PyYAML: a
    yaml.dump per cell made a PPOConfig's table 300x slower (5-7 ms), and a population builds one table per member."""
    kind = type(value)
    if kind is str and _PLAIN_STRING.fullmatch(value) and value not in _YAML_WORDS:
        return value  # CartPole-v1, cpu, ALE/Pong-v5, runs/x__1__t, m:C: plain, as config.yaml writes them
    if value is None or kind in (bool, int, float):
        return _yaml_scalar(value)
    if kind is list and all(item is None or type(item) in (bool, int, float) for item in value):
        return "[" + ", ".join(map(_yaml_scalar, value)) + "]"
    if kind is dict and not value:
        return "{}"
    return _yaml_dump_text(value)


#: a string PyYAML writes plain (unquoted) whatever it holds past its first letter: no indicator, space or ': '
_PLAIN_STRING = re.compile(r"[A-Za-z][A-Za-z0-9_./-]*(?::[A-Za-z0-9_./-]+)*")
#: ... unless it is one of the words YAML 1.1 reads as a bool or null (PyYAML's resolver), which it quotes
_YAML_WORDS = frozenset("yes Yes YES no No NO true True TRUE false False FALSE on On ON off Off OFF null Null NULL".split())


def _yaml_scalar(value) -> str:
    """A bool, None, int or float as SafeRepresenter writes it: true, null, 64, 0.00025, 1.0e-05, .inf, .nan; each
    of these plain texts resolves back to its own type, so PyYAML writes it untagged and unquoted."""
    if value is None:
        return "null"
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) is int:
        return str(value)
    if value != value:
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value).lower()  # SafeRepresenter.represent_float: 1e-05 -> 1.0e-05 (YAML 1.1 wants the point)
    return text.replace("e", ".0e", 1) if "." not in text and "e" in text else text


def _yaml_dump_text(value) -> str:
    """``value`` through config.dump_yaml's dumper (a string inside a list or dict quoted as config.yaml quotes
    it), on one line."""
    import yaml

    from . import config

    if config._DUMPER is None:
        config.dump_yaml({})  # builds config's dumper, whose quoting of number-like strings config.yaml has
    text = yaml.dump(value, Dumper=config._DUMPER, default_flow_style=True, sort_keys=False, width=1 << 30)
    return text.removesuffix("\n...\n").strip()  # a scalar document ends with "..."


def _same_table(config: dict, shown: Optional[str]) -> bool:
    """Whether ``shown`` (the last table a resume's kept events hold) is ``config``'s: in YAML's spelling, or in
    the Python reprs (True, None) or with its strings unquoted as an older Proxima wrote, so its unchanged fields
    get no second table."""
    return shown is not None and shown in (hyperparameters_table(config), _table(config, repr), _table(config, _yaml_text))


def _last_text(events, tag: str) -> Optional[str]:
    """The text of the last ``tag`` text summary among ``events`` (a resume's kept events, in file order:
    _drop_events_after's), None where there is none."""
    last, stored = None, f"{tag}/text_summary"  # the tag add_text's summary stores (torch's summary.text)
    for event in events:
        for value in event.summary.value:
            if value.tag == stored and value.tensor.string_val:
                last = value.tensor.string_val[0].decode("utf-8", "replace")
    return last


#: atomic.new_temp_file's name for a file it replaces: ``.NAME.<12 hex>.tmp``
_TEMP_NAME = re.compile(r"^\.(.+)\.[0-9a-f]{12}\.tmp$")


def _replaced_file(exc: OSError, default: Path) -> Path:
    """The run's file that ``exc`` failed on, for its line: a rewrite's temporary (truncate_csv, _drop_events_after:
    atomic_open) stands for the file it replaces, so ``chattr +i metrics.csv`` names metrics.csv, never
    ``.metrics.csv.<hex>.tmp``; ``default`` when ``exc`` names no file."""
    name = exc.filename2 or exc.filename  # os.replace(temp, target): the target
    if not name:
        return default
    path = Path(os.fsdecode(name))
    m = _TEMP_NAME.match(path.name)
    return path.with_name(m.group(1)) if m else path


class RunLogger:
    """Writes one TensorBoard scalar set and one CSV row per iteration; rank 0 only.

    ``flush_seconds``: 0 (a single run) hands each row and event to the OS as it is logged; more (a
    population, whose P loggers each log every iteration) at most that often per logger, with
    ``flush()`` called before every checkpoint and by ``close()``: a kill then loses at most that
    many seconds of rows, all logged after the last checkpoint, which a resume drops anyway.

    ``rolling`` (a run's and a population member's logger): each row gets ROLLING_RETURN, the
    RollingReturn of the rows logged so far (on resume rebuilt from the rows metrics.csv keeps), and
    the progress line shows it as the return; without it the column stays blank and the line shows
    the iteration's return.

    ``config`` (a run's fields, PPOConfig.to_dict()): written with the first row as the HYPERPARAMETERS text
    (TensorBoard's Text tab, CleanRL's markdown table) at step 0 of a new run; a resume writes it again at its step when
    it differs from the last one the kept events hold (a resume that changed a field: the table of step 0
    would otherwise stand for the whole run)."""

    def __init__(self, run_dir: Path, total_steps: int, resume_step: Optional[int] = None, progress: bool = True,
                 flush_seconds: float = 0.0, rolling: bool = False, config: Optional[dict] = None):
        self.run_dir = Path(run_dir)
        self.csv_path = self.run_dir / "metrics.csv"
        from .rundir import check_own_entries

        check_own_entries(self.run_dir, ("metrics.csv",))  # a link planted there would be appended to
        self._events = None
        self.flush_seconds = float(flush_seconds)
        self.rolling = RollingReturn() if rolling else None
        self.last_return = math.nan
        self._last_episodes = 0  # the episodes last_return's window held (the progress line's label)
        self._table = None  # (hyperparameters text, its step) until the first row writes it
        kept_events: list = []  # a resume's events up to its step, read once (the last table shown is among them)
        try:
            if resume_step is not None:  # what a killed run logged after its checkpoint goes (set_aside_logs
                kept = truncate_csv(self.csv_path, resume_step)  # has kept an abandoned timeline's already)
                if self.rolling is not None:  # the window an uninterrupted run would hold now (rows of an older
                    for row in kept:  # header too: their episodes and returns were logged the same way)
                        self.last_return = self.rolling.add_row(row)
                    self._last_episodes = self.rolling.episodes
                _, kept_events = _drop_events_after(self.run_dir, resume_step)
                wait_for_new_second(self.run_dir)
            self.run_dir.mkdir(parents=True, exist_ok=True)
            shown = _last_text(kept_events, HYPERPARAMETERS) if resume_step is not None and config is not None else None
            self._events = EventFile(self.run_dir)
            # written with the first row: a resume that fails before it leaves no file holding only the table
            if config is not None and not _same_table(config, shown):
                self._table = (hyperparameters_table(config), resume_step or 0)
            # a file killed before its header reached the disk is empty: it gets the header now
            new = not self.csv_path.exists() or self.csv_path.stat().st_size == 0
            self._csv_file = open(self.csv_path, "a+", newline="")  # readable: reopen_if_deleted copies it back
            self._csv = csv.writer(self._csv_file)
            if new:
                self._csv.writerow(CSV_COLUMNS)
                self._csv_file.flush()
        except OSError as e:
            self._abandon()  # a logger that failed to open is never closed
            raise write_error(_replaced_file(e, self.csv_path), e, "could not open the run's logs") from None
        except BaseException:  # a damaged log refused (RunDirError), a stop
            self._abandon()
            raise
        self._flush_due = time.monotonic() + self.flush_seconds
        self.run_sps = None  # global steps / the run's time, as of the last row that had a time
        self.bar = None
        if progress and not _is_terminal(sys.stderr):
            self.bar = LineProgress(total_steps, resume_step or 0, sys.stderr)
        elif progress:
            from tqdm import tqdm

            # exact steps (4,096/4,096, not unit_scale's 4.10k/4.10k) and one speed, the postfix's SPS: tqdm's own
            # rate (steps/s since its last frames, startup and evaluations included) read as a second, other SPS
            self.bar = tqdm(total=total_steps, initial=resume_step or 0, unit="step", dynamic_ncols=True,
                            file=sys.stderr, smoothing=0.1, mininterval=0.5, bar_format=BAR_FORMAT)

    def _abandon(self) -> None:
        if self._events is not None:
            try:
                self._events.close()
            except OSError:
                pass

    def log(self, iteration: int, global_step: int, metrics: dict) -> None:
        """metrics: name -> float (NaN = not measured this iteration, e.g. no episode finished); with
        ``rolling``, ROLLING_RETURN is set in ``metrics`` itself (a callback reading the row sees it) from
        its ``episodes`` and ``charts/episodic_return``; a row whose ``episodes`` is NaN (not measured: a
        diverged population member's, population_run._log_members) gets a blank one, as its other return
        cells are, not the window's mean from before, and leaves the window as it was."""
        if self.rolling is not None:
            count = metrics.get("episodes", 0)
            mean = self.rolling.add(count, metrics.get("charts/episodic_return", math.nan))
            metrics[ROLLING_RETURN] = math.nan if episodes_not_counted(count) else mean
        try:  # the CSV-only columns (time, episodes) have no "/"
            self._events.reopen_if_deleted()
            if self._table is not None:
                self._events.text(HYPERPARAMETERS, *self._table)
                self._table = None
            self._events.scalars(global_step, {name: value for name, value in metrics.items() if "/" in name})
        except OSError as e:
            raise write_error(self._event_file(), e, "could not write TensorBoard events") from None
        row = {"iteration": iteration, "global_step": global_step, **metrics}
        try:
            self._reopen_csv_if_deleted()
            self._csv.writerow([csv_cell(k, row.get(k, "")) for k in CSV_COLUMNS])
        except OSError as e:
            raise write_error(self.csv_path, e) from None
        if time.monotonic() >= self._flush_due:
            self.flush()
        ret = metrics.get(ROLLING_RETURN if self.rolling is not None else "charts/episodic_return", math.nan)
        if math.isfinite(ret):
            self.last_return = ret
            self._last_episodes = self.rolling.episodes if self.rolling is not None else 0
        elapsed = metrics.get("time")
        if isinstance(elapsed, (int, float)) and math.isfinite(elapsed) and elapsed > 0:
            # the report's throughput: steps over the run's time, evaluations and checkpoints included
            self.run_sps = global_step / elapsed
        if self.bar is not None:
            # the postfix before the update, which draws: else each frame showed the iteration before's.
            # The closing line is read as the run's speed: it shows the run's, not its last iteration's
            self.bar.set_postfix_str(self._postfix(metrics.get("charts/SPS", 0), final=global_step >= self.bar.total),
                                     refresh=False)
            self.bar.update(global_step - self.bar.n)

    def _postfix(self, sps: float, final: bool) -> str:
        # "-" until an episode has ended: no return is measured yet, and "nan" read as a run gone wrong
        shown = return_text(self.last_return) if math.isfinite(self.last_return) else "-"
        # the window named: --stop-return's note averages another (--stop-episodes), and two unlabelled
        # "returns" of one moment read as a contradiction. The episodes the mean is over, as report.md's
        # "(last 105 episodes)": 2 finished episodes are no "100 ep" mean, and a full window holds 100 to
        # 100 + its oldest iteration's episodes - 1 (whole iterations), 105 no "100 ep" either
        label = "return"  # before any episode ended: no window to name ("return -")
        if self.rolling is not None and self._last_episodes:
            label = f"return ({self._last_episodes:,} ep)"
        if final and self.run_sps is not None:
            return f"SPS {self.run_sps:,.0f} (run average) | {label} {shown}"
        return f"SPS {sps:,.0f} | {label} {shown}"

    def flush(self) -> None:
        """Hand every row and event logged so far to the OS (StorageError naming the file when it
        cannot be written): before a checkpoint, so a resume from it finds the rows it keeps."""
        try:
            self._csv_file.flush()
        except OSError as e:
            raise write_error(self.csv_path, e) from None
        try:
            self._events.flush()
        except OSError as e:
            raise write_error(self._event_file(), e, "could not write TensorBoard events") from None
        self._flush_due = time.monotonic() + self.flush_seconds

    def scalars(self, step: int, values: dict) -> None:
        """``values`` (tag -> number) as TensorBoard scalars at global step ``step``, no metrics.csv cell (a
        callback's own keys); a non-finite value is left out. StorageError naming the file when it cannot be written."""
        try:
            self._events.reopen_if_deleted()
            self._events.scalars(step, values)
        except OSError as e:
            raise write_error(self._event_file(), e, "could not write TensorBoard events") from None
        if time.monotonic() >= self._flush_due:
            self.flush()

    def text(self, tag: str, text: str, step: int) -> None:
        try:
            self._events.text(tag, text, step)
        except OSError as e:
            raise write_error(self._event_file(), e, "could not write TensorBoard events") from None
        if time.monotonic() >= self._flush_due:
            self.flush()

    def _reopen_csv_if_deleted(self) -> None:
        csv_file = reopen_if_deleted(self._csv_file, self.csv_path, "a+", newline="")
        if csv_file is not self._csv_file:
            self._csv_file, self._csv = csv_file, csv.writer(csv_file)

    def _event_file(self) -> Path:
        return self._events.path if self._events is not None else self.run_dir / "events.out.tfevents.*"

    def close(self) -> None:
        """Flush and close both files; a failure is raised (StorageError) after all were closed."""
        if self.bar is not None:
            if self.run_sps is not None:  # stopped early (--stop-return, Ctrl-C): its closing line too
                self.bar.set_postfix_str(self._postfix(0, final=True), refresh=False)
            self.bar.close()
        error = None
        # deleted since the last row (the final evaluation's time): written back before the handles go
        for what, restore, close in (("TensorBoard events", self._events.reopen_if_deleted, lambda: self._events.close()),
                                     ("metrics", self._reopen_csv_if_deleted, lambda: self._csv_file.close())):
            try:
                try:  # a failed restore is raised: the unlinked file's own close succeeds, its rows lost unsaid
                    restore()
                finally:
                    close()
            except OSError as e:
                error = error or write_error(self._event_file() if what != "metrics" else self.csv_path, e, f"could not write {what}")
        if error is not None:
            raise error
