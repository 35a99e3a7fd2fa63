"""Markdown report of one or several runs: ``proxima report RUN_DIR... [--out FILE.md]``.

Writes ``report.md`` into the run directory (one run) or to ``--out FILE`` (needed for several
runs) with: a results summary (steps, iterations, wall time, throughput, the final value of
``--metric`` and its best (a return: the max) or its max and min (any other metric); no --metric: of
charts/episodic_return_100 (the rolling return) where the run logged it, else charts/episodic_return (a typed
--metric, charts/episodic_return too, is used as typed), its best over the rows whose window held 100 or
more episodes, its blank cells of a resumed older run rebuilt from the rows; final evaluation;
of a run short of its total steps, ``3,584 of 4,096 steps so far (in progress: locked by pid ...)``
or ``(stopped; `proxima resume RUN` continues it)``; inf cells left out and named), the learning
curve (drawn by proxima.plot.plot_runs next to the report, named after it: ``report.md`` gets
``report_curve.png``, never plot's ``curve.png``, and embedded with a percent-encoded relative
link), the final evaluation (``eval.json`` written at the end of training, used when it is of the
run's last step; without it the latest checkpoint is evaluated now for ``--episodes N`` episodes,
by default the run's own ``--eval-episodes`` (10 where that is 0), so it measures what eval.json would
have; not saved; a module:Class env the run records built only with ``--env``/``--trust-run``, as eval builds it
(env_trust); the step of the policy evaluated and the episodes are given; a population member's
throughput is said to be per member), the resolved config (``config.yaml``) and the versions and machine (``meta.json``).
Rows missing from metrics.csv (a gap in its iteration numbers; a file that ends before the run's newest
checkpoint or final evaluation) are named in a note, and the cells they make undercount say "rows missing"
(missing_rows). The final evaluation's ± is the std over its episodes (ddof 0, eval.json's std_return); the
std over several runs of one group is the sample std, labelled "std (n-1)"; the report says which is which.

``--json FILE.json`` also writes the tables' numbers as strict JSON (schema 1: runs_json, population_report.population_json).

Several runs get one column each; runs of one env share a mean + spread curve. A population
directory (``train --seeds/--sweep``) is reported alone or beside other populations (one table of their
settings, compared by probability of improvement; with ``--normalize``, populations of several env ids aggregated
over these tasks on normalized scores, aggregate.py), by population_report, its curve drawn with
``--metric``/``--x``/``--smooth`` and placed as a single run's. A population's member that diverged
says so at the top of its report and is not evaluated. Errors a user can act on (missing or foreign run directory, empty
metrics, an unknown metric, a run file that is not UTF-8, or not a regular file within its size cap
(a FIFO, a sparse file planted at its name: rundir.read_run_bytes), an eval.json field that is not a number
(null included), a meta.json section that is not a mapping, a population among other runs,
``--threshold`` for single runs or not finite (nan, inf), an ``--out`` that is not a .md file (so it is never one of a run's
own files) or is under a file, a ``--json`` that is not a .json file or would replace a file no --json wrote) are one line naming the file or flag,
exit status 2, and leave no file behind: everything is read and checked before the curve and the
report are written.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import errno
import json
import math
import os
import re
import stat
import sys
import time
from collections import OrderedDict
from datetime import datetime
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from .config import ProximaError, int_arg

from .diskspace import describe
from .logger import ROLLING_EPISODES, ROLLING_RETURN, RollingReturn, episodes_not_counted
from .plot import (DEFAULT_METRIC, FALLBACK_METRIC, default_metric, X_LABELS, PlotError, group_runs, path_problem, plot_runs, read_metrics, run_env_id, run_names,
                   unique_dirs, usable_runs)
from .terminal import printable


class ReportError(ProximaError, ValueError):
    """A user-fixable problem with the runs or the output path."""


MISSING = "\u2014"  # em dash for "not recorded"


# ------------------------------------------------------------------------------------ one run
#: the most of a run's config.yaml the report parses: a run writes a few kB there (its fields, env_kwargs), and PyYAML
#: takes about 10 s and 100 MB a megabyte, so a hand-edited 10 MB one held `proxima report` for minutes
CONFIG_MAX_BYTES = 1 << 20


def _read_text(path: Path, limit: Optional[int] = None) -> str:
    """A run file's text; ReportError naming it when it is not UTF-8 text or cannot be read: a FIFO
    at its name (never waited on) or a file over ``limit`` bytes (default rundir.TEXT_MAX_BYTES; never
    read whole) included."""
    from .rundir import TEXT_MAX_BYTES, RunFileError, read_run_text

    try:
        return read_run_text(path, TEXT_MAX_BYTES if limit is None else limit)
    except UnicodeDecodeError as e:
        raise ReportError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})") from None
    except RunFileError as e:
        raise ReportError(str(e)) from None
    except OSError as e:
        raise ReportError(f"{path}: cannot read ({e.strerror or e})") from None


def _absent(path: Path) -> bool:
    """A run file that is not there (nor a link to one): {} for the report. Anything else at its name,
    a FIFO or a folder too, is read, so _read_text refuses it with a line rather than skipping it unsaid."""
    return not path.exists()


#: the config.yaml files parsed_yaml has parsed, least recently used first: {resolved path: ((st_mtime_ns, st_size,
#: digest of the text), the parsed value or the yaml.YAMLError it raised)}
_PARSED: "OrderedDict[str, tuple]" = OrderedDict()
#: the most files _PARSED holds: a population's members, or a report of many runs, parse each of theirs once
PARSED_MAX_FILES = 256
#: ... and the most bytes of text they came from: a process that builds many reports (a notebook) keeps at most
#: this much parsed, not 256 files of up to CONFIG_MAX_BYTES each (a megabyte of YAML parses to ~10x in objects)
PARSED_MAX_BYTES = 8 * 2**20


def parsed_yaml(path: Path, text: str):
    """config.load_yaml(``text``), the text just read from the run file ``path``, parsed once per command: one
    report parses a run's config.yaml in several places (its table, its curve's label and setting, its members'
    shared config), and PyYAML takes about 10 s a megabyte. Kept by the resolved path while the file's mtime, size
    and text's digest are those it was parsed from (a file rewritten, even to the same size within one tick of a
    coarse clock, is parsed again); a yaml.YAMLError is kept and raised again. Returns a copy each reader may change."""
    import copy
    import hashlib

    import yaml

    from .config import load_yaml

    try:
        info, key = os.stat(path), os.path.realpath(path)
    except (OSError, ValueError):  # gone since it was read: parsed, not kept
        return load_yaml(text)
    stamp = (info.st_mtime_ns, info.st_size, hashlib.blake2b(text.encode(), digest_size=16).digest())
    hit = _PARSED.get(key)
    if hit is not None and hit[0] == stamp:
        _PARSED.move_to_end(key)
        value = hit[1]
    else:
        try:
            value = load_yaml(text)
        except yaml.YAMLError as e:
            value = e
        _PARSED[key] = (stamp, value)
        _PARSED.move_to_end(key)
        while len(_PARSED) > PARSED_MAX_FILES or (
                len(_PARSED) > 1 and sum(kept[0][1] for kept in _PARSED.values()) > PARSED_MAX_BYTES):
            _PARSED.popitem(last=False)  # the newest stays, however big: this command reads it again
    if isinstance(value, yaml.YAMLError):
        raise value.with_traceback(None)
    return copy.deepcopy(value)


def _read_yaml(path: Path) -> dict:
    """A run's config.yaml as a mapping ({} when absent or not a mapping). It is data: an alias
    (``*name``), which a few hundred bytes can nest into billions of values for the report to
    render, is refused with one line (config.load_yaml), and so is a file over CONFIG_MAX_BYTES,
    never parsed."""
    import yaml

    from .config import yaml_alias_error

    if _absent(path):
        return {}
    try:
        data = parsed_yaml(path, _read_text(path, CONFIG_MAX_BYTES))
    except yaml_alias_error() as e:
        raise ReportError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        from .config import yaml_error_where

        raise ReportError(f"{path}: not valid YAML{yaml_error_where(e)}") from None
    return data if isinstance(data, dict) else {}


def check_config_sizes(run_dirs: Sequence) -> None:
    """ReportError naming the first config.yaml of ``run_dirs`` (and of each population's members) over
    CONFIG_MAX_BYTES, in _read_yaml's line, before any is parsed: the curve's labels (plot.run_config, which
    reads them within the same cap) read them first. `proxima plot` refuses with this line too
    (plot.check_config_sizes). Only their sizes: what else is wrong with a file (or population.json) is its
    reader's to say."""
    from .population_report import POPULATION_FILE, is_population
    from .population_run import is_plain_name
    from .rundir import read_run_json

    for d in map(Path, run_dirs):
        paths = [d / "config.yaml"]
        if is_population(d):
            try:
                entries = read_run_json(d / POPULATION_FILE).get("member_dirs")
            except (OSError, ValueError, AttributeError):
                entries = None
            names = [e.get("dir") for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
            paths += [d / n / "config.yaml" for n in names if is_plain_name(n)]
        for path in paths:
            try:
                info = os.stat(path)
            except (OSError, ValueError):
                continue
            if stat.S_ISREG(info.st_mode) and info.st_size > CONFIG_MAX_BYTES:
                raise ReportError(f"{path}: {info.st_size:,} bytes, more than the {CONFIG_MAX_BYTES:,} a run writes there; "
                                  "the run directory was damaged or edited")


def _read_json(path: Path) -> dict:
    if _absent(path):
        return {}
    text = _read_text(path)  # its own ReportError (a file over its cap, nested too deep) is its own line
    try:
        data = json.loads(text)
    except ValueError as e:  # JSONDecodeError, or an integer of more digits than int() converts (4,300)
        raise ReportError(f"{path}: not valid JSON ({e})") from None
    return data if isinstance(data, dict) else {}


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_finite_number(x) -> bool:
    """A number the report can format and average: finite as a float (not NaN or inf, which no evaluation
    writes, nor an integer past a float's range, which float() refuses with OverflowError)."""
    try:
        return _is_number(x) and math.isfinite(float(x))
    except OverflowError:
        return False


#: eval.json fields the report formats as numbers: name -> (check, what it must be); a field may be absent
EVAL_FIELDS = {
    "mean_return": (_is_finite_number, "a number"),
    "std_return": (_is_finite_number, "a number"),
    "episodes": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a count of episodes"),
    "returns": (lambda v: isinstance(v, list) and all(map(_is_finite_number, v)), "a list of numbers"),
    "lengths": (lambda v: isinstance(v, list) and all(map(_is_finite_number, v)), "a list of numbers"),
    "unfinished": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a count of episodes"),
    "max_steps": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "a number of steps"),
    "seed": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a seed (an integer of 0 or more)"),
    "backend": (lambda v: isinstance(v, str), "a backend name"),
    "global_step": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a step (an integer of 0 or more)"),
    # evaluate.success_fields: written only where an episode reported info["is_success"]
    "success_rate": (lambda v: _is_finite_number(v) and 0 <= v <= 1, "a rate from 0 to 1"),
    "success_episodes": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "a count of episodes"),
}

#: the EVAL_FIELDS whose numbers must be finite floats (no evaluation writes NaN or inf: evaluate refuses them)
FINITE_EVAL_FIELDS = ("mean_return", "std_return", "returns", "lengths")


def _is_float_number(x) -> bool:
    """A number float() takes (NaN and inf too, never an integer past a float's range: OverflowError)."""
    try:
        return _is_number(x) and (float(x) is not None)
    except OverflowError:
        return False


def _check_eval(path: Path, saved: dict, finite: bool = True) -> dict:
    """eval.json as read, or ReportError naming the file and the field that the report cannot format
    (``eval.json: mean_return is not a number ('abc')``, ``... (null)``): a file edited by hand or by another program
    fails like one that is not valid JSON, one line and no report, rather than a report that is wrong.
    ``finite=False``: a population member's, whose NaN or inf mean_return is a member the statistics leave out
    as non-finite (named in the table), not a damaged file; an integer past a float's range still is."""
    for name, (ok, wanted) in EVAL_FIELDS.items():
        if not finite and name in FINITE_EVAL_FIELDS:
            ok = _is_float_number if not wanted.startswith("a list") else (
                lambda v: isinstance(v, list) and all(map(_is_float_number, v)))
        # absent is fine (an older eval.json); a null is a value the report cannot format
        if name in saved and not ok(saved[name]):
            value = saved[name]
            listed = wanted.startswith("a list")
            numbers = isinstance(value, list) and all(map(_is_number, value)) if listed else _is_number(value)
            if name in FINITE_EVAL_FIELDS and numbers:  # NaN, inf, an int past a float's range
                wanted = wanted.replace("number", "finite number")
            shown = "null" if value is None else repr(value)
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            raise ReportError(f"{path}: {name} is not {wanted} ({shown})")
    k, n = saved.get("success_episodes"), saved.get("episodes")
    if isinstance(n, int) and k is not None and k >= n:  # success_fields writes it only when fewer than all reported
        shown, of = (repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..." for v in (k, n))
        raise ReportError(f"{path}: success_episodes is not a count of episodes ({shown} of {of} episodes; evaluate "
                          f"writes it only when fewer than all episodes reported info['is_success'])")
    if n == 0 and "success_rate" in saved:
        raise ReportError(f"{path}: success_rate is not a rate of 0 episodes ({saved['success_rate']!r}; evaluate writes "
                          f"it only where an episode reported info['is_success'])")
    if k is not None and n is None:  # no episodes to be below (edited by hand): a count nothing bounds, 10**30 too,
        saved.pop("success_episodes")  # left out of report.json as report.md's cell and eval's line leave it (the rate alone)
    if saved.get("success_rate") == 0:
        saved["success_rate"] = 0.0  # -0.0, shown as -0.00 (no evaluation's mean of 0s and 1s is negative)
    return saved


#: meta.json fields the report formats, and what each must be: one of another type (edited by hand or
#: by another program) is left out with a note, as not recorded, rather than failing the whole report
META_FIELDS = {
    "versions": (lambda v: isinstance(v, dict), "a mapping"),
    "machine": (lambda v: isinstance(v, dict), "a mapping"),
    "world_size": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "a count of processes"),
    "resumes": (lambda v: isinstance(v, list), "a list"),
}


