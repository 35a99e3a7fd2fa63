"""Review 29: RunningMeanStd's epsilon prior no longer adds ~mean**2 * epsilon / n to the variance.

The prior (count 1e-4, var 1) sat at mean 0, so the first Chan merge put mean**2 * 1e-4 into M2,
which decays only as 1/n: 1e4 +- 0.01 streamed in chunks of 7 gave var 1.0001 instead of 1e-4
(normalized std 0.01), 1e5 samples of N(1e6, 1) gave var 1001. Now the prior weighs in the variance
only: mean = the plain mean, var = (1e-4 + n * biased var) / (n + 1e-4), whatever the chunking.
Also: sync_normalizers is a no-op in a single process (the 2-rank merge: tests/distributed).
"""

from __future__ import annotations

import pytest
import torch

from proxima.normalize import ObsNormalizer, RewardScaler, RunningMeanStd


def _stream(rms, x, size):
    for chunk in x.split(size):
        rms.update(chunk)
    return rms


def test_a_large_offset_with_a_small_spread_keeps_its_variance():
    torch.manual_seed(0)
    x = (torch.randn(10_000, 2) * 0.01 + 1e4).float()
    rms = _stream(RunningMeanStd((2,)), x, 7)
    true = x.double().var(0, unbiased=False)  # ~1e-4
    torch.testing.assert_close(rms.var, true, rtol=1e-3, atol=0.0)  # before: 1.0001
    n = 10_000  # exactly: the prior's 1e-4 * 1 over n + 1e-4 rows, ~1e-4 of this variance
    torch.testing.assert_close(rms.var, (1e-4 + n * true) / (n + 1e-4), rtol=1e-6, atol=0.0)
    torch.testing.assert_close(rms.mean, x.double().mean(0), rtol=1e-12, atol=0.0)
    norm = ObsNormalizer((2,))
    for chunk in x.split(7):
        norm(chunk)
    std = norm(x, update=False).double().std(0)
    torch.testing.assert_close(std, torch.ones(2, dtype=torch.float64), rtol=1e-3, atol=0.0)  # before: 0.01


def test_a_huge_offset_keeps_its_unit_variance():
    g = torch.Generator().manual_seed(1)
    y = torch.randn(100_000, generator=g, dtype=torch.float64) + 1e6
    rms = _stream(RunningMeanStd(()), y, 64)
    torch.testing.assert_close(rms.var, y.var(unbiased=False), rtol=1e-6, atol=0.0)  # before: 1001.0


@pytest.mark.parametrize("sizes", [[1000], [1] * 50 + [950], [7] * 142 + [6], [333, 1, 666]])
def test_the_prior_weighs_in_the_variance_only_whatever_the_chunking(sizes):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1000, 3, generator=g, dtype=torch.float64) * torch.tensor([0.1, 5.0, 1.0]) + torch.tensor([50.0, -3.0, 0.0])
    rms = RunningMeanStd((3,))
    for chunk in x.split(sizes):
        rms.update(chunk)
    n, eps = 1000, 1e-4
    torch.testing.assert_close(rms.mean, x.mean(0), rtol=1e-12, atol=1e-12)  # before: shrunk by n / (n + eps)
    torch.testing.assert_close(rms.var, (eps + n * x.var(0, unbiased=False)) / (n + eps), rtol=1e-10, atol=0.0)
    assert float(rms.count) == pytest.approx(n + eps, abs=1e-9)


def test_the_first_row_of_one_env_gives_the_prior_variance_not_the_offset():
    rms = RunningMeanStd((2,))
    rms.update(torch.tensor([[300.0, -0.5]]))
    torch.testing.assert_close(rms.mean, torch.tensor([300.0, -0.5], dtype=torch.float64), rtol=0.0, atol=0.0)
    torch.testing.assert_close(rms.var, torch.full((2,), 1e-4 / (1 + 1e-4), dtype=torch.float64), rtol=1e-12, atol=0.0)


def test_groups_keep_the_same_statistics_as_separate_instances():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(40, 6, 2, generator=g, dtype=torch.float64) * 0.01 + torch.tensor([1e4, -7.0])
    x[:, 3:] += 500.0  # member 1 far from member 0
    grouped, alone = RunningMeanStd((2,), groups=2), [RunningMeanStd((2,)), RunningMeanStd((2,))]
    for step in x:  # (6, 2): 3 rows per member
        grouped.update(step)
        alone[0].update(step[:3])
        alone[1].update(step[3:])
    for i in range(2):
        torch.testing.assert_close(grouped.mean[i], alone[i].mean, rtol=1e-12, atol=0.0)
        torch.testing.assert_close(grouped.var[i], alone[i].var, rtol=1e-9, atol=0.0)
        rows = x[:, 3 * i:3 * i + 3].reshape(-1, 2)
        n = len(rows)
        torch.testing.assert_close(grouped.var[i], (1e-4 + n * rows.var(0, unbiased=False)) / (n + 1e-4), rtol=1e-6, atol=0.0)


def test_the_reward_scaler_of_large_steady_returns_uses_their_spread():
    """Returns that settle near 100 with a spread of 0.1: the std the rewards are divided by is ~0.1-ish,
    not the ~1 the mean-0 prior added (100**2 * 1e-4)."""
    scaler = RewardScaler(4, 0.0, clip=1e9)  # gamma 0: the return is the reward
    g = torch.Generator().manual_seed(4)
    rewards = torch.randn(2000, 4, generator=g) * 0.1 + 100.0
    for r in rewards:
        scaler(r, torch.zeros(4, dtype=torch.bool))
    torch.testing.assert_close(scaler.rms.var, rewards.double().var(unbiased=False), rtol=1e-4, atol=0.0)


def test_sync_normalizers_is_a_no_op_in_a_single_process():
    from proxima.distributed import DistContext

    norm, scaler = ObsNormalizer((2,)), RewardScaler(2, 0.99)
    norm(torch.randn(8, 2) + 3)
    scaler(torch.randn(2), torch.zeros(2, dtype=torch.bool))
    before = [{k: v.clone() for k, v in m.state_dict().items()} for m in (norm, scaler)]
    DistContext().sync_normalizers(norm, scaler)
    DistContext().sync_normalizers(None, None)
    for b, m in zip(before, (norm, scaler)):
        assert all(torch.equal(b[k], v) for k, v in m.state_dict().items())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_update_is_captured_in_a_cuda_graph_without_a_host_read():
    rms = RunningMeanStd((3,)).cuda()
    x = torch.randn(16, 3, device="cuda") * 0.01 + 1e4
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # a host read (.item(), a Python branch on a value) fails the capture
        rms.update(x)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(rms.var, x.double().var(0, unbiased=False) * 16 / (16 + 1e-4) + 1e-4 / (16 + 1e-4),
                               rtol=1e-9, atol=0.0)
