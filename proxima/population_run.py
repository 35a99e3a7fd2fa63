"""A population's run directory and outer loop: ``proxima train ENV --seeds 1-8 [--sweep lr=1e-3,3e-4]``, and
from Python ``proxima.train_population(config, seeds=range(1, 9), sweep={"lr": [1e-3, 3e-4]})`` (PopulationResult).

Layout (each member directory has the files of a single run, so ``proxima plot``, ``report`` and
``eval`` read a member as they read any run)::

    RUN/population.json          env, seeds, sweep, members (dir, seed, settings), spaces, preset, wall time
    RUN/.proxima.lock            the trainer's lock (rundir.py), for the life of the run
    RUN/checkpoints/step_N.pt    the whole population's TrainState (N: steps per member), for resume
    RUN/m000-seed1/config.yaml   the member's resolved config (its seed and swept values)
    RUN/m000-seed1/meta.json     kind "ppo", "population": RUN, spaces (the population's), preset (as a single run's)
    RUN/m000-seed1/metrics.csv   its own episode returns and losses, one row per iteration
    RUN/m000-seed1/events.*      TensorBoard
    RUN/m000-seed1/checkpoints/step_N.pt   the member's weights at each population checkpoint (eval)
    RUN/m000-seed1/eval.json     end-of-run deterministic evaluation (seed + 1,000,000)

Checkpoints, SIGINT/SIGTERM and resume work as for a single run (docs/reliability.md): every
``checkpoint_every`` iterations, every ``checkpoint_minutes``, at the end, and after the iteration
a signal arrived in (exit 128+signum, naming the checkpoint); ``proxima resume RUN`` (or ``train
--seeds ... --resume auto --run-dir RUN``) continues from the newest loadable population checkpoint,
bit-identically on CPU; the members' metrics.csv and TensorBoard files drop what was logged after it,
checkpoints newer than the one resumed from (the population's and each member's) are moved to
checkpoints/abandoned-<time>/, and the members' eval.json go after the first resumed iteration.

A member whose update or env output goes non-finite is frozen and recorded (population.json, its
diverged.json) while the others train on; the population stops (exit 2) once every member has.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import re
import signal
import sys
import time
import types
from datetime import datetime
from pathlib import Path
from typing import Optional, Sequence


from . import checkpoint as ckpt
from .atomic import write_atomic
from .config import FIELDS, ConfigError, PPOConfig
from .envs import EnvError
from .launch import typed_command
from .population import PER_MEMBER_FIELDS, UNSUPPORTED, Population, _fmt, check_members, check_population_fits
from .rundir import RunDirError, RunFileError, holds_text, read_run_text
from .signals import (WORKERS_ENDED, OutsideLoop, TrainingInterrupted, checkpoint_line, hold_fresh_run, loop_stopped,
                      workers_stopped)

POPULATION_FILE = "population.json"
#: in a member directory: when and why the member diverged (population_run._diverged), absent while it has not
DIVERGED_FILE = "diverged.json"
#: ``kind`` of a population checkpoint (RUN/checkpoints/step_N.pt)
CHECKPOINT_KIND = "ppo-population"
#: how often, at most, each member's logger hands its rows and events to the OS (RunLogger
#: flush_seconds); they are flushed before every checkpoint and at every stop as well. A flush per
#: member per iteration was most of a large population's logging time.
LOG_FLUSH_SECONDS = 1.0
#: threads writing the members' files (layout, checkpoints) at once: each file is still fsynced
#: before its rename and its folder after, but P members' fsyncs overlap instead of queueing (one
#: at a time they took ~12 s to lay out 256 members and ~8 s to write their final checkpoints)
MEMBER_WRITERS = 16


def shown(value) -> str:
    """A field's value as flags spell it: ``0.001``, and ``none`` for None (``--sweep target_kl=none``),
    not Python's ``None``."""
    return "none" if value is None else _fmt(value)


def member_dir_name(index: int, cfg: PPOConfig, swept: Sequence[str]) -> str:
    """``m003-seed4-lr0.001``: index, seed and the swept values, so a listing reads as the grid. Used
    for a new population only: a resume finds its members by the names its checkpoint records, so
    an older run's ``target_klNone`` still resolves."""
    return "-".join([f"m{index:03d}", f"seed{cfg.seed}", *(f"{n}{shown(getattr(cfg, n))}" for n in swept)])


def default_population_dir(cfg: PPOConfig, seeds: Sequence[int]) -> Path:
    safe_env = cfg.env_id.replace("/", "_").replace(":", "_")
    span = f"seeds{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"seed{seeds[0]}"
    return Path("runs") / f"{safe_env}__{span}__{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def is_population_dir(path) -> bool:
    """Whether ``path`` holds an entry named population.json, whatever it is: one that is not a
    readable file (a FIFO, a link, a folder planted there) is then refused by its reader in one line,
    rather than the population taken for a single run."""
    return os.path.lexists(Path(path) / POPULATION_FILE)


def is_plain_name(name) -> bool:
    """Whether ``name`` (read from a population's files, which are data) names a folder directly in
    the run directory: a non-empty string without a path separator, not ``.`` or ``..``, all of it
    printable (no NUL, no newline or ESC, which notes naming members would print to the terminal)."""
    return (isinstance(name, str) and name not in ("", ".", "..") and name.isprintable() and "/" not in name
            and (os.altsep is None or os.altsep not in name) and Path(name).name == name)


def read_population_doc(run_dir: Path) -> dict:
    """population.json as a dict; CheckpointError naming the file when it is not a readable JSON object
    (the run directory is data: it may have been damaged or edited)."""
    path = Path(run_dir) / POPULATION_FILE
    try:
        doc = json.loads(read_run_text(path))
    except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        why = str(e) if isinstance(e, RunFileError) else f"{path}: not readable JSON ({type(e).__name__})"
        raise ckpt.CheckpointError(f"{why}; the population's {POPULATION_FILE} was damaged or edited") from None
    if not isinstance(doc, dict):
        raise ckpt.CheckpointError(f"{path}: expected a JSON object, got {type(doc).__name__}; the population's "
                                   f"{POPULATION_FILE} was damaged or edited")
    return doc


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_population_state(state: dict, path) -> tuple:
    """(configs, seeds, sweep, member_dirs) of a population checkpoint, checked: the file is data, so
    every field that decides what resume writes, and where, is refused with one line naming the
    checkpoint and the field when it is missing or not what save_population writes (configs: one
    mapping per member; seeds: integers; sweep: {field: [values]}; member_dirs: one plain, unique
    folder name per member, never a path out of the run). The counts must agree: members = seeds x
    the settings of the sweep."""
    def bad(field: str, why: str):
        return ckpt.CheckpointError(f"{path}: {field} {why}; the population checkpoint was damaged or edited "
                                    "(resume from another checkpoint or copy of the run)")

    missing = [k for k in ("configs", "seeds", "sweep", "member_dirs") if k not in state]
    if missing:
        raise ckpt.CheckpointError(f"{path}: incomplete population checkpoint (missing '{missing[0]}')")
    configs, seeds, sweep, names = state["configs"], state["seeds"], state["sweep"], state["member_dirs"]
    if not isinstance(configs, list) or not configs or not all(isinstance(c, dict) for c in configs):
        raise bad("configs", f"is not a list of member configs (got {_kind(configs)})")
    if not isinstance(seeds, list) or not seeds or not all(_is_int(x) for x in seeds):
        raise bad("seeds", f"is not a list of integer seeds (got {_kind(seeds)})")
    if (not isinstance(sweep, dict) or not all(isinstance(k, str) for k in sweep)
            or not all(isinstance(v, list) and v for v in sweep.values())):
        raise bad("sweep", f"is not a mapping of field: [values] (got {_kind(sweep)})")
    settings = 1
    for values in sweep.values():
        settings *= len(values)
    if len(configs) != len(seeds) * settings:
        raise bad("configs", f"holds {len(configs)} member configs, but {len(seeds)} seed(s) x {settings} setting(s) "
                             f"make {len(seeds) * settings}")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise bad("member_dirs", f"is not a list of folder names (got {_kind(names)})")
    if len(names) != len(configs):
        raise bad("member_dirs", f"names {len(names)} member folder(s) for {len(configs)} members")
    for name in names:
        if not is_plain_name(name):
            raise bad("member_dirs", f"entry {name[:80]!r} is not a member folder of this run (a plain folder name: no "
                                     "path separator, not . or ..)")
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise bad("member_dirs", f"names the folder {dup[:80]!r} twice")
    return configs, list(seeds), dict(sweep), list(names)


def check_same_members(run_dir, seeds, sweep, recorded_seeds: list, recorded_sweep: dict,
                       typed: Sequence[str] = ("seeds", "sweep")) -> None:
    """``train --seeds/--sweep ... --resume`` continues the population its flags describe, or none: ``seeds``
    (those of --seeds, else the config's one seed) and ``sweep`` (--sweep's, else none) must be the
    recorded ones; None: not given to compare (``proxima resume RUN``). One line naming the flag and
    the run's value, as the flags that would resume it; ``typed`` says which flags were typed, so
    that the line says what an absent one stood for. From Python (train_population's seeds= and sweep=, both
    checked only when given) the line names those arguments as a script writes them."""
    from .signals import from_python

    if from_python():
        _check_same_members_python(run_dir, seeds, sweep, recorded_seeds, recorded_sweep)
        return
    if seeds is not None and list(seeds) != list(recorded_seeds):
        given = (f"not {seeds_spec(seeds)}" if "seeds" in typed
                 else f"and no --seeds was given (the config's one seed, {seeds_spec(seeds)})")
        raise ConfigError(f"--seeds: {run_dir} trains seeds {seeds_spec(recorded_seeds)}, {given}; resume continues "
                          f"the same members: give --seeds {seeds_spec(recorded_seeds)}")
    if sweep is not None and dict(sweep) != dict(recorded_sweep):
        ran = sweep_flags(recorded_sweep)
        given = f"not {sweep_flags(sweep)}" if sweep else "and no --sweep was given"
        raise ConfigError(f"--sweep: {run_dir} was trained with {ran or 'no --sweep (seeds only)'}, {given}; resume "
                          f"continues the same members: {'give ' + ran if ran else 'drop --sweep'}")


def _check_same_members_python(run_dir, seeds, sweep, recorded_seeds: list, recorded_sweep: dict) -> None:
    """check_same_members for train_population(..., resume=...): ``seeds=[1, 3]: RUN trains seeds [1, 2]; ...
    give seeds=[1, 2] (or leave seeds out)``, the values as Python writes them."""
    if seeds is not None and list(seeds) != list(recorded_seeds):
        given = [int(s) for s in seeds]  # as seeds_given's refusals show them: a list, elided past SHOWN_SEEDS
        given = given if len(given) <= SHOWN_SEEDS else [*given[:SHOWN_SEEDS - 1], "...", given[-1]]
        raise ConfigError(f"seeds=[{', '.join(map(str, given))}]: {run_dir} trains seeds {seeds_python(recorded_seeds)}; resume "
                          f"continues the same members: give seeds={seeds_python(recorded_seeds)} (or leave seeds out)")
    if sweep is not None and dict(sweep) != dict(recorded_sweep):
        ran = f"give sweep={dict(recorded_sweep)!r} (or leave sweep out)" if recorded_sweep else "leave sweep out"
        was = f"sweep={dict(recorded_sweep)!r}" if recorded_sweep else "no sweep (seeds only)"
        raise ConfigError(f"sweep={dict(sweep)!r}: {run_dir} was trained with {was}; resume continues the same members: "
                          f"{ran}")


def other_members_line(run_dir: Path, line: str, seeds: Sequence[int], sweep: dict) -> str:
    """rundir.not_empty_message's ``line`` for a new population whose directory holds a population of other
    members (other seeds or another sweep), whose advice to continue it (--resume auto, resume='auto') would
    only refuse these members (check_same_members): instead, for the same sweep, how to train the seeds it
    lacks beside it and pool the two (docs/populations.md, More seeds), else another directory; --overwrite
    (overwrite=True) in both. A directory holding a single run that wrote a checkpoint, whose --resume auto
    refuses --seeds/--sweep (_resume_target): another --run-dir or --overwrite (train_population's own line,
    rundir._not_empty_python, already says so). Any other line (a directory in use, or these very members,
    which a resume continues) as it is."""
    import shlex

    from .signals import from_python, resume_advice

    listed, sep, _ = line.partition("...): ")
    if not sep or not line.startswith(f"{run_dir} is not empty (") or not ckpt.list_checkpoints(run_dir):
        return line
    if not is_population_dir(run_dir):
        if from_python():
            return line
        resume, how = resume_advice(run_dir)
        return (f"{listed}...): it holds a single run, which --resume auto does not continue as a population "
                f"(`{resume}`{how} continues it alone); choose another --run-dir for the population, or start over "
                "with --overwrite (the old directory is moved aside)")
    try:
        doc = read_population_doc(run_dir)
    except ckpt.CheckpointError:
        return line
    ran, ran_sweep = doc.get("seeds"), doc.get("sweep")
    if (not isinstance(ran, list) or not ran or not all(_is_int(s) for s in ran) or not isinstance(ran_sweep, dict)
            or (list(seeds) == ran and dict(sweep) == ran_sweep)):
        return line
    python = from_python()
    listed += "...)"
    start_over = ("start over with train_population(..., overwrite=True)" if python else "start over with --overwrite") + \
        " (the old directory is moved aside)"
    from .population_report import POOL_SEP, _arg, _more_dir

    if dict(sweep) != ran_sweep:
        what = f"sweep={ran_sweep!r}" if python and ran_sweep else sweep_flags(ran_sweep) if ran_sweep else "no sweep"
        other = "give train_population() another run_dir" if python else "choose another --run-dir"
        return (f"{listed}: it holds a population of another setting ({what}), which a resume continues as it is; "
                f"{other} for this one (`proxima report {shlex.quote(_arg(run_dir))} NEW_DIR --out FILE.md` then compares "
                f"the two), or {start_over}")
    held, new = seeds_python(ran) if python else seeds_spec(ran), [s for s in seeds if s not in set(ran)]
    if not new:  # every seed asked for is a member there already
        given = seeds_python(seeds) if python else seeds_spec(seeds)
        return (f"{listed}: it holds a population of seeds {held}, {given} among them (`proxima report "
                f"{shlex.quote(_arg(run_dir))}` reports it); to train them again, {start_over}")
    spec = seeds_spec(new)
    more, out = _more_dir(run_dir, spec), f"{_arg(_more_dir(run_dir, seeds_spec(sorted(set(ran) | set(new)))))}.md"
    pool = ([f"{_arg(run_dir)}{POOL_SEP}{_arg(more)}"] if POOL_SEP not in f"{run_dir}{more}"
            else [_arg(run_dir), _arg(more), "--pool"])
    train = (f"train_population(..., seeds={seeds_python(new)}, run_dir={str(more)!r})" if python
             else f"--seeds {spec} --run-dir {shlex.quote(_arg(more))}")
    again = "resume='auto'" if python else "--resume auto"
    # Python's list is the argument (seeds=[3]), the command line's the seeds (seed 3, seeds 3-4)
    added = f"seeds={seeds_python(new)}" if python else f"{'seed' if len(new) == 1 else 'seeds'} {spec}"
    return (f"{listed}: it holds a population of seeds {held}, which {again} continues with those seeds only; to add "
            f"{added}, train {'it' if len(new) == 1 else 'them'} into a new directory ({train}) and pool the two: "
            f"`{shlex.join(['proxima', 'report', *pool, '--out', out])}` (docs/populations.md, More seeds); or {start_over}")