def _read_meta(path: Path) -> tuple:
    """(meta.json as the report uses it, its note or None). meta.json only describes the run (versions,
    machine): one that is not a record, or a field of META_FIELDS of another type, is treated as not
    recorded and named in one note, and the report is still written; so is one that is not valid JSON
    (cut short, overwritten by hand), as a resume goes on past it. A file that cannot be read stays an error."""
    if _absent(path):
        return {}, None
    text = _read_text(path)  # its own ReportError (a file over its cap, nested too deep) stays an error
    try:
        data = json.loads(text)
    except ValueError as e:  # JSONDecodeError, or an integer of more digits than int() converts (4,300)
        return {}, f"{path}: not valid JSON ({e}); its versions and machine are treated as not recorded"
    if not isinstance(data, dict):
        return {}, f"{path}: not a record (a JSON {type(data).__name__}); its versions and machine are treated as not recorded"
    meta, bad = _drop_bad_meta(data)
    return meta, (f"{path}: {', '.join(bad)}; treated as not recorded" if bad else None)


def _drop_bad_meta(meta: dict) -> tuple:
    """(``meta`` without the META_FIELDS entries of another type, what each dropped one is)."""
    meta, bad = dict(meta), []
    for name, (ok, wanted) in META_FIELDS.items():
        if meta.get(name) is not None and not ok(meta[name]):
            shown = repr(meta.pop(name))
            bad.append(f"{name} is not {wanted} ({_md(shown if len(shown) <= 40 else shown[:37] + '...')})")
    return meta, bad


def _check_meta(path: Path, meta: dict) -> dict:
    """meta.json as read, its fields of another type (META_FIELDS) left out as not recorded (_read_meta's
    rule; the population report, which reads it so, has no notes to name them in)."""
    return _drop_bad_meta(meta)[0]


#: metrics whose larger values are better: the report calls their maximum "best"; of any other
#: metric (losses, KL, entropy, episode length: better is lower, or depends on the env) it shows
#: the max and the min as they are
RETURN_METRICS = ("charts/episodic_return", "eval/mean_return", ROLLING_RETURN)
#: metrics logged as the mean over the episodes that finished in one iteration
EPISODIC_METRICS = ("charts/episodic_return", "charts/episodic_length")


def _rolling_windows(metrics: dict[str, np.ndarray]) -> Optional[tuple]:
    """Per row, (ROLLING_RETURN's mean, the episodes its window held) rebuilt as the logger keeps them
    (RollingReturn over the rows' episodes and returns; rows missing from the file make it the window of
    the rows there), or None without those columns. A row whose episodes are not counted (blank: a diverged
    population member's) has no mean, as the logger leaves its cell blank: not the window's from before."""
    counts, returns = metrics.get("episodes"), metrics.get("charts/episodic_return")
    if counts is None or returns is None:
        return None
    window = RollingReturn()
    means, held = [], []
    for c, r in zip(counts.tolist(), returns.tolist()):
        mean = window.add(c, r)
        means.append(math.nan if episodes_not_counted(c) else mean)
        held.append(window.episodes)
    return np.array(means, dtype=float), np.array(held, dtype=float)


def _window_episodes(metrics: dict[str, np.ndarray]) -> Optional[np.ndarray]:
    """Per row, the episodes ROLLING_RETURN's window held (_rolling_windows), or None."""
    rebuilt = _rolling_windows(metrics)
    return None if rebuilt is None else rebuilt[1]


def _with_rolling_filled(metrics: dict[str, np.ndarray]) -> tuple:
    """(``metrics`` with ROLLING_RETURN's blank cells rebuilt from the rows' episodes and returns, how many
    were): the rows of a run logged before the column and resumed under it are blank, and the summary
    then covers the whole run, as the resume's own window (rebuilt from those rows) did."""
    col, rebuilt = metrics.get(ROLLING_RETURN), _rolling_windows(metrics)
    if col is None or rebuilt is None:
        return metrics, 0
    blank = np.isnan(col) & np.isfinite(rebuilt[0])
    if not blank.any():
        return metrics, 0
    return {**metrics, ROLLING_RETURN: np.where(blank, rebuilt[0], col)}, int(blank.sum())


def summarize(metrics: dict[str, np.ndarray], metric: Optional[str] = None) -> dict:
    """Steps, iterations, wall time, throughput, episodes, final value of ``metric``, its max and
    min (``max``/``max_step``, ``min``/``min_step``) and ``best``/``best_step``: the max for a
    return (RETURN_METRICS), None for any other metric. Of the finite cells only; ``nonfinite``:
    {column: [(step, inf or -inf)]} of those left out, which the report names. ``metric``: the column
    summarized: of ``metric`` None (no --metric), ROLLING_RETURN where the file has a value of it (a
    mean of one iteration's few episodes is a noisy "best"), else FALLBACK_METRIC (runs logged before the
    column); a named one as named, charts/episodic_return too (an older report's per-iteration best);
    ``rolling``: whether ROLLING_RETURN was so chosen; the ``*_episodes`` counts of ROLLING_RETURN are its
    window's; its ``best`` is over the rows whose window held ROLLING_EPISODES or more where any did (an
    early window of a few lucky episodes is no best), over every row otherwise; its blank cells (rows of
    a run logged before the column, then resumed) are rebuilt from the rows, ``rolling_rebuilt`` of them."""
    rolling = metric is None and ROLLING_RETURN in metrics and bool(np.isfinite(metrics[ROLLING_RETURN]).any())
    metric = ROLLING_RETURN if rolling else metric or FALLBACK_METRIC
    rebuilt = 0
    if metric == ROLLING_RETURN:
        metrics, rebuilt = _with_rolling_filled(metrics)
    def last(name):
        col = metrics.get(name)
        if col is None:
            return None
        finite = col[np.isfinite(col)]
        return float(finite[-1]) if finite.size else None

    out = {"global_step": last("global_step"), "iterations": last("iteration"), "time": last("time"),
           "episodes": None, "final": None, "best": None, "best_step": None,
           "max": None, "max_step": None, "min": None, "min_step": None, "nonfinite": {},
           "metric": metric, "rolling": rolling, "rolling_rebuilt": rebuilt}
    steps = metrics.get("global_step")
    for name in dict.fromkeys(("iteration", "time", "episodes", metric, "eval/mean_return")):
        col = metrics.get(name)  # an inf is no value the summary can use: left out, and said (nonfinite)
        if col is not None and np.isinf(col).any():
            out["nonfinite"][name] = [(None if steps is None else float(steps[i]), float(col[i]))
                                      for i in np.flatnonzero(np.isinf(col))]
    if "episodes" in metrics:
        ep = metrics["episodes"]
        ep = ep[np.isfinite(ep)]  # an inf cell would make the count inf (int() of it raises)
        out["episodes"] = int(ep.sum()) if ep.size else None
    if out["global_step"] and out["time"]:
        out["sps"] = out["global_step"] / out["time"]
    col = metrics.get(metric)
    if col is not None and np.isfinite(col).any():
        ok = np.flatnonzero(np.isfinite(col))
        # an episodic mean is over the episodes of one iteration, as few as 1: its count says how much it weighs
        counts = (metrics.get("episodes") if metric in EPISODIC_METRICS
                  else _window_episodes(metrics) if metric == ROLLING_RETURN else None)

        def episodes_at(i):
            return int(counts[i]) if counts is not None and np.isfinite(counts[i]) else None

        out["final"] = float(col[ok[-1]])
        out["final_episodes"] = episodes_at(ok[-1])
        # a last row without a value (no episode ended in it) leaves the final value an earlier row's
        out["final_step"] = (float(steps[ok[-1]]) if ok[-1] != len(col) - 1 and steps is not None
                             and np.isfinite(steps[ok[-1]]) else None)
        for key, pick in (("max", np.argmax), ("min", np.argmin)):
            i = ok[pick(col[ok])]  # the first row with that value
            out[key] = float(col[i])
            out[f"{key}_step"] = float(steps[i]) if steps is not None and np.isfinite(steps[i]) else None
            out[f"{key}_episodes"] = episodes_at(i)
        if metric in RETURN_METRICS:
            full = ok if counts is None or metric != ROLLING_RETURN else ok[counts[ok] >= ROLLING_EPISODES]
            i = (full if full.size else ok)[np.argmax(col[full if full.size else ok])]
            out["best"], out["best_episodes"] = float(col[i]), episodes_at(i)
            out["best_step"] = float(steps[i]) if steps is not None and np.isfinite(steps[i]) else None
    ev = metrics.get("eval/mean_return")  # --eval-every: the deterministic policy's return during training
    if ev is not None and np.isfinite(ev).any():
        ok = np.flatnonzero(np.isfinite(ev))
        i = ok[np.argmax(ev[ok])]
        out["eval_last"], out["eval_best"] = float(ev[ok[-1]]), float(ev[i])
        out["eval_best_step"] = float(metrics["global_step"][i]) if "global_step" in metrics else None
        # every step that reached the best: best.pt holds the first policy to reach it since the run (re)started
        steps = metrics.get("global_step")
        out["eval_best_steps"] = [] if steps is None else [float(steps[j]) for j in ok if ev[j] == ev[i]]
    return out


def _edit_notes(run_dir: Path, ev: dict, config: dict) -> list:
    """One line each for a run file edited after the run wrote it, which the report would otherwise
    show as fact: an eval.json whose mean/std are not what its own returns give, a config.yaml that
    says other than the newest checkpoint's recorded config in a field no resume changes (env_id, seed,
    the network: what trained, and what eval evaluates, is the checkpoint's). ``config``: the run's
    config.yaml as _read_yaml read it (run_setup.read_run_config's reading, not parsed again)."""
    from .config import RESUME_SAFE, ConfigError, recorded_config
    from .evaluate import edited_summary
    from .run_setup import config_differences

    notes = []
    if str(ev.get("source", "")).startswith("eval.json"):
        edited = edited_summary(ev)
        if edited:
            notes.append(f"{_md(run_dir / 'eval.json')}: {edited}: the file was edited; its returns are what the evaluation measured")
    try:
        values = recorded_config(config, str(run_dir / "config.yaml")) if config else None
    except ConfigError:
        values = None
    if values is None:
        return notes  # none, or unreadable: the report's own reading of it names that
    from . import checkpoint as ckpt

    try:
        state = ckpt.load_checkpoint(run_dir)
        trained = recorded_config(state["config"], state["path"])
    except (ckpt.CheckpointError, ConfigError, OSError, KeyError, TypeError, ValueError):
        return notes  # no checkpoint, or one the final evaluation names
    differ = config_differences(trained, values, ("run_dir", *RESUME_SAFE))
    if differ:
        name, mine, theirs = differ[0]
        more = f" (and {', '.join(n for n, _, _ in differ[1:])})" if len(differ) > 1 else ""
        notes.append(f"{_md(run_dir / 'config.yaml')}: {name} {_md(_clip(repr(theirs)))}{more} differs from {_md(state['path'])}'s recorded {_md(_clip(repr(mine)))}: "
                     "config.yaml was edited after the run wrote it; the checkpoint's config is what trained")
    return notes


def _best_pt(run_dir: Path) -> Optional[tuple]:
    """(step, best_eval) of RUN/checkpoints/best.pt as recorded in it (best_eval as stored: None in a
    checkpoint older than the field), or None: no such file (never written, or set aside by a resume
    from an older checkpoint), a link, or one that does not load or records no step."""
    from . import checkpoint as ckpt

    path = ckpt.best_checkpoint_path(run_dir)
    if path.is_symlink() or not path.is_file():
        return None
    try:
        state = ckpt.load_checkpoint(path)  # weights_only: a run directory is data
    except (ckpt.CheckpointError, OSError):
        return None
    step = state.get("global_step")
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    return step, state.get("best_eval")


def _same_eval(a: float, b: float) -> bool:
    """Whether two records of one evaluation's mean return agree: a metrics.csv may hold it to 6
    significant digits (an RLHF run's writer, a file rewritten by another program), best.pt in full."""
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-9)


def _name_best_pt(run_dir: Path, summary: dict, meta: Optional[dict] = None,
                  metrics: Optional[dict] = None) -> None:
    """``summary["best_pt"]`` True when checkpoints/best.pt holds the policy of the best eval row: of
    its step (of tied rows, best.pt's, which the row then gives) and recording the row's value as its
    best_eval; the report names the file only then. The step alone does not tell: a resume after a
    crash keeps the best.pt the lost training wrote (only a better policy replaces it), and the
    resumed training evaluates that step again. Otherwise ``summary["best_pt_note"]`` says what
    best.pt holds (_best_pt_note)."""
    if summary.get("eval_best") is None:
        return
    found = _best_pt(run_dir)
    if found is None:
        return
    step, best = found
    at_best_row = float(step) in summary.get("eval_best_steps", [])
    if best is None:  # a checkpoint older than best_eval: its step is all there is to go by
        if at_best_row:
            summary["eval_best_step"], summary["best_pt"] = float(step), True
        return
    try:
        best = float(best) if _is_number(best) else math.nan
    except OverflowError:  # an int beyond any float
        best = math.nan
    if not math.isfinite(best):
        return  # damaged: no value to name the file by, nor to say it holds
    if at_best_row and _same_eval(best, summary["eval_best"]):
        summary["eval_best_step"], summary["best_pt"] = float(step), True
        return
    summary["best_pt_note"] = _best_pt_note(step, best, meta or {}, metrics or {})


def _best_pt_note(step: int, best: float, meta: dict, metrics: dict) -> str:
    """What checkpoints/best.pt holds when it is not the best eval row's policy: its step and value,
    and, when no metrics.csv row records that evaluation, that training a resume went back on wrote
    it: the resume named is meta.json's last from a step before best.pt's, since every training of
    that step after it logged its row."""
    head = f"checkpoints/best.pt holds the policy evaluated at step {step:,} ({best:.2f})"
    steps, ev = metrics.get("global_step"), metrics.get("eval/mean_return")
    if steps is not None and ev is not None and any(
            s == step and np.isfinite(v) and _same_eval(float(v), best) for s, v in zip(steps, ev)):
        return f"{head}, not the best evaluation above; `proxima eval RUN --best` evaluates that policy."
    resumes = meta.get("resumes")
    before = None
    for entry in resumes if isinstance(resumes, list) else []:
        s = entry.get("step") if isinstance(entry, dict) else None
        if isinstance(s, int) and not isinstance(s, bool) and s < step:
            before = entry
    if before is not None:
        try:  # meta.json is data: a time is shown as one, anything else left out
            when = f", started {datetime.fromisoformat(before['started']).isoformat(timespec='seconds')}"
        except (KeyError, TypeError, ValueError):
            when = ""
        lost = f"training before the resume from step {before['step']:,} (meta.json's resumes{when})"
    else:
        lost = "training that a resume went back on"
    return (f"{head}, which no metrics.csv row records: {lost} wrote it and was lost (killed or crashed before its "
            "next checkpoint); the resume kept it, as only a better policy replaces best.pt. The best above is the "
            "resumed training's; `proxima eval RUN --best` evaluates best.pt's.")


