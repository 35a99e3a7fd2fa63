"""Running the CLI in-process from tests: exit code and captured output, SystemExit included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import warm_python
from proxima import cli

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def run_main(argv: list, capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``proxima ARGV`` run in this process."""
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


#: the line a new run prints once at its start, before its first step (spaces.spaces_line via
#: train_state.open_run_dir), unless quiet: how it reads its env's spaces
SPACES_LINE_PREFIX = "proxima: spaces: "
#: the line before it (trainer.train, once the new run has its directory): where the run logs, as SB3's "Logging to"
RUN_DIR_LINE_PREFIX = "proxima: run directory: "


def without_spaces_line(err: str) -> str:
    """``err`` (a train's stderr) without the run directory and spaces lines a new run prints at its
    start, for tests that pin what else it printed (one error line, a note); the lines themselves are
    tested in test_spaces_summary39 and test_first_day44."""
    return "".join(line for line in err.splitlines(keepends=True)
                   if not line.startswith((SPACES_LINE_PREFIX, RUN_DIR_LINE_PREFIX)))


def error_line(code: int, err: str, *needles: str) -> str:
    """The one error line of a failed command (exit 2, no traceback), holding every needle."""
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.strip().splitlines() if "error:" in ln]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def one_error_line(err: str, prog: str) -> str:
    """The only line on stderr, with the ``prog: error: `` prefix taken off (no traceback, no second line)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {lines}"
    assert lines[0].startswith(f"{prog}: error: "), lines[0]
    return lines[0].removeprefix(f"{prog}: error: ")


def imports_taken_back(marker: str):
    """For a fixture: sys.path as it was, and the modules whose name holds ``marker`` (the ones the
    test wrote) taken out of sys.modules again, so a later test imports its own files afresh."""
    path, modules = sys.path[:], set(sys.modules)
    yield
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        if marker in name:
            del sys.modules[name]


def module_written_in(folder, monkeypatch, module: str, text: str):
    """For a fixture (``yield from``): ``module``.py holding ``text`` written in ``folder``, which becomes
    the current directory and the first entry of sys.path; both, and the module's import, taken back
    afterwards (imports_taken_back)."""
    from pathlib import Path

    (Path(folder) / f"{module}.py").write_text(text)
    monkeypatch.chdir(folder)
    back = imports_taken_back(module)
    next(back)
    sys.path.insert(0, str(folder))
    yield
    next(back, None)


def snapshot(folder) -> dict:
    """{relative path: what is there} for everything under ``folder``, links not followed: a file's
    bytes, a link's target, None for a folder. Equal snapshots: nothing was written, removed, renamed
    or created there."""
    import os
    from pathlib import Path

    folder = Path(folder)
    out = {}
    for p in sorted(folder.rglob("*")):
        key = str(p.relative_to(folder))
        out[key] = ("link", os.readlink(p)) if p.is_symlink() else p.read_bytes() if p.is_file() else None
    return out


def edit_checkpoint(run_dir, edit):
    """Apply ``edit(state)`` to the run's newest checkpoint as a user would (torch.load, change,
    torch.save); returns its path."""
    import torch

    from proxima import checkpoint as ckpt

    path = ckpt.list_checkpoints(run_dir)[-1]
    state = torch.load(path, weights_only=True)
    edit(state)
    torch.save(state, path)
    return path


def stop(proc, signum: int) -> tuple[int, str]:
    """Send ``signum`` to the subprocess ``proc`` and wait for it to exit: (exit code, stderr); the
    test fails if it has not exited after 120 s."""
    import signal
    import subprocess

    import pytest

    proc.send_signal(signum)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the process did not exit after {signal.Signals(signum).name}")
    return proc.returncode, err


#: one iteration of 4 envs x 16 steps, no evaluation: the CLI edge tests' tiny run
#: the population flags of the tiny population tests (2 envs x 16 steps, 2 minibatches, 1 epoch)
TINY_POP = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1",
            "--no-progress"]

TINY_RUN = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--eval-episodes", "0",
            "--no-progress", "--threads", "1"]


def tiny_cartpole_run(tmp_path_factory, name: str):
    """A finished 2-iteration (128-step) CartPole run: a checkpoint to evaluate or resume, a metrics.csv to plot."""
    run_dir = tmp_path_factory.mktemp(name) / "run"
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "128", "--run-dir", str(run_dir), "--quiet"]) == 0
    return run_dir


def tiny_population(tmp_path_factory, name: str, steps: int):
    """A finished seeds-only population (m000-seed1, m001-seed2) of ``steps`` steps per member, with
    checkpoints and no eval.json (--eval-episodes 0)."""
    run = tmp_path_factory.mktemp(name) / "R"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(run), "--total-timesteps", str(steps),
                     "--eval-episodes", "0", "--quiet", *TINY_POP]) == 0
    return run


#: a module env of the smallest kind (2 floats, 2 actions, 8-step episodes) for tests of module:Class runs
TINY_ENV = '''
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Tiny(gym.Env):
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), float(action), False, self.t >= 8, {}
'''


def fake_run_dir(root, name: str, steps=(100, 200), returns=(1.0, 2.0), **config):
    """A run directory of env Fake-v0 (seed 1 and ``config`` in its config.yaml) whose metrics.csv
    logs one iteration per step in ``steps`` with the episodic return in ``returns``: what plot and
    report read, without training."""
    import csv
    from pathlib import Path

    import yaml

    from proxima.logger import CSV_COLUMNS

    d = Path(root) / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump({"env_id": "Fake-v0", "seed": 1, **config}, sort_keys=False))
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for i, (s, r) in enumerate(zip(steps, returns)):
            w.writerow({"iteration": i + 1, "global_step": s, "time": 0.1 * (i + 1), "episodes": 1,
                        "charts/episodic_return": r})
    return d


def isolated(args: list, tmp_path, timeout: int = 120) -> subprocess.CompletedProcess:
    """``python ARGS`` with tests/fixtures on the path, in a process group of its own (async workers fork
    from it, not from pytest): a hang fails the test after ``timeout`` seconds, its processes killed,
    instead of blocking the suite."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    proc = warm_python.Popen([sys.executable, *args], cwd=tmp_path, env=env, start_new_session=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"hung for {timeout} s: python {' '.join(args[-4:])}", pytrace=False)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def bad_action_at_call_5(monkeypatch, value) -> None:
    """The agent's 5th policy_step hands env 3 the action ``value`` (what --debug-checks must name)."""
    from proxima.agent import Agent

    real, calls = Agent.policy_step, []

    def bad(self, obs):
        action, logprob, v = real(self, obs)
        calls.append(1)
        if len(calls) == 5:
            action = action.clone()
            action[3] = value
        return action, logprob, v

    monkeypatch.setattr(Agent, "policy_step", bad)
