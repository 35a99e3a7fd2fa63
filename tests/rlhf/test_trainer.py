"""The update: ratio 1 at the start, exact gradient accumulation, separate models, switches."""

import json

import pytest
import torch

from proxima.rlhf import loop
from proxima.rlhf.trainer import RLHFTrainer
from rlhf_assets import save_llama


def rollout(trainer):
    b = trainer.compute_advantages(trainer.rollout())
    for m in trainer.trained_models():
        m.train()
    return b


def test_first_minibatch_has_ratio_one_and_nothing_clipped(tiny_cfg):
    t = RLHFTrainer(tiny_cfg())
    b = rollout(t)
    out = t.minibatch_loss(b, torch.arange(4))
    assert out["ratio"].item() == pytest.approx(1.0, abs=1e-5)
    assert abs(out["approx_kl"].item()) < 1e-6
    assert out["clipfrac"].item() == 0.0 and out["vf_clipfrac"].item() == 0.0


def test_a_llamas_float_attention_dropout_is_off_in_training_and_kept_in_the_saved_config(tiny_cfg, tmp_path):
    """Llama, Qwen, Mistral and Gemma read a float self.attention_dropout at every train-mode forward;
    there is no nn.Dropout module to switch off."""
    t = RLHFTrainer(tiny_cfg(policy=str(save_llama(tmp_path / "m", attention_dropout=0.5))))
    b = rollout(t)
    out = t.minibatch_loss(b, torch.arange(4))
    assert out["ratio"].item() == pytest.approx(1.0, abs=1e-5) and out["clipfrac"].item() == 0.0
    ids, am, pos = b["query_responses"], b["attention_mask"], b["position_ids"]
    with torch.no_grad():  # train mode, twice: the same numbers
        assert torch.equal(t.policy(input_ids=ids, attention_mask=am, position_ids=pos).logits,
                           t.policy(input_ids=ids, attention_mask=am, position_ids=pos).logits)
        assert torch.equal(t.value(ids, am, pos), t.value(ids, am, pos))
    assert t.policy.model.layers[0].self_attn.attention_dropout == 0.0 and t.policy.config.attention_dropout == 0.0
    (tmp_path / "run").mkdir()
    loop._save_policy(t, None, tmp_path / "run")
    assert json.loads((tmp_path / "run" / "policy" / "config.json").read_text())["attention_dropout"] == 0.5
    assert t.policy.config.attention_dropout == 0.0  # switched off again after the save


def test_kl_to_the_reference_is_zero_before_any_update(tiny_cfg):
    t = RLHFTrainer(tiny_cfg(kl_estimator="k3"))
    b = t.rollout()
    torch.testing.assert_close(b["logprobs"], b["ref_logprobs"])
    assert b["kl"].abs().max().item() < 1e-6


def test_micro_batch_accumulation_equals_one_full_minibatch(tiny_cfg):
    t = RLHFTrainer(tiny_cfg())
    b = rollout(t)
    # responses of different lengths, so that the per-micro-batch token weighting matters
    lengths = torch.tensor([1, 6, 3, 2, 6, 4, 5, 1])
    b["mask"] = torch.arange(b["mask"].shape[1])[None, :] < lengths[:, None]
    params = t.policy_params + t.value_params
    inds = torch.tensor([0, 1, 2, 3])
    t.accumulate_gradients(b, inds)
    full = [p.grad.clone() for p in params]
    t.cfg.micro_batch_size = 1
    t.accumulate_gradients(b, inds)
    for g_full, p in zip(full, params):
        torch.testing.assert_close(p.grad, g_full, rtol=1e-5, atol=1e-7)


def test_policy_loss_touches_only_the_policy_and_value_loss_only_the_value_model(tiny_cfg):
    t = RLHFTrainer(tiny_cfg())
    b = rollout(t)
    out = t.minibatch_loss(b, torch.arange(8))
    out["policy_loss"].backward(retain_graph=True)
    assert all(p.grad is None for p in t.value_params)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in t.policy_params)
    t.opt_policy.zero_grad(set_to_none=True)
    out["value_loss"].backward()
    assert all(p.grad is None for p in t.policy_params)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in t.value_params)


