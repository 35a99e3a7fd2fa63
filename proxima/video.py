"""Write rgb_array frames to a video file: MP4 or WebM with imageio-ffmpeg, else an animated GIF.

``proxima eval PATH --video FILE`` checks FILE with :func:`check_video_path` and the env's first
frame with :func:`check_frame` before evaluating, then hands the first episode's frames, as they
come, to a :class:`VideoFeed`: :func:`write_video`, in a thread of its own, encodes each one into a
temp file beside FILE while the episodes run (memory holds a few frames, not the episode: 2,000
600x400 frames held whole took 1.6 GB), and renames it to FILE once the episode is whole. The
suffix picks the format (``VIDEO_CODECS``):

* ``.mp4``, ``.mov``, ``.mkv``: H.264 (libx264); ``.webm``: VP9 (libvpx-vp9), each through
  imageio's ffmpeg plugin when ``imageio_ffmpeg`` is importable (the ``video`` extra: ``.venv/bin/pip install -c requirements.lock -e '.[video]'``)
  and its ffmpeg runs (ffmpeg_status: run once, before evaluating); an ffmpeg without that encoder
  is a VideoError before evaluating;
* ``.gif``, or any of those without imageio-ffmpeg or with an ffmpeg of its that is not found or
  does not run: an animated GIF written by Pillow, a frame at a time (``run.mp4`` -> ``run.gif``,
  the switch and its reason said on stderr by check_video_path, before evaluating);
* no suffix, or one that names no file type (``cartpole.seed1``: none in Python's mimetypes table):
  the name as given with ``.mp4`` appended (``cartpole.seed1.mp4``); any other type (``.txt``,
  ``.avi``, ``.png``) is a VideoError.

The video plays at the env's own rate, :func:`render_fps`: its ``metadata["render_fps"]``
(Gymnasium's values for the native envs, envs.render.RENDER_FPS; an Atari step's 60 / FRAME_SKIP),
else 30 frames a second. An existing FILE is replaced (os.replace, only once the new video is whole;
``evaluate`` says so on stderr before the episodes run).

Frames are RGB (H, W, 3), RGBA (alpha dropped) or grayscale (H, W) or (H, W, 1), uint8 0..255;
float frames in [0, 1] are scaled by 255, other floats read as 0..255 (:class:`_Frames` says
which frames decide). MP4/WebM frames of an odd height or width get one more row or column, a
copy of the last (yuv420p stores colour at half resolution, so ffmpeg takes even sizes only); the
frames are never rescaled. The path actually written is returned, so callers print what is on disk.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import math
import os
import queue
import signal
import sys
import threading
import weakref
from pathlib import Path
from typing import Iterable, Optional, Union

import numpy as np

from .config import extra_install
from .terminal import printable

GIF_SUFFIX = ".gif"
#: video suffix -> ffmpeg encoder (and its extra output options); ``.gif`` is written without ffmpeg
VIDEO_CODECS = {
    ".mp4": ("libx264", []),
    ".mov": ("libx264", []),
    ".mkv": ("libx264", []),
    # libvpx's default "good" deadline takes ~20x longer than libx264; "realtime" is as fast
    ".webm": ("libvpx-vp9", ["-deadline", "realtime", "-cpu-used", "8"]),
}
#: frames a second of a video whose env names no render_fps of its own (Gymnasium's most common value)
DEFAULT_FPS = 30.0


class VideoError(RuntimeError):
    """No frames, malformed frames, or no way to encode them; the message says what to install."""


class FrameError(VideoError):
    """A frame no video holds, or one of another size than the first: said as it is (which frame,
    what it is), not as a file that could not be written."""


def has_mp4_encoder() -> bool:
    """True when imageio and imageio-ffmpeg are importable and imageio-ffmpeg's ffmpeg runs (mp4_problem)."""
    return not mp4_problem()


def mp4_problem() -> str:
    """Why ``--video FILE.mp4`` (or .mov, .mkv, .webm) writes a GIF instead ("" when it writes the
    MP4): no imageio or imageio-ffmpeg (the video extra to install), or an ffmpeg of imageio-ffmpeg's
    that it cannot find or that does not run (ffmpeg_status: which binary, why, what to do). Found
    before any episode runs, so the switch is said first, not a traceback after the evaluation."""
    if importlib.util.find_spec("imageio") is None or importlib.util.find_spec("imageio_ffmpeg") is None:
        return f"the video extra: {extra_install('video')}"
    _, problem = ffmpeg_status()
    return problem


