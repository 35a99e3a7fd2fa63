"""`proxima eval --video` as review 28 found it: a video at the env's own frame rate (MP4 and GIF),
frames written as they come rather than held for the episode, no temp file left by SIGTERM/SIGHUP,
no SDL line on stderr, the GIF fallback said before the episodes, odd frame sizes padded rather than
rescaled, and --video names with a dot in them (``cartpole.seed1``) or of an existing file."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import warm_python
from proxima import video
from proxima.agent import Agent
from proxima.checkpoint import Policy
from proxima.envs import make_env

HAS_FFMPEG = video.has_mp4_encoder()
needs_ffmpeg = pytest.mark.skipif(not HAS_FFMPEG, reason="needs imageio-ffmpeg")

#: a user env: episodes of LIMIT steps (env kwarg ``limit``), frames of (H, W) with a bar that moves each step
ENVS = '''
import time
import gymnasium as gym
import numpy as np


class Bars(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": __FPS__}

    def __init__(self, render_mode=None, limit=__LIMIT__, height=__H__, width=__W__, sleep=0.0):
        self.observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.render_mode, self.limit, self.size, self.sleep, self.t = render_mode, limit, (height, width), sleep, 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        time.sleep(self.sleep)
        return np.zeros(2, np.float32), 1.0, False, self.t >= self.limit, {}

    def render(self):
        frame = np.zeros((*self.size, 3), np.uint8)
        frame[:, : (self.t * 3) % self.size[1] + 1] = 200
        return frame
'''


def write_envs(folder: Path, name: str, fps=30, limit=20, height=64, width=96) -> str:
    """A module ``name`` in ``folder`` holding Bars; returns its env id."""
    text = ENVS
    for token, value in (("__FPS__", fps), ("__LIMIT__", limit), ("__H__", height), ("__W__", width)):
        text = text.replace(token, repr(value))
    (folder / f"{name}.py").write_text(text)
    return f"{name}:Bars"


def policy_for(env_id: str, backend: str = "auto", env_kwargs=None) -> Policy:
    """An untrained policy for ``env_id``, with the env's spaces."""
    env = make_env(env_id, 1, backend=backend, env_kwargs=env_kwargs)
    obs_space, act_space = env.single_observation_space, env.single_action_space
    env.close()
    torch.manual_seed(0)
    return Policy(Agent(obs_space, act_space), None, {"env_id": env_id, "seed": 1}, obs_space, act_space, "cpu",
                  env_kwargs=env_kwargs)


def gif_durations(path) -> list:
    from PIL import Image

    with Image.open(path) as im:
        out = []
        for i in range(im.n_frames):
            im.seek(i)
            out.append(im.info["duration"])
        return out


def mp4_fps_and_frames(path) -> tuple:
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    return meta["fps"], sum(1 for _ in reader), meta["size"]


def frames(n: int, size=(40, 60)) -> list:
    out = []
    for i in range(n):  # every frame differs (a GIF shows one equal to the last as the same frame)
        f = np.zeros((*size, 3), np.uint8)
        f[:, : i % size[1] + 1] = (255, 80 + i % 100, 0)
        f[i % size[0]] = 255
        out.append(f)
    return out


# ------------------------------------------------------------------------------------ 1. frame rate
def test_native_render_fps_are_gymnasiums():
    from gymnasium.envs.classic_control import acrobot, cartpole, continuous_mountain_car, mountain_car, pendulum

    from proxima.envs.render import RENDER_FPS

    assert RENDER_FPS == {"CartPole-v1": cartpole.CartPoleEnv.metadata["render_fps"],
                          "Acrobot-v1": acrobot.AcrobotEnv.metadata["render_fps"],
                          "MountainCar-v0": mountain_car.MountainCarEnv.metadata["render_fps"],
                          "MountainCarContinuous-v0": continuous_mountain_car.Continuous_MountainCarEnv.metadata["render_fps"],
                          "Pendulum-v1": pendulum.PendulumEnv.metadata["render_fps"]}


def test_render_fps_of_atari_gymnasium_native_and_the_fallback():
    from types import SimpleNamespace

    from proxima.envs import atari

    assert atari.AleAtari.render_fps == atari.EnvPoolAtari.render_fps == 15.0  # 60 Hz, 4 frames a step
    assert video.render_fps(SimpleNamespace(envs=SimpleNamespace(metadata={"render_fps": 12}))) == 12.0
    native = make_env("Acrobot-v1", 1, backend="native")
    assert video.render_fps(native) == 15.0
    for bad in (None, 0, -5, float("nan"), "50", True):
        assert video.render_fps(SimpleNamespace(envs=SimpleNamespace(metadata={"render_fps": bad}))) == 30.0
    assert video.render_fps(object()) == 30.0


