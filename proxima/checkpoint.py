"""Checkpoints: the whole TrainState, written atomically, loaded without running code.

A checkpoint is a dict of tensors and plain Python values (no pickled classes), saved with
``torch.save`` and loaded with ``torch.load(weights_only=True)``: a file crafted to run code when
unpickled is refused. Writes go to a temp file in the same folder, flushed and fsynced, then
``os.replace``d over the target, so a crash mid-write leaves the previous checkpoint intact.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import random
import re
import reprlib
import shlex
import stat
import struct
import sys
import threading
import zipfile
from pathlib import Path
from typing import Optional, Union

import gymnasium as gym
import numpy as np
import torch

from .config import MAX_HIDDEN_LAYERS, MAX_HIDDEN_WIDTH, ProximaError, _short_repr, check_switch
from .warnings_guard import quiet_warnings

FORMAT = "proxima-checkpoint"
SCHEMA_VERSION = 1
_NAME = re.compile(r"^step_(\d{12})\.pt$")


class CheckpointError(ProximaError, RuntimeError):
    """A checkpoint that cannot be used; the message names the file and the problem."""


# ------------------------------------------------------------------------------------ writing
def atomic_torch_save(obj, path: Union[str, Path]) -> Path:
    """torch.save to ``path`` via temp file + fsync + os.replace (+ fsync of the folder).

    The temp file lives in the target's folder (same filesystem, so the replace is atomic) and is
    removed if anything fails before the replace. An OSError (disk full, permissions) becomes a
    CheckpointError naming the file; the previous checkpoint is untouched either way.
    """
    from .atomic import new_temp_file

    path = Path(path)
    tmp = writer = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # a new file under a random name (O_EXCL | O_NOFOLLOW): never a file or link planted at the temp name
        fd, tmp = new_temp_file(path)
        with _zip_crcs():  # load_checkpoint verifies the zip CRCs
            with os.fdopen(fd, "wb") as f:
                writer = _RecordingWriter(f)
                try:
                    torch.save(obj, writer)
                except RuntimeError:
                    # torch's C++ writer turns the file's OSError (disk full) into "unexpected pos ..."
                    if writer.error is not None:
                        raise writer.error from None
                    raise
                writer.complete = True
                f.flush()
                os.fsync(f.fileno())
        _before_replace(tmp, path)
        os.replace(tmp, path)
    except OSError as e:
        # the half-written temp file goes first: the free space the line reports is what the user has
        # to work with, not what that file left over (0 B on a disk it filled)
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise CheckpointError(_write_failure(obj, path, e, writer)) from None
    finally:
        if tmp is not None and os.path.lexists(tmp):
            tmp.unlink()
    try:
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:  # some filesystems do not fsync folders
        pass
    return path


_crc_lock = threading.Lock()
_crc_saves = [0, None]  # saves under way, the caller's setting to restore after the last


@contextlib.contextmanager
def _zip_crcs():
    """torch.save writes zip CRCs while any save is under way, the caller's setting back after the
    last: a population writes its members' checkpoints on several threads (population_run._each),
    and one save's restore must not turn them off under another's."""
    with _crc_lock:
        if _crc_saves[0] == 0:
            _crc_saves[1] = torch.serialization.get_crc32_options()
            torch.serialization.set_crc32_options(True)
        _crc_saves[0] += 1
    try:
        yield
    finally:
        with _crc_lock:
            _crc_saves[0] -= 1
            if _crc_saves[0] == 0:
                torch.serialization.set_crc32_options(_crc_saves[1])


class _RecordingWriter:
    """A binary file for torch.save that remembers the OSError of a failed write and how many bytes
    it took (``complete`` once torch.save returned: then ``written`` is the checkpoint's size)."""

    def __init__(self, f) -> None:
        self.f, self.error, self.written, self.complete = f, None, 0, False

    def write(self, data) -> int:
        try:
            n = self.f.write(data)
        except OSError as e:
            self.error = e
            raise
        self.written += n
        return n

    def flush(self) -> None:
        self.f.flush()


class _Counter:
    """A binary sink for torch.save that keeps only the byte count."""

    def __init__(self) -> None:
        self.written = 0

    def write(self, data) -> int:
        n = memoryview(data).nbytes
        self.written += n
        return n

    def flush(self) -> None:
        pass


def _write_failure(obj, path: Path, e: OSError, writer: Optional[_RecordingWriter]) -> str:
    """The line of a checkpoint that could not be written: the file, the reason and the free space
    there (diskspace.describe), on a full disk or past a file size limit (EFBIG) the size the checkpoint
    needs, and whether an earlier checkpoint is left to resume from."""
    import errno

    from .diskspace import describe, human_bytes, is_out_of_room

    line = describe(path, e, "could not write checkpoint")
    if is_out_of_room(e):
        # the room to make is what the user needs to know: a save cut short is sized again in memory
        # (serialized into a counter, nothing kept), the bytes it got to are the floor if even that fails
        size = writer.written if writer is not None and writer.complete else _serialized_size(obj)
        if size is not None:
            line += f"; the checkpoint needs {human_bytes(size)}"
        elif writer is not None and writer.written:
            stop = "the limit stopped it" if e.errno == errno.EFBIG else "the disk filled"
            line += f"; the checkpoint needs more than the {human_bytes(writer.written)} written before {stop}"
    return line + ("; any earlier checkpoint is kept" if _earlier_kept(path) else "; there is no earlier checkpoint")


def _serialized_size(obj) -> Optional[int]:
    counter = _Counter()
    try:
        with _zip_crcs():
            torch.save(obj, counter)
    except Exception:
        return None
    return counter.written


def _earlier_kept(path: Path) -> bool:
    """Whether the failed save left a checkpoint beside it: an earlier version of the file it was to
    replace, or another step_*.pt of the run (a failed best.pt leaves the step checkpoints)."""
    try:
        return _is_regular(path) or any(_is_regular(p) for p in path.parent.glob("step_*.pt"))
    except OSError:  # an unreadable folder: words that do not say there is one
        return True


def _before_replace(tmp: Path, path: Path) -> None:
    """Test hook: a crash between writing the temp file and the replace is simulated by patching this."""


def checkpoint_path(run_dir: Union[str, Path], global_step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{global_step:012d}.pt"


def best_checkpoint_path(run_dir: Union[str, Path]) -> Path:
    """``RUN/checkpoints/best.pt``: the checkpoint with the best mean eval return (--eval-every)."""
    return Path(run_dir) / "checkpoints" / "best.pt"


def _is_regular(p: Path) -> bool:
    """Whether ``p`` is a regular file (through a symbolic link): a FIFO, a device, a folder or a
    dangling link named step_*.pt is not a checkpoint (opening a FIFO would block forever)."""
    try:
        return stat.S_ISREG(p.stat().st_mode)
    except OSError:
        return False


def list_checkpoints(run_dir: Union[str, Path]) -> list[Path]:
    """Checkpoints of a run, oldest first (by global step in the name): regular files only."""
    folder = Path(run_dir) / "checkpoints"
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if _NAME.match(p.name) and _is_regular(p)), key=lambda p: p.name)


def not_a_file(p: Path) -> Optional[str]:
    """Why ``p`` (which exists, or is a link) is not a checkpoint file, or None for a regular file."""
    try:
        mode = os.lstat(p).st_mode
    except OSError:
        return None
    if stat.S_ISLNK(mode):
        target = os.readlink(p)
        if not os.path.exists(p):
            return f"is a symbolic link to {target}, which does not exist"
        inner = not_a_file(Path(os.path.realpath(p)))
        return f"is a symbolic link to {target}, which {inner}" if inner else None
    if stat.S_ISREG(mode):
        return None
    kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file")
    return f"is {kind}, not a checkpoint file"


def _not_files(run_dir: Path) -> list:
    """``RUN/checkpoints/step_*.pt`` entries that are not regular files (list_checkpoints skips them)."""
    folder = Path(run_dir) / "checkpoints"
    try:
        names = sorted(p for p in folder.iterdir() if _NAME.match(p.name) and not _is_regular(p))
    except OSError:
        return []
    return names


#: temp files of writers killed between writing and replacing: atomic_torch_save's (step_*.pt and
#: best.pt, ``.NAME.<random>.tmp``) and those of older versions (``.NAME.<pid>.tmp``)
_STALE_TEMPS = (".step_*.tmp", ".best.pt.*.tmp")


def check_own_folder(run_dir: Union[str, Path]) -> Path:
    """``RUN/checkpoints``; CheckpointError when it is a symbolic link (or lies under one) leading
    outside the run directory: writing or pruning through it would delete another run's checkpoints."""
    from .rundir import RunDirError, check_own_entries

    try:  # the run directory's own check, its line as a checkpoint error
        check_own_entries(run_dir, ("checkpoints",))
    except RunDirError as e:
        raise CheckpointError(str(e)) from None
    return Path(run_dir) / "checkpoints"


def prune_checkpoints(run_dir: Union[str, Path], keep: int) -> None:
    """Keep the newest ``keep`` checkpoints (0: every one); also remove temp files left by a writer that was killed
    between writing and replacing (one writer per run directory, so none is in progress here)."""
    folder = check_own_folder(run_dir)
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    if folder.is_dir():
        for pattern in _STALE_TEMPS:
            for stale in folder.glob(pattern):
                if not stale.is_dir():
                    stale.unlink(missing_ok=True)


def with_entry_point(state: dict) -> dict:
    """``state`` with ``env_entry_point`` (text, never imported) when its env id was registered by the user's
    own code: read where that code has not registered the id, it names the module to give (--env MODULE:ID).
    Every checkpoint a run writes carries it: the periodic ones and best.pt."""
    config = state.get("config") or next(iter(state.get("configs") or []), None)
    entry = _entry_point_of(config.get("env_id")) if isinstance(config, dict) else None
    if entry is not None:
        state["env_entry_point"] = entry
    return state


def save_train_state(run_dir: Union[str, Path], state: dict, keep: int, prune_after: bool = True) -> Path:
    """Write ``state`` as RUN/checkpoints/step_N.pt and keep the newest ``keep`` checkpoints (0: every one).

    Pruned before the write too: a resume with a lower --keep-checkpoints frees the files it drops
    before the new one needs the room (a nearly full disk), and the newest ``keep`` stay, so a save
    that fails still leaves the newest checkpoint to resume from. ``prune_after=False``: the one the
    new file would push out stays until the caller prunes (a population's member, whose older file
    its population's newest checkpoint still needs until the population's own is written)."""
    prune_checkpoints(run_dir, keep)
    path = atomic_torch_save(with_entry_point(state), checkpoint_path(run_dir, int(state["global_step"])))
    if prune_after:
        prune_checkpoints(run_dir, keep)
    return path


def _entry_point_of(env_id) -> Optional[str]:
    from .envs import registered_entry_point

    return registered_entry_point(env_id) if isinstance(env_id, str) else None


def set_aside_newer(checkpoint: Union[str, Path], global_step: Optional[int] = None) -> Optional[Path]:
    """Resuming from ``checkpoint`` (RUN/checkpoints/step_N.pt, or best.pt) when newer ones exist: those
    belong to the timeline being abandoned. They are moved into ``RUN/checkpoints/abandoned-<time>/`` (kept,
    never pruned or resumed by name again), with what the run logged after the step resumed from
    (logger.set_aside_logs: metrics.csv's rows after it, into that folder's metrics.csv, and the event files
    holding events after it, whole) and a best.pt written after that step (_newer_best), and a line on
    stderr; returns that folder, or None when none is newer. ``global_step``: the step of the state
    loaded from it, which a name other than step_N.pt (best.pt) does not say; without it such a file
    sets nothing aside."""
    import sys
    from datetime import datetime

    from .logger import set_aside_logs

    checkpoint = Path(checkpoint)
    named = _NAME.match(checkpoint.name)
    step = int(named.group(1)) if named else global_step
    if checkpoint.parent.name != "checkpoints" or step is None:
        return None
    run_dir = checkpoint.parent.parent
    newer = [p for p in list_checkpoints(run_dir) if p.name > checkpoint_path(run_dir, step).name]
    if not newer:
        return None
    folder = check_own_folder(run_dir)
    best, best_step = _newer_best(run_dir, step)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    dest, n = folder / f"abandoned-{stamp}", 2
    while os.path.lexists(dest):
        dest, n = folder / f"abandoned-{stamp}-{n}", n + 1
    dest.mkdir()
    # the logs first: a failure (disk full) leaves the newer checkpoints in place, so a retry sets
    # aside what is left again instead of taking the rows after the checkpoint for a killed run's
    logs = set_aside_logs(run_dir, step, dest)
    # best.pt before the step files: a kill between the two leaves newer ones, so a retry still sets it aside
    if best is not None:
        os.replace(best, dest / best.name)
    for p in newer:
        os.replace(p, dest / p.name)
    best_too = f" and best.pt (its step {best_step:,}; the resumed run's best is {checkpoint.name}'s, or starts afresh where no best.pt holds it)" if best else ""
    print(f"proxima: note: resuming from {checkpoint.name}, older than the run's newest checkpoint: moved the {len(newer)} "
          f"newer one(s) ({newer[0].name}{'..' + newer[-1].name if len(newer) > 1 else ''}){best_too} to {dest}"
          f"{', with ' + logs if logs else ''} "
          f"(the run continues from {checkpoint.name}{'; its own logs now end there' if logs else ''})", file=sys.stderr)
    return dest


def _newer_best(run_dir: Path, step: int) -> tuple:
    """(RUN/checkpoints/best.pt, its step) when it was written after ``step`` (on the timeline a resume
    from ``step`` abandons: its policy and value are not the resumed run's, whose best_eval then comes
    from its checkpoint alone), else (None, None). A best.pt that does not load, or a link, stays."""
    path = best_checkpoint_path(run_dir)
    if not path.is_file() or path.is_symlink():
        return None, None
    try:
        best_step = load_checkpoint(path).get("global_step")
    except CheckpointError:
        return None, None
    return (path, best_step) if _is_int(best_step) and best_step > step else (None, None)


# ------------------------------------------------------------------------------------ RNG
def rng_state() -> dict:
    """Python, numpy, torch and CUDA RNG states as weights_only-loadable values."""
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(_to_tuple(state["python"]))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _to_tuple(x):
    return tuple(_to_tuple(v) for v in x) if isinstance(x, (list, tuple)) else x


# ------------------------------------------------------------------------------------ spaces
def space_to_dict(space: gym.spaces.Space) -> dict:
    """A space as plain data for a checkpoint (loaded with weights_only): Discrete's and
    MultiDiscrete's ``start`` and a MultiDiscrete's nvec shape included, since Policy.act hands
    actions to the user's own env."""
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": np.asarray(space.nvec).tolist(), "start": np.asarray(space.start).tolist()}
    if isinstance(space, gym.spaces.MultiBinary):  # its shape: Policy.act hands the env 0/1 arrays of it
        return {"type": "MultiBinary", "shape": [int(n) for n in space.shape]}
    if isinstance(space, gym.spaces.Box):  # infinite bounds are kept as +-inf (space_from_dict reads them back)
        out = {"type": "Box", "shape": list(space.shape), "low": torch.as_tensor(space.low.astype(np.float64)),
               "high": torch.as_tensor(space.high.astype(np.float64)), "dtype": str(np.dtype(space.dtype))}
        declared = getattr(space, "declared", None)  # envs.spaces.FlatBox: the env's own shape, (1, 4) read as (4,)
        if isinstance(declared, gym.spaces.Box) and tuple(declared.shape) != tuple(space.shape):
            out["declared_shape"] = list(declared.shape)  # Policy.act takes one observation in it as one, not a batch
        return out
    if isinstance(space, gym.spaces.Dict):  # a list of pairs keeps the key order the packed obs uses
        return {"type": "Dict", "spaces": [[str(k), space_to_dict(v)] for k, v in space.spaces.items()]}
    raise CheckpointError(f"cannot record space {space}")


def space_from_dict(d, where: str = "space") -> gym.spaces.Space:
    """The space of :func:`space_to_dict` (checkpoints from before ``start`` was recorded: start 0).

    A checkpoint is data a user or another program may have edited, so anything space_to_dict does
    not write is a CheckpointError ``<where>: not a recorded space (<why>)``, never a TypeError
    from deep inside gymnasium (``where`` names the file and the field: ``RUN/.../step_*.pt:
    spaces.action``).
    """
    if not isinstance(d, dict):
        raise _not_a_space(where, f"{_describe(d)}, not a mapping")
    kind = d.get("type")
    build = _SPACE_READERS.get(kind) if isinstance(kind, str) else None
    if build is None:
        raise _not_a_space(where, "no 'type'" if kind is None else f"unknown type {kind!r}")
    try:
        return build(d, where)
    except (AssertionError, ValueError, TypeError, OverflowError) as e:  # gymnasium's own checks (e.g. low above high)
        raise _not_a_space(where, _one_line(e, 100) or type(e).__name__) from None


def _not_a_space(where: str, why: str) -> CheckpointError:
    return CheckpointError(f"{where}: not a recorded space ({why})")


#: the largest count or start a recorded space may hold (an action count the agent's output layer has
#: one row for; beyond int32 no network fits in memory anyway)
_MAX_SPACE_INT = 2**31 - 1


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _int_field(d: dict, key: str, where: str, minimum: Optional[int] = None, default: Optional[int] = None) -> int:
    """d[key] as an int (``default`` when absent and one is given), checked against ``minimum``."""
    value = d.get(key, default)
    if not _is_int(value) or (minimum is not None and value < minimum) or abs(value) > _MAX_SPACE_INT:
        wanted = "an integer" + (f" >= {minimum}" if minimum is not None else "")
        wanted += f" of at most {_MAX_SPACE_INT:,}" if _is_int(value) and abs(value) > _MAX_SPACE_INT else ""
        raise _not_a_space(where, f"'{key}' is {value!r}, not {wanted}" if key in d else f"missing '{key}'")
    return value


def _int_array(d: dict, key: str, where: str, minimum: Optional[int] = None, default=None) -> np.ndarray:
    """d[key], a (nested) list of ints as written by ``ndarray.tolist()``, as an int64 array."""
    value = d.get(key, default)
    if key not in d and default is None:
        raise _not_a_space(where, f"missing '{key}'")
    try:
        arr = np.asarray(value) if isinstance(value, (list, tuple, np.ndarray)) else None
    except (ValueError, TypeError, OverflowError):  # ragged, or ints beyond int64
        arr = None
    if (arr is None or arr.size == 0 or arr.dtype.kind not in "iu" or (minimum is not None and (arr < minimum).any())
            or (np.abs(arr.astype(np.float64)) > _MAX_SPACE_INT).any()):
        wanted = "a list of integers" + (f" >= {minimum}" if minimum is not None else "")
        wanted += f" of at most {_MAX_SPACE_INT:,}" if arr is not None and arr.dtype.kind in "iu" and arr.size else ""
        raise _not_a_space(where, f"'{key}' is {_one_line(repr(value), 60)}, not {wanted}")
    return arr.astype(np.int64)


