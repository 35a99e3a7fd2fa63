"""``proxima report RUN`` on a population (population_run.py): statistics over members, per setting.

Per setting (one combination of the swept values; all seeds of it): the members' final returns
(each member's ``eval.json`` mean; else, with ``--episodes N``, a fresh evaluation of its latest
checkpoint; else the last logged episodic return), their mean and
interquartile mean (IQM: the mean of the middle 50%, trimming a quarter of the members at each end
as ``scipy.stats.trim_mean(x, 0.25)`` and rliable do), a 95% percentile-bootstrap confidence
interval for each (members resampled with replacement, 2,000 resamples, a fixed numpy seed so the
report is reproducible; one task, so rliable's stratified bootstrap is this plain bootstrap), and
the fraction of members whose return reaches ``--threshold``. Written by hand on numpy because
neither scipy nor rliable is a dependency.

The same statistics vectorized over the x points of a learning curve (``iqm_along``,
``bootstrap_band``) draw ``proxima plot RUN``'s IQM (or mean) and 95% band per setting, and
``read_settings`` is the one reader of ``population.json`` for ``report``, ``plot`` and ``eval``.
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from .population_run import POPULATION_FILE

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
#: resamples of the per-x band of `proxima plot`: fewer than the report's 2,000, enough for a drawn
#: band (its edges move by a few percent of the band's width between seeds), and fast at 200 x points
BAND_RESAMPLES = 500


class PopulationError(ValueError):
    """A broken population directory: unreadable population.json, a listed member directory missing."""


@dataclass
class Setting:
    """One setting of a population: a combination of the swept values, and the members trained with it."""

    settings: dict
    """{field: value} of the swept fields ({} for a population of seeds only)."""
    members: list = field(default_factory=list)
    """[(seed, member directory)] in population.json's order."""

    @property
    def label(self) -> str:
        """``lr=0.001, ent_coef=0``; "" for a population of seeds only."""
        return setting_label(self.settings)


def setting_label(settings: dict) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in settings.items())


def is_population(run_dir) -> bool:
    return (Path(run_dir) / POPULATION_FILE).is_file()