def test_the_reference_stays_frozen_while_the_policy_moves(tiny_cfg):
    t = RLHFTrainer(tiny_cfg())
    before = {k: v.clone() for k, v in t.ref.state_dict().items()}
    t.train_step()
    assert all(torch.equal(before[k], v) for k, v in t.ref.state_dict().items())
    assert not all(torch.equal(a, b) for a, b in zip(t.ref.parameters(), t.policy.parameters()))


def test_lora_reference_is_the_policy_with_its_adapter_off(tiny_cfg):
    t = RLHFTrainer(tiny_cfg(lora=True, lora_r=4, lora_target_modules=["c_attn"], lr=1e-2))
    assert t.ref is None  # no copy of the model
    trainable = sum(p.numel() for p in t.policy_params)
    assert trainable < sum(p.numel() for p in t.policy.parameters()) // 5
    b = t.rollout()
    torch.testing.assert_close(b["logprobs"], b["ref_logprobs"])  # LoRA's B starts at zero
    t.train_step()
    b = t.rollout()
    assert (b["logprobs"] - b["ref_logprobs"]).abs().max() > 1e-4


def test_bf16_autocast_and_gradient_checkpointing_run_and_stay_finite(tiny_cfg):
    t = RLHFTrainer(tiny_cfg(bf16=True, gradient_checkpointing=True))
    metrics, _ = t.train_step()
    assert all(v == v for v in metrics.values())  # no NaN


@pytest.mark.parametrize("kind", ["grpo", "rloo"])
def test_critic_free_estimators_sample_groups_and_need_no_value_model(tiny_cfg, kind):
    t = RLHFTrainer(tiny_cfg(advantage=kind, samples_per_prompt=4))
    assert t.value is None and t.value_params == []
    b = t.compute_advantages(t.rollout())
    queries = b["query_responses"][:, :b["context_length"]]
    assert torch.equal(queries[0], queries[3]) and torch.equal(queries[4], queries[7])
    # advantages of a group sum to zero (both estimators are centred within the group)
    per_response = b["advantages"].gather(1, torch.zeros(8, 1, dtype=torch.long)).view(2, 4)
    torch.testing.assert_close(per_response.sum(1), torch.zeros(2), atol=1e-5, rtol=0)
    metrics, _ = t.train_step()
    # no value model: none of its metrics is logged (a 0 value loss would read as a perfect critic)
    assert not {"losses/value_loss", "val/clipfrac", "val/grad_norm", "val/value_mean"} & set(metrics)
    assert "losses/policy_loss" in metrics


# ---------------------------------------------------------------------------------------------
# The math of one step checked in numbers: temperature, left padding, GAE, EOS penalty, learning
# rates and value clipping. Each docstring names the error the test catches.
# ---------------------------------------------------------------------------------------------
def test_at_temperature_0_7_the_first_minibatch_has_ratio_one_and_the_kl_is_zero(tiny_cfg):
    """At a temperature other than 1, the rollout's log-probs (policy and reference) and the update's
    must all divide the logits by it: catches an update forward or a rollout scoring that drops the
    temperature (ratio != 1, approx_kl > 0 before any step), or a reference scored at another one (KL != 0)."""
    t = RLHFTrainer(tiny_cfg(temperature=0.7, kl_estimator="k3"))
    b = rollout(t)
    torch.testing.assert_close(b["logprobs"], b["ref_logprobs"], rtol=0, atol=1e-6)
    assert b["kl"].abs().max().item() < 1e-6
    out = t.minibatch_loss(b, torch.arange(4))
    assert out["ratio"].item() == pytest.approx(1.0, abs=1e-5)
    assert abs(out["approx_kl"].item()) < 1e-6
    assert out["clipfrac"].item() == 0.0


def _record_sampled_distributions(monkeypatch):
    """Spy on generation.sample: the log-softmax of every (B, V) logits generate() samples from."""
    from proxima.rlhf import generation

    seen, real = [], generation.sample

    def spy(logits):
        seen.append(torch.log_softmax(logits.double(), -1))
        return real(logits)

    monkeypatch.setattr(generation, "sample", spy)
    return seen


