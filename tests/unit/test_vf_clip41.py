"""Review 41 (hyperparameter tuner): --vf-clip-coef, the value loss's own clip range (SB3's clip_range_vf;
none = the policy's --clip-coef, as CleanRL), used on every CPU compute path (grad_cpu's blocks,
loss_cpu's closed form, plain autograd) and per population member; and charts/learning_rate logged as
the schedule's float64 value, not the optimizer's float32 tensor read back."""

from __future__ import annotations

import csv

import pytest
import torch

from proxima.config import FOREIGN_NAMES, RESUME_SAFE, ConfigError, PPOConfig, from_dict, recorded_config, validate
from proxima.population import PER_MEMBER_FIELDS, Population
from proxima.trainer import Trainer
from tests.cli_helpers import TINY_RUN, error_line, run_main
from tests.unit import test_metrics41 as m41
from tests.unit import test_review27_population as pop27
from tests.unit import test_review31_mutops as mutops


def _value_loss(agent, mb: dict, vclip: float) -> float:
    """CleanRL's clipped value loss (detail 9) of one minibatch, from scratch, on the agent before the step."""
    with torch.no_grad():
        value = agent(mb["obs"], mb["actions"])[3]
    v_unclipped = (value - mb["returns"]) ** 2
    v_clipped = (mb["values"] + torch.clamp(value - mb["values"], -vclip, vclip) - mb["returns"]) ** 2
    return float(0.5 * torch.max(v_unclipped, v_clipped).mean())


@pytest.mark.parametrize("path", ["blocks", "loss_cpu", "autograd"])
def test_the_value_loss_is_clipped_with_vf_clip_coef_on_every_compute_path(path, monkeypatch):
    seen = m41._force_path(path, monkeypatch)
    t = Trainer(m41._cfg(vf_clip_coef=10.0), quiet=True)
    try:
        got, want, policy_clipped = [], [], []
        real_step = t.grad_step

        def grad_step(mb):
            want.append(_value_loss(t.agent, mb, 10.0))
            policy_clipped.append(_value_loss(t.agent, mb, t.cfg.clip_coef))
            out = real_step(mb)
            got.append(float(out["value_loss"]))
            return out

        t.grad_step = grad_step
        t.train_iteration()
    finally:
        t.close()
    assert len(got) == len(seen) == 8  # every minibatch on the path named
    assert got == pytest.approx(want, rel=1e-5)
    # the values moved more than clip_coef's 0.2 (lr 1e-2): clipped with it, the loss would differ
    assert max(abs(a - b) / b for a, b in zip(policy_clipped, want)) > 1e-2


@pytest.mark.parametrize("argv, shown", [(["--vf-clip-coef", "10"], "vf_clip_coef: 10.0"),
                                         (["--vf-clip-coef", "none"], "vf_clip_coef: null"),
                                         ([], "vf_clip_coef: null")])
def test_train_takes_vf_clip_coef_as_a_number_or_none(argv, shown, capsys):
    code, out, err = run_main(["train", "CartPole-v1", *argv, "--dry-run"], capsys)
    assert code == 0, err
    assert shown in out.splitlines()


@pytest.mark.parametrize("argv, line", [
    (["--vf-clip-coef", "0"], "--vf-clip-coef 0.0: must be a positive number, or none for the policy's clip_coef"),
    (["--vf-clip-coef", "inf"], "--vf-clip-coef inf: must be a positive number, or none for the policy's clip_coef"),
    (["--vf-clip-coef", "1e39"], "--vf-clip-coef 1e+39: must be at most 3.403e+38 (float32's largest value, which the run "
                                 "computes in), or none for the policy's clip_coef"),
    (["--vf-clip-coef", "x"], "--vf-clip-coef 'x': expected a number or none"),
    (["--vf-clip-coef", "10", "--no-clip-vloss"], "--vf-clip-coef 10.0: sets the value clip range, but --no-clip-vloss turns "
                                                  "value clipping off; give only one of them"),
    (["--seeds", "1-2", "--sweep", "vf_clip_coef=1,2", "--no-clip-vloss"],
     "--sweep vf_clip_coef: value 1.0: sets the value clip range, but --no-clip-vloss turns value clipping off; give "
     "only one of them"),
])
def test_a_vf_clip_coef_that_could_not_work_is_refused_in_one_line(argv, line, capsys):
    code, out, err = run_main(["train", "CartPole-v1", *argv, "--dry-run"], capsys)
    assert error_line(code, err) == "proxima train: error: " + line
    assert out == ""


@pytest.mark.parametrize("argv, line", [
    # flushing denormals (the default): below float32's smallest normal value the range is 0 in the run
    (["--vf-clip-coef", "1e-40"], "--vf-clip-coef 1e-40: must be at least 1.175e-38 (float32's smallest normal value: "
                                  "smaller ones are 0 in the run, which flushes denormals; --no-flush-denormal keeps them)"),
    # without flushing: below half float32's smallest denormal the range rounds to 0 all the same
    (["--no-flush-denormal", "--vf-clip-coef", "1e-46"], "--vf-clip-coef 1e-46: must be above 7.006e-46 (smaller values "
                                                         "are 0 in float32, which the run computes in)"),
])
def test_a_vf_clip_coef_that_is_zero_in_float32_is_refused_as_clip_coef_is(argv, line, capsys):
    code, out, err = run_main(["train", "CartPole-v1", *argv, "--dry-run"], capsys)
    assert error_line(code, err) == "proxima train: error: " + line
    assert out == ""


