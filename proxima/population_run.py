"""A population's run directory and outer loop: ``proxima train ENV --seeds 1-8 [--sweep lr=1e-3,3e-4]``.

Layout (each member directory has the files of a single run, so ``proxima plot``, ``report`` and
``eval`` read a member as they read any run)::

    RUN/population.json          env, seeds, sweep, members (dir, seed, settings), wall time
    RUN/.proxima.lock            the trainer's lock (rundir.py), for the life of the run
    RUN/m000-seed1/config.yaml   the member's resolved config (its seed and swept values)
    RUN/m000-seed1/meta.json     kind "ppo", "population": RUN
    RUN/m000-seed1/metrics.csv   its own episode returns and losses, one row per iteration
    RUN/m000-seed1/events.*      TensorBoard
    RUN/m000-seed1/checkpoints/step_N.pt   its final weights (for eval; not resumable yet)
    RUN/m000-seed1/eval.json     end-of-run deterministic evaluation (seed + 1,000,000)

Not yet: resume (a member checkpoint is refused by ``resume`` with one line), periodic
checkpoints, SIGINT checkpoints (a SIGINT stops the run after the iteration and keeps the logs).
"""

from __future__ import annotations

import json
import math
import signal
import sys
import time
import types
from datetime import datetime
from pathlib import Path
from typing import Optional, Sequence


from . import checkpoint as ckpt
from .config import ConfigError, PPOConfig
from .population import PER_MEMBER_FIELDS, Population, _fmt, check_population_fits

POPULATION_FILE = "population.json"


class PopulationInterrupted(Exception):
    """SIGINT/SIGTERM stopped a population after an iteration; ``exit_code`` is 128+signum. The
    logs are kept; there is no checkpoint to resume from (populations are not resumable yet)."""

    def __init__(self, signum: int, run_dir: Path, iteration: int):
        super().__init__(f"stopped by {signal.Signals(signum).name} after iteration {iteration}; populations write no "
                         f"checkpoints yet: the members' logs are kept in {run_dir}, the run cannot be resumed")
        self.signum, self.exit_code, self.checkpoint = signum, 128 + signum, None


def member_dir_name(index: int, cfg: PPOConfig, swept: Sequence[str]) -> str:
    """``m003-seed4-lr0.001``: index, seed and the swept values, so a listing reads as the grid."""
    return "-".join([f"m{index:03d}", f"seed{cfg.seed}", *(f"{n}{_fmt(getattr(cfg, n))}" for n in swept)])