@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_left_padded_prompts_of_1_to_6_tokens_are_scored_as_generate_sampled_them(
        tiny_cfg, assets, llama_policy, mixed_length_prompts, monkeypatch, model):
    """Prompts of 1 to 6 tokens in one batch (0 to 5 pad tokens on the left), temperature 0.7.
    The rollout's position ids count real tokens only; its log-probs are those of the distributions
    generate() sampled from, and every row's log-probs, reference log-probs and values equal those of
    the same prompt + response scored alone, unpadded. Catches position ids that count the padding
    (GPT-2's learned positions shift), a generate() or rollout scoring without the temperature, and
    values read one token off (the value of the state before response token k is at P - 1 + k)."""
    policy = assets / "model" if model == "gpt2" else llama_policy
    t = RLHFTrainer(tiny_cfg(policy=str(policy), prompts=str(mixed_length_prompts), temperature=0.7))
    seen = _record_sampled_distributions(monkeypatch)
    b = t.rollout()
    p, mask, responses = b["context_length"], b["mask"], b["responses"]
    query_mask = b["attention_mask"][:, :p]
    prompt_lengths = query_mask.sum(1)
    assert p == 6 and sorted(prompt_lengths.tolist()) == [1, 1, 2, 3, 4, 5, 6, 6]
    for i in range(8):  # padding at position 0, then 0, 1, 2, ... over the prompt's tokens and the response's
        pad = p - int(prompt_lengths[i])
        expected = [0] * pad + list(range(b["attention_mask"].shape[1] - pad))
        assert b["position_ids"][i].tolist() == expected
    # what generate() sampled from
    assert len(seen) == responses.shape[1]
    sampled = torch.stack([s.gather(-1, responses[:, k:k + 1]).squeeze(-1) for k, s in enumerate(seen)], 1)
    torch.testing.assert_close(b["logprobs"][mask].double(), sampled[mask], rtol=0, atol=1e-4)
    # each row alone, unpadded, positions 0.. (the reference and the value model as well)
    with torch.no_grad():
        for i in range(8):
            n = int(b["lengths"][i])
            ids = torch.cat([b["query_responses"][i, :p][query_mask[i].bool()], responses[i, :n]])[None]
            start = ids.shape[1] - n - 1  # the position that predicts response token 0
            for m, key in ((t.policy, "logprobs"), (t.ref, "ref_logprobs")):
                logits = m(input_ids=ids).logits[0, start:start + n].double() / 0.7
                alone = torch.log_softmax(logits, -1).gather(-1, responses[i, :n, None]).squeeze(-1)
                torch.testing.assert_close(b[key][i, :n].double(), alone, rtol=0, atol=1e-4)
            values = t.value(ids, torch.ones_like(ids), torch.arange(ids.shape[1])[None])[0, start:start + n]
            torch.testing.assert_close(b["values"][i, :n], values, rtol=0, atol=1e-4)


def _eos_bias_hook(trainer, bias):
    """Adds ``bias`` (V,) or (B, 1, V) to the policy's logits (generation and scoring alike)."""
    return trainer.policy.lm_head.register_forward_hook(lambda module, inputs, logits: logits + bias)


