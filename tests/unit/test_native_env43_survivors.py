"""check-env's native "state resume" check, pinned where a mutation review found it untested: the full fix
text of its message, a divergence many steps into the replay, envs that cannot save or load their state,
the seed, env_kwargs and global RNG a resumed run restores, a reward-only divergence; and NativeEnv's shape
fixes for an image obs and a (num_envs, 1) terminated."""

from __future__ import annotations

import re

import pytest
import torch

from proxima.envs import EnvError
from proxima.envs.checker import RESUME_STEPS, check_env
from tests.unit import test_native_env43 as m

FIX = ("keep everything that changes between steps in self.state (a dict of (num_envs, ...) tensors, saved with "
       "self.generator), not in other attributes (docs/native_envs.md)")

ENVS = m.ENVS + '''

class LateForget(ForgetsGenerator):
    """forgets its generator, but its first autoreset (the first draw) comes 10 steps into the replay"""
    max_episode_steps = 10

    def _dynamics(self, action):
        reward, terminated = super()._dynamics(action)
        return reward, torch.zeros_like(terminated)  # only the time limit ends an episode


class NoSave(Hidden):
    can_save_state = False  # its resume restarts episodes: the check promises nothing


class Layout:
    """a plain object: torch.save pickles it, torch.load(weights_only=True) refuses it"""


class ObjectState(PointMass):
    def state_dict(self):
        return {**super().state_dict(), "layout": Layout()}

    def load_state_dict(self, sd):
        super().load_state_dict({k: v for k, v in sd.items() if k != "layout"})


class RaisingStateDict(PointMass):
    def state_dict(self):
        raise RuntimeError("no state here")


class GlobalNoise(PointMass):
    """draws its noise from torch's global RNG, which a checkpoint saves beside the env's state"""

    def _dynamics(self, action):
        reward, terminated = super()._dynamics(action)
        self.state["x"] = self.state["x"] + 0.01 * torch.rand(self.num_envs)
        return reward, terminated


class SeededGoal(PointMass):
    """a constant goal drawn from the seed once, in __init__: a resumed run builds the env with its seed"""

    def __init__(self, num_envs=1, device="cpu", seed=None):
        super().__init__(num_envs, device=device, seed=seed)
        g = torch.Generator()
        if seed is not None:
            g.manual_seed(seed)
        self.goal = torch.rand(num_envs, generator=g) * 4 - 2

    def _observe(self):
        return torch.stack([self.state["x"] - self.goal, self.state["v"]], dim=1)


class RequiredKwarg(PointMass):
    def __init__(self, num_envs=1, device="cpu", seed=None, *, scale):
        super().__init__(num_envs, device=device, seed=seed, force=scale)


class BadLoad(PointMass):
    def load_state_dict(self, sd):
        raise KeyError("positions")


class RewardHidden(PointMass):
    """a bonus that grows every step, kept outside self.state, added to the reward only"""

    def __init__(self, num_envs=1, device="cpu", seed=None):
        super().__init__(num_envs, device=device, seed=seed)
        self.bonus = torch.zeros(num_envs)

    def _dynamics(self, action):
        reward, terminated = super()._dynamics(action)
        self.bonus = self.bonus + 0.5
        return reward + self.bonus, terminated


class Image(PointMass):
    def __init__(self, num_envs=1, device="cpu", seed=None):
        super().__init__(num_envs, device=device, seed=seed)
        self.single_observation_space = gym.spaces.Box(0, 255, (84, 84, 1), np.uint8)

    def _observe(self):  # the channel axis forgotten
        return torch.zeros(self.num_envs, 84, 84, dtype=torch.uint8, device=self.device)


class TerminatedShape(PointMass):
    def _dynamics(self, action):
        reward, terminated = super()._dynamics(action)
        return reward, terminated[:, None]
'''


