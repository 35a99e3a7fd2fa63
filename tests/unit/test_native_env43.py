"""A native env's resume, as check-env checks it (state kept outside self.state fails "state resume";
every built-in native env and the docs' PointMass pass it), and NativeEnv's shape fault told a shape
fix, not the dtype fix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from proxima.envs import NATIVE_ENVS, EnvError
from proxima.envs.checker import RESUME_STEPS, check_env

DOC = Path(__file__).resolve().parents[2] / "docs" / "native_envs.md"
POINTMASS = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)  # the docs' example, as written

ENVS = POINTMASS + '''

class Hidden(PointMass):
    """the review's env: a goal that drifts every step, kept in an attribute outside self.state"""

    def __init__(self, num_envs=1, device="cpu", seed=None):
        super().__init__(num_envs, device=device, seed=seed)
        self.single_observation_space = gym.spaces.Box(-1e3, 1e3, (3,), np.float32)
        self.goal = torch.zeros(num_envs)

    def _dynamics(self, action):
        self.goal = self.goal + 0.01
        return super()._dynamics(action)

    def _observe(self):
        return torch.stack([self.state["x"], self.state["v"], self.goal], 1)


class Short(PointMass):
    max_episode_steps = 3  # autoresets (draws from self.generator) inside the replayed steps


class ForgetsGenerator(Short):
    """restores its state but not its generator's: the autoresets after a resume draw other starts"""

    def load_state_dict(self, sd):
        super().load_state_dict(sd)
        self.generator.manual_seed(12345)


class ObsShape(PointMass):
    def _observe(self):
        return super()._observe()[:, :1]


class RewardShape(PointMass):
    def _dynamics(self, action):
        reward, terminated = super()._dynamics(action)
        return reward[:, None], terminated
'''


@pytest.fixture
def envs(tmp_path, monkeypatch):
    (tmp_path / "env43.py").write_text(ENVS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "env43"


def test_state_outside_self_state_fails_the_resume_check_naming_step_quantity_and_fix(envs):
    report = check_env(f"{envs}:Hidden", steps=30)
    assert [v.check for v in report] == ["state resume"]
    actual = report[0].actual
    # the goal column (obs[:, 2]) is 30 steps further in the first run than in the resumed env
    assert actual.startswith(f"Hidden's obs at step 1 of the {RESUME_STEPS} replayed after load_state_dict() differs "
                             "from the first run's (first ")
    assert "(obs[0, 2] = 0.31, then 0.01)" in actual
    assert actual.endswith("keep everything that changes between steps in self.state (a dict of (num_envs, ...) "
                           "tensors, saved with self.generator), not in other attributes (docs/native_envs.md)")


def test_the_resume_check_covers_the_generator_as_a_checkpoint_saves_it(envs):
    assert list(check_env(f"{envs}:Short", steps=10)) == []
    report = check_env(f"{envs}:ForgetsGenerator", steps=10)
    assert [v.check for v in report] == ["state resume"]
    # the first difference is an autoreset's start state (episodes of 3 steps end at the replay's step 2)
    assert re.match(r"ForgetsGenerator's obs at step [1-3] of the", report[0].actual)


@pytest.mark.parametrize("cls", sorted(set(NATIVE_ENVS.values()), key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_every_builtin_native_env_resumes_bit_identically(cls):
    report = check_env(f"{cls.__module__}:{cls.__name__}", steps=30)
    assert "state resume" in report.checks_run
    assert [v for v in report if v.check == "state resume"] == []


def test_the_docs_pointmass_passes_the_resume_check(envs):
    report = check_env(f"{envs}:PointMass", steps=30)
    assert list(report) == [] and "state resume" in report.checks_run


def test_a_wrong_obs_shape_is_told_a_shape_fix_and_a_wrong_dtype_the_dtype_fix(envs):
    import env43

    with pytest.raises(EnvError) as e:
        env43.ObsShape(2, seed=0).reset()
    assert str(e.value) == ("env 'ObsShape': the observations of _observe() (first reset): shape (2, 1), expected (2, 2) "
                            "(num_envs first); return one row per env, each of the shape (2,) that single_observation_space "
                            "declares (stack (num_envs,) features with torch.stack(..., dim=1))")
    env = env43.PointMass(2, seed=0)
    env._observe = lambda: torch.zeros(2, 2, dtype=torch.float64)
    with pytest.raises(EnvError, match=r"dtype torch.float64, expected torch.float32; return float32 observations "
                                       r"\(\.float\(\)\): a native env's are float32 whatever its Box's dtype$"):
        env.reset()
    env = env43.RewardShape(2, seed=0)
    env.reset()
    with pytest.raises(EnvError) as e:
        env.step(torch.zeros(2, dtype=torch.int64))
    assert str(e.value) == ("env 'RewardShape': the reward of _dynamics(): shape (2, 1), expected (2,) (num_envs first); "
                            "return one reward per env: a (num_envs,) tensor")
