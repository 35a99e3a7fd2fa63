"""Mutation tests (49) of the pixel and own-env review: Policy.act's declared pixel ranges beyond a 0/1 board
(a Box(0, 3) board, a Box(2, 10) image's low, an empty batch, a Dict's other keys), the Dict fix of a Tuple of
two images, the recorded cwd an import error names (last resume first, never the current directory, never a
relative path, a package's top folder), native_failure's line (a reset hook, long, multi-line and empty
messages, an EnvError, a frame outside NativeEnv), check-env's obs bounds at and below the bounds and its
is_success note only for an episode's last step, success_flag's rule, a population with one member not
evaluated, and the dotted / namespaced id suggestions."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from tests.cli_helpers import error_line, module_written_in, run_main
from tests.unit.test_pixels49 import BOARD, _boards, _policy


# ------------------------------------------------------------------------------- 1. Policy.act's pixel ranges
def test_act_scales_0_255_pixels_to_a_wider_board_by_its_high():
    """Box(0, 3) uint8: the scaling the line gives multiplies by the declared high, and 255 reaches it as 85."""
    policy = _policy(gym.spaces.Box(0, 3, (64, 64, 3), np.uint8), env_id="pixenv:Three")
    boards = _boards() * 3
    assert policy.act(boards).shape == (8,)
    with pytest.raises(ValueError) as e:
        policy.act(boards * 85)
    assert str(e.value) == (
        "Policy.act: obs holds the pixel value 255, above the declared high 3 of pixenv:Three's uint8 images (64, 64, 3) "
        "(Box(0, 3)); the network scales 0..3 to [0, 1], so 255 would reach it as 85 (training and evaluation refuse such "
        "pixels from the env): pass pixels 0..3 as the env returns them, 0..255 pixels scaled to it as "
        "np.round(obs / 255 * 3).astype(np.uint8)")


def test_act_holds_an_image_to_its_declared_low_and_gives_no_0_255_scaling_off_zero():
    policy = _policy(gym.spaces.Box(2, 10, (64, 64, 3), np.uint8), env_id="pixenv:Mid")
    ok = np.full((2, 64, 64, 3), 2, np.uint8)
    ok[1] = 10
    assert policy.act(ok).shape == (2,)
    with pytest.raises(ValueError) as e:
        policy.act(np.zeros((64, 64, 3), np.uint8))
    assert str(e.value) == (
        "Policy.act: obs holds the pixel value 0, below the declared low 2 of pixenv:Mid's uint8 images (64, 64, 3) "
        "(Box(2, 10)); the network scales 2..10 to [0, 1], so 0 would reach it as -0.25 (training and evaluation refuse "
        "such pixels from the env): pass pixels 2..10 as the env returns them")
    with pytest.raises(ValueError) as e:
        policy.act(np.full((64, 64, 3), 255, np.uint8))
    assert str(e.value).endswith("holds the pixel value 255, above the declared high 10 of pixenv:Mid's uint8 images "
                                 "(64, 64, 3) (Box(2, 10)); the network scales 2..10 to [0, 1], so 255 would reach it as "
                                 "31.62 (training and evaluation refuse such pixels from the env): pass pixels 2..10 as "
                                 "the env returns them")


def test_act_gives_an_empty_batch_of_a_board_an_empty_batch_of_actions():
    assert _policy(BOARD).act(np.zeros((0, 64, 64, 3), np.uint8)).shape == (0,)


def test_act_holds_only_the_image_key_of_a_dict_to_the_pixel_range():
    space = gym.spaces.Dict({"board": BOARD, "pos": gym.spaces.Box(-5.0, 5.0, (2,), np.float32)})
    policy = _policy(space)
    obs = {"board": _boards(), "pos": np.full((8, 2), 3.0, np.float32)}  # 3 is in pos's Box, above the board's high 1
    assert policy.act(obs).shape == (8,)


# ------------------------------------------------------------------------------- 2. a Tuple of two images
def _refusal(space):
    from proxima.envs import EnvError
    from proxima.envs.spaces import check_spaces

    with pytest.raises(EnvError) as e:
        check_spaces("tupenv49:TwoCams", space, gym.spaces.Discrete(2))
    return str(e.value)


def test_a_tuple_of_two_images_is_told_the_dict_that_keeps_its_image_parts():
    img = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
    line = _refusal(gym.spaces.Tuple((img, img, gym.spaces.Discrete(3))))
    assert "; make it a Dict, which keeps its image parts for the CNN (pixels scaled to [0, 1]) and the other parts " \
           "flattened at one vector key: put " in line
    assert "rest = gymnasium.spaces.Tuple([s[i] for i in (2,)])" in line
    keyed = _refusal(gym.spaces.Dict({"cams": gym.spaces.Tuple((img, img, gym.spaces.Discrete(3)))}))
    assert keyed.endswith("; give its image parts 0, 1 a key of their own in the Dict (read by the CNN) and declare key "
                          "'cams' as the other parts flattened (gymnasium.spaces.flatten_space of a Tuple of them; "
                          "flattening it whole would feed its pixels raw to an MLP)")


# ------------------------------------------------------------------------------- 3. the recorded cwd
@pytest.fixture
def recorded(tmp_path, monkeypatch):
    """A run folder whose meta.json records a cwd and two resumes' (folders A, B, C), read as eval reads it."""
    from proxima.envs import gym_adapter

    run = tmp_path / "run"
    run.mkdir()
    folders = {}
    for name in ("A", "B", "C", "here"):
        folders[name] = tmp_path / name
        folders[name].mkdir()
    monkeypatch.setattr(gym_adapter, "_DATA_DIRS", [str(run)])
    monkeypatch.chdir(folders["here"])

    def write(meta):
        (run / "meta.json").write_text(json.dumps(meta))

    return folders, write


