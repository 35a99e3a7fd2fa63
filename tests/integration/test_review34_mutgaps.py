"""Review 34's mutation review: the behaviours no test pinned, each asserted where it is decided (a direct
call wherever one shows it; hand-made populations where only a report does): a frame stack's (C, H, W) of
a non-square image, the comparison of settings and populations (the best row, the reference, the measures
that must agree, the dagger), the run's eval episodes, the normalization wrappers found, an image's
declared high, presets and config-file advice."""

from __future__ import annotations


import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima import population_report as pr
from proxima.config import ConfigError, did_you_mean, load_config_file
from proxima.envs.base import EnvError
from proxima.envs.gym_adapter import EnvCalls, normalize_wrappers
from proxima.envs.spaces import image_chw, obs_layout, unit_image_layout
from proxima.nets import PixelInput, cnn_chw
from proxima.presets import other_versions, preset_config
from proxima.report import DEFAULT_EVAL_EPISODES, run_eval_episodes
from proxima.rundir import python_command
from tests.integration import test_review34_compare as cmp


# ------------------------------------------------------------------ frame stacks of non-square frames
@pytest.mark.parametrize("shape, layout", [((2, 6, 8, 3), "nhwc"), ((2, 3, 6, 8), "nchw")])
def test_a_stack_of_non_square_frames_keeps_height_and_width_apart(shape, layout):
    """6 high, 8 wide: the CNN's input is (N * C, 6, 8) and each channel is frame f's channel c, H and W
    in place (a square image cannot tell H from W)."""
    part = obs_layout(gym.spaces.Box(0, 255, shape, np.uint8)).parts[0]
    assert part.layout == layout
    assert image_chw(layout, shape) == (6, 6, 8) and cnn_chw(part) == (6, 6, 8)
    x = torch.randint(0, 256, (2, *shape), dtype=torch.uint8)
    out = PixelInput(part)(x)
    assert tuple(out.shape) == (2, 6, 6, 8)
    frames = x if layout == "nchw" else x.permute(0, 1, 4, 2, 3)  # (B, N, C, H, W)
    for f in range(2):
        for c in range(3):
            assert torch.equal((out[:, f * 3 + c] * 255).round().to(torch.uint8), frames[:, f, c])


@pytest.mark.parametrize("dtype", [np.float16, np.int16])
def test_a_0_1_box_of_another_dtype_than_float32_or_float64_is_no_unit_image(dtype):
    assert unit_image_layout(gym.spaces.Box(0, 1, (3, 40, 40), np.float32)) == "chw"  # the one that is
    assert unit_image_layout(gym.spaces.Box(0, 1, (3, 40, 40), dtype)) is None


# ------------------------------------------------------------------ comparing settings
def _row(returns, kind="eval", iqm=None, settings=None):
    return {"kind": kind, "returns": list(returns), "iqm": pr.iqm(np.asarray(returns)) if iqm is None else iqm,
            "settings": settings or {}, "n": len(returns), "sources": ["eval"] if returns else []}


def test_an_eval_return_is_not_compared_with_a_training_return():
    c = pr.compare_rows(_row([1.0, 2.0, 3.0]), _row([1.0, 2.0, 3.0], kind="training"))
    assert (c["p"], c["ci"]) == (None, None)
    assert c["why"] == ("its final return is the deterministic eval return, the other's the last (stochastic) "
                        "training return")


def test_the_dagger_marks_a_reference_of_few_members_too():
    """X of 5 members against a Y of 3: "either has fewer than 5" holds by Y."""
    c = pr.compare_rows(_row([1.0, 2.0, 3.0, 4.0, 5.0]), _row([2.0, 3.0, 4.0]))
    assert c["few"] is True and c["ci"] is not None
    assert pr.compare_rows(_row([1.0, 2.0, 3.0, 4.0, 5.0]), _row([2.0, 3.0, 4.0, 5.0, 6.0]))["few"] is False


def test_the_best_row_is_the_first_of_equal_iqms_and_skips_a_nan():
    assert pr.best_row([_row([1.0], iqm=5.0), _row([2.0], iqm=5.0), _row([0.0], iqm=1.0)]) == 0
    assert pr.best_row([_row([1.0], iqm=float("nan")), _row([2.0], iqm=1.0)]) == 1
    assert pr.best_row([_row([], iqm=float("nan"))]) is None


def test_probability_of_improvement_tells_values_float32_would_merge():
    x, y = [16_777_217.0], [16_777_216.0]  # 2**24 + 1 and 2**24: one float32
    assert pr.probability_of_improvement(x, y) == 1.0
    assert pr.probability_of_improvement([1.0 + 1e-12], [1.0]) == 1.0


def test_a_single_setting_has_no_comparison_section():
    assert pr.comparison_section([_row([1.0, 2.0, 3.0], settings={"lr": 0.1})]) == []


def test_the_third_population_that_differs_is_named():
    assert pr._differs(["A", "B", "C"], ["Fake-v0", "Fake-v0", "Other-v0"], "env id") == \
        "env id Fake-v0 (A) vs Other-v0 (C)"
    assert pr._differs(["A", "B", "C"], ["Fake-v0"] * 3, "env id") is None


