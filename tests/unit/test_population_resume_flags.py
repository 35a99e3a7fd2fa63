"""What a population does with flags meant for one process or one run: torchrun's ranks are refused
before anything is locked or written, and --stop-return/--stop-episodes, which no member applies,
are noted on resume as on a new population and recorded as a member trains (stop_return: null)."""

from __future__ import annotations

import json

import pytest
import yaml
from cli_helpers import one_error_line, run_main, snapshot

from proxima import checkpoint as ckpt
from proxima import population_run
from proxima.config import PPOConfig
from proxima.population import member_configs
from proxima.population_run import train_population

SEEDS = [1, 2]
#: 2 iterations of 2 envs x 32 steps per member: a population trained and resumed in about a second
TOTAL = 128


def _population(run_dir, **kw):
    cfg = PPOConfig(**{**dict(env_id="CartPole-v1", backend="native", num_envs=2, num_steps=32, total_timesteps=TOTAL,
                               num_minibatches=2, update_epochs=1, threads=1, progress=False, eval_episodes=0,
                               checkpoint_every=0), **kw})
    return train_population(member_configs(cfg, SEEDS, {}), SEEDS, {}, run_dir=run_dir, quiet=True, evaluate_at_end=False)


def _member_dirs(run_dir) -> list:
    return [run_dir / m["dir"] for m in json.loads((run_dir / "population.json").read_text())["member_dirs"]]


def _config_yaml(member_dir) -> dict:
    return yaml.safe_load((member_dir / "config.yaml").read_text())


def _last_step(member_dir) -> int:
    return int((member_dir / "metrics.csv").read_text().strip().splitlines()[-1].split(",")[1])


@pytest.mark.parametrize("extra", [[], ["--total-timesteps", str(2 * TOTAL)]])
def test_resume_under_torchrun_is_refused_before_anything_is_locked_or_written(tmp_path, monkeypatch, capsys, extra):
    run = _population(tmp_path / "pop")
    before = snapshot(run)
    # what torchrun sets in each rank: every rank would lock, check and resume the same population
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    code, out, err = run_main(["resume", str(run), *extra], capsys)
    assert code == 2
    assert one_error_line(err, "proxima resume") == "--nproc: a population trains in one process; drop --nproc (or torchrun)"
    assert snapshot(run) == before  # population.json's target untouched, no lock left, nothing set aside


def test_resume_notes_stop_flags_a_population_does_not_apply_and_trains_every_member_to_the_end(tmp_path, capsys):
    run = _population(tmp_path / "pop")
    code, out, err = run_main(["resume", str(run), "--total-timesteps", str(2 * TOTAL), "--stop-return", "10",
                               "--stop-episodes", "5"], capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if "single runs" in line]
    assert notes == ["proxima: note: --stop-return 10 and --stop-episodes 5 apply to single runs; each member of the "
                     "population trains for --total-timesteps"]
    for d in _member_dirs(run):
        assert _last_step(d) == 2 * TOTAL  # CartPole's episodes average over 10 at once: a single run would stop there
        cfg = _config_yaml(d)
        assert (cfg["stop_return"], cfg["stop_episodes"], cfg["total_timesteps"]) == (None, 20, 2 * TOTAL)


def test_member_config_records_no_stop_return_it_never_applied(tmp_path, capsys):
    run = _population(tmp_path / "pop", stop_return=500.0, stop_episodes=7)  # as the fast preset gives
    for d in _member_dirs(run):
        assert _last_step(d) == TOTAL
        cfg = _config_yaml(d)
        assert (cfg["stop_return"], cfg["stop_episodes"]) == (None, 20)
        assert ckpt.load_checkpoint(ckpt.list_checkpoints(d)[-1])["config"]["stop_return"] is None
    state = ckpt.load_checkpoint(ckpt.list_checkpoints(run)[-1])
    assert [c["stop_return"] for c in state["configs"]] == [None, None]
    # a member's config.yaml given back to the resume of its population is its own: accepted, nothing noted
    member = _member_dirs(run)[0]
    code, out, err = run_main(["train", "CartPole-v1", "--seeds", "1,2", "--config", str(member / "config.yaml"),
                               "--resume", "auto", "--run-dir", str(run), "--total-timesteps", str(2 * TOTAL)], capsys)
    assert code == 0, err
    assert "single runs" not in err
    assert all(_last_step(d) == 2 * TOTAL for d in _member_dirs(run))


def test_an_older_population_that_recorded_stop_return_still_resumes_and_records_null(tmp_path, monkeypatch, capsys):
    # a population written before members' configs were reset: its checkpoint and config.yaml hold 500
    monkeypatch.setattr(population_run, "as_member_config", lambda cfg: cfg, raising=False)
    run = _population(tmp_path / "old", stop_return=500.0)
    monkeypatch.undo()
    member = _member_dirs(run)[0]
    assert _config_yaml(member)["stop_return"] == 500.0
    assert ckpt.load_checkpoint(ckpt.list_checkpoints(run)[-1])["configs"][0]["stop_return"] == 500.0
    old_yaml = tmp_path / "old-member.yaml"
    old_yaml.write_text((member / "config.yaml").read_text())
    # its own member config, 500 and all, is accepted by the command that resumes it (and noted, as train notes it)
    code, out, err = run_main(["train", "CartPole-v1", "--seeds", "1,2", "--config", str(old_yaml), "--resume", "auto",
                               "--run-dir", str(run), "--total-timesteps", str(2 * TOTAL)], capsys)
    assert code == 0, err
    assert "proxima: note: --stop-return 500 applies to single runs" in err
    code, out, err = run_main(["resume", str(run), "--total-timesteps", str(3 * TOTAL)], capsys)
    assert code == 0, err
    for d in _member_dirs(run):
        assert _last_step(d) == 3 * TOTAL
        assert _config_yaml(d)["stop_return"] is None


def test_resuming_a_complete_population_prints_only_its_note(tmp_path, capsys):
    """A complete population trains nothing on resume: its note says so, and no "resuming population
    ... at step N" line claims otherwise (as for a single run)."""
    run = _population(tmp_path / "pop")
    capsys.readouterr()
    code, _, err = run_main(["resume", str(run)], capsys)
    assert code == 0, err
    assert "resuming population" not in err
    assert [ln for ln in err.splitlines() if ln.startswith("proxima:")] == [
        ln for ln in err.splitlines() if "the run is complete" in ln]
    assert any("the run is complete" in ln for ln in err.splitlines())


def test_a_population_trains_and_resumes_in_float32_under_a_float64_default(tmp_path):
    """As a single run: the caller's float64 default dtype does not reach the stacked agent (it failed with
    "Input dtypes must be the same"), and is the default again afterwards."""
    import torch

    callers = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        run = _population(tmp_path / "pop")
        assert torch.get_default_dtype() == torch.float64
        population_run.resume_population(run, overrides={"total_timesteps": 2 * TOTAL}, quiet=True, evaluate_at_end=False)
        assert torch.get_default_dtype() == torch.float64
        assert [_last_step(d) for d in _member_dirs(run)] == [2 * TOTAL] * len(SEEDS)
    finally:
        torch.set_default_dtype(callers)