def test_the_last_resumes_cwd_holding_the_module_is_named_first(recorded):
    from proxima.envs.gym_adapter import _recorded_cwd_holding

    folders, write = recorded
    for name in ("A", "B", "C"):
        (folders[name] / "mod49c.py").write_text("X = 1\n")
    write({"cwd": str(folders["A"]), "resumes": [{"cwd": str(folders["B"])}, {"cwd": str(folders["C"])}]})
    assert _recorded_cwd_holding("mod49c") == str(folders["C"])
    (folders["C"] / "mod49c.py").unlink()
    assert _recorded_cwd_holding("mod49c") == str(folders["B"])


def test_the_current_directory_and_a_relative_cwd_are_never_named(recorded, monkeypatch):
    from proxima.envs.gym_adapter import _recorded_cwd_holding

    folders, write = recorded
    (folders["A"] / "mod49c.py").write_text("X = 1\n")
    write({"cwd": str(folders["A"])})
    monkeypatch.chdir(folders["A"])  # the module's folder is here: nothing to name
    assert _recorded_cwd_holding("mod49c") is None
    monkeypatch.chdir(folders["A"].parent)
    write({"cwd": "A"})  # a relative path names no folder of the run's
    assert _recorded_cwd_holding("mod49c") is None
    write([str(folders["A"])])  # a meta.json that is no object: nothing to name, no crash on the way to the error
    assert _recorded_cwd_holding("mod49c") is None


def test_a_package_modules_recorded_cwd_is_found_by_its_top_package(recorded):
    from proxima.envs.gym_adapter import _recorded_cwd_holding

    folders, write = recorded
    (folders["A"] / "pkg49c").mkdir()
    (folders["A"] / "pkg49c" / "__init__.py").write_text("")
    (folders["A"] / "pkg49c" / "envs.py").write_text("X = 1\n")
    write({"cwd": str(folders["A"])})
    assert _recorded_cwd_holding("pkg49c.envs") == str(folders["A"])


# ------------------------------------------------------------------------------- 4. native_failure
NATIVE = '''
import gymnasium as gym, numpy as np, torch
from proxima.envs import EnvError, NativeEnv

MESSAGES = {"long": "x" * 300, "lines": "first\\n   second", "empty": ""}


class Raises(NativeEnv):
    max_episode_steps = 100

    def __init__(self, num_envs=1, device="cpu", seed=None, where="step", what="long"):
        super().__init__(num_envs, device=device, seed=seed)
        self.where, self.what = where, what
        self.single_observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
        self.single_action_space = gym.spaces.Discrete(3)

    def _fail(self):
        if self.what == "envError":
            raise EnvError("my own line")
        raise RuntimeError(MESSAGES[self.what])  # line 20

    def _sample_initial_state(self, n):
        if self.where == "reset":
            self._fail()
        return {"x": torch.zeros(n, device=self.device)}

    def _dynamics(self, action):
        if self.where == "step":
            self._fail()
        return torch.zeros(self.num_envs), torch.zeros(self.num_envs, dtype=torch.bool)

    def _observe(self):
        return torch.stack([self.state["x"], self.state["x"]], dim=1)


def _dynamics():
    raise RuntimeError("not a hook")


def step():
    _dynamics()


class Edge(Raises):  # every observation on the Box's bounds: in it
    def _observe(self):
        n = self.num_envs
        return torch.stack([torch.full((n,), -10.0), torch.full((n,), 10.0)], dim=1)


class Low(Raises):  # one entry, env 0's first, below the Box
    def _observe(self):
        obs = torch.zeros(self.num_envs, 2)
        obs[0, 0] = -20.0
        return obs


class Partial(gym.Env):  # is_success 'yes' on every step but the last, whose True is a flag
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        done = self.t >= 5
        return np.zeros(2, np.float32), 1.0, done, False, {"is_success": True if done else "yes"}
'''


