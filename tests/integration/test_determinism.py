"""Same seed -> bit-identical parameters on CPU; save -> load -> identical actions and optimizer state."""

from __future__ import annotations

import pytest
import torch

import proxima
from proxima.checkpoint import load_checkpoint
from proxima.trainer import Trainer


def trained(small_config, iterations: int = 2, **overrides) -> Trainer:
    trainer = Trainer(small_config(total_timesteps=128 * iterations, **overrides))
    try:
        while trainer.iteration < trainer.num_iterations:
            trainer.train_iteration()
    finally:
        trainer.close()
    return trainer


def params(trainer: Trainer) -> dict:
    return {k: v.detach().clone() for k, v in trainer.agent.state_dict().items()}


def assert_same(a, b, path="state"):
    """Deep, exact equality of nested dicts/lists of tensors and plain values."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        a_t, b_t = torch.as_tensor(a), torch.as_tensor(b)
        assert a_t.shape == b_t.shape and torch.equal(a_t.to(b_t.dtype), b_t), path
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{path}: keys {sorted(map(str, a))} vs {sorted(map(str, b))}"
        for k in a:
            assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


@pytest.mark.parametrize("backend", ["native", "gymnasium"])
def test_same_seed_gives_bit_identical_parameters(small_config, backend):
    first = params(trained(small_config, backend=backend, seed=3))
    second = params(trained(small_config, backend=backend, seed=3))
    assert first.keys() == second.keys()
    for name in first:
        assert torch.equal(first[name], second[name]), name


def test_different_seeds_give_different_parameters(small_config):
    a = params(trained(small_config, seed=3))
    b = params(trained(small_config, seed=4))
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_training_changes_the_parameters(small_config):
    fresh = Trainer(small_config(seed=3))
    fresh.close()
    untrained = params(fresh)
    after = params(trained(small_config, seed=3))
    assert not torch.equal(untrained["actor.0.weight"], after["actor.0.weight"])
    assert not torch.equal(untrained["critic.0.weight"], after["critic.0.weight"])


def test_save_then_load_gives_identical_actions_and_optimizer_state(small_config, tmp_path):
    trainer = trained(small_config, seed=5)
    trainer.run_dir = tmp_path / "run"
    path = trainer.save()
    assert path.is_file() and path.parent == tmp_path / "run" / "checkpoints"

    policy = proxima.load(tmp_path / "run")  # a run directory resolves to its latest checkpoint
    assert policy.env_id == "CartPole-v1"
    obs = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = trainer.agent.act(obs)
    assert torch.equal(policy.act(obs), expected)
    assert (policy.act(obs.numpy()) == expected.numpy()).all()  # numpy in, numpy out
    torch.manual_seed(11)
    sampled = policy.act(obs, deterministic=False)
    torch.manual_seed(11)
    with torch.no_grad():
        assert torch.equal(sampled, trainer.agent.act(obs, deterministic=False))
    for name, tensor in trainer.agent.state_dict().items():
        assert torch.equal(policy.agent.state_dict()[name], tensor), name

    state = load_checkpoint(path)
    assert state["global_step"] == trainer.global_step == 256
    assert state["optimizer"]["state"], "Adam moments missing from the checkpoint"
    assert_same(state["optimizer"], trainer.optimizer.state_dict(), "optimizer")
