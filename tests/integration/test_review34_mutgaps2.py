"""Review 34 mutation gaps (2): what the surviving mutants of 27f4c81..ad54961 changed and no test saw. A
single run's --compile-mode note printed once, and as a single run's (its --dry-run too); train_population
called from Python takes its notes from the members' fields, names them as PPOConfig's, and names the preset
that chose --backend native; a checkpoint's "trained by" line asks only its own run's meta.json and never
names the version running; Policy's repr without a step; --temperature at its minimum; a --config file's
``seeds:`` and non-mapping ``config:`` keys; `proxima presets` for an env with one other version."""

import copy
import json

import pytest

from tests.cli_helpers import TINY_RUN, error_line, module_written_in, run_main

#: a 36x36 image env (the smallest the CNN takes under --encoder auto), 8-step episodes
ENVS = '''
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Frames(gym.Env):
    action_space = spaces.Discrete(2)
    observation_space = spaces.Box(0, 255, (36, 36, 3), np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros((36, 36, 3), np.uint8), {}

    def step(self, a):
        self.t += 1
        return np.zeros((36, 36, 3), np.uint8), 0.0, False, self.t >= 8, {}
'''
MODULE = "rev34mutgaps2_envs"
COMPILE_NOTE = "proxima: note: --compile-mode max-autotune has no effect without --compile"
POP_NOTE = "proxima: note: --compile-mode max-autotune has no effect: a population (--seeds/--sweep) does not compile"
#: a member of the tiny Python populations: 2 envs x 16 steps, one iteration
TINY_MEMBER = dict(num_envs=2, num_steps=16, total_timesteps=32, num_minibatches=2, update_epochs=1, eval_episodes=0,
                   progress=False, threads=1)


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, MODULE, ENVS)


def notes(err: str) -> list:
    return [line for line in err.splitlines() if line.startswith("proxima: note: ")]


def python_population(members, **kwargs):
    from proxima.population_run import train_population

    return train_population(members, [1, 2], {}, run_dir="P", **kwargs)


def two_members(cfg) -> list:
    # copy.copy, not dataclasses.replace: the members keep which preset set each field (config._sources)
    out = []
    for seed in (1, 2):
        member = copy.copy(cfg)
        member.seed = seed
        out.append(member)
    return out


# --- 1. train's compile-mode note: once in a fresh run, a single run's in its dry run ------------------

def test_a_fresh_run_notes_compile_mode_without_compile_once(capsys):
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--compile-mode",
                             "max-autotune", "--run-dir", "R"], capsys)
    assert code == 0, err
    assert notes(err).count(COMPILE_NOTE) == 1, err  # train() noted it for resumes only; note_run for a new run


def test_a_single_runs_dry_run_gives_the_single_runs_compile_note(capsys):
    code, out, err = run_main(["train", "CartPole-v1", "--compile-mode", "max-autotune", "--dry-run"], capsys)
    assert code == 0 and "compile_mode: max-autotune" in out, err
    assert COMPILE_NOTE in notes(err) and "population" not in err, err
    code, out, err = run_main(["train", "CartPole-v1", "--compile", "--compile-mode", "max-autotune", "--dry-run"], capsys)
    assert code == 0 and [n for n in notes(err) if "--compile-mode" in n] == [], err  # it compiles: the mode applies


# --- 2. train_population from Python: its notes from the members' fields, in PPOConfig's words ---------

def test_a_python_population_notes_a_compile_mode_set_in_its_config(capsys):
    from proxima import PPOConfig

    cfg = PPOConfig(env_id="CartPole-v1", compile_mode="max-autotune", **TINY_MEMBER)
    python_population(two_members(cfg))
    assert notes(capsys.readouterr().err).count(POP_NOTE) == 1


def test_a_python_populations_cnn_note_names_ppoconfig_fields(capsys):
    from proxima import PPOConfig

    cfg = PPOConfig(env_id=f"{MODULE}:Frames", hidden_sizes=[16, 16], **TINY_MEMBER)
    python_population(two_members(cfg))
    cnn = [n for n in notes(capsys.readouterr().err) if "no effect with the CNN encoder" in n]
    assert len(cnn) == 1 and cnn[0].startswith("proxima: note: PPOConfig.hidden_sizes = [16, 16] has no effect"), cnn
    assert "--hidden-sizes" not in cnn[0]


