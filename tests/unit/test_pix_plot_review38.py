"""Review 38 (pixels, populations): check-env says how an image is read when a check fails too,
--video names what a render() that is no array returned, and plot puts panels of one env and
metric on one y-scale in colours of their own."""

from __future__ import annotations

import numpy as np
import pytest

from tests.cli_helpers import TINY_RUN, error_line, fake_run_dir, module_written_in, run_main, tiny_population

#: the reviewer's envs (pixenv.py), cut to what these tests need: a frame stack whose reset is not
#: seed-deterministic (one FAIL), the same with a deterministic reset, and renders that are no array
PIXENV = '''
import numpy as np
import gymnasium as gym
from gymnasium import spaces
from gymnasium.wrappers import FrameStackObservation


class StepImg(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode=None):
        self.observation_space = spaces.Box(0, 255, (84, 84, 3), np.uint8)
        self.action_space = spaces.Discrete(2)
        self.render_mode, self.ep, self.t = render_mode, -1, 0

    def _obs(self):
        o = np.zeros((84, 84, 3), np.uint8)
        o[..., 0] = (10 * (self.ep % 25) + self.t) % 256
        return o

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.ep += 1
        self.t = 0
        return self._obs(), {}

    def step(self, a):
        self.t += 1
        return self._obs(), 1.0, self.t >= 5, False, {}

    def render(self):
        return self._obs()


class Det(StepImg):
    def reset(self, seed=None, options=None):
        if seed is not None:
            self.ep = -1
        return super().reset(seed=seed, options=options)


def stacked(render_mode=None):
    return FrameStackObservation(StepImg(render_mode), 4)


def det_stacked(render_mode=None):
    return FrameStackObservation(Det(render_mode), 4)


class Vec(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    returned = None

    def __init__(self, render_mode=None):
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.render_mode, self.t = render_mode, 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, a):
        self.t += 1
        return np.zeros(2, np.float32), 1.0, self.t >= 3, False, {}


class DictRender(Vec):
    def render(self):
        return {"cam": np.zeros((8, 8, 3), np.uint8), "vec": np.zeros(2, np.float32)}


class StrRender(Vec):
    def render(self):
        return "frame"


class ListRender(Vec):
    def render(self):
        return [np.zeros((8, 8, 3), np.uint8), np.zeros((4, 4, 3), np.uint8)]
'''

STACK_READING = ("observation: image (4, 84, 84, 3) a stack of 4 channels-last frames (12 channels), 0..255 scaled to "
                 "[0, 1], CNN encoder under --encoder auto")
STACK_SPACES = ("spaces: obs Box(4, 84, 84, 3) uint8 -> image (12, 84, 84) (a stack of 4 frames) /255, Nature CNN (512 "
                "features), linear actor and critic heads; action Discrete(2) -> categorical over 2")


@pytest.fixture
def pixenv(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "pixenv38", PIXENV)


# ----------------------------------------------------------------------------------- check-env
def test_check_env_says_how_an_image_is_read_when_a_check_fails(pixenv, capsys):
    code, out, _ = run_main(["check-env", "pixenv38:stacked", "--steps", "10"], capsys)
    lines = out.strip().splitlines()
    assert code == 1
    assert lines[0].startswith("FAIL reset determinism: ")
    # then the spaces line a run prints (spaces.spaces_line), last before the count
    assert lines[-3:] == [STACK_READING, STACK_SPACES, "1 violation(s) in pixenv38:stacked"]


def test_check_env_still_says_it_on_the_ok_line_only_when_clean(pixenv, capsys):
    code, out, _ = run_main(["check-env", "pixenv38:det_stacked", "--steps", "10"], capsys)
    lines = out.strip().splitlines()
    assert code == 0
    assert len(lines) == 2 and lines[0] == STACK_SPACES  # the spaces line a run prints, then the OK line alone
    assert lines[1].startswith("OK: pixenv38:det_stacked passes ") and lines[1].endswith(f" checks; {STACK_READING}")


def test_check_env_of_a_native_image_env_says_how_it_is_read(capsys):
    code, out, _ = run_main(["check-env", "proxima.envs.synthetic:PixelQuadrant", "--steps", "3"], capsys)
    assert code == 0
    assert out.strip().endswith("checks; observation: image (36, 36, 3) channels-last, 0..255 scaled to [0, 1], "
                                "CNN encoder under --encoder auto")