def test_gae_path_matches_an_independent_recomputation_with_whitened_rewards(tiny_cfg, mixed_length_prompts):
    """compute_advantages with whiten_rewards, gamma 0.97 != lambda 0.9, temperature 0.7 and a policy
    moved off the reference (KL != 0), against a per-row recomputation (TRL's, valid tokens only):
    rewards = -beta * (logprobs - ref_logprobs) with the score added at the last token, whitened over the
    valid tokens keeping their mean; GAE with no bootstrap after the last token; returns = advantages +
    values; advantages whitened over the valid tokens. Catches unwhitened advantages, gamma and lambda
    swapped, rewards whitened with a mean shift, and a KL taken the wrong way round."""
    gamma, lam = 0.97, 0.9
    t = RLHFTrainer(tiny_cfg(prompts=str(mixed_length_prompts), temperature=0.7, whiten_rewards=True, kl_coef=0.3,
                             gamma=gamma, gae_lambda=lam))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # the policy leaves the reference: KL != 0
        for param in t.policy.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=gen))
    bias = torch.zeros(t.policy.lm_head.out_features)
    bias[t.tokenizer.eos_token_id] = 2.0  # some responses end early, some run to the limit
    _eos_bias_hook(t, bias)
    b = t.compute_advantages(t.rollout())
    mask, lengths, beta = b["mask"], b["lengths"], t.kl_ctl.value
    assert len(set(lengths.tolist())) >= 2 and lengths.max() >= 3 and not mask.all()  # the masks matter
    assert b["kl"][mask].abs().mean() > 0.01
    rows_r, rows_v = [], []
    for i in range(8):
        n = int(lengths[i])
        r = -beta * (b["logprobs"][i, :n] - b["ref_logprobs"][i, :n]).double()
        r[n - 1] += b["scores"][i].double()
        rows_r.append(r)
        rows_v.append(b["values"][i, :n].double())
    all_r = torch.cat(rows_r)
    mean, var = all_r.mean(), all_r.var()
    assert abs(mean) > 0.01  # the mean the reward whitening keeps is visible (the tolerance is 1e-5)
    rows_r = [(r - mean) / torch.sqrt(var + 1e-8) + mean for r in rows_r]
    rows_a = []
    for r, v in zip(rows_r, rows_v):
        a, last = torch.zeros_like(r), 0.0
        for k in reversed(range(len(r))):
            next_v = v[k + 1] if k + 1 < len(r) else 0.0
            last = r[k] + gamma * next_v - v[k] + gamma * lam * last
            a[k] = last
        rows_a.append(a)
    returns = torch.cat([a + v for a, v in zip(rows_a, rows_v)])
    all_a = torch.cat(rows_a)
    advantages = (all_a - all_a.mean()) / torch.sqrt(all_a.var() + 1e-8)
    torch.testing.assert_close(b["rewards"][mask].double(), torch.cat(rows_r), rtol=0, atol=1e-5)
    torch.testing.assert_close(b["returns"][mask].double(), returns, rtol=0, atol=1e-5)
    torch.testing.assert_close(b["advantages"][mask].double(), advantages, rtol=0, atol=1e-5)
    assert (b["rewards"][~mask] == 0).all() and (b["advantages"][~mask] == 0).all()


def test_the_missing_eos_penalty_is_subtracted_from_responses_without_eos_only(tiny_cfg):
    """Rows 0-3 answer EOS at once (score 0, no penalty), rows 4-7 never do (6 tokens, score - 0.5):
    catches the penalty added instead of subtracted, or never applied."""
    from proxima.rlhf.demo import keyword_sentiment

    t = RLHFTrainer(tiny_cfg(missing_eos_penalty=0.5, samples_logged=8))
    bias = torch.zeros(8, 1, t.policy.lm_head.out_features)
    bias[:4, :, t.tokenizer.eos_token_id], bias[4:, :, t.tokenizer.eos_token_id] = 50.0, -1e9
    _eos_bias_hook(t, bias)
    b = t.rollout()
    assert b["has_eos"].tolist() == [True] * 4 + [False] * 4 and b["lengths"].tolist() == [1] * 4 + [6] * 4
    raw = torch.tensor(keyword_sentiment([x["prompt"] for x in b["texts"]], [x["response"] for x in b["texts"]]))
    assert raw[:4].tolist() == [0.0] * 4
    torch.testing.assert_close(b["scores"], raw - torch.tensor([0.0] * 4 + [0.5] * 4))
    assert [x["score"] for x in b["texts"]] == pytest.approx(b["scores"].tolist())


