"""Mutation round on round 49b's hostile-input handling: make_env's step() (a one-env env's unreadable action, a
2-D space's refusal on one line, state buffers put back after an interrupt), make_env's memory refusal (MemoryError,
torch's byte and CUDA-size wordings, other errors passed through), arrays of several lines where vector/backend go,
and Policy.act's pixels (a Dict's image key of text, the non-finite value named)."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import proxima.envs as envs
from proxima.config import ConfigError
from proxima.envs import EnvError, NativeEnv, make_env
from proxima.envs import memory_refusal
from proxima.envs.base import native_failure
from tests.unit.test_pixels49 import _policy

IMAGE = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)


class _Own(NativeEnv):
    """One number of state; _dynamics rebinds state['x'] and then raises what ``RAISE`` is."""
    max_episode_steps = 5
    RAISE = None

    def __init__(self, num_envs=2, device="cpu", seed=None, space=None):
        super().__init__(num_envs, device=device, seed=seed)
        self.single_observation_space = gym.spaces.Box(-10.0, 10.0, (1,), np.float32)
        self.single_action_space = space or gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def _sample_initial_state(self, n):
        return {"x": self._uniform((n,), -1.0, 1.0)}

    def _dynamics(self, action):
        self.state["x"] = torch.full((self.num_envs,), 99.0)
        if self.RAISE is not None:
            raise self.RAISE
        n = self.num_envs
        return torch.zeros(n), torch.zeros(n, dtype=torch.bool)

    def _observe(self):
        return self.state["x"].unsqueeze(1).clone()


# ------------------------------------------------------------------------------- step()'s actions
def test_a_one_env_env_refuses_an_unreadable_action_in_one_line():
    env = make_env("CartPole-v1", 1, seed=1)
    env.reset()
    with pytest.raises(EnvError) as e:
        env.step({"a": 1})
    assert str(e.value) == ("env 'CartPole-v1': step() was given {'a': 1}, something torch cannot read as numbers; "
                            "Discrete(2) takes a tensor of numbers, one action for each of its 1 envs")
    assert env.step(torch.tensor(1))[1].tolist() == [1.0]


@pytest.mark.filterwarnings("ignore:.*multi-dimensional MultiDiscrete")
def test_an_unreadable_action_of_a_2d_multidiscrete_is_refused_on_one_line():
    env = _Own(2, seed=0, space=gym.spaces.MultiDiscrete([[2, 3], [4, 5]]))
    env.check_actions = True  # as make_env turns it on for a caller's env
    env.reset()
    with pytest.raises(EnvError) as e:
        env.step({"a": 1})
    line = str(e.value)
    assert "\n" not in line
    assert line.endswith("something torch cannot read as numbers; MultiDiscrete([[2 3] [4 5]]) takes a tensor of numbers, "
                         "one action for each of its 2 envs")


def test_an_interrupted_step_puts_the_state_buffers_back():
    """A KeyboardInterrupt (not an Exception) inside _dynamics, after it rebound state['x']: the env's own tensor is
    put back, so the next step starts from the state before the interrupted one."""
    env = _Own(2, seed=0)
    env.reset()
    before = env.state["x"]
    kept = before.clone()
    env.RAISE = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        env.step(torch.zeros(2, 2))
    assert env.state["x"] is before and torch.equal(env.state["x"], kept)
    env.RAISE = RuntimeError("boom")
    with pytest.raises(RuntimeError):
        env.step(torch.zeros(2, 2))
    assert env.state["x"] is before


def test_a_step_whose_dynamics_raised_gets_the_native_env_line():
    """step() runs _dynamics from _step_body now: the exception is still read as the native env's own."""
    env = _Own(2, seed=0)
    env.reset()
    env.RAISE = ValueError("bad\nphysics")
    with pytest.raises(ValueError) as e:
        env.step(torch.zeros(2, 2))
    line = native_failure(e.value, "own:Env", "step 3")
    assert isinstance(line, EnvError)
    assert str(line).startswith("env 'own:Env': native env raised ValueError: bad physics in _dynamics (")
    assert str(line).endswith(") at step 3")


