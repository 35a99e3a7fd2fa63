"""The iteration as three parts over static buffers (graphs.py), and --cudagraphs.

On CPU: the parts make no tensors from Python numbers and no host reads, and write only into
buffers whose addresses never change (what a CUDA graph replays into). On CUDA (skipped here):
graph-replayed and compiled+graphed training equals eager, checkpoints move between the modes, and
an iteration launches a bounded number of kernels from Python whatever T and the minibatch count.
"""

from __future__ import annotations

import pytest
import torch

from proxima.config import ConfigError, PPOConfig
from proxima.debug import HostSyncError, HostTensorError, forbid_host_sync, forbid_host_tensors
from proxima.graphs import PARTS, trainer_graph_states
from proxima.trainer import Trainer, _check_cudagraphs

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _cfg(tmp_path, **kw) -> PPOConfig:
    values = dict(env_id="CartPole-v1", backend="native", num_envs=8, num_steps=16, total_timesteps=8 * 16 * 6,
                  update_epochs=2, num_minibatches=4, progress=False, checkpoint_every=0, eval_episodes=0, seed=3,
                  run_dir=str(tmp_path))
    values.update(kw)
    return PPOConfig(**values)


def _parts_once(trainer) -> None:
    trainer._rollout()
    trainer._advantages()
    trainer._update()


# --------------------------------------------------------------------------------------- CPU
@pytest.mark.parametrize("env_id, extra", [
    ("CartPole-v1", {}),
    ("Pendulum-v1", {"norm_obs": True, "norm_reward": True}),
    ("Acrobot-v1", {}),
    ("MountainCar-v0", {}),
    ("MountainCarContinuous-v0", {"norm_obs": True}),
    ("PixelQuadrant-v0", {}),  # uint8 images through the CNN encoder
])
def test_the_parts_make_no_tensors_from_python_numbers_and_no_host_reads(env_id, extra, tmp_path):
    trainer = Trainer(_cfg(tmp_path, env_id=env_id, **extra))
    trainer.train_iteration()  # warm-up: lazy optimizer state, metric buffers
    with forbid_host_tensors(), forbid_host_sync("cpu"):
        _parts_once(trainer)
    assert trainer.parts.metrics["policy_loss"].isfinite()


def test_the_parts_write_into_the_same_buffers_every_iteration(tmp_path):
    # a CUDA graph replays into the addresses it recorded: nothing the parts read or write may be
    # rebound to a new tensor between iterations
    trainer = Trainer(_cfg(tmp_path, norm_obs=True, norm_reward=True))
    trainer.train_iteration()

    def addresses() -> dict:
        ro, parts = trainer.rollout, trainer.parts
        named = {"next_obs": trainer.next_obs, "advantages": parts.advantages_buf, "returns": parts.returns_buf,
                 "explained_variance": parts.explained_variance, "lr": trainer.optimizer.param_groups[0]["lr"]}
        named.update({f"rollout.{k}": v for k, v in vars(ro).items() if torch.is_tensor(v)})
        named.update({f"env.{k}": v for k, v in trainer.env.state.items()})
        named.update({"env.elapsed": trainer.env.elapsed, "env.ep_return": trainer.env.ep_return})
        named.update({f"metric.{k}": v for k, v in parts.metrics.items()})
        named.update({f"obs_norm.{k}": v for k, v in trainer.obs_norm.state_dict().items()})
        named.update({f"reward_scaler.{k}": v for k, v in trainer.reward_scaler.state_dict().items()})
        for i, p in enumerate(trainer.agent.parameters()):
            named[f"param{i}"] = p
            for k, v in trainer.optimizer.state[p].items():
                named[f"adam{i}.{k}"] = v
        return {k: v.data_ptr() for k, v in named.items()}

    before = addresses()
    obs_before = trainer.next_obs.clone()
    for _ in range(2):
        trainer.train_iteration()
    assert addresses() == before
    assert not torch.equal(trainer.next_obs, obs_before)  # written, in place


def test_resume_restores_into_the_static_buffers(tmp_path):
    trainer = Trainer(_cfg(tmp_path))
    trainer.train_iteration()
    state = trainer.state_dict()
    other = Trainer(_cfg(tmp_path / "b"))
    ptrs = (other.next_obs.data_ptr(), other.env.state["s"].data_ptr())
    from proxima import train_state

    train_state.restore(other, state)
    assert (other.next_obs.data_ptr(), other.env.state["s"].data_ptr()) == ptrs
    assert torch.equal(other.next_obs, trainer.next_obs) and torch.equal(other.env.state["s"], trainer.env.state["s"])


@pytest.mark.parametrize("make", [
    lambda x: torch.where(x > 0, 1.0, x),
    lambda x: torch.tensor([1.0, 2.0]),
    lambda x: torch.full((3,), 2.0),
    lambda x: x.to("meta"),
], ids=["where-python-scalar", "torch.tensor", "torch.full", "cross-device-copy"])
def test_forbid_host_tensors_names_the_line(make):
    x = torch.ones(3)
    with pytest.raises(HostTensorError, match=r"test_graphs.py:\d+"):
        with forbid_host_tensors():
            make(x)


def test_forbid_host_tensors_lets_scalar_arguments_and_torch_internals_through():
    x = torch.linspace(-2, 2, 8, requires_grad=True)
    with forbid_host_tensors():
        y = (x * 0.5).clamp(-0.5, 0.5).masked_fill(x > 1.5, 0.0)
        y.sum().backward()  # clamp's backward makes a scalar tensor inside torch: not the code's doing
    assert x.grad is not None


def test_a_host_read_inside_the_parts_is_still_caught(tmp_path):
    trainer = Trainer(_cfg(tmp_path))
    trainer.train_iteration()
    trainer.cfg.target_kl = 1e9  # update() then reads approx_kl on the host once per minibatch
    with pytest.raises(HostSyncError, match="in update"):
        with forbid_host_sync("cpu"):
            _parts_once(trainer)


@pytest.mark.parametrize("overrides, needle", [
    ({"debug_checks": True}, "--debug-checks"),
    ({"amp": "fp16"}, "--amp fp16"),
    ({"compile": True, "compile_mode": "reduce-overhead"}, "--compile-mode reduce-overhead"),
])
def test_cudagraphs_refuses_what_a_graph_cannot_record(overrides, needle, tmp_path):
    cfg = _cfg(tmp_path, cudagraphs=True, **overrides)
    with pytest.raises(ConfigError, match=needle):
        _check_cudagraphs(cfg, torch.device("cuda"), 1)
    with pytest.raises(ConfigError, match="torchrun"):
        _check_cudagraphs(_cfg(tmp_path, cudagraphs=True), torch.device("cuda"), 2)
    _check_cudagraphs(_cfg(tmp_path, cudagraphs=True), torch.device("cuda"), 1)  # plain --cudagraphs is fine


# -------------------------------------------------------------------------------------- CUDA
def _train_params(tmp_path, iterations=3, **kw) -> tuple:
    trainer = Trainer(_cfg(tmp_path, device="cuda", **kw))
    for _ in range(iterations):
        trainer.train_iteration()
    torch.cuda.synchronize()
    return trainer, {k: v.detach().clone() for k, v in trainer.agent.state_dict().items()}


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("mode", [{"cudagraphs": True}, {"cudagraphs": True, "compile": True}], ids=["graphs", "compile+graphs"])
def test_graph_replayed_training_equals_eager_on_cuda(env_id, mode, tmp_path):
    # 3 iterations: 2 eager warm-up calls of each part, then capture + replay (the graph's own work)
    iters = 4
    _, eager = _train_params(tmp_path / "eager", iters, env_id=env_id)
    graphed_trainer, graphed = _train_params(tmp_path / "graphed", iters, env_id=env_id, **mode)
    # a failed capture runs that part eagerly, so equal parameters alone would not show a replay
    assert trainer_graph_states(graphed_trainer) == dict.fromkeys(PARTS, "graph")
    for name, value in eager.items():
        torch.testing.assert_close(graphed[name], value, rtol=1e-4, atol=1e-5, msg=name)


@cuda
@pytest.mark.gpu
def test_checkpoints_move_between_eager_and_graphed_runs_on_cuda(tmp_path):
    graphed, _ = _train_params(tmp_path / "g", 4, cudagraphs=True)
    state = graphed.state_dict()
    state["config"]["cudagraphs"] = False
    eager = Trainer(PPOConfig(**state["config"]), run_dir=tmp_path / "e", resume_state=state)
    for _ in range(4):  # and back: a graphed trainer resumed from the eager one
        eager.train_iteration()
    state2 = eager.state_dict()
    state2["config"]["cudagraphs"] = True
    regraphed = Trainer(PPOConfig(**state2["config"]), run_dir=tmp_path / "r", resume_state=state2)
    for name, value in eager.agent.state_dict().items():
        assert torch.equal(regraphed.agent.state_dict()[name], value), name
    for _ in range(4):
        regraphed.train_iteration()
    assert regraphed.iteration == state2["iteration"] + 4
    assert all(torch.isfinite(p).all() for p in regraphed.agent.parameters())
    assert not any("_orig_mod" in k for k in regraphed.state_dict()["agent"])


