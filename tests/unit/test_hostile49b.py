"""Hostile inputs, round 49b: make_env's step() actions (grad, unreadable, complex, sparse), make_env's own
arguments (a count past memory, arrays where strings or a seed go), Policy.act's pixels (text, None, dates, NaN,
complex, bool) and check_switch's odd values (masked, meta, nested, quantized, a raising repr): each refused in one
line that says what to give, and a refused or failed step leaves the env usable."""
from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima.config import ConfigError, check_switch
from proxima.envs import EnvError, make_env
from tests.unit.test_pixels49 import BOARD, _policy

IMAGE = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)


def _cartpole():
    env = make_env("CartPole-v1", 2, seed=1)
    env.reset()
    return env


# ------------------------------------------------------------------------------- 1. an action that requires grad
@pytest.mark.parametrize("env_id, action", [("CartPole-v1", torch.tensor([1.0, 0.0], requires_grad=True)),
                                            ("Pendulum-v1", torch.zeros(2, 1, requires_grad=True))])
def test_an_action_that_requires_grad_is_refused_and_the_env_steps_on(env_id, action):
    env = make_env(env_id, 2, seed=1)
    env.reset()
    with pytest.raises(EnvError) as e:
        env.step(action)
    line = str(e.value)
    assert "\n" not in line and f"env '{env_id}': step() was given tensor(" in line
    assert "a tensor that requires grad (detach() it, or act under torch.no_grad())" in line
    obs, reward, *_ = env.step(action.detach())
    assert obs.shape[0] == 2 and not reward.requires_grad and torch.isfinite(reward).all()


def test_a_step_that_fails_inside_leaves_the_env_usable():
    """With the action check off (as in training) a grad action failed in step's in-place autoreset and left
    the grad tensor as the env's state: every later step raised the same autograd error."""
    env = _cartpole()
    env.check_actions = False
    with pytest.raises(RuntimeError):
        env.step(torch.tensor([1.0, 0.0], requires_grad=True))
    obs, reward, *_ = env.step(torch.tensor([1, 0]))
    assert tuple(obs.shape) == (2, 4) and reward.tolist() == [1.0, 1.0] and not obs.requires_grad


# ------------------------------------------------------------------------------- 2. actions torch cannot read
@pytest.mark.parametrize("action, why", [
    (np.array([1, 0], dtype=object), "something torch cannot read as numbers"),
    (np.array(["1", "0"]), "something torch cannot read as numbers"),
    ([2**70, 0], "something torch cannot read as numbers"),
    ({"a": 1}, "something torch cannot read as numbers"),
    (torch.tensor([1, 0]).to_sparse(), "a sparse_coo tensor"),
    (np.array([1 + 5j, 0]), "complex128 numbers"),
])
def test_an_action_that_holds_no_numbers_is_refused_in_one_line(action, why):
    env = _cartpole()
    with pytest.raises(EnvError) as e:
        env.step(action)
    line = str(e.value)
    assert "\n" not in line and line.startswith("env 'CartPole-v1': step() was given ")
    assert line.endswith(f", {why}; Discrete(2) takes a tensor of numbers, one action for each of its 2 envs")
    assert env.step(torch.tensor([1, 0]))[1].tolist() == [1.0, 1.0]


# ------------------------------------------------------------------------------- 3. make_env's arguments
def test_make_env_says_the_envs_do_not_fit_in_memory():
    with pytest.raises(ConfigError) as e:
        make_env("CartPole-v1", 10**12)
    assert str(e.value).startswith("make_env(num_envs=1000000000000): the envs' state does not fit in the memory of "
                                   "device='cpu' (one buffer alone is ")
    assert str(e.value).endswith(" GiB); use fewer envs")


@pytest.mark.parametrize("kw, line", [
    (dict(vector=np.array(["sync", "async"])),
     "make_env(vector=array(['sync', 'async'], dtype='<U5')): must be one of 'sync', 'async'"),
    (dict(backend=np.array(["auto", "native"])),
     "unknown backend array(['auto', 'native'], dtype='<U6'): use auto, native, gymnasium, envpool"),
    (dict(device=np.array(["cpu"])),
     "make_env(device=array(['cpu'], dtype='<U3')): must be a string (cpu, cuda, cuda:1, auto) or a torch.device"),
    (dict(seed=torch.tensor([3])), "make_env(seed=tensor([3])): must be None or an integer from 0 to 2**64 - 1"),
    (dict(seed=np.array([3])), "make_env(seed=array([3])): must be None or an integer from 0 to 2**64 - 1"),
])
def test_make_env_refuses_arrays_where_a_string_or_seed_goes(kw, line):
    with pytest.raises((ConfigError, EnvError)) as e:
        make_env("CartPole-v1", 2, **kw)
    assert str(e.value) == line


