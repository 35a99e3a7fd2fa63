"""A population's stop signals and per-iteration cost: a second signal before a new population's first
checkpoint says so and keeps nothing (as a single run's, and as a population's first stop there); a resumed
population's directory is never removed; the members' rolling returns are read only for the progress line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import proxima
from proxima.logger import RollingReturn
from proxima.signals import DUPLICATE_WINDOW

PROXIMA = str(Path(sys.executable).with_name("proxima"))
posix = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def _wait_for(predicate, proc, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the command ended (rc {proc.returncode}) before what the test waits for")
        if time.monotonic() > end:
            raise AssertionError("timed out")
        time.sleep(0.02)


def _rows(run: Path, rows: int) -> bool:
    """Every member's metrics.csv holds ``rows`` rows: in the loop, past an iteration."""
    files = list(run.glob("*/metrics.csv"))
    return len(files) == 2 and all(len(f.read_text().splitlines()) >= 1 + rows for f in files)


def _two_sigterms(cmd: list, run: Path, tmp_path: Path, rows: int = 1) -> tuple:
    err_path = tmp_path / "err"
    with open(err_path, "w") as err_file:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=err_file, text=True)
        try:
            _wait_for(lambda: _rows(run, rows), proc)
            proc.send_signal(signal.SIGTERM)
            _wait_for(lambda: "SIGTERM received" in err_path.read_text(), proc)
            time.sleep(DUPLICATE_WINDOW + 0.1)  # sooner, the same SIGTERM delivered twice: ignored
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    return proc.returncode, err_path.read_text()


LONG = ["--num-envs", "2", "--num-steps", "4096", "--total-timesteps", "1000000", "--eval-episodes", "0"]


@posix
def test_a_second_sigterm_before_a_new_populations_first_checkpoint_keeps_nothing_and_says_so(tmp_path):
    run = tmp_path / "pop1"
    code, err = _two_sigterms([PROXIMA, "train", "CartPole-v1", "--seeds", "1,2", *LONG, "--run-dir", str(run)],
                              run, tmp_path)
    assert code == 143, err
    # was: '(a checkpoint already written stays loadable)', and pop1/ kept its lock, population.json and member
    # folders with no checkpoint, which `proxima resume pop1` refused
    assert err.splitlines()[-1] == ("proxima: second interrupt, exiting now (no checkpoint was written; nothing was "
                                    "kept): SIGTERM after SIGTERM")
    assert not run.exists()


@posix
def test_a_second_sigterm_of_a_resumed_population_keeps_it_and_names_its_checkpoint(tmp_path):
    run = tmp_path / "pop2"
    first = subprocess.run([PROXIMA, "train", "CartPole-v1", "--seeds", "1,2", "--num-envs", "2", "--num-steps", "4096",
                            "--total-timesteps", "8192", "--eval-episodes", "0", "--quiet", "--run-dir", str(run)],
                           cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    checkpoint = run / "checkpoints" / "step_000000008192.pt"
    assert checkpoint.is_file()
    # one iteration of the resume logged (a second row): stopped before its own first checkpoint
    code, err = _two_sigterms([PROXIMA, "resume", str(run), "--total-timesteps", "1000000"], run, tmp_path, rows=2)
    assert code == 143, err
    assert err.splitlines()[-1] == (f"proxima: second interrupt, exiting now (last checkpoint kept): SIGTERM after "
                                    f"SIGTERM; checkpoint: {checkpoint}; continue with: proxima resume {run}")
    assert checkpoint.is_file() and (run / "population.json").is_file()


def _reads_from_population_run(monkeypatch) -> list:
    """Each read of a member's rolling mean made by population_run's own code (the logger reads it too)."""
    reads = []
    mean = RollingReturn.mean

    def counted(self):
        if sys._getframe(1).f_code.co_filename.endswith("population_run.py"):
            reads.append(1)
        return mean.fget(self)

    monkeypatch.setattr(RollingReturn, "mean", property(counted))
    return reads


def _population(tmp_path, name: str, quiet: bool) -> None:
    from proxima.population import member_configs
    from proxima.population_run import train_population

    cfg = proxima.PPOConfig(env_id="CartPole-v1", total_timesteps=32 * 2 * 20, num_envs=2, num_steps=32,
                            num_minibatches=2, update_epochs=1, eval_episodes=0, threads=1, backend="native")
    train_population(member_configs(cfg, [1, 2], {}), [1, 2], {}, run_dir=tmp_path / name, quiet=quiet,
                     evaluate_at_end=False)


def test_a_quiet_population_never_reads_its_members_rolling_returns(tmp_path, monkeypatch):
    reads = _reads_from_population_run(monkeypatch)
    _population(tmp_path, "quiet", quiet=True)
    # was: every member's, every iteration (2 members x 20 iterations), for a line never printed
    assert reads == []


def test_the_progress_line_reads_the_rolling_returns_only_when_it_prints(tmp_path, monkeypatch, capsys):
    reads = _reads_from_population_run(monkeypatch)
    _population(tmp_path, "loud", quiet=False)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("population 2 members | step")]
    assert len(lines) == 10  # every 20 // 10 = 2 iterations
    assert len(reads) == 2 * len(lines)  # each member's, once a line
