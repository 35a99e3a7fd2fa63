"""Review 33's surviving mutants of proxima/video.py and proxima/envs/render.py: the GIF's last delay
above 50 fps, the fps and empty-frames checks, a user's own SIGHUP/SIGTERM handlers, the Pillow check,
float frames whose max is exactly 1, VideoFeed's copies, bounded queue and Ctrl-C in finish(), the
ffmpeg encoder check, and the drawing geometry of the native envs' frames (against Gymnasium's own)."""

from __future__ import annotations

import importlib.util
import signal
import threading
import time

import numpy as np
import pytest

from proxima import video
from proxima.config import extra_install
from proxima.envs import render
from tests.unit.test_review28_video import gif_durations

HAS_FFMPEG = video.has_mp4_encoder()


def two_frames() -> list:
    a = np.zeros((8, 10, 3), np.uint8)
    b = a.copy()
    b[:, :5] = 200
    return [a, b]


# ------------------------------------------------------------------------------------ write_video
def test_gif_last_frame_above_50_fps_keeps_a_delay_viewers_honour(tmp_path):
    # at 60 fps the last frame's own time rounds to 1 cs, which browsers play as 10 cs
    path = video.write_video(two_frames(), tmp_path / "v.gif", fps=60)
    assert gif_durations(path) == [20, 20]


@pytest.mark.parametrize("fps", [0, -1, float("nan"), float("inf"), True, "30"])
def test_an_fps_that_is_no_positive_number_is_refused_before_any_file(tmp_path, fps):
    with pytest.raises(video.VideoError, match=r"^fps must be a positive number, got "):
        video.write_video(two_frames(), tmp_path / "v.gif", fps=fps)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("suffix", [".gif", ".mp4"])
@pytest.mark.parametrize("given", [list, iter], ids=["list", "iterable"])
def test_no_frames_is_said_as_such_and_leaves_no_file(tmp_path, suffix, given):
    if suffix == ".mp4" and not HAS_FFMPEG:
        pytest.skip("needs imageio-ffmpeg")
    with pytest.raises(video.VideoError) as caught:
        video.write_video(given([]), tmp_path / f"v{suffix}", fps=30)
    assert str(caught.value).startswith("no frames to write"), str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_float_frames_whose_max_is_exactly_one_are_unit_pixels():
    assert np.all(video._check_frames([np.ones((4, 4, 3), np.float32)])[0] == 255)  # not 1 of 255: a black video
    half = np.zeros((2, 2, 3), np.float64)
    half[0] = 1.0
    out = video._check_frames([half])[0]
    assert np.all(out[0] == 255) and np.all(out[1] == 0)


def test_a_gif_without_pillow_is_refused_up_front_with_the_extra_to_install(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    missing = {"PIL", "imageio", "imageio_ffmpeg"}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: None if name in missing else real(name, *a, **k))
    with pytest.raises(video.VideoError) as caught:
        video.video_target(tmp_path / "x.mp4")
    message = str(caught.value)
    assert "writing a GIF needs Pillow" in message and extra_install("video") in message, message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not HAS_FFMPEG, reason="needs imageio-ffmpeg")
def test_ffmpeg_encoders_are_read_and_a_missing_one_is_refused_before_evaluating(tmp_path, monkeypatch):
    monkeypatch.setattr(video, "_ENCODERS", None)  # probe the real binary, not another test's cache
    assert "libx264" in video._ffmpeg_encoders()
    monkeypatch.setattr(video, "_ENCODERS", frozenset({"libx264"}))
    assert video.video_target(tmp_path / "x.mp4") == tmp_path / "x.mp4"
    with pytest.raises(video.VideoError, match=r"x\.webm: this ffmpeg has no libvpx-vp9 encoder for \.webm"):
        video.video_target(tmp_path / "x.webm")


# ------------------------------------------------------------------------------------ recording()
@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="needs SIGHUP")
def test_recording_leaves_a_users_own_signal_handlers_alone():
    def mine(signum, frame):  # pragma: no cover - never sent
        pass

    old_hup, old_term = signal.signal(signal.SIGHUP, signal.SIG_IGN), signal.signal(signal.SIGTERM, mine)
    try:
        with video.recording():
            # nohup's SIG_IGN: replaced, `nohup proxima eval --video` would die on logout
            inside = signal.getsignal(signal.SIGHUP), signal.getsignal(signal.SIGTERM)
        after = signal.getsignal(signal.SIGHUP), signal.getsignal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGHUP, old_hup)
        signal.signal(signal.SIGTERM, old_term)
    assert inside == (signal.SIG_IGN, mine) and after == (signal.SIG_IGN, mine)


