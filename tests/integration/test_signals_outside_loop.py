"""SIGINT / SIGTERM outside the training loop (docs/reliability.md, Signals): landing in a Gymnasium
or ``module:Class`` env's own code (its constructor, its steps in the end-of-run evaluation) it is
the documented stop, exit 130 / 143 with the documented line, never an env error (exit 2) naming
TrainingInterrupted; swallowed where it landed, it still stops the run before it trains."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from proxima import checkpoint as ckpt
from cli_helpers import stop
from distributed_helpers import pythonpath
import warm_python

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

#: a user env: 20-step episodes; the marker file is touched when its ``build_at``-th construction in
#: the process starts (which then sleeps: 1 is the probe that reads the spaces, 2 the vector env's)
#: and when it steps in an evaluation (a reset seeded >= 1,000,000: the end-of-run evaluation's
#: seed), where each step sleeps so the evaluation lasts
SLOW_ENV = textwrap.dedent("""
    import os, time
    import gymnasium as gym
    import numpy as np

    MARK = os.environ["SLOW_ENV_MARK"]


    class Slow(gym.Env):
        observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)
        built = 0

        def __init__(self, build_at=0, **kw):
            Slow.built += 1
            if Slow.built == build_at:
                open(MARK, "w").close()
                time.sleep(60)
            self.t, self.evaluating = 0, False

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.evaluating = self.evaluating or (seed is not None and seed >= 1_000_000)
            self.t = 0
            return np.zeros(2, np.float32), {}

        def step(self, action):
            if self.evaluating:
                open(MARK, "w").close()
                time.sleep(0.01)
            self.t += 1
            return np.zeros(2, np.float32), 1.0, self.t >= 20, False, {}
""")


def start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    """``proxima train slow_env:Slow ARGS`` in ``tmp_path`` (the env's module there): (process, marker file)."""
    (tmp_path / "slow_env.py").write_text(SLOW_ENV)
    mark = tmp_path / "started"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONPATH=pythonpath(tmp_path), SLOW_ENV_MARK=str(mark))
    proc = warm_python.Popen([sys.executable, "-m", "proxima", "train", "slow_env:Slow", "--num-envs", "1", "--num-steps", "32",
                             "--threads", "1", "--no-progress", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, mark


def signal_when(proc: subprocess.Popen, mark: Path, signum: int, timeout: float = 120.0) -> tuple[int, str]:
    """Send ``signum`` once ``mark`` exists (the env is in the code under test): (exit code, stderr)."""
    deadline = time.monotonic() + timeout
    while not mark.exists():
        if proc.poll() is not None:
            pytest.fail(f"process ended early ({proc.returncode}): {proc.communicate()[1][-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the env never got there")
        time.sleep(0.02)
    return stop(proc, signum)


@pytest.mark.parametrize("signum, build_at", [(signal.SIGTERM, 1), (signal.SIGINT, 2)])
def test_a_signal_while_a_module_env_is_built_stops_the_run_and_keeps_nothing(tmp_path, signum, build_at):
    proc, mark = start(tmp_path, "--env-kwargs", f'{{"build_at": {build_at}}}', "--total-timesteps", "64", "--run-dir", "R")
    code, err = signal_when(proc, mark, signum)
    assert code == 128 + signum, err
    assert "Traceback" not in err and "raised TrainingInterrupted" not in err, err
    assert err.strip().splitlines()[-1] == f"proxima: stopped by {signal.Signals(signum).name}; before training started; nothing was kept"
    assert not (tmp_path / "R").exists()


def test_a_signal_in_the_end_of_run_evaluation_of_a_gymnasium_env_says_training_is_complete(tmp_path):
    proc, mark = start(tmp_path, "--total-timesteps", "64", "--eval-episodes", "1000", "--run-dir", "R")
    code, err = signal_when(proc, mark, signal.SIGTERM)
    run = tmp_path / "R"
    last = ckpt.list_checkpoints(run)[-1]
    assert code == 143, err
    assert "Traceback" not in err and "raised TrainingInterrupted" not in err, err
    assert err.strip().splitlines()[-1] == (f"proxima: stopped by SIGTERM; during the end-of-run evaluation; training is complete "
                                            f"(checkpoint: {last.relative_to(tmp_path)}); `proxima eval --env slow_env:Slow R` evaluates it")
    assert last.name == "step_000000000064.pt"
    assert not (run / "eval.json").exists() and not (run / ".proxima.lock").exists()


def test_a_stop_swallowed_where_it_landed_still_stops_the_run_before_it_trains(tmp_path, capsys, monkeypatch):
    """doctor's probes (meta.json's machine facts) catch everything but KeyboardInterrupt: a SIGTERM
    landing in one is kept by the handler and raised again as the loop starts."""
    from cli_helpers import run_main

    from proxima import doctor

    def collect_hit_by_sigterm(*args, **kwargs):  # collect(device=, threads=), as a run calls it
        def probe():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)  # the handler raises at the next bytecode: swallowed by _probe

        doctor._probe({}, "interrupted", probe)
        return {}

    monkeypatch.setattr(doctor, "collect", collect_hit_by_sigterm)
    code, _, err = run_main(["train", "CartPole-v1", "--total-timesteps", "1024", "--run-dir", str(tmp_path / "R"),
                             "--no-progress", "--threads", "1"], capsys)
    assert code == 143, err
    assert err.strip().splitlines()[-1] == "proxima: stopped by SIGTERM; before training started; nothing was kept"
    assert not (tmp_path / "R").exists()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_a_stop_while_the_lock_is_taken_leaves_no_folder(tmp_path, monkeypatch):
    """A signal as the run takes its lock (the lock file being written): the folder the lock made is
    removed again, as the line says (before: an empty run directory stayed)."""
    from proxima import PPOConfig, rundir, train
    from proxima.signals import TrainingInterrupted

    real = rundir._write_new_file

    def interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # OutsideLoop's handler raises here
        return real(*args, **kwargs)

    monkeypatch.setattr(rundir, "_write_new_file", interrupted)
    run = tmp_path / "new" / "run"
    with pytest.raises(TrainingInterrupted, match="before training started; nothing was kept"):
        train(PPOConfig(env_id="CartPole-v1", num_envs=2, num_steps=8, total_timesteps=64, threads=1, run_dir=str(run),
                        eval_episodes=0, progress=False), quiet=True)
    assert not run.exists()


def test_a_stop_during_the_failure_diagnosis_is_a_stop_and_leaves_no_half_run(tmp_path, monkeypatch):
    """The first iteration fails (not an env error), and a signal lands while the failure is diagnosed
    (check_env builds and steps the env): the stop's line and a new run's cleanup, not a half-written
    run and 'checkpoint: None'."""
    from proxima import PPOConfig, ppo, run_setup, train
    from proxima.signals import TrainingInterrupted

    def broken(*args, **kwargs):
        raise RuntimeError("shape mismatch somewhere")

    def diagnosis(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return args[0]

    monkeypatch.setattr(ppo, "compute_gae", broken)
    monkeypatch.setattr(run_setup, "diagnose_failure", diagnosis)
    run = tmp_path / "run"
    with pytest.raises(TrainingInterrupted, match="stopped by SIGTERM; before training started; nothing was kept") as info:
        train(PPOConfig(env_id="CartPole-v1", num_envs=2, num_steps=8, total_timesteps=64, threads=1, run_dir=str(run),
                        eval_episodes=0, progress=False), quiet=True)
    assert info.value.exit_code == 143
    assert not run.exists()
