"""Review 31, --compile: modes that bring inductor's own CUDA graphs are refused under --cudagraphs;
--deterministic reaches inductor through each trainer's own torch.compile options (not the global
config, whose compiled code a later trainer shared); a capture failure that gave the generators
fresh states drops every part's graph."""

from __future__ import annotations

import inspect
import os

import pytest
import torch

from proxima import graphs
from proxima.config import ConfigError, PPOConfig
from proxima.trainer import Trainer, _check_cudagraphs
from tests.unit.test_graphs import _stub_cuda


def _cfg(tmp_path, **kw) -> PPOConfig:
    values = dict(env_id="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 3, update_epochs=2,
                  num_minibatches=2, progress=False, checkpoint_every=0, eval_episodes=0, seed=3, run_dir=str(tmp_path))
    values.update(kw)
    return PPOConfig(**values)


# --- 1. a compile mode with inductor's own CUDA graphs inside Proxima's ---------------------------
def test_cudagraphs_refuses_every_compile_mode_whose_options_turn_on_inductor_cuda_graphs(tmp_path, monkeypatch):
    from torch._inductor import list_mode_options

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    choices = PPOConfig.__dataclass_fields__["compile_mode"].metadata["choices"]
    assert list_mode_options("max-autotune").get("triton.cudagraphs")  # what torch 2.13 says, and the reason for this
    with pytest.raises(ConfigError, match="--compile-mode max-autotune .*--cudagraphs"):
        _check_cudagraphs(_cfg(tmp_path, compile=True, compile_mode="max-autotune", cudagraphs=True), torch.device("cuda"), 1)
    refused = []
    for mode in choices:
        cfg = _cfg(tmp_path, compile=True, compile_mode=mode, cudagraphs=True)
        if list_mode_options(mode).get("triton.cudagraphs"):
            with pytest.raises(ConfigError) as err:
                _check_cudagraphs(cfg, torch.device("cuda"), 1)
            assert str(err.value) == (f"--compile-mode {mode} records inductor's own CUDA graphs inside Proxima's (--cudagraphs); "
                                      "use --compile-mode default, or drop --cudagraphs")
            refused.append(mode)
        else:
            _check_cudagraphs(cfg, torch.device("cuda"), 1)
        _check_cudagraphs(_cfg(tmp_path, compile=True, compile_mode=mode), torch.device("cuda"), 1)  # no --cudagraphs: any mode
    assert "max-autotune" in refused and "reduce-overhead" in refused and "default" not in refused
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ  # a check leaves the process's environment as it found it


# --- 2. --deterministic per compiled callable, not process-wide ------------------------------------
def _backend_of(compiled):
    """(the backend, or None where this torch keeps it elsewhere) of a torch.compile'd function."""
    try:
        from torch._dynamo import eval_frame

        callback = inspect.getclosurevars(compiled).nonlocals["self"].callback
        backend = eval_frame.innermost_backend(callback)
    except (ImportError, AttributeError, KeyError, TypeError):
        return None
    return backend if hasattr(backend, "config") and hasattr(backend, "get_compiler_config") else None


def _inductor_backend(compiled):
    """The inductor wrapper a torch.compile'd function runs with: what dynamo compares (==) to decide
    whether compiled code made for one call of torch.compile serves another. It is read from torch's
    internals: where a plain torch.compile'd function does not show them (a later torch), the test is
    skipped; where one does and the trainer's callable does not, that is the trainer's failure."""
    if _backend_of(torch.compile(lambda x: x + 1)) is None:
        pytest.skip(f"torch {torch.__version__} does not keep a compiled function's inductor backend where this test "
                    "reads it (eval_frame.innermost_backend of the wrapper's closure 'self'.callback)")
    backend = _backend_of(compiled)
    assert backend is not None, f"{compiled!r} is not a torch.compile'd function"
    return backend


def test_deterministic_and_not_compile_with_backends_that_do_not_share_code(tmp_path):
    import torch._inductor.config as inductor_config

    # a known start, whatever another test or TORCHINDUCTOR_* left in the process's inductor config.
    # The config's own patch, not monkeypatch: monkeypatch's undo left the key unreadable
    # ("fallback_random does not exist") for every later torch.compile in the process
    with inductor_config.patch(fallback_random=False):
        nodet = Trainer(_cfg(tmp_path / "a", compile=True, deterministic=False))  # compiles lazily: nothing yet
        det = Trainer(_cfg(tmp_path / "b", compile=True, deterministic=True))
        try:
            for name in ("policy_step", "grad_step"):
                a, b = _inductor_backend(getattr(nodet, name)), _inductor_backend(getattr(det, name))
                assert a != b, name  # equal backends would reuse each other's compiled code
                assert b.config.get("fallback_random") is True and not a.config.get("fallback_random"), name
                assert b.get_compiler_config()["fallback_random"] is True, name
            assert inductor_config.fallback_random is False  # the global config is not touched
        finally:
            det.close()
            nodet.close()
        assert inductor_config.fallback_random is False


