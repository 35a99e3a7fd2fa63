"""Continuous-control review 38: the rescale note names every off-scale Box entry, an infinite-bounds Box
(once refused) trains with no note, and the continuous presets' texts say how they differ from CleanRL and from
one another."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from proxima.envs.spaces import action_scale_note, check_action_space
from proxima.presets import all_presets
from tests.cli_helpers import TINY_RUN, module_written_in, run_main

ROOT = Path(__file__).resolve().parents[2]
RESCALE = ("Proxima clips Box actions to the bounds but does not rescale them: wrap the env in "
           "gymnasium.wrappers.RescaleAction(env, np.float32(-1), np.float32(1))")

BOX_ENVS = '''
import gymnasium as gym
import numpy as np


class Inf(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, False, False, {}


class Unit(Inf):
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
'''


@pytest.fixture
def box_envs(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "cont38_envs", BOX_ENVS)


def test_the_rescale_note_names_every_offending_entry_worst_kind_first():
    # the reviewer's (2, 3) Box: [0, 10] has 0 as a bound, [-5, -3] and [2, 3] exclude 0, [-1, 100] is too wide
    space = gym.spaces.Box(np.array([[0, -5, 2], [-1, -1, -1]], np.float32),
                           np.array([[10, -3, 3], [100, 1, 1]], np.float32))
    note = action_scale_note(space)
    assert "\n" not in note  # numpy prints a 2-D bound over two lines
    assert note == (
        "action_space Box([[ 0. -5.  2.] [-1. -1. -1.]], [[ 10.  -3.   3.] [100.   1.   1.]], (2, 3), float32): "
        "0 lies outside the ranges of entries 1 [-5, -3] and 2 [2, 3], so the early actions all clip to one bound and "
        "the policy may never learn; its range entry 3 [-1, 100] is far wider than the policy's samples (std 1 around "
        "0), which reach only a sliver of it; its range entry 0 [0, 10] has 0 as a bound, and the policy's early "
        f"actions are centred on 0, so half of them clip to that bound; {RESCALE}")


def test_the_rescale_note_caps_the_entries_it_names():
    space = gym.spaces.Box(np.arange(1, 8, dtype=np.float32), np.arange(2, 9, dtype=np.float32))
    assert action_scale_note(space) == (
        f"action_space {space}: 0 lies outside the ranges of entries 0 [1, 2], 1 [2, 3], 2 [3, 4] and 4 more, so the "
        f"early actions all clip to one bound and the policy may never learn; {RESCALE}")


@pytest.mark.parametrize("low, high", [(5.0, 1000.0), (5.0, 5.001)])
def test_a_range_without_0_is_named_for_that_alone(low, high):
    # wide or narrow too, but every sample clips to one bound: that is the one problem to name
    note = action_scale_note(gym.spaces.Box(low, high, (1,), np.float32))
    assert f"0 lies outside its range [{low:g}, {high:g}], so the early actions all clip to one bound" in note
    assert "far wider" not in note and "far narrower" not in note


def test_an_infinite_bounds_box_trains_with_no_rescale_note(box_envs, capsys):
    # was refused ("Box action space needs finite bounds"): CleanRL and SB3 take it, the clip to +-inf is a no-op
    code, _, err = run_main(["train", "cont38_envs:Inf", *TINY_RUN, "--total-timesteps", "64", "--run-dir", "R"], capsys)
    assert code == 0, err
    assert "action Box(2,) float32 [-inf, inf] -> Gaussian, 2 dims, unbounded" in err
    assert "action_space Box(" not in err  # no range, so no rescale note
    assert list(Path("R/checkpoints").glob("*.pt"))
    low = np.full((2, 3), -1.0, np.float32)
    low[0, 0] = -np.inf  # bounds not all equal: Box prints the 2-D array, over two lines
    space = gym.spaces.Box(low, np.ones((2, 3), np.float32))
    check_action_space(space, "X")
    assert action_scale_note(space) is None  # [-inf, 1] holds 0 away from its bound, [-1, 1] is the policy's scale


def test_the_no_preset_note_names_each_continuous_preset_that_keeps_ent_coef(box_envs, capsys):
    pytest.importorskip("Box2D")  # LunarLanderContinuous-v3's space is read from the built env
    from proxima.config import PPOConfig
    from proxima.envs.gym_adapter import registered_action_space

    code, _, err = run_main(["train", "cont38_envs:Unit", *TINY_RUN, "--run-dir", "R", "--dry-run"], capsys)
    assert code == 0, err
    [note] = [ln for ln in err.splitlines() if "has Box actions and no preset" in ln]
    assert "continuous-control presets use --ent-coef 0 --norm-obs --norm-reward" in note
    keeps = sorted(env_id for env_id, body in all_presets().items() for preset in body.values()
                   if preset["file"] != "atari.yaml"  # Discrete games, and slow to build
                   and preset["config"].get("ent_coef", PPOConfig.ent_coef) != 0
                   and isinstance(registered_action_space(env_id), gym.spaces.Box))
    assert keeps == ["LunarLanderContinuous-v3"]
    assert all(f"except {env_id}'s, which keeps ent_coef" in note for env_id in keeps), note


def test_the_presets_say_how_they_differ_from_what_they_name():
    presets = all_presets()
    for env_id in ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"):
        default = presets[env_id]["default"]
        assert default["config"].get("bootstrap_truncation", True)  # the library default: bootstrapped
        assert ("unlike CleanRL, time-limit truncations are bootstrapped (--no-bootstrap-truncation for a like-for-like "
                "run) and the env is v5 (CleanRL's is v4)") in default["description"], env_id
    llc = presets["LunarLanderContinuous-v3"]["default"]
    assert llc["config"]["ent_coef"] == 0.01
    assert "the one continuous preset that keeps ent 0.01" in llc["description"]
    assert "deterministic eval return passes 200 (10/10 seeds" in llc["description"]


@pytest.mark.parametrize("name, commits", [("learning.md", "f8b2cd5 to 3e865bc"),
                                           ("learning-10-seeds.md", "9656712 to 3e865bc")])
def test_the_learning_tables_name_the_code_they_ran_and_the_mujoco_difference(name, commits):
    head = (ROOT / "benchmarks" / "results" / name).read_text().split("\n| env |")[0]
    [code] = [ln for ln in head.splitlines() if ln.startswith("- code: ")]
    assert f"recorded in commits {commits}" in code and code.endswith("the pass counts are the claim")
    assert ("so those rows are not like-for-like (`--no-bootstrap-truncation` gives CleanRL's handling" in
            " ".join(head.split()))
