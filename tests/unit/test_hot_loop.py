"""The hot loop stays on the device: rollout, GAE and update run under ``forbid_host_sync()`` (on
CUDA with deterministic algorithms on, as a Trainer runs them by default, and off), a deliberate
host read inside the guard raises, and the rollout is written in place."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from proxima import ppo, tanh_cpu
from proxima.agent import Agent, action_dtype, action_shape
from proxima.config import PPOConfig
from proxima.debug import HostSyncError, forbid_host_sync
from proxima.envs import NATIVE_ENVS, make_env
from proxima.rollout import Rollout

ENV_IDS = [e for e in ("CartPole-v1", "Pendulum-v1") if e in NATIVE_ENVS]
CUDA = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]
#: what a CUDA sync looks like to each mode of the guard
SYNC_ERROR = {"cpu": HostSyncError, "cuda": RuntimeError}
#: (device, deterministic): a CUDA Trainer turns torch.use_deterministic_algorithms on (the default
#: cfg.deterministic) or off, process-wide, and a deterministic kernel may sync where the default one does not
SYNC_CASES = [
    pytest.param("cpu", None, id="cpu"),
    pytest.param("cuda", True, marks=CUDA, id="cuda-deterministic"),
    pytest.param("cuda", False, marks=CUDA, id="cuda-nondeterministic"),
]


@contextlib.contextmanager
def algorithms_as_the_trainer_sets_them(deterministic):
    """torch.use_deterministic_algorithms(deterministic, warn_only=True) as Trainer.__init__ calls it
    on CUDA, and the setting before it put back after; ``None``: left as it is (a CPU Trainer)."""
    if deterministic is None:
        yield
        return
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def build(env_id: str, device: str, num_envs: int = 8, num_steps: int = 16):
    """env, agent, optimizer, rollout, first obs and config of a small native-env PPO run."""
    torch.manual_seed(0)
    cfg = PPOConfig(env_id=env_id, num_envs=num_envs, num_steps=num_steps, num_minibatches=4, update_epochs=2,
                    target_kl=None, device=device)
    env = make_env(env_id, num_envs, device=device, backend="native", seed=0)
    env.check_actions = False  # as the Trainer sets it: the policy's actions, no host sync a step to check them
    agent = Agent(env.single_observation_space, env.single_action_space).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.lr, eps=1e-5)
    act_space = env.single_action_space
    rollout = Rollout(num_steps, num_envs, env.obs_shape, action_shape(act_space), action_dtype(act_space), device)
    return env, agent, optimizer, rollout, env.reset(seed=0), cfg


def one_iteration(env, agent, optimizer, rollout, next_obs, cfg) -> tuple:
    """What Trainer.train_iteration runs between its once-per-iteration checks."""
    next_obs = ppo.collect_rollout(env, agent.policy_step, rollout, next_obs)
    with torch.no_grad():
        final = rollout.final_obs.reshape(-1, *rollout.final_obs.shape[2:])
        next_values = agent.get_value(final).reshape(rollout.num_steps, rollout.num_envs)
    advantages, returns = ppo.compute_gae(rollout.rewards, rollout.values, next_values, rollout.terminated,
                                          rollout.dones, cfg.gamma, cfg.gae_lambda)
    batch = rollout.flatten(advantages, returns)
    metrics = ppo.update(agent, optimizer, batch, cfg)
    metrics["explained_variance"] = ppo.explained_variance(batch["values"], batch["returns"])
    return next_obs, metrics


@pytest.mark.parametrize("device, deterministic", SYNC_CASES)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_rollout_gae_and_update_make_no_host_sync(env_id, device, deterministic):
    with algorithms_as_the_trainer_sets_them(deterministic):
        env, agent, optimizer, rollout, next_obs, cfg = build(env_id, device)
        one_iteration(env, agent, optimizer, rollout, next_obs, cfg)  # warm-up: lazy init outside the guard
        with forbid_host_sync(device):
            next_obs, metrics = one_iteration(env, agent, optimizer, rollout, next_obs, cfg)
    # read once, after the block, as the trainer does
    assert not bool(metrics["nonfinite"])
    assert all(bool(torch.isfinite(v).all()) for k, v in metrics.items() if k != "nonfinite")
    assert next_obs.shape == (8, *env.obs_shape)


def test_the_cuda_cases_determinism_is_the_trainer_s_default_and_is_put_back():
    assert PPOConfig().deterministic  # what "cuda-deterministic" stands for: every CUDA Trainer by default
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    for deterministic in (True, False):
        with algorithms_as_the_trainer_sets_them(deterministic):
            assert torch.are_deterministic_algorithms_enabled() is deterministic
            assert torch.is_deterministic_algorithms_warn_only_enabled()
        assert (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()) == before


@pytest.mark.parametrize("path", ["blocks", "autograd"])
def test_the_cpu_mlp_kernel_paths_make_no_host_sync(monkeypatch, path):
    # 5,000 envs x 4 steps: acting and V(final obs) take mlp_cpu's row-block kernel (more than one
    # 4,096-row block); minibatches of 5,000 rows go through autograd and that kernel, of 2,500
    # rows (8 minibatches) through grad_cpu's block path; all must stay as sync-free as the modules
    from proxima import grad_cpu, mlp_cpu

    calls = {"grad": 0, "no_grad": 0}
    apply, blocks, grads = mlp_cpu._MLPFunction.apply, mlp_cpu._forward_blocks, grad_cpu.BlockGradients.__call__

    def counted_apply(*a):
        calls["grad"] += 1
        return apply(*a)

    def counted_grads(self, mb):
        calls["grad"] += 2  # both networks
        return grads(self, mb)

    def counted_blocks(*a, keep_hidden):
        calls["no_grad"] += not keep_hidden
        return blocks(*a, keep_hidden=keep_hidden)

    monkeypatch.setattr(mlp_cpu._MLPFunction, "apply", counted_apply)
    monkeypatch.setattr(grad_cpu.BlockGradients, "__call__", counted_grads)
    monkeypatch.setattr(mlp_cpu, "_forward_blocks", counted_blocks)
    env, agent, optimizer, rollout, next_obs, cfg = build("CartPole-v1", "cpu", num_envs=5000, num_steps=4)
    assert 5000 > mlp_cpu.block_rows([64, 64, 2])
    cfg.num_minibatches = 8 if path == "blocks" else 4
    one_iteration(env, agent, optimizer, rollout, next_obs, cfg)
    with forbid_host_sync("cpu"):
        next_obs, metrics = one_iteration(env, agent, optimizer, rollout, next_obs, cfg)
    assert not bool(metrics["nonfinite"])
    # two iterations, each: 2 networks x 4 acting steps + the critic on the final obs (no grad),
    # and 2 networks x 2 epochs x the minibatches (grad)
    assert calls == {"grad": 2 * (2 * 2 * cfg.num_minibatches), "no_grad": 2 * (2 * 4 + 1)}


@pytest.mark.parametrize("device", DEVICES)
def test_a_deliberate_item_inside_the_guard_raises(device):
    x = torch.ones(3, device=device)

    def syncing_metric(t: torch.Tensor) -> float:
        return t.sum().item()

    with pytest.raises(SYNC_ERROR[device]):
        with forbid_host_sync(device):
            syncing_metric(x)
    assert syncing_metric(x) == 3.0  # and the guard is gone after the block


@pytest.mark.parametrize("read", [
    lambda t: t.item(),
    lambda t: bool(t),
    lambda t: float(t),
    lambda t: int(t),
    lambda t: [10, 20, 30][t.long()],  # __index__
    lambda t: t.tolist(),
    lambda t: t.numpy(),
    lambda t: np.asarray(t),
    lambda t: t.cpu(),
    lambda t: t.to("cpu"),
    lambda t: t.to(device="cpu"),
    lambda t: f"{t:.3f}",
    lambda t: complex(t),
    lambda t: repr(t),
    lambda t: str(t),
    lambda t: t.equal(t),
    lambda t: torch.equal(t, t),
    lambda t: t.allclose(t),
    lambda t: torch.allclose(t, t),
    lambda t: t.is_nonzero(),
    lambda t: torch.is_nonzero(t),
], ids=["item", "bool", "float", "int", "index", "tolist", "numpy", "np.asarray", "cpu", "to-cpu", "to-device-kw", "format",
        "complex", "repr", "str", "equal", "torch.equal", "allclose", "torch.allclose", "is_nonzero", "torch.is_nonzero"])
def test_every_python_read_of_a_value_raises_on_cpu(read):
    t = torch.tensor(1.0)
    with forbid_host_sync("cpu"):
        with pytest.raises(HostSyncError, match="forbid_host_sync"):
            read(t)


def test_device_agnostic_ops_pass_and_methods_are_restored_on_cpu():
    originals = {name: getattr(torch.Tensor, name) for name in ("item", "__bool__", "__index__", "__repr__", "cpu", "to", "numpy", "equal")}
    functions = {name: getattr(torch, name) for name in ("equal", "allclose", "is_nonzero")}
    t = torch.arange(4.0)
    with forbid_host_sync("cpu"):
        assert t.to(torch.float64).dtype == torch.float64  # a dtype change reads nothing
        assert t.to(t).shape == (4,)                        # nor does matching another tensor
        torch.where(t > 1, t, torch.zeros_like(t)).sum_to_size(1)
        # tanh_cpu's numpy view of a CPU tensor's memory (no value read) is let through; the same
        # t.numpy() from any other file raises (test_every_python_read_of_a_value_raises_on_cpu)
        y = tanh_cpu.numpy_tanh(t)
    assert torch.allclose(y, torch.tanh(t), rtol=1e-6, atol=0)
    for name, method in originals.items():
        assert getattr(torch.Tensor, name) is method
    assert {name: getattr(torch, name) for name in functions} == functions  # the functions are back too
    assert t.sum().item() == 6.0


@pytest.mark.parametrize("device", DEVICES)
def test_rollout_storage_is_preallocated_and_written_in_place(device):
    env, agent, _, rollout, next_obs, _ = build("CartPole-v1", device)
    fields = ("obs", "final_obs", "actions", "logprobs", "values", "rewards", "raw_rewards", "terminated", "dones",
              "ep_return_sum", "ep_length_sum", "ep_count")
    before = {name: getattr(rollout, name).data_ptr() for name in fields}
    for _ in range(2):
        next_obs = ppo.collect_rollout(env, agent.policy_step, rollout, next_obs)
    after = {name: getattr(rollout, name).data_ptr() for name in fields}
    assert after == before
    assert bool(rollout.dones.any())  # 2 x 16 steps of a random CartPole policy end some episodes


def test_the_guard_sees_the_target_kl_sync_of_update():
    # update() reads approx_kl on the host once per minibatch when target_kl is set: the guard must say so
    env, agent, optimizer, rollout, next_obs, cfg = build("CartPole-v1", "cpu")
    cfg.target_kl = 1e9
    one_iteration(env, agent, optimizer, rollout, next_obs, cfg)
    with pytest.raises(HostSyncError, match="in update"):
        with forbid_host_sync("cpu"):
            one_iteration(env, agent, optimizer, rollout, next_obs, cfg)
