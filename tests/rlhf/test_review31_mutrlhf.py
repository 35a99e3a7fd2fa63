"""Review 31 (RLHF mutations that survived): beta restored on resume, the adaptive-KL count of every process,
the entropy bonus in the loss, the learning-rate schedule, the response text without its stop token, GAE with
garbage on the padding, and the update's epochs, minibatches and logged KL. Each docstring names the mutation
the test catches."""

import pytest
import torch

from proxima.rlhf import dist as D
from proxima.rlhf import loop
from proxima.rlhf import trainer as T
from proxima.rlhf.algorithm import gae_advantages
from proxima.rlhf.generation import response_masks, response_token_lists
from proxima.rlhf.trainer import RLHFTrainer
from tests.rlhf.test_algorithm import reference_gae
from tests.rlhf.test_trainer import _eos_bias_hook, _perturbed, _spy_rollout, rollout

EOS = 2


def _early_eos(t, bias=2.0):
    """Some responses end early, some run to --max-new-tokens: the batch has padding."""
    eos_bias = torch.zeros(t.policy.lm_head.out_features)
    eos_bias[t.tokenizer.eos_token_id] = bias
    _eos_bias_hook(t, eos_bias)
    return t


# ---------------------------------------------------------------------------------------------
# 1. a resume restores beta
# ---------------------------------------------------------------------------------------------
def test_a_resume_of_an_adaptive_kl_run_restores_beta_from_the_checkpoint(tiny_cfg, tmp_path):
    """One adaptive-KL step moves beta off kl_coef; the checkpoint holds it and a fresh trainer that loads the
    checkpoint continues with it, not with kl_coef. Catches load_checkpoint not restoring the KL controller."""
    cfg = dict(kl_coef=0.1, adaptive_kl=True, kl_target=1e6, kl_horizon=16, update_epochs=1, max_new_tokens=3)
    t = RLHFTrainer(tiny_cfg(**cfg))
    t.train_step()
    saved = t.kl_ctl.value
    assert saved == pytest.approx(0.1 * (1 - 0.2 * 8 / 16))  # KL ~ 0 << target: the error is clipped at -0.2
    (tmp_path / "run").mkdir()
    loop.save_checkpoint(t, tmp_path / "run")
    file = tmp_path / "run" / "checkpoints" / "step_000001.pt"
    resumed = RLHFTrainer(tiny_cfg(**cfg))
    assert resumed.kl_ctl.value == 0.1
    loop.load_checkpoint(resumed, file)
    assert resumed.step == 1 and resumed.kl_ctl.value == saved != 0.1


# ---------------------------------------------------------------------------------------------
# 2. adaptive KL counts the responses of every process
# ---------------------------------------------------------------------------------------------
class _TwoRanksNoCollectives(D.Dist):
    """A Dist that says 2 processes (rank 0 of 2: half the prompts, the KL horizon checked for 16 responses)
    but whose collectives are this process's own (``enabled`` False): as if the other rank had the same
    numbers."""

    @property
    def enabled(self) -> bool:
        return False


def test_adaptive_kl_counts_the_responses_of_every_process(tiny_cfg):
    """batch_size 8 per process, 2 processes: beta <- beta * (1 + clip(kl / target - 1, -0.2, 0.2) * 8 * 2 /
    horizon). Catches the update counting one process's responses only (8 / horizon)."""
    t = RLHFTrainer(tiny_cfg(kl_coef=0.1, adaptive_kl=True, kl_target=0.5, kl_horizon=32, update_epochs=1,
                             max_new_tokens=3), _TwoRanksNoCollectives(rank=0, world_size=2))
    assert t.sampler.shard.tolist() == list(range(0, len(t.prompts), 2))  # rank 0 of 2 draws its half
    metrics, _ = t.train_step()
    err = min(max(metrics["objective/kl"] / 0.5 - 1.0, -0.2), 0.2)
    assert abs(err) > 0.05  # the count matters well past the tolerance
    assert t.kl_ctl.value == pytest.approx(0.1 * (1 + err * 8 * 2 / 32), rel=1e-9)


