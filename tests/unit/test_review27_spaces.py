"""Review 27, action/observation spaces: a float64 Box's +-finfo(float64).max bounds become +-inf
without numpy's overflow warning; empty action spaces (Box (0,), MultiDiscrete([])) are refused in
one line by train and by check-env, not met as a torch error at the first update; a refused
Discrete/Tuple/MultiDiscrete observation is told FlattenObservation in a factory, and the fix works;
a MultiBinary action (once refused with its MultiDiscrete([2] * n) twin) is taken, as the twin still is."""

from __future__ import annotations

import textwrap
import warnings

import gymnasium as gym
import numpy as np
import pytest

from cli_helpers import run_main
from proxima.envs import EnvError, check_spaces, make_env
from proxima.envs.checker import check_env
from proxima.envs.spaces import obs_layout, tensor_space

ENVS = textwrap.dedent('''
    import gymnasium as gym
    import numpy as np
    from gymnasium import spaces


    class _Base(gym.Env):
        def __init__(self):
            self.observation_space = spaces.Box(-1, 1, (3,), np.float32)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self.observation_space.sample() * 0, {}

        def step(self, action):
            assert self.action_space.contains(action), action
            self.t += 1
            return self.observation_space.sample() * 0, 0.0, False, self.t >= 5, {}


    class EmptyBox(_Base):
        def __init__(self):
            super().__init__()
            self.action_space = spaces.Box(-1.0, 1.0, (0,), np.float32)


    class EmptyMD(_Base):
        def __init__(self):
            super().__init__()
            self.action_space = spaces.MultiDiscrete(np.array([], dtype=np.int64))


    class MB(_Base):
        def __init__(self):
            super().__init__()
            self.action_space = spaces.MultiBinary(3)


    class F64Max(_Base):
        def __init__(self):
            super().__init__()
            m = np.finfo(np.float64).max
            self.observation_space = spaces.Box(-m, m, (3,), np.float64)
            self.action_space = spaces.Discrete(2)


    class AsMultiDiscrete(gym.ActionWrapper):
        """check_action_space's fix for MultiBinary, as its line words it."""

        def __init__(self, env):
            super().__init__(env)
            self.action_space = spaces.MultiDiscrete([2] * 3)

        def action(self, a):
            return a


    def mb_fixed():
        return AsMultiDiscrete(MB())


    def flat(**kw):  # the FlattenObservation fix, as the refusal of FrozenLake's Discrete words it
        return gym.wrappers.FlattenObservation(gym.make('FrozenLake-v1', **kw))
''')

TRAIN = ["--backend", "gymnasium", "--num-envs", "2", "--num-steps", "4", "--total-timesteps", "8",
         "--num-minibatches", "2", "--hidden-sizes", "8", "--run-dir", "D", "--no-progress", "--eval-episodes", "0"]


