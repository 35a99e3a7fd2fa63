"""Learning curves from run and population directories to an image: ``proxima plot RUN_DIR... --out FILE.png``.

Each run's ``metrics.csv`` (one row per iteration, written by proxima.logger) gives the metric
(default ``charts/episodic_return_100``, the rolling return of the last 100 or more finished episodes,
as the progress line and the report's table give it; ``charts/episodic_return``, the mean of one
iteration's few episodes, for runs logged before that column, with a note: default_metric) against ``global_step`` (``--x step``) or wall time in seconds
(``--x time``). Runs are grouped by the ``env_id`` of their ``config.yaml`` and by their settings
(preset and flags, the number of processes of meta.json's ``world_size``, ``--backend auto`` read as
the backend it built; seeds and devices do not split a group, nor do lengths under
``--no-anneal-lr``: with the default annealing, --total-timesteps sets the learning rate's schedule,
so another total is another setting; group_runs): a group of one run is drawn as its own line; a
group of several runs is drawn as the mean over runs (``--stat iqm``: the interquartile mean) with a
band (min-max by default, mean +- one standard deviation with ``--band std``, or a 95% bootstrap
confidence interval of the statistic with ``--band ci``; the legend says which), aligned as a
population's members are: at the steps the runs logged, each run's last value carried forward to
the last step it logged a row at (an iteration in which no episode ended logs no return, and the run
still counts), so the curve reaches the end of the group's longest run and only a run that trained
fewer steps drops out past its end (``mean of 3 runs (fewer past the shorter runs' end)``). A run of
the group with no value of the metric is skipped with a line and counted in the legend (``mean of 2
of 3 runs; 1 without values``). A band at a single x (one logged value) is drawn as an error bar.
Plain runs are drawn one panel per env (and metric), titled with the env, with one curve per group
(``--panels per-env``, the default: a bash-loop sweep, ``for lr in ...; do proxima train ... --lr $lr``, is
one chart), labelled by the settings that differ (``lr=0.001``, ``lr=0.001: mean of 3 runs``;
setting_groups: a group is one exact setting, and no two labels read alike; a value longer than a legend
entry holds is cut to its first 40 characters), in the order the runs are given; the bands' description
(``shaded: min-max over runs``) heads the legend, as a swatch would be one setting's colour. ``--panels per-setting`` draws one panel per group instead, titled with the env and
the settings that differ (group_runs). A title is wrapped to the panel's width; one past three lines
ends in `` ...`` and its whole text heads the panel's legend. Every line is fitted to the width the font
draws it at (fit_lines); a legend too big for its axes is drawn below them, the figure growing to hold it,
and text from the run's files is cut to LABEL_MAX_CHARS. Panels of one env and metric share their y-axis (a weak run beside a strong one is
seen as weaker) and their x-axis, their curves in different colours; another env or metric has its own scales. A run drawn alone is named in the legend, and a population in its panel's title, by
its directory's name (``.`` by the directory it is), or, where two given share a name (``a/run``,
``b/run``), by the paths as given.

A population directory (``proxima train --seeds/--sweep``, population_run.py) has one
curve per setting (a combination of swept values; all its seeds). With ``--panels per-env`` (the default)
populations of one env and metric are drawn in one panel, titled with the env, with that env's plain runs,
each population's curves named by it in the legend (``A: IQM, 95% CI (5 members)``, ``B: lr=0.001: IQM,
...``), so A and B (another --num-envs, network size, setting) are compared on one axis, each in its own
colour (merge_env_panels); a population alone for its env keeps a panel of its own, titled ``env: population
A``, as does each population under ``--panels per-setting``. Each curve is by default the IQM over the
setting's members at each x with a shaded 95% percentile-bootstrap confidence interval (members
resampled at each x, population_report.bootstrap_band, a fixed seed so the image is reproducible);
``--stat`` and ``--band`` choose others. A member's last value is carried forward to the last step
it logged a row at, so each curve ends where training did; where that or a gap was carried, the
legend's title says ``last value carried forward`` (with the CI's resamples: never beside a band's
swatch). The legend names the setting:
``lr=0.001: IQM, 95% CI (4 members)`` (``lr=0.001: IQM (1 member)``: one member has no CI, and no
band is drawn or listed). Past 10 settings each curve takes its own colour from a colormap and a
line style in turn (curve_styles), where matplotlib's cycle would repeat its colours. A population
whose every member diverged is a PlotError saying so. A member that diverged is left out of its
setting's curve, as the report's table leaves
it out, and so is a member without values of the metric yet (a population given alone too: an error
only when no member has one); the legend names them (``2 of 3 members; m001 diverged at iteration
4``). A setting's 95% CI of 2-4 members is marked ``†`` (``95% CI † (3 members)``), as the report
marks it: it covers well under its nominal 95% (a group of 2-4 plain runs' too: group_curve). ``A+A2`` (no path of that name; population_report.POOL_SEP, as
``proxima report A+A2`` splits it: pool_parts) is a pool of populations of one setting trained on other seeds,
read and checked as report checks it (read_plot_pool: report's line for a part that is no population, another
setting, a seed twice) and drawn as one population: one panel titled ``Fake-v0: A+A2, 2 populations pooled``,
each setting's curve over the union of its members (``(10 members)``; a member left out named ``A2/m000``);
``A A2`` draws them as two populations: overlaid in one panel of their env, a curve each named by its
population, under ``--panels per-env`` (the default), a panel each under ``--panels per-setting``. A member directory (``RUN/m000-seed1``) is
a plain run; one that diverged is drawn with a note saying when (population_report.member_divergence),
and one with no value to draw is the error line saying it diverged before logging one. Population and
plain run directories can be mixed. Of several directories, those that
are not PPO runs with the metric (an RLHF run, a folder without metrics.csv) or hold no value of it
(no episode finished yet) are skipped with a line; a run given alone is the error line instead.
On the command line, a path that does not exist or is a file is an error however many are given
(a typo, not a folder to skip), and so is a pool that ``proxima report A+A2`` refuses (pool_problem), and a folder that is no run but holds run directories (``plot runs``)
stands for them (expand_run_folders), in the order of the numeric settings that differ among them
(``lr=0.0001`` before ``lr=0.001``; sweep_order), else by name. ``plot_runs`` takes one directory (a
str or PathLike) as well as a list. ``--label DIR=NAME`` names DIR's curve in the legend;
``--dpi N`` sets a PNG's resolution; a PDF embeds TrueType fonts (no Type 3). ``--json FILE.json`` also
writes the numbers drawn (curves_document: per panel and curve its label, x, the line, the band's low and
high, the runs or members counted at each x), JSON as `proxima report --json` writes, and like it replacing
only an earlier file of its own (check_json_out); the image and it are renamed into place together.

Rows where a metric was not measured (an empty CSV cell, e.g. no episode finished in that
iteration) are skipped, and so is a last row a kill cut short; a line that is not a metrics row
(hand-edited: a stray quote, a cell too many or too few, a global_step that is empty or not a finite
number) is skipped with a note naming the file and the line; a global_step logged on more than one
row (rows appended again) is read from its last row, with a note naming the file. ``--smooth K``
applies a trailing moving average over K points per run before aggregating. Drawing uses
matplotlib's Agg canvas directly (no pyplot, no global backend switch), so it works headless and
inside notebooks alike. Every text is drawn as written (a ``$``
in an env id, a run name or --title is a dollar sign, never matplotlib mathtext), and a curve
matplotlib cannot draw is a PlotError like any other. The image is written atomically: on any
error no file is left behind. Run files are read without waiting on a FIFO planted at their name
and within rundir's size caps (read_run_bytes): metrics.csv past its cap is an error line, a
config.yaml that cannot be read a note (the env is then 'unknown').
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

import numpy as np

from .config import ProximaError, int_arg
from .logger import ROLLING_RETURN
from .terminal import printable

#: the curve drawn without --metric: the rolling training return (the mean of the last 100 or more
#: finished episodes), as the progress line and the report's table give it; charts/episodic_return
#: averages one iteration's few episodes and swings far (120-500 for a solved CartPole)
DEFAULT_METRIC = ROLLING_RETURN
#: what the default falls back to for runs logged before DEFAULT_METRIC existed (default_metric)
FALLBACK_METRIC = "charts/episodic_return"
X_COLUMNS = {"step": "global_step", "time": "time"}
X_LABELS = {"step": "global step", "time": "wall time (s)"}
BANDS = {"minmax": "min-max over runs", "std": "mean \u00b11 std (n-1) over runs", "ci": "95% bootstrap CI"}
STATS = {"mean": "mean", "iqm": "IQM"}
#: what a population's settings are drawn with unless --stat/--band say otherwise (groups of plain runs: mean, minmax)
POPULATION_DEFAULTS = {"stat": "iqm", "band": "ci"}
FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
#: --panels: how plain runs of one env that differ in settings are laid out (collect_panels); the first is the default
PANELS = {"per-env": "one panel per env (and metric), a curve per setting",
          "per-setting": "one panel per setting"}
#: a PNG's pixels per inch (--dpi): matplotlib's default, a 6.4-inch panel 640 pixels wide
DEFAULT_DPI = 100
#: the most --dpi takes: 1,200 dpi is past any print need, and three panels a row are then 23,040
#: pixels wide (~0.5 GB of canvas a row); far more exhausts memory before matplotlib's own limit
MAX_DPI = 1200

PathLike = Union[str, os.PathLike]


class PlotError(ProximaError, ValueError):
    """A user-fixable problem (missing or foreign run directory, empty metrics, unknown metric)."""


class UnknownMetric(PlotError):
    """--metric names no column of a run's metrics.csv (resolve_metric)."""


# ------------------------------------------------------------------------------------ reading
def check_run_dir(run_dir: PathLike) -> Path:
    """The run directory as a Path, or PlotError naming what is wrong with it."""
    path = Path(run_dir)
    if not path.exists():
        raise PlotError(f"{path}: no such directory")
    if not path.is_dir():
        raise PlotError(f"{path}: not a directory (give a run directory, e.g. runs/CartPole-v1__1__<time>)")
    from .rundir import recorded_kind, rlhf_run_line

    if recorded_kind(path / "meta.json") == "rlhf":  # its metrics have no episodes and no global_step to draw
        raise PlotError(rlhf_run_line(path))
    if not os.path.lexists(path / "metrics.csv"):  # one that is there but no file: read_metrics names it
        raise PlotError(f"{path}: not a run directory (no metrics.csv)")
    return path


def read_metrics(run_dir: PathLike) -> dict[str, np.ndarray]:
    """metrics.csv of a run as column name -> float64 array (NaN where a cell is empty or not a number).

    Column order is the CSV's. Each line is read on its own (logger.read_csv_lines, as a resume
    reads it): a row with fewer cells than the header on the last line (cut short by a kill) is not
    read, and a line that is not a metrics row (a hand-edited quote or cell: not CSV, a number of
    cells other than the header's, a global_step that is empty or not a finite number) is skipped with one note on stderr naming the file and the line
    (once per file and content: a report reads a run more than once), the rows around it read. Of
    rows that log one global_step, only the last is read (_last_row_per_step), with a note.
    Raises PlotError when the directory is not a run directory, the file is not CSV text (bytes
    that are not UTF-8, a header line the csv module refuses, an unreadable file: like an empty
    metrics.csv, one line for one run and a skipped run with a note among several, usable_runs) or
    it holds no whole row yet.
    """
    from .logger import line_numbers, note_skipped, read_csv_lines, whole_rows
    from .rundir import RunFileError

    path = check_run_dir(run_dir) / "metrics.csv"
    try:
        lines, bad = read_csv_lines(path)
        stat = path.stat()
    except RunFileError as e:  # over its size cap, or swapped for a FIFO since check_run_dir: the line names it
        raise PlotError(str(e)) from None
    except OSError as e:
        raise PlotError(f"{path}: cannot read ({e.strerror or e})") from None
    for b in bad:
        if b.not_utf8:
            raise PlotError(f"{path}: not a metrics.csv written by Proxima ({b.why})")
    first = min([n for n, _ in lines[:1]] + [b.line for b in bad], default=None)
    if first is None:
        raise PlotError(f"{path}: empty (no header; was the run started?)")
    if bad and bad[0].line == first:  # the header line itself
        raise PlotError(f"{path}: not a metrics.csv written by Proxima (line {first}, the header, is {bad[0].why})")
    header, numbered, skipped = whole_rows(lines, bad)  # a kill can cut the last row short ("9,46"): not read
    if "global_step" in header:  # Proxima writes a step on every row: one without is hand-edited, not "not measured"
        j = header.index("global_step")
        for n, r in numbered:
            why = _bad_step(r[j])
            if why:
                skipped[n] = why
    rows = [(n, r) for n, r in numbered if n not in skipped]
    if rows and "global_step" in header:
        rows = _last_row_per_step(path, stat, rows, header.index("global_step"))
    rows = [r for _, r in rows]
    if skipped and not rows:
        raise PlotError(f"{path}: no rows Proxima wrote ({line_numbers(sorted(skipped))} after the header "
                        f"{'is not a metrics row' if len(skipped) == 1 else 'are not metrics rows'})")
    if not rows:
        raise no_rows_error(path)
    if skipped:
        note_skipped(path, stat, skipped)
    columns: dict[str, np.ndarray] = {}
    for j, name in enumerate(header):
        columns[name] = np.array([_to_float(r[j]) for r in rows], dtype=np.float64)
    return columns