# ---------------------------------------------------------------------------------------------
# 3. the entropy bonus reaches the loss
# ---------------------------------------------------------------------------------------------
def test_the_update_loss_subtracts_ent_coef_times_the_entropy(tiny_cfg):
    """ent_coef 0.5: loss = policy_loss + vf_coef * value_loss - 0.5 * entropy, and the entropy term has a
    gradient. Catches minibatch_loss passing ent_coef 0 to ppo_loss (the bonus silently off)."""
    t = RLHFTrainer(tiny_cfg(ent_coef=0.5, vf_coef=0.1))
    b = rollout(t)
    out = t.minibatch_loss(b, torch.arange(4))
    assert out["entropy"].item() > 0.5  # far past the tolerance: an untrained policy over the demo vocabulary
    expected = out["policy_loss"] + 0.1 * out["value_loss"] - 0.5 * out["entropy"]
    assert out["loss"].item() == pytest.approx(expected.item(), abs=1e-6)
    assert out["entropy"].requires_grad


# ---------------------------------------------------------------------------------------------
# 4. anneal_lr: both learning rates fall linearly from their full value at the first step
# ---------------------------------------------------------------------------------------------
def test_anneal_lr_steps_both_optimizers_at_a_linearly_falling_rate_from_the_first_step(tiny_cfg):
    """steps 3, lr 1e-3, value_lr 3e-4: the optimizers step at 1, 2/3 and 1/3 of their rates in steps 1, 2, 3
    (frac = 1 - (step - 1) / steps), recorded at each optimizer step. Catches anneal_lr ignored, and the
    schedule one step ahead (2/3, 1/3, 0: the last step would not train)."""
    t = RLHFTrainer(tiny_cfg(anneal_lr=True, steps=3, lr=1e-3, value_lr=3e-4, update_epochs=1, num_minibatches=1,
                             max_new_tokens=3))
    seen = {"policy": [], "value": []}
    for name, opt in (("policy", t.opt_policy), ("value", t.opt_value)):
        opt.register_step_pre_hook(lambda o, args, kwargs, name=name: seen[name].append(o.param_groups[0]["lr"]))
    logged = [t.train_step()[0]["charts/learning_rate"] for _ in range(3)]
    fracs = [1.0, 2 / 3, 1 / 3]
    assert seen["policy"] == pytest.approx([f * 1e-3 for f in fracs], rel=1e-12)
    assert seen["value"] == pytest.approx([f * 3e-4 for f in fracs], rel=1e-12)
    assert logged == pytest.approx(seen["policy"], rel=1e-12)


# ---------------------------------------------------------------------------------------------
# 5. the response text stops before the stop token; only texts_with_stop keeps it
# ---------------------------------------------------------------------------------------------
def test_response_token_lists_drop_the_eos_and_the_padding_but_keep_a_cut_response_whole():
    """Catches the stop token kept (keep = lengths)."""
    responses = torch.tensor([[5, EOS, 0, 0], [5, 6, 7, 8], [EOS, 0, 0, 0]])
    _, lengths, has_eos = response_masks(responses, EOS)
    assert response_token_lists(responses, lengths, has_eos) == [[5], [5, 6, 7, 8], []]


def test_the_reward_sees_texts_without_the_stop_token_and_texts_with_stop_with_exactly_it(tiny_cfg, monkeypatch):
    """Fixed responses (two with EOS, two cut at max_new_tokens, one of which ends with the pad id, a token like
    any other before an EOS): RewardBatch.texts is prompt + the tokens before
    EOS, texts_with_stop the same plus the EOS token, and the two are equal for a cut response. Catches the stop
    token left in texts (the two fields then equal for every row)."""
    t = RLHFTrainer(tiny_cfg(batch_size=4, num_minibatches=1, max_new_tokens=6))
    tok = t.tokenizer
    eos, pad = tok.eos_token_id, tok.pad_token_id
    w = {s: tok.convert_tokens_to_ids(s) for s in ("the", "movie", "was", "good", "bland")}
    assert tok.unk_token_id not in w.values()
    fixed = torch.tensor([[w["good"], eos, pad, pad, pad, pad],
                          [w["the"], w["movie"], w["was"], w["good"], w["bland"], w["good"]],
                          [w["bland"], w["good"], eos, pad, pad, pad],
                          [w["the"], w["movie"], w["was"], w["good"], w["bland"], pad]])
    monkeypatch.setattr(T, "generate", lambda model, query, *a, **k: fixed.to(query.device))
    seen, real = [], t.reward
    monkeypatch.setattr(t, "reward", lambda batch: seen.append(batch) or real(batch))
    b = t.rollout()
    assert b["has_eos"].tolist() == [True, False, True, False]
    batch, p = seen[-1], b["context_length"]
    # row 3's trailing [PAD] was sampled before any EOS: a token of the response, kept
    before_eos = [[w["good"]], fixed[1].tolist(), [w["bland"], w["good"]], fixed[3].tolist()]
    for i, tokens in enumerate(before_eos):
        prompt = b["query_responses"][i, :p][b["attention_mask"][i, :p].bool()].tolist()
        assert batch.texts[i] == tok.decode(prompt + tokens)
        if b["has_eos"][i]:
            assert batch.texts_with_stop[i] == tok.decode(prompt + tokens + [eos]) != batch.texts[i]
            assert batch.texts_with_stop[i] == batch.texts[i] + " " + tok.eos_token
        else:
            assert batch.texts_with_stop[i] == batch.texts[i]
        assert tok.eos_token not in batch.texts[i] and tok.eos_token not in batch.responses[i]


