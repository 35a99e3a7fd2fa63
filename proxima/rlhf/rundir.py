"""The run directory: config.yaml, meta.json, TensorBoard events, metrics.csv, samples, checkpoints/,
summary.json and curve.png. Written by rank 0 only; nothing in here is on the training hot path.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import platform
import re
import sys
import time
from pathlib import Path
from typing import Optional

import torch
import yaml

from ..config import dump_yaml
from ..diskspace import write_error
from ..rundir import LOCK_NAME, RunLock, RunSession, _remove_contents, _remove_empty_dir
from ..signals import stops_held
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


def check_new_run_dir(path: Path) -> None:
    """A new run may go into a missing or empty-of-runs directory, never over another run."""
    if (path / "config.yaml").exists() or (path / "meta.json").exists():
        raise ConfigError(f"--run-dir {str(path)!r}: already holds a run; continue it with `proxima resume {path}` or pick another directory")
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--run-dir {str(path)!r}: exists and is not a directory")


class FreshRun(RunSession):
    """Rank 0's hold on a new RLHF run's directory (proxima.rundir.RunSession, as `proxima train`'s): its
    lock, and what to take back when the run stops or fails before its first step (discard_fresh).

    Unlike a PPO run's, the directory may hold files when it is locked (the demo's ``demo/``, anything
    that is not a run: check_new_run_dir); those stay. What appeared in it after the lock was taken is
    this run's, and goes; the folder too, when this run made it."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: set = set()  # what the directory held when it was locked

    def claim(self, run_dir: Optional[Path], default: Path) -> Path:
        """Lock ``run_dir`` (None: claim ``default``, or default-2, ... : claim_run_dir) and return it. A stop
        meanwhile is raised once the lock is recorded here (signals.stops_held), so discard_fresh finds it."""
        with stops_held():
            made = run_dir is None
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
        made it. A checkpoint (step_000000.pt, written when step 1's reward failed) keeps the whole run."""
        run_dir = self.created
        if run_dir is None or not run_dir.is_dir() or list_checkpoints(run_dir):  # RLHF's names, not PPO's
            self.created = None
            return
        if not self.kept:
            super().discard_fresh()  # claimed empty: everything in it is this run's
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
    from ..train_state import git_record

    git = git_record()  # one rule for PPO and RLHF runs (the image's recorded commit included)
    from .. import __version__

    return {"kind": "rlhf", "proxima": __version__, "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "peft": peft_version, **git, "device": device,
            "world_size": world_size, "command": sys.argv, "created": time.strftime("%Y-%m-%dT%H:%M:%S")}


def read_config(path: Path) -> dict:
    """The run's config.yaml: data (no YAML aliases: config.load_yaml), one line naming it otherwise."""
    from ..config import load_yaml

    try:
        data = load_yaml((path / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError) as e:  # ValueError: bytes that are not UTF-8
        raise ConfigError(f"{path}: cannot read config.yaml: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return data or {}


def _atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` whole, never through a symbolic link (atomic.py); a write that fails
    (disk full) is a StorageError naming the file, which is left as it was."""
    from ..atomic import write_atomic

    try:
        write_atomic(path, text)
    except OSError as e:
        raise write_error(path, e) from None


def _quiet_event_threads() -> None:
    """TensorBoard writes from a thread that hands a failed write (disk full) to the writer's next call,
    where MetricsLogger turns it into one line; the thread's own traceback on stderr is not printed.
    Installed before a writer exists (once per process), as its first write, at construction, may fail."""
    import threading

    previous = threading.excepthook
    if getattr(previous, "proxima_quiet_events", False):
        return

    def hook(args) -> None:
        if type(args.thread).__name__ == "_AsyncWriterThread" and issubclass(args.exc_type, OSError):
            return
        previous(args)

    hook.proxima_quiet_events = True
    threading.excepthook = hook


class MetricsLogger:
    """TensorBoard scalars and text, plus metrics.csv (one row per step, the columns of the first row).

    A write that fails (disk full) is a StorageError naming the file (diskspace.write_error)."""

    def __init__(self, path: Path, resume_step: Optional[int] = None):
        """resume_step: None for a new run; for a resumed one the step of its checkpoint (0 when it is
        resumed from before any checkpoint, after a SIGKILL): what was logged after it is dropped."""
        from torch.utils.tensorboard import SummaryWriter

        self.path = path
        self.csv_path = path / "metrics.csv"
        self.columns: Optional[list] = None
        resumed = resume_step is not None
        _quiet_event_threads()
        try:
            if resumed:  # rewritten, not purge_step: TensorBoard's default loader ignores purge markers
                from ..logger import drop_events_after, wait_for_new_second

                drop_events_after(path, resume_step)
                wait_for_new_second(path)
            self.writer = SummaryWriter(str(path))
        except OSError as e:
            raise write_error(e.filename or path / "events.out.tfevents.*", e, "could not open the run's logs") from None
        if resumed and self.csv_path.exists():
            self._truncate_csv(resume_step)
        if resumed:
            self._truncate_samples(resume_step)

    def _truncate_csv(self, step: int) -> None:
        """On resume, drop rows written after the checkpoint (they will be recomputed), and a row that a
        SIGKILL cut short (fewer cells than the header). The file is data: a line that is not a row
        Proxima wrote (not UTF-8, not CSV, no step) is dropped with a note naming the file."""
        from ..logger import rows_up_to

        header, kept = rows_up_to(self.csv_path, "step", step)
        if header:
            self.columns = header[1:]
            text = io.StringIO()
            csv.writer(text).writerows([header, *kept])
            _atomic_write(self.csv_path, text.getvalue())
        else:  # written anew, header first, by the next log()
            _atomic_write(self.csv_path, "")
            self.columns = None

    def _truncate_samples(self, step: int) -> None:
        """On resume (after a stop, or a SIGKILL between a step's logs and its checkpoint), drop logged
        samples of steps after the checkpoint: they are generated again."""
        file = self.path / "samples.jsonl"
        if not file.exists():
            return

        def logged_by_then(line: str) -> bool:  # a line that a SIGKILL cut short is dropped too
            try:
                logged = json.loads(line)["step"]
                return isinstance(logged, int) and not isinstance(logged, bool) and logged <= step
            except (ValueError, KeyError, TypeError, RecursionError):
                return False

        keep = [line for line in file.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
                if logged_by_then(line)]
        _atomic_write(file, "".join(line if line.endswith("\n") else line + "\n" for line in keep))

    def log(self, step: int, metrics: dict) -> None:
        try:
            for key, value in metrics.items():
                self.writer.add_scalar(key, value, step)
        except OSError as e:  # the event writer's thread hands its write error to the next call
            raise write_error(self._event_file(), e, "could not write TensorBoard events") from None
        try:
            if self.columns is None:
                self.columns = list(metrics)
                with open(self.csv_path, "w", newline="") as f:
                    csv.writer(f).writerow(["step"] + self.columns)
            with open(self.csv_path, "a", newline="") as f:
                csv.writer(f).writerow([step] + [f"{metrics.get(k, float('nan')):.6g}" for k in self.columns])
        except OSError as e:
            raise write_error(self.csv_path, e) from None

    def log_samples(self, step: int, rows: list) -> None:
        """rows: dicts with prompt, response, score. TensorBoard text (markdown table) and samples.jsonl."""
        def cell(text) -> str:  # a conversation prompt is shown as its JSON
            text = text if isinstance(text, str) else json.dumps(text)
            return text.replace("|", "\\|").replace("\n", " ")

        table = "| prompt | response | score |\n|---|---|---|\n" + "".join(
            f"| {cell(r['prompt'])} | {cell(r['response'])} | {r['score']:.3f} |\n" for r in rows)
        try:
            self.writer.add_text("samples", table, step)
        except OSError as e:
            raise write_error(self._event_file(), e, "could not write TensorBoard events") from None
        try:
            with open(self.path / "samples.jsonl", "a") as f:
                for r in rows:
                    f.write(json.dumps({"step": step, **r}) + "\n")
        except OSError as e:
            raise write_error(self.path / "samples.jsonl", e) from None

    def _event_file(self) -> Path:
        try:
            return Path(self.writer.file_writer.event_writer._file_name)
        except AttributeError:
            return self.path / "events.out.tfevents.*"

    def close(self) -> None:
        """Flush and close the TensorBoard file; a write that fails there is a StorageError."""
        try:
            self.writer.flush()
            self.writer.close()
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
    stat = file.stat()
    # each line on its own: a hand-edited quote costs its line, not the rest
    header, rows, skipped = whole_rows(*read_csv_lines(file))
    if skipped:
        note_skipped(file, stat, skipped)  # once per file content: the curve and the summary both read it
    return {k: [number(r[i]) for _, r in rows] for i, k in enumerate(header)}


# ---------------------------------------------------------------------------------------------
# checkpoints: plain tensors and containers, torch.save'd atomically, loaded with weights_only=True
# ---------------------------------------------------------------------------------------------
def save_checkpoint(path: Path, step: int, state: dict, keep: int) -> Path:
    folder = path / "checkpoints"
    folder.mkdir(exist_ok=True)
    target = folder / f"step_{step:06d}.pt"
    from ..checkpoint import atomic_torch_save

    # PPO's writer: a fresh temp name renamed over the target (never through a link), CRCs on, a full
    # disk as one line (CheckpointError naming the file)
    atomic_torch_save(state, target)
    for old in list_checkpoints(path)[:-keep]:
        old.unlink(missing_ok=True)
    for stale in folder.glob(".step_*.tmp"):  # temp files of a save killed before its rename
        if not stale.is_dir():
            stale.unlink(missing_ok=True)
    return target


def list_checkpoints(path: Path) -> list:
    folder = path / "checkpoints"
    found = [(int(m.group(1)), p) for p in folder.glob("step_*.pt") if (m := CHECKPOINT_RE.match(p.name))] if folder.is_dir() else []
    return [p for _, p in sorted(found)]


def load_checkpoint(file: Path) -> dict:
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated, corrupted or foreign: one line naming the file
        raise ConfigError(f"{file}: not a readable Proxima RLHF checkpoint ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    if not isinstance(state, dict) or "format" not in state:
        raise ConfigError(f"{file}: not a Proxima RLHF checkpoint")
    return state


def load_newest_usable(path: Path, set_aside: bool = True) -> tuple:
    """(file, state) of the newest checkpoint of run ``path`` that loads, or (None, None) without any;
    a damaged newer one is skipped and set aside as for ``proxima train`` (checkpoint.newest_that_loads)."""
    from ..checkpoint import newest_that_loads

    checkpoints = list_checkpoints(path)
    if not checkpoints:
        return None, None
    return newest_that_loads(checkpoints, load_checkpoint, ConfigError, set_aside)


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
