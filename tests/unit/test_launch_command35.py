"""Review 35: the command meta.json records is one that runs again (``python -m proxima``, torchrun by
hand with its process count), and a stop before any rank trains ends the launcher with 130/143 and one
line, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import proxima
from proxima import launch, torchrun
from tests.cli_helpers import TINY_RUN, run_main

PACKAGE = Path(proxima.__file__).resolve().parent
MAIN = str(PACKAGE / "__main__.py")  # what Python leaves in sys.argv[0] for `python -m proxima`
RLHF_MAIN = str(PACKAGE / "rlhf" / "__main__.py")
TORCHRUN_ENV = ("TORCHELASTIC_RUN_ID", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "WORLD_SIZE", "RANK", launch.COMMAND_ENV)
NEW_RUN_LINE = "proxima: stopped by SIGINT; before training started; nothing was kept"


@pytest.fixture
def plain_env(monkeypatch):
    """No torchrun and no launcher around this process."""
    for name in TORCHRUN_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def torchrun_env(local: int = 2, nodes: int = 1) -> dict:
    """What torchrun's agent sets in a rank's environment (torch.distributed.elastic)."""
    return {"TORCHELASTIC_RUN_ID": "none", "LOCAL_WORLD_SIZE": str(local), "GROUP_WORLD_SIZE": str(nodes),
            "WORLD_SIZE": str(local * nodes), "RANK": "0"}


def torchrun_path() -> str:
    path = os.path.join(os.path.dirname(sys.executable), "torchrun")
    return path if os.path.isfile(path) else "torchrun"


def stopped(fn, *args):
    """``fn(*args)``, or "traceback" where a KeyboardInterrupt came out of it (which would end pytest)."""
    try:
        return fn(*args)
    except KeyboardInterrupt:
        return "traceback"


# --- typed_command ----------------------------------------------------------------------------------------------------


def test_python_dash_m_is_recorded_as_python_dash_m_not_the_packages_main_file(plain_env):
    argv = [MAIN, "train", "CartPole-v1", "--run-dir", "runs/t1"]
    assert launch.typed_command(argv) == [sys.executable, "-m", "proxima", "train", "CartPole-v1", "--run-dir", "runs/t1"]
    assert launch.typed_command([RLHF_MAIN, "--steps", "2"]) == [sys.executable, "-m", "proxima.rlhf", "--steps", "2"]


def test_a_rank_of_torchrun_by_hand_records_torchrun_with_its_process_count():
    argv = [MAIN, "train", "CartPole-v1", "--quiet"]
    assert launch.typed_command(argv, torchrun_env(2)) == [
        torchrun_path(), "--nproc-per-node", "2", "-m", "proxima", "train", "CartPole-v1", "--quiet"]
    assert launch.typed_command(argv, torchrun_env(4, nodes=3))[:5] == [
        torchrun_path(), "--nproc-per-node", "4", "--nnodes", "3"]
    assert launch.typed_command([RLHF_MAIN, "--steps", "2"], torchrun_env(2))[3:] == ["-m", "proxima.rlhf", "--steps", "2"]
    # the console script (torchrun --no-python proxima ...) and a script of the user's
    assert launch.typed_command(["/v/bin/proxima", "train"], torchrun_env(2))[3:] == ["--no-python", "/v/bin/proxima", "train"]
    assert launch.typed_command(["job.py", "x"], torchrun_env(2))[3:] == ["job.py", "x"]


def test_the_launchers_command_wins_and_other_processes_keep_their_argv():
    typed = ["/v/bin/proxima", "train", "CartPole-v1", "--nproc", "2"]
    env = {**torchrun_env(2), launch.COMMAND_ENV: json.dumps(typed)}
    assert launch.typed_command([MAIN, "train", "CartPole-v1"], env) == typed
    broken = {launch.COMMAND_ENV: "[1, 2"}  # not JSON: this process's own command
    assert launch.typed_command(["/v/bin/proxima", "train"], broken) == ["/v/bin/proxima", "train"]
    assert launch.typed_command(["-c", "x"], torchrun_env(2)) == ["-c", "x"]  # python -c: no program to name


def test_meta_json_of_a_python_dash_m_run_and_its_resume_record_python_dash_m(tmp_path, plain_env, capsys):
    run_dir = tmp_path / "run"
    first = ["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(run_dir), "--quiet"]
    plain_env.setattr(sys, "argv", [MAIN, *first])
    code, _, err = run_main(first, capsys)
    assert code == 0, err
    again = ["resume", str(run_dir), "--total-timesteps", "128", "--quiet"]
    plain_env.setattr(sys, "argv", [MAIN, *again])
    code, _, err = run_main(again, capsys)
    assert code == 0, err
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["command"] == [sys.executable, "-m", "proxima", *first]
    assert [r["command"] for r in meta["resumes"]] == [[sys.executable, "-m", "proxima", *again]]


def test_a_resume_entry_without_a_command_records_the_typed_one(plain_env):
    from proxima.train_state import resume_entry

    plain_env.setattr(sys, "argv", [MAIN, "train", "CartPole-v1", "--seeds", "1-2"])
    assert resume_entry(64)["command"] == [sys.executable, "-m", "proxima", "train", "CartPole-v1", "--seeds", "1-2"]


def test_an_rlhf_runs_meta_records_the_torchrun_command(monkeypatch):
    from proxima.rlhf import rundir

    # the versions only: importing transformers and peft takes seconds
    monkeypatch.setitem(sys.modules, "transformers", SimpleNamespace(__version__="t"))
    monkeypatch.setitem(sys.modules, "peft", SimpleNamespace(__version__="p"))
    monkeypatch.delenv(launch.COMMAND_ENV, raising=False)
    for name, value in torchrun_env(2).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", [RLHF_MAIN, "--steps", "4"])
    assert rundir._meta(2, "cpu")["command"] == [torchrun_path(), "--nproc-per-node", "2", "-m", "proxima.rlhf",
                                                  "--steps", "4"]


# --- the launcher: the command it hands its ranks, a stop before the ranks train ------------------------------------


class FakeTorchrun:
    """launch's Popen: a torchrun that has the launcher's handler take each signal of ``during_start``
    as it is started and of ``during_wait`` while the launcher waits, then exits ``code``; ``sent``: the
    signals the launcher sent it."""
    code, during_start, during_wait, started, sent = 0, (), (), [], []

    def __init__(self, cmd, env=None, **kw):
        self.pid = 4242
        FakeTorchrun.started.append((cmd, env))
        for sig in self.during_start:
            signal.getsignal(sig)(sig, None)

    def wait(self):
        for sig in self.during_wait:
            signal.getsignal(sig)(sig, None)
        return self.code

    def poll(self):
        return self.code

    def send_signal(self, sig):
        FakeTorchrun.sent.append(sig)


@pytest.fixture
def fake_torchrun(monkeypatch):
    FakeTorchrun.code, FakeTorchrun.during_start, FakeTorchrun.during_wait = 0, (), ()
    FakeTorchrun.started, FakeTorchrun.sent = [], []
    monkeypatch.setattr(launch, "_check", lambda nproc, argv: None)
    monkeypatch.setattr(launch, "subprocess", SimpleNamespace(Popen=FakeTorchrun))
    return FakeTorchrun


def test_a_python_dash_m_launch_hands_its_ranks_python_dash_m(fake_torchrun, monkeypatch):
    argv = ["train", "CartPole-v1", "--nproc", "2"]
    monkeypatch.setattr(sys, "argv", [MAIN, *argv])
    assert launch.launch_torchrun(2, argv) == 0
    (_, env), = fake_torchrun.started
    assert json.loads(env[launch.COMMAND_ENV]) == [sys.executable, "-m", "proxima", *argv]


def test_a_stop_during_the_launchers_checks_is_one_line_and_130(monkeypatch, capsys):
    def slow_check(nproc, argv):  # the checks build the env: a Ctrl-C lands in them
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)

    started = []
    monkeypatch.setattr(launch, "_check", slow_check)
    monkeypatch.setattr(launch, "subprocess", SimpleNamespace(Popen=lambda *a, **k: started.append(a)))
    assert stopped(launch.launch_torchrun, 2, ["train", "CartPole-v1", "--nproc", "2"]) == 130
    assert capsys.readouterr().err == NEW_RUN_LINE + "\n"
    assert started == []  # torchrun never started
    assert stopped(launch.launch_torchrun, 2, ["resume", "runs/r", "--nproc", "2"]) == 130
    assert capsys.readouterr().err == ("proxima: stopped by SIGINT; before training started; "
                                       "the run is as its last checkpoint left it\n")


def swallowed_stop(*args):
    """A Ctrl-C whose KeyboardInterrupt lands in code that swallows it (torch's C code importing NumPy
    clears any error)."""
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    except KeyboardInterrupt:
        pass


def test_a_stop_swallowed_during_the_launchers_checks_still_stops_it(monkeypatch, capsys):
    started = []
    monkeypatch.setattr(launch, "_check", swallowed_stop)
    monkeypatch.setattr(launch, "subprocess", SimpleNamespace(Popen=lambda *a, **k: started.append(a)))
    assert stopped(launch.launch_torchrun, 2, ["train", "CartPole-v1", "--nproc", "2"]) == 130
    assert capsys.readouterr().err == NEW_RUN_LINE + "\n"
    assert started == []


def test_a_stop_before_any_rank_took_it_gets_the_launchers_line(fake_torchrun, monkeypatch, capsys):
    fake_torchrun.code, fake_torchrun.during_wait = 130, [signal.SIGINT]
    children = {4242: [101, 102], 101: [201]}  # torchrun 4242, its ranks, an env worker of rank 101
    monkeypatch.setattr(launch, "_child_pids", lambda pid: children.get(pid, []))
    catching: list = []  # the ranks with proxima's stop handling in place
    monkeypatch.setattr(launch, "handles_stops", lambda pid: pid in catching)
    assert launch.launch_torchrun(2, ["train", "CartPole-v1", "--nproc", "2"]) == 130
    assert capsys.readouterr().err == NEW_RUN_LINE + "\n"
    catching.append(201)  # an env worker's own handler says nothing of its rank
    assert launch.launch_torchrun(2, ["train", "CartPole-v1", "--nproc", "2"]) == 130
    assert capsys.readouterr().err == NEW_RUN_LINE + "\n"
    catching.append(102)  # the rank says where it stopped: the launcher adds nothing
    assert launch.launch_torchrun(2, ["train", "CartPole-v1", "--nproc", "2"]) == 130
    assert capsys.readouterr().err == ""


def test_a_stop_as_torchrun_is_started_reaches_it_once(fake_torchrun, capsys):
    fake_torchrun.code, fake_torchrun.during_start = 130, [signal.SIGINT]
    assert launch.launch_torchrun(2, ["train", "CartPole-v1", "--nproc", "2"]) == 130
    assert fake_torchrun.sent == [signal.SIGINT]  # not lost: torchrun takes it once its main runs
    assert capsys.readouterr().err == NEW_RUN_LINE + "\n"


def test_torchrun_starts_with_the_stop_signals_held_for_its_main():
    import subprocess

    show = "import signal; print(sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])))"
    res = subprocess.run([sys.executable, "-c", show], preexec_fn=launch._preexec, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert {int(signal.SIGINT), int(signal.SIGTERM)} <= set(json.loads(res.stdout))


# --- proxima.torchrun: a stop before torchrun starts the ranks ------------------------------------------------------


def test_torchruns_main_ends_a_stop_before_the_ranks_start_with_its_code(monkeypatch):
    import torch.distributed.run

    def rendezvous(argv):  # a stop lands while torchrun imports or meets itself, before it starts a rank
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)

    monkeypatch.setattr(torch.distributed.run, "main", rendezvous)
    assert stopped(torchrun.main, []) == 130
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # this process's handler back


def test_a_stop_while_torchrun_starts_the_ranks_is_raised_once_it_holds_them(monkeypatch):
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.multiprocessing import api

    def start_ranks(self, worker_group):  # as torchrun does: its handler, the ranks, then the agent records them
        signal.signal(signal.SIGINT, api._terminate_process_handler)
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)  # the stop lands as the ranks start
        self._pcontext = "the ranks"
        return {}

    assert _ranks_holding_the_stop(monkeypatch, start_ranks) == ["the ranks"]  # not None: no rank left running without the stop
    assert LocalElasticAgent._start_workers is start_ranks  # torchrun's own back


def _ranks_holding_the_stop(monkeypatch, start_ranks) -> list:
    """torchrun.main with the agent's _start_workers replaced by ``start_ranks`` (in which a stop lands):
    its exit is 130, and the list holds what the agent's _pcontext held when the stop was raised (the
    ranks its shutdown signals)."""
    import torch.distributed.run
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.multiprocessing import api

    held_by = []

    def agent_run(argv):  # the agent's run: its shutdown signals the ranks its _pcontext holds
        agent = SimpleNamespace(_pcontext=None)
        try:
            LocalElasticAgent._start_workers(agent, None)
        except api.SignalException:
            held_by.append(agent._pcontext)
            raise

    monkeypatch.setattr(LocalElasticAgent, "_start_workers", start_ranks)
    monkeypatch.setattr(torch.distributed.run, "main", agent_run)
    monkeypatch.setattr(torchrun, "child_pids", lambda pid: [])
    assert stopped(torchrun.main, []) == 130
    return held_by


def test_a_stop_swallowed_as_torchrun_imports_is_raised_before_any_rank_starts(monkeypatch):
    import torch.distributed.run
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    started = []

    def agent_run(argv):  # the stop lands in an import that swallows it; then the agent starts the ranks
        swallowed_stop()
        LocalElasticAgent._start_workers(SimpleNamespace(_pcontext=None), None)

    monkeypatch.setattr(LocalElasticAgent, "_start_workers", lambda self, group: started.append(group))
    monkeypatch.setattr(torch.distributed.run, "main", agent_run)
    assert stopped(torchrun.main, []) == 130
    assert started == []


def test_a_stop_swallowed_as_the_agent_sets_up_the_ranks_stops_them_once_it_holds_them(monkeypatch):
    def start_ranks(self, worker_group):  # the stop lands (and is swallowed) before torchrun's handler is in
        swallowed_stop()
        self._pcontext = "the ranks"

    assert _ranks_holding_the_stop(monkeypatch, start_ranks) == ["the ranks"]  # not None: no rank left running without the stop


def test_ranks_without_stop_handling_yet_get_sigterm_for_a_ctrl_c(monkeypatch):
    ways = {101: "default", 102: "default"}  # how each rank takes SIGTERM
    monkeypatch.setattr(torchrun, "child_pids", lambda pid: list(ways) if pid == os.getpid() else [])
    monkeypatch.setattr(torchrun, "_sigterm", lambda pid: ways.get(pid))
    # both still starting (Python, torch's import): SIGTERM's default ends them silently, a SIGINT
    # would raise wherever it lands (a "Fatal Python error" in Python's own start-up)
    assert torchrun._passed_on(signal.SIGINT) == signal.SIGTERM
    assert torchrun._passed_on(signal.SIGTERM) == signal.SIGTERM
    ways[102] = "caught"  # one rank is in its run: it says where the Ctrl-C stopped it, the other too
    assert torchrun._passed_on(signal.SIGINT) == signal.SIGINT
    ways[102] = "ignored"  # one rank leaves after an error, ignoring SIGTERM (rlhf.dist)
    assert torchrun._passed_on(signal.SIGINT) == signal.SIGINT
    ways.clear()  # /proc lists no children: nothing known, the stop as it came
    assert torchrun._passed_on(signal.SIGINT) == signal.SIGINT


def test_torchruns_main_takes_a_stop_held_while_python_started(monkeypatch):
    import torch.distributed.run

    ran = []
    monkeypatch.setattr(torch.distributed.run, "main", lambda argv: ran.append(argv))
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # as the launcher starts torchrun (launch._preexec)
    try:
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # to this thread: held here, not run by another
        code = stopped(torchrun.main, [])
    finally:
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        except KeyboardInterrupt:  # main left it held: taken here, for the assertion below
            code = "still held"
    assert code == 130 and ran == []