#: seconds the one ``ffmpeg -encoders`` call may take (about 0.05 s): a binary that hangs is no encoder
FFMPEG_PROBE_TIMEOUT_S = 5.0
#: bytes ``ffmpeg -encoders`` may print on either stream (its list is about 30 kB): past them it is stopped
FFMPEG_PROBE_BYTES = 1 << 20
_FFMPEG = None  # ffmpeg_status' cache: (the binary's path or None, why it cannot be used: "" when it can)
_ENCODERS = None  # ffmpeg_status' cache: the binary's video encoders (empty when it cannot be used)


def ffmpeg_status() -> tuple:
    """(path of imageio-ffmpeg's ffmpeg or None, why it cannot be used: "" when it can), found by
    imageio_ffmpeg.get_ffmpeg_exe (IMAGEIO_FFMPEG_EXE when set) and run once (``-encoders``, at most
    FFMPEG_PROBE_TIMEOUT_S), cached for the process, as are its encoders (_ffmpeg_encoders). The
    reason is one phrase with what to do (``imageio-ffmpeg's ffmpeg /x/ffmpeg (IMAGEIO_FFMPEG_EXE)
    does not run: No such file or directory; set ...``). Never raises."""
    global _FFMPEG, _ENCODERS
    if _FFMPEG is None:
        exe, encoders, problem = _probe_ffmpeg()
        _FFMPEG = (exe, problem)
        if _ENCODERS is None:
            _ENCODERS = encoders
    return _FFMPEG


def _probe_ffmpeg() -> tuple:
    """(path or None, video encoders, problem) of imageio-ffmpeg's ffmpeg: one ``ffmpeg -encoders`` call."""
    import subprocess

    from_env = os.environ.get("IMAGEIO_FFMPEG_EXE")
    fix = ("point IMAGEIO_FFMPEG_EXE at a working ffmpeg, or unset it" if from_env else
           f"set IMAGEIO_FFMPEG_EXE to a working ffmpeg, or reinstall the video extra ({extra_install('video')})")
    try:
        import imageio_ffmpeg

        exe = imageio_ffmpeg.get_ffmpeg_exe()
    except Exception as e:  # "No ffmpeg exe could be found. ...": no binary of its own, none on PATH
        return None, frozenset(), f"imageio-ffmpeg finds no ffmpeg binary ({_first_line(e)}); {fix}"
    who = f"imageio-ffmpeg's ffmpeg {exe}" + (" (IMAGEIO_FFMPEG_EXE)" if from_env and exe == from_env else "")
    try:
        code, out, err = _run_bounded([exe, "-hide_banner", "-encoders"], FFMPEG_PROBE_TIMEOUT_S, FFMPEG_PROBE_BYTES)
    except subprocess.TimeoutExpired:
        return exe, frozenset(), f"{who} did not answer -encoders within {FFMPEG_PROBE_TIMEOUT_S:g} s; {fix}"
    except (OSError, ValueError) as e:  # missing, not executable, another platform's binary
        return exe, frozenset(), f"{who} does not run: {getattr(e, 'strerror', None) or _first_line(e)}; {fix}"
    if code is None:
        return exe, frozenset(), (f"{who} printed more than {FFMPEG_PROBE_BYTES >> 20} MB for -encoders "
                                  f"(ffmpeg's list is about 30 kB: is it ffmpeg?); {fix}")
    if code != 0:
        # the binary's own words, control codes escaped: one it prints could recolour or clear the terminal
        last = printable((err.strip().splitlines() or [""])[-1].strip()[:120])
        return exe, frozenset(), f"{who} exited with status {code} on -encoders{': ' + last if last else ''}; {fix}"
    rows = [line.split() for line in out.splitlines()]
    encoders = frozenset(r[1] for r in rows if len(r) > 1 and r[0].startswith("V"))  # " V....D libx264  ..."
    if not encoders:
        return exe, encoders, f"{who} lists no video encoders (is it ffmpeg?); {fix}"
    return exe, encoders, ""


