"""Write rgb_array frames to a video file: MP4 or WebM with imageio-ffmpeg, else an animated GIF.

``proxima eval PATH --video FILE`` checks FILE with :func:`check_video_path` and the env's first
frame with :func:`check_frame` before evaluating, collects the first episode's frames and calls
:func:`write_video`. The suffix picks the format
(``VIDEO_CODECS``; no suffix means ``.mp4``; any other suffix is a VideoError):

* ``.mp4``, ``.mov``, ``.mkv``: H.264 (libx264); ``.webm``: VP9 (libvpx-vp9), each through
  imageio's ffmpeg plugin when ``imageio_ffmpeg`` is importable (the ``video`` extra: ``.venv/bin/pip install -c requirements.lock -e '.[video]'``);
  an ffmpeg without that encoder is a VideoError before evaluating;
* ``.gif``, or any of those without imageio-ffmpeg: an animated GIF (``run.mp4`` -> ``run.gif``,
  the switch said on stderr), written by Pillow or, without Pillow, by imageio.

Frames are RGB (H, W, 3), RGBA (alpha dropped) or grayscale (H, W) or (H, W, 1), uint8 0..255;
float frames all in [0, 1] are scaled by 255, other floats read as 0..255.
The path actually written is returned, so callers print what is on disk.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Sequence, Union

import numpy as np

from .config import extra_install

GIF_SUFFIX = ".gif"
#: video suffix -> ffmpeg encoder (and its extra output options); ``.gif`` is written without ffmpeg
VIDEO_CODECS = {
    ".mp4": ("libx264", []),
    ".mov": ("libx264", []),
    ".mkv": ("libx264", []),
    # libvpx's default "good" deadline takes ~20x longer than libx264; "realtime" is as fast
    ".webm": ("libvpx-vp9", ["-deadline", "realtime", "-cpu-used", "8"]),
}


class VideoError(RuntimeError):
    """No frames, malformed frames, or no way to encode them; the message says what to install."""


def has_mp4_encoder() -> bool:
    """True when imageio and imageio-ffmpeg (which ships an ffmpeg binary) are importable."""
    return importlib.util.find_spec("imageio") is not None and importlib.util.find_spec("imageio_ffmpeg") is not None


_ENCODERS = None  # _ffmpeg_encoders' cache


def _ffmpeg_encoders() -> frozenset:
    """The video encoders of imageio-ffmpeg's ffmpeg (``ffmpeg -encoders``), cached; empty if it cannot be asked."""
    global _ENCODERS
    if _ENCODERS is None:
        import subprocess

        try:
            import imageio_ffmpeg

            listing = subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-hide_banner", "-encoders"], capture_output=True,
                                     text=True, timeout=30).stdout
        except Exception:  # no binary, not runnable: leave the check to the encoder itself
            listing = ""
        rows = [line.split() for line in listing.splitlines()]
        _ENCODERS = frozenset(r[1] for r in rows if len(r) > 1 and r[0].startswith("V"))  # " V....D libx264  ..."
    return _ENCODERS


def check_video_path(path: Union[str, Path]) -> None:
    """VideoError (one line naming the file) when ``write_video`` could not write ``path``: an
    unsupported suffix, an ffmpeg without the suffix's encoder, a parent that is a file. Call it
    before collecting frames, so a bad name fails before an evaluation, not after it. A name that
    names no file (empty, ``.``, ``..``, a trailing slash, an existing directory) is refused, not
    made ``<folder>.mp4`` beside that folder."""
    import os

    text = os.fspath(path)
    if not text.strip() or text.endswith(tuple(filter(None, ("/", os.sep, os.altsep)))) or os.path.basename(text) in (".", "..") or os.path.isdir(text):
        shown = text if text.strip() else repr(text)
        raise VideoError(f"--video {shown}: give a file name, e.g. {os.path.join(text.strip(), 'episode.mp4')}")
    path = Path(path)
    if not path.suffix:  # written as <name>.mp4
        path = path.with_suffix(".mp4")
    suffix = path.suffix.lower()
    if suffix != GIF_SUFFIX and suffix not in VIDEO_CODECS:
        raise VideoError(f"--video {path}: unsupported video type {path.suffix!r}; use "
                         f"{', '.join(list(VIDEO_CODECS) + [GIF_SUFFIX])}")
    if suffix in VIDEO_CODECS and has_mp4_encoder():
        codec = VIDEO_CODECS[suffix][0]
        encoders = _ffmpeg_encoders()
        if encoders and codec not in encoders:
            raise VideoError(f"--video {path}: this ffmpeg has no {codec} encoder for {suffix}; use .mp4 or .gif")
    from .diskspace import path_problem

    problem = path_problem(path, example="episode.mp4")
    if problem:
        raise VideoError(f"--video {path}: {problem}")


