"""Review 41: the update's other numbers in metrics.csv, TensorBoard and the callback row, under one name
each: losses/old_approx_kl (CleanRL's -logratio mean), losses/grad_norm (before the --max-grad-norm clip),
losses/vf_clipfrac (the value loss's clipped share; blank without --clip-vloss), charts/action_std and
charts/action_clip_frac (Box actions; blank for discrete ones). Each is recomputed here from the
minibatches and the agent as it was before each step, with a CleanRL-style loss written out below,
on every CPU compute path (grad_cpu's blocks, loss_cpu's closed form, plain autograd) and for a
population's members."""

from __future__ import annotations

import math

import pytest
import torch

from proxima import cli, grad_cpu, loss_cpu, ppo
from proxima.config import PPOConfig
from proxima.logger import CSV_COLUMNS, _event_records
from proxima.population import Population
from proxima.trainer import Trainer, _metric_row
from tests.integration import test_target_kl37 as kl37
from tests.cli_helpers import TINY_POP, TINY_RUN

NEW = ["losses/old_approx_kl", "losses/grad_norm", "losses/vf_clipfrac", "charts/action_std", "charts/action_clip_frac"]
UPDATE_KEYS = ("old_approx_kl", "grad_norm", "vf_clipfrac")


def _cfg(**overrides) -> PPOConfig:
    values = dict(env_id="CartPole-v1", backend="native", num_envs=4, num_steps=32, total_timesteps=128, lr=1e-2,
                  num_minibatches=4, update_epochs=2, progress=False, checkpoint_every=0, eval_episodes=0, threads=1, seed=0)
    values.update(overrides)
    return PPOConfig(**values)


def _reference(agent, mb: dict, cfg) -> dict:
    """CleanRL's minibatch loss from scratch on the agent before the step: -logratio's mean, the global
    norm of the loss's gradient and the share of samples where the clipped value loss is the larger."""
    params = [p for p in agent.parameters() if p.requires_grad]
    _, logprob, entropy, value = agent(mb["obs"], mb["actions"])
    logratio = logprob - mb["logprobs"]
    ratio = logratio.exp()
    adv = mb["advantages"]
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg_loss = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
    v_unclipped = (value - mb["returns"]) ** 2
    v_clipped = (mb["values"] + torch.clamp(value - mb["values"], -cfg.clip_coef, cfg.clip_coef) - mb["returns"]) ** 2
    v_loss = 0.5 * torch.max(v_unclipped, v_clipped).mean()
    loss = pg_loss - cfg.ent_coef * entropy.mean() + cfg.vf_coef * v_loss
    grads = torch.autograd.grad(loss, params)
    return {"old_approx_kl": float((-logratio).detach().mean()),
            "grad_norm": math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads)),
            "vf_clipfrac": float((((value - mb["values"]).abs() > cfg.clip_coef) & (v_clipped > v_unclipped)).float().mean())}


def _force_path(path: str, monkeypatch) -> list:
    """Make make_grad_step take ``path``; returns a list that fills with one entry per minibatch it ran there."""
    seen: list = []
    if path == "blocks":
        real = grad_cpu.BlockGradients.__call__
        monkeypatch.setattr(grad_cpu.BlockGradients, "__call__", lambda self, mb: seen.append(1) or real(self, mb))
        return seen
    monkeypatch.setattr(grad_cpu.BlockGradients, "for_agent", classmethod(lambda cls, *a, **k: None))
    if path == "loss_cpu":
        real_eligible = loss_cpu.eligible
        monkeypatch.setattr(loss_cpu, "eligible", lambda *a: seen.append(1) or real_eligible(*a))
    else:  # plain autograd through ppo.ppo_loss, as compiled and CUDA-graph steps run it
        real_loss = ppo.ppo_loss
        monkeypatch.setattr(loss_cpu, "eligible", lambda *a: False)
        monkeypatch.setattr(ppo, "ppo_loss", lambda *a, **k: seen.append(1) or real_loss(*a, **k))
    return seen


@pytest.mark.parametrize("env_id,path", [("CartPole-v1", "blocks"), ("CartPole-v1", "loss_cpu"), ("CartPole-v1", "autograd"),
                                         ("Pendulum-v1", "loss_cpu"), ("Pendulum-v1", "autograd")])
