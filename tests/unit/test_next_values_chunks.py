"""ppo.next_values off the CPU: the critic over every final obs in chunks of whole steps, no chunk
above the update's minibatch rows (one pass over all T x N image rows held ~24 GiB of CNN
activations at 1,024 envs x 128 steps), and sizing.py counting that pass as at most one chunk."""

from __future__ import annotations

import pytest
import torch

from proxima import ppo, sizing
from proxima.config import PPOConfig


def _rowwise(o: torch.Tensor) -> torch.Tensor:
    """A value_of whose result for a row does not depend on the batch around it: (k, N, D) -> (k, N)."""
    return (o * o).sum(-1).sqrt() - o[..., 0]


def _recording(calls: list):
    def value_of(o):
        calls.append(o.shape[0] * o.shape[1])
        return _rowwise(o)

    return value_of


@pytest.mark.parametrize("T, N, max_rows, steps", [
    (7, 3, 7, [2, 2, 2, 1]),      # 2 whole steps fit in 7 rows; the last chunk shorter
    (8, 4, 16, [4, 4]),           # the update's minibatch: 32 rows / 2
    (5, 6, 4, [1] * 5),           # a minibatch smaller than a step: one step a call, not part of one
    (4, 2, 8, [4]),               # the whole batch fits: one call, as before
    (4, 2, None, [4]),            # no bound: one call
])
def test_chunks_are_whole_steps_within_the_bound_and_equal_the_one_batch_result(T, N, max_rows, steps):
    final_obs = torch.randn(T, N, 5, generator=torch.Generator().manual_seed(T * N))
    calls: list = []
    got = ppo.values_in_chunks(final_obs, _recording(calls), max_rows)
    assert calls == [k * N for k in steps] and sum(calls) == T * N
    assert all(rows <= max(max_rows or T * N, N) for rows in calls)
    assert got.shape == (T, N) and torch.equal(got, _rowwise(final_obs))


def test_next_values_off_the_cpu_evaluates_every_step_in_bounded_chunks():
    # the meta device stands in for CUDA: not the CPU, so every step's final obs is evaluated; the
    # chunk shapes come from T, N and the bound alone (no data read), as a captured CUDA graph needs
    T, N = 16, 8
    values = torch.empty(T, N, device="meta")
    flags = torch.empty(T, N, dtype=torch.bool, device="meta")
    calls: list = []

    def value_of(o):
        calls.append(o.shape[0] * o.shape[1])
        return torch.empty(o.shape[:2], device="meta")

    out = ppo.next_values(values, torch.empty(T, N, 84 * 84 * 4, device="meta"), flags, flags, value_of, max_rows=32)
    assert out.shape == (T, N) and calls == [32] * 4


def test_next_values_on_the_cpu_chunks_the_truncated_steps_within_the_bound():
    # the CPU path runs the critic on the last step and on the truncated steps, up to T - 1 of them with
    # staggered time limits: those go in chunks within the bound too (sizing counts one chunk on the CPU as
    # well); the result does not change
    T, N = 6, 4
    g = torch.Generator().manual_seed(0)
    values, final_obs = torch.randn(T, N, generator=g), torch.randn(T, N, 3, generator=g)
    dones = torch.zeros(T, N, dtype=torch.bool)
    dones[:5, 1] = True  # truncated at every step but the last
    terminated = torch.zeros_like(dones)
    calls_free, calls_bound = [], []
    free = ppo.next_values(values, final_obs, dones, terminated, _recording(calls_free))
    bound = ppo.next_values(values, final_obs, dones, terminated, _recording(calls_bound), max_rows=2 * N)
    assert torch.equal(free, bound)
    assert calls_free == [N, 5 * N] and calls_bound == [N, 2 * N, 2 * N, N]


def _capture_bound(monkeypatch, seen: dict):
    """Wrap ppo.next_values: record the bound the caller passes, and run the chunked path with it on
    the caller's own value_of (its reshapes must hold for k-step chunks), against one batch."""
    original = ppo.next_values

    def wrapper(values, final_obs, dones, terminated, value_of, max_rows=None):
        seen["max_rows"] = max_rows
        rows = seen.setdefault("rows", [])

        def counted(o):
            rows.append(o.shape[0] * o.shape[1])
            return value_of(o)

        with torch.no_grad():
            seen["chunked"] = ppo.values_in_chunks(final_obs, counted, max_rows)
            seen["whole"] = value_of(final_obs)
        return original(values, final_obs, dones, terminated, value_of, max_rows=max_rows)

    monkeypatch.setattr(ppo, "next_values", wrapper)