def no_rows_error(path: Path) -> PlotError:
    """The line for a metrics.csv with a header and no row: a run still in its first iteration (a live
    process holds its lock, or its population's) says so; one whose process is gone (killed or crashed in
    its first iteration) says it stopped, with the command eval and resume give (checkpoint.no_checkpoint_error)."""
    from .checkpoint import list_checkpoints, no_checkpoint_error
    from .population_report import member_population
    from .report import _in_progress

    run_dir = path.parent
    member = member_population(run_dir)
    live = _in_progress(member[0] if member is not None else run_dir)
    if live:
        return PlotError(f"{path}: no rows yet: the run is in progress ({live}) and has not finished its first iteration")
    if not list_checkpoints(run_dir):  # eval's and resume's words and command, not a copy of them
        stopped = str(no_checkpoint_error(run_dir)).removeprefix(f"{run_dir}: ")
        return PlotError(f"{path}: no rows (the run logged no iteration, and no process is training it): {stopped}")
    return PlotError(f"{path}: no rows (the run logged no iteration, and no process is training it)")


#: (file, mtime, size) of the metrics.csv files whose repeated steps have had their note
_NOTED_REPEATS: set = set()


def _last_row_per_step(path: Path, stat: os.stat_result, rows: list, j: int) -> list:
    """``rows`` ([(line number, cells)]) with one row per global_step (column ``j``), the last: a file
    with rows appended again (a copy, a hand merge; Proxima's own resume moves the rows it gives up
    to checkpoints/abandoned-*/) would count those steps' episodes twice and draw a sawtooth. One
    note on stderr names the file and the lines skipped, once per file content."""
    last = {float(r[j]): n for n, r in rows}
    if len(last) == len(rows):
        return rows
    from .logger import line_numbers

    dropped = [(n, float(r[j])) for n, r in rows if last[float(r[j])] != n]
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _NOTED_REPEATS:
        _NOTED_REPEATS.add(key)
        steps = sorted({s for _, s in dropped})
        span = f"{steps[0]:,.0f}" + (f" to {steps[-1]:,.0f}" if len(steps) > 1 else "")
        sys.stderr.write(printable(f"proxima: note: {path}: {len(steps)} global_step value(s) logged more than once "
                                   f"({span}); the last row of each is read, {line_numbers([n for n, _ in dropped])} "
                                   "skipped") + "\n")
    return [(n, r) for n, r in rows if last[float(r[j])] == n]


def _bad_step(cell: str) -> Optional[str]:
    """Why a global_step cell is no step (empty, not a number, NaN or infinite: the row has no place
    on the x axis), or None for a step."""
    if not cell.strip():
        return "no global_step"
    shown = repr(cell) if len(cell) <= 30 else repr(cell[:27]) + "..."
    try:
        value = float(cell)
    except ValueError:
        return f"global_step {shown} is not a number"
    return None if math.isfinite(value) else f"global_step {shown} is not a finite number"


def _to_float(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        return math.nan


def run_env_id(run_dir: PathLike) -> str:
    """env_id from the run's config.yaml (the model name for RLHF runs); 'unknown' if absent."""
    cfg = run_config(run_dir)  # {} when absent or unreadable (an alias, a YAML bomb, refused): 'unknown'
    for key in ("env_id", "model", "policy_model"):
        if cfg.get(key):
            return str(cfg[key])
    return "unknown"


def resolve_metric(name: str, available: Sequence[str], run_dir: Optional[PathLike] = None) -> str:
    """Exact column name, or a unique short form (``value_loss`` for ``losses/value_loss``).
    ``run_dir``: the run whose metrics.csv ``available`` was read from, which the error names (a
    damaged file's header may be all that is left of it); the line still starts with the metric,
    the usual cause being a --metric typo."""
    if name in available:
        return name
    short = [c for c in available if c.rsplit("/", 1)[-1] == name]
    if len(short) == 1:
        return short[0]
    where = f" in {Path(run_dir) / 'metrics.csv'}" if run_dir is not None else ""
    raise UnknownMetric(f"unknown metric {name!r}{where}; available: {_listed(available)}{_did_you_mean(name, available)}")


#: the most column names an unknown metric's line lists (a metrics.csv made elsewhere may have thousands)
LISTED_METRICS = 60


def _listed(available: Sequence[str]) -> str:
    """The columns of metrics.csv for an unknown metric's line, comma-separated: each cut to report's cell width
    (a damaged header's 120,000-character name printed a 132 KB line), the first LISTED_METRICS, then '+N more'."""
    from .report import _clip

    names = [_clip(c) for c in available[:LISTED_METRICS]]
    more = len(available) - LISTED_METRICS
    return ", ".join(names) + (f" (+{more} more)" if more > 0 else "")


def _did_you_mean(name: str, available: Sequence[str]) -> str:
    """``; did you mean 'losses/grad_norm'?`` for a --metric typo (difflib, as cli's other did-you-means), the full
    name or its short form matched; "" when nothing is close."""
    import difflib

    close = difflib.get_close_matches(name, list(available), n=1)
    if not close:  # a short form typed (gradnorm): matched against the columns' last parts
        short = {c.rsplit("/", 1)[-1]: c for c in available}
        close = [short[c] for c in difflib.get_close_matches(name, list(short), n=1)]
    from .report import _clip

    return f"; did you mean {_clip(close[0])!r}?" if close else ""


def check_metric_somewhere(run_dirs: Sequence[PathLike], metric: str) -> None:
    """UnknownMetric, one line, when not one of several run or population directories has ``metric``:
    a --metric typo, which would otherwise print a "skipping" note per run (each listing every
    column) before the same error. Returns as soon as one directory has it, or when one cannot be
    read (not a run, no metrics.csv yet): its own note says so where it is skipped."""
    from .population_report import PopulationError, is_population, read_settings

    first = None
    for d in run_dirs:
        try:
            if is_population(d):
                d = next(m for s in read_settings(d) for _, m in s.members if (m / "metrics.csv").is_file())
            columns = list(read_metrics(d))
            resolve_metric(metric, columns, d)
            return
        except UnknownMetric:
            first = first or (d, columns)
        except (PlotError, PopulationError, StopIteration):
            return
    d, columns = first
    raise UnknownMetric(f"unknown metric {metric!r}: none of the {len(run_dirs)} runs has it; available in "
                        f"{Path(d) / 'metrics.csv'}: {', '.join(columns)}{_did_you_mean(metric, columns)}")


def default_metric(run_dirs: Sequence[PathLike]) -> str:
    """The metric drawn without --metric: DEFAULT_METRIC, or FALLBACK_METRIC where one of ``run_dirs``
    (a population: its first member with a metrics.csv) has a metrics.csv without the DEFAULT_METRIC
    column (logged before it existed), with a note on stderr naming it: one metric for the whole figure,
    so that curves side by side measure the same. A directory that cannot be read is passed over: its
    own error or note comes where it is plotted."""
    from .population_report import PopulationError, is_population, read_settings

    for d in run_dirs:
        try:
            if is_population(d):
                d = next(m for s in read_settings(d) for _, m in s.members if (m / "metrics.csv").is_file())
            columns = read_metrics(d)
        except (PlotError, PopulationError, StopIteration, OSError):
            continue
        if DEFAULT_METRIC not in columns and FALLBACK_METRIC in columns:
            sys.stderr.write(printable(f"proxima: note: {d}: no {DEFAULT_METRIC} column (logged before Proxima kept "
                                       f"the rolling return); drawing {FALLBACK_METRIC}, the per-iteration return, "
                                       "for every curve") + "\n")
            return FALLBACK_METRIC
    return DEFAULT_METRIC


def load_curve(run_dir: PathLike, metric: Optional[str] = None, x: str = "step", smooth: int = 1,
               diverged: Optional[str] = None) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of one run's ``metric`` (None: default_metric, the rolling return): the rows where both are finite, sorted by x, y smoothed over ``smooth`` points
    (an inf value is left out with a note on stderr naming its row, as the report names it).
    ``diverged``: a population member's ``diverged at iteration N (...)`` (population_report.member_divergence),
    which the error for no values at all gives as the reason."""
    if x not in X_COLUMNS:
        raise PlotError(f"--x {x!r}: choose one of {', '.join(X_COLUMNS)}")
    return _curve_of(read_metrics(run_dir), run_dir, metric or default_metric([run_dir]), x, smooth, diverged)


def _curve_of(cols: dict, run_dir: PathLike, metric: str, x: str, smooth: int,
              diverged: Optional[str] = None) -> tuple[np.ndarray, np.ndarray]:
    """load_curve of the columns ``cols`` read from ``run_dir``'s metrics.csv."""
    name = resolve_metric(metric, list(cols), run_dir)
    # rows logged before the column (an older run, resumed) rebuilt, as the report's table has them; a run's own
    # blank cells (no episode yet) have no per-iteration return either, so a whole run is not rebuilt row by row
    if name == ROLLING_RETURN and (np.isnan(cols[name]) & np.isfinite(cols.get(FALLBACK_METRIC, np.nan))).any():
        from .report import _with_rolling_filled

        cols = _with_rolling_filled(cols)[0]
    xcol = X_COLUMNS[x]
    if xcol not in cols:
        raise PlotError(f"{Path(run_dir) / 'metrics.csv'}: no {xcol!r} column for --x {x}")
    xs, ys = cols[xcol], cols[name]
    keep = np.isfinite(xs) & np.isfinite(ys)
    infinite = np.flatnonzero(np.isfinite(xs) & np.isinf(ys))
    if infinite.size:  # no point to draw, as the report leaves an inf cell out: said, not dropped unsaid
        i = infinite[0]
        more = f" (and {infinite.size - 1} more)" if infinite.size > 1 else ""
        sys.stderr.write(printable(f"proxima: note: {Path(run_dir) / 'metrics.csv'}: {name} is {ys[i]:+} at "
                                   f"{xcol} {xs[i]:,.6g}{more}; left out of the curve") + "\n")
    if not keep.any():
        hint = BLANK_HINTS.get(name) or _eval_hint(run_dir, name, cols)
        if diverged:  # its rows are blank from then on: it will never log one, whatever the hint would guess
            hint = (f": this population member {diverged} before logging one, and its later rows are blank (but for "
                    "iteration, step, time and SPS)")
        raise PlotError(f"{Path(run_dir) / 'metrics.csv'}: no values of {name}{hint}")
    xs, ys = xs[keep], ys[keep]
    order = np.argsort(xs, kind="stable")
    return xs[order], moving_average(ys[order], smooth)


# why a column the logger writes holds no value at all (logger.py's docstring): the "no values of" line says so
BLANK_HINTS = {
    "charts/episodic_return": " (no episode finished yet?)",
    ROLLING_RETURN: " (no episode finished yet?)",
    "losses/vf_clipfrac": " (blank under --no-clip-vloss)",
    "charts/action_std": " (blank for discrete and multi-discrete actions)",
    "charts/action_clip_frac": " (blank for discrete and multi-discrete actions)",
    "charts/success_rate": (" (the env never reported info['is_success'] at an episode's end; native envs and "
                            "population members never do)"),
}


def _eval_hint(run_dir: PathLike, name: str, cols: Optional[dict] = None) -> str:
    """Why an ``eval/*`` column holds no value: only a run given --eval-every evaluates while it
    trains (its config.yaml's eval_every), and eval/success_rate stays blank after evaluations
    (eval/mean_return in ``cols``) whose episodes never reported info['is_success']; "" for other columns."""
    if not name.startswith("eval/"):
        return ""
    evaluated = (cols or {}).get("eval/mean_return")
    if name == "eval/success_rate" and evaluated is not None and np.isfinite(evaluated).any():
        return (" (the env never reported info['is_success'] at an evaluated episode's end; the run's evaluations "
                "are in eval/mean_return)")
    every = run_config(run_dir).get("eval_every")
    if isinstance(every, int) and not isinstance(every, bool) and every > 0:
        return f" (no evaluation yet: this run evaluates every {every:,} steps, --eval-every)"
    return " (the run was trained without --eval-every N, which logs eval/* every N steps)"


def moving_average(y: np.ndarray, k: int) -> np.ndarray:
    """Trailing moving average over ``k`` points (shorter windows at the start); same length as y."""
    y = np.asarray(y, dtype=np.float64)
    if k <= 1 or y.size == 0:
        return y
    c = np.cumsum(np.insert(y, 0, 0.0))
    idx = np.arange(1, y.size + 1)
    lo = np.maximum(idx - k, 0)
    return (c[idx] - c[lo]) / (idx - lo)


# ------------------------------------------------------------------------------------ aggregate
def aggregate(curves: Sequence[tuple[np.ndarray, np.ndarray]], band: str = "minmax",
              stat: str = "mean") -> dict[str, np.ndarray]:
    """A statistic and a band of several (x, y) curves on a common x grid.

    The grid is the union of the x values the curves have (the steps they logged: no point that no
    run logged, no logged extreme smoothed away), and a curve's value at x is its last value at or
    before x (carried forward, as the latest finished episodes' return is the run's return until it
    finishes more), so a run never drops out of the statistic for an iteration in which it finished
    no episode. Before a curve's first x and past its last it is missing: the statistic there is over
    the runs that are there (count). Groups of plain runs and a population's members are aligned
    alike, each curve ending at the last step its run logged a row at (_carried_to_end), so a group
    and a population of the same metrics.csv files draw the same curve. Returns dict(x, y, mean, lo,
    hi, n, count), arrays of shape (X,): y is ``stat`` over runs at each x ("mean", or "iqm": the
    interquartile mean, population_report.iqm_along); lo/hi are the min and max over runs
    (band="minmax"), the mean -+ the sample std (ddof 1; 0 where one run has a value) (band="std"), or the 95% percentile-bootstrap
    interval of ``stat`` over runs (band="ci", population_report.bootstrap_band: BOOTSTRAP_RESAMPLES
    resamples, numpy default_rng(0), so an image is reproducible; NaN, no band, where fewer than 2
    runs have a value); count is the number of runs at each x.
    """
    from .population_report import STATISTICS, bootstrap_band

    if band not in BANDS:
        raise PlotError(f"band {band!r}: choose one of {', '.join(BANDS)}")
    if stat not in STATISTICS:
        raise PlotError(f"stat {stat!r}: choose one of {', '.join(STATISTICS)}")
    if not curves:
        raise PlotError("no runs to aggregate")
    xs = [np.asarray(c[0], dtype=np.float64) for c in curves]
    ys = [np.asarray(c[1], dtype=np.float64) for c in curves]
    if all(x.shape == xs[0].shape and np.array_equal(x, xs[0]) for x in xs):
        grid = xs[0]
        stack = np.stack(ys)
    else:
        grid = np.unique(np.concatenate(xs))
        last = [np.searchsorted(x, grid, side="right") - 1 for x in xs]  # each curve's last x at or before the grid's
        stack = np.stack([np.where((i >= 0) & (grid <= x[-1]), y[np.maximum(i, 0)], np.nan)
                          for i, x, y in zip(last, xs, ys)])
    count = np.isfinite(stack).sum(axis=0)
    mean = np.nanmean(stack, axis=0)  # every grid point is some curve's own x: at least one run has a value
    if band == "minmax":
        lo, hi = np.nanmin(stack, axis=0), np.nanmax(stack, axis=0)
    elif band == "std":
        # the sample std (ddof 1), as `proxima report` gives across runs: the runs are a sample of seeds;
        # a point only one run reaches has no spread to show (0, not NaN)
        with np.errstate(invalid="ignore", divide="ignore"):
            std = np.where(count >= 2, np.nanstd(np.where(count >= 2, stack, 0.0), axis=0, ddof=1), 0.0)
        lo, hi = mean - std, mean + std
    else:
        lo, hi = bootstrap_band(stack, stat)
    y = mean if stat == "mean" else STATISTICS[stat](stack, axis=0)
    return {"x": grid, "y": y, "mean": mean, "lo": lo, "hi": hi, "n": np.int64(len(curves)), "count": count}


def _carried_to_end(xs: np.ndarray, ys: np.ndarray, end: float) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) with the last value carried on to ``end``, the last x its run logged a row at (any row:
    an iteration in which no episode ended logs a step but no return), so a run counts in aggregate
    to where its training ended, not to the last iteration it happened to finish an episode in."""
    if xs.size and end > xs[-1]:
        return np.append(xs, end), np.append(ys, ys[-1])
    return xs, ys


def _logged_end(cols: dict, x: str) -> float:
    """The last x (``--x``) a run's metrics.csv logged a row at; NaN when it has none."""
    logged = cols.get(X_COLUMNS[x], np.array([]))
    logged = logged[np.isfinite(logged)]
    return float(logged.max()) if logged.size else math.nan