@pytest.mark.parametrize("argv, shown", [(["--no-flush-denormal", "--vf-clip-coef", "1e-40"], "vf_clip_coef: 1.0e-40"),
                                         (["--no-flush-denormal", "--vf-clip-coef", "1e-45"], "vf_clip_coef: 1.0e-45"),
                                         (["--vf-clip-coef", "1.2e-38"], "vf_clip_coef: 1.2e-38")])
def test_a_tiny_vf_clip_coef_that_float32_keeps_is_taken(argv, shown, capsys):
    code, out, err = run_main(["train", "CartPole-v1", *argv, "--dry-run"], capsys)
    assert code == 0, err
    assert shown in out.splitlines()


def test_sb3s_clip_range_vf_points_at_vf_clip_coef(capsys):
    assert FOREIGN_NAMES["clip_range_vf"] == "vf_clip_coef"
    code, _, err = run_main(["train", "CartPole-v1", "--clip-range-vf", "10"], capsys)
    assert "; did you mean --vf-clip-coef (--vf-clip-coef X with --clip-vloss" in error_line(code, err)


def test_sb3s_clip_range_vf_in_python_or_yaml_names_vf_clip_coef():
    note = ("vf_clip_coef=X with clip_vloss=True (the default) clips differently: CleanRL's max of the clipped and "
            "unclipped squared errors, where SB3 takes the clipped one alone; SB3's clip_range_vf=None is clip_vloss=False")
    with pytest.raises(ConfigError) as e:
        from_dict({"clip_range_vf": 10}, source="zoo.yaml")
    assert str(e.value) == f"zoo.yaml: unknown field 'clip_range_vf' (did you mean 'vf_clip_coef'? {note})"
    with pytest.raises(ConfigError) as e:
        PPOConfig(clip_range_vf=10)
    assert str(e.value) == f"PPOConfig(clip_range_vf=10): not a PPOConfig field (did you mean 'vf_clip_coef'? {note})"


def test_a_python_config_names_the_fields_in_its_refusal():
    with pytest.raises(ConfigError) as e:
        validate(PPOConfig(vf_clip_coef=1.0, clip_vloss=False), python=True)
    assert str(e.value) == ("PPOConfig.vf_clip_coef = 1.0: sets the value clip range, but clip_vloss=False turns value "
                            "clipping off; give only one of them")


def test_vf_clip_coef_round_trips_and_an_older_config_without_it_means_clip_coef():
    cfg = PPOConfig(vf_clip_coef=10.0)
    assert from_dict(cfg.to_dict()).vf_clip_coef == 10.0
    older = PPOConfig().to_dict()
    del older["vf_clip_coef"]  # a config.yaml or checkpoint of a run from before the field
    assert from_dict(older, source="config.yaml").vf_clip_coef is None
    assert recorded_config(older, "config.yaml").vf_clip_coef is None


def test_vf_clip_coef_is_the_runs_identity_as_clip_coef_is():
    assert "clip_coef" not in RESUME_SAFE and "vf_clip_coef" not in RESUME_SAFE


def test_a_resume_refuses_a_new_vf_clip_coef(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(run_dir), "--quiet"],
                    capsys)[0] == 0
    code, _, err = run_main(["resume", str(run_dir), "--vf-clip-coef", "10", "--total-timesteps", "128"], capsys)
    assert "--vf-clip-coef" in error_line(code, err)


def test_a_population_member_trains_with_its_own_vf_clip_coef_as_its_single_run(small_config):
    assert "vf_clip_coef" in PER_MEMBER_FIELDS
    # one seed: member 0's none (its own clip_coef) and member 1's 10.0 differ in the range alone
    configs = [small_config(seed=1, lr=1e-2), small_config(seed=1, lr=1e-2, vf_clip_coef=10.0)]
    pop = Population(configs)
    try:
        for _ in range(2):
            pop.train_iteration()
        got = [pop.member_agent(i).state_dict() for i in range(2)]
    finally:
        pop.close()
    for i, cfg in enumerate(configs):
        want = pop27._single(cfg, 2)
        for k in want:
            torch.testing.assert_close(got[i][k], want[k], rtol=0, atol=1e-6, msg=f"member {i}: {k}")
    assert max(float((got[1][k] - got[0][k]).abs().max()) for k in got[0]) > 1e-4  # the range changed the run


