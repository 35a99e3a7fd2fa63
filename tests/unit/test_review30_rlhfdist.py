"""Review 30, `proxima rlhf` under torchrun, the parts one process can check: the prompt count against the process
count before any model loads, the memory check's count for --fsdp, the lost-contact line, one clock for seconds."""

import json

import pytest
import torch

from proxima.rlhf import dist as D
from proxima.rlhf.config import ConfigError, RLHFConfig
from proxima.rlhf.dist import Dist
from proxima.rlhf.trainer import RLHFTrainer


def test_fewer_prompts_than_processes_is_refused_before_anything_loads(tmp_path, monkeypatch):
    from proxima.rlhf import trainer

    def never(*a, **k):
        raise AssertionError("loaded before the prompt count was checked")

    monkeypatch.setattr(trainer, "load_rewards", never)
    monkeypatch.setattr(trainer, "load_policy", never)
    (tmp_path / "one.txt").write_text("the food was\n")
    cfg = RLHFConfig(policy="p", prompts=str(tmp_path / "one.txt"), reward="proxima.rlhf.demo:keyword_sentiment")
    for rank in (0, 1):  # every rank, not only the one whose share is empty
        with pytest.raises(ConfigError) as e:
            RLHFTrainer(cfg, Dist(rank, 2, rank))
        assert str(e.value) == (f"--prompts {tmp_path / 'one.txt'}: 1 prompt(s) for 2 processes, each of which draws "
                                "from its own share (prompts rank, rank + 2, ...); give at least 2 prompts, or train "
                                "with fewer processes")


def _stub(world: int, device: torch.device, **cfg) -> RLHFTrainer:
    t = RLHFTrainer.__new__(RLHFTrainer)
    t.cfg = RLHFConfig(policy="p", prompts="p.txt", reward="proxima.rlhf.demo:keyword_sentiment", fsdp=True, **cfg)
    t.dist, t.device, t.critic = Dist(0, world, 0), device, t.cfg.advantage == "gae"
    return t


def _fits(world: int, device: torch.device, **cfg) -> dict:
    return _stub(world, device, **cfg)._model_fits(torch.float32).keywords


