"""Review 37 (dist): parallel runs of one default run name each get their own -N directory; the --nproc
launcher's resume check renames nothing; SIGHUP stops a run as SIGTERM does (nohup's ignore kept); a
refusal of rank 0 is printed once; a rank stops when torchrun dies; a population's resume notes an
--anneal-lr jump, and names the next step when there is no checkpoint.

Two tests need patches to files of other owners: trainer_next_free.patch (the end-to-end default-name
test) and population_resume_notes.patch (the population test); checkpoint_set_aside.patch is needed by
the launcher's check."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import warm_python

from proxima import checkpoint as ckpt
from proxima import cli
from proxima import distributed, launch, rundir, torchrun
from proxima.rundir import RunDirError, RunSession, unique_default
from proxima.signals import OutsideLoop, SignalGuard
from tests.cli_helpers import TINY_RUN, error_line, run_main

posix = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _other_process_takes(run_dir) -> rundir.RunLock:
    """The lock a run of another process takes: its choices are not in this process's _DEFAULT_NAMES."""
    lock = rundir.RunLock(run_dir)
    lock.acquire()
    return lock


# --- default run names claimed in parallel --------------------------------------------------------------

def test_two_runs_that_chose_one_default_name_claim_distinct_suffixes(tmp_path):
    """Both chose the name before either claimed it (the env is built in between): the second claim moves
    on to -2, and a third, whose name a finished run took meanwhile (files, no lock), to -3."""
    base = tmp_path / "runs" / "CartPole-v1__1__20260101-000000"
    first, second, third = unique_default(base), unique_default(base), unique_default(base)
    assert first == second == third == base
    a, b, c = RunSession(), RunSession(), RunSession()
    try:
        assert a.claim_fresh(first, next_free=True) == base
        assert b.claim_fresh(second, next_free=True) == Path(f"{base}-2")
        (Path(f"{base}-2") / "config.yaml").write_text("env_id: CartPole-v1\n")
        b.release()  # a finished run: its files stay, its lock goes
        assert c.claim_fresh(third, next_free=True) == Path(f"{base}-3")
        assert (Path(f"{base}-3") / rundir.LOCK_NAME).is_file()
    finally:
        for s in (a, b, c):
            s.release()


def test_a_given_run_dir_in_use_is_still_refused(tmp_path):
    run_dir = tmp_path / "mine"
    a, b = RunSession(), RunSession()
    try:
        a.claim_fresh(run_dir)
        with pytest.raises(RunDirError, match=r"is in use by pid"):
            b.claim_fresh(run_dir, next_free=True)  # not a default name: the user's, never renamed
        assert not Path(f"{run_dir}-2").exists()
    finally:
        a.release()


def test_train_with_a_default_name_claimed_meanwhile_trains_in_the_next_suffix(tmp_path, monkeypatch, capsys):
    """The end to end case: another run claims the default name between this run's choice of it and its
    claim (after the env is built); this run trains in -2 and exits 0, instead of "in use by pid"."""
    monkeypatch.chdir(tmp_path)
    chosen, racers = [], []
    real = rundir.unique_default

    def choose_then_lose(path):
        name = real(path)
        chosen.append(name)
        racers.append(_other_process_takes(name))  # a run started in the same second takes it first
        return name

    monkeypatch.setattr(rundir, "unique_default", choose_then_lose)
    try:
        code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--quiet"], capsys)
    finally:
        for racer in racers:
            racer.release()
    assert code == 0, err
    assert len(chosen) == 1
    moved = Path(f"{chosen[0]}-2")
    assert ckpt.list_checkpoints(moved), err
    assert not (chosen[0] / "metrics.csv").exists()  # the racer's directory is left to it


# --- the launcher's resume check renames nothing -------------------------------------------------------

@pytest.fixture()
def damaged_run(tmp_path):
    run_dir = tmp_path / "run"
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "128", "--checkpoint-every", "1",
                     "--run-dir", str(run_dir), "--quiet"]) == 0
    newest = ckpt.list_checkpoints(run_dir)[-1]
    newest.write_bytes(newest.read_bytes()[:1000])  # cut short, as on a full disk
    return run_dir, newest


