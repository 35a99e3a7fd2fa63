"""What a user sees on four paths a review walked: the command a relaunched multi-process resume
records, the line for an env module whose own import is missing, the action-range note of
``train --dry-run``, and what resuming a finished run prints."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from cli_helpers import error_line, run_main, snapshot

TINY = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1",
        "--eval-episodes", "0", "--no-progress", "--threads", "1"]  # 64 steps an iteration


def tiny_run(run_dir, capsys, *flags) -> None:
    code, _, err = run_main(["train", "CartPole-v1", *TINY, "--total-timesteps", "64", "--run-dir", str(run_dir),
                             "--quiet", *flags], capsys)
    assert code == 0, err


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """Write ``name.py`` into a fresh current directory (the env import looks there); sys.path and
    the module are put back after the test."""
    from proxima.envs import gym_adapter

    monkeypatch.chdir(tmp_path)
    # a resume run earlier in this process marked its run directory as data (treat_as_data), which
    # changes the import line's wording; a CLI process runs one command
    monkeypatch.setattr(gym_adapter, "_DATA_DIRS", [])
    monkeypatch.setattr(sys, "path", sys.path[:])
    written = []

    def write(name: str, text: str) -> None:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
        written.append(name)

    yield write
    for name in written:  # the next test's module of the same name is its own file
        sys.modules.pop(name, None)


# ------------------------------------------------------------------------------ 1: the command a resume records
def test_a_relaunched_resume_records_the_command_the_user_typed(tmp_path, monkeypatch, capsys):
    from proxima.launch import COMMAND_ENV

    run_dir = tmp_path / "run"
    tiny_run(run_dir, capsys)
    typed = ["proxima", "resume", str(run_dir), "--total-timesteps", "128", "--quiet"]
    # as launch_torchrun hands it to the ranks, whose own argv is `.../proxima/__main__.py resume ...`
    monkeypatch.setenv(COMMAND_ENV, json.dumps(typed))
    monkeypatch.setattr(sys, "argv", ["/somewhere/proxima/__main__.py", *typed[1:]])
    code, _, err = run_main(typed[1:], capsys)
    assert code == 0, err
    meta = json.loads((run_dir / "meta.json").read_text())
    assert [r["command"] for r in meta["resumes"]] == [typed]


# ------------------------------------------------------------------------------ 2: a missing import of the user's module
def test_a_missing_dependency_of_the_env_module_is_named_with_its_line(user_module, capsys):
    user_module("depmiss", """\
        import os

        import nonexistent_dep_xyz
        """)
    code, _, err = run_main(["train", "depmiss:E", "--dry-run"], capsys)
    line = error_line(code, err, "'depmiss'", "'nonexistent_dep_xyz'", "not installed", "depmiss.py:3")
    assert "PYTHONPATH" not in line and "current directory" not in line


def test_a_name_the_env_module_cannot_import_is_its_own_error_not_the_path(user_module, capsys):
    user_module("badname", "from os import no_such_name_xyz\n")
    code, _, err = run_main(["train", "badname:E", "--dry-run"], capsys)
    line = error_line(code, err, "'badname'", "ImportError", "no_such_name_xyz", "badname.py:1")
    assert "PYTHONPATH" not in line


@pytest.mark.parametrize("module", ["no_such_module_xyz", "no_such_pkg_xyz.envs"])
def test_an_env_module_that_is_not_found_still_points_at_the_path(user_module, module, capsys):
    code, _, err = run_main(["train", f"{module}:E", "--dry-run"], capsys)
    error_line(code, err, f"cannot import module '{module}'", "current directory or on PYTHONPATH")


# ------------------------------------------------------------------------------ 3: train --dry-run's action-range note
BOX_ENV = """\
    import gymnasium as gym
    import numpy as np


    class B(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        action_space = gym.spaces.Box(5.0, 10.0, (1,), np.float32)

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            return np.zeros(2, np.float32), {}

        def step(self, action):
            return np.zeros(2, np.float32), 0.0, True, False, {}
    """


def test_dry_run_prints_the_action_range_note_a_run_prints(user_module, tmp_path, capsys):
    import gymnasium as gym
    import numpy as np

    from proxima.envs.spaces import action_scale_note

    user_module("boxenv", BOX_ENV)
    before = snapshot(tmp_path)
    code, out, err = run_main(["train", "boxenv:B", "--dry-run"], capsys)
    assert code == 0, err
    note = action_scale_note(gym.spaces.Box(5.0, 10.0, (1,), np.float32), "boxenv:B")
    assert "RescaleAction(boxenv.B(**kw)" in note
    assert [ln for ln in err.splitlines() if "RescaleAction" in ln] == [f"proxima: note: env 'boxenv:B': {note}"]
    assert "env_id: boxenv:B" in out
    assert {k for k in snapshot(tmp_path) if "__pycache__" not in k} == set(before)  # still writes nothing


def test_no_native_env_calls_for_the_note_so_the_dry_run_hears_of_gymnasium_envs_only():
    import gymnasium as gym

    from proxima.envs import make_env
    from proxima.envs.classic import NATIVE_ENVS
    from proxima.envs.spaces import action_scale_note

    boxes = []
    for env_id in sorted(NATIVE_ENVS):
        env = make_env(env_id, 1, "cpu", "native")
        space = env.single_action_space
        env.close()
        boxes += [env_id] if isinstance(space, gym.spaces.Box) else []
        assert action_scale_note(space) is None, env_id  # else gym_adapter.action_spaces_built must hear of it too
    assert "Pendulum-v1" in boxes


def test_dry_run_under_quiet_leaves_the_note_out_as_a_quiet_run_does(user_module, capsys):
    user_module("boxenv", BOX_ENV)
    code, _, err = run_main(["train", "boxenv:B", "--dry-run", "--quiet"], capsys)
    assert code == 0, err
    assert "RescaleAction" not in err


# ------------------------------------------------------------------------------ 4: resuming a finished run
def test_resuming_a_complete_run_prints_only_the_note_and_writes_nothing(tmp_path, capsys):
    run_dir = tmp_path / "run"
    tiny_run(run_dir, capsys)
    before = snapshot(run_dir)
    code, _, err = run_main(["resume", str(run_dir)], capsys)
    assert code == 0, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "the run is complete (64 steps)" in lines[0], err
    assert snapshot(run_dir) == before


def test_resuming_a_run_stop_return_ended_says_where_it_stopped_not_that_it_resumes(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code, _, err = run_main(["train", "CartPole-v1", *TINY, "--total-timesteps", "6400", "--run-dir", str(run_dir),
                             "--stop-return", "1", "--stop-episodes", "1", "--quiet"], capsys)
    assert code == 0, err
    before = snapshot(run_dir)
    code, _, err = run_main(["resume", str(run_dir)], capsys)
    assert code == 0, err
    lines = err.strip().splitlines()
    # the "stopped at" line stays: tests/integration/test_stop_return.py asks for it after the note
    assert len(lines) == 2 and "the run stopped at --stop-return 1" in lines[0], err
    assert lines[1].startswith("proxima: stopped at global step 64 (iteration 1): "), err
    assert snapshot(run_dir) == before
