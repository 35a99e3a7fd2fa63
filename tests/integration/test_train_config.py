"""`proxima train --config FILE.yaml`, `--env-kwargs JSON` and Gymnasium's `module:EnvId` form (issue 17, item 6)."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml

from cli_helpers import run_main

TINY = ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", "64",
        "--no-progress", "--quiet"]

CORRIDOR = textwrap.dedent('''
    import gymnasium as gym
    import numpy as np


    class Corridor(gym.Env):
        """`length` steps of +1 reward whatever the action."""

        def __init__(self, length=5):
            self.length = length
            self.observation_space = gym.spaces.Box(0.0, 100.0, (1,), np.float32)
            self.action_space = gym.spaces.Discrete(2)
            self.t = 0

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.array([0.0], np.float32), {}

        def step(self, action):
            self.t += 1
            return np.array([self.t], np.float32), 1.0, self.t >= self.length, False, {}


    if "Corridor7-v0" not in gym.registry:
        gym.register(id="Corridor7-v0", entry_point=Corridor, kwargs={"length": 7})
''')


@pytest.fixture
def corridor(tmp_path, monkeypatch):
    module = f"corridor_{tmp_path.name[-12:].replace('-', '_')}"  # one module name per test: no stale import
    (tmp_path / f"{module}.py").write_text(CORRIDOR)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return module


def test_config_file_sits_between_the_preset_and_the_flags(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text("env_id: Acrobot-v1\nlr: 0.001\nnum_envs: 16\ngamma: 0.98\n")
    code, out, err = run_main(["train", "--config", str(path), "--num-envs", "8", "--dry-run"], capsys)
    assert code == 0, err
    cfg = yaml.safe_load(out)
    assert cfg["env_id"] == "Acrobot-v1"  # from the file
    assert cfg["lr"] == 0.001 and cfg["gamma"] == 0.98  # the file over the preset and the defaults
    assert cfg["num_envs"] == 8  # the flag over the file
    code, out, _ = run_main(["train", "CartPole-v1", "--config", str(path), "--dry-run"], capsys)
    assert yaml.safe_load(out)["env_id"] == "CartPole-v1"  # ENV_ID over the file


@pytest.mark.parametrize("text, needle", [("lrr: 0.1\n", "unknown field 'lrr' (did you mean 'lr'?)"),
                                          ("- 1\n- 2\n", "expected a mapping"),
                                          ("lr: [\n", "not valid YAML"),
                                          ("env_id: os:abort\n", "would import and run module 'os'")])
def test_bad_config_files_are_one_line_naming_the_file(text, needle, tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, _, err = run_main(["train", "--config", str(path), "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert str(path) in err and needle in err
    assert not (tmp_path / "run").exists()


def test_env_kwargs_reach_the_env_and_are_recorded(tmp_path, capsys, corridor):
    run_dir = tmp_path / "run"
    code, _, err = run_main(["train", f"{corridor}:Corridor", "--env-kwargs", '{"length": 3}', "--eval-episodes", "2",
                             "--run-dir", str(run_dir), *TINY], capsys)
    assert code == 0, err
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["env_kwargs"] == {"length": 3}
    assert json.loads((run_dir / "eval.json").read_text())["returns"] == [3.0, 3.0]  # not the default length 5
    code, out, err = run_main(["eval", str(run_dir), "--env", f"{corridor}:Corridor", "--episodes", "1", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["returns"] == [3.0]


@pytest.mark.parametrize("value, needle", [('{"length": 3', "not valid JSON"), ("[1, 2]", "expected a JSON object")])
def test_bad_env_kwargs_are_one_line(value, needle, tmp_path, capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--backend", "gymnasium", "--env-kwargs", value, "--run-dir",
                             str(tmp_path / "run")], capsys)
    assert code == 2 and needle in err and "--env-kwargs" in err and err.count("\n") == 1


def test_gymnasium_module_env_id_form_imports_then_makes_the_registered_id(tmp_path, capsys, corridor):
    run_dir = tmp_path / "run"
    code, _, err = run_main(["train", f"{corridor}:Corridor7-v0", "--eval-episodes", "1", "--run-dir", str(run_dir), *TINY], capsys)
    assert code == 0, err
    assert json.loads((run_dir / "eval.json").read_text())["returns"] == [7.0]  # the registered kwargs (length 7)


def test_an_invalid_value_from_the_config_file_names_the_file(tmp_path, capsys):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("gamma: 2\n")
    code, _, err = run_main(["train", "CartPole-v1", "--config", str(cfg_file), "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 2 and err.strip() == f"proxima train: error: {cfg_file}: gamma 2.0: must be in (0, 1]"
    code, _, err = run_main(["train", "CartPole-v1", "--config", str(cfg_file), "--gamma", "3", "--run-dir", str(tmp_path / "run")],
                            capsys)
    assert code == 2 and err.strip() == "proxima train: error: --gamma 3.0: must be in (0, 1]"  # typed: the flag's own line
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a usable CUDA device")
def test_a_cuda_preset_on_a_cpu_machine_names_the_preset_not_flags_the_user_did_not_type(tmp_path, capsys):
    """`--preset gpu` sets device cuda and --cudagraphs: on a CPU the line names --preset gpu and a
    preset that runs there, and following the first line does not lead to a second one about a flag."""
    run = ["--run-dir", str(tmp_path / "run"), "--no-progress", "--quiet"]
    code, _, err = run_main(["train", "CartPole-v1", "--preset", "gpu", *run], capsys)
    assert code == 2 and err == ("proxima train: error: --preset gpu needs CUDA, which is not usable here (run `proxima doctor`); "
                                 "on a CPU use --preset fast\n")
    code, _, err = run_main(["train", "CartPole-v1", "--preset", "gpu", "--device", "cpu", *run], capsys)
    assert code == 2 and err == ("proxima train: error: --preset gpu turns on --cudagraphs, which needs a CUDA device (got --device "
                                 "cpu); on a CPU use --preset fast, or add --no-cudagraphs\n")
    code, _, err = run_main(["train", "CartPole-v1", "--device", "cuda", *run], capsys)  # typed: the flag's own line
    assert code == 2 and err == ("proxima train: error: --device 'cuda': CUDA is not usable here (run `proxima doctor`); "
                                 "use --device cpu\n")
    code, _, err = run_main(["train", "CartPole-v1", "--cudagraphs", *run], capsys)
    assert code == 2 and err == "proxima train: error: --cudagraphs needs a CUDA device (got --device cpu)\n"
    assert not (tmp_path / "run").exists()