def _run_bounded(argv: list, timeout: float, limit: int) -> tuple:
    """(exit status, stdout, stderr) of ``argv`` run with no stdin; exit status None when it wrote more than
    ``limit`` bytes to either stream, which are not kept past that (an ffmpeg that prints 800 MB would
    otherwise be held in memory). subprocess.TimeoutExpired when it has not exited within ``timeout`` s.
    Either way it is killed with what it started (its process group: a ``sleep`` a wrapper script runs
    would otherwise keep going, and keep the pipes open)."""
    import subprocess

    posix = os.name == "posix"
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=posix)
    chunks: dict = {proc.stdout: [], proc.stderr: []}
    over = threading.Event()

    def drain(stream) -> None:
        kept = 0
        while True:
            data = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not data:
                return
            kept += len(data)
            if kept > limit:
                over.set()
                _kill_group(proc, posix)
                return
            chunks[stream].append(data)

    readers = [threading.Thread(target=drain, args=(s,), daemon=True) for s in chunks]
    for r in readers:
        r.start()
    try:
        code = proc.wait(timeout)
    finally:
        _kill_group(proc, posix)  # on time too: what it left running in the background goes with it
        for r in readers:
            r.join(1.0)  # a descendant outside the group (setsid) may hold a pipe: not waited for
        for r, stream in zip(readers, chunks):
            if not r.is_alive():  # closing a stream that a thread still reads would wait for that read
                stream.close()
    if over.is_set():
        return None, "", ""
    text = [b"".join(chunks[s]).decode("utf-8", errors="replace") for s in (proc.stdout, proc.stderr)]
    return code, text[0], text[1]


def _kill_group(proc, posix: bool) -> None:
    """Kill ``proc`` and, on POSIX, the process group it leads (start_new_session); then reap it."""
    try:
        if posix:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except OSError:  # gone already
        pass
    try:
        proc.wait(1.0)
    except Exception:  # noqa: BLE001 - unkillable (a process in D state): left to the OS
        pass


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def _ffmpeg_encoders() -> frozenset:
    """The video encoders of imageio-ffmpeg's ffmpeg (``ffmpeg -encoders``), cached; empty when it cannot be run."""
    global _FFMPEG
    if _ENCODERS is None:
        _FFMPEG = None
        ffmpeg_status()
    return _ENCODERS


def _names_a_file_type(suffix: str) -> bool:
    """True when Python's own mimetypes table (not the system's: the same answer on every machine)
    knows ``suffix`` (.txt, .avi, .png, .gz): a file type the user asked for, refused rather than
    written as ``name.txt.mp4``; ``.seed1`` is no type, just part of a name."""
    import mimetypes

    table, s = mimetypes.MimeTypes(), suffix.lower()
    return any(s in types for types in table.types_map) or s in table.encodings_map or s in table.suffix_map


def video_target(path: Union[str, Path]) -> Path:
    """The file ``write_video(frames, path)`` writes: ``path``, with ``.mp4`` appended to a name
    without a video suffix, and ``.gif`` for it when there is no MP4 encoder (mp4_problem). VideoError
    (one line naming the file) when it could not be written: see check_video_path. Says nothing."""
    text = os.fspath(path)
    if not text.strip() or text.endswith(tuple(filter(None, ("/", os.sep, os.altsep)))) or os.path.basename(text) in (".", "..") or os.path.isdir(text):
        shown = text if text.strip() else repr(text)
        raise _refused(shown, f"give a file name, e.g. {os.path.join(text.strip(), 'episode.mp4')}")
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix != GIF_SUFFIX and suffix not in VIDEO_CODECS:
        if suffix and _names_a_file_type(suffix):
            raise _refused(path, f"unsupported video type {path.suffix!r}; use {', '.join(list(VIDEO_CODECS) + [GIF_SUFFIX])}")
        path, suffix = path.with_name(path.name + ".mp4"), ".mp4"  # cartpole.seed1 -> cartpole.seed1.mp4
    if suffix in VIDEO_CODECS and not has_mp4_encoder():
        path, suffix = path.with_suffix(GIF_SUFFIX), GIF_SUFFIX
    if suffix in VIDEO_CODECS:
        codec = VIDEO_CODECS[suffix][0]
        encoders = _ffmpeg_encoders()
        if encoders and codec not in encoders:
            other = ".gif" if codec == VIDEO_CODECS[".mp4"][0] else ".mp4 or .gif"
            raise _refused(path, f"this ffmpeg has no {codec} encoder for {suffix}; use {other}")
    elif importlib.util.find_spec("PIL") is None:
        raise _refused(path, f"writing a GIF needs Pillow; install the video extra ({extra_install('video')}) for it and MP4")
    from .diskspace import path_problem

    problem = path_problem(path, example="episode.mp4")
    if problem:
        raise _refused(path, problem)
    if not path.parent.is_dir():  # a typo in the folder must not become a new tree nobody looks in
        raise _refused(path, f"folder {path.parent} does not exist; create it first")
    return path