def test_old_approx_kl_grad_norm_and_vf_clipfrac_are_means_over_the_minibatches(env_id, path, monkeypatch):
    seen = _force_path(path, monkeypatch)
    t = Trainer(_cfg(env_id=env_id), quiet=True)
    try:
        want: list = []
        real_step = t.grad_step

        def grad_step(mb):
            want.append(_reference(t.agent, mb, t.cfg))
            return real_step(mb)

        t.grad_step = grad_step
        m = t.dist.reduce_metrics(t.train_iteration())
        row = _metric_row(m, 1.0, t.scheduled_lr, 0.0)
    finally:
        t.close()
    assert len(want) == len(seen) == 8  # every minibatch on the path named
    for key in UPDATE_KEYS:
        mean = sum(w[key] for w in want) / len(want)
        assert m[key] == pytest.approx(mean, rel=1e-4, abs=1e-7), key
        assert row[f"losses/{key}"] == m[key]
    # measured, not defaults: the later minibatches' policy moved (lr 1e-2), the value clip bit
    assert m["old_approx_kl"] != m["approx_kl"] and m["grad_norm"] > 0 and 0 < m["vf_clipfrac"] < 1


def test_action_std_is_the_heads_std_after_the_update_and_clip_frac_the_rollouts_share_outside_the_bounds():
    t = Trainer(_cfg(env_id="Pendulum-v1"), quiet=True)
    try:
        with torch.no_grad():
            t.agent.actor_logstd.fill_(math.log(3.0))  # std 3 against Pendulum's [-2, 2]: about half clipped
        m = t.dist.reduce_metrics(t.train_iteration())
        std_after = float(t.agent.actor_logstd.detach().exp().mean())
        outside = float((t.rollout.actions.abs() > 2.0).float().mean())
    finally:
        t.close()
    assert m["action_std"] == pytest.approx(std_after, rel=1e-6) and m["action_std"] != pytest.approx(3.0, rel=1e-4)
    assert m["action_clip_frac"] == pytest.approx(outside, abs=1e-7) and 0.3 < outside < 0.7
    row = _metric_row(m, 1.0, t.scheduled_lr, 0.0)
    assert (row["charts/action_std"], row["charts/action_clip_frac"]) == (m["action_std"], m["action_clip_frac"])


def test_action_metrics_average_the_action_dims_and_split_a_population_by_member():
    low, high = torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 10.0])
    actions = torch.tensor([[[0.0, 5.0], [2.0, -1.0]]])  # (T=1, N=2, A=2): member 0 in bounds, member 1 both out
    single = ppo.action_metrics(actions, (low, high), torch.log(torch.tensor([[1.0, 3.0]])))
    assert single["action_std"].shape == () and float(single["action_std"]) == pytest.approx(2.0)
    assert float(single["action_clip_frac"]) == 0.5
    pop = ppo.action_metrics(actions, (low, high), torch.log(torch.tensor([[[1.0, 3.0]], [[5.0, 5.0]]])), members=2)
    assert pop["action_std"].tolist() == pytest.approx([2.0, 5.0]) and pop["action_clip_frac"].tolist() == [0.0, 1.0]
    assert ppo.action_metrics(actions[..., 0].long(), None, None) == {}  # a discrete head: nothing to log
    # a share of the components, not of the action vectors: 1 of these 4 is out, in one of the 2 rows
    one_out = ppo.action_metrics(torch.tensor([[[0.0, 5.0], [2.0, 5.0]]]), (low, high), torch.zeros(1, 2))
    assert float(one_out["action_clip_frac"]) == 0.25
    # the bounds themselves are inside: the clamp leaves them as they are
    edges = ppo.action_metrics(torch.tensor([[[1.0, 0.0], [-1.0, 10.0]]]), (low, high), torch.zeros(1, 2))
    assert float(edges["action_clip_frac"]) == 0.0


def _tags(run_dir) -> dict:
    """{tag: [values]} of a run's TensorBoard events."""
    out: dict = {}
    for p in sorted(run_dir.glob("events.out.tfevents.*")):
        for _, e in _event_records(p):
            for v in e.summary.value:
                out.setdefault(v.tag, []).append(v.simple_value)
    return out


def test_a_continuous_run_logs_the_same_numbers_to_csv_tensorboard_and_the_callback(tmp_path):
    from proxima import train

    rows: list = []
    run = tmp_path / "run"
    train(_cfg(env_id="Pendulum-v1", num_steps=16, total_timesteps=128), run_dir=run, quiet=True, callback=rows.append)
    header, csv_rows = kl37._rows(run / "metrics.csv")
    assert header == CSV_COLUMNS and all(name in header for name in NEW)
    tags = _tags(run)
    assert len(rows) == len(csv_rows) == 2
    for name in NEW:
        values = [r[name] for r in rows]
        assert all(math.isfinite(v) for v in values), (name, values)
        assert [float(r[name]) for r in csv_rows] == pytest.approx(values, rel=1e-6), name
        assert tags[name] == pytest.approx(values, rel=1e-6), name


