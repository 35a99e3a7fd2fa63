"""Prompts in, responses out: left padding, sampling with the KV cache, EOS and padding masks.

Prompts are left-padded so that every prompt ends at the same column P and the response starts at P
for the whole batch; position ids count real tokens only, so a padded prompt is scored exactly like
the same prompt unpadded.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Sequence, Union

import torch

from .models import accepts_logits_to_keep


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
    eos_token_id: Union[int, Sequence[int]]  # every id that ends a response (the tokenizer's EOS, end-of-turn ids)
    pad_token_id: int


def _stop_ids(eos_token_id: Union[int, Sequence[int]], device) -> torch.Tensor:
    """The ids that end a response as a (K,) long tensor, for torch.isin."""
    ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
    return torch.tensor(ids, dtype=torch.long, device=device)


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Top-k then top-p (nucleus) filtering of temperature-scaled logits (B, V): removed tokens get -inf.

    Top-p keeps the smallest set of most likely tokens whose probability reaches ``top_p`` (at least one).
    The order, temperature -> top-k -> top-p, is transformers' ``generate`` order.
    """
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = probs.cumsum(-1) - probs  # probability of the tokens ranked above this one
        remove_sorted = mass_before >= top_p
        logits = logits.masked_fill(remove_sorted.scatter(-1, order, remove_sorted), float("-inf"))
    return logits


def sample(logits: torch.Tensor) -> torch.Tensor:
    """One token per row from softmax(logits) (B, V) -> (B,), by inverting the cumulative distribution.

    u ~ U[0, total mass) and the first token whose cumulative probability exceeds u, a tenth of
    ``torch.multinomial``'s cost on a CPU at this size (~1 ms a call there). ``right=True`` never
    lands on a token of probability 0, even at u = 0. The cumulative sum and u are float64: in
    float32 the steps near 1 are ~6e-8 (a float32 u takes multiples of 2^-24 only, and CUDA sums in
    float32), so with a 150k-token vocabulary tens of thousands of tail tokens (3e-4 of the mass
    together) could never be drawn while their log-probs said they could.
    """
    cdf = torch.softmax(logits.double(), dim=-1).cumsum(-1)
    u = torch.rand(cdf.shape[0], 1, device=cdf.device, dtype=torch.float64) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_max(cdf.shape[-1] - 1)


@functools.lru_cache(maxsize=None)
def _cache_argument(model_class: type) -> str:
    """transformers 5.x names the KV-cache argument ``cache``; 4.x ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


@torch.no_grad()
def generate(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, s: SamplingSettings,
             all_done=None) -> torch.Tensor:
    """Sample responses (B, R), R <= max_new_tokens, padded with ``pad_token_id`` after EOS.

    One prefill forward over the left-padded prompts, then one forward per token on the KV cache,
    with position ids that count real tokens only. Stops once every row has emitted EOS (any id of
    ``s.eos_token_id``, an int or a list). Samples from softmax(filter(logits / temperature)); training
    (RLHFConfig) allows no filter, so that this is the distribution the log-probs assume (a model's
    generation_config.json cannot slip in a repetition penalty or a default top-k either).

    ``all_done(done (B,) bool) -> bool`` decides the early stop; sharded (FSDP) models pass one that
    agrees across processes, since every process must run the same number of forwards.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cache_arg = _cache_argument(type(base))
    batch = input_ids.shape[0]
    position_ids = position_ids_from_mask(attention_mask)
    prefill = {"logits_to_keep": 1} if accepts_logits_to_keep(type(base)) else {}  # only the last position's logits
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True, **prefill)
    next_position = position_ids[:, -1:] + 1
    tokens = torch.full((batch, s.max_new_tokens), s.pad_token_id, dtype=torch.long, device=input_ids.device)
    done = torch.zeros(batch, dtype=torch.bool, device=input_ids.device)
    stop_ids = _stop_ids(s.eos_token_id, input_ids.device)
    # the mask of prompt + every response position, allocated once: step t passes a view of its first
    # P + t + 1 columns instead of concatenating a new mask every token
    prompt_width = attention_mask.shape[1]
    full_mask = torch.cat([attention_mask, attention_mask.new_ones((batch, s.max_new_tokens))], dim=1)
    for t in range(s.max_new_tokens):
        logits = filter_logits(out.logits[:, -1].float() / s.temperature, s.top_k, s.top_p)
        token = torch.where(done, s.pad_token_id, sample(logits))
        tokens[:, t] = token
        done |= torch.isin(token, stop_ids)
        # one host sync per token: negligible next to a forward
        if t == s.max_new_tokens - 1 or (all_done(done) if all_done else bool(done.all())):
            return tokens[:, :t + 1]
        cache = out.cache if cache_arg == "cache" else out.past_key_values
        out = model(input_ids=token[:, None], attention_mask=full_mask[:, :prompt_width + t + 1], position_ids=next_position,
                    use_cache=True, **{cache_arg: cache})
        next_position = next_position + 1
    return tokens


def response_masks(responses: torch.Tensor, eos_token_id: Union[int, Sequence[int]]) -> tuple:
    """EOS bookkeeping of sampled responses (B, R); ``eos_token_id`` is one id or the list of ids that end
    a response (an instruct model's end-of-turn token as well as its EOS).

    Returns mask (B, R) bool (tokens up to and including the first EOS, or all R when there is none),
    lengths (B,) long (>= 1) and has_eos (B,) bool. Tokens after the first EOS are padding whatever
    their id, so pad == eos (GPT-2's convention) needs no special case.
    """
    is_eos = torch.isin(responses, _stop_ids(eos_token_id, responses.device))
    has_eos = is_eos.any(1)
    first_eos = torch.where(has_eos, is_eos.int().argmax(1), torch.full_like(has_eos, responses.shape[1] - 1, dtype=torch.long))
    lengths = first_eos + 1
    mask = torch.arange(responses.shape[1], device=responses.device)[None, :] < lengths[:, None]
    return mask, lengths, has_eos


def response_token_lists(responses: torch.Tensor, lengths: torch.Tensor, has_eos: torch.Tensor) -> list:
    """Each response's token ids before EOS (EOS itself and padding dropped), as B lists."""
    keep = (lengths - has_eos.long()).tolist()
    return [row[:n] for row, n in zip(responses.tolist(), keep)]


def decode_responses(tokenizer, response_ids: list) -> list:
    """Response texts for reward functions: the tokens before EOS, special tokens dropped."""
    return [tokenizer.decode(ids, skip_special_tokens=True) for ids in response_ids]
