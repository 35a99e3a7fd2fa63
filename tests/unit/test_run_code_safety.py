"""A run directory is data: neither `proxima resume` of a multi-process run (relaunched under torchrun)
nor an RLHF run's recorded reward_import_path lets files in it be imported without --trust-run."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

import warm_python
from distributed_helpers import SMALL, env, pythonpath
from proxima.rlhf.rewards import RewardBatch, load_rewards
from tests.cli_helpers import imports_taken_back


def plant(folder: Path, marker: Path) -> None:
    """A ``proxima/`` package (and, for Python < 3.11, a ``runpy.py``) that record being imported."""
    (folder / "proxima").mkdir(parents=True)
    code = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\nraise SystemExit(0)\n"
    (folder / "proxima" / "__init__.py").write_text(code)
    (folder / "runpy.py").write_text(code)


# ---------------------------------------------------------------------------------------------
# `proxima resume` / `train --nproc K`: torchrun and its ranks never search the current directory
# (the launch's environment: tests/distributed/test_dist_launch.py)


#: records, in each rank, the PYTHONSAFEPATH a program the env starts would inherit: the launch's is
#: for torchrun and the ranks only
USER_ENV = ("import os\nfrom gymnasium.envs.classic_control import CartPoleEnv\n\n\nclass Cart(CartPoleEnv):\n"
            "    def __init__(self, **kw):\n        super().__init__(**kw)\n"
            "        open(os.environ['SAFE_LOG'], 'a').write(repr(os.environ.get('PYTHONSAFEPATH')) + '\\n')\n")
#: the launcher as the console script starts it (`python -m proxima` would itself import ./proxima);
#: ``{safe}`` False tries the `-c` start used before Python 3.11 (no PYTHONSAFEPATH there)
LAUNCHER = ("import sys\ndel sys.path[0]\nfrom proxima import launch\nlaunch.SAFE_PATH_ENV = {safe}\n"
            "sys.argv[0] = 'proxima'\nfrom proxima.cli import entry\nentry()\n")


def launch_from(cwd: Path, lib: Path, safe: bool, *argv):
    res = warm_python.run([sys.executable, "-c", LAUNCHER.format(safe=safe), *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=180, env=env(PYTHONPATH=pythonpath(lib), SAFE_LOG=str(lib / "safe.log")))
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def rows(run: Path) -> list:
    return [line.split(",")[1] for line in (run / "metrics.csv").read_text().splitlines()[1:]]


# the -c start is Python 3.10's (this project runs 3.11+ in CI): in the slow tier
@pytest.mark.parametrize("safe", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["PYTHONSAFEPATH", "dash-c-start"])
def test_a_relaunch_never_imports_a_proxima_package_from_the_current_directory(tmp_path, safe):
    if safe and sys.version_info < (3, 11):
        pytest.skip("PYTHONSAFEPATH is read from Python 3.11 on")
    lib, work, marker = tmp_path / "lib", tmp_path / "work", tmp_path / "IMPORTED"
    lib.mkdir()
    (lib / "usercart_code_safety.py").write_text(USER_ENV)  # found on PYTHONPATH by every rank
    plant(work, marker)
    run = work / "run"
    launch_from(work, lib, safe, "train", "usercart_code_safety:Cart", "--nproc", "2", "--total-timesteps", "512",
                "--run-dir", str(run), *SMALL)
    assert not marker.exists(), marker.read_text()
    assert rows(run) == ["512"]  # the real Proxima trained, in both ranks
    logged = set((lib / "safe.log").read_text().split())
    assert logged == {"None"}, logged  # what the user's env starts is not held to the launch's setting
    if not safe:
        return
    # `cd RUN && proxima resume .` of a downloaded run that ships its own proxima/, trusted or not
    plant(run, marker)
    launch_from(run, lib, safe, "resume", ".", "--total-timesteps", "1024", "--trust-run", "--no-progress", "--quiet")
    assert not marker.exists(), marker.read_text()
    assert rows(run) == ["512", "1024"]


# ---------------------------------------------------------------------------------------------
# RLHF rewards: a recorded reward_import_path is searched only for the user's own reward module


def batch(responses):
    from proxima.rlhf.data import PromptRow

    return RewardBatch([PromptRow("p", {}, i + 1) for i in range(len(responses))], list(responses), list(responses), step=1)


@pytest.fixture
def restore_imports():
    """sys.path and sys.modules as they were (the code_safety modules taken out)."""
    yield from imports_taken_back("code_safety")


def test_a_builtin_reward_leaves_the_recorded_folders_off_sys_path(tmp_path, restore_imports):
    """A resume without --trust-run loads the built-in reward; the run's recorded reward_import_path must
    not stay first on sys.path, where every later import (sympy, PIL as the models load) looks."""
    marker = tmp_path / "IMPORTED"
    (tmp_path / "sympy_code_safety.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    before = sys.path[:]
    rewards = load_rewards(["proxima.rlhf.demo:keyword_sentiment"], [], torch.device("cpu"), import_path=[str(tmp_path), "."])
    assert sys.path == before
    total, _ = rewards(batch(["great fun", "awful"]))
    assert total.tolist() == [1.0, -1.0] and sys.path == before
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sympy_code_safety")
    assert not marker.exists()


def test_a_users_reward_module_imports_from_its_folder_and_leaves_sys_path_as_it_was(tmp_path, restore_imports):
    """The folder is searched while the reward imports and while it is called (a module it imports
    lazily, next to it or inside its package, still imports), and is off sys.path otherwise."""
    pkg = tmp_path / "rewards_code_safety"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "def score(prompts, responses):\n"
        "    from rewards_code_safety import sub\n"
        "    import helper_code_safety\n"
        "    return [sub.LENGTH(r) * helper_code_safety.SCALE for r in responses]\n")
    (pkg / "sub.py").write_text("LENGTH = len\n")
    (tmp_path / "helper_code_safety.py").write_text("SCALE = 2.0\n")
    before = sys.path[:]
    rewards = load_rewards(["rewards_code_safety:score"], [], torch.device("cpu"), import_path=[str(tmp_path)])
    assert sys.path == before
    total, _ = rewards(batch(["abc", "abcde"]))
    assert total.tolist() == [6.0, 10.0] and sys.path == before
