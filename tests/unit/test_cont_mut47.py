"""Mutation follow-up of review 47's continuous-control items (tests/unit/test_cont47.py): --log-std-init's
inclusive [-20, 20] range, its refusal for every non-Box action space (a positive value too), a hyphenated or
dashed --sweep key of it, resume keeping it and refusing a change, --init-from starting from the checkpoint's
log std, an old checkpoint resuming bit for bit; the preset start line's formatting (commas, true/false, a list,
exactly five fields, Python's words, an Atari game's id and template); a preset's own total over its own batch unnoted
(CartPole-v1, Acrobot-v1, Pendulum-v1, MountainCarContinuous-v0), over a typed batch noted in the preset's name."""

import csv
import json
import shutil

import gymnasium as gym
import numpy as np
import pytest
import torch

import proxima
from proxima.config import ConfigError, PPOConfig
from tests.cli_helpers import edit_checkpoint, error_line, run_main

#: a Pendulum run of 2 envs x 64 steps: 128-step batches
TINY = ["--num-envs", "2", "--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1",
        "--no-progress", "--eval-episodes", "0"]

RANGE = "must be a number in [-20, 20] (the std is exp of it: -2 is std 0.14, 0 std 1)"


def _logstd(path) -> torch.Tensor:
    return torch.load(path, weights_only=True)["agent"]["actor_logstd"]


# -- --log-std-init's range and action spaces --------------------------------------------------------------------------

@pytest.mark.parametrize("value, ok", [("20", True), ("-20", True), ("-20.5", False), ("-30", False), ("-inf", False)])
def test_log_std_init_takes_both_ends_of_its_range_and_refuses_below_it(value, ok, capsys):
    code, _, err = run_main(["train", "Pendulum-v1", f"--log-std-init={value}", "--dry-run"], capsys)
    if ok:
        assert code == 0, err
    else:
        assert error_line(code, err) == f"proxima train: error: --log-std-init {float(value)!r}: {RANGE}"


