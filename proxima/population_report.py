"""``proxima report RUN`` on a population (population_run.py): statistics over members, per setting.

Per setting (one combination of the swept values; all seeds of it): the members' final returns, of
one kind per setting (member_values): the deterministic evaluation return (each member's
``eval.json`` mean; else a fresh evaluation of its latest checkpoint over ``--episodes N``, by
default its own --eval-episodes, the count its eval.json would hold) when any member of the setting
has one, else the last logged (stochastic) training return; a member without a value of that kind,
or with a NaN or infinite one, is left out and named. The line above the table says at which step(s)
and over how many episodes the evaluation returns were measured; members evaluated at different
steps (a population read while training) or over different counts (an explicit ``--episodes`` beside
eval.json's) are named in a note, as ``proxima eval`` says it, not averaged unsaid. Over the values
used (n of them): their mean and interquartile mean (IQM: trimmed mean, floor(n/4) of the n values
dropped at each end, rliable's, equal to ``scipy.stats.trim_mean(x, 0.25)``; equals the mean for
n < 4), a 95% percentile-bootstrap confidence interval for each (members resampled with
replacement, BOOTSTRAP_RESAMPLES resamples, numpy ``default_rng(0)`` so the report is reproducible;
one task, so rliable's stratified bootstrap is this plain bootstrap; none for n < 2, flagged for
n < 5, where it covers well under 95%), and the number of members (of all members: one left out
counts as not reaching it) whose return reaches ``--threshold``. Written by hand on numpy because
neither scipy nor rliable is a dependency.

The same statistics vectorized over the x points of a learning curve (``iqm_along``,
``bootstrap_band``) draw ``proxima plot RUN``'s IQM (or mean) and 95% band per setting, and
``read_settings`` is the one reader of ``population.json`` for ``report``, ``plot`` and ``eval``.

Settings are compared (comparison_section; build_populations_report for ``report A B`` of several
populations) by rliable's probability of improvement P(X > Y): over all member pairs, 1 for x > y and
1/2 for a tie, averaged, with a percentile-bootstrap interval (poi_ci) that resamples each side's
members independently from one default_rng(BOOTSTRAP_SEED), under the same MIN_CI_MEMBERS and
FEW_CI_MEMBERS rules as the table's intervals. Y is the highest IQM among the settings that lost no
member (best_row: a member left out, diverged or without a result, is left out of the statistics, so a
setting that loses its weakest seeds would otherwise rank first; such a row is named "not ranked"), and
a line (verdict) says which settings Y is told apart from: a one-sided permutation test on ranks,
Bonferroni over both directions of every pair of the settings with an IQM (Y is picked on the same
returns), exact up to EXACT_MAX_MEMBERS members in all, beyond that drawn, its permutations growing with
that family so that its level stays reachable (claim_p), no
claim with fewer than MIN_CLAIM_MEMBERS members on a side.
The report ends with the population's command, seeds, sweep, shared config and the first member's
versions and machine (provenance_section).

Populations of several env ids (tasks), one per env and of the same settings, are aggregated per
setting over the tasks by build_tasks_report (``report A B --normalize``): each member's final return
normalized on its env's score range, then aggregate.py's IQM, mean, median, optimality gap and
performance profile with stratified-bootstrap intervals (same resamples and seed as above).
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from .config import ProximaError
from .population_run import DIVERGED_FILE, POPULATION_FILE, is_population_dir, shown
from .rundir import RunFileError, read_run_json, read_run_text
from .terminal import printable

#: resamples of every percentile-bootstrap interval: the report's table, eval's lines and plot's band. At 2000
#: an endpoint moved by ~2 points with the rng seed (12 members), more than the one decimal printed; the arrays
#: are a few hundred members at most, so 10,000 costs milliseconds
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
BAND_RESAMPLES = BOOTSTRAP_RESAMPLES  # one constant: the band of `proxima plot` is the table's interval per x
CI_LEVEL = 0.95
#: a percentile-bootstrap interval needs at least this many members (n = 1 would give a zero-width one)
MIN_CI_MEMBERS = 2
#: below this many members an interval is given but flagged (simulated coverage 0.49/0.75/0.80 at n = 2/3/4)
FEW_CI_MEMBERS = 5
FEW_MEMBERS_NOTE = ("n < 5: percentile-bootstrap intervals cover well under 95% (about 50-80% for n = 2-4); "
                    "run more seeds")
#: said where a setting's statistics rest on one member's value: its CI cells read "—"
ONE_MEMBER_NOTE = "n = 1: one seed gives no interval (\u2014) and says nothing of how seeds spread; run more seeds"


def one_member(stats: dict) -> bool:
    """Whether a row's (or eval's setting's) statistics are of exactly one member's value: a mean, no interval."""
    return stats.get("mean") is not None and stats.get("mean_ci") is None


#: how every interval is made, as the report, eval and plot say it
CI_METHOD = f"percentile bootstrap over members, {BOOTSTRAP_RESAMPLES} resamples, numpy default_rng({BOOTSTRAP_SEED})"
IQM_TEXT = "IQM: trimmed mean, floor(n/4) of the n values dropped at each end (rliable's; equals the mean for n < 4)"


class PopulationError(ProximaError, ValueError):
    """A broken population directory: unreadable population.json, a listed member directory missing."""


@dataclass
class Setting:
    """One setting of a population: a combination of the swept values, and the members trained with it."""

    settings: dict
    """{field: value} of the swept fields ({} for a population of seeds only)."""
    members: list = field(default_factory=list)
    """[(seed, member directory)] in population.json's order."""
    diverged: dict = field(default_factory=dict)
    """{member name: "diverged at iteration N"} of the members frozen by a non-finite update or env output."""
    names: dict = field(default_factory=dict)
    """{member directory: its name in the report} where that is not the directory's name (a pooled
    population's ``A2/m000-seed6``: two populations' folders may share a name)."""

    def member_name(self, member_dir: Path) -> str:
        """The member as the report names it: its directory's name, or its pooled name (``names``)."""
        return self.names.get(member_dir, member_dir.name)

    @property
    def label(self) -> str:
        """``lr=0.001, ent_coef=0``; "" for a population of seeds only."""
        return setting_label(self.settings)


def setting_label(settings: dict) -> str:
    """``lr=0.001, target_kl=none``: values as --sweep spells them (population_run.shown)."""
    return ", ".join(f"{k}={shown(v)}" for k, v in settings.items())


is_population = is_population_dir


def read_settings(run_dir) -> list:
    """The population's settings (Setting), in the order of their first member in population.json.

    Raises PopulationError naming the file for an unreadable population.json, an entry that is
    not a member folder of this run (the file is data: ``../elsewhere`` is refused), a seed that is
    not one --seeds takes (an integer in 0..MAX_SEED: text, null, NaN would break every sort and
    range of seeds) or a member folder listed twice (it would count as several members), or naming
    the member directory for one it lists that is missing or is a link out of the population.
    """
    from .atomic import leads_outside

    run_dir = Path(run_dir)
    path = run_dir / POPULATION_FILE
    try:
        doc = read_run_json(path)
        entries = [(e["dir"], e["seed"], e.get("settings") or {}, e.get("diverged")) for e in doc["member_dirs"]]
    except RunFileError as e:  # a link out of the run, a FIFO, nesting past Python's stack: its own line
        raise PopulationError(str(e)) from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise PopulationError(f"{path}: not a readable population file ({type(e).__name__})") from None
    groups: dict = {}
    listed: dict = {}
    from .population_run import is_plain_name

    for name, seed, settings, diverged in entries:
        if not is_plain_name(name) or not isinstance(settings, dict):
            raise PopulationError(f"{path}: member entry {name!r} is not a member folder of this run with its settings")
        _check_settings(path, name, settings)
        _check_seed(path, name, seed)
        if name in listed:  # one folder's return would count once per entry: n=14 of a 4-member population
            raise PopulationError(f"{path}: member folder {name!r} is listed twice (seeds {listed[name]} and {seed}); "
                                  f"the population's {POPULATION_FILE} was damaged or edited: keep one entry per folder")
        listed[name] = seed
        d = run_dir / name
        if leads_outside(d, run_dir):  # eval, plot and report would read (and write) another run's files as this one's
            raise PopulationError(f"{d}: is a symbolic link to {os.path.realpath(d)}, outside the population directory "
                                  f"{run_dir}; Proxima does not read a run's files through it: remove the link (or copy what "
                                  "it points to into the population) and try again")
        if not d.is_dir():
            raise PopulationError(f"{d}: member directory listed in {POPULATION_FILE} is missing")
        key = json.dumps(settings, sort_keys=True)
        setting = groups.setdefault(key, Setting(dict(settings)))
        setting.members.append((seed, d))
        if diverged is not None:
            setting.diverged[name] = diverged_text(diverged)
    return list(groups.values())


#: the end of read_settings's line for a member folder population.json lists but that is gone
MISSING_MEMBER_TEXT = f"member directory listed in {POPULATION_FILE} is missing"


def with_advice(e: Exception) -> str:
    """``e``'s line, with what to do where it is read_settings's missing member folder (the advice `proxima resume`
    gives: restore it from a copy of the run, or train the population again with its recorded command)."""
    text = str(e)
    if not text.endswith(MISSING_MEMBER_TEXT):
        return text
    from .checkpoint import CheckpointError
    from .population_run import _train_again

    run_dir = Path(text[:-len(MISSING_MEMBER_TEXT) - 2]).parent
    try:
        again = _train_again(run_dir)
    except (CheckpointError, OSError, ValueError):  # population.json unreadable since: the advice without the command
        again = "train the population again"
    return f"{text}; restore it from a copy of the run, or {again}"


def _check_seed(path: Path, name: str, seed) -> None:
    """Refuse a member's seed that --seeds would not take: an integer (not true/false) in 0..MAX_SEED."""
    from .config import MAX_SEED

    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise PopulationError(f"{path}: member entry {name!r} has seed {shortened(repr(seed))}, not an integer in "
                              f"0..{MAX_SEED:,}; the population's {POPULATION_FILE} was damaged or edited")


#: how many characters of a value read from a file a refusal shows (shortened)
SHOWN_CHARS = 200