def read_settings(run_dir) -> list:
    """The population's settings (Setting), in the order of their first member in population.json.

    Raises PopulationError naming the file for an unreadable population.json or an entry that is
    not a member folder of this run (the file is data: ``../elsewhere`` is refused), or naming the
    member directory for one it lists that is missing.
    """
    run_dir = Path(run_dir)
    path = run_dir / POPULATION_FILE
    try:
        doc = json.loads(path.read_text())
        entries = [(e["dir"], e["seed"], e.get("settings") or {}) for e in doc["member_dirs"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise PopulationError(f"{path}: not a readable population file ({type(e).__name__})") from None
    groups: dict = {}
    for name, seed, settings in entries:
        if not isinstance(name, str) or name in ("", ".", "..") or Path(name).name != name or not isinstance(settings, dict):
            raise PopulationError(f"{path}: member entry {name!r} is not a member folder of this run with its settings")
        d = run_dir / name
        if not d.is_dir():
            raise PopulationError(f"{d}: member directory listed in {POPULATION_FILE} is missing")
        key = json.dumps(settings, sort_keys=True)
        groups.setdefault(key, Setting(dict(settings))).members.append((seed, d))
    return list(groups.values())


def iqm_along(x: np.ndarray, axis: int = 0) -> np.ndarray:
    """Interquartile mean along ``axis``, NaN read as missing: with n values present in a slice, the
    mean after dropping floor(n/4) at each end (scipy's trim_mean(x, 0.25)); NaN where n is 0.

    x: (..., n, ...) float -> the shape of x without ``axis``. Vectorized: one sort, no Python loop.
    """
    s = np.sort(np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1), axis=-1)  # NaN sort last
    n = (~np.isnan(s)).sum(axis=-1, keepdims=True)
    k = n // 4
    rank = np.arange(s.shape[-1])
    keep = (rank >= k) & (rank < n - k)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(keep, s, 0.0).sum(axis=-1) / keep.sum(axis=-1)


def mean_along(x: np.ndarray, axis: int = 0) -> np.ndarray:
    """Mean along ``axis`` of the values present (NaN read as missing); NaN where none is."""
    x = np.asarray(x, dtype=np.float64)
    present = ~np.isnan(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(present, x, 0.0).sum(axis=axis) / present.sum(axis=axis)


#: statistics over members by name (plot's --stat), each vectorized along an axis
STATISTICS = {"mean": mean_along, "iqm": iqm_along}


def iqm(x: np.ndarray) -> float:
    """Interquartile mean of the members x (n,): the mean after dropping floor(n/4) values at each end."""
    return float(iqm_along(np.asarray(x, dtype=np.float64).reshape(-1)))


def bootstrap_ci(x: np.ndarray, stat: Callable[[np.ndarray], float], resamples: int = BOOTSTRAP_RESAMPLES,
                 seed: int = BOOTSTRAP_SEED, level: float = 0.95) -> tuple:
    """(low, high) percentile-bootstrap interval of ``stat`` over the members ``x`` (n,)."""
    x = np.asarray(x, dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    stats = np.array([stat(x[i]) for i in idx])
    alpha = (1 - level) / 2
    return float(np.quantile(stats, alpha)), float(np.quantile(stats, 1 - alpha))


def bootstrap_band(stack: np.ndarray, stat: str = "iqm", resamples: int = BAND_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                   level: float = 0.95) -> tuple:
    """bootstrap_ci at every x point at once: (low (X,), high (X,)) of ``stat`` ("mean" or "iqm").

    stack: (n, X) float, member i's value at x point j, NaN where member i has none. At each x point
    the members present there (n_j of them) are resampled with replacement, n_j draws per resample,
    so a point some members do not reach gets the interval of the members that do. NaN where n_j is 0.
    """
    if stat not in STATISTICS:
        raise ValueError(f"stat {stat!r}: choose one of {', '.join(STATISTICS)}")
    stack = np.asarray(stack, dtype=np.float64)
    n, points = stack.shape
    present_first = np.sort(stack, axis=0)  # per column, its n_j values first, NaN after
    n_j = (~np.isnan(present_first)).sum(axis=0)  # (X,)
    rng = np.random.default_rng(seed)
    rows = (rng.random((resamples, n, points)) * n_j).astype(np.int64)  # (R, n, X), each in [0, n_j)
    draws = present_first[rows, np.arange(points)]
    draws[:, np.arange(n)[:, None] >= n_j] = np.nan  # a resample of column j holds n_j draws
    stats = STATISTICS[stat](draws, axis=1)  # (R, X)
    alpha = (1 - level) / 2
    with np.errstate(invalid="ignore"):
        lo, hi = np.quantile(stats, [alpha, 1 - alpha], axis=0)
    return lo, hi


#: the source of a member's final return evaluated by the report itself (no eval.json)
EVALUATED_NOW = "evaluated now from the latest checkpoint (no eval.json)"


def member_final_return(member_dir: Path, episodes: int = 0, device: str = "cpu", quiet: bool = True,
                        unevaluated: Optional[list] = None) -> tuple:
    """(return, source): eval.json's mean return; else, with ``episodes`` >= 1, a fresh evaluation of
    the member's latest checkpoint (``report --episodes N --device D``, as a single run's report
    makes one); else (or when it has no checkpoint yet: its error is appended to ``unevaluated``)
    the last logged charts/episodic_return (NaN before the first is logged)."""
    ev = member_dir / "eval.json"
    if ev.is_file():  # data: read and checked as a single run's report reads it (one line, never a traceback)
        from .report import ReportError, _check_eval, _read_json

        saved = _check_eval(ev, _read_json(ev))
        if "mean_return" not in saved:
            raise ReportError(f"{ev}: has no mean_return")
        return float(saved["mean_return"]), "eval"
    if episodes >= 1:
        from .report import _eval_line, evaluate_latest

        result = evaluate_latest(member_dir, episodes, device)
        if "error" not in result:
            if not quiet:
                print(f"evaluated {member_dir}: {_eval_line(result)}", file=sys.stderr)
            return float(result["mean_return"]), EVALUATED_NOW
        if unevaluated is not None:
            unevaluated.append((member_dir, result["error"]))
    from .plot import PlotError, read_metrics

    try:
        values = read_metrics(member_dir).get("charts/episodic_return", np.array([]))
    except PlotError:  # a member that has logged nothing yet (a population just started) has no return
        values = np.array([])
    values = values[np.isfinite(values)]
    return (float(values[-1]) if values.size else math.nan), "last training return"


def summarize_settings(run_dir, threshold: Optional[float] = None, episodes: int = 0, device: str = "cpu",
                       quiet: bool = True) -> list:
    """One dict per setting: settings, members, returns, mean, mean_ci, iqm, iqm_ci, solved (fraction or None).
    ``episodes``/``device``: how a member without eval.json is evaluated (member_final_return)."""
    from .report import ReportError

    try:
        settings = read_settings(run_dir)
    except PopulationError as e:
        raise ReportError(str(e)) from None
    unevaluated: list = []
    finals = [[(seed, *member_final_return(d, episodes, device, quiet, unevaluated)) for seed, d in setting.members]
              for setting in settings]
    if unevaluated and not quiet:  # one line, not one per member
        why = unevaluated[0][1].removeprefix("could not evaluate: ")  # it names the member's directory
        print(f"proxima: note: {len(unevaluated)} member(s) without eval.json could not be evaluated, so their last training "
              f"return is reported (first: {why})", file=sys.stderr)
    sources = sorted({source for members in finals for _, _, source in members})
    out = []
    for setting, members in zip(settings, finals):
        x = np.array([v for _, v, _ in members if math.isfinite(v)])
        row = {"settings": setting.settings, "seeds": [s for s, _, _ in members], "returns": x.tolist(), "sources": sources}
        if x.size:
            row.update(mean=float(x.mean()), mean_ci=bootstrap_ci(x, np.mean), iqm=iqm(x), iqm_ci=bootstrap_ci(x, iqm))
        row["solved"] = float((x >= threshold).mean()) if threshold is not None and x.size else None
        out.append(row)
    return out


def training_progress(run_dir: Path, doc: dict) -> str:
    """``446,464 steps each, 40.6 s of training`` for a finished population. One in progress or
    stopped has not trained population.json's target (nor written its wall time): the steps and
    seconds are the members' metrics.csv's, ``1,024 of 29,952 steps each so far (in progress: locked
    by pid P ...), 3.2 s of training``; a number there is none of is "—"."""
    from .plot import PlotError, read_metrics
    from .report import _in_progress

    total = doc.get("total_timesteps_per_member")
    total = total if isinstance(total, int) and not isinstance(total, bool) else None
    done, seconds = [], []
    for entry in doc.get("member_dirs") or []:
        try:
            m = read_metrics(run_dir / entry["dir"])
        except (PlotError, KeyError, TypeError):
            done.append(0)  # started, nothing logged yet
            continue
        steps, times = m.get("global_step", np.array([])), m.get("time", np.array([]))
        steps, times = steps[np.isfinite(steps)], times[np.isfinite(times)]
        done.append(int(steps[-1]) if steps.size else 0)
        if times.size:
            seconds.append(float(times[-1]))
    step = min(done) if done else None  # members train in lockstep; the slowest says how far all are
    live = _in_progress(run_dir)
    wall = doc.get("wall_seconds")
    finished = not live and step is not None and total is not None and step >= total
    num = lambda v: "\u2014" if v is None else f"{v:,}"  # noqa: E731
    if finished:
        wall = wall if isinstance(wall, (int, float)) and not isinstance(wall, bool) else (max(seconds) if seconds else None)
        return f"{step:,} steps each, " + ("\u2014" if wall is None else f"{wall:.1f}") + " s of training"
    from .checkpoint import list_checkpoints

    if live:
        status = f"in progress: {live}"
    elif list_checkpoints(run_dir):
        status = f"stopped; `proxima resume {run_dir}` continues it"
    else:
        status = "stopped before its first checkpoint"
    wall = max(seconds) if seconds else None
    return (f"{num(step)} of {num(total)} steps each so far ({status}), " + ("\u2014" if wall is None else f"{wall:.1f}")
            + " s of training")


def render(run_dir: Path, rows: list, threshold: Optional[float]) -> str:
    doc = json.loads((run_dir / POPULATION_FILE).read_text())
    f = lambda v: "\u2014" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.1f}"  # noqa: E731
    lines = [f"# Population report: {run_dir.name}", "",
             f"{doc.get('env_id')}: {doc.get('members')} members ({len(doc.get('seeds', []))} seeds x {len(rows)} setting{'s' if len(rows) != 1 else ''}), "
             f"{training_progress(run_dir, doc)} in one process.", "",
             "Final return per member: " + " / ".join(rows[0]["sources"] if rows else []) + ". 95% CIs: percentile bootstrap "
             f"over members ({BOOTSTRAP_RESAMPLES} resamples, numpy seed {BOOTSTRAP_SEED}). IQM: mean of the middle 50%.", "",
             f"| setting | members | mean | mean 95% CI | IQM | IQM 95% CI | >= {threshold if threshold is not None else 'threshold'} |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        name = setting_label(r["settings"]) or "(seeds only)"
        ci = lambda c: f"[{c[0]:.1f}, {c[1]:.1f}]" if c else "\u2014"  # noqa: E731
        solved = f"{r['solved']:.0%}" if r["solved"] is not None else "\u2014"
        lines.append(f"| {name} | {len(r['seeds'])} | {f(r.get('mean'))} | {ci(r.get('mean_ci'))} | {f(r.get('iqm'))} | "
                     f"{ci(r.get('iqm_ci'))} | {solved} |")
    lines += ["", "Per member: `proxima report RUN/<member dir>` (same files as a single run).", ""]
    return "\n".join(lines)


def build_population_report(run_dir, out=None, threshold: Optional[float] = None, metric: str = "charts/episodic_return",
                            x: str = "step", smooth: int = 1, episodes: int = 0, device: str = "cpu", quiet: bool = True) -> Path:
    """Write RUN/report.md (or ``out``) for a population, its curve ``metric`` against ``x`` smoothed
    over ``smooth`` points, evaluating members without eval.json over ``episodes`` episodes on
    ``device`` (0: their last training return); ReportError (nothing written) on a broken run."""
    from .diskspace import describe
    from .report import ReportError

    run_dir = Path(run_dir)
    rows = summarize_settings(run_dir, threshold, episodes, device, quiet)
    out = Path(out) if out is not None else run_dir / "report.md"
    text = render(run_dir, rows, threshold)
    from .plot import PlotError, plot_runs

    curve = out.with_name(f"{out.stem}_curve.png") if out.name != "report.md" else run_dir / "curve.png"
    try:  # the population's plot: one IQM curve with its 95% bootstrap band per setting
        plot_runs([run_dir], curve, metric=metric, x=x, smooth=smooth)
        alt = "learning curves: IQM over members with a 95% bootstrap CI, per setting"
        text += f"\n![{alt}]({os.path.relpath(curve, out.parent)})\n"
    except PlotError as e:
        text += f"\nNo learning curve: {e}\n"
    tmp = out.with_name(out.name + ".tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, out)
    except OSError as e:
        raise ReportError(describe(out, e)) from None
    finally:
        if tmp.exists():
            tmp.unlink()
    return out
