"""Review 47 of continuous control: a run whose total is not whole batches still ends with its train-on line
(and a preset's cut total is noted as a typed one is); the preset applied is named at the start and recorded in
meta.json; --log-std-init (SB3's log_std_init) sets the Normal head's initial log std; an env whose own
NormalizeReward scales the rewards the training returns sum says so when training starts."""

import json
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

import proxima
from proxima import cli
from proxima.agent import Agent
from proxima.config import PPOConfig
from tests.cli_helpers import edit_checkpoint, error_line, module_written_in, run_main

#: a Pendulum run of 2 envs x 64 steps: 128-step batches
TINY = ["--num-envs", "2", "--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1",
        "--no-progress", "--eval-episodes", "0"]


# -- 1. the train-on line of a total cut to whole batches -----------------------------------------------------------

def test_a_total_that_is_not_whole_batches_ends_with_the_train_on_line(tmp_path, capsys):
    run = tmp_path / "pend"
    code, out, err = run_main(["train", "Pendulum-v1", *TINY, "--total-timesteps", "300", "--run-dir", str(run)], capsys)
    assert code == 0, err
    assert "training 256 steps (2 iterations)" in err
    assert out.splitlines()[-2:] == [f"train on: proxima resume {run} --total-timesteps 512", f"run directory: {run}"]
    # a resume to a total cut the same way (700 trains to 640) says it too
    code, out, err = run_main(["resume", str(run), "--total-timesteps", "700"], capsys)
    assert code == 0, err
    assert out.splitlines()[-2:] == [f"train on: proxima resume {run} --total-timesteps 1280", f"run directory: {run}"]


@pytest.mark.parametrize("world, said", [("4", True), ("1", False)])
def test_the_train_on_line_compares_the_step_with_the_whole_batches_of_every_process(world, said, monkeypatch, capsys):
    # 5,000 steps over 4 envs x 128 steps: 4,096 in 4 processes (2,048-step iterations), 4,608 in one
    monkeypatch.setenv("WORLD_SIZE", world)
    policy = SimpleNamespace(config={"total_timesteps": 5000, "num_envs": 4, "num_steps": 128}, env_id="CartPole-v1",
                             global_step=4096)
    cli.say_run_trained("r", policy, quiet=False)
    out = capsys.readouterr().out
    assert any(line.startswith("train on: ") and line.endswith(" --total-timesteps 8192") for line in out.splitlines()) is said, out


def test_a_presets_own_total_over_its_own_batch_goes_without_the_typed_totals_note(capsys):
    # the preset's choice (every README example would carry a note); its start line names the preset
    code, _, err = run_main(["train", "Pendulum-v1", "--dry-run"], capsys)
    assert code == 0, err
    assert "not a multiple" not in err and err.splitlines()[0].startswith("proxima: preset Pendulum-v1/default: ")
    code, _, err = run_main(["train", "Pendulum-v1", "--total-timesteps", "20000", "--dry-run"], capsys)
    assert ("proxima: note: --total-timesteps 20,000 is not a multiple of the batch (4,096 steps = num_envs x "
            "num_steps): training 16,384 steps (4 iterations)") in err.splitlines()


# -- 2. the preset applied, named -----------------------------------------------------------------------------------

def test_the_preset_applied_is_named_with_the_fields_no_flag_replaced(capsys):
    code, _, err = run_main(["train", "Pendulum-v1", "--num-envs", "1", "--num-steps", "2048", "--lr", "3e-4",
                             "--total-timesteps", "4096", "--dry-run"], capsys)
    assert code == 0, err
    # gae_lambda 0.95 is PPOConfig's own: not said; seven fields, the first five named
    assert err.splitlines()[0] == (
        "proxima: preset Pendulum-v1/default: backend native, gamma 0.95, update_epochs 10, num_minibatches 16, "
        "ent_coef 0 and 2 more (proxima presets Pendulum-v1 default lists them; --preset none for PPOConfig's defaults)")


