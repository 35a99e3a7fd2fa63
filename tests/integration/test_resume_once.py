"""A resume checks its checkpoint once: a run directory's newest checkpoint is checked as it is picked
(checkpoint.load_sound: counters, weights against the recorded config and spaces), and neither
run_setup.resumed_config nor train_state.restore reads the same state's counters or weights again.
A checkpoint file named explicitly, a state restored under torchrun, and a checked state given to a
Trainer of another batch still get every check; a damaged iteration cell in metrics.csv is no iteration."""

from __future__ import annotations

import csv
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_helpers import run_main

from proxima import checkpoint as ckpt
from proxima import train_state
from proxima.config import PPOConfig
from proxima.trainer import Trainer, train

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX paths in the lines")

#: 6 iterations of 2 envs x 32 steps, a checkpoint every 2: step 128, 256 and 384 (the end)
BASE = dict(env_id="CartPole-v1", num_envs=2, num_steps=32, total_timesteps=384, num_minibatches=2, update_epochs=1,
            checkpoint_every=2, keep_checkpoints=5, eval_episodes=0, threads=1, progress=False, seed=1)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "cartpole"
    train(PPOConfig(**BASE, run_dir=str(run_dir)), quiet=True)
    return run_dir


@pytest.fixture
def run(trained, tmp_path) -> Path:
    """A copy of the run to resume."""
    return Path(shutil.copytree(trained, tmp_path / "run", symlinks=True))


@pytest.fixture
def calls(monkeypatch) -> dict:
    """How often check_counters and check_agent_weights run, each still doing its check."""
    counted = {"check_counters": 0, "check_agent_weights": 0}

    def counting(module, name):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            counted[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counting(train_state, "check_counters")
    counting(ckpt, "check_agent_weights")
    return counted


def _rows(run_dir: Path) -> list:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [int(r["iteration"]) for r in csv.DictReader(f)]


def test_a_run_directory_resume_checks_counters_and_weights_once(run, calls, capsys):
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "448"], capsys)
    assert code == 0, err
    assert _rows(run) == [1, 2, 3, 4, 5, 6, 7]
    assert calls == {"check_counters": 1, "check_agent_weights": 1}


def test_an_explicit_checkpoint_file_is_checked_once_as_a_directorys_newest_is(run, calls, capsys):
    newest = ckpt.list_checkpoints(run)[-1]
    code, _, err = run_main(["resume", str(newest), "--total-timesteps", "448"], capsys)
    assert code == 0, err
    # load_resumable reads a named file with load_sound too (before any newer file is set aside), and
    # the SoundState it gives is not checked again
    assert calls == {"check_counters": 1, "check_agent_weights": 1}


def test_a_checked_state_given_to_a_trainer_of_another_batch_has_its_counters_checked(run):
    state = ckpt.load_resumable(run)  # checked against its own batch of 2 x 32 steps
    with pytest.raises(ckpt.CheckpointError) as e:
        Trainer(PPOConfig(**{**BASE, "num_steps": 16}, run_dir=str(run)), resume_state=state, quiet=True)
    assert str(e.value) == (f"{ckpt.list_checkpoints(run)[-1]}: global_step 384 does not match iteration 6 (each iteration "
                            "trains num_envs x num_steps x processes = 32 steps); the checkpoint is damaged or was edited")


def test_under_torchrun_restore_checks_the_state_it_received(run, calls):
    state = ckpt.load_resumable(run)
    calls.update(check_counters=0, check_agent_weights=0)
    t = Trainer(PPOConfig(**BASE, run_dir=str(run)), quiet=True)
    try:
        # rank 0 of a one-process torchrun: the state is the one it loaded, yet every rank checks what it restores
        t.dist = SimpleNamespace(enabled=True, rank=0, world_size=1, is_main=True)
        train_state.restore(t, state)
    finally:
        t.close()
    assert calls == {"check_counters": 1, "check_agent_weights": 1}
    assert (t.iteration, t.global_step) == (6, 384)


def test_a_negative_iteration_in_metrics_csv_is_no_iteration_in_the_missing_rows_note(run, capsys):
    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.reader(f))
    col = rows[0].index("iteration")
    rows = rows[:4] + [rows[4]]  # the header, iterations 1-3, and iteration 4 (step 256) with a damaged cell
    rows[4][col] = "-1"
    with open(run / "metrics.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "448"], capsys)
    assert code == 0, err
    notes = [ln for ln in err.splitlines() if ln.startswith("proxima: note: ") and "rows lost" in ln]
    # read as the step's iteration (256 / 64), as a row without an iteration column is
    assert notes == [f"proxima: note: {run / 'metrics.csv'} ends at iteration 4 (step 256), the checkpoint "
                     f"{run / 'checkpoints' / 'step_000000000384.pt'} is at iteration 6 (step 384): iterations 5-6 are "
                     "missing from it (rows lost); the run logs on from iteration 7"], err