# ------------------------------------------------------------------------------------ VideoFeed
@pytest.fixture
def held_writer(monkeypatch):
    """write_video replaced by one that reads no frame until ``go`` is set, then collects them all."""
    go, got = threading.Event(), []

    def fake(frames, path, fps):
        assert go.wait(20), "the test never let the writer go"
        got.extend(frames)
        return str(path)

    monkeypatch.setattr(video, "write_video", fake)
    yield go, got
    go.set()


def test_video_feed_keeps_a_copy_of_a_frame_drawn_into_the_same_buffer(tmp_path, held_writer):
    go, got = held_writer
    feed, buffer = video.VideoFeed(tmp_path / "v.gif", 30), np.zeros((4, 6, 3), np.uint8)
    for i in range(5):
        buffer[...] = i  # an env that draws each frame into the array it returned last time
        feed.put(buffer)
    go.set()
    assert feed.finish() == str(tmp_path / "v.gif")
    assert [int(f[0, 0, 0]) for f in got] == [0, 1, 2, 3, 4]


def test_video_feed_holds_a_few_frames_and_makes_the_episode_wait_for_a_slow_encoder(tmp_path, held_writer):
    go, got = held_writer
    feed, frame = video.VideoFeed(tmp_path / "v.gif", 30), np.zeros((4, 6, 3), np.uint8)
    putter = threading.Thread(target=lambda: [feed.put(frame) for _ in range(50)], daemon=True)
    putter.start()
    putter.join(0.6)
    try:
        assert putter.is_alive(), "50 frames queued at once: memory grows with the episode under a slow encoder"
        assert feed._queue.qsize() <= 8
    finally:
        go.set()
        putter.join(10)
    assert feed.finish() == str(tmp_path / "v.gif") and len(got) == 50


def test_ctrl_c_in_video_feed_finish_removes_the_temp_file_and_ends_the_writer(tmp_path):
    feed = video.VideoFeed(tmp_path / "v.gif", 30)
    for f in two_frames() * 2:
        feed.put(f)
    deadline = time.monotonic() + 20
    while not list(tmp_path.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [p.name for p in tmp_path.iterdir()][0].startswith(".v."), list(tmp_path.iterdir())  # being written
    real_hand = feed._hand

    def interrupted(item):  # Ctrl-C while the end of the video is handed to the writer
        if item is video._END:
            raise KeyboardInterrupt
        real_hand(item)

    feed._hand = interrupted
    with pytest.raises(KeyboardInterrupt):
        feed.finish()
    feed._thread.join(10)
    assert not feed._thread.is_alive(), "the writer still waits for frames that will never come"
    assert list(tmp_path.iterdir()) == []  # neither the temp file nor a video of a cut evaluation


# ------------------------------------------------------------------------------------ native frames
POLE, CART_AXLE, ROD, LINK = (202, 152, 101), (129, 132, 203), (204, 77, 77), (0, 204, 204)
BLACK = (0, 0, 0)


def mask(image: np.ndarray, color) -> np.ndarray:
    return np.all(image == np.asarray(color, np.uint8), axis=-1)


def iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max((a | b).sum(), 1))


def ends(m: np.ndarray) -> tuple:
    """Mean column of a shape's top five rows and of its bottom five (image rows): which way it leans."""
    rows = np.flatnonzero(m.any(axis=1))
    top, bottom = m[rows[0] : rows[0] + 5], m[rows[-1] - 4 : rows[-1] + 1]
    return np.nonzero(top)[1].mean(), np.nonzero(bottom)[1].mean()


def cart_rows_only(m: np.ndarray) -> np.ndarray:
    """CartPole's black pixels without the track (image rows ~299-300, drawn 1 px by pygame, 2 here)."""
    out = m.copy()
    out[296:304] = False
    return out


