"""EOS and padding masks; left-padded prompts are scored like unpadded ones; end-of-turn ids end responses."""

import torch

from proxima.rlhf.generation import (SamplingSettings, generate, pad_left, position_ids_from_mask,
                                     response_masks)
from proxima.rlhf.models import load_policy, load_tokenizer, response_logits, token_logprobs
from proxima.rlhf.trainer import RLHFTrainer
from rlhf_assets import save_llama, word_tokenizer

EOS, PAD = 2, 0


def test_response_mask_stops_at_the_first_eos_inclusive():
    responses = torch.tensor([[5, 6, EOS, 7, EOS], [EOS, 5, 5, 5, 5], [5, 6, 7, 8, 9]])
    mask, lengths, has_eos = response_masks(responses, EOS)
    assert lengths.tolist() == [3, 1, 5]
    assert has_eos.tolist() == [True, True, False]
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]]


def test_pad_equal_to_eos_needs_no_special_case():
    responses = torch.tensor([[5, EOS, EOS, EOS]])  # GPT-2 style: padding after EOS is EOS again
    mask, lengths, has_eos = response_masks(responses, EOS)
    assert lengths.tolist() == [2] and has_eos.all() and mask.tolist() == [[1, 1, 0, 0]]


def test_a_response_ends_at_the_first_of_several_stop_ids():
    END_OF_TURN = 7
    responses = torch.tensor([[5, 6, END_OF_TURN, EOS], [5, EOS, END_OF_TURN, 5], [5, 6, 6, 6]])
    mask, lengths, has_eos = response_masks(responses, [EOS, END_OF_TURN])
    assert lengths.tolist() == [3, 2, 4] and has_eos.tolist() == [True, True, False]
    assert mask.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]


def test_an_end_of_turn_id_in_generation_config_ends_responses_without_the_missing_eos_penalty(tiny_cfg, tmp_path):
    """A Gemma-2-it-like checkpoint: the tokenizer's EOS is [EOS], a turn ends with <eot>, and
    generation_config.json lists both; the model answers <eot> at once."""
    tok = word_tokenizer(extra_specials=["<eot>"])
    eot = tok.convert_tokens_to_ids("<eot>")
    policy = save_llama(tmp_path / "it", tok, always=eot, generation={"eos_token_id": [tok.eos_token_id, eot]})
    t = RLHFTrainer(tiny_cfg(policy=str(policy)))
    b = t.rollout()
    assert b["responses"].shape == (8, 1) and (b["responses"] == eot).all()  # generation stopped after one token
    assert b["lengths"].tolist() == [1] * 8 and b["has_eos"].all()
    assert b["scores"].tolist() == [0.0] * 8  # an empty response scores 0, with no -1 missing-EOS penalty
    assert t.stop_ids == sorted([tok.eos_token_id, eot])


def test_a_tokenizer_whose_eos_the_policy_does_not_list_is_warned_about_in_one_line(tiny_cfg, tmp_path, capsys):
    tok = word_tokenizer(extra_specials=["<eot>"])
    eot = tok.convert_tokens_to_ids("<eot>")
    policy = save_llama(tmp_path / "m", tok, eos_token_id=eot, generation={"eos_token_id": eot})
    t = RLHFTrainer(tiny_cfg(policy=str(policy)))
    err = capsys.readouterr().err.strip()
    assert err == (f"proxima rlhf: warning: tokenizer {policy}: its EOS '[EOS]' (id {tok.eos_token_id}) is not among "
                   f"the policy's end-of-sequence ids [{eot}] (config.json, generation_config.json); responses end "
                   f"only at '[EOS]'; check that the tokenizer belongs to the policy")
    assert t.stop_ids == [tok.eos_token_id]  # the policy's ids may be ordinary tokens of a foreign tokenizer
    RLHFTrainer(tiny_cfg())  # a policy and its own tokenizer: no warning
    assert capsys.readouterr().err == ""


def test_pad_left_and_position_ids_count_real_tokens_only():
    ids, am = pad_left([[7, 8, 9], [5]], PAD, "cpu")
    assert ids.tolist() == [[7, 8, 9], [PAD, PAD, 5]]
    assert am.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert position_ids_from_mask(am).tolist() == [[0, 1, 2], [0, 0, 0]]