def _launches_per_iteration(tmp_path, **kw) -> dict:
    from collections import Counter

    trainer = Trainer(_cfg(tmp_path, device="cuda", cudagraphs=True, **kw))
    for _ in range(4):  # past warm-up and capture
        out = trainer.train_iteration()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as prof:
        out = trainer.train_iteration()
        trainer.dist.reduce_metrics(out)
        torch.cuda.synchronize()
    names = Counter(e.name for e in prof.events())
    return {"kernels": sum(n for k, n in names.items() if k in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")),
            "graphs": names.get("cudaGraphLaunch", 0),
            "h2d": names.get("cudaMemcpyAsync", 0)}


#: the design's bound per iteration (graphs.py): 3 graph launches; from Python only the learning
#: rate fill, the env guard's flag resets and its one check, and the metrics read
MAX_KERNELS_FROM_PYTHON = 48


@cuda
@pytest.mark.gpu
def test_a_cuda_iteration_launches_a_bounded_number_of_kernels_whatever_steps_and_minibatches(tmp_path):
    small = _launches_per_iteration(tmp_path / "a", num_steps=8, num_minibatches=2, update_epochs=1)
    large = _launches_per_iteration(tmp_path / "b", num_steps=64, num_minibatches=8, update_epochs=4)
    assert small["graphs"] == large["graphs"] == 3
    assert small["kernels"] == large["kernels"] <= MAX_KERNELS_FROM_PYTHON, (small, large)
    assert large["h2d"] <= 2, large  # the metrics' one read back; nothing host-to-device per step


class _FakeGenerator:
    """A generator's graph-safe state API, recorded (graphs.recover_from_failed_capture's fallback)."""

    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def clone_state(self):
        return f"copy of {self.name}"

    def graphsafe_set_state(self, state):
        self.log.append(("set_state", self.name, state))


def _stub_cuda(monkeypatch, log: list, capture_error: Exception | None = None) -> dict:
    """torch.cuda's graph and stream pieces, stubbed so Replay's protocol runs without a GPU. They
    behave as torch's do where it matters here: ``torch.cuda.graph`` makes its capture stream current
    and, when the capture fails, raises from its exit before restoring the stream (capture_end
    raises first). Returns the stub's state: {"stream": the current stream's name}."""
    import contextlib

    state = {"stream": "main", "errors": [capture_error] if capture_error is not None else []}

    class FakeGraph:
        def register_generator_state(self, gen):
            log.append(("register", gen))

        def replay(self):
            log.append("replay")

    class FakeStream:
        def __init__(self, *a, name="side"):
            self.name = name

        def wait_stream(self, other):
            pass

    @contextlib.contextmanager
    def fake_graph(graph, pool=None, stream=None):
        before = state["stream"]
        state["stream"] = "capture"
        log.append(("capture", pool))
        yield
        if state["errors"]:
            raise state["errors"].pop()  # as capture_end does, before the stream context is left
        state["stream"] = before

    @contextlib.contextmanager
    def fake_stream(s):
        before = state["stream"]
        state["stream"] = s.name
        yield
        state["stream"] = before

    def set_stream(s):
        log.append(("set_stream", s.name))
        state["stream"] = s.name

    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", fake_graph)
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: FakeStream(name=state["stream"]))
    monkeypatch.setattr(torch.cuda, "stream", fake_stream)
    monkeypatch.setattr(torch.cuda, "set_stream", set_stream)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: "own pool")
    monkeypatch.setattr(torch.cuda, "default_generators", (_FakeGenerator("default", log),))
    monkeypatch.setattr(torch._C, "_cuda_endAllocateToPool", lambda device, pool: log.append(("end_pool", device, pool)), raising=False)
    return state


def test_a_failed_capture_runs_the_part_eagerly_from_then_on_and_says_so(monkeypatch, capsys):
    from proxima import graphs

    log = []
    state = _stub_cuda(monkeypatch, log, capture_error=RuntimeError("operation not permitted when stream is capturing"))
    monkeypatch.setattr(torch, "zeros", lambda *a, **k: torch.empty(()))  # the re-sync capture's scratch, on the CPU here

    def rollout():
        log.append(("fn", state["stream"]))

    env_gen = torch.Generator()
    replay = graphs.Replay(rollout, torch.device("cuda"), generators=(env_gen,), pool="pool")
    assert replay.state == "warm-up"
    for _ in range(graphs.WARMUP + 3):
        replay()
    # warm-up on a side stream, the failed capture (it recorded nothing); then what the failure left
    # undone: the stream current before it, the allocator's routing to the pool ended, the generators
    # taken out of capture mode by a capture that ends (same generators registered); then the same
    # call eagerly on the restored stream, and eager ever after
    assert log == [("fn", "side")] * graphs.WARMUP + [
        ("register", env_gen), ("capture", "pool"), ("fn", "capture"),
        ("set_stream", "main"), ("end_pool", 0, "pool"), ("register", env_gen), ("capture", None), ("set_stream", "main"),
        ("fn", "main"), ("fn", "main"), ("fn", "main")]
    assert state["stream"] == "main"
    err = capsys.readouterr().err
    assert "could not capture the rollout as a CUDA graph (operation not permitted" in err and "runs eagerly" in err
    assert replay.state == "eager: capture failed (operation not permitted when stream is capturing)"
    assert graphs.part_states({"rollout": replay, "update": lambda: None}) == {
        "rollout": "eager: capture failed (operation not permitted when stream is capturing)", "update": "eager"}


