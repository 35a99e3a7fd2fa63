"""``proxima eval RUN`` on a population (population_run.py): every member, then statistics per setting.

Each member is evaluated as ``proxima eval RUN/<member dir>`` would evaluate it: its newest
checkpoint (``--best``: its ``checkpoints/best.pt``, which no member has while populations refuse
--eval-every), env seed = its own config's seed + 1,000,000
(the end-of-training evaluation's) unless ``seed`` is given, ``episodes`` episodes, one per env.
Per setting (one combination of swept values; all its seeds) the members' mean returns are summed
up as their mean and interquartile mean with 95% bootstrap intervals (population_report.member_statistics:
the same statistics as ``proxima report``; a NaN or infinite mean return is left out and named, no
interval for fewer than 2 members, a flagged one for fewer than 5). Every member's checkpoint is looked for and
loaded (load_checkpoint's checks: truncated, edited, NaN weights or statistics) before any is evaluated,
so a member without one, or with one that does not load, costs one line and no wasted evaluation
(a population whose every member diverged before its first checkpoint: one line saying so).
A population still training removes its members' older checkpoints as it writes new ones
(--keep-checkpoints): a member's checkpoint gone by the time it is read is replaced by its newest
then, as ``proxima eval RUN/<member dir>`` reads a live run, and its row names the file evaluated.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional


from .checkpoint import CheckpointError, best_checkpoint_path, list_checkpoints
from .population_report import (BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CI_LEVEL, FEW_MEMBERS_NOTE, ci_cell,
                                every_member_diverged, member_statistics, read_settings)


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
        raise CheckpointError(f"{member_dir}: member has no checkpoint (checkpoints/step_*.pt) to evaluate; evaluate "
                              "the others one by one: proxima eval RUN/<member dir>")
    return ckpts[-1]


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


def evaluate_population(run_dir, episodes: int = 10, deterministic: bool = True, seed: Optional[int] = None,
                        device="cpu", backend: Optional[str] = None, env_id: Optional[str] = None, trust_env: bool = False,
                        best: bool = False, on_member: Optional[Callable[[dict], None]] = None, max_steps: Optional[int] = None,
                        env_kwargs: Optional[dict] = None) -> dict:
    """Evaluate every member of the population at ``run_dir``; ``on_member(row)`` is called as each finishes.
    ``env_kwargs`` replaces the members' recorded env kwargs (as ``proxima eval --env-kwargs`` for one run).

    Returns dict(run_dir, env_id, episodes, deterministic, members, settings): ``members`` is one
    row per member, setting by setting (population.json's order, which population_run writes
    setting by setting): dir, seed, settings, checkpoint (the file evaluated), eval_seed and the fields of
    evaluate.evaluate (mean_return, std_return, returns, lengths, ...); ``settings`` is one row per
    setting: settings, label, members (their dirs), mean_returns, and member_statistics's fields over
    those (n: the members used, left_out: [dir, why] of a NaN or infinite one; mean_ci/iqm_ci None for
    n < 2; few: n < 5), with the interval's resamples, level, rng and ci_note (the n < 5 caveat, else None). Raises PopulationError for a broken population.json or a missing member directory,
    CheckpointError naming the member without a checkpoint or the checkpoint that does not load (both
    before any member is evaluated), NonFiniteError naming the member's directory, the env and the
    step when its env returns NaN/inf during its evaluation (evaluate.first_episodes).
    """
    from .checkpoint import check_registered, load_checkpoint, load_policy
    from .evaluate import evaluate
    from .guards import NonFiniteError

    run_dir = Path(run_dir)
    settings = read_settings(run_dir)
    everyone = every_member_diverged(run_dir, settings, " before the first checkpoint")
    # the first member's "no checkpoint; evaluate the others" would send the user to others that have none
    if everyone and not any(list_checkpoints(d) for s in settings for _, d in s.members):
        raise CheckpointError(f"{run_dir}: no member has a checkpoint to evaluate: {everyone}")
    checkpoints = {d: member_checkpoint(d, best) for s in settings for _, d in s.members}
    # each one loads before any member is evaluated (a damaged one costs no evaluation of the others);
    # read again below rather than held: P members' weights at once may not fit
    for d, path in checkpoints.items():
        checkpoints[d] = Path(_or_newest(load_checkpoint, path, d, best)["path"])
    rows = {}
    for s in settings:
        for member_seed, d in s.members:
            policy = _or_newest(load_policy, checkpoints[d], d, best, device=device, env_id=env_id, trust_env=trust_env,
                                env_kwargs=env_kwargs)
            check_registered(policy)  # the first member's, before any evaluation: the --env MODULE:ID to give
            eval_seed = seed if seed is not None else int(policy.config["seed"]) + 1_000_000
            try:
                result = evaluate(policy, episodes=episodes, deterministic=deterministic, seed=eval_seed,
                                  backend=backend or policy.config.get("backend", "auto"),
                                  **({} if max_steps is None else {"max_steps": max_steps}))
            except NonFiniteError as e:  # the env's NaN/inf, not the member's: the line says whose evaluation met it
                raise NonFiniteError(f"{d}: {e}") from None
            rows[d] = {"dir": d.name, "seed": member_seed, "settings": s.settings, "checkpoint": str(policy.path),
                       "eval_seed": eval_seed, **result}
            if d.name in s.diverged:  # evaluated as asked (its last finite weights), but no result of training
                rows[d]["diverged"] = s.diverged[d.name]
            if on_member is not None:
                on_member(rows[d])
    summaries = []
    for s in settings:
        names, means = [d.name for _, d in s.members], [float(rows[d]["mean_return"]) for _, d in s.members]
        stats = member_statistics(names, means, excluded=s.diverged)  # a diverged member: left out, named
        stats.pop("members"), stats.pop("solved"), stats.pop("solved_count")
        summaries.append({"settings": s.settings, "label": s.label, "members": names, "mean_returns": means, **stats,
                          "resamples": BOOTSTRAP_RESAMPLES, "level": CI_LEVEL, "rng": f"numpy default_rng({BOOTSTRAP_SEED})",
                          "ci_note": FEW_MEMBERS_NOTE if stats["few"] and stats["mean_ci"] is not None else None})
    members = list(rows.values())
    return {"run_dir": str(run_dir), "env_id": members[0]["env_id"] if members else None, "episodes": episodes,
            "deterministic": deterministic, "members": members, "settings": summaries}


def format_member(row: dict) -> str:
    """``m000-seed1-lr0.001: 500.00 +- 0.00 over 10 episodes (deterministic)``."""
    mode = "deterministic" if row["deterministic"] else "stochastic"
    frozen = f"; {row['diverged']}: its last finite weights, left out of the statistics" if row.get("diverged") else ""
    from .evaluate import unfinished_note

    return (f"{row['dir']}: {row['mean_return']:.2f} +- {row['std_return']:.2f} over {row['episodes']} episodes ({mode}{frozen})"
            + unfinished_note(row))


def format_summary(result: dict) -> str:
    """One line per setting: its members' mean and IQM of their mean returns, each with its 95% CI
    ("—" for fewer than 2 members, "†" for fewer than 5, explained in a last line); members left out named."""
    lines = []
    num = lambda v: "\u2014" if v is None else f"{v:.2f}"  # noqa: E731
    for s in result["settings"]:
        name = s["label"] or "all seeds"
        m = len(s["members"])
        noun = "member" if m == 1 else "members"
        used = f"{s['n']} of {m} {noun}" if s["n"] < m else f"{m} {noun}"
        left = "; left out: " + ", ".join(f"{d} ({why})" for d, why in s["left_out"]) if s["left_out"] else ""
        lines.append(f"{result['env_id']} {name} ({used}): mean {num(s['mean'])} {ci_cell(s['mean_ci'], s['few'], 2)}, "
                     f"IQM {num(s['iqm'])} {ci_cell(s['iqm_ci'], s['few'], 2)} (95% percentile-bootstrap CIs over members, "
                     f"{s['resamples']} resamples, {s['rng']}){left}")
    if any(s["few"] and s["mean_ci"] is not None for s in result["settings"]):
        lines.append(f"\u2020 {FEW_MEMBERS_NOTE}")
    return "\n".join(lines)


def cmd_eval_population(args, device, env_kwargs: Optional[dict] = None) -> int:
    """``proxima eval RUN`` for a population (called by cli.cmd_eval, which turns errors into one line):
    a line per member as it finishes and a line per setting, or with ``--json`` one JSON object."""
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
    progress = None if args.json else lambda row: print(format_member(row), flush=True)  # a line as each member finishes
    result = evaluate_population(args.path, episodes=args.episodes, deterministic=not args.stochastic, seed=args.seed,
                                 device=device, backend=args.backend, env_id=args.env, trust_env=args.trust_run,
                                 best=args.best, on_member=progress, max_steps=getattr(args, "max_steps", None),
                                 env_kwargs=env_kwargs)
    print(json.dumps(result, allow_nan=False) if args.json else format_summary(result))  # strict JSON: no bare NaN
    return 0
