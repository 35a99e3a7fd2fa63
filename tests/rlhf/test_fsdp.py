"""FSDP2 under torchrun: two CPU processes (gloo) each hold half the parameters, train like data
parallelism, and a sharded run checkpoints and resumes."""

import json
import os
import subprocess
import sys

import pytest
import torch
import yaml

from proxima.rlhf.rundir import list_checkpoints, load_checkpoint


def torchrun(*args):
    """``torchrun --nproc-per-node 2 -m ARGS`` on CPU; fails the test with the stderr tail."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", *args], capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]


def train(tmp_path, name, cfg):
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    torchrun("proxima.rlhf", "--config", str(tmp_path / f"{name}.yaml"))


def base_cfg(assets, run_dir, **overrides):
    cfg = {"policy": str(assets / "model"), "prompts": str(assets / "prompts.txt"),
           "reward": "proxima.rlhf.demo:keyword_sentiment", "batch_size": 4, "num_minibatches": 2, "micro_batch_size": 1,
           "update_epochs": 1, "max_new_tokens": 4, "steps": 2, "lr": 1e-3, "print_every": 0, "sample_every": 1,
           "checkpoint_every": 1, "plot": False, "run_dir": str(run_dir)}
    cfg.update(overrides)
    return cfg


def test_fsdp_holds_half_the_parameters_per_process_and_trains_like_data_parallel(assets, tmp_path):
    train(tmp_path, "fsdp", base_cfg(assets, tmp_path / "fsdp", fsdp=True))
    train(tmp_path, "ddp", base_cfg(assets, tmp_path / "ddp"))
    summary = json.loads((tmp_path / "fsdp" / "summary.json").read_text())
    assert summary["fsdp"] and summary["ranks_in_sync"] and summary["steps"] == 2
    full, per_rank = summary["param_numel_full"], summary["param_numel_per_rank"]
    assert len(per_rank) == 2 and all(0.49 * full <= n <= 0.52 * full for n in per_rank), (full, per_rank)
    ddp = json.loads((tmp_path / "ddp" / "summary.json").read_text())
    assert ddp["param_numel_per_rank"] == [full, full]
    # the same steps as data parallelism, up to float rounding (the gradient norm is summed per shard)
    a, b = (load_checkpoint(list_checkpoints(tmp_path / r)[-1]) for r in ("fsdp", "ddp"))
    for part in ("policy", "value"):
        assert a[part].keys() == b[part].keys()
        for k in a[part]:
            torch.testing.assert_close(a[part][k], b[part][k], rtol=1e-4, atol=1e-5)
    # the saved policy is a plain, unsharded Hugging Face model
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(tmp_path / "fsdp" / "policy")
    torch.testing.assert_close(policy.transformer.h[0].mlp.c_fc.weight, a["policy"]["transformer.h.0.mlp.c_fc.weight"])


@pytest.mark.slow
def test_a_sharded_run_resumes_sharded_bit_identically(assets, tmp_path):
    train(tmp_path, "straight", base_cfg(assets, tmp_path / "straight", fsdp=True, steps=3))
    train(tmp_path, "halted", base_cfg(assets, tmp_path / "halted", fsdp=True, steps=2))
    torchrun("proxima", "resume", str(tmp_path / "halted"), "--steps", "3")
    a, b = (load_checkpoint(list_checkpoints(tmp_path / r)[-1]) for r in ("straight", "halted"))
    assert a["step"] == b["step"] == 3
    for part in ("policy", "value"):
        assert all(torch.equal(a[part][k], b[part][k]) for k in a[part])


def test_fsdp_without_torchrun_is_one_line(tiny_cfg):
    from proxima.rlhf.config import ConfigError
    from proxima.rlhf.trainer import RLHFTrainer

    with pytest.raises(ConfigError, match="--fsdp .* torchrun"):
        RLHFTrainer(tiny_cfg(fsdp=True))