def test_the_trainer_bounds_the_chunks_by_its_minibatch_rows(small_config, monkeypatch):
    from proxima.trainer import Trainer

    cfg = small_config(num_envs=4, num_steps=32, num_minibatches=4)
    trainer = Trainer(cfg)
    try:
        seen: dict = {}
        _capture_bound(monkeypatch, seen)
        trainer.parts.rollout()
        trainer.parts.advantages()
    finally:
        trainer.close()
    assert seen["max_rows"] == 4 * 32 // 4  # ppo.update's minibatch rows
    assert seen["rows"] == [32] * 4
    torch.testing.assert_close(seen["chunked"], seen["whole"], rtol=1e-6, atol=1e-6)


def test_a_population_bounds_the_chunks_by_its_minibatch_rows_of_all_members(small_config, monkeypatch):
    from proxima.population import Population, member_configs

    cfg = small_config(num_envs=4, num_steps=32, num_minibatches=8)
    pop = Population(member_configs(cfg, [1, 2, 3]))
    try:
        seen: dict = {}
        _capture_bound(monkeypatch, seen)
        pop.collect()
        pop.advantages()
    finally:
        pop.close()
    assert seen["max_rows"] == 3 * 4 * 32 // 8  # ppo.update's minibatch: P x T*N / num_minibatches
    assert seen["rows"] == [48] * 8  # 4 steps of 3 x 4 rows
    torch.testing.assert_close(seen["chunked"], seen["whole"], rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------- sizing
def _pixel_layout():
    from proxima.envs import make_env
    from proxima.envs.spaces import obs_layout

    env = make_env("PixelQuadrant-v0", 1)
    try:
        return obs_layout(env.single_observation_space)
    finally:
        env.close()


# PixelQuadrant-v0: 36x36x3 uint8 through the Nature CNN, per row 3888 + 32*8*8 + 64*3*3 + 64*1*1 + 512 floats
CNN_ROW = 3888 + 2048 + 576 + 64 + 512


def test_sizing_counts_the_bootstrap_chunk_beyond_a_minibatch():
    layout = _pixel_layout()
    # 4 minibatches of 2 steps' rows (num_minibatches > num_steps): a chunk is one whole step, 64 rows
    cfg = PPOConfig(env_id="PixelQuadrant-v0", num_envs=64, num_steps=4, num_minibatches=8)
    assert sizing.minibatch_rows(cfg) == 32 and sizing.bootstrap_rows(cfg) == 64
    assert sizing.bootstrap_bytes(cfg, layout) == (64 - 32) * CNN_ROW * 4
    per_sample = 2 * 3888 + 8 + 18 + 20  # uint8 obs and final_obs, action, the float and flag buffers
    assert sizing.estimate_bytes(cfg, 3888, 1, True, layout) == (
        4 * 64 * per_sample + (64 - 32) * CNN_ROW * 4 + 64 * sizing.env_bytes(3888, True))
    # a chunk within a minibatch: the update's activations (network_terms) already bound it
    fits = PPOConfig(env_id="PixelQuadrant-v0", num_envs=16, num_steps=512, num_minibatches=4)
    assert sizing.bootstrap_rows(fits) == 2048 and sizing.bootstrap_bytes(fits, layout) == 0


def test_sizing_counts_an_mlp_critics_bootstrap_layers_over_one_chunk_not_the_batch():
    cfg = PPOConfig(num_envs=8, num_steps=128, num_minibatches=4)  # 64,64 hidden; chunk 32 steps x 8 = 256 rows
    # the bootstrap's chunk reuses a minibatch's activations (256 rows each here): nothing beyond them
    assert sizing.bootstrap_rows(cfg) == 256 and sizing.bootstrap_bytes(cfg) == 0
    whole = PPOConfig(num_envs=8, num_steps=128, num_minibatches=1)  # one minibatch: the whole batch, as before
    assert sizing.bootstrap_bytes(whole) == 0


def test_check_fits_refuses_an_image_run_whose_bootstrap_chunk_does_not_fit(monkeypatch):
    from proxima.config import ConfigError

    cfg = PPOConfig(env_id="PixelQuadrant-v0", num_envs=4096, num_steps=2, num_minibatches=8)  # chunk 4096 rows, minibatch 1024
    layout = _pixel_layout()
    without = (sizing.estimate_bytes(cfg, 3888, 1, True, layout) - sizing.bootstrap_bytes(cfg, layout)
               + sizing.network_bytes(cfg, 3888, 1, layout) + sizing.eval_bytes(cfg, 3888, True))
    extra = sizing.bootstrap_bytes(cfg, layout)
    assert extra == 3072 * CNN_ROW * 4
    monkeypatch.setattr(sizing, "free_memory", lambda device: without + extra // 2)
    line = r"^--num-envs 4096 x --num-steps 2: needs ~.* on cuda, .* free; lower --num-envs or --num-steps$"
    with pytest.raises(ConfigError, match=line):
        sizing.check_fits(cfg, torch.device("cuda"), sizing.env_probe(cfg))
    monkeypatch.setattr(sizing, "free_memory", lambda device: without + extra)
    sizing.check_fits(cfg, torch.device("cuda"), sizing.env_probe(cfg))  # fits: no error
