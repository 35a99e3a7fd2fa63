"""torchrun: two CPU processes (gloo), each with its own prompts, finish with identical parameters."""

import json
import os
import subprocess
import sys

import yaml


def test_two_processes_train_data_parallel_and_stay_in_sync(assets, tmp_path):
    run_dir = tmp_path / "ddp"
    cfg = {"policy": str(assets / "model"), "prompts": str(assets / "prompts.txt"),
           "reward": "proxima.rlhf.demo:keyword_sentiment", "batch_size": 4, "num_minibatches": 2, "micro_batch_size": 1,
           "update_epochs": 1, "max_new_tokens": 4, "steps": 2, "lr": 1e-3, "print_every": 0, "sample_every": 1,
           "run_dir": str(run_dir)}
    (tmp_path / "ddp.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "proxima.rlhf", "--config", str(tmp_path / "ddp.yaml")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 2
    checksums = summary["param_checksums"]
    assert len(checksums) == 2 and checksums[0] == checksums[1] and summary["ranks_in_sync"]
    # each process drew its own prompts: rank 0 logs its samples, which come from its even-indexed shard
    prompts = (assets / "prompts.txt").read_text().splitlines()
    logged = [json.loads(line)["prompt"] for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert all(prompts.index(p) % 2 == 0 for p in logged)
