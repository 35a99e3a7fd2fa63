"""Pixels and image observations, a user review (49): Policy.act holds pixels to the range the Box declares,
a Tuple with an image part is pointed to a Dict, eval's import error names the run's directory, and bench
names the backends that ran."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima.agent import Agent
from proxima.checkpoint import Policy

BOARD = gym.spaces.Box(0, 1, (64, 64, 3), np.uint8)  # a 0/1 board: the network reads 1 as 1, not as 1/255
UNIT = gym.spaces.Box(0.0, 1.0, (64, 64, 3), np.float32)  # a float image in [0, 1], an image to --encoder cnn


def _policy(obs_space, encoder="auto", env_id="pixenv:Board"):
    from proxima.envs.spaces import obs_layout, tensor_space

    torch.manual_seed(0)
    obs_space = tensor_space(obs_space, obs_layout(obs_space))  # as a run records it: a float image flat, its Box kept
    act_space = gym.spaces.Discrete(2)
    return Policy(Agent(obs_space, act_space, encoder=encoder), None, {"env_id": env_id}, obs_space, act_space, "cpu")


def _boards(n=8):
    return (np.random.default_rng(0).random((n, 64, 64, 3)) < 0.5).astype(np.uint8)


# ------------------------------------------------------------------------------- 1. act and the declared range
def test_act_refuses_pixels_above_a_uint8_boards_declared_high():
    """0..255 pixels given to a policy of a Box(0, 1) uint8 board reach its network as 255 where it trained on 1:
    act refuses them, as training and evaluation refuse them from the env, and says how to scale them."""
    policy, boards = _policy(BOARD), _boards()
    assert policy.act(boards).shape == (8,)
    with pytest.raises(ValueError) as e:
        policy.act(boards * 255)
    assert str(e.value) == (
        "Policy.act: obs holds the pixel value 255, above the declared high 1 of pixenv:Board's uint8 images (64, 64, 3) "
        "(Box(0, 1)); the network scales 0..1 to [0, 1], so 255 would reach it as 255 (training and evaluation refuse such "
        "pixels from the env): pass pixels 0..1 as the env returns them, 0..255 pixels scaled to it as "
        "np.round(obs / 255).astype(np.uint8)")
    with pytest.raises(ValueError, match=r"value 255, above .* as \(obs / 255\)\.round\(\)\.to\(torch\.uint8\)$"):
        policy.act(torch.as_tensor(boards[0] * 255))  # one observation, a tensor: torch's words
    with pytest.raises(ValueError, match="pixel value 3, above the declared high 1"):
        policy.act(boards.astype(np.int64) * 3)  # ints within 0..255 are no wrap, but still beyond the Box
    scaled = np.round(boards * 255 / 255).astype(np.uint8)  # the fix the line gives acts as on the board itself
    assert np.array_equal(policy.act(scaled), policy.act(boards))


def test_act_holds_a_dict_image_key_to_its_declared_range():
    space = gym.spaces.Dict({"board": BOARD, "pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)})
    policy, boards = _policy(space), _boards()
    obs = {"board": boards, "pos": np.zeros((8, 2), np.float32)}
    assert policy.act(obs).shape == (8,)
    with pytest.raises(ValueError, match=r"^Policy.act: obs\['board'\] holds the pixel value 255, above the declared high 1 "):
        policy.act(dict(obs, board=boards * 255))


def test_act_reads_no_bound_of_a_0_255_image():
    """The common image, Box(0, 255): every uint8 is in range, so act holds it to no bound (reads no value)."""
    from proxima.envs.spaces import obs_layout

    policy = _policy(gym.spaces.Box(0, 255, (64, 64, 3), np.uint8), env_id="pixenv:Cam")
    assert policy._pixel_bounds(obs_layout(policy.observation_space)) == ()
    assert policy.act(_boards() * 255).shape == (8,)


def test_act_refuses_uint8_pixels_for_a_float_image_policy():
    """A float Box(0, 1) image under --encoder cnn is read as it is: uint8 0..255 pixels given to act were cast to
    255.0, not scaled to 1.0, with no word (the mirror of the float pixels act refuses for a uint8 policy)."""
    policy = _policy(UNIT, encoder="cnn", env_id="pixenv:Unit")
    u = np.random.default_rng(0).integers(0, 256, (8, 64, 64, 3), dtype=np.uint8)
    assert policy.act(u.astype(np.float32) / 255).shape == (8,)
    with pytest.raises(ValueError) as e:
        policy.act(u)
    assert str(e.value) == (
        "Policy.act: obs holds uint8 pixels up to 255 where pixenv:Unit's observations are float32 images (64, 64, 3) in "
        "[0, 1] (Box(0.0, 1.0)), which the CNN reads as they are, not scaled (a cast: 255 would reach it as 255, not 1); "
        "pass pixels in [0, 1]: obs.astype(np.float32) / 255 for 0..255 pixels")
    with pytest.raises(ValueError, match=r"holds uint8 pixels up to 255 .*: obs\.float\(\) / 255 for 0\.\.255 pixels$"):
        policy.act(torch.as_tensor(u))
    with pytest.raises(ValueError, match=r"holds the pixel value 255, above the declared high 1 .*: obs / 255 for 0\.\.255"):
        policy.act(u.astype(np.float32))
    with pytest.raises(ValueError, match=r"holds the pixel value -0.5, below the declared low 0 "):
        policy.act(np.full((64, 64, 3), -0.5, np.float32))


# ------------------------------------------------------------------------------- 2. a Tuple with an image part
TUPLE_ENV = '''
import gymnasium as gym
import numpy as np


class TupleCam(gym.Env):
    observation_space = gym.spaces.Tuple((gym.spaces.Box(0, 255, (64, 64, 3), np.uint8), gym.spaces.Discrete(2)))
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return (np.full((64, 64, 3), 7, np.uint8), 1), {}

    def step(self, action):
        return (np.full((64, 64, 3), 9, np.uint8), 0), 1.0, False, False, {}
'''


def _refusal(space, env_id="tupenv49:TupleCam"):
    from proxima.envs import EnvError
    from proxima.envs.spaces import check_spaces

    with pytest.raises(EnvError) as e:
        check_spaces(env_id, space, gym.spaces.Discrete(2))
    return str(e.value)


def test_a_tuple_with_an_image_part_is_told_the_dict_that_keeps_its_cnn(tmp_path, monkeypatch):
    """FlattenObservation made Tuple(image, Discrete) one Box(12290,) int64 whose pixels an MLP read raw (no CNN,
    no /255); the line now gives a Dict factory instead, which, run as written, is an image key to Proxima."""
    import gymnasium
    from proxima.envs.spaces import obs_layout

    (tmp_path / "tupenv49.py").write_text(TUPLE_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    import tupenv49

    line = _refusal(tupenv49.TupleCam.observation_space)
    assert "FlattenObservation(" not in line
    assert "; make it a Dict, which keeps its image part for the CNN (pixels scaled to [0, 1]) and the other parts " \
           "flattened at one vector key: put def as_dict(**kw): env = tupenv49.TupleCam(**kw); " in line
    assert line.endswith(" in a module of yours and use MODULE:as_dict as the env (gymnasium.wrappers.FlattenObservation "
                         "would make it one Box(12290,) an MLP reads its pixels from unscaled)")
    factory = line[line.index("def as_dict"):line.index(" in a module of yours")]
    scope = {"gymnasium": gymnasium, "tupenv49": tupenv49}
    exec(factory, scope)  # the line's own code, as a user pastes it
    env = scope["as_dict"]()
    layout = obs_layout(env.observation_space)
    assert [(p.key, p.layout, p.shape) for p in layout.parts] == [("image", "hwc", (64, 64, 3)), ("vector", None, (2,))]
    obs, _ = env.reset(seed=0)
    assert obs["image"][0, 0, 0] == 7 and obs["image"].dtype == np.uint8 and obs["vector"].tolist() == [0, 1]


def test_a_tuple_of_two_images_keys_each_and_one_without_images_keeps_flatten():
    img = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
    line = _refusal(gym.spaces.Tuple((gym.spaces.Box(-1.0, 1.0, (3,)), img, img)))
    assert "lambda o: {'image1': o[1], 'image2': o[2], 'vector': gymnasium.spaces.flatten(rest, tuple(o[i] for i in (0,)))}" in line
    flat = _refusal(gym.spaces.Tuple((gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Discrete(2))))
    assert "gymnasium.wrappers.FlattenObservation makes it Box(" in flat and "Dict" not in flat.split(";", 1)[1]


def test_a_tuple_with_an_image_at_a_dict_key_is_told_to_give_the_image_its_own_key():
    img = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
    line = _refusal(gym.spaces.Dict({"cam": gym.spaces.Tuple((img, gym.spaces.Discrete(2)))}))
    assert line.endswith("at key 'cam' (supported: Box, images as uint8 Box, and Dict of Box); give its image part 0 a key "
                         "of its own in the Dict (read by the CNN) and declare key 'cam' as the other parts flattened "
                         "(gymnasium.spaces.flatten_space of a Tuple of them; flattening it whole would feed its pixels "
                         "raw to an MLP)")


# ------------------------------------------------------------------------------- 3. eval from another folder
CWD_ENV = '''
import gymnasium as gym
import numpy as np


class Tiny(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 1.0, False, self.t >= 8, {}
'''


@pytest.fixture
def trained_in_project(tmp_path, monkeypatch):
    """(project folder, run): cwdenv49:Tiny trained from the project folder that holds cwdenv49.py, then the
    module forgotten and the current directory another folder, as a user running eval from elsewhere."""
    import sys

    from proxima.envs import gym_adapter
    from tests.cli_helpers import TINY_RUN

    project, elsewhere, run = tmp_path / "project", tmp_path / "elsewhere", tmp_path / "runs" / "tiny"
    project.mkdir(), elsewhere.mkdir()
    (project / "cwdenv49.py").write_text(CWD_ENV)
    monkeypatch.setattr(gym_adapter, "_DATA_DIRS", [])  # the run folders this test reads, no other test's
    path = sys.path[:]
    monkeypatch.chdir(project)
    from proxima import cli

    assert cli.main(["train", "cwdenv49:Tiny", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(run), "--quiet"]) == 0
    sys.path[:] = path
    sys.modules.pop("cwdenv49", None)
    monkeypatch.chdir(elsewhere)
    yield project, run
    sys.path[:] = path
    sys.modules.pop("cwdenv49", None)


def test_eval_and_resume_from_another_folder_name_the_folder_the_run_was_trained_in(trained_in_project, capsys):
    from tests.cli_helpers import error_line, run_main

    project, run = trained_in_project
    for argv in (["eval", "--env", "cwdenv49:Tiny", str(run), "--episodes", "1"],
                 ["resume", "--env", "cwdenv49:Tiny", str(run), "--total-timesteps", "128"]):
        code, _, err = run_main(argv, capsys)
        line = error_line(code, err)
        assert line.endswith(f"cannot import module 'cwdenv49' for env 'cwdenv49:Tiny': No module named 'cwdenv49' here "
                             f"({project.parent / 'elsewhere'}); the run was trained in {project}, which holds it: run this "
                             f"from there or name that folder (cd {project}, or PYTHONPATH={project})"), line
    assert "cwdenv49" not in __import__("sys").modules  # named, never imported from the recorded folder unasked


def test_eval_from_another_folder_keeps_the_plain_line_when_the_recorded_folder_lacks_the_module(trained_in_project, capsys):
    from tests.cli_helpers import error_line, run_main

    project, run = trained_in_project
    (project / "cwdenv49.py").unlink()
    code, _, err = run_main(["eval", "--env", "cwdenv49:Tiny", str(run), "--episodes", "1"], capsys)
    assert error_line(code, err).endswith("cannot import module 'cwdenv49' for env 'cwdenv49:Tiny': No module named "
                                          "'cwdenv49' (is it in the current directory or on PYTHONPATH?)")


# ------------------------------------------------------------------------------- 4. bench's backends
FAST_BENCH = ["--num-envs", "2", "--train-only", "--repeats", "1", "--seconds", "0.01", "--num-steps", "16"]


def test_bench_names_the_backends_that_ran_not_the_flags_both(tmp_path, monkeypatch, capsys):
    """--backend both (the default) of an env with no native twin measures Gymnasium alone: the line above the
    table said 'backend both' over a table of one gymnasium row."""
    from tests.cli_helpers import run_main

    (tmp_path / "cwdenv49b.py").write_text(CWD_ENV)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, err = run_main(["bench", "cwdenv49b:Tiny", *FAST_BENCH], capsys)
    assert code == 0, err
    assert out.splitlines()[0].endswith(", cudagraphs off, backend gymnasium, train only"), out
    assert [row.split()[0] for row in out.splitlines()[3:4]] == ["gymnasium"]
    code, out, err = run_main(["bench", "CartPole-v1", *FAST_BENCH], capsys)  # both ran: both named
    assert code == 0, err
    assert out.splitlines()[0].endswith(", cudagraphs off, backends native, gymnasium, train only"), out