def test_make_env_takes_a_seed_of_a_0_d_tensor_or_numpy_integer_as_the_int():
    a, b = make_env("CartPole-v1", 2, seed=torch.tensor(3)), make_env("CartPole-v1", 2, seed=np.int64(3))
    assert torch.equal(a.reset(), b.reset())


# ------------------------------------------------------------------------------- 4. Policy.act's pixels
def _image_policy():
    return _policy(IMAGE, env_id="pixenv:Img")


@pytest.mark.parametrize("dtype", ["<U1", object, "datetime64[s]"])
def test_act_says_pixels_of_text_none_or_dates_are_not_observations(dtype):
    pixels = np.zeros((2, 64, 64, 3), np.uint8).astype(dtype) if dtype is not object else np.full((2, 64, 64, 3), None)
    with pytest.raises(ValueError) as e:
        _image_policy().act(pixels)
    line = str(e.value)
    assert "\n" not in line and line.startswith("Policy.act: obs = array(")
    assert line.endswith(f": not observations of pixenv:Img (obs holds {np.dtype(dtype)} values); give one observation "
                         "of shape (64, 64, 3), or a batch of shape (B, 64, 64, 3) (an array or tensor)")


@pytest.mark.parametrize("pixels", [np.full((2, 64, 64, 3), np.nan), torch.full((2, 64, 64, 3), float("inf"))])
def test_act_calls_nan_pixels_non_finite_not_floats_to_cast(pixels):
    with pytest.raises(ValueError) as e:
        _image_policy().act(pixels)
    bad = "nan" if isinstance(pixels, np.ndarray) else "inf"
    assert str(e.value) == (f"Policy.act: obs holds non-finite pixels ({bad}) where pixenv:Img's observations are uint8 "
                            "images (64, 64, 3); pass finite pixels 0..255 (check the camera or preprocessing that made them)")


@pytest.mark.parametrize("pixels", [np.full((2, 64, 64, 3), 3 + 1j, np.complex64),
                                    torch.full((2, 64, 64, 3), 3 + 1j, dtype=torch.complex64)])
def test_act_refuses_complex_pixels(pixels):
    with pytest.raises(ValueError) as e:
        _image_policy().act(pixels)
    assert str(e.value) == ("Policy.act: obs holds complex64 pixels where pixenv:Img's observations are uint8 images "
                            "(64, 64, 3) (the cast drops the imaginary part: 3+1j would be 3); pass real pixels 0..255")


@pytest.mark.parametrize("as_tensor", [False, True])
def test_act_refuses_bool_pixels_for_a_0_255_image_and_takes_them_for_a_0_1_board(as_tensor):
    mask = np.ones((2, 64, 64, 3), bool)
    mask = torch.from_numpy(mask) if as_tensor else mask
    with pytest.raises(ValueError) as e:
        _image_policy().act(mask)
    assert str(e.value) == ("Policy.act: obs holds bool pixels where pixenv:Img's observations are uint8 images (64, 64, 3) "
                            "0..255 (True would be read as 1 of 255, near black); pass uint8 pixels 0..255 "
                            "(obs * 255 as uint8 for a mask)")
    board = _policy(BOARD)
    assert board.act(mask).tolist() == board.act(np.ones((2, 64, 64, 3), np.uint8)).tolist()


# ------------------------------------------------------------------------------- 5. check_switch
class _RaisingRepr:
    def __repr__(self):
        raise RuntimeError("repr failed")


def _odd_switches():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested and quantized tensors' prototype/deprecation notes
        return [np.ma.masked_array([True], mask=[True]), _RaisingRepr(), torch.tensor(True, device="meta"),
                torch.nested.nested_tensor([torch.tensor([1.0])]),
                torch.quantize_per_tensor(torch.tensor([1.0]), 0.1, 10, torch.quint8)]


@pytest.mark.parametrize("index", range(5))
def test_check_switch_refuses_masked_meta_nested_quantized_values_in_one_line(index):
    value = _odd_switches()[index]
    with pytest.raises(ConfigError) as e:
        check_switch(value, "train", "quiet")
    line = str(e.value)
    assert "\n" not in line and line.startswith("train: quiet=") and line.endswith(": must be True or False")
    if index == 1:
        assert line == "train: quiet=<_RaisingRepr>: must be True or False"


def test_check_switch_takes_an_unmasked_one_element_array():
    assert check_switch(np.ma.masked_array([True], mask=[False]), "train", "quiet") is True