def check_frame(frame) -> None:
    """VideoError (one line, no file named: the caller names it) when ``frame`` is no picture a video
    holds: an RGB (H, W, 3), RGBA (H, W, 4) or grayscale (H, W) or (H, W, 1) array of numbers.
    ``evaluate(video=...)`` checks an env's first frame with it before any episode runs."""
    a = np.asarray(frame)
    if not (a.ndim == 2 or (a.ndim == 3 and a.shape[-1] in (1, 3, 4))):
        raise VideoError(f"frames of shape {a.shape}; a video takes (H, W, 3), (H, W, 4) or grayscale (H, W), (H, W, 1)")
    if not np.issubdtype(a.dtype, np.number):
        raise VideoError(f"frames of dtype {a.dtype}; a video takes uint8 pixels 0..255 (or floats in [0, 1])")


def _unit_floats(frames) -> bool:
    """True for float pixels in [0, 1] in every frame (all of them decide for the whole video: a dark
    first frame of a 0..255 env is not scaled): the convention of float images (matplotlib, imageio),
    scaled by 255 rather than refused, since an env's render() is often not the user's to change;
    floats beyond 1 are read as 0..255. A bare cast would make [0, 1] pixels 0 or 1 of 255: an
    all-black video."""
    arrays = [np.asarray(f) for f in frames]
    return all(np.issubdtype(a.dtype, np.floating) and a.size > 0 and bool(np.nanmin(a) >= 0) and bool(np.nanmax(a) <= 1)
               for a in arrays)


def _check_frames(frames: Sequence[np.ndarray]) -> list:
    """The frames as (H, W, 3) uint8: grayscale repeated, alpha dropped, float pixels in [0, 1] scaled."""
    if len(frames) == 0:
        raise VideoError("no frames to write (does the env support render_mode='rgb_array'?)")
    out = []
    shape = None
    unit = _unit_floats(frames)
    for i, f in enumerate(frames):
        try:
            check_frame(f)
        except VideoError as e:
            raise VideoError(f"frame {i} has {str(e).removeprefix('frames of ')}") from None
        a = np.asarray(f)
        if a.ndim == 2:
            a = a[..., None]
        if a.shape[-1] == 1:  # grayscale -> RGB
            a = np.repeat(a, 3, axis=-1)
        if a.dtype != np.uint8:
            a = np.clip(np.nan_to_num(a * 255.0 if unit else a), 0, 255).astype(np.uint8)
        if shape is None:
            shape = a.shape
        elif a.shape != shape:
            raise VideoError(f"frame {i} has shape {a.shape}, frame 0 has {shape}; all frames must match")
        out.append(a[..., :3])
    return out