# ---------------------------------------------------------------------------------------------
# 6. GAE: the trace is cut at the last token, whatever the padding holds
# ---------------------------------------------------------------------------------------------
def test_gae_matches_the_textbook_recursion_with_nan_rewards_and_values_on_the_padding():
    """test_algorithm's padding test with NaN in the rewards on the padding as well as in the values: the
    valid tokens' advantages and returns are the per-response recursion's, finite. Catches the trace cut one
    token late (ended = positions > lengths - 1), which reads the padding's reward into the last token."""
    torch.manual_seed(0)
    responses = torch.tensor([[5, 6, 7, EOS, 0, 0], [5, 6, 7, 8, 9, 10], [EOS, 0, 0, 0, 0, 0]])
    mask, lengths, _ = response_masks(responses, EOS)
    rewards = torch.where(mask, torch.randn(3, 6), torch.tensor(float("nan")))
    values = torch.where(mask, torch.randn(3, 6), torch.tensor(float("nan")))
    adv, ret = gae_advantages(rewards, values, lengths, gamma=0.9, lam=0.8)
    assert torch.isfinite(adv[mask]).all() and torch.isfinite(ret[mask]).all()
    for i in range(3):
        n = int(lengths[i])
        expected = reference_gae(rewards[i, :n].tolist(), values[i, :n].tolist(), 0.9, 0.8)
        torch.testing.assert_close(adv[i, :n], torch.tensor(expected), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(ret[i, :n], adv[i, :n] + values[i, :n])


# ---------------------------------------------------------------------------------------------
# 7. the update runs every epoch and minibatch; the logged KL stops at each response's end
# ---------------------------------------------------------------------------------------------
def test_the_update_steps_each_optimizer_once_per_minibatch_of_every_epoch(tiny_cfg):
    """update_epochs 3, num_minibatches 4, batch 8: 12 steps of each optimizer, on minibatches of 2 rows that
    cover the batch once per epoch. Catches the epochs ignored (4 steps) and the minibatches ignored
    (one minibatch of 8 rows per epoch: 3 steps)."""
    t = RLHFTrainer(tiny_cfg(update_epochs=3, num_minibatches=4, max_new_tokens=3))
    steps = {"policy": 0, "value": 0}
    for name, opt in (("policy", t.opt_policy), ("value", t.opt_value)):
        opt.register_step_pre_hook(lambda o, args, kwargs, name=name: steps.__setitem__(name, steps[name] + 1))
    minibatches, real = [], t.accumulate_gradients
    t.accumulate_gradients = lambda b, inds: minibatches.append(inds.tolist()) or real(b, inds)
    t.update(t.compute_advantages(t.rollout()))
    assert steps == {"policy": 12, "value": 12}
    assert [len(m) for m in minibatches] == [2] * 12
    for epoch in range(3):
        assert sorted(sum(minibatches[4 * epoch:4 * epoch + 4], [])) == list(range(8))


def test_the_logged_kl_is_the_mean_kl_summed_over_each_responses_own_tokens(tiny_cfg):
    """A policy moved off the reference and responses of several lengths, so the padding holds KL estimates
    (log-probs of the pad tokens) of its own: objective/kl is the mean over responses of the KL summed up to
    and including each one's EOS. Catches the padding summed in."""
    t = _early_eos(_perturbed(RLHFTrainer(tiny_cfg(update_epochs=1, num_minibatches=1))))
    seen = _spy_rollout(t)
    metrics, _ = t.train_step()
    b = seen[0]
    mask, lengths = b["mask"], b["lengths"].tolist()
    assert len(set(lengths)) >= 2 and not mask.all()
    assert abs(float(b["kl"][~mask].double().sum())) / 8 > 0.01  # what the padding would add, far past the tolerance
    expected = sum(float(b["kl"][i, :n].double().sum()) for i, n in enumerate(lengths)) / 8
    assert metrics["objective/kl"] == pytest.approx(expected, rel=1e-5, abs=1e-7)
