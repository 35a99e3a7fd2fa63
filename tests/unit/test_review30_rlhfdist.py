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
    assert str(line) == ("rank 1 stopped: lost contact with another rank (it failed or was stopped; its own line says "
                         f"why): RuntimeError: {GLOO}")
    timeout = D.lost_contact(RuntimeError("[../gloo/transport/tcp/pair.cc:446] Timed out waiting 1800000ms for recv"),
                             Dist(0, 2, 0))
    assert str(timeout).startswith("rank 0 stopped: rank 1 did not reach the same collective within the process "
                                   "group's timeout")
    assert D.lost_contact(RuntimeError(GLOO), Dist()) is None  # one process has no peer to lose
    assert D.lost_contact(RuntimeError("mat1 and mat2 shapes cannot be multiplied"), Dist(0, 2, 0)) is None
    assert D.lost_contact(OSError(32, "Broken pipe"), Dist(0, 2, 0)) is None  # stdout's, not a peer's
    assert D.end_after_failure(Dist(), ValueError("x")).args == ("x",)


def test_one_process_seconds_add_up_to_the_runs(tmp_path):
    from rlhf_assets import save_gpt2

    from proxima.rlhf import train_rlhf
    from proxima.rlhf.demo import prompts_list
    from proxima.rlhf.rundir import read_metrics

    save_gpt2(tmp_path / "model")
    (tmp_path / "prompts.txt").write_text("\n".join(prompts_list()) + "\n")
    run = train_rlhf(RLHFConfig(policy=str(tmp_path / "model"), prompts=str(tmp_path / "prompts.txt"),
                                reward="proxima.rlhf.demo:keyword_sentiment", batch_size=4, num_minibatches=2,
                                max_new_tokens=4, steps=3, print_every=0, checkpoint_every=1, plot=False,
                                run_dir=str(tmp_path / "run"), threads=1))
    per_step = read_metrics(run)["charts/seconds_per_step"]
    seconds = json.loads((run / "summary.json").read_text())["seconds"]
    assert len(per_step) == 3 and abs(sum(per_step) - seconds) <= 0.002, (per_step, seconds)
