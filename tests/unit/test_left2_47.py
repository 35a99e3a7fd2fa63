"""Mutation-testers' finds in session 47's work. A bare module name's hint (`proxima check-env myenvs`): its
source read up to MODULE_HINT_BYTES and parsed as bytes (a BOM, a coding line), a file past ast's limits no
traceback, a module of the standard library or site-packages without an env class not named; train(cfg, env)
and train(env=env) without a config refused as env= is; a torch-native env's action-scale note; `proxima
resume P/checkpoints` of a population resumes P; an RLHF --config file's kl_horizon advice; Python's words
for the seeds a population lacks."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import gymnasium as gym
import pytest

import proxima
import proxima.trainer
from proxima import cli
from proxima.envs.gym_adapter import MODULE_HINT_BYTES
from proxima.rundir import RunDirError
from tests.cli_helpers import TINY_RUN, error_line, module_written_in, run_main
from tests.unit.test_ownenv_mut47 import NATIVE_BOX
from tests.unit.test_popsmall47 import ARGS, _config
from tests.unit.test_small47 import _rlhf_config_error

MOD = "left2_47_env"

NATIVE = '''
import gymnasium as gym
import numpy as np
import torch

from proxima.envs import NativeEnv


''' + NATIVE_BOX



@pytest.fixture
def here(tmp_path, monkeypatch):
    """tmp_path as the current directory and first on sys.path, with MOD (a native env) written there."""
    yield from module_written_in(tmp_path, monkeypatch, MOD, NATIVE)


def _hint_line(capsys, name: str) -> str:
    code, _, err = run_main(["check-env", name], capsys)
    return error_line(code, err)


def _no_classes(tmp_path, name: str) -> str:
    return (f"proxima check-env: error: unknown env id '{name}'; '{name}' is a module ({tmp_path / name}.py), not an env "
            f"id: name the env class in it, {name}:ClassName, or a factory function that returns one env, {name}:function")


# --- A1. a module's source is read up to MODULE_HINT_BYTES --------------------------------------------------------------
def test_a_module_over_the_read_limit_is_named_without_parsing_it(here, tmp_path, capsys, monkeypatch):
    head = b"import gymnasium as gym\n\n\nclass Walker(gym.Env):\n    pass\n"
    (tmp_path / "left2_big.py").write_bytes(head + b"#" * (MODULE_HINT_BYTES - len(head)) + b"\n")  # one byte over
    (tmp_path / "left2_edge.py").write_bytes(head + b"#" * (MODULE_HINT_BYTES - len(head) - 1) + b"\n")  # at the limit
    parsed, parse = [], ast.parse
    monkeypatch.setattr(ast, "parse", lambda source, *a, **k: parsed.append(len(source)) or parse(source, *a, **k))
    assert _hint_line(capsys, "left2_big") == _no_classes(tmp_path, "left2_big")
    assert max(parsed, default=0) <= MODULE_HINT_BYTES  # a 52.8 MB module took 147 s and 10.6 GB in ast
    assert _hint_line(capsys, "left2_edge").endswith("left2_edge:ClassName, e.g. left2_edge:Walker (its env classes: Walker)")


# --- A2. a file past ast's limits -------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", ["x = " + "-" * 200_000 + "1\n", "x = 1" + " + 1" * 100_000 + "\n"],
                         ids=["nested-unary", "long-sum"])
def test_a_module_past_asts_limits_is_named_without_a_traceback(here, tmp_path, capsys, source):
    (tmp_path / "left2_deep.py").write_text(source)
    assert _hint_line(capsys, "left2_deep") == _no_classes(tmp_path, "left2_deep")


# --- A3. the file's own encoding -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", [b"\xef\xbb\xbfimport gymnasium as gym\n\n\nclass Walker(gym.Env):\n    pass\n",
                                    b"# -*- coding: latin-1 -*-\nimport gymnasium as gym\n\n\nclass Walker(gym.Env):\n"
                                    b"    \"\"\"caf\xe9\"\"\"\n"], ids=["bom", "latin-1"])
def test_a_module_with_a_bom_or_a_coding_line_lists_its_env_classes(here, tmp_path, capsys, source):
    (tmp_path / "left2_enc.py").write_bytes(source)
    assert _hint_line(capsys, "left2_enc").endswith("left2_enc:ClassName, e.g. left2_enc:Walker (its env classes: Walker)")


# --- A6. a module of the standard library or site-packages -----------------------------------------------------------
@pytest.mark.parametrize("name", ["random", "numpy"])
def test_an_installed_module_with_no_env_class_gets_the_unknown_id_line(here, capsys, name):
    line = _hint_line(capsys, name)
    assert "is a module" not in line
    assert line.startswith(f"proxima check-env: error: unknown env id '{name}'; ")


# --- A4. an env given to train as SB3's PPO takes one ------------------------------------------------------------------
ENV_LINE = ("Proxima builds num_envs copies of the env itself and records its id in the run to resume and evaluate it, so "
            "name it: PPOConfig(env_id='CartPole-v1'), a gymnasium.Env class or registered id, or 'module:function' of a "
            "factory that returns one env")


@pytest.mark.parametrize("train", [proxima.train, proxima.trainer.train], ids=["proxima.train", "trainer.train"])
def test_an_env_given_as_the_second_argument_is_refused_as_env_is(tmp_path, monkeypatch, train):
    monkeypatch.chdir(tmp_path)
    cfg = PPOConfig_tiny()
    env = gym.make("CartPole-v1")
    with pytest.raises(TypeError) as e:
        train(cfg, env)
    assert str(e.value) == f"train() takes no env (a TimeLimit as run_dir, its second argument): {ENV_LINE}"
    vec = gym.make_vec("CartPole-v1", 2)
    with pytest.raises(TypeError) as e:
        train(cfg, vec)
    assert str(e.value).startswith("train() takes no env (a CartPoleVectorEnv as run_dir, its second argument): ")
    with pytest.raises(TypeError) as e:
        train(env=env)  # no config: the env= line, not Python's missing-argument one
    assert str(e.value) == f"train() takes no env= (a TimeLimit): {ENV_LINE}"
    assert list(tmp_path.iterdir()) == []


def PPOConfig_tiny():
    return proxima.PPOConfig(env_id="CartPole-v1", total_timesteps=64, num_envs=2, num_steps=16, eval_episodes=0)


# --- A5. the action-scale note of a torch-native env ---------------------------------------------------------------------
def test_a_native_envs_action_scale_note_says_to_scale_inside_dynamics(here, tmp_path, capsys):
    code, _, err = run_main(["train", f"{MOD}:NativeBox", *TINY_RUN, "--total-timesteps", "64", "--run-dir",
                             str(tmp_path / "run")], capsys)
    assert code == 0, err
    (note,) = [ln for ln in err.splitlines() if "does not rescale them" in ln]
    assert note.endswith("Proxima clips Box actions to the bounds but does not rescale them: declare the Box as Box(-1, 1) "
                         "of the same shape and scale the actions inside _dynamics: low + (action + 1) * (high - low) / 2 "
                         "(a torch-native env takes no gymnasium.wrappers.RescaleAction)")
    assert "RescaleAction(env" not in note


# --- B7. a population's checkpoints/ folder ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pop(tmp_path_factory) -> Path:
    """A finished population of seeds 1 and 2 (one 32-step iteration each)."""
    run = tmp_path_factory.mktemp("left2_47_pop") / "P"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(run), *ARGS]) == 0
    return run


def test_resume_of_a_populations_checkpoints_folder_trains_the_population_on(pop, tmp_path, capsys):
    run = shutil.copytree(pop, tmp_path / "P")
    code, out, err = run_main(["resume", str(run / "checkpoints"), "--total-timesteps", "64", "--quiet"], capsys)
    assert code == 0, err
    assert f"run directory: {run}" in out
    for member in ("m000-seed1", "m001-seed2"):
        assert (run / member / "checkpoints" / "step_000000000064.pt").is_file()
    assert (run / "checkpoints" / "step_000000000064.pt").is_file()


def test_steps_with_a_populations_checkpoints_folder_calls_it_a_population(pop, capsys):
    code, _, err = run_main(["resume", str(pop / "checkpoints"), "--steps", "3"], capsys)
    assert error_line(code, err) == (f"proxima resume: error: --steps: {pop / 'checkpoints'} is a PPO population; --steps "
                                     "extends RLHF runs only (use --total-timesteps)")


# --- B8. an RLHF --config file's kl_horizon --------------------------------------------------------------------------
def test_a_files_kl_horizon_is_advised_as_set_to_a_value_in_the_file(tmp_path, capsys):
    f = tmp_path / "rlhf.yaml"
    line = _rlhf_config_error(tmp_path, capsys, {"adaptive_kl": True, "kl_horizon": 2, "batch_size": 64})
    assert line.endswith("which is 0 or negative; set kl_horizon to 13 or more in "
                         f"{f} (the smallest allowed for 64 responses per update)"), line


# --- B9. the seeds a population lacks, from Python -------------------------------------------------------------------
@pytest.mark.parametrize("seeds, added", [([2, 3], "seeds=[3], train it"), ([3, 4], "seeds=[3, 4], train them")])
def test_from_python_the_seeds_to_add_are_the_argument_and_counted(pop, seeds, added):
    with pytest.raises(RunDirError) as e:
        proxima.train_population(_config(), seeds=seeds, run_dir=pop, quiet=True)
    assert f"which resume='auto' continues with those seeds only; to add {added} into a new directory " in str(e.value)


def test_on_the_command_line_one_seed_to_add_is_trained_as_it(pop, capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "2-3", "--run-dir", str(pop), *ARGS, "--dry-run"], capsys)
    assert "; to add seed 3, train it into a new directory (--seeds 3 --run-dir " in error_line(code, err)
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "3-5", "--run-dir", str(pop), *ARGS, "--dry-run"], capsys)
    assert "; to add seeds 3-5, train them into a new directory (--seeds 3-5 --run-dir " in error_line(code, err)
