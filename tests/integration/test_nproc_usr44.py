"""SIGUSR1/SIGUSR2 (a scheduler's warning before its time limit: Slurm's ``--signal=B:USR1@120``) under
``proxima train --nproc 2``: sent to the launcher, or to every process group of the job at once, it
reaches each rank as that signal, once, so each rank writes its part of the checkpoint and the job
exits 138/140 with the ranks' stop lines, as SIGTERM's path does (143).

Before, torchrun's agent did not handle them and the launcher did not catch them: SIGUSR1 killed
the launcher by its default action (no checkpoint, ranks torn down by SIGTERM after it was gone).

The two jobs (2 ranks, gloo) take 15-40 s each on 2 cores: marked slow as the other multi-process jobs
are (pyproject's markers); the fast tests take the launcher's and torchrun's parts in this process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import warm_python
from distributed_helpers import SMALL, STEPS_PER_ITER, env, run, stop, train_cmd, wait_for_rows

from proxima import launch, torchrun

#: far more iterations than the test lets run: the stop always comes mid-training
LONG = ["--total-timesteps", str(200 * STEPS_PER_ITER), "--run-dir", "run"]


def _start(cwd) -> subprocess.Popen:
    """The launcher of a long run, leading a process group of its own (killpg never reaches the tests)."""
    proc = warm_python.Popen(train_cmd(*SMALL, *LONG), cwd=cwd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    wait_for_rows(cwd / "run" / "metrics.csv", 1, proc)
    assert os.getpgid(proc.pid) == proc.pid
    return proc


def _stopped(err: str, name: str) -> None:
    """Rank 0 said the stop's line (signals.says_stops), naming the one checkpoint; nothing says it came twice or crashed."""
    assert err.count(f"proxima: stopped by {name}; checkpoint: run/checkpoints/step_") == 1, err[-4000:]
    assert "second interrupt" not in err, err[-4000:]
    assert "Traceback" not in err and "SignalException" not in err, err[-4000:]
    assert "the job failed" not in err, err[-4000:]


def _one_checkpoint_of_both_ranks(run_dir):
    from proxima.checkpoint import list_checkpoints, load_checkpoint

    files = list_checkpoints(run_dir)
    assert len(files) == 1, files
    state = load_checkpoint(files[0])
    assert len(state["ranks"]) == 2 and state["world_size"] == 2
    assert 1 <= state["iteration"] < 200
    return state


@pytest.mark.slow  # a 2-process job and its resume: see the module's docstring
def test_sigusr1_to_the_launcher_checkpoints_every_rank_and_the_run_resumes(tmp_path):
    proc = _start(tmp_path)
    rc, _, err = stop(proc, signal.SIGUSR1)
    assert rc == 128 + signal.SIGUSR1, err[-4000:]
    _stopped(err, "SIGUSR1")
    state = _one_checkpoint_of_both_ranks(tmp_path / "run")
    # the run goes on from that checkpoint: one iteration more
    more = (state["iteration"] + 1) * STEPS_PER_ITER
    res = run([sys.executable, "-m", "proxima", "resume", "run", "--total-timesteps", str(more)], tmp_path)
    assert res.returncode == 0, res.stderr[-4000:]
    assert f"(iteration {state['iteration']})" in res.stderr, res.stderr[-4000:]
    from proxima.checkpoint import list_checkpoints, load_checkpoint

    assert load_checkpoint(list_checkpoints(tmp_path / "run")[-1])["global_step"] == more


@pytest.mark.slow  # a 2-process job: see the module's docstring
def test_sigusr2_to_every_process_group_of_the_job_is_one_stop(tmp_path):
    from proxima.launch import _child_pids

    proc = _start(tmp_path)
    torchrun = _child_pids(proc.pid)
    ranks = [pid for t in torchrun for pid in _child_pids(t)]
    assert len(torchrun) == 1 and len(ranks) == 2, (torchrun, ranks)
    # as Slurm's scancel --signal or a time limit's warning to the job: every process group gets it (the
    # launcher, torchrun and each rank lead their own); the ranks' copy first, then torchrun passes its own on
    groups = [os.getpgid(pid) for pid in ranks] + [os.getpgid(proc.pid), os.getpgid(torchrun[0])]
    assert len(set(groups)) == 4, groups
    for group in groups[:2]:
        os.killpg(group, signal.SIGUSR2)
    time.sleep(0.2)
    for group in groups[2:]:
        os.killpg(group, signal.SIGUSR2)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the job did not end after SIGUSR2")
    assert proc.returncode == 128 + signal.SIGUSR2, err[-4000:]
    _stopped(err, "SIGUSR2")
    _one_checkpoint_of_both_ranks(tmp_path / "run")