def test_a_discrete_run_without_clip_vloss_leaves_vf_clipfrac_and_the_action_columns_blank(tmp_path):
    run = tmp_path / "run"
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "128", "--no-clip-vloss", "--run-dir", str(run),
                     "--quiet"]) == 0
    _, rows = kl37._rows(run / "metrics.csv")
    tags = _tags(run)
    for r in rows:
        assert (r["losses/vf_clipfrac"], r["charts/action_std"], r["charts/action_clip_frac"]) == ("", "", "")
        assert float(r["losses/old_approx_kl"]) != float(r["losses/approx_kl"]) and float(r["losses/grad_norm"]) > 0
    assert not {"losses/vf_clipfrac", "charts/action_std", "charts/action_clip_frac"} & set(tags)
    assert len(tags["losses/grad_norm"]) == len(rows) == 2


def test_population_members_log_their_own_values_as_their_single_runs_do():
    cfgs = [_cfg(env_id="Pendulum-v1", seed=s) for s in (1, 2)]
    pop = Population(cfgs)
    try:
        members = {k: v.tolist() for k, v in pop.train_iteration().items()}
        std_after = pop.params["actor_logstd"].detach().exp().mean((1, 2)).tolist()
    finally:
        pop.close()
    assert members["action_std"] == pytest.approx(std_after, rel=1e-6)
    for i, cfg in enumerate(cfgs):  # member i's iteration is single run i's, to the rounding of batched matmuls
        t = Trainer(cfg, quiet=True)
        try:
            single = t.dist.reduce_metrics(t.train_iteration())
        finally:
            t.close()
        for key in (*UPDATE_KEYS, "action_std", "action_clip_frac"):
            assert members[key][i] == pytest.approx(single[key], rel=1e-4, abs=1e-6), (i, key)



def test_a_population_member_stopped_by_its_target_kl_logs_the_means_of_the_steps_it_took_as_its_single_run_does():
    """Member 0's tiny target_kl stops it after 2 of its 8 minibatches while member 1 runs all 8: its
    update metrics are the means over its own 2 steps, as its single run's are (gradient norm 69.5;
    262 with the norms of the 6 steps it sat out summed in)."""
    cfgs = [_cfg(env_id="Pendulum-v1", seed=1, target_kl=1e-4), _cfg(env_id="Pendulum-v1", seed=2)]
    pop = Population(cfgs)
    try:
        members = {k: v.tolist() for k, v in pop.train_iteration().items()}
    finally:
        pop.close()
    t = Trainer(cfgs[0], quiet=True)
    try:
        single = t.dist.reduce_metrics(t.train_iteration())
    finally:
        t.close()
    full = cfgs[0].update_epochs * cfgs[0].num_minibatches
    assert members["minibatch_updates"] == [single["minibatch_updates"], full] and single["minibatch_updates"] < full
    for key in ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", *UPDATE_KEYS):
        assert members[key][0] == pytest.approx(single[key], rel=1e-4, abs=1e-6), key

def test_a_population_without_clip_vloss_leaves_each_members_vf_clipfrac_blank(tmp_path):
    run = tmp_path / "R"
    assert cli.main(["train", "Pendulum-v1", "--seeds", "1-2", "--run-dir", str(run), "--total-timesteps", "32",
                     "--eval-episodes", "0", "--no-clip-vloss", "--quiet", *TINY_POP]) == 0
    dirs = sorted(run.glob("m00*"))
    assert len(dirs) == 2
    for d in dirs:
        header, rows = kl37._rows(d / "metrics.csv")
        assert header == CSV_COLUMNS and rows
        for r in rows:
            assert r["losses/vf_clipfrac"] == ""
            assert all(math.isfinite(float(r[name])) for name in NEW if name != "losses/vf_clipfrac"), r