def test_left_padded_prompt_scores_exactly_like_the_unpadded_prompt(assets):
    model, _ = load_policy(str(assets / "model"), seed=0)
    model.eval()
    short, long_ = [10, 11], [12, 13, 14, 15, 16]
    response = torch.tensor([[20, 21, 22]])
    ids, am = pad_left([short, long_], PAD, "cpu")
    full = torch.cat([ids, response.expand(2, 3)], 1)
    full_am = torch.cat([am, torch.ones(2, 3, dtype=torch.long)], 1)
    with torch.no_grad():
        padded = token_logprobs(response_logits(model, full, full_am, position_ids_from_mask(full_am), 3, 0.7), response.expand(2, 3))
        alone_ids = torch.cat([torch.tensor([short]), response], 1)
        alone_am = torch.ones_like(alone_ids)
        alone = token_logprobs(response_logits(model, alone_ids, alone_am, position_ids_from_mask(alone_am), 3, 0.7), response)
    torch.testing.assert_close(padded[0], alone[0], rtol=1e-5, atol=1e-5)


def test_generation_pads_after_eos_and_stops_when_every_row_is_done(assets):
    model, _ = load_policy(str(assets / "model"), seed=0)
    tok = load_tokenizer(str(assets / "model"))
    eos = tok.eos_token_id
    row_bias = torch.zeros(2, len(tok))
    row_bias[0, eos], row_bias[1, eos] = 50.0, -1e9  # row 0 ends at once, row 1 never does

    def bias_eos(module, inputs, logits):
        return logits + row_bias[:, None, :]

    s = SamplingSettings(max_new_tokens=7, temperature=1.0, top_k=0, top_p=1.0, eos_token_id=eos, pad_token_id=tok.pad_token_id)
    ids, am = pad_left([[10, 11], [12]], tok.pad_token_id, "cpu")
    handle = model.lm_head.register_forward_hook(bias_eos)
    responses = generate(model.eval(), ids, am, s)
    mask, lengths, has_eos = response_masks(responses, eos)
    assert responses.shape == (2, 7) and lengths.tolist() == [1, 7] and has_eos.tolist() == [True, False]
    assert responses[0, 0] == eos and (responses[0, 1:] == tok.pad_token_id).all()
    row_bias[1, eos] = 50.0  # now both end at once: generation stops after one token
    assert generate(model, ids, am, s).shape == (2, 1)
    handle.remove()


def test_top_k_zero_samples_the_whole_vocabulary_and_top_k_restricts_it(assets):
    model, _ = load_policy(str(assets / "model"), seed=0)
    tok = load_tokenizer(str(assets / "model"))
    vocab = len(tok)
    assert vocab > 60  # more than transformers' default top_k=50, which top_k=0 must not fall back to
    nearly_uniform = -0.01 * torch.arange(vocab, dtype=torch.float32)  # distinct values: top-k has no ties to keep
    handle = model.lm_head.register_forward_hook(lambda m, i, logits: nearly_uniform.expand_as(logits).clone())
    ids, am = pad_left([[10, 11]] * 64, tok.pad_token_id, "cpu")
    seen = {}
    for k in (0, 5):
        torch.manual_seed(0)
        s = SamplingSettings(max_new_tokens=8, temperature=1.0, top_k=k, top_p=1.0, eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id)
        seen[k] = len(set(generate(model.eval(), ids, am, s)[:, :4].flatten().tolist()) - {tok.pad_token_id})
    handle.remove()
    assert seen[0] > 50 and seen[5] <= 5


def test_fused_gelu_computes_gpt2s_gelu_new():
    from transformers.activations import NewGELUActivation

    from proxima.rlhf.models import TanhGELU

    x = torch.linspace(-6, 6, 1001)
    torch.testing.assert_close(TanhGELU()(x), NewGELUActivation()(x), rtol=1e-6, atol=1e-6)


def test_top_p_keeps_the_smallest_set_that_reaches_p():
    from proxima.rlhf.generation import filter_logits

    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(filter_logits(logits, 0, 0.7))
    assert kept.tolist() == [[True, True, False, False]]  # 0.5 < 0.7 <= 0.5 + 0.3
    assert torch.isfinite(filter_logits(logits, 0, 0.5)).tolist() == [[True, False, False, False]]
    assert torch.isfinite(filter_logits(logits, 2, 1.0)).tolist() == [[True, True, False, False]]


def test_sampling_follows_the_softmax_and_never_picks_a_filtered_token():
    from proxima.rlhf.generation import sample

    torch.manual_seed(0)
    probs = torch.tensor([0.6, 0.25, 0.1, 0.05])
    draws = sample(probs.log().expand(200_000, 4).contiguous())
    torch.testing.assert_close(torch.bincount(draws, minlength=4) / 200_000.0, probs, atol=0.005, rtol=0)
    filtered = torch.tensor([[float("-inf"), 0.0, float("-inf"), 0.0, float("-inf")]]).expand(50_000, 5)
    assert set(sample(filtered.contiguous()).tolist()) == {1, 3}


