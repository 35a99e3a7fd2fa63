"""Mutation-found gaps in test_leftsig49's items: RLHF's join failure (a command's own ConfigError, a peer's
error while joining, an error that only reads like a peer's), its lost-contact line outside a group, the
stdout-closed line only for a BrokenPipeError, stdout_closed where it cannot tell, who says a stop's lines
(signals.says_stops), a SignalGuard whose last_checkpoint fails, and _startup's reading of ``python -W X -m``."""

import os
import signal
import sys
from pathlib import Path

import pytest
import torch.distributed as tdist

from proxima import _startup, distributed
from proxima.config import ConfigError
from proxima.rlhf import dist as D
from proxima.rlhf.dist import Dist
from proxima.signals import TEARDOWN_ENV, SignalGuard, TrainingInterrupted, say_stopped, says_stops

GLOO = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
        "[127.0.0.1]:26755. This is typically caused by a remote worker crashing.")
CKPT = Path("run/checkpoints/step_000000000512.pt")


@pytest.fixture
def rank1_joining(monkeypatch):
    """Rank 1 of 2, not yet in a process group; ``fail(exc)`` makes join_group raise it."""
    for name in ("TORCHELASTIC_RUN_ID", TEARDOWN_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setattr(tdist, "is_initialized", lambda: False)

    def fail(exc):
        def join(backend, timeout=None, **how):  # join_group's keywords (cuda=...) as they grow
            raise exc
        monkeypatch.setattr(distributed, "join_group", join)
    return fail


# --- 1. RLHF's join -----------------------------------------------------------------------------------------------------
def test_an_rlhf_join_refused_by_the_commands_own_check_is_its_one_line_not_a_join_failure(rank1_joining, capsys):
    refusal = ConfigError("GLOO_SOCKET_IFNAME=bogus0: no such network interface on this machine")
    rank1_joining(refusal)
    with pytest.raises(ConfigError) as got:
        D.init_distributed("cpu")
    assert got.value is refusal and not getattr(refusal, distributed._REPORTED, False)  # the command prints its line
    assert capsys.readouterr().err == ""


def test_an_rlhf_peer_that_ended_while_this_rank_joined_is_the_lost_contact_line(rank1_joining, capsys):
    rank1_joining(RuntimeError(GLOO))
    with pytest.raises(D.LostContact) as got:
        D.init_distributed("cpu")
    assert str(got.value) == (f"rank 1 stopped: lost contact with another rank (it failed or was stopped; its error is "
                              f"above): RuntimeError: {GLOO} (while joining the process group)")
    assert capsys.readouterr().err == ""  # the entry point prints it, once


def test_an_rlhf_peer_that_failed_while_one_of_three_joined_is_another_rank(rank1_joining, monkeypatch, tmp_path):
    monkeypatch.setenv("WORLD_SIZE", "3")
    marker = tmp_path / "torn-down"
    marker.write_text("2 1\n")  # proxima.torchrun is ending the job: local rank 2 exited 1 (its error is above)
    monkeypatch.setenv(TEARDOWN_ENV, str(marker))
    rank1_joining(RuntimeError(GLOO))
    with pytest.raises(D.LostContact) as got:
        D.init_distributed("cpu")
    assert str(got.value) == (f"rank 1 stopped: lost contact with another rank (another rank failed, and torchrun is "
                              f"ending the job; its error is above): RuntimeError: {GLOO} (while joining the process group)")


def test_an_rlhf_join_error_that_only_reads_like_a_peers_is_the_join_failure_line(rank1_joining, capsys):
    odd = ValueError("Connection reset by peer while reading the rendezvous")  # not torch's: not a collective's
    rank1_joining(odd)
    with pytest.raises(ValueError):
        D.init_distributed("cpu")
    assert capsys.readouterr().err.splitlines() == [distributed.join_failure_line(1, odd)]
    assert getattr(odd, distributed._REPORTED)


def test_peer_ended_outside_a_process_group_is_no_lost_contact():
    assert D.lost_contact(D.PeerEnded(), Dist()) is None
    assert D.lost_contact(RuntimeError(GLOO), Dist()) is None


# --- 2. the stdout-closed line is a BrokenPipeError's only ---------------------------------------------------------------
@pytest.fixture
def closed_stdout(monkeypatch):
    """sys.__stdout__ as the write end of a pipe whose read end is closed (``| head`` having ended)."""
    read, write = os.pipe()
    out = os.fdopen(write, "w")
    monkeypatch.setattr(sys, "__stdout__", out)
    os.close(read)
    monkeypatch.delenv(TEARDOWN_ENV, raising=False)
    yield
    try:
        out.close()
    except BrokenPipeError:
        pass


def test_a_lost_peer_while_stdout_is_closed_is_still_the_lost_contact_line(closed_stdout, capsys):
    error = RuntimeError(GLOO)
    distributed.DistContext(0, 2).report_failure(error, CKPT)
    assert capsys.readouterr().err.splitlines() == [
        f"proxima: rank 0 stopped: lost contact with another rank (it failed or was stopped; its error is above): "
        f"RuntimeError: {GLOO}; checkpoint: {CKPT.as_posix()}; continue with: proxima resume run"]


def test_an_envs_connection_reset_while_stdout_is_closed_is_the_ranks_own_failure(closed_stdout, capsys):
    distributed.DistContext(1, 2).report_failure(ConnectionResetError(104, "Connection reset by peer"), CKPT)
    assert capsys.readouterr().err.splitlines() == [
        "proxima: rank 1 failed: ConnectionResetError: [Errno 104] Connection reset by peer"]


def test_stdout_closed_is_false_where_it_cannot_tell(monkeypatch, tmp_path):
    gone = open(tmp_path / "out.txt", "w")
    gone.close()
    monkeypatch.setattr(sys, "__stdout__", gone)  # fileno(): ValueError
    assert distributed.stdout_closed() is False
    monkeypatch.setattr(sys, "__stdout__", None)  # pythonw: no stdout
    assert distributed.stdout_closed() is False


# --- 3. who says a stop's lines -----------------------------------------------------------------------------------------
def _stop_lines(capsys) -> list:
    guard = SignalGuard(lambda: None)
    guard._handle(signal.SIGTERM, None)
    say_stopped(TrainingInterrupted(signal.SIGTERM, CKPT))
    return capsys.readouterr().err.splitlines()


def test_a_torchrun_rank_with_no_rank_variable_is_rank_0_and_says_the_stop(monkeypatch, capsys):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    assert says_stops() is True
    assert len(_stop_lines(capsys)) == 2


def test_a_single_process_with_a_stray_rank_variable_still_says_its_stop(monkeypatch, capsys):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("RANK", "3")  # a cluster's own variable: no torchrun here
    assert says_stops() is True
    assert _stop_lines(capsys) == [
        "proxima: SIGTERM received; writing a checkpoint after this iteration (interrupt, or the same signal again 1 s "
        "or more from now, to exit at once)",
        f"proxima: stopped by SIGTERM; checkpoint: {CKPT.as_posix()}; continue with: proxima resume run"]


# --- 4. a SignalGuard whose last_checkpoint fails -------------------------------------------------------------------------
def test_a_last_checkpoint_that_fails_in_the_handler_says_none_was_written():
    def broken():
        raise OSError(5, "Input/output error")

    guard = SignalGuard(broken)
    assert (guard._kept(), guard._resume()) == ("no checkpoint was written", "")


# --- 5. _startup: python -W X -m proxima.rlhf is the command line, and rlhf's ----------------------------------------------
def test_python_dash_w_then_dash_m_proxima_rlhf_is_the_rlhf_command_line(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["-m", "--demo"])
    monkeypatch.setattr(sys, "orig_argv", ["python", "-W", "ignore", "-m", "proxima.rlhf", "--demo"], raising=False)
    assert _startup.command_line() is True
    assert _startup.command_words() == ["rlhf", "--demo"]


def test_python_m_proxima_rlhf_once_its_main_runs_is_still_the_rlhf_command_line(monkeypatch):
    # runpy has set sys.argv[0] to the module's file by the time __main__.py imports proxima.cli
    monkeypatch.setattr(sys, "argv", [str(Path(_startup.__file__).parent / "rlhf" / "__main__.py"), "--resume", "run"])
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "proxima.rlhf", "--resume", "run"], raising=False)
    assert _startup.command_words() == ["rlhf", "--resume", "run"]


