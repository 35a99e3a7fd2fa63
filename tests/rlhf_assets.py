"""Tiny Hugging Face checkpoints written to disk for the RLHF tests (offline, seconds to build).

A module of its own, not a conftest: tests/ and tests/rlhf/ both have a conftest, and
`from conftest import ...` would pick whichever was imported first (as distributed_helpers.py)."""

import torch

from proxima.rlhf.demo import build_model, build_tokenizer


def save_gpt2(folder, dtype=torch.float32, n_positions=48, seed=0, **save_kwargs):
    tok = build_tokenizer()
    model = build_model(tok, n_layer=1, n_embd=32, n_head=2, n_positions=n_positions, seed=seed).to(dtype)
    model.save_pretrained(folder, **save_kwargs)
    tok.save_pretrained(folder)
    return folder


def save_reward_model(folder, head_name="score"):
    from safetensors.torch import save_file
    from transformers import GPT2Config, GPT2ForSequenceClassification

    tok = build_tokenizer()
    torch.manual_seed(3)
    model = GPT2ForSequenceClassification(GPT2Config(vocab_size=len(tok), n_positions=48, n_embd=32, n_layer=1,
                                                     n_head=2, num_labels=1, pad_token_id=tok.pad_token_id))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    if head_name != "score":  # a checkpoint whose head has another name than transformers' class expects
        state = {k.replace("score.", f"{head_name}."): v.contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder
