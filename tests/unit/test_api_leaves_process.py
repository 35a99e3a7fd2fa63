"""What the Python API leaves in a long-lived process (a notebook, a sweep script) beyond what
test_library_hygiene.py checks: threading.excepthook and the log writers' threads, warning filters,
sys.path, torch's default dtype; and load()'s device names and presets.resolve's base config."""

from __future__ import annotations

import gc
import sys
import threading
import warnings

import pytest
import torch

from proxima import load
from proxima.config import ConfigError, PPOConfig
from proxima.trainer import train


@pytest.fixture
def float64_caller():
    """The caller computes in float64 (a scientific notebook's torch.set_default_dtype)."""
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


def _writer_threads() -> int:
    return sum(type(o).__name__ == "_AsyncWriterThread" for o in gc.get_objects())


# --- threading.excepthook and TensorBoard's writer threads --------------------------------------
def test_runs_leave_threading_excepthook_as_it_was_and_free_their_writer_threads(small_config, tmp_path):
    gc.collect()
    hook, threads = threading.excepthook, _writer_threads()
    for i in range(3):
        train(small_config(run_dir=str(tmp_path / str(i))), quiet=True)
    gc.collect()
    # a hook wrapped once more per run held every finished run's writer thread; ~1,000 runs in, a
    # user's thread error printed a RecursionError instead of its traceback
    assert threading.excepthook is hook
    assert _writer_threads() == threads


# --- warning filters and sys.path ---------------------------------------------------------------
def test_an_async_run_leaves_no_warning_filter_hiding_the_users_own_worker_errors(small_config, tmp_path):
    before = list(warnings.filters)
    train(small_config(backend="gymnasium", vector="async", num_envs=2, num_steps=16, total_timesteps=32,
                       run_dir=str(tmp_path)), quiet=True)
    assert warnings.filters == before
    note = "\x1b[31mERROR: Received the following error from Worker-0 - Shutting it down\x1b[0m"
    with warnings.catch_warnings(record=True) as seen:  # the filters as they are, no "always" on top
        warnings.warn(note, UserWarning)  # what the user's own AsyncVectorEnv says of a worker's error
    assert [str(w.message) for w in seen] == [note]


ENV_MODULE = """
import gymnasium as gym
import numpy as np


class Tiny(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(3, np.float32), 1.0, self.t >= 10, False, {}
"""


def test_a_module_class_env_run_takes_its_folder_off_sys_path_again(small_config, tmp_path, monkeypatch):
    name = "proxima_leaves_path_env"
    (tmp_path / f"{name}.py").write_text(ENV_MODULE)
    monkeypatch.chdir(tmp_path)  # the user's env module, next to where they run their script from
    monkeypatch.setattr(sys, "path", [e for e in sys.path if e not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, name, raising=False)
    before = list(sys.path)
    try:
        train(small_config(env_id=f"{name}:Tiny", backend="gymnasium", vector="sync", num_envs=2, num_steps=16,
                           total_timesteps=32, run_dir=str(tmp_path / "run")), quiet=True)
        assert sys.modules[name].__file__ == str(tmp_path / f"{name}.py")  # found there for the run
    finally:
        sys.modules.pop(name, None)
    # left first on sys.path, the folder's files would shadow the script's later imports
    assert sys.path == before


# --- torch's default dtype ----------------------------------------------------------------------
def test_a_run_and_a_loaded_policy_compute_in_float32_under_a_float64_default(small_config, tmp_path, float64_caller):
    from proxima.envs import make_env

    cfg = dict(norm_obs=True, norm_reward=True, checkpoint_every=1)
    run_dir, agent = train(small_config(**cfg, run_dir=str(tmp_path / "f64")), quiet=True)
    assert torch.get_default_dtype() == torch.float64  # the caller's, back
    policy = load(run_dir)
    assert torch.get_default_dtype() == torch.float64
    obs = make_env("CartPole-v1", num_envs=4, device="cpu").reset(seed=0)
    actions = policy.act(obs)
    torch.set_default_dtype(torch.float32)
    _, same = train(small_config(**cfg, run_dir=str(tmp_path / "f32")), quiet=True)
    for p, q in zip(agent.parameters(), same.parameters()):  # trained as a float32 process trains
        assert p.dtype == torch.float32 and torch.equal(p, q)
    assert torch.equal(actions, load(run_dir).act(obs))


def test_a_trainer_under_a_float64_default_puts_back_the_callers_dtype_and_flush_denormal(small_config, tmp_path,
                                                                                          float64_caller):
    from proxima.trainer import Trainer, flush_denormal_on

    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU has no flush-to-zero mode")
    trainer = Trainer(small_config(run_dir=str(tmp_path)))
    try:
        # held while the trainer works (built, an iteration), not for its life: one never closed keeps nothing
        assert torch.get_default_dtype() == torch.float64
        trainer.train_iteration()
        assert torch.get_default_dtype() == torch.float64
        assert {p.dtype for p in trainer.agent.parameters()} == {torch.float32}
    finally:
        trainer.close()
    assert torch.get_default_dtype() == torch.float64
    assert flush_denormal_on()  # read in float32 (1e-39 is no denormal in float64), so put back as it was


# --- load()'s device ----------------------------------------------------------------------------
def test_load_takes_device_auto_and_names_an_unusable_device_in_one_line(small_config, tmp_path):
    run_dir, _ = train(small_config(checkpoint_every=1, run_dir=str(tmp_path)), quiet=True)
    expected = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert load(run_dir, device="auto").device.type == expected.type
    with pytest.raises(ConfigError, match=r"^device='gpu': not a torch device \(cpu, cuda, cuda:1, auto\)$"):
        load(run_dir, device="gpu")  # in the call's words; not "the recorded spaces and config do not describe an agent"
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match=r"^device='cuda': CUDA is not usable here"):
            load(run_dir, device="cuda")  # not torch's bare AssertionError


# --- presets.resolve ----------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", ["Pendulum-v1", "NoPresetHere-v0"])
def test_presets_resolve_leaves_the_base_config_as_given(env_id):
    from proxima.presets import resolve

    base = PPOConfig(env_id="CartPole-v1", seed=3)
    before = base.to_dict()
    cfg = resolve(env_id, base=base)
    assert cfg is not base and cfg.env_id == env_id and cfg.seed == 3
    assert base.to_dict() == before


def test_a_shared_change_is_made_by_the_first_holder_and_undone_after_the_last():
    from proxima.shared_change import SharedChange

    log = []

    def make():
        log.append("made")
        return lambda: log.append("undone")

    change = SharedChange(make)
    first, second = change.hold(), change.hold()
    assert log == ["made"] and change.held
    first()
    first()  # a release called twice counts once
    assert log == ["made"] and change.held
    second()
    assert log == ["made", "undone"] and not change.held
    change.hold()()
    assert log == ["made", "undone", "made", "undone"]
