"""Runs whose env id the user's own module registered, read where that module is not imported; a run
that stopped before its first checkpoint; a complete population resumed.

A run trained from Python after ``import myenvs`` records the id alone (``MyReg-v0``): the command
line has never imported myenvs, so it knows no such id. ``--env myenvs:MyReg-v0`` (Gymnasium's
``module:EnvId``) is that same env: eval keeps the run's env kwargs, resume continues it; without
``--env`` the line names the module to give (from the entry point the checkpoint records).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import sys
import textwrap

import gymnasium as gym
import pytest
from cli_helpers import one_error_line, run_main

MODULE = "regids_envs"
ENV_ID = "RegIds-v0"

ENV_CODE = textwrap.dedent(f"""
    import numpy as np
    import gymnasium as gym
    from gymnasium import spaces


    class Walk(gym.Env):
        '''reward 1 per step; an episode ends after ``length`` steps'''
        def __init__(self, length=10):
            self.length = length
            self.observation_space = spaces.Box(-1, 1, (2,), np.float32)
            self.action_space = spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.zeros(2, np.float32), {{}}

        def step(self, a):
            self.t += 1
            return np.zeros(2, np.float32), 1.0, self.t >= self.length, False, {{}}


    gym.register("{ENV_ID}", entry_point="{MODULE}:Walk", max_episode_steps=7)
""")


def _forget():
    """As in a new process: nothing has imported the module, so nothing has registered the id."""
    sys.modules.pop(MODULE, None)
    gym.registry.pop(ENV_ID, None)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(folder holding the env module, a run trained from Python on its registered id with env kwargs)."""
    from proxima import PPOConfig, train

    home = tmp_path_factory.mktemp("regids")
    (home / f"{MODULE}.py").write_text(ENV_CODE)
    sys.path.insert(0, str(home))
    try:
        __import__(MODULE)
        cfg = PPOConfig(env_id=ENV_ID, env_kwargs={"length": 3}, num_envs=2, num_steps=32, total_timesteps=64,
                        num_minibatches=2, update_epochs=1, progress=False, checkpoint_every=0, eval_episodes=2,
                        eval_every=32, threads=1, run_dir=str(home / "runs" / "trained"))
        run_dir, _ = train(cfg, quiet=True)
    finally:
        sys.path.remove(str(home))
        _forget()
    return home, run_dir


@pytest.fixture
def run(trained, tmp_path, monkeypatch):
    """A copy of the trained run, with the module's folder as the current directory (where the
    command line imports a named module from) and the module not imported."""
    home, run_dir = trained
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    monkeypatch.chdir(home)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the folder an eval puts on it for the module goes with the test
    _forget()
    yield copy
    _forget()