def test_cartpole_pole_leans_toward_positive_theta_and_the_cart_scales_with_x():
    image = render.render_cartpole(1.0, 0.3)
    pole, axle = mask(image, POLE), mask(image, CART_AXLE)
    top, bottom = ends(pole)
    assert top > bottom + 20  # Gymnasium: theta > 0 leans the pole right, its top further right than its foot
    assert np.nonzero(pole)[1].mean() > np.nonzero(axle)[1].mean() + 10
    assert abs(pole.sum() - 10 * 125) < 0.15 * 10 * 125  # a 10 x 125 px rectangle, not one smeared to its box
    cols = np.nonzero(cart_rows_only(mask(image, BLACK)))[1]
    assert abs(cols.mean() - (300 + 1.0 * 125)) < 3  # 600 px for 2 x 2.4 world units


def test_pendulum_rod_is_not_mirrored():
    image = render.render_pendulum(0.5)
    rod = mask(image, ROD)
    rows, cols = np.nonzero(rod)
    assert cols.mean() < 240 and rows.mean() < 240  # theta 0 is up; positive theta turns it left (Gymnasium)
    top, bottom = ends(rod)
    assert top < bottom - 20  # its free end, up and left; the axle at the centre


def test_acrobot_first_link_hangs_down():
    straight = mask(render.render_acrobot(0.0, 0.0), LINK)
    rows, cols = np.nonzero(straight)
    assert rows.min() >= 240 and abs(cols.mean() - 249.5) < 1  # theta1 = 0: straight down from the pivot
    turned = mask(render.render_acrobot(0.4, 0.0), LINK)
    top, bottom = ends(turned)
    assert np.nonzero(turned)[0].mean() > 260 and bottom > top + 20  # swung right as it hangs


def _gymnasium_frame(cls, state, **attrs) -> np.ndarray:
    env = cls(render_mode="rgb_array")
    try:
        env.reset(seed=0)
        env.state = np.asarray(state, dtype=np.float64)
        for name, value in attrs.items():
            setattr(env, name, value)
        return env.render()
    finally:
        env.close()


@pytest.mark.skipif(importlib.util.find_spec("pygame") is None, reason="needs pygame (Gymnasium's drawing)")
def test_native_frames_draw_what_gymnasiums_own_render_draws(monkeypatch):
    from gymnasium.envs.classic_control import acrobot, cartpole, mountain_car, pendulum

    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    monkeypatch.setenv("SDL_AUDIODRIVER", "dummy")
    gym_cp, ours_cp = _gymnasium_frame(cartpole.CartPoleEnv, [1.0, 0, 0.3, 0]), render.render_cartpole(1.0, 0.3)
    gym_pe, ours_pe = _gymnasium_frame(pendulum.PendulumEnv, [0.5, 0], last_u=None), render.render_pendulum(0.5)
    gym_ac, ours_ac = _gymnasium_frame(acrobot.AcrobotEnv, [0.4, 0, 0, 0]), render.render_acrobot(0.4, 0.0)
    # the car alone: black pixels that a car elsewhere on the same curve does not have (curve, flag, track)
    gym_mc = [_gymnasium_frame(mountain_car.MountainCarEnv, [p, 0]) for p in (-0.2, -1.0)]
    ours_mc = [render.render_mountain_car(p, 0.5) for p in (-0.2, -1.0)]
    car_gym = mask(gym_mc[0], BLACK) & ~mask(gym_mc[1], BLACK)
    car_ours = mask(ours_mc[0], BLACK) & ~mask(ours_mc[1], BLACK)
    # pygame anti-aliases edges and caps a link square where ours is round: ~0.86-0.96 when they agree
    overlaps = {
        "CartPole pole": iou(mask(gym_cp, POLE), mask(ours_cp, POLE)),
        "CartPole cart": iou(cart_rows_only(mask(gym_cp, BLACK)), cart_rows_only(mask(ours_cp, BLACK))),
        "Pendulum rod": iou(mask(gym_pe, ROD), mask(ours_pe, ROD)),
        "Acrobot links": iou(mask(gym_ac, LINK), mask(ours_ac, LINK)),
        "MountainCar car": iou(car_gym, car_ours),
    }
    assert all(v > 0.75 for v in overlaps.values()), overlaps
    assert ours_cp.shape == gym_cp.shape and ours_pe.shape == gym_pe.shape and ours_mc[0].shape == gym_mc[0].shape
