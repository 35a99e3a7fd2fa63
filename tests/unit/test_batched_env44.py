"""A BatchedEnv subclass (not NativeEnv) given as module:Class: the env contract base.py documents,
the one tests/probe_envs.py follows. It crashed with AttributeError '_check_obs_space' in train and
check-env (user review, session 44): the observation-space check now lives on BatchedEnv."""

import gymnasium as gym
import pytest
import torch

from proxima.envs import make_env
from proxima.envs.base import BatchedEnv, EnvError
from tests.cli_helpers import TINY_RUN, error_line, run_main


class DictObs(BatchedEnv):
    """A BatchedEnv declaring a Dict observation space: its step returns one packed tensor, whose key
    order a deployed policy (Gymnasium's sorted keys) would not know."""

    def __init__(self, num_envs, device="cpu", seed=None):
        self.num_envs, self.device = num_envs, torch.device(device)
        self.single_observation_space = gym.spaces.Dict({"b": gym.spaces.Box(-1, 1, (1,)), "a": gym.spaces.Box(-1, 1, (2,))})
        self.single_action_space = gym.spaces.Discrete(2)


def test_a_batched_env_subclass_trains_from_module_class(tmp_path, capsys):
    run = tmp_path / "run"
    code, out, err = run_main(["train", "probe_envs:ConstantReward", *TINY_RUN, "--total-timesteps", "128",
                               "--run-dir", str(run)], capsys)
    assert code == 0, err
    assert (run / "checkpoints").is_dir() and (run / "metrics.csv").read_text().count("\n") >= 2


def test_a_batched_env_subclass_passes_check_env(capsys):
    code, out, err = run_main(["check-env", "probe_envs:ConstantReward"], capsys)
    assert code == 0, err + out
    assert "OK: probe_envs:ConstantReward passes" in out + err


def test_a_batched_env_with_a_dict_observation_is_refused_in_one_line(capsys):
    with pytest.raises(EnvError, match=r"env 'tests.unit.test_batched_env44:DictObs': observation space Dict.* is not a Box"):
        make_env("tests.unit.test_batched_env44:DictObs", 2, seed=0)
    code, out, err = run_main(["train", "tests.unit.test_batched_env44:DictObs", *TINY_RUN, "--total-timesteps", "128"], capsys)
    error_line(code, err, "is not a Box")
