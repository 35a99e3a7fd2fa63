"""Released checkpoints: bf16-stored weights train in fp32, nothing loads with random or dropped
weights, and prompts plus new tokens must fit every model's positions."""

import json
import shutil

import pytest
import torch

from proxima.rlhf.__main__ import main
from proxima.rlhf.config import ConfigError
from proxima.rlhf.demo import build_tokenizer
from proxima.rlhf.trainer import RLHFTrainer
from rlhf_assets import save_gpt2, save_reward_model, word_tokenizer


def changed_fraction(model, initial: dict) -> float:
    changed = total = 0
    for name, p in model.named_parameters():
        changed += (p.detach().float() != initial[name]).sum().item()
        total += p.numel()
    return changed / total


# ---------------------------------------------------------------------------------------------
# item 1: bf16-stored checkpoints
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bf16_model(tmp_path_factory):
    # 3 prompt tokens + 6 new tokens: the model's 9 positions are all used, so every weight gets a gradient
    return save_gpt2(tmp_path_factory.mktemp("bf16") / "model", dtype=torch.bfloat16, n_positions=9)


@pytest.fixture(scope="module")
def fp16_model(tmp_path_factory):
    return save_gpt2(tmp_path_factory.mktemp("fp16") / "model", dtype=torch.float16, n_positions=9)


@pytest.mark.parametrize("stored, advantage", [("bf16", "gae"), ("bf16", "grpo"), ("fp16", "gae")])
def test_a_half_precision_stored_model_trains_fp32_master_weights_and_changes_nearly_every_weight(
        tiny_cfg, bf16_model, fp16_model, stored, advantage):
    model = bf16_model if stored == "bf16" else fp16_model
    cfg = tiny_cfg(policy=str(model), lr=1e-5, advantage=advantage, samples_per_prompt=2 if advantage == "grpo" else 1,
                   num_minibatches=1, update_epochs=1)
    t = RLHFTrainer(cfg)
    assert all(p.dtype == torch.float32 for p in t.policy.parameters())
    if t.value is not None:  # the head follows the backbone: no "mat1 and mat2 must have the same dtype"
        assert t.value.head.weight.dtype == torch.float32
    initial = {n: p.detach().float().clone() for n, p in t.policy.named_parameters()}
    t.train_step()
    assert changed_fraction(t.policy, initial) >= 0.99
    assert all(s["exp_avg"].dtype == torch.float32 for s in t.opt_policy.state.values())


def test_pure_bf16_weights_round_small_updates_away_which_is_why_float32_is_the_default(tiny_cfg, bf16_model):
    t = RLHFTrainer(tiny_cfg(policy=str(bf16_model), lr=1e-5, num_minibatches=1, update_epochs=1, dtype="bfloat16"))
    assert t.value.head.weight.dtype == torch.bfloat16  # and the value head follows the backbone here too
    initial = {n: p.detach().float().clone() for n, p in t.policy.named_parameters()}
    t.train_step()
    assert changed_fraction(t.policy, initial) < 0.5


def test_bf16_autocast_over_fp32_master_weights_trains_a_bf16_checkpoint(tiny_cfg, bf16_model):
    t = RLHFTrainer(tiny_cfg(policy=str(bf16_model), bf16=True))
    metrics, _ = t.train_step()
    assert all(v == v for v in metrics.values())
    assert next(t.policy.parameters()).dtype == torch.float32


# ---------------------------------------------------------------------------------------------
# item 2: loading never invents weights
# ---------------------------------------------------------------------------------------------
def run_cli(assets, tmp_path, capsys, *change):
    run_dir = tmp_path / "run"
    args = ["--policy", str(assets / "model"), "--prompts", str(assets / "prompts.txt"),
            "--reward", "proxima.rlhf.demo:keyword_sentiment", "--run-dir", str(run_dir), "--batch-size", "4",
            "--max-new-tokens", "4", "--steps", "1", "--print-every", "0"]
    for flag, value in zip(change[::2], change[1::2]):
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    code = main(args)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("proxima rlhf: error: "), err
    assert not run_dir.exists()
    return err