def default_population_dir(cfg: PPOConfig, seeds: Sequence[int]) -> Path:
    safe_env = cfg.env_id.replace("/", "_").replace(":", "_")
    span = f"seeds{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"seed{seeds[0]}"
    return Path("runs") / f"{safe_env}__{span}__{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def train_population(members: Sequence[PPOConfig], seeds: Sequence[int], sweep: dict, run_dir=None, argv=None,
                     quiet: bool = False, overwrite: bool = False, evaluate_at_end: bool = True,
                     stop_after: Optional[int] = None) -> Path:
    """Train every member in one process; returns the run directory. Errors before training (bad
    config, memory, env) leave nothing behind, as does a failure before the first iteration ends; a
    later failure keeps the members' metrics for the diagnosis.
    SIGINT/SIGTERM: stop after the current iteration, keep the logs, raise PopulationInterrupted
    (no checkpoint: populations are not resumable yet). ``stop_after`` (a test hook) acts as a
    SIGINT arriving during that iteration."""
    from .device import resolve_device
    from .rundir import RunSession, unique_default
    from .signals import SignalGuard, TrainingInterrupted
    from .sizing import env_probe

    base = members[0]
    device = resolve_device(base.device)
    check_population_fits(base, len(members), device, env_probe(base))  # before anything is allocated
    run_dir = Path(run_dir or base.run_dir or unique_default(default_population_dir(base, seeds)))
    pop = Population(members, device)
    session = RunSession()
    loggers: list = []
    try:
        session.claim_fresh(run_dir, overwrite)
        dirs = _write_layout(run_dir, pop, seeds, sweep, argv)
        from .logger import RunLogger

        total = pop.num_iterations * pop.steps_per_member
        loggers = [RunLogger(d, total, progress=False) for d in dirs]
        t_start = time.perf_counter()
        with SignalGuard() as stop:
            while pop.iteration < pop.num_iterations:
                t_iter = time.perf_counter()
                out = pop.train_iteration()
                values = {k: v.tolist() for k, v in out.items()}  # the one host read of the iteration
                bad = [i for i, b in enumerate(values["nonfinite"]) if b]
                if bad:
                    from .guards import NonFiniteError

                    raise NonFiniteError(f"non-finite loss or gradient in the update of member {bad[0]} ({dirs[bad[0]].name}) "
                                         f"at iteration {pop.iteration}; try a lower --lr or --max-grad-norm")
                elapsed = time.perf_counter() - t_start
                sps = pop.steps_per_member / max(time.perf_counter() - t_iter, 1e-9)
                step = pop.iteration * pop.steps_per_member
                _log_members(loggers, values, pop, sps, elapsed, step)
                if not quiet and (pop.iteration % max(1, pop.num_iterations // 10) == 0 or pop.iteration == pop.num_iterations):
                    _progress(values, pop, step, elapsed)
                if stop_after is not None and pop.iteration >= stop_after and not stop.signum:
                    stop.signum = signal.SIGINT
                if stop.signum:
                    raise PopulationInterrupted(stop.signum, run_dir, pop.iteration)
        wall = time.perf_counter() - t_start
        for i, d in enumerate(dirs):  # final weights of every member, in the single-run checkpoint format
            _save_member(pop, i, d)
        _finish(run_dir, pop, dirs, seeds, sweep, wall, evaluate_at_end, quiet)
    except (TrainingInterrupted, PopulationInterrupted):
        raise
    except Exception:
        if pop.iteration == 0:  # as a single run: a failure before the first iteration leaves nothing behind
            session.discard_fresh()
        raise
    finally:
        for lg in loggers:
            lg.close()
        pop.close()
        session.release()
    return run_dir


def _write_layout(run_dir: Path, pop: Population, seeds, sweep: dict, argv) -> list:
    import yaml

    from .train_state import git_commit, versions

    swept = list(sweep)
    dirs = []
    for i, cfg in enumerate(pop.configs):
        d = run_dir / member_dir_name(i, cfg, swept)
        (d / "checkpoints").mkdir(parents=True, exist_ok=True)
        cfg.encoder = pop.encoder_kind
        cfg.run_dir = str(d)
        with open(d / "config.yaml", "w") as f:
            yaml.safe_dump(cfg.to_dict(), f, sort_keys=False)
        meta = {"kind": "ppo", "population": str(run_dir), "member": i, "command": argv if argv is not None else sys.argv,
                "started": datetime.now().isoformat(timespec="seconds"), "versions": versions(), "device": str(pop.device),
                "world_size": 1, "git_commit": git_commit(), "env_backend": pop.env.backend}
        with open(d / "meta.json", "w") as f:
            json.dump(meta, f, indent=2, default=str)
        dirs.append(d)
    _write_population_json(run_dir, pop, seeds, sweep, dirs, argv=argv)
    return dirs


def _write_population_json(run_dir: Path, pop: Population, seeds, sweep: dict, dirs, argv=None, wall=None, evals=None) -> None:
    path = run_dir / POPULATION_FILE
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc.update({
        "kind": "ppo-population", "env_id": pop.cfg.env_id, "members": len(dirs), "seeds": list(seeds),
        "sweep": {k: list(v) for k, v in sweep.items()}, "per_member_fields": list(PER_MEMBER_FIELDS),
        "total_timesteps_per_member": pop.num_iterations * pop.steps_per_member,
        "member_dirs": [{"dir": d.name, "seed": c.seed, "settings": {n: getattr(c, n) for n in sweep}}
                        for d, c in zip(dirs, pop.configs)],
    })
    if argv is not None:
        doc["command"] = list(argv)
    if wall is not None:
        doc["wall_seconds"] = round(wall, 3)
    if evals is not None:
        for entry, ev in zip(doc["member_dirs"], evals):
            entry["eval_mean_return"] = ev
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2))
    tmp.replace(path)