def _refused(path, why: str) -> VideoError:
    """``--video PATH: why`` (the CLI's words), ``why`` kept as its ``reason``: evaluate() names its
    ``video=`` argument in that flag's place for a library caller."""
    error = VideoError(f"--video {path}: {why}")
    error.reason = why
    return error


def check_video_path(path: Union[str, Path], say_replaced: bool = True) -> str:
    """The file ``write_video`` will write for ``path`` (video_target), or VideoError (one line
    naming the file) when it could not: a file type that is no video, an ffmpeg without the
    suffix's encoder, a parent that is a file or a folder that does not exist (never created).
    Call it before collecting frames, so a bad name fails before an evaluation, not after it. A name
    that names no file (empty, ``.``, ``..``, a trailing slash, an existing directory) is refused,
    not made ``<folder>.mp4`` beside that folder.

    Said on stderr here, before any frame exists: a GIF written instead of an MP4 (no imageio-ffmpeg,
    or an ffmpeg of its that is not found or does not run: which one and why, mp4_problem),
    and (``say_replaced``) an existing file that the video will replace."""
    target = video_target(path)
    if target.suffix.lower() == GIF_SUFFIX and Path(path).suffix.lower() != GIF_SUFFIX:
        why = mp4_problem() or f"the video extra: {extra_install('video')}"
        print(f"proxima: no MP4 encoder ({why}); writing a GIF instead: {target}", file=sys.stderr)
    if say_replaced and (target.is_file() or target.is_symlink()):
        print(f"proxima: --video {target} exists; the new video replaces it once written (the old one stays if the "
              "evaluation fails)", file=sys.stderr)
    return str(target)


def render_fps(env) -> float:
    """Frames a second of ``env``'s video: its ``render_fps`` (Atari: 60 / FRAME_SKIP), a Gymnasium
    env's ``metadata["render_fps"]``, a native env's Gymnasium value (envs.render.RENDER_FPS); else
    DEFAULT_FPS (30), as for a value that is no positive finite number."""
    from .envs import render

    vector = getattr(env, "envs", None)  # GymnasiumEnv's Sync/AsyncVectorEnv: its envs' metadata
    metadata = getattr(vector, "metadata", None) or getattr(env, "metadata", None)
    for fps in (getattr(env, "render_fps", None), metadata.get("render_fps") if isinstance(metadata, dict) else None,
                render.RENDER_FPS.get(getattr(env, "env_id", None))):
        if isinstance(fps, (int, float, np.integer, np.floating)) and not isinstance(fps, bool) and math.isfinite(fps) and fps > 0:
            return float(fps)
    return DEFAULT_FPS


def check_frame(frame) -> None:
    """VideoError (one line, no file named: the caller names it) when ``frame`` is no picture a video
    holds: an RGB (H, W, 3), RGBA (H, W, 4) or grayscale (H, W) or (H, W, 1) array of numbers. A
    render() that returned no array (a dict, a str) is named by its type (``no frames: render()
    returned a dict of 2 items, ...``), a nested list that reads as a frame is one.
    ``evaluate(video=...)`` checks an env's first frame with it before any episode runs."""
    array = isinstance(frame, np.ndarray) or (hasattr(frame, "shape") and hasattr(frame, "dtype")
                                              and not isinstance(frame, np.generic))
    try:
        a, unread = np.asarray(frame), None
    except (ValueError, TypeError) as e:  # a ragged list, a tensor on a GPU
        a, unread = None, " ".join(str(e).split())[:120]
    if not array and (a is None or not _frame_like(a)):
        # numpy reads a dict or a str as a 0-d array: "shape ()" would hide what render() gave
        raise VideoError(f"{NO_ARRAY} render() returned {_returned(frame)}, not an (H, W, 3) uint8 array "
                         "(nor (H, W, 4) or grayscale (H, W), (H, W, 1))")
    if a is None:
        raise VideoError(f"frames of type {type(frame).__name__} that numpy cannot read ({unread}); a video takes an (H, W, 3) "
                         "uint8 numpy array")
    if not (a.ndim == 2 or (a.ndim == 3 and a.shape[-1] in (1, 3, 4))):
        raise VideoError(f"frames of shape {a.shape}; a video takes (H, W, 3), (H, W, 4) or grayscale (H, W), (H, W, 1)")
    if not np.issubdtype(a.dtype, np.number):
        raise VideoError(f"frames of dtype {a.dtype}; a video takes uint8 pixels 0..255 (or floats in [0, 1])")