@pytest.fixture
def native(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "own49m", NATIVE)


def _failure(where, what):
    import own49m

    from proxima.envs.base import native_failure

    if where == "reset":
        env = own49m.Raises(2, where="reset", what=what)
        with pytest.raises(Exception) as e:
            env.reset(seed=0)
    else:
        env = own49m.Raises(2, where="none", what=what)
        env.reset(seed=0)
        env.where = "step"
        with pytest.raises(Exception) as e:
            env.step(torch.zeros(2, dtype=torch.int64))
    return native_failure(e.value, "own49m:Raises", "env step 3")


def test_native_failure_names_a_reset_hook(native):
    line = str(_failure("reset", "lines"))
    assert line == ("env 'own49m:Raises': native env raised RuntimeError: first second in _sample_initial_state "
                    "(own49m.py:20) at env step 3")


def test_native_failure_cuts_a_long_message_and_drops_an_empty_one(native):
    line = str(_failure("step", "long"))
    assert line.startswith("env 'own49m:Raises': native env raised RuntimeError: " + "x" * 197 + "... in _dynamics (own49m.py:")
    assert str(_failure("step", "empty")).startswith("env 'own49m:Raises': native env raised RuntimeError in _dynamics (")


def test_native_failure_leaves_an_env_error_and_frames_outside_native_env_alone(native):
    import own49m

    from proxima.envs.base import native_failure

    assert _failure("step", "envError") is None  # the hook's own EnvError is already its line
    with pytest.raises(RuntimeError) as e:
        own49m.step()  # a step() calling a _dynamics(), neither NativeEnv's
    assert native_failure(e.value, "own49m:Raises", "env step 3") is None


# ------------------------------------------------------------------------------- 5. check-env
def test_check_env_passes_a_native_env_on_its_bounds(native, capsys):
    code, out, err = run_main(["check-env", "own49m:Edge", "--env-kwargs", '{"where": "none"}'], capsys)
    assert code == 0, out + err
    assert "OK: own49m:Edge passes 18 checks" in out


def test_check_env_names_one_entry_below_the_low(native, capsys):
    code, out, err = run_main(["check-env", "own49m:Low", "--env-kwargs", '{"where": "none"}'], capsys)
    assert code == 1, out + err
    assert [line for line in out.splitlines() if line.startswith("FAIL")] == [
        "FAIL obs bounds: expected obs[0] in [-10, 10] (single_observation_space low/high); got obs[0] = -20 of env 0, "
        "below low[0] = -10, at reset"]


def test_check_env_reads_is_success_of_an_episodes_last_step_only(native, capsys):
    code, out, err = run_main(["check-env", "own49m:Partial"], capsys)
    assert code == 0, out + err
    assert not [line for line in out.splitlines() if line.startswith("NOTE")], out


def test_success_flag_takes_bools_and_numbers_in_0_1_as_training_does():
    from proxima.envs.gym_adapter import success_flag

    for value, flag in ((0, 0.0), (1, 1.0), (0.5, 0.5), (True, 1.0), (np.bool_(True), 1.0), (np.bool_(False), 0.0),
                        (np.array([0.25]), 0.25), (torch.tensor([1]), 1.0), (np.array([True]), 1.0), (None, None)):
        assert success_flag(value) == flag, value
    for value in (2, -0.5, "yes", float("nan"), np.array([0.1, 0.2])):
        assert math.isnan(success_flag(value)), value