def test_the_module_form_of_a_recorded_id_evaluates_with_the_runs_kwargs(run, capsys):
    code, out, err = run_main(["eval", str(run), "--env", f"{MODULE}:{ENV_ID}", "--episodes", "2", "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["mean_return"] == 3.0  # length 3 as trained, not the registration's 7-step time limit


def test_resume_continues_a_recorded_id_given_with_its_module(run, capsys):
    code, _, err = run_main(["resume", str(run), "--env", f"{MODULE}:{ENV_ID}", "--total-timesteps", "128", "--quiet"], capsys)
    assert code == 0, err
    from proxima.checkpoint import list_checkpoints, load_checkpoint

    newest = list_checkpoints(run)[-1]
    state = load_checkpoint(newest)
    assert state["global_step"] == 128
    # the module form named: every process that builds the env (torchrun's ranks) imports the module
    assert state["config"]["env_id"] == f"{MODULE}:{ENV_ID}"
    assert state["config"]["env_kwargs"] == {"length": 3}


def test_another_module_or_id_is_still_another_env(run, capsys):
    code, _, err = run_main(["resume", str(run), "--env", f"{MODULE}:Other-v0", "--total-timesteps", "128"], capsys)
    assert code == 2
    assert one_error_line(err, "proxima resume").endswith(
        f"the run trains '{ENV_ID}', not '{MODULE}:Other-v0'; resume continues the same env")


def test_a_module_that_does_not_register_the_id_is_named(run, capsys):
    with open("regids_empty.py", "w") as f:  # beside the env module, in the current directory
        f.write("X = 1\n")
    try:
        code, _, err = run_main(["resume", str(run), "--env", f"regids_empty:{ENV_ID}", "--total-timesteps", "128"], capsys)
    finally:
        os.remove("regids_empty.py")
        sys.modules.pop("regids_empty", None)
    assert code == 2
    assert one_error_line(err, "proxima resume") == (
        f"--env regids_empty:{ENV_ID}: importing module 'regids_empty' did not register env id '{ENV_ID}', which the run "
        "trains; name the module whose import registers it (gymnasium.register)")


@pytest.mark.parametrize("command", ["eval", "resume", "eval --best"])
def test_an_unregistered_recorded_id_names_the_module_to_give(run, capsys, command):
    code, _, err = run_main([*command.split()[:1], str(run), *command.split()[1:]], capsys)
    assert code == 2
    # best.pt records the entry point as the periodic checkpoints do
    checkpoint = run / "checkpoints" / "best.pt" if "--best" in command else sorted((run / "checkpoints").glob("step_*.pt"))[-1]
    command = command.split()[0]
    assert one_error_line(err, f"proxima {command}") == (
        f"{checkpoint}: env id '{ENV_ID}' is not registered in this process (the code that trained the run registered "
        f"it, entry point {MODULE}:Walk); name the module whose import registers it, most likely: "
        f"--env {MODULE}:{ENV_ID} (the run's env kwargs are kept)")


def test_the_recorded_entry_point_is_only_shown_when_it_looks_like_one():
    from proxima.envs import unregistered_line

    line = unregistered_line("X-v0", "ck.pt", "--env {env}", "os:system; rm -rf /")  # the checkpoint is data
    assert line == ("ck.pt: env id 'X-v0' is not registered in this process (the code that trained the run registered "
                    "it); name the module whose import registers it: --env MODULE:X-v0")
    line = unregistered_line("X-v0", "ck.pt", "--env {env}", "__main__:Walk")
    assert "the script that trained the run registered it, entry point __main__:Walk" in line
    assert line.endswith("move that class and its gymnasium.register call into a module and name it: --env MODULE:X-v0")


def test_an_unknown_id_says_how_to_name_a_registering_module():
    from proxima.envs import EnvError, make_env

    with pytest.raises(EnvError) as e:
        make_env("NoSuchRegIds-v0", 1)
    assert str(e.value) == ("unknown env id 'NoSuchRegIds-v0'; see `proxima presets` or gymnasium's registry; an id your "
                            "own module registers (gymnasium.register) is given with that module, MODULE:NoSuchRegIds-v0, "
                            "which imports it first")


# ------------------------------------------------------------------ a run that stopped before its first checkpoint
def _started(tmp_path):
    run_dir = tmp_path / "started"
    (run_dir / "checkpoints").mkdir(parents=True)
    for name in ("config.yaml", "meta.json", "metrics.csv"):  # what a run writes before its first checkpoint
        (run_dir / name).write_text("")
    return run_dir


@pytest.mark.parametrize("command", ["eval", "resume"])
def test_a_run_stopped_before_its_first_checkpoint_is_not_told_to_wait(tmp_path, capsys, command):
    run_dir = _started(tmp_path)
    (run_dir / ".proxima.lock").write_text(json.dumps({"pid": 2 ** 22 + 12345, "host": socket.gethostname()}))  # its trainer is gone
    code, _, err = run_main([command, str(run_dir)], capsys)
    assert code == 2
    assert one_error_line(err, f"proxima {command}") == (
        f"{run_dir}: the run stopped before its first checkpoint (one is written every --checkpoint-every N iterations "
        "and at the end), so there is nothing to evaluate or resume; train it again from the start: proxima train "
        f"--config {shlex.quote(str(run_dir / 'config.yaml'))} --resume auto (its files are moved aside)")


def test_a_live_run_without_a_checkpoint_is_still_told_to_wait(tmp_path, capsys):
    run_dir = _started(tmp_path)
    (run_dir / ".proxima.lock").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    code, _, err = run_main(["eval", str(run_dir)], capsys)
    assert code == 2
    assert one_error_line(err, "proxima eval") == (
        f"{run_dir}: the run is in progress and has no checkpoint yet (one is written every --checkpoint-every N "
        "iterations and at the end); wait for its first, or train with a smaller --checkpoint-every")


def test_the_suggested_command_trains_the_stopped_run_again(tmp_path, capsys, monkeypatch):
    """The command the line names works: --resume auto restarts a run with no checkpoint in its folder."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", "r", "--total-timesteps", "64", "--num-envs", "2",
                             "--num-steps", "32", "--eval-episodes", "0", "--quiet"], capsys)
    assert code == 0, err
    for f in (tmp_path / "r" / "checkpoints").iterdir():  # as if it had stopped before its first checkpoint
        f.unlink()
    code, _, err = run_main(["resume", "r"], capsys)
    command = one_error_line(err, "proxima resume").split("train it again from the start: proxima ")[1].split(" (its")[0]
    code, _, err = run_main(command.split() + ["--quiet"], capsys)
    assert code == 0, err
    assert [p.name for p in (tmp_path / "r" / "checkpoints").iterdir()] == ["step_000000000064.pt"]


# ------------------------------------------------------------------ a complete population resumed
def test_resuming_a_complete_population_keeps_its_recorded_training_time(tmp_path, capsys):
    run_dir = tmp_path / "pop"
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "64", "--num-envs", "2",
                             "--num-steps", "32", "--eval-episodes", "1", "--run-dir", str(run_dir), "--quiet"], capsys)
    assert code == 0, err
    path = run_dir / "population.json"
    doc = json.loads(path.read_text())
    doc["wall_seconds"] = 1234.5  # what the run recorded (and printed) when it finished
    path.write_text(json.dumps(doc))
    code, out, err = run_main(["resume", str(run_dir)], capsys)
    assert code == 0, err
    assert "the run is complete" in err
    assert json.loads(path.read_text())["wall_seconds"] == 1234.5
    assert "; 1234.5s of training" in out


# ------------------------------------------------------------------ a population on a registered id
def test_a_population_on_an_unregistered_recorded_id_names_the_module_to_give(tmp_path, capsys, monkeypatch):
    # eval POP built the first member's env and said only "unknown env id"; a single run's eval named the module
    (tmp_path / f"{MODULE}.py").write_text(ENV_CODE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path)] + sys.path)
    _forget()
    try:
        __import__(MODULE)  # trained where the module is imported (from Python, or a notebook)
        code, _, err = run_main(["train", ENV_ID, "--seeds", "1-2", "--total-timesteps", "64", "--num-envs", "2",
                                 "--num-steps", "32", "--eval-episodes", "1", "--run-dir", "pop", "--quiet"], capsys)
        assert code == 0, err
        _forget()
        code, out, err = run_main(["eval", "pop", "--episodes", "1"], capsys)
        assert code == 2 and out == ""
        line = one_error_line(err, "proxima eval")
        assert line.startswith("pop/") and line.endswith(
            f": env id '{ENV_ID}' is not registered in this process (the code that trained the run registered it, entry "
            f"point {MODULE}:Walk); name the module whose import registers it, most likely: --env {MODULE}:{ENV_ID}"), line
        code, out, err = run_main(["eval", "pop", "--episodes", "1", "--env", f"{MODULE}:{ENV_ID}", "--json"], capsys)
        assert code == 0, err
        assert [m["mean_return"] for m in json.loads(out)["members"]] == [7.0, 7.0]  # the registration's time limit
    finally:
        _forget()
