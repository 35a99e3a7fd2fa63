"""Review 34 (RLHF): GRPO's beta scales its KL term, an annealed resume --steps says its schedule, a Python
function as reward is refused in one line, --temperature has one rule."""

import csv

import pytest
import torch

from proxima.rlhf import train_rlhf
from proxima.rlhf.algorithm import group_advantages, grpo_advantages, sequence_rewards
from proxima.rlhf.config import ConfigError, validate
from proxima.rlhf.trainer import RLHFTrainer
from tests.cli_helpers import run_main

KL = torch.tensor([10.0, 12.0, 15.0, 18.0, 0.5, 0.0, 2.0, 1.5])  # summed per response, 2 groups of 4


def _centred(kl, g):
    groups = kl.view(-1, g)
    return (groups - groups.mean(1, keepdim=True)).reshape(-1)


# ------------------------------------------------------------------------ 1. GRPO: beta scales the KL term
def test_grpo_tied_scores_give_minus_beta_times_the_centred_kl_linear_in_beta():
    """All four scores equal (an all-correct group with 0/1 rewards): the score's advantage is 0 (as TRL's),
    and what is left is -beta * (kl - group mean kl), 10x smaller for a 10x smaller beta. Catches the old
    -beta * KL folded into the reward before the division by the group's std, which cancelled beta (the
    review: the same [1.07 0.50 -0.36 -1.21] for beta 0.1, 0.01 and 0.001)."""
    scores = torch.tensor([1.0] * 4 + [0.0] * 4)
    for beta in (0.1, 0.01, 0.001):
        torch.testing.assert_close(grpo_advantages(scores, KL, 4, beta), -beta * _centred(KL, 4))
    assert grpo_advantages(scores, KL, 4, 0.0).abs().max() == 0


def test_grpo_without_kl_is_the_old_score_normalisation():
    """kl = 0 (or beta = 0): exactly the advantages of before, (s - mean) / (std + 1e-4) per group.
    Catches a normalisation dropped or changed (eps, population std) along with the KL's move."""
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, -1.0, 0.5, 2.0])
    old = group_advantages(sequence_rewards(scores, torch.zeros(8, 1), torch.ones(8, 1, dtype=torch.bool), 0.3), 4, "grpo")
    g = scores.view(2, 4)
    expected = ((g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + 1e-4)).reshape(-1)
    for kl, beta in ((torch.zeros(8), 0.3), (KL, 0.0)):
        torch.testing.assert_close(grpo_advantages(scores, kl, 4, beta), expected)
        torch.testing.assert_close(grpo_advantages(scores, kl, 4, beta), old)