def test_the_launchers_resume_check_leaves_a_damaged_checkpoint_where_it_is(damaged_run, monkeypatch, capsys):
    """The launcher holds no lock and may not write the run (read-only, a colleague's): renaming the damaged
    file there failed with a traceback (EROFS). Its check reads only; rank 0 sets the file aside under the lock."""
    run_dir, newest = damaged_run

    def read_only(src, dst):
        raise OSError(errno.EROFS, "Read-only file system", str(src))

    with monkeypatch.context() as m:
        m.setattr(os, "replace", read_only)
        launch._check(1, ["resume", str(run_dir)])  # the run's own count (1): everything else is checked
    assert newest.is_file() and not list(newest.parent.glob("*.corrupt"))
    assert capsys.readouterr().err == ""  # the "resuming from ... instead" note is rank 0's to say
    # the resume itself, holding the lock, sets it aside and continues from the older one
    code, _, err = run_main(["resume", str(run_dir), "--total-timesteps", "192", "--quiet"], capsys)
    assert code == 0, err
    assert Path(f"{newest}.corrupt").is_file() and "is unusable" in err


# --- SIGHUP -------------------------------------------------------------------------------------------

@posix
@pytest.mark.parametrize("ignored", [False, True])
def test_sighup_handlers_are_installed_unless_sighup_is_ignored(ignored):
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN if ignored else signal.SIG_DFL)
    try:
        with OutsideLoop():
            outside = signal.getsignal(signal.SIGHUP)
            with SignalGuard(lambda: None):
                guarded = signal.getsignal(signal.SIGHUP)
        if ignored:  # nohup: the run is to outlive its terminal
            assert outside is signal.SIG_IGN and guarded is signal.SIG_IGN
            assert signal.SIGHUP not in torchrun.caught_stops()
        else:
            assert callable(outside) and callable(guarded)
            assert signal.SIGHUP in torchrun.caught_stops()
        assert signal.getsignal(signal.SIGHUP) is (signal.SIG_IGN if ignored else signal.SIG_DFL)
    finally:
        signal.signal(signal.SIGHUP, old)
    assert torchrun.quiet_exit_code([129, 129]) == 129  # every rank stopped by SIGHUP: their lines said it