#: episodes of a fresh evaluation of a run whose config asks for none (--eval-episodes 0), or records no count
DEFAULT_EVAL_EPISODES = 10


def run_eval_episodes(run_dir: Optional[Path], config: Optional[dict] = None) -> int:
    """The episodes a fresh evaluation of a run runs when --episodes is not given: the run's own
    ``eval_episodes`` (its config.yaml's, which its eval.json was written with; else ``config``'s, a
    checkpoint's), so ``eval`` and ``report`` measure what the end-of-training eval.json measured
    and one population's rows never mix counts; DEFAULT_EVAL_EPISODES where that is 0 or not recorded."""
    return run_eval_episodes_from(run_dir, config)[0]


def run_eval_episodes_from(run_dir: Optional[Path], config: Optional[dict] = None) -> tuple:
    """(run_eval_episodes's count, where it came from: RUN/config.yaml's path, "checkpoint" for
    ``config``'s, None for the default): a refusal of the count names that file and field, not a flag
    the user never typed."""
    def count(v):
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else None

    found = None
    if run_dir is not None:
        try:  # data, read as the report reads it; one that cannot be read falls back to the checkpoint's
            found = count(_read_yaml(Path(run_dir) / "config.yaml").get("eval_episodes"))
        except ReportError:
            found = None
        if found is not None:
            return found, Path(run_dir) / "config.yaml"
    if isinstance(config, dict) and count(config.get("eval_episodes")):
        return config["eval_episodes"], "checkpoint"
    return DEFAULT_EVAL_EPISODES, None


def final_eval(run_dir: Path, config: dict, meta: dict, episodes: Optional[int], device: str = "cpu") -> dict:
    """eval.json if the run wrote one, else a fresh evaluation of the latest checkpoint over
    ``episodes`` episodes (None: the run's own, run_eval_episodes).

    Returns the evaluation result (proxima.evaluate.evaluate's dict) with ``source`` added, or
    ``{"error": "..."}`` when there is none to give (no checkpoint, RLHF run, --episodes 0).
    """
    saved = _check_eval(run_dir / "eval.json", _read_json(run_dir / "eval.json"))
    stale = _stale_eval(run_dir, saved)
    if saved.get("mean_return") is not None and not stale:
        return {**saved, "source": "eval.json (end of training)"}
    if meta.get("kind") == "rlhf":
        return {"error": "not applicable to an RLHF run"}
    if episodes is None:
        episodes = run_eval_episodes(run_dir, config)
    if episodes < 1:
        if stale:
            return {"error": f"eval.json is of step {saved['global_step']:,}, not of the run's last step "
                             f"({_last_step(run_dir):,}), and --episodes 0"}
        return {"error": "no eval.json and --episodes 0"}
    # a stale eval.json is there: "no eval.json" would send the user looking for a file they can see
    why = f"eval.json of step {saved['global_step']:,} set aside" if stale else "no eval.json"
    return evaluate_latest(run_dir, episodes, device, why)


def _stale_eval(run_dir: Path, saved: dict) -> bool:
    """An eval.json of another step than the one the run has reached (_last_step): of an earlier one,
    a run resumed and stopped before its end; of a later one, a timeline given up (a resume from an
    older checkpoint, killed before its first iteration ended, the newer checkpoints set aside). It
    records the step it evaluated (older ones do not: taken as they are)."""
    step = saved.get("global_step")
    if not isinstance(step, int) or isinstance(step, bool):
        return False
    last = _last_step(run_dir)
    return last is not None and last != step


def _last_step(run_dir: Path) -> Optional[int]:
    """The step the run has reached: its newest checkpoint's (the end-of-training evaluation is of
    it), else the last global_step of its metrics.csv; None when neither says."""
    step = _checkpoint_step(run_dir)
    if step is not None:
        return step
    try:
        steps = read_metrics(run_dir).get("global_step", np.array([]))
    except PlotError:
        return None
    steps = steps[np.isfinite(steps)]
    return int(steps[-1]) if steps.size else None


def _checkpoint_step(run_dir: Path) -> Optional[int]:
    """The global step of the run's newest checkpoints/step_*.pt, read from its name; None without one."""
    from .checkpoint import list_checkpoints

    files = list_checkpoints(run_dir)
    digits = files[-1].stem.split("_")[-1] if files else ""
    return int(digits) if digits.isdigit() else None


def missing_rows(metrics: dict, reached: Optional[int] = None, source: str = "") -> dict:
    """The iterations metrics.csv has no row of: ``gaps``, [(first, last, step before, step after)] of
    each run of missing iteration numbers (from iteration 1: a file cut at its head counts too; step
    before: 0 there); ``tail``, (last iteration, last step, ``reached``, first missing, last missing
    iteration or None where the step does not say, ``source``) when the file ends before ``reached``,
    the step the run's checkpoint or final evaluation is of (``source`` names which). Empty lists/None
    when every row is there. A resume from a run whose metrics.csv was cut logs on after its
    checkpoint; a copied or restored file may end early: either way the sums over rows (episodes) and
    the last row's values (steps, time) undercount, and nothing else would say so."""
    it, st = metrics.get("iteration"), metrics.get("global_step")
    out: dict = {"gaps": [], "tail": None}
    if it is None or st is None:
        return out
    ok = np.isfinite(it) & np.isfinite(st)
    rows = sorted((int(i), int(s)) for i, s in zip(it[ok], st[ok]))
    before = (0, 0)
    for i, s in rows:
        if i > before[0] + 1:
            out["gaps"].append((before[0] + 1, i - 1, before[1], s))
        before = (i, s)
    last_iter, last_step = before
    if reached is not None and reached > last_step:
        per = last_step // last_iter if last_iter and last_step % last_iter == 0 else None
        end = reached // per if per and reached % per == 0 else None
        out["tail"] = (last_iter, last_step, reached, last_iter + 1, end, source)
    return out


def resumed_into(meta: dict) -> Optional[str]:
    """The checkpoint a run's first start resumed (``proxima resume FILE --run-dir DIR``: a loose
    checkpoint continued into a new directory, whose meta.json records that resume's command), or
    None. Its metrics.csv starts after that checkpoint's step: the rows before it are in the run the
    file came from, not missing. A meta.json a resume recreated (recreated_at_step) records a resume's
    command too, but of a run whose own rows those were."""
    import os

    command = meta.get("command")
    if not isinstance(command, list) or meta.get("recreated_at_step") is not None:
        return None
    for i in range(1, len(command) - 1):  # the subcommand follows `proxima` or `-m proxima`
        if command[i] == "resume" and os.path.basename(str(command[i - 1])) == "proxima":
            return str(command[i + 1])
    return None


def _before_resume(missing: dict, checkpoint: Optional[str]) -> None:
    """Moves the head gap (from iteration 1) of a run resumed into a new directory (resumed_into) from
    ``gaps`` to ``before_resume``: (last iteration before the resume, its step or None, first logged
    step, checkpoint). Those rows are the source run's: neither missing nor an edit."""
    gaps = missing.get("gaps") or []
    if checkpoint is None or not gaps or gaps[0][0] != 1:
        return
    _, last, _, upto = gaps[0]
    # the resume's step is the first logged row's less one iteration's steps, where the steps say it
    step = upto // (last + 1) * last if upto % (last + 1) == 0 else None
    missing["gaps"] = gaps[1:]
    missing["before_resume"] = (last, step, upto, checkpoint)


def _iterations(first: int, last: Optional[int]) -> str:
    return (f"iteration {first:,}" if last == first else f"iterations {first:,}-{last:,}" if last is not None
            else f"iterations from {first:,}")


def _missing_notes(runs: list) -> list[str]:
    """A line per run whose metrics.csv lacks rows (missing_rows): which iterations and steps, and
    that the totals above count only the rows logged (the cells that undercount say "rows missing")."""
    lines = []
    for r in runs:
        who = f"{r['name']}: " if len(runs) > 1 else ""
        missing = r["summary"].get("missing") or {}
        if missing.get("before_resume"):
            last, step, upto, checkpoint = missing["before_resume"]
            at = f" at step {step:,}" if step is not None else ""
            lines.append(f"- {who}metrics.csv starts at step {upto:,} (iteration {last + 1:,}): this run was resumed from "
                         f"the checkpoint `{checkpoint}`{at} into a new directory, and the rows of "
                         f"{_iterations(1, last)} are in the metrics.csv of the run it came from; the episodes finished "
                         "count only this run's rows.")
        for first, last, after, upto in missing.get("gaps", []):
            lines.append(f"- {who}metrics.csv has no rows of {_iterations(first, last)} (between step {after:,} and step "
                         f"{upto:,}): rows missing (a resume from a cut metrics.csv, an edit); the episodes finished count "
                         "only the rows logged, and the curve has no point in between.")
        if missing.get("tail"):
            last_iter, last_step, reached, first, end, source = missing["tail"]
            lines.append(f"- {who}metrics.csv ends at step {last_step:,} (iteration {last_iter:,}), but the run reached step "
                         f"{reached:,}{f' ({source})' if source else ''}: the rows of {_iterations(first, end)} "
                         "are missing; the iterations, wall time, episodes finished and final value above are of the rows "
                         "logged.")
    return lines


class EnvTrust:
    """The --env / --trust-run of `proxima report`, as eval's: which recorded module:Class env (or
    Gymnasium ``module:EnvId``) its evaluations of runs without eval.json may import. ``env_id``: the env
    the user names, used for a run that records it (envs.same_env), never in place of another run's
    env (the report evaluates each run on its own); ``trust_run``: import whatever the runs record.
    ``applied``: whether ``env_id`` named the env of a run evaluated (run() notes it when not)."""

    def __init__(self, env_id: Optional[str] = None, trust_run: bool = False):
        self.env_id, self.trust_run, self.applied = env_id, trust_run, False

    def env_for(self, run_dir: Path) -> Optional[str]:
        """``env_id`` where it is the env ``run_dir``'s config.yaml records, else None."""
        from .envs import same_env

        if self.env_id is None or not same_env(self.env_id, run_env_id(run_dir)):
            return None
        self.applied = True
        return self.env_id


#: the EnvTrust of the report being built (env_trust); none: a recorded module:Class env is refused
_ENV_TRUST: contextvars.ContextVar = contextvars.ContextVar("proxima_report_env_trust", default=None)


@contextlib.contextmanager
def env_trust(env_id: Optional[str] = None, trust_run: bool = False):
    """Within it, evaluate_latest (a single run's and a population member's evaluation, when it has no
    eval.json) builds a recorded module:Class env as ``proxima eval --env ENV_ID`` / ``--trust-run``
    builds it (EnvTrust); yields the EnvTrust."""
    trust = EnvTrust(env_id, trust_run)
    token = _ENV_TRUST.set(trust)
    try:
        yield trust
    finally:
        _ENV_TRUST.reset(token)


def evaluate_latest(run_dir: Path, episodes: int, device: str = "cpu", why: str = "no eval.json") -> dict:
    """A fresh evaluation of the run's latest checkpoint, as the end of training would have made it
    (``episodes`` deterministic episodes, env seed: the run's seed + 1,000,000), with ``source``
    ("evaluated now from step_N.pt (``why``)": why eval.json's result is not used); or
    ``{"error": "could not evaluate: ..."}``. Shared by a single run's report and a population's
    members. A module:Class env the run records is built only as env_trust allows (report's --env,
    --trust-run), loaded and checked as `proxima eval` loads it."""
    from .checkpoint import CheckpointError, check_registered, load_policy
    from .envs import EnvError
    from .evaluate import command_line, evaluate
    from .guards import NonFiniteError

    trust = _ENV_TRUST.get() or EnvTrust()
    try:
        policy = load_policy(run_dir, device=device, env_id=trust.env_for(run_dir), trust_env=trust.trust_run)
        check_registered(policy)  # a run trained on an id its own code registered: the --env to give, as eval says
        # seed None: the end-of-training eval's (evaluate.default_seed); a module:Class env not named or trusted is
        # refused naming report's own --env / --trust-run
        with command_line("report"):
            result = evaluate(policy, episodes=episodes, backend=policy.config.get("backend", "auto"))
    except (CheckpointError, EnvError, NonFiniteError) as e:  # a NaN the env returned: the report says so, goes on
        in_progress = _in_progress(run_dir)
        if in_progress and not any((run_dir / "checkpoints").glob("step_*.pt")):
            return {"error": f"could not evaluate: the run is in progress ({in_progress}) and has no checkpoint yet"}
        return {"error": f"could not evaluate: {e}"}
    name = Path(policy.path).name
    step = name[len("step_"):-len(".pt")] if name.startswith("step_") and name.endswith(".pt") else ""
    # the step of what was evaluated: a run in progress has a newer checkpoint than its metrics.csv's last row
    at = {"global_step": int(step)} if step.isdigit() else {}
    return {**result, **at, "source": f"evaluated now from {name} ({why})"}


def _planned_steps(config: dict, meta: dict) -> Optional[int]:
    """The steps a single run trains: whole iterations of num_envs x num_steps (x processes) within
    config.yaml's total_timesteps, as the trainer counts them (config.num_iterations); None when the
    files do not say."""
    def count(v):
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None

    total, envs, steps = (count(config.get(k)) for k in ("total_timesteps", "num_envs", "num_steps"))
    world = count(meta.get("world_size")) or 1
    if None in (total, envs, steps):
        return None
    per = envs * steps * world
    return total // per * per


def run_progress(run_dir: Path, step: Optional[float], config: dict, meta: dict) -> tuple:
    """(progress, total): why a run has not trained its total steps yet, in
    population_report.progress_status's words: ``in progress: locked by pid P ...`` (its process, or
    a member's population's, holds the lock), ``stopped; `proxima resume RUN` continues it``,
    ``stopped before its first checkpoint``, ``stopped by train()'s callback; ...`` (its checkpoint
    records it: eval.json is written at such a stop too); None for a run that trained its total, ended
    at --stop-return, or wrote its end-of-training eval.json. total: the steps it trains (None: not recorded)."""
    from .population_report import member_population, progress_status

    member = member_population(run_dir)  # a member trains, locks and resumes with its population
    if member is not None:
        lock_dir, doc = member
        total = doc.get("total_timesteps_per_member")
        total = total if isinstance(total, int) and not isinstance(total, bool) else None
    else:
        lock_dir, total = run_dir, _planned_steps(config, meta)
    if not _in_progress(lock_dir):
        if total is None:
            return None, None  # no target to fall short of
        try:
            saved = _read_json(run_dir / "eval.json")
        except ReportError:  # final_eval names the file
            saved = {}
        short = step is not None and math.isfinite(step) and step < total
        if member is None and short and _stopped_by_callback(run_dir):  # its end-of-run eval.json says nothing of it
            return f"stopped by train()'s callback; `{_python_resume(run_dir)}` trains on", total
        if saved.get("mean_return") is not None and not _stale_eval(run_dir, saved):
            return None, total  # written at the end of training: --stop-return ended it, or the total
        if member is None and _stopped_at_return(run_dir, config):
            return None, total
    return progress_status(lock_dir, None if step is None else int(step), total), total


def _stopped_by_callback(run_dir: Path) -> bool:
    """Whether train()'s callback ended the run (its newest checkpoint records ``stopped_by_callback``,
    which a resume's checkpoints drop as it trains on)."""
    from .checkpoint import CheckpointError, load_checkpoint

    try:
        return load_checkpoint(run_dir).get("stopped_by_callback") is True
    except (CheckpointError, OSError, ValueError):
        return False


def _python_resume(run_dir: Path) -> str:
    """How a Python caller trains the run on (signals.python_resume), else its command."""
    from .signals import python_resume, resume_command

    return python_resume(run_dir) or resume_command(run_dir)


def _started_from(meta: dict) -> Optional[str]:
    """``PATH (step N of ENV)``: the checkpoint an --init-from run started from (meta.json's init_from);
    None for a run that started from a fresh network. Data: a value of another type is left out."""
    record = meta.get("init_from")
    if not isinstance(record, dict) or not isinstance(record.get("checkpoint"), str):
        return None
    step, env = record.get("global_step"), record.get("env_id")
    where = [f"step {step:,}" if isinstance(step, int) and not isinstance(step, bool) else None,
             f"of {env}" if isinstance(env, str) else None]
    where = " ".join(w for w in where if w)
    return record["checkpoint"] + (f" ({where})" if where else "")


def _stopped_at_return(run_dir: Path, config: dict) -> bool:
    """Whether --stop-return ended the run (its newest checkpoint's return window reaches it): then
    a run short of its total is complete, and a resume would train nothing."""
    return return_stop(run_dir, config) is not None


def return_stop(run_dir: Path, config: dict) -> Optional[dict]:
    """How --stop-return ended the run, from its newest checkpoint (written at the stop, its window
    kept in the TrainState, so a resume that trains on replaces it and one that trains nothing keeps
    it) and config.yaml's target (a resume's new target included): {"step", "iteration", "stop_return",
    "stop_episodes", "mean_return"}, the window (the last stop_episodes+ episodes) whose mean reached the
    target; None when it did not end the run, or a file cannot say (damaged, hand-edited)."""
    if config.get("stop_return") is None:
        return None
    from types import SimpleNamespace

    from .checkpoint import CheckpointError, load_checkpoint
    from .config import PPOConfig, coerce
    from .run_setup import stop_return_mean

    try:
        # read as a config file's values are: a hand-edited `stop_episodes: .inf` or `stop_return: x` is
        # a ConfigError (a ValueError), so the report goes on without this answer, not a traceback
        stop_return = coerce("stop_return", config["stop_return"], source="config.yaml")
        episodes = coerce("stop_episodes", config.get("stop_episodes", PPOConfig.stop_episodes), source="config.yaml")
        if stop_return is None or episodes < 1:
            return None
        state = load_checkpoint(run_dir)
        stop = SimpleNamespace(stop_return=stop_return, stop_episodes=episodes)
        mean = stop_return_mean(stop, state)
        step, iteration = state.get("global_step"), state.get("iteration")
        if mean is None or not math.isfinite(mean) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                              for v in (step, iteration)):
            return None
        return {"step": step, "iteration": iteration, "stop_return": float(stop_return), "stop_episodes": episodes,
                "mean_return": float(mean)}
    except (CheckpointError, OSError, ValueError, TypeError, KeyError, OverflowError):
        return None


def _in_progress(run_dir: Path) -> Optional[str]:
    """"locked by pid P since T" while a live process holds RUN/.proxima.lock (training), else None (a
    lock copied with the run from a directory its holder trains too: population_report.progress_status
    says so)."""
    import socket

    from .rundir import holder_alive, lock_copied_from, read_lock

    info = read_lock(run_dir)
    if not info or not holder_alive(info) or lock_copied_from(run_dir, info):
        return None
    host = f" on host {info['host']}" if info.get("host") and info["host"] != socket.gethostname() else ""
    return f"locked by pid {info.get('pid', '?')}{host}" + (f" since {info['since']}" if info.get("since") else "")


# ------------------------------------------------------------------------------------ markdown
#: what Markdown or HTML would act on in a value a run's files hold (a link, an image, a tag, emphasis,
#: an entity, a strikethrough, a backslash escape); not a backtick (the report's own cells quote commands
#: in code spans, and a value's own code span renders nothing), nor ``->``, the report's own arrow. An
#: underscore only where it can open or close emphasis (``__main__:MyEnv`` renders bold): one inside a
#: word (episodic_return) is literal in CommonMark
_MARKUP = re.compile(r"[<\[\]*&~\\]|(?<!-)>|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def _md(text) -> str:
    """``text`` as Markdown shows it literally: in a code span when it holds markup (meta.json's
    git_commit ``[click me](http://evil)``, a command holding ``<img onerror=...>``: values the run's
    files hold, shown, never rendered), else as it is. Control characters are written as their escapes
    (terminal.printable: ``\\x1b``, ``\\n``) either way: ``cat report.md`` must not retitle or recolour
    the terminal, and a newline must not end the line (a table row, a list item) it stands in."""
    text = printable(str(text))
    return _code(text) if _MARKUP.search(text) else text


def _code(text) -> str:
    """``text`` in a code span, its control characters escaped (terminal.printable), fenced with one
    more backtick than its longest run of them so that none of its own closes the span. Padded with
    a space each side only where CommonMark needs it (``CartPole-v1__1`` reads as it is): text that
    starts or ends with a backtick (which would join the fence), or with a space at both ends (of
    which CommonMark strips one, unless the text is all spaces: kept as it is), or no text at all."""
    text = printable(str(text))
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    stripped = bool(text.strip(" ")) and text[0] == " " and text[-1] == " "  # all spaces: CommonMark strips none
    pad = " " if not text or text[0] == "`" or text[-1] == "`" or stripped else ""
    return f"{fence}{pad}{text}{pad}{fence}"


#: the most characters of a run's own text (an env id, meta.json's preset, a config.yaml value, a package version,
#: a key) one cell of the report shows: the start, then '...' (a hand-edited meta.json preset of 10 kB, a pad key
#: of config.yaml, printed whole, made a table unreadable). Numbers are never cut
CELL_MAX_CHARS = 80
#: the cells that hold a command line or a path (or a device's history of resumes): long by nature, cut only here
LONG_CELL_MAX_CHARS = 1000
LONG_CELLS = frozenset({"command", "resume command", "working directory", "started from", "git commit", "device",
                        "host", "cpu tanh", "run_dir", "init_from", "env_kwargs"})


def _clip(value, limit: int = CELL_MAX_CHARS):
    """``value`` (a run file's: a string, or a list or mapping as _cell joins it) cut to ``limit`` characters
    of its text, its start kept and '...' after it; a number, bool or None as it is, as is a shorter value."""
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit - 3] + "..."
    if isinstance(value, (list, tuple, dict)):
        text = _plain(value)
        return value if len(text) <= limit else text[:limit - 3] + "..."
    return value


def _clip_field(key, value):
    """_clip of the cell of row ``key`` (a config field, a machine or version row): LONG_CELLS' at LONG_CELL_MAX_CHARS."""
    return _clip(value, LONG_CELL_MAX_CHARS if key in LONG_CELLS else CELL_MAX_CHARS)


def _joined(value, write) -> Optional[str]:
    """``value`` as a cell writes it where it is not text: MISSING for none, a bool in lower case, a float short,
    a list or mapping joined (each item and key by ``write``); None for text, which _cell and _plain write apart."""
    if value is None or value == "":
        return MISSING
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value) if len(repr(value)) <= 12 else f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(write(v) for v in value) if value else "[]"
    if isinstance(value, dict):
        return ", ".join(f"{write(k)}={write(v)}" for k, v in value.items()) if value else "{}"
    return None


def _plain(value) -> str:
    """``value`` as _cell writes it, before Markdown escaping: what _clip measures."""
    text = _joined(value, _plain)
    return str(value) if text is None else text


def _cell(value) -> str:
    text = _joined(value, _cell)
    text = _md(value) if text is None else text
    return text.replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Sequence[Sequence]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) if i else str(c) for i, c in enumerate(r)) + " |" for r in rows]
    return lines


def _num(x, fmt="{:,.0f}") -> Optional[str]:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else fmt.format(x)


def _value(v: float) -> str:
    """A metric's value: 2 decimals, or 3 significant digits for a small one (a KL of 0.004)."""
    return f"{v:.2f}" if v == 0 or abs(v) >= 0.1 else f"{v:.3g}"


def _eval_line(ev: dict) -> str:
    from .evaluate import episodes_words, unfinished_note

    if "error" in ev:
        return ev["error"]
    mode = "deterministic" if ev.get("deterministic", True) else "stochastic"
    return (f"{ev['mean_return']:.2f} \u00b1 {ev.get('std_return', 0.0):.2f} over {episodes_words(ev.get('episodes'))} ({mode})"
            + _eval_step(ev) + unfinished_note(ev))


#: what report.md's two standard deviations are, said under each
STD_OVER_EPISODES = ("\u00b1 is the standard deviation of a run's evaluation returns over its episodes, its squared deviations "
                     "averaged over the episodes (ddof 0, as np.std and SB3's evaluate_policy give it; eval.json's std_return).")
STD_ACROSS_RUNS = ("std (n-1) is the sample standard deviation of the runs' final eval mean returns, its squared deviations "
                   "summed and divided by the number of runs - 1 (ddof 1): the runs are a sample of seeds.")
#: the same where some group's runs share a seed (or do not record one): no claim that they sample seeds
STD_ACROSS_SAME_SEED = ("std (n-1) is the sample standard deviation of the runs' final eval mean returns, its squared deviations "
                        "summed and divided by the number of runs - 1 (ddof 1); only runs of distinct seeds are a sample of seeds.")

#: said of a run that compiled: its figures are whole-run ones, and a cold compile is tens of seconds
COMPILE_NOTE = ("{who}--compile: wall time and throughput include torch.compile's compilation (in iteration 1 and in the "
                "first iteration after each resume; tens of seconds on a cold cache); metrics.csv's charts/SPS of the "
                "later iterations is the compiled speed.")


def _seeds_problem(seeds: list) -> str:
    """'' when ``seeds`` (the runs' config seeds) are all recorded and distinct: a sample of seeds;
    else a sentence saying what they are, for the across-runs line (two runs of one seed differ by
    float rounding or a switch such as --compile, which is no spread across seeds)."""
    known = [x for x in seeds if isinstance(x, int) and not isinstance(x, bool)]
    if len(known) == len(seeds) and len(set(known)) == len(known):
        return ""
    if len(known) < len(seeds):
        return "Not every run records its seed: they are not known to be a sample of seeds."
    shown = f"seed {known[0]}" if len(set(known)) == 1 else "seeds " + ", ".join(str(x) for x in known)
    return f"{len(seeds)} runs of {shown}: not a sample of seeds; the spread is not across seeds."


def _success_cell(ev: dict) -> Optional[str]:
    """``0.80`` (``0.50 over 4 of 10 episodes``: those that reported info['is_success']): the final evaluation's
    success_rate (evaluate.success_fields); None (a blank cell, not 0) where no episode reported one."""
    rate = ev.get("success_rate")
    if "error" in ev or rate is None:
        return None
    k, n = ev.get("success_episodes"), ev.get("episodes")
    return f"{rate:.2f}" + (f" over {k:,} of {n:,} episodes" if k is not None and isinstance(n, int) else "")


def _eval_setup(ev: dict) -> str:
    """``env seed 1,000,001, backend native, at most 100,000 steps per episode``: what the evaluation ran
    with as it records it (each changes its episodes); "" for an older eval.json that records none."""
    seed, backend, cap = ev.get("seed"), ev.get("backend"), ev.get("max_steps")
    parts = [f"env seed {seed:,}"] if _is_number(seed) else []
    parts += [f"backend {_md(backend)}"] if isinstance(backend, str) else []
    parts += [f"at most {cap:,} steps per episode"] if _is_number(cap) else []
    return ", ".join(parts)


def _eval_step(ev: dict, words: str = " of the policy at step") -> str:
    """`` of the policy at step 15,360`` (eval.json's global_step, or the checkpoint evaluated now): of
    a run in progress it is newer than the table's steps; "" when not recorded (an older eval.json)."""
    step = ev.get("global_step")
    return f"{words} {step:,}" if isinstance(step, int) and not isinstance(step, bool) else ""


def _stop_cell(stop: Optional[dict]) -> Optional[str]:
    """``at step 40,960 (iteration 80): the last 20+ training episodes averaged 500.0, reaching 500`` (return_stop),
    the stop line's words, with why the table's rolling return reads otherwise; None: not so ended."""
    if not stop:
        return None
    n = stop["stop_episodes"]
    why = (f"; {ROLLING_RETURN} averages the last {ROLLING_EPISODES}, older episodes too" if n < ROLLING_EPISODES else
           f"; {ROLLING_RETURN} averages only the last {ROLLING_EPISODES}" if n > ROLLING_EPISODES else "")
    return (f"at step {stop['step']:,} (iteration {stop['iteration']:,}): the last {n:,}+ training episodes "
            f"averaged {stop['mean_return']:.1f}, reaching {stop['stop_return']:g}{why}")


def _steps_cell(summary: dict, progress: Optional[str]) -> Optional[str]:
    """``4,096``; of a run short of its total, ``3,584 of 4,096 steps so far (stopped; ...)`` as a
    population's first line says it (population_report.training_progress); of a run whose metrics.csv
    ends before its checkpoint (missing_rows' tail), the step the run reached, then the file's. A stopped
    run that logged past its newest checkpoint (``checkpoint``: a kill) has its steps said as logged and the
    checkpoint's step beside them: a resume drops the rows after it and trains those steps again."""
    step = _num(summary["global_step"])
    tail = (summary.get("missing") or {}).get("tail")
    if tail:
        step = f"{tail[2]:,} ({step} in metrics.csv: rows missing)"
    if progress is None:
        return step
    total = summary.get("total")
    of = "" if total is None else f" of {total:,}"
    logged, ckpt = summary["global_step"], summary.get("checkpoint")
    if (progress.startswith("stopped") and isinstance(ckpt, int) and _is_number(logged) and math.isfinite(logged)
            and ckpt < logged and not tail):
        return past_checkpoint_text(f"{step}{of} steps", ckpt, progress)
    return f"{step or MISSING}{of} steps so far ({progress})"


def past_checkpoint_text(steps: str, checkpoint: int, progress: str) -> str:
    """``3,584 of 20,480 steps logged so far; last checkpoint at 3,072 (stopped; `proxima resume RUN` continues
    it from there)``: the steps (``steps``, as counted) of a stopped run, or population, that logged past its newest
    checkpoint, whose later rows a resume drops and trains again. Shared by a run's steps cell and a population's
    first line (population_report.training_progress)."""
    ends = " from there" if progress.endswith(" continues it") else ""
    return f"{steps} logged so far; last checkpoint at {checkpoint:,} ({progress}{ends})"


def _nonfinite_notes(runs: list) -> list[str]:
    """A line per column of a run whose inf or -inf cells the summary leaves out (summarize's
    ``nonfinite``), as a population's report names a member left out for an inf: a final value
    silently taken from an earlier row would read as the run's last."""
    lines = []
    for r in runs:
        who = f"{r['name']}: " if len(runs) > 1 else ""
        for column, cells in r["summary"].get("nonfinite", {}).items():
            shown = ", ".join(("inf" if v > 0 else "-inf") + ("" if s is None else f" at step {s:,.0f}")
                              for s, v in cells[:3]) + (f" and {len(cells) - 3} more" if len(cells) > 3 else "")
            lines.append(f"- {who}metrics.csv's {column} is not finite in {len(cells)} row(s) ({shown}): left out, "
                         "the rows above are of its finite values.")
    return lines


def _episodes_note(evals: list) -> str:
    """" (their evaluations ran 3, 3 and 10 episodes; each run's mean counts once)" when the runs'
    evaluations differ in their number of episodes (an eval.json of --eval-episodes 3 beside one made
    now with --episodes 10), else "". The runs stay one group: the statistic is over runs, each
    run's mean one value whatever its episodes, and splitting them by episodes would part runs of
    one setting and drop the summary of a group left with one run; the note says what was averaged."""
    counts = [ev.get("episodes") for ev in evals]
    if len(set(map(repr, counts))) < 2:
        return ""
    words = [f"{c:,}" if isinstance(c, int) and not isinstance(c, bool) else "?" for c in counts]
    return f" (their evaluations ran {', '.join(words[:-1])} and {words[-1]} episodes; each run's mean counts once)"


def _versions(meta: dict) -> dict:
    v = dict(meta.get("versions") or {})
    for key in ("proxima", "python", "torch", "gymnasium", "numpy", "transformers", "peft"):
        if key not in v and meta.get(key) is not None:  # RLHF runs keep them at the top level
            v[key] = meta[key]
    for key in v:
        v[key] = _on_resume(meta, v[key], lambda r, key=key: (r.get("versions") or {}).get(key)
                            if isinstance(r.get("versions") or {}, dict) else None)
    return v


def _on_resume(meta: dict, first, of_resume, show=None) -> object:
    """``first`` (the first start's value in meta.json), followed by `` -> VALUE from step N`` for each
    resume (meta.json ``resumes``) whose value (``of_resume(entry)``; None: not recorded) differs from
    the one before: meta.json's top says only what the run started with, and a resume may run other
    code, versions or devices. ``show(record)``: how the first start's record (meta) and a resume's
    entry are written, when not as their values are (a commit marked "uncommitted changes").
    ``first`` as it is when none changed (or the first start recorded none). A resume on an abandoned
    timeline (_abandoned) is left out: the run's history never went through it."""
    resumes = meta.get("resumes")
    show = show or (lambda record: first if record is meta else of_resume(record))
    if first is None or first == "" or not isinstance(resumes, list):
        return show(meta)
    cell, now = None, first
    for entry, gone in zip(resumes, _abandoned(resumes)):
        value = of_resume(entry) if isinstance(entry, dict) and not gone else None
        if value is None or value == now:
            continue
        step = entry.get("step")
        cell = (cell or _cell(show(meta))) + f" -> {_cell(show(entry))}" + (
            f" from step {step:,}" if isinstance(step, int) and not isinstance(step, bool) else "")
        now = value
    return show(meta) if cell is None else cell


def _abandoned(resumes: list) -> list:
    """Per entry of meta.json's ``resumes``, whether it is on an abandoned timeline: marked so
    (train_state.record_resume), or followed by a resume from the same or an earlier step (a meta.json
    written before that mark): that resume went back to that checkpoint, and set aside what trained after it."""
    flags, low = [], None
    for entry in reversed(resumes):
        step = entry.get("step") if isinstance(entry, dict) else None
        step = step if isinstance(step, int) and not isinstance(step, bool) else None
        marked = isinstance(entry, dict) and entry.get("abandoned") is True
        flags.append(marked or (step is not None and low is not None and step >= low))
        if step is not None:
            low = step if low is None else min(low, step)
    return flags[::-1]


def _resume_count(resumes) -> object:
    """The report's resumes cell: how many resumes the run's history went through, and apart, how many
    more ran on an abandoned timeline; None when none was recorded (or the list was edited into another type)."""
    if not isinstance(resumes, list) or not resumes:
        return None
    gone = sum(_abandoned(resumes))
    kept = len(resumes) - gone
    return kept if not gone else f"{kept} ({gone} more on an abandoned timeline)"


def _machine(meta: dict) -> dict:
    m = meta.get("machine") or {}
    gpus = [f"{g.get('name', '?')} ({g.get('memory_gib', '?')} GiB)" for g in m.get("gpus") or [] if isinstance(g, dict)]
    command = meta.get("command")
    return {
        "device": _on_resume(meta, meta.get("device"), lambda r: r.get("device")), "world size": meta.get("world_size"),
        "env backend": meta.get("env_backend"), "preset": meta.get("preset"),  # Pendulum-v1/default, none
        "platform": m.get("platform"), "cpu": m.get("machine"), "cpu model": _cpu_model(m), "cpu count": m.get("cpu_count"),
        "cpu tanh": _on_resume(meta, _tanh(m), _tanh, lambda r: _tanh_cell(r.get("machine") if r is meta else r)),
        "torch build": m.get("torch_build"), "CUDA": m.get("cuda"), "CUDA driver": m.get("cuda_driver"),
        "cuDNN": m.get("cudnn"), "GPUs": gpus or (m.get("gpu_count") if m else None), "bf16": m.get("bf16"),
        "git commit": _on_resume(meta, _git_code(meta), _git_code, _git_cell),
        "host": _on_resume(meta, meta.get("host"), lambda r: r.get("host")),
        "working directory": _on_resume(meta, meta.get("cwd"), lambda r: r.get("cwd")),
        "started": _recreated(meta, meta.get("started") or meta.get("created")),
        "command": _recreated(meta, _tanh_env(m, _command_cell(command))),
        "resumes": _resume_count(meta.get("resumes")),
        "resume command": _resume_command(meta.get("resumes")),
    }


def _cpu_model(m: dict):
    """The CPU's model and, in parentheses, its maker (doctor's cpu_model and cpu_vendor in meta.json's
    machine section): with the CPU tanh they decide whether a rerun is bit-identical. "not recorded" for a
    machine section written before Proxima recorded them; None where the run recorded no machine at all."""
    if not m:
        return None
    if "cpu_model" not in m and "cpu_vendor" not in m:
        return "not recorded"
    vendor = m.get("cpu_vendor")
    return f"{m.get('cpu_model') or 'unknown'}" + (f" ({vendor})" if vendor else "")


def _tanh(record: dict):
    """The CPU tanh a record (meta.json's machine section, or a resume's entry) says the run computed with:
    (cpu_tanh, cpu_tanh_eager) (train_state.tanh_record; the second None but under --amp or --compile),
    None where none is recorded."""
    if not isinstance(record, dict) or not record.get("cpu_tanh") or not isinstance(record["cpu_tanh"], str):
        return None  # a cpu_tanh of another type (edited by hand): no mode to name, as not recorded
    eager = record.get("cpu_tanh_eager")
    return record["cpu_tanh"], eager if isinstance(eager, str) else None


def _tanh_cell(record):
    """How the report shows a record's CPU tanh: "sigmoid"; under --amp or --compile "torch (sigmoid outside
    the --amp/--compile steps)"; for the first start's, "(not this CPU's default, torch)" after it where
    tanh_cpu would have chosen another with PROXIMA_CPU_TANH unset (_default_tanh). "not recorded" for a
    machine section without it, or with one that is not a mode name (5, true, a list: edited)."""
    tanh = _tanh(record)
    if tanh is None:
        edited = isinstance(record, dict) and record.get("cpu_tanh") not in (None, "")  # 5, true, a list
        return "not recorded" if isinstance(record, dict) and record and ("platform" in record or edited) else None
    cell = tanh[0] + (f" ({tanh[1]} outside the --amp/--compile steps)" if tanh[1] else "")
    default = _default_tanh(record)
    if default is not None and (tanh[1] or tanh[0]) != default:
        cell += f" (not this CPU's default, {default})"
    return cell


def _default_tanh(m: dict):
    """The CPU tanh tanh_cpu.choose_mode picks with PROXIMA_CPU_TANH unset on the machine that ``m`` (meta.json's
    machine section) records; None where it cannot say: no cpu_vendor recorded, or a maker other than Intel
    with no numpy tanh target in cpu_simd (it picks numpy's AVX-512 tanh or the sigmoid form by it). Whether
    torch has MKL is not recorded: a CPU not Intel's is taken to have it, as torch's x86 wheels do."""
    if not isinstance(m, dict) or "cpu_vendor" not in m:
        return None
    from .tanh_cpu import choose_mode

    vendor = m.get("cpu_vendor") or ""
    if vendor in ("", "GenuineIntel"):
        return choose_mode(None, True, vendor)
    target = re.search(r"numpy tanh (\S+)", str(m.get("cpu_simd") or ""))
    if target is None or target.group(1) == "unknown":
        return None
    return choose_mode(None, True, vendor, target.group(1))


def _tanh_env(m: dict, command):
    """The first start's command as the report shows it, led by ``PROXIMA_CPU_TANH=MODE`` where the recorded CPU
    tanh is not the machine's default (_default_tanh): meta.json does not record the variable, and the
    command alone would rerun with another tanh, and other numbers."""
    tanh, default = _tanh(m), _default_tanh(m)
    if not isinstance(command, str) or tanh is None or default is None or (tanh[1] or tanh[0]) == default:
        return command
    return f"PROXIMA_CPU_TANH={tanh[1] or tanh[0]} {command}"


def _resume_command(resumes):
    """The last resume's command (meta.json ``resumes``; one on an abandoned timeline left out) and the
    step it trained from: what a resume ran may differ from the first start's command; None for no resume."""
    if not isinstance(resumes, list):
        return None
    kept = [e for e, gone in zip(resumes, _abandoned(resumes)) if isinstance(e, dict) and not gone]
    if not kept or kept[-1].get("command") in (None, "", []):
        return None
    step = kept[-1].get("step")
    where = [f"from step {step:,}"] if isinstance(step, int) and not isinstance(step, bool) else []
    where += [f"the last of {len(kept)}"] if len(kept) > 1 else []
    return f"{_command_cell(kept[-1]['command'])}" + (f" ({', '.join(where)})" if where else "")


def _recreated(meta: dict, cell):
    """A cell of the first start (its time, its command) marked when a resume recreated a lost meta.json
    (train_state.open_run_dir): then it is that resume's, and the first start's is not known."""
    step = meta.get("recreated_at_step")
    if cell is None or not isinstance(step, int) or isinstance(step, bool):
        return cell
    return f"{cell} (a resume at step {step:,}: meta.json was lost and recreated)"


def _command_cell(command):
    """meta.json's command as report.md shows it: a command line joined; a notebook kernel's argv (what
    a run started from Python in Jupyter recorded) as the python_command it stands for."""
    from .rundir import is_kernel_argv, python_command

    if is_kernel_argv(command):
        return python_command(argv=command)
    if isinstance(command, list):
        import shlex

        # quoted as a shell reads it: a path with a space or a JSON --env-kwargs is copied and run as recorded
        return shlex.join(map(str, command))
    return command


def _git_code(record: dict):
    """What code a record (meta.json, or a resume's entry) says ran: its commit and whether the checkout
    had uncommitted changes (a resume may run edits on the same commit), None when no commit is recorded."""
    commit = record.get("git_commit")
    return None if commit is None or commit == "" else (commit, record.get("git_dirty") is True)


def _git_cell(meta: dict):
    """The commit a run started from, marked when the checkout had uncommitted changes (``git_dirty``):
    then the commit alone does not say what code ran."""
    commit = meta.get("git_commit")
    if commit is not None and meta.get("git_dirty") is True:
        return f"{commit} (uncommitted changes)"
    return commit


def _keyed_rows(dicts: Sequence[dict], clip: bool = True) -> list[list]:
    """A row per key of ``dicts`` (the runs' config.yaml, versions, machine): its values, _clip_field'ed unless ``clip`` is False."""
    keys: list = []
    for d in dicts:
        keys += [k for k in d if k not in keys]
    # a key is the run's too (config.yaml's, meta.json's versions): escaped (and cut) as its values are
    if not clip:
        return [[_cell(k)] + [d.get(k) for d in dicts] for k in keys]
    return [[_cell(_clip(k))] + [_clip_field(k, d.get(k)) for d in dicts] for k in keys]


def _compiled(run: dict) -> bool:
    """Whether the run's config.yaml says it compiled (--compile)."""
    return (run.get("config") or {}).get("compile") is True


def group_summaries(runs: list[dict]) -> list[dict]:
    """Per group of two or more runs with a final eval (env and settings: returns of different envs are
    never averaged): {group, runs, mean, std (ddof 1), min, max, episodes_note, seeds_problem} of their
    final eval mean returns; [] for one run. The one computation behind report.md's line and its JSON."""
    out = []
    if len(runs) < 2:
        return out
    for group in dict.fromkeys(r.get("group", r["env"]) for r in runs):
        grouped = [r for r in runs if r.get("group", r["env"]) == group and "mean_return" in r["eval"]]
        evals = [r["eval"]["mean_return"] for r in grouped]
        if len(evals) > 1:
            # runs of distinct seeds are a sample of seeds: the sample std (divided by n - 1) is what a paper
            # reports; runs of one seed (eager beside --compile) are not, and their spread says nothing of seeds
            out.append({"group": group, "runs": len(evals), "mean": float(np.mean(evals)),
                        "std": float(np.std(evals, ddof=1)), "min": float(np.min(evals)), "max": float(np.max(evals)),
                        "episodes_note": _episodes_note([r["eval"] for r in grouped]),
                        "seeds_problem": _seeds_problem([(r.get("config") or {}).get("seed") for r in grouped])})
    return out


def render(runs: list[dict], curve: Optional[str], curve_note: Optional[str], metric: str, x: str) -> str:
    """The report text. runs: dicts with dir, name, env, config, meta, summary, eval."""
    envs = sorted({r["env"] for r in runs})
    # a run directory's name is whoever made it's (a downloaded run's folder): shown, never rendered
    runs = [{**r, "name": _md(r["name"])} for r in runs]
    names = [r["name"] for r in runs]
    title = ", ".join(_md(_clip(env)) for env in envs)  # config.yaml's env_id: shown, never rendered, cut
    lines = [f"# Proxima report: {title}", ""]
    # in a code span markup shows as written; a backtick or control character in the path needs _code's fence
    where = ", ".join(f"`{r['dir']}`" if "`" not in str(r["dir"]) and printable(str(r["dir"])) == str(r["dir"])
                      else _code(r["dir"]) for r in runs)
    # with its UTC offset, as meta.json's times (train_state.started_now): a report read in another time zone says when
    lines += [f"Generated {datetime.now().astimezone().isoformat(timespec='seconds')} by `proxima report` from {where}.", ""]
    for r in runs:  # a diverged member's numbers stop there: said first, not left for the reader to find
        if r.get("diverged"):
            who = r["name"] if len(runs) > 1 else "This population member"
            lines += [f"**{who} {r['diverged']}**: frozen from then on, its later metrics.csv rows are blank and its "
                      "population's statistics and curves leave it out.", ""]

    lines += ["## Results", ""]
    rows = []
    s = [r["summary"] for r in runs]
    rows.append(["env"] + [_clip(r["env"]) for r in runs])
    rows.append(["steps"] + [_steps_cell(r["summary"], r.get("progress")) for r in runs])
    if any(r.get("stopped_at_return") for r in runs):
        rows.append(["ended by --stop-return"] + [_stop_cell(r.get("stopped_at_return")) for r in runs])
    started = [_started_from(r["meta"]) for r in runs]
    if any(started):  # --init-from: which weights, once the source has been extended or its files rotated
        rows.append(["started from"] + [_clip_field("started from", v) for v in started])
    def short(x, cell):  # a last row's value of a file cut short: said where it is read, the note names the rows
        return cell if cell is None or not (x.get("missing") or {}).get("tail") else f"{cell} (rows missing)"

    def episodes(x):  # a sum over rows undercounts wherever rows are missing, a gap as well as a cut end
        missing = x.get("missing") or {}
        if x["episodes"] is None or not (missing.get("tail") or missing.get("gaps")):
            before = missing.get("before_resume")
            if x["episodes"] is not None and before and before[1] is not None:
                return f"{x['episodes']:,} since step {before[1]:,} (resumed from `{before[3]}`)"
            return _num(x["episodes"])
        return f"at least {x['episodes']:,} (rows missing)"

    rows.append(["iterations"] + [short(x, _num(x["iterations"])) for x in s])
    rows.append(["wall time"] + [short(x, _num(x["time"], "{:,.1f} s")) for x in s])
    # a population's member counts its own steps over the time the population took for all of them
    rows.append(["throughput"] + [_num(r["summary"].get("sps"), "{:,.0f} steps/s" + (" per member" if r.get("member") else "")
                                       + (", compilation included" if _compiled(r) else ""))
                                  for r in runs])
    rows.append(["episodes finished"] + [episodes(x) for x in s])
    def at_step(x, value, step, episodes=None):
        if value is None:
            return None
        # a rolling mean's count is its window's, the other episodic means' their one iteration's
        last = "last " if x.get("metric") == ROLLING_RETURN else ""
        count = f" ({last}{episodes:,} episode{'' if episodes == 1 else 's'})" if episodes is not None else ""
        return _value(value) + (f" at step {step:,.0f}" if step is not None else "") + count

    # the column summarized: the rolling return where a run logged it, the per-iteration one of older runs
    label = " or ".join(dict.fromkeys(sorted((x.get("metric", metric) for x in s), key=lambda m: m != ROLLING_RETURN)))
    rows.append([f"final {label}"] + [short(x, at_step(x, x["final"], x.get("final_step"), x.get("final_episodes"))) for x in s])
    if metric in RETURN_METRICS:
        rows.append([f"best {label}"] + [at_step(x, x["best"], x["best_step"], x.get("best_episodes")) for x in s])
    else:  # a loss is best low, an entropy or a length depends: the extremes, not a "best"
        rows.append([f"max {label}"] + [at_step(x, x["max"], x["max_step"], x.get("max_episodes")) for x in s])
        rows.append([f"min {label}"] + [at_step(x, x["min"], x["min_step"], x.get("min_episodes")) for x in s])
    if any("eval_last" in x for x in s):  # evaluations during training (--eval-every)
        rows.append(["eval return during training, last"] + [_num(x.get("eval_last"), "{:.2f}") for x in s])
        rows.append(["eval return during training, best"] + [
            None if x.get("eval_best") is None else f"{x['eval_best']:.2f}" + (
                f" at step {x['eval_best_step']:,.0f}" if x.get("eval_best_step") is not None else "") + (
                " (checkpoints/best.pt)" if x.get("best_pt") else "")
            for x in s])
    rows.append(["final eval return"] + [_eval_line(r["eval"]) for r in runs])
    success = [_success_cell(r["eval"]) for r in runs]
    if any(cell is not None for cell in success):  # an env that reports info['is_success']: a row of its own
        rows.append(["final eval success rate"] + success)
    lines += _table([""] + names, rows)
    if any(cell is not None for cell in success):
        lines += ["", "final eval success rate: the share of the final evaluation's episodes whose last step's "
                      "info['is_success'] was true, of those that reported it (eval.json's success_rate); blank for a "
                      "run whose env reported none."]
    if ROLLING_RETURN in label.split(" or "):
        lines += ["", f"{ROLLING_RETURN} (metrics.csv): the mean return of the last 100 or more finished episodes, those of the "
                      "fewest most recent iterations that hold at least 100 (an iteration's episodes are not split; all of "
                      "them before 100 had finished); its best is over the rows whose window held 100 or more, of a run "
                      "with none over every row (the episodes its window held are given)."]
        rebuilt = [f"{r['name'] + ': ' if len(runs) > 1 else ''}{r['summary']['rolling_rebuilt']:,}" for r in runs
                   if r["summary"].get("rolling_rebuilt")]
        if rebuilt:  # a run logged before the column and resumed under it: its early rows are blank there
            lines += ["", f"{ROLLING_RETURN} of rows logged without it (a run resumed under a newer Proxima) is rebuilt "
                          f"from their episodes and charts/episodic_return, as the resume rebuilt its window (rows: {', '.join(rebuilt)})."]
    if metric in EPISODIC_METRICS:
        lines += ["", f"{metric} per iteration (metrics.csv): the mean over the episodes that finished in that iteration."]
    elif metric != ROLLING_RETURN:  # the curve's rolling return is the table's, said above
        lines += ["", f"{metric}: one value per iteration, as logged in metrics.csv."]
    notes = _missing_notes(runs) + _nonfinite_notes(runs) + [
        f"- {r['name'] + ': ' if len(runs) > 1 else ''}{r['summary']['best_pt_note']}" for r in runs if r["summary"].get("best_pt_note")]
    notes += [f"- {note}" for r in runs for note in r["summary"].get("edits", [])]
    notes += [f"- {r['meta_note']}" for r in runs if r.get("meta_note")]
    notes += [f"- {COMPILE_NOTE.format(who=r['name'] + ': ' if len(runs) > 1 else '')}" for r in runs
              if _compiled(r) and r["summary"].get("sps") is not None]
    if notes:
        lines += [""] + notes
    groups = group_summaries(runs)
    for g in groups:  # a paragraph each: right after the notes' list, Markdown would read it as that list's last item
        lines += ["", f"Final eval of {g['group']} over {g['runs']} runs{g['episodes_note']}: mean {g['mean']:.2f}, "
                      f"std (n-1) {g['std']:.2f}, min {g['min']:.2f}, max {g['max']:.2f}."
                      + (f" {g['seeds_problem']}" if g["seeds_problem"] else "")]
    if groups:
        lines += ["", STD_ACROSS_SAME_SEED if any(g["seeds_problem"] for g in groups) else STD_ACROSS_RUNS]
    lines.append("")

    lines += ["## Learning curve", ""]
    if curve is not None:
        lines += [f"![{metric} against {X_LABELS[x]}]({image_link(curve)})", ""]
        if len(runs) > 1:
            lines += ["Runs of one env and settings are drawn as their mean with the min-max band over runs, "
                      "to the end of the longest run.", ""]
    else:
        lines += [f"No curve: {curve_note}", ""]

    from .evaluate import unfinished_note

    lines += ["## Final evaluation", ""]
    for r in runs:
        ev = r["eval"]
        head = f"**{r['name']}**: " if len(runs) > 1 else ""
        if "error" in ev:
            lines += [f"- {head}{_md(ev['error'])}"]  # an env id or path from the checkpoint may be in it
            continue
        lines += [f"- {head}mean return **{ev['mean_return']:.2f}** \u00b1 {ev.get('std_return', 0.0):.2f} over "
                  f"{ev.get('episodes', '?')} episodes, {'deterministic' if ev.get('deterministic', True) else 'stochastic'} "
                  f"policy{_eval_step(ev, ' at step')}{unfinished_note(ev)}; source: {_md(ev['source'])}"]
        rets = ev.get("returns") or []
        if rets:
            shown = ", ".join(f"{v:g}" for v in rets[:20]) + (", ..." if len(rets) > 20 else "")
            lines += [f"  - returns: {shown}"]
        lens = ev.get("lengths") or []
        if lens:
            lines += [f"  - mean episode length: {np.mean(lens):.1f}"]
        ran = _eval_setup(ev)
        if ran:
            lines += [f"  - {ran}"]
    if any("error" not in r["eval"] for r in runs):
        lines += ["", STD_OVER_EPISODES]
    lines.append("")

    lines += ["## Config", "", "The resolved config (`config.yaml`: defaults, then preset, then flags).", ""]
    configs = [r["config"] for r in runs]
    cfg_rows = _keyed_rows(configs)
    if len(runs) > 1:  # mark what differs between runs: in their whole values, a difference past a cut cell's end too
        cfg_rows = [[f"**{row[0]}**" if any(_cell(v) != _cell(whole[1]) for v in whole[2:]) else row[0]] + row[1:]
                    for row, whole in zip(cfg_rows, _keyed_rows(configs, clip=False))]
    lines += _table(["field"] + (names if len(runs) > 1 else ["value"]), cfg_rows) if cfg_rows else ["No config.yaml."]
    if len(runs) > 1:
        lines += ["", "Fields in bold differ between runs."]
    lines.append("")

    lines += ["## Versions and machine", ""]
    cols = names if len(runs) > 1 else ["version"]
    vrows = _keyed_rows([_versions(r["meta"]) for r in runs])
    # "no meta.json" only where there is none: a meta.json that records none is named in the notes
    none = "No versions recorded in meta.json." if any(r.get("has_meta") for r in runs) else "No versions recorded (no meta.json)."
    lines += _table(["package"] + cols, vrows) if vrows else [none]
    lines.append("")
    mrows = [row for row in _keyed_rows([_machine(r["meta"]) for r in runs]) if any(v not in (None, "", []) for v in row[1:])]
    if mrows:
        lines += _table(["machine"] + (names if len(runs) > 1 else ["value"]), mrows) + [""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ library
def _curve_path(report: Path) -> Path:
    """The report's own image, named after it (report.md: report_curve.png), in a run directory too:
    curve.png there is `proxima plot RUN`'s and train --plot's, which would replace the report's
    picture with theirs, and so would another report written beside it."""
    return report.with_name(report.stem + "_curve.png")


def image_link(relpath: str) -> str:
    """A relative path as a Markdown link destination: percent-encoded, so a name with a space or a
    parenthesis (``my report (1)_curve.png``) is still an image in CommonMark; a plain name stays as it is."""
    from urllib.parse import quote

    return quote(relpath, safe="/")


def build_report(run_dirs: Sequence, out=None, episodes: Optional[int] = None, device: str = "cpu",
                 metric: Optional[str] = None, x: str = "step", smooth: int = 1, quiet: bool = True,
                 json_out=None) -> Path:
    """Write the Markdown report of the runs; return its path.

    episodes: of the fresh evaluation of a run without eval.json (None: the run's own --eval-episodes,
    run_eval_episodes; 0: none). metric: of the curve and the summary; None (no --metric): the curve's
    default_metric (the rolling return, or FALLBACK_METRIC for runs logged before it), the summary's
    ROLLING_RETURN where a run logged it (summarize).

    out: the report file (default RUN_DIR/report.md for one run; required for several). The curve
    is written next to it, named after it (<stem>_curve.png: report_curve.png). json_out: also write
    the table's numbers there as JSON (runs_json), before the Markdown (write_report: a failure writes
    neither). Raises ReportError (nothing written) for a missing or foreign run directory or empty metrics.
    """
    if not run_dirs:
        raise ReportError("no run directories given")
    for d in run_dirs:  # a typo among several would be skipped with a note, and the rest reported as if all
        problem = path_problem(d)
        if problem:
            raise ReportError(problem)
    run_dirs = unique_dirs(run_dirs)  # a run named twice is reported (and averaged) once
    if len(run_dirs) > 1:
        from .population_report import is_population

        for d in run_dirs:
            if is_population(d):
                raise ReportError(f"{d}: a population (population.json), not a single run; report it alone "
                                  f"(proxima report {d}) or beside other populations (proxima report {d} POP2 --out "
                                  "FILE.md), not beside single runs")
    asked = metric is not None  # a typed --metric, charts/episodic_return too, is summarized as typed
    try:
        dirs, metric = usable_runs(list(run_dirs), metric or default_metric(run_dirs))  # of several, non-PPO directories are skipped with a line
        metrics = [read_metrics(d) for d in dirs]
    except PlotError as e:
        raise ReportError(str(e)) from None
    default_out = out is None
    if out is None:
        if len(dirs) > 1:
            raise ReportError(f"{len(dirs)} runs: give --out FILE.md for the combined report")
        out = dirs[0] / "report.md"
    out = Path(out)
    check_out(out)
    json_out = None if json_out is None else Path(json_out)
    if json_out is not None:
        check_json_out(json_out, run_dirs)
    check_device(device, episodes)
    names = run_names(dirs)  # `.` by the directory it is; a/run and b/run by their paths
    from .population_report import member_divergence, member_population

    runs, unfilled = [], []
    for d, name, m in zip(dirs, names, metrics):  # every file read and checked before anything is written
        config, (meta, meta_note) = _read_yaml(d / "config.yaml"), _read_meta(d / "meta.json")
        diverged = member_divergence(d)
        if diverged:  # as the population's own eval: frozen weights are no result of training
            ev = {"error": f"not evaluated: the member {diverged}"}
        else:
            ev = final_eval(d, config, meta, episodes, device)
        if not quiet and "error" not in ev and not ev["source"].startswith("eval.json"):
            print(f"evaluated {d}: {_eval_line(ev)}", file=sys.stderr)
        elif ev.get("error", "").startswith("could not evaluate"):  # said on stderr too, not only inside report.md
            unfilled.append((d, ev["error"]))
        summary = summarize(m, metric if asked else None)
        _name_best_pt(d, summary, meta, m)
        # a diverged member's report says so at its top: it trains no further, whatever its steps
        progress, summary["total"] = (None, None) if diverged else run_progress(d, summary["global_step"], config, meta)
        # a run in progress may hold a checkpoint its next row has not reached yet: only its gaps are rows lost
        live = progress is not None and progress.startswith("in progress")
        steps = {} if live else {"its newest checkpoint": _checkpoint_step(d), "its final evaluation": ev.get("global_step")}
        steps = {k: v for k, v in steps.items() if isinstance(v, int) and not isinstance(v, bool)}
        reached = max(steps.values()) if steps else None
        summary["missing"] = missing_rows(m, reached, " and ".join(k for k, v in steps.items() if v == reached))
        _before_resume(summary["missing"], resumed_into(meta))
        if summary["missing"]["tail"] and not diverged:  # short of its total by the step it reached, not by the file's
            progress, summary["total"] = run_progress(d, float(summary["missing"]["tail"][2]), config, meta)
        summary["checkpoint"] = _checkpoint_step(d)  # the steps row: a resume continues from it, not from the last row
        summary["edits"] = [] if meta.get("kind") == "rlhf" else _edit_notes(d, ev, config)
        # why a run short of its total ended, which the rolling return (a longer window) does not show
        stopped = None if diverged or live or member_population(d) is not None else return_stop(d, config)
        runs.append({"dir": d, "name": name, "env": run_env_id(d), "config": config, "meta": meta, "meta_note": meta_note,
                     "has_meta": not _absent(d / "meta.json"), "stopped_at_return": stopped,
                     "summary": summary, "eval": ev, "diverged": diverged, "progress": progress,
                     "member": member_population(d) is not None})
    for label, members in group_runs(dirs).items():
        for r in runs:
            if r["dir"] in members:
                r["group"] = label
    curve_file = _curve_path(out)
    curve = Path(os.path.relpath(curve_file.resolve(), out.parent.resolve())).as_posix()
    text = render(runs, curve, None, metric, x)  # before any file: a run the report cannot format writes nothing
    make_folders(out, json_out)
    with Staging() as staging:  # the curve, the JSON and report.md renamed into place together, or none
        why = draw_curve(staging, dirs, curve_file, metric=metric, x=x, smooth=smooth, quiet=quiet)
        if why is not None:
            text = render(runs, None, why, metric, x)
        write_report(out, text, json_out, runs_json(runs, metric) if json_out is not None else None, staging=staging,
                     default_out=default_out)
    if unfilled and not quiet:
        _unfilled_note(unfilled)
    return out


def _unfilled_note(unfilled: list) -> None:
    """One line on stderr for the runs whose final eval return cell holds why it could not be evaluated
    ((run directory, evaluate_latest's error) each): the first's why, which names what to do."""
    d, why = unfilled[0]
    head = f"{d}: final eval return" if len(unfilled) == 1 else f"{len(unfilled)} runs' final eval return"
    first = "" if len(unfilled) == 1 else f"first, {d}: "
    print(printable(f"proxima: note: {head} not filled in the report ({first}{why})"), file=sys.stderr)


# ------------------------------------------------------------------------------------ JSON
#: the version of the --json file's layout (docs/populations.md "Machine-readable report"); a change that
#: renames or removes a key raises it
JSON_SCHEMA = 1
#: the "generator" of every --json file: a file at --json that does not say so is never replaced
JSON_GENERATOR = "proxima report"


def check_json_out(path: Path, run_dirs: Sequence = ()) -> None:
    """ReportError when --json cannot hold the report's numbers at ``path`` (plot.json_out_problem): not a .json
    file, a directory or under a file, a name a run writes (rundir.RUN_ENTRIES: eval.json, meta.json,
    population.json, summary.json...) in one of ``run_dirs`` (the directories reported) or a folder right under
    one (a member), existing or not: the run would read it as its own or replace it; or an existing file that is
    not an earlier --json file (JSON_GENERATOR)."""
    from .plot import json_out_problem

    problem = json_out_problem(path, run_dirs, JSON_GENERATOR, "the report's numbers", "report.json",
                               " (a run's own eval.json, population.json, meta.json...); give another FILE.json")
    if problem:
        raise ReportError(problem)


def strict_json(value):
    """``value`` as strict JSON holds it: NaN and +-inf as None (json.dumps(allow_nan=False) passes), numpy
    scalars and arrays as Python numbers and lists, tuples as lists, Paths as strings."""
    if isinstance(value, dict):
        return {str(k): strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [strict_json(v) for v in (value.tolist() if isinstance(value, np.ndarray) else value)]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


def json_document(kind: str, body: dict) -> dict:
    """The --json file's top level: schema, generator, proxima_version, kind ("runs", "population",
    "populations"), then ``body``."""
    from . import __version__

    return {"schema": JSON_SCHEMA, "generator": JSON_GENERATOR, "proxima_version": __version__, "kind": kind,
            **strict_json(body)}


def write_json(path: Path, doc: dict, staging: Optional["Staging"] = None) -> None:
    """Write ``doc`` to ``path`` whole (atomic.write_atomic), strict JSON; ReportError naming the file on an error.
    ``staging``: to a temporary name beside ``path`` instead, renamed into place by staging.publish."""
    from .atomic import write_atomic

    text = json.dumps(doc, indent=2, allow_nan=False) + "\n"
    try:
        write_atomic(path if staging is None else staging.reserve(path), text)
    except OSError as e:
        raise ReportError(describe(path, e)) from None


def _at_json(summary: dict, key: str) -> Optional[dict]:
    """{value, step, episodes} of summarize's ``key`` (final, best, max, min), as the Results table shows it; None without one."""
    value = summary.get(key)
    if value is None:
        return None
    step = summary.get("final_step") if key == "final" else summary.get(f"{key}_step")
    return {"value": value, "step": step, "episodes": summary.get(f"{key}_episodes")}


def _eval_json(ev: dict) -> dict:
    """The final evaluation as report.md's "Final evaluation" gives it, or {"error": why}."""
    if "error" in ev:
        return {"error": ev["error"]}
    lengths = ev.get("lengths") or []
    return {"mean_return": ev["mean_return"], "std_return": ev.get("std_return", 0.0), "episodes": ev.get("episodes"),
            "deterministic": ev.get("deterministic", True), "global_step": ev.get("global_step"),
            "unfinished": ev.get("unfinished"), "returns": list(ev.get("returns") or []),
            "mean_episode_length": float(np.mean(lengths)) if lengths else None,
            # null where no episode reported info['is_success']; success_episodes: the episodes the rate is over
            "success_rate": ev.get("success_rate"),
            "success_episodes": None if ev.get("success_rate") is None else ev.get("success_episodes", ev.get("episodes")),
            "source": ev["source"]}


def run_json(r: dict, metric: str) -> dict:
    """One run's numbers as its report.md column shows them, from the same summary and eval dicts."""
    s = r["summary"]
    missing = s.get("missing") or {}
    tail = missing.get("tail")
    out = {"name": r["name"], "dir": str(r["dir"]), "env": r["env"], "diverged": r.get("diverged"),
           "steps": s["global_step"], "steps_reached": tail[2] if tail else s["global_step"], "total_steps": s.get("total"),
           "progress": r.get("progress"), "stopped_at_return": r.get("stopped_at_return"),
           "started_from": _started_from(r["meta"]),
           "iterations": s["iterations"], "wall_time_s": s["time"], "steps_per_s": s.get("sps"),
           "steps_per_s_per_member": bool(r.get("member")), "episodes": s["episodes"],
           "rows_missing": bool(tail or missing.get("gaps")), "metric": s.get("metric", metric),
           "final": _at_json(s, "final")}
    if metric in RETURN_METRICS:
        out["best"] = _at_json(s, "best")
    else:
        out["max"], out["min"] = _at_json(s, "max"), _at_json(s, "min")
    if "eval_last" in s:
        out["eval_during_training"] = {"last": s.get("eval_last"), "best": s.get("eval_best"),
                                       "best_step": s.get("eval_best_step"), "best_pt": bool(s.get("best_pt"))}
    out["final_eval"] = _eval_json(r["eval"])
    return out


def runs_json(runs: list[dict], metric: str) -> dict:
    """The --json file of a report of single runs: each run's numbers, and each group's spread of final evals."""
    return json_document("runs", {
        "metric": metric, "runs": [run_json(r, metric) for r in runs],
        "groups": [{k: g[k] for k in ("group", "runs", "mean", "std", "min", "max")} | {"std_ddof": 1}
                   for g in group_summaries(runs)]})


def check_device(device: str, episodes: Optional[int]) -> None:
    """ReportError for a --device that cannot evaluate, before any run is evaluated (--episodes 0: unused)."""
    if episodes is not None and episodes < 1:
        return
    from .config import ConfigError
    from .device import resolve_device

    try:
        resolve_device(device)
    except ConfigError as e:
        raise ReportError(str(e)) from None


def check_out(out: Path) -> None:
    """ReportError when the report cannot be written at ``out``: not a .md file, a directory, or under
    a file. A report is Markdown, and every file of a run (metrics.csv, config.yaml, population.json,
    eval.json, meta.json, checkpoints, curve.png) has another suffix: one rule keeps a mistyped
    --out off them all, files a later version adds included, with no list of names to keep up."""
    from .diskspace import path_problem

    if out.suffix.lower() != ".md":
        raise ReportError(f"--out {out}: not a .md file; the report is Markdown: give FILE.md (a run's own files, "
                          "metrics.csv, *.json, checkpoints, are never overwritten)")
    problem = path_problem(out, example="report.md")
    if problem:
        raise ReportError(f"--out {out}: {problem}")


def make_folders(*files) -> None:
    """Create the folder of each of ``files`` not yet made (None: skipped), before the first file is written:
    --out and --json in a new folder alike, and a folder that cannot be made refuses the report with
    nothing written (not a report.md beside a failed --json)."""
    for f in files:
        if f is None:
            continue
        try:
            Path(f).parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ReportError(describe(Path(f).parent, e, "could not create the folder")) from None


#: errors of a folder the user may not write (a colleague's run, a read-only mount): another --out helps
NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


#: seconds after which a temporary of one of the report's own files (``.report.<12 hex>.tmp.md``) is
#: another report's leftover (killed while staging): younger, it may be the files of a report under way
#: into the same folder right now, whose publish would fail if they went
STALE_STAGING_SECONDS = 300.0


def remove_stale_temps(target: Path) -> None:
    """Remove the temporaries (atomic.reserve_temp's names, and atomic_open's inside one) of ``target``
    that a report killed before its publish left beside it, older than STALE_STAGING_SECONDS: regular
    files of that exact pattern only, never another file. An error (a folder that cannot be read)
    leaves them: they are hidden, and never read."""
    from .atomic import _name_part

    target = Path(target)
    hidden = "" if target.name.startswith(".") else "."
    name = re.compile(rf"{re.escape(hidden + _name_part(target.stem))}\.[0-9a-f]{{12}}\.tmp"
                      rf"{re.escape(target.suffix)}(?:\.[0-9a-f]{{12}}\.tmp)?")
    cutoff = time.time() - STALE_STAGING_SECONDS
    with contextlib.suppress(OSError):
        for entry in os.scandir(target.parent):
            if name.fullmatch(entry.name):
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode) and st.st_mtime < cutoff:
                        os.unlink(entry.path)


class Staging:
    """The files of one report (its curve, --json, report.md), each written under a temporary name beside
    its target (atomic.reserve_temp) and renamed into place only once all are written (publish), in the
    order curve, JSON, report.md: a failure before then removes the temporaries and leaves every file
    already there as it was (an earlier report.md, JSON and curve alike). A rename that fails within
    publish does not undo the renames before it: the curve (and JSON) already replaced stay, newer,
    beside the earlier report.md, never a new report.md beside an older curve. ``with Staging() as s:``
    discards the temporaries not yet renamed on any exception."""

    def __init__(self):
        self.files: dict = {}  # target -> temporary, in the order written: the renames' order

    def reserve(self, target: Path) -> Path:
        """The temporary file to write ``target``'s bytes to (an OSError raised as it is); the ones of
        ``target`` an earlier report left (killed before its publish) go first, so none piles up."""
        from .atomic import reserve_temp

        self.drop(target)
        remove_stale_temps(target)
        self.files[Path(target)] = tmp = reserve_temp(target)
        return tmp

    def drop(self, target: Path) -> None:
        """Remove ``target``'s temporary (a curve that could not be drawn): nothing is renamed to it."""
        tmp = self.files.pop(Path(target), None)
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def discard(self) -> None:
        for target in list(self.files):
            self.drop(target)

    def publish(self) -> None:
        """Rename each temporary over its target, in the order written: curve, JSON, report.md. A rename that
        fails raises ReportError naming its target and removes the temporaries not yet renamed, but those
        renamed before it stay: a newer curve (and JSON) beside the earlier report.md, never a report.md
        linking to or describing files that were not replaced."""
        from .atomic import replace_into

        for target, tmp in list(self.files.items()):
            try:
                replace_into(tmp, target)
            except OSError as e:
                self.discard()
                raise ReportError(describe(target, e)) from None
            del self.files[target]

    def __enter__(self) -> "Staging":
        return self

    def __exit__(self, *exc) -> None:
        self.discard()  # after publish, nothing is left to remove


def draw_curve(staging: Staging, run_dirs: Sequence, curve: Path, **plot_args) -> Optional[str]:
    """Draw the report's curve (plot_runs) to a temporary of ``staging`` for ``curve``; None, or why no curve
    was drawn (a metric without values, a disk full, a folder or a file's child at ``curve``: the report
    says so in place of the image), its temporary then removed and ``curve`` left as it was. ``curve``
    itself is checked first (diskspace.path_problem), as plot_runs checks the temporary it is given: a
    curve that could not be renamed into place is no curve, and the report is still written."""
    from .diskspace import path_problem

    problem = path_problem(curve)
    if problem:  # a folder named report_curve.png: publish's rename would fail, and with it the whole report
        return f"{curve}: {problem}"
    try:
        tmp = staging.reserve(curve)  # its suffix kept: plot_runs draws the format the name says
    except OSError as e:  # the folder is read-only, the disk full
        return describe(curve, e)
    try:
        plot_runs(run_dirs, tmp, **plot_args)
    except PlotError as e:
        staging.drop(curve)
        return str(e).replace(str(tmp), str(curve))  # the file the user knows, not its temporary name
    return None


def write_report(out: Path, text: str, json_out=None, doc: Optional[dict] = None, staging: Optional[Staging] = None,
                 default_out: bool = False) -> None:
    """Write report.md ``out`` (_write_text) and, given ``json_out``, its --json ``doc``, each to a temporary of
    ``staging`` (the curve's already there), then rename them all into place, report.md last (Staging.publish):
    a JSON or report.md that cannot be written (EACCES, a full disk) replaces no file, an earlier one included."""
    with (Staging() if staging is None else staging) as staging:
        if json_out is not None:
            write_json(Path(json_out), doc, staging=staging)
        _write_text(out, text, staging=staging, default_out=default_out)
        staging.publish()


def _write_text(out: Path, text: str, staging: Optional[Staging] = None, default_out: bool = False) -> None:
    """Write ``out`` whole (atomic.write_atomic: a temp file at a fresh name, then a rename that
    replaces a symbolic link at ``out`` rather than writing through it), or to a temporary of
    ``staging`` renamed by its publish; on an error raise ReportError naming the file and the free
    space: no half report. ``default_out``: ``out`` is the run's own report.md, not an --out given; a
    run directory the user may not write then says where the report can go instead."""
    from .atomic import write_atomic

    try:
        write_atomic(out if staging is None else staging.reserve(out), text)
    except OSError as e:  # disk full: one line naming the file and the free space, no half report
        hint = "; use --out FILE.md" if default_out and e.errno in NOT_WRITABLE else ""
        raise ReportError(describe(out, e) + hint) from None


def build_population_report(run_dir, out=None, threshold: Optional[float] = None, metric: Optional[str] = None,
                            x: str = "step", smooth: int = 1, episodes: Optional[int] = 0, device: str = "cpu",
                            quiet: bool = True, json_out=None) -> Path:
    """population_report.build_population_report, checked first (a bad --out, an unknown metric:
    ReportError, nothing written; a metric without values: the report, with no curve and why); members
    without eval.json are evaluated over ``episodes`` (None: each member's own --eval-episodes) on ``device``, as final_eval evaluates a single run. ``metric``: of the
    curve (None: default_metric, the members' rolling return)."""
    from . import population_report
    from .plot import UnknownMetric

    run_dir, metric = Path(run_dir), metric or default_metric([run_dir])
    if out is not None:
        check_out(Path(out))
    if json_out is not None:
        check_json_out(Path(json_out), [run_dir])
    if (metric, x, smooth) != (DEFAULT_METRIC, "step", 1):
        try:  # the name alone: the curves (bootstrap CIs) are built once, by the report
            population_report.check_population_metric(run_dir, metric)
        except UnknownMetric as e:  # a typo: refused; a column without values (blank for discrete actions) is noted
            raise ReportError(str(e)) from None
    check_device(device, episodes)
    return population_report.build_population_report(run_dir, out=out, threshold=threshold, metric=metric, x=x, smooth=smooth,
                                                      episodes=episodes, device=device, quiet=quiet, json_out=json_out)


# ------------------------------------------------------------------------------------ CLI
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories; A+A2 pools populations of one "
                   "setting (the same train command on other --seeds) into one, its table, comparisons and --json over "
                   "all their members (needs --out; docs/populations.md)")
    p.add_argument("--pool", action="store_true", help="pool every RUN_DIR given into one population: `report A A2 "
                   "--pool` is `report A+A2`; settings that differ in a config field (but for bookkeeping ones such as "
                   "--checkpoint-every or --device: docs/populations.md), or a seed given twice, are refused")
    p.add_argument("--out", default=None, metavar="FILE.md", help="report file, ending in .md (default RUN_DIR/report.md; "
                   "needed for several runs); its curve is <stem>_curve.png beside it")
    p.add_argument("--episodes", type=int_arg, default=None, metavar="N",
                   help="episodes to evaluate when a run (or a population's member) has no eval.json (default: the run's "
                   f"--eval-episodes, which its eval.json would hold; {DEFAULT_EVAL_EPISODES} where that is 0; 0: skip)")
    p.add_argument("--device", default="cpu", help="torch device for that evaluation (default cpu)")
    from .cli import add_trust_flags

    add_trust_flags(p, "report", env_help=" (used for the runs that record it, evaluated when they have no eval.json; "
                    "each run is evaluated on its own env)")
    p.add_argument("--metric", default=None, metavar="NAME", help=f"metric for the curve and the summary (left out: "
                   f"{ROLLING_RETURN} where the run logged it (the rolling return), else {FALLBACK_METRIC}; typed, "
                   "a name is used as typed)")
    p.add_argument("--x", default="step", choices=tuple(X_LABELS), help="curve x axis: global step or wall time (default step)")
    p.add_argument("--smooth", type=int_arg, default=1, metavar="K", help="moving average over K points for the curve (default 1)")
    p.add_argument("--json", default=None, metavar="FILE.json", dest="json_out", help="also write the numbers of the "
                   "report's tables to FILE.json (schema 1, strict JSON, NaN/inf as null: docs/populations.md); the "
                   "Markdown report is still written; an existing file there is replaced only if an earlier --json wrote it")
    p.add_argument("--threshold", type=float, default=None, metavar="R", help="populations (--seeds/--sweep) "
                   "only: report the fraction of members per setting whose final return is >= R, a finite number "
                   "(docs/populations.md); refused for single runs")
    p.add_argument("--normalize", action="store_true", help="populations of different env ids (one per env, of the same "
                   "--sweep or --seeds only; needs --out): aggregate each setting over these tasks as rliable does, each "
                   "member's final return scored (R - LOW) / (HIGH - LOW) on its env's range: IQM, mean, median and "
                   "optimality gap with stratified-bootstrap 95%% CIs, and a performance profile (docs/populations.md)")
    p.add_argument("--score-range", action="append", default=None, metavar="ENV=LOW:HIGH", help="with --normalize: the "
                   "returns that score 0 (a random policy's mean) and 1 (a reference) on env ENV (repeatable; an env given twice "
                   "is refused); built in, as a random policy's mean to Gymnasium's reward_threshold, for CartPole-v1 "
                   "(22.65:475), Acrobot-v1 (-498.59:-100) and MountainCar-v0 (-200:-110), which this replaces")


