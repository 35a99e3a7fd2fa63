"""SIGINT / SIGTERM at the moments a review found (docs/reliability.md, Signals): a stop while a run
takes its lock leaves neither the lock, its temp file nor the folder (as the line "nothing was kept"
says), and a stop of --vector async's workers before the run's first checkpoint says so, not
"outside an iteration". Each signal is sent by the process to itself from a patched step, at the
exact moment, as the reviewer's scripts did."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from proxima import checkpoint as ckpt

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _config(run_dir, **kw):
    from proxima import PPOConfig

    base = dict(env_id="CartPole-v1", num_envs=2, num_steps=8, total_timesteps=64, threads=1, run_dir=str(run_dir),
                eval_episodes=0, progress=False)
    return PPOConfig(**{**base, **kw})


def _kill_self(signum):
    os.kill(os.getpid(), signum)  # the handler runs at the next bytecode, in this (the main) thread


# ------------------------------------------------------------------------------------ a stop as the lock is taken
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_right_after_the_locks_temp_file_is_made_leaves_nothing(tmp_path, monkeypatch, signum):
    """The temp file the lock is written through exists, _write_new_file's cleanup not yet armed:
    an empty .proxima.lock.<hex>.tmp stayed, and the same command was refused as 'not empty'."""
    from proxima import atomic, train
    from proxima.rundir import LOCK_NAME
    from proxima.signals import TrainingInterrupted

    real = atomic.new_temp_file

    def then_stop(path):
        out = real(path)
        if path.name.startswith(LOCK_NAME):
            _kill_self(signum)
        return out

    monkeypatch.setattr(atomic, "new_temp_file", then_stop)
    run = tmp_path / "run"
    with pytest.raises(TrainingInterrupted, match="before training started; nothing was kept") as info:
        train(_config(run), quiet=True)
    assert info.value.exit_code == 128 + signum
    assert not run.exists(), sorted(p.name for p in run.iterdir())
    monkeypatch.setattr(atomic, "new_temp_file", real)
    train(_config(run), quiet=True)  # the same call again: not refused
    assert ckpt.list_checkpoints(run)


def test_a_stop_right_after_the_lock_is_linked_into_place_leaves_nothing(tmp_path, monkeypatch):
    """The lock is in place but not yet marked held: .proxima.lock and the folder stayed."""
    from proxima import rundir, train
    from proxima.signals import TrainingInterrupted

    real = rundir._link_exclusive

    def then_stop(tmp, path):
        real(tmp, path)
        _kill_self(signal.SIGINT)

    monkeypatch.setattr(rundir, "_link_exclusive", then_stop)
    run = tmp_path / "new" / "run"
    with pytest.raises(TrainingInterrupted, match="before training started; nothing was kept"):
        train(_config(run), quiet=True)
    assert not run.exists(), sorted(p.name for p in run.iterdir())
    assert list((tmp_path / "new").iterdir()) == []


def test_a_stop_after_the_lock_but_before_the_session_records_it_leaves_nothing(tmp_path, monkeypatch):
    """claim_fresh holds the lock and checks the folder again (another process may have started a
    run there): a stop there left .proxima.lock, which no cleanup knew of."""
    from proxima import rundir, train
    from proxima.signals import TrainingInterrupted

    real = rundir.holds_files
    run = tmp_path / "run"
    calls = []

    def second_check_stops(path):
        out = real(path)
        calls.append(path)
        if len(calls) == 2:  # the check after the lock was taken
            assert (run / rundir.LOCK_NAME).exists()
            _kill_self(signal.SIGTERM)
        return out

    monkeypatch.setattr(rundir, "holds_files", second_check_stops)
    with pytest.raises(TrainingInterrupted, match="stopped by SIGTERM; before training started; nothing was kept"):
        train(_config(run), quiet=True)
    assert len(calls) == 2
    assert not run.exists(), sorted(p.name for p in run.iterdir())


def test_a_stop_as_a_resume_takes_the_lock_releases_it(tmp_path, monkeypatch):
    """A resume stopped as its lock was linked into place: the lock stayed (the next resume 'took over
    the lock left by pid P', this process), and the line said "nothing was kept" of a run left as it was."""
    from proxima import rundir, train
    from proxima.signals import TrainingInterrupted

    run = tmp_path / "run"
    train(_config(run), quiet=True)
    last = ckpt.list_checkpoints(run)[-1]
    real = rundir._link_exclusive

    def then_stop(tmp, path):
        real(tmp, path)
        _kill_self(signal.SIGTERM)

    monkeypatch.setattr(rundir, "_link_exclusive", then_stop)
    with pytest.raises(TrainingInterrupted) as info:
        train(None, resume=str(run), quiet=True, overrides={"total_timesteps": 128})
    assert str(info.value) == (f"stopped by SIGTERM; before training started; the run is as its last checkpoint left it; "
                               f"checkpoint: {last}; continue with: proxima.train(None, resume='{run}') (in a shell: "
                               f"proxima resume {run})")
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(rundir.LOCK_NAME)) == []


