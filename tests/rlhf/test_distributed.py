"""torchrun: two CPU processes (gloo), each with its own prompts, finish with identical parameters."""

import json


def test_two_processes_train_data_parallel_and_stay_in_sync(assets, ddp_run):
    summary = json.loads((ddp_run / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 2
    checksums = summary["param_checksums"]
    assert len(checksums) == 2 and checksums[0] == checksums[1] and summary["ranks_in_sync"]
    # each process drew its own prompts: rank 0 logs its samples, which come from its even-indexed shard
    prompts = (assets / "prompts.txt").read_text().splitlines()
    logged = [json.loads(line)["prompt"] for line in (ddp_run / "samples.jsonl").read_text().splitlines()]
    assert all(prompts.index(p) % 2 == 0 for p in logged)