@pytest.fixture
def usr_recorded():
    """SIGUSR1/SIGUSR2 recorded here unless the code under test takes them: where it does not, the test fails
    on its assertion rather than by the signal's default action ending pytest."""
    got: list = []
    old = {sig: signal.signal(sig, lambda signum, frame: got.append(signum)) for sig in (signal.SIGUSR1, signal.SIGUSR2)}
    yield got
    for sig, handler in old.items():
        signal.signal(sig, handler)


def test_torchrun_passes_sigusr1_and_sigusr2_on_to_the_ranks_and_exits_138_140(monkeypatch, usr_recorded):
    """proxima.torchrun has torch's agent handle SIGUSR1/SIGUSR2 as it handles SIGTERM (its default list lacks
    them, and a user's --signals-to-handle may too): the agent passes the stop on to the ranks (sigval) once,
    a copy during that shutdown (the job-wide signal) is not raised again, and the job exits 128 + signum."""
    import torch.distributed.run as run
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.multiprocessing import api

    passed_on: list = []

    def start_workers(self, group):  # as api.PContext.start: a handler for each signal torchrun's setting names
        for name in os.environ[torchrun.SIGNALS_ENV].split(","):
            signal.signal(getattr(signal, name), api._terminate_process_handler)

    def fake_torchrun(argv):  # as torchrun: its setting from --signals-to-handle, the ranks started, a stop, the shutdown
        os.environ[torchrun.SIGNALS_ENV] = argv[0]
        LocalElasticAgent._start_workers(None, None)
        try:
            os.kill(os.getpid(), signum)
            time.sleep(0.1)
        except api.SignalException as e:
            passed_on.append(e.sigval)
            os.kill(os.getpid(), signum)  # the job-wide copy, during the shutdown
            time.sleep(0.1)
            raise

    monkeypatch.setattr(run, "main", fake_torchrun)
    monkeypatch.setattr(LocalElasticAgent, "_start_workers", start_workers)
    quit_handler = signal.getsignal(signal.SIGQUIT)  # the others are put back by proxima.torchrun
    try:
        for signum, given in ((signal.SIGUSR1, "SIGTERM,SIGINT,SIGHUP,SIGQUIT"), (signal.SIGUSR2, "SIGTERM")):
            passed_on.clear()
            assert torchrun.main([given]) == 128 + signum
            assert passed_on == [signum] and usr_recorded == []
    finally:
        signal.signal(signal.SIGQUIT, quit_handler)
    assert torchrun.handled_signals("SIGTERM,SIGQUIT").split(",")[:2] == ["SIGTERM", "SIGQUIT"]  # the user's kept, first
    assert {"SIGINT", "SIGUSR1", "SIGUSR2"} <= set(torchrun.handled_signals("SIGTERM,SIGQUIT").split(","))


def test_the_launcher_forwards_sigusr1_to_torchrun_once_and_exits_138(monkeypatch, usr_recorded):
    sent: list = []

    class Torchrun:  # launch's Popen: the launcher gets SIGUSR1 while it waits; torchrun ends as the ranks did
        def __init__(self, cmd, **kwargs):
            self.pid = os.getpid()

        def send_signal(self, signum):
            sent.append(signum)

        def wait(self):
            os.kill(os.getpid(), signal.SIGUSR1)
            os.kill(os.getpid(), signal.SIGUSR1)  # a second copy goes to the ranks (none here), not to torchrun
            time.sleep(0.1)
            return 128 + sent[0] if sent else 0

        def poll(self):
            return 0

    monkeypatch.setattr(launch, "_check", lambda nproc, argv: None)
    monkeypatch.setattr(launch, "subprocess", SimpleNamespace(Popen=Torchrun))
    monkeypatch.setattr(launch, "_child_pids", lambda pid: [])
    assert launch.launch_torchrun(2, ["train", "CartPole-v1"]) == 128 + signal.SIGUSR1
    assert sent == [signal.SIGUSR1] and usr_recorded == []


def test_ranks_that_all_stopped_by_sigusr1_or_sigusr2_end_the_job_with_their_code_and_no_line():
    assert torchrun.quiet_exit_code([138, 138]) == 138  # a SIGUSR1 to one rank: the vote stops both
    assert torchrun.quiet_exit_code([140, -signal.SIGTERM]) == 140
    assert torchrun.quiet_exit_code([138, 140]) is None