@pytest.fixture
def envs(tmp_path, monkeypatch):
    (tmp_path / "env43s.py").write_text(ENVS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "env43s"


def resume_violations(report) -> list:
    return [v for v in report if v.check == "state resume"]


def test_the_resume_violation_prints_its_whole_fix(envs):
    (violation,) = check_env(f"{envs}:Hidden", steps=30)
    assert len(str(violation)) > 300  # the usual limit would cut the fix off
    assert str(violation).endswith(FIX)


def test_a_divergence_ten_steps_into_the_replay_fails_the_resume_check(envs):
    assert RESUME_STEPS >= 10
    report = check_env(f"{envs}:LateForget", steps=10)
    assert [v.check for v in report] == ["state resume"]
    # the replay starts at an episode's first step: the first draw after the load is the autoreset at step 10
    assert report[0].actual.startswith(f"LateForget's obs at step 10 of the {RESUME_STEPS} replayed")


def test_an_env_that_cannot_save_its_state_is_not_resume_checked(envs):
    report = check_env(f"{envs}:NoSave", steps=10)
    assert list(report) == []
    assert "state resume" not in report.checks_run and "step" in report.checks_run


def test_a_state_dict_a_checkpoint_cannot_load_fails_the_resume_check(envs):
    (violation,) = resume_violations(check_env(f"{envs}:ObjectState", steps=5))
    assert violation.actual.startswith("state_dict() cannot be saved in a checkpoint: UnpicklingError: ")
    (violation,) = resume_violations(check_env(f"{envs}:RaisingStateDict", steps=5))
    assert violation.actual.startswith("state_dict() cannot be saved in a checkpoint: RuntimeError: no state here (env43s.py:")


def test_an_env_drawing_from_the_global_rng_resumes_as_a_checkpoint_restores_it(envs):
    report = check_env(f"{envs}:GlobalNoise", steps=10)
    # the resume itself holds; the draw is told under "global rng" since review 47 (test_native47.py)
    assert [v.check for v in report] == ["global rng"] and "state resume" in report.checks_run


def test_the_new_env_is_built_with_the_checked_seed(envs):
    report = check_env(f"{envs}:SeededGoal", steps=10, seed=3)
    assert list(report) == [] and "state resume" in report.checks_run


def test_the_new_env_is_built_with_the_env_kwargs(envs):
    report = check_env(f"{envs}:PointMass", steps=10, env_kwargs={"force": 0.5})
    assert list(report) == [] and "state resume" in report.checks_run
    report = check_env(f"{envs}:RequiredKwarg", steps=10, env_kwargs={"scale": 0.3})
    assert list(report) == [] and "state resume" in report.checks_run


def test_a_load_state_dict_that_raises_is_one_violation(envs):
    report = check_env(f"{envs}:BadLoad", steps=5)
    assert [v.check for v in report] == ["state resume"]
    assert re.fullmatch(r"a new env did not take the saved state_dict\(\): KeyError: 'positions' \(env43s\.py:\d+\)",
                        report[0].actual)


def test_state_that_only_changes_the_reward_fails_the_resume_check(envs):
    (violation,) = check_env(f"{envs}:RewardHidden", steps=10)
    assert violation.check == "state resume"
    assert violation.actual.startswith(f"RewardHidden's reward at step 1 of the {RESUME_STEPS} replayed")
    assert violation.actual.endswith(FIX)


def test_an_image_obs_of_the_wrong_shape_is_told_the_declared_image_shape(envs):
    import env43s

    env = env43s.Image(2, seed=0)
    with pytest.raises(EnvError) as e:
        env.reset()
    assert str(e.value) == ("env 'Image': the observations of _observe() (first reset): shape (2, 84, 84), expected "
                            "(2, 84, 84, 1) (num_envs first); return one row per env, each of the shape (84, 84, 1) "
                            "that single_observation_space declares")


def test_a_terminated_of_one_column_is_told_one_flag_per_env(envs):
    import env43s

    env = env43s.TerminatedShape(2, seed=0)
    env.reset()
    with pytest.raises(EnvError) as e:
        env.step(torch.zeros(2, dtype=torch.int64))
    assert str(e.value) == ("env 'TerminatedShape': the terminated of _dynamics(): shape (2, 1), expected (2,) "
                            "(num_envs first); return one flag per env: a (num_envs,) tensor")