def _log_members(loggers, values: dict, pop: Population, sps: float, elapsed: float, step: int) -> None:
    from .trainer import _metric_row

    for i, lg in enumerate(loggers):
        m = {k: v[i] for k, v in values.items()}
        lr = types.SimpleNamespace(param_groups=[{"lr": float(pop.lr_now[i])}])  # the row reads the lr of a group
        lg.log(pop.iteration, step, _metric_row(m, sps, lr, elapsed))


def _progress(values: dict, pop: Population, step: int, elapsed: float) -> None:
    rets = [s / c for s, c in zip(values["ep_return_sum"], values["ep_count"]) if c]
    mean = sum(rets) / len(rets) if rets else math.nan
    print(f"population {pop.members} members | step {step:,}/member | mean episodic return {mean:.1f} | {elapsed:.1f}s",
          file=sys.stderr)


def _save_member(pop: Population, index: int, member_dir: Path) -> Path:
    """The member's final weights as a checkpoint ``proxima eval`` loads (marked: not resumable)."""
    cfg = pop.configs[index]
    step = pop.iteration * pop.steps_per_member
    state = {"format": ckpt.FORMAT, "schema_version": ckpt.SCHEMA_VERSION, "config": cfg.to_dict(),
             "iteration": pop.iteration, "global_step": step,
             "spaces": {"observation": ckpt.space_to_dict(pop.env.single_observation_space),
                        "action": ckpt.space_to_dict(pop.env.single_action_space)},
             "agent": pop.member_agent(index).state_dict(), "obs_normalizer": None, "population_member": True}
    return ckpt.atomic_torch_save(state, ckpt.checkpoint_path(member_dir, step))


def _finish(run_dir: Path, pop: Population, dirs, seeds, sweep: dict, wall: float, evaluate_at_end: bool, quiet: bool) -> None:
    from .evaluate import evaluate

    evals = []
    for i, (cfg, d) in enumerate(zip(pop.configs, dirs)):
        if not (evaluate_at_end and cfg.eval_episodes > 0):
            evals.append(None)
            continue
        policy = ckpt.Policy(pop.member_agent(i), None, cfg.to_dict(), pop.env.single_observation_space,
                             pop.env.single_action_space, pop.device)
        result = evaluate(policy, episodes=cfg.eval_episodes, seed=cfg.seed + 1_000_000, backend=cfg.backend)
        (d / "eval.json").write_text(json.dumps(result, indent=2))
        evals.append(result["mean_return"])
    _write_population_json(run_dir, pop, seeds, sweep, dirs, wall=wall, evals=evals)
    if not quiet and any(e is not None for e in evals):
        done = [e for e in evals if e is not None]
        print(f"eval {pop.cfg.env_id}: {len(done)} members, mean of means {sum(done) / len(done):.2f} "
              f"(min {min(done):.2f}, max {max(done):.2f}); {wall:.1f}s of training")


def is_population_checkpoint(state: dict) -> bool:
    return bool(state.get("population_member"))


def cmd_train_population(args, cfg: PPOConfig) -> int:
    """``proxima train ... --seeds S [--sweep F=v1,v2]``: called by cli.cmd_train."""
    from .population import member_configs, parse_seeds, parse_sweep

    if args.resume is not None:
        raise ConfigError("--resume: populations (--seeds/--sweep) cannot be resumed yet; start a new population run")
    if args.nproc and args.nproc > 1:
        raise ConfigError("--nproc: a population trains in one process; drop --nproc")
    if "seed" in vars(args):
        raise ConfigError("--seed: give a population's seeds with --seeds (e.g. --seeds 1-8), not --seed")
    seeds = parse_seeds(args.seeds) if args.seeds else [cfg.seed]
    sweep = parse_sweep(args.sweep or [])
    members = member_configs(cfg, seeds, sweep)
    if args.dry_run:
        from .device import resolve_device
        from .population import check_members
        from .sizing import env_probe

        check_members(members)
        check_population_fits(members[0], len(members), resolve_device(members[0].device), env_probe(members[0]))
        print(json.dumps({"members": len(members), "seeds": seeds, "sweep": sweep}))
        return 0
    run_dir = train_population(members, seeds, sweep, argv=sys.argv, quiet=args.quiet, overwrite=args.overwrite)
    print(f"run directory: {run_dir}")
    return 0