def test_the_value_model_steps_at_value_lr_and_the_policy_at_lr(tiny_cfg):
    """lr 1e-3, value_lr 3e-4, one minibatch and one epoch: one Adam step, whose largest parameter
    change is the learning rate itself (|m / sqrt(v)| = 1 on the first step, gradients >> eps).
    Catches the value optimizer built with lr instead of value_lr."""
    t = RLHFTrainer(tiny_cfg(lr=1e-3, value_lr=3e-4, num_minibatches=1, update_epochs=1))
    assert t.opt_policy.param_groups[0]["lr"] == 1e-3 and t.opt_value.param_groups[0]["lr"] == 3e-4
    before = [p.detach().clone() for p in t.policy_params + t.value_params]
    t.update(t.compute_advantages(t.rollout()))
    steps = [(p.detach() - q).abs().max().item() for p, q in zip(t.policy_params + t.value_params, before)]
    assert max(steps[:len(t.policy_params)]) == pytest.approx(1e-3, rel=1e-3)
    assert max(steps[len(t.policy_params):]) == pytest.approx(3e-4, rel=1e-3)


def test_the_value_loss_clips_the_value_at_vf_clip_coef_not_at_clip_coef(tiny_cfg):
    """clip_coef 0.2; rollout values 0.3 below the current ones and returns 1 above them. The clipped
    prediction is old + clip(0.3, +-c): c = vf_clip_coef 0.05 gives an error of 1.25 (loss
    0.5 * 1.25^2 = 0.78125 > 0.5 * 1^2, every token clipped); c = 0.5 leaves 0.3 unclipped (loss 0.5,
    none clipped). With the policy's 0.2 both would be 0.5 * 1.1^2 = 0.605: catches vf_clip_coef ignored."""
    t = RLHFTrainer(tiny_cfg(clip_coef=0.2, vf_clip_coef=0.05))
    b = rollout(t)
    inds = torch.arange(4)
    with torch.no_grad():
        new = t.value(b["query_responses"][inds], b["attention_mask"][inds],
                      b["position_ids"][inds])[:, b["context_length"] - 1:-1]
    b["values"][inds], b["returns"][inds] = new - 0.3, new + 1.0
    for vf_clip_coef, value_loss, vf_clipfrac in ((0.05, 0.78125, 1.0), (0.5, 0.5, 0.0)):
        t.cfg.vf_clip_coef = vf_clip_coef
        out = t.minibatch_loss(b, inds)
        assert out["value_loss"].item() == pytest.approx(value_loss, abs=1e-4)
        assert out["vf_clipfrac"].item() == vf_clipfrac


