"""Review 38 (unusual spaces): a native env's observation space and _observe() result, eval's advice
when only the env given differs from the run's, and a preset file that is not valid YAML."""

from __future__ import annotations

import types

import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima import checkpoint as ckpt
from proxima import presets
from proxima.envs import EnvError, make_env
from tests.cli_helpers import TINY_RUN, error_line, module_written_in, run_main

NATIVE = '''
import gymnasium as gym
import numpy as np
import torch
from proxima.envs import NativeEnv


class _Base(NativeEnv):
    max_episode_steps = 8

    def __init__(self, num_envs=1, device="cpu", seed=None):
        super().__init__(num_envs, device=device, seed=seed)
        self.single_action_space = gym.spaces.Discrete(2)

    def _sample_initial_state(self, n):
        return {"x": self._uniform((n,), -1.0, 1.0)}

    def _dynamics(self, action):
        return (action.reshape(self.num_envs) == 1).float(), torch.zeros(self.num_envs, dtype=torch.bool)


class DictBA(_Base):
    """keys declared b then a, packed in that order: Gymnasium's Dict (and Policy.act) sorts them a, b"""
    reset_called = False  # the CLI refuses the space as it builds the env, before any reset

    def reset(self, seed=None):
        DictBA.reset_called = True
        return super().reset(seed)

    def __init__(self, num_envs=1, device="cpu", seed=None):
        super().__init__(num_envs, device=device, seed=seed)
        self.single_observation_space = gym.spaces.Dict({"b": gym.spaces.Box(-1, 1, (1,), np.float32),
                                                         "a": gym.spaces.Box(-1, 1, (3,), np.float32)})

    def _observe(self):
        return torch.cat([self.state["x"][:, None], torch.zeros(self.num_envs, 3)], 1)


class ObsDict(_Base):
    def __init__(self, num_envs=1, device="cpu", seed=None):
        super().__init__(num_envs, device=device, seed=seed)
        self.single_observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)

    def _observe(self):
        return {"b": self.state["x"][:, None], "a": torch.zeros(self.num_envs, 3)}


class F64(_Base):
    def __init__(self, num_envs=1, device="cpu", seed=None, cast=True):
        super().__init__(num_envs, device=device, seed=seed)
        self.single_observation_space = gym.spaces.Box(-1, 1, (2,), np.float64)
        self.cast = cast

    def _observe(self):
        obs = torch.stack([self.state["x"], -self.state["x"]], 1)
        return obs if self.cast else obs.double()
'''

GYM = '''
import gymnasium as gym
import numpy as np


class MD(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self):
        self.action_space = gym.spaces.MultiDiscrete([3, 2])

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 0.0, False, self.t >= 8, {}


class MDStart(MD):
    def __init__(self):
        self.action_space = gym.spaces.MultiDiscrete([3, 2], start=[-1, 5])


class Obs3(MDStart):
    """MDStart's actions, another observation shape"""
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}
'''


@pytest.fixture
def natmod(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "natspaces38", NATIVE)


@pytest.fixture
def gymmod(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "gymspaces38", GYM)


# ------------------------------------------------------------------ 1. native observation spaces
def test_native_dict_observation_space_is_refused(natmod, tmp_path, capsys):
    # packed in the env's key order, acted on in Gymnasium's sorted one: refused before any training
    run = tmp_path / "r"
    code, _, err = run_main(["train", "natspaces38:DictBA", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(run)], capsys)
    line = error_line(code, err, "env 'natspaces38:DictBA': observation space Dict(", "is not a Box",
                      "declare a flat float32 Box and pack the features into it", "Gymnasium backend")
    assert "Traceback" not in err and line.count("\n") == 0
    assert not (run / "checkpoints").exists() or not list((run / "checkpoints").glob("*.pt"))
    import natspaces38

    assert not natspaces38.DictBA.reset_called  # refused at build time, not left to the first reset


def test_native_dict_observation_space_is_refused_at_reset_from_python(natmod):
    # built directly, as a Python-API user does (no make_env): the first reset refuses it
    import natspaces38

    env = natspaces38.DictBA(2)
    with pytest.raises(EnvError, match=r"observation space Dict\(.* is not a Box: a native env's observations are one"):
        env.reset(seed=0)


def test_native_observe_returning_a_dict_says_one_tensor(natmod):
    env = make_env("natspaces38:ObsDict", 2)
    with pytest.raises(EnvError) as e:
        env.reset(seed=0)
    msg = str(e.value)
    assert "the observations of _observe() (first reset): a dict, expected a torch.Tensor" in msg
    assert "a native env's observations are one (num_envs, 4) tensor" in msg
    assert ".float()" not in msg


def test_native_float64_box_is_read_as_float32(natmod):
    # a float64 Box declared, float32 returned: accepted, the obs are float32
    obs = make_env("natspaces38:F64", 3, seed=1).reset(seed=1)
    assert obs.dtype == torch.float32 and tuple(obs.shape) == (3, 2)
    # float64 returned: refused, naming the rule (not only ".float()")
    env = make_env("natspaces38:F64", 3, seed=1, env_kwargs={"cast": False})
    with pytest.raises(EnvError, match=r"dtype torch\.float64, expected torch\.float32; return float32 observations "
                                       r"\(\.float\(\)\): a native env's are float32 whatever its Box's dtype"):
        env.reset(seed=1)


