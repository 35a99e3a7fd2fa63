"""Before a run trains, and when it fails: which checkpoint it continues (and which flags a resume
may change), and the user's error for an unexpected failure (a broken env, a full disk).

``resolve_start`` runs on rank 0 before the Trainer is built: for a resume it locks the run
directory, loads its newest usable checkpoint and checks the env id and the flags against it; for a
new run it picks the run directory. ``diagnose_failure`` turns an exception from the outer loop into
the one line the CLI prints. The loop itself is trainer.py; the directory rules are rundir.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

from . import checkpoint as ckpt
from .config import ConfigError, PPOConfig, batch_size, recorded_config
from .guards import NonFiniteError
from .train_state import default_run_dir


def diagnose_failure(e: Exception, config: Optional[PPOConfig], last_good) -> Exception:
    """The user's error for an unexpected failure: a user env that breaks the contract (checked as
    ``proxima check-env`` would), or a write that failed (disk full, a file size limit) -- else ``e`` itself.

    A rank's lost contact with another rank (a collective's error after a rank failed or was stopped)
    is ``e`` itself at once: the env is not built and stepped again (torchrun's SIGTERM would land in
    that diagnosis, or a contract check would blame the env for another rank's failure), and the rank
    reports it as such (DistContext.report_failure)."""
    import errno

    from .checkpoint import CheckpointError
    from .distributed import lost_peer
    from .diskspace import StorageError, is_stdout_failure, write_error
    from .envs import NATIVE_ENVS, EnvError

    if lost_peer(e) or is_stdout_failure(e):  # stdout's own failure: the CLI says so in its one line
        return e
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES):
        # a buffered write's OSError names no file; one re-raised from the open()'s or another call's error
        # that does names it there. An error it was raised while handling (__context__) may be unrelated
        # and already handled (a FileNotFoundError of an os.stat that probed eval.json): its file only
        # when it failed the same way. bytes (os calls given bytes) shown as the path
        context = e.__context__ if isinstance(e.__context__, OSError) and e.__context__.errno == e.errno else None
        named = next((x.filename for x in (e, e.__cause__, context) if isinstance(x, OSError) and x.filename), None)
        where = os.fsdecode(named) if isinstance(named, (str, bytes, os.PathLike)) else "a file of the run"
        return write_error(where, e, suffix=f"; {last_good()}" if last_good else "")
    if isinstance(e, StorageError) and last_good and "checkpoint" not in str(e):
        return StorageError(f"{e}; {last_good()}")
    # "there is no earlier checkpoint" says it already: no "(no checkpoint was written yet ...)" after it
    if isinstance(e, CheckpointError) and str(e).endswith("any earlier checkpoint is kept") and last_good:
        return CheckpointError(f"{e} ({last_good()})")
    if config is None or isinstance(e, (ConfigError, EnvError, CheckpointError, NonFiniteError, StorageError)):
        return e
    if config.env_id in NATIVE_ENVS and config.backend != "gymnasium":
        return e
    from .envs.checker import check_env

    try:
        violations = check_env(config.env_id, env_kwargs=config.env_kwargs)  # check-env's defaults: the same words as `proxima check-env`
    except Exception:
        return e
    if not violations:
        return e
    from .envs.gym_adapter import check_env_cmd

    more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
    # check-env's first violation may not be what stopped the run (it steps its own env, with its own
    # seed): the run's own exception stays in the line, so neither is lost
    raised = " ".join(f"{type(e).__name__}: {e}".split())
    raised = raised if len(raised) <= 200 else raised[:197] + "..."
    return EnvError(f"env '{config.env_id}' breaks the env contract: {violations[0]}{more}; "
                    f"see `{check_env_cmd(config.env_id, config.env_kwargs)}` (the run stopped on {raised})")


def resumed_run_dir(resume) -> tuple:
    """(checkpoint, run directory) of a resume of ``resume``: the checkpoint file it names (a run
    directory's latest), as named, and the directory the resume trains in, as a real path (the
    launcher checks the lock its ranks take): ``resume`` itself when it is a directory, else the one
    whose checkpoints/ folder the file is named in (RUN/checkpoints/step_N.pt -> RUN). Never the run a
    link there leads to (resolve_checkpoint refuses one leading out of RUN: the lock and checks are
    RUN's, the writes would be the other run's), nor a path recorded inside the file (a copied or
    downloaded checkpoint would train into, and prune, the run it came from). A link the user gave
    outside any checkpoints/ folder continues the run that holds its target. The directory is None
    for a loose checkpoint file (its run is the --run-dir given)."""
    src = ckpt.resolve_checkpoint(resume, resuming=True)
    held = checkpoint_in_run(src)
    return src, (ckpt.run_dir_of(held) if held.absolute().parent.name == "checkpoints" else None)


def checkpoint_in_run(checkpoint) -> Path:
    """``checkpoint`` as it lies in its run: as named when it is named in a checkpoints/ folder (a link
    there is the run's own entry), else through its links (a loose link to a run's checkpoint)."""
    checkpoint = Path(checkpoint)
    return checkpoint if checkpoint.absolute().parent.name == "checkpoints" else checkpoint.resolve()


def resumes_rlhf(path) -> bool:
    """Whether ``proxima resume PATH`` continues an RLHF run (proxima rlhf): the "kind" its meta.json
    records. A meta.json that is there but holds no JSON object (damaged or edited) does not stop a
    PPO run's resume, which goes on and says so (train_state.record_resume), as train --resume does;
    the run's other files decide then: checkpoints named as RLHF names them (step_N.pt in six digits,
    rlhf.rundir.save_checkpoint; PPO's have twelve, checkpoint.checkpoint_path), or, before any
    checkpoint, RLHF's samples.jsonl or policy/. Such a run's resume needs its meta.json (the process
    count it records): the file's one line (RunDirError) is raised then."""
    import re

    from .rundir import RunDirError, recorded_kind

    path = Path(path)
    try:
        return recorded_kind(path / "meta.json", strict=True) == "rlhf"
    except RunDirError:
        try:
            names = [p.name for p in (path / "checkpoints").iterdir()] if (path / "checkpoints").is_dir() else []
        except OSError:
            names = []
        steps = [m.group(1) for m in map(re.compile(r"^step_(\d+)\.pt$").match, names) if m]
        if any(len(digits) == 12 for digits in steps):
            return False
        if steps or any(os.path.lexists(path / name) for name in ("samples.jsonl", "policy")):
            raise
        return False


def resolve_start(config: Optional[PPOConfig], run_dir, resume, session, env_id: Optional[str] = None,
                    trust_run: bool = False, overrides: Optional[dict] = None, sources: Optional[dict] = None,
                    quiet: bool = False):
    """(state, config, run_dir, resumed, restart_note): the checkpoint to continue from, if any (rank 0
    runs this; a resumed run directory is locked in ``session`` before its checkpoint is read).
    ``sources``, ``quiet``: apply_resume_overrides's."""
    from .envs.gym_adapter import treat_as_data
    from .rundir import unique_default

    restart = None
    if resume == "auto":
        resume = auto_resume_target(config, run_dir)
        if resume is None:  # nothing to continue: a new run (files of one that never checkpointed are moved aside)
            restart = "--resume auto found no checkpoint to continue"
    if resume is None:
        given, default = run_dir, run_dir is None and config.run_dir is None
        if default:
            run_dir = unique_default(default_run_dir(config))
        run_dir = Path(run_dir if run_dir is not None else config.run_dir)
        check_run_dir_path(run_dir, default)
        if given is not None:  # train(cfg, run_dir=X): config.yaml records X, not the config's other directory or none
            config.run_dir = str(run_dir)
        return None, config, run_dir, False, restart
    src, target_dir = resumed_run_dir(resume)  # a missing path fails here, before anything is locked
    for folder in ckpt.data_folders(src):
        treat_as_data(folder)  # never import env code from the run directory itself
    loose = target_dir is None
    recorded = None  # the run's config.yaml: (config, why it was not read)
    if loose:
        target_dir = loose_run_dir(resume, config, run_dir, overrides)
        state = ckpt.load_resumable(src)
    else:
        session.lock_existing(target_dir)
        state = _resumable_member_first(resume)
        recorded = read_run_config(target_dir)
        check_same_run(state, target_dir, recorded[0])
    config = resumed_config(state, env_id, trust_run, overrides, "resume" if config is None else "train --resume",
                            notes=not loose, sources=sources, quiet=quiet)
    note = ckpt.version_note(state)
    if note:  # under --quiet too: a warning that the resume computes with other code, as once per run (rank 0's work)
        from .terminal import printable

        print(printable(f"proxima: note: {note}"), file=sys.stderr)
    # after check_same_run (another run's checkpoint copied in is named as that) and resumed_config's
    # counter check (an edited counter is named as that): the step its name says
    ckpt.check_step(state, counters=False)
    backend = resumed_backend(config, state)  # refused before any file is set aside or claimed
    if loose:
        refuse_loose_finished(resume, config, state, target_dir)
    from .distributed import context

    # here, in rank 0's work, not in each rank's restore: torchrun's ranks report it once (DistContext.from_main)
    check_processes(state, context().world_size, launcher=False)
    run_dir = target_dir  # the directory locked and checked is the one written
    if loose:  # a new run directory, claimed as a fresh run's (refused when it holds files)
        from .rundir import RunDirError

        try:
            session.claim_fresh(target_dir, command="resume")
        except RunDirError:
            way = stuck_loose_line(target_dir)  # an earlier resume of a loose file stopped there before its first checkpoint
            if way is None:
                raise
            raise RunDirError(f"{target_dir} is not empty: it holds a run that stopped before its first checkpoint; "
                              f"{way}") from None
    else:  # an explicit older checkpoint (or best.pt): the newer ones are another timeline
        set_aside_timeline(checkpoint_in_run(state["path"]), int(state["global_step"]))
    if config.run_dir is None or Path(config.run_dir).resolve() != Path(run_dir).resolve():
        config.run_dir = str(run_dir)  # config.yaml records where the run is, not where the file says it was
    keep_recorded_eval(config, run_dir, state, overrides)
    if recorded is not None:
        note_config_edits(config, run_dir, recorded, overrides)
        note_missing_rows(state, run_dir, resume_trains(config, state))
    # after note_config_edits: config.yaml's auto is what the run was given, not an edit
    use_backend(config, backend, quiet)
    return state, config, run_dir, True, None


def _resumable_member_first(resume) -> dict:
    """checkpoint.load_resumable(``resume``), with a population member's directory refused before a damaged
    newer checkpoint of it is set aside (the member resumes with its population, which reads its own files):
    a run directory's newest sound checkpoint is found without renaming first, and read again, setting the
    damaged ones aside with their note, only when it is not the newest."""
    import contextlib
    import io

    source = ckpt.source_path(resume)
    if not source.is_dir():
        return ckpt.load_resumable(resume)
    with contextlib.redirect_stderr(io.StringIO()):  # the "resuming from ... instead" note is the second read's
        state = ckpt.load_resumable(resume, set_aside=False)  # a member's refusal: nothing renamed yet
    files = ckpt.list_checkpoints(source)
    if files and Path(state["path"]).absolute() == files[-1].absolute():
        return state
    return ckpt.load_resumable(resume)


def set_aside_timeline(checkpoint: Path, step: int) -> None:
    """checkpoint.set_aside_newer for a resume from ``checkpoint`` (at global ``step``), with SIGINT/SIGTERM
    held until it is done (signals.stops_held): stopped halfway, the run's metrics.csv ended at ``step``
    while its newest checkpoint was still the abandoned timeline's, and resuming that (what the stop line
    said) left the rows in between out of the run's logs. A stop held here is taken once all is set aside,
    its line naming the checkpoint the run now ends at."""
    from .signals import TrainingInterrupted, checkpoint_line, resume_advice, stops_held

    moved = None
    try:
        with stops_held():
            moved = ckpt.set_aside_newer(checkpoint, step)
    except TrainingInterrupted as e:
        if moved is None:  # nothing was newer, or the set-aside failed: the usual line, from the run's own files
            raise
        listed = ckpt.list_checkpoints(checkpoint.parent.parent)
        if listed and listed[-1] == checkpoint:
            line = checkpoint_line(checkpoint)
        else:  # a best.pt past the newest step_N.pt left: `proxima resume RUN` would go back to that one
            command, how = resume_advice(checkpoint.parent.parent, path=checkpoint)
            line = f"checkpoint: {checkpoint}; continue with: {command}{how}"
        raise TrainingInterrupted(e.signum, checkpoint, f"before training started, once the checkpoints newer than "
                                  f"{checkpoint.name} were set aside (see the note above); the run now ends at it; "
                                  f"{line}") from None


#: what makes a run the run it is: a checkpoint of the run directory that differs in one of these from
#: its config.yaml was not written by that run (none of them can change on resume)
RUN_IDENTITY = ("env_id", "num_envs", "num_steps", "seed")


def read_run_config(run_dir) -> tuple:
    """(config, why not): the run's config.yaml as a PPOConfig (a field an older Proxima did not write
    read as config.ABSENT_MEANS says, as the checkpoint's is), or None with the reason it could not be
    read (not YAML, a field no config holds, not a regular file); (None, None) when there is none.
    The file is data: read without following a FIFO, within rundir.TEXT_MAX_BYTES."""
    import yaml

    from .config import load_yaml
    from .rundir import read_run_text

    path = Path(run_dir) / "config.yaml"
    try:
        values = load_yaml(read_run_text(path))
    except FileNotFoundError:
        return None, None
    except OSError as e:  # rundir.RunFileError: its own line names the file
        return None, str(e).removeprefix(f"{path}: ")
    except UnicodeDecodeError as e:
        return None, f"not UTF-8 text (byte {e.start})"
    except yaml.YAMLError as e:
        from .config import yaml_error_where

        return None, f"not valid YAML{yaml_error_where(e)}"
    if not isinstance(values, dict):
        return None, f"not a mapping of field: value (a {type(values).__name__})"
    try:
        return recorded_config(values, str(path)), None
    except ConfigError as e:
        return None, str(e).removeprefix(f"{path}: ")


def _one_env(a, b) -> bool:
    """Whether two recorded env ids name one env, either way round: ``ID`` and its ``module:ID`` form
    (a resume given --env MODULE:ID records that form from then on)."""
    from .envs import same_env

    return isinstance(a, str) and isinstance(b, str) and (same_env(a, b) or same_env(b, a))


def check_same_run(state: dict, run_dir, recorded: Optional[PPOConfig]) -> None:
    """ConfigError when the checkpoint ``state``, read from ``run_dir``'s checkpoints/, records another
    env or size of run (RUN_IDENTITY) than the run's config.yaml (``recorded``; None: not read, nothing
    to compare): another run's checkpoint copied in would continue there, rewriting its config.yaml
    and appending another env's rows to its metrics.csv. Refused whether the run directory or the
    file was named: either resume writes into that run."""
    if recorded is None:
        return
    cfg = state.get("config") or {}
    differ = []
    for name in RUN_IDENTITY:
        mine, theirs = cfg.get(name), getattr(recorded, name)
        same = _one_env(mine, theirs) if name == "env_id" else mine == theirs
        if not same:
            differ.append((name, mine, theirs))
    if not differ:
        return
    yaml_path = Path(run_dir) / "config.yaml"
    records = " and ".join(f"{name} {mine!r}" for name, mine, _ in differ)
    says = " and ".join(f"{theirs!r}" for _, _, theirs in differ)
    name, mine, _ = differ[0]
    raise ConfigError(f"{state['path']}: records {records} where {yaml_path} says {says}: not this run's checkpoint; "
                      f"move it out of {Path(run_dir) / 'checkpoints'} (resume it on its own with --run-dir NEW_DIR), "
                      f"or, if config.yaml was edited, set {name} back to {mine!r} there")


def note_config_edits(config: PPOConfig, run_dir, recorded: tuple, overrides: Optional[dict]) -> None:
    """A note on stderr when the run's config.yaml (``recorded``: read_run_config's) says other than
    what the resume runs with, in a field the resume does not set itself (run_dir, a flag given): an
    edit there is not read (the config is the checkpoint's) and the file is rewritten, so the edit
    would vanish without a word. An unreadable config.yaml gets the same note."""
    import shlex

    from .config import RESUME_SAFE
    from .signals import from_python
    from .terminal import printable

    yaml_path = Path(run_dir) / "config.yaml"
    values, why = recorded
    python = from_python()  # train(None, resume=RUN): the words a script writes, never a flag it did not type
    example = (f"proxima.train(PPOConfig(env_id=..., total_timesteps=N), resume={str(run_dir)!r})" if python
               else f"proxima resume {shlex.quote(str(run_dir))} --total-timesteps N")
    if values is None:
        if why is not None:  # printable: the file's values and name may hold terminal escapes
            print(printable(f"proxima: note: {yaml_path}: {why}; resume does not read it (the config is the checkpoint's, "
                            f"changed by flags: {example}) and rewrites it"), file=sys.stderr)
        return
    differ = config_differences(config, values, ("run_dir", *(overrides or {})))
    if not differ:
        return
    name, mine, theirs = differ[0]
    more = f" (and {', '.join(n for n, _, _ in differ[1:])})" if len(differ) > 1 else ""
    flag = "--" + name.replace("_", "-")
    if python:
        how = (f"give it in the config: proxima.train(PPOConfig(env_id=..., {name}={theirs!r}), resume={str(run_dir)!r})"
               if name in RESUME_SAFE else f"{name} cannot change on resume (the config changes the safe fields: {example})")
    else:
        how = (f"give it as a flag: proxima resume {shlex.quote(str(run_dir))} {flag} {_flag_value(theirs)}"
               if name in RESUME_SAFE else f"{name} cannot change on resume (flags change the safe fields: {example})")
    print(printable(f"proxima: note: {yaml_path}: {name} {theirs!r}{more} differs from the checkpoint's {mine!r}; resume "
                    f"reads the config from the checkpoint, not config.yaml, and rewrites config.yaml from it; {how}"),
          file=sys.stderr)


def config_differences(config: PPOConfig, values: PPOConfig, skip=()) -> list:
    """[(field, config's value, values' value)] for each field but ``skip`` in which two configs differ
    (an env id and its module:ID form are one): a resume's config (the checkpoint's) against the run's
    config.yaml, as note_config_edits and the report compare them."""
    import dataclasses

    from .config import same_value

    differ = []
    for f in dataclasses.fields(PPOConfig):
        if f.name in skip:
            continue
        mine, theirs = getattr(config, f.name), getattr(values, f.name)
        if (f.name == "env_id" and _one_env(mine, theirs)) or same_value(mine, theirs):
            continue
        differ.append((f.name, mine, theirs))
    return differ


def _shown(value) -> str:
    """A config value in a note: as a flag takes it (none, true, 0.005, 64,64)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _run_backend(cfg: PPOConfig, state: dict) -> str:
    """The env backend the run trains on: the checkpoint's record, else what its config resolves to."""
    recorded = state.get("env_backend")
    if isinstance(recorded, str) and recorded:
        return recorded
    from .envs import auto_backend

    return auto_backend(cfg.env_id, cfg.env_kwargs) if cfg.backend == "auto" else cfg.backend


def resumed_backend(cfg: PPOConfig, state: dict) -> Optional[str]:
    """The backend a resume with ``--backend auto`` must name so that it trains on the one the run
    trained on (the checkpoint's ``env_backend``), or None when auto picks that one here. Only an
    Atari game's auto depends on what is installed (EnvPool, else Gymnasium's ALE), and the two reset,
    stack frames and count games differently: one metrics.csv would mix them. EnvError (one line,
    exit 2) when the recorded backend is not installed: --backend cannot change on resume (under a
    recorded --backend envpool too, which make_env would blame on a flag the resume was not given)."""
    recorded = state.get("env_backend")
    if cfg.backend not in ("auto", recorded) or recorded not in ("envpool", "gymnasium"):
        return None
    from .envs import EnvError, atari, auto_backend

    try:
        if atari.game_name(cfg.env_id) is None:
            return None
        if cfg.backend == "envpool" and atari.has_envpool():
            return None
        if cfg.backend == "auto" and auto_backend(cfg.env_id, cfg.env_kwargs) == recorded:
            return None
    except EnvError:  # an id that no longer resolves: building the env says so
        return None
    if recorded == "envpool" and not atari.has_envpool():
        # --backend envpool, or auto, given when it trained: make_env's line would name a flag not typed now
        raise EnvError(f"{state['path']}: the run trained '{cfg.env_id}' on EnvPool (--backend {cfg.backend}), which is "
                       f"not installed here; to resume it, {atari.INSTALL} (a resume keeps the run's backend: Gymnasium's "
                       "ALE resets, stacks frames and counts games otherwise; to train on it, start a new run with "
                       "--backend gymnasium)")
    if cfg.backend != "auto":  # --backend gymnasium: make_env's own line names the missing packages
        return None
    if recorded == "gymnasium" and not atari.has_ale():
        raise EnvError(f"{state['path']}: the run trained '{cfg.env_id}' on Gymnasium's ALE (--backend auto), which needs "
                       f"ale-py and opencv, not installed here; to resume it, {atari.INSTALL} (a resume keeps the run's "
                       "backend: EnvPool resets, stacks frames and counts games otherwise; to train on it, start a new run "
                       "with --backend envpool)")
    return recorded


def check_eval_backend(policy, given: Optional[str]) -> None:
    """EnvError for ``proxima eval`` without --backend (``given`` None) of an Atari run whose checkpoint
    records --backend envpool where EnvPool is not installed: make_env's line would blame a --backend
    the user did not type, and not say that Gymnasium's ALE can evaluate it."""
    config = getattr(policy, "config", None) or {}
    if given is not None or config.get("backend") != "envpool":
        return
    from .envs import EnvError, atari

    try:
        if atari.game_name(str(policy.env_id)) is None or atari.has_envpool():
            return
    except EnvError:  # an id that no longer resolves: building the env says so
        return
    raise EnvError(f"{policy.path}: this run trained '{policy.env_id}' on EnvPool (its checkpoint records it), which is "
                   f"not installed here; {atari.INSTALL}; or evaluate it on Gymnasium's ALE with --backend gymnasium "
                   "(its resets and frame stacks differ: docs/atari.md)")


def backend_line(cfg: PPOConfig) -> Optional[str]:
    """'env backend: envpool (auto)' for an Atari run: which backend trains it decides its resets and
    learning curve, and ``auto``'s choice depends on what is installed; None for other envs."""
    from .envs import EnvError, atari, auto_backend

    try:
        if atari.game_name(cfg.env_id) is None:
            return None
    except EnvError:  # building the env says why
        return None
    if cfg.backend != "auto":
        return f"env backend: {cfg.backend}"
    why = "auto: EnvPool is installed" if atari.has_envpool() else "auto: EnvPool is not installed"
    return f"env backend: {auto_backend(cfg.env_id, cfg.env_kwargs)} ({why})"


def use_backend(cfg: PPOConfig, backend: Optional[str], quiet: bool = False) -> None:
    """Set resumed_backend's ``backend`` in ``cfg``: config.yaml and the checkpoints name it from now on."""
    if backend is None:
        return
    cfg.backend = backend
    if not quiet:
        other = "EnvPool" if backend == "gymnasium" else "Gymnasium's ALE"
        print(f"proxima: note: --backend auto resumes on {backend}, the backend the run trained on "
              f"(auto would pick {other} here)", file=sys.stderr)


def _ignores_vector(cfg: PPOConfig, state: dict) -> bool:
    return _run_backend(cfg, state) in ("native", "envpool")


def _flag_value(value) -> str:
    """``value`` as a flag's argument in a suggested command: shell-quoted, and with any character a
    terminal would act on written as its escape (``\\x1b``): the value is config.yaml's, not the user's."""
    import shlex

    from .terminal import printable

    return printable("none" if value is None else shlex.quote(str(value).lower() if isinstance(value, bool) else str(value)))


def note_missing_rows(state: dict, run_dir, trains: bool = True) -> None:
    """A note on stderr when the run's metrics.csv ends before the checkpoint's step (rows lost: a copied
    or restored file, an edit): the resume logs on after the checkpoint, so the iterations between
    stay missing from the curve. Not refused: the checkpoint is the run's state, the log its record.
    ``trains``: whether this resume trains on (resume_trains), which the note then says."""
    step, iteration = int(state["global_step"]), int(state["iteration"])
    if iteration <= 0:
        return
    path = Path(run_dir) / "metrics.csv"
    there = True
    try:
        logged = ckpt.logged_steps(run_dir)
    except FileNotFoundError:
        logged, there = [], False
    except OSError:  # the resume's logger names a file it cannot read
        return
    per = step // iteration
    last_step, last_iter = 0, 0
    for it, s in logged:  # the last row up to the checkpoint's step: rows after it are iterations the resume trains again
        if last_step <= s <= step:
            last_step = s
            last_iter = it if it is not None else (s // per if per else 0)
    if last_step >= step or last_iter >= iteration:
        return
    one = last_iter + 1 == iteration
    missing = f"iteration {iteration} is" if one else f"iterations {last_iter + 1}-{iteration} are"
    ends = f"ends at iteration {last_iter} (step {last_step:,})" if last_iter else "holds no rows" if there else "is missing"
    print(f"proxima: note: {path} {ends}, the checkpoint {state['path']} is at iteration {iteration} (step {step:,}): "
          f"{missing} missing from it (rows lost)" + (f"; the run logs on from iteration {iteration + 1}" if trains else ""),
          file=sys.stderr)


def keep_recorded_eval(config: PPOConfig, run_dir, state: dict, overrides: Optional[dict]) -> None:
    """A resume without --eval-episodes takes the episode count of the run's end-of-run evaluation at
    the checkpoint's step (eval.json, evaluate.current_eval): a finished run resumed with
    ``--eval-episodes N`` rewrote eval.json and config.yaml but wrote no checkpoint, and a later
    resume of it shows that evaluation and writes nothing rather than evaluate again with the
    checkpoint's count. Only a typed --eval-episodes other than eval.json's evaluates again."""
    from .evaluate import current_eval
    from .rundir import read_run_json

    if "eval_episodes" in (overrides or {}):
        return
    path = Path(run_dir) / "eval.json"
    try:  # only a regular file is read (the run directory is data); current_eval checks the rest
        episodes = read_run_json(path, limit=10_000_000).get("episodes")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return
    if (isinstance(episodes, int) and not isinstance(episodes, bool) and episodes >= 1 and episodes != config.eval_episodes
            and current_eval(run_dir, int(state["global_step"]), episodes) is not None):
        config.eval_episodes = episodes


def auto_resume_target(config: PPOConfig, run_dir=None) -> Optional[Path]:
    """The run ``--resume auto`` continues: the --run-dir when it holds a checkpoint, else None (a new run)."""
    if run_dir is None and config.run_dir is None:
        raise ConfigError("--resume auto needs --run-dir DIR (the run to continue)")
    from .rundir import expand_home

    target = Path(expand_home(run_dir or config.run_dir))  # ~/runs/cp: the home's, where train() resumes
    return target if ckpt.list_checkpoints(target) else None


def loose_run_dir(resume, config: Optional[PPOConfig], run_dir=None, overrides: Optional[dict] = None) -> Path:
    """The run directory a loose checkpoint file (outside a run's checkpoints/) continues in: the
    --run-dir given, checked to be a possible directory; ConfigError when none is. A file that is no
    checkpoint is refused first, as what it is; one of a run's own files (RUN/config.yaml) with the
    command that continues that run, where --run-dir would lead to the same refusal."""
    _refuse_non_checkpoint(Path(resume))
    given = run_dir if run_dir is not None else (overrides or {}).get("run_dir") or (config.run_dir if config is not None else None)
    if given is None:
        raise ConfigError(f"{resume}: a checkpoint file outside a run's checkpoints/ folder; give --run-dir DIR (a new "
                          "or empty directory) for the run it continues")
    check_run_dir_path(Path(given))
    return Path(given)


def loose_start(run_dir) -> Optional[Path]:
    """The loose checkpoint file (outside a run's checkpoints/) that the run ``run_dir`` was started from, as its
    meta.json records it (``command``: ``proxima resume FILE --run-dir RUN`` or ``train --resume FILE``, read
    against its ``cwd``), when that file is still there; None for any other run, or a meta.json that does not read."""
    import json

    try:
        meta = json.loads((Path(run_dir) / "meta.json").read_text())
        command, cwd = [str(a) for a in meta["command"]], Path(str(meta.get("cwd") or "."))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    words = command[1:]
    if "resume" in words[:1]:
        named = words[1:]
    else:
        named = [b for a, b in zip(words, words[1:]) if a == "--resume"] + [a[9:] for a in words if a.startswith("--resume=")]
    for word in named:
        path = cwd / word
        if path.suffix == ".pt" and path.is_file() and path.absolute().parent.name != "checkpoints":
            return path if Path(word).is_absolute() or cwd.resolve() != Path.cwd().resolve() else Path(word)
    return None


def stuck_loose_line(run_dir) -> Optional[str]:
    """How to go on from ``run_dir`` when it holds a resume of a loose checkpoint file (loose_start) stopped before
    its first checkpoint: the file is unchanged and continues in another directory, or in this one moved aside.
    None for a directory that holds a checkpoint, or no such run."""
    import shlex

    from .rundir import _wrote_a_checkpoint, holds_a_run

    loose = loose_start(run_dir)
    if loose is None or not holds_a_run(run_dir) or _wrote_a_checkpoint(run_dir):
        return None
    from .signals import env_flag

    where, file = shlex.quote(str(run_dir)), shlex.quote(str(loose))
    return (f"it was started by a resume of {loose}, which is unchanged: continue from it in another directory "
            f"(proxima resume {env_flag(Path(run_dir))}{file} --run-dir NEW), or move {run_dir} aside first "
            f"(mv {where} {shlex.quote(str(run_dir) + '.old')}) and resume into it again")


def _refuse_non_checkpoint(path: Path) -> None:
    """CheckpointError for ``path`` when it is no intact torch zip archive: checkpoint._check_archive's line,
    or, for a file in a run directory (RUN/config.yaml, RUN/metrics.csv), the command that resumes RUN."""
    from .rundir import open_run_file

    try:
        with open_run_file(path) as f:  # never waits on a FIFO planted at the name
            ckpt._check_archive(path, f)
    except OSError:
        return  # unreadable, or no regular file: the load that follows names it
    except ckpt.CheckpointError:
        run = path.parent
        if not (ckpt.list_checkpoints(run) or (run / "config.yaml").is_file() or (run / "meta.json").is_file()):
            raise
        from .signals import resume_advice

        command, how = resume_advice(run)
        raise ckpt.CheckpointError(f"{path}: not a checkpoint but a file of the run {run}; to continue that run: "
                                   f"{command}{how}") from None


def dry_run_resume(config: PPOConfig, resume, env_id: Optional[str], trust_run: bool, overrides: dict,
                   processes: int = 1, sources: Optional[dict] = None, quiet: bool = False) -> Optional[tuple]:
    """(config, processes) a resume of ``resume`` would train with, found as resolve_start finds them
    but read-only (``train --resume ... --dry-run``): no lock taken, no file written, renamed or set
    aside; the same errors for a missing path, a damaged checkpoint, a refused flag or a checkpoint
    written by another number of processes than the command's ``processes`` (--nproc, else 1). None
    for ``--resume auto`` without a checkpoint: the command starts a new run."""
    from .envs.gym_adapter import treat_as_data

    if resume == "auto":
        resume = auto_resume_target(config)
        if resume is None:
            return None
    resume = ckpt.source_path(resume)  # RUN/checkpoints dry-runs RUN's resume, as the resume itself reads it
    src, target_dir = resumed_run_dir(resume)  # a missing path: the resume's own line
    for folder in ckpt.data_folders(src):
        treat_as_data(folder)  # the env is built next (preflight): never from the run's files
    loose = target_dir is None
    if loose:
        target_dir = loose_run_dir(resume, config, overrides=overrides)
    if Path(resume).is_dir():  # its newest checkpoint that loads; a damaged newer one is named, not renamed
        files = ckpt.list_checkpoints(resume)
        src, _ = ckpt.newest_that_loads(files, ckpt.load_sound, ckpt.CheckpointError, set_aside=False,
                                        none_loads=lambda: f"; {ckpt.start_over(resume, 'resume')}")
    state = ckpt.load_resumable(src)  # a file: loaded as the resume loads it (a population's refused), nothing written
    recorded = None  # the run's config.yaml: (config, why it was not read), as resolve_start reads it
    if not loose:
        recorded = read_run_config(target_dir)
        check_same_run(state, target_dir, recorded[0])
    cfg = resumed_config(state, env_id, trust_run, overrides, "train --resume", notes=not loose, sources=sources, quiet=quiet)
    ckpt.check_step(state, counters=False)  # as resolve_start
    if loose:
        refuse_loose_finished(resume, cfg, state, target_dir)
        check_new_run_dir(target_dir, command="resume")  # the directory resolve_start claims as a new run's
    check_processes(state, processes)
    use_backend(cfg, resumed_backend(cfg, state), quiet)
    cfg.run_dir = str(target_dir)  # where the resume trains, as resolve_start records it
    keep_recorded_eval(cfg, target_dir, state, overrides)
    if recorded is not None:  # the resume's note on an edited config.yaml, before the user runs it
        note_config_edits(cfg, target_dir, recorded, overrides)
    return cfg, int(state.get("world_size", 1))


def check_processes(state: dict, processes: int, launcher: Optional[bool] = None) -> None:
    """CheckpointError when the checkpoint ``state`` was written by another number of processes than
    ``processes`` (the command's: --nproc, else 1; under torchrun, the world size), which a resume
    refuses: the optimizer's and the envs' state are per process. The one place of this line: the
    --nproc launcher's wording (launch._check; ``launcher`` None: when ``processes`` > 1), else the
    running processes' (resolve_start, on rank 0; train_state.restore), which under a torchrun started
    by hand names torchrun's process count too: --nproc is not how that job was started."""
    written = state.get("world_size", 1)
    if not isinstance(written, int) or isinstance(written, bool) or written == processes:
        return  # not a count: check_counters names it
    import shlex

    from .cpuinfo import usable_cpus
    from .launch import COMMAND_ENV, other_count_advice, under_torchrun

    path = state.get("path", "checkpoint")
    # the commands name what to resume: the run directory of RUN/checkpoints/step_N.pt, else the file itself
    where = Path(path) if "path" in state else None
    run = "RUN_DIR" if where is None else shlex.quote(str(where.parent.parent if where.parent.name == "checkpoints" else where))
    # proxima resume starts no more processes than the CPUs it may use (cli._written_by): not named where it would refuse
    fits = written <= usable_cpus()
    starts = f"proxima resume {run} starts {written}; or " if fits else ""
    # no resume changes the count: --init-from is the way to another one (a new run)
    config = state.get("config")
    env_id = config.get("env_id") if isinstance(config, dict) else None
    other = other_count_advice(run, env_id)
    if launcher if launcher is not None else processes > 1:
        raise ckpt.CheckpointError(f"{path}: written by {written} process(es), resumed with --nproc {processes}; "
                                   f"use the same count ({f'proxima resume {run} starts {written}' if fits else f'--nproc {written}'}); "
                                   + other_count_advice(run, env_id, processes))
    if under_torchrun() and COMMAND_ENV not in os.environ:  # a torchrun typed by hand, not --nproc's launcher
        how = (f"torchrun --nproc-per-node {written} on one machine, or proxima train --resume {run} --nproc {written}"
               if written > 1 else f"proxima train --resume {run}, without torchrun")
        raise ckpt.CheckpointError(f"{path}: written by {written} process(es), resumed with {processes}; use the same "
                                   f"number of processes, {written}{' in all' if written > 1 else ''} ({how}); {other}")
    raise ckpt.CheckpointError(f"{path}: written by {written} process(es), resumed with {processes}; use the same --nproc"
                               + (f" ({starts}proxima train --resume {run} --nproc {written})" if written > 1 else "")
                               + f"; {other}")


def resumed_config(state: dict, env_id: Optional[str], trust_run: bool, overrides: Optional[dict], command: str,
                   notes: bool = True, sources: Optional[dict] = None, quiet: bool = False) -> PPOConfig:
    """The config a resume of the loaded checkpoint ``state`` trains with: the recorded one (a field an
    older Proxima did not record read as what that version ran as: config.ABSENT_MEANS), its counters
    checked, the env id given (if any) the run's, a recorded module env refused unless
    named or trusted, and ``overrides`` applied (apply_resume_overrides). Shared by the resume and
    by ``train --resume ... --dry-run``, so a dry run refuses what the resume would. ``notes``:
    apply_resume_overrides's notes on a run that trains nothing (a loose checkpoint's refusal says it instead);
    ``sources``, ``quiet``: apply_resume_overrides's."""
    from .distributed import check_rank_pieces
    from .train_state import check_counters, counters_checked

    check_rank_pieces(state)  # a multi-process best.pt of older versions: rank 0's envs only
    recorded = recorded_config(state["config"], state["path"])
    if not counters_checked(state, batch_size(recorded)):  # a run directory's: load_sound checked them
        check_counters(state, batch_size(recorded))  # before any of them is used (apply_resume_overrides)
    check_resumed_env(recorded, state, env_id, trust_run, command)
    config = apply_resume_overrides(recorded, overrides or {}, state, notes=False, sources=sources, quiet=quiet)
    # a run that trains nothing gets a note; a bad flag (--keep-checkpoints -1) is refused before it, not after
    trains_nothing = notes and not resume_trains(config, state)
    refuse_recorded(config, state, overrides or {}, typed_too=trains_nothing)
    if trains_nothing:
        note_trains_nothing(config, state)
    if env_id is not None and env_id != recorded.env_id and resume_trains(config, state):
        # the module form the user named: every process that builds the env (torchrun's ranks too)
        # imports the module, and the checkpoints from here on name it. A resume that trains nothing
        # leaves config.yaml as the run recorded it
        config.env_id = env_id
    return config


def refuse_recorded(config: PPOConfig, state: dict, overrides: dict, typed_too: bool = False) -> None:
    """validate's refusal of a value the checkpoint recorded, not one the user typed, named as the
    checkpoint's field (``CKPT: lr -1.0: must be positive``), not as a flag never typed (``--lr -1.0``),
    the way cli._name_config_file names a --config file's. A refusal of a value given (a flag, --config)
    is left to the trainer's validate, in its place, unless ``typed_too``: a resume that trains nothing
    refuses it here, before its note that the run is complete."""
    from .config import ConfigError, validate
    from .signals import from_python

    if from_python():  # its lines name PPOConfig's fields already, never a flag
        return
    world = state.get("world_size", 1)
    try:
        validate(config, world if isinstance(world, int) and not isinstance(world, bool) and world >= 1 else 1, resume=True)
    except ConfigError as e:
        named = recorded_refusal(e, state["path"], overrides)
        if named is not None:
            raise named from None
        if typed_too:
            raise
    if typed_too and "device" in overrides:  # a --device this machine cannot use: refused here too, not after the note
        from .device import resolve_device

        resolve_device(str(config.device))


def recorded_refusal(e: Exception, source, given) -> Optional[Exception]:
    """``e``, a refusal naming a field as its flag (``--lr -1.0: ...``), reworded for a value that came
    from the run's file ``source`` (its config.yaml, a checkpoint) as ``SOURCE: lr -1.0: ...``; a line
    about several fields (ConfigError.fields) as ``SOURCE: a, b: ...``. None when it names a field in
    ``given`` (typed, or from --config), or none at all: the flag is then the user's."""
    from .config import FIELDS, RESUME_SAFE, ConfigError

    message = str(e)
    fields = list(getattr(e, "fields", ()))
    if fields:
        return ConfigError(f"{source}: {', '.join(fields)}: {message}") if not set(fields) & set(given) else None
    for name in FIELDS:
        flag = f"--{name.replace('_', '-')} "
        if name not in given and message.startswith(flag):
            # a field a resume may not change has no flag to pass: the file was edited or damaged
            fix = "" if name in RESUME_SAFE else "; a resume cannot change it: the file was edited or damaged"
            return ConfigError(f"{source}: {name} {message[len(flag):]}{fix}")
    return None


def check_resumed_env(recorded: PPOConfig, state: dict, env_id: Optional[str], trust_run: bool, command: str) -> None:
    """What a resume refuses of the env: an ``env_id`` (``--env``) that is not the run's (the same id,
    or its ``module:EnvId`` form, whose module is imported here and must register it), a recorded
    module env neither named nor trusted, and a recorded id this process has not registered (a run
    trained from Python after importing the module that registers it), with the --env that builds it."""
    from .envs import EnvError, check_registers, same_env, unregistered, unregistered_line
    from .envs.gym_adapter import refuse_recorded_env

    if env_id is not None and not same_env(env_id, recorded.env_id):
        from .signals import from_python

        if from_python():  # train(PPOConfig(env_id=...), resume=...): the caller set env_id, typed no ENV_ID
            # a population's resume (population_run.resume_population) is train_population()'s
            caller = "train_population" if state.get("kind") == "ppo-population" else "train"
            raise ConfigError(f"{state['path']}: the run trains '{recorded.env_id}', not env_id='{env_id}'; a resume "
                              f"continues the same env: give {caller}() another run_dir for a new '{env_id}' run")
        raise ConfigError(f"{state['path']}: the run trains '{recorded.env_id}', not '{env_id}'; resume continues the same env")
    if env_id is not None and env_id != recorded.env_id:
        check_registers(env_id)
    if env_id is None and not trust_run:
        from .signals import from_python

        population = from_python() and state.get("kind") == "ppo-population"  # train_population()'s resume
        refuse_recorded_env(recorded.env_id, state["path"], "train_population" if population else command)
    if unregistered(env_id or recorded.env_id):
        how = "proxima train {env} --resume ..." if command == "train --resume" else "--env {env}"
        raise EnvError(unregistered_line(recorded.env_id, state["path"], how, state.get("env_entry_point"),
                                         kwargs=bool(recorded.env_kwargs)))


def refuse_loose_finished(resume, config: PPOConfig, state: dict, target_dir) -> None:
    """ConfigError when a loose checkpoint's resume into the new ``target_dir`` would train nothing (the
    run is complete, or --stop-return ended it): refused before the directory is made, as it would hold
    a config and an evaluation but no checkpoint, a run that could be neither resumed nor evaluated.
    (Copying the checkpoint in instead would write a second copy of a run the user did not ask for.)"""
    if resume_trains(config, state):
        return
    step, least = int(state["global_step"]), least_total(config, state)
    if config.total_timesteps < least:
        raise ConfigError(f"{resume}: the run is complete ({step:,} steps); give --total-timesteps of at least {least:,} "
                          f"to extend it into {target_dir} (nothing was written)")
    raise ConfigError(f"{resume}: the run stopped at --stop-return {config.stop_return:g}; give --stop-return none or a "
                      f"higher target to continue it into {target_dir} (nothing was written)")


def least_total(config: PPOConfig, state: dict) -> int:
    """The total_timesteps a resume of ``state`` needs to train one more iteration: the run trains whole
    iterations (of every process's envs), so it is complete when no further one fits."""
    return int(state["global_step"]) + batch_size(config) * int(state.get("world_size", 1))


def stop_return_mean(config: PPOConfig, state: dict) -> Optional[float]:
    """The mean training return that reached --stop-return in ``state``'s window, or None (not reached, or none set)."""
    if config.stop_return is None:
        return None
    from .train_state import return_window
    from .trainer import ReturnTarget

    return ReturnTarget(config.stop_return, config.stop_episodes, return_window(state)).reached()


def resume_trains(config: PPOConfig, state: dict) -> bool:
    """Whether a resume of ``state`` with ``config`` trains a further iteration: one fits in
    total_timesteps and --stop-return's target is not reached (apply_resume_overrides notes either)."""
    return config.total_timesteps >= least_total(config, state) and stop_return_mean(config, state) is None


def preflight(cfg: PPOConfig, world_size: int = 1, resumed: bool = False):
    """What a new run would refuse, checked before anything starts (``train --dry-run`` and the
    ``--nproc`` launcher, which would otherwise see every rank fail the same way): the flags that
    need CUDA, the env (built once on the CPU), --init-from's checkpoint against that env and the
    config (not for a resume, ``resumed``: it reads its own checkpoints, and its init_from is
    history) and the memory the run needs. Returns (the device, the absolute checkpoint file
    --init-from names, as the run records it in config.yaml; None without --init-from or for a resume)."""
    from .device import resolve_device
    from .sizing import check_fits
    from .trainer import check_device_flags

    device = resolve_device(cfg.device)
    check_device_flags(cfg, device, world_size, resumed=resumed)  # a resume's --compile is its checkpoint's
    sizes, checkpoint = env_build_checks(cfg, init_from=not resumed)  # the one env built here is also the one sized
    check_fits(cfg, device, lambda: sizes, processes=world_size)  # --nproc K on the CPU: K copies share its memory
    return device, checkpoint


def check_env_builds(cfg: PPOConfig, init_from: bool = True):
    """Build the env once on the CPU and choose the agent's encoder for its observations, as a run
    does (Agent: nets.resolve_encoder): EnvError or ConfigError (``--encoder cnn`` of an env without
    an image, ``--norm-obs`` of one with an image, an ``--init-from`` checkpoint the run would refuse
    when ``init_from``) now, before anything starts. Returns the env's sizes (sizing.env_sizes) for
    the memory check, so that it builds no env of its own."""
    return env_build_checks(cfg, init_from)[0]


def env_build_checks(cfg: PPOConfig, init_from: bool = True) -> tuple:
    """check_env_builds, returning (the env's sizes, the absolute checkpoint file ``cfg.init_from``
    names: a run directory's newest, as the run records it; None when unset or not ``init_from``)."""
    import dataclasses

    from .envs import make_env
    from .nets import resolve_encoder
    from .sizing import env_sizes

    check_preset_backend(cfg)
    env = make_env(cfg.env_id, 1, "cpu", cfg.backend, cfg.vector, seed=cfg.seed, env_kwargs=cfg.env_kwargs)
    try:
        sizes = env_sizes(env, cfg.env_id)
        encoder = resolve_encoder(cfg.encoder, sizes.layout)
        spaces = env.single_observation_space, env.single_action_space
    finally:
        env.close()
    check_norm_obs(cfg, sizes.layout.has_image)
    check_log_std_init(cfg, spaces[1], init_from)
    checkpoint = None
    if init_from and cfg.init_from is not None:
        from .init_from import check_initial_policy

        # the network as the Trainer builds it (encoder auto resolved), against the checkpoint's
        initial = check_initial_policy(cfg.init_from, dataclasses.replace(cfg, encoder=encoder), *spaces,
                                       run_dir=cfg.run_dir)
        checkpoint = str(initial.checkpoint)  # what Trainer writes to cfg.init_from, so config.yaml
    return sizes, checkpoint


def check_preset_backend(cfg: PPOConfig) -> None:
    """EnvError for --env-kwargs on a native env whose --backend native a preset chose, not the user
    (Pendulum-v1's preset): make_env's own line tells to use --backend gymnasium, which the user never
    gave the other way, so this one names the preset that did."""
    from .config import source_of
    from .envs import NATIVE_ENVS, EnvError
    from .envs.gym_adapter import native_only

    source = source_of(cfg, "backend")
    if (cfg.backend != "native" or not cfg.env_kwargs or cfg.env_id not in NATIVE_ENVS or native_only(cfg.env_id)
            or not (source or "").startswith("preset ")):
        return  # a native-only env has no Gymnasium version to build with them: make_env's line says so
    raise EnvError(f"--env-kwargs: the native '{cfg.env_id}' takes no constructor arguments, and the preset "
                   f"{source[len('preset '):]} chose --backend native; add --backend gymnasium (or auto) to build "
                   f"Gymnasium's '{cfg.env_id}' with them")


def check_norm_obs(cfg: PPOConfig, has_image: bool) -> None:
    """ConfigError for --norm-obs of an env whose observations hold an image (Agent.has_pixels): the
    Trainer's own check, also here so --dry-run and the --nproc launcher refuse it once, up front."""
    if cfg.norm_obs and has_image:
        # per-key normalization is not built: a Dict's vector keys are the env's to scale
        raise ConfigError("--norm-obs: this env's observations hold an image, which the network scales to [0, 1]; drop "
                          "--norm-obs (a Dict observation's vector keys: normalize them inside the env)")


def check_log_std_init(cfg: PPOConfig, action_space, init_from: bool = True) -> None:
    """ConfigError for a --log-std-init other than 0 of an env whose actions are not a Box: only the Normal
    head has a log std (the Trainer's check, and preflight's for --dry-run and the --nproc launcher); and
    with --init-from (``init_from``: a new run, not a resume, whose init_from is history), whose checkpoint
    replaces the log std: the value asked was ignored while config.yaml recorded it."""
    import gymnasium as gym

    if init_from and cfg.init_from is not None and cfg.log_std_init != 0:
        source = cfg.init_from
        weights = (f"the checkpoint {source}" if os.path.isfile(source) else f"{source}'s checkpoint")
        raise ConfigError(f"--log-std-init {cfg.log_std_init:g} with --init-from: the weights (and log std) come from "
                          f"{weights}; drop one")
    if cfg.log_std_init != 0 and not isinstance(action_space, gym.spaces.Box):
        raise ConfigError(f"--log-std-init {cfg.log_std_init:g}: Box actions only (a Normal's log std); this env's "
                          f"action space is {action_space}, which has none: drop --log-std-init")


def check_population_log_std_init(cfg: Optional[PPOConfig], swept, python: bool = False) -> None:
    """ConfigError for a population that sweeps log_std_init (one of the fields ``swept``): every member
    starts from the one log_std_init its config gives (population.py builds each member's Normal head with
    it, so one --log-std-init for every member trains); a value per member is not wired yet. ``cfg``:
    unused, kept for callers that pass the population's config."""
    if "log_std_init" in swept:
        given = "sweep={'log_std_init': [...]}" if python else "--sweep log_std_init"
        one = "PPOConfig(log_std_init=V)" if python else "--log-std-init V"
        raise ConfigError(f"{given}: one setting for every member of a population (not per member yet: each member "
                          f"starts from the one log_std_init given); give every member one with {one}, or train one "
                          "population per value")


def same_init_source(given, recorded) -> bool:
    """Whether ``given`` (a rerun's --init-from: the run directory, its checkpoints/ folder or the file,
    relative to here) names the checkpoint the run ``recorded`` (the absolute file it loaded; an older
    run's config records the path as given): so a preempted script rerun with resume="auto", which
    gives its init_from again, resumes, even after the source run has moved on or is gone."""
    if given is None or recorded is None:
        return given is None and recorded is None
    if os.fspath(given) == os.fspath(recorded):
        return True
    file = Path(os.path.abspath(recorded))
    for named in {Path(os.path.abspath(given)), Path(given).resolve()}:
        if file == named or (file.parent.name == "checkpoints" and named in (file.parent, file.parent.parent)):
            return True
    return False


def init_from_on_resume(value, cfg: PPOConfig) -> str:
    """The line refusing --init-from on a resume: the run goes on from its own checkpoints; a new run
    (of another --run-dir) is what starts from another policy."""
    import shlex

    from .signals import from_python

    if from_python():
        given, had = f"PPOConfig.init_from = {str(value)!r}", f"init_from={cfg.init_from!r}"
        how = f"train(PPOConfig(env_id={cfg.env_id!r}, init_from={str(value)!r}, ...), run_dir=NEW_DIR)"
    else:
        given, had = f"--init-from {value}", f"--init-from {'none' if cfg.init_from is None else cfg.init_from}"
        how = f"proxima train {shlex.quote(str(cfg.env_id))} --init-from {shlex.quote(str(value))} --run-dir NEW_DIR"
    return (f"{given}: a resume continues from the run's own checkpoints (the run was trained with {had}); to start "
            f"a new run from that policy: {how}")


def check_own_run_dir(run_dir, checkpoint) -> None:
    """ConfigError when a resume is given a ``--run-dir`` that is not the directory of the run it
    continues (``checkpoint``'s, RUN/checkpoints/step_N.pt): it would be ignored, the run trains on
    in its own. A checkpoint file outside a run's checkpoints/ folder may start its run anywhere."""
    checkpoint = checkpoint_in_run(checkpoint)
    if run_dir is None or checkpoint.absolute().parent.name != "checkpoints":
        return
    own = ckpt.run_dir_of(checkpoint)
    if Path(run_dir).resolve() != own:
        from .signals import from_python

        if from_python():  # train()'s run_dir=, else PPOConfig.run_dir: no flag was typed
            raise ConfigError(f"run_dir {run_dir}: a run resumes in its own directory ({own}); leave run_dir out "
                              "(train()'s and PPOConfig's), or give that one (to continue a copy elsewhere, copy the run "
                              "directory and resume the copy)")
        raise ConfigError(f"--run-dir {run_dir}: a run resumes in its own directory ({own}); drop --run-dir "
                          "(to continue a copy elsewhere, copy the run directory and resume the copy)")


def check_run_dir_path(run_dir: Path, default: bool = False) -> None:
    """ConfigError when ``run_dir`` cannot be a directory: it, or a folder above it, is a file (``default``: a
    name chosen, no --run-dir given: the line says so, and to pass one)."""
    from .diskspace import path_problem
    from .rundir import default_run_dir_fix
    from .signals import from_python

    problem = path_problem(run_dir, folder=True)
    if problem and default:
        raise ConfigError(f"{run_dir}: cannot be the default run directory: {problem}; {default_run_dir_fix()}")
    if problem:  # from Python: train()'s run_dir= or PPOConfig.run_dir, no flag was typed
        raise ConfigError(f"{'run_dir' if from_python() else '--run-dir'} {run_dir}: {problem}")


def check_new_run_dir(run_dir, overwrite: bool = False, restart: bool = False, command: str = "train") -> None:
    """What a new run's claim of ``run_dir`` (rundir.RunSession.claim_fresh) would refuse, checked
    read-only: a path that cannot be a directory, a run in use, a directory holding files without
    ``overwrite`` (``restart``: --resume auto, which moves aside only a run that never checkpointed),
    and one that would be moved aside but cannot be (it is or holds the current directory: move_aside).
    For ``train --dry-run`` and the --nproc launcher, which must refuse what the run refuses.
    ``command``: rundir.not_empty_message's."""
    from .rundir import RunDirError, check_movable, check_not_in_use, holds_a_run, holds_files, not_empty_message

    run_dir = Path(run_dir)
    check_run_dir_path(run_dir)
    check_not_in_use(run_dir)
    if holds_files(run_dir):
        if not (overwrite or (restart and holds_a_run(run_dir))):
            raise RunDirError(not_empty_message(run_dir, command))
        check_movable(run_dir)  # the claim moves it aside (claim_fresh): refused there before the rename


def _resume_refused(name: str, value, recorded, python: bool) -> str:
    """``--lr 0.01: cannot change when resuming (the run was trained with 0.00025)``; a switch as the flag
    typed and the run's value as the CLI spells it (``--no-anneal-lr: ... (the run was trained with
    anneal_lr true)``), not a ``--anneal-lr False`` no one can type; from Python the field (``anneal_lr=False``)."""
    from .config import as_given
    from .population_run import typed_switch

    if isinstance(value, bool) and not python:
        was = f"{name} {'true' if recorded else 'false'}" if isinstance(recorded, bool) else repr(recorded)
        return f"{typed_switch(name, value)}: cannot change when resuming (the run was trained with {was})"
    return f"{as_given(name, value, python, quote=True)}: cannot change when resuming (the run was trained with {recorded!r})"


def apply_resume_overrides(cfg: PPOConfig, overrides: dict, state: dict, not_safe: tuple = (), notes: bool = True,
                           sources: Optional[dict] = None, quiet: bool = False) -> PPOConfig:
    """``cfg`` with the flags given to a resume: RESUME_SAFE fields applied, any other refused unless
    it equals the checkpoint's value. ``not_safe``: RESUME_SAFE fields this kind of run refuses
    itself (a population's unsupported switches), left out of the list of flags safe to change.
    A --run-dir other than the run's own directory is refused: a run continues where it is.
    ``notes``: say on stderr when the run trains nothing (complete, or stopped by --stop-return).
    ``sources``: {field: '--preset NAME' or '--config FILE'} for the values the user did not type;
    when one of those changes a field, one note lists every change and where it came from
    (a preset's total_timesteps would otherwise extend a finished run without a word). --vector,
    which only the gymnasium backend reads, is not checked on a run of another backend: noted
    (unless ``quiet``), as train notes it for a new run."""
    import dataclasses

    from .config import RESUME_SAFE, as_given, same_value
    from .signals import from_python

    python = from_python()  # train(PPOConfig(lr=...), resume=...): its refusals name the fields the script set, not flags
    cfg = dataclasses.replace(cfg)
    recorded_total = cfg.total_timesteps
    changes, sources = [], sources or {}
    for name, value in overrides.items():
        flag = "--" + name.replace("_", "-")
        if name == "run_dir":
            check_own_run_dir(value, state["path"])
            continue  # it named the run itself (train --resume auto --run-dir RUN)
        if name in ("encoder", "backend") and value == "auto":
            # the run recorded what auto chose (config.yaml; a resume keeps the run's backend, resumed_backend):
            # a re-run of the same command keeps it
            continue
        if name == "backend" and cfg.backend == "auto":  # the backend auto chose for the run: naming it changes nothing
            chose = _run_backend(cfg, state)
            if value == chose:
                continue
            raise ConfigError(f"{as_given(name, value, python, quote=True)}: cannot change when resuming (the run was "
                              f"trained with 'auto', which chose {chose!r}); leave it out, or give {as_given(name, chose, python)}")
        if name == "vector" and _ignores_vector(cfg, state):
            if not quiet and name not in sources:
                print(f"proxima: note: {as_given(name, value, python)}: applies to the gymnasium backend only; the run's backend "
                      f"({_run_backend(cfg, state)}) ignores it", file=sys.stderr)
            continue
        if name == "init_from":
            if not same_init_source(value, cfg.init_from):
                raise ConfigError(init_from_on_resume(value, cfg))
            continue  # the run records the file it started from: kept, whatever form the rerun names it in
        if name not in RESUME_SAFE:
            if value != getattr(cfg, name):
                safe = ", ".join(n if python else "--" + n.replace("_", "-") for n in RESUME_SAFE
                                 if n != "run_dir" and n not in not_safe)
                raise ConfigError(f"{_resume_refused(name, value, getattr(cfg, name), python)}; safe to change on resume: {safe}")
            continue
        if not same_value(value, getattr(cfg, name)):
            said = f"{name} {_shown(getattr(cfg, name))} -> {_shown(value)} ({sources.get(name, flag)})"
            changes.append((said, name in sources))
        setattr(cfg, name, value)
    if any(untyped for _, untyped in changes):  # the typed flags alone say what they change
        print(f"proxima: note: {state['path']}: the resume changes {', '.join(text for text, _ in changes)}", file=sys.stderr)
    if cfg.cudagraphs and "cudagraphs" not in overrides and str(cfg.device).startswith("cpu"):
        # the recorded switch, not one the user typed: say how to resume a graphed run on the CPU
        if python:
            raise ConfigError(f"device={cfg.device!r}: the run was trained with cudagraphs=True, which needs a CUDA device; "
                              "set cudagraphs=False to resume it on the CPU")
        raise ConfigError(f"--device {cfg.device}: the run was trained with --cudagraphs, which needs a CUDA device; "
                          "add --no-cudagraphs to resume it on the CPU")
    step = int(state["global_step"])  # checked by train_state.check_counters
    least = least_total(cfg, state)
    if cfg.total_timesteps < least:
        if cfg.total_timesteps != recorded_total:  # asked to extend it (the run's own total, e.g. from its config.yaml, asks nothing)
            raise ConfigError(f"{as_given('total_timesteps', cfg.total_timesteps, python)}: the run is already at step "
                              f"{step:,} and trains whole iterations of {least - step:,} steps; give at least {least:,} to extend it")
    if notes:
        note_trains_nothing(cfg, state)
    return cfg


def note_trains_nothing(cfg: PPOConfig, state: dict) -> None:
    """The note on stderr for a resume of ``state`` with ``cfg`` that trains nothing: the run is complete
    (its total reached), or stopped at --stop-return's target; nothing for one that trains."""
    from .signals import from_python

    python = from_python()  # train(PPOConfig(...), resume=...): the fields a script sets, never a flag it did not type
    step = int(state["global_step"])
    if cfg.total_timesteps < least_total(cfg, state):
        more = "a larger total_timesteps" if python else "--total-timesteps N (more steps)"
        print(f"proxima: note: {state['path']}: the run is complete ({step:,} steps); {more} extends it", file=sys.stderr)
        return
    mean = stop_return_mean(cfg, state)
    if mean is not None:
        target, off = ((f"stop_return={cfg.stop_return:g}", "stop_return=None") if python else
                       (f"--stop-return {cfg.stop_return:g}", "--stop-return none"))
        print(f"proxima: note: {state['path']}: the run stopped at {target} (its last "
              f"{cfg.stop_episodes}+ training episodes averaged {mean:.1f}); {off} or a higher "
              "target trains on", file=sys.stderr)