@posix
def test_sighup_stops_a_run_with_a_checkpoint_and_exit_129(tmp_path):
    run_dir = tmp_path / "run"
    proc = warm_python.Popen([sys.executable, "-m", "proxima", "train", "CartPole-v1", *TINY_RUN, "--total-timesteps",
                             "100000000", "--checkpoint-every", "100000", "--run-dir", str(run_dir)],
                             cwd=tmp_path, env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1"),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (run_dir / "metrics.csv").is_file() or len((run_dir / "metrics.csv").read_text().splitlines()) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:] if proc.poll() else "slow"
        time.sleep(0.05)
    proc.send_signal(signal.SIGHUP)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("no exit after SIGHUP")
    assert proc.returncode == 129, err[-2000:]
    assert "stopped by SIGHUP; checkpoint: " in err and "Traceback" not in err, err[-2000:]
    assert ckpt.list_checkpoints(run_dir)
    assert not (run_dir / rundir.LOCK_NAME).exists()  # released: a resume needs no takeover


# --- rank 0's refusal once; a rank stops with its torchrun ---------------------------------------------

def test_rank_0s_refusal_in_a_command_gets_no_rank_failed_line(monkeypatch, capsys):
    """A full disk as rank 0 writes the checkpoint: the command's `proxima train: error:` line says it."""
    monkeypatch.setattr(distributed, "_ENDS_WITH_COMMAND", True)
    distributed.DistContext(rank=0, world_size=2).report_failure(ckpt.CheckpointError("step_1.pt: disk full"))
    assert capsys.readouterr().err == ""
    # any rank's refusal is the command's own line alone (test_dist43_lines): no "rank 1 failed" duplicate
    distributed.DistContext(rank=1, world_size=2).report_failure(ckpt.CheckpointError("step_1.pt: disk full"))
    assert capsys.readouterr().err == ""


CHILD = textwrap.dedent("""
    import os, signal, sys, time
    from proxima import distributed
    def stopped(signum, frame):  # a rank's stop handler: which signal came says how the rank exits
        open(sys.argv[1], "w").write(str(signum))
        os._exit(43)
    signal.signal(signal.SIGTERM, stopped)
    distributed.stop_with_parent()
    print("ready", flush=True)
    time.sleep(60)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")
def test_a_rank_gets_sigterm_when_its_parent_is_killed(tmp_path):
    """torchrun killed alone (-9): its ranks must not train on as orphans."""
    parent = textwrap.dedent(f"""
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", {CHILD!r}, {str(tmp_path / "signum")!r}], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        print(child.pid, flush=True)
        import time; time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    child = int(proc.stdout.readline())
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:  # gone, or a zombie no one reaped yet (state Z): either way it stopped
            if Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                break
        except (OSError, IndexError):
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the child outlived its parent")
    # SIGTERM, a stop the ranks agree on (exit 143), not a Ctrl-C
    assert (tmp_path / "signum").read_text() == str(int(signal.SIGTERM))


# --- population resumes (population_resume_notes.patch) --------------------------------------------

POP = ["CartPole-v1", "--seeds", "1-2", "--total-timesteps", "128", "--num-envs", "2", "--num-steps", "16",
       "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1", "--no-progress", "--eval-episodes", "0", "--quiet"]


def test_a_population_resume_that_extends_it_notes_the_anneal_lr_jump_and_one_without_a_checkpoint_says_what_next(
        tmp_path, capsys, monkeypatch):
    run = tmp_path / "P"
    argv = ["train", *POP, "--run-dir", str(run)]
    with monkeypatch.context() as m:
        m.setattr(sys, "argv", ["proxima", *argv])  # what population.json records as its command
        code, _, err = run_main(argv, capsys)
    assert code == 0, err
    bare = tmp_path / "Q"
    shutil.copytree(run, bare)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--quiet"], capsys)
    assert code == 0, err
    assert "proxima: note: --anneal-lr: the learning rate schedule is recomputed over the resume's total (256 steps)" in err
    assert "iteration 5 trains at lr 0.000125, iteration 4 trained at 6.25e-05" in err
    for f in ckpt.list_checkpoints(bare):  # as if killed before its first checkpoint
        f.unlink()
    code, _, err = run_main(["resume", str(bare)], capsys)
    line = error_line(code, err, "the population wrote no checkpoint to resume from", "train it again: ", "--overwrite")
    # its recorded command, into the copy's own directory: the original's, which --overwrite would move aside, is intact
    assert f"--run-dir {bare} --overwrite" in line and f"--run-dir {run}" not in line


# --- review 37, mutation round 3 ---------------------------------------------------------------------

def test_two_populations_of_one_default_name_each_train_in_their_own_directory(tmp_path, monkeypatch, capsys):
    """The second population to claim the default name moves on to -2 (it exited 2, "in use by pid"), and
    its members' directories are made under the directory it claimed."""
    monkeypatch.chdir(tmp_path)
    chosen, racers = [], []
    real = rundir.unique_default

    def choose_then_lose(path):
        chosen.append(real(path))
        racers.append(_other_process_takes(chosen[-1]))
        return chosen[-1]

    monkeypatch.setattr(rundir, "unique_default", choose_then_lose)
    try:
        code, _, err = run_main(["train", *POP], capsys)
    finally:
        for racer in racers:
            racer.release()
    assert code == 0, err
    assert len(chosen) == 1
    moved = Path(f"{chosen[0]}-2")
    assert (moved / "population.json").is_file()
    assert [p.name for p in chosen[0].iterdir()] == []  # the other run's directory: nothing written there


def test_a_typed_run_dir_is_never_moved_on_by_a_default_choice_left_unclaimed(tmp_path, monkeypatch, capsys):
    """A run that chose a default name and failed before its claim left the name in _DEFAULT_NAMES; a later
    run of this process that names that path with --overwrite trained in PATH-2 instead of overwriting it."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "runs" / "X"
    assert unique_default(path) == path  # the failed run's choice, never claimed
    path.mkdir(parents=True)
    (path / "config.yaml").write_text("env_id: CartPole-v1\n")  # a run of its own since
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--quiet",
                             "--run-dir", str(path), "--overwrite"], capsys)
    assert code == 0, err
    assert ckpt.list_checkpoints(path), err
    assert not Path(f"{path}-2").exists()
    assert len(list(path.parent.glob("X.old-*"))) == 1  # the old one moved aside, as --overwrite says
    rundir._DEFAULT_NAMES.pop(str(path), None)


def test_a_default_name_whose_run_finished_there_meanwhile_moves_on_and_is_never_moved_aside(tmp_path):
    base = tmp_path / "D"
    for overwrite in (False, True):
        chosen = unique_default(base)
        base.mkdir(exist_ok=True)
        (base / "config.yaml").write_text("env_id: CartPole-v1\n")  # a finished run: files, no lock
        s = RunSession()
        try:
            assert s.claim_fresh(chosen, overwrite=overwrite, next_free=True) == Path(f"{base}-2")
        finally:
            s.release()
            shutil.rmtree(f"{base}-2")
        assert (base / "config.yaml").is_file() and not list(tmp_path.glob("D.old-*"))


def test_files_written_between_the_check_and_the_lock_move_a_default_name_on(tmp_path, monkeypatch):
    base = tmp_path / "D"
    chosen = unique_default(base)
    real = rundir.RunLock.acquire

    def racer_writes_first(self):
        real(self)
        if self.run_dir == base:
            (base / "config.yaml").write_text("env_id: CartPole-v1\n")

    monkeypatch.setattr(rundir.RunLock, "acquire", racer_writes_first)
    s = RunSession()
    try:
        assert s.claim_fresh(chosen, next_free=True) == Path(f"{base}-2")
    finally:
        s.release()


def test_a_lock_taken_between_the_in_use_check_and_the_lock_moves_a_default_name_on(tmp_path, monkeypatch):
    base = tmp_path / "D"
    chosen = unique_default(base)
    other = _other_process_takes(base)
    monkeypatch.setattr(rundir, "check_not_in_use", lambda run_dir: None)  # it was free when checked
    s = RunSession()
    try:
        assert s.claim_fresh(chosen, next_free=True) == Path(f"{base}-2")
    finally:
        s.release()
        other.release()


def test_a_default_name_lost_twice_moves_on_a_third_time(tmp_path, monkeypatch):
    base = tmp_path / "D"
    chosen = unique_default(base)
    held = [_other_process_takes(base)]
    real = rundir._free_default

    def taken_as_chosen(path):
        name = real(path)
        if name == Path(f"{base}-2"):  # another process claims -2 as this one moves on to it
            held.append(_other_process_takes(name))
        return name

    monkeypatch.setattr(rundir, "_free_default", taken_as_chosen)
    s = RunSession()
    try:
        assert s.claim_fresh(chosen, next_free=True) == Path(f"{base}-3")
    finally:
        s.release()
        for lock in held:
            lock.release()


def test_a_dangling_link_at_the_default_name_is_not_chosen(tmp_path):
    base = tmp_path / "D"
    base.symlink_to(tmp_path / "gone")
    assert unique_default(base) == Path(f"{base}-2")
    rundir._DEFAULT_NAMES.pop(f"{base}-2", None)


def test_a_claimed_default_choice_is_forgotten_and_the_path_later_typed_is_the_users(tmp_path):
    base = tmp_path / "D"
    first, second, third = unique_default(base), unique_default(base), unique_default(base)
    sessions = [RunSession() for _ in range(3)]
    try:
        assert sessions[0].claim_fresh(first, next_free=True) == base
        assert sessions[1].claim_fresh(second, next_free=True) == Path(f"{base}-2")
        sessions[2].claim_fresh(third)  # a claim that does not move on (a Trainer's own) uses its choice up too
    except RunDirError:
        pass
    finally:
        for s in sessions:
            s.release()
    assert str(base) not in rundir._DEFAULT_NAMES and f"{base}-2" not in rundir._DEFAULT_NAMES
    for path in (base, Path(f"{base}-2")):
        (path / "config.yaml").write_text("env_id: CartPole-v1\n")
        with pytest.raises(RunDirError, match="not empty|holds files|already"):
            RunSession().claim_fresh(path, next_free=True)  # typed again: refused, never renamed
    assert not Path(f"{base}-3").exists()


@posix
def test_the_launcher_keeps_an_ignored_sighup_ignored_and_catches_it_otherwise(monkeypatch, capsys):
    seen = []

    def check_then_stop(nproc, argv):
        seen.append(signal.getsignal(signal.SIGHUP))
        raise torchrun.EarlyStop(signal.SIGTERM)

    monkeypatch.setattr(launch, "_check", check_then_stop)
    for ignored in (True, False):
        old = signal.signal(signal.SIGHUP, signal.SIG_IGN if ignored else signal.SIG_DFL)
        try:
            assert launch.launch_torchrun(2, ["train", "CartPole-v1"]) == 128 + signal.SIGTERM
            assert signal.getsignal(signal.SIGHUP) is (signal.SIG_IGN if ignored else signal.SIG_DFL)
        finally:
            signal.signal(signal.SIGHUP, old)
    assert seen[0] is signal.SIG_IGN  # under nohup the hang-up is not turned into a stop
    assert callable(seen[1])


@posix
def test_torchruns_early_stops_keep_an_ignored_sighup_ignored():
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with torchrun.EarlyStops():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert callable(signal.getsignal(signal.SIGTERM))
    finally:
        signal.signal(signal.SIGHUP, old)


@posix
def test_a_sighup_whose_stderr_write_fails_still_records_the_stop(monkeypatch):
    class GoneTerminal:
        def write(self, text):
            raise OSError(errno.EIO, "Input/output error")

        def flush(self):
            raise OSError(errno.EIO, "Input/output error")

    guard = SignalGuard(lambda: None)
    monkeypatch.setattr(sys, "stderr", GoneTerminal())
    guard._handle(signal.SIGHUP, None)
    assert guard.stop.signum == signal.SIGHUP


@posix
def test_an_async_worker_ignores_sighup(monkeypatch):
    from proxima.envs import gym_adapter

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        gym_adapter._worker_signals()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


def test_a_rank_asks_to_stop_with_its_parent(monkeypatch):
    calls = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(distributed, "_ENDS_WITH_COMMAND", False)
    monkeypatch.setattr(distributed, "stop_with_parent", lambda: calls.append("asked"))

    def no_exit(code):
        raise SystemExit(code)

    monkeypatch.setattr(os, "_exit", no_exit)
    with pytest.raises(SystemExit) as e:
        distributed.exit_process(lambda: 3)
    assert e.value.code == 3 and calls == ["asked"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")
@pytest.mark.parametrize("ppids,recorded,signalled", [
    ((4242, 1), None, True),  # the parent died as the request was made
    ((1, 1), "dead", True),  # torchrun died before the rank read its parent: orphaned from the start
    ((4242, 4242), None, False),
    ((1, 1), "alive", False),  # a pid left in the environment by another launcher, whose process runs
])
def test_a_rank_whose_parent_is_already_gone_stops_itself(monkeypatch, tmp_path, ppids, recorded, signalled):
    import ctypes

    class Libc:
        def prctl(self, option, value):
            assert (option, value) == (1, signal.SIGTERM)  # PR_SET_PDEATHSIG: a stop, as torchrun's SIGTERM
            return 0

    answers, kills = list(ppids), []
    monkeypatch.setattr(ctypes, "CDLL", lambda *a, **k: Libc())
    monkeypatch.setattr(os, "getppid", lambda: answers.pop(0))
    real_kill = os.kill
    monkeypatch.setattr(os, "kill", lambda pid, sig: kills.append((pid, sig)) if sig else real_kill(pid, sig))
    if recorded == "dead":
        gone = subprocess.Popen([sys.executable, "-c", ""])
        gone.wait()
        monkeypatch.setenv(distributed.TORCHRUN_PID_ENV, str(gone.pid))
    elif recorded == "alive":
        monkeypatch.setenv(distributed.TORCHRUN_PID_ENV, str(os.getpid()))
    else:
        monkeypatch.delenv(distributed.TORCHRUN_PID_ENV, raising=False)
    distributed.stop_with_parent()
    assert kills == ([(os.getpid(), signal.SIGTERM)] if signalled else [])


def test_the_advice_to_train_again_names_overwrite_once(monkeypatch, tmp_path):
    from proxima import population_run

    command = ["proxima", "train", "CartPole-v1", "--seeds", "1-2", "--overwrite"]
    monkeypatch.setattr(population_run, "read_population_doc", lambda run_dir: {"command": command})
    line = population_run._train_again(tmp_path)
    assert line.count("--overwrite") == 1 and line.startswith("train it again: proxima train CartPole-v1")
    monkeypatch.setattr(population_run, "read_population_doc", lambda run_dir: {"command": command[:-1]})
    assert population_run._train_again(tmp_path).count("--overwrite") == 1


def test_a_rank_mean_step_count_rounds_to_the_whole_number():
    import math

    from proxima import trainer

    assert trainer._count(7.9999) == 8 and trainer._count(8.0001) == 8
    assert math.isnan(trainer._count(math.nan))
