"""One summary of how Proxima reads an env's spaces (spaces.spaces_summary): the exact line that
a train's start prints, and the ``spaces`` entry of a new run's meta.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from proxima.envs.spaces import spaces_line, spaces_summary
from tests.cli_helpers import TINY_RUN, run_main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

CARTPOLE = {"observation": "Box(4,) float32 -> 4 features", "policy": "MLP 64x64 tanh",
            "action": "Discrete(2) -> categorical over 2"}
PENDULUM = {"observation": "Box(3,) float32 -> 3 features", "policy": "MLP 64x64 tanh",
            "action": "Box(1,) float32 [-2, 2] -> Gaussian, 1 dim, clipped to bounds"}
DICT_ZA = {"observation": "Dict, keys packed in this order ['z': Box(5,) float32 -> 5 features, "
                          "'a': Box(2,) float32 -> 2 features] -> 7 features",
           "policy": "MLP 64x64 tanh", "action": "Discrete(2) -> categorical over 2"}
MULTI_2D = {"observation": "Box(2,) float32 -> 2 features", "policy": "MLP 64x64 tanh",
            "action": "MultiDiscrete(2, 2) -> 4 categoricals (2, 3, 4, 2), plus starts (5, -1, 0, 10)"}
BOARD = {"observation": "Box(40, 40, 2) uint8 -> image (2, 40, 40) 0..1 scaled to [0, 1]",
         "policy": "Nature CNN (512 features), linear actor and critic heads",
         "action": "Discrete(2) -> categorical over 2"}


@pytest.fixture
def fixtures_path(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))


def _train(tmp_path, capsys, env: str, *flags: str) -> tuple:
    """(meta.json's spaces, stderr) of a 64-step run of ``env``."""
    run_dir = tmp_path / "run"
    code, _, err = run_main(["train", env, *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(run_dir), *flags], capsys)
    assert code == 0, err
    return json.loads((run_dir / "meta.json").read_text())["spaces"], err


def test_image_summary_reads_channels_last_uint8_as_a_cnn_image_scaled_by_255():
    summary = spaces_summary(spaces.Box(0, 255, (84, 84, 4), np.uint8), spaces.Discrete(6))
    assert spaces_line(summary) == ("spaces: obs Box(84, 84, 4) uint8 -> image (4, 84, 84) /255, Nature CNN (512 features), "
                                    "linear actor and critic heads; action Discrete(6) -> categorical over 6")
    # --encoder mlp: the same pixels, scaled, flattened into the MLP
    assert spaces_summary(spaces.Box(0, 255, (84, 84, 4), np.uint8), spaces.Discrete(6), "mlp", (32,), "relu") == {
        "observation": "Box(84, 84, 4) uint8 -> image (4, 84, 84) /255, flattened to 28224 features",
        "policy": "MLP 32 relu", "action": "Discrete(6) -> categorical over 6"}


def test_summary_of_a_frame_stack_a_float64_vector_and_an_integer_box_action():
    stack = spaces_summary(spaces.Box(0, 255, (4, 84, 84, 1), np.uint8), spaces.MultiDiscrete([3, 3, 2]))
    assert stack["observation"] == "Box(4, 84, 84, 1) uint8 -> image (4, 84, 84) (a stack of 4 frames) /255"
    assert stack["action"] == "MultiDiscrete(3,) -> 3 categoricals (3, 3, 2)"
    box = spaces.Box(np.array([0, -1]), np.array([4, 1]), dtype=np.int64)
    flat = spaces_summary(spaces.Box(-1, 1, (2, 3), np.float64), box)
    assert flat["observation"] == "Box(2, 3) float64 -> flattened to 6 features, as float32"
    assert flat["action"] == "Box(2,) int64 [0, 4] [-1, 1] -> Gaussian, 2 dims, rounded and clipped to bounds"


@pytest.mark.parametrize("env, flags, summary", [
    ("CartPole-v1", (), CARTPOLE),
    ("CartPole-v1", ("--backend", "gymnasium"), CARTPOLE),
    ("Pendulum-v1", (), PENDULUM),
    ("user_envs:DictZA", (), DICT_ZA),
    ("user_envs:MultiDiscrete2D", (), MULTI_2D),
    ("pixel_edge_envs:BinaryBoard", (), BOARD),
])
def test_a_new_run_records_its_spaces_in_meta_json_and_prints_them_once(fixtures_path, tmp_path, capsys, env, flags, summary):
    recorded, err = _train(tmp_path, capsys, env, *flags)
    assert recorded == summary
    assert err.count("spaces:") == 1
    assert f"proxima: {spaces_line(summary)}\n" in err


def test_quiet_run_records_its_spaces_but_prints_no_line(tmp_path, capsys):
    recorded, err = _train(tmp_path, capsys, "CartPole-v1", "--quiet")
    assert recorded == CARTPOLE
    assert "spaces:" not in err


# ------------------------------------------------------------------------------ check-env prints the same line
@pytest.mark.parametrize("env, summary", [
    ("CartPole-v1", CARTPOLE),
    ("user_envs:DictZA", DICT_ZA),
    ("user_envs:MultiDiscrete2D", MULTI_2D),
    ("pixel_edge_envs:BinaryBoard", BOARD),
])
def test_check_env_prints_the_spaces_line_a_run_of_the_env_prints_before_its_ok_line(fixtures_path, capsys, env, summary):
    code, out, err = run_main(["check-env", env, "--steps", "20"], capsys)
    lines = out.splitlines()
    assert code == 0, out + err
    assert lines[-2:] == [spaces_line(summary), lines[-1]] and lines[-1].startswith(f"OK: {env} passes ")
    assert out.count("spaces:") == 1 and err == ""


def test_a_failing_check_env_prints_the_spaces_line_it_read_before_the_count(fixtures_path, capsys):
    code, out, err = run_main(["check-env", "bad_envs:WrongDtype", "--steps", "5"], capsys)  # float64 obs in a float32 Box
    assert code == 1, out + err
    assert out.splitlines()[-2:] == [
        "spaces: obs Box(3,) float32 -> 3 features, MLP 64x64 tanh; action Discrete(2) -> categorical over 2",
        "1 violation(s) in bad_envs:WrongDtype"]


@pytest.mark.parametrize("env", ["bad_envs:TextKeyObs", "bad_envs:ConstructorRaises"])
def test_check_env_prints_no_spaces_line_where_it_read_no_supported_spaces(fixtures_path, capsys, env):
    code, out, _ = run_main(["check-env", env, "--steps", "5"], capsys)
    assert code == 1 and out.startswith("FAIL ") and "spaces:" not in out, out


def test_check_env_reads_the_spaces_with_the_env_s_preset(fixtures_path, monkeypatch, capsys):
    """The encoder, hidden sizes and activation train would take: presets.resolve(TARGET)'s."""
    import proxima.presets as presets

    def resolve(env_id, preset=None, base=None):
        cfg = real(env_id, preset, base)
        cfg.hidden_sizes, cfg.activation, cfg.encoder = [32, 16], "relu", "mlp"
        return cfg

    real = presets.resolve
    monkeypatch.setattr(presets, "resolve", resolve)
    code, out, _ = run_main(["check-env", "pixel_edge_envs:BinaryBoard", "--steps", "5"], capsys)
    assert code == 0, out
    assert out.splitlines()[-2] == ("spaces: obs Box(40, 40, 2) uint8 -> image (2, 40, 40) 0..1 scaled to [0, 1], flattened to "
                                    "3200 features, MLP 32x16 relu; action Discrete(2) -> categorical over 2")


# ------------------------------------------------------------------------------ each reading, as the agent builds it
def test_a_dicts_feature_count_is_the_width_the_agent_feeds_its_mlp():
    """A CNN key (512 features), a small image flattened beside it (8 x 8 x 3) and a vector: the count
    the line names is the critic's input width (agent.Agent), not each key's element count."""
    from proxima.agent import Agent

    obs = spaces.Dict({"big": spaces.Box(0, 255, (64, 64, 3), np.uint8), "small": spaces.Box(0, 255, (8, 8, 3), np.uint8),
                       "vec": spaces.Box(-1, 1, (3,), np.float32)})
    summary = spaces_summary(obs, spaces.Discrete(2))
    assert summary["observation"] == ("Dict, keys packed in this order ['big': Box(64, 64, 3) uint8 -> image (3, 64, 64) "
                                      "/255, CNN (512 features), 'small': Box(8, 8, 3) uint8 -> image (3, 8, 8) /255, "
                                      "flattened to 192 features, 'vec': Box(3,) float32 -> 3 features] -> 707 features")
    assert Agent(obs, spaces.Discrete(2), encoder="auto").critic[0].in_features == 512 + 192 + 3


def test_a_float_unit_image_stays_flat_under_auto_and_a_uint8_image_is_scaled_by_its_declared_range():
    from proxima.agent import Agent

    unit = spaces.Box(0.0, 1.0, (64, 64, 3), np.float32)
    # auto takes uint8 images only: the agent feeds the 12288 floats to its MLP as they are
    assert spaces_summary(unit, spaces.Discrete(2)) == {
        "observation": "Box(64, 64, 3) float32 -> flattened to 12288 features", "policy": "MLP 64x64 tanh",
        "action": "Discrete(2) -> categorical over 2"}
    agent = Agent(unit, spaces.Discrete(2), encoder="auto")
    assert agent.encoder is None and agent.critic[0].in_features == 12288
    dim = spaces_summary(spaces.Box(10, 255, (64, 64, 3), np.uint8), spaces.Discrete(2))["observation"]
    assert dim == "Box(64, 64, 3) uint8 -> image (3, 64, 64) 10..255 scaled to [0, 1]"


def test_a_float64_key_of_a_dict_is_read_as_float32_as_a_lone_float64_box_is():
    obs = spaces.Dict({"a": spaces.Box(-1, 1, (2,), np.float64), "b": spaces.Box(-1, 1, (2, 2), np.float64)})
    assert spaces_summary(obs, spaces.Discrete(2))["observation"] == (
        "Dict, keys packed in this order ['a': Box(2,) float64 -> 2 features, as float32, "
        "'b': Box(2, 2) float64 -> flattened to 4 features, as float32] -> 6 features")
    assert spaces_summary(spaces.Box(-1, 1, (2,), np.float64), spaces.Discrete(2))["observation"] == (
        "Box(2,) float64 -> 2 features, as float32")


def test_no_hidden_layers_is_a_linear_actor_and_critic_and_a_discrete_start_is_added_to_the_sample():
    summary = spaces_summary(spaces.Box(-1, 1, (3,), np.float32), spaces.Discrete(3, start=1), hidden_sizes=())
    assert summary["policy"] == "linear actor and critic"
    assert summary["action"] == "Discrete(3, start=1) -> categorical over 3, plus start 1"


@pytest.mark.parametrize("low, high, reading", [
    (-1.0, 1.0, "Box(2,) float32 [-1, 1] -> Gaussian, 2 dims, clipped to bounds"),  # one range, said once
    ([-1.0, 0.0, -2.0], [1.0, 2.0, 2.0], "Box(3,) float32 [-1, 1] [0, 2] [-2, 2] -> Gaussian, 3 dims, clipped to bounds"),
    ([-1.0, 0.0, -2.0, 0.0], [1.0, 2.0, 2.0, 5.0],
     "Box(4,) float32 [-1, 1] [0, 2] [-2, 2] and 1 more -> Gaussian, 4 dims, clipped to bounds"),
])
def test_a_box_action_names_each_distinct_range_up_to_three(low, high, reading):
    shape = (2,) if np.isscalar(low) else None  # a scalar bound broadcast over two entries
    act = spaces.Box(np.float32(low) if shape else np.array(low, np.float32),
                     np.float32(high) if shape else np.array(high, np.float32), shape, np.float32)
    assert spaces_summary(spaces.Box(-1, 1, (3,), np.float32), act)["action"] == reading


# ------------------------------------------------------------------------------ a real run's flags, and its resume
def test_a_runs_encoder_and_hidden_sizes_reach_its_summary_and_a_resume_prints_no_line(fixtures_path, tmp_path, capsys):
    """--encoder mlp on an image the auto encoder would give the CNN, --hidden-sizes 32: the summary
    says what this run built, not the defaults; resumed, the run prints no second line and keeps it."""
    recorded, err = _train(tmp_path, capsys, "pixel_edge_envs:BinaryBoard", "--encoder", "mlp", "--hidden-sizes", "32")
    assert recorded == {"observation": "Box(40, 40, 2) uint8 -> image (2, 40, 40) 0..1 scaled to [0, 1], flattened to "
                                       "3200 features",
                        "policy": "MLP 32 tanh", "action": "Discrete(2) -> categorical over 2"}
    assert err.count("spaces:") == 1
    run_dir = tmp_path / "run"
    resume = ["resume", str(run_dir), "--env", "pixel_edge_envs:BinaryBoard", "--total-timesteps"]
    code, _, err = run_main([*resume, "128"], capsys)
    assert code == 0, err
    assert "spaces:" not in err
    assert json.loads((run_dir / "meta.json").read_text())["spaces"] == recorded
    # a resume that recreates a lost meta.json writes the entry afresh, and still prints no line
    (run_dir / "meta.json").unlink()
    code, _, err = run_main([*resume, "192"], capsys)
    assert code == 0, err
    assert "was missing; recreated from this resume at step 128" in err and "spaces:" not in err
    assert json.loads((run_dir / "meta.json").read_text())["spaces"] == recorded


def test_check_env_takes_the_preset_of_its_own_target_not_cartpoles(fixtures_path, monkeypatch, capsys):
    import proxima.presets as presets

    def resolve(env_id, preset=None, base=None):
        cfg = real(env_id, preset, base)
        if env_id == "user_envs:DictZA":  # a target whose preset differs from CartPole-v1's
            cfg.hidden_sizes, cfg.activation = [16], "relu"
        return cfg

    real = presets.resolve
    monkeypatch.setattr(presets, "resolve", resolve)
    code, out, _ = run_main(["check-env", "user_envs:DictZA", "--steps", "5"], capsys)
    assert code == 0, out
    assert out.splitlines()[-2] == spaces_line({**DICT_ZA, "policy": "MLP 16 relu"})


def test_check_env_whose_spaces_summary_fails_prints_no_spaces_line_and_does_not_crash(fixtures_path, monkeypatch, capsys):
    import proxima.envs.checker as checker
    from proxima.envs.base import EnvError

    def summary(*args, **kwargs):
        raise EnvError("env 'CartPole-v1': no summary")

    monkeypatch.setattr(checker, "spaces_summary", summary)
    code, out, err = run_main(["check-env", "CartPole-v1", "--steps", "5"], capsys)
    assert code == 0 and err == "" and "spaces:" not in out
    assert out.splitlines()[-1].startswith("OK: CartPole-v1 passes ")


def test_check_env_of_a_native_env_prints_its_spaces_line_before_its_ok_line(fixtures_path, capsys):
    code, out, err = run_main(["check-env", "user_native_env:Drift", "--steps", "5"], capsys)
    assert code == 0, out + err
    assert out.splitlines() == ["spaces: obs Box(1,) float32 -> 1 features, MLP 64x64 tanh; action Discrete(3) -> "
                                "categorical over 3", "OK: user_native_env:Drift passes 18 checks"]
