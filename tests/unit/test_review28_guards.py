"""Review 28 (safety rails): the memory check's CPU estimate stays below what a run really grows by
(the bootstrap pass counted as what the CPU evaluates, and as the larger of it and the update's
minibatch activations, not their sum); its line names --num-minibatches only when more of them
would fit; atomic writes cut a long target name to a byte budget, not a character count."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

from cli_helpers import error_line, run_main
from proxima import atomic, sizing
from proxima.config import ConfigError, PPOConfig, validate

CPU = torch.device("cpu")
MiB, GiB = 2**20, 2**30


def _cartpole(num_envs: int, num_steps: int, num_minibatches: int) -> PPOConfig:
    return PPOConfig(env_id="CartPole-v1", num_envs=num_envs, num_steps=num_steps, num_minibatches=num_minibatches,
                     update_epochs=1, total_timesteps=num_envs * num_steps, eval_episodes=1, threads=1)


def _estimate(cfg: PPOConfig, device=CPU) -> int:
    """What check_fits weighs against the free memory (est.py of the review)."""
    sizes = sizing.env_probe(cfg)()
    obs, act, native = sizes
    return (sizing.estimate_bytes(cfg, obs, act, native, sizes.layout, device) + sizing.eval_bytes(cfg, obs, native)
            + sizing.network_bytes(cfg, obs, act, sizes.layout))


# Growth of the peak RSS over a 64-step run's (meas0, ~0.26 GiB), measured by the review with
#   /usr/bin/time -v python -m proxima train CartPole-v1 --num-envs 4096 --num-steps 512 --num-minibatches M \
#       --update-epochs 1 --total-timesteps 2097152 --threads 1 --eval-episodes 1 --no-progress
# (baseline: --num-envs 4 --num-steps 16 --num-minibatches 4 --total-timesteps 64): M=4 ~754 MiB, M=1 ~2550 MiB.
@pytest.mark.parametrize("num_minibatches, measured_mib", [(4, 754), (1, 2550)])
@pytest.mark.parametrize("device", [CPU, None], ids=["cpu", "unnamed"])
def test_the_cpu_estimate_stays_below_the_measured_growth(num_minibatches, measured_mib, device):
    estimate = _estimate(_cartpole(4096, 512, num_minibatches), device)
    assert estimate < measured_mib * MiB, f"{estimate / MiB:.0f} MiB estimated, {measured_mib} MiB measured"


def test_the_cpu_bootstrap_is_the_last_step_and_never_adds_to_a_larger_minibatch():
    cfg = _cartpole(4096, 512, 4)
    assert sizing.bootstrap_rows(cfg, CPU) == 4096  # the last step: ppo.next_values reuses values[1:] on the CPU
    assert sizing.bootstrap_rows(cfg, torch.device("cuda")) == 128 * 4096  # every step, a minibatch's rows a call
    assert sizing.bootstrap_bytes(cfg, None, CPU) == sizing.bootstrap_bytes(cfg, None, torch.device("cuda")) == 0
    # a step wider than a minibatch (num_minibatches > num_steps): only the rows beyond it add up
    wide = _cartpole(4096, 2, 8)  # 4096 rows a step, 1024 a minibatch; 64,64 hidden: 128 a row, 256 with the actor
    assert sizing.bootstrap_bytes(wide, None, CPU) == (4096 * 128 - 1024 * 256) * 4


def test_the_reviewers_cpu_run_is_no_longer_refused_at_3_gib_and_one_that_cannot_fit_still_is(monkeypatch):
    cfg = _cartpole(4096, 512, 1)  # peaks at 2.74 GiB in all (refuse.py: refused before, 3.1 GB estimated)
    monkeypatch.setattr(sizing, "free_memory", lambda device: int(3.0 * GiB))
    sizing.check_fits(cfg, CPU, sizing.env_probe(cfg))  # no error
    monkeypatch.setattr(sizing, "free_memory", lambda device: 2 * GiB)  # below the ~2.15 GiB it surely needs
    with pytest.raises(ConfigError, match=r"^one minibatch \(--num-envs 4096 x --num-steps 512 / --num-minibatches 1 = "
                                          r"2,097,152 rows\) needs ~2\.0 GiB of activations on cpu \(~2\.2 GiB in all\), "
                                          r"2\.0 GiB free; raise --num-minibatches, or lower --num-envs or --num-steps$"):
        sizing.check_fits(cfg, CPU, sizing.env_probe(cfg))


# ----------------------------------------------------------------- --num-minibatches only when it helps
def _refusal(cfg: PPOConfig, sizes=(4, 1, True)) -> str:
    """check_fits's line for ``cfg`` on the CPU, the env sized as ``sizes`` (CartPole's by default)."""
    with pytest.raises(ConfigError) as e:
        sizing.check_fits(cfg, CPU, lambda: sizing.EnvSizes(*sizes))
    return str(e.value)


def test_a_run_too_big_at_any_minibatch_count_leads_with_the_rows(monkeypatch):
    monkeypatch.setattr(sizing, "free_memory", lambda device: int(22.2 * GiB))
    cfg = PPOConfig(env_id="CartPole-v1", num_envs=65536, num_steps=8192, total_timesteps=10**12)  # 4 minibatches
    line = _refusal(cfg)
    assert line == ("one minibatch (--num-envs 65536 x --num-steps 8192 / --num-minibatches 4 = 134,217,728 rows) needs "
                    "~128.0 GiB of activations on cpu (~167.0 GiB in all), 22.2 GiB free; lower --num-envs or --num-steps: "
                    "the rollout buffers alone need ~39.0 GiB (at any --num-minibatches)")
    # the count it names is legal, and the run with it is refused naming the rows alone
    most = dataclasses.replace(cfg, num_minibatches=268435456)
    validate(most)
    assert _refusal(most) == ("--num-envs 65536 x --num-steps 8192: needs ~39.0 GiB on cpu, 22.2 GiB free; "
                              "lower --num-envs or --num-steps")
    # one step a run: --num-steps cannot go lower, and the bootstrap pass's N rows through the critic
    # are most of what is left (--hidden-sizes); an odd batch's most minibatches leave 3 rows each
    one = PPOConfig(num_envs=3**19, num_steps=1, num_minibatches=1, total_timesteps=3**19)
    assert sizing.most_minibatches(one) == 3**18
    assert _refusal(one).endswith("; lower --num-envs or --hidden-sizes: the rollout buffers and the bootstrap pass "
                                  "alone need ~638.6 GiB (at any --num-minibatches)")
    assert sizing.most_minibatches(dataclasses.replace(one, norm_adv=False)) == 3**19  # minibatches of 1 row


def test_a_run_that_fits_with_more_minibatches_is_told_to_raise_them(monkeypatch):
    monkeypatch.setattr(sizing, "free_memory", lambda device: int(22.2 * GiB))
    cfg = PPOConfig(env_id="CartPole-v1", num_envs=65536, num_steps=512, num_minibatches=1, total_timesteps=10**12)
    assert _refusal(cfg) == (
        "one minibatch (--num-envs 65536 x --num-steps 512 / --num-minibatches 1 = 33,554,432 rows) needs ~32.0 GiB of "
        "activations on cpu (~34.4 GiB in all), 22.2 GiB free; raise --num-minibatches, or lower --num-envs or --num-steps")
    sizing.check_fits(dataclasses.replace(cfg, num_minibatches=2), CPU, lambda: sizing.EnvSizes(4, 1, True))  # and it fits


def test_the_cli_says_so_in_one_line_and_writes_nothing(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(sizing, "free_memory", lambda device: int(22.2 * GiB))
    code, _, err = run_main(["train", "CartPole-v1", "--num-envs", "65536", "--num-steps", "8192", "--total-timesteps",
                             "1e12", "--run-dir", str(tmp_path / "r"), "--no-progress"], capsys)
    line = error_line(code, err, "; lower --num-envs or --num-steps: the rollout buffers alone need ~",
                      " GiB (at any --num-minibatches)")
    assert "raise --num-minibatches" not in line and not (tmp_path / "r").exists()


# ----------------------------------------------------------------- atomic: a byte budget for the name
@pytest.mark.parametrize("name", ["é" * 120 + ".png", "a" + "é" * 127, "a" * 240 + ".png", "€" * 80 + ".csv"])
def test_a_long_multibyte_name_is_written_through_a_temp_name_within_255_bytes(tmp_path, name):
    assert len(os.fsencode(name)) <= 255  # a legal name
    target = atomic.write_atomic(tmp_path / name, b"x")
    assert target.read_bytes() == b"x" and os.listdir(tmp_path) == [name]  # no temporary file left
    fd, tmp = atomic.new_temp_file(tmp_path / name)
    os.close(fd)
    tmp.unlink()
    encoded = os.fsencode(tmp.name)
    assert len(encoded) <= 255 and encoded.decode("utf-8")  # cut on a character boundary: it decodes
    kept = tmp.name[1:].rsplit(".", 2)[0]
    assert name.startswith(kept) and 200 - 3 < len(os.fsencode(kept)) <= 200
