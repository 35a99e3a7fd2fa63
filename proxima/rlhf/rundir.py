"""The run directory: config.yaml, meta.json, TensorBoard events, metrics.csv, samples, checkpoints/,
summary.json and curve.png. Written by rank 0 only; nothing in here is on the training hot path.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import platform
import re
import time
from pathlib import Path
from typing import Optional

import torch
import yaml

from ..config import dump_yaml
from ..diskspace import write_error
from .. import rundir as run_files
from ..rundir import (LOCK_NAME, RunFileError, RunLock, RunSession, _remove_contents, _remove_empty_dir,
                      check_own_entries)
from ..signals import stops_held
from ..warnings_guard import quiet_warnings
from .config import ConfigError

CHECKPOINT_RE = re.compile(r"^step_(\d+)\.pt$")


def default_run_dir(seed: int, prefix: str = "rlhf") -> Path:
    return Path("runs") / f"{prefix}__{seed}__{time.strftime('%Y%m%d-%H%M%S')}"


def claim_run_dir(base: Path) -> Path:
    """Create ``base`` (or base-2, base-3, ...) with one atomic mkdir: two runs started in the same second
    never share a directory, even as separate processes."""
    base.parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise ConfigError(f"{base}: 9999 run directories of that name exist; pass --run-dir")


#: what a new run writes in its directory (the names its writers rename through included), and the TensorBoard
#: event files' prefix: a new run never writes over any of them (check_new_run_dir)
RUN_NAMES = ("config.yaml", "meta.json", "checkpoints", "metrics.csv", "samples.jsonl", "policy", ".policy.partial",
             ".policy.old", "curve.png", "summary.json")
EVENTS_PREFIX = "events.out.tfevents."


def _run_name(name: str) -> bool:
    return name in RUN_NAMES or name.startswith(EVENTS_PREFIX)


def check_new_run_dir(path: Path, cfg=None) -> None:
    """A new run may go into a missing directory, or one that holds none of the names it writes (RUN_NAMES, event
    files): it replaces policy/, metrics.csv, summary.json ... whole, so a user's own file there would be lost, and an
    input model there (``--policy RUN/policy``) replaced by the run's output. Files of other names (notes.txt, the
    demo's demo/) stay. ``cfg`` (the run's RLHFConfig): an input inside one of those names is named by its flag."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--run-dir {str(path)!r}: exists and is not a directory")
    if cfg is not None:
        _refuse_inputs_inside(path, cfg)
    if not path.is_dir():
        return
    if (path / "meta.json").exists():
        raise ConfigError(f"--run-dir {str(path)!r}: already holds a run; continue it with `{_resume_of(path)}` or pick another directory")
    check_own_entries(path)  # a link planted at such a name, leading out of the folder: the line that says so
    found = sorted(p.name + ("/" if p.is_dir() and not p.is_symlink() else "") for p in path.iterdir() if _run_name(p.name))
    if found:
        shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        raise ConfigError(f"--run-dir {path}: already holds {shown}, which a new run writes (and would replace); "
                          "choose another --run-dir, or move those away (other files may stay)")


def _resume_of(path: Path) -> str:
    """The command that continues the run in ``path``: with --trust-run where its config.yaml records a reward
    that imports code (a plain `proxima resume` is refused then); the plain command when that cannot be read."""
    from .config import from_dict
    from .loop import needs_trust, resume_command

    try:
        trust = needs_trust(from_dict(read_config(path), source=str(path / "config.yaml")))
    except Exception:  # an unreadable config: the resume itself says what is wrong with it
        trust = False
    return resume_command(path, trust)


def _refuse_inputs_inside(path: Path, cfg) -> None:
    """ConfigError naming the flag whose file or folder lies inside one of the names the run writes in ``path``."""
    from .config import reward_specs

    inputs = [("--policy", cfg.policy), ("--tokenizer", cfg.tokenizer), ("--prompts", cfg.prompts)]
    inputs += [("--reward", spec) for spec in reward_specs(cfg)]
    run = os.path.realpath(path)
    for flag, spec in inputs:
        if not spec:
            continue
        target = spec
        if not os.path.exists(target) and ":" in spec:  # file.py:function
            target = spec.rpartition(":")[0]
        if not os.path.exists(target):
            continue
        inside = os.path.relpath(os.path.realpath(target), run).split(os.sep)
        if inside[0] not in (os.curdir, os.pardir) and _run_name(inside[0]):
            raise ConfigError(f"{flag} {spec}: lies in {inside[0]} of --run-dir {path}, which a new run writes (and "
                              f"would replace); choose another --run-dir, or move it out of there")