# ------------------------------------------------------------------------------- make_env's memory refusal
def test_make_env_says_a_memory_error_is_envs_that_do_not_fit(monkeypatch):
    def raise_memory(*a, **k):
        raise MemoryError()

    monkeypatch.setattr(envs, "_make_env", raise_memory)
    with pytest.raises(ConfigError) as e:
        make_env("CartPole-v1", 7)
    assert str(e.value) == "make_env(num_envs=7): the envs' state does not fit in the memory of device='cpu'; use fewer envs"


def test_make_env_passes_a_runtime_error_that_is_not_memory_through(monkeypatch):
    def raise_other(*a, **k):
        raise RuntimeError("boom in a build")

    monkeypatch.setattr(envs, "_make_env", raise_other)
    with pytest.raises(RuntimeError) as e:
        make_env("CartPole-v1", 7)
    assert type(e.value) is RuntimeError and str(e.value) == "boom in a build"


@pytest.mark.parametrize("message, size", [
    ("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: you tried to allocate "
     "2147483648 bytes.", "2 GiB"),
    ("CUDA out of memory. Tried to allocate 7.45 TiB (GPU 0; 79.10 GiB total capacity)", "7.45 TiB"),
])
def test_the_memory_refusal_names_the_buffer_torch_asked_for(message, size):
    assert memory_refusal(RuntimeError(message), 10**9, "cuda") == (
        f"make_env(num_envs=1000000000): the envs' state does not fit in the memory of device='cuda' "
        f"(one buffer alone is {size}); use fewer envs")


# ------------------------------------------------------------------------------- arrays where strings go
@pytest.mark.parametrize("kw, start", [(dict(vector=np.full((12, 12), "sync")), "make_env(vector=array([['sync', "),
                                       (dict(backend=np.full((12, 12), "auto")), "unknown backend array([['auto', ")])
def test_make_env_refuses_a_2d_array_of_strings_in_one_line(kw, start):
    with pytest.raises((ConfigError, EnvError)) as e:
        make_env("CartPole-v1", 2, **kw)
    line = str(e.value)
    assert "\n" not in line and line.startswith(start)


# ------------------------------------------------------------------------------- Policy.act's pixels
def test_act_says_a_dict_image_key_of_text_is_not_observations():
    space = gym.spaces.Dict({"cam": IMAGE, "pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)})
    policy = _policy(space, env_id="pixenv:Dict")
    with pytest.raises(ValueError) as e:
        policy.act({"cam": np.zeros((2, 64, 64, 3), "<U1"), "pos": np.zeros((2, 2), np.float32)})
    line = str(e.value)
    assert "\n" not in line and line.startswith("Policy.act: obs = ")
    assert ": not observations of pixenv:Dict (obs['cam'] holds <U1 values); give one observation of shape " in line


@pytest.mark.parametrize("as_tensor", [False, True])
def test_act_names_the_non_finite_pixel_not_the_first_one(as_tensor):
    pixels = np.full((2, 64, 64, 3), 7.0, np.float32)
    pixels[1, 63, 63, 2] = -np.inf
    pixels = torch.from_numpy(pixels) if as_tensor else pixels
    with pytest.raises(ValueError) as e:
        _policy(IMAGE, env_id="pixenv:Img").act(pixels)
    assert str(e.value).startswith("Policy.act: obs holds non-finite pixels (-inf) where pixenv:Img's observations ")


def test_make_env_with_device_none_is_one_line_naming_what_device_takes():
    # it passed the check and reached resolve_device, which gave torch's 5-line TypeError
    from proxima.config import ConfigError
    from proxima.envs import make_env

    with pytest.raises(ConfigError) as e:
        make_env("CartPole-v1", 2, device=None)
    assert str(e.value) == ("make_env(device=None): must be a string (cpu, cuda, cuda:1, auto) or a torch.device")