@pytest.mark.parametrize("world", [2, 3, 4, 8, 16])
def test_fsdp_on_gpus_counts_each_gpus_share_which_covers_the_load(world):
    got = _fits(world, torch.device("cuda", 0))
    # policy, gradients, Adam's 2 moments, reference, value model's 4: 9 copies, 1/N each; the load puts 1/N of
    # the 3 models there (only shards reach the device)
    assert (got["copies"], got["processes"]) == (max(-(-9 // world), -(-3 // world)), 1)
    assert got["copies"] * world >= 3


def test_fsdp_on_the_cpu_counts_every_process_loading_its_whole_models():
    two = _fits(2, torch.device("cpu"))
    assert (two["copies"], two["processes"]) == (9, 1)  # training's shards, shared by the host, are more
    four = _fits(4, torch.device("cpu"))
    assert (four["copies"], four["processes"]) == (12, 1)  # 4 processes x (policy, reference, value model)
    assert four["what"] == "policy, reference, value model, loaded whole by each of 4 processes before sharding"
    grpo = _fits(8, torch.device("cpu"), advantage="grpo", samples_per_prompt=2)
    assert (grpo["copies"], grpo["what"]) == (16, "policy, reference, loaded whole by each of 8 processes before sharding")


def test_the_check_refuses_the_load_it_counts(monkeypatch):
    from proxima import sizing

    monkeypatch.setattr(sizing, "free_memory", lambda device: 10 * 4_000_000)  # 10 float32 copies of 1M parameters
    _stub(2, torch.device("cpu"))._model_fits(torch.float32)(1_000_000)  # 9 copies fit
    with pytest.raises(ConfigError, match=r"holds 12 copies \(policy, reference, value model, loaded whole by each of 4 "):
        _stub(4, torch.device("cpu"))._model_fits(torch.float32)(1_000_000)


GLOO = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
        "[127.0.0.1]:26755. This is typically caused by a remote worker crashing.")


def test_a_lost_peer_is_one_line_naming_the_rank():
    line = D.lost_contact(RuntimeError(GLOO), Dist(1, 2, 1))
    assert isinstance(line, ConfigError)  # both entry points print it as their one error line, exit 2
    assert str(line) == ("rank 1 stopped: lost contact with another rank (it failed or was stopped; its error is "
                         f"above): RuntimeError: {GLOO}")
    timeout = D.lost_contact(RuntimeError("[../gloo/transport/tcp/pair.cc:446] Timed out waiting 1800000ms for recv"),
                             Dist(0, 2, 0))
    assert str(timeout).startswith("rank 0 stopped: rank 1 did not reach the same collective within the process "
                                   "group's timeout")
    assert D.lost_contact(RuntimeError(GLOO), Dist()) is None  # one process has no peer to lose
    assert D.lost_contact(RuntimeError("mat1 and mat2 shapes cannot be multiplied"), Dist(0, 2, 0)) is None
    assert D.lost_contact(OSError(32, "Broken pipe"), Dist(0, 2, 0)) is None  # stdout's, not a peer's
    assert D.end_after_failure(Dist(), ValueError("x")).args == ("x",)


def _three_steps(tmp_path, checkpoint_every: int) -> tuple:
    """A 3-step one-process run of the tiny GPT-2 on the demo's prompts and reward: (per-step seconds from
    metrics.csv, summary.json's seconds)."""
    from rlhf_assets import save_gpt2

    from proxima.rlhf import train_rlhf
    from proxima.rlhf.demo import prompts_list
    from proxima.rlhf.rundir import read_metrics

    save_gpt2(tmp_path / "model")
    (tmp_path / "prompts.txt").write_text("\n".join(prompts_list()) + "\n")
    run = train_rlhf(RLHFConfig(policy=str(tmp_path / "model"), prompts=str(tmp_path / "prompts.txt"),
                                reward="proxima.rlhf.demo:keyword_sentiment", batch_size=4, num_minibatches=2,
                                max_new_tokens=4, steps=3, print_every=0, checkpoint_every=checkpoint_every, plot=False,
                                run_dir=str(tmp_path / "run"), threads=1))
    return read_metrics(run)["charts/seconds_per_step"], json.loads((run / "summary.json").read_text())["seconds"]


def test_one_process_seconds_add_up_to_the_runs(tmp_path):
    per_step, seconds = _three_steps(tmp_path, checkpoint_every=1)
    assert len(per_step) == 3 and abs(sum(per_step) - seconds) <= 0.002, (per_step, seconds)


# --- day review: the teardown ends a rank at once; CUDA's current device; the step's clock; rank 0's wait ---------
class _Store:
    """torchrun's store, as much of it as rlhf.dist uses: a failure count and string keys."""

    def __init__(self, failed=0, others=0, after=0.0):
        import time

        self.failed, self.others, self.at, self.keys = failed, others, time.monotonic() + after, {}

    def add(self, key, n):
        import time

        if self.others and time.monotonic() >= self.at:  # the other ranks record their ends ``after`` s from now
            self.failed, self.others = self.failed + self.others, 0
        self.failed += n
        return self.failed

    def set(self, key, value):
        self.keys[key] = value.encode() if isinstance(value, str) else value

    def check(self, keys):
        return all(k in self.keys for k in keys)

    def get(self, key):
        return self.keys[key]


@pytest.fixture
def store(monkeypatch):
    """D's module state as after init_distributed, with a store of our own; restored after."""
    monkeypatch.setattr(D, "_ENDED", False, raising=False)
    monkeypatch.setattr(D, "_JOINED", 1)

    def use(s):
        monkeypatch.setattr(D, "_STORE", s)
        return s
    return use


def test_torchruns_sigterm_after_a_peers_failure_ends_the_loop_at_once_and_a_users_sigterm_still_stops(store):
    import signal

    from proxima.rlhf.loop import RankGuard

    store(_Store(failed=1))  # another rank recorded its failure
    guard = RankGuard(lambda: None, 3.0)
    with pytest.raises(D.PeerEnded):  # the old handler returned, and the rank waited for its next collective
        guard._handle(signal.SIGTERM, None)
    guard._handle(signal.SIGTERM, None)  # a repeat while the rank leaves: no second exception in its cleanup
    assert guard.stop.signum == 0
    line = D.end_after_failure(Dist(0, 2, 0), D.PeerEnded())
    assert isinstance(line, D.LostContact) and str(line) == (
        "rank 0 stopped: lost contact with another rank (rank 1 failed, and torchrun is ending the job; its error is "
        "above): torchrun's teardown (SIGTERM) ended this rank")

    store(_Store(failed=0))  # nobody failed: the user's SIGTERM, a stop with its checkpoint
    D._ENDED = False
    guard = RankGuard(lambda: None, 3.0)
    guard._handle(signal.SIGTERM, None)
    assert guard.stop.signum == signal.SIGTERM


def test_the_teardown_outside_the_loop_ends_setup_at_once_or_as_a_held_block_ends(store):
    import signal

    from proxima.rlhf.api import _RankOutside
    from proxima.signals import TrainingInterrupted

    store(_Store(failed=1))
    outside = _RankOutside()
    with pytest.raises(D.PeerEnded):  # not TrainingInterrupted: "stopped by SIGTERM" would be no true line
        outside._handle(signal.SIGTERM, None)
    D._ENDED = False
    outside = _RankOutside()
    outside.held += 1  # claiming the run's lock: raised once that is recorded
    outside._handle(signal.SIGTERM, None)
    outside.held -= 1
    with pytest.raises(D.PeerEnded):
        outside.check()
    store(_Store(failed=0))
    D._ENDED = False
    outside = _RankOutside()
    with pytest.raises(TrainingInterrupted):
        outside._handle(signal.SIGTERM, None)


def test_on_cuda_init_distributed_makes_the_local_gpu_current_before_the_group_starts(monkeypatch):
    import torch.distributed as tdist

    calls = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(("set_device", device)))
    monkeypatch.setattr(tdist, "is_nccl_available", lambda: True)
    monkeypatch.setattr(tdist, "is_initialized", lambda: False)
    monkeypatch.setattr(tdist, "rendezvous", lambda url, timeout: iter([(tdist.HashStore(), 1, 2)]))  # join_group's
    monkeypatch.setattr(tdist, "init_process_group", lambda backend, **k: calls.append(("init", backend)))
    monkeypatch.setattr(tdist, "get_rank", lambda: 1)
    monkeypatch.setattr(tdist, "get_world_size", lambda: 2)
    monkeypatch.setattr(D, "_JOINED", 0)
    monkeypatch.setattr(D, "_STORE", None)
    d = D.init_distributed("cuda")
    # the PPO trainer's: CPU objects (the checkpoints' object collectives) through gloo, CUDA tensors through NCCL
    # on this rank's GPU; the old code started "nccl" with no device set: cuda:0 on every rank
    assert calls == [("set_device", 1), ("init", "cpu:gloo,cuda:nccl")]
    assert (d.rank, d.world_size, d.local_rank) == (1, 2, 1)
    calls.clear()
    assert D.init_distributed("cpu").enabled and calls == [("init", "gloo")]  # the CPU's group is as it was


def test_rank_0_with_its_own_error_gives_the_others_time_to_reach_it(store, monkeypatch):
    import time

    from proxima import distributed

    monkeypatch.setattr(distributed, "_ENDS_WITH_COMMAND", True)
    monkeypatch.setattr(D.signal, "signal", lambda *a: None)  # this test process keeps its SIGTERM
    monkeypatch.setattr(D, "SAME_ERROR_WAIT", 1.0)
    store(_Store(others=1, after=0.4))  # rank 1 records its end 0.4 s after rank 0
    start = time.monotonic()
    assert isinstance(D.end_after_failure(Dist(0, 2, 0), ValueError("bad input")), ValueError)
    waited = time.monotonic() - start
    # rank 0's exit brings torchrun's teardown, which would end a rank on its way to the same error with the
    # lost-contact line instead of its quiet exit: rank 0 leaves once every rank has ended, or after the wait
    assert 0.35 <= waited < 0.9, waited
    store(_Store(failed=0))  # the other rank never ends by itself: the wait is bounded
    start = time.monotonic()
    D.end_after_failure(Dist(0, 2, 0), ValueError("bad input"))
    assert 0.95 <= time.monotonic() - start < 1.6


def test_a_steps_seconds_include_its_metrics_reduction(tmp_path, monkeypatch):
    import time

    reduce, steps = D.mean_across, []

    def slow_mean(values, d):  # a host sync that waits: stands for the slowest process's
        time.sleep(0.3)
        return reduce(values, d)

    step = RLHFTrainer.train_step

    def timed(self):
        start = time.perf_counter()
        out = step(self)
        steps.append((start, time.perf_counter()))
        return out

    monkeypatch.setattr(D, "mean_across", slow_mean)
    monkeypatch.setattr(RLHFTrainer, "train_step", timed)
    per_step, seconds = _three_steps(tmp_path, checkpoint_every=0)
    assert len(per_step) == len(steps) == 3
    # each step at least the wall time of its train_step measured out here (the old clock stopped before the
    # reduction: 0.3 s short a step), and the steps together the time from the first's start to the last's end
    for (start, end), got in zip(steps, per_step):
        assert got >= end - start - 0.05, (per_step, steps)
    assert abs(sum(per_step) - (steps[-1][1] - steps[0][0])) <= 0.1, (per_step, steps)
    assert abs(sum(per_step) - seconds) <= 0.002