class FreshRun(RunSession):
    """Rank 0's hold on a new RLHF run's directory (proxima.rundir.RunSession, as `proxima train`'s): its
    lock, and what to take back when the run stops or fails before its first step (discard_fresh).

    Unlike a PPO run's, the directory may hold files when it is locked (the demo's ``demo/``, a user's
    notes), but none of the names the run writes (check_new_run_dir refuses those); those files stay. What
    appeared in it after the lock was taken is this run's, and goes; the folder too, when this run made it."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: set = set()  # what the directory held when it was locked
        self.new_parents: list = []  # the folders above it that the claim created (runs/): taken back when empty

    def claim(self, run_dir: Optional[Path], default: Path) -> Path:
        """Lock ``run_dir`` (None: claim ``default``, or default-2, ... : claim_run_dir) and return it. A stop
        meanwhile is raised once the lock is recorded here (signals.stops_held), so discard_fresh finds it."""
        with stops_held():
            made = run_dir is None
            self.new_parents = [p for p in (default if made else run_dir).absolute().parents if not p.exists()]
            if made:
                run_dir = claim_run_dir(default)
            lock = RunLock(run_dir)
            try:
                lock.acquire()
            except BaseException:
                if made or lock.made_dir:
                    _remove_empty_dir(run_dir)
                raise
            lock.made_dir = lock.made_dir or made  # the folder is this run's: discard_fresh removes it
            self.kept = {p.name for p in run_dir.iterdir() if p.name != LOCK_NAME}
            self.lock, self.created = lock, run_dir
        return run_dir

    def discard_fresh(self) -> None:
        """A new run that stopped or failed before its first step: remove what it wrote, and its folder if it
        made it. A checkpoint keeps the whole run (none is written before step 1 finishes, its reward failing
        included: loop._checkpoint_after_reward_failure)."""
        run_dir = self.created
        if run_dir is None or not run_dir.is_dir() or list_checkpoints(run_dir):  # RLHF's names, not PPO's
            self.created = None
            return
        if not self.kept:
            super().discard_fresh()  # claimed empty: everything in it is this run's
            for folder in self.new_parents:  # innermost first; one that holds anything (another run) stays
                _remove_empty_dir(folder)
            return
        self.created = None
        _remove_contents(run_dir, keep=frozenset(self.kept))
        self.release()  # a folder that held files before this run is not its own: it stays


def write_run_files(path: Path, config: dict, world_size: int, device: str) -> None:
    """A new run's checkpoints/, config.yaml and meta.json. A write that fails (disk full) is a StorageError
    naming the file, and leaves neither file: a folder holding one would pass for a run, which a new run
    into it refuses and a resume cannot continue."""
    from ..atomic import write_atomic

    files = {"config.yaml": dump_yaml(config), "meta.json": json.dumps(_meta(world_size, device), indent=2) + "\n"}
    file = path / "checkpoints"
    try:
        file.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            file = path / name
            write_atomic(file, text)
    except OSError as e:
        with contextlib.suppress(OSError):
            for name in files:
                (path / name).unlink(missing_ok=True)
            (path / "checkpoints").rmdir()  # empty: the run never trained
        raise write_error(file, e, "could not start the run") from None


def write_config(path: Path, config: dict) -> None:
    _atomic_write(path / "config.yaml", dump_yaml(config))


def write_config_text(path: Path, text: str) -> None:
    """config.yaml as ``text`` (what it held: a resume that stopped before its first step puts it back)."""
    _atomic_write(path / "config.yaml", text)


def _meta(world_size: int, device: str) -> dict:
    import transformers

    try:
        import peft

        peft_version: Optional[str] = peft.__version__
    except ImportError:
        peft_version = None
    from ..launch import typed_command
    from ..train_state import git_record, machine_record, started_now, versions, where_started

    git = git_record()  # one rule for PPO and RLHF runs (the image's recorded commit included)
    from .. import __version__

    started = started_now()
    # versions and machine as a PPO run's meta.json holds them (train_state); the top-level versions and
    # "created" of earlier RLHF runs stay, for what reads them
    meta = {"kind": "rlhf", "proxima": __version__, "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "peft": peft_version, **git, "device": device,
            "world_size": world_size, "command": typed_command(), "started": started, "created": started,
            "versions": {**versions(), "transformers": transformers.__version__, "peft": peft_version},
            **where_started()}
    machine = machine_record(device)
    if machine is not None:
        meta["machine"] = machine
    return meta


def read_config(path: Path) -> dict:
    """The run's config.yaml: data (no YAML aliases: config.load_yaml), one line naming it otherwise."""
    from ..config import load_yaml

    try:
        # bounded, and never waiting on a FIFO planted at the name (a run directory is data)
        data = load_yaml(run_files.read_run_text(path / "config.yaml", run_files.TEXT_MAX_BYTES))
    except RunFileError as e:
        raise ConfigError(str(e)) from None
    except (OSError, ValueError, yaml.YAMLError) as e:  # ValueError: bytes that are not UTF-8
        raise ConfigError(f"{path}: cannot read config.yaml: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return data or {}


def _unreadable(file: Path, e: OSError) -> ConfigError:
    """A run file that could not be read, as one line naming it (RunFileError's own: a FIFO, an oversized file)."""
    return ConfigError(str(e) if isinstance(e, RunFileError) else f"{file}: cannot read ({e.strerror or e})")


def _atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` whole, never through a symbolic link (atomic.py); a write that fails
    (disk full) is a StorageError naming the file, which is left as it was."""
    from ..atomic import write_atomic

    try:
        write_atomic(path, text)
    except OSError as e:
        raise write_error(path, e) from None


def as_logged_text(value: float) -> str:
    """A metric as metrics.csv holds it (6 significant digits)."""
    return f"{value:.6g}"


def as_logged(value: float) -> float:
    """A metric as metrics.csv holds it, read back: what a progress line rounds, so that it and the done line
    (from summary.json, means of metrics.csv's cells) round a value alike (-0.41250000596 in float32 logs as
    -0.4125, which both print as -0.412)."""
    return float(as_logged_text(value))


class MetricsLogger:
    """TensorBoard scalars and text, plus metrics.csv (one row per step, the columns of the first row).

    Events go through logger.EventFile, PPO's writer, in the caller's thread, each step's handed to the
    OS before log() returns (a SIGKILL after it leaves that step for the resume to drop). A write that
    fails (disk full) is a StorageError naming the file (diskspace.write_error), raised by the call
    that wrote."""

    def __init__(self, path: Path, resume_step: Optional[int] = None):
        """resume_step: None for a new run; for a resumed one the step of its checkpoint (0 when it is
        resumed from before any checkpoint, after a SIGKILL): what was logged after it is dropped."""
        from ..logger import EventFile, drop_events_after, wait_for_new_second

        self.path = path
        self.csv_path = path / "metrics.csv"
        self.columns: Optional[list] = None
        resumed = resume_step is not None
        if resumed:  # both read (a FIFO or an oversized file refused) before anything of the run is rewritten
            csv_text = self._csv_up_to(resume_step) if self.csv_path.exists() else None
            samples_text = self._samples_up_to(resume_step)
        try:
            if resumed:  # rewritten, not purge_step: TensorBoard's default loader ignores purge markers
                drop_events_after(path, resume_step)
                wait_for_new_second(path)
            path.mkdir(parents=True, exist_ok=True)  # a folder not made yet: SummaryWriter made it too
            self._events = EventFile(path)
        except OSError as e:
            raise write_error(e.filename or path / "events.out.tfevents.*", e, "could not open the run's logs") from None
        try:
            if resumed and csv_text is not None:
                _atomic_write(self.csv_path, csv_text)
            if resumed and samples_text is not None:
                _atomic_write(self.path / "samples.jsonl", samples_text)
        except BaseException:  # a logger that failed to open is never closed; its file holds no event
            with contextlib.suppress(OSError):
                self._events.close()
                self._events.path.unlink()
            raise

    def _csv_up_to(self, step: int) -> str:
        """On resume, metrics.csv without the rows written after the checkpoint (they will be recomputed) and a
        row that a SIGKILL cut short (fewer cells than the header). The file is data: a line that is not a row
        Proxima wrote (not UTF-8, not CSV, no step) is dropped with a note naming the file."""
        from ..logger import rows_up_to

        try:  # a FIFO or an oversized file: RunDirError (logger._resume_lines), one line naming it
            header, kept = rows_up_to(self.csv_path, "step", step)
        except OSError as e:
            raise _unreadable(self.csv_path, e) from None
        if not header:  # written anew, header first, by the next log()
            self.columns = None
            return ""
        self.columns = header[1:]
        text = io.StringIO()
        csv.writer(text).writerows([header, *kept])
        return text.getvalue()

    def _samples_up_to(self, step: int) -> Optional[str]:
        """On resume (after a stop, or a SIGKILL between a step's logs and its checkpoint), samples.jsonl
        without the samples of steps after the checkpoint: they are generated again. None without the file."""
        file = self.path / "samples.jsonl"
        try:
            data = run_files.read_run_bytes(file, run_files.LOG_MAX_BYTES)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise _unreadable(file, e) from None

        def logged_by_then(line: str) -> bool:  # a line that a SIGKILL cut short is dropped too
            try:
                logged = json.loads(line)["step"]
                return isinstance(logged, int) and not isinstance(logged, bool) and logged <= step
            except (ValueError, KeyError, TypeError, RecursionError):
                return False

        keep = [line for line in data.decode("utf-8", errors="replace").splitlines(keepends=True) if logged_by_then(line)]
        return "".join(line if line.endswith("\n") else line + "\n" for line in keep)

    def log(self, step: int, metrics: dict) -> None:
        try:
            self._events.scalars(step, metrics)
            self._events.flush()
        except OSError as e:
            raise write_error(self._event_file(), e, "could not write TensorBoard events") from None
        try:
            if self.columns is None:
                self.columns = list(metrics)
                with open(self.csv_path, "w", newline="") as f:
                    csv.writer(f).writerow(["step"] + self.columns)
            with open(self.csv_path, "a", newline="") as f:
                csv.writer(f).writerow([step] + [as_logged_text(metrics.get(k, float("nan"))) for k in self.columns])
        except OSError as e:
            raise write_error(self.csv_path, e) from None

    def log_samples(self, step: int, rows: list) -> None:
        """rows: trainer.sample_row dicts (prompt, response, response_raw, response_tokens, eos, score). TensorBoard
        text (a markdown table of prompt, response and score) and samples.jsonl (every key)."""
        def cell(text) -> str:  # a conversation prompt is shown as its JSON
            text = text if isinstance(text, str) else json.dumps(text)
            return text.replace("|", "\\|").replace("\n", " ")

        table = "| prompt | response | score |\n|---|---|---|\n" + "".join(
            f"| {cell(r['prompt'])} | {cell(r['response'])} | {r['score']:.3f} |\n" for r in rows)
        try:
            self._events.text("samples", table, step)
            self._events.flush()
        except OSError as e:
            raise write_error(self._event_file(), e, "could not write TensorBoard events") from None
        try:
            with open(self.path / "samples.jsonl", "a") as f:
                for r in rows:
                    f.write(json.dumps({"step": step, **r}) + "\n")
        except OSError as e:
            raise write_error(self.path / "samples.jsonl", e) from None

    def _event_file(self) -> Path:
        return self._events.path

    def close(self) -> None:
        """Flush and close the TensorBoard file; a write that fails there is a StorageError."""
        try:
            self._events.close()
        except OSError as e:
            raise write_error(self._event_file(), e, "could not write TensorBoard events") from None


def read_metrics(path: Path) -> dict:
    """metrics.csv -> {column: [float, ...]} with a 'step' column (NaN for a cell that is not a number).
    A line that is not a row (not CSV, another number of cells) is skipped with a note naming it; a last
    row cut short by a kill goes without one."""
    def number(cell) -> float:
        try:
            return float(cell)
        except (TypeError, ValueError):
            return float("nan")

    from ..logger import note_skipped, read_csv_lines, whole_rows

    file = path / "metrics.csv"
    try:
        info = file.stat()
        # each line on its own: a hand-edited quote costs its line, not the rest
        header, rows, skipped = whole_rows(*read_csv_lines(file))
    except OSError as e:
        raise _unreadable(file, e) from None
    if skipped:
        note_skipped(file, info, skipped)  # once per file content: the curve and the summary both read it
    return {k: [number(r[i]) for _, r in rows] for i, k in enumerate(header)}


# ---------------------------------------------------------------------------------------------
# checkpoints: plain tensors and containers, torch.save'd atomically, loaded with weights_only=True
# ---------------------------------------------------------------------------------------------
def save_checkpoint(path: Path, step: int, state: dict, keep: int) -> Path:
    folder = path / "checkpoints"
    folder.mkdir(exist_ok=True)
    target = folder / f"step_{step:06d}.pt"
    from ..checkpoint import _is_regular, atomic_torch_save

    # PPO's writer: a fresh temp name renamed over the target (never through a link), CRCs on, a full
    # disk as one line (CheckpointError naming the file)
    atomic_torch_save(state, target)
    # as PPO's pruning: only files count and go; a folder or FIFO at a checkpoint's name is no checkpoint
    # this run wrote (a resume sets it aside when it is the newest: load_newest_usable)
    for old in [p for p in list_checkpoints(path) if _is_regular(p)][:-keep]:
        old.unlink(missing_ok=True)
    for stale in folder.glob(".step_*.tmp"):  # temp files of a save killed before its rename
        if not stale.is_dir():
            stale.unlink(missing_ok=True)
    return target


def list_checkpoints(path: Path) -> list:
    folder = path / "checkpoints"
    found = [(int(m.group(1)), p) for p in folder.glob("step_*.pt") if (m := CHECKPOINT_RE.match(p.name))] if folder.is_dir() else []
    return [p for _, p in sorted(found)]


CHECKPOINT_FORMAT = "proxima-rlhf-1"


def load_checkpoint(file: Path) -> dict:
    """The content of checkpoint ``file``, as written: read once, without running code (weights_only), without
    waiting on a FIFO planted at its name, and with its zip records' checksums verified first (PPO's
    checkpoint._check_archive: a flipped bit is a damaged file, not a wrong weight). ConfigError naming the file
    otherwise. Its fields are not checked here: check_checkpoint (load_sound_checkpoint does both)."""
    from ..checkpoint import CheckpointError, _check_archive, _Vanished, check_views, not_a_file

    try:
        f = run_files.open_run_file(file)
    except FileNotFoundError:
        if os.path.islink(file):
            raise ConfigError(f"{file}: {not_a_file(Path(file))}") from None
        # removed since it was listed (--keep-checkpoints): newest_that_loads goes on to the one before
        raise _Vanished(f"{file}: no such file or directory") from None
    except OSError as e:
        if isinstance(e, (IsADirectoryError, run_files.NotRegularFileError)):
            raise ConfigError(f"{file}: {not_a_file(Path(file)) or 'is not a regular file'}") from None
        raise ConfigError(f"{file}: cannot read checkpoint ({e.strerror or e})") from None
    with f:
        try:
            _check_archive(Path(file), f)
        except CheckpointError as e:
            raise ConfigError(str(e)) from None
        except OSError as e:
            raise ConfigError(f"{file}: cannot read checkpoint ({e.strerror or e})") from None
        try:
            with quiet_warnings():  # keep the error to one line
                state = torch.load(f, map_location="cpu", weights_only=True)
        except Exception as e:  # corrupted or foreign: one line naming the file
            raise ConfigError(f"{file}: not a readable Proxima RLHF checkpoint ({type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''})") from None
    if not isinstance(state, dict) or "format" not in state:
        raise ConfigError(f"{file}: not a Proxima RLHF checkpoint")
    try:  # before any check reads a tensor whole: a view is stored as its storage, never its size
        check_views(Path(file), state)
    except CheckpointError as e:
        raise ConfigError(str(e)) from None
    return state


class CheckedState(dict):
    """A checkpoint's content that check_checkpoint passed: loop.load_checkpoint does not check it again
    (the check reads every weight and optimizer moment once)."""


def load_sound_checkpoint(file: Path) -> CheckedState:
    """load_checkpoint, then check_checkpoint: what a resume picks its checkpoint with, so that a damaged newest
    one (an edited field, a NaN weight) is set aside for the one before, as one cut short is."""
    return check_checkpoint(file, load_checkpoint(file))


def check_checkpoint(file: Path, state: dict) -> CheckedState:
    """``state`` when it holds what save_checkpoint writes, of the kinds it writes, else ConfigError naming the
    file and the field, before any of it reaches a model, an optimizer or an RNG: every key there, ``step`` an
    integer >= 0, every weight a finite floating tensor, each optimizer's moments finite and shaped as the
    weights they belong to with a step count >= 0 (the fused Adam kernel reads a moment of another shape out of
    bounds), every process's RNG state one torch accepts, its prompt order a list of indices. What needs the
    model built from config.yaml (names, shapes and dtypes of its parameters) is loop.load_checkpoint's."""
    from ..checkpoint import CheckpointError

    try:
        _check_fields(Path(file), state)
    except CheckpointError as e:  # PPO's checks (check_finite_tensor), in the same words
        raise ConfigError(str(e)) from None
    return state if isinstance(state, CheckedState) else CheckedState(state)


def _damaged(file: Path, field: str, value, wanted: str) -> ConfigError:
    return ConfigError(f"{file}: {field} is {_shown(value)}, not {wanted}; the checkpoint is damaged or was edited")


def _shown(value) -> str:
    from ..checkpoint import _describe, _one_line

    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).replace('torch.', '')} tensor of shape {tuple(value.shape)}"
    if isinstance(value, (dict, list, tuple)):
        return _describe(value) if isinstance(value, dict) else f"a {type(value).__name__} of {len(value)}"
    return _one_line(repr(value), 60)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check_fields(file: Path, state: dict) -> None:
    if state.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(f"{file}: not a Proxima RLHF checkpoint (format {_shown(state.get('format'))})")
    for key in ("step", "seconds", "ranks", "policy", "opt_policy", "value", "opt_value", "kl"):
        if key not in state:
            raise ConfigError(f"{file}: incomplete checkpoint (missing '{key}'); the checkpoint is damaged or was edited")
    if not _is_int(state["step"]) or state["step"] < 0:
        raise _damaged(file, "step", state["step"], "an integer >= 0")
    if not _is_number(state["seconds"]) or state["seconds"] < 0:
        raise _damaged(file, "seconds", state["seconds"], "a number of seconds >= 0")
    if not isinstance(state.get("fsdp", False), bool):
        raise _damaged(file, "fsdp", state["fsdp"], "true or false")
    ranks = state["ranks"]
    if not isinstance(ranks, list) or not ranks:
        raise _damaged(file, "ranks", ranks, "a list of every process's random state")
    for i, rank in enumerate(ranks):
        _check_random_state(file, f"ranks[{i}]", rank)
    for name in ("policy", "value"):
        _check_weights(file, name, state[name], allow_empty=name == "value")
        check_optimizer(file, "opt_" + name, state["opt_" + name], state[name])
    kl = state["kl"]
    if not isinstance(kl, dict) or "value" not in kl:
        raise _damaged(file, "kl", kl, "a mapping with the KL coefficient 'value'")
    if not _is_number(kl["value"]) or kl["value"] < 0:
        raise _damaged(file, "kl.value", kl["value"], "a finite number >= 0")


def _check_random_state(file: Path, field: str, rank) -> None:
    """One process's RNG states and place in the prompt order (loop.random_state)."""
    if not isinstance(rank, dict):
        raise _damaged(file, field, rank, "a mapping of rng, cuda_rng and sampler")
    for key in ("rng", "sampler"):
        if key not in rank:
            raise ConfigError(f"{file}: incomplete checkpoint (missing '{field}.{key}'); the checkpoint is damaged or was edited")
    rng = rank["rng"]
    if not isinstance(rng, torch.Tensor) or rng.dtype != torch.uint8 or rng.dim() != 1:
        raise _damaged(file, f"{field}.rng", rng, "a CPU RNG state (a 1-D uint8 tensor)")
    try:  # torch checks the size and the generator's own invariants; a fresh generator: nothing of this process changes
        torch.Generator().set_state(rng)
    except (RuntimeError, ValueError, TypeError) as e:
        raise ConfigError(f"{file}: {field}.rng is not a CPU RNG state torch accepts ({str(e).splitlines()[0][:120]}); "
                          "the checkpoint is damaged or was edited") from None
    cuda = rank.get("cuda_rng")
    if cuda is not None and (not isinstance(cuda, torch.Tensor) or cuda.dtype != torch.uint8 or cuda.dim() != 1):
        raise _damaged(file, f"{field}.cuda_rng", cuda, "a CUDA RNG state (a 1-D uint8 tensor) or none")
    sampler = rank["sampler"]
    if not isinstance(sampler, dict) or "order" not in sampler or "pos" not in sampler:
        raise _damaged(file, f"{field}.sampler", sampler, "a mapping of order and pos")
    order, pos = sampler["order"], sampler["pos"]
    if (not isinstance(order, torch.Tensor) or order.dim() != 1 or order.dtype in (torch.bool, torch.uint8)
            or order.is_floating_point() or order.is_complex() or (len(order) and int(order.min()) < 0)):
        raise _damaged(file, f"{field}.sampler.order", order, "a 1-D tensor of prompt indices >= 0")
    if not _is_int(pos) or not 0 <= pos <= len(order):
        raise _damaged(file, f"{field}.sampler.pos", pos, f"an integer from 0 to {len(order)}")


def _check_weights(file: Path, field: str, weights, allow_empty: bool) -> None:
    from ..checkpoint import check_finite_tensor

    if not isinstance(weights, dict) or not (weights or allow_empty):
        raise _damaged(file, field, weights, "a mapping of parameter names to weights")
    for name, value in weights.items():
        if not isinstance(name, str):
            raise _damaged(file, f"{field} key", name, "a parameter name")
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            raise _damaged(file, f"{field}.{name}", value, "a floating-point tensor")
        check_finite_tensor(file, f"{field}.{name}", value)


def check_optimizer(file: Path, field: str, opt, weights: dict, values: bool = True) -> None:
    """ConfigError naming the file and the field unless ``opt`` is an Adam state_dict for ``weights`` (name ->
    the tensor or parameter it optimizes, in the order the optimizer holds them): one parameter group, every
    parameter's exp_avg and exp_avg_sq of its shape, a step count (PPO's Adam.load_state_dict checks these,
    here on shapes alone, on the meta device). With ``values``, also what they hold: finite moments, exp_avg_sq
    and the step >= 0, a learning rate >= 0, betas in [0, 1), eps > 0. FSDP's full state names its parameters
    where torch.optim numbers them."""
    from ..adam import Adam
    from ..checkpoint import check_finite_tensor

    if not weights:  # no value model (grpo, rloo): save_checkpoint writes {}
        if not (opt is None or (isinstance(opt, dict) and not opt)):
            raise _damaged(file, field, opt, "empty (the checkpoint holds no weights for it)")
        return
    if not isinstance(opt, dict) or not isinstance(opt.get("state"), dict) or not isinstance(opt.get("param_groups"), list):
        raise _damaged(file, field, opt, "an optimizer state_dict (state and param_groups)")
    groups = opt["param_groups"]
    ids = groups[0].get("params") if len(groups) == 1 and isinstance(groups[0], dict) else None
    order, keys = list(weights), None
    if isinstance(ids, list) and ids and all(isinstance(i, str) for i in ids):
        if sorted(ids) != sorted(weights):
            raise ConfigError(f"{file}: {field}.param_groups[0].params names other parameters than {field[4:]} holds; "
                              "the checkpoint is damaged or was edited")
        order, index = ids, {name: i for i, name in enumerate(ids)}
        keys = {index.get(k, k): k for k in opt["state"]}
        opt = {"state": {index.get(k, k): v for k, v in opt["state"].items()},
               "param_groups": [{**groups[0], "params": list(range(len(ids)))}]}
    like = [torch.empty(tuple(weights[name].shape), device="meta") for name in order]
    try:
        Adam(like, lr=torch.zeros((), device="meta")).load_state_dict(opt)
    except ValueError as e:
        which = re.search(r"parameter (\d+)", str(e))
        name = f" (parameter {which.group(1)} is {field[4:]}.{order[int(which.group(1))]})" if which and \
            int(which.group(1)) < len(order) else ""
        raise ConfigError(f"{file}: {field}: {e}{name}; the checkpoint is damaged or was edited") from None
    if not values:
        return
    group = opt["param_groups"][0]
    lr = float(group["lr"]) if torch.is_tensor(group["lr"]) else group["lr"]
    if lr < 0:
        raise _damaged(file, f"{field}.param_groups[0].lr", lr, "a learning rate >= 0")
    if not all(_is_number(b) and 0 <= b < 1 for b in group["betas"]):
        raise _damaged(file, f"{field}.param_groups[0].betas", group["betas"], "two numbers in [0, 1)")
    if not _is_number(group["eps"]) or group["eps"] <= 0:
        raise _damaged(file, f"{field}.param_groups[0].eps", group["eps"], "a number > 0")
    for index, entry in opt["state"].items():
        where = f"{field}.state.{keys[index] if keys else index}"
        for k in ("exp_avg", "exp_avg_sq"):
            if not entry[k].is_floating_point():
                raise _damaged(file, f"{where}.{k}", entry[k], "a floating-point tensor")
            check_finite_tensor(file, f"{where}.{k}", entry[k])
        step = entry["step"]
        if not (step.is_floating_point() or step.dtype in (torch.int32, torch.int64)) or not bool(torch.isfinite(step).all()) \
                or float(step.reshape(())) < 0:
            raise _damaged(file, f"{where}.step", step, "a step count >= 0")
        if bool((entry["exp_avg_sq"] < 0).any()):  # its square root scales the update: NaN from the first step
            raise ConfigError(f"{file}: {where}.exp_avg_sq holds negative values (a mean of squares is >= 0); the "
                              "checkpoint is damaged or was edited")


def load_newest_usable(path: Path, set_aside: bool = True) -> tuple:
    """(file, state) of the newest checkpoint of run ``path`` that loads and holds what a checkpoint holds
    (load_sound_checkpoint), or (None, None) without any; a damaged newer one is skipped and set aside as for
    ``proxima train`` (checkpoint.newest_that_loads)."""
    from ..checkpoint import newest_that_loads

    checkpoints = list_checkpoints(path)
    if not checkpoints:
        return None, None
    return newest_that_loads(checkpoints, load_sound_checkpoint, ConfigError, set_aside)


# ---------------------------------------------------------------------------------------------
# the release (policy/): what loop._save_policy writes besides the trained weights
# ---------------------------------------------------------------------------------------------
def release_dtype(model, wanted: str) -> torch.dtype:
    """The dtype policy/ is saved in: --release-dtype, or with ``auto`` the one --policy's config.json records
    (models.SOURCE_DTYPE), else the trained weights' own."""
    from .models import SOURCE_DTYPE

    if wanted != "auto":
        return getattr(torch, wanted)
    return getattr(model, SOURCE_DTYPE, None) or next(p.dtype for p in model.parameters() if p.is_floating_point())


def release_state(state: dict, dtype: torch.dtype) -> dict:
    """``state`` with its floating tensors in ``dtype``. Tensors that share storage (tied embeddings) still share
    it: save_pretrained finds tied weights by their storage, and would otherwise write both."""
    out, cast = {}, {}
    for name, value in state.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != dtype:
            key = (value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape), value.stride())
            if key not in cast:
                cast[key] = value.to(dtype)
            value = cast[key]
        out[name] = value
    return out


def embeddings_tied(model) -> Optional[bool]:
    """Whether the trained policy's input and output embeddings are one tensor (None: it has not both). A
    checkpoint whose config says tie_word_embeddings but that stores its own lm_head loads untied, and is
    trained untied."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        inp, out = base.get_input_embeddings(), base.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        return None
    if inp is None or out is None or getattr(inp, "weight", None) is None or getattr(out, "weight", None) is None:
        return None
    a, b = inp.weight, out.weight
    if a is b:
        return True
    a, b = (w.to_local() if hasattr(w, "to_local") else w for w in (a, b))  # FSDP: this process's shards
    return a.numel() > 0 and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@contextlib.contextmanager
def release_config(config, dtype: torch.dtype, tied: Optional[bool]):
    """While the block runs, ``config`` says ``dtype`` and, when known, whether the embeddings are tied, as the
    release's weights are: a 4.x loader reading tie_word_embeddings true ties lm_head to the embedding and drops
    the trained one."""
    configs = [config] + [c for c in (config.get_text_config(),) if c is not config] if hasattr(config, "get_text_config") else [config]
    saved = [(c, {k: getattr(c, k) for k in ("dtype", "tie_word_embeddings") if hasattr(c, k)}) for c in configs]
    try:
        for c in configs:
            c.dtype = str(dtype).removeprefix("torch.")
            if tied is not None and hasattr(c, "tie_word_embeddings"):
                c.tie_word_embeddings = tied
        yield config
    finally:
        for c, values in saved:
            for k, v in values.items():
                setattr(c, k, v)


def add_torch_dtype(folder: Path) -> None:
    """config.json in ``folder`` with 4.x's ``torch_dtype`` beside transformers 5's ``dtype`` (in each
    sub-config too): a 4.x stack reads only ``torch_dtype``; without it its config.torch_dtype is None,
    which tools that take the dtype from the config (vLLM's ``--dtype auto``) read as float32. 5.x reads
    ``dtype`` and ignores ``torch_dtype`` when both are there."""
    file = folder / "config.json"
    if not file.is_file():  # a LoRA adapter: adapter_config.json only
        return
    config = json.loads(file.read_text(encoding="utf-8"))

    def add(c: dict) -> None:
        if isinstance(c.get("dtype"), str):
            c.setdefault("torch_dtype", c["dtype"])
        for value in c.values():
            if isinstance(value, dict) and "model_type" in value:  # a sub-config (text_config, vision_config)
                add(value)

    add(config)
    # transformers' own layout (PretrainedConfig.to_json_string), so only the added keys differ
    file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def write_release_tokenizer(tok, folder: Path) -> None:
    """The tokenizer into ``folder``: the files it was read from, byte for byte (models.TokenizerFiles), while it
    holds what they held; a tokenizer changed since (none is, today: the trainer pads a copy) is saved by
    save_pretrained, which writes what it holds in transformers' current format."""
    from .models import TOKENIZER_SOURCE, tokenizer_state

    files = getattr(tok, TOKENIZER_SOURCE, None)
    if not files or files.state != tokenizer_state(tok):
        tok.save_pretrained(folder)
        return
    for name, data in files.items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as f:
            f.write(data)


# ---------------------------------------------------------------------------------------------
# summary and plot
# ---------------------------------------------------------------------------------------------
def write_summary(path: Path, seconds: float, extra: dict) -> dict:
    """summary.json: mean score over the first and last 10% of steps, the final KL, steps, seconds."""
    m = read_metrics(path)
    scores, kls = m.get("objective/scores", []), m.get("objective/kl", [])
    n = max(1, math.ceil(0.1 * len(scores)))

    def mean(xs):
        return sum(xs) / len(xs) if xs else float("nan")

    summary = {"reward_first": mean(scores[:n]), "reward_last": mean(scores[-n:]), "kl_first": mean(kls[:n]),
               "kl_last": mean(kls[-n:]), "steps": len(scores), "seconds": round(seconds, 3), **extra}
    _atomic_write(path / "summary.json", json.dumps(summary, indent=2) + "\n")
    return summary


def plot_curves(path: Path) -> Optional[Path]:
    """curve.png: mean score (and RLHF reward) and KL per step, from metrics.csv."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = read_metrics(path)
    if not m.get("step"):
        return None
    fig, (ax_r, ax_k) = plt.subplots(1, 2, figsize=(10, 3.8))
    ax_r.plot(m["step"], m["objective/scores"], label="score")
    ax_r.plot(m["step"], m["objective/rlhf_reward"], label="score - beta * KL", alpha=0.7)
    ax_r.set_xlabel("PPO step"), ax_r.set_title("reward"), ax_r.legend(), ax_r.grid(alpha=0.3)
    ax_k.plot(m["step"], m["objective/kl"], color="tab:red")
    ax_k.set_xlabel("PPO step"), ax_k.set_title("KL to the reference (per response)"), ax_k.grid(alpha=0.3)
    fig.tight_layout()
    out = path / "curve.png"
    from ..atomic import atomic_open

    try:
        with atomic_open(out, "wb") as f:  # whole or not at all, never through a link planted at curve.png
            fig.savefig(f, format="png", dpi=100)
    except OSError as e:
        raise write_error(out, e) from None
    finally:
        plt.close(fig)
    return out
