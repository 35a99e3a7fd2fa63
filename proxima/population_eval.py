"""``proxima eval RUN`` on a population (population_run.py): every member, then statistics per setting.

Each member is evaluated as ``proxima eval RUN/<member dir>`` would evaluate it: its newest
checkpoint (``--best``: its ``checkpoints/best.pt``, which no member has while populations refuse
--eval-every), env seed = its own config's seed + 1,000,000
(the end-of-training evaluation's) unless ``seed`` is given, ``episodes`` episodes, one per env (None:
each member's own --eval-episodes, report.run_eval_episodes, so eval measures what the members'
eval.json and ``proxima report`` measured).
Per setting (one combination of swept values; all its seeds) the members' mean returns are summed
up as their mean and interquartile mean with 95% bootstrap intervals (population_report.member_statistics:
the same statistics as ``proxima report``; a NaN or infinite mean return is left out and named, no
interval for fewer than 2 members, a flagged one for fewer than 5). Every member's checkpoint is looked for and
loaded (load_checkpoint's checks: truncated, edited, NaN weights or statistics) before any is evaluated,
so a member without one, or with one that does not load, is left out before any evaluation, named with
why in its setting's left_out (as ``proxima report`` leaves it out), and the others are evaluated (a
population none of whose members has one: one line saying why, as ``proxima report`` says it: every
member diverged before the first, the population stopped before its first, or is still training
towards it; none of whose checkpoints loads: the first member's line).
A population still training removes its members' older checkpoints as it writes new ones
(--keep-checkpoints): a member's checkpoint gone by the time it is read is replaced by its newest
then, as ``proxima eval RUN/<member dir>`` reads a live run, and its row names the file evaluated
and its step; the members of a population still training can so be of different steps, which the
summary says under its lines. A setting's line also says how many of the members it counts had
episodes cut at ``--max-steps`` (counted with their return so far, as each member's line says).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional


from .checkpoint import _NAME as STEP_FILE
from .checkpoint import CheckpointError, best_checkpoint_path, list_checkpoints, no_checkpoint_error
from .config import MAX_EVAL_STEPS
from .population_report import (BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CI_LEVEL, FEW_MEMBERS_NOTE, PopulationError, ci_cell,
                                different_steps_note, every_member_diverged, member_statistics, read_settings, with_advice)
from .terminal import printable

#: a population of seeds only (no --sweep) has one setting with no values to name: its line says so in
#: the members' count (the report's table names it "(seeds only)")
SEEDS_ONLY = "seeds only"


def member_checkpoint(member_dir: Path, best: bool = False) -> Path:
    """The checkpoint to evaluate for a member: its newest ``step_*.pt`` (or best.pt); CheckpointError naming the member."""
    if best:
        path = best_checkpoint_path(member_dir)
        if not path.is_file():
            raise CheckpointError(f"{member_dir}: member has no checkpoints/best.pt (a population's members have none: "
                                  "--eval-every, which writes it, is refused for populations); evaluate without --best")
        return path
    ckpts = list_checkpoints(member_dir)
    if not ckpts:
        raise CheckpointError(f"{member_dir}: member has no checkpoint (checkpoints/step_*.pt) to evaluate")
    return ckpts[-1]


def _left_out_why(member_dir: Path, error: Exception) -> str:
    """The reason a member is left out, as its setting's left_out holds it: the error's line less the
    member's own directory (``checkpoints/step_N.pt: truncated checkpoint ...``, ``no checkpoint ...``),
    which the row names beside it."""
    line = str(error)
    for prefix in (f"{member_dir}{os.sep}", f"{member_dir}: "):
        if line.startswith(prefix):
            return line[len(prefix):].removeprefix("member has ")
    return line


def _or_newest(load, path: Path, member_dir: Path, best: bool, **kw):
    """``load(path, **kw)``; when ``path`` is gone since it was listed (a population still training
    rotates its members' checkpoints: --keep-checkpoints), ``load(member_dir)``: the member's newest
    then, read as ``proxima eval RUN/<member dir>`` reads it (checkpoint._load_newest, which retries
    a file that vanishes under it). A file that is there but does not load stays an error: an older
    one is never evaluated in its place. best.pt is replaced in place, never removed: not retried."""
    try:
        return load(path, **kw)
    except CheckpointError:
        if best or os.path.lexists(path):
            raise
    return load(member_dir, **kw)


def _single_run_line(run_dir: Path) -> Optional[str]:
    """The line for a single run's directory (a config.yaml or checkpoints/, no population.json), a
    population's member's included, given where a population's is expected; None for any other."""
    from .population_run import POPULATION_FILE, is_population_dir

    if is_population_dir(run_dir) or not ((run_dir / "config.yaml").is_file() or (run_dir / "checkpoints").is_dir()):
        return None
    here = repr(str(run_dir))
    if is_population_dir(run_dir.parent):  # one member's folder: the population is its parent
        return (f"{run_dir}: one member of the population {run_dir.parent}, not a population (no {POPULATION_FILE}): "
                f"evaluate_population({str(run_dir.parent)!r}) evaluates every member, "
                f"proxima.evaluate(proxima.load({here})) this one")
    return (f"{run_dir}: a single run, not a population (a run directory with no {POPULATION_FILE}): evaluate it with "
            f"proxima.evaluate(proxima.load({here}))")


def _no_member_checkpoint(run_dir: Path, settings: list) -> Optional[str]:
    """The line for a population none of whose members has a checkpoint, else None. The first member's
    own line ("evaluate the others one by one") would send the user to members that have none either."""
    dirs = [d for s in settings for _, d in s.members]
    if not dirs or any(list_checkpoints(d) for d in dirs):
        return None
    why = every_member_diverged(run_dir, settings, " before the first checkpoint")
    if why is None:  # stopped before its first checkpoint, or still training towards it: the report's words
        first = dirs[0]
        line = str(no_checkpoint_error(first))
        # those lines speak of "the population"/"the run"; any other (a damaged member) stays the member's own
        why = line.removeprefix(f"{first}: ") if line.startswith(f"{first}: the ") else f"the first, {line}"
    return f"{run_dir}: no member has a checkpoint to evaluate: {why}"


def _step_of(path: Path, known: dict) -> Optional[int]:
    """The global step of the checkpoint ``path``: the one its load recorded (``known``), else the one
    its name holds (a member's newest, read in place of one rotated away since it was checked)."""
    if path in known:
        return known[path]
    named = STEP_FILE.match(path.name)
    return int(named.group(1)) if named else None


def evaluate_population(run_dir, episodes: Optional[int] = None, deterministic: bool = True, seed: Optional[int] = None,
                        device="cpu", backend: Optional[str] = None, env_id: Optional[str] = None, trust_env: bool = False,
                        best: bool = False, on_member: Optional[Callable[[dict], None]] = None, max_steps: Optional[int] = None,
                        env_kwargs: Optional[dict] = None, on_left_out: Optional[Callable[[Path, str], None]] = None) -> dict:
    """Evaluate every member of the population at ``run_dir``; ``on_member(row)`` is called as each finishes.
    ``env_kwargs`` replaces the members' recorded env kwargs (as ``proxima eval --env-kwargs`` for one run).
    A member whose checkpoint is missing or does not load is left out, named with why in its setting's
    ``left_out`` (``on_left_out(member_dir, why)`` is called for it before any member is evaluated); the
    others are evaluated.

    ``episodes``: per member (None: each member's own --eval-episodes, 10 where that is 0).

    Returns dict(run_dir, env_id, episodes (the members' count; None if they differ), deterministic,
    max_steps, eval_seed (``seed`` as given; None: each member's own), backend (the one built for every
    member; None if they differ), members, settings): ``members`` is one
    row per member, setting by setting (population.json's order, which population_run writes
    setting by setting): dir, seed (the member's training seed), settings, checkpoint (the file evaluated),
    global_step (its step), eval_seed (the env seed its evaluation used) and the other fields of
    evaluate.evaluate (mean_return, std_return, returns, lengths, backend, max_steps, ...); ``settings`` is one row per
    setting: settings, label, members (their dirs), mean_returns (None for a member left out unevaluated),
    and member_statistics's fields over those (n: the members used, left_out: [dir, why] of a NaN or
    infinite one, a diverged one, or one whose checkpoint is missing or does not load; mean_ci/iqm_ci None for
    n < 2; few: n < 5), with the interval's resamples, level, rng, ci_note (the n < 5 caveat, else None) and
    cut_members (how many of the n members used had episodes cut at ``max_steps``, counted with their
    return so far). Raises PopulationError for a broken population.json or a missing member directory,
    CheckpointError saying why no member has a checkpoint, or, when no member's loads, naming the first
    member's problem (all before any member is evaluated), NonFiniteError naming
    the member's directory, the env and the step when its env returns NaN/inf during its evaluation
    (evaluate.first_episodes).
    """
    from .checkpoint import check_registered, load_checkpoint, load_policy
    from .evaluate import default_seed, evaluate
    from .guards import NonFiniteError
    from .report import run_eval_episodes

    run_dir = Path(run_dir)
    single = _single_run_line(run_dir)
    if single is not None:
        raise PopulationError(single)
    try:
        settings = read_settings(run_dir)
    except PopulationError as e:  # a missing member folder: with what to do, as resume says it
        raise PopulationError(with_advice(e)) from None
    nothing = _no_member_checkpoint(run_dir, settings)
    if nothing:
        raise CheckpointError(nothing)
    checkpoints, steps, damaged = {}, {}, {}
    # each one loads before any member is evaluated: a damaged one (or one without a checkpoint) is left
    # out, named, as proxima report leaves it out, and costs no evaluation of the others; read again
    # below rather than held: P members' weights at once may not fit
    for d in (d for s in settings for _, d in s.members):
        try:
            state = _or_newest(load_checkpoint, member_checkpoint(d, best), d, best)
        except CheckpointError as e:
            damaged[d] = e
            continue
        checkpoints[d] = Path(state["path"])
        steps[checkpoints[d]] = int(state["global_step"])
    if damaged and not checkpoints:  # nothing to evaluate: the first member's own line (--best: "evaluate without --best")
        raise next(iter(damaged.values()))
    for d, e in damaged.items():
        if on_left_out is not None:
            on_left_out(d, _left_out_why(d, e))
    rows = {}
    for s in settings:
        for member_seed, d in s.members:
            if d in damaged:
                continue
            policy = _or_newest(load_policy, checkpoints[d], d, best, device=device, env_id=env_id, trust_env=trust_env,
                                env_kwargs=env_kwargs)
            check_registered(policy)  # the first member's, before any evaluation: the --env MODULE:ID to give
            # a single run's default (the member's seed + 1,000,000), whose episodes episode_seeds derives from it:
            # consecutive members' seeds then share no evaluation start state
            eval_seed = seed if seed is not None else default_seed(policy)
            count = episodes if episodes is not None else run_eval_episodes(d, policy.config)
            try:
                result = evaluate(policy, episodes=count, deterministic=deterministic, seed=eval_seed,
                                  backend=backend or policy.config.get("backend", "auto"),
                                  **({} if max_steps is None else {"max_steps": max_steps}))
            except NonFiniteError as e:  # the env's NaN/inf, not the member's: the line says whose evaluation met it
                raise NonFiniteError(f"{d}: {e}") from None
            # "seed" stays the member's training seed, as population.json names it; the evaluation's is eval_seed
            rows[d] = {"dir": d.name, "seed": member_seed, "settings": s.settings, "checkpoint": str(policy.path),
                       "global_step": _step_of(Path(policy.path), steps), "eval_seed": eval_seed,
                       **{k: v for k, v in result.items() if k != "seed"}}
            if d.name in s.diverged:  # evaluated as asked (its last finite weights), but no result of training
                rows[d]["diverged"] = s.diverged[d.name]
            if on_member is not None:
                on_member(rows[d])
    summaries = []
    for s in settings:
        names = [d.name for _, d in s.members]
        means = [None if d in damaged else float(rows[d]["mean_return"]) for _, d in s.members]
        # a diverged member, or one whose checkpoint is missing or does not load: left out, named
        excluded = {**s.diverged, **{d.name: _left_out_why(d, e) for _, d in s.members if (e := damaged.get(d))}}
        stats = member_statistics(names, means, excluded=excluded)
        stats.pop("members"), stats.pop("solved"), stats.pop("solved_count")
        left = {name for name, _ in stats["left_out"]}
        # a cut episode's return so far is in its member's mean, so in the summary: said there too
        cut = sum(1 for _, d in s.members if d.name not in left and rows[d].get("unfinished"))
        summaries.append({"settings": s.settings, "label": s.label, "members": names, "mean_returns": means, **stats,
                          "resamples": BOOTSTRAP_RESAMPLES, "level": CI_LEVEL, "rng": f"numpy default_rng({BOOTSTRAP_SEED})",
                          "ci_note": FEW_MEMBERS_NOTE if stats["few"] and stats["mean_ci"] is not None else None,
                          "cut_members": cut})
    members = list(rows.values())
    counts = {m["episodes"] for m in members}
    if episodes is None:  # the members' own: one count, unless their configs were made to differ
        episodes = counts.pop() if len(counts) == 1 else None
    backends = {m.get("backend") for m in members}
    given = [m.get("env_kwargs") for m in members]  # --env-kwargs: each row's (evaluate's given_env_kwargs), said once
    shared = {"env_kwargs": given[0]} if given and isinstance(given[0], dict) and all(g == given[0] for g in given) else {}
    # a single run's eval --json names "seed" and "backend": the same names here, at the top, where one
    # value holds for every member (null: each member's own, its row's eval_seed and backend say which)
    return {"run_dir": str(run_dir), "env_id": members[0]["env_id"] if members else None, "episodes": episodes,
            "deterministic": deterministic, "max_steps": MAX_EVAL_STEPS if max_steps is None else max_steps,
            "eval_seed": seed, "backend": backends.pop() if len(backends) == 1 else None,
            **shared, "members": members, "settings": summaries}


def format_member(row: dict) -> str:
    """``m000-seed1-lr0.001: 500.00 +- 0.00 at step 29,952 over 10 episodes (deterministic)``."""
    mode = "deterministic" if row["deterministic"] else "stochastic"
    frozen = f"; {row['diverged']}: its last finite weights, left out of the statistics" if row.get("diverged") else ""
    step = row.get("global_step")
    # members of a population still training may be of different steps: each line says which it is
    at = f" at step {step:,}" if isinstance(step, int) and not isinstance(step, bool) else ""
    from .evaluate import episodes_words, unfinished_note

    return printable(f"{row['dir']}: {row['mean_return']:.2f} +- {row['std_return']:.2f}{at} over {episodes_words(row['episodes'])} "
                     f"({mode}{frozen})" + unfinished_note(row))


def format_summary(result: dict) -> str:
    """One line per setting: its members' mean and IQM of their mean returns, each with its 95% CI
    ("—" for fewer than 2 members, "†" for fewer than 5, explained in a later line); members left out
    named, and how many of those counted had episodes cut at --max-steps. A last line when the members
    were evaluated at different steps."""
    import json

    lines = []
    num = lambda v: "\u2014" if v is None else f"{v:.2f}"  # noqa: E731
    given = result.get("env_kwargs")  # --env-kwargs in place of the recorded ones, as a single run's eval line says them
    kwargs = f" (env kwargs {json.dumps(given, default=repr)})" if isinstance(given, dict) else ""
    for s in result["settings"]:
        m = len(s["members"])
        noun = "member" if m == 1 else "members"
        used = f"{s['n']} of {m} {noun}" if s["n"] < m else f"{m} {noun}"
        # a swept setting is named before the count; seeds only go inside its parentheses, not in a second pair
        name, used = (s["label"], used) if s["label"] else ("", f"{used}, {SEEDS_ONLY}")
        left = "; left out: " + ", ".join(f"{d} ({why})" for d, why in s["left_out"]) if s["left_out"] else ""
        lines.append(f"{result['env_id']}{kwargs} {name + ' ' if name else ''}({used}): mean {num(s['mean'])} {ci_cell(s['mean_ci'], s['few'], 2)}, "
                     f"IQM {num(s['iqm'])} {ci_cell(s['iqm_ci'], s['few'], 2)} (95% percentile-bootstrap CIs over members, "
                     f"{s['resamples']} resamples, {s['rng']}){left}{_cut_note(s, result.get('max_steps'))}")
    if any(s["few"] and s["mean_ci"] is not None for s in result["settings"]):
        lines.append(f"\u2020 {FEW_MEMBERS_NOTE}")
    # a population read while training: its settings compare unequal training
    steps = different_steps_note([m.get("global_step") for m in result.get("members", [])], "each member's line says its own")
    if steps:
        lines.append(f"note: {steps}")
    counts = [m.get("episodes") for m in result.get("members", [])]
    counts = [c for c in counts if isinstance(c, int) and not isinstance(c, bool)]
    if counts and min(counts) != max(counts):  # members' own --eval-episodes made to differ: one kind per line, said
        lines.append(f"note: the members' evaluations ran different numbers of episodes ({min(counts):,}-{max(counts):,}; "
                     "each member's own --eval-episodes, each member's line says its count); --episodes N runs N for all")
    # the env id is the checkpoint's and a setting population.json's: as every line naming a run's value, escaped
    return "\n".join(printable(line) for line in lines)


def _cut_note(setting: dict, max_steps: Optional[int]) -> str:
    """``; 2 of the 3 members counted had episodes cut at 100 steps (--max-steps), with their return so far``; "" for none."""
    k, n = setting.get("cut_members"), setting["n"]
    if not k:
        return ""
    where = (f"at {max_steps:,} steps (--max-steps)" if isinstance(max_steps, int) and not isinstance(max_steps, bool)
             else "at --max-steps")
    who = ("its one member counted" if n == 1 else f"all {n} members counted" if k == n
           else f"{k} of the {n} members counted")
    return f"; {who} had episodes cut {where}, with their return so far"


def cmd_eval_population(args, device, env_kwargs: Optional[dict] = None, out=None) -> int:
    """``proxima eval RUN`` for a population (called by cli.cmd_eval, which turns errors into one line):
    a line per member as it finishes and a line per setting, or with ``--json`` one JSON object (strict:
    a NaN or infinite number, such as a member's mean return left out of the statistics, is null),
    printed to ``out`` (None: sys.stdout; cli.cmd_eval's real stdout under --json)."""
    import json

    from .config import ConfigError

    if args.video:
        import shlex

        from .signals import env_flag

        # what lets the member's module:Class env be built: as typed here, else the --env it needs
        env = (f"--env {shlex.quote(args.env)} " if args.env else "--trust-run " if args.trust_run
               else env_flag(Path(args.path)))
        raise ConfigError(f"--video: {args.path} is a population; record one member: proxima eval {env}"
                          f"{args.path}/<member dir> --video {shlex.quote(args.video)}")
    import sys

    progress = None if args.json else lambda row: print(format_member(row), flush=True)  # a line as each member finishes

    def left_out(member_dir: Path, why: str) -> None:  # on stderr: stdout may be --json's one object
        print(printable(f"proxima: note: {member_dir}: left out, not evaluated: {why}; the other members are evaluated"),
              file=sys.stderr, flush=True)

    result = evaluate_population(args.path, episodes=args.episodes, deterministic=not args.stochastic, seed=args.seed,
                                 device=device, backend=args.backend, env_id=args.env, trust_env=args.trust_run,
                                 best=args.best, on_member=progress, max_steps=getattr(args, "max_steps", None),
                                 env_kwargs=env_kwargs, on_left_out=left_out)
    # strict JSON (no bare NaN/Infinity, which most parsers refuse): a non-finite number is null, its
    # member named with why ("inf") in its setting's left_out
    from .evaluate import json_numbers

    print(json.dumps(json_numbers(result), allow_nan=False) if args.json else format_summary(result), file=out)
    return 0