def test_a_python_population_names_the_preset_that_chose_the_native_backend(tmp_path):
    from proxima import presets
    from proxima.envs import EnvError

    cfg = presets.resolve("Pendulum-v1")
    cfg.env_kwargs = {"g": 9.81}
    with pytest.raises(EnvError) as e:
        python_population(two_members(cfg), quiet=True)
    line = str(e.value)
    assert "the preset Pendulum-v1/default chose --backend native" in line, line
    assert "use --backend" not in line, line
    assert not (tmp_path / "P").exists()


# --- 3. the Proxima a checkpoint names: its own run's meta.json, never the version running -------------

def test_a_meta_json_of_this_version_and_no_commit_names_no_version(tmp_path):
    import proxima
    from proxima.checkpoint import _trained_by

    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "meta.json").write_text(json.dumps({"versions": {"proxima": proxima.__version__}}))
    assert _trained_by(tmp_path / "run" / "checkpoints" / "step_64.pt") == "the Proxima version that trained it"
    # another version is named: the one to resume or evaluate with
    (tmp_path / "run" / "meta.json").write_text(json.dumps({"versions": {"proxima": "0.0.1-other"}}))
    assert _trained_by(tmp_path / "run" / "checkpoints" / "step_64.pt") == "the Proxima that trained it (0.0.1-other)"


def test_a_loose_checkpoint_does_not_read_the_meta_json_above_it(tmp_path):
    from proxima.checkpoint import _trained_by

    (tmp_path / "meta.json").write_text(json.dumps({"git_commit": "abcdef1234567890"}))
    (tmp_path / "x").mkdir()
    line = _trained_by(tmp_path / "x" / "a.pt")
    assert line == "the Proxima version that trained it" and "abcdef1" not in line
    (tmp_path / "checkpoints").mkdir()  # in a run's checkpoints/ it is the run's commit
    assert _trained_by(tmp_path / "checkpoints" / "a.pt") == "the Proxima that trained it (git commit abcdef1)"


def test_a_policy_without_a_step_shows_a_question_mark():
    from proxima.checkpoint import Policy

    policy = Policy.__new__(Policy)  # what copy or pickle hold before they fill the instance in
    policy.__dict__.update(env_id="CartPole-v1", device="cpu", global_step=None)
    assert repr(policy).endswith(", step=?)"), repr(policy)
    policy.__dict__["global_step"] = 128
    assert repr(policy).endswith(", step=128)"), repr(policy)


# --- 4. --temperature at its minimum, the config file keys' advice, presets' grammar --------------------

def test_temperature_at_its_minimum_is_taken():
    from proxima.rlhf.config import MIN_TEMPERATURE, ConfigError, RLHFConfig, validate

    base = dict(policy="p", prompts="p.txt", reward="proxima.rlhf.demo:keyword_sentiment")
    validate(RLHFConfig(**base, temperature=MIN_TEMPERATURE))  # "must be at least" it
    with pytest.raises(ConfigError, match="must be at least"):
        validate(RLHFConfig(**base, temperature=MIN_TEMPERATURE / 2))


def test_a_files_seeds_key_is_advised_with_its_own_seeds():
    from proxima.config import ConfigError, from_dict

    with pytest.raises(ConfigError) as e:
        from_dict({"seeds": [0, 1, 2]}, source="c.yaml")
    assert str(e.value) == "c.yaml: 'seeds' is a flag of train, not a config field: --seeds 0,1,2"


def test_a_files_config_key_that_names_a_file_is_an_unknown_field(capsys):
    from pathlib import Path

    Path("c.yaml").write_text("config: other.yaml\n")
    code, out, err = run_main(["train", "CartPole-v1", "--config", "c.yaml", "--dry-run"], capsys)
    line = error_line(code, err, "c.yaml", "unknown field 'config'")
    assert "top level" not in line and out == ""


def test_presets_of_an_env_with_one_other_version_says_has(capsys):
    code, out, err = run_main(["presets", "HalfCheetah-v4"], capsys)
    error_line(code, err, "no presets for 'HalfCheetah-v4'",
               "; HalfCheetah-v5 has presets: `proxima presets HalfCheetah-v5` lists them")