#: check_frame's words for a frame that is no array, before what render() returned
NO_ARRAY = "no frames:"


def _frame_like(a: np.ndarray) -> bool:
    """Whether a non-array render() (a nested list) reads as a frame: then it is one."""
    return (a.ndim == 2 or (a.ndim == 3 and a.shape[-1] in (1, 3, 4))) and np.issubdtype(a.dtype, np.number)


def _returned(value) -> str:
    """``value`` as a line names it: None, ``a dict``, ``a list of 2 items``, ``an int``."""
    if value is None:
        return "None"
    name = type(value).__name__
    article = "an" if name[:1].lower() in "aeiou" else "a"
    if isinstance(value, (list, tuple, dict)):
        return f"{article} {name} of {len(value)} item{'' if len(value) == 1 else 's'}"
    return f"{article} {name}"


def _in_unit_range(a: np.ndarray) -> bool:
    return np.issubdtype(a.dtype, np.floating) and a.size > 0 and bool(np.nanmin(a) >= 0) and bool(np.nanmax(a) <= 1)


def _unit_floats(frames) -> bool:
    """True for float pixels in [0, 1] in every frame (all of them decide for the whole video: a dark
    first frame of a 0..255 env is not scaled): the convention of float images (matplotlib, imageio),
    scaled by 255 rather than refused, since an env's render() is often not the user's to change;
    floats beyond 1 are read as 0..255. A bare cast would make [0, 1] pixels 0 or 1 of 255: an
    all-black video."""
    return all(_in_unit_range(np.asarray(f)) for f in frames)


class _Frames:
    """The frames as (H, W, 3) uint8, each checked and converted as the encoder asks for it (none held):
    grayscale repeated, alpha dropped, float pixels in [0, 1] scaled by 255, and with ``even`` an
    odd height or width made even by repeating the last row or column (no rescaling). ``count``:
    frames given so far. A frame no video holds, or of another shape than frame 0, is a FrameError.

    ``unit``: whether float frames are [0, 1] pixels, decided by the caller over all frames (a list);
    None (frames that arrive one by one): scaled while every float frame so far is in [0, 1], read as
    0..255 from the first one that is not (an env drawing 0..255 whose first frames are black or
    nearly so shows them black either way)."""

    def __init__(self, frames: Iterable, unit: Optional[bool] = None, even: bool = False):
        self._frames, self._unit, self._fixed, self._even = iter(frames), unit, unit is not None, even
        self.count, self._shape = 0, None

    def __iter__(self):
        return self

    def __next__(self) -> np.ndarray:
        frame = next(self._frames)
        i = self.count
        try:
            check_frame(frame)
        except VideoError as e:
            text = str(e)
            if text.startswith(NO_ARRAY):
                raise FrameError(f"frame {i}: {text.removeprefix(NO_ARRAY).strip()}") from None
            raise FrameError(f"frame {i} has {text.removeprefix('frames of ')}") from None
        a = np.asarray(frame)
        if a.ndim == 2:
            a = a[..., None]
        if a.shape[-1] == 1:  # grayscale -> RGB
            a = np.repeat(a, 3, axis=-1)
        if a.dtype != np.uint8:
            floats = np.issubdtype(a.dtype, np.floating)
            if floats and not self._fixed and self._unit is not False:
                self._unit = _in_unit_range(a)
            a = np.clip(np.nan_to_num(a * 255.0 if floats and self._unit else a), 0, 255).astype(np.uint8)
        if self._shape is None:
            self._shape = a.shape
        elif a.shape != self._shape:
            raise FrameError(f"frame {i} has shape {a.shape}, frame 0 has {self._shape}; all frames must match")
        a = a[..., :3]
        if self._even and (a.shape[0] % 2 or a.shape[1] % 2):
            a = np.pad(a, ((0, a.shape[0] % 2), (0, a.shape[1] % 2), (0, 0)), mode="edge")
        self.count += 1
        return a


def _check_frames(frames) -> list:
    """The frames as a video holds them ((H, W, 3) uint8), all of them deciding whether floats are [0, 1]."""
    if len(frames) == 0:
        raise VideoError("no frames to write (does the env support render_mode='rgb_array'?)")
    return list(_Frames(frames, unit=_unit_floats(frames)))


