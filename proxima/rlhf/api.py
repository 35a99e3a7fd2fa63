"""The Python API: train_rlhf(cfg) -> run directory, and resume(run_dir); both raise on bad input."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import numbers
import os
import sys
from pathlib import Path
from typing import Optional

from . import dist as D
from . import loop, rundir
from .config import ConfigError, RLHFConfig, check_kl_horizon, from_dict, reward_specs, validate
from ..device import resolve_device
from ..rundir import read_run_text
from ..signals import OutsideLoop, TrainingInterrupted
from ..diskspace import StorageError


def _absolute_paths(cfg: RLHFConfig) -> RLHFConfig:
    """Paths that exist become absolute in the saved config, so a resume works from any directory."""
    def fix(spec: Optional[str]) -> Optional[str]:
        if spec and os.path.exists(spec):
            return os.path.abspath(spec)
        if spec and ":" in spec:  # path/to/file.py:function
            module, _, func = spec.rpartition(":")
            if module.endswith(".py") and os.path.isfile(module):
                return f"{os.path.abspath(module)}:{func}"
        return spec

    # module:function rewards are imported from these directories, recorded absolute (default: the cwd)
    import_path = [os.path.abspath(p) for p in cfg.reward_import_path or [os.getcwd()]]
    return dataclasses.replace(cfg, policy=fix(cfg.policy), tokenizer=fix(cfg.tokenizer),
                               reward=[fix(r) for r in reward_specs(cfg)], prompts=fix(cfg.prompts),
                               reward_import_path=import_path)


@contextlib.contextmanager
def _caller_state_kept():
    """Puts back what a run changes in its process when train_rlhf or resume returns or raises, as
    proxima.train does (a notebook or a sweep runs on): torch's thread count (the run's ``threads``), the
    random, numpy, torch and CUDA random streams (the run seeds torch's for its models and samples), and
    the warning filters, to which gymnasium adds one ('once' for its DeprecationWarnings) when first
    imported: the run's records import it (proxima.checkpoint), here, where that filter is taken back.
    transformers' verbosity and progress bars are quieted for the run (no bar per load and save) and put
    back too."""
    import torch

    from ..warnings_guard import catch_warnings

    with catch_warnings():
        from .. import checkpoint as ckpt
    from .models import transformers_quieted

    threads, rng = torch.get_num_threads(), ckpt.rng_state()
    try:
        with transformers_quieted():  # no progress bars per load and save, as on the command line
            yield
    finally:
        ckpt.set_rng_state(rng)
        torch.set_num_threads(threads)


class _RankOutside(OutsideLoop):
    """OutsideLoop, except that torchrun's SIGTERM after another rank failed (D.teardown_signal) is no stop:
    this rank ends at once (D.PeerEnded), and the caller's cleanup takes back a new run's files and lock before
    it says D.lost_contact's line. Within stops_held() it is raised as the block ends, as a stop is."""

    def __init__(self):
        super().__init__()
        self.torn = False

    def _handle(self, signum, frame):
        if D.teardown_signal(signum):
            if self.held:
                self.torn = True
            else:
                D.leave_at_teardown()
            return
        super()._handle(signum, frame)

    def check(self) -> None:
        if self.torn:
            self.torn = False
            D.leave_at_teardown()
        super().check()

    def __exit__(self, *exc):
        super().__exit__(*exc)
        self._old = {}  # restored once: a later call must not undo D.end_after_failure's SIGTERM setting
        return False


def _check_python_types(cfg: RLHFConfig) -> None:
    """ConfigError naming the field when a number or switch is a string (``RLHFConfig(steps="2")``), as
    PPOConfig refuses one: text is converted only where it is text, flags and YAML files (from_dict, with
    which the CLI and a resume build their configs), so a typo's quotes are not silently read as a number."""
    from .config import FIELDS, _expected

    for name, f in FIELDS.items():
        value, meta = getattr(cfg, name), f.metadata
        if meta["kind"] in (int, float, bool):
            items = [value]
        elif meta["kind"] is list and meta["item"] is float:
            items = value if isinstance(value, (list, tuple)) else [value]
        else:
            continue
        if any(isinstance(v, (str, bytes)) for v in items):
            none = " or None" if meta["optional"] else ""
            raise ConfigError(f"RLHFConfig.{name} = {value!r}: expected {_expected(name)}{none}, not a string")


def train_rlhf(cfg: RLHFConfig) -> Path:
    """Train; return the run directory. Bad input raises ConfigError before anything is written.

    Under torchrun every process calls this; rank 0 writes the run directory. A run stopped by
    SIGINT/SIGTERM or failed before its first step keeps nothing (rank 0 removes what it wrote, and the
    folder if it made it): the same call runs again. A stop before the first step raises
    TrainingInterrupted at once (signals.OutsideLoop), saying so; the loop's own stops checkpoint.
    torch's thread count, the random streams and the warning filters are as the caller left them when
    this returns or raises (_caller_state_kept).
    """
    if not isinstance(cfg, RLHFConfig):
        raise ConfigError(f"expected an RLHFConfig, got {type(cfg).__name__} (RLHFConfig(**fields), or "
                          "proxima.rlhf.config.from_dict(mapping) for a mapping)")
    _check_python_types(cfg)
    from ..missing_package import require_rlhf

    require_rlhf("train_rlhf()")  # one line before anything is written; proxima rlhf's handler reads its name
    from .rewards import REWARD_CALLER

    caller = REWARD_CALLER.set(REWARD_CALLER.get() or "python")  # the CLI set "cli": its refusals say --reward
    try:
        with _caller_state_kept():
            return _train_rlhf(cfg)
    finally:
        REWARD_CALLER.reset(caller)


#: true while the command line runs train_rlhf with no --device given (neither a flag nor in its --config
#: file): the Python API's RLHFConfig cannot tell a device="cpu" written out from the default
DEVICE_LEFT_DEFAULT: contextvars.ContextVar = contextvars.ContextVar("proxima_rlhf_device_left_default", default=False)


def _note_cpu_default(cfg: RLHFConfig) -> None:
    """One line on stderr when the run trains on the CPU only because --device defaults to cpu while CUDA is
    there: the documented commands name no --device, and a language model on one CPU thread is slow enough to
    look hung. The default stays cpu (a run's device is recorded, and a resume must find it again)."""
    import torch

    if cfg.device == "cpu" and torch.cuda.is_available():
        print("proxima rlhf: note: CUDA is available, but this run trains on the CPU (--device defaults to cpu); "
              "pass --device cuda (or --device auto) to train on the GPU", file=sys.stderr, flush=True)


def _train_rlhf(cfg: RLHFConfig) -> Path:
    from .trainer import RLHFTrainer

    from ..rundir import check_own_entries

    outside = _RankOutside()  # SIGINT/SIGTERM outside the loop's SignalGuard: TrainingInterrupted, handled below
    session = rundir.FreshRun()  # rank 0's lock on the run directory, and what to take back
    trainer, d = None, None
    try:
        outside.__enter__()
        validate(cfg)
        cfg = _absolute_paths(cfg)
        d = D.init_distributed(resolve_device(cfg.device).type)
        if cfg.run_dir:
            run_dir = Path(cfg.run_dir)
            rundir.check_new_run_dir(run_dir, cfg)
        trainer = RLHFTrainer(cfg, d)  # loads every model, file and function: the last place bad input can fail
        if DEVICE_LEFT_DEFAULT.get() and d.is_main:  # after loading: a refused input stays one error line
            _note_cpu_default(cfg)
        if d.is_main:  # the directory (created by rank 0 now that the input is known good, without --run-dir)
            # locked as `proxima train`'s: a second trainer or a resume of this live run is refused
            run_dir = session.claim(Path(cfg.run_dir) if cfg.run_dir else None, rundir.default_run_dir(cfg.seed))
        if not cfg.run_dir:
            run_dir = D.broadcast_object(run_dir if d.is_main else None, d)
        if d.is_main:
            rundir.check_new_run_dir(run_dir, cfg)  # another run may have started here while the models loaded
            check_own_entries(run_dir)  # a checkpoints/ (or other) link planted there would be written and pruned through
            # absolute, as the other paths: the file names this run from any working directory
            recorded = dataclasses.replace(cfg, run_dir=os.path.abspath(run_dir))
            rundir.write_run_files(run_dir, recorded.to_dict(), d.world_size, str(trainer.device))
        loop.run(trainer, run_dir)
        outside.__exit__()  # trained: a signal now is what it was before this run
    except TrainingInterrupted as e:
        # another signal while the files are taken back (torchrun passes one on to rank 0 once another rank has
        # stopped) is recorded, not raised: none is left half-removed
        outside.held += 1
        stop = e
        if e.checkpoint is None and e.what is None:  # OutsideLoop's: it says nothing of where it landed
            if trainer is None or trainer.finished_step == 0:  # a new run stopped before its first step: nothing is kept
                session.discard_fresh()
                stop = TrainingInterrupted(e.signum, None, "before training started; nothing was kept")
            else:
                last = (rundir.list_checkpoints(run_dir) or [None])[-1]
                stop = TrainingInterrupted(e.signum, last, "outside a step; the run is as its last checkpoint left it; "
                                           + loop.stop_line(last, loop.needs_trust(cfg)))
        outside.__exit__()
        if d is not None:
            D.end_after_failure(d, e)
        if stop is e:  # the loop's own stop, after its checkpoint
            raise
        raise stop from None
    except BaseException as e:
        outside.held += 1  # a stop meanwhile: recorded, the files are taken back whole (above)
        if trainer is None or trainer.finished_step == 0:
            # a new run that failed before its first step finished (step 1 diverged) leaves nothing behind
            session.discard_fresh()
        outside.__exit__()
        _raise_ended(d, e)
        raise
    finally:
        session.release()
    try:  # its barrier fails when another rank failed after the last step (rank 0 writing policy/)
        D.shutdown(d)
    except Exception as e:
        _raise_ended(d, e)
        raise
    return run_dir


def _raise_ended(d: Optional[D.Dist], e: BaseException) -> None:
    """Leave the process group after ``e`` (D.end_after_failure) and raise what takes its place: one line for a
    rank that lost contact with another; nothing when ``e`` itself is to be raised (the caller's bare raise)."""
    if d is None:
        return
    ended = D.end_after_failure(d, e)
    if ended is not e:
        raise ended from None


def resume(run_dir, steps: Optional[int] = None, trust_run: bool = False, quiet: bool = False) -> int:
    """Continue an RLHF run from its latest checkpoint (bit-identical on CPU); ``steps`` extends it;
    ``quiet`` prints no progress lines (the recorded print_every stays in config.yaml).

    A run directory is data: a reward its config.yaml records as ``module:function`` or
    ``file.py:function`` (other than Proxima's built-in rewards) is imported only with ``trust_run``
    (``proxima resume --trust-run``); otherwise the resume stops with one line saying so.
    Returns 0 (the exit status `proxima resume` gives) once the run is complete. Raises as train_rlhf
    does: ConfigError for bad input (one line; a run directory that is none, a recorded reward that
    needs ``trust_run=True``), CheckpointError or StorageError for a checkpoint or file that cannot be
    used, TrainingInterrupted for SIGINT/SIGTERM (stopped as it sets up, before its first step, it
    leaves the run's files as they were); `proxima resume` turns each into its line and exit status.
    torch's thread count, the random streams and the warning filters are as the caller left them.
    """
    with _caller_state_kept():
        return _resume(Path(run_dir), _steps_argument(steps), trust_run, quiet)


def _steps_argument(steps) -> Optional[int]:
    """resume()'s ``steps``: None, or an integer (numpy's too); a string is refused, as train_rlhf refuses
    one (_check_python_types): a quoted typo must not be read as a number. The CLI passes argparse's int."""
    if steps is None:
        return None
    if isinstance(steps, (bool, str, bytes)) or not isinstance(steps, numbers.Integral):
        raise ConfigError(f"resume(steps={steps!r}): expected an integer number of steps (or None)")
    if steps < 1:
        raise ConfigError(f"resume(steps={steps!r}): must be at least 1")
    return int(steps)


def _resume(path: Path, steps: Optional[int], trust_run: bool, quiet: bool) -> int:
    from .trainer import RLHFTrainer

    from ..rundir import RunSession

    session = RunSession()  # rank 0's lock on the run (never discard_fresh: the run is not this call's)
    outside = _RankOutside()  # SIGINT/SIGTERM outside the loop's SignalGuard: TrainingInterrupted at once, said below
    where = "before training started"  # where such a stop lands, for its line
    cfg = None
    try:
        outside.__enter__()
        cfg = check_resume(path, steps, trust_run)
        if os.environ.get("RANK", "0") == "0":  # rank 0 holds the run's lock, as for `proxima train`
            session.lock_existing(path)  # a stop meanwhile leaves no lock behind (signals.stops_held)
        d = D.init_distributed(resolve_device(cfg.device).type)
        trainer, recorded = None, None
        try:
            # --quiet: no progress lines for this resume only (config.yaml keeps the run's print_every)
            trainer = RLHFTrainer(dataclasses.replace(cfg, print_every=0) if quiet else cfg, d)
            file, state = rundir.load_newest_usable(path, set_aside=not d.enabled)  # a damaged newest: the one before
            if file is not None:
                loop.load_checkpoint(trainer, file, state)
            start = trainer.step
            if trainer.step < cfg.steps:
                if steps is not None and d.is_main:
                    recorded = (path / "config.yaml").read_text(encoding="utf-8")
                    _note_lr_schedule(cfg, rundir.read_config(path).get("steps"), trainer.step)
                    rundir.write_config(path, cfg.to_dict())
                if d.is_main and not quiet:  # as a PPO resume says it (a short extension printed nothing before)
                    print(f"proxima: resuming {path} at step {trainer.step} of {cfg.steps}", file=sys.stderr, flush=True)
                loop.run(trainer, path, resumed=True)
                where = "after training finished"
            elif not D.broadcast_object(loop.is_finished(path, trainer.step) if d.is_main else None, d):
                # killed while writing policy/ or summary.json: the last checkpoint holds everything they need
                if d.is_main:
                    print(f"{path}: at step {trainer.step} of {cfg.steps} but policy/ or summary.json is missing or "
                          f"incomplete; writing them", flush=True)
                where = "while policy/ and summary.json were written"
                with loop.naming_last_good(path):
                    loop.finish(trainer, path)
                where = "after training finished"
            elif d.is_main:
                print(f"{path}: already at step {trainer.step} of {cfg.steps}; nothing to do")
        except BaseException as e:
            outside.held += 1  # a stop meanwhile is recorded: config.yaml is put back whole
            # no step of this resume finished (a step that diverged has counted itself already, so trainer.step
            # says nothing): --steps as it was
            if recorded is not None and trainer.finished_step <= start:
                with contextlib.suppress(StorageError):
                    rundir.write_config_text(path, recorded)
            outside.__exit__()
            _raise_ended(d, e)
            raise
        try:  # as train_rlhf's: another rank may have failed after the last step
            D.shutdown(d)
        except Exception as e:
            outside.__exit__()
            _raise_ended(d, e)
            raise
    except TrainingInterrupted as e:  # SIGINT/SIGTERM: the step finished and checkpointed (exit 128 + signum)
        if e.checkpoint is not None or e.what is not None:  # the loop's own stop, saying where it landed
            raise
        # OutsideLoop's: outside a step, nothing of the run was changed
        last = (rundir.list_checkpoints(path) or [None])[-1]
        # a stop before config.yaml was read: whether the resume needs --trust-run is not known; the caller's choice
        trust = loop.needs_trust(cfg) if cfg is not None else trust_run
        raise TrainingInterrupted(e.signum, last, f"{where}; the run is as its last checkpoint left it; "
                                  + loop.stop_line(last, trust)) from None
    finally:
        outside.__exit__()
        session.release()
    return 0


def _note_lr_schedule(cfg: RLHFConfig, planned, done: int) -> None:
    """A note on stderr (--quiet included, as PPO's notes) when ``--steps`` changes an annealed run's length:
    the linear schedule is recomputed over the new total, as PPO's resume with --total-timesteps does
    (docs/reliability.md), so the rate can rise from the last step's; said, since a rate that rises late
    in RLHF can spike the KL. ``planned``: the steps config.yaml recorded; ``done``: steps trained."""
    if not cfg.anneal_lr or not isinstance(planned, int) or planned == cfg.steps or done < 1:
        return
    before, after = cfg.lr * (1 - (done - 1) / planned), cfg.lr * (1 - done / cfg.steps)
    print(f"proxima: note: --anneal-lr: the learning rate schedule is recomputed over {cfg.steps} steps, as if the run "
          f"had been planned for them (as `proxima resume --total-timesteps` does for PPO): step {done + 1} trains at lr "
          f"{after:.3g}, step {done} trained at {before:.3g}", file=sys.stderr, flush=True)


def check_resume(path: Path, steps: Optional[int] = None, trust_run: bool = False) -> RLHFConfig:
    """The config a resume of the RLHF run ``path`` continues with, checked as far as it can be before
    anything is loaded, imported or written: ConfigError (one line) otherwise. The resume's own first
    step, and the ``proxima resume`` launcher's check before it starts the run's processes."""
    from .rewards import refuse_recorded_rewards

    from ..rundir import check_own_entries

    path = Path(path)
    meta = _read_meta(path)
    if meta.get("kind") != "rlhf":
        raise ConfigError(f"{path}: meta.json says kind {meta.get('kind')!r}, not 'rlhf'")
    cfg = from_dict(rundir.read_config(path), source=str(path / "config.yaml"))
    cfg.run_dir = os.path.abspath(path)  # what a resume that trains records in config.yaml
    if steps is not None:
        cfg.steps = steps
    if not trust_run:  # before anything is imported, loaded or written
        try:
            refuse_recorded_rewards(reward_specs(cfg), path / "config.yaml", "pass --trust-run to `proxima resume`")
        except ConfigError as e:  # the caller may be Python, not the command line: both ways to trust it
            raise ConfigError(f"{e} (`{loop.python_call(path)}` in Python)") from None
    filtered = [f"{name}: {getattr(cfg, name)}" for name, off in (("top_k", 0), ("top_p", 1.0)) if getattr(cfg, name) != off]
    if filtered:  # recorded by a version that allowed it; validate() would name a flag nobody typed
        raise ConfigError(f"{path / 'config.yaml'}: records {', '.join(filtered)} (allowed by earlier versions), which "
                          "makes PPO's samples off-policy: its log-probs and KL score the whole softmax; set top_k: 0 "
                          "and top_p: 1.0 there to continue with unfiltered sampling, or start a new run")
    # before validate(), whose line names --kl-horizon, a flag resume does not take; with the run's own count
    check_kl_horizon(cfg, recorded_processes(path), recorded=path / "config.yaml")
    validate(cfg, new_run=False)
    check_own_entries(path)  # metrics.csv, checkpoints/, policy/ ... are rewritten: none may lead out of the run
    return cfg


def recorded_processes(path: Path) -> int:
    """How many processes the RLHF run ``path`` trains with: meta.json's ``world_size`` (its
    checkpoints need as many: loop.load_checkpoint), 1 when it records no count. Only reads."""
    try:
        world = _read_meta(Path(path)).get("world_size", 1)
    except ConfigError:
        return 1  # the resume says what is wrong with meta.json
    return world if isinstance(world, int) and not isinstance(world, bool) and world > 1 else 1


def resume_processes(path: Path) -> int:
    """How many processes ``proxima resume PATH`` starts for the RLHF run PATH (cli.cmd_resume, through
    launch.launch_torchrun when more than 1): the count it records; 1 under torchrun (the ranks are
    started already). A count over the CPUs this process may use (cpuinfo.usable_cpus) is refused
    (meta.json is data)."""
    from ..launch import under_torchrun

    if under_torchrun():
        return 1
    from ..cpuinfo import cpus_text, usable_cpus

    world = recorded_processes(path)
    cpus = usable_cpus()
    if world > cpus:
        raise ConfigError(f"{path}: an RLHF run of {world} processes, more than {cpus_text(cpus)}; resume it "
                          f"under the torchrun command that ran it (torchrun ... -m proxima resume {path}, docs/rlhf.md)")
    return world


def _read_meta(path: Path) -> dict:
    try:
        meta = json.loads(read_run_text(path / "meta.json"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: not a run directory (cannot read meta.json: {e})") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{path / 'meta.json'}: expected a JSON object, got {type(meta).__name__}; the run "
                          "directory's meta.json was damaged or edited")
    return meta