# ------------------------------------------------------------------------------- 6. a population's report line
def test_a_population_with_a_member_not_evaluated_keeps_reports_env(native, capsys):
    from pathlib import Path

    from proxima import cli

    code, out, err = run_main(["train", "own49m:Raises", "--env-kwargs", '{"where": "none"}', "--seeds", "1-2",
                               "--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1",
                               "--no-progress", "--threads", "1", "--total-timesteps", "32", "--eval-episodes", "1",
                               "--run-dir", "runs/p"], capsys)
    assert code == 0, err
    assert "report: proxima report runs/p" in out.splitlines()
    evals = sorted(Path("runs/p").rglob("eval.json"))
    assert len(evals) >= 2
    evals[0].unlink()  # one member left to evaluate: report's --env evaluates it
    assert cli._members_evaluated("runs/p") is False
    assert "report: proxima report --env own49m:Raises runs/p" in cli.next_commands("runs/p", "own49m:Raises", 32, 32,
                                                                                    population=True)


def test_a_population_file_listing_no_members_keeps_reports_env(tmp_path):
    from proxima import cli

    (tmp_path / "population.json").write_text(json.dumps({"member_dirs": []}))
    assert cli._members_evaluated(tmp_path) is False  # no member evaluated: not 'every member'
    assert f"report: proxima report --env own49m:Raises {tmp_path}" in cli.next_commands(tmp_path, "own49m:Raises", 32, 32,
                                                                                          population=True)


# ------------------------------------------------------------------------------- 7. dotted and namespaced ids
DOTTED = '''
from trunc49x import Yes as Alias
import os.path as osp


def make(**kw):
    return None


Made = make()
Typed: int = 3
'''


@pytest.fixture
def dotted(tmp_path, monkeypatch):
    (tmp_path / "pkg49m").mkdir()
    (tmp_path / "pkg49m" / "__init__.py").write_text("")
    (tmp_path / "pkg49m" / "envs.py").write_text("class Yes:\n    pass\n")
    yield from module_written_in(tmp_path, monkeypatch, "dot49m", DOTTED)


def test_a_dotted_id_is_told_module_colon_name_for_each_kind_of_top_level_name(dotted):
    from proxima.envs.gym_adapter import _dotted_id_hint

    for name in ("Alias", "osp", "make", "Made", "Typed"):  # imported as, a function, assigned, annotated
        assert _dotted_id_hint(f"dot49m.{name}") == f"dot49m:{name}"
    assert _dotted_id_hint("dot49m.Yes") is None  # imported under another name
    assert _dotted_id_hint("pkg49m.envs.Yes") == "pkg49m.envs:Yes"  # a package's submodule, by its folder


def test_a_dotted_id_of_a_package_module_is_told_on_the_command_line(dotted, capsys):
    code, _, err = run_main(["check-env", "pkg49m.envs.Yes"], capsys)
    assert error_line(code, err, "pkg49m") == ("proxima check-env: error: unknown env id 'pkg49m.envs.Yes'; did you mean "
                                               "pkg49m.envs:Yes? (an env of your own module is given as module:Name, with a colon)")


@pytest.fixture
def long_namespace(tmp_path, monkeypatch):
    (tmp_path / "trunc49m.py").write_text(NATIVE)
    yield from module_written_in(tmp_path, monkeypatch, "ns49m", 'import gymnasium as gym\n\n'
                                 'gym.register("averylongnamespace49/Const-v0", entry_point="trunc49m:Partial")\n')
    import sys

    sys.modules.pop("trunc49m", None)
    gym.registry.pop("averylongnamespace49/Const-v0", None)


def test_a_namespaced_id_is_suggested_for_its_name_in_any_case(long_namespace, capsys):
    code, _, err = run_main(["check-env", "ns49m:const-v0"], capsys)
    assert error_line(code, err, "ns49m").endswith("did you mean ns49m:averylongnamespace49/Const-v0?")


# ------------------------------------------------------------------------------- 8. bench's backends, one skipped
def test_bench_names_only_the_backend_measured_when_the_gymnasium_line_is_skipped(capsys):
    """--num-envs beyond --max-gym-envs: the Gymnasium line is 'skipped', so neither it nor its --vector is named."""
    code, out, err = run_main(["bench", "CartPole-v1", "--num-envs", "128", "--max-gym-envs", "64", "--vector", "async",
                               "--train-only", "--repeats", "1", "--seconds", "0.01", "--num-steps", "16"], capsys)
    assert code == 0, err
    assert out.splitlines()[0].endswith(", cudagraphs off, backend native, train only"), out
    assert "skipped (> --max-gym-envs 64)" in out, out