@needs_ffmpeg
def test_eval_mp4_plays_at_the_envs_render_fps(tmp_path):
    from proxima.evaluate import evaluate

    result = evaluate(policy_for("CartPole-v1"), episodes=1, video=str(tmp_path / "cp.mp4"))
    fps, n, size = mp4_fps_and_frames(result["video"])
    assert (fps, n, size) == (50.0, result["lengths"][0] + 1, (600, 400))  # was 30 fps: 0.6x slow


def test_eval_gif_plays_at_the_envs_render_fps(tmp_path):
    from proxima.evaluate import evaluate

    result = evaluate(policy_for("CartPole-v1"), episodes=1, video=str(tmp_path / "cp.gif"))
    durations, n = gif_durations(result["video"]), result["lengths"][0] + 1
    assert durations == [20] * n  # 50 fps: 2 centiseconds a frame


@pytest.mark.parametrize("fps, n, total_cs", [(30, 61, 203), (15, 10, 67), (50, 7, 14), (24, 5, 21)])
def test_gif_delays_add_up_to_the_frames_time_to_the_centisecond(tmp_path, fps, n, total_cs):
    path = video.write_video(frames(n), tmp_path / "v.gif", fps=fps)
    durations = gif_durations(path)
    assert len(durations) == n and sum(durations) == total_cs * 10  # round(n * 100 / fps) cs; 30 ms x 61 before
    assert max(durations) - min(durations) <= 10  # each within a centisecond of 100 / fps


def test_gif_above_50_fps_keeps_its_playing_time_with_delays_viewers_honour(tmp_path):
    path = video.write_video(frames(60), tmp_path / "v.gif", fps=60)
    durations = gif_durations(path)
    assert sum(durations) == 1000  # 60 frames at 60 fps: one second, to the centisecond
    assert set(durations) == {20, 30}  # 1 cs delays play as 10 cs in browsers: every third frame or so is dropped


def test_gif_frames_read_back_as_written(tmp_path):
    import imageio.v3 as iio

    given = frames(12, size=(33, 47))
    given[5] = given[4].copy()  # shown as one frame, twice as long
    path = video.write_video(given, tmp_path / "v.gif", fps=10)
    back = iio.imread(path, index=None)[..., :3]
    assert back.shape == (11, 33, 47, 3)
    assert np.array_equal(back[:5], np.stack(given[:5])) and np.array_equal(back[5:], np.stack(given[6:]))
    assert gif_durations(path)[4] == 200