@pytest.fixture
def envs(tmp_path, monkeypatch):
    (tmp_path / "rev27_envs.py").write_text(ENVS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


# ------------------------------------------------------------------ 1. float64 "unbounded" bounds
def test_float64_max_bounds_become_inf_without_a_warning(envs):
    m = np.finfo(np.float64).max
    space = gym.spaces.Box(-m, m, (3,), np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # was: RuntimeWarning: overflow encountered in cast
        flat = tensor_space(space, obs_layout(space))
        env = make_env("rev27_envs:F64Max", 2, backend="gymnasium")
    try:
        for box in (flat, env.single_observation_space):
            assert box.dtype == np.float32 and box.shape == (3,)
            assert np.all(box.low == -np.inf) and np.all(box.high == np.inf)
    finally:
        env.close()


# ------------------------------------------------------------------ 2. empty action spaces
EMPTY = [
    ("EmptyBox", "action space Box([], [], (0,), float32) is empty (shape (0,)); declare one action value or more"),
    ("EmptyMD", "action space MultiDiscrete([]) is empty (shape (0,)); declare one action value or more"),
]


@pytest.mark.parametrize("cls,line", EMPTY)
def test_train_refuses_an_empty_action_space_in_one_line(envs, capsys, cls, line):
    # was: a traceback ending in RuntimeError (_foreach_norm / stack expects a non-empty TensorList)
    code, _, err = run_main(["train", f"rev27_envs:{cls}", *TRAIN], capsys)
    assert (code, err) == (2, f"proxima train: error: env 'rev27_envs:{cls}': {line}\n")
    assert not (envs / "D").exists()
    space = gym.spaces.Box(-1.0, 1.0, (0,), np.float32) if cls == "EmptyBox" else gym.spaces.MultiDiscrete(np.array([], np.int64))
    with pytest.raises(EnvError, match=r"is empty \(shape \(0,\)\); declare one action value or more$"):
        check_spaces("X", gym.spaces.Box(-1, 1, (3,), np.float32), space)


@pytest.mark.parametrize("cls,line", EMPTY)
def test_check_env_fails_an_empty_action_space(envs, cls, line):
    violations = check_env(f"rev27_envs:{cls}", steps=5)  # was: OK ... passes 20 checks
    assert [(v.check, v.actual) for v in violations] == [("spaces supported", line)]


# ------------------------------------------------------------------ 3. the way forward
def test_refused_discrete_tuple_multidiscrete_observations_name_flatten_observation():
    fix = ("gymnasium.wrappers.FlattenObservation makes it {flat}: put def flat(**kw): return "
           "gymnasium.wrappers.FlattenObservation({call}) in a module of yours and use MODULE:flat as the env")
    cases = [
        ("FrozenLake-v1", gym.spaces.Discrete(16), "Box(0, 1, (16,), int64)", "gymnasium.make('FrozenLake-v1', **kw)"),
        ("Blackjack-v1", gym.spaces.Tuple((gym.spaces.Discrete(32), gym.spaces.Discrete(11), gym.spaces.Discrete(2))),
         "Box(0, 1, (45,), int64)", "gymnasium.make('Blackjack-v1', **kw)"),
        ("my_envs:Grid", gym.spaces.MultiDiscrete([3, 4]), "Box(0, 1, (7,), int64)", "my_envs.Grid(**kw)"),
    ]
    for env_id, space, flat, call in cases:
        with pytest.raises(EnvError) as err:
            obs_layout(space, env_id)
        assert str(err.value) == (f"env '{env_id}': not supported: {type(space).__name__} observation space {space} "
                                  f"(supported: Box, images as uint8 Box, and Dict of Box); " + fix.format(flat=flat, call=call))
    # at a Dict key FlattenObservation would flatten the image keys too: the key itself is declared flat
    with pytest.raises(EnvError) as err:
        obs_layout(gym.spaces.Dict({"cam": gym.spaces.Box(0, 255, (36, 36, 3), np.uint8), "mode": gym.spaces.Discrete(3)}), "E")
    assert str(err.value).endswith("at key 'mode' (supported: Box, images as uint8 Box, and Dict of Box); declare key 'mode' "
                                   "as Box(0, 1, (3,), int64) (gymnasium.spaces.flatten_space of it) and return "
                                   "gymnasium.spaces.flatten(that Discrete, value) at that key")
    with pytest.raises(EnvError) as err:  # a Text flattens to character indices: no such advice
        obs_layout(gym.spaces.Text(5), "E")
    assert str(err.value).endswith("(supported: Box, images as uint8 Box, and Dict of Box)")


def test_flatten_observation_factory_is_taken(envs):
    env = make_env("rev27_envs:flat", 2, backend="gymnasium", seed=0)
    try:
        assert env.single_observation_space.shape == (16,)
        assert tuple(env.reset().shape) == (2, 16)
    finally:
        env.close()


def test_multibinary_action_passes_check_env_as_does_its_old_multidiscrete_twin(envs):
    # was refused with the MultiDiscrete([2] * n) twin as the fix; now taken as it is (spaces.index_space)
    assert list(check_env("rev27_envs:MB", steps=5)) == []
    check_spaces("E", gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.MultiBinary((2, 3)))  # a 2-D one too
    assert list(check_env("rev27_envs:mb_fixed", steps=20)) == []  # the old fix still passes every check


def test_train_takes_a_multibinary_action_space(envs, capsys):
    # was: refused with its twin before building the envs
    code, _, err = run_main(["train", "rev27_envs:MB", *TRAIN], capsys)
    assert code == 0, err
    assert "action MultiBinary(3,) -> 3 categoricals over 0/1, as int8" in err
    assert list((envs / "D" / "checkpoints").glob("*.pt"))


def test_check_env_shows_the_whole_flatten_fix(envs):
    violations = check_env("FrozenLake-v1", steps=5)
    spaces_line = [str(v) for v in violations if v.check == "spaces supported"]
    assert len(spaces_line) == 1 and spaces_line[0].endswith("in a module of yours and use MODULE:flat as the env")
