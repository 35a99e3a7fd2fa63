"""Mutation tests for review 48's population preset / --log-std-init and eval/success_rate / TransformReward
notes: a swept member that no longer holds any preset value records no preset while population.json names the
one applied; a population resume keeps the preset; a Python PPOConfig records none (null, never 'none'); two
transform wrappers are named both, each once, at train start, in eval.json and on the eval line ('them')."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import proxima
from proxima.config import PPOConfig
from tests.cli_helpers import module_written_in, run_main

#: a population of 2 envs x 16 steps per member: 32-step batches
TINY = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1",
        "--no-progress", "--eval-episodes", "0"]


def _members(run):
    return sorted(d for d in run.iterdir() if d.is_dir() and d.name.startswith("m0"))


def _meta_presets(run) -> list:
    return [json.loads((d / "meta.json").read_text())["preset"] for d in _members(run)]


def _pop_preset(run):
    return json.loads((run / "population.json").read_text())["preset"]


def test_a_swept_member_off_every_preset_value_records_none_and_the_population_the_preset(tmp_path, capsys):
    # CartPole's default preset sets num_envs, num_steps, total_timesteps and lr: the flags replace the first three,
    # so the member swept to another lr holds no value of the preset (its single run would record none)
    run = tmp_path / "p"
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "0", "--sweep", "lr=0.00025,0.001", *TINY,
                             "--total-timesteps", "64", "--run-dir", str(run), "--quiet"], capsys)
    assert code == 0, err
    assert _meta_presets(run) == ["CartPole-v1/default", None]
    assert _pop_preset(run) == "CartPole-v1/default"
    # the other order: the first member holds none, the population still applied the preset
    run2 = tmp_path / "q"
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "0", "--sweep", "lr=0.001,0.00025", *TINY,
                             "--total-timesteps", "64", "--run-dir", str(run2), "--quiet"], capsys)
    assert code == 0, err
    assert _meta_presets(run2) == [None, "CartPole-v1/default"]
    assert _pop_preset(run2) == "CartPole-v1/default"


def test_a_population_resume_keeps_the_preset_in_population_json_and_meta_json(tmp_path, capsys):
    run = tmp_path / "p"
    code, _, err = run_main(["train", "Pendulum-v1", "--seeds", "0-1", "--log-std-init", "-1", *TINY,
                             "--total-timesteps", "32", "--run-dir", str(run), "--quiet"], capsys)
    assert code == 0, err
    assert _pop_preset(run) == "Pendulum-v1/default"
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "64", "--quiet"], capsys)
    assert code == 0, err
    doc = json.loads((run / "population.json").read_text())
    assert doc["total_timesteps_per_member"] == 64  # the resume trained and rewrote the file
    assert doc["preset"] == "Pendulum-v1/default"
    assert _meta_presets(run) == ["Pendulum-v1/default"] * 2
    for d in _members(run):
        assert "log_std_init: -1.0" in (d / "config.yaml").read_text().splitlines()


def test_a_python_config_without_a_preset_records_null_not_none(tmp_path):
    cfg = PPOConfig(env_id="Pendulum-v1", num_envs=2, num_steps=16, num_minibatches=2, update_epochs=1,
                    total_timesteps=32, eval_episodes=0, progress=False, threads=1, log_std_init=-2.0)
    run = proxima.train_population(cfg, seeds=[0, 1], run_dir=tmp_path / "py", quiet=True).run_dir
    assert _meta_presets(run) == [None, None]
    doc = json.loads((run / "population.json").read_text())
    assert "preset" in doc and doc["preset"] is None


def test_python_init_from_with_log_std_init_is_refused_as_a_population(tmp_path):
    with pytest.raises(proxima.ConfigError) as e:
        proxima.train_population(PPOConfig(env_id="Pendulum-v1", log_std_init=-1.0, init_from=str(tmp_path),
                                           num_envs=2, num_steps=16, total_timesteps=64), seeds=[0, 1],
                                 run_dir=tmp_path / "i")
    # the population's own refusal, not check_log_std_init's '... with --init-from: the weights come from ...'
    assert str(e.value).endswith("not supported with train_population's seeds/sweep (not wired for populations yet: "
                                 "members start from fresh networks); leave it at None")
    assert not (tmp_path / "i").exists()


ENVS = '''
import gymnasium as gym


def make_both():  # a clip of a scale: both outside any recorder
    scaled = gym.wrappers.TransformReward(gym.make("CartPole-v1"), lambda r: 4.0 * r)
    return gym.wrappers.ClipReward(scaled, 0.0, 2.0)


def make_twice():  # two scales: one class name, said once
    env = gym.wrappers.TransformReward(gym.make("CartPole-v1"), lambda r: 2.0 * r)
    return gym.wrappers.TransformReward(env, lambda r: 3.0 * r)
'''

DOC = "see docs/migrating.md#bring-your-make_env"


@pytest.fixture
def envs(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "popeval48_envs", ENVS)


def _start_note(names: str, it: str) -> str:
    return (f"proxima: note: charts/episodic_return (the return shown, and --stop-return's) sums the rewards after your "
            f"env's own {names}, not the env's own: apply RecordEpisodeStatistics before {it} (CleanRL's order) for "
            f"the env's own returns ({DOC})")


def _eval_note(names: str, it: str) -> str:
    return (f" (returns of the rewards after the env's own {names}, not the env's own; a RecordEpisodeStatistics "
            f"inside {it} records the env's own: {DOC})")


RUN = ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1",
       "--no-progress", "--eval-episodes", "2", "--total-timesteps", "64"]


def test_two_wrappers_are_named_both_at_train_start_in_eval_json_and_on_the_eval_line(envs, tmp_path, capsys):
    run = tmp_path / "r"
    code, out, err = run_main(["train", "popeval48_envs:make_both", *RUN, "--run-dir", str(run)], capsys)
    assert code == 0, err
    assert _start_note("ClipReward and TransformReward", "them") in err.splitlines()
    result = json.loads((run / "eval.json").read_text())
    assert result["env_rewards_transformed"] == ["ClipReward", "TransformReward"]
    assert result["returns"] == [2.0 * n for n in result["lengths"]]  # clip(4 x 1, 0, 2): 2 a step
    line = next(x for x in out.splitlines() if x.startswith("eval "))
    assert line.endswith(f"over 2 episodes (deterministic){_eval_note('ClipReward and TransformReward', 'them')}")


def test_one_class_twice_is_named_once(envs, tmp_path, capsys):
    from proxima.envs.gym_adapter import rewards_transformed

    twice = gym.wrappers.TransformReward(gym.wrappers.TransformReward(gym.make("CartPole-v1"), lambda r: 2 * r),
                                         lambda r: 3 * r)
    assert rewards_transformed(twice) == ["TransformReward"]
    run = tmp_path / "r"
    code, out, err = run_main(["train", "popeval48_envs:make_twice", *RUN, "--run-dir", str(run)], capsys)
    assert code == 0, err
    assert _start_note("TransformReward", "it") in err.splitlines()
    result = json.loads((run / "eval.json").read_text())
    assert result["env_rewards_transformed"] == ["TransformReward"]
    assert result["returns"] == [6.0 * n for n in result["lengths"]]