def _refuse_other_members(e: RunDirError, run_dir: Path, seeds: Sequence[int], sweep: dict) -> None:
    """Raise ``e``, or its line as other_members_line words it for a directory of other members."""
    line = other_members_line(run_dir, str(e), seeds, sweep)
    if line == str(e):
        raise e
    raise RunDirError(line) from None


def seeds_python(seeds) -> str:
    """[1, 2, 3, 4] -> ``range(1, 5)``, [1, 5, 9] -> ``[1, 5, 9]``: seeds as train_population takes them (a range
    for 3 or more consecutive seeds, so a long population stays one short argument)."""
    seeds = [int(s) for s in seeds]
    if len(seeds) >= 3 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"range({seeds[0]}, {seeds[-1] + 1})"
    return repr(seeds)


def seeds_spec(seeds) -> str:
    """[1, 2, 3, 7] -> ``1-3,7``: seeds as --seeds takes them."""
    parts, seeds = [], [int(s) for s in seeds]
    i = 0
    while i < len(seeds):
        j = i
        while j + 1 < len(seeds) and seeds[j + 1] == seeds[j] + 1:
            j += 1
        parts.append(f"{seeds[i]}-{seeds[j]}" if j > i + 1 else ",".join(str(s) for s in seeds[i:j + 1]))
        i = j + 1
    return ",".join(parts)


def sweep_flags(sweep: dict) -> str:
    """{"lr": [0.001, 0.0003]} -> ``--sweep lr=0.001,0.0003``: exact values (repr, which round-trips), as typed;
    a switch's ``true,false`` (--sweep's spelling, not Python's True)."""
    def text(v) -> str:
        return "none" if v is None else _fmt(v) if isinstance(v, bool) else repr(v) if isinstance(v, float) else str(v)

    return " ".join(f"--sweep {k}={','.join(text(v) for v in values)}" for k, values in sweep.items())


def typed_switch(name: str, value) -> Optional[str]:
    """A switch's flag as it is typed, ``--norm-adv`` for True and ``--no-norm-adv`` for False (neither takes
    a value: cli's BooleanOptionalAction); None for a field that is no switch."""
    if not isinstance(value, bool):
        return None
    return f"--{'' if value else 'no-'}{name.replace('_', '-')}"


def _kind(value) -> str:
    """``a str``, ``an empty list``, ``a list of 3``: what a field read from a file holds, in a few words."""
    if isinstance(value, (list, dict)):
        return f"an empty {type(value).__name__}" if not value else f"a {type(value).__name__} of {len(value)}"
    return f"{'an' if type(value).__name__[0] in 'aeiou' else 'a'} {type(value).__name__}"


#: fields of a single run a population does not use, with the value that says so: every member trains
#: for --total-timesteps (one batched program has no early end for one member)
SINGLE_RUN_ONLY = {"stop_return": None, "stop_episodes": FIELDS["stop_episodes"].default}


def as_member_config(cfg: PPOConfig) -> PPOConfig:
    """``cfg`` with the SINGLE_RUN_ONLY fields at the values a member trains with, so its config.yaml
    and checkpoints describe the run it is (``train --config MEMBER/config.yaml`` retrains it), not
    a --stop-return it never applied."""
    import dataclasses

    return dataclasses.replace(cfg, **SINGLE_RUN_ONLY)


def note_single_run_only(asked: dict, quiet: bool = False) -> None:
    """One note naming the SINGLE_RUN_ONLY values ``asked`` ({field: value}: a new population's config,
    a resume's flags) that differ from what a population does, which it then does not apply."""
    from .signals import from_python

    python = from_python()  # proxima.train_population: the fields the config set, not flags
    flags = [f"PPOConfig.{n} = {shown(v)}" if python else f"--{n.replace('_', '-')} {shown(v)}" for n, v in asked.items()
             if n in SINGLE_RUN_ONLY and v != SINGLE_RUN_ONLY[n]]
    if flags and not quiet:
        print(f"proxima: note: {' and '.join(flags)} appl{'y' if len(flags) > 1 else 'ies'} to single runs; each member "
              f"of the population trains for {'total_timesteps' if python else '--total-timesteps'}", file=sys.stderr)


def refuse_processes(nproc: Optional[int] = None) -> None:
    """A population trains in one process: ``--nproc K`` or torchrun's ranks (WORLD_SIZE) would each
    train, or resume, the same population in the same directory."""
    world = os.environ.get("WORLD_SIZE", "1").strip()
    if (nproc and nproc > 1) or (world.isdigit() and int(world) > 1):
        raise ConfigError("--nproc: a population trains in one process; drop --nproc (or torchrun)")


def _as_a_single_run(fn):
    """Run ``fn`` with float32 as torch's default dtype (trainer.hold_float32), as a single run does: a
    caller's float64 default would build the stacked agent in float64 against float32 observations.
    The caller's torch thread count, flush-denormal mode and random, numpy and torch random streams
    are put back when it returns or raises, as train() puts them back: a sweep script or notebook
    that trains a population goes on as it was."""
    import functools

    @functools.wraps(fn)
    def run(*args, **kwargs):
        import torch

        from .trainer import flush_denormal_on, hold_float32

        threads, flush, rng = torch.get_num_threads(), flush_denormal_on(), ckpt.rng_state()
        release = hold_float32()
        try:
            return fn(*args, **kwargs)
        finally:
            release()
            ckpt.set_rng_state(rng)
            torch.set_num_threads(threads)
            torch.set_flush_denormal(flush)
    return run


@_as_a_single_run
def train_population(members: Sequence[PPOConfig], seeds: Sequence[int], sweep: dict, run_dir=None, argv=None,
                     quiet: bool = False, overwrite: bool = False, evaluate_at_end: bool = True,
                     stop_after: Optional[int] = None, restart_note: Optional[str] = None, typed_total: bool = False,
                     probe=None, typed: Optional[dict] = None, call: str = "proxima.population_run.train_population(...)") -> Path:
    """Train every member in one process; returns the run directory. Errors before training (bad
    config, memory, env) leave nothing behind, as does a failure before the first iteration ends; a
    later failure keeps the members' metrics and the last checkpoint for the diagnosis.
    SIGINT/SIGTERM: finish the iteration, write a checkpoint, raise TrainingInterrupted (exit
    128+signum). ``stop_after`` (a test hook) acts as a SIGINT arriving during that iteration.
    ``typed_total``: --total-timesteps was typed, so a total that is not a whole number of iterations
    gets train's note (once the population is set up: a refusal before it stays one line).
    ``probe``: the env's sizes for the memory check (sizing.env_probe of members[0]), when the caller
    has them already (cmd_train_population sizes the population before building its members).
    ``typed``: the flags given, for the run's notes (trainer.note_run; None: from Python, the fields
    of ``members[0]`` other than the defaults, as train() takes them), printed once, not per member.
    ``call``: the Python call each member's meta.json records as its command when ``argv`` is None."""
    from .config import preset_applied
    from .device import resolve_device
    from .run_setup import check_preset_backend
    from .rundir import RunSession, unique_default
    from .sizing import env_probe
    from .trainer import note_run, set_fields

    base = members[0]
    device = resolve_device(base.device)
    check_preset_backend(base)  # as a single run's Trainer: before an env is built
    check_population_fits(base, len(members), device, probe or env_probe(base))  # before anything is allocated
    chose_default = not (run_dir or base.run_dir)  # a name the user gave is theirs: never moved on to -N
    run_dir = Path(run_dir or base.run_dir or unique_default(default_population_dir(base, seeds)))
    note_single_run_only(base.to_dict(), quiet)  # e.g. the fast preset's --stop-return: its members still train in one program
    # from Python (no argv) a refused member names PPOConfig's field, as train()'s does, not the flag
    # the preset each member's config came from, read before as_member_config's copy drops that record
    presets = [preset_applied(c) for c in members]
    with _norm_adv_swept(sweep):
        pop = Population([as_member_config(c) for c in members], device, python=argv is None)
    session = RunSession()
    outside = OutsideLoop()  # a signal outside the loop's SignalGuard: TrainingInterrupted at once, handled below
    finished = None  # the checkpoint training ended with, once it has: the end-of-run evaluation follows
    release_fresh = None
    try:
        outside.__enter__()
        # two populations of one env started in the same second chose one default name: the second moves
        # on to its next -N suffix, and its members' directories are made under the one it claimed
        try:
            run_dir = session.claim_fresh(run_dir, overwrite, restart_note, next_free=chose_default, caller="train_population")
        except RunDirError as e:  # a population of other members there: resume='auto' would refuse them too
            _refuse_other_members(e, run_dir, seeds, sweep)
        # a second signal before the first checkpoint keeps nothing either, as the first stop's path below
        release_fresh = hold_fresh_run(session)
        _note_whole_iterations(base, typed_total)
        if not quiet:  # a single run's notes, once: the env built (its first observations read), the directory taken
            note_run(base, typed if typed is not None else set_fields(base), argv is None, pop.env.single_observation_space,
                     pop.env.single_action_space, pop.encoder_kind, population=True)
            if pop.shared_stream_why is not None:
                print("proxima: note: each member is a valid run with its seed, not the run `--seed k` trains alone: "
                      f"{pop.shared_stream_why} (docs/populations.md, What a member is)", file=sys.stderr)
        dirs, spaces = _write_layout(run_dir, pop, seeds, sweep, argv, call, presets)
        if not quiet:  # once, at a new population's start, as a single run's (train_state.open_run_dir)
            _print_spaces(spaces)
        wall, finished = _train_loop(pop, run_dir, dirs, seeds, sweep, quiet=quiet, stop_after=stop_after)
        _finish(run_dir, pop, dirs, seeds, sweep, wall, evaluate_at_end, quiet, finished)
    except TrainingInterrupted as e:
        outside.__exit__()
        if e.checkpoint is not None:  # the loop's own clean stop, after its checkpoint
            raise
        if pop.iteration == 0:  # stopped before it trained: as a single run, nothing is kept
            session.discard_fresh()
            # the loop's own stop in its first iteration (workers_stopped: the env's workers ended), or OutsideLoop's
            where = f"{WORKERS_ENDED} (the population's first)" if e.what is not None else "before training started"
            raise TrainingInterrupted(e.signum, None, f"{where}; nothing was kept") from None
        raise _stopped_outside(e, run_dir, finished) from None
    except Exception:
        if pop.iteration == 0:  # as a single run: a failure before the first iteration leaves nothing behind
            session.discard_fresh()
        raise
    finally:
        outside.__exit__()
        if release_fresh is not None:
            release_fresh()
        pop.close()
        session.release()
    return run_dir