def test_a_positive_log_std_init_of_a_discrete_env_is_refused_too(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--log-std-init", "1", "--dry-run"], capsys)
    assert error_line(code, err) == ("proxima train: error: --log-std-init 1: Box actions only (a Normal's log std); "
                                     "this env's action space is Discrete(2), which has none: drop --log-std-init")


@pytest.mark.parametrize("space", [gym.spaces.MultiDiscrete([3, 2]), gym.spaces.MultiBinary(4), gym.spaces.Discrete(5)])
def test_every_non_box_action_space_refuses_a_log_std_init(space):
    from proxima.run_setup import check_log_std_init

    with pytest.raises(ConfigError, match=r"^--log-std-init -1: Box actions only .*: drop --log-std-init$"):
        check_log_std_init(PPOConfig(log_std_init=-1.0), space)
    check_log_std_init(PPOConfig(), space)  # 0, the default: nothing to refuse
    check_log_std_init(PPOConfig(log_std_init=-1.0), gym.spaces.Box(-1.0, 1.0, (2,), np.float32))


@pytest.mark.parametrize("sweep", [["--sweep", "log-std-init=-1,0"], ["--sweep=--log-std-init=-1,0"],
                                   ["--sweep", " log_std_init=-1,0"]])
def test_a_population_sweep_of_log_std_init_spelled_as_a_flag_is_refused(sweep, capsys):
    code, _, err = run_main(["train", "Pendulum-v1", "--seeds", "1-2", *sweep, "--dry-run"], capsys)
    assert error_line(code, err) == (
        "proxima train: error: --sweep log_std_init: one setting for every member of a population (not per member "
        "yet: each member starts from the one log_std_init given); give every member one with --log-std-init V, or "
        "train one population per value")


# -- resume, --init-from, old checkpoints ------------------------------------------------------------------------------

def test_a_resume_keeps_the_runs_log_std_init_and_refuses_a_change(tmp_path, capsys):
    run = tmp_path / "r"
    assert run_main(["train", "Pendulum-v1", *TINY, "--log-std-init", "-1", "--total-timesteps", "128",
                     "--run-dir", str(run), "--quiet"], capsys)[0] == 0
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--log-std-init", "0"], capsys)
    assert error_line(code, err).startswith("proxima resume: error: --log-std-init 0.0: cannot change when resuming "
                                            "(the run was trained with -1.0); safe to change on resume: ")
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--log-std-init", "-1", "--quiet"], capsys)
    assert code == 0, err
    assert "log_std_init: -1.0" in (run / "config.yaml").read_text().splitlines()
    assert proxima.load(run).global_step == 256
    # the learned log std goes on from the checkpoint's, near -1 after two small updates (a reset would be near 0)
    assert abs(float(_logstd(run / "checkpoints" / "step_000000000256.pt")) + 1.0) < 0.05


def test_init_from_a_run_of_log_std_init_starts_at_its_learned_log_std(tmp_path, capsys):
    from proxima.trainer import Trainer

    src = tmp_path / "src"
    assert run_main(["train", "Pendulum-v1", "--preset", "none", *TINY, "--log-std-init", "-1.5", "--total-timesteps",
                     "128", "--run-dir", str(src), "--quiet"], capsys)[0] == 0
    learned = _logstd(src / "checkpoints" / "step_000000000128.pt")
    assert abs(float(learned) + 1.5) < 0.05
    cfg = PPOConfig(env_id="Pendulum-v1", num_envs=2, num_steps=64, num_minibatches=2, total_timesteps=128,
                    init_from=str(src), run_dir=str(tmp_path / "new"))
    trainer = Trainer(cfg, run_dir=tmp_path / "new", quiet=True)
    try:
        assert torch.equal(trainer.agent.actor_logstd.detach(), learned)
    finally:
        trainer.env.close()


def test_a_resume_of_a_run_recording_init_from_and_log_std_init_trains_on(tmp_path, capsys):
    # a run started with both (as 1fa43f2 let it): its init_from is history on resume, no refusal of the pair
    src, run = tmp_path / "src", tmp_path / "run"
    for argv in (["--run-dir", str(src)], ["--init-from", str(src), "--run-dir", str(run)]):
        assert run_main(["train", "Pendulum-v1", "--preset", "none", *TINY, "--total-timesteps", "128", *argv,
                         "--quiet"], capsys)[0] == 0
    edit_checkpoint(run, lambda state: state["config"].update(log_std_init=-1.0))
    text = (run / "config.yaml").read_text()
    assert "log_std_init: 0.0\n" in text
    (run / "config.yaml").write_text(text.replace("log_std_init: 0.0\n", "log_std_init: -1.0\n"))
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--quiet"], capsys)
    assert code == 0, err
    assert proxima.load(run).global_step == 256


def test_a_checkpoint_from_before_log_std_init_resumes_bit_for_bit(tmp_path, capsys):
    new, old = tmp_path / "new", tmp_path / "old"
    assert run_main(["train", "Pendulum-v1", *TINY, "--total-timesteps", "128", "--run-dir", str(new), "--quiet"],
                    capsys)[0] == 0
    shutil.copytree(new, old)
    edit_checkpoint(old, lambda state: state["config"].pop("log_std_init"))
    text = (old / "config.yaml").read_text()
    (old / "config.yaml").write_text("".join(line for line in text.splitlines(keepends=True)
                                             if not line.startswith("log_std_init")))
    for run in (new, old):
        code, _, err = run_main(["resume", str(run), "--total-timesteps", "384", "--quiet"], capsys)
        assert code == 0, err

    def learned(run):  # every column but the clock's
        with open(run / "metrics.csv") as f:
            return [{k: v for k, v in row.items() if k not in ("time", "charts/SPS")} for row in csv.DictReader(f)]

    assert len(learned(new)) == 3 and learned(old) == learned(new)
    a, b = (torch.load(run / "checkpoints" / "step_000000000384.pt", weights_only=True) for run in (new, old))
    assert all(torch.equal(a["agent"][k], b["agent"][k]) for k in a["agent"])
    assert b["config"]["log_std_init"] == 0.0


# -- the preset start line ---------------------------------------------------------------------------------------------

def _preset_lines(err: str) -> list:
    return [line for line in err.splitlines() if line.startswith("proxima: preset ")]


def test_the_preset_line_writes_counts_with_commas(capsys):
    code, _, err = run_main(["train", "Pendulum-v1", "--dry-run"], capsys)
    assert code == 0, err
    assert _preset_lines(err) == [
        "proxima: preset Pendulum-v1/default: backend native, num_envs 32, total_timesteps 300,000 (299,008: whole "
        "batches), lr 0.0005, gamma 0.95 and 5 more (proxima presets Pendulum-v1 default lists them; --preset none for "
        "PPOConfig's defaults)"]


def test_exactly_five_fields_have_no_and_more_and_switches_read_true(capsys):
    code, _, err = run_main(["train", "Pendulum-v1", *TINY, "--total-timesteps", "128", "--lr", "3e-4", "--dry-run"],
                            capsys)
    assert code == 0, err
    assert _preset_lines(err) == [
        "proxima: preset Pendulum-v1/default: backend native, gamma 0.95, ent_coef 0, norm_obs true, norm_reward true "
        "(proxima presets Pendulum-v1 default lists them; --preset none for PPOConfig's defaults)"]


def test_a_python_run_of_a_resolved_preset_names_resolve_none_and_records_it(tmp_path, capsys):
    from proxima.presets import resolve

    cfg = resolve("Pendulum-v1")
    cfg.num_envs, cfg.num_steps, cfg.num_minibatches, cfg.update_epochs = 2, 64, 2, 1
    cfg.total_timesteps, cfg.threads, cfg.progress, cfg.eval_episodes = 128, 1, False, 0
    cfg.run_dir = str(tmp_path / "py")
    proxima.train(cfg)
    err = capsys.readouterr().err
    assert _preset_lines(err) == [
        "proxima: preset Pendulum-v1/default: backend native, lr 0.0005, gamma 0.95, ent_coef 0, norm_obs true and 1 "
        "more (proxima presets Pendulum-v1 default lists them; proxima.presets.resolve('Pendulum-v1', 'none') for "
        "PPOConfig's defaults)"]
    assert json.loads((tmp_path / "py" / "meta.json").read_text())["preset"] == "Pendulum-v1/default"


def test_an_atari_games_preset_line_names_the_game_and_the_template(capsys):
    from proxima.presets import resolve
    from proxima.trainer import _note_preset

    _note_preset(resolve("Seaquest-v5"))
    assert capsys.readouterr().err.splitlines() == [
        "proxima: preset Seaquest-v5 (the Atari preset <Game>-v5/default): num_envs 8, total_timesteps 10,000,000 "
        "(9,999,360: whole batches), clip_coef 0.1, encoder cnn (proxima presets Seaquest-v5 default lists them; "
        "--preset none for PPOConfig's defaults)"]


def test_a_presets_list_reads_as_the_flag_takes_it():
    from proxima.trainer import _preset_value

    assert _preset_value([256, 256]) == "256,256"
    assert _preset_value(False) == "false" and _preset_value(2048) == "2,048" and _preset_value(0.0) == "0"


# -- a preset's total over its own batch, and over the user's -------------------------------------------------------

@pytest.mark.parametrize("env", ["CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MountainCarContinuous-v0"])
def test_a_presets_own_total_over_its_own_batch_goes_unnoted(env, capsys):
    code, _, err = run_main(["train", env, "--dry-run"], capsys)
    assert code == 0, err
    assert "is not a multiple of the batch" not in err, err


def test_a_presets_total_over_a_typed_batch_is_noted_with_the_presets_name(capsys):
    code, _, err = run_main(["train", "Pendulum-v1", "--num-envs", "3", "--dry-run"], capsys)
    assert code == 0, err
    assert ("proxima: note: preset Pendulum-v1/default: total_timesteps 300,000 is not a multiple of the batch "
            "(384 steps = num_envs x num_steps): training 299,904 steps (781 iterations)") in err.splitlines()