# ------------------------------------------------------------------ 2. eval with another env: no start-over advice
def test_eval_with_another_env_does_not_advise_a_start_over(gymmod, tmp_path, capsys):
    run = tmp_path / "md"
    code, _, err = run_main(["train", "gymspaces38:MDStart", *TINY_RUN, "--total-timesteps", "128", "--checkpoint-every", "1",
                             "--run-dir", str(run), "--quiet"], capsys)
    assert code == 0, err
    files = ckpt.list_checkpoints(run)
    assert len(files) == 2
    # both checkpoints sound, the env given another start: the precise mismatch, and nothing about the run's files
    for extra in (["--env", "gymspaces38:MD"], ["--env-kwargs", "{}", "--env", "gymspaces38:MD"]):
        code, _, err = run_main(["eval", str(run), "--episodes", "1", *extra], capsys)
        line = error_line(code, err, "(start [-1, 5] in training, [0, 0] in the env)")
        assert line.endswith("load it with the env it was trained on, or train a new run on this one"), line
        assert "restore a copy" not in line and "--overwrite" not in line and "older checkpoint" not in line
    # another observation shape: the generic mismatch, as sound a run
    code, _, err = run_main(["eval", str(run), "--episodes", "1", "--env", "gymspaces38:Obs3"], capsys)
    line = error_line(code, err, f"{files[-1]}: trained on observations Box(..., (2,), float32)",
                      "env 'gymspaces38:Obs3' has Box(..., (3,), float32)")
    assert "restore a copy" not in line and "--overwrite" not in line and "older checkpoint" not in line
    # the newest damaged, the older one sound but for another env: it is named as such, no start over
    files[-1].write_bytes(files[-1].read_bytes()[:1000])
    code, _, err = run_main(["eval", str(run), "--episodes", "1", "--env", "gymspaces38:MD"], capsys)
    line = error_line(code, err, f"{files[-1]}: truncated checkpoint")
    assert line.endswith("; 1 of the 1 older checkpoint(s) load but do not fit the env given: evaluate one with the env "
                         "the run was trained on (--env, --env-kwargs)"), line
    assert "restore a copy" not in line
    # every checkpoint damaged: the restore / start-over advice stays
    files[0].write_bytes(files[0].read_bytes()[:1000])
    code, _, err = run_main(["eval", str(run), "--episodes", "1", "--env", "gymspaces38:MD"], capsys)
    line = error_line(code, err, "none of the 1 older checkpoint(s) loads either")
    assert f"restore a copy of {run / 'checkpoints'} if you have one" in line and "--overwrite" in line


# ------------------------------------------------------------------ 3. a preset file that is not valid YAML
@pytest.fixture
def broken_presets(tmp_path, monkeypatch):
    folder = tmp_path / "presets"
    folder.mkdir()
    (folder / "fine.yaml").write_text("Fine-v0:\n  default:\n    config:\n      num_envs: 2\n")
    (folder / "broken.yaml").write_text("CartPole-v1:\n  default:\n    config:\n      lr: [0.1\n      num_envs: 2\n  x: : y\n")
    monkeypatch.setattr(presets, "_DIR", folder)
    presets.all_presets.cache_clear()
    yield folder / "broken.yaml"
    presets.all_presets.cache_clear()


def test_broken_preset_yaml_is_one_line_naming_file_and_line(broken_presets, gymmod, tmp_path, capsys):
    # an env with no preset at all still reads every preset file
    code, _, err = run_main(["train", "gymspaces38:MD", *TINY_RUN, "--total-timesteps", "64", "--run-dir",
                             str(tmp_path / "p"), "--dry-run"], capsys)
    # PyYAML's problem mark (0-based line 4: "num_envs: 2" where the flow list wanted ',' or ']'), 1-based;
    # its context mark is the line the list opened on (4)
    line = error_line(code, err, f"preset file {broken_presets}: not valid YAML at line 5 ")
    assert "fix that line or restore the file" in line and "ScannerError" not in err and "ParserError" not in err
    with pytest.raises(presets.ConfigError, match=r"broken\.yaml: not valid YAML at line 5 "):
        presets.all_presets()


# ------------------------------------------------------------------ 4. Policy.check_env_spaces: the env differs, not the file
def _policy(obs, act):
    policy = ckpt.Policy.__new__(ckpt.Policy)  # only what check_env_spaces reads
    policy.__dict__.update(observation_space=obs, action_space=act, path="r/checkpoints/step_64.pt", env_id="m:E")
    return policy


def _env(obs, act):
    # a BatchedEnv of the policy's env id: check_env_spaces names the env given by its env_id
    return types.SimpleNamespace(single_observation_space=obs, single_action_space=act, env_id="m:E")


BOX2 = gym.spaces.Box(-1, 1, (2,), np.float32)


@pytest.mark.parametrize("trained, given, says", [
    ((gym.spaces.Box(0, 255, (4 * 36 * 36 * 3,), np.float32), gym.spaces.Discrete(2)),
     (gym.spaces.Box(0, 255, (4, 36, 36, 3), np.uint8), gym.spaces.Discrete(2)),
     "r/checkpoints/step_64.pt: trained before Proxima read a uint8 frame stack as an image"),
    ((BOX2, gym.spaces.Discrete(2)), (gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2)),
     "r/checkpoints/step_64.pt: trained on observations Box(..., (2,), float32) and actions Discrete(2); env 'm:E' has "
     "Box(..., (3,), float32) and Discrete(2)"),
    ((BOX2, gym.spaces.Discrete(3)), (BOX2, gym.spaces.Discrete(3, start=1)),
     "r/checkpoints/step_64.pt: env 'm:E' takes actions Discrete(3, start=1), the run was trained on Discrete(3)"),
])
def test_each_space_mismatch_is_an_env_mismatch(trained, given, says):
    # EnvMismatchError, not a bare CheckpointError: eval gives no restore / start-over advice for it
    with pytest.raises(ckpt.EnvMismatchError) as e:
        _policy(*trained).check_env_spaces(_env(*given))
    assert str(e.value).startswith(says), str(e.value)
