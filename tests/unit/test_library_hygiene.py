"""Proxima as a library in one long-lived process (a notebook, a sweep script): train(), Trainer and
load_policy leave the caller's RNG streams, config, thread count, flush-denormal mode and inductor
settings as they found them, and free what a run opened, on success and on failure."""

from __future__ import annotations

import gc
import os
import random

import gymnasium as gym
import numpy as np
import pytest
import torch

from proxima.checkpoint import load_policy
from proxima.config import ConfigError
from proxima.envs import EnvError
from proxima.trainer import Trainer, flush_denormal_on, train


def _seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _draws() -> tuple:
    return random.random(), float(np.random.rand()), float(torch.rand(1))


@pytest.fixture
def two_threads():
    """The caller runs torch with two intra-op threads (the suite's default is one): put back after."""
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(1)


@pytest.fixture
def ftz_caller():
    """The caller turned flush-to-zero on itself (conftest turns it off after each test)."""
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU has no flush-to-zero mode")


class ResetRaises(gym.Env):
    """An env whose reset raises, after the vector env around it is built; records which were closed."""

    observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)
    made: list = []

    def __init__(self):
        self.closed = False
        self.made.append(self)

    def reset(self, seed=None, options=None):
        raise ValueError("bad reset")

    def close(self):
        self.closed = True


class CtrlC(gym.Env):
    """An env whose step raises KeyboardInterrupt, as a notebook's stop button does inside env code."""

    observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        raise KeyboardInterrupt


def _register(monkeypatch, env_id: str, cls) -> str:
    monkeypatch.setitem(gym.registry, env_id, gym.envs.registration.EnvSpec(env_id, entry_point=cls))
    return env_id


# --- 1. the caller's RNG streams ---------------------------------------------------------------
def test_train_leaves_the_callers_random_numpy_and_torch_streams_where_they_were(small_config, tmp_path):
    _seed_all(0)
    expected = _draws()
    _seed_all(0)
    _, agent = train(small_config(run_dir=str(tmp_path / "a")), quiet=True)
    assert _draws() == expected  # a random search draws its next point, not the same one again
    # and the run draws what it draws whatever the caller's streams hold
    _, other = train(small_config(run_dir=str(tmp_path / "b")), quiet=True)
    for p, q in zip(agent.parameters(), other.parameters()):
        assert torch.equal(p, q)


# --- 2. the caller's config ---------------------------------------------------------------------
def test_train_leaves_the_callers_config_as_given(small_config, tmp_path):
    import yaml

    cfg = small_config(run_dir=str(tmp_path / "run"))
    before = cfg.to_dict()
    run_dir, _ = train(cfg, quiet=True)
    assert cfg.to_dict() == before and cfg.encoder == "auto"  # the next env of a sweep resolves its own encoder
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["encoder"] == "mlp"  # the run records the one it used


# --- 3. a Trainer whose __init__ fails ----------------------------------------------------------
def test_a_device_flag_error_leaves_flush_denormal_as_the_caller_had_it(small_config, tmp_path):
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU has no flush-to-zero mode")
    torch.set_flush_denormal(False)
    with pytest.raises(ConfigError, match="^amp fp16 needs a CUDA device"):  # from Python: the field, not the flag
        Trainer(small_config(amp="fp16", run_dir=str(tmp_path)))
    assert not flush_denormal_on()


def test_a_trainer_whose_env_fails_to_reset_closes_it_and_puts_settings_back(small_config, tmp_path, monkeypatch, two_threads):
    env_id = _register(monkeypatch, "HygieneResetRaises-v0", ResetRaises)
    monkeypatch.setattr(ResetRaises, "made", [])
    with pytest.raises(EnvError, match="bad reset"):
        Trainer(small_config(env_id=env_id, backend="gymnasium", vector="sync", num_envs=2, run_dir=str(tmp_path)))
    assert ResetRaises.made and all(env.closed for env in ResetRaises.made)  # an async env's workers end here, not at the next gc
    assert torch.get_num_threads() == 2 and not flush_denormal_on()


# --- 4. process-wide settings put back by close() ----------------------------------------------
def test_train_puts_back_the_callers_thread_count_and_flush_denormal(small_config, tmp_path, two_threads, ftz_caller):
    train(small_config(run_dir=str(tmp_path), threads=1), quiet=True)
    assert torch.get_num_threads() == 2
    assert flush_denormal_on()  # the caller's own choice, not switched off by the run's close()


def test_a_run_without_flush_denormal_computes_without_it_whatever_the_caller_set(small_config, tmp_path, ftz_caller):
    trainer = Trainer(small_config(run_dir=str(tmp_path), flush_denormal=False))
    try:
        assert not flush_denormal_on()  # as --no-flush-denormal says (and as its side thread computes)
    finally:
        trainer.close()
    assert flush_denormal_on()


# --- 5. load_policy and the caller's RNG --------------------------------------------------------
def test_load_policy_draws_nothing_from_the_callers_torch_rng(small_config, tmp_path):
    run_dir, _ = train(small_config(run_dir=str(tmp_path)), quiet=True)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    load_policy(run_dir)
    assert torch.equal(torch.rand(3), expected)


# --- 6. KeyboardInterrupt from the env's code during the first iteration -----------------------
def test_keyboard_interrupt_in_the_first_iteration_leaves_no_run_directory(small_config, tmp_path, monkeypatch):
    env_id = _register(monkeypatch, "HygieneCtrlC-v0", CtrlC)
    cfg = small_config(env_id=env_id, backend="gymnasium", vector="sync", num_envs=2, run_dir=str(tmp_path / "run"))
    with pytest.raises(KeyboardInterrupt) as info:
        train(cfg, quiet=True)
    assert type(info.value) is KeyboardInterrupt  # the env's own, as it came: not made a run's stop
    assert not (tmp_path / "run").exists()
    with pytest.raises(KeyboardInterrupt) as info:  # the same call runs again, not "it holds another run"
        train(cfg, quiet=True)
    assert type(info.value) is KeyboardInterrupt


# --- 7. an async env's file descriptors ---------------------------------------------------------
@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_async_runs_free_their_pipes_without_the_cycle_collector(small_config, tmp_path):
    def run(i: int) -> None:
        train(small_config(backend="gymnasium", vector="async", num_envs=2, num_steps=16, total_timesteps=32,
                           run_dir=str(tmp_path / str(i))), quiet=True)

    gc.disable()  # a sweep's runs come faster than the collector: 8 runs ran out of 64 descriptors
    try:
        run(0)  # the first one may open what the process keeps (multiprocessing's heap)
        before = len(os.listdir("/proc/self/fd"))
        for i in (1, 2, 3):
            run(i)
        assert len(os.listdir("/proc/self/fd")) == before
    finally:
        gc.enable()


# --- 8. --compile's inductor switch -------------------------------------------------------------
def test_compile_leaves_inductors_global_fallback_random_alone(small_config, tmp_path):
    """--deterministic's fallback_random goes into each torch.compile call's options (accel.compile_options):
    the global switch stays the caller's, during the trainer's life and after (review 31: a global switch
    let a later compiled trainer reuse an earlier one's kernels, which sampled otherwise)."""
    import torch._inductor.config as inductor_config

    for caller in (False, True):
        with inductor_config.patch(fallback_random=caller):  # monkeypatch cannot undo a config module's
            trainer = Trainer(small_config(compile=True, deterministic=not caller, run_dir=str(tmp_path / str(caller))))
            try:
                assert inductor_config.fallback_random is caller
            finally:
                trainer.close()
            assert inductor_config.fallback_random is caller
