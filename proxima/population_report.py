"""``proxima report RUN`` on a population (population_run.py): statistics over members, per setting.

Per setting (one combination of the swept values; all seeds of it): the members' final returns
(each member's ``eval.json`` mean, else the last logged episodic return), their mean and
interquartile mean (IQM: the mean of the middle 50%, trimming a quarter of the members at each end
as ``scipy.stats.trim_mean(x, 0.25)`` and rliable do), a 95% percentile-bootstrap confidence
interval for each (members resampled with replacement, 2,000 resamples, a fixed numpy seed so the
report is reproducible; one task, so rliable's stratified bootstrap is this plain bootstrap), and
the fraction of members whose return reaches ``--threshold``. Written by hand on numpy because
neither scipy nor rliable is a dependency.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from .population_run import POPULATION_FILE

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0


def is_population(run_dir) -> bool:
    return (Path(run_dir) / POPULATION_FILE).is_file()


def iqm(x: np.ndarray) -> float:
    """Interquartile mean: the mean after dropping floor(n/4) values at each end (scipy's trim_mean(x, 0.25))."""
    x = np.sort(np.asarray(x, dtype=np.float64))
    k = int(0.25 * x.size)
    return float(x[k:x.size - k].mean())


def bootstrap_ci(x: np.ndarray, stat: Callable[[np.ndarray], float], resamples: int = BOOTSTRAP_RESAMPLES,
                 seed: int = BOOTSTRAP_SEED, level: float = 0.95) -> tuple:
    """(low, high) percentile-bootstrap interval of ``stat`` over the members ``x`` (n,)."""
    x = np.asarray(x, dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    stats = np.array([stat(x[i]) for i in idx])
    alpha = (1 - level) / 2
    return float(np.quantile(stats, alpha)), float(np.quantile(stats, 1 - alpha))


def member_final_return(member_dir: Path) -> tuple:
    """(return, source): eval.json's mean return, else the last logged charts/episodic_return."""
    ev = member_dir / "eval.json"
    if ev.is_file():
        return float(json.loads(ev.read_text())["mean_return"]), "eval"
    from .plot import read_metrics

    values = read_metrics(member_dir).get("charts/episodic_return", np.array([]))
    values = values[np.isfinite(values)]
    return (float(values[-1]) if values.size else math.nan), "last training return"


def summarize_settings(run_dir, threshold: Optional[float] = None) -> list:
    """One dict per setting: settings, members, returns, mean, mean_ci, iqm, iqm_ci, solved (fraction or None)."""
    from .report import ReportError

    run_dir = Path(run_dir)
    try:
        doc = json.loads((run_dir / POPULATION_FILE).read_text())
        entries = doc["member_dirs"]
    except (OSError, ValueError, KeyError) as e:
        raise ReportError(f"{run_dir / POPULATION_FILE}: not a readable population file ({type(e).__name__})") from None
    groups: dict = {}
    sources = set()
    for entry in entries:
        d = run_dir / entry["dir"]
        if not d.is_dir():
            raise ReportError(f"{d}: member directory listed in {POPULATION_FILE} is missing")
        value, source = member_final_return(d)
        sources.add(source)
        key = json.dumps(entry.get("settings", {}), sort_keys=True)
        groups.setdefault(key, []).append((entry["seed"], value))
    out = []
    for key, members in groups.items():
        x = np.array([v for _, v in members if math.isfinite(v)])
        row = {"settings": json.loads(key), "seeds": [s for s, _ in members], "returns": x.tolist(), "sources": sorted(sources)}
        if x.size:
            row.update(mean=float(x.mean()), mean_ci=bootstrap_ci(x, np.mean), iqm=iqm(x), iqm_ci=bootstrap_ci(x, iqm))
        row["solved"] = float((x >= threshold).mean()) if threshold is not None and x.size else None
        out.append(row)
    return out


def render(run_dir: Path, rows: list, threshold: Optional[float]) -> str:
    doc = json.loads((run_dir / POPULATION_FILE).read_text())
    f = lambda v: "\u2014" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.1f}"  # noqa: E731
    lines = [f"# Population report: {run_dir.name}", "",
             f"{doc.get('env_id')}: {doc.get('members')} members ({len(doc.get('seeds', []))} seeds x {len(rows)} setting{'s' if len(rows) != 1 else ''}), "
             f"{doc.get('total_timesteps_per_member', 0):,} steps each, {doc.get('wall_seconds', float('nan')):.1f} s of training "
             "in one process.", "",
             "Final return per member: " + " / ".join(rows[0]["sources"] if rows else []) + ". 95% CIs: percentile bootstrap "
             f"over members ({BOOTSTRAP_RESAMPLES} resamples, numpy seed {BOOTSTRAP_SEED}). IQM: mean of the middle 50%.", "",
             f"| setting | members | mean | mean 95% CI | IQM | IQM 95% CI | >= {threshold if threshold is not None else 'threshold'} |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        name = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in r["settings"].items()) or "(seeds only)"
        ci = lambda c: f"[{c[0]:.1f}, {c[1]:.1f}]" if c else "\u2014"  # noqa: E731
        solved = f"{r['solved']:.0%}" if r["solved"] is not None else "\u2014"
        lines.append(f"| {name} | {len(r['seeds'])} | {f(r.get('mean'))} | {ci(r.get('mean_ci'))} | {f(r.get('iqm'))} | "
                     f"{ci(r.get('iqm_ci'))} | {solved} |")
    lines += ["", "Per member: `proxima report RUN/<member dir>` (same files as a single run).", ""]
    return "\n".join(lines)


def build_population_report(run_dir, out=None, threshold: Optional[float] = None) -> Path:
    """Write RUN/report.md (or ``out``) for a population; ReportError (nothing written) on a broken run."""
    from .diskspace import describe
    from .report import ReportError

    run_dir = Path(run_dir)
    rows = summarize_settings(run_dir, threshold)
    out = Path(out) if out is not None else run_dir / "report.md"
    text = render(run_dir, rows, threshold)
    from .plot import PlotError, plot_runs

    members = [run_dir / e["dir"] for e in json.loads((run_dir / POPULATION_FILE).read_text())["member_dirs"]]
    curve = out.with_name(f"{out.stem}_curve.png") if out.name != "report.md" else run_dir / "curve.png"
    try:  # one mean curve with a min-max band per setting (plot.group_runs groups members by their settings)
        plot_runs(members, curve)
        text += f"\n![learning curves: mean and min-max over members, per setting]({os.path.relpath(curve, out.parent)})\n"
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
