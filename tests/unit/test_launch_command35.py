"""Review 35: the command meta.json records is one that runs again (``python -m proxima``, torchrun by
hand with its process count)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import proxima
from proxima import launch
from tests.cli_helpers import TINY_RUN, run_main

PACKAGE = Path(proxima.__file__).resolve().parent
MAIN = str(PACKAGE / "__main__.py")  # what Python leaves in sys.argv[0] for `python -m proxima`
RLHF_MAIN = str(PACKAGE / "rlhf" / "__main__.py")
TORCHRUN_ENV = ("TORCHELASTIC_RUN_ID", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "WORLD_SIZE", "RANK", launch.COMMAND_ENV)


@pytest.fixture
def plain_env(monkeypatch):
    """No torchrun and no launcher around this process."""
    for name in TORCHRUN_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def torchrun_env(local: int = 2, nodes: int = 1) -> dict:
    """What torchrun's agent sets in a rank's environment (torch.distributed.elastic)."""
    return {"TORCHELASTIC_RUN_ID": "none", "LOCAL_WORLD_SIZE": str(local), "GROUP_WORLD_SIZE": str(nodes),
            "WORLD_SIZE": str(local * nodes), "RANK": "0"}


def torchrun_path() -> str:
    path = os.path.join(os.path.dirname(sys.executable), "torchrun")
    return path if os.path.isfile(path) else "torchrun"


# --- typed_command ----------------------------------------------------------------------------------------------------


def test_python_dash_m_is_recorded_as_python_dash_m_not_the_packages_main_file(plain_env):
    argv = [MAIN, "train", "CartPole-v1", "--run-dir", "runs/t1"]
    assert launch.typed_command(argv) == [sys.executable, "-m", "proxima", "train", "CartPole-v1", "--run-dir", "runs/t1"]
    assert launch.typed_command([RLHF_MAIN, "--steps", "2"]) == [sys.executable, "-m", "proxima.rlhf", "--steps", "2"]


def test_a_rank_of_torchrun_by_hand_records_torchrun_with_its_process_count():
    argv = [MAIN, "train", "CartPole-v1", "--quiet"]
    assert launch.typed_command(argv, torchrun_env(2)) == [
        torchrun_path(), "--nproc-per-node", "2", "-m", "proxima", "train", "CartPole-v1", "--quiet"]
    assert launch.typed_command(argv, torchrun_env(4, nodes=3))[:5] == [
        torchrun_path(), "--nproc-per-node", "4", "--nnodes", "3"]
    assert launch.typed_command([RLHF_MAIN, "--steps", "2"], torchrun_env(2))[3:] == ["-m", "proxima.rlhf", "--steps", "2"]
    # the console script (torchrun --no-python proxima ...) and a script of the user's
    assert launch.typed_command(["/v/bin/proxima", "train"], torchrun_env(2))[3:] == ["--no-python", "/v/bin/proxima", "train"]
    assert launch.typed_command(["job.py", "x"], torchrun_env(2))[3:] == ["job.py", "x"]


def test_the_launchers_command_wins_and_other_processes_keep_their_argv():
    typed = ["/v/bin/proxima", "train", "CartPole-v1", "--nproc", "2"]
    env = {**torchrun_env(2), launch.COMMAND_ENV: json.dumps(typed)}
    assert launch.typed_command([MAIN, "train", "CartPole-v1"], env) == typed
    broken = {launch.COMMAND_ENV: "[1, 2"}  # not JSON: this process's own command
    assert launch.typed_command(["/v/bin/proxima", "train"], broken) == ["/v/bin/proxima", "train"]
    assert launch.typed_command(["-c", "x"], torchrun_env(2)) == ["-c", "x"]  # python -c: no program to name


def test_meta_json_of_a_python_dash_m_run_and_its_resume_record_python_dash_m(tmp_path, plain_env, capsys):
    run_dir = tmp_path / "run"
    first = ["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(run_dir), "--quiet"]
    plain_env.setattr(sys, "argv", [MAIN, *first])
    code, _, err = run_main(first, capsys)
    assert code == 0, err
    again = ["resume", str(run_dir), "--total-timesteps", "128", "--quiet"]
    plain_env.setattr(sys, "argv", [MAIN, *again])
    code, _, err = run_main(again, capsys)
    assert code == 0, err
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["command"] == [sys.executable, "-m", "proxima", *first]
    assert [r["command"] for r in meta["resumes"]] == [[sys.executable, "-m", "proxima", *again]]


def test_a_resume_entry_without_a_command_records_the_typed_one(plain_env):
    from proxima.train_state import resume_entry

    plain_env.setattr(sys, "argv", [MAIN, "train", "CartPole-v1", "--seeds", "1-2"])
    assert resume_entry(64)["command"] == [sys.executable, "-m", "proxima", "train", "CartPole-v1", "--seeds", "1-2"]


def test_an_rlhf_runs_meta_records_the_torchrun_command(monkeypatch):
    from proxima.rlhf import rundir

    # the versions only: importing transformers and peft takes seconds
    monkeypatch.setitem(sys.modules, "transformers", SimpleNamespace(__version__="t"))
    monkeypatch.setitem(sys.modules, "peft", SimpleNamespace(__version__="p"))
    monkeypatch.delenv(launch.COMMAND_ENV, raising=False)
    for name, value in torchrun_env(2).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", [RLHF_MAIN, "--steps", "4"])
    assert rundir._meta(2, "cpu")["command"] == [torchrun_path(), "--nproc-per-node", "2", "-m", "proxima.rlhf",
                                                  "--steps", "4"]