def _write_mp4(frames: Iterable, path: Path, fps: float) -> None:
    """Write with ffmpeg, the encoder chosen by the suffix (VIDEO_CODECS), a frame at a time."""
    import imageio.v2 as imageio

    codec, params = VIDEO_CODECS.get(path.suffix.lower(), VIDEO_CODECS[".mp4"])
    # macro_block_size=1: imageio rescales (and warns of it) a frame whose sides are not multiples of
    # it; yuv420p's even sizes come from _Frames(even=True), which pads an odd side by one row/column.
    # ffmpeg's own log stays quiet: a failure is found by reading the file back (_check_mp4)
    writer = imageio.get_writer(str(path), fps=fps, codec=codec, macro_block_size=1, ffmpeg_log_level="quiet",
                                output_params=list(params))
    try:
        for f in frames:
            writer.append_data(f)
    finally:
        writer.close()


def _check_mp4(path: Path, expected: int) -> None:
    """ffmpeg reports a full disk on its stderr and exits quietly: read the file back and count."""
    import imageio_ffmpeg

    try:
        frames, _ = imageio_ffmpeg.count_frames_and_secs(str(path))
    except Exception as e:  # no moov atom, cut short
        raise VideoError(f"unreadable after writing ({type(e).__name__})") from None
    if frames != expected:
        raise VideoError(f"holds {frames} of {expected} frames after writing")


#: GIF delays are whole centiseconds, and viewers play 0 or 1 as 10 (browsers): 2 is the shortest kept
GIF_MIN_DELAY_CS = 2


def _write_gif(frames: Iterable, path: Path, fps: float) -> None:
    """An animated GIF, looping, written a frame at a time with Pillow (its save(append_images=...)
    holds every frame until the end): each frame gets a palette of its own (FASTOCTREE: rendered
    frames have few colours, and the default median cut is ~2.5x slower on 500x500 frames), and a
    frame after the first only the box of pixels that changed.

    Timing: frame i starts at round(i * 100 / fps) centiseconds (half up) and shows until the next
    frame written starts; the last until round(n * 100 / fps). The delays thus add up to the n
    frames' time to the nearest centisecond, with no per-frame rounding that adds up (1000/30 ms cut
    to 30 ms a frame played a 30 fps episode at 33.3). A frame equal to the one shown, or starting
    less than GIF_MIN_DELAY_CS after it (rates above 50 fps), is not written: the shown one stays up
    its time (at 60 fps, frames are dropped to keep the playing time true)."""
    from PIL import GifImagePlugin, Image

    def start_cs(i: int) -> int:
        return int(math.floor(i * 100.0 / fps + 0.5))

    def quantized(rgb: np.ndarray):
        return Image.fromarray(np.ascontiguousarray(rgb)).quantize(colors=256, method=Image.Quantize.FASTOCTREE)

    with open(path, "wb") as fp:
        written = None  # the frame on screen in the file so far: the next one is written as its change
        shown, shown_at, n = None, 0, 0

        def write(rgb: np.ndarray, delay_cs: int) -> None:
            nonlocal written
            duration = {"duration": delay_cs * 10}  # Pillow takes ms and writes ms // 10
            if written is None:
                image = quantized(rgb)
                header, _ = GifImagePlugin.getheader(image, info={"loop": 0, **duration})
                chunks = [*header, *GifImagePlugin.getdata(image, (0, 0), **duration)]
            else:
                changed = np.any(rgb != written, axis=-1)
                rows, cols = np.flatnonzero(changed.any(axis=1)), np.flatnonzero(changed.any(axis=0))
                r0, r1, c0, c1 = (rows[0], rows[-1] + 1, cols[0], cols[-1] + 1) if rows.size else (0, 1, 0, 1)
                image = quantized(rgb[r0:r1, c0:c1])
                chunks = GifImagePlugin.getdata(image, (int(c0), int(r0)), include_color_table=True, **duration)
            for chunk in chunks:
                fp.write(chunk)
            written = rgb

        for n, rgb in enumerate(frames, 1):
            at = start_cs(n - 1)
            if shown is not None and (at - shown_at < GIF_MIN_DELAY_CS or np.array_equal(rgb, shown)):
                continue
            if shown is not None:
                write(shown, at - shown_at)
            shown, shown_at = rgb, at
        if shown is None:
            raise VideoError("no frames to write (does the env support render_mode='rgb_array'?)")
        write(shown, max(start_cs(n) - shown_at, GIF_MIN_DELAY_CS))
        fp.write(b";")  # the GIF's trailer