@_as_a_single_run
def resume_population(run_dir, overrides: Optional[dict] = None, quiet: bool = False, env_id: Optional[str] = None,
                      trust_run: bool = False, evaluate_at_end: bool = True, stop_after: Optional[int] = None,
                      seeds: Optional[Sequence[int]] = None, sweep: Optional[dict] = None, checkpoint=None,
                      typed_members: Sequence[str] = ("seeds", "sweep"), argv: Optional[list] = None) -> Path:
    """Continue the population in ``run_dir`` from its newest loadable checkpoint (one that does not
    load is set aside, as for a single run), or from ``checkpoint`` (one of its checkpoints/step_N.pt,
    ``train --seeds ... --resume FILE``). Checkpoints newer than the one resumed from, the
    population's and each member's, belong to the timeline being abandoned: they are moved into
    that folder's checkpoints/abandoned-<time>/ (checkpoint.set_aside_newer), so no prune keeps them
    over the new ones and no ``proxima eval`` picks them. ``overrides`` ({field: value}, the flags typed) may
    change only config.RESUME_SAFE fields, for every member, less the switches a population refuses
    (population.UNSUPPORTED), and never a swept field (check_resume_flags); ``seeds``/``sweep``, when given (``train
    --seeds/--sweep ... --resume``: the population that command would start, its seeds and sweep whether typed or not,
    ``typed_members`` naming the flags typed), must be the run's (check_same_members); None: not checked (``proxima
    resume RUN``). An env id that would import a module is refused
    unless ``env_id`` names it or ``trust_run``. ``argv``: the command line meta.json records for this
    resume (the CLI's, launch.typed_command); None: called from Python, recorded as that call and its script."""
    from .config import recorded_config
    from .device import resolve_device
    from .envs.gym_adapter import treat_as_data
    from .rundir import RunSession

    refuse_processes()  # every rank would resume it: refused before the lock is raced for or population.json written
    run_dir = Path(run_dir)
    if not is_population_dir(run_dir):
        raise ConfigError(f"{run_dir}: not a population run directory (no {POPULATION_FILE})")
    treat_as_data(run_dir)  # never import env code from the run directory itself
    session = RunSession()
    pop = None
    # a signal outside the loop's SignalGuard (the checks, building the population, the end-of-run
    # evaluation): TrainingInterrupted at once, handled below, so the lock goes and the stop is said
    outside = OutsideLoop()
    path = finished = None  # the checkpoint resumed from; the one training ended with (the evaluation follows)
    extended = None  # the target of a resume that trains to another than its checkpoint's (--total-timesteps)
    try:
        outside.__enter__()
        session.lock_existing(run_dir)  # also refuses links out of the run at its checkpoints/, population.json
        state, configs, names, recorded_seeds, recorded_sweep = checked_resume(
            run_dir, overrides, env_id, trust_run, seeds, sweep, checkpoint, typed_members, quiet=quiet)
        path = state["path"]
        check_members(configs, resume=True)  # before the build's own check: a refusal says what a resume may change
        if not quiet:  # advice, as train --seeds gives it
            from .trainer import _note_compile_mode

            _note_compile_mode(configs[0], overrides or {}, population=True)
        # the backend the population trained on (an Atari game's auto depends on what is installed), as a single run's
        from .run_setup import resumed_backend, use_backend

        recorded = state["population"].get("env_backend") if isinstance(state.get("population"), dict) else None
        backend = resumed_backend(configs[0], {"env_backend": recorded, "path": path})
        for i, member in enumerate(configs):
            use_backend(member, backend, quiet=quiet or i > 0)
        device = resolve_device(configs[0].device)
        check_population_fits(configs[0], len(configs), device)
        pop = Population(configs, device)
        try:
            pop.load_state_dict(state["population"])
        except KeyError as e:
            raise ckpt.CheckpointError(f"{path}: incomplete population checkpoint (missing {e})") from None
        except (RuntimeError, ValueError, TypeError) as e:
            raise ckpt.CheckpointError(f"{path}: does not match the population's config ({str(e).splitlines()[0][:160]})") from None
        check_finite_weights(pop, names, path)
        if not quiet and pop.iteration < pop.num_iterations:  # a complete one trains nothing: its note said so
            print(f"proxima: resuming population {run_dir} ({len(configs)} members) at step {pop.iteration * pop.steps_per_member:,} "
                  f"per member (iteration {pop.iteration})", file=sys.stderr)
        if pop.iteration < pop.num_iterations and "total_timesteps" in (overrides or {}):
            from .trainer import _note_whole_iterations as note  # a single run's resume note, under --quiet too

            note(configs[0], 1, resumed=True)
        if pop.iteration < pop.num_iterations:  # under --quiet too, as a single run's (trainer.train)
            _note_lr_schedule(configs, state, names, recorded_sweep)
        dirs = [run_dir / n for n in names]
        # every check passed: from here the run directory is made to describe the resumed timeline
        if checkpoint is not None:
            ckpt.set_aside_newer(path)  # an explicit older checkpoint: the newer ones are another timeline
        _set_aside_member_checkpoints(dirs, pop.iteration * pop.steps_per_member)
        for d, at in zip(dirs, pop.diverged_at):  # a divergence after this checkpoint did not happen in this timeline
            if at is None and os.path.lexists(d / DIVERGED_FILE) and not (d / DIVERGED_FILE).is_dir():
                try:
                    (d / DIVERGED_FILE).unlink()
                except OSError as e:
                    print(f"proxima: note: {d / DIVERGED_FILE}: could not remove it ({e.strerror or e}); it describes a "
                          "divergence after the checkpoint resumed from (population.json does not list it)", file=sys.stderr)
        trains = pop.iteration < pop.num_iterations
        if trains and configs[0].total_timesteps != recorded_config(state["configs"][0], source=path).total_timesteps:
            # from here written into population.json and config.yaml, never into the checkpoint a stop before the first
            # iteration's end leaves: the stop's command carries it, or a plain resume would train to the old one
            extended = configs[0].total_timesteps
        # where they differ, the flags a resume that trains runs with (--total-timesteps, --eval-episodes, ...);
        # one that trains nothing writes no checkpoint, so it records the checkpoint's values (one cut short
        # before it trained is put back), as a single run's does, but for the count of the evaluation it shows
        _write_member_configs(pop, dirs, None if trains else _complete_configs(pop, state, run_dir, names))
        if trains:  # a resume that trains: each member's record says so, as a single run's
            _record_resume(dirs, pop.iteration * pop.steps_per_member, device, argv)
        # the target as extended (--total-timesteps): a report of a resume stopped early says "N of M steps so far";
        # written after the members' files, so a write that fails there leaves the population's record as it was
        _write_population_json(run_dir, pop, recorded_seeds, recorded_sweep, dirs)
        if not trains:  # it writes no checkpoint, whose save would prune: --keep-checkpoints K prunes here, as a single run's
            _prune_untrained(run_dir, configs[0].keep_checkpoints, dirs)
        wall, finished = _train_loop(pop, run_dir, dirs, recorded_seeds, recorded_sweep, quiet=quiet, stop_after=stop_after,
                                     elapsed=float(state.get("elapsed", 0.0)), last_checkpoint=Path(path))
        if not trains:
            # the checkpoint's elapsed was taken before the final save: the time the run printed and
            # recorded stays, so `proxima report` and this resume's line say what the run said
            wall = _recorded_wall(run_dir, wall)
        _finish(run_dir, pop, dirs, recorded_seeds, recorded_sweep, wall, evaluate_at_end, quiet, finished)
    except TrainingInterrupted as e:
        outside.__exit__()
        if e.checkpoint is not None:  # the loop's own clean stop, after its checkpoint
            raise
        raise _stopped_outside(e, run_dir, finished, path, extended) from None
    finally:
        outside.__exit__()
        if pop is not None:
            pop.close()
        session.release()
    return run_dir


def _prune_untrained(run_dir: Path, keep: int, dirs: list) -> None:
    """train_state.prune_untrained for a complete population: its checkpoints, then each member's, to the newest
    ``keep``; a removal that fails is one line naming the file."""
    from .diskspace import write_error
    from .train_state import prune_untrained

    try:
        prune_untrained(run_dir, keep, members=dirs)
    except OSError as e:
        raise write_error(e.filename or run_dir / "checkpoints", e, "could not remove an old checkpoint") from None


def _recorded_wall(run_dir: Path, default: float) -> float:
    """population.json's wall_seconds (the training time the run recorded at its end), else ``default``."""
    try:
        wall = read_population_doc(run_dir).get("wall_seconds")
    except ckpt.CheckpointError:
        return default
    ok = isinstance(wall, (int, float)) and not isinstance(wall, bool) and math.isfinite(wall) and wall >= 0
    return float(wall) if ok else default


def _stopped_outside(e: TrainingInterrupted, run_dir: Path, finished: Optional[Path],
                     resumed_from: Optional[Path] = None, extended: Optional[int] = None) -> TrainingInterrupted:
    """The stop to raise for a signal outside the loop's own checkpointed stop (OutsideLoop's) once
    the population has trained, or while a resume sets up: in the end-of-run evaluation (``finished``:
    the checkpoint training ended with) training is complete; before it, the population is as its
    last checkpoint left it (``resumed_from``, else the newest on disk), which a resume continues.
    ``extended``: the total_timesteps of a resume that changed its checkpoint's (population.json and
    the members' config.yaml may say it already; the checkpoint does not), which the command carries."""
    if e.what is not None:  # a stop that says where it landed already (workers_stopped: the env's workers ended)
        return e
    if finished is not None:
        from .signals import eval_command

        command = eval_command(run_dir)
        return TrainingInterrupted(e.signum, finished, f"during the end-of-run evaluation; training is complete (checkpoint: "
                                   f"{finished}); the population's checkpoints are kept; `{command}` evaluates it")
    if resumed_from is None:
        listed = ckpt.list_checkpoints(run_dir) if Path(run_dir).is_dir() else []
        resumed_from = listed[-1] if listed else None
    return TrainingInterrupted(e.signum, resumed_from, "outside an iteration; the population is as its last checkpoint left it; "
                               + _extended_line(resumed_from, extended))


#: signals.checkpoint_line, whose command continues to ``total`` where that is given: a resume that extends the
#: population and stops before its first checkpoint leaves the checkpoint's target in the checkpoint
_extended_line = checkpoint_line


def _write_member_configs(pop: Population, dirs: list, configs: Optional[list] = None) -> None:
    """Each member's config.yaml as a resume that trains runs it (``configs``, else the population's),
    replaced (atomically, never through a link) where it differs, as a single run's resume replaces
    its own (train_state.open_run_dir): ``proxima report RUN/<member dir>`` reads the target and
    settings from it. Each keeps its own folder and the encoder its run recorded, as _write_layout
    wrote them."""
    from .config import dump_yaml
    from .diskspace import write_error

    for cfg, d in zip(configs or pop.configs, dirs):
        cfg.encoder = pop.encoder_kind
        if configs is None:  # _complete_configs keeps the run_dir on file
            # where the member is now (the run may have been moved), absolute, as a single run's resume records
            cfg.run_dir = str(Path(d).resolve())
        path = d / "config.yaml"
        text = dump_yaml(cfg.to_dict())
        try:
            if not holds_text(path, text):
                write_atomic(path, text)
        except OSError as e:
            raise write_error(path, e, "could not resume the population") from None


def _complete_configs(pop: Population, state: dict, run_dir: Path, names: list) -> list:
    """The members' configs a resume of a complete population records (train_state._resumed_config for
    a single run): the checkpoint's, whose values a later resume starts from, with eval_episodes the
    count of the evaluation this resume shows or makes: a typed --eval-episodes N (which rewrites
    eval.json) is recorded, so the next plain resume shows that evaluation; --eval-episodes 0
    evaluates nothing and leaves the count of the one on disk. Each keeps the run_dir its config.yaml
    records, so a resume of an untouched complete population writes nothing, from whatever directory."""
    import dataclasses

    from .config import RESUME_SAFE, recorded_config
    from .run_setup import read_run_config

    episodes = pop.cfg.eval_episodes
    if episodes <= 0:
        episodes = _recorded_eval_count(run_dir, names, int(state["global_step"])) or None
    configs = []
    for cfg, raw, name in zip(pop.configs, state["configs"], names):
        recorded = as_member_config(recorded_config(raw, source=state["path"]))
        kept = {k: getattr(recorded, k) for k in RESUME_SAFE if k != "run_dir"}
        if episodes is not None:
            kept["eval_episodes"] = episodes
        # a relative run_dir names the member from where the population was started, not from where this
        # command runs: made to name it from here, the file would be rewritten though nothing trained
        on_file = read_run_config(Path(run_dir) / name)[0]
        kept["run_dir"] = on_file.run_dir if on_file is not None else str(Path(run_dir) / name)
        configs.append(dataclasses.replace(cfg, **kept))
    return configs


def _recorded_eval_count(run_dir: Path, names: Sequence[str], step: int) -> Optional[int]:
    """The episode count of the members' end-of-run evaluations at ``step`` (each eval.json that
    evaluate.current_eval takes for one), when they all hold the same one; None when none is there or
    they differ (a member then evaluated again would not match the others: all are, with the run's
    count). A diverged member has none and is not counted."""
    from .evaluate import current_eval
    from .rundir import read_run_json

    counts = set()
    for name in names:
        path = Path(run_dir) / name / "eval.json"
        try:  # only a regular file is read (the run directory is data); current_eval checks the rest
            episodes = read_run_json(path, limit=10_000_000).get("episodes")
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            continue
        if _is_int(episodes) and episodes >= 1 and current_eval(path.parent, step, episodes) is not None:
            counts.add(episodes)
    return counts.pop() if len(counts) == 1 else None


def _record_resume(dirs, step: int, device, argv: Optional[list] = None) -> None:
    """Add this resume to each member's meta.json ``resumes`` (train_state.record_resume: a damaged
    meta.json is a note, a full disk one line naming the file). On the CPU the entry records the CPU
    tanh, and a change from the one the population started with is noted once, not per member; the entry
    records ``device`` (a torch.device: a resume may change --device), as a single run's does, and
    ``argv`` (None: resume_population called from Python, recorded as that call, as train_population records one)."""
    from .diskspace import write_error
    from .rundir import python_command
    from .train_state import record_resume, resume_entry

    command = argv if argv is not None else python_command("proxima.population_run.resume_population(...)")
    entry = resume_entry(step, command, device=str(device))
    for i, d in enumerate(dirs):
        path = d / "meta.json"
        if not path.exists():
            continue
        try:
            record_resume(path, entry, note_tanh=i == 0)
        except OSError as e:
            raise write_error(path, e, "could not resume the population") from None


def _train_again(run_dir: Path) -> str:
    """The next step for a population that has nothing to resume: its recorded command again, with
    --overwrite (the old directory is moved aside), as checkpoint.start_over says for one whose
    checkpoints do not load."""
    import shlex

    recorded = read_population_doc(run_dir).get("command")
    command = echoed_command(recorded)
    if command is not None:
        # into this directory: a copied or moved population's recorded --run-dir names the original, which
        # --overwrite would move aside, an intact population, leaving this one as it is
        again, skip = [], False
        for i, word in enumerate(command):
            if skip:
                skip = False
            elif word == "--run-dir":
                skip = i + 1 < len(command)
            elif not word.startswith("--run-dir="):
                again.append(word)
        again += ["--run-dir", str(run_dir)] + ([] if "--overwrite" in command else ["--overwrite"])
        return f"train it again: {shlex.join(again)} (the old directory is moved aside)"
    if recorded is None:  # trained from Python (train_population), which records its call in each member's meta.json
        call = _python_call(run_dir)
        made = f"{call}, as its members' meta.json records it" if call else \
            "the call that trained it (population.json records no command)"
        return (f"train it again from Python: {made}, with run_dir={str(run_dir)!r}, overwrite=True (the old directory "
                "is moved aside)")
    return (f"train it again: the command in {Path(run_dir) / POPULATION_FILE} with --overwrite "
            "(the old directory is moved aside)")


def _python_call(run_dir: Path) -> Optional[str]:
    """``proxima.train_population(...) from study.py``: the call a member's meta.json records as its command
    (rundir.python_command: ``python: CALL from WHERE``) for a population trained from Python, without WHERE
    past MAX_ECHOED_COMMAND characters; None when no member's reads as one (data: a printable string)."""
    try:
        entries = read_population_doc(run_dir).get("member_dirs")
    except ckpt.CheckpointError:
        return None
    for entry in entries if isinstance(entries, list) else []:
        name = entry.get("dir") if isinstance(entry, dict) else None
        if not (isinstance(name, str) and is_plain_name(name)):
            continue
        try:
            command = json.loads(read_run_text(Path(run_dir) / name / "meta.json")).get("command")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(command, str) and command.startswith("python: ") and command.isprintable():
            call = command[len("python: "):]
            # where it ran (a script's argv) only when short: the call is what trains it again
            return call if len(call) <= MAX_ECHOED_COMMAND else call.partition(" from ")[0][:MAX_ECHOED_COMMAND]
    return None


#: the longest recorded command echoed as advice: longer, population.json's own is named instead
MAX_ECHOED_COMMAND = 300


def _proxima_train(command) -> bool:
    """Whether population.json's recorded ``command`` (data) is one to echo as advice (echoed_command)."""
    return echoed_command(command) is not None