def test_a_failed_start_removes_its_own_lock_temp_file_without_outside_loop(tmp_path, monkeypatch):
    """Where no OutsideLoop holds the stop back (rundir used from Python), an interrupt right after the
    lock's temp file was made: the folder claim_fresh made is removed, with that file."""
    from proxima import atomic, rundir

    real = atomic.new_temp_file

    def then_interrupted(path):
        real(path)
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic, "new_temp_file", then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        rundir.RunSession().claim_fresh(tmp_path / "new")
    assert list(tmp_path.iterdir()) == []


def test_another_process_s_lock_temp_file_is_left_alone(tmp_path):
    from proxima import rundir

    folder = tmp_path / "d"
    folder.mkdir()
    other = folder / f"{rundir.LOCK_NAME}.{os.getpid() + 1}.0123456789ab.tmp"  # another trainer's, in progress
    mine = folder / f"{rundir.LOCK_NAME}.{os.getpid()}.0123456789ab.tmp"
    other.touch()
    mine.touch()
    rundir._remove_empty_dir(folder)
    assert sorted(folder.iterdir()) == [other]


def test_stops_held_raises_the_stop_as_the_block_ends():
    from proxima.signals import OutsideLoop, TrainingInterrupted, stops_held

    done = []
    with OutsideLoop():
        with pytest.raises(TrainingInterrupted, match="stopped by SIGTERM") as info:
            with stops_held():
                with stops_held():  # nested: the outer block's end raises it
                    _kill_self(signal.SIGTERM)
                    _kill_self(signal.SIGINT)  # a second one meanwhile: the first is the stop
                    done.append("inner")
                done.append("outer")
        assert info.value.exit_code == 143 and info.value.checkpoint is None
    assert done == ["inner", "outer"]
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_stops_held_is_a_no_op_without_outside_loop():
    from proxima.signals import stops_held

    with pytest.raises(KeyboardInterrupt) as info:
        with stops_held():
            _kill_self(signal.SIGINT)  # the default handler: at once
            pytest.fail("not interrupted")
    assert type(info.value) is KeyboardInterrupt  # Python's own, not a run's stop (a KeyboardInterrupt too)


# ------------------------------------------------------------------------------------ --vector async's workers ended
def _workers_end_at(monkeypatch, call: int):
    """The env's worker processes die of the group's SIGTERM in the ``call``-th iteration (counted
    from 1): the signal reaches the trainer, whose iteration then fails with an EnvError."""
    from proxima import trainer as trainer_mod
    from proxima.envs import EnvError

    real_stopped = trainer_mod.workers_stopped
    monkeypatch.setattr(trainer_mod, "workers_stopped", lambda stop, vector, last: real_stopped(stop, "async", last))
    real_iteration = trainer_mod.Trainer.train_iteration
    calls = []

    def iteration(self):
        calls.append(1)
        if len(calls) == call:
            _kill_self(signal.SIGTERM)
            raise EnvError("env CartPole-v1: a worker process died")
        return real_iteration(self)

    monkeypatch.setattr(trainer_mod.Trainer, "train_iteration", iteration)