def _write_mp4(frames: list, path: Path, fps: float) -> None:
    """Write with ffmpeg, the encoder chosen by the suffix (VIDEO_CODECS)."""
    import imageio.v2 as imageio

    codec, params = VIDEO_CODECS.get(path.suffix.lower(), VIDEO_CODECS[".mp4"])
    # macro_block_size=2: yuv420p needs even sizes; odd ones are padded, even ones kept;
    # ffmpeg's own log stays quiet: a failure is found by reading the file back (_check_mp4)
    writer = imageio.get_writer(str(path), fps=fps, codec=codec, macro_block_size=2, ffmpeg_log_level="quiet",
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


def _write_gif(frames: list, path: Path, fps: float) -> None:
    duration_ms = max(int(round(1000.0 / fps)), 10)
    try:
        from PIL import Image
    except ImportError:
        Image = None
    if Image is not None:
        # fast octree palette per frame: rendered frames have few colours, and the default
        # median-cut quantizer is ~2.5x slower on 500x500 frames
        images = [Image.fromarray(f).quantize(colors=256, method=Image.Quantize.FASTOCTREE) for f in frames]
        images[0].save(path, save_all=True, append_images=images[1:], duration=duration_ms, loop=0)
        return
    try:
        import imageio.v3 as iio

        iio.imwrite(path, np.stack(frames), extension=GIF_SUFFIX, duration=duration_ms, loop=0)
    except Exception as e:  # imageio without a GIF-capable plugin
        raise VideoError(f"cannot write a GIF ({type(e).__name__}: {e}); install Pillow, or the video extra: {extra_install('video')}") from None


def write_video(frames: Sequence[np.ndarray], path: Union[str, Path], fps: float = 30.0) -> str:
    """Write ``frames`` ((H, W, 3) uint8 each) to ``path``; return the path actually written.

    The suffix picks the format (module docstring); none means ``.mp4``, an unsupported one is a
    VideoError (check_video_path). A non-GIF path becomes ``<stem>.gif`` when imageio-ffmpeg is not
    importable (said on stderr). Parent folders are created. Note that GIF encoders merge identical
    consecutive frames.
    """
    check_video_path(path)
    frames = _check_frames(frames)
    path = Path(path)
    if fps <= 0:
        raise VideoError(f"fps must be positive, got {fps}")
    if path.suffix.lower() != GIF_SUFFIX:
        if has_mp4_encoder():
            if not path.suffix:
                path = path.with_suffix(".mp4")
            _write_whole(path, lambda tmp: (_write_mp4(frames, tmp, fps), _check_mp4(tmp, len(frames))))
            return str(path)
        gif = path.with_suffix(GIF_SUFFIX)
        print(f"proxima: no MP4 encoder (the video extra: {extra_install('video')}); writing a GIF instead: {gif}",
              file=sys.stderr)
        path = gif
    _write_whole(path, lambda tmp: _write_gif(frames, tmp, fps))
    return str(path)


def _write_whole(path: Path, write) -> None:
    """``write(tmp)`` to a temp file beside ``path``, then rename it into place: a video that could not
    be finished (disk full) is deleted and reported (VideoError naming the file and the free space)."""
    import os

    from .diskspace import describe, free_bytes, human_bytes

    import tempfile

    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # a new file under a random name (mkstemp: O_EXCL, so never a file or link planted there); the
        # suffix picks the format; os.replace puts it over ``path`` itself, never through a link there
        fd, name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}", dir=path.parent)
        os.fchmod(fd, 0o644)  # mkstemp's 0600: a video is as readable as any other file of the run
        os.close(fd)
        tmp = Path(name)
        write(tmp)
        os.replace(tmp, path)
    except OSError as e:
        raise VideoError(describe(path, e, "could not write the video") + "; no video was kept") from None
    except VideoError as e:
        free = free_bytes(path)
        room = f"; {human_bytes(free)} free there" if free is not None else ""
        raise VideoError(f"{path}: could not write the video ({e}{room}); no video was kept") from None
    except Exception as e:  # an encoder's own error type (imageio, ffmpeg)
        free = free_bytes(path)
        room = f"; {human_bytes(free)} free there" if free is not None else ""
        raise VideoError(f"{path}: could not write the video ({type(e).__name__}: {str(e)[:120]}{room}); no video was kept") from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