def test_a_reward_model_whose_head_has_another_name_is_refused_naming_the_keys(assets, tmp_path, capsys):
    rm = save_reward_model(tmp_path / "rm", head_name="classifier")
    err = run_cli(assets, tmp_path, capsys, "--reward", str(rm))
    assert "missing score.weight" in err and "unexpected classifier.weight" in err


def test_a_sequence_classification_directory_is_not_a_policy(assets, tmp_path, capsys):
    rm = save_reward_model(tmp_path / "rm")
    err = run_cli(assets, tmp_path, capsys, "--policy", str(rm))
    assert "--policy" in err and "unexpected score.weight" in err


def test_a_sharded_checkpoint_without_its_index_is_refused(assets, tmp_path, capsys):
    folder = save_gpt2(tmp_path / "sharded", max_shard_size="20KB")
    shards = sorted(p.name for p in folder.glob("model-*.safetensors"))
    assert len(shards) >= 2
    (folder / "model.safetensors.index.json").unlink()
    err = run_cli(assets, tmp_path, capsys, "--policy", str(folder))
    assert shards[0] in err and "index" in err


def test_a_lora_adapter_passed_as_the_policy_is_named_as_one(assets, tmp_path, capsys):
    """A LoRA run's policy/ (adapter_model.safetensors + adapter_config.json) is not a sharded checkpoint."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(assets / "model"),
                           LoraConfig(r=4, target_modules=["c_attn"], fan_in_fan_out=True, task_type="CAUSAL_LM"))
    model.save_pretrained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    err = run_cli(assets, tmp_path, capsys, "--policy", str(tmp_path / "adapter"))
    assert err == (f"proxima rlhf: error: --policy {str(tmp_path / 'adapter')!r}: a LoRA adapter (adapter_config.json), "
                   f"not a full model; pass its base model as --policy, or train with --merge-lora to release a full model")


def test_a_sharded_checkpoint_with_its_index_loads(tiny_cfg, tmp_path):
    folder = save_gpt2(tmp_path / "sharded", max_shard_size="20KB")
    whole = save_gpt2(tmp_path / "whole")
    a, b = RLHFTrainer(tiny_cfg(policy=str(folder))), RLHFTrainer(tiny_cfg(policy=str(whole)))
    assert all(torch.equal(x, y) for x, y in zip(a.policy.parameters(), b.policy.parameters()))


def test_a_directory_without_weights_is_an_error_and_a_config_file_is_the_way_to_random_weights(assets, tmp_path, capsys):
    folder = tmp_path / "config_only"
    folder.mkdir()
    shutil.copy(assets / "model" / "config.json", folder / "config.json")
    err = run_cli(assets, tmp_path, capsys, "--policy", str(folder))
    assert "no weights" in err and "config.json" in err


@pytest.mark.parametrize("role", ["--policy", "--reward"])
def test_a_corrupt_weight_file_is_one_line_naming_the_directory(assets, tmp_path, capsys, role):
    folder = save_gpt2(tmp_path / "corrupt") if role == "--policy" else save_reward_model(tmp_path / "corrupt")
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:200])
    err = run_cli(assets, tmp_path, capsys, role, str(folder))
    assert role in err and str(folder) in err


def test_a_generation_config_that_does_not_load_is_one_line_not_replaced_by_defaults(assets, tmp_path, capsys):
    """transformers replaces a generation_config.json it cannot parse with defaults from config.json: the
    instruct model's end-of-turn id would be dropped from the stop ids and from the released policy/."""
    from rlhf_assets import save_llama

    tok = word_tokenizer(extra_specials=["<|end|>"])
    end = tok.convert_tokens_to_ids("<|end|>")
    folder = save_llama(tmp_path / "instruct", tokenizer=tok, generation={"eos_token_id": [tok.eos_token_id, end]})
    text = (folder / "generation_config.json").read_text()
    (folder / "generation_config.json").write_text(text[: len(text) // 2])  # an interrupted copy
    err = run_cli(assets, tmp_path, capsys, "--policy", str(folder))
    assert err.startswith(f"proxima rlhf: error: --policy {str(folder)!r}: cannot load generation_config.json (OSError: ")
    assert err.endswith("restore it from the model's original files")


def test_a_config_file_with_a_mistyped_field_is_one_line_naming_the_field(assets, tmp_path, capsys):
    config = json.loads((assets / "model" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "n_embd": "x"}))
    err = run_cli(assets, tmp_path, capsys, "--policy", str(tmp_path / "config.json"), "--tokenizer", str(assets / "model"))
    assert err == (f"proxima rlhf: error: --policy {str(tmp_path / 'config.json')!r}: cannot build a causal LM: Validation "
                   f"error for field 'n_embd': TypeError: Field 'n_embd' expected int, got str (value: 'x')")


@pytest.mark.parametrize("model, field, value, what", [("gpt2", "vocab_size", 0, "tokens"), ("gpt2", "n_layer", -1, "layers"),
                                                        ("gpt2", "n_layer", 0, "layers"),
                                                        ("llama", "num_hidden_layers", -1, "layers"),
                                                        ("llama", "vocab_size", 0, "tokens")])
def test_a_config_file_without_tokens_or_layers_is_one_line_at_load_naming_the_field(model, field, value, what, assets,
                                                                                   llama_policy, tmp_path, capsys):
    """transformers builds these without complaint: a vocab_size 0 failed the causality probe with a
    ZeroDivisionError traceback, an n_layer -1 loaded and failed at the first rollout's KV cache, an
    n_layer 0 trained a model without layers."""
    folder = assets / "model" if model == "gpt2" else llama_policy
    config = json.loads((folder / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, field: value}))
    err = run_cli(assets, tmp_path, capsys, "--policy", str(tmp_path / "config.json"), "--tokenizer", str(assets / "model"))
    assert err == (f"proxima rlhf: error: --policy {str(tmp_path / 'config.json')!r}: \"{field}\" is {value}; a causal LM "
                   f"needs 1 or more {what}")


