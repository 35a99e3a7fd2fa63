"""Review 31, the end phase of a single run: a stop that arrives while the final checkpoint is written,
one that arrives while a resume from an older checkpoint sets the abandoned timeline aside, and one
that arrives while --plot draws curve.png after eval.json was written (docs/reliability.md, Signals)."""

from __future__ import annotations

import csv
import json
import os
import signal
import sys
import time

import pytest

from cli_helpers import run_main
from proxima import checkpoint as ckpt

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

#: 2 iterations of 4 envs x 128 steps: checkpoints at 512 and 1024
RUN = ["--num-envs", "4", "--num-steps", "128", "--num-minibatches", "2", "--update-epochs", "1", "--no-progress",
       "--threads", "1"]


def csv_steps(run_dir) -> list:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [int(r["global_step"]) for r in csv.DictReader(f)]


def last_line(err: str) -> str:
    return err.strip().splitlines()[-1]


def test_a_signal_during_the_final_checkpoint_stops_the_run_and_resume_evaluates(tmp_path, capsys, monkeypatch):
    run = tmp_path / "R"
    final = ckpt.checkpoint_path(run, 1024)
    real = ckpt._before_replace

    def signal_in_final_save(tmp, path):
        if path.name == final.name:
            os.kill(os.getpid(), signal.SIGTERM)  # the loop's SignalGuard records it; the write goes on
        return real(tmp, path)

    monkeypatch.setattr(ckpt, "_before_replace", signal_in_final_save)
    code, out, err = run_main(["train", "CartPole-v1", *RUN, "--total-timesteps", "1024", "--eval-episodes", "2",
                               "--run-dir", str(run)], capsys)
    # was: exit 0 after the whole end-of-run evaluation, the stop the user asked for dropped
    assert code == 143, err
    # was: "writing a checkpoint after this iteration", with no iteration left and that checkpoint being written
    assert ("proxima: SIGTERM received; training is complete: stopping after the final checkpoint, before the "
            "end-of-run evaluation (interrupt, or the same signal again 1 s or more from now, to exit at once)") in err
    assert "after this iteration" not in err
    assert last_line(err) == (f"proxima: stopped by SIGTERM; after the final checkpoint, before the end-of-run evaluation; "
                              f"training is complete; checkpoint: {final}; continue with: proxima resume {run} (it trains "
                              "nothing more and evaluates)")
    assert not (run / "eval.json").exists() and not out.startswith("eval ")
    assert ckpt.list_checkpoints(run)[-1] == final and ckpt.load_checkpoint(final)["global_step"] == 1024
    assert not (run / ".proxima.lock").exists()

    monkeypatch.setattr(ckpt, "_before_replace", real)
    code, out, err = run_main(["resume", str(run), "--no-progress"], capsys)  # what the stop line says
    assert code == 0, err
    assert json.loads((run / "eval.json").read_text())["global_step"] == 1024
    assert csv_steps(run) == [512, 1024]  # the resume trained nothing more


def test_a_signal_while_a_resume_sets_the_abandoned_timeline_aside_is_held_until_it_is_done(tmp_path, capsys, monkeypatch):
    from proxima import logger

    run = tmp_path / "R"
    code, _, err = run_main(["train", "CartPole-v1", *RUN, "--total-timesteps", "1536", "--eval-episodes", "0",
                             "--checkpoint-every", "1", "--run-dir", str(run)], capsys)
    assert code == 0, err
    older = ckpt.checkpoint_path(run, 512)
    assert [p.name for p in ckpt.list_checkpoints(run)][-1] == ckpt.checkpoint_path(run, 1536).name
    real = logger.truncate_csv

    def signal_after_truncating(*args, **kwargs):
        out = real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # metrics.csv cut at 512, the newer checkpoints not yet moved
        time.sleep(0.2)
        return out

    monkeypatch.setattr(logger, "truncate_csv", signal_after_truncating)
    code, _, err = run_main(["resume", str(older), "--no-progress"], capsys)
    monkeypatch.setattr(logger, "truncate_csv", real)
    assert code == 130, err
    # was: "checkpoint: .../step_000000001536.pt; continue with: proxima resume RUN", with metrics.csv already cut
    # at 512: following it resumed at 1536 and the run's own logs lacked the rows 1024 and 1536
    assert last_line(err) == (f"proxima: stopped by SIGINT; before training started, once the checkpoints newer than "
                              f"{older.name} were set aside (see the note above); the run now ends at it; checkpoint: "
                              f"{older}; continue with: proxima resume {run}")
    [aside] = (run / "checkpoints").glob("abandoned-*")
    assert sorted(p.name for p in aside.glob("step_*.pt")) == [ckpt.checkpoint_path(run, s).name for s in (1024, 1536)]
    assert ckpt.list_checkpoints(run) == [older] and csv_steps(run) == [512]
    assert not (run / ".proxima.lock").exists()

    code, _, err = run_main(["resume", str(run), "--no-progress"], capsys)  # as the line says
    assert code == 0, err
    assert f"at global step 512" in err
    assert csv_steps(run) == [512, 1024, 1536]


def test_a_signal_while_plot_draws_says_eval_json_is_written(tmp_path, capsys, monkeypatch):
    from proxima import plot

    def signal_in_plot(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # OutsideLoop's handler raises here
        time.sleep(0.5)

    monkeypatch.setattr(plot, "plot_runs", signal_in_plot)
    run = tmp_path / "R"
    code, _, err = run_main(["train", "CartPole-v1", *RUN, "--total-timesteps", "512", "--eval-episodes", "2", "--plot",
                             "--run-dir", str(run)], capsys)
    last = ckpt.checkpoint_path(run, 512)
    assert code == 143, err
    # was: "during the end-of-run evaluation; ... `proxima eval RUN` evaluates it", with eval.json on disk
    assert last_line(err) == (f"proxima: stopped by SIGTERM; while drawing curve.png; training is complete (checkpoint: "
                              f"{last}) and eval.json is written; `proxima plot {run}` draws it")
    assert json.loads((run / "eval.json").read_text())["global_step"] == 512
    assert not (run / "curve.png").exists() and not (run / ".proxima.lock").exists()


def test_the_docs_say_what_these_stops_do():
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "reliability.md").read_text().split())
    assert "while the final checkpoint is written" in text
    assert "sets the newer checkpoints aside" in text
    assert "while drawing `curve.png`" in text


def test_a_signal_during_the_last_iteration_says_training_is_complete(tmp_path, capsys, monkeypatch):
    """Day review 31: a signal in the last iteration (not in its checkpoint) gave the plain "continue with"
    line, though the checkpoint it wrote ends the training and the resume only evaluates."""
    from proxima.trainer import Trainer

    run = tmp_path / "R"
    real = Trainer.train_iteration

    def signal_in_last(self, *a, **k):
        if self.iteration == self.num_iterations - 1:  # the last one starts
            os.kill(os.getpid(), signal.SIGINT)
        return real(self, *a, **k)

    monkeypatch.setattr(Trainer, "train_iteration", signal_in_last)
    code, _, err = run_main(["train", "CartPole-v1", *RUN, "--total-timesteps", "1024", "--eval-episodes", "2",
                             "--run-dir", str(run)], capsys)
    final = ckpt.checkpoint_path(run, 1024)
    assert code == 130, err
    assert last_line(err) == (f"proxima: stopped by SIGINT; after the final checkpoint, before the end-of-run evaluation; "
                              f"training is complete; checkpoint: {final}; continue with: proxima resume {run} (it trains "
                              "nothing more and evaluates)")
