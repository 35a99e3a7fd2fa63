"""Review 47 of writing your own NativeEnv (docs/native_envs.md): a start kept on self still starts every
episode; a reward or terminated returned straight from the state, an override of reset()/step() and a draw
from torch's global RNG are told in one line (check-env and train); _normal and _randint draw per member
as _uniform does; check-env's lines end with their docs link; a native env's MultiBinary acts as int64."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima.envs import EnvError, NativeEnv
from proxima.envs.checker import _one_line
from tests.cli_helpers import TINY_RUN, error_line, module_written_in, run_main

MODULE = '''
import gymnasium as gym, numpy as np, torch
from proxima.envs import NativeEnv


class Corridor(NativeEnv):
    """Walk right from cell 0 to cell 5; the start kept on self and returned as it is."""
    max_episode_steps = 20

    def __init__(self, num_envs=1, device="cpu", seed=None):
        super().__init__(num_envs, device=device, seed=seed)
        self.single_observation_space = gym.spaces.Box(0, 5, (1,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.start = torch.zeros(num_envs, dtype=torch.int64, device=self.device)

    def _sample_initial_state(self, n):
        return {"pos": self.start}

    def _dynamics(self, action):
        pos = (self.state["pos"] + 2 * action.reshape(-1) - 1).clamp(0, 5)
        self.state["pos"] = pos
        term = pos == 5
        return term.float(), term

    def _observe(self):
        return self.state["pos"].float().unsqueeze(1)


class Base(NativeEnv):
    max_episode_steps = 20

    def __init__(self, num_envs=1, device="cpu", seed=None):
        super().__init__(num_envs, device=device, seed=seed)
        self.single_observation_space = gym.spaces.Box(-10, 10, (2,), np.float32)
        self.single_action_space = gym.spaces.Discrete(3)

    def _sample_initial_state(self, n):
        return {"x": self._uniform((n,), -1.0, 1.0), "v": torch.zeros(n, device=self.device)}

    def _dynamics(self, action):
        v = 0.9 * self.state["v"] + 0.1 * (action.float() - 1)
        x = self.state["x"] + v
        self.state["x"], self.state["v"] = x, v
        return -x.abs(), x.abs() > 5

    def _observe(self):
        return torch.stack([self.state["x"], self.state["v"]], 1)


class RewardInState(Base):
    """gymnax style: the last reward and the terminal flag kept in the state and returned."""
    def _sample_initial_state(self, n):
        s = super()._sample_initial_state(n)
        s["done"] = torch.zeros(n, dtype=torch.bool, device=self.device)
        s["r"] = torch.zeros(n, device=self.device)
        return s

    def _dynamics(self, action):
        v = 0.9 * self.state["v"] + 0.1 * (action.float() - 1)
        x = self.state["x"] + v
        self.state["x"], self.state["v"] = x, v
        torch.gt(x.abs(), 2.0, out=self.state["done"])
        torch.where(self.state["done"], torch.ones_like(x), -0.01 * x.abs(), out=self.state["r"])
        return self.state["r"], self.state["done"]


class DoneInState(RewardInState):
    def _dynamics(self, action):
        reward, terminated = super()._dynamics(action)
        return reward.clone(), terminated


class GlobalRNGDyn(Base):
    def _dynamics(self, action):
        v = 0.9 * self.state["v"] + 0.1 * (action.float() - 1) + 0.01 * torch.randn(self.num_envs)
        x = self.state["x"] + v
        self.state["x"], self.state["v"] = x, v
        return -x.abs(), x.abs() > 5


class Noisy(Base):
    """Gaussian and integer draws through the member-stream helpers."""
    def _sample_initial_state(self, n):
        return {"x": self._normal((n,), 0.0, 0.5), "v": self._randint(-2, 3, (n,)).float()}

    def _dynamics(self, action):
        v = 0.9 * self.state["v"] + 0.1 * (action.float() - 1) + self._normal((self.num_envs,), std=0.01)
        x = self.state["x"] + v
        self.state["x"], self.state["v"] = x, v
        return -x.abs(), x.abs() > 5


class ResetPair(Base):
    def reset(self, seed=None):
        return super().reset(seed), {}


class OwnStep(Base):
    def step(self, action):
        obs, r, te, tr, info = super().step(action)
        return obs, r, te | tr, {}


class ObsIsTheStateOfAVeryLongClassNameThatPushesTheLineOverThreeHundredCharacters(Base):
    def _observe(self):
        return self.state["x"].unsqueeze(1).expand(-1, 2)


class Bits(Base):
    def __init__(self, num_envs=1, device="cpu", seed=None):
        super().__init__(num_envs, device=device, seed=seed)
        self.single_action_space = gym.spaces.MultiBinary(3)

    def _dynamics(self, action):
        return super()._dynamics(action.sum(1))
'''


@pytest.fixture
def user(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "rv47n", MODULE)


def env_of(name: str, num_envs: int = 1, seed: int = 0) -> NativeEnv:
    import rv47n

    return getattr(rv47n, name)(num_envs, seed=seed)


# --- 1. a start kept on self is copied, never written by the autoreset ---

def test_a_start_kept_on_self_starts_every_episode_again(user):
    env = env_of("Corridor")
    env.reset(seed=0)
    right = torch.ones(1, dtype=torch.int64)
    for _ in range(4):
        obs, *_ = env.step(right)
    obs, reward, terminated, truncated, info = env.step(right)
    assert terminated.tolist() == [True] and reward.tolist() == [1.0]
    # was: obs [[5.0]] (the autoreset wrote the last position into self.start), and every later
    # episode "ended" at once in the trainer's eyes while it never reset
    assert info["final_obs"].tolist() == [[5.0]] and obs.tolist() == [[0.0]]
    assert env.start.tolist() == [0]
    lengths = []
    for t in range(1, 11):
        _, _, terminated, _, info = env.step(right)
        if terminated.item():
            lengths.append(int(info["episode_length"].item()))
    assert lengths == [5, 5]


# --- 2. a reward or terminated that is a state tensor ---

@pytest.mark.parametrize("cls, what, key", [("RewardInState", "reward", "r"), ("DoneInState", "terminated", "done")])
def test_a_reward_or_flag_returned_from_the_state_is_refused_at_the_first_step(user, cls, what, key):
    env = env_of(cls, 2)
    env.reset(seed=0)
    with pytest.raises(EnvError) as e:
        env.step(torch.tensor([2, 2]))
    assert str(e.value) == (f"env '{cls}': the {what} of _dynamics() shares memory with state[{key!r}], which the "
                            f"autoreset overwrites with the next episode's start before step() returns it (the trainer "
                            f"would read the start's {what}); return a new tensor (.clone()), never the state itself or "
                            "a view of it (docs/native_envs.md)")


def test_check_env_names_the_aliased_reward_not_a_state_resume(user, capsys):
    code, out, _ = run_main(["check-env", "rv47n:RewardInState"], capsys)
    # was: "FAIL state resume: ... keep everything that changes between steps in self.state", which it does
    assert code == 1 and "state resume" not in out, out
    assert ("FAIL step: expected the contract of docs/native_envs.md; got env 'rv47n:RewardInState': the reward of "
            "_dynamics() shares memory with state['r']") in out, out


# --- 3. torch's global RNG ---

def test_check_env_fails_a_step_that_draws_from_the_global_rng(user, capsys):
    code, out, _ = run_main(["check-env", "rv47n:GlobalRNGDyn"], capsys)
    # was: "OK: rv47n:GlobalRNGDyn passes 17 checks"
    assert code == 1, out
    assert ("FAIL global rng: expected reset() and step() leave torch's global RNG alone; got step() drew from torch's "
            "global RNG (torch.rand, randn or randint without generator=), which reset(seed) does not seed and every "
            "--seeds member shares, so members do not replay their single runs; draw through self._uniform, "
            "self._normal or self._randint (docs/native_envs.md)") in out.splitlines(), out


def test_check_env_passes_draws_through_the_helpers_and_leaves_the_global_rng_as_it_was(user, capsys):
    torch.manual_seed(5)
    before = torch.get_rng_state()
    code, out, _ = run_main(["check-env", "rv47n:Noisy"], capsys)
    assert code == 0 and out.splitlines()[-1] == "OK: rv47n:Noisy passes 18 checks", out  # 17 before "obs bounds"
    assert torch.equal(torch.get_rng_state(), before)


# --- 4. _normal and _randint ---

def test_normal_and_randint_give_float32_gaussians_and_int64_integers_seeded_by_reset(user):
    env = env_of("Noisy", 4000)
    env.reset(seed=3)
    x, v = env.state["x"].clone(), env.state["v"].clone()
    assert x.dtype == torch.float32 and abs(float(x.mean())) < 0.05 and abs(float(x.std()) - 0.5) < 0.03
    assert env._randint(-2, 3, (4000, 2)).dtype == torch.int64
    assert set(v.tolist()) == {-2.0, -1.0, 0.0, 1.0, 2.0}
    env.reset(seed=3)
    assert torch.equal(env.state["x"], x) and torch.equal(env.state["v"], v)


@pytest.mark.parametrize("draw", ["normal", "randint", "uniform"])
def test_each_members_rows_draw_what_its_single_run_draws(user, draw):
    def sample(env):
        return {"normal": lambda: env._normal((env.num_envs, 3)),
                "randint": lambda: env._randint(0, 100, (env.num_envs, 3)),
                "uniform": lambda: env._uniform((env.num_envs, 3), -1, 1)}[draw]()

    population = env_of("Noisy", 6)
    assert population.use_member_streams([11, 12])
    together = torch.cat([sample(population) for _ in range(3)], 1)
    for p, seed in enumerate((11, 12)):
        alone = env_of("Noisy", 3, seed=seed)
        assert torch.equal(together[3 * p:3 * (p + 1)], torch.cat([sample(alone) for _ in range(3)], 1))


# --- 5. reset() and step() overridden ---

@pytest.mark.parametrize("cls, line", [
    ("ResetPair", "ResetPair overrides reset(): NativeEnv.reset (seeding, the state buffers) is not to be overridden, "
                  "implement _sample_initial_state(n) and _observe() instead (docs/native_envs.md)"),
    ("OwnStep", "OwnStep overrides step(): NativeEnv.step (time limit, autoreset, episode statistics) is not to be "
                "overridden, implement _dynamics(action) instead (docs/native_envs.md)"),
])
def test_an_overridden_reset_or_step_is_told_in_check_env_and_train(user, capsys, tmp_path, cls, line):
    code, out, _ = run_main(["check-env", f"rv47n:{cls}"], capsys)
    # was: "FAIL obs dtype: expected a torch.Tensor; got tuple at reset" / "FAIL step returns: ... 4 values"
    assert code == 1 and out.splitlines()[0] == (f"FAIL build: expected {cls}(num_envs, device, seed) builds a native "
                                                 f"env with supported spaces; got env 'rv47n:{cls}': {line}"), out
    code, _, err = run_main(["train", f"rv47n:{cls}", *TINY_RUN, "--total-timesteps", "64", "--run-dir",
                             str(tmp_path / "run")], capsys)
    # was: AttributeError: 'tuple' object has no attribute 'clone'
    error_line(code, err, f"env 'rv47n:{cls}': {line}")
    assert not (tmp_path / "run").exists()


def test_both_overridden_are_named_together():
    class Both(NativeEnv):
        def reset(self, seed=None):
            return super().reset(seed)

        def step(self, action):
            return super().step(action)

    assert Both.overridden_contract() == (
        "Both overrides reset() and step(): NativeEnv.reset/step (seeding, the state buffers, time limit, autoreset, "
        "episode statistics) are not to be overridden, implement _sample_initial_state(n), _dynamics(action) and "
        "_observe() instead (docs/native_envs.md)")
    assert NativeEnv.overridden_contract() is None


# --- 6. check-env's long lines ---

def test_check_env_shows_a_native_envs_line_whole(user, capsys):
    cls = "ObsIsTheStateOfAVeryLongClassNameThatPushesTheLineOverThreeHundredCharacters"
    code, out, _ = run_main(["check-env", f"rv47n:{cls}"], capsys)
    fail = [line for line in out.splitlines() if line.startswith("FAIL step:")]
    # was: cut at 300 characters, mid-word: "... or a view of it (docs/native_..."
    assert code == 1 and len(fail) == 1 and len(fail[0]) > 300, out
    assert fail[0].endswith("never the state itself or a view of it (docs/native_envs.md)"), fail[0]


def test_a_cut_line_ends_at_a_word_and_keeps_its_docs_link():
    text = "check " + "the words " * 60 + "(docs/native_envs.md)"
    cut = _one_line(text)
    assert len(cut) <= 300 and cut.endswith("words... (docs/native_envs.md)"), cut
    assert _one_line("one two three four", 12) == "one two..."


# --- 7. a native env's MultiBinary acts as int64 ---

def test_a_native_multibinary_is_said_to_act_as_int64(user, capsys, tmp_path):
    words = "action MultiBinary(3,) -> 3 categoricals over 0/1, as int64"
    code, out, _ = run_main(["check-env", "rv47n:Bits"], capsys)
    # was: "... as int8", the dtype a Gymnasium env gets, while _dynamics gets (N, 3) int64
    assert code == 0 and words in out, out
    code, _, err = run_main(["train", "rv47n:Bits", *TINY_RUN, "--total-timesteps", "64", "--run-dir",
                             str(tmp_path / "run")], capsys)
    assert code == 0 and words in err, err


def test_a_gymnasium_multibinary_still_acts_in_its_dtype():
    from proxima.envs.spaces import spaces_summary

    obs = gym.spaces.Box(-1, 1, (2,), np.float32)
    assert spaces_summary(obs, gym.spaces.MultiBinary(3))["action"].endswith("over 0/1, as int8")
    assert spaces_summary(obs, gym.spaces.MultiBinary(3), native=True)["action"].endswith("over 0/1, as int64")