def test_grpo_kl_term_is_added_after_the_normalisation():
    """Untied scores: the score part is normalised, the KL part is not (beta * nats, not divided by the
    score's std). Catches the KL normalised with the score, or centred on another group's mean."""
    scores = torch.tensor([0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    g = scores.view(2, 4)
    norm = ((g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + 1e-4)).reshape(-1)
    torch.testing.assert_close(grpo_advantages(scores, KL, 4, 0.05), norm - 0.05 * _centred(KL, 4))


def test_rloo_already_scales_the_kl_with_beta():
    """RLOO (unchanged): no division, so a tied group's advantage is -beta * (kl - mean of the other three)."""
    mask = torch.ones(8, 1, dtype=torch.bool)
    groups = KL.view(2, 4)
    loo = (groups - (groups.sum(1, keepdim=True) - groups) / 3).reshape(-1)
    for beta in (0.1, 0.001):
        adv = group_advantages(sequence_rewards(torch.ones(8), KL[:, None], mask, beta), 4, "rloo")
        torch.testing.assert_close(adv, -beta * loo)


@pytest.fixture
def constant_reward(tmp_path):
    """A reward function that ties every group: file.py:function."""
    (tmp_path / "tie.py").write_text("def same(prompts, responses, **columns):\n    return [1.0] * len(responses)\n")
    return f"{tmp_path / 'tie.py'}:same"


def _moved(trainer):
    """The policy off its reference (a seeded draw): KL != 0 from the first rollout."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in trainer.policy.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=gen))
    return trainer


def _tied_batch_check(trainer):
    """The trainer's GRPO advantages of a tied batch are -beta * (centred summed KL), beta the one in use."""
    b = trainer.compute_advantages(trainer.rollout())
    kl = (b["kl"] * b["mask"]).double().sum(1)
    assert kl.abs().max() > 0.05
    expected = -trainer.kl_ctl.value * _centred(kl, trainer.cfg.samples_per_prompt)
    for i, n in enumerate(b["lengths"].tolist()):
        torch.testing.assert_close(b["advantages"][i, :n].double(), expected[i].expand(n), rtol=1e-4, atol=1e-6)


def test_the_trainer_gives_a_tied_grpo_group_beta_times_its_centred_kl(tiny_cfg, constant_reward):
    """Through compute_advantages: catches the trainer still folding the KL into the reward (then these are
    unit-size, whatever beta)."""
    for beta in (0.2, 0.002):
        torch.manual_seed(0)
        t = _moved(RLHFTrainer(tiny_cfg(advantage="grpo", samples_per_prompt=4, kl_coef=beta, reward=constant_reward)))
        _tied_batch_check(t)


def test_adaptive_kl_still_drives_grpo_end_to_end(tiny_cfg, constant_reward, tmp_path):
    """A tiny adaptive-KL GRPO run: beta follows the Ziegler update of the logged KL at every step, and the
    advantages use the adapted beta, not --kl-coef. Catches cfg.kl_coef passed to the GRPO advantages."""
    cfg = dict(advantage="grpo", samples_per_prompt=4, kl_coef=0.1, adaptive_kl=True, kl_target=0.01, kl_horizon=16,
               reward=constant_reward, steps=3, checkpoint_every=0, lr=3e-3)
    run = train_rlhf(tiny_cfg(run_dir=str(tmp_path / "run"), **cfg))
    rows = list(csv.DictReader(open(run / "metrics.csv", encoding="utf-8")))
    assert len(rows) == 3
    beta = 0.1
    for row in rows:
        assert float(row["objective/kl_coef"]) == pytest.approx(beta, rel=1e-6)
        err = max(-0.2, min(0.2, float(row["objective/kl"]) / 0.01 - 1))
        beta *= 1 + err * 8 / 16
    assert abs(float(rows[-1]["objective/kl_coef"]) - 0.1) > 1e-3  # it moved
    t = _moved(RLHFTrainer(tiny_cfg(**cfg)))
    t.kl_ctl.value = 0.37  # as a few adaptive steps leave it
    _tied_batch_check(t)


# ------------------------------------------------------------------- 2. resume --steps of an annealed run
def test_annealed_resume_with_more_steps_recomputes_the_schedule_as_ppo_and_says_so(tiny_cfg, tmp_path, capsys):
    """3 steps at lr 1e-3 annealed (1e-3, 6.67e-4, 3.33e-4), extended to 6: as PPO's resume with a larger
    --total-timesteps (docs/reliability.md), step i uses lr * (1 - (i - 1) / 6), so step 4 rises to 5e-4; a
    note on stderr says so, --quiet included. Catches the note dropped, and a schedule other than PPO's."""
    run = train_rlhf(tiny_cfg(steps=3, anneal_lr=True, lr=1e-3, checkpoint_every=0, sample_every=0,
                              run_dir=str(tmp_path / "run")))
    capsys.readouterr()
    code, _, err = run_main(["resume", str(run), "--steps", "6", "--quiet"], capsys)
    assert code == 0, err
    lrs = [float(r["charts/learning_rate"]) for r in csv.DictReader(open(run / "metrics.csv", encoding="utf-8"))]
    assert lrs == pytest.approx([1e-3 * (1 - i / 3) for i in range(3)] + [1e-3 * (1 - i / 6) for i in range(3, 6)], rel=1e-5)
    notes = [line for line in err.splitlines() if "--anneal-lr" in line]
    assert notes == ["proxima: note: --anneal-lr: the learning rate schedule is recomputed over 6 steps, as if the run "
                     "had been planned for them (as `proxima resume --total-timesteps` does for PPO): step 4 trains at "
                     "lr 0.0005, step 3 trained at 0.000333"]


def test_no_schedule_note_when_the_length_or_the_rate_does_not_change(tiny_cfg, capsys):
    """The note is for an annealed run whose --steps changes: not a resume to the recorded length, nor a
    run without --anneal-lr, nor one stopped before its first step."""
    from proxima.rlhf.api import _note_lr_schedule

    for cfg, planned, done in ((tiny_cfg(steps=6, anneal_lr=True), 6, 3), (tiny_cfg(steps=6, anneal_lr=False), 3, 3),
                               (tiny_cfg(steps=6, anneal_lr=True), 3, 0)):
        _note_lr_schedule(cfg, planned, done)
        assert capsys.readouterr().err == ""
    _note_lr_schedule(tiny_cfg(steps=8, anneal_lr=True, lr=1e-3), 4, 4)  # the review's run
    assert capsys.readouterr().err.endswith("step 5 trains at lr 0.0005, step 4 trained at 0.00025\n")


# ------------------------------------------------------------------- 3. a Python function as the reward
def _f(prompts, responses, **columns):
    return [0.0] * len(responses)


@pytest.mark.parametrize("reward", [_f, [_f], ["proxima.rlhf.demo:keyword_sentiment", _f]])
def test_a_python_function_as_reward_is_refused_in_one_line_naming_the_accepted_forms(tiny_cfg, tmp_path, reward):
    """TRL's reward_funcs=[f] habit: a TypeError ('function' object is not iterable) or a misleading
    'comma-separated list' line before. Nothing is written."""
    with pytest.raises(ConfigError) as e:
        train_rlhf(tiny_cfg(reward=reward, run_dir=str(tmp_path / "run")))
    line = str(e.value)
    assert "\n" not in line
    assert line.startswith("RLHFConfig(reward=...): got the Python object _f; ")
    for needle in ("'file.py:function'", "'module:function'", "reward-model folder", "so that a resume can find it again"):
        assert needle in line
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------- 4. --temperature: one rule
@pytest.mark.parametrize("value", [0.0, -1.0, 0.0005])
def test_temperature_below_the_minimum_gets_one_message_whatever_its_sign(tiny_cfg, value):
    with pytest.raises(ConfigError, match=r"^--temperature " + str(value).replace(".", r"\.")
                       + r": must be at least 0\.001 \(lower overflows the logits"):
        validate(tiny_cfg(temperature=value))
