"""Review 32, mutation survivors in normalize.py, accel.py, graphs.py and device.py: the normalizer's
epsilon placement and loaded-state clamp, a population member's clip/epsilon/count, the compile cache
variables (empty counts as unset, put back as found), --compile-mode reaching torch.compile with a
fresh options dict per call, capture_error's length cap, --target-kl keeping the update eager, the
env's CUDA generator registered with the rollout's graph, and resolve_device's refusals."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from proxima import accel, device, graphs
from proxima.config import ConfigError, PPOConfig
from proxima.normalize import ObsNormalizer, RunningMeanStd


def _cfg(tmp_path, **kw) -> PPOConfig:
    values = dict(env_id="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 3, update_epochs=2,
                  num_minibatches=2, progress=False, checkpoint_every=0, eval_episodes=0, seed=3, run_dir=str(tmp_path))
    values.update(kw)
    return PPOConfig(**values)


# --- normalize.py ---------------------------------------------------------------------------------
def test_obs_normalizer_adds_epsilon_to_the_variance_inside_the_square_root():
    # an almost constant feature (var 1e-12): epsilon under the root keeps its scale ~1e2, not ~1e6
    norm = ObsNormalizer((1,))
    norm.rms.var.fill_(1e-12)
    norm.rms.count.fill_(1e6)
    out = norm(torch.tensor([[1e-6]]), update=False)
    assert out.item() == pytest.approx(1e-6 / math.sqrt(1e-12 + 1e-8), rel=1e-5)  # ~0.0100, not ~0.99


@pytest.mark.parametrize("var", [0.0, 1e-12])
def test_a_loaded_state_below_the_prior_gives_no_negative_m2_nor_a_shrunken_variance(var):
    # var * count < epsilon (a gymnasium-style or rounded checkpoint): the rows' m2 is 0, never negative
    rms = RunningMeanStd((1,))
    rms.var.fill_(var)
    rms.count.fill_(1e6)
    n, m2 = rms.moments()
    assert m2.item() == 0.0 and n.item() == pytest.approx(1e6 - 1e-4)
    rms.update(torch.zeros(4, 1))
    # zero spread and zero offset add nothing: the variance is the prior's share of the new count
    assert rms.var.item() == pytest.approx(1e-4 / (1e6 + 4), rel=1e-9)


def _population_norm() -> ObsNormalizer:
    norm = ObsNormalizer((3,), clip=2.0, epsilon=1e-3, groups=2)
    gen = torch.Generator().manual_seed(0)
    norm(torch.randn(2 * 5, 3, generator=gen) * torch.tensor([1.0, 0.1, 3.0]), update=True)
    norm(torch.randn(2 * 5, 3, generator=gen) + 1.0, update=True)
    return norm


def test_a_population_member_keeps_the_clip_and_epsilon_of_its_normalizer():
    norm = _population_norm()
    one = norm.member(1)
    assert one.clip == 2.0 and one.epsilon == 1e-3
    x = torch.tensor([[0.3, 5.0, -40.0], [1.0, 1.2, 0.0]])
    both = norm(torch.cat([torch.zeros_like(x), x]), update=False)[2:]
    assert torch.equal(one(x, update=False), both)  # the same numbers as member 1's block, clipped at 2
    assert one(x, update=False).abs().max().item() == 2.0


def test_a_population_member_keeps_its_row_count_and_updates_as_its_group_would():
    norm = _population_norm()
    one = norm.member(0)
    assert one.rms.count.item() == norm.rms.count.item() == pytest.approx(10 + 1e-4)
    more = torch.tensor([[4.0, -2.0, 0.5], [6.0, 2.0, 1.5]])
    one(more, update=True)
    norm(torch.cat([more, more]), update=True)
    assert torch.allclose(one.rms.mean, norm.rms.mean[0], rtol=0, atol=1e-12)
    assert torch.allclose(one.rms.var, norm.rms.var[0], rtol=0, atol=1e-12)


# --- accel.py: the compile cache ------------------------------------------------------------------
def test_an_empty_torchinductor_cache_dir_counts_as_unset(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert accel.compile_cache_dir() == tmp_path / ".cache" / "proxima" / "inductor"


def test_a_relative_xdg_cache_home_is_not_blamed_for_an_unwritable_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.write_text("a file, not a folder")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "rel")  # relative: ignored, the cache is under HOME
    monkeypatch.setenv("HOME", str(home))
    problem = accel.compile_cache_problem()
    assert f"from HOME={home})" in problem and "XDG_CACHE_HOME=rel" not in problem, problem


@pytest.fixture
def codecache(monkeypatch):
    """torch._inductor.codecache with its header folders and memo put back after the test."""
    from torch._inductor import codecache as cc

    if not all(isinstance(getattr(cc, n, None), str) for n in ("_HEADER_DIR", "_HEADER_LOCK_DIR")):
        pytest.skip(f"torch {torch.__version__} keeps no _HEADER_DIR/_HEADER_LOCK_DIR strings in codecache")
    for name in ("_HEADER_DIR", "_HEADER_LOCK_DIR"):
        monkeypatch.setattr(cc, name, getattr(cc, name))
    return cc


def test_setup_compile_cache_fills_an_empty_variable(tmp_path, monkeypatch, codecache):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    headers = accel.setup_compile_cache()
    # left empty, inductor would make "" absolute: its kernels would land in the current directory
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / ".cache" / "proxima" / "inductor")
    assert headers == tmp_path / ".cache" / "proxima" / "inductor" / "precompiled_headers"


def test_setup_compile_cache_forgets_headers_memoized_in_the_old_folder(tmp_path, monkeypatch, codecache):
    cleared = []

    def fake_precompile_header(*a, **k):
        raise AssertionError("not called here")

    fake_precompile_header.cache_clear = lambda: cleared.append(1)
    monkeypatch.setattr(codecache, "_precompile_header", fake_precompile_header, raising=False)
    monkeypatch.setattr(codecache, "_HEADER_DIR", str(tmp_path / "old"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    headers = accel.setup_compile_cache()
    assert codecache._HEADER_DIR == str(headers) == str(tmp_path / "cache" / "precompiled_headers")
    assert codecache._HEADER_LOCK_DIR == str(headers / "locks")
    assert cleared == [1]
    accel.setup_compile_cache()  # the folder is already the right one: nothing memoized to forget
    assert cleared == [1]


def test_mode_options_default_does_not_import_inductor(tmp_path):
    root = Path(accel.__file__).resolve().parents[1]
    code = ("import sys; from proxima import accel; "
            "print(accel.mode_options('default') == {}, accel.mode_options(None) == {}, 'torch._inductor' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(tmp_path)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "False"], proc.stdout


def test_mode_options_puts_an_empty_variable_back_as_it_found_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert accel.mode_options("max-autotune-no-cudagraphs").get("max_autotune") is True
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == ""


def test_compile_options_carry_the_compile_mode_and_deterministic(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    mode = "max-autotune-no-cudagraphs"
    plain = accel.compile_options(SimpleNamespace(compile_mode=mode, deterministic=False))
    det = accel.compile_options(SimpleNamespace(compile_mode=mode, deterministic=True))
    assert plain == accel.mode_options(mode) and plain.get("max_autotune") is True and "fallback_random" not in plain
    assert det == {**plain, "fallback_random": True}
    assert accel.compile_options(SimpleNamespace(compile_mode="default", deterministic=True)) == {"fallback_random": True}
    assert accel.compile_options(SimpleNamespace(compile_mode="default", deterministic=False)) == {}


def test_each_torch_compile_call_gets_its_own_complete_options(tmp_path, monkeypatch):
    # torch.compile pops keys from the dict it is given: a shared dict would leave grad_step with fewer
    from proxima.trainer import Trainer

    got = []

    def fake_compile(fn, options=None, dynamic=None, **kw):
        got.append(dict(options) if options is not None else None)
        if options:
            options.pop(next(iter(options)))
        return fn

    monkeypatch.setattr(accel, "setup_compile_cache", lambda: tmp_path)
    monkeypatch.setattr(torch, "compile", fake_compile)
    trainer = Trainer(_cfg(tmp_path, compile=True, deterministic=True))
    trainer.close()
    assert got == [{"fallback_random": True}, {"fallback_random": True}]


# --- graphs.py ------------------------------------------------------------------------------------
def test_capture_error_keeps_at_most_200_characters_of_a_long_first_line():
    assert graphs.capture_error(RuntimeError("x" * 500)) == "x" * 200
    assert graphs.capture_error(RuntimeError("short\nsecond line")) == "short"


def _stubbed_graph_trainer(monkeypatch, tmp_path, **kw):
    import proxima.trainer as trainer_module
    from tests.unit.test_graphs import _stub_cuda

    _stub_cuda(monkeypatch, [])
    monkeypatch.setattr(trainer_module, "check_device_flags", lambda *a, **k: None)
    return trainer_module.Trainer(_cfg(tmp_path, backend="native", cudagraphs=True, **kw))


def test_target_kl_keeps_the_update_eager_under_cudagraphs(tmp_path, monkeypatch):
    # target_kl reads approx_kl on the host after each minibatch: not capturable
    trainer = _stubbed_graph_trainer(monkeypatch, tmp_path, target_kl=0.01)
    try:
        assert graphs.trainer_graph_states(trainer) == {"rollout": "warm-up", "advantages": "warm-up", "update": "eager"}
    finally:
        trainer.close()


def test_the_rollout_graph_registers_the_env_s_cuda_generator(tmp_path, monkeypatch):
    class CudaGenerator(torch.Generator):  # what a native env on a GPU holds, without a GPU
        @property
        def device(self):
            return torch.device("cuda", 0)

    trainer = _stubbed_graph_trainer(monkeypatch, tmp_path)
    try:
        assert trainer._rollout.generators == ()  # this env's generator is the CPU's: nothing to register
        env_gen = CudaGenerator()
        monkeypatch.setattr(trainer.env, "generator", env_gen)
        _, rollout, advantages, update = graphs.build_parts(trainer)
        assert rollout.generators == (env_gen,)
        assert advantages.generators == () and update.generators == ()
    finally:
        trainer.close()


# --- device.py ------------------------------------------------------------------------------------
def test_probe_device_ignores_a_local_rank_beyond_the_visible_devices(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert device.probe_device() == torch.device("cuda", 0)
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert device.probe_device() == torch.device("cuda", 0)


def test_resolve_device_refuses_the_ordinal_equal_to_the_device_count(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError) as err:
        device.resolve_device("cuda:1")
    assert str(err.value) == "--device 'cuda:1': only 1 CUDA device(s) here (cuda:0 ...)"


@pytest.mark.parametrize("name", ["meta", "mps"])
def test_resolve_device_refuses_devices_other_than_cpu_and_cuda(name):
    with pytest.raises(ConfigError) as err:
        device.resolve_device(name)
    assert str(err.value) == f"--device {name!r}: not supported; use cpu, cuda, cuda:1 or auto"


@pytest.mark.parametrize("name", ["cuda", "cuda:1"])
def test_resolve_device_without_cuda_says_to_use_the_cpu(name, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(ConfigError) as err:
        device.resolve_device(name)
    assert str(err.value) == f"--device {name!r}: CUDA is not usable here (run `proxima doctor`); use --device cpu"