def _discrete_from_dict(d: dict, where: str) -> gym.spaces.Space:
    space = gym.spaces.Discrete(_int_field(d, "n", where, minimum=1), start=_int_field(d, "start", where, default=0))
    space.start_unrecorded = "start" not in d  # an old checkpoint: its 0 is a guess, not compared (action_difference)
    return space


def _multidiscrete_from_dict(d: dict, where: str) -> gym.spaces.Space:
    nvec = _int_array(d, "nvec", where, minimum=1)
    start = _int_array(d, "start", where, default=np.zeros_like(nvec))
    if start.shape != nvec.shape:
        raise _not_a_space(where, f"'start' has shape {start.shape}, 'nvec' {nvec.shape}")
    space = gym.spaces.MultiDiscrete(nvec, start=start)
    space.start_unrecorded = "start" not in d
    return space


def _multibinary_from_dict(d: dict, where: str) -> gym.spaces.Space:
    # at most the bits an env may declare (envs.spaces.MAX_MULTIBINARY_BITS): a record of a few bytes must not
    # make the loader build an index space of any size before the weights are compared ([2**30] was 8 GiB of
    # int64, [2**28 - 1] 4.4 GB of memory before the refusal)
    from .envs.spaces import MAX_MULTIBINARY_BITS as _MAX_SPACE_BITS

    shape = d.get("shape")
    if not isinstance(shape, (list, tuple)) or not shape or not all(_is_int(n) and n >= 1 for n in shape):
        raise _not_a_space(where, f"'shape' is {_one_line(repr(shape), 60)}, not a list of sizes >= 1")
    if math.prod(shape) > _MAX_SPACE_BITS:  # Python ints: np.prod wraps in int64 ([2] * 64 made 0 bits)
        raise _not_a_space(where, f"'shape' is {_one_line(repr(shape), 60)}, not a list of sizes >= 1 of at most "
                                  f"{_MAX_SPACE_BITS:,} bits in all")
    return gym.spaces.MultiBinary([int(n) for n in shape])


def _box_from_dict(d: dict, where: str) -> gym.spaces.Space:
    shape = d.get("shape")
    if not isinstance(shape, (list, tuple)) or not all(_is_int(n) and n >= 0 for n in shape):
        raise _not_a_space(where, f"'shape' is {_one_line(repr(shape), 60)}, not a list of sizes")
    try:
        dtype = np.dtype(d.get("dtype"))
    except TypeError:
        dtype = None
    if not isinstance(d.get("dtype"), str) or dtype is None or dtype.kind not in "biuf":
        raise _not_a_space(where, f"'dtype' is {_one_line(repr(d.get('dtype')), 60)}, not a numeric dtype name")
    bounds = []
    for key in ("low", "high"):  # space_to_dict writes both as float64 tensors of the full shape
        value = d.get(key)
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(shape) or value.is_complex():
            raise _not_a_space(where, f"'{key}' is not a tensor of shape {tuple(shape)}")
        bounds.append(value.detach().cpu().numpy().astype(dtype))
    declared = d.get("declared_shape")  # a flat vector's shape as the env declared it (space_to_dict)
    if declared is None:
        return gym.spaces.Box(bounds[0], bounds[1], tuple(shape), dtype)
    if (not isinstance(declared, (list, tuple)) or not all(_is_int(n) and n >= 0 for n in declared) or len(shape) != 1
            or math.prod(declared) != shape[0]):  # Python ints: np.prod wraps [2**62 + 1, 4] to 4
        raise _not_a_space(where, f"'declared_shape' is {_one_line(repr(declared), 60)}, not the shape of {shape[0]} values")
    from .envs.spaces import FlatBox

    # the declared Box in its shape, with the tensor's bounds and dtype (what Policy.act and messages read)
    own = gym.spaces.Box(bounds[0].reshape(declared), bounds[1].reshape(declared), tuple(declared), dtype)
    return FlatBox(own, bounds[0], bounds[1], tuple(shape), dtype)


def _dict_from_dict(d: dict, where: str) -> gym.spaces.Space:
    pairs = d.get("spaces")
    if not isinstance(pairs, (list, tuple)) or not all(isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], str)
                                                       for p in pairs):
        raise _not_a_space(where, "'spaces' is not a list of [key, space] pairs")
    keys = [k for k, _ in pairs]
    if len(set(keys)) < len(keys):  # a dict would silently keep the last one
        raise _not_a_space(where, "a key is recorded twice")
    # a list of pairs, not a dict: gym.spaces.Dict sorts a plain dict's keys, and the recorded order is
    # the order the policy's input was packed in (an env's Dict built from pairs keeps its own order)
    return gym.spaces.Dict([(k, space_from_dict(v, f"{where}.{k}")) for k, v in pairs])


#: type name -> reader of its space_to_dict form; anything else is not a recorded space
_SPACE_READERS = {"Discrete": _discrete_from_dict, "MultiDiscrete": _multidiscrete_from_dict,
                  "MultiBinary": _multibinary_from_dict, "Box": _box_from_dict, "Dict": _dict_from_dict}


def describe_space(space) -> str:
    """A space in one short line: Box bounds elided (they are not why a policy fits an env or not),
    ``Box(..., (4,), float32)``, ``Discrete(2)``, ``MultiDiscrete([3, 3])``, ``Dict('a': ..., ...)``."""
    if isinstance(space, gym.spaces.Box):
        return f"Box(..., {tuple(space.shape)}, {np.dtype(space.dtype)})"
    if isinstance(space, gym.spaces.Discrete):
        return f"Discrete({int(space.n)}" + (f", start={int(space.start)})" if int(space.start) else ")")
    if isinstance(space, gym.spaces.MultiDiscrete):
        return f"MultiDiscrete({np.asarray(space.nvec).tolist()})"
    if isinstance(space, gym.spaces.Dict):
        return "Dict(" + ", ".join(f"{k!r}: {describe_space(v)}" for k, v in space.spaces.items()) + ")"
    return _one_line(space, 120)


def _obs_signature(space) -> Optional[tuple]:
    """What the agent depends on in an observation space: the layout of the tensor it reads (each
    key's shape and image layout, uint8 or float). Bounds and float32 vs float64 do not change it."""
    from .envs import EnvError
    from .envs.spaces import obs_layout

    try:
        layout = obs_layout(space)
    except EnvError:  # a space the agent could not read at all: differs from any recorded one
        return None
    return layout.is_dict, layout.dtype, tuple((p.key, p.shape, p.layout) for p in layout.parts)


def _action_signature(space) -> tuple:
    """What the agent's outputs depend on in an action space: its kind and n / nvec / shape. A Box's
    bounds and dtype and a Discrete's start are left to :func:`action_difference`: the network fits
    an env that differs in them, but act() would shape its actions for the other space."""
    if isinstance(space, gym.spaces.Discrete):
        return "Discrete", int(space.n)
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec)
        return "MultiDiscrete", nvec.shape, tuple(nvec.reshape(-1).tolist())
    if isinstance(space, gym.spaces.Box):
        return "Box", tuple(space.shape)
    if isinstance(space, gym.spaces.MultiBinary):  # by shape: MultiBinary(4) prints so, the record's MultiBinary((4,))
        return "MultiBinary", tuple(int(n) for n in space.shape)
    return type(space).__name__, str(space)


def _bounds_words(space: gym.spaces.Box) -> str:
    """A Box's bounds in few words: one number each where every entry shares it, else the lists."""
    low, high = np.asarray(space.low), np.asarray(space.high)
    one = low.size and (low == low.reshape(-1)[0]).all() and (high == high.reshape(-1)[0]).all()
    lo, hi = (low.reshape(-1)[0], high.reshape(-1)[0]) if one else (low.tolist(), high.tolist())
    return _one_line(f"{lo}..{hi}", 80)


def action_space_words(space) -> str:
    """describe_space with what action_difference compares: a MultiDiscrete's start and a Box's bounds."""
    if isinstance(space, gym.spaces.MultiDiscrete) and np.asarray(space.start).any():
        return f"MultiDiscrete({np.asarray(space.nvec).tolist()}, start={np.asarray(space.start).tolist()})"
    if isinstance(space, gym.spaces.Box):
        return f"Box({_bounds_words(space)}, {tuple(space.shape)}, {np.dtype(space.dtype)})"
    return describe_space(space)


def action_difference(env_act, recorded) -> Optional[str]:
    """What differs between two action spaces of one kind and shape (_action_signature) that act() and
    evaluate() would shape actions by differently: a Discrete/MultiDiscrete start (a policy trained on
    Discrete(3, start=5) sends 5..7 through act()), a Box's bounds or dtype; None when nothing does. A
    start a checkpoint did not record (one from before it was, start_unrecorded) is not compared."""
    if isinstance(recorded, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        if getattr(recorded, "start_unrecorded", False):
            return None
        mine, theirs = np.asarray(env_act.start), np.asarray(recorded.start)
        if mine.shape != theirs.shape or (mine != theirs).any():
            return f"start {theirs.tolist()} in training, {mine.tolist()} in the env"
        return None
    if isinstance(recorded, gym.spaces.Box) and isinstance(env_act, gym.spaces.Box):
        what = []
        if np.dtype(recorded.dtype) != np.dtype(env_act.dtype):
            what.append(f"dtype {np.dtype(recorded.dtype)} in training, {np.dtype(env_act.dtype)} in the env")
        same = all(np.array_equal(np.asarray(getattr(recorded, b), np.float64), np.asarray(getattr(env_act, b), np.float64))
                   for b in ("low", "high"))
        if not same:
            what.append(f"bounds {_bounds_words(recorded)} in training, {_bounds_words(env_act)} in the env")
        return "; ".join(what) or None
    return None


def action_difference_line(path, env_id: str, env_act, recorded, fix: str) -> Optional[str]:
    """The one line refusing ``env_act`` for a policy trained on ``recorded`` (action_difference), else None."""
    differs = action_difference(env_act, recorded)
    if differs is None:
        return None
    return (f"{path}: env '{env_id}' takes actions {action_space_words(env_act)}, the run was trained on "
            f"{action_space_words(recorded)} ({differs}): policy.act would give actions in the trained space and "
            f"the env's own loop in the env's; {fix}")


def env_spaces_mismatch(path, env_id: str, recorded: dict, env_obs, env_act) -> Optional[str]:
    """The line refusing to resume ``path`` in an env whose observations or actions are not the ones its
    run was trained on (``recorded``: the checkpoint's ``spaces``), else None; eval's comparison
    (Policy.check_env_spaces), so that a changed env is named as such, never as weights that do not
    fit the recorded config."""
    obs = space_from_dict(recorded["observation"], f"{path}: spaces.observation")
    act = space_from_dict(recorded["action"], f"{path}: spaces.action")
    fix = "resume it with the env it was trained on, or train a new run on this one"
    if _obs_signature(env_obs) != _obs_signature(obs):
        stacked = old_frame_stack_line(path, env_id, obs, env_obs, "resume")
        if stacked:
            return stacked
        now, then = _space_words(env_obs, obs), _space_words(obs, env_obs)
        return f"{path}: env '{env_id}' now observes {now}, the run was trained on {then}; {fix}"
    if _action_signature(env_act) != _action_signature(act):
        return (f"{path}: env '{env_id}' now takes actions {describe_space(env_act)}, the run was trained on "
                f"{describe_space(act)}; {fix}")
    return action_difference_line(path, env_id, env_act, act, fix)


def old_frame_stack_line(path, env_id: str, recorded_obs, env_obs, verb: str) -> Optional[str]:
    """The line for a run trained before this version read a uint8 frame stack (N, H, W, C) as an image,
    else None: that version fed its MLP the stack's N*H*W*C values flattened and unscaled, so its
    checkpoint records a flat float32 Box of that size where the same env now gives a 4-D uint8 stack.
    The env did not change, Proxima did: the generic mismatch lines would send the user to look for
    another env. ``verb`` is what the user was doing ("evaluate", "resume")."""
    from .envs import EnvError
    from .envs.spaces import STACKS, obs_layout

    if not (isinstance(recorded_obs, gym.spaces.Box) and isinstance(env_obs, gym.spaces.Box)
            and len(recorded_obs.shape) == 1 and np.dtype(recorded_obs.dtype) == np.float32
            and np.dtype(env_obs.dtype) == np.uint8 and recorded_obs.shape[0] == int(np.prod(env_obs.shape))):
        return None
    try:
        layout = obs_layout(env_obs)
    except EnvError:
        return None
    if layout.is_dict or layout.parts[0].layout not in STACKS:
        return None
    declared = getattr(recorded_obs, "declared", None)  # the stack's own shape, where the checkpoint records it
    if declared is not None and tuple(declared.shape) != tuple(env_obs.shape):
        return None  # another stack of as many values (N and C swapped, say): the env did change
    return (f"{path}: trained before Proxima read a uint8 frame stack as an image: its MLP read the {tuple(env_obs.shape)} "
            f"stack of env '{env_id}' as {recorded_obs.shape[0]} values flattened and unscaled (0..255), this version "
            f"reads it as an image scaled to [0, 1]; retrain it with this version, or {verb} it with {_trained_by(path)}")


def _trained_by(path) -> str:
    """The Proxima that wrote the checkpoint ``path``, as its run's meta.json records it: its git commit,
    else its version where it is not this one, else in words (a loose file, a meta.json that says neither)."""
    from . import __version__

    meta = None
    if path is not None and Path(path).absolute().parent.name == "checkpoints":  # a loose file has no run to ask
        try:
            meta = json.loads((Path(path).absolute().parent.parent / "meta.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            meta = None
    meta = meta if isinstance(meta, dict) else {}
    commit, versions = meta.get("git_commit"), meta.get("versions")
    if isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{7,40}", commit):
        edited = ", with local edits" if meta.get("git_dirty") is True else ""
        return f"the Proxima that trained it (git commit {commit[:7]}{edited})"
    version = versions.get("proxima") if isinstance(versions, dict) else None
    if isinstance(version, str) and version != __version__ and len(version) <= 40:
        return f"the Proxima that trained it ({version})"
    return "the Proxima version that trained it"


def _space_words(space, other) -> str:
    """A Box observation space as its shape, ``(5,)`` (with its dtype when the shapes agree, where
    the dtype is what differs); any other space as describe_space."""
    if isinstance(space, gym.spaces.Box) and isinstance(other, gym.spaces.Box):
        if tuple(space.shape) != tuple(other.shape):
            return str(tuple(space.shape))
        return f"{tuple(space.shape)} {np.dtype(space.dtype)}"
    return describe_space(space)


# ------------------------------------------------------------------------------------ reading
def source_path(path: Union[str, Path]) -> Path:
    """``path`` as a checkpoint file or run directory: RUN/checkpoints (the folder that holds the
    step_*.pt files) is read as RUN, whose newest sound checkpoint is its newest (--init-from, eval,
    load() and resume alike, with a run directory's fallbacks and lines). A folder named checkpoints
    is RUN's when RUN holds step_*.pt there or a run's start-up files (a run that wrote none yet is told
    so, not called "no run"), and is no run directory itself (no checkpoints/ of its own)."""
    path = Path(path)
    named = path if path.name else path.absolute()  # "." typed inside RUN/checkpoints: its name is the folder's
    if named.name == "checkpoints" and path.is_dir() and not (path / "checkpoints").exists():
        run = named.parent
        if list_checkpoints(run) or any((run / name).is_file() for name in _RUN_FILES):
            return run
    return path


def resolve_checkpoint(path: Union[str, Path], resuming: bool = False) -> Path:
    """A checkpoint file, or the latest checkpoint of a run directory (or of RUN/checkpoints:
    source_path), as named; CheckpointError otherwise (LinkOutOfRunError for a link in
    RUN/checkpoints/ that leads out of RUN). ``resuming``: no_checkpoint_error's."""
    path = source_path(path)
    if not path.exists():
        why = not_a_file(path) if os.path.islink(path) else None
        raise CheckpointError(f"{path}: {why}" if why else f"{path}: no such file or directory")
    if path.is_dir() and not _NAME.match(path.name):
        ckpts = list_checkpoints(path)
        if not ckpts:
            raise no_checkpoint_error(path, resuming)
        path = ckpts[-1]
    why = not_a_file(path)
    if why:
        raise CheckpointError(f"{path}: {why}")
    check_inside_run(path)
    return path


class NewerSchemaError(CheckpointError):
    """A checkpoint written by a newer Proxima (its schema_version is above SCHEMA_VERSION): sound, only
    not readable here. Never set aside as damaged, nor answered with a start over: upgrading reads it."""


class EnvMismatchError(CheckpointError):
    """A sound checkpoint refused for the env it was given (another action start, bounds, dtype or
    spaces than its run trained on): the env given differs, not the file, so an older checkpoint of
    the same run is refused alike and a restore or start over would answer the wrong problem."""


class PopulationCheckpointError(CheckpointError):
    """A population's own checkpoint (every member's weights) given where one policy is read: sound, only
    not a single run's, so the line names the members to read instead, never a restore or a start over."""


class RLHFRunError(CheckpointError):
    """An RLHF run (proxima rlhf), or one of its checkpoints, given where a PPO run is read: sound, only
    not a PPO run's, so the line says how to continue it (proxima resume RUN), never a restore or a start
    over, nor that the run's other checkpoints do not load."""


def rlhf_run_error(run: Path, file: Optional[Path] = None) -> RLHFRunError:
    """The line for the RLHF run ``run`` (as named), or for its checkpoint ``file``, given to a PPO reader
    (train --resume, resume of a checkpoint file, eval, --init-from): the run's own resume continues it
    from its directory (rlhf.api.resume reads the newest checkpoint there; it takes no file)."""
    said = f"{file}: a checkpoint of the RLHF run {run}" if file is not None else f"{run} is an RLHF run"
    return RLHFRunError(f"{said} (proxima rlhf), not a PPO one: continue it with proxima resume {shlex.quote(str(run))} "
                        f"[--steps N]; its trained policy is {Path(run) / 'policy'} (docs/rlhf.md)")


def _rlhf_run_named(path: Path) -> Optional[Path]:
    """The run directory, as named, of ``path`` (a run directory, or a file in RUN/checkpoints/) when its
    meta.json records an RLHF run; None otherwise."""
    from .rundir import recorded_kind

    path = Path(path)
    if path.absolute().parent.name == "checkpoints" and not path.is_dir():
        run = path.parent.parent if path.parent.name == "checkpoints" else run_dir_of(path)
    else:
        run = path
    return run if recorded_kind(run / "meta.json") == "rlhf" else None


class LinkOutOfRunError(CheckpointError):
    """A checkpoint in a run's checkpoints/ that is a symbolic link leading out of the run: refused,
    never set aside as damaged (its target is another run's file, not this run's)."""


def check_inside_run(path: Union[str, Path]) -> None:
    """LinkOutOfRunError when ``path``, a file in ``RUN/checkpoints/`` as named, is a symbolic link
    leading out of RUN. The run is the directory named, never the one a link leads to: a resume
    locks, checks and writes RUN, so a link to another run's checkpoint would make it continue from,
    and be read as, a file that is not RUN's (docs/reliability.md, "Links stay inside")."""
    from .atomic import leads_outside

    path = Path(path)
    run = path.absolute().parent.parent
    if path.absolute().parent.name == "checkpoints" and leads_outside(path, run):
        # the file a link, or the checkpoints/ folder (or a folder under it): every reader of RUN alike
        # (resume, eval, load(), --init-from, report), as the one resolver here is theirs
        if os.path.islink(path):
            said = f"{path}: is a symbolic link to {os.path.realpath(path)}"
        else:
            folder = path.parent
            said = f"{folder}: is a symbolic link (or lies under one) to {os.path.realpath(folder)}"
        raise LinkOutOfRunError(f"{said}, outside the run directory {run}; Proxima does not read a run through it: remove "
                                "the link (or copy what it points to into the run) and try again")


#: files a run writes when it starts, before its first checkpoint (train_state / population_run)
_RUN_FILES = ("config.yaml", "meta.json", "metrics.csv")


def no_checkpoint_error(path: Path, resuming: bool = False) -> CheckpointError:
    """The line for a directory without checkpoints/step_*.pt: a run that has written none yet
    (its start-up files are there: one in progress, or stopped before its first checkpoint) is
    told apart from a folder that is no run at all; a step_*.pt that is no file (a folder, a dangling
    link, a FIFO) is named as what it is; a run that did write checkpoints, gone since (removed,
    moved), is told so, with its best.pt to continue from when it is there (_trained_past_checkpoint).
    ``resuming``: for a resume, a run in progress is named as in use first (rundir.in_use_message), as its lock
    refuses it once it has a checkpoint: "wait for its first" led to that refusal next."""
    if _rlhf_run_named(path) is not None:  # its checkpoints are RLHF's (step_NNNNNN.pt): not a run stopped before one
        return rlhf_run_error(path)
    odd = _not_files(path)
    if odd:
        more = f" (and {len(odd) - 1} more like it)" if len(odd) > 1 else ""
        return CheckpointError(f"{odd[-1]}: {not_a_file(odd[-1])}{more}; {path} has no checkpoint file to load")
    # a run killed during its start leaves only its lock (rundir.LOCK_NAME): a run's, told how to start it again
    lock_only = not any((path / name).is_file() for name in _RUN_FILES)
    if lock_only and not (path / ".proxima.lock").is_file():
        return CheckpointError(f"{path}: not a Proxima run directory (no checkpoints/step_*.pt inside)")
    from .population_run import POPULATION_FILE
    from .rundir import holder_alive, read_lock

    population = path.parent if (path.parent / POPULATION_FILE).is_file() else None  # a member: its population holds the lock
    info = read_lock(population or path)
    if info and holder_alive(info):
        if resuming:
            from .rundir import in_use_message

            return CheckpointError(in_use_message(population or path, info))
        from .signals import from_python

        every = "checkpoint_every" if from_python() else "--checkpoint-every"  # load(): the field, not a flag
        return CheckpointError(f"{path}: the run is in progress and has no checkpoint yet (one is written every "
                               f"{every}{'' if from_python() else ' N'} iterations and at the end); wait for its first, "
                               f"or train with a smaller {every}")
    if lock_only and population is None:  # its directory counts as empty: a new run there takes the stale lock over
        return CheckpointError(f"{path}: the run stopped during its start, before it wrote any file but its lock "
                               f"(.proxima.lock), so there is nothing to evaluate or resume; train it again from the "
                               f"start: proxima train ENV_ID --run-dir {shlex.quote(str(path))}")
    nproc = _nproc_flag(path)
    again = (f"proxima train --config {shlex.quote(str(path / 'config.yaml'))} --resume auto{nproc}" if (path / "config.yaml").is_file()
             else f"proxima train ENV_ID --run-dir {shlex.quote(str(path))} --overwrite{nproc}")
    trained = None if population is not None else _trained_past_checkpoint(path)
    # a kill (or a second Ctrl-C) while the first checkpoint was written leaves only its temp file, after
    # metrics.csv logged the iteration it was due at: not checkpoints someone removed
    # ... and only the first: rows past the first iteration a checkpoint was due at mean one was written
    # (the run went on), so a temp file beside them is a later write's, and the checkpoints are missing
    last, first_due = (None, None) if population is not None else _checkpoint_schedule(path)
    past_first = last is not None and first_due is not None and last[0] > first_due
    cut = [] if (trained is not None and "best.pt" in trained) or past_first else _first_write_cut(path)
    if cut:
        more = f" (and {len(cut) - 1} more like it)" if len(cut) > 1 else ""
        start = (f"train the population {population} again from the start: its command ({POPULATION_FILE}) with "
                 "--overwrite" if population is not None else f"train it again from the start: {again} (its files are moved aside)")
        return CheckpointError(f"{path}: its first checkpoint's write was interrupted (a kill or a second Ctrl-C during the "
                               f"save): {cut[-1]}{more} is all it left, no checkpoints/step_*.pt, so there is nothing to "
                               f"evaluate or resume; {start}")
    if trained is not None:  # it wrote checkpoints that are gone: "never wrote one" would hide where its training went
        best = best_checkpoint_path(path)
        # advised only where it loads as a resume loads it (good_best): never a damaged (truncated) best.pt
        damaged = " (its best.pt does not load either)" if _is_regular(best) and good_best(path) is None else ""
        then = (f"resume from its best.pt: proxima resume {shlex.quote(str(best))} (proxima eval reads it too)"
                if _is_regular(best) and not damaged
                else f"train it again from the start: {again} (its files are moved aside){damaged}")
        # "removed or moved" only on best.pt's evidence: rows logged at a due checkpoint also follow a save that failed
        # (a full disk, a kill during the save), whose run said "no checkpoint was written yet"
        how = "removed or moved" if "best.pt" in trained else "removed, moved, or never written because its save failed"
        return CheckpointError(f"{path}: its checkpoints are missing ({trained}, but no checkpoints/step_*.pt is there: "
                               f"{how}); put them back in {path / 'checkpoints'} to evaluate or resume it, if there "
                               f"are any, or {then}")
    # no trainer holds it: it stopped (an env failure, a kill) before its first checkpoint, and never writes one
    from .signals import from_python

    stopped = (f"{path}: the {'population' if population else 'run'} stopped before its first checkpoint "
               f"({_cadence(path, from_python())}), so there is nothing to evaluate or resume; ")
    if population is not None:
        python = _python_population_again(population)  # trained from Python: no command to run again
        return CheckpointError(stopped + (f"the population is {population}; {python}" if python else
                                          f"train the population {population} again from the start: its command "
                                          f"({POPULATION_FILE}) with --overwrite"))
    from .run_setup import stuck_loose_line

    loose = stuck_loose_line(path)  # a resume of a loose FILE: training from the start would lose FILE's steps
    return CheckpointError(stopped + (loose or f"train it again from the start: {again} (its files are moved aside)"))


def _nproc_flag(run: Path) -> str:
    """`` --nproc K`` for a run its meta.json records as trained by K > 1 processes (signals.recorded_world),
    else "": the command that trains it again from the start trains it as it ran, not as one process
    with a K-th of its batch."""
    from .signals import recorded_world

    world = recorded_world(run)
    return f" --nproc {world}" if world > 1 else ""


def _python_population_again(run: Path) -> Optional[str]:
    """population_run._train_again's advice for the population ``run`` trained from Python (its population.json
    records no command: ``train it again from Python: proxima.train_population(...) ..., overwrite=True``);
    None for one trained by the command line, or whose population.json does not read, whose command the
    line names instead."""
    from .population_run import _train_again, read_population_doc

    try:
        return _train_again(run) if read_population_doc(run).get("command") is None else None
    except CheckpointError:
        return None


def _first_write_cut(run: Path) -> list:
    """The temp files of step checkpoints in ``run``/checkpoints (``.step_N.pt.<hex>.tmp``, oldest name
    first) that a writer killed during its write left; [] when there are none (or the folder cannot be read)."""
    try:
        return sorted(p for p in (run / "checkpoints").glob(_STALE_TEMPS[0]) if _is_regular(p))
    except OSError:
        return []


def _cadence(run: Path, python: bool) -> str:
    """When ``run`` writes checkpoints, by its config.yaml, in words for a line: ``one is written every
    --checkpoint-every N iterations and at the end``; a run of checkpoint_every 0 writes by
    --checkpoint-minutes (``every 10 minutes``) or only at the end. load() names the fields, not flags."""
    from .config import load_yaml
    from .rundir import read_run_text

    try:
        cfg = load_yaml(read_run_text(run / "config.yaml"))
    except Exception:  # noqa: BLE001 - any damage: the usual cadence's words
        cfg = None
    cfg = cfg if isinstance(cfg, dict) else {}
    every, minutes = cfg.get("checkpoint_every"), cfg.get("checkpoint_minutes")
    name = (lambda field: field) if python else (lambda field: "--" + field.replace("_", "-"))
    if not (_is_int(every) and every == 0):
        return f"one is written every {name('checkpoint_every')}{'' if python else ' N'} iterations and at the end"
    if isinstance(minutes, (int, float)) and not isinstance(minutes, bool) and minutes > 0:
        return f"with {name('checkpoint_every')} 0, one is written every {minutes:g} minutes ({name('checkpoint_minutes')}) and at the end"
    return f"with {name('checkpoint_every')} 0 and {name('checkpoint_minutes')} 0, one is written only at the end"


def _checkpoint_schedule(run: Path) -> tuple:
    """(the last (iteration, global_step) ``run``'s metrics.csv logs, None for none; the first iteration
    a checkpoint was due at by its config.yaml (--checkpoint-every, or the run's end), None when it does
    not say). Its files are data: one that cannot be read says nothing."""
    from .config import load_yaml
    from .rundir import read_run_text

    try:
        logged = [(i, s) for i, s in logged_steps(run) if i is not None]
    except OSError:
        logged = []
    if not logged:
        return None, None
    # the raw values, not run_setup.read_run_config's PPOConfig: a file damaged in another field still
    # says when a checkpoint was due, and a field it lacks must not read as PPOConfig's default
    try:
        cfg = load_yaml(read_run_text(run / "config.yaml"))
    except Exception:  # any damage: no config to tell when a checkpoint was due
        cfg = None
    cfg = cfg if isinstance(cfg, dict) else {}
    every, total = cfg.get("checkpoint_every"), cfg.get("total_timesteps")
    batch = cfg.get("num_envs", 0) * cfg.get("num_steps", 0) if all(
        _is_int(cfg.get(k)) for k in ("num_envs", "num_steps")) else 0
    due = [n for n in (every if _is_int(every) else 0, total // batch if _is_int(total) and batch > 0 else 0) if n > 0]
    return max(logged), (min(due) if due else None)


def _trained_past_checkpoint(run: Path) -> Optional[str]:
    """What shows that the run in ``run`` wrote a checkpoint (its best.pt; metrics.csv logging the
    iteration --checkpoint-every or the end of the run writes one at, by its config.yaml), in words
    for the line; None when nothing does (rows alone do not: a kill before the first checkpoint
    leaves rows too)."""
    seen = []
    last, first_due = _checkpoint_schedule(run)
    if last is not None and first_due is not None and last[0] >= first_due:
        seen.append(f"metrics.csv logs {last[0]} iteration(s), to step {last[1]:,}")
    if _is_regular(best_checkpoint_path(run)):
        seen.append("checkpoints/best.pt is there")
    return ", and ".join(seen) or None


def logged_steps(run_dir: Union[str, Path]) -> list:
    """(iteration, global_step) of each whole row of ``run_dir``'s metrics.csv that logs a step, in the
    file's order: how far a run logged (_trained_past_checkpoint, run_setup.note_missing_rows), each
    caller taking its own last row. ``iteration`` is None where the column is absent or the cell holds
    no count. OSError (FileNotFoundError: no metrics.csv) for the caller to judge."""
    from .logger import read_csv_lines, whole_rows

    header, rows, _ = whole_rows(*read_csv_lines(Path(run_dir) / "metrics.csv"))
    if "global_step" not in header:
        return []
    col = header.index("global_step")
    icol = header.index("iteration") if "iteration" in header else None
    logged = []
    for _, r in rows:
        step = _count(r[col])
        if step is not None:
            logged.append((_count(r[icol]) if icol is not None else None, step))
    return logged


def _count(text: str) -> Optional[int]:
    """A cell of the run's log as a count, or None: the file is data, and a cell that is not an integer
    >= 0 (damaged, edited) is no step or iteration a run logged."""
    try:
        n = int(text)
    except ValueError:
        return None
    return n if n >= 0 else None


def load_resumable(path: Union[str, Path], allow_population: bool = False, set_aside: bool = True) -> dict:
    """The checkpoint to resume from: a file as given; for a run directory its newest checkpoint that
    loads. A newer one that does not (cut short, corrupted) is renamed ``step_*.pt.corrupt`` so that
    no later prune or resume picks it, with a line on stderr naming both files; with ``set_aside``
    False it is left as it is (the --nproc launcher's check, which holds no lock and may not write the
    run: rank 0 sets it aside once it holds the lock). A population's checkpoints are refused with the
    line that says how to resume them unless ``allow_population`` (population_run.resume_population).
    RUN/checkpoints is RUN (source_path), as resumed_run_dir's resolve_checkpoint reads it."""
    path = source_path(path)
    if not path.is_dir():
        try:
            # sound, as a directory's newest is picked: found only at restore, a damaged named file would
            # have had the run's newer checkpoints set aside first (run_setup.set_aside_timeline)
            state = load_sound(path)
        # a newer Proxima's file: upgrading, not a start over, reads it; an RLHF run's: its own resume does
        except (LinkOutOfRunError, NewerSchemaError, RLHFRunError):
            raise
        except CheckpointError as e:  # named, it has no fallback: say where the run's sound state is
            raise CheckpointError(f"{e}{named_file_advice(path)}") from None
        return _refuse_population(state, allow_population)
    ckpts = list_checkpoints(path)
    if not ckpts:
        raise no_checkpoint_error(path, resuming=True)
    _, state = newest_that_loads(ckpts, load_sound, CheckpointError, set_aside=set_aside,
                                 none_loads=lambda: f"; {start_over(path, 'resume')}")
    return _refuse_population(state, allow_population)


def named_file_advice(path: Union[str, Path]) -> str:
    """What to do when the checkpoint file ``path``, named by the user, does not load: for a file in a
    run's checkpoints/ folder, that resuming the run directory continues from its newest sound checkpoint
    (named; the run directory's resume sets the damaged ones aside), or that none of the run's loads
    (start_over); "" for a loose file. Only reads: nothing is renamed."""
    path = Path(path)
    if path.absolute().parent.name != "checkpoints":
        return ""
    run = path.parent.parent if path.parent.name == "checkpoints" else run_dir_of(path)  # as named, where it can be
    for other in reversed(list_checkpoints(run)):
        if other.name == path.name:
            continue
        try:
            state = load_sound(other)
        except CheckpointError:
            continue
        if state.get("population_member"):
            return ""  # a member resumes with its population, which names its own checkpoint
        return (f"; resuming the run directory instead (proxima resume {shlex.quote(str(run))}) continues from its newest "
                f"sound checkpoint, {other}")
    good = good_best(run, skip=path)
    if good is not None:
        return f"; no step_*.pt of {run} loads either: {resume_from_best(*good, 'resume')}"
    return f"; no other checkpoint of {run} loads either: {start_over(run, 'resume', best_tried=True)}"


def load_run_newest(path: Union[str, Path], load, verb: str, command, env_args: str = "--env, --env-kwargs"):
    """``load(path)`` (load_policy, load_checkpoint) for a checkpoint file, a run directory or RUN/checkpoints
    (source_path): what ``proxima eval``, proxima.load() and --init-from read, each line in its own words.
    A run directory whose newest checkpoint does not load (cut short, damaged) is refused, never read
    from another step in its place (an older policy would pass for the run's newest to a reader who does
    not check its global_step), but the line names the newest one that does load and how to read that
    file (``verb`` it with ``command(file)``: "evaluate", ``proxima eval FILE``), or what to do when none
    does (its sound best.pt, else start_over); older ones refused only for the env given are counted as
    such (``env_args``: how that env is given). A run directory's checkpoint is checked against its
    config.yaml as a resume checks it (run_setup.check_same_run: another run's checkpoint copied in is
    refused, not read as this run's). Only reads: nothing is renamed (a resume sets the damaged one aside)."""
    path = source_path(path)
    try:
        loaded = load(path)
    # a newer Proxima's file is sound (upgrading reads it), and one refused for the env given is too (the
    # older ones trained on the same env are refused alike): neither gets a restore or a start over
    except (LinkOutOfRunError, NewerSchemaError, EnvMismatchError, PopulationCheckpointError, RLHFRunError):
        raise
    except CheckpointError as e:
        files = list_checkpoints(path) if path.is_dir() else []
        if not files or not str(e).startswith(f"{files[-1]}: "):  # a file named, none at all, or none stayed to be read
            raise
        raise CheckpointError(f"{e}{_sound_elsewhere(path, files, load, verb, command, env_args)}") from None
    if path.is_dir():
        check_run_checkpoint(loaded, path)
    return loaded


def _sound_elsewhere(run: Path, files: list, load, verb: str, command, env_args: str) -> str:
    """The end of load_run_newest's line for ``run``, whose newest of ``files`` does not load."""
    misfit = foreign = 0  # older checkpoints that are sound but refused for the env given; another run's copied in
    for older in reversed(files[:-1]):
        try:
            loaded = load(older)
        except EnvMismatchError:
            misfit += 1
            continue
        except CheckpointError:
            continue
        try:  # another run's file copied in is no checkpoint of this run's to name as its newest sound one
            check_run_checkpoint(loaded, run)
        except CheckpointError:
            foreign += 1
            continue
        return f"; the run's newest sound checkpoint is {older}: {verb} it with {command(older)} ({_resume_tail(run, loaded)})"
    if misfit:  # the run has sound checkpoints: only the env given keeps them from loading
        return (f"; {misfit} of the {len(files) - 1} older checkpoint(s) load but do not fit the env given: {verb} one "
                f"with the env the run was trained on ({env_args})")
    others = f"; none of the {len(files) - 1} older checkpoint(s) loads either" if len(files) > 1 else ""
    if foreign:
        others = (f"; none of the {len(files) - 1} older checkpoint(s) is a sound one of this run's ({foreign} of them "
                  f"{'loads but is' if foreign == 1 else 'load but are'} another run's, copied in)")
    good = good_best(run)
    then = (f"{resume_from_best(*good, 'resume')}, or {verb} it: {command(good[0])}" if good is not None
            else start_over(run, best_tried=True))
    return f"{others}; {then}"


def _resume_tail(run: Path, loaded) -> str:
    """How a resume goes on from ``run``'s sound older checkpoint (``loaded``): the run's own resume, which
    sets the damaged newest aside; for a population member (population.json beside it, or a state that
    records population_member) its population's resume, as a member's own resume is refused."""
    from .population_run import POPULATION_FILE

    if (run.parent / POPULATION_FILE).is_file():
        return f"a population member: it resumes with its population, proxima resume {shlex.quote(str(run.parent))}"
    if isinstance(loaded, dict) and loaded.get("population_member"):
        return "a population member: it resumes with its population, proxima resume POPULATION_DIR"
    return f"proxima resume {shlex.quote(str(run))} continues from it and sets the damaged one aside"


def check_run_checkpoint(loaded, run: Union[str, Path]) -> None:
    """CheckpointError when ``loaded`` (a state dict or a Policy), read from run directory ``run``, records
    another env or size of run than its config.yaml: another run's checkpoint copied into ``run``, whose
    numbers would pass for this run's. Resume's check and line (run_setup.check_same_run); nothing to check
    without a config.yaml that reads, or for a population's own checkpoint (callers refuse it)."""
    from .config import ConfigError
    from .run_setup import check_same_run, read_run_config

    if isinstance(loaded, dict):
        if loaded.get("kind") == "ppo-population":
            return
        state = loaded
    else:
        state = {"config": loaded.config, "path": loaded.path}
    recorded, _ = read_run_config(run)
    try:
        check_same_run(state, run, recorded)
    except ConfigError as e:  # a checkpoint that is not this run's, as a damaged one is: what load() raises
        raise CheckpointError(str(e)) from None


def start_over(run: Union[str, Path], command: Optional[str] = None, best_tried: bool = False) -> str:
    """The next step when none of the run's step_*.pt loads: its best.pt when that loads (good_best;
    not looked at again when ``best_tried``), as resume_from_best names it; never resumed from on its
    own, which would drop the steps after it without the user's word. Else a copy of the checkpoints,
    or the run trained again in its own directory (the old one moved aside)."""
    from .population_run import POPULATION_FILE

    run = Path(run)
    good = None if best_tried else good_best(run)
    if good is not None:
        return resume_from_best(*good, command)
    folder = run / "checkpoints"
    if (run / POPULATION_FILE).is_file():
        again = (_python_population_again(run)
                 or f"train the population again: its command ({run / POPULATION_FILE}) with --overwrite")
    elif (run / "config.yaml").is_file():
        again = (f"start over with proxima train --config {shlex.quote(str(run / 'config.yaml'))} --run-dir "
                 f"{shlex.quote(str(run))} --overwrite{_nproc_flag(run)} (the old run is moved aside)")
    else:
        again = (f"start over with proxima train ENV_ID --run-dir {shlex.quote(str(run))} --overwrite{_nproc_flag(run)} "
                 "(the old run is moved aside)")
    return f"restore a copy of {folder} if you have one, or {again}"


def resume_from_best(best: Path, step: int, command: Optional[str] = None) -> str:
    """The one command to copy that continues from the run's sound ``best`` (at ``step``) when no step_*.pt
    loads, as the missing-checkpoints line names best.pt (no_checkpoint_error): ``command`` "resume" names the
    resume; None (proxima eval's line) names the eval of it too."""
    named = shlex.quote(str(best))
    also = "" if command == "resume" else f", or evaluate it: proxima eval {named}"
    return f"resume from the newest good one: proxima resume {named} (step {step:,}){also}"


def good_best(run: Union[str, Path], skip: Optional[Path] = None) -> Optional[tuple]:
    """(RUN/checkpoints/best.pt, its step) when it loads as a resume loads it (load_sound: archive, size,
    weights, counters; a link out of the run refused), else None; None too when it is ``skip`` (the
    file that just failed) or a population member's (its population resumes as a whole). Only reads."""
    best = best_checkpoint_path(run)
    if not _is_regular(best) or (skip is not None and Path(skip).absolute() == best.absolute()):
        return None
    try:
        state = load_sound(best)
    except CheckpointError:
        return None
    if state.get("population_member") or state.get("kind") == "ppo-population":
        return None
    return best, int(state["global_step"])


def load_sound(path: Union[str, Path]) -> dict:
    """load_checkpoint, and what a resume restores beyond the policy checked (normalizer statistics,
    optimizer moments: train_state.check_resumable) and the file consistent with itself (counters,
    weights and next observation against its recorded config and spaces: train_state.check_consistent):
    the loader a resume picks its checkpoint with, so that a damaged or edited newest file that still
    unpickles falls back to an older one, not only fails at restore. A single run's state comes back as
    a train_state.SoundState, which the resume then does not check again."""
    from .train_state import check_consistent, check_resumable

    state = check_resumable(load_checkpoint(path))
    if state.get("kind") != "ppo-population" and not state.get("population_member"):
        return check_consistent(state)
    return state


def newest_that_loads(files: list, load, error: type = None, set_aside: bool = True, none_loads="") -> tuple:
    """(file, state) of the newest of ``files`` (oldest first) that ``load(file)`` reads without raising
    ``error``. Each newer one that does not (cut short by a full disk, damaged) gets a line on stderr
    and, with ``set_aside``, is renamed ``*.corrupt`` so that no later prune or resume picks it (else
    left as it is: a dry run); when none loads, ``error`` naming the newest, ending in ``none_loads``
    (what to do then; a callable: called only then), and nothing is renamed. Shared by PPO and RLHF resumes."""
    import sys

    error = error or CheckpointError
    unusable = []
    for candidate in reversed(files):
        try:
            state = load(candidate)
        except _Vanished:
            continue  # removed since it was listed: gone, not corrupt (nothing to set aside)
        except LinkOutOfRunError:
            raise  # not this run's file: refused, never renamed nor skipped for an older one
        except (NewerSchemaError, RLHFRunError):
            # a newer Proxima wrote it (a colleague's run), or an RLHF run did: sound, so never set aside, and an
            # older checkpoint in its place would drop that training; the line says to upgrade, or to resume it
            # as an RLHF run, not to start over
            raise
        except error as e:
            unusable.append((candidate, str(e).removeprefix(f"{candidate}: ")))
            continue
        for bad, why in unusable:
            kept = "left as it is"
            if set_aside:
                aside = _free_name(bad.with_name(bad.name + ".corrupt"))
                os.replace(bad, aside)
                kept = f"kept as {aside.name}"
            print(f"proxima: note: {bad} is unusable ({why}); resuming from {candidate} instead "
                  f"(the bad file is {kept})", file=sys.stderr)
        return candidate, state
    if not unusable:
        raise error(f"{files[-1].parent}: its checkpoints were removed while being read; try again")
    newest, why = unusable[0]
    older = f"; none of the {len(files) - 1} older checkpoint(s) loads either" if len(files) > 1 else ""
    raise error(f"{newest}: {why}{older}{none_loads() if callable(none_loads) else none_loads}")


def _free_name(path: Path) -> Path:
    """``path``, else ``path-2``, ``path-3``...: the first name nothing holds (a file, folder or link
    there, an earlier bad copy or one planted, is neither replaced nor in the way of os.replace)."""
    candidate, n = path, 2
    while os.path.lexists(candidate):
        candidate, n = path.with_name(f"{path.name}-{n}"), n + 1
    return candidate


def _refuse_population(state: dict, allow_population: bool = False) -> dict:
    """A population member's checkpoint holds its weights only, and a population's own checkpoint is
    resumed as a whole (population_run.py): neither resumes as a single run."""
    if state.get("population_member"):
        raise CheckpointError(f"{state['path']}: a member of a population (--seeds/--sweep) holds its weights only; "
                              f"{_member_ways(state)}")
    if state.get("kind") == "ppo-population" and not allow_population:
        from .signals import from_python, python_resume

        run = run_dir_of(state["path"])
        # from Python (train(..., resume=...)): the call that resumes a population, which train() does not
        how = python_resume(run) if from_python() else f"proxima resume {shlex.quote(str(run))}"
        typed = _typed_dry_run_resume()
        dry = None if from_python() or typed is None else population_dry_run(run, typed if typed != "auto" else None)
        if dry is not None:  # `proxima resume` takes no --dry-run: its hint named this command, which ends here
            raise CheckpointError(f"{state['path']}: a population checkpoint (--seeds/--sweep); a population's resume is "
                                  f"dry-run with its env, seeds and sweep: {dry} (the resume itself: {how})")
        raise CheckpointError(f"{state['path']}: a population checkpoint (--seeds/--sweep); resume the whole population: "
                              f"{how}")
    return state


def _typed_dry_run_resume() -> Optional[str]:
    """The --resume value of the command typed (launch.typed_command) when it is ``train --resume X --dry-run``;
    None for any other command."""
    from .launch import typed_command

    words = typed_command()
    words = words[:words.index("--")] if "--" in words else words
    if "--dry-run" not in words or "train" not in words:
        return None
    for i, word in enumerate(words):
        if word == "--resume" and i + 1 < len(words):
            return words[i + 1]
        if word.startswith("--resume="):
            return word.partition("=")[2]
    return None


def population_dry_run(run_dir: Union[str, Path], resume: Optional[str] = None) -> Optional[str]:
    """``proxima train CartPole-v1 --seeds 1-3 --sweep norm_adv=true,false --resume RUN --dry-run``: the dry run
    of a population's resume (``proxima resume`` takes no --dry-run, and ``train --resume RUN`` without the
    population's --seeds/--sweep is a single run's resume, which refuses a population's checkpoint), its env,
    seeds and sweep read from population.json, shell-quoted; ``resume``: the --resume to give (None: ``run_dir``).
    None when the file holds no env, seeds or sweep a command can repeat (damaged or edited: it is data)."""
    from .population_run import POPULATION_FILE, seeds_spec, sweep_flags

    try:
        doc = json.loads(Path(run_dir, POPULATION_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    env_id, seeds, sweep = (doc.get("env_id"), doc.get("seeds"), doc.get("sweep") or {}) if isinstance(doc, dict) else (None,) * 3
    plain = (int, float, bool, type(None))
    if not (isinstance(env_id, str) and env_id and not env_id.startswith("-") and isinstance(seeds, list) and seeds
            and all(isinstance(s, int) and not isinstance(s, bool) for s in seeds) and isinstance(sweep, dict)
            and all(isinstance(k, str) and k.isidentifier() and isinstance(v, list) and v
                    and all(isinstance(x, plain) for x in v) for k, v in sweep.items())):
        return None
    return shlex.join(["proxima", "train", env_id, "--seeds", seeds_spec(seeds), *sweep_flags(sweep).split(),
                       "--resume", str(resume if resume is not None else run_dir), "--dry-run"])


def _member_ways(state: dict) -> str:
    """What a resume of a population member does instead (docs/populations.md): resume its population,
    named where it is (member_population), and the way to train this member on alone: a new run from its
    weights, ``proxima train ENV --init-from MEMBER_DIR`` (with the member's env kwargs)."""
    config = state.get("config") or {}
    env_id, kwargs = config.get("env_id"), config.get("env_kwargs")
    env = shlex.quote(env_id) if isinstance(env_id, str) and env_id else "ENV_ID"
    if isinstance(kwargs, dict) and kwargs:
        env += f" --env-kwargs {shlex.quote(json.dumps(kwargs))}"
    alone = (f"or train this member on alone, a new run from its weights: proxima train {env} --init-from "
             f"{shlex.quote(str(run_dir_of(state['path'])))}")
    where = member_population(state)
    if where is not None:
        return f"resume the whole population: proxima resume {shlex.quote(str(where))}, {alone}"
    parent = run_dir_of(state["path"]).parent
    recorded = state.get("population")
    trained = f" (trained with --run-dir {recorded})" if isinstance(recorded, str) and recorded else ""
    return (f"its population{trained} is not next to it (no population.json in {parent}): resume the whole population "
            f"from its own directory, proxima resume POPULATION_DIR, {alone}")


def member_population(state: dict) -> Optional[Path]:
    """The population run directory that holds a member's checkpoint ``state``: the member directory's
    parent when that holds population.json (where the population is now, also after it was moved or
    copied, and as an absolute path whatever folder it was trained from); else None (a member copied out
    of its population: the path it recorded was as typed where the population was trained, and a
    population there, if any, is not this copy's)."""
    from .population_run import POPULATION_FILE

    parent = run_dir_of(state["path"]).parent
    return parent if (parent / POPULATION_FILE).is_file() else None


def _one_line(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: what to do about a checkpoint that holds nothing (a full disk, a copy or download stopped early)
_CUT_SHORT = "; it was cut short when written or copied: use another checkpoint of the run, or copy the file again"


#: what zipfile raises on a damaged archive: besides BadZipFile, a flipped bit can make it report an
#: archive spanning several disks (BadZipFile from is_zipfile), an encrypted record (RuntimeError),
#: offsets past the end (ValueError, EOFError, OSError) or an unknown compression (NotImplementedError)
_ZIP_ERRORS = (zipfile.BadZipFile, RuntimeError, ValueError, EOFError, OSError, NotImplementedError)


def _check_archive(path: Path, f) -> None:
    """Refuse, before unpickling anything, a file that is not an intact torch zip archive (``f``: the
    file opened for reading; every check reads it, never the name again)."""
    size = os.fstat(f.fileno()).st_size
    if size == 0:
        raise CheckpointError(f"{path}: empty file (0 bytes), not a checkpoint{_CUT_SHORT}")
    try:  # one handler for every check: a damaged archive is a corrupted checkpoint, so a resume falls back
        is_zip = zipfile.is_zipfile(f)
        if is_zip:  # before zipfile parses the central directory: a record at a time, ~38 us and ~0.9 KB each
            _check_directory(path, f, size)
        problem = _zip_problem(f) if is_zip else None
    except CheckpointError:  # a RuntimeError: not one of zipfile's
        raise
    except _ZIP_ERRORS as e:
        raise CheckpointError(f"{path}: corrupted checkpoint (damaged zip archive: {_one_line(e, 100)})") from None
    if not is_zip:
        f.seek(0)
        head = f.read(4)
        if head == b"PK\x03\x04":  # a zip that lost its end (central directory): cut short
            raise CheckpointError(f"{path}: truncated checkpoint ({size} bytes, the end of the archive is missing)")
        raise CheckpointError(f"{path}: not a Proxima checkpoint (not a torch zip archive)")
    if problem == _EMPTY_ZIP:
        raise CheckpointError(f"{path}: truncated checkpoint (an empty zip archive, {size} bytes){_CUT_SHORT}")
    if problem == _FOREIGN_ZIP:
        raise CheckpointError(f"{path}: not a Proxima checkpoint (a zip archive of another format, such as a "
                              "Stable-Baselines3 model or a TorchScript file)")
    if problem == _EXPORT_ZIP:  # what docs/python_api.md's 'Exporting the policy' writes
        raise CheckpointError(f"{path}: not a Proxima checkpoint (a torch.export program (.pt2): load it with "
                              "torch.export.load)")
    if problem is not None:
        raise CheckpointError(f"{path}: corrupted checkpoint ({problem})")
    f.seek(0)


#: the zip records any checkpoint holds at most, whatever its size: torch.save writes one a tensor storage
#: beside 5 of its own (data.pkl, byteorder, ...). Measured: a CNN run 65, an RLHF run of a 1-layer GPT-2 144
#: (4 a trainable tensor: the weight and Adam's two moments and step, for the policy and for the value model,
#: so a 70B Llama's 723 tensors make ~5,800), a 64-layer MLP (MAX_HIDDEN_LAYERS) 1,069 in 418 KB
ARCHIVE_RECORDS = 20_000
#: ... and beyond those, one record for every ARCHIVE_RECORD_BYTES of the file at least: only a population
#: (MAX_MEMBERS: 10^6) outgrows ARCHIVE_RECORDS, by two records a member holding 10,112 bytes (its two torch
#: RNG states: 256 members made 544 records in 31 MB). An archive of empty records (~110 bytes each) is
#: refused before zipfile reads its central directory (10^6 of them: 38 s and 0.9 GB); one padded to pass
#: is a file of 2 GB, whose load is as long as that of any checkpoint of its size
ARCHIVE_RECORD_BYTES = 2_048
#: what a central directory entry starts with: counted in the directory, it bounds the entries zipfile makes
#: whatever count the end record declares (zipfile reads entries until the directory's size is used up)
_ENTRY_SIGNATURE = b"PK\x01\x02"
_COUNT_CHUNK = 1 << 20


def archive_records(size: int) -> int:
    """The zip records a checkpoint of ``size`` bytes holds at most (ARCHIVE_RECORDS, ARCHIVE_RECORD_BYTES)."""
    return ARCHIVE_RECORDS + size // ARCHIVE_RECORD_BYTES


def _check_directory(path: Path, f, size: int) -> None:
    """Refuse, from the end of central directory record (zip64's when present: zipfile's own reading of it),
    an archive of more records than a checkpoint of its ``size`` holds, or whose central directory is larger
    than the file before that record: before zipfile builds an object for every entry of the directory."""
    end = _end_record(f)  # is_zipfile found it; the one ZipFile locates the directory by
    if not end:
        raise zipfile.BadZipFile("File is not a zip file")
    most = archive_records(size)
    records, directory, before, zip64 = end
    if records > most:
        raise CheckpointError(_records_line(path, records, size, most))
    if zip64:  # the zip64 records lie between
        before -= _END64.size + _LOCATOR64.size
    if directory > before:
        raise zipfile.BadZipFile(f"its central directory claims {directory:,} bytes, more than the {max(before, 0):,} "
                                 "before its end record")
    entries = _count_entries(f, before - directory, directory, most)
    if entries > most:
        raise CheckpointError(_records_line(path, entries, size, most))


#: the zip format's end records (APPNOTE.TXT 4.3.14-16): the end of central directory record (signature, disk numbers,
#: entries on this disk and in all, directory size and offset, comment length), zip64's record and its locator
_END = struct.Struct("<4s4H2LH")
_END64 = struct.Struct("<4sQ2H2L4Q")
_LOCATOR64 = struct.Struct("<4sLQL")


def _end_record(f) -> Optional[tuple]:
    """(records, central directory size, offset of the end record, whether zip64's) as zipfile reads the archive
    ``f``'s end records, or None where it finds none. zipfile._EndRecData is private: a Python without it
    gets _read_end_record, the same reading from the zip format's public layout."""
    read = getattr(zipfile, "_EndRecData", None)
    if read is None:
        return _read_end_record(f)
    end = read(f)  # [signature, ..., entries total (4), size (5), offset, comment length, comment, location (9)]
    return (end[4], end[5], end[9], end[0] == b"PK\x06\x06") if end else None


def _read_end_record(f) -> Optional[tuple]:
    """_end_record from the bytes, as zipfile._EndRecData finds them: the end record that ends the file (no
    comment), else the last one within a comment's reach (64 KiB); then zip64's, where its locator precedes it."""
    f.seek(0, os.SEEK_END)
    size = f.tell()
    start = max(size - (1 << 16) - _END.size, 0)
    f.seek(start)
    tail = f.read()
    at = len(tail) - _END.size
    if at < 0 or not (tail[at:at + 4] == b"PK\x05\x06" and tail[-2:] == b"\0\0"):
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or len(tail) - at < _END.size:
            return None
    end = _END.unpack_from(tail, at)
    location = start + at
    records, directory = end[4], end[5]
    if location < _LOCATOR64.size:
        return records, directory, location, False
    f.seek(location - _LOCATOR64.size)
    locator = _LOCATOR64.unpack(f.read(_LOCATOR64.size))
    if locator[0] != b"PK\x06\x07":
        return records, directory, location, False
    if locator[1] != 0 or locator[3] > 1:
        raise zipfile.BadZipFile("zipfiles that span multiple disks are not supported")
    if location < _LOCATOR64.size + _END64.size:
        return records, directory, location, False
    f.seek(location - _LOCATOR64.size - _END64.size)
    end64 = _END64.unpack(f.read(_END64.size))
    if end64[0] != b"PK\x06\x06":
        return records, directory, location, False
    return end64[7], end64[8], location, True


def _count_entries(f, start: int, length: int, most: int) -> int:
    """The central directory entries in ``length`` bytes of ``f`` from ``start`` (an upper bound: a name may hold
    the signature too), read a MiB at a time and given up past ``most``."""
    f.seek(start)
    count, tail = 0, b""
    while length > 0 and count <= most:
        chunk = f.read(min(length, _COUNT_CHUNK))
        if not chunk:
            break
        length -= len(chunk)
        # the last 3 bytes of the chunk before: a signature across the seam, never one counted already
        count += (tail + chunk).count(_ENTRY_SIGNATURE)
        tail = chunk[-3:]
    return count


def _records_line(path: Path, records: int, size: int, most: int) -> str:
    return (f"{path}: not a Proxima checkpoint (a zip archive of {records:,} records; torch.save writes at most "
            f"{most:,} for a checkpoint of its {size:,} bytes)")


#: _zip_problem's answer for an intact zip of another format, by its record names: a Stable-Baselines3
#: model (top-level 'data' and 'policy.pth') or a TorchScript file ('<name>/code/...', '<name>/constants.pkl')
_FOREIGN_ZIP = "another format"
#: ... and for an archive of no records at all (torch.save writes at least data.pkl): nothing to unpickle
_EMPTY_ZIP = "no records"
#: ... and for a torch.export program (torch.export.save's .pt2: '<name>/archive_format', '<name>/models/*.json')
_EXPORT_ZIP = "a torch.export program"


def _foreign_names(names: list) -> Optional[str]:
    """_EXPORT_ZIP or _FOREIGN_ZIP when zip record ``names`` are those of a torch.export program, or of an SB3
    model or a TorchScript file; None for torch.save's archive (every record under one '<name>/' folder:
    data.pkl, data/N, version, byteorder)."""
    inner = [n.split("/", 1)[1] for n in names if "/" in n]
    if any(n == "archive_format" or (n.startswith("models/") and n.endswith(".json")) for n in inner):
        return _EXPORT_ZIP
    if {"data", "policy.pth"} <= set(names):
        return _FOREIGN_ZIP
    return _FOREIGN_ZIP if any(n.startswith("code/") or n == "constants.pkl" for n in inner) else None


def _zip_problem(f) -> Optional[str]:
    """Why the zip archive in ``f`` is not intact, or None; _EMPTY_ZIP for one of no records; _FOREIGN_ZIP/_EXPORT_ZIP
    for another format's archive (its deflated records would read as damage). torch.save stores every record
    uncompressed: one that claims compression is refused before testzip, which would inflate it
    to check it (a 1 MB deflated record can stand for a gigabyte: seconds of work)."""
    with zipfile.ZipFile(f) as zf:  # a passed file object is left open
        if not zf.namelist():
            return _EMPTY_ZIP
        foreign = _foreign_names(zf.namelist())
        if foreign:
            return foreign
        for info in zf.infolist():
            if info.compress_type != zipfile.ZIP_STORED:
                return (f"record '{info.filename}' is compressed (method {info.compress_type}); "
                        "torch.save stores records uncompressed")
        bad = zf.testzip()  # reads every record and checks its CRC-32
    return None if bad is None else f"checksum mismatch in record '{bad}'"


def check_views(path, state) -> None:
    """CheckpointError ``PATH: FIELD is a view larger than its data`` for the first tensor in ``state``
    (dicts, lists and tuples, at any depth) that holds more elements than its storage: torch.save
    writes a view's storage, not its size, so ``torch.zeros(1).expand(2**33, 1)`` is 4 bytes on disk
    and 32 GB the first time anything reads it whole (a finiteness check, ``.numpy().astype``).
    Proxima writes whole tensors (a view of part of a larger storage is harmless: it is no larger
    than what the file holds). Before that, ``PATH: FIELD is a sparse_coo tensor ...`` for any tensor
    that is not a plain strided CPU one (sparse, meta, quantized, nested). Iterative and visiting each container once: a pickle can nest deeper
    than Python's recursion limit, and can hold a list that contains itself."""
    stack, seen = [(None, state)], set()
    while stack:
        where, value = stack.pop()
        if isinstance(value, torch.Tensor):
            # first: every later check (finiteness, shapes, a view's size) reads a plain CPU tensor's data,
            # and Proxima writes no other (a sparse or meta tensor fails inside torch with a traceback)
            if value.layout != torch.strided or value.device.type != "cpu" or value.is_quantized or value.is_nested:
                kind = ("quantized" if value.is_quantized else "nested" if value.is_nested
                        else value.device.type if value.layout == torch.strided else str(value.layout).replace("torch.", ""))
                raise CheckpointError(f"{path}: {_one_line(_field_name(where), 120)} is a {kind} tensor, not a plain (strided "
                                      "CPU) tensor as Proxima writes; the checkpoint is damaged or was edited")
            if value.numel() * value.element_size() > _storage_bytes(value):
                raise CheckpointError(f"{path}: {_one_line(_field_name(where), 120)} is a view larger than its data (shape "
                                      f"{tuple(value.shape)}, strides {value.stride()}, over {_storage_bytes(value):,} "
                                      "bytes stored); the checkpoint is damaged or was edited")
            continue
        if not isinstance(value, (dict, list, tuple)) or id(value) in seen:
            continue
        seen.add(id(value))
        items = value.items() if isinstance(value, dict) else enumerate(value)
        # reversed onto the stack: the first offending tensor in the file's own order is the one named
        stack.extend(reversed([((where, key, isinstance(value, dict)), sub) for key, sub in items]))


def _storage_bytes(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):  # no storage to read (a meta tensor): nothing to materialise
        return t.numel() * t.element_size()


def _field_name(where) -> str:
    """``agent.critic.0.weight``, ``rng.numpy[1]``: the key path check_views keeps as linked (parent, key,
    is_dict) triples, spelled out only for the one tensor named."""
    parts = []
    while where is not None:
        where, key, is_dict = where
        parts.append(f".{key}" if is_dict else f"[{key}]")
    return "".join(reversed(parts)).removeprefix(".") or "the checkpoint"


def _describe(obj) -> str:
    if isinstance(obj, dict):
        keys = ", ".join(repr(k) for k in list(obj)[:4]) + (", ..." if len(obj) > 4 else "")
        return f"a dict with keys {keys}" if obj else "an empty dict"
    return f"a {type(obj).__name__}"


def load_checkpoint(path: Union[str, Path], map_location="cpu") -> dict:
    """Load and check a checkpoint; never runs code from the file.

    Every failure is a CheckpointError with one line naming the file and the problem: missing,
    empty, truncated, corrupted (zip CRC mismatch), unsafe (a pickle that would run code: refused by
    ``torch.load(weights_only=True)``), foreign (not written by Proxima), newer schema, incomplete,
    or holding entries of the wrong kind (check_policy_state: an edited config, spaces or weights).
    Every check runs on the file loaded to the CPU; a ``map_location`` other than the CPU (anything
    torch.load takes) then places the checked file's tensors there.
    """
    path = source_path(path)
    if path.is_dir():
        return _load_newest(path, map_location)
    return _load_file(resolve_checkpoint(path), map_location)


#: how often a run directory's newest checkpoint may vanish under a reader before it gives up
VANISHED_RETRIES = 5


class _Vanished(CheckpointError):
    """The file was removed between listing and opening it (a live run's rotation, --keep-checkpoints)."""


def _load_newest(run_dir: Path, map_location) -> dict:
    """The newest checkpoint of ``run_dir``. A run still training prunes its old checkpoints as it
    writes new ones, so the file listed may be gone by the time it is opened: that file is not
    corrupt, and the then-newest one is read instead (a few times). A checkpoint that does not load
    is still an error: an older one is not silently evaluated in its place."""
    for _ in range(VANISHED_RETRIES):
        try:
            return _load_file(resolve_checkpoint(run_dir), map_location)
        except _Vanished:
            continue
    raise CheckpointError(f"{run_dir}: its newest checkpoint was removed while being opened {VANISHED_RETRIES} times "
                          "(the run is writing checkpoints faster than they can be read); try again, or raise its --keep-checkpoints")


def _load_file(path: Path, map_location) -> dict:
    from .rundir import NotRegularFileError, open_run_file

    try:
        # once: a file replaced or removed meanwhile is read as it was when opened; a FIFO planted at
        # the name is not waited on
        f = open_run_file(path)
    except FileNotFoundError:
        if os.path.islink(path):  # a dangling link: not a file that vanished
            raise CheckpointError(f"{path}: {not_a_file(path)}") from None
        raise _Vanished(f"{path}: no such file or directory") from None
    except OSError as e:
        if isinstance(e, (IsADirectoryError, NotRegularFileError)):
            raise CheckpointError(f"{path}: {not_a_file(path) or 'is not a regular file'}") from None
        raise CheckpointError(f"{path}: cannot read checkpoint ({e.strerror or e})") from None
    with f:
        return _load_open(path, f, map_location)


def _load_open(path: Path, f, map_location) -> dict:
    try:
        _check_archive(path, f)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read checkpoint ({e.strerror or e})") from None
    try:
        with quiet_warnings():  # keep the error to one line
            # on the CPU whatever map_location asks: check_views refuses any tensor Proxima does not
            # write (a CUDA one included), so it must see the devices the file holds, never the requested one
            state = torch.load(f, map_location="cpu", weights_only=True)
        # before any check reads a tensor whole: a view is stored as its storage, never its size
        check_views(path, state)
    except CheckpointError:
        raise
    except pickle.UnpicklingError as e:
        found = re.search(r"GLOBAL ([\w.]+)", str(e))
        if found:
            raise CheckpointError(f"{path}: refused to load: the file references {found.group(1)}, which would run code when "
                                  "unpickled; Proxima checkpoints hold only tensors and plain values (do not open it with "
                                  "weights_only=False unless you trust its source)") from None
        raise CheckpointError(f"{path}: corrupted checkpoint (unpickling failed: {_one_line(str(e).splitlines()[-1] if str(e).strip() else e, 100)})") from None
    except (zipfile.BadZipFile, EOFError, RuntimeError, ValueError, OSError, KeyError, IndexError, TypeError) as e:
        raise CheckpointError(f"{path}: corrupted checkpoint ({type(e).__name__}: {_one_line(e, 120)})") from None
    except Exception as e:  # any other loader failure is still the file's fault
        raise CheckpointError(f"{path}: unreadable checkpoint ({type(e).__name__})") from None
    if isinstance(state, dict) and state.get("format") == "proxima-rlhf-1":  # rlhf.rundir.CHECKPOINT_FORMAT
        run = _rlhf_run_named(path)
        if run is not None:
            raise rlhf_run_error(run, path)
        raise RLHFRunError(f"{path}: an RLHF checkpoint (proxima rlhf), not a PPO one: continue its run with proxima "
                           "resume RUN; its trained policy is RUN/policy (docs/rlhf.md)")
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a Proxima checkpoint (a torch file holding {_describe(state)})")
    version = state.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise CheckpointError(f"{path}: not a Proxima checkpoint (schema version {version!r} is not an integer)")
    if version > SCHEMA_VERSION:
        raise NewerSchemaError(f"{path}: checkpoint schema version {version} is newer than this Proxima supports ({SCHEMA_VERSION}); "
                               "upgrade proxima")
    # a population's checkpoint (population_run.py) holds every member's config and stacked weights
    required = ("configs", "population", "global_step", "spaces") if state.get("kind") == "ppo-population" else (
        "config", "agent", "global_step", "spaces")
    for key in required:
        if key not in state:
            raise CheckpointError(f"{path}: incomplete checkpoint (missing '{key}')")
    state["path"] = str(path)
    if state.get("kind") != "ppo-population":  # an edited config/spaces/weights entry: one line here, not a TypeError later
        check_policy_state(state)
    return state if _is_cpu(map_location) else _load_checked_to(path, f, map_location)


def _is_cpu(map_location) -> bool:
    try:
        return isinstance(map_location, (str, torch.device)) and torch.device(map_location).type == "cpu"
    except RuntimeError:  # not a device name: torch.load says what is wrong with it
        return False


def _load_checked_to(path: Path, f, map_location) -> dict:
    """The file ``f``, checked on the CPU by _load_open, loaded again the way ``map_location`` asks
    (a device, a dict or a function, as torch.load takes it): torch's own placement, of the same bytes
    (the open file, not the name)."""
    f.seek(0)
    try:
        with quiet_warnings():
            state = torch.load(f, map_location=map_location, weights_only=True)
    except Exception as e:  # the file loaded on the CPU: the location is what failed (no such device)
        raise CheckpointError(f"{path}: cannot load onto {map_location!r} ({type(e).__name__}: {_one_line(e, 120)})") from None
    state["path"] = str(path)
    return state


# ------------------------------------------------------------------------------------ policy
class Policy:
    """A trained policy for inference: frozen obs normalizer + actor. ``act(obs)`` -> actions;
    ``eval()`` returns the policy itself (as train()'s TrainedPolicy's does).

    It is no nn.Module and passes nothing through to ``agent``: the Module methods that return or
    convert the module (MODULE_ONLY, the dtype ones DTYPE_ONLY), the Agent's methods that take
    observations (TAKES_OBS) and, under an obs normalizer, its submodules (SUBMODULES: ``encoder``,
    ``actor``, ``critic``) are an AttributeError of one line saying what to call on ``policy.agent``
    instead, as on train()'s TrainedPolicy (which passes the Agent's other attributes through: without
    a normalizer the submodules too, whose inputs are then the policy's own)."""

    #: nn.Module methods that return the module: on the policy they would give the bare Agent (which acts
    #: on normalized observations: under norm_obs other actions, without a word)
    MODULE_ONLY = frozenset({"to", "cpu", "cuda", "xpu", "ipu", "mtia", "type", "float", "double", "half", "bfloat16",
                             "to_empty", "train", "requires_grad_", "apply", "share_memory"})
    #: of those, the ones that change the network's dtype: the normalizer and act() feed it float32, so
    #: ``policy.agent.double()`` (what the line once advised) made ``policy.act`` fail on a dtype mismatch
    DTYPE_ONLY = {"float": "float32", "double": "float64", "half": "float16", "bfloat16": "bfloat16", "type": None}
    #: the Agent's methods that take observations (``policy`` the features of them): passed through, they
    #: read a raw observation as a normalized one (under norm_obs, values and actions of other inputs)
    TAKES_OBS = frozenset({"features", "get_value", "get_action_and_value", "forward", "policy", "policy_step"})
    #: the Agent's submodules: ``encoder`` takes normalized observations, ``actor`` and ``critic`` the
    #: features of them (a raw observation given to policy.critic gave the value of another input)
    SUBMODULES = frozenset({"encoder", "actor", "critic"})
    #: of the above, those that take features (``agent.features(obs)``), not observations
    TAKES_FEATURES = frozenset({"policy", "actor", "critic"})

    def __getattr__(self, name: str):
        line = self._refusal(name)
        if line is None:
            agent = self.__dict__.get("agent")
            # train()'s policy answers the network's other names (parameters(), encoder_kind): say where they are
            if agent is not None and not name.startswith("__") and hasattr(agent, name):
                line = (f"{type(self).__name__!r} object has no attribute {name!r}; the network's is "
                        f"policy.agent.{name}")
        raise AttributeError(line or f"{type(self).__name__!r} object has no attribute {name!r}")

    def _refusal(self, name: str) -> Optional[str]:
        """The line refusing ``name`` (see the class docstring), or None for a name the policy does not refuse."""
        agent = self.__dict__.get("agent")  # absent while copy or pickle rebuild an instance: no recursion
        if agent is None or name.startswith("__"):
            return None
        if name == "save":  # SB3's model.save(path): here the run wrote the file already
            return self._save_line()
        if name in self.DTYPE_ONLY:
            return self._dtype_line(name)
        if name in self.MODULE_ONLY:
            return (f"{type(self).__name__}.{name}(): the policy is no torch.nn.Module; call policy.agent.{name}() for the "
                    "bare network (it acts on normalized observations, without the policy's normalizer and action "
                    "shaping), or load(run_dir, device=...) for the policy on another device")
        if name in self.TAKES_OBS:
            return self._takes_obs_line(name)
        # a submodule (one an Agent of another make adds too) is the network's part, read for inspection as often
        # as called: refused only where the policy's inputs are not the network's, under an obs normalizer
        children = getattr(agent, "_modules", None) or {}
        if (name in self.SUBMODULES or (name in children and not name.startswith("_"))) \
                and self.__dict__.get("obs_normalizer") is not None:
            return self._takes_obs_line(name)
        return None

    def _save_line(self) -> str:
        path = self.__dict__.get("path")
        saved = f"{path} is the saved model" if path else "the run's checkpoints/step_*.pt (or best.pt) is the saved model"
        return (f"{type(self).__name__}.save(): a policy is saved by its run as it trains: {saved}, and load(path) "
                "reloads it (a run directory: its newest); copy that file to keep it (the run keeps only its newest "
                "checkpoints), or export the network with policy.as_module()")

    def _dtype_line(self, name: str) -> str:
        head = f"{type(self).__name__}.{name}(): the policy is no torch.nn.Module and computes in float32"
        dtype = self.DTYPE_ONLY[name]
        if dtype == "float32":
            return f"{head} already (policy.agent is a float32 network): nothing to convert"
        # converting policy.agent in place would leave act() feeding the network float32 observations
        inputs = ("observations normalized by policy.obs_normalizer(obs, update=False)"
                  if self.__dict__.get("obs_normalizer") is not None else "observations")
        call, of = (f"{name}()", f"a {dtype}") if dtype else ("type(dtype)", "another dtype's")
        return (f"{head}; for {of} network use a copy, copy.deepcopy(policy.agent).{call}, on {inputs} cast to "
                f"{dtype or 'that dtype'} (policy.agent.{call} itself would make policy.act fail on a dtype mismatch)")

    def _takes_obs_line(self, name: str) -> str:
        head, own = ((f"{type(self).__name__}.{name}()", f"{name}()") if name in self.TAKES_OBS
                     else (f"{type(self).__name__}.{name}", name))
        normalized = self.__dict__.get("obs_normalizer") is not None
        obs = "policy.obs_normalizer(obs, update=False)" if normalized else "obs"
        if name == "encoder" and self.agent.__dict__.get("encoder", True) is None:  # a flat Box's Agent
            return (f"{head}: policy.agent has no encoder (None: its features are its observations); call "
                    f"policy.agent.features({obs}), obs a tensor on policy.device")
        feat = name in self.TAKES_FEATURES
        takes = "the features of normalized observations" if feat else "normalized observations"
        call = f"policy.agent.{name}(policy.agent.features({obs}))" if feat else f"policy.agent.{name}({obs})"
        if not normalized:
            # an image's pixels are never normalized (--norm-obs is refused for them): no word of norm_obs there
            why = ("" if getattr(self.agent, "has_pixels", False) else
                   f" (under norm_obs it takes {'the features of normalized ones' if feat else 'normalized ones'})")
            return (f"{head}: the policy does not pass observations to its network's {own}{why}; call {call}, obs a "
                    "tensor on policy.device (this run has no observation normalizer)")
        return f"{head}: policy.agent's {own} takes {takes}, the policy raw ones; call {call}, obs a tensor on policy.device"

    def __init__(self, agent, obs_normalizer, config: dict, observation_space, action_space, device, path: Optional[str] = None,
                 env_id: Optional[str] = None, env_trusted: bool = True, env_kwargs: Optional[dict] = None,
                 env_backend: Optional[str] = None):
        self.agent, self.obs_normalizer = agent.eval(), obs_normalizer
        if obs_normalizer is not None:
            obs_normalizer.eval()
        self.config, self.env_id = config, env_id or config["env_id"]
        #: the constructor arguments evaluate() builds the env with: ``env_kwargs`` when given, else
        #: the recorded ones (the checkpoint's config) for the recorded env (its id, or the id's
        #: ``module:EnvId`` form, envs.same_env, or another spelling of its Atari game, envs.same_game) only:
        #: another env's constructor was not written for them
        from .envs import same_env, same_game

        recorded = config.get("env_id")
        self.env_kwargs_recorded = env_kwargs is None and isinstance(recorded, str) and (
            same_env(self.env_id, recorded) or same_game(self.env_id, recorded))
        if env_kwargs is not None:
            self.env_kwargs = dict(env_kwargs)
        else:
            self.env_kwargs = dict(config.get("env_kwargs") or {}) if self.env_kwargs_recorded else {}
        #: False when env_id came from the file and names a module to import: evaluate() refuses it
        self.env_trusted = env_trusted
        #: the registration's entry point the checkpoint recorded (save_train_state), for the line
        #: naming the module to give when the id is not registered here; None when unknown
        self.env_entry_point: Optional[str] = None
        #: the run's torch thread count and flush-denormal mode, which evaluate() computes under so
        #: that its numbers are the run's eval.json's (load_policy sets them; None: the caller's kept)
        self.run_threads: Optional[int] = None
        self.run_flush_denormal: Optional[bool] = None
        #: the space of the env's observations as the policy takes them (envs.spaces.tensor_space): a vector Box
        #: as a flat float32 Box whatever dtype the env declared (a float64 or int Box is cast to float32; the
        #: checkpoint records only the cast one), its declared shape in ``.declared`` where that is another;
        #: an image Box and a Dict (its keys' own dtypes, float64 included) as the env declared them
        self.observation_space, self.action_space = observation_space, action_space
        self.device, self.path = torch.device(device), path
        #: the backend of the env the policy acts for ("native": a NativeEnv, whose step takes its actions
        #: flat, as training gives them: act() gives them so); None where unknown (another env id given)
        self.env_backend = env_backend

    def __repr__(self) -> str:
        # what a notebook cell shows: which run's policy this is, not an object address
        d = self.__dict__  # never through __getattr__, which refuses the Agent's names
        space = d.get("action_space")
        if isinstance(space, gym.spaces.Discrete):  # gymnasium's own form: Discrete(3, start=1)
            actions = f"Discrete({int(space.n)}" + (f", start={int(space.start)})" if int(space.start) else ")")
        elif isinstance(space, gym.spaces.MultiDiscrete):
            start = np.asarray(space.start)
            actions = (f"MultiDiscrete({np.asarray(space.nvec).tolist()}"
                       + (f", start={start.tolist()})" if start.any() else ")"))
        elif isinstance(space, gym.spaces.Box):
            actions = f"Box{tuple(space.shape)}"
        elif isinstance(space, gym.spaces.MultiBinary):  # gymnasium's own form: MultiBinary(6), MultiBinary((2, 3))
            shape = tuple(int(n) for n in space.shape)
            actions = f"MultiBinary({shape[0] if len(shape) == 1 else shape})"
        else:
            actions = "?" if space is None else type(space).__name__
        encoder = getattr(d.get("agent"), "encoder_kind", None) or (d.get("config") or {}).get("encoder")
        step = d.get("global_step")
        return (f"{type(self).__name__}(env_id={d.get('env_id')!r}, actions={actions}, encoder={encoder!r}, "
                f"device='{d.get('device')}', step={step if step is not None else '?'})")

    def eval(self) -> "Policy":
        """The policy itself, its network and normalizer in eval mode (as act() uses them): the
        ``policy.eval()`` an nn.Module's caller writes before inference keeps the policy, whether it
        came from load() or train()."""
        self.agent.eval()
        if self.obs_normalizer is not None:
            self.obs_normalizer.eval()
        return self

    def as_module(self) -> torch.nn.Module:
        """The policy as one ``torch.nn.Module`` to deploy (proxima.export.PolicyModule): on the CPU, in eval
        mode, with copies of the weights and of the frozen observation normalizer. ``module(obs)``, obs a tensor
        (B, *obs_shape) (float32; uint8 for images; a Dict's keys packed (B, D) in the order of
        ``observation_space``), gives the deterministic actions ``policy.act(obs)`` gives for that batch
        (normalized, the network's mean or argmax, clamped to Box bounds, a Discrete/MultiDiscrete start
        added, shaped and typed as the action space), with no checks of the values: exactly act's for batches of
        up to 4,096 rows (the network's ``kernel_rows``), equal up to float32 rounding for larger ones, which act
        runs through mlp_cpu's kernel (a Box action in its last bits, a discrete one only at a tie). For
        ``torch.jit.trace(module, example)`` and ``torch.export.export(module, (example,))``; ``torch.jit.script``
        does not take the network (docs/python_api.md, "Exporting the policy")."""
        if self.observation_space is None or self.action_space is None:
            raise ValueError("Policy.as_module: this policy was built without its observation and action spaces, which "
                             "the module's input and output shapes come from; load(run_dir) one from its run")
        from .export import PolicyModule

        return PolicyModule(self)

    def check_env_spaces(self, env) -> None:
        """CheckpointError, one line naming the checkpoint, the spaces it was trained on and the env's,
        when ``env`` (a BatchedEnv, a gymnasium vector env or a single env) has another observation
        layout or action kind / count than this policy was trained on: an agent fed another env's
        tensors fails deep in a matrix product, or silently acts on the wrong actions. Another
        Discrete/MultiDiscrete start, Box action bounds or dtype is refused too (action_difference):
        act() would shape actions for the trained space, evaluate() for the env's. Observation Box
        bounds may differ (the agent does not depend on them)."""
        if self.observation_space is None or self.action_space is None:  # a policy built without spaces
            return
        env_obs, env_act = _single_space(env, "observation"), _single_space(env, "action")
        name = _env_name(env)  # the env given, which need not be the policy's own
        if (_obs_signature(env_obs) == _obs_signature(self.observation_space)
                and _action_signature(env_act) == _action_signature(self.action_space)):
            differs = action_difference_line(self.path or "policy", name, env_act, self.action_space,
                                             "evaluate it on the env it was trained on, or train a new run on this one")
            if differs:
                raise EnvMismatchError(differs)
            return
        stacked = old_frame_stack_line(self.path or "policy", name, self.observation_space, env_obs, "evaluate")
        if stacked:
            raise EnvMismatchError(stacked)
        raise EnvMismatchError(f"{self.path or 'policy'}: trained on observations {describe_space(self.observation_space)} "
                              f"and actions {describe_space(self.action_space)}; env '{name}' has "
                              f"{describe_space(env_obs)} and {describe_space(env_act)}")

    def predict(self, observation, state=None, episode_start=None, deterministic: bool = False):
        """Stable-Baselines3's ``model.predict``: ``(actions, None)``, the actions as ``act`` gives them
        (numpy in, numpy out). SB3's default is a stochastic action (``deterministic=False``); ``act``'s
        is the deterministic one. ``state``/``episode_start`` are taken for SB3's signature: these
        policies keep no recurrent state, so a state given is refused rather than ignored."""
        if state is not None:
            raise ValueError("Policy.predict: state=... given, but this policy has no recurrent state; pass state=None")
        check_switch(deterministic, "Policy.predict", "deterministic")  # 'False' is a true string
        self._check_container(observation, "predict")
        return self.act(observation, deterministic=deterministic), None

    def _check_container(self, obs, method: str) -> None:
        """ValueError, one line, for a tuple or list that holds dicts: Gymnasium's ``(obs, info)`` pair (what
        ``env.reset()`` returns), or a list of Dict observations (numpy's 'inhomogeneous shape' and float()
        errors named neither)."""
        if not isinstance(obs, (tuple, list)) or not obs or not any(isinstance(o, dict) for o in obs):
            return
        space = self.__dict__.get("observation_space")
        keys = set(space.spaces) if isinstance(space, gym.spaces.Dict) else set()
        # an info dict lacks a key of a Dict observation or holds another one (info's own, 'x'): (obs, info)
        if isinstance(obs, tuple) and len(obs) == 2 and isinstance(obs[1], dict) and (not keys or set(obs[1]) != keys):
            raise ValueError(f"Policy.{method}: obs is a (obs, info) pair as env.reset() returns it: pass obs "
                             "(obs, info = env.reset())")
        if keys and len(obs) == 1 and isinstance(obs[0], dict):  # a stray trailing comma: obs = (obs_dict,)
            raise ValueError(f"Policy.{method}: obs is a {type(obs).__name__} of 1 dict: give the dict itself "
                             "(obs[0]); a batch is one dict of stacked arrays ({key: (B, ...)})")
        if keys and all(isinstance(o, dict) for o in obs):
            raise ValueError(f"Policy.{method}: obs is a {type(obs).__name__} of {len(obs)} dicts: give one dict of "
                             "stacked arrays ({key: (B, ...)}), {k: np.stack([o[k] for o in obs]) for k in obs[0]}")
        raise ValueError(f"Policy.{method}: obs is a {type(obs).__name__} holding dicts; this policy takes "
                         + ("one dict of arrays ({key: (B, ...)})" if keys else "an array or tensor of observations"))

    @torch.no_grad()
    def act(self, obs, deterministic: bool = True):
        """obs (B, *obs_shape) or (*obs_shape,), numpy or tensor -> actions of the same kind, as the
        action space defines them (envs.spaces.env_actions), which is how a Gymnasium env's ``step``
        and every BatchedEnv's ``step`` (``make_env``) take them: Box actions clipped to the bounds and
        shaped and typed as the action space, Discrete/MultiDiscrete actions with the space's
        ``start`` (Discrete(3, start=1): 1..3). For a policy of a native env (``env_backend`` "native": a
        NativeEnv, docs/native_envs.md) the actions its ``_dynamics`` gets in training instead: flat,
        (B,) or (B, K) int64 for Discrete, MultiDiscrete and MultiBinary (with the start), (B, prod(shape))
        float32 for a Box (clipped), whatever the space's shape and dtype. obs_shape as the env's tensors (envs/spaces.py): a
        flat vector, an image (uint8), or a Dict's packed keys, or the Box's own shape where the env
        declared another ((1, 4), a scalar's ()); a Dict observation may also be given as a dict of
        arrays or tensors (batched or not). Shapes are held to these, not to their element count
        (ValueError naming the shape given and those taken); B = 0 gives an empty batch of actions;
        a NaN/inf in float observations is a ValueError naming its row and column, and so are pixels outside
        the range an image declares where the network would read them unscaled (a 0/1 board Box(0, 1, ...,
        np.uint8) given 0..255, a float image in [0, 1] under the CNN given uint8 or 0..255 pixels)."""
        from .envs.spaces import ObsLayout, ObsPart, action_offset, env_actions, obs_layout, pack_numpy

        deterministic = check_switch(deterministic, "Policy.act", "deterministic")  # 'False' is a true string
        self._check_container(obs, "act")  # before np.shape reads it
        given = obs  # as the caller gave it: _check_pixel_bounds names its dtype
        if self.observation_space is not None:
            layout = obs_layout(self.observation_space, self.env_id)
        else:  # no space given: flat float vectors of whatever size comes
            size = int(np.prod(np.shape(obs)[-1:])) if np.ndim(obs) else 1
            layout = ObsLayout((ObsPart(None, (size,), None, 0, size),), (size,), torch.float32, False)
        np_dtype = np.uint8 if layout.dtype == torch.uint8 else np.float32
        from_dict = isinstance(obs, dict)
        if from_dict and not layout.is_dict:  # its keys would be looked up as None (no Dict space names any)
            one = self._one_shapes(layout)[0][0]
            batch = "(" + ", ".join(["B", *map(str, one)]) + ("," if not one else "") + ")"
            raise ValueError(f"Policy.act: obs is a dict (keys {', '.join(map(repr, list(obs)[:4]))}), but this policy "
                             f"takes a single array or tensor observation of shape {one} (or a batch {batch}), not a dict")
        if from_dict:
            is_numpy = not any(isinstance(v, torch.Tensor) for v in obs.values())
            obs = {k: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else v for k, v in obs.items()}
            missing = [part.key for part in layout.parts if part.key not in obs]
            if missing:
                keys = ", ".join(repr(part.key) for part in layout.parts)
                raise ValueError(f"Policy.act: obs lacks the key {missing[0]!r} (the policy's observations have {keys})")
            for part in layout.parts:
                if part.layout is not None and part.key in obs:
                    self._check_image_shape(obs[part.key], part, f"obs['{part.key}']")
                    self._check_pixel_values(obs[part.key], part, f"obs['{part.key}']", is_numpy, layout)
            batched, n = self._dict_batch(obs, layout)
            obs = pack_numpy(obs if batched else {k: np.asarray(v)[None] for k, v in obs.items()}, layout, n)
            obs = obs if batched else obs[0]
        else:
            is_numpy = not isinstance(obs, torch.Tensor)
            if layout.dtype == torch.uint8 and layout.has_image:  # uint8 pixels (an image, or a Dict of uint8 keys with one)
                part = next(p for p in layout.parts if p.layout is not None)
                if layout.is_image:  # a Dict's keys come packed (B, D): no image shape to hold them to
                    self._check_image_shape(obs, part, "obs")
                self._check_pixel_values(obs, part, "obs", is_numpy, layout)
        if isinstance(obs, np.ndarray) or is_numpy:
            if obs is None or isinstance(obs, (str, bytes)):  # None read as a NaN of shape (), text as float()'s error
                raise self._not_observations(obs, "", layout)
            try:
                obs = np.asarray(obs, dtype=np_dtype)
            except (TypeError, ValueError) as e:  # ['a', 'b'], object(): numpy's bare "could not convert ..."
                raise self._not_observations(obs, f" ({e})", layout) from None
            if any(s < 0 for s in obs.strides):  # a flipped view (BGR->RGB frame[..., ::-1]), which torch cannot wrap
                obs = np.ascontiguousarray(obs)
        x = torch.as_tensor(obs, dtype=layout.dtype, device=self.device)
        if not from_dict:  # a dict's keys were held to their shapes by _dict_batch
            batched, n = self._array_batch(tuple(x.shape), layout)
        single = not batched
        if n == 0:  # an empty batch: no rows to act on (a Dict or image encoder cannot reshape zero of them)
            probe = torch.zeros((1, *layout.shape), dtype=layout.dtype, device=self.device)
            action = self.batched_act(probe, deterministic=True)[:0]  # its shape and dtype only; draws nothing
        else:
            x = x.reshape(n, *layout.shape)
            self._check_finite(x, layout, batched)
            self._check_pixel_bounds(x, layout, given, is_numpy)
            action = self.batched_act(x, deterministic)
        if self.action_space is not None and self.env_backend == "native":
            # a NativeEnv's _dynamics gets what training gave it (ppo.collect_rollout): the agent's flat actions,
            # offset by the space's start, in its dtype (int64, or float32 for a Box), never the space's own shape
            offset = action_offset(self.action_space, action.device)
            out = (action if offset is None else action + offset).cpu().numpy()
        else:
            out = action.cpu().numpy()
            if self.action_space is not None:
                out = env_actions(out, self.action_space, n)
        if single:
            out = out[0]
        return out if is_numpy else torch.as_tensor(out, device=action.device)

    @staticmethod
    def _dict_batch(obs: dict, layout) -> tuple:
        """(batched, n) of a dict observation, the first key deciding: every key one observation in its
        own shape, or every key a batch (n, *its shape) of the same n, n = 0 included (a key of one value
        may come as (B,)); ValueError naming the key that is neither (numpy's reshape error named no key)."""
        first = layout.parts[0]
        a0 = np.asarray(obs[first.key])
        batched = a0.ndim > len(first.shape)
        n = len(a0) if batched else 1
        for part in layout.parts:
            a = np.asarray(obs[part.key])
            if part.size > 1:  # held to the key's shape: a (2, 2) key given as (4,) would be read scrambled
                if a.shape == ((n, *part.shape) if batched else tuple(part.shape)):
                    continue
            elif a.size == n and (not batched or (a.ndim >= 1 and len(a) == n)):
                continue
            if part is first:
                raise ValueError(f"Policy.act: obs[{part.key!r}] of shape {a.shape} is neither one observation of shape "
                                 f"{part.shape} nor a batch (B, *{part.shape})")
            what = f"a batch of {n} like" if batched else "one observation like"
            raise ValueError(f"Policy.act: obs[{part.key!r}] of shape {a.shape} is not {what} obs[{first.key!r}] of "
                             f"shape {a0.shape} (each of shape {part.shape})")
        return batched, n

    def _one_shapes(self, layout) -> tuple:
        """(shapes of one observation, shapes each row of a batch may have): the tensors' shape
        (``layout.shape``) and the Box the env declared (a (1, 4) Box whose tensors are flat (4,)). A
        scalar Box (declared (), tensors (1,)): one observation is a 0-d value, a batch (B,) or (B, 1),
        so the (1,) of a one-env vector env is a batch of one (its step takes (1,) actions back)."""
        flat = tuple(layout.shape)
        declared = getattr(self.observation_space, "declared", None)
        declared = tuple(declared.shape) if declared is not None else None
        if declared == ():
            return ((),), ((), flat)
        if declared is not None and declared != flat:
            return (declared, flat), (declared, flat)
        # a one-value observation recorded before declared shapes were (or without a space): a scalar is one too
        return ((flat, ()) if flat == (1,) else (flat,)), (flat,)

    def _array_batch(self, shape: tuple, layout) -> tuple:
        """(batched, n) of an array observation of ``shape``: one observation, or a batch (B, *shape)
        of any B, 0 included. Held to the shapes themselves, not their element count: (2, 2) or (4, 1)
        hold as many values as one CartPole observation (4,) and were acted on as one. ValueError, one
        line naming the shape given and the shapes taken."""
        ones, rows = self._one_shapes(layout)
        if shape in ones:
            return False, 1
        if len(shape) >= 1 and shape[1:] in rows:
            return True, shape[0]
        if rows == ((1,),) and len(shape) == 1:  # one value per observation (a scalar without a declared shape): (B,) is B of them
            return True, shape[0]

        raise ValueError(f"Policy.act: obs of shape {shape} does not hold (B, *{tuple(layout.shape)}) observations of "
                         f"{self.env_id}: {self._shapes_taken(layout)}")

    def _not_observations(self, obs, why: str, layout) -> ValueError:
        """Policy.act's line for an obs that holds no numbers (None, a string, a list of strings), ``why`` numpy's words."""
        shown = " ".join(_short_repr(obs).split())  # an array's repr spans lines: the line stays one line
        return ValueError(f"Policy.act: obs = {shown}: not observations of {self.env_id}{why}; "
                          f"{self._shapes_taken(layout)} (an array or tensor)")

    def _shapes_taken(self, layout) -> str:
        """'give one observation of shape (4,), or a batch of shape (B, 4)': what Policy.act takes."""
        ones, rows = self._one_shapes(layout)

        def batch(s: tuple) -> str:
            return str(("B", *s)).replace("'B'", "B")

        return (f"give one observation of shape {' or '.join(map(str, ones))}, or a batch of shape "
                f"{' or '.join(batch(s) for s in rows)}")

    def _check_finite(self, x: torch.Tensor, layout, batched: bool) -> None:
        """ValueError, one line naming the row and column, for a NaN/inf in float observations ``x``
        (n, *layout.shape), as training and evaluate() refuse them (guards.py): the network would
        turn it into a NaN action, or into the last action index, without a word. Integer observations
        are always finite and are not read."""
        if not x.is_floating_point():
            return
        flat = x.reshape(x.shape[0], -1)
        bad = ~torch.isfinite(flat)
        if not bool(bad.any()):
            return
        i, j = (int(v) for v in torch.nonzero(bad)[0])
        part = next(p for p in layout.parts if p.offset <= j < p.offset + p.size)
        where = f"column {j - part.offset}" + (f" of obs[{part.key!r}]" if part.key is not None else "")
        where = f"row {i}, {where}" if batched else where
        raise ValueError(f"Policy.act: non-finite observation value {float(flat[i, j])} at {where}; a policy acts on finite "
                         "observations only (training and evaluation refuse them too): replace it, or find where it came from")

    def _check_image_shape(self, x, part, name: str) -> None:
        """ValueError, one line naming the expected and given shapes, unless ``x`` is one image of
        ``part``'s shape or a batch of them: a CHW frame given to an HWC policy (or a flat one) holds
        as many values as the image, and would be reshaped into it and acted on scrambled."""
        shape, n = tuple(np.shape(x)), len(part.shape)
        if shape[-n:] == part.shape and len(shape) in (n, n + 1):
            return
        from .envs.spaces import layout_words

        axes = layout_words(part.layout)
        permuted = len(shape) >= n and sorted(shape[-n:]) == sorted(part.shape)
        fix = "move its channel axis (np.moveaxis, torch.movedim)" if permuted else f"give each image as {part.shape}"
        raise ValueError(f"Policy.act: {name} of shape {shape} does not hold (B, *{part.shape}) observations of "
                         f"{self.env_id}: its images are {part.shape}, {axes}; {fix}")

    def _check_pixel_values(self, x, part, name: str, is_numpy: bool = True, layout=None) -> None:
        """ValueError, one line, for pixels the cast to uint8 would change: floats (pixels in [0, 1]
        would all become 0, a black frame; the words of the adapter's check on the env's images,
        envs/gym_adapter.py, the fix in torch's words for a tensor caller) and integers outside
        0..255 (the cast wraps them: 300 becomes 44)."""
        from .envs.spaces import box_range, uint8_pixels

        dtype = x.dtype if isinstance(x, (np.ndarray, np.generic, torch.Tensor)) else np.asarray(x).dtype
        if dtype in (torch.uint8, np.uint8):
            return  # the common case: no values read
        dtype_name = str(dtype).replace("torch.", "")
        images = f"{self.env_id}'s observations are uint8 images {part.shape}"
        if dtype in (torch.bool, np.bool_):  # True is 1: a 0/1 board's pixel, but 1/255 of a 0..255 image's white
            if box_range(part.source)[1] <= 1:
                return
            raise ValueError(f"Policy.act: {name} holds bool pixels where {images} 0..255 (True would be read as 1 of "
                             f"255, near black); pass uint8 pixels 0..255 ({name} * 255 as uint8 for a mask)")
        if isinstance(dtype, torch.dtype):
            numeric = not dtype.is_complex and dtype not in (torch.quint8, torch.qint8, torch.qint32)
        else:
            numeric = np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating)
        if not numeric and (dtype.is_complex if isinstance(dtype, torch.dtype) else np.issubdtype(dtype, np.complexfloating)):
            raise ValueError(f"Policy.act: {name} holds {dtype_name} pixels where {images} (the cast drops the "
                             "imaginary part: 3+1j would be 3); pass real pixels 0..255")
        if not numeric:  # str, object (None), datetime64: numpy's own TypeError on min() before
            raise self._not_observations(x, f" ({name} holds {dtype_name} values)", layout)
        floating = dtype.is_floating_point if isinstance(dtype, torch.dtype) else np.issubdtype(dtype, np.floating)
        values = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
        if floating and not np.isfinite(values).all():  # (obs * 255).astype(np.uint8) would make NaN a pixel
            bad = values[~np.isfinite(values)].flat[0]
            raise ValueError(f"Policy.act: {name} holds non-finite pixels ({bad}) where {images}; pass finite "
                             "pixels 0..255 (check the camera or preprocessing that made them)")
        if floating:
            # from the range the space declares (a 0/1 board is cast, not scaled by 255), as check-env advises
            _, fix = uint8_pixels(part.source, name, values, tensor=not is_numpy)
            raise ValueError(f"Policy.act: {name} holds {dtype_name} pixels where {self.env_id}'s observations are uint8 "
                             f"images {part.shape} (the network scales the declared range to [0, 1] itself); pass {fix}")
        lo, hi = (int(values.min()), int(values.max())) if values.size else (0, 0)
        if lo < 0 or hi > 255:
            bad = lo if lo < 0 else hi
            raise ValueError(f"Policy.act: {name} holds {dtype_name} pixels from {lo} to {hi} "
                             f"where {self.env_id}'s observations are uint8 images {part.shape}; the cast to uint8 would "
                             f"wrap them ({bad} would be {bad % 256}): pass pixels 0..255")

    def _pixel_bounds(self, layout) -> tuple:
        """((part, low, high), ...): the images of ``layout`` whose pixels can fall outside the range the
        network scales to [0, 1], ``low``/``high`` None where none can: a uint8 image declared narrower than
        0..255 (gym_adapter.image_bounds, the range training and evaluation hold the env's pixels to), and a
        float image in [0, 1] that the CNN reads as it is (nets.cnn_image). Empty for the common 0..255 image,
        which act() then reads no value of. Once per space and encoder: act() may be called every step."""
        space = self.__dict__.get("observation_space")
        encoder = getattr(self.__dict__.get("agent"), "encoder_kind", None)
        cached = self.__dict__.get("_pixel_bounds_of")
        if cached is None or cached[0] is not space or cached[1] != encoder:
            from .envs.gym_adapter import image_bounds
            from .nets import cnn_image

            found = []
            for part in layout.parts:
                bounds = image_bounds(part)
                if bounds is not None:
                    found.append((part, *bounds))
                elif encoder == "cnn" and not layout.is_dict and part.layout is None and (cnn_image(part) or (0, 0, False))[2]:
                    found.append((part, 0.0, 1.0))
            cached = (space, encoder, tuple(found))
            self.__dict__["_pixel_bounds_of"] = cached
        return cached[2]

    def _check_pixel_bounds(self, x: torch.Tensor, layout, given, is_numpy: bool) -> None:
        """ValueError, one line, for pixels in ``x`` (n, *layout.shape) outside the range an image declares
        (:meth:`_pixel_bounds`): a 0/1 board Box(0, 1, ..., np.uint8) given 0..255 pixels would reach the
        network as 255 where it trained on 1 (training and evaluation refuse such pixels from the env), and
        a float image in [0, 1] given uint8 or 0..255 pixels is read as they are, not scaled. A max (and a
        min where a low is declared) over the batch, only for such images. ``given``: the obs as the caller
        gave it, whose dtype the line names."""
        for part, low, high in self._pixel_bounds(layout):
            v = x if not layout.is_dict else x[:, part.offset:part.offset + part.size]
            if not v.numel():
                continue
            top = v.max().item() if high is not None else None
            bottom = v.min().item() if low is not None else None
            name = "obs" if part.key is None else f"obs['{part.key}']"
            if part.layout is None:  # a float image in [0, 1], which the CNN reads as it is
                self._unit_pixels_error(name, part, given, top, bottom, is_numpy)
                continue
            if top is not None and top > high:
                value, side = int(top), "above the declared high"
            elif bottom is not None and bottom < low:
                value, side = int(bottom), "below the declared low"
            else:
                continue
            from .envs.spaces import box_range
            from .nets import pixel_range

            lo, hi = (int(b) for b in box_range(part.source))
            bound = hi if side.endswith("high") else lo
            scale_lo, scale_hi = pixel_range(part)
            fed = (value - scale_lo) / (scale_hi - scale_lo)
            if side.startswith("above") and lo == 0:
                frac = f"{name} / 255" + (f" * {hi}" if hi != 1 else "")
                scaled = f"({frac}).round().to(torch.uint8)" if not is_numpy else f"np.round({frac}).astype(np.uint8)"
                scaled = f", 0..255 pixels scaled to it as {scaled}"
            else:
                scaled = ""
            raise ValueError(f"Policy.act: {name} holds the pixel value {value}, {side} {bound} of {self.env_id}'s uint8 images "
                             f"{part.shape} (Box({lo}, {hi})); the network scales {lo}..{hi} to [0, 1], so {value} would reach "
                             f"it as {fed:.4g} (training and evaluation refuse such pixels from the env): pass pixels "
                             f"{lo}..{hi} as the env returns them{scaled}")

    def _unit_pixels_error(self, name: str, part, given, top, bottom, is_numpy: bool) -> None:
        """_check_pixel_bounds' line for a float image in [0, 1] given pixels outside it (``top``/``bottom``:
        the batch's max and min), the mirror of the float pixels a uint8 policy refuses (_check_pixel_values)."""
        if (top is None or top <= 1) and (bottom is None or bottom >= 0):
            return
        raw = given if part.key is None else given[part.key]
        dtype = raw.dtype if isinstance(raw, (np.ndarray, np.generic, torch.Tensor)) else np.asarray(raw).dtype
        floating = dtype.is_floating_point if isinstance(dtype, torch.dtype) else np.issubdtype(dtype, np.floating)
        dtype_name = str(dtype).replace("torch.", "")
        what = (f"{self.env_id}'s observations are {np.dtype(part.source.dtype)} images {tuple(part.source.shape)} in [0, 1] "
                "(Box(0.0, 1.0)), which the CNN reads as they are, not scaled")
        if top > 1 and not floating:
            scaled = f"{name}.float() / 255" if not is_numpy else f"{name}.astype(np.float32) / 255"
            raise ValueError(f"Policy.act: {name} holds {dtype_name} pixels up to {top:g} where {what} (a cast: {top:g} would "
                             f"reach it as {top:g}, not {top / 255:.4g}); pass pixels in [0, 1]: {scaled} for 0..255 pixels")
        if top > 1:
            raise ValueError(f"Policy.act: {name} holds the pixel value {top:g}, above the declared high 1 where {what}; pass "
                             f"pixels in [0, 1]: {name} / 255 for 0..255 pixels")
        raise ValueError(f"Policy.act: {name} holds the pixel value {bottom:g}, below the declared low 0 where {what}; pass "
                         "pixels in [0, 1], as the env returns them")

    def _check_batched_obs(self, obs) -> None:
        """ValueError unless ``obs`` is a tensor of the dtype the network reads (the env's packed tensors)."""
        if not isinstance(obs, torch.Tensor):
            what = f"a dict (keys {', '.join(map(repr, list(obs)[:4]))})" if isinstance(obs, dict) else f"a {type(obs).__name__}"
            raise ValueError(f"Policy.batched_act: obs is {what}, it takes a tensor of the env's packed observations; "
                             "call policy.act(obs) for a Gymnasium env's own observations (it packs and casts them)")
        space = self.__dict__.get("observation_space")
        cached = self.__dict__.get("_obs_dtype_of")
        if cached is None or cached[0] is not space:  # once per space: evaluate() calls this every step
            from .envs import EnvError
            from .envs.spaces import obs_layout

            try:
                dtype = torch.float32 if space is None else obs_layout(space, self.env_id).dtype
            except EnvError:  # a space act() names itself
                dtype = None
            cached = (space, dtype)
            self.__dict__["_obs_dtype_of"] = cached
        if cached[1] is not None and obs.dtype != cached[1]:
            raise ValueError(f"Policy.batched_act: obs is a tensor of dtype {obs.dtype}, the policy's network takes "
                             f"{cached[1]} (the env's packed observations); call policy.act(obs) for a Gymnasium env's "
                             f"own observations (it casts them), or pass obs.to({cached[1]})")

    @torch.no_grad()
    def batched_act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """obs (B, *obs_shape) tensor on the policy's device -> the agent's actions: Discrete (B,)
        indices from 0, MultiDiscrete (B, K) indices from 0, Box (B, prod(shape)) clipped to the
        bounds, all on the device (no host copy). A BatchedEnv's ``step`` takes the space's values:
        add ``env.action_offset`` (a Discrete/MultiDiscrete start; None when every start is 0) first,
        as evaluate() does, or use :meth:`act`. Anything else (a dict, an array, an int or bool tensor
        of the env's raw observations) is a ValueError naming it and pointing to act(), which packs and
        casts them, never a dtype error from inside the network."""
        self._check_batched_obs(obs)
        if self.obs_normalizer is not None:
            obs = self.obs_normalizer(obs, update=False)
        action = self.agent.act(obs, deterministic=deterministic)
        if isinstance(self.action_space, gym.spaces.Box):
            # as in training (collect_rollout): the env gets the action clipped to its bounds
            low = torch.as_tensor(self.action_space.low.reshape(-1), dtype=action.dtype, device=action.device)
            high = torch.as_tensor(self.action_space.high.reshape(-1), dtype=action.dtype, device=action.device)
            action = torch.clamp(action, low, high)
        return action


#: the largest seed a run takes (config.MAX_SEED), hidden layer width and layer count a policy is rebuilt with:
#: a file's config is data, and the network it describes is allocated before its weights are compared
_MAX_SEED = 2**31 - 1
_MAX_WIDTH = MAX_HIDDEN_WIDTH
_MAX_LAYERS = MAX_HIDDEN_LAYERS

#: config fields a policy is rebuilt and evaluated from: name -> (check, what it must be); others are not read
_POLICY_FIELDS = {
    "env_id": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    "seed": (lambda v: _is_int(v) and 0 <= v <= _MAX_SEED, f"an integer from 0 to {2**31 - 1:,}"),
    "hidden_sizes": (lambda v: isinstance(v, (list, tuple)) and len(v) <= _MAX_LAYERS and all(_is_int(h) and 1 <= h <= _MAX_WIDTH for h in v),
                     "a list of positive widths"),
    "activation": (lambda v: v in ("tanh", "relu"), "tanh or relu"),
}
def _nesting_ok(value) -> bool:
    """Whether ``value`` nests at most MAX_NESTING deep (json.dumps and config.plain recurse on it) and
    holds at most MAX_NESTED_VALUES values written out (a pickle can share one list many times over)."""
    from .config import MAX_NESTING, nesting_depth

    return nesting_depth(value) <= MAX_NESTING


#: fields older checkpoints may lack (encoder: flat-Box MLP agents) and those read only when present
_OPTIONAL_FIELDS = {
    "encoder": (lambda v: v in ("auto", "cnn", "mlp"), "auto, cnn or mlp"),
    "clip_obs": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0, "a positive number"),
    "env_kwargs": (lambda v: v is None or (isinstance(v, dict) and _nesting_ok(v)),
                   "a mapping nested at most 32 levels deep, of at most 1,000,000 values"),
    "backend": (lambda v: isinstance(v, str), "a string"),
}


def check_statistics(path, field: str, stats: dict) -> None:
    """CheckpointError naming the file and the tensor unless a normalizer's statistics are finite,
    its variances >= 0 and its count > 0: sqrt(var + eps) of a negative variance is NaN or scales
    observations wrong without a word; a NaN would first show as a "non-finite loss" blamed on the run."""
    for name, value in stats.items():
        check_finite_tensor(path, f"{field}.{name}", value)
        if not value.is_floating_point():  # not a statistic Proxima writes (_check_like refuses its dtype)
            continue
        if name.endswith("var") and bool((value < 0).any()):
            bad, what, why = int((value < 0).sum()), "negative", "a variance is >= 0"
        elif name.endswith("count") and bool((value <= 0).any()):
            bad, what, why = int((value <= 0).sum()), "zero or negative", "a count is > 0"
        else:
            continue
        raise CheckpointError(f"{path}: {field}.{name} holds {bad} {what} value(s) of {value.numel()} ({why}); the "
                              "checkpoint is damaged or was edited (an earlier checkpoint of the run may be intact)")


def check_policy_state(state: dict) -> dict:
    """The parts of a loaded checkpoint a policy is built from, checked; CheckpointError naming the file
    and the field otherwise (``config is not a mapping``, ``spaces.action: not a recorded space (...)``):
    load_checkpoint checks the keys are there, this checks what they hold. Returns the config."""
    path = state.get("path", "checkpoint")
    cfg = state["config"]
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{path}: config is not a mapping ({_describe(cfg)})")
    for name, (ok, wanted) in _POLICY_FIELDS.items():
        if name not in cfg:
            raise CheckpointError(f"{path}: config has no '{name}'")
        if not ok(cfg[name]):
            raise CheckpointError(f"{path}: config.{name} is {_one_line(reprlib.repr(cfg[name]), 60)}, not {wanted}")
    for name, (ok, wanted) in _OPTIONAL_FIELDS.items():
        if name in cfg and not ok(cfg[name]):
            raise CheckpointError(f"{path}: config.{name} is {_one_line(reprlib.repr(cfg[name]), 60)}, not {wanted}")
    if state.get("obs_normalizer") is not None and "clip_obs" not in cfg:
        raise CheckpointError(f"{path}: config has no 'clip_obs' (the observation normalizer needs it)")
    spaces = state["spaces"]
    if not isinstance(spaces, dict):
        raise CheckpointError(f"{path}: spaces is not a mapping ({_describe(spaces)})")
    for key in ("observation", "action"):
        if key not in spaces:
            raise CheckpointError(f"{path}: spaces has no '{key}'")
    for key in ("agent", "obs_normalizer"):  # weights: a dict of tensors (no normalizer: None)
        if not isinstance(state.get(key), dict) and not (key == "obs_normalizer" and state.get(key) is None):
            raise CheckpointError(f"{path}: {key} is not a mapping of weights ({_describe(state.get(key))})")
        for name, value in (state.get(key) or {}).items():
            check_finite_tensor(path, f"{key}.{name}", value)
            # an int or bool weight loads by a silent cast (every weight under 1 becomes 0): another policy
            if not value.is_floating_point():
                raise CheckpointError(f"{path}: {key}.{name} has dtype {_dtype_name(value)}; Proxima writes weights and "
                                      "statistics as floating point; the checkpoint is damaged or was edited")
    if state.get("obs_normalizer"):  # a negative variance would scale every observation wrong, silently
        check_statistics(path, "obs_normalizer", state["obs_normalizer"])
    return cfg


def _dtype_name(value: torch.Tensor) -> str:
    return str(value.dtype).replace("torch.", "")


def check_finite_tensor(path, field: str, value) -> None:
    """CheckpointError naming the file and ``field`` when ``value`` is not a tensor, or a floating
    one holding NaN or inf (a policy with such weights acts on garbage; a resume would blame the env)."""
    if not isinstance(value, torch.Tensor):
        raise CheckpointError(f"{path}: {field} is {_describe(value)}, not a tensor")
    if (value.is_floating_point() or value.is_complex()) and value.numel() and not bool(torch.isfinite(value).all()):
        bad = int((~torch.isfinite(value)).sum())
        raise CheckpointError(f"{path}: {field} holds {bad} non-finite value(s) (NaN or inf) of {value.numel()}; "
                              "the checkpoint is damaged or was edited (an earlier checkpoint of the run may be intact)")


def _env_name(env) -> str:
    """What to call ``env`` in a line: its id (a BatchedEnv's env_id, a Gymnasium env's spec id), else its class."""
    for name in (getattr(env, "env_id", None), getattr(getattr(env, "spec", None), "id", None)):
        if isinstance(name, str) and name:
            return name
    return type(getattr(env, "unwrapped", env)).__name__


def _single_space(env, kind: str):
    """One env's observation or action space of a batched env (``single_*``), else the env's own."""
    single = getattr(env, f"single_{kind}_space", None)
    return single if single is not None else getattr(env, f"{kind}_space")


def build_agent(state: dict, device="cpu"):
    """Rebuild (agent, obs_normalizer, observation_space, action_space) from a loaded checkpoint.

    Every way the file's data can fail to describe an agent is a CheckpointError naming the file
    (check_policy_state, space_from_dict, and weights that do not fit the recorded config)."""
    from .config import ConfigError
    from .envs import EnvError
    from .normalize import ObsNormalizer

    path = state.get("path", "checkpoint")
    cfg = check_policy_state(state)
    obs_space, act_space, make = _agent_maker(state)
    from .envs.spaces import obs_layout

    check_agent_weights(state, make)
    try:
        agent = make().to(device)
    except (EnvError, ConfigError, ValueError, TypeError, OverflowError, RuntimeError, MemoryError) as e:
        raise CheckpointError(f"{path}: the recorded spaces and config do not describe an agent ({_one_line(e, 160)})") from None
    try:
        agent.load_state_dict(state["agent"])
        obs_norm = None
        if state.get("obs_normalizer") is not None:
            obs_norm = ObsNormalizer(obs_layout(obs_space).shape, clip=cfg["clip_obs"]).to(device)
            obs_norm.load_state_dict(state["obs_normalizer"])
    except (RuntimeError, KeyError) as e:
        raise CheckpointError(f"{path}: weights do not match the recorded config ({str(e).splitlines()[0][:160]})") from None
    return agent, obs_norm, obs_space, act_space


def _agent_maker(state: dict) -> tuple:
    """(observation space, action space, make): the recorded spaces and a function building the
    agent the recorded config and spaces describe (check_policy_state has checked the config)."""
    from .agent import Agent
    from .config import ABSENT_MEANS

    path, cfg = state.get("path", "checkpoint"), state["config"]
    obs_space = space_from_dict(state["spaces"]["observation"], f"{path}: spaces.observation")
    act_space = space_from_dict(state["spaces"]["action"], f"{path}: spaces.action")

    def make():  # checkpoints from before the encoder field hold flat-Box MLP agents (what a resume reads too)
        return Agent(obs_space, act_space, cfg["hidden_sizes"], cfg["activation"], cfg.get("encoder", ABSENT_MEANS["encoder"]))

    return obs_space, act_space, make


def check_agent_weights(state: dict, make=None) -> None:
    """CheckpointError naming the file unless the agent's weights have the shapes its recorded config
    and spaces give: eval's check, and a resume's choice of a run directory's checkpoint
    (train_state.check_consistent), so that an edited hidden_sizes falls back to an older file."""
    from .config import ConfigError
    from .envs import EnvError

    path = state.get("path", "checkpoint")
    if make is None:
        make = _agent_maker(state)[2]
    try:  # a recorded space or encoder the agent cannot use (an edited file): EnvError/ConfigError/ValueError
        # without memory (the meta device: shapes only): the weights the config describes are
        # compared with the file's before anything is allocated, so a small file cannot make eval
        # allocate a network of any size its config names
        from .trainer import hold_float32

        release = hold_float32()  # the dtypes a run writes, whatever the caller's default dtype
        try:
            with torch.device("meta"):
                built = make().state_dict()
        finally:
            release()
    except (EnvError, ConfigError, ValueError, TypeError, OverflowError, RuntimeError, MemoryError) as e:
        raise CheckpointError(f"{path}: the recorded spaces and config do not describe an agent ({_one_line(e, 160)})") from None
    check_weight_shapes(path, {k: tuple(v.shape) for k, v in built.items()}, state["agent"],
                        {k: v.dtype for k, v in built.items()})


def check_weight_shapes(path, expected: dict, weights: dict, dtypes: Optional[dict] = None) -> None:
    """CheckpointError naming the file and the first weight whose name or shape differs from the agent
    the recorded config and spaces describe (``expected``: name -> shape), or whose dtype differs from
    ``dtypes`` (name -> dtype, the agent's own): load_state_dict would cast it without a word."""
    missing = [k for k in expected if k not in weights]
    extra = [k for k in weights if k not in expected]
    if missing or extra:
        if missing and missing[0].endswith("pixel_range"):  # nets.pixel_range: recorded since 2026-12-03
            raise CheckpointError(f"{path}: written before Proxima scaled a uint8 image by its declared range (this "
                                  "observation space declares one other than 0..255, which was divided by 255): its "
                                  "policy saw other inputs than it would now; retrain it with this version")
        if missing and missing[0].endswith("frame_stack"):  # nets.FlatInput: a uint8 frame stack is an image since review 34
            raise CheckpointError(f"{path}: written before Proxima read a uint8 frame stack (N, H, W, C) as an image: its MLP "
                                  "read the stack's values unscaled (0..255), this version scales them to [0, 1]; retrain it "
                                  "with this version")
        what = f"no agent.{missing[0]}" if missing else f"an unexpected agent.{extra[0]}"
        raise CheckpointError(f"{path}: weights do not match the recorded config ({what}; config.hidden_sizes, "
                              "config.encoder and the spaces describe another network)")
    for name, shape in expected.items():
        if tuple(weights[name].shape) != shape:
            raise CheckpointError(f"{path}: weights do not match the recorded config (agent.{name} has shape "
                                  f"{tuple(weights[name].shape)}, the recorded config.hidden_sizes and spaces give {shape})")
    for name, dtype in (dtypes or {}).items():
        if isinstance(weights.get(name), torch.Tensor) and weights[name].dtype != dtype:
            raise CheckpointError(f"{path}: agent.{name} has dtype {_dtype_name(weights[name])}; Proxima writes this "
                                  f"weight as {str(dtype).replace('torch.', '')}; the checkpoint is damaged or was edited")


def check_registered(policy) -> None:
    """EnvError naming the --env to give when the run's env id is not registered in this process (a
    run trained from Python after importing the module that registers it): building it would only
    say "unknown env id". ``policy``: load_policy's result (its path names the run in the line)."""
    from .envs import EnvError, unregistered, unregistered_line

    if policy.env_id == policy.config.get("env_id") and unregistered(policy.env_id):
        kept = bool(policy.env_kwargs) and policy.env_kwargs_recorded
        raise EnvError(unregistered_line(policy.env_id, policy.path, "--env {env}", policy.env_entry_point, kwargs=kept))


#: the backends a run's env can have (BatchedEnv.backend), as meta.json records them
_BACKENDS = ("native", "gymnasium", "envpool")


def _meta_backend(path) -> Optional[str]:
    """The env_backend of the run holding the checkpoint ``path``, as its meta.json records it, for a file
    that does not (a population member's, written before members recorded it): None for a loose file, a
    run without meta.json or one recording none; a meta.json that is not JSON or records something else
    is read as none, in one note on stderr (act() then gives the action space's own shape)."""
    file = Path(path).absolute()
    if file.parent.name != "checkpoints":
        return None
    meta = file.parent.parent / "meta.json"
    from .rundir import read_run_json

    try:  # data: capped in size and nesting, never a FIFO's wait (read_run_json)
        record = read_run_json(meta)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        why = "not JSON" if isinstance(e, ValueError) else f"not readable ({_one_line(e, 80)})"
        record = None
    else:
        backend = record.get("env_backend") if isinstance(record, dict) else None
        if backend is None or backend in _BACKENDS:
            return backend
        why = (f"its env_backend is {_one_line(repr(backend), 40)}, none of {', '.join(_BACKENDS)}" if isinstance(record, dict)
               else "not a JSON object")
    print(f"proxima: note: {meta}: {why}, and {file.name} records no env_backend: act() gives actions in the action "
          "space's own shape (a native env's step takes them flat, (B, prod(shape)): reshape them)", file=sys.stderr)
    return None


def load_policy(path: Union[str, Path], device="cpu", env_id: Optional[str] = None, trust_env: bool = False,
                env_kwargs: Optional[dict] = None) -> Policy:
    """Load a policy from a checkpoint or run directory (its latest checkpoint).

    The env id recorded in the file is data: one that would import a module (``module:Class``) is
    only built by :func:`proxima.evaluate.evaluate` when the caller names it (``env_id``, the
    ``--env`` flag) or trusts the file (``trust_env``, ``--trust-run``). ``env_kwargs`` (``--env-kwargs``)
    replace the recorded constructor arguments; without it the recorded ones are used for the
    recorded env id (also given as ``module:EnvId``, the module that registers a recorded id: a run
    trained from Python records the id alone), none for another ``env_id``. ``device``: a name as
    --device takes it (cpu, cuda, cuda:1, auto), resolved here; a torch.device is taken as resolved
    (device.resolve_device's, by the caller: its CUDA probe and note are not repeated).
    """
    from .device import resolve_device
    from .envs.gym_adapter import imports_code, treat_as_data
    from .trainer import hold_float32

    if not isinstance(device, torch.device):  # "auto" as everywhere else; "cuda" without CUDA is one ConfigError line
        device = resolve_device(device)
    state = load_checkpoint(path)
    if state.get("kind") == "ppo-population":
        raise PopulationCheckpointError(_population_refusal(state))
    check_step(state)  # the step eval prints is the one report and resume read
    for folder in data_folders(state["path"]):
        treat_as_data(folder)
    # building the Agent runs its random initialization before the file's weights replace it: on a fork
    # of the caller's RNG, so loading a policy leaves the caller's draws as they were. The Agent is
    # built on torch's default device (the CPU unless the caller changed it) and then moved to
    # ``device``: that device's generator is the one drawn from
    built_on = torch.get_default_device()
    cuda = [built_on.index if built_on.index is not None else torch.cuda.current_device()] if built_on.type == "cuda" else []
    release = hold_float32()  # the caller's default dtype may be float64: the policy computes in float32, as it trained
    try:
        with torch.random.fork_rng(devices=cuda):
            agent, obs_norm, obs_space, act_space = build_agent(state, device)
    finally:
        release()
    recorded = str(state["config"].get("env_id", ""))
    trusted = env_id is not None or trust_env or not imports_code(recorded)
    from .envs import same_env

    # the env it trained on steps on: act() shapes actions as that env took them (a NativeEnv's flat)
    backend = None
    if env_id is None or same_env(env_id, recorded):  # another env's actions are the space's own shape
        backend = state["env_backend"] if "env_backend" in state else _meta_backend(state["path"])
    backend = backend if isinstance(backend, str) else None
    policy = Policy(agent, obs_norm, state["config"], obs_space, act_space, device, state["path"], env_id=env_id,
                    env_trusted=trusted, env_kwargs=env_kwargs, env_backend=backend)
    entry = state.get("env_entry_point")
    policy.env_entry_point = entry if isinstance(entry, str) else None
    policy.run_threads = _run_threads(state, agent, policy.device)
    step = state.get("global_step")
    policy.global_step = step if isinstance(step, int) and not isinstance(step, bool) else None  # the step it was saved at
    flush = state["config"].get("flush_denormal")
    policy.run_flush_denormal = flush if isinstance(flush, bool) else None
    policy.version_note = version_note(state)  # the eval CLI says it (a library caller reads it)
    if trusted and ((env_id is not None and not same_env(env_id, recorded)) or env_kwargs is not None):
        _check_named_env_actions(policy)
    return policy


def version_note(state: dict) -> Optional[str]:
    """The note for a checkpoint that records (its ``versions``, what wrote this very file; meta.json's
    say only what the run started with) another Proxima or torch than this one, else None: a resume, or
    an evaluation, then computes with other code, and need not match the run's numbers bit for bit."""
    from . import __version__

    recorded = state.get("versions")
    if not isinstance(recorded, dict):
        return None  # an older checkpoint records none: nothing to compare
    mine = {"proxima": __version__, "torch": str(torch.__version__)}
    theirs = {name: recorded.get(name) for name in mine}
    if not any(isinstance(v, str) and v != mine[name] for name, v in theirs.items()):
        return None
    shown = {name: _one_line(v, 40) if isinstance(v, str) else "?" for name, v in theirs.items()}
    return (f"{state.get('path', 'checkpoint')}: recorded with proxima {shown['proxima']} / torch {shown['torch']}; this is "
            f"{mine['proxima']} / {mine['torch']}: a resume is bit-identical only within one version")


def check_step(state: dict, counters: bool = True) -> None:
    """CheckpointError naming the file and the field unless its counters agree with its recorded batch
    (train_state.check_counters, as a resume checks them; ``counters`` False: checked already) and its
    global_step with its own name (``step_000000002048.pt`` holds step 2,048): eval, report and resume
    then tell one step of one file."""
    from .train_state import _int_count, check_counters

    path, cfg = state.get("path", "checkpoint"), state.get("config") or {}
    num_envs, num_steps = cfg.get("num_envs"), cfg.get("num_steps")
    if counters and "iteration" in state and _int_count(num_envs) and _int_count(num_steps) and num_envs > 0 and num_steps > 0:
        check_counters(state, num_envs * num_steps)
    step = state.get("global_step")
    if not _int_count(step) or step < 0:
        raise CheckpointError(f"{path}: global_step is {_one_line(repr(step), 60)}, not an integer >= 0")
    named = _NAME.match(Path(path).name)
    if named and int(named.group(1)) != step:
        raise CheckpointError(f"{path}: global_step {step:,} does not match the file's name (step {int(named.group(1)):,}); "
                              "the checkpoint is damaged or was edited")


def _check_named_env_actions(policy: Policy) -> None:
    """CheckpointError (action_difference_line) when the env load() was given takes actions of the policy's
    kind and shape but another start, Box bounds or dtype: act() gives actions in the trained space, which
    that env may not check (a Discrete(3) stepped with 5..7). One env is built to read its action space; an
    env that does not build, or differs in more than that, is left to evaluate(), which names it."""
    from .envs import make_env
    from .evaluate import eval_env_kwargs, run_backend

    if policy.action_space is None:
        return
    try:
        env = make_env(policy.env_id, 1, device="cpu", backend=run_backend(policy), training=False,
                       env_kwargs=eval_env_kwargs(policy))
    except Exception:  # noqa: BLE001 - the env's own failure is evaluate()'s line to give, not load()'s
        return
    try:
        env_act = env.single_action_space
    finally:
        env.close()
    if _action_signature(env_act) != _action_signature(policy.action_space):
        return
    line = action_difference_line(policy.path or "policy", policy.env_id, env_act, policy.action_space,
                                  "load it with the env it was trained on, or train a new run on this one")
    if line:
        raise EnvMismatchError(line)


def _population_refusal(state: dict) -> str:
    """Why load_policy refuses a population's own checkpoint (it holds every member's weights), and what
    loads instead: inside `proxima eval` (evaluate.command_line) that command on a member folder; from
    Python, proxima.load on the first member folder the checkpoint names that is there, a path the
    caller can paste (a placeholder only when none is)."""
    from .evaluate import command_in_use

    run = run_dir_of(state["path"])
    head = f"{state['path']}: a population checkpoint (--seeds/--sweep)"
    if command_in_use() is not None:
        return f"{head}; evaluate the members: proxima eval {run}/<member dir>"
    from .population_run import is_plain_name

    names = state.get("member_dirs")
    names = [n for n in names if is_plain_name(n) and (run / n).is_dir()] if isinstance(names, list) else []
    example = repr(str(run / names[0])) if names else f"'{run}/<member dir>'"
    listed = f"one of its {len(names)} member folders" if len(names) > 1 else "a member folder"
    return f"{head}; load one member at a time, from {listed} in {run}: proxima.load({example})"


def _run_threads(state: dict, agent, device: torch.device) -> Optional[int]:
    """The intra-op thread count the run's own evaluations ran with (the Trainer's: config.threads,
    halved where it put the critic on a side thread, side_thread.pairs; a population and a
    torchrun run keep config.threads): evaluate() computes under it, since a matrix product splits
    its sums by thread and eval.json's numbers change in the last bits with another count. None where
    the config records no count this machine takes (an old checkpoint, an edited one, or more
    threads than config.max_threads() here): the caller's count is kept."""
    from types import SimpleNamespace

    from .config import max_threads
    from .side_thread import pairs

    config = state["config"]
    threads = config.get("threads")
    if not _is_int(threads) or not 1 <= threads <= max_threads():
        return None
    if state.get("population_member") or state.get("world_size", 1) != 1:
        return threads
    as_trained = SimpleNamespace(threads=threads, compile=config.get("compile") is True, amp=config.get("amp", "none"))
    return threads // 2 if pairs(as_trained, device, agent) else threads


def run_dir_of(checkpoint: Union[str, Path]) -> Path:
    """The run directory a checkpoint file belongs to as named (``RUN/checkpoints/step_*.pt`` -> RUN), else
    its folder, as a real path. The file name is not followed: a link in RUN/checkpoints/ is RUN's entry
    (check_inside_run refuses one leading out of RUN), never the way to another run."""
    folder = Path(checkpoint).absolute().parent
    return (folder.parent if folder.name == "checkpoints" else folder).resolve()


def data_folders(checkpoint: Union[str, Path]) -> set:
    """The folders no env module is imported from when ``checkpoint`` is read (gym_adapter.treat_as_data):
    its run directory as named (``cd RUN && proxima eval . --env m:C`` never imports RUN/m.py, whatever
    its checkpoint links to) and, through a link, the run or folder that holds the file."""
    return {run_dir_of(checkpoint), run_dir_of(Path(checkpoint).resolve())}
