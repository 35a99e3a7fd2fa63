"""policy/ as a release: the trained lm_head of an untied policy (also under --fsdp), the tokenizer files as the
source holds them, and the source's stored dtype (--release-dtype)."""

import json

import pytest
import torch
import yaml
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from proxima.rlhf import loop
from proxima.rlhf.rundir import list_checkpoints, load_checkpoint
from proxima.rlhf.trainer import RLHFTrainer


def stored_dtypes(folder):
    found = {}
    for f in folder.glob("*.safetensors"):
        with safe_open(str(f), "pt") as h:
            found.update({k: h.get_slice(k).get_dtype() for k in h.keys()})
    return found


def release(t, tmp_path):
    (tmp_path / "run").mkdir()
    loop._save_policy(t, None, tmp_path / "run")
    return tmp_path / "run" / "policy"


# ----------------------------------------------------------------------------------------------------------------
# dtype
# ----------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stored, release_dtype, released", [
    (torch.bfloat16, "auto", ("BF16", "bfloat16")), (torch.float32, "auto", ("F32", "float32")),
    (torch.bfloat16, "float32", ("F32", "float32")), (torch.float32, "float16", ("F16", "float16"))])
def test_the_release_is_in_the_stored_dtype_unless_release_dtype_says_otherwise(tiny_cfg, tmp_path, stored,
                                                                                release_dtype, released):
    from transformers import AutoModelForCausalLM

    from rlhf_assets import save_gpt2

    source = save_gpt2(tmp_path / "m", dtype=stored)
    t = RLHFTrainer(tiny_cfg(policy=str(source), release_dtype=release_dtype))
    assert next(t.policy.parameters()).dtype == torch.float32  # fp32 master weights whatever the release
    policy = release(t, tmp_path)
    assert set(stored_dtypes(policy).values()) == {released[0]}
    assert json.loads((policy / "config.json").read_text())["dtype"] == released[1]
    assert str(t.policy.config.dtype).removeprefix("torch.") == "float32"  # the trained model's config is left as it was
    loaded = AutoModelForCausalLM.from_pretrained(policy)
    trained = dict(t.policy.named_parameters())["transformer.h.0.mlp.c_fc.weight"]
    assert torch.equal(loaded.transformer.h[0].mlp.c_fc.weight, trained.detach().to(loaded.dtype))


def test_the_unsharded_release_is_in_the_dtype_asked_for(tmp_path):
    from proxima.rlhf.models import load_policy
    from rlhf_assets import save_llama

    model, _ = load_policy(str(save_llama(tmp_path / "m")), seed=0)
    loop._save_unsharded(model, model.state_dict(), tmp_path / "policy", torch.bfloat16)
    assert set(stored_dtypes(tmp_path / "policy").values()) == {"BF16"}
    assert json.loads((tmp_path / "policy" / "config.json").read_text())["dtype"] == "bfloat16"


# ----------------------------------------------------------------------------------------------------------------
# tokenizer files
# ----------------------------------------------------------------------------------------------------------------
TEMPLATE = "{% for m in messages %}{{ m['content'] }} [EOS] {% endfor %}"


def four_x_tokenizer(folder):
    """A tokenizer folder as transformers 4.x writes one: the chat template inside tokenizer_config.json,
    tokenizer_class PreTrainedTokenizerFast, special_tokens_map.json, no pad token."""
    from rlhf_assets import word_tokenizer

    word_tokenizer(pad=False).backend_tokenizer.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "[EOS]", "unk_token": "[UNK]",
              "model_max_length": 48, "padding_side": "right", "clean_up_tokenization_spaces": False,
              "chat_template": TEMPLATE}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (folder / "special_tokens_map.json").write_text(json.dumps({"eos_token": "[EOS]", "unk_token": "[UNK]"}) + "\n")
    return ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def test_the_released_tokenizer_files_are_the_sources_bytes(tiny_cfg, tmp_path):
    from transformers import AutoTokenizer

    from rlhf_assets import save_gpt2

    source = save_gpt2(tmp_path / "m")
    for f in source.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            f.unlink()
    names = four_x_tokenizer(source)
    t = RLHFTrainer(tiny_cfg(policy=str(source)))
    # changed (a deep copy of the tokenizer would copy the bytes too): the trainer pads its own copy
    assert t.tokenizer.pad_token == "[EOS]" and t.tokenizer_as_loaded.pad_token is None
    policy = release(t, tmp_path)
    for name in names:
        assert (policy / name).read_bytes() == (source / name).read_bytes(), name
    assert not (policy / "chat_template.jinja").exists()
    tok = AutoTokenizer.from_pretrained(policy)
    assert tok.chat_template == TEMPLATE and tok.pad_token is None and tok.padding_side == "right"
    assert tok("the movie was").input_ids == t.tokenizer_as_loaded("the movie was").input_ids


