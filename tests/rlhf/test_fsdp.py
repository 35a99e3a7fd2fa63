"""FSDP2 under torchrun: two CPU processes (gloo) each hold half the parameters, train like data
parallelism, and a sharded run checkpoints and resumes."""

import json

import pytest
import torch

from proxima.rlhf.rundir import list_checkpoints, load_checkpoint


def test_fsdp_holds_half_the_parameters_per_process_and_trains_like_data_parallel(assets, ddp_run, tmp_path,
                                                                                  two_processes):
    _, two_process_config, train_two_processes = two_processes
    run_dir = train_two_processes(tmp_path, "fsdp", two_process_config(assets, tmp_path / "fsdp", fsdp=True))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["fsdp"] and summary["ranks_in_sync"] and summary["steps"] == 2
    full, per_rank = summary["param_numel_full"], summary["param_numel_per_rank"]
    assert len(per_rank) == 2 and all(0.49 * full <= n <= 0.52 * full for n in per_rank), (full, per_rank)
    assert json.loads((ddp_run / "summary.json").read_text())["param_numel_per_rank"] == [full, full]
    # the same steps as data parallelism, up to float rounding (the gradient norm is summed per shard)
    a, b = (load_checkpoint(list_checkpoints(r)[-1]) for r in (run_dir, ddp_run))
    for part in ("policy", "value"):
        assert a[part].keys() == b[part].keys()
        for k in a[part]:
            torch.testing.assert_close(a[part][k], b[part][k], rtol=1e-4, atol=1e-5)
    # the saved policy is a plain, unsharded Hugging Face model
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(run_dir / "policy")
    torch.testing.assert_close(policy.transformer.h[0].mlp.c_fc.weight, a["policy"]["transformer.h.0.mlp.c_fc.weight"])


@pytest.mark.slow
def test_a_sharded_run_resumes_sharded_bit_identically(assets, tmp_path, two_processes):
    torchrun, two_process_config, train_two_processes = two_processes
    straight = train_two_processes(tmp_path, "straight", two_process_config(assets, tmp_path / "straight", fsdp=True, steps=3))
    halted = train_two_processes(tmp_path, "halted", two_process_config(assets, tmp_path / "halted", fsdp=True))
    torchrun("proxima", "resume", str(halted), "--steps", "3")
    a, b = (load_checkpoint(list_checkpoints(r)[-1]) for r in (straight, halted))
    assert a["step"] == b["step"] == 3
    for part in ("policy", "value"):
        assert all(torch.equal(a[part][k], b[part][k]) for k in a[part])


def test_the_unsharded_policy_keeps_the_generation_config_and_the_config_as_given(tmp_path):
    """policy/ of a sharded run is a fresh model of the policy's class: it must still carry the checkpoint's
    generation_config.json (end-of-turn ids, sampling defaults) and the dropout it was given."""
    from proxima.rlhf.loop import _save_unsharded
    from proxima.rlhf.models import load_policy
    from rlhf_assets import save_llama

    generation = {"eos_token_id": [2, 3], "do_sample": True, "temperature": 0.6, "top_p": 0.9}
    source = save_llama(tmp_path / "m", attention_dropout=0.25, generation=generation)
    model, _ = load_policy(str(source), seed=0)
    _save_unsharded(model, model.state_dict(), tmp_path / "policy")
    saved = json.loads((tmp_path / "policy" / "generation_config.json").read_text())
    assert saved == json.loads((source / "generation_config.json").read_text())
    assert {k: saved[k] for k in generation} == generation
    assert json.loads((tmp_path / "policy" / "config.json").read_text())["attention_dropout"] == 0.25


def test_fsdp_without_torchrun_is_one_line(tiny_cfg):
    from proxima.rlhf.config import ConfigError
    from proxima.rlhf.trainer import RLHFTrainer

    with pytest.raises(ConfigError, match="--fsdp .* torchrun"):
        RLHFTrainer(tiny_cfg(fsdp=True))