# ------------------------------------------------------------------------------------ 2. frames streamed
@pytest.mark.parametrize("suffix", [".mp4", ".gif"])
def test_eval_video_memory_does_not_grow_with_the_episode(tmp_path, monkeypatch, suffix):
    import tracemalloc

    from proxima.evaluate import evaluate

    if suffix == ".mp4" and not HAS_FFMPEG:
        pytest.skip("needs imageio-ffmpeg")
    monkeypatch.syspath_prepend(str(tmp_path))
    env_id = write_envs(tmp_path, "bars_long", limit=300, height=200, width=300)  # 300 frames of 180 kB: 54 MB held whole
    policy = policy_for(env_id)
    tracemalloc.start()
    try:
        result = evaluate(policy, episodes=1, video=str(tmp_path / f"v{suffix}"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result["lengths"] == [300] and Path(result["video"]).is_file()
    assert peak < 20e6, peak  # held whole: 54 MB


def test_write_video_reads_an_iterable_a_frame_at_a_time(tmp_path):
    given, live = frames(30), []

    def one_at_a_time():
        for i, f in enumerate(given):
            live.append(i)
            yield f

    path = video.write_video(one_at_a_time(), tmp_path / "v.gif", fps=30)
    assert live == list(range(30)) and len(gif_durations(path)) == 30


# ------------------------------------------------------------------------------------ 3. SIGTERM, SIGHUP
CHILD = '''
import sys
sys.path.insert(0, sys.argv[1])
import torch
from proxima.agent import Agent
from proxima.checkpoint import Policy
from proxima.envs import make_env
from proxima.evaluate import evaluate

env = make_env("bars_slow:Bars", 1)
policy = Policy(Agent(env.single_observation_space, env.single_action_space), None, {"env_id": "bars_slow:Bars", "seed": 1},
                env.single_observation_space, env.single_action_space, "cpu", env_kwargs={"sleep": 0.005})
env.close()
evaluate(policy, episodes=1, video=sys.argv[2], max_steps=2000)  # 10 s or more
'''


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_a_stop_signal_while_the_video_is_written_leaves_no_temp_file(tmp_path, sig):
    write_envs(tmp_path, "bars_slow", limit=10**6)
    (tmp_path / "child.py").write_text(CHILD)
    out = tmp_path / "out"
    out.mkdir()
    child = warm_python.Popen([sys.executable, str(tmp_path / "child.py"), str(tmp_path), str(out / "v.gif")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not list(out.iterdir()) and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.poll() is None, child.communicate()[1].decode()[-2000:]
        assert [p.name for p in out.iterdir()][0].startswith(".v."), list(out.iterdir())  # the temp file, being written
        time.sleep(0.5)  # before: written after the episode, and the signal landed while Pillow wrote it
        child.send_signal(getattr(signal, sig))
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -getattr(signal, sig), err.decode()[-2000:]  # ended by the signal, as before
    assert list(out.iterdir()) == []  # before: .v.XXXX.tmp.gif left there


def test_the_handlers_and_sdl_settings_are_put_back_after_the_evaluation(tmp_path, monkeypatch):
    from proxima.evaluate import evaluate

    monkeypatch.syspath_prepend(str(tmp_path))
    env_id = write_envs(tmp_path, "bars_seen", limit=3)
    seen = []
    import bars_seen

    real = bars_seen.Bars.render
    monkeypatch.setattr(bars_seen.Bars, "render", lambda self: (seen.append((
        os.environ.get("SDL_VIDEODRIVER"), os.environ.get("SDL_AUDIODRIVER"), signal.getsignal(signal.SIGTERM))), real(self))[1])
    monkeypatch.delenv("SDL_VIDEODRIVER", raising=False)
    monkeypatch.delenv("SDL_AUDIODRIVER", raising=False)
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        evaluate(policy_for(env_id), episodes=1, video=str(tmp_path / "v.gif"))
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, before)
    assert seen and all(s[:2] == ("dummy", "dummy") and s[2] is not signal.SIG_DFL for s in seen)
    assert "SDL_VIDEODRIVER" not in os.environ and "SDL_AUDIODRIVER" not in os.environ


# ------------------------------------------------------------------------------------ 4. no SDL line
@pytest.mark.skipif(importlib.util.find_spec("pygame") is None, reason="needs pygame (Gymnasium's drawing)")
def test_gymnasium_drawn_video_prints_no_sdl_line(tmp_path):
    code = textwrap.dedent('''
        import sys
        from pathlib import Path
        sys.path.insert(0, sys.argv[1])
        from test_review28_video import policy_for
        from proxima.evaluate import evaluate
        result = evaluate(policy_for("CartPole-v1", "gymnasium"), episodes=1, backend="gymnasium", video=sys.argv[2])
        assert Path(result["video"]).is_file()
    ''')
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "SDL_VIDEODRIVER", "SDL_AUDIODRIVER")}
    done = warm_python.run([sys.executable, "-c", code, str(Path(__file__).parent), str(tmp_path / "g.gif")], env=env,
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)  # cwd: -c imports from it first
    assert done.returncode == 0, done.stderr
    assert "XDG_RUNTIME_DIR" not in done.stderr and not any(line.startswith("error:") for line in done.stderr.splitlines()), \
        done.stderr


# ------------------------------------------------------------------------------------ 5. GIF fallback said first
def test_the_gif_fallback_is_said_before_any_episode_runs(tmp_path, monkeypatch, capsys):
    import proxima.evaluate as ev

    class Stop(Exception):
        pass

    said = []

    def make_env_spy(*args, **kwargs):
        said.append(capsys.readouterr().err)
        raise Stop

    policy = policy_for("CartPole-v1")
    monkeypatch.setattr(video, "has_mp4_encoder", lambda: False)
    monkeypatch.setattr(ev, "make_env", make_env_spy)
    with pytest.raises(Stop):
        ev.evaluate(policy, episodes=1, video=str(tmp_path / "v.mp4"))
    assert said == [f"proxima: no MP4 encoder (the video extra: .venv/bin/pip install -c requirements.lock -e '.[video]'); "
                    f"writing a GIF instead: {tmp_path / 'v.gif'}\n"]


# ------------------------------------------------------------------------------------ 6. odd sizes
@needs_ffmpeg
def test_odd_frames_are_padded_to_even_not_rescaled(tmp_path, caplog, capfd):
    import imageio.v3 as iio

    given = []
    for i in range(6):
        f = np.zeros((63, 95, 3), np.uint8)
        f[:, 94] = 255  # the last column: padded beside itself, a rescale would smear it over 2
        f[62, :] = 255
        f[10:20, 10 + i: 30 + i] = 120
        given.append(f)
    path = video.write_video(given, tmp_path / "odd.mp4", fps=10)
    back = iio.imread(path, index=None)
    assert back.shape == (6, 64, 96, 3)
    assert np.abs(back[:, :63, :95].astype(int) - np.stack(given).astype(int)).mean() < 2  # 6.9 rescaled
    assert back[:, :, 95].min() > 200 and back[:, 63].min() > 200  # the edge row and column, repeated
    assert back[:, 30:40, 93].max() < 40  # next to the bright last column, still dark: not smeared
    assert "macro_block_size" not in caplog.text + "".join(capfd.readouterr())


# ------------------------------------------------------------------------------------ 7. --video names
def test_a_dotted_name_gets_mp4_appended_and_a_file_type_is_refused(tmp_path):
    ext = ".mp4" if HAS_FFMPEG else ".gif"
    assert video.video_target(tmp_path / "cartpole.seed1") == tmp_path / f"cartpole.seed1{ext}"
    assert video.video_target(tmp_path / "lr3e-4.seed1.gif") == tmp_path / "lr3e-4.seed1.gif"
    for typed in ("v.txt", "v.avi", "v.png"):
        with pytest.raises(video.VideoError, match=f"unsupported video type '{Path(typed).suffix}'"):
            video.video_target(tmp_path / typed)


def test_eval_writes_a_dotted_name_with_mp4_appended(tmp_path):
    from proxima.evaluate import evaluate

    result = evaluate(policy_for("CartPole-v1"), episodes=1, video=str(tmp_path / "cartpole.seed1"))
    ext = ".mp4" if HAS_FFMPEG else ".gif"
    assert result["video"] == str(tmp_path / f"cartpole.seed1{ext}") and Path(result["video"]).is_file()


def test_an_existing_video_is_replaced_and_that_is_said_before_the_episodes(tmp_path, capsys):
    from proxima.evaluate import evaluate

    old = tmp_path / "v.gif"
    old.write_bytes(b"old video")
    result = evaluate(policy_for("CartPole-v1"), episodes=1, video=str(old))
    err = capsys.readouterr().err
    assert err == f"proxima: --video {old} exists; the new video replaces it once written (the old one stays if the evaluation fails)\n"
    assert result["video"] == str(old) and old.read_bytes()[:6] == b"GIF89a"


# ------------------------------------------------------------------------------------ the CLI's words
def test_eval_help_says_which_frame_rate_and_names_the_video_gets(capsys):
    from proxima.cli import main

    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "at the env's render_fps (its metadata's; 30 if it names none; Atari 15)" in text
    assert "one that is no file type as in run.seed1: .mp4 appended; an existing FILE is replaced" in text


def test_the_population_refusal_quotes_the_video_path(tmp_path, capsys):
    from cli_helpers import error_line, run_main

    pop = tmp_path / "pop"
    pop.mkdir()
    (pop / "population.json").write_text('{"env_id": "CartPole-v1"}')
    code, _, err = run_main(["eval", str(pop), "--video", str(tmp_path / "my ep.mp4")], capsys)
    line = error_line(code, err, "record one member")
    assert line.endswith(f"--video '{tmp_path / 'my ep.mp4'}'"), line
    assert not (tmp_path / "my ep.mp4").exists()


# ------------------------------------------------------------------------------------ 3b. the writer's end, not its Thread
STOPPED = '''
import os, signal, sys, threading, time, traceback
sys.path.insert(0, sys.argv[1])
import numpy as np
from proxima import video

out, when = sys.argv[2], sys.argv[3]
main = threading.main_thread().ident
real = video._Frames.__next__


def main_in(*names):
    return set(names) <= {f.name for f in traceback.extract_stack(sys._current_frames()[main])}


def next_frame(self):  # the writer, mid-video: a SIGHUP once the evaluation's thread is where ``when`` says
    if self.count == 2:
        while not (main_in("finish", "wait") if when == "finish" else os.listdir(out)):
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.5)  # the encoder still busy as the signal lands
    return real(self)


video._Frames.__next__ = next_frame
frames = [np.full((40, 60, 3), 40 * i, np.uint8) for i in range(4)]
with video.recording():
    feed = video.VideoFeed(os.path.join(out, "v.gif"), 30)
    if when == "finish":  # the KeyboardInterrupt lands in finish()'s wait: was Thread.join, marked ended by it
        for f in frames:
            feed.put(f)
        feed.finish()
    else:  # the caller never abandons the feed (evaluate's window before it holds the FrameRecorder)
        feed.put(frames[0])
        feed.put(frames[1])
        while True:
            time.sleep(0.01)
raise SystemExit("no signal came")
'''


@pytest.mark.parametrize("when", ["finish", "unheld"])
def test_a_sighup_never_leaves_the_temp_file_whatever_the_writer_thread_seems(tmp_path, when):
    (tmp_path / "child.py").write_text(STOPPED)
    out = tmp_path / "out"
    out.mkdir()
    root = str(Path(video.__file__).resolve().parents[1])
    done = warm_python.run([sys.executable, str(tmp_path / "child.py"), root, str(out), when], capture_output=True,
                           text=True, timeout=120)
    assert done.returncode == -signal.SIGHUP, done.stderr[-2000:]
    assert list(out.iterdir()) == []  # before: .v.XXXX.tmp.gif (finish: every time; unheld: every time)