def test_the_tokenizer_is_read_when_the_run_starts_not_when_it_ends(tiny_cfg, tmp_path):
    """A source folder changed during the run (a resume days later) does not change the release."""
    from rlhf_assets import save_gpt2

    source = save_gpt2(tmp_path / "m")
    before = (source / "tokenizer_config.json").read_bytes()
    t = RLHFTrainer(tiny_cfg(policy=str(source)))
    (source / "tokenizer_config.json").write_text("{}")
    assert (release(t, tmp_path) / "tokenizer_config.json").read_bytes() == before


def test_a_tokenizer_changed_after_loading_is_saved_as_it_is(tiny_cfg, tmp_path):
    from transformers import AutoTokenizer

    from rlhf_assets import save_gpt2

    t = RLHFTrainer(tiny_cfg(policy=str(save_gpt2(tmp_path / "m"))))
    t.tokenizer_as_loaded.chat_template = TEMPLATE  # the source's bytes no longer say what it holds
    assert AutoTokenizer.from_pretrained(release(t, tmp_path)).chat_template == TEMPLATE


# ----------------------------------------------------------------------------------------------------------------
# tied embeddings
# ----------------------------------------------------------------------------------------------------------------
def save_tied_config_own_head(folder):
    """A Llama whose config says tie_word_embeddings true but that stores an lm_head of its own (transformers
    loads it untied)."""
    from rlhf_assets import save_llama

    save_llama(folder, tie_word_embeddings=True)
    state = load_file(str(folder / "model.safetensors"))
    torch.manual_seed(9)
    state["lm_head.weight"] = torch.randn_like(state["model.embed_tokens.weight"])
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder, state["lm_head.weight"]


def test_an_untied_policy_keeps_its_lm_head_in_the_unsharded_release(tmp_path):
    from transformers import AutoModelForCausalLM

    from proxima.rlhf.models import load_policy

    source, head = save_tied_config_own_head(tmp_path / "m")
    model, _ = load_policy(str(source), seed=0)
    assert not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    loop._save_unsharded(model, model.state_dict(), tmp_path / "policy")
    assert json.loads((tmp_path / "policy" / "config.json").read_text())["tie_word_embeddings"] is False
    assert torch.equal(load_file(str(tmp_path / "policy" / "model.safetensors"))["lm_head.weight"], head)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "policy")
    assert torch.equal(loaded.lm_head.weight, head)


def test_a_tied_policy_stays_tied_in_the_unsharded_release(tmp_path):
    from transformers import AutoModelForCausalLM

    from proxima.rlhf.models import load_policy
    from rlhf_assets import save_llama

    model, _ = load_policy(str(save_llama(tmp_path / "m", tie_word_embeddings=True)), seed=0)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    loop._save_unsharded(model, model.state_dict(), tmp_path / "policy")
    assert json.loads((tmp_path / "policy" / "config.json").read_text())["tie_word_embeddings"] is True
    assert "lm_head.weight" not in load_file(str(tmp_path / "policy" / "model.safetensors"))
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "policy")
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_fsdp_releases_the_trained_lm_head_of_an_untied_policy(assets, tmp_path, two_processes):
    _, two_process_config, train_two_processes = two_processes
    source, _ = save_tied_config_own_head(tmp_path / "m")
    cfg = two_process_config(assets, tmp_path / "fsdp", fsdp=True, policy=str(source), steps=1, advantage="grpo",
                             samples_per_prompt=2)
    run = train_two_processes(tmp_path, "fsdp", cfg)
    trained = load_checkpoint(list_checkpoints(run)[-1])["policy"]
    released = load_file(str(run / "policy" / "model.safetensors"))
    assert not torch.equal(trained["lm_head.weight"], trained["model.embed_tokens.weight"])
    assert torch.equal(released["lm_head.weight"], trained["lm_head.weight"])
    assert json.loads((run / "policy" / "config.json").read_text())["tie_word_embeddings"] is False
    assert yaml.safe_load((run / "config.yaml").read_text())["release_dtype"] == "auto"
