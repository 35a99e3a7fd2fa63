"""Review 29: under torchrun the --norm-obs / --norm-reward statistics are merged across ranks every
iteration (DistContext.sync_normalizers), so the one DDP network sees inputs every rank normalizes
alike and the checkpoint's statistics (rank 0's, which eval uses) count every rank's envs.

Before, each rank kept the statistics of its own envs: Pendulum on 2 ranks ended with obs means
[-0.951, -0.005, -0.033] on rank 0 and [-0.371, -0.031, -0.422] on rank 1.

* a 2-rank script (gloo): after rounds of per-rank updates, each followed by the merge, every rank
  holds the pooled statistics of all rows (exactly those of one RunningMeanStd with the prior counted
  once per rank), its own count, and its own reward returns; unequal counts merge by weight;
* `proxima train Pendulum-v1 --nproc 2`: the checkpoint's per-rank statistics are identical.
"""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch
from distributed_helpers import SMALL, STEPS_PER_ITER, run, two_ranks

SCRIPT = textwrap.dedent('''
    import sys
    from types import SimpleNamespace

    import torch

    from proxima import distributed
    from proxima.normalize import ObsNormalizer, RewardScaler, RunningMeanStd


    def main():
        ctx = distributed.context()
        assert ctx.world_size == 2, ctx
        r = ctx.rank
        g = torch.Generator().manual_seed(100 + r)
        norm, scaler = ObsNormalizer((3,)), RewardScaler(4, 0.9)
        uneven = SimpleNamespace(rms=RunningMeanStd((2,)))  # rank 1 counts 3x the rows of rank 0
        offset = torch.tensor([1e4, -3.0, 0.5]) + 40.0 * r  # far apart: a merge that is not exact shows
        seen, seen_uneven, returns = [], [], []
        for it in range(4):
            for _ in range(3):  # a few steps of 8 envs, as a rollout updates
                obs = torch.randn(8, 3, generator=g, dtype=torch.float64) * torch.tensor([0.01, 2.0, 0.3]) + offset
                norm(obs)
                seen.append(obs)
                reward = torch.randn(4, generator=g) + r
                scaler(reward, torch.rand(4, generator=g) < 0.2)
                rows = torch.randn(6 * (1 + 2 * r), 2, generator=g, dtype=torch.float64) * (1 + r) + 5 * r
                uneven.rms.update(rows)
                seen_uneven.append(rows)
            ctx.sync_normalizers(norm, scaler)
            ctx.sync_normalizers(uneven)
            ctx.sync_normalizers(None, None)  # both off: nothing, and no collective
        torch.save({"obs": norm.state_dict(), "reward": scaler.state_dict(), "uneven": uneven.rms.state_dict(),
                    "seen": torch.cat(seen), "seen_uneven": torch.cat(seen_uneven)}, f"{sys.argv[1]}/rank{r}.pt")
        return 0


    distributed.exit_process(main)
''')


def _same(a: dict, b: dict, keys) -> bool:
    return all(torch.equal(a[k], b[k]) for k in keys)


def test_the_merge_gives_every_rank_the_pooled_statistics(tmp_path):
    from proxima.normalize import RunningMeanStd

    out = two_ranks(SCRIPT, tmp_path)
    r0, r1 = (torch.load(out / f"rank{r}.pt", weights_only=True) for r in (0, 1))

    # every rank the same mean and var; each its own count (equal here: same rows per rank)
    assert _same(r0["obs"], r1["obs"], ["rms.mean", "rms.var", "rms.count"])
    assert float(r0["obs"]["rms.count"]) == pytest.approx(4 * 3 * 8 + 1e-4, abs=1e-9)
    # ... the pooled statistics of both ranks' rows: one RunningMeanStd over all of them, its prior
    # counted once per rank (epsilon 2e-4), the count halved
    rows = torch.cat([r0["seen"], r1["seen"]])
    pooled = RunningMeanStd((3,), epsilon=2e-4)
    pooled.update(rows)
    torch.testing.assert_close(r0["obs"]["rms.mean"], pooled.mean, rtol=1e-12, atol=0.0)
    torch.testing.assert_close(r0["obs"]["rms.var"], pooled.var, rtol=1e-9, atol=0.0)
    torch.testing.assert_close(r0["obs"]["rms.var"], rows.var(0, unbiased=False), rtol=1e-3, atol=0.0)
    own = RunningMeanStd((3,))
    own.update(r0["seen"])  # rank 0's own rows only (what it kept before the merge): far from these
    assert not torch.allclose(own.mean, pooled.mean, rtol=1e-3)

    # the reward scaler: the same return statistics on both ranks, each rank's running returns its own
    assert _same(r0["reward"], r1["reward"], ["rms.mean", "rms.var", "rms.count"])
    assert not torch.equal(r0["reward"]["returns"], r1["reward"]["returns"])

    # unequal counts (not a trainer's case) merge by weight: pooled mean, the pooled squared deviations
    # shared in proportion to the counts
    u0, u1 = r0["uneven"], r1["uneven"]
    assert float(u1["count"]) == pytest.approx(3 * float(u0["count"]), rel=1e-5)
    rows = torch.cat([r0["seen_uneven"], r1["seen_uneven"]])
    assert torch.equal(u0["mean"], u1["mean"])
    torch.testing.assert_close(u0["mean"], rows.mean(0), rtol=1e-12, atol=1e-12)
    m2 = sum(u["var"] * u["count"] - 1e-4 for u in (u0, u1))
    torch.testing.assert_close(m2, rows.var(0, unbiased=False) * len(rows), rtol=1e-10, atol=0.0)


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_a_two_process_run_saves_the_same_statistics_on_every_rank(tmp_path):
    from proxima.checkpoint import load_checkpoint

    iters = 2
    cmd = [sys.executable, "-m", "proxima", "train", "Pendulum-v1", "--nproc", "2", "--backend", "native", *SMALL,
           "--total-timesteps", str(iters * STEPS_PER_ITER), "--norm-obs", "--norm-reward", "--run-dir", "run"]
    res = run(cmd, tmp_path)
    assert res.returncode == 0, res.stderr[-4000:]
    state = load_checkpoint(tmp_path / "run")
    ranks = state["ranks"]
    assert state["iteration"] == iters and len(ranks) == 2
    keys = ["rms.mean", "rms.var", "rms.count"]
    # before: rank 0 [-0.951, -0.005, -0.033], rank 1 [-0.371, -0.031, -0.422] (each its own envs')
    assert _same(ranks[0]["obs_normalizer"], ranks[1]["obs_normalizer"], keys)
    assert _same(ranks[0]["reward_scaler"], ranks[1]["reward_scaler"], keys)
    assert not torch.equal(ranks[0]["reward_scaler"]["returns"], ranks[1]["reward_scaler"]["returns"])
    # the count stays per rank: its 8 reset obs and 8 x 32 per iteration
    assert float(ranks[0]["obs_normalizer"]["rms.count"]) == pytest.approx(8 + iters * 8 * 32 + 1e-4, abs=1e-9)
    # what proxima eval and load_policy read (the top level) is the merged statistics
    assert _same(state["obs_normalizer"], ranks[1]["obs_normalizer"], keys)
