"""Prompts in, responses out: left padding, sampling with the KV cache, EOS and padding masks.

Prompts are left-padded so that every prompt ends at the same column P and the response starts at P
for the whole batch; position ids count real tokens only, so a padded prompt is scored exactly like
the same prompt unpadded.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def encode_prompts(tokenizer, prompts: list, max_prompt_length: int) -> list:
    """Token ids of each prompt (once per run), keeping the last ``max_prompt_length`` tokens.

    An empty prompt becomes [bos] (or [eos]) so that the model has something to condition on.
    """
    fallback = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    return [tokenizer(p, add_special_tokens=False)["input_ids"][-max_prompt_length:] or [fallback] for p in prompts]


def pad_left(token_ids: list, pad_token_id: int, device) -> tuple:
    """Left-padded token ids (B, P) long and attention mask (B, P) long from B lists of ids."""
    width = max(len(ids) for ids in token_ids)
    input_ids = torch.full((len(token_ids), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(token_ids), width), dtype=torch.long)
    for i, ids in enumerate(token_ids):
        input_ids[i, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
        attention_mask[i, width - len(ids):] = 1
    return input_ids.to(device), attention_mask.to(device)


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, L) 0/1 mask -> (B, L) positions counting real tokens (left padding gets position 0)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp_min(0)


@dataclass
class SamplingSettings:
    max_new_tokens: int
    temperature: float
    top_k: int
    top_p: float
    eos_token_id: int
    pad_token_id: int


@torch.no_grad()
def generate(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, s: SamplingSettings) -> torch.Tensor:
    """Sample responses (B, R), R <= max_new_tokens, padded with ``pad_token_id`` after EOS.

    Hugging Face ``generate`` with the KV cache: it stops once every row has emitted EOS and builds
    position ids from the attention mask. A full GenerationConfig is passed so that a checkpoint's own
    generation_config.json (repetition penalty, default top_k=50, ...) cannot change the sampling
    distribution that the log-probs assume.
    """
    from transformers import GenerationConfig

    gen_cfg = GenerationConfig(
        do_sample=True, max_new_tokens=s.max_new_tokens, min_new_tokens=0, temperature=s.temperature,
        top_k=s.top_k, top_p=s.top_p,  # top_k=0, not None: None would fall back to transformers' top_k=50 eos_token_id=s.eos_token_id,
        pad_token_id=s.pad_token_id, use_cache=True, num_beams=1, repetition_penalty=1.0,
    )
    out = model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=gen_cfg)
    return out[:, input_ids.shape[1]:]


def response_masks(responses: torch.Tensor, eos_token_id: int) -> tuple:
    """EOS bookkeeping of sampled responses (B, R).

    Returns mask (B, R) bool (tokens up to and including the first EOS, or all R when there is none),
    lengths (B,) long (>= 1) and has_eos (B,) bool. Tokens after the first EOS are padding whatever
    their id, so pad == eos (GPT-2's convention) needs no special case.
    """
    is_eos = responses == eos_token_id
    has_eos = is_eos.any(1)
    first_eos = torch.where(has_eos, is_eos.int().argmax(1), torch.full_like(has_eos, responses.shape[1] - 1, dtype=torch.long))
    lengths = first_eos + 1
    mask = torch.arange(responses.shape[1], device=responses.device)[None, :] < lengths[:, None]
    return mask, lengths, has_eos


def decode_responses(tokenizer, responses: torch.Tensor, lengths: torch.Tensor, has_eos: torch.Tensor) -> list:
    """Response texts for the reward: the tokens before EOS (EOS itself and padding dropped)."""
    keep = (lengths - has_eos.long()).tolist()
    rows = responses.tolist()
    return [tokenizer.decode(row[:n], skip_special_tokens=True) for row, n in zip(rows, keep)]