def test_a_resume_of_a_run_logged_before_these_columns_keeps_its_rows_under_the_new_header(tmp_path):
    run = tmp_path / "run"
    flags = [*TINY_RUN, "--checkpoint-every", "1"]
    assert cli.main(["train", "Pendulum-v1", *flags, "--total-timesteps", "64", "--run-dir", str(run), "--quiet"]) == 0
    path = run / "metrics.csv"
    _, rows = kl37._rows(path)
    old = [c for c in CSV_COLUMNS if c not in NEW]
    kl37.write_under_header(path, old, rows)  # the header before review 41
    assert cli.main(["resume", str(run), "--total-timesteps", "128", "--quiet"]) == 0
    header, after = kl37._rows(path)
    assert header == CSV_COLUMNS
    assert [r["global_step"] for r in after] == ["64", "128"]
    assert [after[0][name] for name in NEW] == [""] * len(NEW)  # the old row: not measured then
    assert all(math.isfinite(float(after[1][name])) for name in NEW)
    assert {k: after[0][k] for k in old} == {k: rows[0][k] for k in old}


def test_ranks_average_the_new_metrics(monkeypatch):
    """Under torchrun each of them is the mean of the ranks' values (equal batches per rank: the mean over all)."""
    from proxima.distributed import DistContext

    t = Trainer(_cfg(env_id="Pendulum-v1"), quiet=True)
    try:
        out = t.train_iteration()
        mine = {k: float(v) for k, v in out.items()}
    finally:
        t.close()
    names = ["old_approx_kl", "grad_norm", "vf_clipfrac", "action_std", "action_clip_frac"]

    def all_reduce(vec, op=None):  # rank 1 logged three times rank 0's values
        vec *= 4.0

    monkeypatch.setattr(torch.distributed, "all_reduce", all_reduce)
    got = DistContext(rank=0, world_size=2).reduce_metrics(out)
    assert [got[k] for k in names] == pytest.approx([2.0 * mine[k] for k in names], rel=1e-6)
    assert got["ep_count"] == 4.0 * mine["ep_count"]  # summed, as before


def test_vf_clipfrac_counts_no_sample_the_clamp_left_alone_however_old_plus_delta_rounds():
    """old + (new - old) rounds a hair away from new in float32 for some samples: the max of the two value
    losses then took the "clipped" one for 1 in ~8 samples with a range nothing reached (a reviewer's
    vmapped population measured 0.125 against 0.1875), so vf_clipfrac counted rounding as clipping."""
    g = torch.Generator().manual_seed(0)
    old, new, returns = (torch.randn(4096, generator=g) * 50 for _ in range(3))
    t = ppo.ppo_terms(torch.zeros(4096), torch.zeros(4096), torch.ones(4096), new, old, returns,
                      clip_el=0.2, vclip=1e6, clip_vloss=True)
    assert float((t["v_clipped"] > t["v_unclipped"]).float().mean()) > 0.05  # the rounding is there
    assert float(ppo.monitor_terms(t, 0.2, True)["vf_clipfrac"].mean()) == 0.0
    t = ppo.ppo_terms(torch.zeros(4096), torch.zeros(4096), torch.ones(4096), new, old, returns,
                      clip_el=0.2, vclip=10.0, clip_vloss=True)
    moved = (new - old).abs() > 10.0
    expected = (moved & ((old + (new - old).clamp(-10, 10) - returns) ** 2 > (new - returns) ** 2)).float().mean()
    assert 0.3 < float(expected) < 0.7 and float(ppo.monitor_terms(t, 0.2, True)["vf_clipfrac"].mean()) == float(expected)


def test_the_action_columns_are_written_as_the_float32_values_they_are():
    """They were written with float64 digits (0.9981889128684998 beside a loss's 2.3050575): both are
    float32 means, written short, and a float64 value that is no float32 keeps its digits."""
    from proxima.logger import csv_cell

    std = float(torch.tensor(0.9981889128684998))
    assert csv_cell("charts/action_std", std) == "0.9981889" and float(torch.tensor(float("0.9981889"))) == std
    assert csv_cell("charts/action_clip_frac", float(torch.tensor(0.1))) == "0.1"
    assert csv_cell("charts/action_std", 0.1) == 0.1  # not a float32 value: as it came


def test_a_callback_row_holds_every_column_with_nan_where_metrics_csv_is_blank(tmp_path):
    from proxima import PPOConfig as Config, train

    rows = []
    cfg = Config(env_id="CartPole-v1", num_envs=2, num_steps=32, num_minibatches=2, update_epochs=1, total_timesteps=64,
                 clip_vloss=False, progress=False, eval_episodes=0)
    train(cfg, run_dir=tmp_path / "run", quiet=True, callback=rows.append)
    (row,) = rows
    blank = ("losses/vf_clipfrac", "charts/action_std", "charts/action_clip_frac")
    assert all(math.isnan(row[k]) for k in blank), row
    assert set(NEW) <= set(row) and math.isfinite(row["losses/grad_norm"])