#: config fields that tell the runs of one experiment apart without changing what is learned, or how:
#: runs that differ only in these (seeds, length, where and how they ran: device, threads, compilation,
#: CPU float and malloc settings) are drawn as one group. total_timesteps is one only under
#: ``anneal_lr: false`` (group_runs): annealing spreads the learning rate's decay over the whole total
RUN_ONLY_FIELDS = frozenset({"seed", "run_dir", "device", "threads", "progress", "plot", "checkpoint_every",
                             "checkpoint_minutes", "keep_checkpoints", "eval_episodes", "eval_every", "debug_checks",
                             "total_timesteps", "stop_return", "stop_episodes", "deterministic", "compile",
                             "compile_mode", "cudagraphs", "vector", "flush_denormal", "keep_host_memory"})


#: the config.yaml files run_config has said it cannot read: one note per file (it is read once per use)
_NOTED_CONFIGS: set = set()


def run_config(run_dir: PathLike) -> dict:
    """The run's config.yaml as a dict ({} when absent, unreadable, or holding a YAML alias). A
    FIFO at its name or a file over report.CONFIG_MAX_BYTES is unreadable too (never waited on or
    parsed: PyYAML takes about 10 s a megabyte), with one note on stderr naming it, as the curve is
    then labelled 'unknown'; plot_runs refuses such a file first (check_config_sizes)."""
    import yaml

    from .report import CONFIG_MAX_BYTES, parsed_yaml
    from .rundir import RunFileError, read_run_text

    path = Path(run_dir) / "config.yaml"
    try:  # parsed once per command (report.parsed_yaml): a curve's label and setting, the report's table
        cfg = parsed_yaml(path, read_run_text(path, CONFIG_MAX_BYTES))
    except RunFileError as e:
        if str(path) not in _NOTED_CONFIGS:
            _NOTED_CONFIGS.add(str(path))
            sys.stderr.write(printable(f"proxima: note: {e}; its config is not read (env 'unknown')") + "\n")
        return {}
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return {}
    return cfg if isinstance(cfg, dict) else {}


def check_config_sizes(run_dirs: Sequence[PathLike]) -> None:
    """PlotError with report.check_config_sizes's line (``RUN/config.yaml: 2,327,896 bytes, more than the 1,048,576 a
    run writes there; ...``) for the first config.yaml of ``run_dirs`` (a population's members' too) over
    report.CONFIG_MAX_BYTES, before any is parsed: one cap and one line for both commands."""
    from .report import ReportError
    from .report import check_config_sizes as check

    try:
        check(run_dirs)
    except ReportError as e:
        raise PlotError(str(e)) from None


def run_setting(run_dir: PathLike) -> dict:
    """What one run's curve is a repeat of, as group_runs compares runs: its config.yaml less env_id
    and RUN_ONLY_FIELDS, with

    - a field a PPO run's config.yaml lacks (one an older Proxima wrote, before the field) read as
      what that version ran as (config.ABSENT_MEANS): an older run is a repeat of today's run of the
      same setting, which records the field (``init_from: null``, ``encoder: mlp``);
    - ``init_from`` kept: a run fine-tuned from a checkpoint (the absolute file config.yaml records)
      is another setting than a fresh one, and than one fine-tuned from another checkpoint;
    - ``total_timesteps`` kept unless ``anneal_lr`` is false: annealing takes the learning rate to 0
      at the total, so runs of another total (a resume that extended it included) train with another
      rate at every step; without it only the length differs;
    - ``backend: auto`` replaced by the backend the run built (auto_setting_backend), so a run given
      no --backend and one given the backend auto picked for it are one setting;
    - ``processes``: meta.json's ``world_size`` (1 when absent), the torchrun processes it trained
      with (--nproc K: each iteration's batch K times larger, docs/distributed.md; a resume keeps it).
    """
    import copy

    from .config import ABSENT_MEANS, FIELDS
    from .rundir import _read_json_file

    cfg = run_config(run_dir)
    if "env_id" in cfg:  # a PPO run's (an RLHF run's config has other fields); after its own, as labels list them
        cfg = {**cfg, **{k: copy.deepcopy(v) for k, v in ABSENT_MEANS.items() if k not in cfg}}
    # an absent anneal_lr is the default (annealing on); any value but false may anneal, so the total counts
    anneal = cfg.get("anneal_lr", FIELDS["anneal_lr"].default) is not False
    setting = {k: v for k, v in cfg.items()
               if (k not in RUN_ONLY_FIELDS or (anneal and k == "total_timesteps")) and k != "env_id"}
    meta = _read_json_file(Path(run_dir) / "meta.json") or {}  # missing, unreadable or damaged: nothing recorded
    if setting.get("backend") == "auto":
        setting["backend"] = auto_setting_backend(cfg, meta.get("env_backend"))
    world = meta.get("world_size")
    setting["processes"] = world if isinstance(world, int) and not isinstance(world, bool) and world > 1 else 1
    return setting


def auto_setting_backend(cfg: dict, recorded) -> str:
    """The backend a run whose config.yaml says ``backend: auto`` built: meta.json's ``env_backend``
    (``recorded``), which every Proxima run writes and a resume cannot change (run_setup.resumed_backend);
    without one, what envs.auto_backend picks from the env id and env_kwargs alone; "auto" for an Atari
    game, whose auto depended on whether EnvPool was installed where it trained, not here."""
    if isinstance(recorded, str) and recorded:
        return recorded
    try:
        from .envs import atari, auto_backend

        env_id, kwargs = cfg.get("env_id"), cfg.get("env_kwargs")
        if isinstance(env_id, str) and atari.game_name(env_id) is None:
            return auto_backend(env_id, kwargs)
    except Exception:  # an id envs no longer takes (an older Atari id): left as recorded, never a crash of plot
        pass
    return "auto"


def group_runs(run_dirs: Iterable[PathLike]) -> dict[str, list[Path]]:
    """Group label -> its run directories, in the order given.

    Runs are grouped by env and by their exact settings (run_setting: the preset and flags, every
    config field but RUN_ONLY_FIELDS; total_timesteps too while anneal_lr is on; the number of
    processes; ``backend: auto`` as the backend it built), never by the label. The label is the env
    id, followed, when one env has several settings, by the first three fields that differ
    (``CartPole-v1 (lr=0.001, num_envs=8, gamma=0.98, ...)``, ``CartPole-v1 (processes=2)``); where
    two settings' labels would read alike, theirs name every field that differs, then its exact value
    (``lr=0.0010000001``), so each label is one setting's.
    """
    groups: dict[str, list[Path]] = {}
    for env, settings in setting_groups(run_dirs).items():
        for setting, members in settings:
            label = f"{env} ({setting})" if setting else env
            unique, n = label, 1
            while unique in groups:  # two envs whose labels read alike (an env id "X (a=1)"): still two curves
                n += 1
                unique = f"{label} [{n}]"
            groups[unique] = members
    return groups


def setting_groups(run_dirs: Iterable[PathLike]) -> dict[str, list[tuple[str, list[Path]]]]:
    """Env id -> [(setting label, its run directories)], envs and settings in the order their first
    run is given; group_runs's groups, the label without the env: ``lr=0.001`` (the fields that
    differ, _setting_labels), ``""`` where the env has one setting. What ``plot --panels per-env``
    draws as one panel per env with a curve per setting."""
    by_env: dict[str, list[Path]] = {}
    for d in run_dirs:
        by_env.setdefault(run_env_id(d), []).append(Path(d))
    out: dict[str, list[tuple[str, list[Path]]]] = {}
    for env, dirs in by_env.items():
        variants: dict[str, tuple[dict, list[Path]]] = {}  # exact settings -> (settings, runs)
        for d in dirs:
            setting = run_setting(d)
            variants.setdefault(_exact(setting), (setting, []))[1].append(d)
        labels = [""] if len(variants) == 1 else _setting_labels([v for v, _ in variants.values()])
        out[env] = [(label, members) for label, (_, members) in zip(labels, variants.values())]
    return out


_UNSET = object()  # a field one run's config.yaml lacks: unlike any value, None included


def _exact(value) -> str:
    """A value as a key that tells apart what reads alike (0.001 and 0.0010000001, 1 and 1.0, a
    missing field and null) and not what is alike (one mapping with its keys in another order)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_exact(v)}" for k, v in sorted(value.items(), key=lambda kv: repr(kv[0]))) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(_exact, value)) + "]"
    return "<unset>" if value is _UNSET else f"{type(value).__name__}:{value!r}"


def _setting_labels(variants: list[dict]) -> list[str]:
    """A distinct label per setting of one env (``lr=0.001, num_envs=8``): the first three fields that
    differ; the labels that read alike then name every field that differs; those still alike (%g
    rounds 0.0010000001 to 0.001) show the exact values. A field's name or value that no legend entry could
    hold whole is cut to its first VALUE_CHARS characters (_clip)."""
    differ = [k for k in dict.fromkeys(k for v in variants for k in v)
              if len({_exact(v.get(k, _UNSET)) for v in variants}) > 1]

    def label(v: dict, level: int) -> str:
        fields = differ if level > 1 else differ[:3]
        show = _short if level < 3 else repr
        # a run without anneal_lr has no total_timesteps in its setting (run_setting: any total groups): said of
        # the runs that anneal, never as the others' '(unset)', which reads as a total they did not set
        shown = ", ".join(f"{_clip(str(k))}=" + ("(unset)" if k not in v else _clip(show(v[k]))) for k in fields
                          if k in v or k != "total_timesteps")
        return f"{shown}{', ...' if len(fields) < len(differ) else ''}"

    levels = [1] * len(variants)
    while True:
        labels = [label(v, level) for v, level in zip(variants, levels)]
        alike = [i for i, text in enumerate(labels) if labels.count(text) > 1 and levels[i] < 3]
        if not alike:
            break
        for i in alike:
            levels[i] += 1
    seen: dict[str, int] = {}
    for i, text in enumerate(labels):  # alike even as exact values (a dict and its repr as a string): numbered
        seen[text] = seen.get(text, 0) + 1
        if labels.count(text) > 1:
            labels[i] = f"{text} [{seen[text]}]"
    return labels


#: characters kept of a field's value (or name) in a setting's label that is longer than a legend entry can
#: hold (ENTRY_CHARS * ENTRY_LINES): a 100 kB env_kwargs is then one line of the legend, not six that cover
#: the axes (and lines of 90 digits are wider than the panel); a shorter one is wrapped whole
VALUE_CHARS = 40


def _clip(text: str) -> str:
    """``text``, or its first VALUE_CHARS characters and ``... (100,012 characters)`` when a legend entry
    could not hold it whole."""
    if len(text) <= ENTRY_CHARS * ENTRY_LINES:
        return text
    return f"{text[:VALUE_CHARS]}... ({len(text):,} characters)"


def _short(value) -> str:
    """A config value as a population's labels show it (population_run.shown: ``none``, not ``None``),
    so the same setting reads the same in a group's legend and a population's."""
    from .population_run import shown

    if isinstance(value, list):
        return ",".join(map(shown, value))
    return shown(value)


def usable_runs(run_dirs: Sequence[PathLike], metric: str, strict: Optional[bool] = None,
                whole: bool = True) -> tuple[list[Path], str]:
    """(run directories that hold ``metric``, its resolved column name).

    Given one run (or ``strict``: the members of a population given alone), any problem is a
    PlotError. Given several, a directory that is not a PPO run with that metric (an RLHF run, a
    folder without metrics.csv) is skipped with a line on stderr, so ``proxima plot runs/*`` draws
    what it can; a PlotError only when none is left, and only that line when none has the metric
    (check_metric_somewhere). ``whole``: ``run_dirs`` are all the directories given (False: the plain
    runs among populations, which may hold the metric when none of these does: each is skipped with its line).
    """
    if strict is None:
        strict = len(run_dirs) == 1
    if strict and len(run_dirs) == 1:  # the error as it is, without a "skipping" line
        d = check_run_dir(run_dirs[0])
        return [d], resolve_metric(metric, list(read_metrics(d)), d)
    if not strict and whole:
        check_metric_somewhere(run_dirs, metric)
    kept, name, first_error = [], None, None
    for d in run_dirs:
        try:
            cols = list(read_metrics(check_run_dir(d)))
            this = resolve_metric(metric, cols, d)
            if name is not None and this != name:
                raise PlotError(f"{metric!r} means {this} here, {name} in the first run")
        except PlotError as e:
            if strict:
                raise
            first_error = first_error or e
            from .rundir import recorded_kind

            kind = recorded_kind(Path(d) / "meta.json")
            foreign = f" (a '{kind}' run, not PPO)" if kind not in ("ppo", "rlhf", "", None) else ""  # rlhf: the error says
            sys.stderr.write(printable(f"proxima: note: skipping {d}{foreign}: {e}") + "\n")
            continue
        kept.append(Path(d))
        name = this
    if not kept:
        raise first_error
    return kept, name


# ------------------------------------------------------------------------------------ curves
@dataclass
class Curve:
    """One drawn line, y over x, with an optional shaded band lo..hi (all (X,) float)."""

    label: str
    x: np.ndarray
    y: np.ndarray
    lo: Optional[np.ndarray] = None
    hi: Optional[np.ndarray] = None
    band_label: Optional[str] = None  # the band's own legend entry (None: the line's label covers it)
    note: Optional[str] = None  # how the panel's curves are made, for its legend's title (never beside a swatch)
    stat: Optional[str] = None  # what y is over runs or members (STATS key); None: one run's own values
    band: Optional[str] = None  # what lo..hi is (BANDS key); None: no band
    count: Optional[np.ndarray] = None  # (X,) int: the runs or members y is over at each x (--json)


class Panel(tuple):
    """A panel of collect_panels: the tuple (title, metric column, curves), and its env id (``env``),
    which draw_panels reads to put the panels of one env and metric on one y-scale."""

    env: Optional[str]

    def __new__(cls, title: str, metric: str, curves: list, env: Optional[str] = None):
        panel = super().__new__(cls, (title, metric, curves))
        panel.env = env
        return panel


def dir_name(d: PathLike) -> str:
    """A directory's name as its reader knows it: ``.``, ``..`` and ``runs/..`` have none of their own
    (Path(".").name is ""), so theirs is the directory they resolve to."""
    path = Path(d)
    if path.name not in ("", ".", ".."):
        return path.name
    return path.resolve().name or str(path.resolve())


def run_names(run_dirs: Sequence[PathLike]) -> list[str]:
    """A name per directory, told apart: their names (dir_name), or, when two share one (``a/run``
    and ``b/run``), every path as given, so no two columns, legends or panel titles read alike."""
    names = [dir_name(d) for d in run_dirs]
    if len(set(names)) == len(names):
        return names
    return [str(Path(d).resolve()) if Path(d).name in ("", "..") else str(d) for d in run_dirs]


def _uneven_note(count: np.ndarray, runs: int) -> str:
    """Where fewer than all ``runs`` are averaged, as the picture has it (count: runs per x): runs
    logged from different first x (wall time: each run's first iteration took its own time) are few
    at the start, runs of different lengths at the end."""
    full = np.flatnonzero(count >= runs)
    if full.size == len(count):
        return ""
    if full.size and full[0] == 0:
        return " (fewer past the shorter runs' end)"
    if full.size and full[-1] == len(count) - 1:
        return " (fewer before the later runs' start)"
    return " (fewer where the runs' ranges do not overlap)"


def group_curve(runs: Sequence[tuple[Path, tuple[np.ndarray, np.ndarray]]], stat: str = "mean", band: str = "minmax",
                names: Optional[dict] = None, ends: Optional[dict] = None, without: int = 0,
                label: Optional[str] = None, title: Optional[str] = None) -> Curve:
    """The curve of a group of plain runs: the run itself, or ``stat`` over several with a band,
    aligned as a population's members are (aggregate: the steps logged, each run's last value
    carried forward). ``names``: {directory: its label} (run_names); default its dir_name.
    ``ends``: {directory: the last x its metrics.csv logged a row at}, where its last value is
    carried to (default: its last value's x), so runs of one length are averaged to the end and
    only a run that trained fewer steps drops out. ``without``: the group's runs with no value of
    the metric (skipped with a line), which the label counts (``1 of 3 runs; 2 without values``) so
    the figure does not pass for all of them; with ``runs`` empty the curve is empty and its label
    says why. ``label``: the group's --label, in place of the run's name or before the statistic. Runs
    that are not all of distinct recorded seeds (a run and its copies) are counted so (``mean of 3
    runs, 1 seed``) and said on stderr (report's words: ``3 runs of seed 1: not a sample of seeds``),
    naming the group by ``label``, else ``title`` (its panel's). A 95% CI (``band="ci"``) of fewer than
    FEW_CI_MEMBERS runs is marked as a population's (``95% bootstrap CI of the IQM \u2020``), its ``note``
    saying why (``\u2020 < 5 runs: covers well under 95%``)."""
    from .population_report import FEW_CI_MEMBERS

    total = len(runs) + without
    counted = f"{len(runs)} of {total} runs; {without} without values" if without else f"{len(runs)} runs"
    if not runs:  # an entry in the legend, no line: the group is named, not dropped unsaid
        return Curve(f"{label + ': ' if label else ''}not drawn ({total} run{'s' if total > 1 else ''} without values)",
                     np.array([]), np.array([]))
    if len(runs) == 1:
        d, (xs, ys) = runs[0]
        shown = label or (names or {}).get(d) or dir_name(d)
        return Curve(f"{shown} ({counted})" if without else shown, xs, ys, count=np.ones(len(xs), dtype=np.int64))
    ends = ends or {}
    agg = aggregate([_carried_to_end(xs, ys, ends.get(d, math.nan)) for d, (xs, ys) in runs], band=band, stat=stat)
    uneven = _uneven_note(agg["count"], len(runs))
    seeds = _repeated_seeds([d for d, _ in runs])
    if seeds:  # a run and its resumed copies: their spread is float rounding, not across seeds (the report says so too)
        counted += f", {seeds[1]}"
        sys.stderr.write(printable(f"proxima: note: {label or title or dir_name(runs[0][0])}: {seeds[0]}") + "\n")
    band_label = f"95% bootstrap CI of the {STATS[stat]}" if band == "ci" else BANDS[band]
    note = None
    if band == "ci" and len(runs) < FEW_CI_MEMBERS:  # a population's \u2020 for the same n: covers well under 95%
        band_label, note = band_label + " \u2020", f"\u2020 < {FEW_CI_MEMBERS} runs: covers well under 95%"
    return Curve(f"{label + ': ' if label else ''}{STATS[stat]} of {counted}{uneven}", agg["x"], agg["y"], agg["lo"],
                 agg["hi"], band_label, note, stat, band, agg["count"])


def _repeated_seeds(run_dirs: Sequence[Path]) -> Optional[tuple[str, str]]:
    """(report._seeds_problem's sentence, the legend's count: ``1 seed``, ``2 seeds``, ``seeds not recorded``)
    when the runs' config.yaml seeds are not all recorded and distinct, else None."""
    from .report import _seeds_problem

    seeds = [run_config(d).get("seed") for d in run_dirs]
    problem = _seeds_problem(seeds)
    if not problem:
        return None
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in seeds):
        return problem, "seeds not recorded"
    return problem, f"{len(set(seeds))} seed{'s' if len(set(seeds)) != 1 else ''}"


#: band names as a population's legend says them, after the statistic: "IQM, 95% CI (16 members)"
BAND_SHORT = {"minmax": "min-max", "std": "mean \u00b11 std (n-1)", "ci": "95% CI"}


def population_curves(run_dir, metric: Optional[str] = None, x: str = "step", smooth: int = 1,
                      stat: str = "iqm", band: str = "ci", strict: bool = True) -> tuple[str, str, list[Curve]]:
    """(env id, resolved metric, one Curve per setting) of a population run directory (population_run.py),
    or of a population_report.Pool (``A+A2``, read_plot_pool): each setting's members are then those of
    every population pooled, named ``A2/m000`` where the legend names one;
    ``metric`` None: default_metric, the members' rolling return (each member's own window of 100 episodes).

    A setting's curve is ``stat`` over its members at each logged x (aggregate: a member's last
    value carried forward over the iterations in which it logged none, and on to the last x it
    logged a row at, _member_curve) with its band; its label names the setting, the statistic and
    the band where it has a value: ``lr=0.001: IQM, 95% CI (4 members)``, ``lr=0.001: IQM (1
    member)``, with ``, fewer before step S`` when some member has no value yet before S and ``,
    fewer past step S`` when some member's rows end at S (a member behind the others); the
    first drawn curve's ``note``, which draw_panels puts in the legend's title, says how they are made
    (``last value carried forward`` where a member's value was, _carries; diverged members left out;
    the CI's resamples and RNG), and is None when there is nothing to say. A
    population whose every member diverged is a PlotError saying so (every_member_diverged). A
    member that diverged (population.json, Setting.diverged) is left out whole, as the report's table leaves it
    out: its values before the divergence carried forward would stand for a member that no longer
    learns. A member without values of the metric yet is left out with a line on stderr (one whose
    metrics.csv cannot be read too, unless ``strict``: then its PlotError). The label names the
    members left out (``2 of 3 members; m001 diverged at iteration 4``); a setting none of whose
    members is left is an empty Curve whose label says why, so the legend still names it. PlotError
    when no setting has a member to draw (``strict``: the first member's own line, ``no values of
    ...``). A 95% CI of fewer than FEW_CI_MEMBERS members is marked ``95% CI †`` in its label, as the
    report marks its interval, and the band's legend entry says why.
    """
    from .population_report import (BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, FEW_CI_MEMBERS, MIN_CI_MEMBERS, Pool,
                                    PopulationError, every_member_diverged, parts_of, settings_of)

    parts = parts_of(run_dir)
    shown = run_dir.spelled if isinstance(run_dir, Pool) else run_dir  # A+A2, as the command line gave it
    try:
        settings = settings_of(run_dir)
    except PopulationError as e:
        raise PlotError(str(e)) from None
    # a pool's line names each population's population.json, which says when and why
    everyone = every_member_diverged(run_dir, settings)
    if everyone:
        raise PlotError(f"{shown}: no curve to draw: {everyone}")
    dirs = [d for s in settings for _, d in s.members]
    first = next((d for d in dirs if (d / "metrics.csv").is_file()), None)
    if first is None:
        raise PlotError(f"{shown}: no member has a metrics.csv yet (was the population started?)")
    # members share one logger's columns: an unknown metric fails once, not once per member
    name = resolve_metric(metric or default_metric(parts), list(read_metrics(first)), first)
    curves, not_drawn, missed, few, carried = [], [], [], False, False
    for s in settings:
        # member_name: a pooled member as A2/m000-seed6 (two populations' folders share m000), else its folder's name
        left = {s.member_name(d): s.diverged[s.member_name(d)] for _, d in s.members if s.member_name(d) in s.diverged}
        member_curves, logged = [], []
        for _, d in s.members:
            if s.member_name(d) not in left:
                xy = _member_curve(d, name, x, smooth, strict, missed)
                if xy is None:
                    left[s.member_name(d)] = "no values"
                else:
                    member_curves.append(_carried_to_end(*xy))
                    logged.append(xy[0])
        head = f"{s.label}: " if s.label else ""
        if not member_curves:  # an entry in the legend, no line: the setting is named, not dropped unsaid
            not_drawn.append(_left_out_note(left))
            curves.append(Curve(f"{head}not drawn ({not_drawn[-1]})", np.array([]), np.array([])))
            continue
        agg = aggregate(member_curves, band=band, stat=stat)
        carried = carried or _carries(logged, member_curves, agg["x"])
        full = np.flatnonzero(agg["count"] == len(member_curves))
        late = ""
        if full.size and full[0] > 0:  # from here on every member has a value (carried forward)
            late += f", fewer before {_at(agg['x'][full[0]], x)}"
        if full.size and full[-1] < len(agg["x"]) - 1:  # a member's rows end here: it is not carried past its end
            late += f", fewer past {_at(agg['x'][full[-1]], x)}"
        members = "member" if len(s.members) == 1 else "members"
        count = (f"{len(member_curves)} of {len(s.members)} {members}; {_left_out_note(left)}" if left
                 else f"{len(member_curves)} {members}") + late
        # one member has no CI (NaN throughout): the label names only what is drawn
        shown_band = f", {BAND_SHORT[band]}" if np.isfinite(agg["lo"]).any() else ""
        if shown_band and band == "ci" and len(member_curves) < FEW_CI_MEMBERS:  # the report's † for the same n
            shown_band, few = shown_band + " \u2020", True
        curves.append(Curve(f"{head}{STATS[stat]}{shown_band} ({count})", agg["x"], agg["y"], agg["lo"], agg["hi"],
                            stat=stat, band=band, count=agg["count"]))
    drawn = [c for c in curves if len(c.x)]
    if strict and missed and not drawn:  # given alone and no member has a value yet: the first one's own line, as before
        raise missed[0][1]
    for d, e in missed:
        sys.stderr.write(printable(f"proxima: note: leaving out {d}: {e}") + "\n")
    if not drawn:
        raise PlotError(f"{shown}: no member to draw (" + "; ".join(not_drawn) + ")")
    how = "; ".join(t for t, said in (("last value carried forward", carried),
                                      ("diverged members left out", any(s.diverged for s in settings))) if said)
    if band == "ci" and any(np.isfinite(c.lo).any() for c in drawn):
        how += (f"\n95% CI: {BOOTSTRAP_RESAMPLES} bootstrap resamples,\ndefault_rng({BOOTSTRAP_SEED}); none for < "
                f"{MIN_CI_MEMBERS} members")
        if few:
            how += f"\n\u2020 < {FEW_CI_MEMBERS} members: covers well under 95%"
    # how the panel's curves are made, once, in its legend's title: beside a swatch (the first setting's
    # band colour) it read as that band's label
    drawn[0].note = how.strip("\n") or None
    return run_env_id(first), name, curves


def _carries(logged: Sequence[np.ndarray], carried: Sequence[tuple[np.ndarray, np.ndarray]], grid: np.ndarray) -> bool:
    """Whether aggregate carried some member's last value forward: a member's curve (``carried``,
    _carried_to_end of the x it has a value at, ``logged``) reaches past its last value, or the
    ``grid`` has an x inside a member's range at which it logged no value (an iteration without a
    finished episode, steps or times the others logged)."""
    for xs, (cx, _) in zip(logged, carried):
        if len(cx) > len(xs):
            return True
        if not np.isin(grid[(grid >= xs[0]) & (grid <= xs[-1])], xs).all():
            return True
    return False


def _at(value: float, x: str) -> str:
    """An x as a legend says it: ``step 1,024`` or ``12.3 s``."""
    return f"step {value:,.0f}" if x == "step" else f"{value:.1f} s"


def _member_curve(member_dir: Path, metric: str, x: str, smooth: int, strict: bool,
                  missed: list) -> Optional[tuple[np.ndarray, np.ndarray, float]]:
    """A member's (x, y) (load_curve) and the last x it logged a row at (any row: an iteration without a
    finished episode has a step but no return), where _carried_to_end carries its last value on to, so a
    setting's curve ends where its members' training does, not at the last iteration one finished an episode.
    None when it has none to draw, its (member_dir, PlotError) appended to ``missed`` for the caller
    to say: a member with no value of the metric yet (a live population's member that has finished
    no episode) always; one whose metrics.csv is missing or cannot be read, or lacks the columns, only
    when not ``strict`` (when strict: the PlotError)."""
    cols = None
    try:
        cols = read_metrics(member_dir)
        return (*_curve_of(cols, member_dir, metric, x, smooth), _logged_end(cols, x))
    except PlotError as e:
        # read, with the columns, and no value yet: the others are drawn, as of several directories
        no_value_yet = cols is not None and metric in cols and X_COLUMNS[x] in cols
        if strict and not no_value_yet:
            raise
        missed.append((member_dir, e))
        return None


def _left_out_note(left: dict) -> str:
    """``m001 diverged at iteration 4; m002 no values``: the members a setting's curve leaves out and
    why, by the ``m<index>`` of their directory names (unique in a population; a pool's ``A-seeds6-10/m000``)
    and at most three a reason, so a legend line stays short; the report's table names them in full."""
    by_why: dict[str, list[str]] = {}
    for name, why in left.items():
        population, _, member = name.rpartition("/")
        by_why.setdefault(why, []).append(population + "/" * bool(population) + member.split("-")[0])
    return "; ".join(", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "") + f" {why}"
                     for why, names in by_why.items())


def unique_dirs(run_dirs: Sequence[PathLike]) -> list[Path]:
    """The directories as Paths, each once: one named twice (``RUN RUN``, ``RUN ./RUN``, a link to
    it) is one run, not two averaged with themselves. The first spelling given is kept."""
    seen, out = set(), []
    for d in run_dirs:
        try:
            key = Path(d).resolve()
        except (OSError, RuntimeError):  # a symlink loop ("Symlink loop from ..."): path_problem names it
            key = Path(os.path.abspath(d))
        if key not in seen:
            seen.add(key)
            out.append(Path(d))
    return out


def pool_parts(d: PathLike) -> list[Path]:
    """The directories the argument ``d`` stands for, split as `proxima report` splits it
    (population_report.pool_groups): [A, A2] of ``A+A2`` (a pool, drawn as one population); [d] of an
    argument that names a path (``+`` and all) or holds no ``+``; [A] of ``A+A`` (a directory named twice is
    that directory once); a population_report.Pool's directories (the pool `proxima report` read: its curve)."""
    from .population_report import Pool, pool_groups

    return list(d.dirs) if isinstance(d, Pool) else pool_groups([d])[0]


def read_plot_pool(parts: Sequence[Path], names: Sequence[str]):
    """The population_report.Pool of ``parts`` (pool_parts of ``A+A2``), each named ``names`` in the title and
    notes, checked as `proxima report A+A2` checks it: PlotError with report's line for a part that is no
    directory (path_problem), no population, or populations of other settings or with a seed twice (read_pool)."""
    from .population_report import read_pool
    from .report import ReportError

    for d in parts:
        problem = path_problem(d)
        if problem:
            raise PlotError(problem)
    try:
        return read_pool(list(parts), list(names))
    except ReportError as e:
        raise PlotError(str(e)) from None


def _pooled_dirs(run_dirs: Sequence[PathLike]) -> list[Path]:
    """The directories behind ``run_dirs``: each pool's (``A+A2``: A, A2), each other one itself."""
    return [p for d in run_dirs for p in pool_parts(d)]


def collect_panels(run_dirs: Sequence[PathLike], metric: Optional[str] = None, x: str = "step", smooth: int = 1,
                   band: Optional[str] = None, stat: Optional[str] = None,
                   labels: Optional[dict] = None, panels: str = "per-env") -> list[Panel]:
    """(title, metric column, curves) per panel (a Panel, which also holds its env id): of plain runs,
    ``panels="per-env"`` one per env, titled with it, with a curve per setting (setting_groups: the
    runs of one setting, seeds apart, are one curve), labelled by the fields that differ (``lr=0.001``,
    ``lr=0.001: mean of 3 runs``) in the order their first run is given, the band's description (a
    swatch would be one setting's colour) in the legend's title; ``"per-setting"`` one per setting
    (group_runs), titled ``env (lr=0.001)``; then one per population with a curve per setting, which
    ``"per-env"`` merges with the other panels of its env and metric (merge_env_panels). ``stat``/``band`` default to mean/minmax for groups of plain
    runs and to POPULATION_DEFAULTS (IQM with a 95% bootstrap CI) for populations. Of several
    directories, one that cannot be drawn is skipped with a line; a PlotError when none is left. A
    run that holds the metric but no value of it is skipped with a line and counted in its group's
    legend (``1 of 3 runs; 2 without values``; a group with none to draw: an empty panel whose
    legend says so), as a population's legend names its members left out. ``labels``: {directory:
    its legend name} (``--label DIR=NAME``): a run's own line, a group's statistic (``NAME: mean of
    3 runs``; the group's runs labelled alike) or a population's panel title. ``metric`` None: default_metric.
    A population_report.Pool among ``run_dirs`` (the pool a report read) is drawn as ``A+A2`` is, unread again.
    """
    from .population_report import Pool, is_population

    if panels not in PANELS:
        raise PlotError(f"--panels {panels!r}: choose one of {', '.join(PANELS)}")
    metric = metric or default_metric(_pooled_dirs(run_dirs))

    if x not in X_COLUMNS:
        raise PlotError(f"--x {x!r}: choose one of {', '.join(X_COLUMNS)}")
    # a Pool given stands as its spelling (A+A2), its directories its own (a name holding a + is not split again)
    read = {Path(d.spelled): d for d in run_dirs if isinstance(d, Pool)}
    args = unique_dirs([Path(d.spelled) if isinstance(d, Pool) else d for d in run_dirs])
    groups = [pool_parts(read.get(d, d)) for d in args]
    flat = [d for g in groups for d in g]
    # two a/run, b/run: their paths, as the report's columns; a pool's populations named among all, as report's
    names = dict(zip(flat, run_names(flat)))
    # A+A2: its Pool, read and checked first (a refused pool is an error, never skipped); A+A is A, once
    pools = {d: read.get(d) or read_plot_pool(g, [names[p] for p in g]) for d, g in zip(args, groups)
             if len(g) > 1 or d in read}
    paths = unique_dirs([d if d in pools else g[0] for d, g in zip(args, groups)])
    populations = [d for d in paths if d in pools or is_population(d)]
    plain = [d for d in paths if d not in populations]
    strict = len(paths) == 1
    given = {Path(k).resolve(): str(v) for k, v in (labels or {}).items()}
    label_of = {d: given.get(d.resolve()) for d in paths}
    if not strict and populations:  # usable_runs checks the plain runs among themselves
        check_metric_somewhere([p for d in paths for p in (pools[d].dirs if d in pools else [d])], metric)
    drawn: list[Panel] = []
    whose: dict = {}  # a population's panel (its index in drawn): the population's name, for merge_env_panels
    first_error: Optional[PlotError] = None
    if plain:
        try:  # each plain directory that cannot be drawn has had its line; none left is an error
            kept, name = usable_runs(plain, metric, strict=strict, whole=not populations)
        except PlotError as e:
            if not populations:
                raise
            kept, first_error = [], e
        curves, ends, without = {}, {}, set()
        from .population_report import member_divergence

        for d in kept:  # a run that holds the metric but no value of it (no episode finished yet): skipped too
            diverged = member_divergence(d)  # a member plotted on its own: frozen, which its curve does not show
            try:
                cols = read_metrics(d)
                curves[d] = _curve_of(cols, d, name, x, smooth, diverged)
                ends[d] = _logged_end(cols, x)
            except PlotError as e:
                if strict:
                    raise
                first_error = first_error or e
                sys.stderr.write(printable(f"proxima: note: skipping {d}: {e}") + "\n")
                without.add(d)  # not drawn, but one of its group's runs: the legend counts it
                continue
            if diverged:
                sys.stderr.write(printable(f"proxima: note: {d}: this population member {diverged}: frozen from then on, "
                                           "its later metrics.csv rows are blank (but for iteration, step, time and SPS) "
                                           "and its population's statistics and curves leave it out") + "\n")
        def curve_of(dirs: list, label: Optional[str], title: str) -> Curve:
            runs = [(d, curves[d]) for d in dirs if d in curves]
            return group_curve(runs, stat or "mean", band or "minmax", names, ends=ends, label=label, title=title,
                               without=sum(d in without for d in dirs))

        if panels == "per-setting":
            for title, dirs in group_runs(kept).items():
                drawn.append(Panel(title, name, [curve_of(dirs, _group_label(dirs, label_of), title)], run_env_id(dirs[0])))
        else:
            for env, settings in setting_groups(kept).items():
                drawn.append(Panel(env, name, [curve_of(dirs, _group_label(dirs, label_of) or setting or None,
                                                        f"{env} ({setting})" if setting else env)
                                               for setting, dirs in settings], env))
                if len(settings) > 1:
                    _band_in_title(drawn[-1][2])
    for d in populations:
        try:
            env, name, curves = population_curves(pools.get(d, d), metric, x, smooth, stat or POPULATION_DEFAULTS["stat"],
                                                  band or POPULATION_DEFAULTS["band"], strict=strict)
        except PlotError as e:
            if strict:
                raise
            first_error = first_error or e
            sys.stderr.write(printable(f"proxima: note: skipping {d}: {e}") + "\n")
            continue
        if d in pools:  # one population of every member: the title says it is pooled, the legend counts the union
            who = f"{label_of[d] or pools[d].name}, {len(pools[d].dirs)} populations pooled"
            title = f"{env}: {who}"
        else:
            who = label_of[d] or names[d]
            title = f"{env}: {label_of[d] or f'population {names[d]}'}"
        drawn.append(Panel(title, name, curves, env))
        whose[len(drawn) - 1] = who
    if not any(len(c.x) for _, _, cs in drawn for c in cs):  # only runs without values: nothing to draw
        raise first_error or PlotError("no run directories given")
    return merge_env_panels(drawn, whose) if panels == "per-env" else drawn


def merge_env_panels(drawn: list, whose: dict) -> list:
    """``--panels per-env``: the panels of one env and metric (plain runs' and populations') as one, titled
    with the env, so populations of one env (A vs B: another --num-envs, network, setting) are overlaid on
    one axis as plain runs' settings are, each curve in its own colour; a population's curves are named by
    it (``whose``: {panel index: its name}), ``A: IQM, 95% CI (4 members)``, ``A: lr=0.001: IQM, ...``.
    A panel alone for its env and metric is kept as it is (a population's titled ``env: population A``).
    The merged panel's legend title says each band and note once (_band_in_title)."""
    merged: list[Panel] = []
    for group in shared_panels(drawn):
        if len(group) == 1:
            merged.append(drawn[group[0]])
            continue
        curves = []
        for i in group:
            for c in drawn[i][2]:
                if i in whose:
                    c.label = f"{whose[i]}: {c.label}"
                curves.append(c)
        _band_in_title(curves)
        first = drawn[group[0]]
        merged.append(Panel(first.env, first[1], curves, first.env))
    return merged


def _band_in_title(curves: list) -> None:
    """A panel of several settings' curves says what their bands are once, in the legend's title
    (``shaded: min-max over runs``), not beside a swatch in one setting's colour; the curves' notes
    (a CI's \u2020 caveat) follow it, each once."""
    said = list(dict.fromkeys(c.band_label for c in curves if c.band_label))
    # line by line: two populations' notes share their CI's lines (merge_env_panels), said once
    notes = list(dict.fromkeys(line for c in curves if c.note for line in c.note.split("\n")))
    for c in curves:
        c.band_label = c.note = None
    if said:
        notes.insert(0, "shaded: " + "; ".join(said))
    curves[0].note = "\n".join(notes) or None


def _group_label(dirs: Sequence[Path], label_of: dict) -> Optional[str]:
    """The --label of a group of plain runs (one curve): the one its labelled runs share, or None;
    PlotError when two of its runs are labelled differently, since they are drawn as one line."""
    given = {d: label_of.get(d) for d in dirs if label_of.get(d)}
    if len(set(given.values())) > 1:
        a, la = next(iter(given.items()))
        b, lb = next((d, v) for d, v in given.items() if v != la)
        raise PlotError(f"--label: {a} and {b} are one curve (same env and settings) but labelled {la!r} and {lb!r}")
    return next(iter(given.values()), None)


# ------------------------------------------------------------------------------------ drawing
#: characters of a panel title's line at most (fit_lines then fits it to the axes' drawn width)
TITLE_CHARS = 56
TITLE_LINES = 3
#: characters of a line of the legend's title (the whole panel title, when the title is cut short) and entries
LEGEND_CHARS = 60
#: characters of a line of a curve's legend entry at most (fit_lines fits it to the legend's drawn width), and its lines
ENTRY_CHARS = 90
ENTRY_LINES = 6


def legend_entry(text: Optional[str]) -> Optional[str]:
    """A curve's label wrapped to ENTRY_CHARS, at most ENTRY_LINES lines, the last ending in `` ...``:
    one unwrapped line of a long setting's label (``env_kwargs={...}``) is wider than the figure, and
    the layout collapses the axes to make room for it. draw_panels then fits it to the panel's real width
    (fit_lines)."""
    if text is None or len(text) <= ENTRY_CHARS:
        return text
    return "\n".join(textwrap.wrap(text, ENTRY_CHARS, max_lines=ENTRY_LINES, placeholder=" ...",
                                   break_on_hyphens=False)) or text


#: characters kept of a text from the run's files (an env id, a run, member or --label name, a metric column)
#: drawn in a title, a legend or on an axis: its start, then '...' (report._clip, as report.md's cells). A
#: 5,000-character env id went whole into the legend's heading, wider than the figure ('constrained_layout not
#: applied'). As many as a legend entry holds (ENTRY_CHARS * ENTRY_LINES), as _clip keeps a setting's value
LABEL_MAX_CHARS = ENTRY_CHARS * ENTRY_LINES
#: lines of the legend's heading (the whole panel title, when the title is cut) at most
HEADING_LINES = 10
#: a legend taller than this fraction of its axes, or wider than half of them, is drawn below the axes:
#: inside them (loc="best") it covered the curves
LEGEND_INSIDE_HEIGHT = 0.4
#: points kept clear on each side of a legend below the axes, in its column of the figure
LEGEND_SIDE_PAD = 6
#: fewest characters a line is wrapped to (textwrap's " ..." needs room)
MIN_WRAP_CHARS = 12


def label_text(text: Optional[str]) -> Optional[str]:
    """``text`` from a run's files, drawable and cut to LABEL_MAX_CHARS (its start, then '...'); None stays None."""
    from .report import _clip

    return None if text is None else _clip(drawable(text), LABEL_MAX_CHARS)


def fit_lines(text: str, width_px: float, prop, renderer, chars: int, lines: int) -> str:
    """``text`` wrapped at its spaces into lines of at most ``chars`` characters that the font ``prop`` draws
    within ``width_px`` pixels as ``renderer`` measures them, at most ``lines`` of them (the last ending in
    `` ...`` when the text is longer): the panel's real width, where a count of characters alone overran it
    (90 'about fit' a panel, but not a legend inside the axes: '... m015 diver' ran off the figure)."""
    def widest(out: list) -> float:
        return max(renderer.get_text_width_height_descent(line, prop, ismath=False)[0] for line in out)

    width = max(chars, MIN_WRAP_CHARS)
    while True:
        out = textwrap.wrap(text, width, max_lines=lines, placeholder=" ...", break_on_hyphens=False) or [text]
        drawn = widest(out)
        if drawn <= width_px or width <= MIN_WRAP_CHARS:
            return "\n".join(out)
        width = max(MIN_WRAP_CHARS, min(width - 1, int(width * width_px / drawn)))


def drawable(text: Optional[str], lines: bool = False) -> Optional[str]:
    """``text`` without control characters (ESC, BEL, other non-printing codes), a whitespace one
    (a tab; a newline unless ``lines``) as a space: env ids, config values and run names come from
    the run's files, and the font has no glyph for them (matplotlib warns "Glyph 27 missing" for
    each and draws a box). None stays None (no legend entry)."""
    if text is None or text.isprintable():
        return text
    return "".join(c if c.isprintable() or (lines and c == "\n") else " " if c.isspace() else "" for c in text)


def wrap_title(text: str, width: int = TITLE_CHARS, lines: int = TITLE_LINES) -> str:
    """A panel title wrapped to the panel's width, at most ``lines`` lines, the last ending in
    `` ...`` when the text is longer: a long group label (env_kwargs) would print over the next panel."""
    out = textwrap.wrap(text, width, max_lines=lines, placeholder=" ...", break_on_hyphens=False)
    return "\n".join(out) if out else text


def _title_cut(text: str, width: int = TITLE_CHARS, lines: int = TITLE_LINES) -> bool:
    """Whether wrap_title leaves part of ``text`` out."""
    return len(textwrap.wrap(text, width, break_on_hyphens=False)) > lines


def _one_x_band(c: "Curve") -> bool:
    """A band at a single x (a group or setting with one logged value): drawn as an error bar, where it has one."""
    return len(c.x) == 1 and bool(np.isfinite(c.lo[0]) and np.isfinite(c.hi[0]))


#: matplotlib's default cycle has this many colours: a panel with more curves would draw two alike
CYCLE_COLOURS = 10
#: line styles taken in turn, past CYCLE_COLOURS curves, so neighbours in the colormap differ in style too
LINE_STYLES = ("-", "--", "-.", ":")


def curve_styles(n: int) -> list[dict]:
    """Keyword arguments of ax.plot for the ``n`` curves of a panel: {} each (matplotlib's colour
    cycle) up to CYCLE_COLOURS; past that the cycle repeats (lr=0.0001 and lr=0.002 both blue), so
    each curve takes its own colour from the turbo colormap sampled at ``n`` points, and a line style
    in turn, so no two legend entries look alike and a sweep's order reads as the colour's."""
    if n <= CYCLE_COLOURS:
        return [{} for _ in range(n)]
    from matplotlib import colormaps

    cmap = colormaps["turbo"]
    return [{"color": cmap(0.05 + 0.9 * i / (n - 1)), "linestyle": LINE_STYLES[i % len(LINE_STYLES)]} for i in range(n)]


def panel_styles(panels: list) -> list[list[dict]]:
    """curve_styles per panel, the panels of one env and metric (shared_panels) styled as one figure's
    curves: two runs or populations side by side take different colours, where each panel starting
    matplotlib's cycle afresh drew both in its first colour. A panel alone keeps curve_styles's."""
    styles: list[list[dict]] = [[] for _ in panels]
    for group in shared_panels(panels):
        counts = [len(panels[i][2]) for i in group]
        total = sum(counts)
        flat = curve_styles(total)
        if len(group) > 1 and total <= CYCLE_COLOURS:  # the cycle's colours, numbered on across the panels
            flat = [{"color": f"C{k}"} for k in range(total)]
        start = 0
        for i, n in zip(group, counts):
            styles[i], start = flat[start:start + n], start + n
    return styles


def shared_panels(panels: list) -> list[list[int]]:
    """Indices of ``panels`` grouped by (env id, metric column), in order: the panels whose values
    compare, drawn on one y-scale. A panel without an env (a plain tuple) is a group of its own."""
    groups: dict = {}
    for i, panel in enumerate(panels):
        env = getattr(panel, "env", None)
        groups.setdefault((env, panel[1]) if env is not None else ("", i), []).append(i)
    return list(groups.values())


def draw_panels(panels: list, x: str = "step", smooth: int = 1, title: Optional[str] = None):
    """The matplotlib Figure (Agg canvas, not saved) of collect_panels's ``panels``, up to three panels
    a row. Panels of one env and metric share their y-axis and number their colours on (a weak run
    beside a strong one, each on its own scale, looked as good, and both in the first colour);
    other envs or metrics keep their own scales. A curve's ``note`` (how the panel's curves are made)
    heads the legend, as the band_label of a curve whose band has no value (one member: no CI) does,
    instead of a swatch of nothing. Every text is fitted to its panel's laid-out width (fit_texts): a
    long legend goes below the axes, the figure growing to hold it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n = len(panels)
    fig = Figure(figsize=(6.4 * min(n, 3), 4.2 * math.ceil(n / 3)), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    renderer = fig.canvas.get_renderer()
    axes = fig.subplots(math.ceil(n / 3), min(n, 3), squeeze=False).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    for group in shared_panels(panels):
        for i in group[1:]:  # shared before drawing: autoscaling then spans every panel's data
            axes[i].sharey(axes[group[0]])
            axes[i].sharex(axes[group[0]])  # step 4,096 of one at the place of step 4,096 of the other
    texts = []
    for ax, (panel_title, metric_name, curves), styles in zip(axes, panels, panel_styles(panels)):
        notes = [drawable(c.note, lines=True) for c in curves if c.note]
        whole = {}  # a legend entry as first wrapped: its whole text, refitted once the panel's width is known
        for c, style in zip(curves, styles):
            label = label_text(c.label)
            whole[legend_entry(label)] = label
            line, = ax.plot(c.x, c.y, lw=1.6 if c.lo is None else 1.8, label=legend_entry(label),
                            marker="o" if len(c.x) == 1 else None, **style)
            band_label = drawable(c.band_label, lines=True)  # its own line breaks are the layout's
            if c.lo is not None and len(c.x) and not (np.isfinite(c.lo).any() and np.isfinite(c.hi).any()):
                if band_label:
                    notes.append(band_label)
            elif c.lo is not None and _one_x_band(c):  # fill_between over one x has no width: nothing drawn
                ax.errorbar(c.x, (c.lo + c.hi) / 2, yerr=np.abs(c.hi - c.lo) / 2, fmt="none", ecolor=line.get_color(),
                            alpha=0.6, lw=2, capsize=6, label=band_label)
            elif c.lo is not None:
                ax.fill_between(c.x, c.lo, c.hi, color=line.get_color(), alpha=0.25, lw=0, label=band_label)
        # every text is drawn as written, never as $mathtext$: env ids, config values, run and member
        # names and metric names come from the run's files, where a "$" would be parsed (and could fail)
        full = label_text(panel_title if title is None else (f"{title}: {panel_title}" if n > 1 else title))
        ax.set_title(wrap_title(full), parse_math=False)  # for the first layout: fitted to the axes after it
        ax.set_xlabel(X_LABELS[x], parse_math=False)
        ylabel = label_text(metric_name) + (f" (moving average, {smooth})" if smooth > 1 else "")
        # along the axes' height, before the first layout (a legend below takes height from it)
        ax.set_ylabel(fit_lines(ylabel, 0.55 * fig.bbox.height / math.ceil(n / 3), ax.yaxis.label.get_fontproperties(),
                                renderer, ENTRY_CHARS, 2), parse_math=False)
        ax.grid(True, alpha=0.3)
        texts.append((full, notes, whole))
    fig.get_layout_engine().execute(fig)  # lays the axes out: their widths are what the titles and legends fit
    columns = min(n, 3)
    below = [fit_texts(ax, renderer, *panel_texts, (i % columns, columns))
             for i, (ax, panel_texts) in enumerate(zip(axes, texts))]
    rows = math.ceil(n / 3)
    extra = sum(max(below[r * 3:(r + 1) * 3]) for r in range(rows))
    if extra:  # the axes keep their height: the figure grows by the legends drawn below them
        fig.set_size_inches(fig.get_figwidth(), fig.get_figheight() + extra / fig.dpi)
    return fig


def fit_texts(ax, renderer, full: str, notes: list, whole: dict, column: tuple[int, int]) -> float:
    """Fit ``ax``'s title (``full``, the whole of it) and legend (the entries' ``whole`` texts, the ``notes``
    heading it) to the laid-out figure: the title to the axes' width in up to TITLE_LINES lines, its whole text
    heading the legend when cut; the legend inside the axes (loc="best") when it takes at most half their width
    and LEGEND_INSIDE_HEIGHT of their height, else below the x-axis's label, as wide as the panel's ``column``
    (its index, the figure's columns). Returns the pixels the figure grows by for a legend below (0: inside)."""
    from matplotlib import rcParams
    from matplotlib.font_manager import FontProperties
    from matplotlib.transforms import ScaledTranslation, blended_transform_factory

    shown = fit_lines(full, ax.bbox.width - 2, ax.title.get_fontproperties(), renderer, TITLE_CHARS, TITLE_LINES)
    ax.set_title(shown, parse_math=False)
    small = FontProperties(size="small")
    em = renderer.points_to_pixels(small.get_size_in_points())
    handles, labels = ax.get_legend_handles_labels()
    cut = " ".join(shown.split()) != " ".join(full.split())  # a title cut short keeps its whole text above the curves

    def fit(text: str, px: float, chars: int, most: int) -> str:  # its own line breaks kept (a band's label, a note)
        return "\n".join(fit_lines(part, px, small, renderer, chars, most) if part else part
                         for part in text.split("\n"))

    def legend(width: float, **where):
        frame = 2 * rcParams["legend.borderpad"] * em + 4
        entry_px = width - frame - (rcParams["legend.handlelength"] + rcParams["legend.handletextpad"]) * em
        heading = [fit(full, width - frame, LEGEND_CHARS, HEADING_LINES)] if cut else []
        heading = "\n".join(heading + [fit(note, width - frame, LEGEND_CHARS, HEADING_LINES) for note in notes]) or None
        drawn = ax.legend(handles, [fit(whole.get(t, t), entry_px, ENTRY_CHARS, ENTRY_LINES) for t in labels],
                          fontsize="small", title=heading, title_fontsize="small", **where)
        for text in [*drawn.get_texts(), drawn.get_title()]:  # before it is measured: "$" is no mathtext
            text.set_parse_math(False)
        return drawn

    box = legend(ax.bbox.width - 2 * rcParams["legend.borderaxespad"] * em, loc="best")
    size = box.get_window_extent(renderer)
    grow = 0.0
    if size.width > ax.bbox.width / 2 or size.height > LEGEND_INSIDE_HEIGHT * ax.bbox.height:
        fig = ax.figure
        drop = ax.bbox.y0 - ax.xaxis.get_tightbbox(renderer).y0  # the tick labels and the axis label
        i, columns = column  # centred in the panel's column of the figure, not under the axes (off-centre: y label)
        under = blended_transform_factory(fig.transFigure, ax.transAxes) + ScaledTranslation(0, -drop / fig.dpi,
                                                                                          fig.dpi_scale_trans)
        box = legend(fig.bbox.width / columns - 2 * renderer.points_to_pixels(LEGEND_SIDE_PAD), loc="upper center",
                     bbox_to_anchor=((i + 0.5) / columns, 0), bbox_transform=under)
        grow = box.get_window_extent(renderer).height + rcParams["legend.borderaxespad"] * em
    return grow


def plot_runs(run_dirs: Sequence[PathLike], out: PathLike, metric: Optional[str] = None, x: str = "step",
              smooth: int = 1, band: Optional[str] = None, title: Optional[str] = None, stat: Optional[str] = None,
              dpi: int = DEFAULT_DPI, labels: Optional[dict] = None, panels: str = "per-env",
              quiet: bool = False, json_out: Optional[PathLike] = None) -> Path:
    """Draw ``metric`` (None: default_metric, the rolling return) against ``x`` ("step" or "time") for
    the runs; write the image to ``out``.

    ``run_dirs``: directories, or one directory (a str or PathLike). Plain runs are drawn one panel per
    env with a curve per setting (``panels="per-env"``; ``"per-setting"``: a panel per setting;
    collect_panels); several runs of one setting (seeds apart) are drawn as ``stat`` (default mean) +
    ``band`` (default min-max), to the end of the group's longest run. A population directory has one curve per setting:
    ``stat`` (default IQM) over its members + ``band`` (default the 95% bootstrap CI), in its env's panel (``"per-env"``,
    one panel for every population and run of an env) or a panel of its own (``"per-setting"``). Of several directories, those that are not
    PPO runs holding values of the metric are skipped with a line (usable_runs, collect_panels). The format follows the suffix
    (.png, .svg, .pdf); ``dpi``: a PNG's pixels per inch. A PDF embeds its fonts as TrueType (Type 42),
    never Type 3, which conference PDF checks refuse. ``labels``: {directory given: its legend name}
    (collect_panels). ``quiet``: no note on stderr of a curve drawn as a single point (a report's own
    quiet). ``json_out``: also write the numbers drawn there (curves_document; check_json_out), the two
    files renamed into place together once both are written. Returns the written path. Raises PlotError
    (nothing written) for a missing or foreign run directory, empty metrics or an unknown metric.
    """
    from .population_report import STATISTICS, Pool

    if isinstance(run_dirs, (str, os.PathLike, Pool)):  # one directory, not its characters ('r', 'u', 'n', ...)
        run_dirs = [run_dirs]
    if not run_dirs:
        raise PlotError("no run directories given")
    if smooth < 1:
        raise PlotError(f"--smooth {smooth}: must be at least 1")
    if isinstance(dpi, bool) or not isinstance(dpi, int) or not 1 <= dpi <= MAX_DPI:
        raise PlotError(f"--dpi {dpi}: must be a whole number from 1 to {MAX_DPI}")
    for d in labels or {}:
        if Path(d).resolve() not in {Path(r).resolve() for r in run_dirs}:
            raise PlotError(f"--label {d}=...: {d} is not one of the directories plotted")
    if band is not None and band not in BANDS:
        raise PlotError(f"--band {band!r}: choose one of {', '.join(BANDS)}")
    if stat is not None and stat not in STATISTICS:
        raise PlotError(f"--stat {stat!r}: choose one of {', '.join(STATISTICS)}")
    if panels not in PANELS:
        raise PlotError(f"--panels {panels!r}: choose one of {', '.join(PANELS)}")
    out = Path(out)
    fmt = FORMATS.get(out.suffix.lower())
    if fmt is None:
        raise PlotError(f"{out}: unsupported image type {out.suffix or '(no suffix)'!r}; use {', '.join(FORMATS)}")
    from .diskspace import path_problem

    problem = path_problem(out, example="curve.png")
    if problem:
        raise PlotError(f"--out {out}: {problem}")
    if json_out is not None:
        json_out = Path(json_out)
        check_json_out(json_out, _pooled_dirs(run_dirs))
    check_config_sizes(_pooled_dirs(run_dirs))  # before the labels parse any (a 2 MB one takes 20 s)
    if metric is None:
        metric = default_metric(_pooled_dirs(run_dirs))
    # read and check everything before drawing, so an error leaves no file behind
    drawn = collect_panels(list(run_dirs), metric, x, smooth, band, stat, labels, panels)
    for panel_title, metric_name, curves in ([] if quiet else drawn):  # one value is no line: drawn as a marker, and said
        for c in curves:
            if len(c.x) == 1:
                who = f"{panel_title}" + (f" ({c.label})" if len(curves) > 1 and c.label else "")
                band = ", its band as an error bar" if c.lo is not None and _one_x_band(c) else ""
                # the panel title and label hold the run's env id and config values: no escape reaches the terminal
                sys.stderr.write(printable(f"proxima: note: {who}: only one logged value of {metric_name} ({c.y[0]:g} at "
                                           f"{X_LABELS[x]} {c.x[0]:,g}), drawn as a single point{band}; a longer run draws "
                                           f"a curve") + "\n")

    fig = draw_panels(drawn, x, smooth, title)
    import io
    import json

    from matplotlib import rc_context

    from .atomic import write_atomic
    from .report import ReportError, Staging

    image = io.BytesIO()
    target = out
    try:
        try:
            # TrueType fonts in a PDF/EPS (matplotlib's default is Type 3, which IEEE/ACM checks reject);
            # a context, not rcParams, so a notebook's own settings are left as they were
            with rc_context({"pdf.fonttype": 42, "ps.fonttype": 42}):
                fig.savefig(image, format=fmt, dpi=dpi)
        except (ValueError, OverflowError, RuntimeError) as e:  # matplotlib could not draw it (no file is left):
            why = ([ln.strip() for ln in str(e).splitlines() if ln.strip()] or [type(e).__name__])[-1]  # report: "No curve"
            raise PlotError(f"{out}: could not draw the curve ({why})") from None
        # both files under temporary names, renamed into place once both are written: never a new
        # --json beside an old image (or the reverse), and on any error neither is replaced
        with Staging() as staging:
            for target, data in ([(json_out, json.dumps(curves_document(drawn, x, smooth), indent=2,
                                                        allow_nan=False) + "\n")] if json_out is not None else []) + [
                    (out, image.getvalue())]:
                target.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(staging.reserve(target), data)
            staging.publish()
    except OSError as e:  # disk full, read-only folder: one line naming the file and the free space
        from .diskspace import describe

        error = PlotError(describe(target, e))
        error.errno = e.errno  # the CLI's hint for a default --out in a folder the user may not write
        raise error from None
    except ReportError as e:  # a rename that failed: the line names its file
        raise PlotError(str(e)) from None
    return out


#: the --json file's generator: an existing file at --json is replaced only when it says this (check_json_out)
JSON_GENERATOR = "proxima plot"
JSON_SCHEMA = 1


def json_out_problem(path: Path, run_dirs: Sequence[PathLike], generator: str, holds: str, example: str,
                     foreign: str) -> Optional[str]:
    """The line why a --json FILE.json cannot be written at ``path``, or None: not a .json file (``holds``: what it
    would hold, ``the curves' numbers``), a directory or under a file (diskspace.path_problem), a name a run writes
    (rundir.RUN_ENTRIES: eval.json, meta.json, population.json, diverged.json...) in one of ``run_dirs`` or a folder
    right under one (a member), or in any other run or population directory (a meta.json or population.json, or a
    config.yaml beside checkpoints/) or a member of one, existing or not: the run would read it as its own or replace
    it (``example``: the name to give instead); or an existing file whose ``generator`` is not ``generator``
    (``foreign``: the advice after ``exists and is not a file `proxima plot --json` wrote``): an earlier export is replaced, nothing else is.
    plot's and report's check_json_out, each raising its own error with it."""
    import json

    from .diskspace import path_problem
    from .rundir import RUN_ENTRIES, TEXT_MAX_BYTES, RunFileError, read_run_text

    if path.suffix.lower() != ".json":
        return f"--json {path}: not a .json file; give FILE.json ({holds} as JSON)"
    problem = path_problem(path, example=example)
    if problem:
        return f"--json {path}: {problem}"
    if path.name.lower() in {name.lower() for name in RUN_ENTRIES}:  # lower: a case-insensitive disk is one name
        folder = os.path.realpath(path.parent)

        def a_run(d: str) -> bool:  # any run or population, plotted or not: it would read the file as its own
            marks = [n for n in ("meta.json", "population.json") if n != path.name.lower()]  # not an earlier export
            return (any(os.path.lexists(os.path.join(d, n)) for n in marks)
                    or (os.path.lexists(os.path.join(d, "config.yaml")) and os.path.isdir(os.path.join(d, "checkpoints"))))

        tops = {os.path.realpath(d) for d in run_dirs}
        if (folder in tops or os.path.dirname(folder) in tops or a_run(folder)
                or os.path.lexists(os.path.join(os.path.dirname(folder), "population.json"))):
            return (f"--json {path}: {path.name} is a file Proxima writes in a run directory ({path.parent}); "
                    f"give another FILE.json (e.g. {path.parent / example})")
    if os.path.lexists(path):
        try:
            doc = json.loads(read_run_text(path, TEXT_MAX_BYTES))
        except (RunFileError, OSError, ValueError):
            doc = None
        if not (isinstance(doc, dict) and doc.get("generator") == generator):
            return f"--json {path}: exists and is not a file `{generator} --json` wrote{foreign}"
    return None


def check_json_out(path: Path, run_dirs: Sequence[PathLike] = ()) -> None:
    """PlotError when --json cannot hold the curves' numbers at ``path`` (json_out_problem, as `proxima report
    --json` refuses its file): an existing file that is not an earlier `proxima plot --json` file
    (JSON_GENERATOR) is never overwritten."""
    problem = json_out_problem(path, run_dirs, JSON_GENERATOR, "the curves' numbers", "curves.json",
                               "; give another FILE.json (or remove it)")
    if problem:
        raise PlotError(problem)


def _numbers(values: Optional[np.ndarray], n: int) -> list:
    """An array as strict JSON's list (report.strict_json: NaN and +-inf as null); ``values`` None: ``n`` nulls."""
    from .report import strict_json

    return [None] * n if values is None else strict_json(np.asarray(values, dtype=np.float64))


def curves_document(panels: list, x: str, smooth: int) -> dict:
    """The --json file: exactly what draw_panels draws from collect_panels's ``panels``, per panel its
    title, env and metric column, per curve its legend label, ``stat`` (mean, iqm; null: one run's own
    values), ``band`` (minmax, std, ci; null: none), and lists of one length: ``x`` (global_step or
    seconds), ``y`` (the line), ``low``/``high`` (the band; null where it has none: a CI of one
    member) and ``count`` (the runs or members ``y`` is over at that x). How a CI is made is
    said once (``ci``; null when no curve's band is one)."""
    from . import __version__
    from .population_report import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CI_LEVEL, MIN_CI_MEMBERS
    from .report import strict_json

    out = []
    for panel in panels:
        title, column, curves = panel
        rows = []
        for c in curves:
            n = len(c.x)
            rows.append({"label": c.label, "stat": c.stat, "band": c.band if c.lo is not None else None,
                         "x": _numbers(c.x, n), "y": _numbers(c.y, n), "low": _numbers(c.lo, n),
                         "high": _numbers(c.hi, n),
                         "count": strict_json(c.count) if c.count is not None else [1] * n})
        out.append({"title": title, "env_id": getattr(panel, "env", None), "metric": column, "curves": rows})
    return {"schema": JSON_SCHEMA, "generator": JSON_GENERATOR, "proxima_version": __version__,
            "x": X_COLUMNS[x], "smooth": smooth,
            "ci": None if not any(c.band == "ci" for p in panels for c in p[2]) else {"level": CI_LEVEL, "method": "percentile bootstrap over the runs or members with a value at each x",
                   "resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED, "min_members": MIN_CI_MEMBERS},
            "panels": out}


# ------------------------------------------------------------------------------------ CLI
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (several runs of one env and settings: "
                   "mean + spread band, each run's last value carried forward to its last step; runs of one env that differ "
                   "in settings: a curve per setting in one panel, see --panels) or population directories "
                   "(`train --seeds`: per setting, IQM + 95%% CI over members; A+A2: populations of one setting trained on other "
                   "seeds, drawn as one population over the union of their members, as `proxima report A+A2` pools them); a folder holding run directories (runs/) "
                   "stands for those runs, in the order of the values that differ (lr=0.0001 before lr=0.001), else by "
                   "name. Populations of one env are overlaid in one panel (see --panels); panels of one env and metric share their axes, each run or population in colours of its own")
    p.add_argument("--panels", default="per-env", choices=tuple(PANELS),
                   help="runs of one env that differ in settings (a sweep run as a bash loop): per-env (the default) draws "
                   "one panel per env with a curve per setting, labelled by the fields that differ (lr=0.001), in the "
                   "order given, and the populations of that env too (a curve per population and setting, named "
                   "'A: IQM, 95%% CI (5 members)'); per-setting draws a panel per setting and per population")
    p.add_argument("--out", default=None, metavar="FILE.png",
                   help="image to write (.png, .svg, .pdf; default: RUN_DIR/curve.png for one run, ./curve.png for several "
                   "or a pool A+A2)")
    p.add_argument("--json", default=None, metavar="FILE.json",
                   help="also write the numbers drawn: per panel and curve its label, x, the line (mean or IQM), the band's "
                   "low and high and the runs or members counted at each x; replaces only an earlier `proxima plot --json` file")
    p.add_argument("--metric", default=None, metavar="NAME",
                   help=f"any metrics.csv column, e.g. losses/value_loss or {FALLBACK_METRIC} (the per-iteration return; "
                   f"default {DEFAULT_METRIC}, the rolling return: the mean of the most recent iterations' episodes, "
                   f"100 or more of them (fewer before 100 have ended), as the progress line's 'return (105 ep)'; "
                   f"{FALLBACK_METRIC} for runs logged before it)")
    p.add_argument("--x", default="step", choices=tuple(X_COLUMNS), help="x axis: global step or wall time in seconds (default step)")
    p.add_argument("--smooth", type=int_arg, default=1, metavar="K", help="trailing moving average over K points (default 1: none)")
    p.add_argument("--stat", default=None, choices=tuple(STATS), help="the line over several runs or members: mean or "
                   "interquartile mean (default: iqm for a population's settings, mean for a group of runs)")
    p.add_argument("--band", default=None, choices=tuple(BANDS), help="the shaded band: min-max over runs, mean +- 1 std, "
                   "or the 95%% bootstrap confidence interval of --stat (default: ci for a population's settings, "
                   "minmax for a group of runs)")
    p.add_argument("--title", default=None, help="plot title, drawn as typed (default: the env id)")
    p.add_argument("--label", action="append", default=[], metavar="DIR=NAME",
                   help="legend name of the curve RUN_DIR DIR is drawn in (a run's line, a group's statistic: "
                   "'NAME: mean of 3 runs', a population's panel); repeat for several")
    p.add_argument("--dpi", type=int_arg, default=DEFAULT_DPI, metavar="N",
                   help=f"pixels per inch of a .png, 1 to {MAX_DPI} (default {DEFAULT_DPI}; 300 for print). A .pdf embeds TrueType "
                   "fonts, not Type 3")


def path_problem(d: PathLike) -> Optional[str]:
    """'D: no such directory' or 'D: a file, not a run directory' for a path given as a run, else None.
    plot and report refuse these even among several runs: a typo would otherwise be skipped with a note
    and the rest drawn or reported as if it were all."""
    if not os.path.exists(d):
        return f"{d}: " + ("a symlink loop (links that lead back to themselves); give the run directory itself"
                           if _symlink_loop(d) else "no such directory")
    return None if os.path.isdir(d) else f"{d}: a file, not a run directory"


def _symlink_loop(d: PathLike) -> bool:
    """Whether ``d`` is a link that leads back to itself (ELOOP), not a missing path."""
    import errno

    try:
        os.stat(d)
    except OSError as e:
        return e.errno == errno.ELOOP
    return False


def pool_problem(d: PathLike, run_dirs: Sequence[PathLike]) -> Optional[str]:
    """The line `proxima report` refuses ``A+A2`` with (population_report.POOL_SEP; pool_parts), where plot draws
    the pool as one population (read_plot_pool): a part that is no directory or no population, populations of
    other settings, a seed twice; its populations named among every argument (``run_dirs``) as report names
    them. None for a pool that can be drawn and for any argument that is no pool, whose own problem
    path_problem says."""
    parts = pool_parts(d)
    if len(parts) < 2:
        return None
    flat = _pooled_dirs(run_dirs)
    names = dict(zip(flat, run_names(flat)))
    try:
        read_plot_pool(parts, [names[p] for p in parts])
    except PlotError as e:
        return str(e)
    return None


def register(subparsers) -> argparse.ArgumentParser:
    """Add the `plot` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser("plot", help="plot learning curves of one or several runs or populations to an image",
                              description=__doc__.splitlines()[0])
    add_arguments(p)
    p.set_defaults(func=run)
    return p


def _is_run(d: Path) -> bool:
    """Whether ``d`` is itself something plot draws or names: a run (a metrics.csv, an RLHF run's
    meta.json) or a population."""
    from .population_report import is_population

    return os.path.lexists(d / "metrics.csv") or os.path.lexists(d / "meta.json") or is_population(d)


def expand_run_folders(run_dirs: Sequence[PathLike], notes: Optional[list] = None) -> list[Path]:
    """The directories given, a folder that is no run but holds run directories (``plot runs``, as
    ``plot runs/*``) replaced by those, sorted by name, with a note saying how many (and how many are
    populations): its runs are what was meant, and "not a run directory" would only say what it is
    not. Only the folder's own subfolders count (not deeper, nor hidden ones: .ipynb_checkpoints); a
    subfolder that itself holds runs (runs/acro/s1) is named in the note as skipped, with what to give
    instead. A folder with none is kept, for its error. The notes go to ``notes`` when given (the CLI
    prints them once its flags are found good), else to stderr. PlotError (check_config_sizes) for a run in a
    folder whose config.yaml is too large to parse, before sweep_order would parse it."""
    from .population_report import is_population

    out = []
    for d in map(Path, run_dirs):
        if not d.is_dir() or _is_run(d):
            out.append(d)
            continue
        try:
            subs = sorted(c for c in d.iterdir() if not c.name.startswith(".") and c.is_dir())
            inside = [c for c in subs if _is_run(c)]
            nested = [c for c in subs if not _is_run(c) and any(g.is_dir() and _is_run(g) for g in c.iterdir())]
        except OSError:  # unreadable: its own error says so
            inside, nested = [], []
        if not inside:
            out.append(d)
            continue
        check_config_sizes(inside)  # before sweep_order parses them
        inside = sweep_order(inside)
        pops = sum(is_population(c) for c in inside)
        what = (f"the {len(inside)} run director{'y' if len(inside) == 1 else 'ies'}" if not pops else
                f"the {len(inside)} director{'y' if len(inside) == 1 else 'ies'} ({len(inside) - pops} run"
                f"{'' if len(inside) - pops == 1 else 's'}, {pops} population{'' if pops == 1 else 's'})")
        line = f"proxima: note: {d} is not a run directory; plotting {what} in it"
        if nested:  # only one level is read: the runs one level further down were meant too, most likely
            line += (f"; skipped {', '.join(c.name for c in nested)}, which hold{'s' if len(nested) == 1 else ''} runs "
                     f"a level deeper (give them too: {nested[0]}/*)")
        (notes.append if notes is not None else lambda t: sys.stderr.write(t + "\n"))(printable(line))
        out.extend(inside)
    return out


def sweep_order(run_dirs: Sequence[Path]) -> list[Path]:
    """A folder's runs (given sorted by name) in the order of their settings' values: a bash-loop
    sweep's ``lr1e-4 ... lr3e-2`` by the value of ``lr``, not by the names' string order (``lr0.01``
    before ``lr0.001``). The fields that differ among its plain runs (run_setting) and are a number in
    every one of them order the runs, the first such field first; runs alike in those (seeds) stay in
    name order, and populations follow the plain runs, by name."""
    from .population_report import is_population

    plain = [d for d in run_dirs if not is_population(d)]
    settings = {d: run_setting(d) for d in plain}
    fields = [k for k in dict.fromkeys(k for v in settings.values() for k in v)
              if len({_exact(v.get(k, _UNSET)) for v in settings.values()}) > 1
              and all(_number(v.get(k, _UNSET)) for v in settings.values())]
    ranked = sorted(plain, key=lambda d: [float(settings[d][k]) for k in fields])  # stable: name order among equals
    return ranked + [d for d in run_dirs if d not in settings]


def _number(value) -> bool:
    """Whether a config value orders as a number (not a bool, which YAML also reads from true)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past float's range (lr: 1 and 400 zeros): sweep_order could not float() it
        return False


def parse_labels(texts: Sequence[str], run_dirs: Sequence[Path]) -> dict[Path, str]:
    """{directory: NAME} of the ``--label DIR=NAME`` given. DIR is one of ``run_dirs`` (as given or
    any path to it), found by trying each ``=`` in turn, so a NAME may hold one (``lr=0.001``);
    PlotError naming the --label otherwise (no ``=``; a DIR not plotted, with those that are, or a
    folder holding them), and for an empty NAME or a DIR labelled twice."""
    known = {d.resolve(): d for d in run_dirs}
    labels: dict[Path, str] = {}
    for text in texts:
        cuts = [i for i, c in enumerate(text) if c == "="]
        hit = next((i for i in cuts if Path(text[:i]).resolve() in known), None) if text[:1] != "=" else None
        if hit is None:
            if not cuts or text[:1] == "=":
                raise PlotError(f"--label {text}: give DIR=NAME, DIR one of the directories plotted")
            given = Path(text[:cuts[0]])
            shown = ", ".join(str(d) for d in list(run_dirs)[:4]) + (", ..." if len(run_dirs) > 4 else "")
            under = [d for d in run_dirs if given.resolve() in d.resolve().parents]
            if under:
                raise PlotError(f"--label {text}: {given} is a folder of the runs plotted; label one of them "
                                f"(e.g. --label {under[0]}=NAME)")
            raise PlotError(f"--label {text}: {given} is not one of the directories plotted ({shown})")
        d, name = known[Path(text[:hit]).resolve()], text[hit + 1:]
        if not name.strip():
            raise PlotError(f"--label {text}: NAME is empty")
        if d in labels:
            raise PlotError(f"--label {text}: {d} is labelled twice")
        labels[d] = name
    return labels


def run(args) -> int:
    prog = "proxima plot"
    out = args.out
    # A+A (A+./A, A+) is A, as report reads it; A+A2 stays one argument: a pool, drawn as one population
    given = [d if len(parts) > 1 or parts[0] == Path(d) else str(parts[0]) for d, parts in
             ((d, pool_parts(d)) for d in args.run_dirs)]
    for d in given:  # a typo among several would be skipped with a note, and the plot made of the rest
        problem = pool_problem(d, given) if len(pool_parts(d)) > 1 else path_problem(d)
        if problem:
            sys.stderr.write(f"{prog}: error: {printable(problem)}\n")
            return 2
    if not 1 <= args.dpi <= MAX_DPI:  # before any note on what would be plotted: one line
        sys.stderr.write(f"{prog}: error: --dpi {args.dpi}: must be a whole number from 1 to {MAX_DPI}\n")
        return 2
    notes: list = []
    try:  # `plot RUN RUN` is one run: its curve goes where one run's goes
        run_dirs = unique_dirs(expand_run_folders(given, notes))
    except PlotError as e:  # a config.yaml too large to parse in a folder of runs
        sys.stderr.write(f"{prog}: error: {printable(str(e))}\n")
        return 2
    pooled = len(pool_parts(run_dirs[0])) > 1
    if len(run_dirs) == 1 and not pooled and not _is_run(run_dirs[0]):  # nor a folder of runs: expand_run_folders kept it
        sys.stderr.write(f"{prog}: error: {printable(str(run_dirs[0]))}: not a run directory (no metrics.csv), nor a "
                         "folder holding run directories; give RUN_DIR (e.g. runs/CartPole-v1__1__<time>)\n")
        return 2
    default_out = out is None
    if out is None:
        # a pool's curve is no one population's: it goes where several runs' go
        out = run_dirs[0] / "curve.png" if len(run_dirs) == 1 and not pooled else Path("curve.png")
    try:
        labels = parse_labels(args.label, run_dirs)
        for line in notes:
            sys.stderr.write(line + "\n")
        path = plot_runs(run_dirs, out, metric=args.metric, x=args.x, smooth=args.smooth, band=args.band, title=args.title,
                         stat=args.stat, dpi=args.dpi, labels=labels, panels=args.panels, json_out=args.json)
    except PlotError as e:
        # a run directory the user may not write (a colleague's, a read-only mount): the curve can go elsewhere
        hint = "; use --out FILE.png" if default_out and getattr(e, "errno", None) in (errno.EACCES, errno.EPERM, errno.EROFS) else ""
        sys.stderr.write(f"{prog}: error: {printable(str(e))}{hint}\n")
        return 2
    print(printable(f"wrote {path}" + (f" and {args.json}" if args.json else "")))
    return 0