def register(subparsers) -> argparse.ArgumentParser:
    """Add the `report` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser("report", help="write a Markdown report (config, versions, eval, curves) of one or several runs",
                              description=__doc__.splitlines()[0])
    add_arguments(p)
    p.set_defaults(func=run)
    return p


def _normalized_report(args, run_dirs: list) -> int:
    """``report A B ... --normalize``: population_report.build_tasks_report; ReportError for a single run or a
    --score-range without --normalize."""
    from .population_report import build_tasks_report, is_population

    if not args.normalize:
        raise ReportError("--score-range ENV=LOW:HIGH applies with --normalize (a report over several tasks)")
    for d in run_dirs:
        problem = path_problem(d)
        if problem:
            raise ReportError(problem)
        if not is_population(d):
            raise ReportError(f"{d}: a single run; --normalize aggregates populations (train --seeds/--sweep), one per env id")
    path = build_tasks_report(run_dirs, out=args.out, score_ranges=args.score_range, threshold=args.threshold,
                              metric=args.metric or default_metric(run_dirs), x=args.x, smooth=args.smooth, episodes=args.episodes,
                              device=args.device, quiet=False, json_out=args.json_out)
    print(f"wrote {path}" + (f" and {args.json_out}" if args.json_out else ""))
    return 0


def _pooled_report(args, groups: list) -> int:
    """``report A+A2 [B+B2 ...]`` (or ``report A A2 --pool``): each group of several populations pooled into one
    (population_report.read_pool), then the report of one population, of several, or of tasks (--normalize),
    as without pooling. ReportError for a single run, a missing --out, or what read_pool refuses."""
    from . import population_report as pr

    if args.score_range and not args.normalize:
        raise ReportError("--score-range ENV=LOW:HIGH applies with --normalize (a report over several tasks)")
    flat = [d for g in groups for d in g]
    for d in flat:
        problem = path_problem(d)
        if problem:
            raise ReportError(problem)
        if not pr.is_population(d):
            raise ReportError(f"{d}: a single run; pooling ({pr.POOL_SEP}, --pool) takes populations (train --seeds/--sweep)")
    if args.out is None:
        raise ReportError(f"{pr.POOL_SEP.join(map(str, next(g for g in groups if len(g) > 1)))}: give --out FILE.md for "
                          "the pooled report (each population's own report.md stays its own)")
    check_out(Path(args.out))
    if args.json_out is not None:
        check_json_out(Path(args.json_out), flat)
    srcs = pr.read_sources(groups)  # refused here, in one line, before any member is evaluated
    metric = args.metric or default_metric(flat)
    common = dict(out=args.out, metric=metric, x=args.x, smooth=args.smooth, episodes=args.episodes, device=args.device,
                  quiet=False, json_out=args.json_out)
    if args.normalize:
        path = pr.build_tasks_report(srcs, score_ranges=args.score_range, threshold=args.threshold, **common)
    elif len(srcs) > 1:
        path = pr.build_populations_report(srcs, threshold=args.threshold, **common)
    else:
        from .plot import UnknownMetric

        if (metric, args.x, args.smooth) != (DEFAULT_METRIC, "step", 1):
            for d in flat:
                try:
                    pr.check_population_metric(d, metric)
                except UnknownMetric as e:
                    raise ReportError(str(e)) from None
        check_device(args.device, args.episodes)
        path = pr.build_population_report(srcs[0], threshold=args.threshold, **common)
    print(f"wrote {path}" + (f" and {args.json_out}" if args.json_out else ""))
    return 0


def run(args) -> int:
    with env_trust(args.env, args.trust_run) as trust:  # a run's module:Class env, as eval's flags allow it
        code = _run(args)
    if code == 0 and args.env is not None and not trust.applied:
        sys.stderr.write(printable(f"proxima report: note: --env {args.env} did nothing: no run evaluated here records "
                                   "that env (a run with an eval.json of its last step is not evaluated again)") + "\n")
    return code


def _run(args) -> int:
    prog = "proxima report"
    if args.episodes is not None and args.episodes < 0:
        sys.stderr.write(f"{prog}: error: --episodes {args.episodes}: must be 0 or more\n")
        return 2
    if args.smooth < 1:
        sys.stderr.write(f"{prog}: error: --smooth {args.smooth}: must be at least 1\n")
        return 2
    if args.threshold is not None and not math.isfinite(args.threshold):  # nan: no member reaches it; +-inf: none, or all
        sys.stderr.write(f"{prog}: error: --threshold {args.threshold:g}: must be a finite return (e.g. --threshold 475)\n")
        return 2
    try:
        from .population_report import is_population, pool_groups

        groups = pool_groups(args.run_dirs)  # A+A2: one group to pool
        if args.pool:
            groups = [unique_dirs([d for g in groups for d in g])]
        check_config_sizes([d for g in groups for d in g])  # before the curve's labels parse any
        if any(len(g) > 1 for g in groups):
            return _pooled_report(args, groups)
        # the groups' directories, never the raw arguments: A+A (A+./A, A+) pooled to [A] is A, not a path 'A+A'
        run_dirs = unique_dirs([d for g in groups for d in g])  # a directory named twice is one run
        if args.normalize or args.score_range:  # several tasks: their own report, never the plain comparison
            return _normalized_report(args, run_dirs)
        if len(run_dirs) == 1 and is_population(run_dirs[0]):  # statistics over members, per setting
            path = build_population_report(run_dirs[0], out=args.out, threshold=args.threshold, metric=args.metric,
                                           x=args.x, smooth=args.smooth, episodes=args.episodes, device=args.device, quiet=False,
                                           json_out=args.json_out)
            print(f"wrote {path}" + (f" and {args.json_out}" if args.json_out else ""))
            return 0
        if len(run_dirs) > 1 and all(is_population(d) for d in run_dirs):  # one table of (population, setting) rows
            from .population_report import build_populations_report

            path = build_populations_report(run_dirs, out=args.out, threshold=args.threshold,
                                            metric=args.metric or default_metric(run_dirs), x=args.x, smooth=args.smooth,
                                            episodes=args.episodes, device=args.device, quiet=False, json_out=args.json_out)
            print(f"wrote {path}" + (f" and {args.json_out}" if args.json_out else ""))
            return 0
        if args.threshold is not None:
            raise ReportError(f"--threshold {args.threshold:g}: applies to a population (train --seeds/--sweep) alone, "
                              "not to single runs")
        path = build_report(run_dirs, out=args.out, episodes=args.episodes, device=args.device,
                            metric=args.metric, x=args.x, smooth=args.smooth, quiet=False, json_out=args.json_out)
    except ReportError as e:
        sys.stderr.write(f"{prog}: error: {printable(str(e))}\n")
        return 2
    print(f"wrote {path}" + (f" and {args.json_out}" if args.json_out else ""))
    return 0