def test_a_vmapped_population_members_value_loss_is_clipped_with_its_own_vf_clip_coef(small_config):
    # An encoder (CNN) makes the population vmap a template agent (_vmapped_loss) instead of calling its
    # stacked layers, the path the CartPole test above never takes. Its whole-run comparison cannot be
    # repeated here: under vmap all members sample actions from one stream (population.py), so a member
    # does not retrace its single run. Each member's minibatch loss is compared instead, with ppo_loss of
    # that member's own agent and its own value clip range (member 0: none, i.e. its clip_coef 0.3).
    from proxima import ppo

    vclips = [0.3, 10.0]
    members = ({"seed": 1, "clip_coef": 0.3}, {"seed": 2, "vf_clip_coef": 10.0})
    with mutops.vmapped_pixel_members(small_config, *members) as (configs, pop, gen, obs, actions, own):
        P, B = actions.shape
        # old values ~2 off the current ones: past 0.3 (clipped) and within 10 (not), so the two ranges differ
        m = {"obs": obs, "actions": actions, "logprobs": torch.stack([o[1] for o in own]),
             "values": torch.stack([o[3] for o in own]) + 2.0 * torch.randn(P, B, generator=gen),
             "advantages": torch.randn(P, B, generator=gen), "returns": torch.randn(P, B, generator=gen)}
        got = pop._vmapped_loss(m)

        def loss(p: int, vclip: float) -> dict:
            cfg = configs[p]
            return ppo.ppo_loss(own[p][1], m["logprobs"][p], m["advantages"][p], own[p][3], m["values"][p], m["returns"][p],
                                own[p][2], clip_coef=cfg.clip_coef, vf_coef=cfg.vf_coef, ent_coef=cfg.ent_coef,
                                clip_vloss=True, norm_adv=cfg.norm_adv, vf_clip_coef=vclip)

        for p in range(P):
            want = loss(p, vclips[p])
            for k in ("loss", "value_loss", "vf_clipfrac"):
                torch.testing.assert_close(got[k][p].detach(), want[k], rtol=1e-5, atol=1e-6, msg=f"member {p}: {k}")
            # the other member's range (or this member's clip_coef, for member 1) gives a clearly other value loss
            for other in {vclips[1 - p], configs[p].clip_coef} - {vclips[p]}:
                assert abs(float(loss(p, other)["value_loss"] - want["value_loss"])) > 1e-2 * float(want["value_loss"])


# --- charts/learning_rate: the schedule's float64 value ----------------------------------------------


def _csv_lrs(run_dir) -> list:
    with open(run_dir / "metrics.csv") as f:
        return [float(r["charts/learning_rate"]) for r in csv.DictReader(f)]


@pytest.mark.parametrize("anneal", [True, False])
def test_the_logged_learning_rate_is_the_schedules_float64_value(anneal, small_config, tmp_path):
    cfg = small_config(lr=0.01, anneal_lr=anneal, total_timesteps=4 * 128)  # 4 iterations
    rows = []
    t = Trainer(cfg, run_dir=tmp_path / "run", quiet=True)
    try:
        t.run(callback=lambda row: rows.append(row["charts/learning_rate"]))
    finally:
        t.close()
    n = 4
    want = [0.01 * (1 - (k - 1) / n) if anneal else 0.01 for k in range(1, n + 1)]
    assert rows == want  # exact: 0.01 itself on iteration 1, not float32's 0.009999999776482582
    assert _csv_lrs(tmp_path / "run") == want  # the cell's text reads back as the same float64


@pytest.mark.parametrize("anneal", [True, False])
def test_a_population_members_logged_learning_rate_is_its_schedules_float64_value(anneal, tmp_path, capsys, monkeypatch):
    from proxima.logger import RunLogger

    logged: dict = {}  # each member's logger -> the rates handed to it, before metrics.csv writes them
    real_log = RunLogger.log

    def log(self, iteration, global_step, metrics):
        logged.setdefault(id(self), []).append(metrics["charts/learning_rate"])
        return real_log(self, iteration, global_step, metrics)

    monkeypatch.setattr(RunLogger, "log", log)
    run = tmp_path / "R"
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1", "--sweep", "lr=0.01,0.003", "--run-dir", str(run),
                             *([] if anneal else ["--no-anneal-lr"]),
                             "--total-timesteps", "96", "--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2",
                             "--update-epochs", "1", "--eval-episodes", "0", "--quiet", "--no-progress", "--threads", "1"], capsys)
    assert code == 0, err
    members = sorted(p for p in run.iterdir() if p.is_dir() and (p / "metrics.csv").exists())
    assert len(members) == 2
    n = 3
    want = {lr: [lr * (1 - (k - 1) / n) if anneal else lr for k in range(1, n + 1)] for lr in (0.01, 0.003)}
    # exact: 0.01 itself, not float32's 0.009999999776482582; a constant rate is never rescheduled, so its
    # first value is its every value. The rows, not metrics.csv: the csv writes a float32-exact rate in
    # float32's shortest text, 0.01 for either.
    assert sorted(logged.values(), key=lambda lrs: lrs[0]) == [want[0.003], want[0.01]]
    assert sorted((_csv_lrs(m) for m in members), key=lambda lrs: lrs[0]) == [want[0.003], want[0.01]]