def _perturbed(trainer, scale=0.05):
    """Moves the policy off its reference (a seeded draw, not the global RNG): KL != 0."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in trainer.policy.parameters():
            param.add_(scale * torch.randn(param.shape, generator=gen))
    return trainer


def _spy_rollout(trainer):
    """Keeps the batch each rollout() returns (train_step draws its own)."""
    seen, real = [], trainer.rollout

    def spy():
        seen.append(real())
        return seen[-1]

    trainer.rollout = spy
    return seen


@pytest.mark.parametrize("kind", ["grpo", "rloo"])
def test_critic_free_advantages_match_a_recomputation_with_the_kl_subtracted(tiny_cfg, kind):
    """Without a critic each response is compared with the other responses to the same prompt: rloo
    r - mean of the other G - 1, with r = score - beta * (its KL summed over its own tokens); grpo
    (s - group mean) / (group sample std + 1e-4) - beta * (kl - group mean kl), the score alone normalised
    (review 34: folding the KL in before the division cancelled beta). Recomputed row by row from the
    batch's scores and log-probs (k1 KL, a policy moved off the reference, beta 0.3) and checked on every
    response token, 0 on padding. Catches the KL penalty added instead of subtracted."""
    import statistics

    g, beta = 4, 0.3
    t = _perturbed(RLHFTrainer(tiny_cfg(advantage=kind, samples_per_prompt=g, kl_coef=beta)))
    bias = torch.zeros(t.policy.lm_head.out_features)
    bias[t.tokenizer.eos_token_id] = 2.0  # lengths differ: the KL sums must stop at each response's end
    _eos_bias_hook(t, bias)
    b = t.compute_advantages(t.rollout())
    lengths, mask = b["lengths"].tolist(), b["mask"]
    assert len(set(lengths)) >= 2 and not mask.all()
    kl_sums = [float((b["logprobs"][i, :n] - b["ref_logprobs"][i, :n]).double().sum()) for i, n in enumerate(lengths)]
    assert max(abs(s) for s in kl_sums) > 0.05  # the penalty moves the advantages well past the tolerance
    rewards = [float(b["scores"][i]) - beta * kl_sums[i] for i in range(8)]
    expected = []
    for start in range(0, 8, g):
        group = rewards[start:start + g]
        for j, r in enumerate(group):
            if kind == "grpo":
                sc = [float(b["scores"][i]) for i in range(start, start + g)]
                kl = kl_sums[start:start + g]
                expected.append((sc[j] - statistics.fmean(sc)) / (statistics.stdev(sc) + 1e-4)
                                - beta * (kl[j] - statistics.fmean(kl)))
            else:
                expected.append(r - statistics.fmean(group[:j] + group[j + 1:]))
    for i, n in enumerate(lengths):
        torch.testing.assert_close(b["advantages"][i, :n].double(), torch.full((n,), expected[i], dtype=torch.double),
                                   rtol=1e-4, atol=1e-4)
        assert (b["advantages"][i, n:] == 0).all()


def test_the_adaptive_kl_coefficient_moves_by_the_batch_size_over_the_horizon(tiny_cfg):
    """Adaptive KL (Ziegler et al. 2019; TRL's AdaptiveKLController with n_steps = the batch size): after a
    step whose responses had a mean summed KL of kl, beta <- beta * (1 + clip(kl / target - 1, -0.2, 0.2) *
    n / horizon), n = 8 responses. A first trainer measures the KL its first rollout will have (the same seed
    and policy give the same rollout); the second targets kl / 1.1 (an unclipped error of +0.1) and a horizon
    of 16: beta 0.1 becomes 0.1 * (1 + 0.1 * 8 / 16) = 0.105. Catches the update counting one response, not
    the batch (0.1 * (1 + 0.1 / 16))."""
    def trainer(**overrides):
        return _perturbed(RLHFTrainer(tiny_cfg(kl_coef=0.1, kl_estimator="k3", adaptive_kl=True, **overrides)))

    b = trainer().rollout()
    kl = 0.0
    for i, n in enumerate(b["lengths"].tolist()):  # k3: e^r - 1 - r, r = log ref(token) - log policy(token)
        r = (b["ref_logprobs"][i, :n] - b["logprobs"][i, :n]).double()
        kl += float((r.exp() - 1 - r).sum()) / 8
    assert kl > 0.01
    t = trainer(kl_target=kl / 1.1, kl_horizon=16)
    assert t.kl_ctl.value == 0.1
    metrics, _ = t.train_step()
    assert metrics["objective/kl"] == pytest.approx(kl, rel=1e-4)
    assert metrics["objective/kl_coef"] == 0.1  # the coefficient the step used
    assert t.kl_ctl.value == pytest.approx(0.1 * (1 + 0.1 * 8 / 16), rel=1e-4)


def test_the_logged_entropy_is_the_mean_summed_negative_log_prob_of_the_sampled_tokens(tiny_cfg):
    """objective/entropy (TRL's name): per response, -sum of the log-probs of its sampled tokens up to its
    end, averaged over the responses; a positive number. Recomputed from the rollout's log-probs and lengths
    (lengths that differ, so padding must be left out). Catches the sign dropped (a negative entropy)."""
    t = RLHFTrainer(tiny_cfg())
    bias = torch.zeros(t.policy.lm_head.out_features)
    bias[t.tokenizer.eos_token_id] = 2.0
    _eos_bias_hook(t, bias)
    seen = _spy_rollout(t)
    metrics, _ = t.train_step()
    b = seen[0]
    lengths = b["lengths"].tolist()
    assert len(set(lengths)) >= 2
    expected = sum(-float(b["logprobs"][i, :n].double().sum()) for i, n in enumerate(lengths)) / len(lengths)
    assert expected > 0.5
    assert metrics["objective/entropy"] == pytest.approx(expected, rel=1e-5)