@pytest.mark.parametrize("argv", [["Pendulum-v1", "--preset", "none"], ["Pendulum-v1", "--quiet"],
                                  ["CartPole-v1", "--total-timesteps", "512"]])  # CartPole's default: PPOConfig's values
def test_no_preset_line_without_a_preset_that_changes_anything(argv, capsys):
    code, _, err = run_main(["train", *argv, "--dry-run"], capsys)
    assert code == 0, err
    assert "proxima: preset " not in err, err


def test_meta_json_records_the_preset_and_report_shows_it(tmp_path, capsys):
    run, bare = tmp_path / "pend", tmp_path / "bare"
    assert run_main(["train", "Pendulum-v1", *TINY, "--total-timesteps", "128", "--run-dir", str(run), "--quiet"],
                    capsys)[0] == 0
    assert run_main(["train", "Pendulum-v1", "--preset", "none", *TINY, "--total-timesteps", "128", "--run-dir",
                     str(bare), "--quiet"], capsys)[0] == 0
    assert json.loads((run / "meta.json").read_text())["preset"] == "Pendulum-v1/default"
    assert json.loads((bare / "meta.json").read_text())["preset"] == "none"
    code, out, err = run_main(["report", str(run), "--out", str(tmp_path / "report.md")], capsys)
    assert code == 0, err
    assert "| preset | Pendulum-v1/default |" in (tmp_path / "report.md").read_text()


# -- 3. --log-std-init ----------------------------------------------------------------------------------------------

BOX = gym.spaces.Box(-2.0, 2.0, (3,), np.float32)


@pytest.mark.parametrize("obs_space", [
    gym.spaces.Box(-1.0, 1.0, (4,), np.float32),  # the MLP path
    gym.spaces.Box(0, 255, (36, 36, 1), np.uint8),  # the CNN path
    gym.spaces.Dict({"v": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)}),  # the Dict path
])
def test_the_normal_heads_log_std_starts_at_log_std_init_on_every_encoder(obs_space):
    agent = Agent(obs_space, BOX, encoder="auto", log_std_init=-2.0)
    assert torch.equal(agent.actor_logstd.detach(), torch.full((1, 3), -2.0))
    assert torch.equal(Agent(obs_space, BOX, encoder="auto").actor_logstd.detach(), torch.zeros(1, 3))


def test_a_run_given_log_std_init_starts_there_and_records_it(tmp_path):
    from proxima.trainer import Trainer

    cfg = PPOConfig(env_id="Pendulum-v1", num_envs=2, num_steps=64, num_minibatches=2, log_std_init=-1.5,
                    total_timesteps=128, run_dir=str(tmp_path / "r"))
    trainer = Trainer(cfg, run_dir=tmp_path / "r", quiet=True)
    try:
        assert torch.equal(trainer.agent.actor_logstd.detach(), torch.full((1, 1), -1.5))
    finally:
        trainer.env.close()


def test_log_std_init_of_a_discrete_env_is_refused_in_one_line(tmp_path, capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--log-std-init", "-1", "--total-timesteps", "512",
                             "--run-dir", str(tmp_path / "c")], capsys)
    assert error_line(code, err) == ("proxima train: error: --log-std-init -1: Box actions only (a Normal's log std); "
                                     "this env's action space is Discrete(2), which has none: drop --log-std-init")
    assert not (tmp_path / "c").exists()
    assert run_main(["train", "CartPole-v1", "--log-std-init", "-1", "--dry-run"], capsys)[0] == 2


@pytest.mark.parametrize("value", ["30", "nan"])
def test_log_std_init_out_of_range_is_refused(value, capsys):
    code, _, err = run_main(["train", "Pendulum-v1", "--log-std-init", value, "--dry-run"], capsys)
    assert "must be a number in [-20, 20] (the std is exp of it: -2 is std 0.14, 0 std 1)" in error_line(code, err)