def test_a_config_file_whose_model_fails_a_forward_with_a_kv_cache_is_one_line_at_load(assets, tmp_path, capsys,
                                                                                     monkeypatch):
    """Whatever else a config gets wrong fails at load, as generation would run the model: here the
    negative layer count, with the check of the layer count (models._check_sizes) out of the way."""
    from proxima.rlhf import models

    monkeypatch.setattr(models, "_check_sizes", lambda config, fields: None)
    config = json.loads((assets / "model" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "n_layer": -1}))
    err = run_cli(assets, tmp_path, capsys, "--policy", str(tmp_path / "config.json"), "--tokenizer", str(assets / "model"))
    assert err.startswith(f"proxima rlhf: error: --policy {str(tmp_path / 'config.json')!r}: a forward pass on 2 tokens "
                          f"with a KV cache failed: ValueError: ")


def test_value_init_from_a_reward_model_needs_its_score_head(tiny_cfg, tmp_path):
    rm = save_reward_model(tmp_path / "rm", head_name="classifier")
    with pytest.raises(ConfigError, match="classifier.weight"):
        RLHFTrainer(tiny_cfg(reward=str(rm), value_init="reward"))


def test_value_init_reward_needs_the_same_vocabulary_not_just_as_many_tokens(assets, tmp_path, capsys):
    rm = save_reward_model(tmp_path / "rm", tokenizer=word_tokenizer(reverse=True))  # same size, other ids
    err = run_cli(assets, tmp_path, capsys, "--reward", str(rm), "--value-init", "reward")
    theirs, ours = word_tokenizer(reverse=True).get_vocab()["."], word_tokenizer().get_vocab()["."]
    assert err == (f"proxima rlhf: error: --value-init reward: the reward model's tokenizer ({rm}) and the policy's "
                   f"({assets / 'model'}) have different vocabularies (token '.' is id {theirs} in the reward model's, "
                   f"{ours} in the policy's); use --value-init policy")