def test_a_failed_capture_whose_resync_fails_too_resets_each_generator(monkeypatch, capsys):
    # the re-sync capture cannot run (here: no CUDA for its scratch tensor): each generator, the
    # default one of the device included, gets a fresh copy of its own state (not capturing)
    from proxima import graphs

    log = []
    state = _stub_cuda(monkeypatch, log, capture_error=RuntimeError("capture invalidated"))
    env_gen = _FakeGenerator("env", log)
    replay = graphs.Replay(lambda: log.append(("fn", state["stream"])), torch.device("cuda"), generators=(env_gen,))
    for _ in range(graphs.WARMUP + 1):
        replay()
    assert ("capture", "own pool") in log  # a pool of its own, so the failure can end the routing to it
    i = log.index(("end_pool", 0, "own pool"))
    assert log[i + 1:] == [("set_stream", "main"), ("set_state", "default", "copy of default"), ("set_state", "env", "copy of env"),
                           ("set_stream", "main"), ("fn", "main")]
    assert "could not capture" in capsys.readouterr().err


def test_capture_error_names_the_part_s_own_error_before_capture_end_s():
    from proxima.graphs import capture_error

    try:
        try:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing\ndetails")
        except RuntimeError:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")
    except RuntimeError as e:
        text = capture_error(e)
    assert text == ("CUDA error: operation not permitted when stream is capturing; "
                    "then: CUDA error: operation failed due to a previous error during capture")
    assert capture_error(ValueError("")) == "ValueError"


def test_trainer_graph_states_reads_each_of_the_trainer_s_three_parts(monkeypatch, tmp_path):
    # what the CUDA equality test asserts with, checked here so that a wrong name fails on the CPU:
    # an eager trainer's parts are 'eager'; wrapped in Replay (torch.cuda stubbed), 'warm-up', then
    # 'graph' once captured
    from proxima import graphs

    trainer = Trainer(_cfg(tmp_path))
    assert trainer_graph_states(trainer) == {"rollout": "eager", "advantages": "eager", "update": "eager"}
    _stub_cuda(monkeypatch, [])
    for name in PARTS:
        setattr(trainer, f"_{name}", graphs.Replay(getattr(trainer, f"_{name}"), torch.device("cuda")))
    assert trainer_graph_states(trainer) == dict.fromkeys(PARTS, "warm-up")
    for _ in range(graphs.WARMUP + 1):
        _parts_once(trainer)
    assert trainer_graph_states(trainer) == {"rollout": "graph", "advantages": "graph", "update": "graph"}
    trainer._advantages.graph, trainer._advantages.fallback = None, "capture invalidated"
    assert trainer_graph_states(trainer)["advantages"] == "eager: capture failed (capture invalidated)"
    trainer.close()


def test_replay_warms_up_then_captures_once_and_replays(monkeypatch):
    # the capture protocol of graphs.Replay with torch.cuda's pieces stubbed (no GPU here): WARMUP
    # eager calls on a side stream, one capture (which records, so it is followed by a replay), then
    # replays only; the env's generator is registered with the graph
    from proxima import graphs

    log = []
    _stub_cuda(monkeypatch, log)
    gen = torch.Generator()
    replay = graphs.Replay(lambda: log.append("fn"), torch.device("cuda"), generators=(gen,), pool="pool")
    for _ in range(graphs.WARMUP + 3):
        replay()
    assert log == ["fn"] * graphs.WARMUP + [("register", gen), ("capture", "pool"), "fn", "replay", "replay", "replay"]
    assert replay.state == "graph" and replay.fallback is None


def test_flush_denormal_is_on_for_the_trainers_life_only(tmp_path):
    tiny = torch.tensor([1e-39])  # a float32 denormal
    trainer = Trainer(_cfg(tmp_path))
    assert float(tiny * 1.0) == 0.0  # flushed while the trainer lives
    trainer.close()
    assert float(tiny * 1.0) > 0.0
    off = Trainer(_cfg(tmp_path / "off", flush_denormal=False))
    assert float(tiny * 1.0) > 0.0
    off.close()