def test_async_workers_ended_before_the_first_checkpoint_keep_the_loops_line(tmp_path, monkeypatch):
    """A process-group SIGTERM in iteration 3, no checkpoint yet: the loop's own line (the workers
    ended), not "outside an iteration"; the run's files stay, as for a failure after its first iteration."""
    from proxima import train
    from proxima.signals import TrainingInterrupted

    _workers_end_at(monkeypatch, 3)
    run = tmp_path / "run"
    with pytest.raises(TrainingInterrupted) as info:
        train(_config(run, total_timesteps=160, checkpoint_every=100), quiet=True)
    assert str(info.value) == ("stopped by SIGTERM; it ended the env's worker processes (--vector async) too, before the "
                               "iteration's end; the run is as its last checkpoint left it; no checkpoint was written")
    assert info.value.exit_code == 143
    assert (run / "metrics.csv").is_file() and not ckpt.list_checkpoints(run)


def test_async_workers_ended_in_a_new_runs_first_iteration_keep_nothing(tmp_path, monkeypatch):
    from proxima import train
    from proxima.signals import TrainingInterrupted

    _workers_end_at(monkeypatch, 1)
    run = tmp_path / "run"
    with pytest.raises(TrainingInterrupted) as info:
        train(_config(run), quiet=True)
    assert str(info.value) == ("stopped by SIGTERM; it ended the env's worker processes (--vector async) too, before the "
                               "iteration's end (the run's first); nothing was kept")
    assert not run.exists()


def test_async_workers_ended_in_a_new_populations_first_iteration_say_so_and_keep_nothing(tmp_path, monkeypatch):
    from proxima import population_run
    from proxima.envs import EnvError
    from proxima.population import Population, member_configs
    from proxima.signals import TrainingInterrupted

    real_stopped = population_run.workers_stopped
    monkeypatch.setattr(population_run, "workers_stopped", lambda stop, vector, last, what: real_stopped(stop, "async", last, what))

    def iteration(self):  # the group's SIGTERM ends the workers in the first iteration
        _kill_self(signal.SIGTERM)
        raise EnvError("env CartPole-v1: a worker process died")

    monkeypatch.setattr(Population, "train_iteration", iteration)
    run = tmp_path / "pop"
    with pytest.raises(TrainingInterrupted) as info:
        population_run.train_population(member_configs(_config(run), [1, 2]), [1, 2], {}, run_dir=run, quiet=True)
    assert str(info.value) == ("stopped by SIGTERM; it ended the env's worker processes (--vector async) too, before the "
                               "iteration's end (the population's first); nothing was kept")
    assert not run.exists()


def test_a_sync_run_stopped_in_its_first_iteration_names_the_checkpoint_it_wrote(tmp_path, monkeypatch):
    from proxima import train
    from proxima import trainer as trainer_mod
    from proxima.signals import TrainingInterrupted

    real_iteration = trainer_mod.Trainer.train_iteration

    def iteration(self):
        if self.iteration == 0:
            _kill_self(signal.SIGINT)  # SignalGuard's: the iteration finishes, then a checkpoint
        return real_iteration(self)

    monkeypatch.setattr(trainer_mod.Trainer, "train_iteration", iteration)
    run = tmp_path / "run"
    with pytest.raises(TrainingInterrupted) as info:
        train(_config(run, checkpoint_every=100), quiet=True)
    first = ckpt.checkpoint_path(run, 16)
    assert str(info.value) == (f"stopped by SIGINT; checkpoint: {first}; continue with: proxima.train(None, resume='{run}') "
                               f"(in a shell: proxima resume {run})")
    assert ckpt.list_checkpoints(run) == [first]
