"""TrainingInterrupted is a KeyboardInterrupt: a script's ``try: proxima.train(cfg) except
KeyboardInterrupt:`` (the SB3/CleanRL idiom) catches a first Ctrl-C's checkpointed stop, not only a
second Ctrl-C's immediate one, while the command line's stops keep their line and 128+signum
(130 for SIGINT, 143 for SIGTERM), never a bare Ctrl-C's 130."""

from __future__ import annotations

import argparse
import os
import pickle
import signal

import pytest

from proxima import PPOConfig, TrainingInterrupted, train
from proxima import checkpoint as ckpt
from proxima import cli, doctor
from proxima import trainer as trainer_mod
from tests.cli_helpers import TINY_RUN, run_main

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGTERM") or os.name == "nt", reason="POSIX signals")

#: 4 envs x 16 steps: 64 steps an iteration, 3 iterations
TINY = dict(env_id="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1, threads=1,
            progress=False, eval_episodes=0, total_timesteps=192)


def test_training_interrupted_is_a_keyboard_interrupt_and_stays_one_through_pickle():
    assert issubclass(TrainingInterrupted, KeyboardInterrupt)
    assert not issubclass(TrainingInterrupted, Exception)  # an env adapter's `except Exception` must not take it
    stop = pickle.loads(pickle.dumps(TrainingInterrupted(signal.SIGTERM, None)))  # as a --vector async worker sends it
    assert isinstance(stop, KeyboardInterrupt) and stop.exit_code == 143 and stop.signum == signal.SIGTERM


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_plain_except_keyboardinterrupt_catches_the_first_stop_after_its_checkpoint(tmp_path, signum):
    def signalled(row):  # after iteration 1: the loop's SignalGuard records it, finishes iteration 2 and checkpoints
        if row["iteration"] == 1:
            os.kill(os.getpid(), signum)

    run = tmp_path / "r"
    caught = None
    try:
        train(PPOConfig(**TINY), run_dir=run, quiet=True, evaluate_at_end=False, callback=signalled)
    except KeyboardInterrupt as e:  # the user's script: no TrainingInterrupted named
        caught = e
    assert isinstance(caught, TrainingInterrupted)  # the checkpointed stop, told apart from a second Ctrl-C's
    assert caught.signum == signum and caught.exit_code == 128 + signum
    assert caught.checkpoint == ckpt.checkpoint_path(run, 128)
    assert [p.name for p in ckpt.list_checkpoints(run)] == [ckpt.checkpoint_path(run, 128).name]
    assert not (run / ".proxima.lock").exists()  # released on the way out, as before
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the caller's handlers put back


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint-130", "sigterm-143"])
def test_the_cli_stop_keeps_its_exit_code_and_line(tmp_path, capsys, monkeypatch, signum):
    real = trainer_mod.Trainer.train_iteration

    def iteration(self):
        if self.iteration == 0:
            os.kill(os.getpid(), signum)  # the loop finishes this iteration, writes its checkpoint, stops
        return real(self)

    monkeypatch.setattr(trainer_mod.Trainer, "train_iteration", iteration)
    run = tmp_path / "R"
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "128", "--run-dir", str(run)], capsys)
    assert code == 128 + signum, err
    first = ckpt.checkpoint_path(run, 64)
    assert err.strip().splitlines()[-1] == (f"proxima: stopped by {signal.Signals(signum).name}; checkpoint: {first}; "
                                            f"continue with: proxima resume {run}")
    assert "Traceback" not in err


def test_a_stop_no_command_said_still_exits_128_plus_signum_with_its_line(capsys, tmp_path):
    """_run_command's Ctrl-C clause, which every command's KeyboardInterrupt reaches: a run's stop there
    (a KeyboardInterrupt now) keeps its own status and line rather than a bare Ctrl-C's 130."""
    last = tmp_path / "R" / "checkpoints" / "step_000000000064.pt"

    def stopped(args):
        raise TrainingInterrupted(signal.SIGTERM, last)

    def ctrl_c(args):
        raise KeyboardInterrupt

    args = argparse.Namespace(command="doctor", func=stopped)  # doctor: no import check before the command
    assert cli._run_command(args, "proxima doctor") == 143
    assert capsys.readouterr().err == (f"proxima: stopped by SIGTERM; checkpoint: {last}; "
                                       f"continue with: proxima resume {tmp_path / 'R'}\n")
    assert cli._run_command(argparse.Namespace(command="doctor", func=ctrl_c), "proxima doctor") == 130
    assert capsys.readouterr().err == ""


def test_a_runs_stop_landing_in_a_doctor_probe_is_kept_for_the_loop_but_a_ctrl_c_of_doctor_ends_it():
    """meta.json's probes took a run's stop (then no KeyboardInterrupt) as a probe's failure, and
    OutsideLoop raises it again as the loop starts (test_signals_outside_loop); doctor's own Ctrl-C ends it."""
    errors: dict = {}

    def stopped():
        raise TrainingInterrupted(signal.SIGTERM, None)

    try:
        kept = doctor._probe(errors, "x", stopped, default="kept")
    except KeyboardInterrupt as e:  # a failure of this test, not pytest's own Ctrl-C, which would end the session
        pytest.fail(f"the probe let the run's stop through: {e!r}")
    assert kept == "kept"
    assert errors == {"x": "TrainingInterrupted: stopped by SIGTERM; no checkpoint was written"}

    def ctrl_c():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as info:
        doctor._probe(errors, "y", ctrl_c)
    assert type(info.value) is KeyboardInterrupt and "y" not in errors