# ----------------------------------------------------------------------------------- --video
@pytest.mark.parametrize("env, returned", [
    ("DictRender", "a dict of 2 items"),
    ("StrRender", "a str"),
    ("ListRender", "a list of 2 items"),  # ragged: numpy cannot stack it at all
])
def test_video_names_what_a_render_that_is_no_array_returned(env, returned, pixenv, tmp_path_factory, capsys):
    run = tmp_path_factory.mktemp("vid") / "run"
    code, _, err = run_main(["train", f"pixenv38:{env}", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(run),
                             "--quiet"], capsys)
    assert code == 0, err
    video = run.parent / "x.gif"
    code, _, err = run_main(["eval", str(run), "--env", f"pixenv38:{env}", "--episodes", "1", "--video", str(video)],
                            capsys)
    line = error_line(code, err)
    assert (f"--video {video}: env 'pixenv38:{env}' renders no frames: render() returned {returned}, not an (H, W, 3) "
            "uint8 array") in line
    assert "shape ()" not in line
    assert not video.exists()


def test_a_later_frame_that_is_no_array_names_its_index_and_type():
    from proxima.video import FrameError, _Frames

    with pytest.raises(FrameError) as e:
        list(_Frames([np.zeros((4, 4, 3), np.uint8), None]))
    assert str(e.value).startswith("frame 1: render() returned None, not an (H, W, 3) uint8 array")


def test_a_nested_list_that_reads_as_a_frame_is_still_one():
    from proxima.video import check_frame

    check_frame(np.zeros((4, 4, 3), np.uint8).tolist())  # raises nothing: a render() may build its frame as lists


# ----------------------------------------------------------------------------------- plot
def _visible_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def test_plot_panels_of_one_env_and_metric_share_their_y_scale_and_not_their_colour(tmp_path):
    from proxima.plot import collect_panels, draw_panels

    strong = fake_run_dir(tmp_path, "strong", steps=(100, 200, 300), returns=(25.0, 100.0, 175.0), lr=0.001)
    weak = fake_run_dir(tmp_path, "weak", steps=(100, 200, 300), returns=(15.0, 30.0, 40.0), lr=0.002)
    other = fake_run_dir(tmp_path, "other", steps=(100, 200), returns=(1.0, 2.0), env_id="Other-v0")
    fig = draw_panels(collect_panels([strong, weak, other], "charts/episodic_return", panels="per-setting"))  # the returns as written
    a, b, c = _visible_axes(fig)
    assert a.get_ylim() == b.get_ylim()
    low, high = a.get_ylim()
    assert low <= 15.0 and high >= 175.0  # both panels span both runs' values
    assert c.get_ylim()[1] < 3.0  # another env keeps its own scale
    [line_a], [line_b] = a.get_lines(), b.get_lines()
    assert line_a.get_color() != line_b.get_color()


def test_plot_of_two_populations_shares_their_y_scale(tmp_path_factory):
    from proxima.plot import collect_panels, draw_panels

    short, longer = tiny_population(tmp_path_factory, "p1", 64), tiny_population(tmp_path_factory, "p2", 128)
    panels = collect_panels([short, longer], panels="per-setting")  # per-env overlays them in one panel
    assert [p.env for p in panels] == ["CartPole-v1", "CartPole-v1"]
    a, b = _visible_axes(draw_panels(panels))
    assert a.get_ylim() == b.get_ylim()
    values = np.concatenate([c.y for _, _, cs in panels for c in cs])
    assert a.get_ylim()[0] <= values.min() and a.get_ylim()[1] >= values.max()
    assert a.get_lines()[0].get_color() != b.get_lines()[0].get_color()


class _GpuTensor:
    """A stand-in for a CUDA tensor render(): shape and dtype as an array's, but numpy cannot read it."""
    shape, dtype = (4, 4, 3), np.dtype(np.float32)

    def __array__(self, *args, **kwargs):
        raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor")


def test_a_frame_numpy_cannot_read_is_named_not_a_traceback():
    from proxima.video import VideoError, check_frame

    with pytest.raises(VideoError) as e:
        check_frame(_GpuTensor())
    assert str(e.value).startswith("frames of type _GpuTensor that numpy cannot read (can't convert cuda:0 device type")


@pytest.mark.parametrize("frame, returned", [
    (3, "an int"), (3.0, "a float"),
    (np.int64(3), "an int64"),  # a numpy scalar has a shape and dtype, yet is no array: "shape ()" would hide it
])
def test_a_scalar_render_is_named_by_its_type_and_article(frame, returned):
    from proxima.video import VideoError, check_frame

    with pytest.raises(VideoError) as e:
        check_frame(frame)
    assert str(e.value).startswith(f"no frames: render() returned {returned}, not an (H, W, 3) uint8 array"), str(e.value)
