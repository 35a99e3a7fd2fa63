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
    assert metrics["losses/value_loss"] == 0.0