def test_what_a_population_measures_holds_every_count_and_only_counted_rows_kinds():
    rows = [{"kind": "eval", "sources": ["eval"], "measured": {"a": (4096, 10), "b": (4096, 20)}},
            {"kind": "training", "sources": [], "measured": {}}]  # every member diverged: nothing measured
    assert pr._measure(rows) == {"final return": "deterministic eval return", "evaluation episodes": "10/20"}


def test_an_older_eval_json_without_a_step_is_counted_beside_the_known_step():
    rows = [{"measured": {"a": (4096, 20), "b": (None, 20)}}]
    assert pr._measured_text(rows, None) == \
        " Evaluated at step 4,096 (1 older eval.json without a step), over 20 episodes per member."


def test_populations_are_compared_with_the_first_populations_best_row(tmp_path):
    """A's best is its second setting; B's only row would be another index: Y is A's lr=0.2."""
    a = cmp._population(tmp_path / "A", {0.1: [1.0, 2.0, 3.0], 0.2: [10.0, 11.0, 12.0]})
    b = cmp._population(tmp_path / "B", {0.3: [5.0, 6.0, 7.0]})
    text = pr.build_populations_report([a, b], out=tmp_path / "cmp.md", episodes=0).read_text()
    assert "Y = A: lr=0.2 (the first population's highest IQM)" in text
    cells = {tuple(c[:2]): c[-2:] for line in text.splitlines() if line.startswith(("| A |", "| B |"))
             for c in [[x.strip() for x in line.strip("|").split("|")]]}
    assert cells[("A", "lr=0.2")] == ["Y (reference)", "\u2014"]
    assert cells[("A", "lr=0.1")][0] == "0.00" and cells[("B", "lr=0.3")][0] == "0.00"


# ------------------------------------------------------------------ the episodes of a fresh evaluation
def test_eval_episodes_true_is_no_count_and_the_checkpoints_config_is_the_fallback(tmp_path):
    assert run_eval_episodes(None, {"eval_episodes": True}) == DEFAULT_EVAL_EPISODES
    assert run_eval_episodes(tmp_path, {"eval_episodes": 7}) == 7  # no config.yaml: the checkpoint's
    (tmp_path / "config.yaml").write_text("eval_episodes: 0\n")
    assert run_eval_episodes(tmp_path, {"eval_episodes": 7}) == 7  # 0 asks for none: the checkpoint's
    (tmp_path / "config.yaml").write_text("eval_episodes: true\n")
    assert run_eval_episodes(tmp_path, None) == DEFAULT_EVAL_EPISODES


# ------------------------------------------------------------------ env wrappers and image bounds
class _Vec(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}


class _MyNormalize(gym.wrappers.NormalizeObservation):
    pass


def test_normalization_wrappers_are_found_under_another_wrapper_and_as_a_subclass():
    env = gym.wrappers.TimeLimit(gym.wrappers.NormalizeReward(gym.wrappers.NormalizeObservation(_Vec())), 10)
    assert normalize_wrappers(env) == ["NormalizeReward", "NormalizeObservation"]
    assert normalize_wrappers(_MyNormalize(_Vec())) == ["NormalizeObservation"]


class _Pixels(gym.Env):
    observation_space = gym.spaces.Box(0, 200, (8, 8, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, value):
        self.value = value

    def reset(self, *, seed=None, options=None):
        return np.full((8, 8, 3), self.value, np.uint8), {}


def test_an_image_value_one_above_its_declared_high_is_refused():
    layout = obs_layout(_Pixels.observation_space)
    obs, _ = EnvCalls(_Pixels(200), 0, layout, "Pix-v0").reset()
    assert obs.max() == 200
    with pytest.raises(EnvError, match=r"an image value 201, above its declared high 200"):
        EnvCalls(_Pixels(201), 0, layout, "Pix-v0").reset()


# ------------------------------------------------------------------ presets and config advice
def test_other_versions_are_only_the_same_envs():
    assert other_versions("LunarLander-v2") == ["LunarLander-v3"]  # not LunarLanderContinuous-v3
    assert other_versions("MountainCar-v1") == ["MountainCar-v0"]


def test_a_preset_config_is_a_copy_its_caller_may_change():
    first = preset_config("CartPole-v1", "fast")
    want = {k: (list(v) if isinstance(v, list) else v) for k, v in first.items()}
    first.clear()
    assert preset_config("CartPole-v1", "fast") == want and want


@pytest.mark.parametrize("word, note", [("cuda", "device='cuda'"),
                                        ("--batch-size", "it counts minibatches: num_envs x num_steps")])
def test_foreign_names_get_their_note_however_spelt(word, note):
    assert note in did_you_mean(word)


def test_a_tab_in_a_config_file_gets_the_spaces_advice(tmp_path):
    (tmp_path / "t.yaml").write_text("lr:\t3e-4\n")
    with pytest.raises(ConfigError, match=r"\(YAML indents and separates with spaces, never tabs\)"):
        load_config_file(str(tmp_path / "t.yaml"))


def test_the_python_command_quotes_a_script_path_with_a_space():
    """meta.json's command of a run started from Python is one a shell runs again as it was."""
    assert python_command("proxima.train(...)", ["my runs/t1.py", "--lr", "3e-4"]) == \
        "python: proxima.train(...) from 'my runs/t1.py' --lr 3e-4"
