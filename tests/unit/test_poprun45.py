"""Review 45 (a power user's populations): evaluate_population given a single run's directory (or one
member's) says what it is and how to evaluate it; the number of checkpoints a dry run's disk estimate
counts; the estimate's note."""

from __future__ import annotations

import json

import pytest
import torch

from proxima.config import PPOConfig
from proxima import population
from proxima.population_eval import evaluate_population
from proxima.population_report import PopulationError

from tests.cli_helpers import fake_run_dir


# ---------------------------------------------------------------- 5: a single run given to evaluate_population
def test_evaluate_population_of_a_single_run_says_it_is_one_and_how_to_evaluate_it(tmp_path):
    run = fake_run_dir(tmp_path, "single2")
    with pytest.raises(PopulationError) as e:
        evaluate_population(run)
    # was: "RUN/population.json: not a readable population file (FileNotFoundError)"
    assert str(e.value) == (f"{run}: a single run, not a population (a run directory with no population.json): "
                            f"evaluate it with proxima.evaluate(proxima.load({str(run)!r}))")


def test_evaluate_population_of_a_run_with_only_checkpoints_says_it_is_a_single_run(tmp_path):
    run = tmp_path / "r"
    (run / "checkpoints").mkdir(parents=True)
    with pytest.raises(PopulationError, match=r": a single run, not a population "):
        evaluate_population(run)


def test_evaluate_population_of_a_member_names_its_population(tmp_path):
    pop = tmp_path / "pop"
    pop.mkdir()
    (pop / "population.json").write_text(json.dumps({"kind": "ppo-population"}))
    member = fake_run_dir(pop, "m000-seed1")
    with pytest.raises(PopulationError) as e:
        evaluate_population(member)
    assert str(e.value) == (f"{member}: one member of the population {pop}, not a population (no population.json): "
                            f"evaluate_population({str(pop)!r}) evaluates every member, "
                            f"proxima.evaluate(proxima.load({str(member)!r})) this one")


def test_evaluate_population_of_a_folder_with_nothing_still_names_the_missing_population_json(tmp_path):
    with pytest.raises(PopulationError, match=r"population.json: not a readable population file"):
        evaluate_population(tmp_path)


# ---------------------------------------------------------------- 4: the estimate's checkpoint count and note
def _cfg(**kw) -> PPOConfig:
    return PPOConfig(env_id="CartPole-v1", num_envs=2, num_steps=16, **kw)  # 32 steps an iteration


@pytest.mark.parametrize("kw, kept", [
    (dict(total_timesteps=320, checkpoint_every=0, checkpoint_minutes=0, keep_checkpoints=3), 1),  # only the end's
    (dict(total_timesteps=320, checkpoint_every=4, checkpoint_minutes=0, keep_checkpoints=0), 3),  # 4, 8 and the end (10)
    (dict(total_timesteps=320, checkpoint_every=5, checkpoint_minutes=0, keep_checkpoints=0), 2),  # 5 and 10, the end
    (dict(total_timesteps=320, checkpoint_every=1, checkpoint_minutes=0, keep_checkpoints=3), 3),
    (dict(total_timesteps=64, checkpoint_every=50, checkpoint_minutes=10.0, keep_checkpoints=3), 2),  # timed: up to 1 an iteration
])
def test_checkpoints_kept_counts_what_the_run_ends_holding(kw, kept):
    assert population.checkpoints_kept(_cfg(**kw)) == kept


def test_the_estimate_note_names_memory_disk_and_what_is_unknown():
    estimate = {"device": "cpu", "memory_bytes": 3 << 20, "memory_free_bytes": None, "checkpoint_bytes": 2 << 20,
                "checkpoints_kept": 3, "kept_checkpoint_bytes": 6 << 20, "disk_free_bytes": 10 << 30}
    assert population.estimate_line(estimate, 8, 3) == (
        "proxima: estimate: 8 members need at least ~3.0 MiB of memory on cpu (available memory unknown); each checkpoint "
        "writes ~2.0 MiB to disk (the population's file and each member's weights), up to ~6.0 MiB for the 3 kept "
        "(--keep-checkpoints 3); 10.0 GiB free there")


def test_the_estimate_scales_its_checkpoints_with_the_members_and_keeps_the_json_keys(tmp_path):
    from proxima.sizing import EnvSizes

    probe = lambda: EnvSizes(4, 1, True)  # noqa: E731
    one = population.population_estimate(_cfg(), 1, torch.device("cpu"), probe, tmp_path)
    many = population.population_estimate(_cfg(), 101, torch.device("cpu"), probe, tmp_path)
    assert set(many) == {"device", "memory_bytes", "memory_free_bytes", "checkpoint_bytes", "checkpoints_kept",
                         "kept_checkpoint_bytes", "disk_free_bytes"}
    per_member = (many["checkpoint_bytes"] - one["checkpoint_bytes"]) / 100
    # 9,090 parameters (4-64-64-1 actor head as sized, 4-64-64-1 critic): 4 float32 copies, plus RNG states and config
    assert 16 * 9_000 < per_member < 16 * 9_000 + 20_000
    assert many["kept_checkpoint_bytes"] == many["checkpoints_kept"] * many["checkpoint_bytes"]
    assert many["memory_bytes"] > one["memory_bytes"]


def test_the_estimate_off_the_cpu_names_the_host_memory_the_members_take_too(monkeypatch):
    from proxima.sizing import EnvSizes

    monkeypatch.setattr("proxima.sizing.free_memory", lambda device: (5 << 30) if device.type == "cpu" else None)
    estimate = population.population_estimate(_cfg(), 4, torch.device("cuda"), lambda: EnvSizes(4, 1, True))
    assert estimate["host_memory_bytes"] == 4 * population.MEMBER_HOST_BYTES and estimate["host_free_bytes"] == 5 << 30
    assert estimate["memory_free_bytes"] is None and estimate["disk_free_bytes"] is None
    line = population.estimate_line(estimate, 4, 3)
    assert "of memory on cuda (available memory unknown), and ~2.0 MiB of host memory (5.0 GiB available); " in line