def test_the_rlhf_modules_main_exits_2_with_did_you_mean_for_a_mistyped_flag(capsys):
    from proxima.rlhf.__main__ import main

    with pytest.raises(SystemExit) as done:
        main(["--polcy", "gpt2"])
    assert done.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "proxima rlhf: error: unrecognized arguments: --polcy gpt2; did you mean --policy? (see proxima rlhf --help)"]


@pytest.mark.parametrize("options, module", [
    (["-Bm", "proxima.rlhf"], "proxima.rlhf"),  # combined short flags: it was read as no -m at all
    (["-Im", "proxima"], "proxima"),
    (["-BmProxima"], "Proxima"),
    (["-Wignore", "-m", "proxima"], "proxima"),
    (["-BW", "ignore", "-m", "proxima"], "proxima"),
    (["-X", "dev", "-m", "proxima"], "proxima"),
    (["--check-hash-based-pycs", "always", "-m", "proxima.rlhf"], "proxima.rlhf"),
    (["-Bc", "import proxima"], None),
    (["script.py", "-m", "proxima"], None),
    (["--", "-m"], None),
    (["-B", "-m"], None),
])
def test_python_options_before_dash_m_are_read_as_cpython_reads_them(monkeypatch, options, module):
    monkeypatch.setattr(sys, "orig_argv", ["python", *options], raising=False)
    assert _startup._dash_m() == module
