"""signals.BeforeTraining (cli.entry's guard until a run's own handling), its handover to OutsideLoop, its
retirement after a --nproc launch; signals.resumes; torchrun's handled_signals and its environment variable."""

import os
import signal

import pytest

from proxima import cli, launch, torchrun
from proxima.signals import BeforeTraining, OutsideLoop, TrainingInterrupted, resumes

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


@pytest.fixture
def handlers_back():
    before = {sig: signal.getsignal(sig) for sig in STOPS}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


@pytest.fixture
def no_torchrun(monkeypatch):
    for name in ("TORCHELASTIC_RUN_ID", "WORLD_SIZE", "RANK"):
        monkeypatch.delenv(name, raising=False)


def test_a_signal_after_a_nproc_launch_meets_the_handling_from_before_the_guard(handlers_back, no_torchrun, monkeypatch):
    """The launch returned (its job over): a later SIGUSR1 is no "stop before training started"."""
    got = []
    signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
    monkeypatch.setattr(launch, "launch_torchrun", lambda nproc, argv, announce=None: 0)
    with BeforeTraining():
        assert cli._launch_torchrun(2, ["train", "CartPole-v1"]) == 0
        try:
            signal.raise_signal(signal.SIGUSR1)
        except TrainingInterrupted as e:  # a KeyboardInterrupt: pytest would end the session
            pytest.fail(f"the guard was not retired after the launch: {e}")
        assert got == [signal.SIGUSR1]


@pytest.mark.parametrize("env", [{"TORCHELASTIC_RUN_ID": "job"}, {"WORLD_SIZE": "2", "RANK": "1"}])
def test_a_torchrun_rank_gets_no_guard(handlers_back, no_torchrun, monkeypatch, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    before = {sig: signal.getsignal(sig) for sig in STOPS}
    guard = BeforeTraining()
    guard.__enter__()
    try:
        assert {sig: signal.getsignal(sig) for sig in STOPS} == before
    finally:
        guard.__exit__()


def test_the_guard_is_on_outside_torchrun(handlers_back, no_torchrun):
    with BeforeTraining() as guard:
        assert all(getattr(signal.getsignal(sig), "__self__", None) is guard for sig in STOPS)


def test_outside_loop_puts_back_the_python_handler_from_before_the_guard(handlers_back, no_torchrun):
    def mine(signum, frame):
        pass

    signal.signal(signal.SIGTERM, mine)
    with BeforeTraining():
        with OutsideLoop():
            pass
        assert signal.getsignal(signal.SIGTERM) is mine
    assert signal.getsignal(signal.SIGTERM) is mine


def test_of_two_signals_while_holding_the_first_is_the_stop(handlers_back, no_torchrun):
    with BeforeTraining() as guard:
        guard.holding = True
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)
        guard.holding = False
        with pytest.raises(TrainingInterrupted) as stopped:
            guard.check()
    assert (stopped.value.signum, stopped.value.exit_code) == (signal.SIGTERM, 143)
    assert str(stopped.value) == "stopped by SIGTERM; before training started; nothing was kept"


@pytest.mark.parametrize("argv, expected", [
    (["train", "CartPole-v1", "--resume=auto"], True),
    (["train", "CartPole-v1", "--resume"], True),
    (["train", "CartPole-v1", "--", "--resume"], False),
    (["train", "CartPole-v1", "--", "--resume=auto"], False),
    (["train", "CartPole-v1", "--resume-x"], False),
    (["resume", "runs/x"], True),
    (["eval", "resume"], False),
    (["train", "CartPole-v1"], False),
    ([], False),
])
def test_resumes(argv, expected):
    assert resumes(argv) is expected


def test_handled_signals_has_no_empty_entry():
    names = torchrun.handled_signals("SIGTERM,").split(",")
    assert names[0] == "SIGTERM" and "" not in names
    assert "" not in torchrun.handled_signals(" , SIGINT ,,").split(",")


def test_handled_signals_leaves_out_an_ignored_sighup(handlers_back):
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup: the job outlives its terminal
    names = torchrun.handled_signals("SIGTERM").split(",")
    assert "SIGHUP" not in names and {"SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2"} <= set(names)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    assert "SIGHUP" in torchrun.handled_signals("SIGTERM").split(",")


@pytest.mark.parametrize("given", [None, "SIGTERM"])
def test_torchrun_puts_its_signals_setting_back(monkeypatch, handlers_back, given):
    """The agent's setting is widened while the ranks start, and is as it was once torchrun.main returns."""
    import torch.distributed.run as run
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    seen = []
    if given is None:
        monkeypatch.delenv(torchrun.SIGNALS_ENV, raising=False)
    else:
        monkeypatch.setenv(torchrun.SIGNALS_ENV, given)
    monkeypatch.setattr(LocalElasticAgent, "_start_workers", lambda self, group: seen.append(os.environ[torchrun.SIGNALS_ENV]))
    monkeypatch.setattr(run, "main", lambda argv: LocalElasticAgent._start_workers(None, None))
    assert torchrun.main([]) == 0
    assert seen and "SIGUSR1" in seen[0].split(",")
    assert os.environ.get(torchrun.SIGNALS_ENV) == given