def test_a_population_refuses_a_sweep_of_log_std_init_rather_than_ignore_it(tmp_path, capsys):
    # one --log-std-init for every member trains (tests/unit/test_popmeta48.py); a value per member is not wired yet
    code, _, err = run_main(["train", "Pendulum-v1", "--seeds", "1-2", "--sweep", "log_std_init=-1,0", *TINY,
                             "--total-timesteps", "128", "--run-dir", str(tmp_path / "p")], capsys)
    assert error_line(code, err) == (
        "proxima train: error: --sweep log_std_init: one setting for every member of a population (not per member "
        "yet: each member starts from the one log_std_init given); give every member one with --log-std-init V, or "
        "train one population per value")
    with pytest.raises(proxima.ConfigError, match=r"^sweep=\{'log_std_init': \[\.\.\.\]\}: one setting for every member"):
        proxima.train_population(PPOConfig(env_id="Pendulum-v1"), seeds=[1, 2], sweep={"log_std_init": [-1.0, 0.0]})


def test_a_checkpoint_from_before_log_std_init_resumes_as_log_std_0(tmp_path, capsys):
    run = tmp_path / "old"
    assert run_main(["train", "Pendulum-v1", *TINY, "--total-timesteps", "128", "--run-dir", str(run), "--quiet"],
                    capsys)[0] == 0
    edit_checkpoint(run, lambda state: state["config"].pop("log_std_init"))
    text = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text("".join(line for line in text.splitlines(keepends=True)
                                             if not line.startswith("log_std_init")))
    code, out, err = run_main(["resume", str(run), "--total-timesteps", "256"], capsys)
    assert code == 0, err
    assert "log_std_init: 0.0" in (run / "config.yaml").read_text()
    assert proxima.load(run).global_step == 256


def test_sb3s_policy_kwargs_log_std_init_is_translated_to_the_field():
    from proxima.config import ConfigError, from_dict

    with pytest.raises(ConfigError) as e:
        from_dict({"policy_kwargs": "dict(log_std_init=-2, net_arch=[64, 64])"}, source="zoo.yml")
    assert str(e.value) == "zoo.yml: unknown field 'policy_kwargs' (log_std_init: -2; hidden_sizes: [64, 64])"
    assert from_dict({"log_std_init": -2}).log_std_init == -2.0


# -- 4. training returns of rewards the env's own NormalizeReward scaled ---------------------------------------------

FACTORIES = '''
import gymnasium as gym


def make_rew(**kwargs):  # NormalizeReward alone, nothing recording the game's rewards
    return gym.wrappers.NormalizeReward(gym.wrappers.ClipAction(gym.make("Pendulum-v1", **kwargs)), gamma=0.99)


def make_rew_recorded(**kwargs):  # CleanRL's order: RecordEpisodeStatistics inside the NormalizeReward
    env = gym.wrappers.RecordEpisodeStatistics(gym.make("Pendulum-v1", **kwargs))
    return gym.wrappers.NormalizeReward(gym.wrappers.ClipAction(env), gamma=0.99)
'''

SCALED_NOTE = ("proxima: note: charts/episodic_return (the return shown, and --stop-return's) sums the rewards your env's "
               "own NormalizeReward scaled, not the game's: apply RecordEpisodeStatistics before it (CleanRL's order) "
               "for the game's returns (see docs/migrating.md#bring-your-make_env)")


@pytest.fixture
def factories(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "cont47_factories", FACTORIES)


@pytest.mark.parametrize("factory, said", [("make_rew", True), ("make_rew_recorded", False)])
def test_training_says_when_its_returns_sum_rewards_the_envs_normalize_reward_scaled(factory, said, factories,
                                                                                      tmp_path, capsys):
    run = tmp_path / "r"
    code, out, err = run_main(["train", f"cont47_factories:{factory}", *TINY, "--total-timesteps", "128",
                               "--run-dir", str(run)], capsys)
    assert code == 0, err
    assert (SCALED_NOTE in err.splitlines()) is said, err
    code, out, err = run_main(["resume", str(run), "--env", f"cont47_factories:{factory}", "--total-timesteps", "256"],
                              capsys)
    assert code == 0, err
    assert (SCALED_NOTE in err.splitlines()) is said, err