def shortened(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text``, or its first ``limit`` characters, ``…`` and its full length when longer: a value read from a
    file (a 10 MB config field) named in a one-line refusal."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def _check_settings(path: Path, name: str, settings: dict) -> None:
    """Refuse a member's settings that no --sweep wrote: a key that is not a per-member field, a value
    that is not a number (or null, target_kl=none; a switch's true or false). Every label of a setting (eval's lines, report.md's
    table) is then of field names and numbers, never text the file chose (an escape, a tag)."""
    from .population import PER_MEMBER_FIELDS, PER_MEMBER_SWITCHES

    for key, value in settings.items():
        if key not in PER_MEMBER_FIELDS:
            raise PopulationError(f"{path}: member entry {name!r} has setting {shortened(repr(key))}, not a field a "
                                  f"population sweeps ({', '.join(PER_MEMBER_FIELDS)})")
        if key in PER_MEMBER_SWITCHES:  # --sweep norm_adv=true,false: true or false, nothing else
            if not isinstance(value, bool):
                raise PopulationError(f"{path}: member entry {name!r} has setting {key} = {shortened(repr(value))}, "
                                      "not true or false")
        elif value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise PopulationError(f"{path}: member entry {name!r} has setting {key} = {shortened(repr(value))}, "
                                  "not a number")


# ------------------------------------------------------------------------------------ pooling (report A+A2)
#: joins the populations of one pooled setting on the command line: ``proxima report A+A2``
POOL_SEP = "+"
#: the seeds a learning claim wants at least (FEW_MEMBERS_NOTE's advice): a population's next seeds reach it
CLAIM_SEEDS = 10


@dataclass
class Pool:
    """Populations trained by one command on other seeds (``proxima report A+A2``), reported as one: each
    setting holds every population's members of it (read_pool checked that their configs are equal but for
    the seed, run_dir and POOL_FREE_FIELDS, and that no seed is in a setting twice)."""

    dirs: list
    """The populations' directories, as given."""
    names: list
    """Each one's name in the report (plot.run_names over every directory reported)."""
    docs: list
    """Each one's population.json."""
    settings: list
    """Setting per setting, in the first population's order; its members named ``A2/m000-seed6``."""

    @property
    def name(self) -> str:
        """``A+A2``: the pool as the report names it; ``a+b + A2`` when a name holds a ``+`` itself, which
        ``a+b+A2`` would hide (a pool of a, b and A2)."""
        return (f" {POOL_SEP} " if any(POOL_SEP in n for n in self.names) else POOL_SEP).join(self.names)

    @property
    def spelled(self) -> str:
        """``runs/a+runs/a2``: the pool as a command names it (the directories as given)."""
        return POOL_SEP.join(str(d) for d in self.dirs)


def settings_of(src) -> list:
    """The settings (Setting) of a population directory (read_settings) or a Pool."""
    return src.settings if isinstance(src, Pool) else read_settings(src)


def parts_of(src) -> list:
    """The population directories behind a report's source: a Pool's, or the one directory."""
    return list(src.dirs) if isinstance(src, Pool) else [Path(src)]


def pool_groups(args: list) -> list:
    """[[Path]] of the RUN_DIR arguments, one list per argument: ``A+A2`` is [A, A2] (a group to pool),
    ``A`` is [A]. An argument that names an existing path is that path, whatever its characters, so a
    directory named with a ``+`` is still reported; a directory named twice in a group counts once."""
    from .plot import unique_dirs

    return [[Path(a)] if os.path.lexists(a) or POOL_SEP not in str(a)
            else unique_dirs([p for p in str(a).split(POOL_SEP) if p]) or [Path(a)] for a in args]


def _value_text(value) -> str:
    """A config value as the refusal names it: text as it is, others as JSON (``100000``, ``[64, 64]``), shortened
    (a 10 MB env_kwargs is named by its first characters and its length, not written whole to stderr)."""
    return shortened(value if isinstance(value, str) else json.dumps(value, default=str))


def _same(a, b) -> bool:
    """Whether two config values are equal, NaN equal to NaN (``ent_coef: .nan`` in both configs is one setting)."""
    if a == b:
        return True
    if isinstance(a, float) and isinstance(b, float):
        return math.isnan(a) and math.isnan(b)
    try:
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    except RecursionError:  # nested past Python's stack: not shown equal
        return False
    return False


#: config fields pooled populations may differ in (report A+A2), as none changes what a member learns or how its
#: final return is measured: the bookkeeping of the process that trained it (checkpoints, progress bar, curve.png,
#: debug checks, freed memory kept) changes no number; device, threads and the compute switches change a member's
#: numbers at float rounding (on another device, its random draws too), as a seed does, not the distribution of
#: what members learn; vector steps the same envs in one process or in several; a population applies no
#: stop_return. population._RUN_WIDE less amp (bf16/fp16 forward passes), init_from (the starting weights),
#: eval_episodes and eval_every (the measure), which stay refused (docs/populations.md lists them). Written out,
#: not derived, so that a field added to _RUN_WIDE is exempted only once someone decides it: a test compares them
POOL_FREE_FIELDS = ("device", "threads", "flush_denormal", "keep_host_memory", "deterministic", "compile",
                    "compile_mode", "cudagraphs", "vector", "checkpoint_every", "checkpoint_minutes",
                    "keep_checkpoints", "progress", "debug_checks", "plot", "stop_return", "stop_episodes")


def _first_difference(a: dict, b: dict) -> Optional[tuple]:
    """(field, a's value, b's value) of the first config field, in a's order then b's, whose values differ,
    less each member's own record (MEMBER_OWN_RECORD) and the fields pooling lets differ (POOL_FREE_FIELDS);
    ``absent`` for a field one lacks; None when none."""
    for key in dict.fromkeys([*a, *b]):
        if key in MEMBER_OWN_RECORD or key in POOL_FREE_FIELDS:
            continue
        va, vb = a.get(key, _ABSENT), b.get(key, _ABSENT)
        if not _same(va, vb):
            return key, *("absent" if v is _ABSENT else _value_text(v) for v in (va, vb))
    return None


_ABSENT = object()
POOL_HOW = ("a pool (A+A2) is one setting trained in parts: the same `proxima train` command with other --seeds; "
            "to compare populations, give them apart (proxima report A B --out FILE.md)")


def _as_built(member: Path, config: dict) -> dict:
    """A member's config.yaml as pooling compares it: ``backend: auto`` as the backend the member built
    (plot.auto_setting_backend: its meta.json's ``env_backend``), so a population trained without --backend
    pools with one given the backend auto picked for it, and not with one whose auto built another."""
    if config.get("backend") != "auto":
        return config
    from .plot import auto_setting_backend
    from .rundir import _read_json_file

    meta = _read_json_file(member / "meta.json") or {}  # missing or damaged: auto as the env id alone picks it
    return {**config, "backend": auto_setting_backend(config, meta.get("env_backend"))}


def read_pool(dirs: list, names: list) -> Pool:
    """The Pool of the population directories ``dirs`` (named ``names`` in the report). ReportError, one line,
    nothing evaluated: a directory that is not a population (or a broken one), populations of other settings
    (the first config field whose values differ, with both: ``total_timesteps: 100000 in A, 50000 in A2``;
    population.json's env id and settings first), a member without a config.yaml to compare, or a seed
    twice in one setting (its two member directories)."""
    import shlex

    from .report import ReportError, _md

    docs, parts = [], []
    for d in dirs:
        if not is_population(d):
            why = "does not exist" if not os.path.lexists(d) else "is a single run (no population.json)"
            raise ReportError(f"{d}: {why}; {POOL_SEP} pools populations (train --seeds/--sweep) of one setting")
        try:
            parts.append(read_settings(d))
            docs.append(json.loads(read_run_text(Path(d) / POPULATION_FILE)))
        except (PopulationError, OSError, ValueError) as e:
            raise ReportError(with_advice(e)) from None
    for name, doc in zip(names[1:], docs[1:]):
        if doc.get("env_id") != docs[0].get("env_id"):
            raise ReportError(f"env_id: {_md(docs[0].get('env_id'))} in {names[0]}, {_md(doc.get('env_id'))} in {name}; "
                              + POOL_HOW)
    labels = [[setting_label(s.settings) or "(seeds only)" for s in settings] for settings in parts]
    for name, own in zip(names[1:], labels[1:]):
        if sorted(own) != sorted(labels[0]):
            raise ReportError(f"settings: {'; '.join(labels[0])} in {names[0]}, {'; '.join(own)} in {name}; " + POOL_HOW)
    configs = {}
    for d, name, doc in zip(dirs, names, docs):
        _, read, unread = member_configs(Path(d), doc)
        if unread:
            raise ReportError(f"{next(iter(unread.values()))}; {POOL_SEP} compares every member's config.yaml before pooling")
        configs.update({Path(d) / member: _as_built(Path(d) / member, c) for member, c in read.items()})
    pooled = []
    for i, label in enumerate(labels[0]):
        setting = Setting(dict(parts[0][i].settings))
        ref_dir = parts[0][i].members[0][1] if parts[0][i].members else None
        ref_lr = None  # its logged learning rates, read once
        seen: dict = {}
        for d, name, settings, own in zip(dirs, names, parts, labels):
            part = settings[own.index(label)]
            for seed, member in part.members:
                shown_name = f"{name}/{member.name}"
                config = configs.get(member) or {}
                if not config:
                    raise ReportError(f"{member / 'config.yaml'}: missing or empty; {POOL_SEP} pools populations whose "
                                      "members' config.yaml show them one setting: pool populations with their files")
                if member != ref_dir:
                    differ = _first_difference(configs.get(ref_dir) or {}, config)
                    if differ:
                        key, a, b = differ
                        # two members of the first population: each named by its folder, not "in A, in A"
                        ref, here = (names[0], name) if d != dirs[0] else (f"{names[0]}/{ref_dir.name}", shown_name)
                        raise ReportError(f"{_md(shortened(str(key)))}: {_md(a)} in {ref}, {_md(b)} in {here}"
                                          + (f" ({label})" if label != "(seeds only)" else "") + f"; {POOL_HOW}")
                if member != ref_dir and ref_dir is not None:
                    if ref_lr is None:
                        ref_lr = _lr_column(ref_dir)
                    differ = _lr_difference(ref_lr, member)
                    if differ:
                        ref = f"{names[0]}/{ref_dir.name}"
                        apart = shlex.join(_arg(p) for p in dirs)
                        # the cause only where a resume is recorded: an edited cell or column differs with none
                        why = ("a resume that extended --total-timesteps under --anneal-lr recomputed one's schedule "
                               "(meta.json's `resumes`), which a fresh run does not repeat, so their members trained "
                               "under different learning rates" if _resumed_member(ref_dir) or _resumed_member(member)
                               else "their members logged different learning rates (charts/learning_rate in "
                               "metrics.csv), which one setting does not")
                        raise ReportError(
                            f"learning rate schedule: {_md(ref)} logged lr {differ[1]:.3g} at step {differ[0]:,}, "
                            f"{_md(shown_name)} {differ[2]:.3g}" + (f" ({label})" if label != "(seeds only)" else "")
                            + f"; {why}: report them apart (proxima report {apart} --out FILE.md), or "
                            "train the setting afresh on every seed")
                if seed in seen:
                    raise ReportError(f"seed {seed} twice in the pooled setting {label}: {seen[seed]} and {shown_name}; "
                                      "train the added population on other seeds (--seeds N-M past the first's)")
                seen[seed] = shown_name
                setting.members.append((seed, member))
                setting.names[member] = shown_name
                if member.name in part.diverged:
                    setting.diverged[shown_name] = part.diverged[member.name]
        pooled.append(setting)
    return Pool([Path(d) for d in dirs], list(names), docs, pooled)


def _lr_column(member: Path) -> dict:
    """{iteration: (global_step, charts/learning_rate)} of a member's metrics.csv ({} when it has none)."""
    from .plot import PlotError, read_metrics

    try:
        m = read_metrics(member)
    except (PlotError, OSError, ValueError):
        return {}
    it, at, lr = m.get("iteration"), m.get("global_step"), m.get("charts/learning_rate")
    if it is None or at is None or lr is None:
        return {}
    return {int(i): (int(s), float(r)) for i, s, r in zip(it, at, lr) if np.isfinite(i) and np.isfinite(s) and np.isfinite(r)}


def _lr_difference(lr_a: dict, b: Path) -> Optional[tuple]:
    """(step, a's lr, b's lr) at the first iteration both logged where member a (``lr_a``: its _lr_column) and
    member ``b`` of one setting (one lr, one anneal_lr) trained at different learning rates: a resume recomputed one's
    schedule over a new total (schedule_recomputed_at), which no fresh run repeats; None when they agree (or
    nothing says)."""
    lr_b = _lr_column(b)
    for i in sorted(lr_a.keys() & lr_b.keys()):
        (step, x), (_, y) = lr_a[i], lr_b[i]
        if abs(x - y) > 1e-4 * max(abs(x), abs(y)):  # float32 logging, far under one iteration's annealing step
            return step, x, y
    return None


def pooled_section(srcs: list, names: list) -> list:
    """The lines of a report's "## Pooled" (none when no source is a Pool): per pool and setting, which
    population gave which seeds."""
    from .report import _md

    pools = [(src, name) for src, name in zip(srcs, names) if isinstance(src, Pool)]
    if not pools:
        return []
    lines = ["", "## Pooled", "",
             "Each row of a pool is one setting with the members of every population named here, as if trained "
             "at once (their members' `config.yaml` checked equal but for the seed, `run_dir` and fields that change no "
             "member's learning or measured return, no seed twice in a setting):", "",
             "| pool | setting | population | seeds | members |", "|---|---|---|---|---|"]
    for pool, name in pools:
        for st in pool.settings:
            label = setting_label(st.settings) or "(seeds only)"
            for d, part in zip(pool.dirs, pool.names):
                seeds = [seed for seed, m in st.members if m.parent == d]
                lines.append(f"| {_md(name)} | {_md(label)} | {_md(str(d))} | {_seeds_text(seeds)} | {len(seeds)} |")
    return lines


def next_seeds(seeds: list) -> list:
    """The seeds to train next for a population of ``seeds``: past its highest, as many again, and enough
    that the pool holds CLAIM_SEEDS (1-5 -> 6-10, 1-3 -> 4-10, 1-10 -> 11-20), ascending. None past MAX_SEED
    (which --seeds refuses): those missing there are the lowest seeds not in ``seeds`` (2147483646-2147483647
    -> 0-7)."""
    import itertools

    from .config import MAX_SEED

    n = len(seeds)
    want = max(n, CLAIM_SEEDS - n, 1)
    start = max(seeds) + 1 if seeds else 1
    more = list(range(start, min(start + want, MAX_SEED + 1)))
    if len(more) < want:
        used = set(seeds)
        more += itertools.islice((s for s in range(MAX_SEED + 1) if s not in used), want - len(more))
    return sorted(more)


def _arg(path) -> str:
    """``path`` as a command-line argument: ``./-A`` for a path that starts with ``-``, which argparse would read
    as an option (pathlib drops the ``./`` a user typed)."""
    text = str(path)
    return f"./{text}" if text.startswith("-") else text


def _more_dir(src, spec: str) -> Path:
    """Where the next seeds train: beside the (first) population, ``runs/a-seeds6-10``."""
    base = parts_of(src)[0]
    base = base if base.name not in ("", ".", "..") else base.resolve()
    return base.with_name(f"{base.name}-seeds{spec}")


def _train_more(src, more: list, new: Path) -> str:
    """The command that trains ``src``'s setting on the seeds ``more`` into ``new``: its recorded command
    (population_run.echoed_command: its program the plain word proxima) with --seeds and --run-dir replaced and --total-timesteps the members'
    config.yaml's (_config_total: a resume's, not the first command's), else how to make it."""
    import shlex

    from .population_run import echoed_command, seeds_spec
    from .report import _code

    first = parts_of(src)[0]
    doc = _docs_of(src)[0]
    command = doc.get("command")
    spec = seeds_spec(more)
    if command is None:  # trained from Python (train_population), which records no command
        call = _train_more_python(first, doc, more, new)
        if call is not None:
            return call
    echoed = echoed_command(command)  # its program the plain word proxima, never a path population.json records
    if echoed is None:
        return (f"the command in {first / POPULATION_FILE} with {_code(f'--seeds {spec} --run-dir {shlex.quote(_arg(new))}')} "
                "in place of its own")
    trained = _config_total(first, doc)
    again, skip, had_total = [], False, False
    for word in echoed:
        if skip:
            skip = False
        elif word in ("--seeds", "--run-dir", "--overwrite"):
            skip = word != "--overwrite"
        elif word == "--total-timesteps" and _is_count(trained):
            again += [word, str(trained)]
            skip = had_total = True
        elif word.startswith("--total-timesteps=") and _is_count(trained):
            again.append(f"--total-timesteps={trained}")
            had_total = True
        elif not word.startswith(("--seeds=", "--run-dir=")):
            again.append(word)
    if _is_count(trained) and not had_total and _resumed(src):  # the preset's total, which a resume changed
        again += ["--total-timesteps", str(trained)]
    # _code: a recorded word holding a backtick would close a one-backtick span in report.md
    return _code(shlex.join(again + ['--seeds', spec, '--run-dir', _arg(new)]))


def _config_total(run_dir: Path, doc: dict) -> Optional[int]:
    """The total_timesteps of the first member config.yaml of ``run_dir`` that records one; None when none does.
    More seeds trains to it: it is the total a pool compares (read_pool), the one typed, which a resume with
    --total-timesteps rewrites, where population.json's total_timesteps_per_member is rounded down to whole
    iterations (--total-timesteps 1000 at 512-step batches: 512), which a new population's config.yaml would
    then record and no pool with these members would take."""
    _, configs, _ = member_configs(run_dir, doc)
    return next((c["total_timesteps"] for c in configs.values() if _trainable_total(c)), None)


def _trainable_total(config: dict) -> bool:
    """Whether a member config.yaml's total_timesteps is one `proxima train` takes: a whole number of at least
    one batch (num_envs x num_steps, when those are counts). A hand-edited 0, -5 or text is not: More seeds then
    keeps the recorded command's own --total-timesteps rather than suggest one that train refuses."""
    total, envs, steps = (config.get(k) for k in ("total_timesteps", "num_envs", "num_steps"))
    batch = envs * steps if all(_is_count(v) and v > 0 for v in (envs, steps)) else 1
    return _is_count(total) and total >= batch


def _resumed(src) -> bool:
    """Whether any member of ``src`` records a resume (its meta.json's ``resumes``)."""
    return any(_resumed_member(d) for st in settings_of(src) for _, d in st.members)


def _resumed_member(member: Path) -> bool:
    """Whether a member's meta.json records a resume (its ``resumes``); False when it is missing or damaged."""
    from .rundir import _read_json_file

    meta = _read_json_file(Path(member) / "meta.json")
    return isinstance(meta, dict) and bool(meta.get("resumes"))


def recomputed_schedule(src) -> Optional[tuple]:
    """(member name, step) of the first member of ``src`` whose learning rate schedule a resume recomputed
    (schedule_recomputed_at: --anneal-lr and a new --total-timesteps), which no fresh run repeats; else None."""
    for d, doc in zip(parts_of(src), _docs_of(src)):
        _, configs, _ = member_configs(d, doc)
        for st in settings_of(d):
            for _, m in st.members:
                off = schedule_recomputed_at(m, configs.get(m.name) or {}, doc.get("total_timesteps_per_member"))
                if off is not None:
                    name = st.member_name(m) if not isinstance(src, Pool) else f"{src.names[src.dirs.index(d)]}/{m.name}"
                    return name, off[0]
    return None


def _train_more_python(first: Path, doc: dict, more: list, new: Path) -> Optional[str]:
    """_train_more for a population trained from Python (population.json records no command, a member's meta.json
    the train_population call: population_run._python_call): the train_population call of the seeds ``more``
    into ``new``, its config read from the first member's config.yaml (a member's seed and swept values are
    replaced per member) and population.json's sweep; None for a population of no such record, or when the files
    hold no member config.yaml or no sweep a call can repeat (data: edited or damaged)."""
    from .population_run import _python_call, is_plain_name, seeds_python
    from .report import _code

    if _python_call(first) is None:
        return None
    entries = doc.get("member_dirs")
    names = [e.get("dir") for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    member = next((first / n for n in names if is_plain_name(n) and (first / n / "config.yaml").is_file()), None)
    sweep = doc.get("sweep") or {}
    plain = (str, int, float, bool, type(None))
    if member is None or not isinstance(sweep, dict) or not all(
            isinstance(k, str) and k.isidentifier() and isinstance(v, list) and v and all(isinstance(x, plain) for x in v)
            for k, v in sweep.items()):
        return None
    config = f"proxima.config.from_dict(proxima.config.load_config_file({str(member / 'config.yaml')!r}))"
    swept = f", sweep={sweep!r}" if sweep else ""
    call = f"proxima.train_population({config}, seeds={seeds_python(more)}{swept}, run_dir={str(new)!r})"
    return f"from Python: {_code(call)} (the config of {member.name}, whose seed and swept values each member replaces)"


def report_flags(threshold: Optional[float] = None, episodes: Optional[int] = None, score_ranges=None,
                 normalize: bool = False) -> list:
    """[(flag, value...)] of a report's options that change its table, for the report More seeds advises to repeat
    them (``--threshold 100``: its last column; ``--episodes N``: how members without eval.json are measured;
    ``--normalize`` and each ``--score-range``: a report over tasks); curve options (--metric, --x, --smooth)
    change no number of the table and are left to the user. ``episodes`` None: the command line's default."""
    def flag(name: str, value) -> tuple:
        text = str(value)  # a negative value joined by '=': argparse reads a lone '-1e3' as a flag
        return (f"{name}={text}",) if text.startswith("-") else (name, text)

    flags = []
    if threshold is not None:
        short = f"{threshold:g}"
        flags.append(flag("--threshold", short if float(short) == threshold else repr(float(threshold))))
    if episodes is not None:
        flags.append(flag("--episodes", int(episodes)))
    if normalize:
        flags.append(("--normalize",))
        flags += [flag("--score-range", spec) for spec in score_ranges or ()]
    return flags


def more_seeds_section(lines: list, srcs: list, again: Sequence[tuple] = ()) -> list:
    """The lines of "## More seeds" when the report's ``lines`` advise to run more seeds: per population,
    the train command of its next seeds (next_seeds) into a new directory, then the report that pools it
    (``proxima report A+A-seeds6-10 --out A-seeds1-10.md``, named after the first population, so that the
    text does not depend on where this report is written) with this report's ``again`` (report_flags);
    [] otherwise. A directory whose path holds a ``+`` (which would split it) is pooled with ``--pool``:
    ``proxima report a+b a+b-seeds4-10 --pool``; with several sources no one report can name it, and each
    source's pooled report is given apart. A path that starts with ``-`` is given as ``./-A``; a directory whose
    path holds a control character (a newline, ESC) gets no command, which report.md could only show otherwise
    than it runs: the section says to rename it."""
    import shlex

    if not any("run more seeds" in line.lower() for line in lines):
        return []
    from .population_run import seeds_spec
    from .report import _code, _md

    head = ["", "## More seeds", "", f"A learning claim wants {CLAIM_SEEDS} or more seeds per setting."]
    steps, groups, outs, afresh = [], [], [], 0
    for src in srcs:
        seeds = sorted({seed for st in settings_of(src) for seed, _ in st.members})
        more = next_seeds(seeds)
        new = _more_dir(src, seeds_spec(more))
        outs.append(f"{_arg(_more_dir(src, seeds_spec(sorted(seeds + more))))}.md")
        recomputed = recomputed_schedule(src)
        if recomputed is not None:  # new seeds would anneal otherwise and not pool: every seed trained afresh
            more = sorted(seeds + more)
            new = _more_dir(src, seeds_spec(more))
        groups.append([_arg(new)] if recomputed else [_arg(d) for d in parts_of(src)] + [_arg(new)])
        unshown = next((d for d in groups[-1] + outs[-1:] if not d.isprintable()), None)
        if unshown is not None:
            head[-1] += (f" To add seeds to {_md(unshown)}, rename it first: its path holds a control character (a "
                         "newline, ESC), which a command in this file cannot show as it runs.")
            return head
        afresh += recomputed is not None
        if recomputed is None:
            steps.append(f"- {_train_more(src, more, new)}")
        else:
            who, step = recomputed
            steps.append(f"- {_md(_spelled(src))}: a resume recomputed its learning rate schedule ({_md(who)} after step "
                         f"{step:,}: --anneal-lr over a new --total-timesteps), which a fresh run cannot match, so seeds "
                         f"trained now would not pool with it; train the setting afresh on seeds {seeds_spec(more)}: "
                         f"{_train_more(src, more, new)}")
    flags = [w for f in again for w in f]
    plus = next((d for g in groups for d in g if POOL_SEP in d), None)
    if plus is None:
        report = shlex.join(["proxima", "report", *(POOL_SEP.join(g) for g in groups), "--out", outs[0], *flags])
        pool = (f"then report them: {_code(report)}." if afresh == len(srcs) else
                f"then pool them with these (each `{POOL_SEP}` joins the populations of one setting): {_code(report)}.")
    elif len(srcs) == 1:
        report = shlex.join(["proxima", "report", *groups[0], "--pool", "--out", outs[0], *flags])
        pool = (f"then pool them with these (`--pool`: {_code(plus)} holds a `{POOL_SEP}`, where `{POOL_SEP}` would "
                f"split it): {_code(report)}.")
    else:  # --pool joins every directory given: one pool per report
        alone = [w for f in again if f[0].partition("=")[0] not in ("--normalize", "--score-range") for w in f]
        each = [shlex.join(["proxima", "report", *g, "--pool", "--out", out, *alone]) for g, out in zip(groups, outs)]
        pool = (f"then pool them: {_code(plus)} holds a `{POOL_SEP}`, where `{POOL_SEP}` would split it, so no one "
                f"report of these pools can name it (`--pool` joins every directory given into one pool); report each "
                "pool on its own: " + "; ".join(_code(c) for c in each) + ".")
    head[-1] += (" To add seeds, train the same setting again on more seeds into a new directory:" if afresh == len(srcs)
                 else " To add seeds, train the same setting on the next ones into a new directory:")
    return [*head, "", *steps, "", pool]


def read_sources(groups: list) -> list:
    """The report's sources of pool_groups's ``groups``: a Pool (read_pool) of each group of several
    directories, the directory itself of each other; every directory named as run_names names it among all."""
    from .plot import run_names

    flat = [d for g in groups for d in g]
    named = dict(zip(flat, run_names(flat)))
    return [read_pool(g, [named[d] for d in g]) if len(g) > 1 else g[0] for g in groups]


def source_names(srcs: list) -> list:
    """Each source's name in a report: a Pool's ``A+A2``, a directory's as plot.run_names gives it among all."""
    from .plot import run_names

    flat = [d for src in srcs for d in parts_of(src)]
    named = dict(zip(flat, run_names(flat)))
    return [src.name if isinstance(src, Pool) else named[Path(src)] for src in srcs]


def diverged_text(entry) -> str:
    """``diverged at iteration 3``: population.json's ``diverged`` entry of a member, in a few words."""
    iteration = entry.get("iteration") if isinstance(entry, dict) else None
    ok = isinstance(iteration, int) and not isinstance(iteration, bool)
    return f"diverged at iteration {iteration}" if ok else "diverged"


def every_member_diverged(run_dir, settings: list, when: str = "") -> Optional[str]:
    """``every member diverged (each one's iteration and cause: RUN/population.json; the first,
    m000-seed1, at iteration 1: non-finite loss, ...; try a lower --lr or --max-grad-norm)`` when
    every member of ``settings`` (settings_of ``run_dir``, a population directory or a Pool) diverged,
    else None. A pool's line names each population's population.json and its first member as the
    report names it (``A2/m000-seed6``), the earliest divergence of them all. ``when``: words after
    "diverged" (`` before the first checkpoint``). Plot, eval and report say this one line: with no member left,
    what each would say of the first member (no rows, no checkpoint) hides why and what to change."""
    members = [(s, d) for s in settings for _, d in s.members]
    if not members or any(s.member_name(d) not in s.diverged for s, d in members):
        return None
    pooled = isinstance(run_dir, Pool)
    paths = [Path(d) / POPULATION_FILE for d in parts_of(run_dir)]
    records = []
    for k, (path, name) in enumerate(zip(paths, run_dir.names if pooled else [None])):
        try:  # the cause is only in the file; without it the line still says who and where to look
            records += [(e["diverged"].get("iteration"), k, i, f"{name}/{e['dir']}" if pooled else e["dir"],
                         e["diverged"].get("reason"))
                        for i, e in enumerate(read_run_json(path)["member_dirs"])
                        if isinstance(e, dict) and isinstance(e.get("diverged"), dict)]
        except (RunFileError, OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    first = ""
    if records:
        it, _, _, name, reason = min(records, key=lambda r: (r[0] if _is_count(r[0]) else math.inf, r[1], r[2]))
        at = f" at iteration {it}" if _is_count(it) else ""
        first = f"; the first, {name},{at}" + (f": {reason}" if isinstance(reason, str) and reason else "")
    return f"every member diverged{when} (each one's iteration and cause: {', '.join(map(str, paths))}{first})"


def _is_count(value) -> bool:
    """Whether a population.json value is a whole number (an iteration), not a bool, a float or text."""
    return isinstance(value, int) and not isinstance(value, bool)


def divergence_record(member_dir) -> Optional[dict]:
    """The divergence record ({"iteration", "global_step", "reason"}) member_divergence reads, or None."""
    member_dir = Path(member_dir).resolve()
    try:
        doc = json.loads(read_run_text(member_dir.parent / POPULATION_FILE))
        record = next(e for e in doc["member_dirs"] if isinstance(e, dict) and e.get("dir") == member_dir.name).get("diverged")
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        try:
            record = json.loads(read_run_text(member_dir / DIVERGED_FILE))
        except (OSError, ValueError):
            return None
    return record if record is None or isinstance(record, dict) else {}


def member_divergence(member_dir) -> Optional[str]:
    """``diverged at iteration 4 (non-finite loss)`` for a population's member that diverged; None for
    one that did not, or a plain run. The record is its population's population.json entry when the
    directory above lists the member (the timeline trained: a resume from before the divergence drops
    it, and a diverged.json it could not remove), else the member's own diverged.json (a member
    directory copied out of its population)."""
    record = divergence_record(member_dir)
    if record is None:
        return None
    reason = record.get("reason") if isinstance(record, dict) else None
    return diverged_text(record) + (f" ({reason})" if isinstance(reason, str) and reason else "")


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
    """(low, high) percentile-bootstrap interval of ``stat`` over the members ``x`` (n,); None for
    n < MIN_CI_MEMBERS (one member resampled is itself: no interval)."""
    x = np.asarray(x, dtype=np.float64)
    if x.size < MIN_CI_MEMBERS:
        return None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    along = {np.mean: mean_along, iqm: iqm_along}.get(stat)
    # the report's two statistics in one vectorized call (bootstrap_band's, so the band equals this bit for bit);
    # a Python call per resample would cost ~0.1 s a row at 10,000 resamples
    stats = along(x[idx], axis=-1) if along is not None else np.array([stat(x[i]) for i in idx])
    alpha = (1 - level) / 2
    return float(np.quantile(stats, alpha)), float(np.quantile(stats, 1 - alpha))


def bootstrap_band(stack: np.ndarray, stat: str = "iqm", resamples: int = BAND_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                   level: float = CI_LEVEL) -> tuple:
    """bootstrap_ci at every x point: (low (X,), high (X,)) of ``stat`` ("mean" or "iqm").

    stack: (n, X) float, member i's value at x point j, NaN where member i has none. At each x point
    the members present there (n_j of them, in member order) are resampled exactly as bootstrap_ci
    resamples them: the indices of a fresh numpy default_rng(seed).integers(0, n_j, (resamples, n_j)),
    so the band at a point equals the table's interval of those values, bit for bit, and a point
    some members do not reach gets the interval of the members that do. NaN (no band drawn) where
    n_j < MIN_CI_MEMBERS. Columns with the same n_j share those indices, drawn once; they are done
    in blocks (memory stays ~50 MB at any length).
    """
    if stat not in STATISTICS:
        raise ValueError(f"stat {stat!r}: choose one of {', '.join(STATISTICS)}")
    stack = np.asarray(stack, dtype=np.float64)
    n, points = stack.shape
    missing = np.isnan(stack)
    # per column, its n_j values first in member order (bootstrap_ci's x), NaN after
    present_first = np.take_along_axis(stack, np.argsort(missing, axis=0, kind="stable"), axis=0)
    n_j = n - missing.sum(axis=0)  # (X,)
    alpha = (1 - level) / 2
    lo, hi = np.full(points, np.nan), np.full(points, np.nan)
    for k in np.unique(n_j[n_j >= MIN_CI_MEMBERS]):
        k = int(k)
        idx = np.random.default_rng(seed).integers(0, k, size=(resamples, k))  # bootstrap_ci's draws for k members
        cols = np.flatnonzero(n_j == k)
        block = max(1, 2_000_000 // (resamples * k))
        for a in range(0, cols.size, block):
            c = cols[a:a + block]
            values = np.ascontiguousarray(present_first[:k, c].T)  # (B, k)
            # (B, R, k), C order: a sum over strided values adds in another order than bootstrap_ci's
            # x[i].sum() and differs in the last bits
            draws = np.ascontiguousarray(values[:, idx])
            stats = STATISTICS[stat](draws, axis=-1)  # (B, R)
            with np.errstate(invalid="ignore"):  # an inf and a -inf among the values: a NaN statistic, no warning
                lo[c] = np.quantile(stats, alpha, axis=1)
                hi[c] = np.quantile(stats, 1 - alpha, axis=1)
    return lo, hi


#: why a member's eval.json is not used: an older Proxima's, of a Gymnasium or EnvPool env, whose episode k
#: started from its seed + k (evaluate.old_episode_seeds): members' scores from overlapping start states
OLD_SEEDS = "eval.json seeded by an older Proxima (episode k from seed + k)"

#: why a member's eval.json is not used: it could not be read (not valid JSON, a field of the wrong type); the reason
#: after it names the file
BROKEN_EVAL = "eval.json unreadable"

#: the source of a member's final return evaluated by the report itself (no eval.json)
EVALUATED_NOW = "evaluated now from the latest checkpoint (no eval.json)"
#: the same, for a member whose eval.json is there but not its result (of another step, or OLD_SEEDS'): the
#: report names why per member; "no eval.json" would send the user looking for a file they can see
REEVALUATED = "evaluated now from the latest checkpoint (eval.json set aside)"


def member_final_return(member_dir: Path, episodes: Optional[int] = 0, device: str = "cpu", quiet: bool = True,
                        unevaluated: Optional[list] = None, stale: Optional[dict] = None,
                        measured: Optional[dict] = None, name: Optional[str] = None) -> tuple:
    """(return, source): eval.json's mean return; else, with ``episodes`` >= 1 (None: the member's own
    --eval-episodes, report.run_eval_episodes), a fresh evaluation of the member's latest checkpoint
    (``report --episodes N --device D``, as a single run's report makes one); else (or when it has no
    checkpoint yet: its error is appended to ``unevaluated``) the last logged charts/episodic_return
    (None, "no result", before the first is logged). An eval.json of another step than the member's
    last is not its result: ``stale`` gets {member dir name: "eval.json of step X, not the member's
    last step N"}. An evaluation return's step and episodes go into ``measured``: {member dir name:
    (global_step, episodes)}, None for one its eval.json does not record (an older one). ``name``: the
    member's key in those dicts (Setting.member_name; its directory's name by default)."""
    name = name or member_dir.name

    def count(v):
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    ev = member_dir / "eval.json"
    saved = None
    if ev.is_file():  # data: read and checked as a single run's report reads it (one line, never a traceback)
        from .report import ReportError, _check_eval, _last_step, _read_json, _stale_eval

        try:
            saved = _check_eval(ev, _read_json(ev), finite=False)  # a NaN member: left out, named
            if "mean_return" not in saved:
                raise ReportError(f"{ev}: has no mean_return")
        except ReportError as e:  # one member's broken file (cut short, edited): set aside, as a truncated checkpoint
            # leaves its member out, never the whole report; the member is evaluated again where a missing one would be
            saved = None
            if stale is not None:
                stale[name] = f"{BROKEN_EVAL}: {e}"
    if saved is not None:
        from .evaluate import old_episode_seeds

        # of an earlier step than the member's newest checkpoint (a resume that could not remove it), or played
        # from an older Proxima's overlapping start states (seed + k, where the others' are episode_seeds'): not
        # its result, evaluated again where the report evaluates (a note names it where it does not)
        old_seeds = old_episode_seeds(saved)
        if not _stale_eval(member_dir, saved) and not old_seeds:
            if measured is not None:
                measured[name] = (count(saved.get("global_step")), count(saved.get("episodes")))
            return float(saved["mean_return"]), "eval"
        if stale is not None and not _stale_eval(member_dir, saved):
            stale[name] = OLD_SEEDS
        elif stale is not None:  # "no eval.json" would send the user looking for a file that is there
            stale[name] = (f"eval.json of step {saved['global_step']:,}, not the member's last step "
                                      f"{_last_step(member_dir):,}")
    if episodes is None:
        from .report import run_eval_episodes

        episodes = run_eval_episodes(member_dir)
    if episodes >= 1:
        from .report import _eval_line, evaluate_latest

        result = evaluate_latest(member_dir, episodes, device)
        if "error" not in result:
            if not quiet:
                print(f"evaluated {member_dir}: {_eval_line(result)}", file=sys.stderr)
            if measured is not None:
                measured[name] = (count(result.get("global_step")), count(result.get("episodes")))
            return float(result["mean_return"]), REEVALUATED if ev.is_file() else EVALUATED_NOW
        if unevaluated is not None:
            unevaluated.append((member_dir, result["error"]))
    return last_training_return(member_dir), "last training return"


#: what the table's "last training return" is, said under its header
TRAINING_RETURN_TEXT = ("Last training return: each member's last charts/episodic_return_100 (its mean return over "
                        "its last 100 or more training episodes, stochastic actions; charts/episodic_return for a "
                        "member logged before that column).")


def last_training_return(member_dir: Path) -> Optional[float]:
    """A member's last training return: its last charts/episodic_return_100 (the rolling mean of its last 100 or
    more episodes, SB3's ep_rew_mean, the number the progress line and the curve end at), else, for a member
    logged before that column, its last charts/episodic_return (the mean of one iteration's few episodes); None
    before any is logged. A non-finite last charts/episodic_return (a logged inf, a 'nan' put in the cell) is
    the member's return, so member_statistics leaves it out and names it, never the return before it."""
    from .logger import ROLLING_RETURN
    from .plot import PlotError, read_metrics
    from .report import _with_rolling_filled

    try:
        metrics = read_metrics(member_dir)
    except PlotError:  # a member that has logged nothing yet (a population just started) has no return
        metrics = {}
    values = metrics.get("charts/episodic_return", np.array([]))
    # an empty cell (no episode finished that iteration; proxima's logger also writes a NaN as an empty cell)
    # is skipped, but a logged +-inf, or a 'nan' written in the cell by hand or by another tool, is the member's
    # last return: kept, so member_statistics leaves the member out and names it "NaN"/"inf" rather than
    # silently using the return before it. read_metrics reads both as NaN: the cell tells them apart
    if _last_logged_cell_is_nan(member_dir, "charts/episodic_return"):
        return math.nan
    values = values[~np.isnan(values)]
    if values.size and not np.isfinite(values[-1]):
        return float(values[-1])
    rolling = metrics.get(ROLLING_RETURN)
    if rolling is not None and np.isfinite(rolling).any():
        rolling = _with_rolling_filled(metrics)[0][ROLLING_RETURN]
        rolling = rolling[~np.isnan(rolling)]
        return float(rolling[-1])
    return float(values[-1]) if values.size else None


def _last_logged_cell_is_nan(member_dir: Path, column: str) -> bool:
    """Whether the last non-empty cell of ``column`` in the member's metrics.csv (of its whole rows) reads as NaN:
    a 'nan' put there by hand or by another tool, since proxima's own logger leaves a NaN's cell empty."""
    import csv

    try:
        rows = list(csv.reader(read_run_text(member_dir / "metrics.csv").splitlines()))
    except (OSError, ValueError, csv.Error):
        return False
    if not rows or column not in rows[0]:
        return False
    j = rows[0].index(column)
    for r in reversed(rows[1:]):
        if len(r) != len(rows[0]) or not r[j].strip():  # a row cut short by a kill; no episode that iteration
            continue
        try:
            return math.isnan(float(r[j]))
        except ValueError:  # not a number: read_metrics's business, not a return
            return False
    return False


def left_out_reason(value) -> Optional[str]:
    """Why a member's value is not used: "no result" (None), "NaN", "inf", "-inf"; None for a finite value."""
    if value is None:
        return "no result"
    if math.isnan(value):
        return "NaN"
    return None if math.isfinite(value) else ("inf" if value > 0 else "-inf")


def member_statistics(names: list, values: list, threshold: Optional[float] = None, excluded: Optional[dict] = None) -> dict:
    """The statistics over one setting's members, one value each (one kind of measurement): the one
    implementation of ``proxima report`` and ``proxima eval``.

    names, values: (m,) member names and their values (None, NaN or inf: left out, named with why);
    excluded: {name: why} of members left out whatever their value (a diverged member).
    Returns dict(members (m), n (values used), returns (used), left_out [[name, why]], mean, mean_ci,
    iqm, iqm_ci, few, solved, solved_count): mean/iqm None when n is 0; the CIs (bootstrap_ci) None
    for n < MIN_CI_MEMBERS; few: n < FEW_CI_MEMBERS (the interval covers well under 95%); with a
    threshold, solved_count = members whose value reaches it and solved = that over all m members (a
    member left out counts as not reaching it), else None.
    """
    excluded = excluded or {}
    why = [excluded.get(name) or left_out_reason(v) for name, v in zip(names, values)]
    used = [(name, float(v)) for name, v, w in zip(names, values, why) if w is None]
    x = np.array([v for _, v in used], dtype=np.float64)
    out = {"members": len(names), "n": int(x.size), "returns": x.tolist(),
           "left_out": [[name, w] for name, w in zip(names, why) if w is not None],
           "mean": None, "mean_ci": None, "iqm": None, "iqm_ci": None, "few": bool(x.size < FEW_CI_MEMBERS),
           "solved": None, "solved_count": None}
    if x.size:
        out.update(mean=float(x.mean()), mean_ci=bootstrap_ci(x, np.mean), iqm=iqm(x), iqm_ci=bootstrap_ci(x, iqm))
    if threshold is not None and names:
        out["solved_count"] = int((x >= threshold).sum())
        out["solved"] = out["solved_count"] / len(names)
    return out


#: the sources of a deterministic evaluation return (member_final_return); the rest is the last training return
EVAL_SOURCES = ("eval", EVALUATED_NOW, REEVALUATED)


def summarize_settings(run_dir, threshold: Optional[float] = None, episodes: Optional[int] = 0, device: str = "cpu",
                       quiet: bool = True) -> list:
    """One dict per setting: settings, seeds, dirs, kind, sources, eval_missing, and member_statistics's
    fields over the members' final returns of one kind: "eval" (the deterministic evaluation return)
    when any member of the setting has one, the members without one then left out ("no eval.json");
    else "training" (every member's last training return). ``episodes``/``device``: how a member
    without eval.json is evaluated (member_final_return); eval_missing: the members still without one;
    not_evaluated: {member: (why, command or None)} of those the evaluation failed for (_not_evaluated);
    stale_eval: {member: "eval.json of step X, not the member's last step N"} of those whose eval.json is
    there but of another step (their left_out reason, where the others' is "no eval.json"); measured:
    {member: (global_step, episodes)} of the evaluation returns the row holds (None where not recorded)."""
    from .report import ReportError

    try:
        settings = settings_of(run_dir)
    except PopulationError as e:
        raise ReportError(with_advice(e)) from None
    unevaluated: list = []
    stale: dict = {}
    measured: dict = {}
    names = {d: setting.member_name(d) for setting in settings for _, d in setting.members}
    # a diverged member has no result (its frozen weights are not evaluated): left out, named
    finals = [[(seed, d, None, "diverged") if names[d] in setting.diverged else
               (seed, d, *member_final_return(d, episodes, device, quiet, unevaluated, stale, measured, names[d]))
               for seed, d in setting.members]
              for setting in settings]
    if unevaluated and not quiet:  # one line, not one per member
        why = unevaluated[0][1].removeprefix("could not evaluate: ")  # it names the member's directory
        print(f"proxima: note: {_count(len(unevaluated), 'member')} without an eval.json of its last step could not be "
              f"evaluated, so they are left out of settings whose other members have an evaluation (first: {printable(why)})",
              file=sys.stderr)
    kept = sorted({measured[names[d]][1] for f in finals for _, d, _, src in f if src == "eval" and names[d] in measured}
                  - {episodes}, key=lambda c: (c is None, c or 0))
    if episodes is not None and episodes >= 1 and kept and not quiet:  # the typed N, silently not applied, misleads
        print(f"proxima: note: --episodes {episodes} applies only to members without an eval.json of their last step; "
              f"the others' eval.json results are used as recorded (over {'/'.join('?' if c is None else f'{c:,}' for c in kept)} "
              f"episodes: see the line above the table); {every_member_over(run_dir, episodes, device)}", file=sys.stderr)
    why_not = {names[d]: _not_evaluated(d, error, episodes, device, run_dir) for d, error in unevaluated}
    out = []
    for setting, members in zip(settings, finals):
        evaluated = [source in EVAL_SOURCES for *_, source in members]
        counted = [source != "diverged" for *_, source in members]
        kind = "eval" if any(evaluated) else "training"
        values = [v if ok or kind == "training" else None for (_, _, v, _), ok in zip(members, evaluated)]
        row = {"settings": setting.settings, "seeds": [s for s, *_ in members], "dirs": [names[d] for _, d, *_ in members],
               "kind": kind, "eval_missing": [names[d] for (_, d, *_), ok, c in zip(members, evaluated, counted)
                                              if not ok and c and kind == "eval"],
               "sources": sorted({src for (*_, v, src), ok, c in zip(members, evaluated, counted) if c and (ok or kind == "training")}),
               "diverged": dict(setting.diverged)}
        row["not_evaluated"] = {name: why_not[name] for name in row["eval_missing"] if name in why_not}
        row["stale_eval"] = {name: stale[name] for name in row["eval_missing"] if name in stale}
        # evaluated again in its place: the note names the file, which would otherwise be set aside unsaid
        row["broken_eval"] = {names[d]: stale[names[d]] for _, d in setting.members
                              if names[d] not in row["eval_missing"] and stale.get(names[d], "").startswith(BROKEN_EVAL)}
        row["measured"] = {names[d]: measured[names[d]] for (_, d, *_), ok in zip(members, evaluated)
                           if ok and names[d] in measured}
        row.update(member_statistics(row["dirs"], values, threshold, excluded=setting.diverged))
        row["left_out"] = [[name, row["stale_eval"].get(name, "no eval.json") if name in row["eval_missing"] else why]
                           for name, why in row["left_out"]]
        out.append(row)
    return out


def every_member_over(src, episodes: int, device: str = "cpu") -> str:
    """```proxima eval POP --episodes 50` evaluates every member over 50 episodes ...``: the command that gives
    each member of ``src`` (a population or a Pool: one per population) ``episodes`` episodes, where the report
    keeps an eval.json's own count; it writes no eval.json, so the report keeps using those."""
    import shlex

    flags = f" --episodes {episodes}" + (f" --device {shlex.quote(str(device))}" if str(device) != "cpu" else "")
    commands = " and ".join(f"`proxima eval {shlex.quote(str(d))}{flags}`" for d in parts_of(src))
    return (f"{commands} evaluate{'s' if len(parts_of(src)) == 1 else ''} every member over {episodes:,} episodes and "
            "prints each setting's mean and IQM as this table does (--json for the numbers; it writes no eval.json, so this "
            "report keeps the recorded ones)")


def _not_evaluated(member_dir: Path, error: str, episodes: Optional[int], device: str, src=None) -> tuple:
    """(why, command) for a member the report could not evaluate (report.evaluate_latest's ``error``):
    why in a few words, its own paths relative to the member; command: the ``proxima report`` of ``src`` (its
    population, or a Pool; default the member's folder's) that evaluates it and fills the table, else None. The
    report imports no ``module:Class`` env its run's files record (data, never code) unless told: such a member's
    command gives report's own --env MODULE:CLASS (`proxima eval MEMBER` would print a return and write no
    eval.json, which leaves the table as it was)."""
    import shlex

    from .checkpoint import CheckpointError, load_checkpoint
    from .envs.gym_adapter import imports_code

    why = error.removeprefix("could not evaluate: ").replace(f"{member_dir}{os.sep}", "")
    try:
        env_id = str(load_checkpoint(member_dir)["config"].get("env_id", ""))
    except (CheckpointError, AttributeError):  # the checkpoint is the reason, said by why
        return why, None
    if not imports_code(env_id):
        return why, None
    src = member_dir.parent if src is None else src
    # without --episodes, the report runs the member's own count, as it would have
    command = (f"proxima report {shlex.quote(_spelled(src))} --env {shlex.quote(env_id)}"
               + (f" --episodes {episodes}" if episodes is not None else "")
               + (f" --device {shlex.quote(str(device))}" if str(device) != "cpu" else "")
               + (" --out FILE.md" if isinstance(src, Pool) else ""))
    return f"its env {env_id} is a module:Class, which the report does not import from a run's files", command


def _not_evaluated_note(row: dict) -> str:
    """``m001-seed2: checkpoints/step_...pt: truncated ...; m002-seed3, m003-seed4: its env ... (`proxima
    report RUN --env m:C --episodes 10` evaluates them, if you trust that module)``: the members of
    ``row["eval_missing"]`` grouped by why the report could not evaluate them."""
    groups: dict = {}
    for name in row["eval_missing"]:
        why, command = row["not_evaluated"].get(name, ("no checkpoint", None))
        groups.setdefault((why, command is not None), []).append((name, command))
    parts = []
    for (why, _), members in groups.items():
        names = [name for name, _ in members]
        text = f"{', '.join(names)}: {why}"
        command = members[0][1]
        if command is not None:  # one report evaluates every member its --env builds
            text += f" (`{command}` evaluates {'them' if len(names) > 1 else 'it'}, if you trust that module)"
        parts.append(text)
    return "; ".join(parts)


def _reached(run_dir: Path, doc: dict) -> tuple:
    """(step, seconds): the step all members' metrics.csv reached (the slowest's; members train in
    lockstep), None when no member lists; the wall seconds they logged, [] when none has."""
    from .plot import PlotError, read_metrics

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
    return (min(done) if done else None), seconds  # members train in lockstep; the slowest says how far all are


def training_progress(run_dir: Path, doc: dict) -> str:
    """``446,464 steps each, 40.6 s of training`` for a finished population. One in progress or
    stopped has not trained population.json's target (nor written its wall time): the steps and
    seconds are the members' metrics.csv's, ``1,024 of 29,952 steps each so far (in progress: locked
    by pid P ...), 3.2 s of training``, of a stopped one that logged past its newest checkpoint (a kill) ``3,584 of
    20,480 steps each logged so far; last checkpoint at 3,072 (stopped; ... continues it from there), ...`` as a
    single run's steps cell says it; a number there is none of is "—"."""
    total = doc.get("total_timesteps_per_member")
    total = total if isinstance(total, int) and not isinstance(total, bool) else None
    step, seconds = _reached(run_dir, doc)
    wall = doc.get("wall_seconds")
    status = progress_status(run_dir, step, total)
    num = lambda v: "\u2014" if v is None else f"{v:,}"  # noqa: E731
    if status is None:
        wall = wall if isinstance(wall, (int, float)) and not isinstance(wall, bool) else (max(seconds) if seconds else None)
        return f"{step:,} steps each, " + ("\u2014" if wall is None else f"{wall:.1f}") + " s of training"
    wall = max(seconds) if seconds else None
    wall = "\u2014" if wall is None else f"{wall:.1f}"
    from .report import _checkpoint_step, past_checkpoint_text

    ckpt = _checkpoint_step(run_dir)  # checkpoints/step_N.pt: N steps per member, as the members' rows count
    if status.startswith("stopped") and step is not None and ckpt is not None and ckpt < step:  # a kill
        return f"{past_checkpoint_text(f'{num(step)} of {num(total)} steps each', ckpt, status)}, {wall} s of training"
    return f"{num(step)} of {num(total)} steps each so far ({status}), {wall} s of training"


def progress_status(run_dir: Path, step: Optional[int], total: Optional[int]) -> Optional[str]:
    """None for a run (or population) in ``run_dir`` that has trained ``total`` steps and that no
    process holds; else why not, as the reports say it: ``in progress: locked by pid P ...``,
    ``stopped; `proxima resume RUN` continues it`` (it has a checkpoint), or ``stopped before its
    first checkpoint``. Shared by a population's first line and a single run's steps (report.run_progress)."""
    from .checkpoint import list_checkpoints
    from .report import _in_progress

    live = _in_progress(run_dir)
    if live:
        return f"in progress: {live}"
    if step is not None and total is not None and step >= total:
        return None
    copied = _copied_lock(run_dir)
    if list_checkpoints(run_dir):
        from .signals import resume_command

        if copied:  # `proxima resume` would refuse the copy's lock: the way on says what to delete first
            return f"stopped; no process trains it: {copied}; then `{resume_command(run_dir)}` continues it"
        return f"stopped; `{resume_command(run_dir)}` continues it"
    return "stopped before its first checkpoint" + (f"; no process trains it: {copied}" if copied else "")


def _copied_lock(run_dir: Path) -> Optional[str]:
    """rundir.copied_lock_note for a run whose live lock came with a copy of it (its holder trains the
    original), else None."""
    from .rundir import copied_lock_note, holder_alive, lock_copied_from, read_lock

    info = read_lock(run_dir)
    copied = lock_copied_from(run_dir, info) if info and holder_alive(info) else None
    return None if copied is None else copied_lock_note(run_dir, info, copied)


def member_population(member_dir) -> Optional[tuple]:
    """(population directory, its population.json) when ``member_dir`` is a member that population
    lists, else None: a member is trained, locked and resumed with its population."""
    given, member_dir = Path(member_dir), Path(member_dir).resolve()
    pop = Path(os.path.normpath(given / ".."))  # as the user spells it: the resume command names it
    if pop.resolve() != member_dir.parent:  # the member reached through a link
        pop = member_dir.parent
    try:
        doc = json.loads(read_run_text(pop / POPULATION_FILE))
        listed = any(isinstance(e, dict) and e.get("dir") == member_dir.name for e in doc["member_dirs"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (pop, doc) if listed and isinstance(doc, dict) else None


def _count(n, noun: str) -> str:
    """``1 seed``, ``12 settings``; ``— seeds`` for a count the file does not hold."""
    if not isinstance(n, int) or isinstance(n, bool):
        return f"\u2014 {noun}s"
    return f"{n} {noun}{'' if n == 1 else 's'}"


def ci_cell(ci, few: bool, digits: int = 1) -> str:
    """``[428.0, 483.2]``, ``[428.0, 483.2] †`` for n < FEW_CI_MEMBERS, "—" for none (n < 2)."""
    if ci is None:
        return "\u2014"
    return f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]" + (" \u2020" if few else "")


def different_steps_note(steps: list, each: str, again: str = "evaluate it again", stopped: bool = False) -> Optional[str]:
    """``the members were evaluated at different steps (1,024-1,536; EACH), so the settings compare
    unequal amounts of training (...)``, as eval and the report say it, or None when the known steps
    (ints of ``steps``) are one. ``again``: what to do once the population has stopped; with ``stopped``,
    what to do about the populations that stopped short, said as it is (it names them)."""
    steps = [v for v in steps if isinstance(v, int) and not isinstance(v, bool)]
    if not steps or min(steps) == max(steps):
        return None
    why = (again if stopped else
           f"a population still training writes new checkpoints as they are read: {again} once it has stopped")
    return (f"the members were evaluated at different steps ({min(steps):,}-{max(steps):,}; {each}), so the settings "
            f"compare unequal amounts of training ({why})")


def _measured_text(rows: list, reached: Optional[int], past: Optional[str] = None) -> str:
    """`` Evaluated at step 3,200 (the members' newest checkpoints; their metrics.csv reached 4,064),
    over 20 episodes per member.``: what the table's evaluation returns measured, of every row
    holding them (row["measured"]); "" when none does. Members of a population read while it
    trains, or whose eval.json and the report's evaluation ran different counts, differ: said as
    a range, and named in the notes under the table. ``past``: a pool's populations that trained past
    their members' newest evaluation (_trained_past), said in reached's place."""
    pairs = [m for r in rows for m in (r.get("measured") or {}).values()]
    if not pairs:
        return ""
    steps = sorted({st for st, _ in pairs if st is not None})
    counts = sorted({c for _, c in pairs if c is not None})
    if not steps:
        at = "a step not recorded (an older eval.json)"
    elif len(steps) == 1:
        at = f"step {steps[0]:,}"
    else:
        at = f"steps {steps[0]:,} to {steps[-1]:,} (members differ: see the note below)"
    unknown = sum(st is None for st, _ in pairs)
    if unknown and steps:
        at += f" ({unknown} older eval.json without a step)"
    if steps and reached is not None and steps[-1] < reached:  # a population stopped or read between checkpoints
        at += f" (the members' newest checkpoints; their metrics.csv reached {reached:,})"
    elif steps and past:
        at += f" (the members' newest checkpoints; {past})"
    if not counts:
        over = ""
    elif len(counts) == 1:
        over = f", over {counts[0]:,} episode{'s' if counts[0] != 1 else ''} per member"
    else:
        over = f", over {counts[0]:,} to {counts[-1]:,} episodes (members differ: see the note below)"
    return f" Evaluated at {at}{over}."


def _by_value(named: dict, fmt: Callable) -> str:
    """``m000-seed1, m001-seed2 at 8,320; m002-seed3 at 10,240``: members grouped by a value, in value order."""
    groups: dict = {}
    for name, value in named.items():
        groups.setdefault(value, []).append(name)
    return "; ".join(f"{', '.join(names)} {fmt(value)}" for value, names in sorted(groups.items()))


def _fmt(v) -> str:
    """``467.4``; "—" for none or a non-finite value."""
    return "\u2014" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.1f}"


def _sources_text(run_dir: Path, doc: dict, rows: list) -> str:
    """``Final return per member: eval. Evaluated at step 3,200, over 20 episodes per member.``: the kind
    of final return of the population's rows, and when and over what it was measured."""
    kinds = {" / ".join(r["sources"]) for r in rows}  # "": a setting whose every member diverged, no source counted
    everyone = every_member_diverged(run_dir, settings_of(run_dir)) if kinds == {""} else None
    if everyone:
        sources = f"Final return per member: none, as {everyone}."
    elif len(kinds) <= 1:
        sources = "Final return per member: " + (kinds.pop() or "\u2014" if kinds else "\u2014") + "."
    else:
        sources = "Final return per member, per setting: " + "; ".join(
            f"{setting_label(r['settings']) or '(seeds only)'}: {' / '.join(r['sources']) or 'none (every member diverged)'}"
            for r in rows) + "."
    if everyone:
        return sources
    if any("last training return" in r["sources"] for r in rows):
        sources += f" {TRAINING_RETURN_TEXT}"
    if isinstance(run_dir, Pool):  # each population trained apart: the one that went on past its evaluation named
        return sources + _measured_text(rows, None, _trained_past(run_dir, rows))
    return sources + _measured_text(rows, _reached(run_dir, doc)[0])


def _trained_past(pool: Pool, rows: list) -> Optional[str]:
    """``A's members' metrics.csv reached 6,144`` (``A's ..., A3's 8,192``): the populations of a pool whose members'
    metrics.csv (_reached) went past the newest step their members were evaluated at (rows' "measured"),
    as one population's report says it; None when none did."""
    from .report import _md

    at = {name: st for r in rows for name, (st, _) in (r.get("measured") or {}).items() if st is not None}
    past = []
    for d, name, doc in zip(pool.dirs, pool.names, pool.docs):
        own = [st.member_name(m) for st in pool.settings for _, m in st.members if m.parent == d]
        steps = [at[n] for n in own if n in at]
        reached = _reached(d, doc)[0]
        if steps and reached is not None and max(steps) < reached:
            past.append((_md(name), reached))
    if not past:
        return None
    (first, step), *more = past
    return f"{first}'s members' metrics.csv reached {step:,}" + "".join(f", {name}'s {st:,}" for name, st in more)


def _first_line(run_dir: Path, doc: dict, rows: list) -> str:
    """``CartPole-v1: 16 members (8 seeds x 2 settings), 548,864 steps each, 68.9 s of training in one process.``"""
    from .report import _clip, _md

    if isinstance(run_dir, Pool):  # each population trained in its own process: each one's progress
        seeds = len({seed for st in run_dir.settings for seed, _ in st.members})
        members = sum(len(st.members) for st in run_dir.settings)
        parts = "; ".join(f"{_md(name)}: {training_progress(d, part)}"
                          for d, name, part in zip(run_dir.dirs, run_dir.names, run_dir.docs))
        return (f"{_md(_clip(doc.get('env_id')))}: {_count(members, 'member')} ({_count(seeds, 'seed')} x "
                f"{_count(len(rows), 'setting')}), pooled from {len(run_dir.dirs)} populations ({parts}).")
    seeds = len(doc["seeds"]) if isinstance(doc.get("seeds"), list) else None
    return (f"{_md(_clip(doc.get('env_id')))}: {_count(doc.get('members'), 'member')} "
            f"({_count(seeds, 'seed')} x {_count(len(rows), 'setting')}), "
            f"{training_progress(run_dir, doc)} in one process.")


def _row_cells(r: dict) -> str:
    """``8 | 467.4 | [407.4, 499.7] | 499.4 | [435.4, 500.0] | 88% (7 of 8)``: a row's statistics in the table."""
    used = f"{r['n']} of {r['members']}" if r["n"] < r["members"] else f"{r['members']}"
    if r.get("diverged"):  # its statistics are of the survivors: flagged where the row is read, not only in a note
        used += f" ({len(r['diverged'])} diverged)"
    solved = f"{r['solved']:.0%} ({r['solved_count']} of {r['members']})" if r["solved"] is not None else "\u2014"
    return (f"{used} | {_fmt(r.get('mean'))} | {ci_cell(r['mean_ci'], r['few'])} | {_fmt(r.get('iqm'))} | "
            f"{ci_cell(r['iqm_ci'], r['few'])} | {solved}")


def _end_eval_errors(run_dir: Path) -> dict:
    """{member dir: why its end-of-run evaluation failed} as population.json records it (``eval_error``)."""
    try:
        doc = read_run_json(Path(run_dir) / POPULATION_FILE)
    except (RunFileError, OSError, ValueError):
        return {}
    entries = doc.get("member_dirs") if isinstance(doc, dict) else None
    return {e["dir"]: e["eval_error"] for e in entries or [] if isinstance(e, dict) and isinstance(e.get("dir"), str)
            and isinstance(e.get("eval_error"), str)}


def _end_errors(src) -> dict:
    """_end_eval_errors of a population directory, or of each of a Pool's, by the members' pooled names."""
    if not isinstance(src, Pool):
        return _end_eval_errors(src)
    return {f"{name}/{member}": why for d, name in zip(src.dirs, src.names) for member, why in _end_eval_errors(d).items()}


def _spelled(src) -> str:
    """A population directory, or a Pool (``A+A2``), as a command names it."""
    return src.spelled if isinstance(src, Pool) else str(src)


def _docs_of(src, doc: Optional[dict] = None) -> list:
    """The population.json of each population behind ``src`` (a directory's: ``doc``, read if not given)."""
    if isinstance(src, Pool):
        return list(src.docs)
    return [doc if doc is not None else json.loads(read_run_text(Path(src) / POPULATION_FILE))]


def _row_notes(run_dir: Path, r: dict, name: str, threshold: Optional[float], episodes: Optional[int]) -> list:
    """The notes under the table of the row ``r`` named ``name``: members left out and why, and
    evaluations of different episode counts."""
    from .report import _md

    notes = []
    if r["eval_missing"]:
        k, m = len(r["eval_missing"]), r["members"]
        how = (f"run `proxima report {_spelled(run_dir)} --episodes N` to evaluate them" if episodes is not None and episodes < 1 else
               f"the report could not evaluate {'them' if k != 1 else 'it'}: {_not_evaluated_note(r)}")
        failed = {d: why for d, why in _end_errors(run_dir).items() if d in r["eval_missing"]}
        if failed and episodes is not None and episodes < 1:
            # another evaluation of the same seeds meets the same failure: no advice to run one
            rest = len(failed) < k
            how = ("the end-of-run evaluation failed (population.json) for "
                   + "; ".join(f"{d}: {_md(why)}" for d, why in failed.items()) + (f"; for the others, {how}" if rest else ""))
        old = r.get("stale_eval") or {}
        absent = [d for d in r["eval_missing"] if d not in old]
        which = ([f"{len(absent)} member{'s' if len(absent) != 1 else ''} without eval.json ({', '.join(absent)})"]
                 if absent else [])
        seeded = [d for d, why in old.items() if why == OLD_SEEDS]
        unread = {d: why.removeprefix(BROKEN_EVAL + ": ") for d, why in old.items() if why.startswith(BROKEN_EVAL)}
        old = {d: why for d, why in old.items() if why != OLD_SEEDS and d not in unread}
        if unread:  # cut short or edited: the file named, as one that is not of its last step is
            which.append(f"{len(unread)} member{'s' if len(unread) != 1 else ''} whose eval.json could not be read ("
                         + "; ".join(f"{d}: {_md(why)}" for d, why in unread.items()) + ")")
        if old:  # its eval.json is there, of an older (or given-up) step: said so, not "without eval.json"
            which.append(f"{len(old)} member{'s' if len(old) != 1 else ''} whose eval.json is not of its last step ("
                         + "; ".join(f"{d}: {why}" for d, why in old.items()) + ")")
        if seeded:  # OLD_SEEDS: not averaged with the others' evaluations of apart start states
            which.append(f"{len(seeded)} member{'s' if len(seeded) != 1 else ''} whose eval.json an older Proxima "
                         f"seeded (episode k from seed + k: {', '.join(seeded)})")
        notes.append(f"- {name}: eval for {m - k} of {m}; {' and '.join(which)}, left out rather than mixed with "
                     f"training returns: {how}.")
    broken = r.get("broken_eval") or {}
    if broken:  # set aside and evaluated again (or its training return used): said, with the file, not hidden
        notes.append(f"- {name}: " + "; ".join(f"{d}: {_md(why.removeprefix(BROKEN_EVAL + ': '))}" for d, why in broken.items())
                     + f" - {'that eval.json was' if len(broken) == 1 else 'those eval.json were'} set aside, the member"
                     f"{'s' if len(broken) != 1 else ''} evaluated from {'its' if len(broken) == 1 else 'their'} latest "
                     "checkpoint instead (as without one); delete or restore the file to end this note.")
    other = [f"{d} ({why})" for d, why in r["left_out"] if d not in r["eval_missing"]]
    if other:
        notes.append(f"- {name}: left out: {', '.join(other)}.")
    if r["left_out"] and threshold is not None:
        notes.append(f"- {name}: the {_count(len(r['left_out']), 'member')} left out count{'s' if len(r['left_out']) == 1 else ''} as not reaching {threshold}.")
    counts = {name: c for name, (_, c) in (r.get("measured") or {}).items() if c is not None}
    if len(set(counts.values())) > 1:  # an explicit --episodes other than eval.json's: said, not averaged unsaid
        notes.append(f"- {name}: its members' evaluations ran different numbers of episodes ("
                     f"{_by_value(counts, lambda c: f'over {c:,}')}); each member's mean counts as one value: "
                     f"{' and '.join(f'`proxima eval {d}`' for d in parts_of(run_dir))} evaluates every member alike, "
                     "over its own --eval-episodes.")
    return notes


def _steps_note(rows: list, src=None, withheld: bool = False) -> Optional[str]:
    """eval's note on members evaluated at different steps (unequal training hides in one IQM otherwise), what to
    do about it naming each population of ``src`` (a directory or a Pool) that stopped short (_stopped_short):
    its resume command, where "a population still training" would tell the user to wait for one that never ends;
    ``withheld``: the comparison below made no permutation test for it (settings_comparison of a Pool), said here."""
    at = {name: st for r in rows for name, (st, _) in (r.get("measured") or {}).items() if st is not None}
    stopped = _stopped_short(src) if src is not None else []
    again = "report it again"
    if stopped:
        again = ("; ".join(stopped) + ": resume it to its end, then report again" if len(stopped) == 1 else
                 "; ".join(stopped) + ": resume them to their end, then report again")
    steps_note = different_steps_note(list(at.values()), _by_value(at, lambda st: f"at {st:,}"), again,
                                      stopped=bool(stopped))
    if steps_note is None:
        return None
    return f"- note: {steps_note}." + (" No setting is called better than another across unequal training: the "
                                       "comparison below makes no permutation test." if withheld else "")


def _stopped_short(src) -> list:
    """``pop4 stopped at 2,048 of 4,096 steps (`proxima resume pop4` continues it)`` per population behind
    ``src`` that stopped before its total_timesteps (progress_status), nothing for one finished or in progress."""
    from .report import _md

    out = []
    for d in parts_of(src):
        try:
            doc = json.loads(read_run_text(Path(d) / POPULATION_FILE))
        except (OSError, ValueError):
            continue
        total = doc.get("total_timesteps_per_member") if isinstance(doc, dict) else None
        total = total if isinstance(total, int) and not isinstance(total, bool) else None
        step = _reached(Path(d), doc)[0]
        status = progress_status(Path(d), step, total)
        if status and status.startswith("stopped"):
            reached = "—" if step is None else f"{step:,}"
            out.append(f"{_md(str(d))} {status.replace('stopped', f'stopped at {reached} of {total or 0:,} steps', 1)}")
    return out


def render(run_dir: Path, rows: list, threshold: Optional[float], episodes: Optional[int] = 0,
           comparison: Optional[dict] = None, again: Sequence[tuple] = ()) -> str:
    doc = _docs_of(run_dir)[0]  # read_settings checked it
    from .plot import dir_name
    from .report import _md

    title = run_dir.name if isinstance(run_dir, Pool) else dir_name(run_dir)
    lines = [f"# Population report: {_md(title)}", "", _first_line(run_dir, doc, rows), "",
             f"{_sources_text(run_dir, doc, rows)} 95% CIs: {CI_METHOD}; none (\u2014) for fewer than {MIN_CI_MEMBERS} "
             f"members. {IQM_TEXT}.", "",
             f"| setting | members | mean | mean 95% CI | IQM | IQM 95% CI | >= {threshold if threshold is not None else 'threshold'} |",
             "|---|---|---|---|---|---|---|"]
    notes = []
    for r in rows:
        name = setting_label(r["settings"]) or "(seeds only)"
        lines.append(f"| {name} | {_row_cells(r)} |")
        notes += _row_notes(run_dir, r, name, threshold, episodes)
    if any(r["few"] and r["mean_ci"] is not None for r in rows):
        notes.append(f"- \u2020 {FEW_MEMBERS_NOTE}.")
    if any(one_member(r) for r in rows):
        notes.append(f"- {ONE_MEMBER_NOTE}.")
    steps_note = _steps_note(rows, run_dir, withheld=isinstance(run_dir, Pool) and len(rows) > 1)
    if steps_note:
        notes.append(steps_note)
    if notes:
        lines += [""] + notes
    lines += pooled_section([run_dir], [title])
    if len(rows) > 1:
        lines += [""] + comparison_section(rows, comparison)
    lines += more_seeds_section(lines, [run_dir], again)
    lines += ["", "Per member: `proxima report RUN/<member dir>` (same files as a single run).", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ comparing settings
#: what a probability of improvement is, as the reports say it
POI_TEXT = ("the chance that a run of X scores higher than a run of Y (rliable's probability of improvement, "
            "Agarwal et al. 2021: the mean over all member pairs (x of X, y of Y) of 1 if x > y, 1/2 if x = y, else 0; "
            "0.5: neither is better)")
POI_CI_METHOD = (f"percentile bootstrap, the members of X and of Y resampled independently, {BOOTSTRAP_RESAMPLES} "
                 f"resamples, numpy default_rng({BOOTSTRAP_SEED})")


def probability_of_improvement(x, y) -> float:
    """P(X > Y) of the members' values x (n,) over y (m,): the mean over the n*m pairs of 1[x > y] + 0.5*1[x == y]."""
    x = np.asarray(x, dtype=np.float64).reshape(-1, 1)
    y = np.asarray(y, dtype=np.float64).reshape(1, -1)
    return float(((x > y) + 0.5 * (x == y)).mean())


def poi_ci(x, y, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED, level: float = CI_LEVEL):
    """(low, high) percentile-bootstrap interval of probability_of_improvement(x, y); None when either
    has fewer than MIN_CI_MEMBERS members. Each resample draws x's members, then y's, with replacement
    from one numpy default_rng(seed): rng.integers(0, n, (resamples, n)), then rng.integers(0, m,
    (resamples, m)). The two are independent runs, not pairs: resampling within each is rliable's
    bootstrap of P(X > Y) over one task."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n, m = x.size, y.size
    if min(n, m) < MIN_CI_MEMBERS:
        return None
    rng = np.random.default_rng(seed)
    ix, iy = rng.integers(0, n, size=(resamples, n)), rng.integers(0, m, size=(resamples, m))
    stats = np.empty(resamples)
    block = max(1, 2_000_000 // (n * m))  # the (block, n, m) comparisons stay ~16 MB
    for a in range(0, resamples, block):
        xs, ys = x[ix[a:a + block]][:, :, None], y[iy[a:a + block]][:, None, :]
        stats[a:a + block] = ((xs > ys) + 0.5 * (xs == ys)).mean(axis=(1, 2))
    alpha = (1 - level) / 2
    return float(np.quantile(stats, alpha)), float(np.quantile(stats, 1 - alpha))


def _has_iqm(r: dict) -> bool:
    return r.get("iqm") is not None and math.isfinite(r["iqm"])


def lost_members(r: dict) -> bool:
    """Whether a row is shown as ``k of n``: a member left out for any reason (diverged, no eval.json,
    NaN/inf, ...). Its statistics are of the members left in, who need not be a fair sample of the seeds."""
    return bool(r.get("left_out")) or bool(r.get("diverged"))


def lost_text(r: dict) -> str:
    """``4 diverged, 1 no eval.json``: how many of a row's members were left out, by reason."""
    groups: dict = {}
    for _, why in r.get("left_out") or []:
        key = ("diverged" if why.startswith("diverged") else "eval.json not of its last step"
               if why.startswith("eval.json of step") else why)
        groups[key] = groups.get(key, 0) + 1
    return ", ".join(f"{k} {why}" for why, k in groups.items())


def best_row(rows: list) -> Optional[int]:
    """The index of the row with the highest IQM (the first of equal ones) among the rows that lost no
    member (lost_members); among all rows when every row with an IQM lost members (ranked_text says
    so); None when no row has one. A member left out (diverged, no eval.json, NaN, ...) is left out of
    its row's IQM, so a setting that loses its weakest seeds would otherwise rank above a whole one."""
    have = [i for i, r in enumerate(rows) if _has_iqm(r)]
    whole = [i for i in have if not lost_members(rows[i])]
    pool = whole or have
    return max(pool, key=lambda i: (rows[i]["iqm"], -i)) if pool else None


def ranked_text(rows: list, whose: str = "") -> str:
    """How Y (best_row) was chosen, for "(...)" after its name: ``the highest IQM`` (``whose``: ``first
    population's `` before "highest"), or with settings that lost members, which were passed over."""
    have = [r for r in rows if _has_iqm(r)]
    if not any(lost_members(r) for r in have):
        return f"the {whose}highest IQM"
    if all(lost_members(r) for r in have):
        return f"the {whose}highest IQM over its members left in; every setting lost members (see the notes)"
    return f"the {whose}highest IQM of the settings with no member left out"


def not_ranked_notes(rows: list, names: list, b: Optional[int]) -> list:
    """``- lr=0.0025 had the highest IQM, 431.3, over 6 of its 10 members (left out: 4 diverged): not
    ranked ...``: a note per row passed over by best_row for its members left out (names: each row's
    label as the table shows it)."""
    if b is None or lost_members(rows[b]):  # every setting lost members: ranked_text says so
        return []
    notes = []
    top = max((i for i, r in enumerate(rows) if _has_iqm(r)), key=lambda i: (rows[i]["iqm"], -i))
    for i, r in enumerate(rows):
        if not lost_members(r) or not _has_iqm(r):
            continue
        had = f"had the highest IQM, {r['iqm']:.1f}," if i == top else f"has an IQM of {r['iqm']:.1f}"
        notes.append(f"- {names[i]} {had} over {r['n']} of its {r['members']} members (left out: {lost_text(r)}): not "
                     "ranked (the statistics of the members left in flatter a setting that loses its weakest seeds, "
                     "whatever the reason; its P(X > Y) is of those members too).")
    return notes


#: the family-wise error rate of the Comparison's "distinguishable" claims, over every pair of settings
CLAIM_ALPHA = 0.05
#: no "distinguishable" claim with fewer members than this on either side (the bootstrap's intervals are
#: flagged there; a rank test of 2 vs 2 cannot reach any corrected level)
MIN_CLAIM_MEMBERS = FEW_CI_MEMBERS
#: permutations of the one-sided rank test behind "distinguishable", at least (p reaches 0.05/56, 8 settings, with ~9
#: to spare); a larger family gets more (permutations_for)
PERMUTATIONS = 10_000
#: the smallest p of P permutations is 1/(P + 1): 10,000 fall short of 0.05/(K(K-1)) from K = 23 settings on, where no
#: setting could ever be told apart, so the count grows with the family until p can fall this many times below its level
CLAIM_MARGIN = 20
#: the most permutations one test runs (~1 s at 10 vs 10 members): the margin holds to K = 70 settings, p reaches the
#: level at all to K = 316
MAX_PERMUTATIONS = 2_000_000
#: up to this many members in all (X's and Y's), p is exact: the rank sum's whole null distribution over every
#: relabelling, counted (_rank_sum_counts) rather than drawn, so a p near its level is not a matter of the seed. Its
#: counts, at most C(60, 30) ~ 1.2e17, fit int64; the count is ~10 ms there, microseconds at 10 vs 10
EXACT_MAX_MEMBERS = 60
CLAIM_METHOD = (f"both one-sided permutation tests of P(X > Y) on the members' ranks, Y higher and X higher (exact over "
                f"every relabelling up to {EXACT_MAX_MEMBERS} members in all; beyond that {PERMUTATIONS:,} random "
                f"permutations, more where {CLAIM_ALPHA:g} / (K(K-1)) needs them, numpy default_rng({BOOTSTRAP_SEED})), at "
                f"{CLAIM_ALPHA:g} over both directions of every pair of the K settings with a final return (Bonferroni: "
                f"each test at {CLAIM_ALPHA:g} / (K(K-1))), since Y was picked as the highest IQM on these same returns: "
                "the p of a setting told apart is that of the direction said, of one not told apart the smaller of its "
                f"two; no claim with fewer than {MIN_CLAIM_MEMBERS} members on either side")


def _midranks(pooled: np.ndarray) -> np.ndarray:
    """The ranks of ``pooled`` (n,), each run of equal values given its mean rank (a tie counts half, as in P(X > Y))."""
    order = np.argsort(pooled, kind="stable")
    s = pooled[order]
    ranks = np.empty(s.size)
    first = np.concatenate([[True], s[1:] != s[:-1]])
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], s.size)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


@functools.lru_cache(maxsize=4)
def _null_rank_sums(ranks: tuple, n: int, permutations: int, seed: int) -> np.ndarray:
    """The sorted rank sums of the first n of ``ranks`` (sorted) over ``permutations`` relabellings. Cached: a sweep's
    comparisons of untied members share one multiset of ranks, and a large family's count costs ~1 s a draw."""
    rng = np.random.default_rng(seed)
    r = np.asarray(ranks, dtype=np.float64)
    block = max(1, 4_000_000 // r.size)  # (block, n + m) float64 stays ~32 MB at any count
    sums = np.concatenate([rng.permuted(np.broadcast_to(r, (min(block, permutations - a), r.size)), axis=1)[:, :n].sum(axis=1)
                           for a in range(0, permutations, block)])
    sums.sort()
    sums.flags.writeable = False  # shared by every caller
    return sums


@functools.lru_cache(maxsize=64)
def _rank_sum_counts(doubled: tuple, n: int) -> tuple:
    """counts[s]: how many n-subsets of ``doubled`` (twice the pooled mid-ranks: integers, as a tie's mid-rank is a
    multiple of 0.5) sum to s. Cached: a sweep's comparisons of untied members share one multiset of ranks."""
    top = sum(sorted(doubled)[len(doubled) - n:])
    dp = np.zeros((n + 1, top + 1), dtype=np.int64)  # dp[k, s]: k-subsets of the ranks seen so far summing to s
    dp[0, 0] = 1
    for r in doubled:  # r <= top: the largest n-subset holds the largest rank
        dp[1:, r:] = dp[1:, r:] + dp[:-1, :top + 1 - r]  # the right side is whole before it is assigned
    return tuple(int(c) for c in dp[n])


def exact_permutation_p(x, y) -> Optional[float]:
    """permutation_p over every relabelling rather than a draw of them: the share of the C(n + m, n) ways to
    pick x's n members from the pooled mid-ranks whose rank sum is at most the observed one (a tie at least as
    extreme). None beyond EXACT_MAX_MEMBERS members in all, where the counts would overflow."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    total = x.size + y.size
    if total > EXACT_MAX_MEMBERS or not x.size or not y.size:
        return None
    doubled = np.rint(2 * _midranks(np.concatenate([x, y]))).astype(np.int64)
    observed = int(doubled[:x.size].sum())
    key = tuple(sorted(doubled.tolist()))
    # the smaller side's subsets keep every count within C(60, 30): X's sum at most the observed one is Y's at least
    # the rest of the total
    if x.size <= y.size:
        counts = _rank_sum_counts(key, x.size)
        hits = sum(counts[:observed + 1])
    else:
        counts = _rank_sum_counts(key, y.size)
        hits = sum(counts[max(0, sum(key) - observed):])
    return hits / math.comb(total, x.size)  # Python ints: the ratio is rounded once, 1/252 is 1/252


def permutation_p(x, y, permutations: int = PERMUTATIONS, seed: int = BOOTSTRAP_SEED) -> float:
    """One-sided p-value that Y scores higher than X: the share of relabellings of the pooled members
    (x's n and y's m, mid-ranks: a tie counts half, as in P(X > Y)) whose P(X > Y) is at most the
    observed one. Exact (exact_permutation_p; ``permutations`` and ``seed`` unused) up to EXACT_MAX_MEMBERS
    members in all; beyond that (1 + count) / (1 + permutations) over random relabellings: valid at any count
    of permutations under the null of exchangeable members, ties included. The relabellings shuffle the sorted
    ranks (the null depends on their multiset only), in blocks from one numpy default_rng(seed)."""
    exact = exact_permutation_p(x, y)
    if exact is not None:
        return exact
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    ranks = _midranks(np.concatenate([x, y]))
    observed = ranks[:x.size].sum()
    draws = _null_rank_sums(tuple(np.sort(ranks).tolist()), x.size, int(permutations), seed)
    # the rank sums are multiples of 0.5: a tolerance keeps equal sums equal after float additions
    count = int(np.searchsorted(draws, observed + 1e-9, side="right"))
    return float((1 + count) / (1 + permutations))


def permutations_for(pairs: int) -> int:
    """The permutations a test of a family of ``pairs`` claims runs: enough that p can fall CLAIM_MARGIN
    times below CLAIM_ALPHA / pairs, at least PERMUTATIONS, at most MAX_PERMUTATIONS."""
    return int(min(MAX_PERMUTATIONS, max(PERMUTATIONS, math.ceil(CLAIM_MARGIN * pairs / CLAIM_ALPHA))))


def claim_p(x, y, pairs: int) -> float:
    """permutation_p of X against Y for a family of ``pairs`` claims: exact up to EXACT_MAX_MEMBERS members
    in all; beyond that at PERMUTATIONS, then again at permutations_for(pairs) where that count is larger and
    the first p is within Monte Carlo reach of CLAIM_ALPHA / pairs. A p far above the level needs no precision:
    a sweep of 64 settings x 10 members stays well under a second, its settings told apart or not."""
    p = permutation_p(x, y)
    more = permutations_for(pairs)
    if more > PERMUTATIONS and len(x) + len(y) > EXACT_MAX_MEMBERS:  # an exact p is already as precise as it gets
        count = round(p * (1 + PERMUTATIONS)) - 1
        expected = CLAIM_ALPHA / pairs * PERMUTATIONS  # the count of a p right at the level
        if count <= expected + 5 * math.sqrt(expected) + 10:  # a true p at the level lies below this but for ~1e-7
            p = permutation_p(x, y, permutations=more)
    return p


def claim_pairs(k: int) -> int:
    """The Bonferroni family of k settings: both one-sided tests of every pair. Y is picked as the
    highest of them on the same returns, so "Y beats X" is one of k(k-1) claims that could have been
    made; testing only Y's k-1 at 0.05 called a difference in 10% (2 settings) to 48% (8) of null sweeps."""
    return max(1, k * (k - 1))


def told_apart(c: dict, pairs: int) -> bool:
    """Whether X (compare_rows's ``c``) counts as distinguishable from Y: enough members on both
    sides and the permutation p-value at most CLAIM_ALPHA / pairs (its direction: c["better"])."""
    return c.get("perm_p") is not None and c["perm_p"] <= CLAIM_ALPHA / pairs


def claim_direction(p_y: float, p_x: float, pairs: int) -> tuple:
    """(better, direction, p) of the two one-sided p-values of a pair, p_y that Y scores higher, p_x that X
    does: better "Y" or "X" where that direction's p is at most CLAIM_ALPHA / pairs (the family counts both
    directions of every pair), else None; direction ("Y > X" or "X > Y") and p of the side told better, or
    of the smaller p. Reporting only p_y read a complete separation the other way (every X above every Y)
    as p = 1, "not distinguishable"."""
    level = CLAIM_ALPHA / pairs
    if p_y <= level:  # exact p_y + p_x >= 1: no pair is told apart both ways
        return "Y", "Y > X", p_y
    if p_x <= level:
        return "X", "X > Y", p_x
    return (None, "Y > X", p_y) if p_y <= p_x else (None, "X > Y", p_x)


def verdict(ref_name: str, compared: list, ranked: str = "the highest IQM", settings: Optional[int] = None) -> str:
    """Whether the comparison tells Y (``ref_name``, chosen as ``ranked`` says: ranked_text) apart from
    the others, in either direction: compared, [(name, compare_rows of X against Y)]. ``better than B
    (p = 0.0001)`` for an X that Y beats at the corrected level, ``C is better than Y (P(X > Y) 1.00, p =
    0.004)`` for one that beats Y (a row of another population, or a setting of a lower IQM that wins most
    pairs), ``not distinguishable from D (P(X > Y) 0.45, p = 0.31, above 0.05/6)`` (or ``fewer than 5
    members``) for the rest, the tests and their correction (CLAIM_METHOD) said after it. The family is
    every pair of the ``settings`` with an IQM (Y among them, compared or not: best_row could have picked Y
    from any of them); None: Y and the settings measured against it."""
    measured = [(n, c) for n, c in compared if c["p"] is not None]
    if not measured:
        return f"Y = {ref_name}: {ranked}; no other setting is compared with it (see the notes below)."
    pairs = claim_pairs(settings if settings is not None else len(measured) + 1)
    level = f"0.05/{pairs}"
    below = [(n, c) for n, c in measured if told_apart(c, pairs) and c.get("better", "Y") == "Y"]
    above = [(n, c) for n, c in measured if told_apart(c, pairs) and c.get("better") == "X"]
    unclaimed = [(n, c) for n, c in measured if c.get("no_claim")]  # unequal training: not tested, not "not distinguishable"
    same = [(n, c) for n, c in measured if not told_apart(c, pairs) and not c.get("no_claim")]
    how = f" ({CLAIM_METHOD}.)"
    if unclaimed:
        against = ", ".join(f"{n} (P(X > Y) {c['p']:.2f})" for n, c in unclaimed)
        text = (f"no claim against {against}: "
                f"{unclaimed[0][1]['no_claim'].removesuffix(', no claim')}, which more seeds do not fix: "
                "evaluate every member at the same step (the note on steps says how)")
        if len(unclaimed) == len(measured):
            return f"Y = {ref_name}: {ranked}; {text}." + how
        measured = [(n, c) for n, c in measured if not c.get("no_claim")]
    if unclaimed and not same and not above:
        return (f"Y = {ref_name}: {ranked}; better than " + ", ".join(f"{n} (p = {c['perm_p']:.2g})" for n, c in below)
                + f", each at most {level}; {text}." + how)
    if not same and not above:
        return (f"Y = {ref_name}: {ranked}, and better than every other setting compared at these seeds ("
                + ", ".join(f"{n}: p = {c['perm_p']:.2g}" for n, c in below) + f", each at most {level})." + how)

    def why(c):
        if c["perm_p"] is None:
            return f"P(X > Y) {c['p']:.2f}; fewer than {MIN_CLAIM_MEMBERS} members on a side: no claim"
        return f"P(X > Y) {c['p']:.2f}, p = {c['perm_p']:.2g}, above {level}"

    parts = [f"{n} is better than Y (P(X > Y) {c['p']:.2f}, p = {c['perm_p']:.2g}, at most {level})" for n, c in above]
    # after an "X is better than Y" clause, a bare "better than B" would read as X's claim, never tested
    subject = "Y is " if above else ""
    if below:
        parts.append(f"{subject}better than " + ", ".join(f"{n} (p = {c['perm_p']:.2g})" for n, c in below))
    if same:
        parts.append(f"{subject}not distinguishable from {', '.join(f'{n} ({why(c)})' for n, c in same)} at these seeds")
    if unclaimed:
        parts.append(text)
    if not same:
        return f"Y = {ref_name}: {ranked}; " + "; ".join(parts) + "." + how
    # every pair tied (returns identical, e.g. all at the env's cap): more seeds give more ties, not an answer
    tied = all(c["ci"] is not None and c["ci"][0] == c["ci"][1] == 0.5 for _, c in same)
    most = permutations_for(pairs)
    advice = ("The settings' returns are identical, which more seeds cannot tell apart." if tied else
              # past MAX_PERMUTATIONS no p reaches the level, whatever the seeds
              f"No p of {most:,} permutations reaches {level}: compare fewer settings at once." if 1 / (1 + most) > CLAIM_ALPHA / pairs
              else "Run more seeds to tell them apart.")
    return f"Y = {ref_name}: {ranked}; " + "; ".join(parts) + ". " + advice + how


def compare_rows(row: dict, ref: dict, settings: int = 2, unequal: Optional[str] = None) -> dict:
    """{"p", "ci", "few", "perm_p", "better", "direction", "why"}: P(row > ref) over the two rows' used
    returns, its poi_ci, few (either has fewer than FEW_CI_MEMBERS); claim_p in both directions for the
    family of ``settings`` settings, read by claim_direction: better ("Y": ref, "X": row, None), direction
    ("Y > X" or "X > Y") and perm_p, the p of that direction (None, as better and direction, with fewer than
    MIN_CLAIM_MEMBERS on a side); why there is none ("no members", "another measure"), else None. ``unequal``
    (unequal_training's line): no permutation test, the line kept as "no_claim"."""
    out = {"p": None, "ci": None, "few": False, "perm_p": None, "better": None, "direction": None, "why": None}
    # an empty row first: a setting all of whose members diverged has no kind of return to differ in
    if not row["returns"] or not ref["returns"]:
        gone = row if not row["returns"] else ref
        everyone = gone.get("diverged") and len(gone["diverged"]) == gone["members"]
        out["why"] = "no member with a final return" + (" (every member diverged)" if everyone else "")
    elif row["kind"] != ref["kind"]:  # an eval return against a training return: not one measure
        out["why"] = f"its final return is the {KIND_NAMES[row['kind']]}, the other's the {KIND_NAMES[ref['kind']]}"
    else:
        x, y = row["returns"], ref["returns"]
        out.update(p=probability_of_improvement(x, y), ci=poi_ci(x, y), few=min(len(x), len(y)) < FEW_CI_MEMBERS)
        if unequal:  # a permutation test of unequally trained members tests the steps as much as the settings
            out["no_claim"] = unequal
        elif min(len(x), len(y)) >= MIN_CLAIM_MEMBERS:
            pairs = claim_pairs(settings)
            out["better"], out["direction"], out["perm_p"] = claim_direction(claim_p(x, y, pairs), claim_p(y, x, pairs),
                                                                             pairs)
    return out


KIND_NAMES = {"eval": "deterministic eval return", "training": "last (stochastic) training return"}


def unequal_training(*rows) -> Optional[str]:
    """``members evaluated at different steps (2,048-4,096): unequal training, no claim`` when the evaluation
    returns of ``rows`` (their "measured" steps) are of more than one step, else None: a verdict between them
    would weigh the steps trained as much as the settings. Asked of a pool's rows only: a population's members
    train in lockstep (steps differ only when read while training, which its note says), and `report A B`
    compares populations trained to different totals on purpose, each line saying its own."""
    steps = {st for r in rows for st, _ in (r.get("measured") or {}).values() if isinstance(st, int)}
    if len(steps) < 2:
        return None
    return f"members evaluated at different steps ({min(steps):,}-{max(steps):,}): unequal training, no claim"


def _poi_cells(c: dict) -> str:
    """``0.23 | [0.05, 0.45] †``: P(X > Y) and its interval in a table; "— | —" without one."""
    if c["p"] is None:
        return "\u2014 | \u2014"
    return f"{c['p']:.2f} | {ci_cell(c['ci'], c['few'], digits=2)}"


def settings_comparison(rows: list, src=None) -> Optional[dict]:
    """Each setting X against the best one Y (best_row: the highest IQM), computed once for report.md's
    "## Comparison" and its --json: {best (Y's index), names, family, compared [(index, name,
    compare_rows)], ranked, verdict}; None with fewer than two settings or no best. Of a Pool (``src``)
    whose members were evaluated at different steps (populations trained apart, one stopped short), no
    permutation test is made (unequal_training): its settings mix unequal amounts of training."""
    b = best_row(rows)
    if len(rows) < 2 or b is None:
        return None
    names = [setting_label(r["settings"]) or "(seeds only)" for r in rows]
    family = sum(_has_iqm(r) for r in rows)  # a setting of another kind of return is not compared, yet could be Y
    unequal = unequal_training(*rows) if isinstance(src, Pool) else None
    compared = [(i, names[i], compare_rows(r, rows[b], family, unequal)) for i, r in enumerate(rows) if i != b]
    ranked = ranked_text(rows)
    return {"best": b, "names": names, "family": family, "compared": compared, "ranked": ranked,
            "verdict": verdict(names[b], [(name, c) for _, name, c in compared], ranked, family)}


def comparison_section(rows: list, comparison: Optional[dict] = None) -> list:
    """The lines of a report's "## Comparison" (settings_comparison's, computed here when not given):
    each setting X against the best one Y, P(X > Y) with its 95% interval; [] with fewer than two
    settings or no best."""
    comparison = comparison if comparison is not None else settings_comparison(rows)
    if comparison is None:
        return []
    b, names = comparison["best"], comparison["names"]
    ref, ref_name = rows[b], names[b]
    table = ["| setting X | members | P(X > Y) | 95% CI |", "|---|---|---|---|"]
    notes = not_ranked_notes(rows, names, b)
    for i, name, c in comparison["compared"]:
        table.append(f"| {name} | {rows[i]['n']} vs {ref['n']} | {_poi_cells(c)} |")
        if c["why"]:
            notes.append(f"- {name}: not compared: {c['why']}.")
        if c["few"] and c["ci"] is not None and not any("\u2020" in n for n in notes):
            notes.append(f"- \u2020 either setting has fewer than {FEW_CI_MEMBERS} members: {FEW_MEMBERS_NOTE}.")
    ranked = comparison["ranked"]
    lines = ["## Comparison", "", comparison["verdict"], "",
             f"Each setting X against Y = {ref_name} ({ranked}): P(X > Y) is {POI_TEXT}. 95% CIs: {POI_CI_METHOD}; "
             f"none (\u2014) when either has fewer than {MIN_CI_MEMBERS} members.", "", *table]
    return lines + ([""] + notes if notes else [])


def resolved_metric(run_dir: Path, metric: str) -> str:
    """The column ``metric`` names in the members' metrics.csv (``losses/value_loss`` for
    ``value_loss``), as plot.population_curves resolves it; ``metric`` itself when it cannot be read."""
    from .plot import PlotError, read_metrics, resolve_metric

    try:
        first = next(d for s in read_settings(run_dir) for _, d in s.members if (d / "metrics.csv").is_file())
        return resolve_metric(metric, list(read_metrics(first)), first)
    except (PopulationError, PlotError, StopIteration):
        return metric


def curve_caption(rows: list, metric: str) -> str:
    """What the report's curve and its table are, each as it is: the curve is the training ``metric``
    (a resolved column name); the table holds per setting one kind of final return (row["kind"]),
    so the caption names the one kind all settings share, or points at the line above the table,
    which names each setting's."""
    if metric == "charts/episodic_return":  # a return logged only in iterations that finished an episode
        how = ("stochastic actions, each member's last logged value carried forward between the iterations in which it "
               "finished an episode")
    elif metric == "charts/episodic_return_100":  # the default curve: a rolling mean of the same episodes
        how = ("stochastic actions, each member's mean return over its last 100 training episodes, carried forward "
               "between the iterations in which it finished an episode")
    else:  # a loss or other per-iteration column: no episodes, no actions chosen
        how = "each member's last logged value carried forward over iterations in which it logged none"
    # a setting with no member counted (all diverged) has no final return of either kind
    kinds = {r["kind"] for r in rows if r["sources"]} or {r["kind"] for r in rows}
    names = {"eval": "the deterministic eval return", "training": "the last (stochastic) training return"}
    table = (names[kinds.pop()] if len(kinds) == 1 else
             "per setting the deterministic eval return or the last (stochastic) training return, as the line above "
             "it says")
    diverged = " Diverged members are left out of the curves, as of the table." if any(r["diverged"] for r in rows) else ""
    return (f"The curve is the training {metric} ({how}); the table above is {table}. Its band: 95% CI per x, "
            f"{CI_METHOD}; not drawn where fewer than {MIN_CI_MEMBERS} members have a value.{diverged}")


#: config.yaml fields each member records for itself (its seed, its own directory): never shared
MEMBER_OWN_RECORD = ("seed", "run_dir")


def _sweep_text(sweep) -> str:
    """``lr = 0.0025, 0.001; ent_coef = 0, 0.01`` (values as --sweep spells them); "none (seeds only)"."""
    from .report import _md

    if not isinstance(sweep, dict) or not sweep:
        return "none (seeds only)"
    # population.json's, so shown as report.md shows the run's values (report._md): a key or value is never markup
    return "; ".join(f"{_md(k)} = {', '.join(_md(shown(v)) for v in vals) if isinstance(vals, list) else _md(shown(vals))}"
                     for k, vals in sweep.items())


def _seeds_text(seeds) -> str:
    """``1-10 (10 seeds)``, as --seeds takes them; "—" when population.json holds no list of ints."""
    from .population_run import seeds_spec

    if not isinstance(seeds, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in seeds) or not seeds:
        return "\u2014"
    return f"{seeds_spec(seeds)} ({_count(len(seeds), 'seed')})"


def member_configs(run_dir: Path, doc: dict) -> tuple:
    """([member dirs], {name: config.yaml mapping}, {name: the line why it could not be read}) of the
    members population.json lists: report._read_yaml's mapping, {} for an absent or empty file."""
    from .report import ReportError, _read_yaml

    entries = [e for e in doc.get("member_dirs") or [] if isinstance(e, dict) and isinstance(e.get("dir"), str)]
    dirs = [Path(run_dir) / e["dir"] for e in entries]
    configs, unread = {}, {}
    for d in dirs:
        try:
            configs[d.name] = _read_yaml(d / "config.yaml")
        except ReportError as e:
            unread[d.name] = str(e)
    return dirs, configs, unread


def shared_config(configs: dict, sweep: dict) -> tuple:
    """([(field, value)] equal in every non-empty config, [(field, first value)] not), in the order the
    configs hold them, less each member's own record (MEMBER_OWN_RECORD) and the swept fields."""
    present = [c for c in configs.values() if c]
    shared, differ = [], []
    for key in dict.fromkeys(k for c in present for k in c):
        if key in MEMBER_OWN_RECORD or key in sweep:
            continue
        values = [c.get(key) for c in present]
        (shared if all(v == values[0] for v in values) else differ).append((key, values[0]))
    return shared, differ


def provenance_section(run_dir: Path, doc: dict, shown: Optional[dict] = None, of: Optional[str] = None) -> list:
    """The lines of a population report's "## Config and versions": population.json's command, seeds and
    sweep; the config the members share (each member's config.yaml, the fields equal in all of them,
    less each one's seed and directory and the swept fields; ``shown``: {field: the cell shown in place of
    its value}, a pool's ``backend: auto (native)``); the versions and machine of the first
    member's meta.json (members train in one process), with a note naming members whose versions or git
    commit differ from it (``of``: the sentence above that table, a pool's, in place of one population's).
    A file that cannot be read is named in a line, never fails the report: the table above it stands without it."""
    from .report import (ReportError, _cell, _check_meta, _clip, _clip_field, _code, _command_cell, _git_code, _machine, _read_json,
                         _table, _versions)

    dirs, configs, unread = member_configs(run_dir, doc)
    sweep = doc.get("sweep") if isinstance(doc.get("sweep"), dict) else {}
    command = _command_cell(doc.get("command"))
    lines = ["## Config and versions", "",
             f"- command: {_code(command)} ({POPULATION_FILE})" if command else f"- command: not recorded in {POPULATION_FILE}",
             f"- seeds: {_seeds_text(doc.get('seeds'))}", f"- sweep: {_sweep_text(sweep)}", ""]
    present = {k: v for k, v in configs.items() if v}
    shared, differ = shared_config(configs, sweep)
    lines += [f"The config the members share (their `config.yaml`, the fields equal in all {len(present)} of "
              f"{len(dirs)} members; the seed, `run_dir` and swept fields are per member):", ""]
    shown = shown or {}
    lines += (_table(["field", "value"], [[_cell(_clip(k)), _clip_field(k, shown.get(k, v))] for k, v in shared]) if shared
              else ["No config.yaml to read."])
    if differ:  # not swept, yet not one value: a population edited or assembled by hand
        lines += ["", f"- note: these fields are not swept yet differ between members: {', '.join(k for k, _ in differ)} "
                      "(each member's `config.yaml` has its own)."]
    missing = [d.name for d in dirs if d.name not in present and d.name not in unread]
    # a config.yaml that is there but empty (or not a mapping) reads as {} too: said so, not as missing
    empty = [name for name in missing if (Path(run_dir) / name / "config.yaml").exists()]
    absent = [name for name in missing if name not in empty]
    notes = (([f"- note: no config.yaml in {', '.join(absent)}."] if absent else [])
             + ([f"- note: config.yaml holds no fields (empty or not a mapping) in {', '.join(empty)}."] if empty else [])
             + [f"- note: {u}." for u in unread.values()])
    lines += [""] + notes if notes else []
    restarted = schedule_restarts(dirs, configs, doc.get("total_timesteps_per_member"))
    if restarted:
        lines += ["", restarted]
    lines.append("")
    metas, bad = {}, []
    for d in dirs:
        try:
            metas[d.name] = _check_meta(d / "meta.json", _read_json(d / "meta.json"))
        except ReportError as e:
            bad.append(str(e))
    first = next((name for name, m in metas.items() if m), None)
    lines += ["### Versions and machine", ""]
    if first is None:
        lines += ["No versions recorded (no member's meta.json could be read)."]
    else:
        meta = metas[first]
        lines += [(of or "Of {first}'s `meta.json` (the members train in one process, on one machine):").replace("{first}", first), ""]
        versions = _versions(meta)
        lines += (_table(["package", "version"], [[_cell(_clip(k)), _clip(v)] for k, v in versions.items()]) if versions
                  else ["No versions recorded."])
        machine = [[k, _clip_field(k, v)] for k, v in _machine(meta).items() if k != "command" and v not in (None, "", [])]
        if machine:  # the command is population.json's, above
            lines += [""] + _table(["machine", "value"], machine)
        other = [name for name, m in metas.items() if m and name != first
                 and (_versions(m) != versions or _git_code(m) != _git_code(meta))]
        if other:
            lines += ["", f"- note: {_count(len(other), 'member')} recorded other versions or another git commit than "
                          f"{first}: {', '.join(other)} (`proxima report RUN/<member dir>` shows each one's)."]
    lines += [f"- note: {b}." for b in bad]
    return lines + [""]


def schedule_recomputed_at(member_dir: Path, config: dict, total_steps) -> Optional[tuple]:
    """(step, lr logged there, lr a run planned for ``total_steps`` logs there) when a member that anneals (its
    ``config``'s anneal_lr) logged a charts/learning_rate its final plan does not give: iteration i of a run of I
    iterations trains at lr * (1 - (i - 1) / I), so rows of another I are of a resume that recomputed the schedule
    over a new total (an extension); step: the last such row's global_step, where that resume went on. None when
    every row fits (or nothing says: no anneal_lr, no metrics)."""
    from .plot import PlotError, read_metrics

    lr0, envs, steps = config.get("lr"), config.get("num_envs"), config.get("num_steps")
    if config.get("anneal_lr") is not True or not all(_is_count(v) and v > 0 for v in (envs, steps, total_steps)):
        return None
    try:  # an lr past a float's range (edited by hand) plans no schedule
        lr0 = float(lr0) if isinstance(lr0, (int, float)) and not isinstance(lr0, bool) else math.nan
    except OverflowError:
        return None
    if not (math.isfinite(lr0) and lr0 > 0):
        return None
    iterations = total_steps // (envs * steps)
    try:
        m = read_metrics(member_dir)
    except (PlotError, OSError, ValueError):
        return None
    it, at, lr = m.get("iteration"), m.get("global_step"), m.get("charts/learning_rate")
    if it is None or at is None or lr is None or not iterations:
        return None
    off = None
    for i, step, rate in zip(it, at, lr):
        # an annealed lr lies in [0, lr0] whatever the total: a cell outside it (edited) is no recomputed schedule
        if not (np.isfinite(i) and np.isfinite(step) and np.isfinite(rate) and -1e-4 * lr0 <= rate <= lr0 * (1 + 1e-4)):
            continue
        # int / int: exact for any total train accepts (a float of --total-timesteps 1e400 overflows)
        planned = lr0 * (1 - int(i - 1) / iterations)
        if abs(rate - planned) > 1e-4 * lr0:  # float32 logging, far under one iteration's step lr0 / I
            off = (int(step), float(rate), float(planned))
    return off


def _resume_command_at(member_dir: Path, step: int) -> Optional[str]:
    """The command of the first resume the member's meta.json records at or after ``step`` (its ``resumes``), else None."""
    from .report import _command_cell
    from .rundir import _read_json_file

    meta = _read_json_file(member_dir / "meta.json") or {}
    resumes = meta.get("resumes") if isinstance(meta, dict) else None
    later = sorted((r["step"], i) for i, r in enumerate(resumes if isinstance(resumes, list) else [])
                   if isinstance(r, dict) and _is_count(r.get("step")) and r["step"] >= step and r.get("command"))
    return _command_cell(resumes[later[0][1]]["command"]) if later else None


def schedule_restarts(dirs: list, configs: dict, total_steps) -> Optional[str]:
    """A note for "## Config and versions" when members' logged learning rates are not those of the total they
    trained to (schedule_recomputed_at: a resume that extended --total-timesteps under --anneal-lr recomputed the
    schedule over the new total there): the table is then not what ``proxima train --config RUN/<member
    dir>/config.yaml`` trains, which anneals over the final total from step 0. ``configs``: {member name: its
    config.yaml}; ``total_steps``: population.json's total_timesteps_per_member. None when every member fits."""
    from .report import _code

    at: dict = {}  # step -> [(member dir, logged, planned)]
    for d in dirs:
        off = schedule_recomputed_at(Path(d), configs.get(Path(d).name) or {}, total_steps)
        if off is not None:
            at.setdefault(off[0], []).append((Path(d), *off[1:]))
    if not at:
        return None
    parts = []
    for step, members in sorted(at.items()):
        d, logged, planned = members[0]
        command = _resume_command_at(d, step)
        who = "every member" if len(members) == len(dirs) else ", ".join(m.name for m, *_ in members)
        parts.append(f"after step {step:,} for {who} ({d.name} logged lr {logged:.3g} there, where a run planned for "
                     f"{total_steps:,} steps trains at {planned:.3g}" + (f"; the resume: {_code(command)}" if command else "")
                     + ")")
    return ("- note: the learning rate schedule was recomputed " + "; ".join(parts) + " (a resume that extends "
            "--total-timesteps under --anneal-lr anneals over the new total from where it starts: meta.json's `resumes`), "
            "so a member's `config.yaml` alone does not reproduce this table: `proxima train --config RUN/<member "
            "dir>/config.yaml` anneals over the final total from step 0; to rerun a member, train it to that step with "
            "the first total, then resume it as recorded.")


def _free_differences(pool: Pool) -> list:
    """``checkpoint_every: 50 in A, 10 in A2`` per POOL_FREE_FIELDS field whose values differ between the pool's
    populations (each one's members' values, ``absent`` where a config.yaml lacks it), as read_pool's refusal
    names a field; [] when none does."""
    from .report import _md

    values: dict = {}  # field -> population name -> its members' values
    for d, name, doc in zip(pool.dirs, pool.names, pool.docs):
        configs = member_configs(Path(d), doc)[1].values()
        for key in POOL_FREE_FIELDS:
            seen = dict.fromkeys(_value_text(c[key]) if key in c else "absent" for c in configs if c)
            values.setdefault(key, {})[name] = " or ".join(seen)
    return [f"{_md(key)}: " + ", ".join(f"{_md(v)} in {_md(name)}" for name, v in by_name.items())
            for key, by_name in values.items() if len(set(by_name.values())) > 1]


def _pooled_backend(pool: Pool) -> tuple:
    """({"backend": "auto (native)"} or {}, [note lines]) for a pool's shared config: read_pool compared
    ``backend: auto`` as the backend each member built (_as_built), so the first population's ``auto`` is shown
    with it, and populations that recorded it otherwise (``auto`` in A, ``native`` in A2) are named in a note."""
    from .report import _md

    recorded = {}  # population name -> the backend values its members' config.yaml hold
    for d, name, doc in zip(pool.dirs, pool.names, pool.docs):
        configs = [c for c in member_configs(Path(d), doc)[1].values() if c]
        recorded[name] = list(dict.fromkeys(_value_text(c.get("backend")) for c in configs if "backend" in c))
    member = next((m for st in pool.settings for _, m in st.members if m.parent == pool.dirs[0]), None)
    if member is None or recorded.get(pool.names[0]) != ["auto"]:
        return {}, []
    from .report import ReportError, _read_yaml

    try:
        built = _as_built(member, _read_yaml(member / "config.yaml")).get("backend")
    except ReportError:
        return {}, []
    if not isinstance(built, str) or built == "auto":  # an Atari id without a recorded backend: auto it stays
        return {}, []
    shown = {"backend": f"auto ({built})"}
    spelled = {name: " or ".join(v) for name, v in recorded.items() if v}
    if len(set(spelled.values())) < 2:
        return shown, []
    return shown, [f"- note: backend: {', '.join(f'{_md(v)} in {_md(name)}' for name, v in spelled.items())}; each "
                   f"member built {_md(built)} (its `meta.json` `env_backend`), one setting."]


def pool_provenance(pool: Pool) -> list:
    """provenance_section of a Pool: each population's command and seeds, then the first population's shared
    config (read_pool checked every member's equal to it but for the seed, run_dir and POOL_FREE_FIELDS, whose
    differences a note names; ``backend: auto`` shown with the backend it built, _pooled_backend) and versions,
    with a note naming a population whose first member recorded other versions or another git commit."""
    from .report import ReportError, _check_meta, _code, _command_cell, _git_code, _md, _read_json, _versions

    shown, backend_note = _pooled_backend(pool)
    # each population trained in its own process, perhaps elsewhere: the table is the first one's, the notes below
    # name a population whose versions, git commit or machine differ
    of = (f"Of {_md(pool.names[0])}/{{first}}'s `meta.json` ({_md(pool.names[0])}'s members train in one process, on one "
          f"machine; each pooled population trained in its own process, perhaps on another machine: a note below names "
          f"any whose versions, git commit or machine differ):")
    lines = provenance_section(pool.dirs[0], pool.docs[0], shown, of)
    parts = []
    for d, name, doc in zip(pool.dirs, pool.names, pool.docs):
        command = _command_cell(doc.get("command"))
        parts.append(f"- {_md(name)}: command {_code(command) if command else f'not recorded in {POPULATION_FILE}'}; "
                     f"seeds {_seeds_text(doc.get('seeds'))}")
    first = lines.index("") + 1  # after the heading: the pool's populations, in place of the first one's lines
    end = lines.index("", first)
    shared = (f"The pooled populations' members share one config but for the seed, `run_dir` and fields that change no "
              f"member's learning or measured return (checked); below, {_md(pool.names[0])}'s.")
    free = _free_differences(pool)
    lines[first:end] = parts + [f"- sweep: {_sweep_text(pool.docs[0].get('sweep'))}", "", shared] + (
        ["", "- note: fields that change no member's learning or measured return differ between the populations, "
             f"pooled as they are (docs/populations.md): {'; '.join(free)}."] if free else []) + (
        [""] + backend_note if backend_note else [])

    def meta_of(d: Path) -> Optional[dict]:
        member = next((m for st in pool.settings for _, m in st.members if m.parent == d), None)
        try:
            meta = _check_meta(member / "meta.json", _read_json(member / "meta.json")) if member else None
        except ReportError:
            return None
        return meta or None

    def code_of(meta):
        return (_versions(meta), _git_code(meta)) if meta else None

    metas = [meta_of(d) for d in pool.dirs]
    ref = code_of(metas[0])
    other = [_md(name) for meta, name in zip(metas[1:], pool.names[1:]) if ref is not None and code_of(meta) not in (None, ref)]
    notes = []
    if other:
        notes.append(f"- note: {', '.join(other)} recorded other versions or another git commit than "
                     f"{_md(pool.names[0])} (`proxima report RUN/<member dir>` shows each one's).")
    machines = machine_differences(pool.names, metas)
    if machines:  # a rerun on one of them is bit-identical to that population's members only (CPU model, tanh)
        notes.append(f"- note: the pooled populations trained on different machines: {machines} "
                     "(`proxima report RUN/<member dir>` shows each one's).")
    if notes and lines[-2].startswith("|"):  # a table's last row: a blank line ends it
        notes.insert(0, "")
    lines[-1:-1] = notes
    return lines


#: the meta.json machine fields (report._machine's) a pool's populations are compared on: where and on what they
#: trained, not when, from where or by which command
MACHINE_FIELDS = ("host", "platform", "cpu", "cpu model", "cpu count", "cpu tanh", "torch build", "CUDA", "CUDA driver",
                  "GPUs", "device")


def machine_differences(names: list, metas: list) -> str:
    """``host: vm in A, box2 in A2; cpu model: ...``: the MACHINE_FIELDS whose recorded values differ between
    populations (each one's first member's meta.json, None for one unread: not compared); "" when none does."""
    from .report import _machine, _md

    seen = [(name, _machine(meta)) for name, meta in zip(names, metas) if meta]
    out = []
    for key in MACHINE_FIELDS:
        values = {name: m.get(key) for name, m in seen}
        if len({_value_text(v) for v in values.values()}) > 1:
            out.append(f"{key}: " + ", ".join(f"{_md(shortened(_value_text(v)))} in {_md(name)}"
                                               for name, v in values.items()))
    return "; ".join(out)


def _pool_curve_note(srcs: list) -> str:
    """`` A pool's curves are drawn as ...`` when a source is a Pool: one panel of its own, each setting over the
    union of its populations' members, as its table above pools them."""
    if not any(isinstance(s, Pool) for s in srcs):
        return ""
    return (" A pool's curves are drawn as `proxima plot A+A2` draws them: one panel per pool, each setting's curve and "
            "band over the union of its populations' members, as the table above pools them.")


def _ci_json(ci) -> Optional[list]:
    return None if ci is None else [ci[0], ci[1]]


def member_returns(r: dict) -> list:
    """(m,) each member's value as the row uses it, in ``r["dirs"]`` order, None for one left out (diverged, no
    result, NaN): ``r["returns"]`` holds only the values used, so zipping it with the members would give a member
    after a left-out one the next member's return."""
    left = {name for name, _ in r["left_out"]}
    used = iter(r["returns"])
    return [None if d in left else next(used) for d in r["dirs"]]


def row_json(r: dict) -> dict:
    """One setting's numbers as its report.md row and notes show them (summarize_settings's dict)."""
    return {"setting": setting_label(r["settings"]) or "(seeds only)", "settings": r["settings"],
            "members": r["members"], "n": r["n"], "kind": r["kind"], "sources": r["sources"],
            "mean": r["mean"], "mean_ci": _ci_json(r["mean_ci"]), "iqm": r["iqm"], "iqm_ci": _ci_json(r["iqm_ci"]),
            "few": r["few"], "solved": r["solved"], "solved_count": r["solved_count"],
            "left_out": [{"member": name, "why": why} for name, why in r["left_out"]],
            "diverged": sorted(r["diverged"]),
            "member_dirs": [{"dir": d, "seed": seed} for d, seed in zip(r["dirs"], r["seeds"])],
            "returns": r["returns"], "member_returns": member_returns(r),
            "measured": {name: {"global_step": st, "episodes": c} for name, (st, c) in (r.get("measured") or {}).items()}}


def _compare_json(c: dict) -> dict:
    """compare_rows's result as the table and the verdict show it: P(X > Y), its CI, the permutation p-value of
    the direction the verdict says (direction), which side it tells better (better: "X", "Y" or None)."""
    return {"p_improvement": c.get("p"), "p_improvement_ci": _ci_json(c.get("ci")), "few": c.get("few", False),
            "permutation_p": c.get("perm_p"), "direction": c.get("direction"), "better": c.get("better"),
            "not_compared": c.get("why"), **({"no_claim": c["no_claim"]} if c.get("no_claim") else {})}


def _pooled_json(src) -> dict:
    """{"pooled": [{"dir", "seeds"}]} of a Pool's populations (each one's seeds over its settings), {} for a directory."""
    if not isinstance(src, Pool):
        return {}
    return {"pooled": [{"dir": str(d), "seeds": sorted({seed for st in src.settings for seed, m in st.members if m.parent == d})}
                       for d in src.dirs]}


def population_json(run_dir: Path, rows: list, threshold: Optional[float], comparison: Optional[dict]) -> dict:
    """The --json file of one population's report, from the rows and comparison report.md is rendered from."""
    from .report import json_document

    doc = _docs_of(run_dir)[0]
    body = {"population": _spelled(run_dir), **_pooled_json(run_dir), "env_id": doc.get("env_id"), "threshold": threshold,
            "ci": {"level": CI_LEVEL, "method": CI_METHOD}, "settings": [row_json(r) for r in rows], "comparison": None}
    if comparison is not None:
        body["comparison"] = {
            "reference": comparison["names"][comparison["best"]], "ranked": comparison["ranked"],
            "verdict": comparison["verdict"], "alpha": CLAIM_ALPHA, "pairs": claim_pairs(comparison["family"]),
            "against": [{"setting": name, **_compare_json(c)} for _, name, c in comparison["compared"]]}
    return json_document("population", body)


def populations_json(run_dirs: list, names: list, tables: list, threshold: Optional[float], comparison: dict) -> dict:
    """The --json file of ``report A B --out``: a row per (population, setting) as the combined table shows it."""
    from .report import json_document

    rows = [(d, name, r) for d, name, t in zip(run_dirs, names, tables) for r in t]
    body = {"populations": [{"name": name, "dir": _spelled(d), **_pooled_json(d)} for d, name in zip(run_dirs, names)],
            "threshold": threshold,
            "ci": {"level": CI_LEVEL, "method": CI_METHOD}, "reference": comparison["reference"],
            "verdict": comparison["verdict"],
            "rows": [{"population": name, **row_json(r), **({"reference": True} if c.get("ref") else _compare_json(c))}
                     for (d, name, r), c in zip(rows, comparison["cells"])]}
    return json_document("populations", body)


def build_population_report(run_dir, out=None, threshold: Optional[float] = None, metric: str = "charts/episodic_return",
                            x: str = "step", smooth: int = 1, episodes: Optional[int] = 0, device: str = "cpu",
                            quiet: bool = True, json_out=None) -> Path:
    """Write RUN/report.md (or ``out``) for a population, its curve ``metric`` against ``x`` smoothed
    over ``smooth`` points (<stem>_curve.png next to the report, named after it as a single run's
    report's: RUN/report_curve.png by default), evaluating members without eval.json over ``episodes`` episodes on
    ``device`` (None: each member's own --eval-episodes; 0: their last training return); ReportError
    (nothing written) on a broken run. json_out: also write the table's numbers there (population_json),
    before the Markdown (report.write_report), checked already by report.build_population_report."""
    from .report import ReportError, Staging, _curve_path, draw_curve, image_link, make_folders, write_report

    run_dir = run_dir if isinstance(run_dir, Pool) else Path(run_dir)
    if threshold is not None and not math.isfinite(threshold):  # as `proxima report` refuses it
        raise ReportError(f"--threshold {threshold:g}: must be a finite return (e.g. --threshold 475)")
    if isinstance(run_dir, Pool) and out is None:  # each population's own report.md is its own
        raise ReportError(f"{run_dir.spelled}: give --out FILE.md for the pooled report")
    rows = summarize_settings(run_dir, threshold, episodes, device, quiet)
    out = Path(out) if out is not None else run_dir / "report.md"
    comparison = settings_comparison(rows, run_dir)
    text = render(run_dir, rows, threshold, episodes, comparison, report_flags(threshold, episodes))

    curve = _curve_path(out)  # the report's own, not plot's curve.png, which a later plot would replace
    everyone = any(r["diverged"] for r in rows) and all(len(r["diverged"]) == len(r["dirs"]) for r in rows)
    # --out and --json in a folder not made yet, made as a single run's report makes them (before the curve, which may fail)
    make_folders(out, json_out)
    with Staging() as staging:  # the curve, the JSON and report.md renamed into place together, or none
        # the population's plot: one IQM curve with its 95% bootstrap band per setting
        # a pool's: one panel, each setting over the union of its populations' members, as `proxima plot A+A2` draws it
        why = draw_curve(staging, [run_dir], curve, metric=metric, x=x, smooth=smooth, quiet=quiet)
        if why is None:
            name = resolved_metric(parts_of(run_dir)[0], metric)  # what was drawn: `--metric value_loss` drew losses/value_loss
            alt = f"learning curves: IQM over members of {name} with a 95% bootstrap CI, per setting"
            text += (f"\n![{alt}]({image_link(Path(os.path.relpath(curve.resolve(), out.parent.resolve())).as_posix())})\n\n"
                     f"{curve_caption(rows, name)}{_pool_curve_note([run_dir])}\n")
        else:  # every member diverged: the line above the table has said who and why once
            text += ("\nNo learning curve: every member diverged, and a diverged member is left out of its setting's "
                     "curve, as of the table.\n" if everyone else f"\nNo learning curve: {why}\n")
        text += "\n" + "\n".join(pool_provenance(run_dir) if isinstance(run_dir, Pool) else
                                  provenance_section(run_dir, json.loads(read_run_text(run_dir / POPULATION_FILE))))
        write_report(out, text, json_out, population_json(run_dir, rows, threshold, comparison) if json_out is not None
                     else None, staging=staging)
    return out


# ------------------------------------------------------------------------------------ several populations
def _measure(rows: list) -> dict:
    """{what: value} of the final returns a population's rows hold: their kind and evaluation episodes."""
    kinds = sorted({r["kind"] for r in rows if r["sources"]}) or sorted({r["kind"] for r in rows})
    counts = sorted({c for r in rows for _, c in (r.get("measured") or {}).values() if c is not None})
    return {"final return": " / ".join(KIND_NAMES[k] for k in kinds),
            "evaluation episodes": "/".join(f"{c:,}" for c in counts) or "\u2014"}


def planned_episodes(run_dir: Path, episodes: Optional[int]) -> tuple:
    """({counts}, {counts}): the evaluation episode counts a population's report would hold, read from
    what is recorded without evaluating: those of its members' eval.json of their last step, and those
    the report would evaluate the others over (``episodes``; None: each one's own --eval-episodes;
    none for 0: those members give training returns). A diverged member gives none."""
    from .evaluate import old_episode_seeds
    from .report import ReportError, _check_eval, _read_json, _stale_eval, run_eval_episodes

    fixed, fresh = set(), set()
    for setting in settings_of(run_dir):
        for _, d in setting.members:
            if setting.member_name(d) in setting.diverged:
                continue
            try:
                saved = _check_eval(d / "eval.json", _read_json(d / "eval.json"), finite=False) if (d / "eval.json").is_file() else None
            except ReportError:  # set aside and evaluated again by the report, which names the file in a note
                saved = None
            if saved is not None and "mean_return" in saved and not _stale_eval(d, saved) and not old_episode_seeds(saved):
                c = saved.get("episodes")
                if isinstance(c, int) and not isinstance(c, bool):
                    fixed.add(c)
            elif episodes is None:
                fresh.add(run_eval_episodes(d))
            elif episodes >= 1:
                fresh.add(episodes)
    return fixed, fresh


def _evaluate_again_hint(srcs: list, planned: list) -> str:
    """``; `proxima resume popD --eval-episodes 10` evaluates the members again over 10 episodes, rewriting their
    eval.json; as they are, their``: the resumes that give every population the first's one eval.json count (``planned``:
    planned_episodes per source); "" when the first holds several counts."""
    import shlex

    ref = sorted(planned[0][0])
    if len(ref) != 1:
        return ""
    again = [shlex.join(["proxima", "resume", _arg(d), "--eval-episodes", str(ref[0])])
             for src, (fixed, _) in zip(srcs[1:], planned[1:]) if fixed != set(ref) for d in parts_of(src)]
    if not again:
        return ""
    return ("; " + " and ".join(f"`{c}`" for c in again) + f" evaluate{'s' if len(again) == 1 else ''} the members "
            f"again over {ref[0]:,} episodes, rewriting their eval.json; as they are, their")


def _differs(names: list, values: list, what: str) -> Optional[str]:
    """``env id CartPole-v1 (runs/a) vs Acrobot-v1 (runs/b)`` for the first population whose ``what`` is
    not the first's; None when all agree."""
    for name, v in zip(names[1:], values[1:]):
        if v != values[0]:
            return f"{what} {values[0]} ({names[0]}) vs {v} ({name})"
    return None


def check_population_metric(run_dir, metric: str) -> None:
    """UnknownMetric (plot.resolve_metric's line, with its did-you-mean) when ``metric`` is no column of the
    population's first member with a metrics.csv: members share one logger's columns. A check of the name
    alone, before anything is evaluated: the curves (bootstrap CIs) are built once, by the report. A
    population or member that cannot be read returns: the report's own line or curve section says why."""
    from .plot import PlotError, read_metrics, resolve_metric

    try:
        first = next((d for s in read_settings(run_dir) for _, d in s.members if (d / "metrics.csv").is_file()), None)
        columns = list(read_metrics(first)) if first is not None else None
    except (PopulationError, PlotError, OSError):
        return
    if columns is not None:
        resolve_metric(metric, columns, first)


def shared_population(srcs: list) -> Optional[str]:
    """The one line refusing ``report A+A2 A2`` (a population in two of the sources compared), else None: the
    two rows would share members, and P(X > Y) and the permutation tests assume independent samples, so any
    verdict between them would be of a setting against part of itself."""
    import shlex

    seen: dict = {}
    for src in srcs:
        for d in parts_of(src):
            key = os.path.realpath(d)
            if key in seen and seen[key] is not src:
                pool = seen[key] if isinstance(seen[key], Pool) else src
                apart = " ".join(shlex.quote(str(p)) for p in parts_of(pool))
                return (f"{d}: in both {_spelled(seen[key])} and {_spelled(src)}: a pool compared with one of its own "
                        "populations shares members, and the comparison's tests assume independent ones; report "
                        f"{_spelled(pool)} alone, or its populations side by side (`proxima report {apart} --out FILE.md`)")
            seen[key] = src
    return None


def build_populations_report(run_dirs, out=None, threshold: Optional[float] = None, metric: str = "charts/episodic_return",
                             x: str = "step", smooth: int = 1, episodes: Optional[int] = 0, device: str = "cpu",
                             quiet: bool = True, json_out=None) -> Path:
    """``proxima report A B ... --out FILE.md`` of two or more populations: one table with a row per
    (population, setting), each row's statistics as the population's own report gives them, and the
    probability of improvement of each row X over Y, the first population's best row (best_row: its
    highest IQM; its only row for seeds only). Populations of different env ids, kinds of final return
    or evaluation episode counts are no one measure: ReportError (one line naming what differs),
    nothing written, as for a bad --out or an unknown metric. The curves are ``proxima plot``'s of the
    populations, one panel each; a metric without values (charts/action_std of discrete actions) is no curve, the
    report still written and saying why."""
    from .plot import UnknownMetric
    from .report import ReportError, check_device, check_json_out, check_out

    run_dirs = [d if isinstance(d, Pool) else Path(d) for d in run_dirs]
    flat = [d for src in run_dirs for d in parts_of(src)]
    shared = shared_population(run_dirs)
    if shared:  # before --out: no flag makes such a comparison sound
        raise ReportError(shared)
    if out is None:
        raise ReportError(f"{len(run_dirs)} populations: give --out FILE.md for the combined report")
    out = Path(out)
    check_out(out)
    if json_out is not None:
        check_json_out(Path(json_out), flat)
    if threshold is not None and not math.isfinite(threshold):
        raise ReportError(f"--threshold {threshold:g}: must be a finite return (e.g. --threshold 475)")
    names = source_names(run_dirs)
    docs = []
    for d in run_dirs:
        try:
            settings_of(d)  # a broken population.json: its own line, before any member is evaluated
            docs.append(_docs_of(d)[0])
        except (PopulationError, OSError, ValueError) as e:
            raise ReportError(with_advice(e)) from None
    how = "; a probability of improvement compares one measure: report them alone"
    problem = _differs(names, [doc.get("env_id") for doc in docs], "env id")
    if problem:  # checked before evaluating any member
        raise ReportError(f"these populations do not measure the same: {problem}{how}")
    if (metric, x, smooth) != ("charts/episodic_return", "step", 1):
        for d in flat:
            try:
                check_population_metric(d, metric)
            except UnknownMetric as e:  # a typo: refused; a column without values is the curve section's note
                raise ReportError(str(e)) from None
    check_device(device, episodes)
    planned = [planned_episodes(d, episodes) for d in run_dirs]
    problem = _differs(names, ["/".join(f"{c:,}" for c in sorted(set().union(*p))) or "\u2014" for p in planned],
                       "evaluation episodes")
    if problem and all(set().union(*p) for p in planned):  # from what is recorded, before evaluating any member
        fixed = sorted(set().union(*(p[0] for p in planned)))
        fresh = any(p[1] for p in planned)
        hint = (f"; `--episodes {fixed[0]}` evaluates the members without an eval.json over the count the others "
                "recorded" if fresh and len(fixed) == 1 else
                "; `--episodes N` evaluates the members without an eval.json over one count N" if fresh and not fixed else
                (_evaluate_again_hint(run_dirs, planned) or "; their")
                + " eval.json files hold different counts, which --episodes does not change: report them alone")
        raise ReportError(f"these populations do not measure the same: {problem}{hint}")
    tables = [summarize_settings(d, threshold, episodes, device, quiet) for d in run_dirs]
    measures = [_measure(rows) for rows in tables]
    for what in ("final return", "evaluation episodes"):
        problem = _differs(names, [m[what] for m in measures], what)
        if problem:
            raise ReportError(f"these populations do not measure the same: {problem}{how}")
    comparison = populations_comparison(names, tables)
    text = render_populations(run_dirs, names, docs, tables, threshold, episodes, comparison,
                              report_flags(threshold, episodes))
    return _write_with_curves(out, json_out, run_dirs, text, tables, metric, x, smooth, "population",
                              lambda: populations_json(run_dirs, names, tables, threshold, comparison),
                              tail="\n".join(differences_section(run_dirs, names, docs)), quiet=quiet)


def _write_with_curves(out: Path, json_out, run_dirs: list, text, tables: list, metric, x, smooth, panel: str,
                       json_doc, tail: str = "", quiet: bool = False) -> Path:
    """report.md of several populations (``text``, then their curves: one panel per ``panel``, a
    population or a task, each task on its own scale, then ``tail``, a section of its own) and ``json_doc()`` at ``json_out`` when given,
    renamed into place together with the curve's image, or none of them. ``text``: the Markdown, or a
    function of the Staging that draws the report's other images into it (the tasks report's profile)
    and returns the Markdown: those images are renamed into place with the rest, or none. ``quiet``: the
    curve's single-point note (plot_runs) left unsaid."""
    from .report import Staging, _curve_path, draw_curve, image_link, make_folders, write_report

    curve = _curve_path(out)
    make_folders(out, json_out)
    with Staging() as staging:
        flat = [d for src in run_dirs for d in parts_of(src)]
        why = draw_curve(staging, run_dirs, curve, metric=metric, x=x, smooth=smooth, quiet=quiet)  # a pool: one panel, as plot's
        if callable(text):
            text = text(staging)
        if why is None:
            link = image_link(Path(os.path.relpath(curve.resolve(), out.parent.resolve())).as_posix())
            name = resolved_metric(flat[0], metric)
            caption = curve_caption([r for t in tables for r in t], name) + _pool_curve_note(run_dirs)
            scale = ", each on its own scale" if panel == "task" else ""
            if panel == "task":  # the aggregate's scores, not a table of returns, are above the curves
                caption = caption.replace("the table above is", "the scores above are of")
            text += (f"\n![learning curves: IQM over members of {name} with a 95% bootstrap CI, per setting, one panel "
                     f"per {panel}{scale}]({link})\n\n{caption}\n")
        else:
            text += f"\nNo learning curve: {why}\n"
        text += f"\n{tail}" if tail else ""
        write_report(out, text, json_out, json_doc() if json_out is not None else None, staging=staging)
    return out


def row_label(population: str, settings: dict) -> str:
    """``p3: lr=0.008``, or ``p3 (seeds only)``: a (population, setting) row as the combined report names it."""
    label = setting_label(settings)
    return f"{population}: {label}" if label else f"{population} (seeds only)"


def differences_section(run_dirs: list, names: list, docs: list) -> list:
    """The lines of the combined report's "## How they differ": a table of the config fields whose values
    differ between the populations (each one's shared_config: the fields its members' config.yaml agree
    on; ``swept`` where its --sweep varies the field, ``differs between members`` where it is not one
    value, ``—`` where absent), then each population's command line as its population.json recorded it.
    What a sweep cannot vary (--num-envs, --hidden-sizes) is compared across populations: this says what
    was. A population with no config.yaml to read is named and left out of the table."""
    from .report import MISSING, _cell, _clip, _clip_field, _code, _command_cell, _md

    names = [_md(name) for name in names]  # the populations' folder names: shown, never rendered
    columns, unread = [], []
    for d, name, doc in zip(run_dirs, names, docs):
        configs = {f"{part}/{member}": c for d_, part, doc_ in zip(parts_of(d), getattr(d, "names", [name]), _docs_of(d, doc))
                   for member, c in member_configs(d_, doc_)[1].items()}
        sweep = doc.get("sweep") if isinstance(doc.get("sweep"), dict) else {}
        shared, differ = shared_config(configs, sweep)
        if not shared and not differ:
            unread.append(name)
            continue
        cells = {k: (_cell(v), _cell(_clip_field(k, v))) for k, v in shared}  # whole (compared), cut (shown)
        cells.update({k: ("differs between members",) * 2 for k, _ in differ})
        cells.update({k: ("swept",) * 2 for k in sweep})
        columns.append((name, cells))
    keys = dict.fromkeys(k for _, cells in columns for k in cells)
    rows = [[_cell(_clip(k))] + [cells.get(k, (MISSING,) * 2)[1] for _, cells in columns] for k in keys
            if len({cells.get(k, (MISSING,))[0] for _, cells in columns}) > 1]
    lines = ["## How they differ", ""]
    if len(columns) < 2:
        lines.append("No two populations have a config.yaml to compare.")
    elif rows:
        lines += ["The config fields whose values differ between the populations (each population's members' "
                  "`config.yaml`, the value they share; `swept`: the setting column above holds it):", ""]
        lines += ["| field | " + " | ".join(name for name, _ in columns) + " |", "|---" * (len(columns) + 1) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
    else:
        lines.append("No config field differs between the populations (their members' `config.yaml`, less the seed, "
                     "`run_dir` and swept fields).")
    if unread:
        lines += ["", f"- note: no member's config.yaml could be read in {', '.join(unread)}."]
    lines += ["", f"Each population's command ({POPULATION_FILE}):", ""]
    for src, name, doc in zip(run_dirs, names, docs):
        parts = [_md(part) for part in getattr(src, "names", ())] or [name]  # a pool's names raw, ``names`` shown already
        for d, part, doc in zip(parts_of(src), parts, _docs_of(src, doc)):
            command = _command_cell(doc.get("command"))
            lines.append(f"- {part}: {_code(command)}" if command else f"- {part}: command not recorded in {POPULATION_FILE}")
            lines += resume_lines(d, doc)
    return lines + [""]


def resume_lines(run_dir: Path, doc: dict) -> list:
    """The lines under a population's command in "## How they differ": each resume its members' meta.json record
    (``resumes``: step and command, once per command), the total they trained to when that is not the command's,
    and schedule_restarts's note where a resume recomputed the learning rate schedule, as the population's own
    report carries it; [] for a population never resumed."""
    from .report import _code, _command_cell
    from .rundir import _read_json_file

    dirs, configs, _ = member_configs(run_dir, doc)
    seen: dict = {}
    for d in dirs:
        meta = _read_json_file(d / "meta.json")
        resumes = meta.get("resumes") if isinstance(meta, dict) else None
        for r in resumes if isinstance(resumes, list) else []:
            if isinstance(r, dict) and _is_count(r.get("step")) and r.get("command"):
                seen.setdefault(_command_cell(r["command"]), r["step"])
    if not seen:
        return []
    total = doc.get("total_timesteps_per_member")
    lines = [f"  - resumed at step {step:,}: {_code(command)}" for command, step in sorted(seen.items(), key=lambda c: c[1])]
    if _is_count(total):
        lines.append(f"  - trained to {total:,} steps per member ({POPULATION_FILE}'s total_timesteps_per_member)")
    restarted = schedule_restarts(dirs, configs, total)
    if restarted:
        lines.append("  " + restarted)
    return lines


def populations_comparison(names: list, tables: list) -> dict:
    """Each (population, setting) row X against Y, the first population's best row (best_row), computed
    once for the combined report.md and its --json: {best (Y's index in the first table, or None),
    reference (Y's label or None), labels, cells (per row: compare_rows, {"p": None, "ref": True} for Y,
    {"p": None} with no Y), verdict (None when nothing is compared)}."""
    rows = [(name, r) for name, t in zip(names, tables) for r in t]
    b = best_row(tables[0])
    ref_name = row_label(names[0], tables[0][b]["settings"]) if b is not None else None
    labels = [row_label(name, r["settings"]) for name, r in rows]
    family = sum(_has_iqm(r) for _, r in rows)
    cells = [{"p": None} if b is None else {"p": None, "ref": True} if i == b else compare_rows(r, tables[0][b], family)
             for i, (_, r) in enumerate(rows)]
    compared = [(labels[i], c) for i, c in enumerate(cells) if b is not None and i != b]
    return {"best": b, "reference": ref_name, "labels": labels, "cells": cells,
            "verdict": verdict(ref_name, compared, ranked_text(tables[0], "first population's "), family)
            if ref_name and compared else None}


def render_populations(run_dirs: list, names: list, docs: list, tables: list, threshold: Optional[float],
                       episodes: Optional[int] = 0, comparison: Optional[dict] = None, again: Sequence[tuple] = ()) -> str:
    """The Markdown of build_populations_report: a line per population, one table, the notes
    (comparison: populations_comparison's, computed here when not given)."""
    from .report import _md

    shown_names = [_md(name) for name in names]  # the populations' folder names: shown, never rendered
    if comparison is None or shown_names != names:  # its labels and verdict name the populations too
        comparison = populations_comparison(shown_names, tables)
    names = shown_names
    rows = [(name, r) for name, t in zip(names, tables) for r in t]
    b, ref_name = comparison["best"], comparison["reference"]
    lines = [f"# Population report: {', '.join(names)}", ""]
    for d, name, doc, t in zip(run_dirs, names, docs, tables):
        lines.append(f"- {name}: {_first_line(d, doc, t)} {_sources_text(d, doc, t)}")
    whose = "first population's "
    compare = (f"P(X > Y) of each row X against Y = {ref_name} ({ranked_text(tables[0], whose)}) "
               f"is {POI_TEXT}; its 95% CIs: {POI_CI_METHOD}; none (\u2014) when either has fewer than {MIN_CI_MEMBERS} members."
               if ref_name else "P(X > Y): none, as no row of the first population has a final return.")
    labels = comparison["labels"]
    table = [f"| population | setting | members | mean | mean 95% CI | IQM | IQM 95% CI | "
             f">= {threshold if threshold is not None else 'threshold'} | P(X > Y) | P 95% CI |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    notes = not_ranked_notes(tables[0], labels[:len(tables[0])], b)
    dirs = {name: d for d, name in zip(run_dirs, names)}
    for (name, r), c, row in zip(rows, comparison["cells"], labels):
        if c.get("why"):
            notes.append(f"- {row}: not compared: {c['why']}.")
        poi = "Y (reference) | \u2014" if c.get("ref") else _poi_cells(c)
        table.append(f"| {name} | {setting_label(r['settings']) or '(seeds only)'} | {_row_cells(r)} | {poi} |")
        notes += _row_notes(dirs[name], r, row, threshold, episodes)
    if comparison["verdict"]:
        lines += ["", comparison["verdict"]]
    lines += ["", f"95% CIs: {CI_METHOD}; none (\u2014) for fewer than {MIN_CI_MEMBERS} members. {IQM_TEXT}. {compare}", "",
              *table]
    if any(r["few"] and r["mean_ci"] is not None for _, r in rows):
        notes.append(f"- \u2020 {FEW_MEMBERS_NOTE}.")
    if any(one_member(r) for _, r in rows):
        notes.append(f"- {ONE_MEMBER_NOTE}.")
    for name, t in zip(names, tables):
        steps_note = _steps_note(t, dirs[name])
        if steps_note:
            notes.append(steps_note.replace("- note:", f"- note: {name}:", 1))
    if notes:
        lines += [""] + notes
    lines += pooled_section(run_dirs, names)
    lines += more_seeds_section(lines, run_dirs, again)
    lines += ["", "Per population: `proxima report RUN`; per member: `proxima report RUN/<member dir>`.", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ several tasks (--normalize)
#: how the aggregate's intervals are made, as the report says it
STRATIFIED_CI_METHOD = (f"stratified percentile bootstrap, each task's runs resampled with replacement within that task, "
                        f"{BOOTSTRAP_RESAMPLES} resamples, numpy default_rng({BOOTSTRAP_SEED})")
AGGREGATE_TEXT = ("IQM: of all (run, task) scores pooled, floor(N/4) of the N dropped at each end; mean and median: over "
                  "tasks of each task's mean score; optimality gap: the mean over all scores of max(0, 1 - score), lower "
                  "is better (rliable's, Agarwal et al. 2021)")


def parse_score_ranges(specs) -> dict:
    """{env id: (low, high)} of --score-range's ``ENV=LOW:HIGH`` values (a list of str; None: none).
    ReportError, one line naming the value, for one not of that form, a LOW or HIGH that is not a finite
    number, LOW >= HIGH, or an env given two ranges."""
    from .report import ReportError

    ranges: dict = {}
    for spec in specs or []:
        env, eq, span = str(spec).rpartition("=")  # a module:Class env id holds ':' but no '='
        low, colon, high = span.partition(":")
        if eq and not env:
            raise ReportError(f"--score-range {spec}: no env id before '='; give ENV=LOW:HIGH (e.g. --score-range "
                              "Pendulum-v1=-1200:-200)")
        try:
            if not env or not eq or not colon:
                raise ValueError
            lo, hi = float(low), float(high)
        except ValueError:
            raise ReportError(f"--score-range {spec}: give ENV=LOW:HIGH, the returns that score 0 and 1 on env ENV "
                              "(e.g. --score-range Pendulum-v1=-1200:-200)") from None
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
            raise ReportError(f"--score-range {spec}: LOW and HIGH must be finite returns with LOW below HIGH")
        if ranges.get(env, (lo, hi)) != (lo, hi):
            raise ReportError(f"--score-range: env {env} is given two ranges ({ranges[env][0]:g}:{ranges[env][1]:g} and "
                              f"{lo:g}:{hi:g}); give one")
        ranges[env] = (lo, hi)
    return ranges


def task_ranges(names: list, env_ids: list, given: dict) -> list:
    """[(low, high, source)] per task: --score-range's (``given``), else aggregate.SCORE_RANGES's. ReportError
    for a --score-range of an env no population is of (a typo would otherwise be dropped unsaid), or a
    task with no range (names the flag to give)."""
    from .aggregate import BUILT_IN_SOURCE, SCORE_RANGES
    from .report import ReportError, _md

    for env in given:
        if env not in env_ids:
            raise ReportError(f"--score-range {env}=...: no population here is of env {env} (their envs: "
                              f"{', '.join(_md(e) for e in env_ids)})")
    out = []
    for name, env in zip(names, env_ids):
        if env in given:
            out.append((*given[env], "--score-range"))
        elif env in SCORE_RANGES:
            out.append((*SCORE_RANGES[env], BUILT_IN_SOURCE))
        else:
            raise ReportError(f"--normalize: no score range for env {_md(env)} ({name}): give --score-range {env}=LOW:HIGH, "
                              f"LOW a random policy's mean return (score 0) and HIGH a reference return (score 1); built in "
                              f"only for {', '.join(SCORE_RANGES)}, the envs with a Gymnasium reward_threshold")
    return out


def _check_tasks(names: list, docs: list, tables_settings: list) -> list:
    """The setting labels every population shares, in the first's order. ReportError (one line naming what
    differs) for an env id that is not text, two populations of one env, or populations whose settings differ."""
    from .report import ReportError, _md

    env_ids = [doc.get("env_id") for doc in docs]
    for name, env in zip(names, env_ids):
        if not isinstance(env, str) or not env:
            raise ReportError(f"{name}/{POPULATION_FILE}: records no env id; --normalize needs each population's env")
    for i, env in enumerate(env_ids):
        if env in env_ids[:i]:
            raise ReportError(f"--normalize takes one population per env id: {names[env_ids.index(env)]} and {names[i]} are "
                              f"both of {_md(env)} (report those two without --normalize to compare them)")
    labels = [[setting_label(s.settings) or "(seeds only)" for s in settings] for settings in tables_settings]
    for name, own in zip(names[1:], labels[1:]):
        for label in labels[0]:
            if label not in own:
                raise ReportError(f"these populations do not sweep the same settings: {_md(label)} in {names[0]}, not in "
                                  f"{name}; --normalize aggregates each setting over the tasks: give populations of one "
                                  "--sweep (or --seeds only)")
        for label in own:
            if label not in labels[0]:
                raise ReportError(f"these populations do not sweep the same settings: {_md(label)} in {name}, not in "
                                  f"{names[0]}; --normalize aggregates each setting over the tasks: give populations of "
                                  "one --sweep (or --seeds only)")
    return labels[0]


def tasks_aggregate(labels: list, ranges: list, tables: list) -> list:
    """One dict per setting label: settings, label, runs [n_t per task], members [per task], scores [per
    task: the normalized final returns used], missing [task indices without a return] and, when every task
    has one, aggregate.aggregate_statistics's fields and profile_curve (aggregate.profile_curve over one
    profile_grid of every aggregated setting's scores: the plot's curves share their taus); else those are absent."""
    from .aggregate import aggregate_statistics, normalize, profile_curve, profile_grid

    out = []
    for label in labels:
        rows = [next(r for r in t if (setting_label(r["settings"]) or "(seeds only)") == label) for t in tables]
        scores = [normalize(r["returns"], low, high) for r, (low, high, _) in zip(rows, ranges)]
        agg = {"label": label, "settings": rows[0]["settings"], "rows": rows, "runs": [r["n"] for r in rows],
               "members": [r["members"] for r in rows], "scores": scores,
               "missing": [i for i, s in enumerate(scores) if s.size == 0]}
        if not agg["missing"]:
            agg.update(aggregate_statistics(scores))
        out.append(agg)
    taus = profile_grid([a["scores"] for a in out if not a["missing"]])
    for a in out:
        if not a["missing"]:
            a["profile_curve"] = profile_curve(a["scores"], taus)
    return out


def _runs_cell(a: dict) -> str:
    """``5`` when every task used as many runs, else ``5 / 4 / 5`` in task order; ``(of 5 / 5 / 5)`` after when any were left out."""
    runs = a["runs"]
    cell = str(runs[0]) if len(set(runs)) == 1 else " / ".join(map(str, runs))
    if runs != a["members"]:
        cell += " (of " + (str(a["members"][0]) if len(set(a["members"])) == 1 else " / ".join(map(str, a["members"]))) + ")"
    return cell


def render_tasks(run_dirs: list, names: list, docs: list, ranges: list, tables: list, aggregates: list,
                 episodes: Optional[int], profile_plot: Optional[str] = None, again: Sequence[tuple] = ()) -> str:
    """The Markdown of build_tasks_report: a line per population, the score ranges, the aggregate table,
    the performance profile (its table, then ``profile_plot``: the plot's link and caption, or why none),
    a per-task table and the notes."""
    from .aggregate import BUILT_IN_SOURCE, PROFILE_TAUS
    from .report import _clip, _md

    names = [_md(name) for name in names]
    env_ids = [_md(_clip(doc.get("env_id"))) for doc in docs]
    lines = [f"# Tasks report: {', '.join(names)}", ""]
    for d, name, doc, t in zip(run_dirs, names, docs, tables):
        lines.append(f"- {name}: {_first_line(d, doc, t)} {_sources_text(d, doc, t)}")
    lines += ["", "Each run's final return R is scored (R - low) / (high - low) on its task's range:", "",
              "| task | population | low (score 0) | high (score 1) | range |", "|---|---|---|---|---|"]
    lines += [f"| {env} | {name} | {low:g} | {high:g} | {src} |" for env, name, (low, high, src) in zip(env_ids, names, ranges)]
    lines += ["", "## Aggregate over tasks", "",
              f"{AGGREGATE_TEXT}. 95% CIs: {STRATIFIED_CI_METHOD}; none (\u2014) where a task has fewer than "
              f"{MIN_CI_MEMBERS} runs.", "",
              "| setting | tasks | runs per task | IQM | IQM 95% CI | mean | mean 95% CI | median | median 95% CI | "
              "optimality gap | gap 95% CI |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    num = lambda v: f"{v:.3f}"  # noqa: E731
    for a in aggregates:
        label = _md(a["label"])
        if a["missing"]:
            lines.append(f"| {label} | {len(tables)} | {_runs_cell(a)} | " + " | ".join(["\u2014"] * 8) + " |")
            notes.append(f"- {label}: not aggregated: no final return on {', '.join(env_ids[i] for i in a['missing'])} "
                         "(every member left out: see the per-task notes); an aggregate over the other tasks would "
                         "read as one over all.")
            continue
        cells = " | ".join(f"{num(a[k])} | {ci_cell(a[k + '_ci'], a['few'], digits=3)}"
                           for k in ("iqm", "mean", "median", "optimality_gap"))
        lines.append(f"| {label} | {len(tables)} | {_runs_cell(a)} | {cells} |")
        if len(set(a["runs"])) > 1:
            notes.append(f"- {label}: the tasks have different numbers of runs ({_runs_cell(a)}): the pooled IQM, "
                         "optimality gap and profile weigh a task by its runs; the mean and median weigh each alike.")
    short = {BUILT_IN_SOURCE: "built in: a random policy's mean / Gymnasium's reward_threshold"}
    lines += ["", "Scored on: " + "; ".join(f"{env} {low:g} to {high:g} ({short.get(src, src)})"
                                            for env, (low, high, src) in zip(env_ids, ranges))
              + ". Scores are not clipped (above 1: above the reference); only the gap counts a score above 1 as 1."]
    lines += ["", "### Performance profile", "",
              "The fraction of all (run, task) scores above tau (rliable's run-score distribution), its 95% CI as above:", "",
              "| setting | " + " | ".join(f"> {tau:g}" for tau in PROFILE_TAUS) + " |",
              "|---|" + "---|" * len(PROFILE_TAUS)]
    for a in aggregates:
        if a["missing"]:
            continue
        lines.append(f"| {_md(a['label'])} | " + " | ".join(
            f"{p['fraction']:.2f} {ci_cell(p['ci'], a['few'], digits=2)}" for p in a["profile"]) + " |")
    if profile_plot:
        lines += ["", profile_plot]
    lines += ["", "### Per task", "", "| task | setting | runs | IQM return | IQM score | mean score |", "|---|---|---|---|---|---|"]
    from .aggregate import normalize

    for d, name, env, t, (low, high, _) in zip(run_dirs, names, env_ids, tables, ranges):
        for r in t:
            label = setting_label(r["settings"]) or "(seeds only)"
            used = f"{r['n']} of {r['members']}" if r["n"] < r["members"] else f"{r['members']}"
            score = lambda v: "\u2014" if v is None else num(float(normalize(v, low, high)))  # noqa: E731
            lines.append(f"| {env} | {_md(label)} | {used} | {_fmt(r['iqm'])} | {score(r['iqm'])} | {score(r['mean'])} |")
            notes += _row_notes(d, r, f"{name}: {_md(label)}", None, episodes)
    if any(a.get("few") and a.get("iqm_ci") is not None for a in aggregates):
        notes.append(f"- \u2020 a task has fewer than {FEW_CI_MEMBERS} runs: {FEW_MEMBERS_NOTE}.")
    if notes:
        lines += [""] + notes
    lines += pooled_section(run_dirs, names)
    lines += more_seeds_section(lines, run_dirs, again)
    lines += ["", "Per population (its settings compared, its members): `proxima report RUN`.", ""]
    return "\n".join(lines)


def tasks_json(run_dirs: list, names: list, docs: list, ranges: list, tables: list, aggregates: list) -> dict:
    """The --json file of ``report A B --normalize``: kind "tasks", the numbers of report.md's tables."""
    from .aggregate import OPTIMALITY_GAMMA, PROFILE_TAUS
    from .report import json_document

    envs = [doc.get("env_id") for doc in docs]
    tasks = [{"env_id": env, "population": name, "dir": _spelled(d), **_pooled_json(d), "score_range": [low, high],
              "range_source": "--score-range" if src == "--score-range" else "built in"}
             for d, name, env, (low, high, src) in zip(run_dirs, names, envs, ranges)]
    rows = []
    for a in aggregates:
        row = {"setting": a["label"], "settings": a["settings"], "tasks": len(tables),
               "runs": {env: n for env, n in zip(envs, a["runs"])}, "members": {env: m for env, m in zip(envs, a["members"])},
               "not_aggregated": [envs[i] for i in a["missing"]] or None,
               "scores": {env: s.tolist() for env, s in zip(envs, a["scores"])}}
        for k in ("iqm", "mean", "median", "optimality_gap"):
            row[k], row[f"{k}_ci"] = a.get(k), _ci_json(a.get(f"{k}_ci"))
        row["few"] = a.get("few")
        row["profile"] = [{"tau": p["tau"], "fraction": p["fraction"], "ci": _ci_json(p["ci"])} for p in a.get("profile", [])]
        row["profile_curve"] = a.get("profile_curve")  # the plot's grid: {tau, fraction, ci_low, ci_high}, to redraw it
        rows.append(row)
    body = {"tasks": tasks, "ci": {"level": CI_LEVEL, "method": STRATIFIED_CI_METHOD}, "gamma": OPTIMALITY_GAMMA,
            "taus": list(PROFILE_TAUS), "rows": rows,
            "per_task": [{"env_id": env, "population": name, **row_json(r)} for env, name, t in zip(envs, names, tables) for r in t]}
    return json_document("tasks", body)


def _profile_path(report: Path) -> Path:
    """The tasks report's performance-profile image, named after it as its curve is (report._curve_path):
    agg.md: agg_profile.png beside it."""
    return report.with_name(report.stem + "_profile.png")


def profile_figure(aggregates: list, env_ids: list):
    """The matplotlib Figure (Agg canvas, not saved) of the aggregated settings' profile_curve: a step curve
    per setting of the fraction of (run, task) scores > tau, its pointwise 95% CI shaded where it has one, a
    dashed line at tau = 1; ``plot.draw_panels``'s look (colours by plot.curve_styles, every text drawn as
    written). The x-axis spans the whole grid, an outlier's too: a cut at percentiles of the scores cuts
    nothing at the tens of runs a report pools (the 99th of 50 is about the highest), and a cut that did would
    hide where settings part above the reference; every score is a tau, so the curve stays exact however
    squeezed, and --json's profile_curve redraws any range."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from .plot import curve_styles, drawable, fit_texts, wrap_title

    drawn = [a for a in aggregates if not a["missing"]]
    fig = Figure(figsize=(6.4, 4.2), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    renderer = fig.canvas.get_renderer()
    ax = fig.subplots()
    for a, style in zip(drawn, curve_styles(len(drawn))):
        c = a["profile_curve"]
        line, = ax.step(c["tau"], c["fraction"], where="post", lw=1.8, label=drawable(a["label"]), **style)
        if c["ci_low"] is not None:
            ax.fill_between(c["tau"], c["ci_low"], c["ci_high"], step="post", color=line.get_color(), alpha=0.25, lw=0)
    ax.axvline(1.0, color="0.3", linestyle="--", lw=1, label="tau = 1 (reference)")
    ax.set_ylim(-0.02, 1.02)
    full = drawable(f"Performance profile over {len(env_ids)} tasks: {', '.join(env_ids)}")
    ax.set_title(wrap_title(full), parse_math=False)  # for the first layout: fitted to the axes after it
    ax.set_xlabel("normalized score tau", parse_math=False)
    ax.set_ylabel("fraction of runs with score > tau", parse_math=False)
    ax.grid(True, alpha=0.3)
    fig.get_layout_engine().execute(fig)  # the axes' width is what the title and legend fit, as draw_panels' panels
    below = fit_texts(ax, renderer, full, [], {}, (0, 1))
    if below:  # the axes keep their height: the figure grows by a legend drawn below them
        fig.set_size_inches(fig.get_figwidth(), fig.get_figheight() + below / fig.dpi)
    return fig


def draw_profile(staging, out: Path, env_ids: list, aggregates: list) -> str:
    """Draw profile_figure to a temporary of ``staging`` for _profile_path(out) (renamed into place with
    report.md, or not at all); the Markdown that goes under the profile table: the image's link and its
    caption, or why there is no plot (no setting aggregated, a disk full: the report is still written,
    as report.draw_curve leaves out a curve), the earlier image then left as it was."""
    from .atomic import atomic_open
    from .diskspace import describe, path_problem
    from .plot import DEFAULT_DPI
    from .report import _md, image_link

    drawn = [a for a in aggregates if not a["missing"]]
    if not drawn:
        return "No performance-profile plot: no setting is aggregated (each has a task without a final return)."
    image = _profile_path(out)
    problem = path_problem(image)
    if problem:
        return f"No performance-profile plot: {image}: {problem}"
    try:
        tmp = staging.reserve(image)
        with atomic_open(tmp, "wb") as f:
            profile_figure(aggregates, env_ids).savefig(f, format="png", dpi=DEFAULT_DPI)
    except OSError as e:  # the folder read-only, the disk full
        staging.drop(image)
        return f"No performance-profile plot: {describe(image, e)}"
    except (ValueError, OverflowError, RuntimeError) as e:  # matplotlib could not draw it
        staging.drop(image)
        why = ([ln.strip() for ln in str(e).splitlines() if ln.strip()] or [type(e).__name__])[-1]
        return f"No performance-profile plot: {image}: could not draw it ({why})"
    taus = drawn[0]["profile_curve"]["tau"]
    link = image_link(Path(os.path.relpath(image.resolve(), out.parent.resolve())).as_posix())
    caption = (f"The profile at {taus.size} taus from {taus[0]:g} to {taus[-1]:g} (the table's among them): per setting "
               "a step curve of the fraction of all (run, task) scores above tau, its pointwise 95% CI shaded (the "
               "table's stratified bootstrap, the same resamples); dashed: tau = 1, the reference. `--json` gives each "
               "row's `profile_curve` to redraw it.")
    bare = [_md(a["label"]) for a in drawn if a["profile_curve"]["ci_low"] is None]
    if bare:
        caption += f" No band: {', '.join(bare)} (a task with fewer than {MIN_CI_MEMBERS} runs)."
    skipped = [_md(a["label"]) for a in aggregates if a["missing"]]
    if skipped:
        caption += f" Not drawn: {', '.join(skipped)} (not aggregated: a task without a final return)."
    return (f"![performance profile: the fraction of (run, task) scores above tau per setting, with a pointwise 95% "
            f"stratified-bootstrap CI]({link})\n\n{caption}")


def build_tasks_report(run_dirs, out=None, score_ranges=None, threshold: Optional[float] = None,
                       metric: str = "charts/episodic_return", x: str = "step", smooth: int = 1,
                       episodes: Optional[int] = 0, device: str = "cpu", quiet: bool = True, json_out=None) -> Path:
    """``proxima report A B ... --normalize --out FILE.md``: populations of different env ids (tasks), one per
    env, of the same settings, each setting aggregated over the tasks as rliable does (aggregate.py): every
    member's final return normalized on its task's range (--score-range ``score_ranges``, else
    aggregate.SCORE_RANGES), then IQM, mean, median and optimality gap with stratified-bootstrap 95% CIs,
    and a performance profile: a table, and its plot (draw_profile) beside report.md. ReportError (one line, nothing written, no member evaluated) for an env
    without a range, two populations of one env, settings that differ, or different kinds of final return."""
    from .plot import UnknownMetric
    from .report import ReportError, _md, check_device, check_json_out, check_out

    run_dirs = [d if isinstance(d, Pool) else Path(d) for d in run_dirs]
    flat = [d for src in run_dirs for d in parts_of(src)]
    if out is None:
        raise ReportError("--normalize: give --out FILE.md for the report over the tasks")
    out = Path(out)
    check_out(out)
    if json_out is not None:
        check_json_out(Path(json_out), flat)
    if threshold is not None:  # a return of one env: no one threshold holds for all tasks
        raise ReportError(f"--threshold {threshold:g}: a return of one env, not of several tasks; with --normalize the "
                          "performance profile gives the fraction of runs above normalized scores 0.25 to 1")
    given = parse_score_ranges(score_ranges)
    names = source_names(run_dirs)
    docs, settings = [], []
    for d in run_dirs:
        try:
            settings.append(settings_of(d))  # a broken population.json: its own line, before any member is evaluated
            docs.append(_docs_of(d)[0])
        except (PopulationError, OSError, ValueError) as e:
            raise ReportError(with_advice(e)) from None
    labels = _check_tasks(names, docs, settings)
    ranges = task_ranges(names, [doc["env_id"] for doc in docs], given)
    if (metric, x, smooth) != ("charts/episodic_return", "step", 1):
        for d in flat:
            try:
                check_population_metric(d, metric)
            except UnknownMetric as e:
                raise ReportError(str(e)) from None
    check_device(device, episodes)
    tables = [summarize_settings(d, None, episodes, device, quiet) for d in run_dirs]
    problem = _differs(names, [_measure(rows)["final return"] for rows in tables], "final return")
    if problem:  # a deterministic evaluation and a stochastic training return are not one score
        raise ReportError(f"these populations do not measure the same: {problem}; give every population eval.json "
                          "files (`proxima eval RUN`) or --episodes N")
    aggregates = tasks_aggregate(labels, ranges, tables)

    def text(staging) -> str:
        plot = draw_profile(staging, out, [_md(doc.get("env_id")) for doc in docs], aggregates)
        return render_tasks(run_dirs, names, docs, ranges, tables, aggregates, episodes, plot,
                            report_flags(None, episodes, score_ranges, normalize=True))

    return _write_with_curves(out, json_out, run_dirs, text, tables, metric, x, smooth, "task",
                              lambda: tasks_json(run_dirs, names, docs, ranges, tables, aggregates), quiet=quiet)
