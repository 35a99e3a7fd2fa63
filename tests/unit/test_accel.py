"""--compile, --cudagraphs and --amp: compiled == eager, no recompiles, portable checkpoints, bf16 learns."""

from __future__ import annotations

import pytest
import torch

from proxima import checkpoint as ckpt
from proxima.cli import main
from proxima.config import ConfigError, PPOConfig
from proxima.trainer import Trainer


def _cfg(tmp_path, **kw) -> PPOConfig:
    values = dict(env_id="CartPole-v1", num_envs=8, num_steps=16, total_timesteps=8 * 16 * 4, update_epochs=2,
                  num_minibatches=2, progress=False, checkpoint_every=0, eval_episodes=0, seed=7, run_dir=str(tmp_path))
    values.update(kw)
    return PPOConfig(**values)


def _params(trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.agent.parameters()]


@pytest.fixture(scope="module")
def compiled_run(tmp_path_factory):
    """One compiled run (compiling takes a while on a small CPU), shared by the tests below."""
    import torch._dynamo

    tmp = tmp_path_factory.mktemp("compiled")
    torch._dynamo.reset()
    old = torch._dynamo.config.error_on_recompile
    torch._dynamo.config.error_on_recompile = True  # a recompile between iterations fails the run
    try:
        trainer = Trainer(_cfg(tmp, compile=True))
        trainer.run()
        state = trainer.state_dict()
        trainer.close()
    finally:
        torch._dynamo.config.error_on_recompile = old
    return tmp, state


def test_compiled_training_equals_eager_without_recompiling(compiled_run, tmp_path):
    _, compiled_state = compiled_run
    eager = Trainer(_cfg(tmp_path, compile=False))
    eager.run()
    assert compiled_state["iteration"] == eager.iteration == 4
    for name, value in eager.agent.state_dict().items():
        torch.testing.assert_close(compiled_state["agent"][name], value, rtol=1e-5, atol=1e-5, msg=name)


def test_compiled_checkpoints_have_plain_names_and_load_both_ways(compiled_run, tmp_path):
    run_dir, compiled_state = compiled_run
    assert not any("_orig_mod" in k for k in compiled_state["agent"])
    # compiled -> eager: resume the compiled run's checkpoint without --compile
    state = ckpt.load_checkpoint(run_dir)
    state["config"]["compile"] = False
    eager = Trainer(PPOConfig(**state["config"]), run_dir=tmp_path, resume_state=state)
    for name, value in eager.agent.state_dict().items():
        assert torch.equal(value, compiled_state["agent"][name])
    # eager -> compiled: an eager checkpoint restores into a compiled trainer
    eager_state = eager.state_dict()
    eager_state["config"]["compile"] = True
    compiled = Trainer(PPOConfig(**eager_state["config"]), run_dir=tmp_path / "c", resume_state=eager_state)
    for name, value in compiled.agent.state_dict().items():
        assert torch.equal(value, eager_state["agent"][name])


def test_bf16_autocast_still_solves_probe_envs(probe_envs, tmp_path):
    # Probe 4: one step, reward +1 for action 1 and -1 for action 0 -> the policy must pick 1
    cfg = _cfg(tmp_path, env_id="Probe4-v0", amp="bf16", num_envs=16, num_steps=8, total_timesteps=16 * 8 * 40,
               lr=1e-2, update_epochs=4, num_minibatches=2)
    trainer = Trainer(cfg)
    trainer.run()
    obs = torch.zeros(64, 1)
    with torch.no_grad():
        actions = trainer.agent.act(obs)
        values = trainer.agent.get_value(obs)
    assert (actions == 1).float().mean() == 1.0
    assert values.mean().item() == pytest.approx(1.0, abs=0.25)


@pytest.mark.parametrize("flags, needle", [
    (["--cudagraphs"], "--cudagraphs needs a CUDA device"),
    (["--amp", "fp16"], "--amp fp16 needs a CUDA device"),
])
def test_cuda_only_switches_are_refused_on_cpu_with_one_line(flags, needle, tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available: these switches are allowed")
    code = main(["train", "CartPole-v1", "--total-timesteps", "2048", "--run-dir", str(tmp_path / "run"), "--no-progress", *flags])
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fp16_checkpoint_holds_grad_scaler_state(tmp_path):
    trainer = Trainer(_cfg(tmp_path, amp="fp16", device="cuda"))
    trainer.run()
    state = trainer.state_dict()
    assert state["grad_scaler"] is not None and "scale" in state["grad_scaler"]


def test_unknown_amp_value_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"^PPOConfig\.amp = 'fp8': must be one of none, bf16, fp16"):  # from Python
        Trainer(_cfg(tmp_path, amp="fp8"))