def echoed_command(command) -> Optional[list]:
    """population.json's recorded ``command`` (data) as the words to echo as advice, or None when it is not one: a
    short list of printable words that runs ``proxima train`` (``proxima``, a path to it, or ``python -m proxima``),
    never another program a hand-edited file names (``sh -c ...``), nor a word a terminal would show otherwise than
    it pastes (a newline is echoed escaped). Its program is echoed as the plain word ``proxima`` (``python -m
    proxima``), never as the path recorded: a run directory may come from someone else, and ``/tmp/x/bin/proxima``
    runs whatever is there."""
    import os
    import shlex

    if not (isinstance(command, list) and command and all(isinstance(a, str) and a.isprintable() for a in command)):
        return None
    if len(shlex.join(command)) > MAX_ECHOED_COMMAND:
        return None
    program = os.path.basename(command[0])
    if program == "proxima":
        start, words = 1, ["proxima"]
    elif program.startswith("python") and command[1:3] == ["-m", "proxima"]:
        start, words = 3, ["python", "-m", "proxima"]
    else:
        return None
    return words + command[start:] if command[start:start + 1] == ["train"] else None


def checked_resume(run_dir: Path, overrides: Optional[dict], env_id: Optional[str], trust_run: bool,
                   seeds: Optional[Sequence[int]], sweep: Optional[dict], checkpoint, typed_members: Sequence[str],
                   dry_run: bool = False, quiet: bool = False) -> tuple:
    """(state, configs, member folder names, recorded seeds, recorded sweep) a resume of the population
    in ``run_dir`` continues with: its checkpoint loaded and every check of resume_population made
    (arguments as there), ``overrides`` applied to each member's config. ``dry_run`` (``train --seeds
    ... --resume ... --dry-run``): read only, as a single run's dry run: a newest checkpoint that does
    not load is named, not renamed. The SINGLE_RUN_ONLY fields, typed or recorded (a population
    written before they were reset), come back at a member's values, with the note a new population
    prints for those typed."""
    from .config import recorded_config
    from .rundir import check_own_entries
    from .run_setup import apply_resume_overrides, check_resumed_env, note_trains_nothing, refuse_recorded, resume_trains

    read_population_doc(run_dir)  # rewritten at the end: a damaged one is one line now, not a traceback then
    listed = ckpt.list_checkpoints(run_dir)
    if not listed:
        raise ckpt.CheckpointError(f"{run_dir}: the population wrote no checkpoint to resume from "
                                   f"(--checkpoint-every N writes one every N iterations); {_train_again(run_dir)}")
    if checkpoint is not None:
        checkpoint = Path(checkpoint)
        if checkpoint.name not in {p.name for p in listed}:
            raise ConfigError(f"{checkpoint}: not one of {run_dir}'s checkpoints (checkpoints/step_N.pt)")
        state = ckpt.load_resumable(run_dir / "checkpoints" / checkpoint.name, allow_population=True)  # the file listed, in this run
    elif dry_run:
        _, state = ckpt.newest_that_loads(listed, ckpt.load_sound, ckpt.CheckpointError, set_aside=False)
    else:
        state = ckpt.load_resumable(run_dir, allow_population=True)
    path = state["path"]
    if state.get("kind") != CHECKPOINT_KIND:
        raise ckpt.CheckpointError(f"{path}: not a population checkpoint")
    raw_configs, recorded_seeds, recorded_sweep, names = check_population_state(state, path)
    configs = [recorded_config(c, source=path) for c in raw_configs]  # a field an older run lacks: as it ran
    for name in names:  # each member folder, and what resume writes in it, stays inside the run
        check_own_entries(run_dir, (name,))
        check_own_entries(run_dir / name, root=run_dir)
    check_member_dirs(run_dir, names)
    check_same_members(run_dir, seeds, sweep, recorded_seeds, recorded_sweep, typed_members)
    check_resumed_env(configs[0], state, env_id, trust_run, "resume")
    typed = dict(overrides or {})
    check_resume_flags(typed, recorded_sweep, configs[0], path, recorded_seeds)
    # the same flags for every member; a note (e.g. "the run is complete") is said once, and, as a single
    # run's resume (run_setup.resumed_config), only after a bad flag (--keep-checkpoints -1) is refused
    not_safe = tuple(UNSUPPORTED)
    configs = [apply_resume_overrides(configs[0], typed, state, not_safe, notes=False)] + [
        _quietly(apply_resume_overrides, c, typed, state, not_safe, False) for c in configs[1:]]
    if "total_timesteps" not in typed:  # before "the run is complete": the target that note speaks of is the checkpoint's
        _note_recorded_target(run_dir, configs[0], path)
    if not resume_trains(configs[0], state):
        # the config a member trains with: a SINGLE_RUN_ONLY flag (--stop-episodes 0) is noted, not refused,
        # by a resume that trains (its members' check_members sees it reset), so by one that trains nothing too
        refuse_recorded(as_member_config(configs[0]), state, typed, typed_too=True)
        note_trains_nothing(configs[0], state)
    if "eval_episodes" not in typed:
        # as a single run's resume (run_setup.keep_recorded_eval): the count of the members' evaluations at
        # the checkpoint's step, which a complete population's resume with --eval-episodes N recorded in
        # config.yaml but no checkpoint holds; shown, not evaluated again with the checkpoint's count
        episodes = _recorded_eval_count(run_dir, names, int(state["global_step"]))
        for c in configs:
            c.eval_episodes = episodes or c.eval_episodes
    if env_id is not None and env_id != configs[0].env_id and resume_trains(configs[0], state):
        for c in configs:  # the module form named (run_setup.resumed_config); a complete one's files stay as recorded
            c.env_id = env_id
    note_single_run_only(typed, quiet)
    return state, [as_member_config(c) for c in configs], names, recorded_seeds, recorded_sweep


def _note_recorded_target(run_dir: Path, cfg: PPOConfig, checkpoint) -> None:
    """A note on stderr when population.json records another target (total_timesteps_per_member) than the
    checkpoint's config ``cfg``, which a resume given no --total-timesteps trains to: a resume that extended
    the population and was stopped before its first checkpoint had written its target there (and in the
    members' config.yaml), or the file was edited. The resume rewrites those files from the checkpoint:
    said, with the flag that trains to the recorded target, never undone without a word (a single run's
    resume says it of its config.yaml: run_setup.note_config_edits)."""
    from .config import batch_size, num_iterations
    from .signals import from_python, resume_command
    from .terminal import printable

    try:
        recorded = read_population_doc(run_dir).get("total_timesteps_per_member")
    except ckpt.CheckpointError:
        return  # refused by the resume's own read, with its line
    mine = num_iterations(cfg) * batch_size(cfg)
    if not _is_int(recorded) or recorded < 1 or recorded == mine:
        return
    if from_python():  # train_population(None, resume=RUN): the words a script writes, never a flag it did not type
        from .signals import python_resume

        how = f"give it in the config: {python_resume(run_dir, recorded)}"
    else:
        how = f"give it as a flag: {resume_command(run_dir)} --total-timesteps {recorded}"
    where = Path(run_dir) / POPULATION_FILE
    print(printable(f"proxima: note: {where}: total_timesteps_per_member {recorded} differs from the checkpoint's {mine} "
                    f"({checkpoint}; a resume stopped before its first checkpoint wrote it, or an edit); resume keeps "
                    f"the checkpoint's target and rewrites {POPULATION_FILE} and the members' config.yaml from it; {how}"),
          file=sys.stderr)


def check_member_dirs(run_dir: Path, names: Sequence[str]) -> None:
    """ConfigError naming the first member folder the checkpoint lists that is missing (or is not a
    folder), or whose config.yaml is there but not a file: a resume writes into every member's folder
    (config.yaml, meta.json, checkpoints, eval.json), so it is checked before anything is written; a
    resume that failed there had already rewritten population.json and the earlier members' config.yaml
    with the new target. A member's config.yaml or checkpoints/ that is simply absent is written again."""
    run_dir = Path(run_dir)
    missing = [n for n in names if not (run_dir / n).is_dir()]
    if missing:
        first = run_dir / missing[0]
        which = "missing" if not os.path.lexists(first) else "not a folder"
        more = f" ({len(missing)} of the {len(names)} members' folders are, first {missing[0]})" if len(missing) > 1 else ""
        raise ConfigError(f"{first}: member {missing[0]}'s folder is {which}{more}; the population cannot be resumed without "
                          f"it: restore it from a copy of the run, or {_train_again(run_dir)}")
    for name in names:
        path = run_dir / name / "config.yaml"
        if os.path.lexists(path) and not path.is_file():
            raise ConfigError(f"{path}: not a file (the resume rewrites member {name}'s config there); remove it "
                              "or restore it from a copy of the run")


def _note_lr_schedule(configs: list, state: dict, names: list, sweep: dict) -> None:
    """trainer._note_lr_schedule for a population's resume: a resume that extends it recomputes the schedule of
    every member that anneals (--anneal-lr, or the anneal_lr=true members of --sweep anneal_lr=...), and their
    rate jumps back up, which nothing else says. The numbers are the first annealing member's; with --lr
    swept the line names it, with anneal_lr swept it names the setting whose members anneal."""
    from .trainer import _note_lr_schedule as note

    annealing = [i for i, c in enumerate(configs) if c.anneal_lr]
    if not annealing:
        return
    first = annealing[0]
    with contextlib.redirect_stderr(io.StringIO()) as out:
        note(configs[first], 1, {"config": state["configs"][first], "iteration": state.get("iteration")})
    text = out.getvalue().rstrip("\n")
    if not text:
        return
    swept = sweep or {}
    if "anneal_lr" in swept:  # the setting that anneals, not an --anneal-lr the user never typed
        _, _, rest = text.partition(": note: ")
        _, _, rest = rest.partition(": ")
        others = "" if len(annealing) == len(configs) else "; the anneal_lr=false members' rate stays constant"
        text = f"proxima: note: anneal_lr=true ({len(annealing)} of the {len(configs)} members{others}): {rest}"
    which = f" ({names[first]}'s; every annealing member's schedule is recomputed alike)" if "lr" in swept else ""
    print(text + which, file=sys.stderr)


def _set_aside_member_checkpoints(dirs: list, step: int) -> None:
    """Members' checkpoints newer than ``step`` (the population checkpoint resumed from): members are
    saved before the population's checkpoint, so a kill during a save, a corrupt newest population
    checkpoint or an explicit older one leaves them behind. Moved into the member's
    checkpoints/abandoned-<time>/ as set_aside_newer does for a run (with the metrics.csv rows and
    TensorBoard event files holding what the member logged after ``step``), with one note for all."""
    moved = [folder for d in dirs if (folder := _quietly(ckpt.set_aside_newer, ckpt.checkpoint_path(d, step))) is not None]
    if moved:
        logs = any((f / "metrics.csv").exists() or any(f.glob("events.out.tfevents.*")) for f in moved)
        print(f"proxima: note: {_members(len(moved))} held checkpoints newer than step {step:,}, from the abandoned timeline: "
              f"moved to each one's checkpoints/{moved[0].name}/"
              f"{' with their metrics.csv rows and TensorBoard event files from after that step' if logs else ''} "
              f"(e.g. {moved[0]})", file=sys.stderr)


def check_finite_weights(pop: Population, names: list, path) -> None:
    """CheckpointError naming the checkpoint, the weight and the member when a loaded weight holds NaN
    or inf: the first update would otherwise report a non-finite loss and blame --lr, not the file."""
    import torch

    for key, value in pop.params.items():
        finite = torch.isfinite(value.detach()).reshape(value.shape[0], -1).all(dim=1)
        if not bool(finite.all()):
            i = int((~finite).nonzero()[0, 0])
            member = names[i] if i < len(names) else f"member {i}"
            raise ckpt.CheckpointError(f"{path}: weight {key} of member {i} ({member}) holds NaN or inf; the checkpoint "
                                       "is damaged: resume from an older checkpoint or another copy of the run")


def check_resume_flags(overrides: dict, sweep: dict, recorded: PPOConfig, checkpoint, seeds: Optional[Sequence[int]] = None) -> None:
    """What a population refuses on resume before any member's flags are applied (one line each):
    --seed (each member has its own seed, ``seeds``; one flag cannot say which), a swept field (each
    setting has its own value), a switch populations do not support (population.UNSUPPORTED), given
    or recorded by a population trained before it was refused."""
    if "seed" in overrides:  # checked per member, it would name one member's seed as the run's
        which = f"are {seeds_spec(seeds)} " if seeds else ""
        raise ConfigError(f"--seed: a population's seeds {which}(set per member, with --seeds, not --seed); drop --seed")
    for name in overrides:
        if name in sweep:
            values = ", ".join(shown(v) for v in sweep[name])
            flag = typed_switch(name, overrides[name]) or "--" + name.replace("_", "-")
            raise ConfigError(f"{flag} is swept in this population ({values}); it cannot be given on resume")
    for name, (off, why) in UNSUPPORTED.items():
        flag = "--" + name.replace("_", "-")
        if name in overrides and overrides[name] != off:
            raise ConfigError(f"{flag} is not supported for a population ({why}); drop it")
        if name not in overrides and getattr(recorded, name) != off:
            fix = f"--no-{flag[2:]}" if isinstance(off, bool) else f"{flag} {off}"
            raise ConfigError(f"{checkpoint}: the population records {flag} {getattr(recorded, name)!r}, which populations "
                              f"do not support ({why}); resume with {fix}")


def _quietly(fn, *args):
    """fn(*args) with what it writes to stderr dropped."""
    with contextlib.redirect_stderr(io.StringIO()):
        return fn(*args)


def _member_of_env(pop, message: str, names: list) -> str:
    """What a single run's env error adds (its global step), for a population: the batch's env index
    in the message (the first ``env N``) as the member and that member's env, and the member steps of
    the iteration that failed. '' when the message names no env index."""
    found = re.search(r"\benv (\d+)\b", message)
    N = pop.cfg.num_envs
    if found is None or int(found.group(1)) >= pop.members * N:
        return ""
    p, n = divmod(int(found.group(1)), N)
    first = pop.iteration * pop.steps_per_member
    return (f"; that is env {n} of member {p} ({names[p]}), in the iteration of its steps {first + 1:,} to "
            f"{first + pop.steps_per_member:,}")