def test_a_reward_tokenizer_larger_than_its_embedding_is_refused_before_anything_is_written(assets, tmp_path, capsys):
    rm = save_reward_model(tmp_path / "rm")
    word_tokenizer(extra_words=[f"extra{i}" for i in range(5)]).save_pretrained(rm)
    err = run_cli(assets, tmp_path, capsys, "--reward", str(rm))
    assert err == (f"proxima rlhf: error: --reward '{rm}': its tokenizer has 69 tokens but the model embeds only 64; "
                   f"the directory's tokenizer does not belong to its model")


@pytest.mark.parametrize("role", ["--policy", "--reward"])
def test_a_nan_stored_in_a_checkpoint_is_refused_at_load_naming_the_tensor(assets, tmp_path, capsys, role):
    from safetensors.torch import load_file, save_file

    folder = save_gpt2(tmp_path / "nan") if role == "--policy" else save_reward_model(tmp_path / "nan")
    state = load_file(folder / "model.safetensors")
    state["transformer.h.0.mlp.c_fc.weight"][0, :2] = torch.tensor([float("nan"), float("inf")])
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    err = run_cli(assets, tmp_path, capsys, role, str(folder))
    assert err == (f"proxima rlhf: error: {role} '{folder}': weight transformer.h.0.mlp.c_fc.weight holds 2 non-finite "
                   f"value(s) (NaN or inf); the checkpoint is damaged, use another copy")


# ---------------------------------------------------------------------------------------------
# item 6: positions
# ---------------------------------------------------------------------------------------------
def test_prompt_plus_new_tokens_beyond_the_policy_positions_is_refused_before_training(assets, tmp_path, capsys):
    # prompts are 3 tokens; the test model has 48 positions
    err = run_cli(assets, tmp_path, capsys, "--max-new-tokens", "46")
    assert "49" in err and "policy's 48 positions" in err


def test_prompt_plus_new_tokens_beyond_the_reward_model_positions_is_a_note(tiny_cfg, tmp_path, capsys):
    """The reward model cuts a longer input (RewardModel.fit, tests/rlhf/test_reward_models26.py): the
    run is told once, not refused (a response re-tokenized for another vocabulary has no bound to check)."""
    from transformers import GPT2Config, GPT2ForSequenceClassification

    tok = build_tokenizer()
    rm = GPT2ForSequenceClassification(GPT2Config(vocab_size=len(tok), n_positions=8, n_embd=16, n_layer=1, n_head=2,
                                                   num_labels=1, pad_token_id=tok.pad_token_id))
    rm.save_pretrained(tmp_path / "rm")
    tok.save_pretrained(tmp_path / "rm")
    RLHFTrainer(tiny_cfg(reward=str(tmp_path / "rm"), max_new_tokens=6))
    err = capsys.readouterr().err
    assert "proxima rlhf: note: --max-new-tokens 6: prompt line 1 is 3 tokens for the reward model" in err, err
    assert "more than its 8 positions; longer inputs lose the prompt's beginning" in err, err
    RLHFTrainer(tiny_cfg(reward=str(tmp_path / "rm"), max_new_tokens=5))  # 3 + 5 = 8 fits
    assert "note" not in capsys.readouterr().err


def test_a_prompt_longer_than_max_prompt_length_is_refused_unless_truncation_is_asked_for(tiny_cfg):
    with pytest.raises(ConfigError, match=":1: 3 tokens, more than --max-prompt-length 2"):
        RLHFTrainer(tiny_cfg(max_prompt_length=2))
    t = RLHFTrainer(tiny_cfg(max_prompt_length=2, truncate_prompts=True))
    assert max(len(ids) for ids in t.prompt_ids) == 2