@pytest.mark.slow
def test_a_deterministic_compiled_run_after_a_non_deterministic_one_equals_eager(tmp_path):
    # the reviewer's sequence, in one process: before, the second compiled trainer ran the first one's
    # kernels (drawn from inductor's own generator) and ended 3.6e-3 away from eager
    import torch._dynamo

    torch._dynamo.reset()

    def train(name, **kw):
        trainer = Trainer(_cfg(tmp_path / name, **kw))
        try:
            trainer.run()
            return {k: v.clone() for k, v in trainer.agent.state_dict().items()}
        finally:
            trainer.close()

    eager = train("eager", compile=False)
    train("nodet", compile=True, deterministic=False)
    det = train("det", compile=True, deterministic=True)
    diff = max((det[k] - eager[k]).abs().max().item() for k in eager)
    assert diff <= 1e-6, diff


# --- 3. a failed capture whose generators got fresh states ----------------------------------------
def _graphed_trainer(monkeypatch, tmp_path, log):
    """A CPU trainer whose parts graphs.build_parts wrapped for --cudagraphs (the CUDA check skipped),
    with torch.cuda's graph pieces stubbed (test_graphs._stub_cuda): a replay only logs "replay". The
    rollout and the advantages are captured; the update's capture, next, fails. Returns (trainer,
    the stub's state)."""
    import proxima.trainer as trainer_module

    state = _stub_cuda(monkeypatch, log)
    monkeypatch.setattr(trainer_module, "check_device_flags", lambda *a, **k: None)
    trainer = Trainer(_cfg(tmp_path, backend="native", cudagraphs=True))
    assert graphs.trainer_graph_states(trainer) == dict.fromkeys(graphs.PARTS, "warm-up")
    for _ in range(graphs.WARMUP):
        for name in graphs.PARTS:
            getattr(trainer, f"_{name}")()
    trainer._rollout()  # captured: its graph holds the generators' states
    trainer._advantages()
    assert graphs.trainer_graph_states(trainer) == {"rollout": "graph", "advantages": "graph", "update": "warm-up"}
    state["errors"].append(RuntimeError("capture invalidated"))
    return trainer, state


def _iterations(trainer, log, n=2):
    log.clear()
    for _ in range(n):
        for name in graphs.PARTS:
            getattr(trainer, f"_{name}")()


def test_a_failure_that_resets_the_generators_drops_every_part_s_graph(monkeypatch, tmp_path, capsys):
    # the update's capture fails and so does the re-sync capture: the generators get fresh states,
    # which the rollout's and advantages' graphs do not share: they must not replay again
    log = []
    trainer, state = _graphed_trainer(monkeypatch, tmp_path, log)
    state["errors"].insert(0, RuntimeError("resync failed"))  # raised by the second capture to end
    try:
        capsys.readouterr()
        trainer._update()
        assert ("set_state", "default", "copy of default") in log
        _iterations(trainer, log)
        assert "replay" not in log and not any(isinstance(e, tuple) and e[0] == "capture" for e in log), log
        assert graphs.trainer_graph_states(trainer) == {
            "rollout": "eager: capture failed (dropped: the update's capture failed (capture invalidated))",
            "advantages": "eager: capture failed (dropped: the update's capture failed (capture invalidated))",
            "update": "eager: capture failed (capture invalidated)"}
        assert capsys.readouterr().err.strip().splitlines() == [
            "proxima: note: could not capture the update as a CUDA graph (capture invalidated), nor take the "
            "random generators out of capture mode; every part runs eagerly"]
    finally:
        trainer.close()


def test_a_failure_whose_resync_ends_the_capture_mode_keeps_the_other_graphs(monkeypatch, tmp_path, capsys):
    # the re-sync capture ends (its scratch is on this CPU trainer's device): the generators keep the
    # states the other graphs hold, and those graphs go on replaying
    log = []
    trainer, _ = _graphed_trainer(monkeypatch, tmp_path, log)
    try:
        trainer._update()
        assert not any(isinstance(e, tuple) and e[0] == "set_state" for e in log)
        assert "it runs eagerly" in capsys.readouterr().err
        _iterations(trainer, log)
        assert log.count("replay") == 4
        assert graphs.trainer_graph_states(trainer) == {"rollout": "graph", "advantages": "graph",
                                                       "update": "eager: capture failed (capture invalidated)"}
    finally:
        trainer.close()