def write_video(frames: Iterable[np.ndarray], path: Union[str, Path], fps: float = DEFAULT_FPS) -> str:
    """Write ``frames`` (a list, or any iterable, read one frame at a time) to ``path`` at ``fps``
    frames a second; return the path actually written (video_target: ``.mp4`` appended to a name
    without a video suffix, ``<stem>.gif`` when there is no MP4 encoder (mp4_problem), said on stderr).
    The file appears whole or not at all (a temp file beside it, renamed into place); one already
    there is replaced. Parent folders are created. Frames of a list all decide whether floats are
    [0, 1] pixels; an iterable's are judged as they come (_Frames).
    """
    target = Path(check_video_path(path, say_replaced=False))
    if isinstance(fps, bool) or not isinstance(fps, (int, float, np.integer, np.floating)) or not (math.isfinite(fps) and fps > 0):
        raise VideoError(f"fps must be a positive number, got {fps!r}")
    empty = VideoError("no frames to write (does the env support render_mode='rgb_array'?)")
    if hasattr(frames, "__len__"):
        if len(frames) == 0:
            raise empty
        unit = _unit_floats(frames)
    else:  # one frame read ahead: no temp file for an iterable that has none
        frames, unit = iter(frames), None
        first = next(frames, empty)
        if first is empty:
            raise empty
        frames = itertools.chain([first], frames)
    if target.suffix.lower() == GIF_SUFFIX:
        _write_whole(target, lambda tmp: _write_gif(_Frames(frames, unit), tmp, fps))
    else:
        stream = _Frames(frames, unit, even=True)
        _write_whole(target, lambda tmp: (_write_mp4(stream, tmp, fps), _check_mp4(tmp, stream.count)))
    return str(target)


def _write_whole(path: Path, write) -> None:
    """``write(tmp)`` to a temp file beside ``path``, then rename it into place: a video that could not
    be finished (disk full) is deleted and reported (VideoError naming the file and the free space);
    so is one cut short by a KeyboardInterrupt or a VideoFeed abandoned. A FrameError is raised as it is."""
    from .diskspace import describe, free_bytes, human_bytes

    import tempfile

    tmp = None
    try:
        # a new file under a random name (mkstemp: O_EXCL, so never a file or link planted there); the
        # suffix picks the format; os.replace puts it over ``path`` itself, never through a link there
        fd, name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}", dir=path.parent)
        os.fchmod(fd, 0o644)  # mkstemp's 0600: a video is as readable as any other file of the run
        os.close(fd)
        tmp = Path(name)
        write(tmp)
        os.replace(tmp, path)
    except FrameError:
        raise
    except OSError as e:
        raise VideoError(describe(path, e, "could not write the video") + "; no video was kept") from None
    except VideoError as e:
        free = free_bytes(path)
        room = f"; {human_bytes(free)} free there" if free is not None else ""
        raise VideoError(f"{path}: could not write the video ({e}{room}); no video was kept") from None
    except Exception as e:  # an encoder's own error type (imageio, ffmpeg)
        # no free space here: a full disk is an OSError (a broken pipe to ffmpeg) or a short file
        # (_check_mp4's VideoError); "No ffmpeg exe could be found; 67.4 GB free there" misled
        raise VideoError(f"{path}: could not write the video ({type(e).__name__}: {str(e)[:120]}); no video was kept") from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------ while evaluating
#: frames a VideoFeed holds between the episodes and its writer thread: a few frames of memory, and an
#: evaluation that waits for a slower encoder rather than piling the episode up
FEED_FRAMES = 8
#: seconds an abandoned VideoFeed waits for its writer to remove the temp file (ffmpeg finishing the
#: frames it has), so that a stop is not held up by a stuck encoder
ABANDON_WAIT_S = 60.0


class _Abandoned(BaseException):
    """Raised in the writer thread, where it reads its next frame, once the evaluation stopped: it
    unwinds write_video (not an Exception: taken for no encoder error), whose _write_whole removes
    the temp file."""


_END = object()  # after the last frame
#: the VideoFeeds of this process (weakly held): recording() abandons those still writing before a stop signal ends it
_LIVE: "weakref.WeakSet[VideoFeed]" = weakref.WeakSet()