def test_cached_generation_picks_what_a_full_forward_scores_highest(assets):
    """The KV-cache loop and the training forward see the same model: near-zero temperature makes
    sampling an argmax, which must agree with the logits of one full forward over left-padded prompts."""
    model, _ = load_policy(str(assets / "model"), seed=0)
    model.eval()
    tok = load_tokenizer(str(assets / "model"))
    ids, am = pad_left([[10, 11, 12, 13], [14], [15, 16]], tok.pad_token_id, "cpu")
    s = SamplingSettings(max_new_tokens=6, temperature=1e-4, top_k=0, top_p=1.0, eos_token_id=-1, pad_token_id=tok.pad_token_id)
    responses = generate(model, ids, am, s)
    full = torch.cat([ids, responses], 1)
    full_am = torch.cat([am, torch.ones_like(responses)], 1)
    with torch.no_grad():
        logits = response_logits(model, full, full_am, position_ids_from_mask(full_am), responses.shape[1], 1.0)
    assert torch.equal(logits.argmax(-1), responses)


def test_tail_tokens_below_float32_spacing_can_be_sampled():
    """Tokens 1 and 2 hold ~1e-9 each. A float32 uniform draw takes multiples of 2^-24 (~6e-8) only,
    so a draw meant to fall on token 1 rounds to 1.0 and lands on the last token: here torch.rand
    is replaced by one that returns a chosen value in whatever dtype it is asked for."""
    from unittest import mock

    from proxima.rlhf import generation

    logits = torch.tensor([[0.0, -20.7, -20.7]])
    cdf = torch.softmax(logits.double(), -1).cumsum(-1)[0]
    target = float((cdf[0] + cdf[1]) / 2)  # inside token 1's share of the mass
    real_rand = torch.rand

    def rand(*shape, dtype=None, **kwargs):
        return torch.full(shape, target, dtype=dtype or torch.float32, device=kwargs.get("device"))

    assert float(torch.tensor(target, dtype=torch.float32)) == 1.0  # what a float32 draw could hold
    with mock.patch.object(generation.torch, "rand", rand):
        assert int(generation.sample(logits)) == 1
    assert generation.torch.rand is real_rand


def test_top_k_and_top_p_are_refused_in_training():
    """The log-probs, ratio and KL score the unfiltered softmax: filtered sampling is off-policy data."""
    import dataclasses

    import pytest

    from proxima.rlhf.config import ConfigError, RLHFConfig, validate

    for field, value in (("top_k", 3), ("top_p", 0.9)):
        flag = "--" + field.replace("_", "-")
        with pytest.raises(ConfigError, match=f"^{flag} {value}: must be {'0' if field == 'top_k' else '1.0'} in training: "
                                              "PPO's log-probs and KL assume sampling from the whole softmax"):
            validate(dataclasses.replace(RLHFConfig(policy="x", prompts="p.txt", reward=["length"]), **{field: value}))


def test_generate_samples_from_the_softmax_of_the_logits_divided_by_the_temperature(assets):
    """The model is rigged to give tokens 10, 11, 12 logits 0, 1, 2 (every other token -inf); 8000
    one-token samples at temperature 0.7 and 1.4 must follow softmax([0, 1, 2] / T) within 0.02 (top token
    0.771 and 0.578; 0.665 at T = 1; 0.574 and 0.765 for logits * T). Catches generate() sampling without the
    temperature, or multiplying by it."""
    model, _ = load_policy(str(assets / "model"), seed=0)
    tok = load_tokenizer(str(assets / "model"))
    rigged = torch.full((len(tok),), float("-inf"))
    rigged[10:13] = torch.tensor([0.0, 1.0, 2.0])
    handle = model.lm_head.register_forward_hook(lambda m, i, logits: rigged.expand_as(logits).clone())
    ids, am = pad_left([[5, 6], [7]] * 4000, tok.pad_token_id, "cpu")
    try:
        for temperature in (0.7, 1.4):
            torch.manual_seed(0)
            s = SamplingSettings(max_new_tokens=1, temperature=temperature, top_k=0, top_p=1.0,
                                 eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
            drawn = generate(model.eval(), ids, am, s)[:, 0]
            assert set(drawn.tolist()) <= {10, 11, 12}
            freq = torch.bincount(drawn - 10, minlength=3) / len(drawn)
            torch.testing.assert_close(freq, torch.softmax(torch.tensor([0.0, 1.0, 2.0]) / temperature, 0),
                                       rtol=0, atol=0.02)
    finally:
        handle.remove()