def _train_loop(pop: Population, run_dir: Path, dirs: list, seeds, sweep: dict, quiet: bool,
                stop_after: Optional[int], elapsed: float = 0.0, last_checkpoint: Optional[Path] = None) -> tuple:
    """Iterations until the end, logging every member, checkpointing as a single run does. Returns
    (wall seconds, the last checkpoint): the caller then runs the members' evaluations (_finish),
    knowing that a signal landing there finds training complete. A resumed population
    (``last_checkpoint`` set) truncates the members' logs to the checkpoint's step first."""
    from .logger import RunLogger, logged_past
    from .signals import SignalGuard

    cfg = pop.cfg
    total = pop.num_iterations * pop.steps_per_member
    resumed = last_checkpoint is not None
    resume_step = pop.iteration * pop.steps_per_member if resumed else None
    loggers: list = []
    try:
        # a complete run resumed logs nothing (no empty files), unless rows logged after the checkpoint must go
        step = pop.iteration * pop.steps_per_member
        if pop.iteration < pop.num_iterations or any(logged_past(d / "metrics.csv", step) for d in dirs):
            # rolling: each member's charts/episodic_return_100, rebuilt on resume from the rows its metrics.csv keeps
            # config: each member's hyperparameters table in its TensorBoard events, as a single run's
            loggers = [RunLogger(d, total, resume_step=resume_step, progress=False, flush_seconds=LOG_FLUSH_SECONDS,
                                 rolling=True, config=c.to_dict()) for d, c in zip(dirs, pop.configs)]
        t_start = time.perf_counter() - elapsed
        saved_at = time.monotonic()
        # the last checkpoint, for a second signal's line: "no checkpoint was written" (and nothing kept) before the first
        with SignalGuard(lambda: last_checkpoint, run_dir=run_dir) as stop:
            while pop.iteration < pop.num_iterations:
                t_iter = time.perf_counter()
                try:
                    out = pop.train_iteration()
                except EnvError as e:
                    stopped = workers_stopped(stop, cfg.vector, last_checkpoint, "population")
                    if stopped is not None:
                        raise stopped from None
                    raise type(e)(f"{e}{_member_of_env(pop, str(e), [d.name for d in dirs])}") from e.__cause__
                failures = pop.env_failures([d.name for d in dirs])  # NaN/inf from an env: named, before the update's
                values = {k: v.tolist() for k, v in out.items()}  # the one host read of the iteration
                if failures or any(values["nonfinite"]):
                    _diverged(pop, run_dir, dirs, seeds, sweep, failures, values["nonfinite"], last_checkpoint)
                _blank_diverged(values, pop)
                elapsed = time.perf_counter() - t_start
                sps = pop.steps_per_member / max(time.perf_counter() - t_iter, 1e-9)
                step = pop.iteration * pop.steps_per_member
                _log_members(loggers, values, pop, sps, elapsed, step)
                if resumed:  # as a single run: the earlier end's evaluations describe a step now behind
                    resumed = False
                    _drop_stale_evals(run_dir, pop, dirs, seeds, sweep)
                # --no-progress drops these lines as a single run's drops its bar; the end's summary stays
                if not quiet and cfg.progress and (pop.iteration % max(1, pop.num_iterations // 10) == 0
                                                   or pop.iteration == pop.num_iterations):
                    # each member's rolling return (charts/episodic_return_100) as its row now holds it, and its window:
                    # read only for the line (~10 a run), never every iteration
                    rolling = [(lg.rolling.mean, lg.rolling.episodes) for lg in loggers]
                    _progress(rolling, pop, step, elapsed, list(sweep))
                if stop_after is not None and pop.iteration >= stop_after and not stop.signum:
                    stop.signum = signal.SIGINT
                periodic = bool(cfg.checkpoint_every) and pop.iteration % cfg.checkpoint_every == 0
                periodic = periodic or (bool(cfg.checkpoint_minutes) and time.monotonic() - saved_at >= 60.0 * cfg.checkpoint_minutes)
                done = pop.iteration == pop.num_iterations
                if periodic or stop.signum or done:
                    stop.final = done  # a signal from here on lands after the last iteration
                    for lg in loggers:  # a resume from this checkpoint keeps the rows up to it: they are in the files first
                        lg.flush()
                    last_checkpoint = save_population(pop, run_dir, dirs, seeds, sweep, elapsed)
                    saved_at = time.monotonic()
                if stop.signum:
                    raise loop_stopped(stop.signum, last_checkpoint, complete=done)
        wall = time.perf_counter() - t_start
    finally:
        _close_loggers(loggers)
    return wall, last_checkpoint


def _close_loggers(loggers: list) -> None:
    """Close every member's logger, each flushing the rows it holds, even after one failed (disk
    full): the others' rows still reach their files. The first failure is raised after."""
    error = None
    for lg in loggers:
        try:
            lg.close()
        except Exception as e:
            error = error or e
    if error is not None:
        raise error


def _each(fn, items) -> list:
    """[fn(item) for item in items], on up to MEMBER_WRITERS threads. The first error in the items'
    order is raised once every call has ended, so no write is left running behind it; a stop
    arriving meanwhile (OutsideLoop's TrainingInterrupted) cancels the calls not started and waits
    for the running ones before it goes on."""
    from concurrent.futures import ThreadPoolExecutor, wait

    items = list(items)
    if len(items) < 2:
        return [fn(x) for x in items]
    pool = ThreadPoolExecutor(max_workers=min(MEMBER_WRITERS, len(items)), thread_name_prefix="proxima-member-files")
    try:
        futures = [pool.submit(fn, x) for x in items]
        wait(futures)
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return [f.result() for f in futures]


UPDATE_DIVERGED = "non-finite loss, gradient or weights in its update; try a lower --lr or --max-grad-norm"


def _diverged(pop: Population, run_dir: Path, dirs: list, seeds, sweep: dict, failures: list, nonfinite: list,
              last_checkpoint: Optional[Path]) -> None:
    """Members that diverged in this iteration (a NaN/inf from their env, or a non-finite update,
    which Population._step did not apply): frozen for good and recorded (population.json, the
    member's diverged.json, a note) while the others train on; NonFiniteError, as a single run
    stops, once every member has diverged."""
    from .guards import NonFiniteError

    new = []
    for p, message in failures:  # the env is the cause to name when both fired
        if pop.diverged_at[p] is None:
            pop.mark_diverged(p, message)
            new.append(p)
    for p, bad in enumerate(nonfinite):
        if bad and pop.diverged_at[p] is None:
            pop.mark_diverged(p, UPDATE_DIVERGED)
            new.append(p)
    if not new:
        return
    for p in new:
        write_atomic(dirs[p] / DIVERGED_FILE, json.dumps({"member": dirs[p].name, **pop.diverged_at[p]}, indent=2))
    _write_population_json(run_dir, pop, seeds, sweep, dirs)
    last = f"last good checkpoint: {last_checkpoint}" if last_checkpoint else "no checkpoint was written yet"
    if all(d is not None for d in pop.diverged_at):
        p = new[0]
        at = pop.diverged_at[p]
        what = (f"non-finite loss or gradient in the update of member {p} ({dirs[p].name}) at iteration {at['iteration']}"
                if at["reason"] == UPDATE_DIVERGED else at["reason"])
        every = f"; every member has now diverged (each one's iteration and cause: {run_dir / POPULATION_FILE})" if pop.members > 1 else ""
        hint = "; try a lower --lr or --max-grad-norm" if at["reason"] == UPDATE_DIVERGED else ""
        raise NonFiniteError(f"{what}{every}; {last}{hint}")
    left = sum(d is None for d in pop.diverged_at)
    for p in new:
        at = pop.diverged_at[p]
        print(f"proxima: note: member {p} ({dirs[p].name}) diverged at iteration {at['iteration']} "
              f"({at['reason']}): it keeps its last finite weights, takes no further step and is left out of the "
              f"statistics; the other {_members(left)} train{'s' if left == 1 else ''} on", file=sys.stderr)


def _blank_diverged(values: dict, pop: Population) -> None:
    """A diverged member's row of the iteration: NaN (blank in metrics.csv), no episodes: its frozen
    policy's numbers are not its training's. ep_count is 0 rather than NaN for the progress line and
    the return's division; _log_members blanks the row's episodes cell."""
    for p, at in enumerate(pop.diverged_at):
        if at is None:
            continue
        for k, v in values.items():
            if k == "ep_count":
                v[p] = 0
            elif k != "nonfinite":
                v[p] = math.nan


def _drop_stale_evals(run_dir: Path, pop: Population, dirs: list, seeds, sweep: dict) -> None:
    """A resumed population has trained past its members' end-of-run evaluations (eval.json, and
    their means in population.json): those describe an earlier step and are removed (_finish writes
    new ones at the end), as a single run's resume removes its eval.json."""
    from .evaluate import remove_stale_eval

    for d in dirs:
        remove_stale_eval(d)
    _write_population_json(run_dir, pop, seeds, sweep, dirs, drop_evals=True)


def save_population(pop: Population, run_dir: Path, dirs: list, seeds, sweep: dict, elapsed: float) -> Path:
    """Write the population checkpoint RUN/checkpoints/step_N.pt (N: steps per member) and each
    member's weights into its own checkpoints/ (what ``proxima eval`` of a member loads); the newest
    ``keep_checkpoints`` of each are kept. Returns the population checkpoint's path."""
    from .train_state import versions

    cfg, step = pop.cfg, pop.iteration * pop.steps_per_member
    spaces = {"observation": ckpt.space_to_dict(pop.env.single_observation_space),
              "action": ckpt.space_to_dict(pop.env.single_action_space)}

    def save_member(i: int) -> None:
        member = {"format": ckpt.FORMAT, "schema_version": ckpt.SCHEMA_VERSION, "config": pop.configs[i].to_dict(),
                  "iteration": pop.iteration, "global_step": step, "spaces": spaces, "env_backend": pop.env.backend,
                  "agent": pop.member_state_dict(i), "population_member": True,
                  "obs_normalizer": norm.state_dict() if (norm := pop.member_obs_normalizer(i)) is not None else None,
                  "population": str(run_dir)}
        ckpt.save_train_state(dirs[i], member, cfg.keep_checkpoints, prune_after=False)

    # the checkpoints a lower --keep-checkpoints drops (the population's and every member's) go before
    # any write needs their room: the members are written side by side, so pruning each only as it is
    # written could leave another's old files on the disk during the first write
    _each(lambda d: ckpt.prune_checkpoints(d, cfg.keep_checkpoints), [run_dir, *dirs])
    # members first, all of them ended: the population checkpoint is the commit point of a resume
    _each(save_member, range(len(dirs)))
    state = {"format": ckpt.FORMAT, "schema_version": ckpt.SCHEMA_VERSION, "kind": CHECKPOINT_KIND, "versions": versions(),
             "configs": [c.to_dict() for c in pop.configs], "seeds": [int(s) for s in seeds],
             "sweep": {k: list(v) for k, v in sweep.items()}, "member_dirs": [d.name for d in dirs],
             "iteration": pop.iteration, "global_step": step, "elapsed": float(elapsed), "spaces": spaces,
             "population": pop.state_dict()}
    path = ckpt.save_train_state(run_dir, state, cfg.keep_checkpoints)
    # the members' older files go only now: until the population's new checkpoint exists, its previous one
    # is what a resume continues, and each member's file of that step is what `proxima eval` of it loads
    _each(lambda d: ckpt.prune_checkpoints(d, cfg.keep_checkpoints), dirs)
    return path


def population_spaces(pop: Population) -> dict:
    """meta.json's ``spaces`` (train_state.run_spaces) of every member: check_members lets members differ
    only in their seed and PER_MEMBER_FIELDS, none of which the env, the encoder, the hidden sizes or
    the activation is, so one description holds for all of them and population.json records it once."""
    import dataclasses

    from .train_state import run_spaces

    cfg = dataclasses.replace(pop.configs[0], encoder=pop.encoder_kind)  # the encoder built, auto resolved
    return run_spaces(types.SimpleNamespace(env=pop.env, cfg=cfg))


def _print_spaces(spaces: dict) -> None:
    from .envs.spaces import spaces_line

    line = (spaces_line(spaces) if "error" not in spaces
            else f"spaces: not described ({spaces['error']}); meta.json records the error")
    print(f"proxima: {line}", file=sys.stderr)


def _write_layout(run_dir: Path, pop: Population, seeds, sweep: dict, argv,
                  call: str = "proxima.population_run.train_population(...)", presets: Optional[list] = None) -> tuple:
    """A new population's files before training: each member's folder, config.yaml and meta.json, and
    population.json. Returns (the member folders, the ``spaces`` their meta.json and population.json record).
    ``presets``: each member's config.preset_applied (``Pendulum-v1/default``, ``none``, None), which its
    meta.json records as a single run's does; population.json records the preset the population applied."""
    from .config import dump_yaml

    from .train_state import git_record, machine_record, started_now, versions, where_started

    # what every member's meta.json shares, gathered once (doctor.collect takes ~0.2 s): the same record
    # as a single run's (train_state._run_meta), machine included, as a member holds a single run's files
    from .rundir import python_command

    # from Python (argv None) the process's argv is a script's or a notebook kernel's, no command that trains
    command = argv if argv is not None else python_command(call)
    shared = {"command": command, "started": started_now(),
              "versions": versions(), "device": str(pop.device), "world_size": 1, **git_record(), **where_started(),
              "env_backend": pop.env.backend, "spaces": population_spaces(pop)}
    machine = machine_record(pop.device)  # best-effort, as for a single run
    if machine is not None:
        shared["machine"] = machine
    swept = list(sweep)
    dirs = [run_dir / member_dir_name(i, cfg, swept) for i, cfg in enumerate(pop.configs)]
    presets = list(presets) if presets is not None else [None] * len(dirs)

    def lay_out(i: int) -> None:
        d, cfg = dirs[i], pop.configs[i]
        (d / "checkpoints").mkdir(parents=True, exist_ok=True)
        cfg.encoder = pop.encoder_kind
        cfg.run_dir = str(d)
        write_atomic(d / "config.yaml", dump_yaml(cfg.to_dict()))
        meta = {"kind": "ppo", "population": str(run_dir), "member": i, **shared, "preset": presets[i]}
        write_atomic(d / "meta.json", json.dumps(meta, indent=2, default=str))

    _each(lay_out, range(len(dirs)))
    # a member whose swept values replace every field the preset set records none, as its single run would;
    # the population applied the preset all the same
    preset = next((p for p in presets if p is not None), None)
    _write_population_json(run_dir, pop, seeds, sweep, dirs, argv=argv, spaces=shared["spaces"], preset=(preset,))
    return dirs, shared["spaces"]


def _write_population_json(run_dir: Path, pop: Population, seeds, sweep: dict, dirs, argv=None, wall=None, evals=None,
                           drop_evals: bool = False, eval_errors: Optional[dict] = None,
                           spaces: Optional[dict] = None, preset: Optional[tuple] = None) -> None:
    """population.json from the population's state: its target (total_timesteps_per_member, rewritten
    when a resume extends it), each member's divergence (``diverged``: iteration, global_step,
    reason; absent for a healthy member) and, with ``evals``, each member's eval mean; without, the
    file's earlier ones are kept unless ``drop_evals`` (a resume has trained past them). ``spaces``: the
    members' (population_spaces), written by a new population and kept by every later write. ``eval_errors``:
    {member index: why its end-of-run evaluation failed}, recorded as its ``eval_error`` (a report then
    says why it has no eval.json rather than advising an evaluation that meets the same failure). ``preset``:
    ``(name,)``, the preset a new population applied (config.preset_applied; ``(None,)``: none), kept by later writes."""
    path = run_dir / POPULATION_FILE
    try:  # the run's own file, checked at resume (read_population_doc); never a traceback at the end of a run
        doc = read_population_doc(run_dir) if path.exists() else {}
    except ckpt.CheckpointError:
        doc = {}
    earlier = {e.get("dir"): e for e in doc.get("member_dirs") or [] if isinstance(e, dict)}
    entries = []
    for i, (d, c) in enumerate(zip(dirs, pop.configs)):
        entry = {"dir": d.name, "seed": c.seed, "settings": {n: getattr(c, n) for n in sweep}}
        before = earlier.get(d.name)
        if evals is not None:
            entry["eval_mean_return"] = evals[i]
        elif not drop_evals and isinstance(before, dict) and "eval_mean_return" in before:
            entry["eval_mean_return"] = before["eval_mean_return"]
        if pop.diverged_at[i] is not None:
            entry["diverged"] = dict(pop.diverged_at[i])
        if eval_errors and i in eval_errors:
            entry["eval_error"] = eval_errors[i]
        entries.append(entry)
    doc.update({
        "kind": "ppo-population", "env_id": pop.cfg.env_id, "members": len(dirs), "seeds": list(seeds),
        "sweep": {k: list(v) for k, v in sweep.items()}, "per_member_fields": list(PER_MEMBER_FIELDS),
        "total_timesteps_per_member": pop.num_iterations * pop.steps_per_member,
        "member_dirs": entries, "members_equal_single_runs": pop.shared_stream_why is None,
    })
    if argv is not None:
        doc["command"] = list(argv)
    if spaces is not None:
        doc["spaces"] = spaces
    if preset is not None:  # (the preset,): a new population's, its members' meta.json "preset"; later writes keep it
        doc["preset"] = preset[0]
    if wall is not None:
        doc["wall_seconds"] = round(wall, 3)
    text = json.dumps(doc, indent=2)
    if not holds_text(path, text):  # a resume of a complete population changes nothing: its file is left as it is
        write_atomic(path, text)  # a fresh temp name, renamed over the file: never through a link


def _log_members(loggers, values: dict, pop: Population, sps: float, elapsed: float, step: int) -> None:
    from .trainer import _metric_row

    for i, lg in enumerate(loggers):
        m = {k: v[i] for k, v in values.items()}
        # the schedule's float64 rate, as a single run logs it; a diverged member's is not used for anything: blank
        lr = pop.scheduled_lrs[i] if pop.diverged_at[i] is None else math.nan
        row = _metric_row(m, sps, lr, elapsed)
        if pop.diverged_at[i] is not None:
            # blank, not 0: the report of the member alone sums this column as "episodes finished", and
            # its rows from before the divergence hold the episodes it really finished
            row["episodes"] = math.nan
        lg.log(pop.iteration, step, row)


def _members(n: int) -> str:
    return f"{n} member{'' if n == 1 else 's'}"


def _setting_of(configs, sweep: Sequence[str] = ()) -> list:
    """Each member's setting: {field: value} of the swept fields (``sweep``: population.json's, so a
    sweep of one value, ``--sweep lr=1e-3``, is labelled here as in the report and the plot), then of
    the other fields its config differs in from the others' (not the seed nor its directory: a
    population built in Python); {} for all of a population of seeds only."""
    rows = [c.to_dict() for c in configs]
    varied = [k for k in rows[0] if k not in ("seed", "run_dir") and k not in sweep
              and len({repr(r.get(k)) for r in rows}) > 1]
    return [{k: r[k] for k in [*sweep, *varied]} for r in rows]


def _per_setting(settings: list, values: list) -> list:
    """[(label, [its members' values])], one per distinct setting (grouped by its values, never by
    its label) in the order of its first member. Settings whose labels (6 significant digits) print
    alike, which --sweep refuses but a population built in Python may hold, are labelled with
    their exact values (repr) instead, so no two lines read the same."""
    from .population_report import setting_label

    groups: dict = {}
    for setting, v in zip(settings, values):
        key = tuple((k, repr(x)) for k, x in setting.items())
        groups.setdefault(key, (setting, []))[1].append(v)
    labels = [setting_label(setting) for setting, _ in groups.values()]
    return [(label if labels.count(label) == 1 else ", ".join(f"{k}={x!r}" for k, x in setting.items()), vs)
            for label, (setting, vs) in zip(labels, groups.values())]


#: the progress line's width where stderr is no terminal (a log file, a pipe) or one of 0 columns
PROGRESS_WIDTH = 200


def _progress_width() -> int:
    """Columns of the terminal stderr writes to; PROGRESS_WIDTH where it is none (or reports 0)."""
    try:
        columns = os.get_terminal_size(sys.stderr.fileno()).columns if sys.stderr.isatty() else 0
    except (OSError, ValueError, AttributeError):
        columns = 0
    return columns or PROGRESS_WIDTH


def _progress(rolling: list, pop: Population, step: int, elapsed: float, sweep: Sequence[str] = (),
              width: Optional[int] = None) -> None:
    """One line: per setting, the mean over its live members of their rolling returns (``rolling``: each
    member's (charts/episodic_return_100, the episodes its window holds), NaN and 0 until it has finished an
    episode), the number a single run's progress line shows and ``proxima plot`` draws per member, with how
    many members have one and the episodes their windows hold ("—" where none has; "diverged" for a setting
    none of whose members is left). The settings that do not fit ``width`` (default: the terminal's,
    _progress_width) are counted, ``+N more settings``, not printed: a sweep of 12 values made a
    700-character line each iteration. The first setting is always shown."""
    from .logger import return_text

    live = [at is None for at in pop.diverged_at]
    parts = []
    for label, rs in _per_setting(_setting_of(pop.configs, sweep), list(zip(rolling, live))):
        head = f"{label}: " if label else ""
        alive = [r for r, ok in rs if ok]
        if not alive:
            parts.append(f"{head}diverged")
            continue
        done = [(mean, episodes) for mean, episodes in alive if episodes and math.isfinite(mean)]
        mean = return_text(sum(m for m, _ in done) / len(done)) if done else "\u2014"
        counts = sorted({episodes for _, episodes in done})  # none before a member's first episode ends (Pendulum)
        span = f"{counts[0]:,}" if len(counts) == 1 else f"{counts[0]:,}-{counts[-1]:,}" if counts else ""
        window = f", {span} ep{' each' if len(done) > 1 else ''}" if done else ""
        frozen = f", {len(rs) - len(alive)} diverged" if len(alive) < len(rs) else ""
        parts.append(f"{head}{mean} ({len(done)} of {len(alive)} member{'s' if len(alive) != 1 else ''}{window}{frozen})")
    start = f"population {pop.members} member{'s' if pop.members != 1 else ''} | step {step:,}/member | mean rolling return "
    end = f" | {elapsed:.1f}s"
    width = width or _progress_width()
    for k in range(len(parts), 0, -1):
        rest = len(parts) - k
        middle = "; ".join(parts[:k] + ([f"+{rest} more setting{'s' if rest != 1 else ''}"] if rest else []))
        if len(start) + len(middle) + len(end) <= width:
            break
    print(start + middle + end, file=sys.stderr)


def _finish(run_dir: Path, pop: Population, dirs, seeds, sweep: dict, wall: float, evaluate_at_end: bool, quiet: bool,
            finished: Optional[Path] = None) -> None:
    """The members' end-of-run evaluations (eval.json), population.json's final record and the closing
    lines. ``finished``: the checkpoint training ended with, which an evaluation's failure names."""
    from .evaluate import EVAL_SEED_OFFSET, current_eval, evaluate
    from .guards import NonFiniteError

    def failed(e: Exception, index: Optional[int], left: list):
        # as a single run's: training is done and kept; which member's evaluation failed, by its directory,
        # and which members have no eval.json because of it (a report would otherwise leave them out unsaid)
        found = re.search(r"\bmember (\d+) env\b", str(e)) if index is None else None
        index = int(found.group(1)) if found and int(found.group(1)) < len(dirs) else index
        who = f"{dirs[index]}: " if index is not None else ""
        kept = f" ({finished})" if finished is not None else ""
        names = ", ".join(dirs[j].name for j in left)
        return type(e)(f"{who}{e}; training finished, its checkpoints are kept{kept}; left unevaluated (no eval.json): {names}")

    evals = []
    wanted = evaluate_at_end and pop.cfg.eval_episodes > 0
    step = pop.iteration * pop.steps_per_member
    # a complete population resumed: the members' end-of-run evaluations on disk are this one (same
    # step, episodes and seeds), shown again rather than recomputed and rewritten
    current = [current_eval(d, step, pop.cfg.eval_episodes) if wanted and at is None else None
               for d, at in zip(dirs, pop.diverged_at)]
    reused = wanted and all(c is not None for c, at in zip(current, pop.diverged_at) if at is None)
    if reused:
        wanted, evals = False, [None if c is None else c["mean_return"] for c in current]
    healthy = [i for i, at in enumerate(pop.diverged_at) if at is None]
    # every member at once where the population can (what evaluate() gives each member's policy)
    try:
        seeds_of_eval = [c.seed + EVAL_SEED_OFFSET for c in pop.configs]
        batched = pop.evaluate_members(pop.cfg.eval_episodes, seeds_of_eval) if wanted else None
    except (EnvError, NonFiniteError, ckpt.CheckpointError) as e:  # its line names the member's index: "member 2 env 0"
        error = failed(e, None, healthy)  # one batched env: no member got an evaluation
        # the run's final record (its wall time) is written all the same: training did finish
        _write_population_json(run_dir, pop, seeds, sweep, dirs, wall=wall, evals=[None] * len(dirs),
                               eval_errors={i: str(error) for i in healthy})
        raise error from None
    errors: dict = {}
    for i, (cfg, d) in enumerate(zip(pop.configs, dirs) if not reused else ()):
        if not wanted or pop.diverged_at[i] is not None:  # a diverged member's frozen weights are no result
            evals.append(None)
            continue
        if batched is not None:
            result = batched[i]
        else:
            policy = ckpt.Policy(pop.member_agent(i), pop.member_obs_normalizer(i), cfg.to_dict(), pop.env.single_observation_space,
                                 pop.env.single_action_space, pop.device)
            try:
                result = evaluate(policy, episodes=cfg.eval_episodes, seed=cfg.seed + EVAL_SEED_OFFSET, backend=cfg.backend)
            except (EnvError, NonFiniteError, ckpt.CheckpointError) as e:
                # one member's failure is its own: the members after it are still evaluated
                errors[i] = e
                evals.append(None)
                continue
        # the step it evaluates: a report tells a final evaluation from one a later resume left behind
        write_atomic(d / "eval.json", json.dumps({**result, "global_step": step}, indent=2))
        evals.append(result["mean_return"])
    if wanted or reused:
        _write_population_json(run_dir, pop, seeds, sweep, dirs, wall=wall, evals=evals,
                               eval_errors={i: str(e) for i, e in errors.items()})
    else:  # --eval-episodes 0: the evaluations still on disk (a finished run resumed with nothing to train) stay
        _write_population_json(run_dir, pop, seeds, sweep, dirs, wall=wall)
    if errors:
        first = min(errors)
        raise failed(errors[first], first, sorted(errors)) from None
    if not quiet and any(e is not None for e in evals):  # one line per setting: settings are not pooled
        lines = [f"eval {pop.cfg.env_id}{' ' + label if label else ''}: "
                 + (f"{len(done)} members, mean of means {sum(done) / len(done):.2f} (min {min(done):.2f}, max {max(done):.2f})"
                    if len(done) > 1 else f"1 member, mean {done[0]:.2f}")
                 for label, values in _per_setting(_setting_of(pop.configs, list(sweep)), evals)
                 for done in [[e for e in values if e is not None]] if done]
        lines[-1] += f"; {wall:.1f}s of training"
        diverged = [d.name for d, at in zip(dirs, pop.diverged_at) if at is not None]
        if diverged:
            lines.append(f"{_members(len(diverged))} diverged and {'was' if len(diverged) == 1 else 'were'} not evaluated: {', '.join(diverged)} (population.json says when)")
        print("\n".join(lines))


def cmd_train_population(args, cfg: PPOConfig) -> int:
    """``proxima train ... --seeds S [--sweep F=v1,v2]``: called by cli.cmd_train."""
    from .terminal import machine_stdout

    # a dry run's stdout is its one JSON line, for a program to read: an env that prints as the checks
    # build it (a research simulator's loading lines) writes to stderr instead
    with machine_stdout(args.dry_run) as out:
        return _train_population(args, cfg, out)


def _train_population(args, cfg: PPOConfig, out) -> int:
    """cmd_train_population, its dry run's JSON line printed to ``out`` (the real stdout)."""
    from .population import parse_seeds, parse_sweep

    refuse_processes(args.nproc)  # cli.cmd_train checks --nproc before launching
    if "seed" in vars(args):
        raise ConfigError("--seed: give a population's seeds with --seeds (e.g. --seeds 1-8), not --seed")
    from .cli import typed_flags

    seeds = parse_seeds(args.seeds) if args.seeds is not None else [cfg.seed]
    sweep = parse_sweep(args.sweep or [])
    typed = typed_flags(args)
    for name in sweep:  # one value typed for a field the sweep sets too: the sweep would silently drop it
        if name in typed:
            # the flag as typed (--learning-rate, lr's other name: cli._OneNameOnly records which), not --lr
            flag = vars(args).get("_names_typed", {}).get(name) or "--" + name.replace("_", "-")
            item = next((i.partition("=")[0].strip() for i in args.sweep or [] if parse_sweep([i]).keys() == {name}), name)
            raise ConfigError(f"{typed_switch(name, typed[name]) or flag + ' ' + shown(typed[name])} and --sweep {item}=... "
                              f"both set {name}; drop one")
    if args.resume is not None:
        target = _resume_target(args, cfg)
        if target is not None:  # continue it; the seeds and sweep this command describes must be the run's, typed or not
            run_dir, checkpoint = target
            given = [n for n, v in (("seeds", args.seeds), ("sweep", args.sweep)) if v is not None]
            if args.dry_run:  # resume_population trains: a dry run never reaches it
                return _dry_run_resume(args, cfg, Path(run_dir), checkpoint, seeds, sweep, given, out)
            run_dir = resume_population(run_dir, overrides=_population_resume_overrides(args, cfg, sweep), quiet=args.quiet,
                                        env_id=args.env_id, trust_run=args.trust_run, seeds=seeds, sweep=sweep,
                                        checkpoint=checkpoint, typed_members=given, argv=typed_command())
            say_population_trained(run_dir, args.quiet)
            return 0
    # sized before the members are built: each is a config to validate, then a member to build (~3 ms
    # and 0.25 MB here), so --seeds 0-100000 sat silent for minutes before any refusal
    from .envs.gym_adapter import action_spaces_built
    from .nets import encoders_resolved

    # the env a dry run's checks build, and the encoder chosen for it: the notes below are of that one
    with action_spaces_built() as spaces, encoders_resolved() as encoders:
        members, probe = sized_members(cfg, seeds, sweep, args.dry_run)
    if args.dry_run:
        # train_population's note, where it prints it (after the sizing, before the members are checked):
        # the dry run's stderr is the run's. Checked and shown as the members train (no --stop-return); the
        # notes below read the configs as given, as train_population's do
        note_single_run_only(members[0].to_dict(), args.quiet)
        trained = [as_member_config(c) for c in members]
        with _norm_adv_swept(sweep):
            check_members(trained)
        from .device import resolve_device
        from .trainer import check_device_flags

        # what the real run's build refuses (--cudagraphs off CUDA), so a dry run never passes a config it would not
        check_device_flags(members[0], resolve_device(members[0].device))
        if cfg.run_dir is not None:  # what the population's claim of the directory would refuse (as for one run)
            from .run_setup import check_new_run_dir

            try:
                check_new_run_dir(cfg.run_dir, overwrite=args.overwrite, restart=args.resume == "auto")
            except RunDirError as e:
                _refuse_other_members(e, Path(cfg.run_dir), seeds, sweep)
        _note_whole_iterations(members[0], "total_timesteps" in typed)
        if not args.quiet:  # the notes train --seeds prints once its env is built, as a single run's dry run does
            from .cli import built_for_notes
            from .trainer import note_run

            note_run(members[0], typed, False, *built_for_notes(spaces, encoders), population=True)
        # the config every member shares, resolved as a single run's dry run prints it (preset < --config
        # FILE < flags, encoder auto as the one each member's config.yaml records); the seed and the swept
        # fields are per member: given by "seeds" and "sweep"
        import dataclasses

        shown_cfg = trained[0]
        if encoders and shown_cfg.encoder != encoders[0][0]:
            shown_cfg = dataclasses.replace(shown_cfg, encoder=encoders[0][0])
        shared = {k: v for k, v in shown_cfg.to_dict().items() if k != "seed" and k not in sweep}
        where = Path(cfg.run_dir) if cfg.run_dir is not None else default_population_dir(cfg, seeds)
        estimate = _estimate(trained[0], len(members), probe, where, args.quiet)
        print(json.dumps({"members": len(members), "seeds": seeds, "sweep": sweep, "config": shared, "estimate": estimate}),
              file=out)
        return 0
    restart = "--resume auto found no checkpoint to continue" if args.resume == "auto" else None
    run_dir = train_population(members, seeds, sweep, argv=typed_command(), quiet=args.quiet, overwrite=args.overwrite, restart_note=restart,
                               typed_total="total_timesteps" in typed, probe=probe, typed=typed)
    say_population_trained(run_dir, args.quiet)
    return 0


def sized_members(cfg: PPOConfig, seeds: Sequence[int], sweep: dict, dry_run: bool = False) -> tuple:
    """(member configs, env probe) of a new population of ``seeds`` x ``sweep`` over ``cfg``: sized
    (_size_population) before the members are built, so a huge --seeds is refused in one line at once
    rather than after minutes of building configs. ``train --seeds`` and train_population_from_python both start here."""
    from .population import member_configs

    first = member_configs(cfg, seeds[:1], {name: values[:1] for name, values in sweep.items()})[0]
    with _norm_adv_swept(sweep):
        probe = _size_population(first, len(seeds) * math.prod(len(values) for values in sweep.values()), dry_run, list(sweep))
    return member_configs(cfg, seeds, sweep), probe


@contextlib.contextmanager
def _norm_adv_swept(sweep: dict):
    """validate's refusal of minibatches of 1 sample under advantage normalization, reworded where ``sweep``
    sets norm_adv: its --no-norm-adv (norm_adv=False) would be refused beside the sweep (both set norm_adv), so
    the line names what works here, fewer minibatches or the sweep without its true (config.norm_adv_fix)."""
    from .config import norm_adv_fix

    try:
        yield
    except ConfigError as e:
        if "norm_adv" in sweep:
            for python in (False, True):
                if norm_adv_fix(python=python) in str(e):
                    raise ConfigError(str(e).replace(norm_adv_fix(python=python), norm_adv_fix(True, python))) from None
        raise


def say_population_trained(run_dir: Path, quiet: bool) -> None:
    """cli.say_trained for a population that trained to its end: its env and per-member total from
    population.json (a population has no --stop-return: every member reached the total)."""
    from .cli import say_trained

    try:
        doc = read_population_doc(run_dir)
    except ckpt.CheckpointError:  # edited under the run: the closing line still names the directory
        doc = {}
    total = doc.get("total_timesteps_per_member")
    say_trained(run_dir, doc.get("env_id"), total, total, quiet, population=True)


def _size_population(first: PPOConfig, count: int, dry_run: bool, swept: Sequence[str] = ()):
    """check_population_fits for ``count`` members like ``first`` (the first member's config, checked
    first as check_members would: its line, not a sizing of a config that cannot run); returns the
    probe of the env's sizes, asked once, for train_population's own check. A dry run builds the env
    as a single run's dry run does (run_setup.check_env_builds: the encoder too). ``swept``: the fields
    --sweep sets, whose refused value is named as check_members names it (``--sweep lr: value nan: ...``)."""
    import functools

    from .config import validate
    from .device import resolve_device
    from .run_setup import check_env_builds, check_preset_backend
    from .envs.gym_adapter import check_extra_installed
    from .sizing import env_probe

    check_extra_installed(first.env_id, first.backend)  # before validate's arithmetic, as a single run's (review 49)
    try:
        validate(first)
    except ConfigError as e:  # validate names the flag (--lr), which the user did not type: name the --sweep they did
        flag, _, why = str(e).partition(": ")
        name = flag.partition(" ")[0][2:].replace("-", "_")
        if flag.startswith("--") and name in swept and why:
            raise ConfigError(f"--sweep {name}: value {getattr(first, name)!r}: {why}") from None
        from .signals import from_python

        if from_python():  # train_population(PPOConfig(gamma=2.0), ...): the field the script set, not a flag
            validate(first, python=True)
        raise
    if dry_run:
        # no --init-from checks: populations refuse it (check_members's line, as the run that trains says)
        sizes = check_env_builds(first, init_from=False)
        probe = lambda: sizes  # noqa: E731
    else:
        check_preset_backend(first)  # before the probe builds the env, whose line would name a --backend never given
        probe = functools.lru_cache(maxsize=None)(env_probe(first))
    check_population_fits(first, count, resolve_device(first.device), probe)
    return probe


def _note_whole_iterations(cfg: PPOConfig, typed_total: bool) -> None:
    """A new single run's note on a typed --total-timesteps that is not a whole number of iterations
    (trainer._note_whole_iterations: one process), under --quiet and --dry-run too: the members train
    the whole iterations (population.json's total_timesteps_per_member) while their config.yaml, as a
    single run's, keeps the total typed. total_timesteps is not swept: one note holds for every member."""
    if typed_total:
        from .signals import from_python
        from .trainer import _note_whole_iterations as note

        note(cfg, 1, f"PPOConfig.total_timesteps = {cfg.total_timesteps:,}" if from_python() else None)


def _estimate(cfg: PPOConfig, members: int, probe, run_dir: Path, quiet: bool) -> dict:
    """population.population_estimate for a dry run's JSON, with its note on stderr unless ``quiet``."""
    from .device import resolve_device
    from .population import estimate_line, population_estimate

    estimate = population_estimate(cfg, members, resolve_device(cfg.device), probe, run_dir)
    if not quiet:
        print(estimate_line(estimate, members, cfg.keep_checkpoints), file=sys.stderr)
    return estimate


def _dry_run_resume(args, cfg: PPOConfig, run_dir: Path, checkpoint, seeds: list, sweep: dict, given: list, out) -> int:
    """``train --seeds ... --resume RUN --dry-run``: the resume's checks (checked_resume), read only:
    nothing locked, written, renamed or set aside; prints what it would continue as one JSON line to
    ``out`` (members, seeds, sweep, the checkpoint, its step per member, the total per member as it
    trains: whole iterations, population.json's total_timesteps_per_member; the estimate of a new
    population's dry run), with the real resume's notes on the total and on --anneal-lr's schedule."""
    from .config import batch_size, num_iterations
    from .device import resolve_device
    from .envs.gym_adapter import treat_as_data
    from .run_setup import check_env_builds

    if not is_population_dir(run_dir):
        raise ConfigError(f"{run_dir}: not a population run directory (no {POPULATION_FILE})")
    treat_as_data(run_dir)  # the env is built next: never from the run's files
    overrides = _population_resume_overrides(args, cfg, sweep)
    state, configs, names, recorded_seeds, recorded_sweep = checked_resume(
        run_dir, overrides, args.env_id, args.trust_run, seeds, sweep, checkpoint, given, dry_run=True, quiet=args.quiet)
    sizes = check_env_builds(configs[0])
    check_population_fits(configs[0], len(configs), resolve_device(configs[0].device), lambda: sizes)
    if int(state["iteration"]) < num_iterations(configs[0]):  # resume_population's notes, where it prints them
        if "total_timesteps" in overrides:
            from .trainer import _note_whole_iterations as note

            note(configs[0], 1, resumed=True)
        _note_lr_schedule(configs, state, names, recorded_sweep)
    estimate = _estimate(configs[0], len(configs), lambda: sizes, run_dir, args.quiet)
    print(json.dumps({"members": len(configs), "seeds": recorded_seeds, "sweep": recorded_sweep, "resume": str(state["path"]),
                      "global_step": int(state["global_step"]),
                      "total_timesteps": num_iterations(configs[0]) * batch_size(configs[0]), "estimate": estimate}), file=out)
    return 0


def _population_resume_overrides(args, cfg: PPOConfig, sweep: dict) -> dict:
    """What ``train --seeds ... --resume`` asks to change: the typed flags and a typed --preset's and
    --config FILE's values (cli.resume_overrides), checked as a single run's. The seed and the swept
    fields a preset or file gives are left out: a new population sets them per member (--seeds,
    --sweep) over those values, so the command that started it resumes it."""
    from .cli import resume_overrides, typed_fields

    overrides = resume_overrides(args, cfg)[0]
    typed = set(typed_fields(args))
    return {name: value for name, value in overrides.items() if name in typed or (name not in sweep and name != "seed")}


def _resume_target(args, cfg: PPOConfig) -> Optional[tuple]:
    """(population directory, checkpoint file or None) that ``train --seeds ... --resume`` continues:
    the given directory, or the given checkpoint's run and that file; for ``auto`` the --run-dir when
    it holds a population checkpoint (None: start it afresh)."""
    if args.resume != "auto":
        path = Path(args.resume)
        if path.is_file() and path.parent.name == "checkpoints":
            return path.parent.parent, path
        return path, None
    run_dir = getattr(args, "run_dir", None) or cfg.run_dir
    if run_dir is None:
        raise ConfigError("--resume auto needs --run-dir DIR (the population to continue)")
    run_dir = Path(run_dir)
    if ckpt.list_checkpoints(run_dir):
        if not is_population_dir(run_dir):
            raise ConfigError(f"--resume auto: {run_dir} holds a single run, not a population; drop --seeds/--sweep to resume "
                              "it, or choose another --run-dir for the population (or start over there with --overwrite "
                              "in place of --resume auto: the run is moved aside)")
        return run_dir, None
    return None


# ------------------------------------------------------------------------------------ from Python


@dataclasses.dataclass(frozen=True)
class PopulationMember:
    """One member of a trained population, as its population.json entry records it."""

    dir: Path
    """The member's run directory (RUN/m000-seed1-lr0.001): ``proxima.load(member.dir)`` is its policy."""
    seed: int
    """Its training seed."""
    settings: dict
    """{field: value} of the swept fields ({} for a population of seeds only)."""
    eval_mean_return: Optional[float]
    """Mean return of its end-of-run evaluation (its eval.json's ``mean_return``); None when it has none
    (``eval_episodes=0``, ``evaluate_at_end=False``, a diverged member, a failed evaluation)."""
    diverged: Optional[dict]
    """When and why it diverged (iteration, global_step, reason; its diverged.json); None for a healthy member."""


@dataclasses.dataclass(frozen=True)
class PopulationResult:
    """What proxima.train_population returns: the population's directory and its members in
    population.json's order (settings outer, seeds inner, as the member folders are numbered)."""

    run_dir: Path
    """The population's directory (population.json, checkpoints/, one folder per member)."""
    members: tuple
    """(PopulationMember, ...): one per member."""

    @classmethod
    def read(cls, run_dir) -> "PopulationResult":
        """The result of the population in ``run_dir`` (one trained by ``proxima train --seeds`` too), read
        from its population.json; CheckpointError naming the file when it is damaged or edited: every check
        of report's reader (population_report.read_settings: a setting no --sweep wrote, a seed outside
        0..MAX_SEED, a member folder listed twice, missing, or a link out of the population), and an
        eval_mean_return past a float's range."""
        from .population_report import PopulationError, read_settings, shortened

        run_dir = Path(run_dir)
        doc = read_population_doc(run_dir)
        entries = doc.get("member_dirs")
        members = []
        for entry in entries if isinstance(entries, list) else [None]:
            ok = (isinstance(entry, dict) and is_plain_name(entry.get("dir")) and _is_int(entry.get("seed"))
                  and isinstance(entry.get("settings", {}), dict))
            if not ok:
                raise ckpt.CheckpointError(f"{run_dir / POPULATION_FILE}: member_dirs holds {_kind(entry)} where a member "
                                           f"entry (dir, seed, settings) belongs; the population's {POPULATION_FILE} was "
                                           "damaged or edited")
            mean = entry.get("eval_mean_return")
            try:
                mean = float(mean) if isinstance(mean, (int, float)) and not isinstance(mean, bool) else None
            except OverflowError:  # an int of 400 digits: no return a member measured
                raise ckpt.CheckpointError(f"{run_dir / POPULATION_FILE}: member entry {entry['dir']!r} has eval_mean_return "
                                           f"{shortened(str(entry['eval_mean_return']))}, past a float's range; the "
                                           f"population's {POPULATION_FILE} was damaged or edited") from None
            members.append(PopulationMember(run_dir / entry["dir"], entry["seed"], dict(entry.get("settings") or {}),
                                            mean, entry.get("diverged") if isinstance(entry.get("diverged"), dict) else None))
        try:  # the checks report, plot and eval make, so that member.dir is never a folder outside the population
            read_settings(run_dir)
        except PopulationError as e:
            raise ckpt.CheckpointError(str(e)) from None
        return cls(run_dir, tuple(members))

    def settings_table(self, threshold: Optional[float] = None) -> list:
        """The rows of ``proxima report RUN``'s table, one dict per setting (population_report.summarize_settings,
        nothing evaluated anew): ``settings``, ``seeds``, ``dirs``, ``kind`` ("eval": the members' eval.json
        returns; "training": their last training returns, when none has one), ``n``, ``mean``, ``mean_ci``,
        ``iqm``, ``iqm_ci`` (95% bootstrap CIs over members, None under 2), ``left_out`` and, with
        ``threshold``, ``solved`` (the fraction of members at or above it)."""
        from .population_report import summarize_settings

        return summarize_settings(self.run_dir, threshold, episodes=0, quiet=True)


#: how many seeds a refusal of train_population's ``seeds`` shows before it elides the rest
SHOWN_SEEDS = 8


def seeds_given(seeds) -> list:
    """train_population's ``seeds`` (a range, list or tuple of integers, or --seeds's text ``"1-10"``) as a
    list, checked as --seeds is (parse_seeds: none repeated, each in 0..MAX_SEED, at most MAX_MEMBERS);
    ConfigError naming ``seeds=`` and the value."""
    import numbers

    from .population import MAX_MEMBERS, parse_seeds

    if isinstance(seeds, str):
        return parse_seeds(seeds)
    example = "e.g. seeds=range(1, 11) or seeds=[1, 5, 9]"
    if isinstance(seeds, numbers.Integral) and not isinstance(seeds, bool):
        raise ConfigError(f"seeds={seeds!r}: expected a list of seeds, not a count; seeds=[{seeds}] trains seed {seeds}, "
                          f"seeds=range(1, {int(seeds) + 1}) {seeds} seeds")
    if isinstance(seeds, (bytes, dict, set, frozenset)) or not hasattr(seeds, "__iter__"):
        raise ConfigError(f"seeds: expected a range, list or tuple of integer seeds ({example}), got {type(seeds).__name__}")
    if hasattr(seeds, "__len__") and len(seeds) > MAX_MEMBERS:  # before a range of billions is listed
        raise ConfigError(f"seeds: {len(seeds):,} seeds; a population holds at most {MAX_MEMBERS:,}")
    listed = list(seeds)
    if not listed:
        raise ConfigError(f"seeds: empty; give at least one seed ({example})")
    for s in listed:
        if not isinstance(s, numbers.Integral) or isinstance(s, bool):
            raise ConfigError(f"seeds: {s!r} is not an integer seed ({example})")
    listed = [int(s) for s in listed]
    spec = ",".join(map(str, listed))
    try:
        return parse_seeds(spec)
    except ConfigError as e:  # its line names --seeds '1,1', which the script did not write
        shown_list = listed if len(listed) <= SHOWN_SEEDS else [*listed[:SHOWN_SEEDS - 1], "...", listed[-1]]
        text = "[" + ", ".join(map(str, shown_list)) + "]"
        raise ConfigError(f"seeds={text}{str(e).removeprefix(f'--seeds {spec!r}')}") from None


def python_sweep_line(line: str, sweep: dict) -> str:
    """A --sweep refusal (parse_sweep, check_sweep_field, check_members) in the words of the train_population
    call that got it: the sweep= entry the script wrote (``sweep={'lr': [0.001, 0.001]}: a value is repeated``),
    each flag it names as the field (config.python_words), never a --sweep it did not type; another line as it is."""
    from .config import ALIASES, python_words

    def field(key) -> str:  # as parse_sweep reads a key: learning_rate is lr
        name = str(key).strip().lstrip("-").replace("-", "_")
        return ALIASES.get(name, name)

    named = [(key, field(key)) for key in sweep if line.startswith(f"--sweep {field(key)}:")]
    if not named:
        return line
    key, name = max(named, key=lambda kn: len(kn[1]))  # the longest field the line names (lr_x before lr)
    rest = line[len(f"--sweep {name}"):]
    both = [k for k, n in named if n == name]
    if len(both) > 1:  # sweep={'lr': [...], 'learning_rate': [...]}: two keys of one field
        return f"sweep: {' and '.join(map(repr, both))} both name {name}; give all its values under one key, sweep={{{name!r}: [...]}}"
    values = list(sweep[key])
    shown_values = values if len(values) <= SHOWN_SEEDS else [*values[:SHOWN_SEEDS - 1], Ellipsis, values[-1]]
    entry = f"sweep={{{key!r}: [{', '.join('...' if v is Ellipsis else repr(v) for v in shown_values)}]}}"
    if name == "seed":
        return f"{entry}: give seeds with seeds= (e.g. seeds=range(1, 9)), not in the sweep"
    return entry + python_words(rest)


def sweep_given(sweep) -> dict:
    """train_population's ``sweep`` ({field: [values]}) checked and typed as --sweep's (parse_sweep: a
    sweepable field, each value valid, none repeated or printed alike); its refusals are --sweep's lines in
    the call's words (python_sweep_line)."""
    import numbers

    from .population import parse_sweep

    example = "e.g. sweep={'lr': [3e-4, 1e-3]}"
    if not isinstance(sweep, dict):
        raise ConfigError(f"sweep: expected a dict of field: [values] ({example}), got {type(sweep).__name__}")

    def text(name, v) -> str:
        if v is None:
            return "none"
        if isinstance(v, bool) or not isinstance(v, (numbers.Real, str)):
            return str(v)  # refused by the field's coercion, in --sweep's line
        if isinstance(v, numbers.Integral):
            return str(int(v))
        if isinstance(v, numbers.Real):
            return repr(float(v))  # round-trips exactly (a numpy float64 too)
        if "," in v or not v.strip():
            raise ConfigError(f"sweep[{name!r}]: value {v!r}: expected a number; give the values as a list, {example}")
        return v

    items = []
    for name, values in sweep.items():
        if not isinstance(name, str):
            raise ConfigError(f"sweep: key {name!r}: expected a field name ({example})")
        if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
            raise ConfigError(f"sweep[{name!r}]: expected a list of values, got {values!r}; {example}")
        values = list(values)
        if not values:
            raise ConfigError(f"sweep[{name!r}]: no values; give at least one ({example})")
        items.append(f"{name}={','.join(text(name, v) for v in values)}")
    try:
        return parse_sweep(items)
    except ConfigError as e:  # a value refused (sweep={'norm_adv': [True, 'maybe']}): not the --sweep item it became
        for item, (name, values) in zip(items, sweep.items()):
            if str(e).startswith(f"--sweep {item}: "):
                why = str(e)[len(f"--sweep {item}: "):]
                refused = next(((v,) for v in values if why.startswith(f"{text(name, v)!r}: ")), None)
                if refused:  # the value as the script gave it (True, None), not the text it became ('True')
                    why = f"value {refused[0]!r}: {why[len(repr(text(name, refused[0]))) + 2:]}"
                raise ConfigError(f"sweep={{{name!r}: {list(values)!r}}}: {why}") from None
        raise ConfigError(python_sweep_line(str(e), sweep)) from None


def train_population_from_python(config: Optional[PPOConfig], seeds=None, sweep: Optional[dict] = None, run_dir=None,
                                 resume=None, quiet: bool = False, overwrite: bool = False, evaluate_at_end: bool = True,
                                 trust_run: bool = False) -> PopulationResult:
    """proxima.train_population: what ``proxima train ENV --seeds S --sweep F=v1,v2 [--resume RUN]`` does,
    the same checks and code path (sized_members, train_population, resume_population), with Python's
    words in the lines that say how to go on (``overwrite=True``). Returns PopulationResult.read of the
    population's directory."""
    from .signals import hold_python_caller

    release = hold_python_caller(True)
    try:
        return PopulationResult.read(_population_from_python(config, seeds, sweep, run_dir, resume, quiet, overwrite,
                                                             evaluate_at_end, trust_run))
    finally:
        release()


def _population_from_python(config, seeds, sweep, run_dir, resume, quiet, overwrite, evaluate_at_end, trust_run) -> Path:
    import copy

    from .rundir import expand_home
    from .trainer import set_fields

    refuse_processes()  # every rank would train the same population in the same directory
    for name, value in (("run_dir", run_dir), ("resume", resume)):  # as train() refuses them
        if isinstance(value, (str, os.PathLike)) and not os.fspath(value).strip():
            raise ConfigError(f"train_population({name}={os.fspath(value)!r}): empty; give a directory (or None)")
    wanted = "a PPOConfig (PPOConfig(...) or proxima.presets.resolve(...))"
    if config is None and resume is None:
        raise ConfigError(f"train_population(config): expected {wanted}, got None; train_population(None, resume=RUN_DIR) "
                          "continues a population with its recorded config")
    if config is not None and not isinstance(config, PPOConfig):
        raise ConfigError(f"train_population(config): expected {wanted}, got {type(config).__name__}")
    run_dir = expand_home(run_dir)
    if config is not None:  # the members are built from a copy: the caller's config is not changed
        config = copy.copy(config)
        config.run_dir = expand_home(config.run_dir)
    seed_list = None if seeds is None else seeds_given(seeds)
    sweep_dict = None if sweep is None else sweep_given(sweep)
    target = None
    if resume is not None:
        target = _python_resume_target(expand_home(resume) if resume != "auto" else resume,
                                       run_dir if run_dir is not None or config is None else config.run_dir)
    if target is not None:
        where, checkpoint = target
        if run_dir is not None and resume != "auto" and Path(run_dir).resolve() != Path(where).resolve():
            raise ConfigError(f"train_population(run_dir={os.fspath(run_dir)!r}, resume={os.fspath(resume)!r}): a population "
                              f"continues in its own directory, {where}; drop run_dir")
        overrides, env_id = {}, None
        if config is not None:  # the fields the config sets count as the flags typed, as train()'s resume takes them
            overrides = {k: v for k, v in set_fields(config).items() if k != "seed" and k not in (sweep_dict or {})}
            env_id = config.env_id if config.env_id != PPOConfig().env_id or resume == "auto" else None
        given = [n for n, v in (("seeds", seed_list), ("sweep", sweep_dict)) if v is not None]
        return resume_population(where, overrides=overrides, quiet=quiet, env_id=env_id, trust_run=trust_run,
                                 evaluate_at_end=evaluate_at_end, seeds=seed_list, sweep=sweep_dict, checkpoint=checkpoint,
                                 typed_members=given)
    if config is None:  # resume='auto' on a directory with no checkpoint: a new population, which needs a config
        raise ConfigError(f"train_population(None, resume='auto'): {run_dir} holds no checkpoint to continue, and a new "
                          f"population needs {wanted}")
    if seed_list is None:
        if config.seed is None:
            raise ConfigError("train_population(seeds=None): PPOConfig.seed is None too; give the members' seeds, "
                              "e.g. seeds=range(1, 11)")
        seed_list = [config.seed]
    sweep_dict = sweep_dict or {}
    try:
        members, probe = sized_members(config, seed_list, sweep_dict)
    except ConfigError as e:  # the first member's swept value refused (sweep={'lr': [nan]}), as check_members's below
        if str(e).startswith("--sweep "):
            raise ConfigError(python_sweep_line(str(e), sweep or {})) from None
        raise
    # a refused swept value as the sweep entry the script wrote (``sweep={'gamma': [0.9, 2.0]}: value 2.0: ...``):
    # the population's own check, from Python, would name PPOConfig.gamma, which the script left as it was
    from .population import check_members

    with _norm_adv_swept(sweep_dict):
        try:
            check_members([as_member_config(c) for c in members])
        except ConfigError as e:  # a field the script set, not swept (num_minibatches): PPOConfig's words, as train()'s
            if str(e).startswith("--sweep "):
                raise ConfigError(python_sweep_line(str(e), sweep or {})) from None
            if str(e).startswith("--"):
                check_members([as_member_config(c) for c in members], python=True)
            raise
    restart = "resume='auto' found no checkpoint to continue" if resume == "auto" else None
    return train_population(members, seed_list, sweep_dict, run_dir=run_dir, quiet=quiet, overwrite=overwrite,
                            evaluate_at_end=evaluate_at_end, restart_note=restart,
                            typed_total=config.total_timesteps != PPOConfig().total_timesteps, probe=probe,
                            call="proxima.train_population(...)")


def _python_resume_target(resume, run_dir) -> Optional[tuple]:
    """_resume_target for train_population's ``resume``: (population directory, checkpoint file or None);
    for ``"auto"``, ``run_dir`` when it holds a checkpoint, else None (a new population there)."""
    if resume != "auto":
        path = Path(resume)
        if path.is_file() and path.parent.name == "checkpoints":
            return path.parent.parent, path
        return path, None
    if run_dir is None:
        raise ConfigError("train_population(resume='auto'): give run_dir=RUN_DIR (the population to continue, or to "
                          "start there when it holds no checkpoint)")
    run_dir = Path(run_dir)
    if not ckpt.list_checkpoints(run_dir):
        return None
    if not is_population_dir(run_dir):
        raise ConfigError(f"train_population(resume='auto'): {run_dir} holds a single run, not a population; continue it "
                          f"with proxima.train(None, resume={str(run_dir)!r})")
    return run_dir, None