class VideoFeed:
    """``write_video(frames, path, fps)`` run in a thread while the episodes run, ``frames`` being
    those given to :meth:`put` as they come (copies: an env may draw its next frame into the array
    it returned), at most FEED_FRAMES waiting. :meth:`finish` after the last frame waits for the
    file and returns its path, or raises the writer's error (a VideoError); :meth:`abandon` (the
    evaluation stopped) has the writer remove its temp file and end. A writer that failed early
    takes no more frames: finish() says why.

    The writer says it ended (the temp file renamed or removed) with an Event, never asked with
    Thread.is_alive() or join(): on Python before 3.13 those, interrupted by the KeyboardInterrupt of
    a signal (recording()), can mark the still running writer as ended (CPython issue 90882), and
    abandon() then returned at once: the process ended by the signal with the temp file there."""

    def __init__(self, path: Union[str, Path], fps: float):
        self.path, self.fps = str(path), fps
        self._queue: queue.Queue = queue.Queue(maxsize=FEED_FRAMES)
        self._abandoned = False
        self._written: Optional[str] = None
        self._error: Optional[BaseException] = None
        self._ended = threading.Event()  # set by the writer as its last act: the temp file is gone by then
        self._thread = threading.Thread(target=self._write, name="proxima-video", daemon=True)
        _LIVE.add(self)
        self._thread.start()

    def _frames(self):
        while True:
            item = self._queue.get()
            if self._abandoned:
                raise _Abandoned()
            if item is _END:
                return
            yield item

    def _write(self) -> None:
        try:
            self._written = write_video(self._frames(), self.path, self.fps)  # looked up now: write_video as it is then
        except _Abandoned:
            pass
        except BaseException as e:  # noqa: BLE001 - finish() raises it in the evaluation's thread
            self._error = e
        finally:
            self._ended.set()

    def _hand(self, item) -> None:
        while not self._ended.is_set():  # a writer that ended early takes nothing more: finish() says why
            try:
                self._queue.put(item, timeout=0.25)
                return
            except queue.Full:
                continue

    def put(self, frame) -> None:
        self._hand(np.array(frame, copy=True))

    def finish(self) -> str:
        try:
            self._hand(_END)
            self._ended.wait()
        except BaseException:  # a Ctrl-C (or SIGTERM: recording()) while ffmpeg finishes the file
            self.abandon()
            raise
        if self._error is not None:
            raise self._error
        return self._written

    def abandon(self) -> None:
        self._abandoned = True
        with contextlib.suppress(queue.Full):  # full: the writer is busy and reads the flag with its next frame
            self._queue.put_nowait(_END)
        self._ended.wait(ABANDON_WAIT_S)


@contextlib.contextmanager
def recording(active: bool = True):
    """Around an evaluation that writes a video (evaluate(video=...)); nothing when not ``active``.

    * SDL_VIDEODRIVER and SDL_AUDIODRIVER are ``dummy`` unless set: Gymnasium's pygame drawing of an
      rgb_array frame needs no display, and SDL without one printed "error: XDG_RUNTIME_DIR is
      invalid or not set in the environment." on stderr. Removed again after (a later human-mode
      render in the same process finds the environment as it was).
    * SIGTERM and SIGHUP, where their handler is the default (the process ends at once, leaving the
      video's temp file), raise KeyboardInterrupt instead, so that the writing unwinds and removes
      it. The handlers are put back after, and a signal that came is sent again: the process still
      ends as that signal ends it (exit 143 for SIGTERM), only after the cleanup; a VideoFeed still
      writing then (one its caller had no hold of yet to abandon) is abandoned first. Python runs signal
      handlers in the main thread only: called in another, the handlers are left alone."""
    if not active:
        yield
        return
    added = [name for name in ("SDL_VIDEODRIVER", "SDL_AUDIODRIVER") if name not in os.environ]
    for name in added:
        os.environ[name] = "dummy"
    came: list = []

    def interrupt(signum, frame):
        came.append(signum)
        raise KeyboardInterrupt(f"{signal.Signals(signum).name} while writing a video")

    before = {}
    if threading.current_thread() is threading.main_thread():
        for sig in filter(None, (signal.SIGTERM, getattr(signal, "SIGHUP", None))):
            if signal.getsignal(sig) is signal.SIG_DFL:
                before[sig] = signal.signal(sig, interrupt)
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        for name in added:
            os.environ.pop(name, None)
        if came:
            for feed in list(_LIVE):  # the signal ends the process, its daemon writer threads with it
                if not feed._ended.is_set():
                    feed.abandon()
            os.kill(os.getpid(), came[0])
