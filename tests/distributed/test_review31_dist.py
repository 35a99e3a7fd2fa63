"""Review 31 (mutation testing): the cross-rank arithmetic of DistContext, checked on 2 gloo ranks
with inputs that differ per rank, so a wrong reduction shows as a wrong number.

* reduce_metrics sums the episode sums and counts and the nonfinite flag, and averages the rest
  (mutants: ep_count averaged; the 1/world_size scale dropped);
* agree_stop returns a signal that only rank 1 received, on both ranks (mutant: MIN for MAX);
* sync_kl's step returns the mean of the ranks' KLs (mutant: their sum).
"""

from __future__ import annotations

import json
import textwrap

import pytest
from distributed_helpers import two_ranks

SCRIPT = textwrap.dedent('''
    import json
    import sys

    import torch

    from proxima import distributed


    def main():
        ctx = distributed.context()
        assert ctx.world_size == 2, ctx
        r = ctx.rank
        metrics = {"ep_return_sum": 10.0 + 5 * r, "ep_length_sum": 100.0 * (r + 1), "ep_count": 2.0 + r,
                   "nonfinite": float(r), "policy_loss": 1.0 + 2 * r, "entropy": 0.5 + r}
        reduced = ctx.reduce_metrics({k: torch.tensor(v) for k, v in metrics.items()})
        stop_one = ctx.agree_stop(15 if r == 1 else 0)
        stop_none = ctx.agree_stop(0)
        stop_both = ctx.agree_stop(2 if r == 0 else 15)
        step = ctx.sync_kl(lambda mb: {"approx_kl": torch.tensor(0.01 + 0.03 * r), "mb": mb})
        out = step("minibatch")
        doc = {"reduced": reduced, "stop_one": stop_one, "stop_none": stop_none, "stop_both": stop_both,
               "kl": float(out["approx_kl"]), "mb": out["mb"], "module": distributed.__file__}
        with open(f"{sys.argv[1]}/rank{r}.json", "w") as f:
            json.dump(doc, f)
        return 0


    distributed.exit_process(main)
''')


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """What each of the 2 ranks of SCRIPT wrote: [rank 0's, rank 1's]."""
    out = two_ranks(SCRIPT, tmp_path_factory.mktemp("dist31"))
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_reduce_metrics_sums_episode_totals_and_averages_the_rest(ranks):
    for doc in ranks:
        assert doc["reduced"] == pytest.approx({
            "ep_return_sum": 25.0, "ep_length_sum": 300.0, "ep_count": 5.0,  # summed: 10 + 15, 100 + 200, 2 + 3
            "nonfinite": True,  # one rank's non-finite value is the run's
            "policy_loss": 2.0, "entropy": 1.0,  # averaged: (1 + 3) / 2, (0.5 + 1.5) / 2
        }, rel=1e-6), doc["module"]
        assert doc["reduced"]["nonfinite"] is True


def test_agree_stop_takes_a_signal_only_one_rank_received(ranks):
    for doc in ranks:
        assert doc["stop_one"] == 15  # only rank 1 had SIGTERM: rank 0 must stop too, or rank 1 waits for it
        assert doc["stop_none"] == 0
        assert doc["stop_both"] == 15  # the larger signal number


def test_sync_kl_gives_every_rank_the_mean_of_the_ranks_kl(ranks):
    for doc in ranks:
        assert doc["kl"] == pytest.approx((0.01 + 0.04) / 2, rel=1e-6)
        assert doc["mb"] == "minibatch"  # the step's own output, passed through
