"""Items left by the signal/distributed sessions: RLHF's join failure and lost-contact lines as the PPO path's
(distributed.join_failure_line, lost_contact_line with killed_peers)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch.distributed as tdist

from proxima import distributed
from proxima.rlhf import dist as D
from proxima.rlhf.dist import Dist
from proxima.signals import TEARDOWN_ENV
from proxima.torchrun import KILLED_NOTE
from tests.unit.test_dist48 import BOGUS0_JOIN_LINE

REPO = Path(__file__).resolve().parents[2]
GLOO = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
        "[127.0.0.1]:26755. This is typically caused by a remote worker crashing.")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GLOO_SOCKET_IFNAME",
                                                             TEARDOWN_ENV)}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), **extra)
    return env


# --- 1. RLHF's join failure: one line per rank; its lost-contact lines name a killed rank -----------------------------
def test_an_rlhf_rank_that_cannot_join_prints_the_ppo_paths_one_line_and_no_traceback(tmp_path):
    script = textwrap.dedent("""
        import os
        os.environ.update(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", MASTER_ADDR="node0", MASTER_PORT="29500")
        from proxima import distributed
        from proxima.rlhf import dist

        def join_group(backend, timeout=None, **kw):  # cuda= since 4980319
            raise RuntimeError("[enforce fail at /__w/gloo/transport/tcp/device.cc:84] ifa != nullptr. Unable to find "
                               "address for: bogus0\\nframe #0: c10::ThrowEnforceNotMet\\nframe #1: gloo::Device")

        distributed.join_group = join_group
        distributed.exit_process(lambda: dist.init_distributed("cpu") and 0)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1
    assert out.stderr.splitlines() == [BOGUS0_JOIN_LINE]  # the PPO path's line, out.stderr


def test_an_rlhf_store_that_times_out_while_joining_is_the_join_line_not_a_collectives_timeout(monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    late = tdist.DistNetworkError("The client socket has timed out after 60000ms while trying to connect to "
                                  "(127.0.0.1, 29500).\nframe #0: ...")

    def join(backend, timeout=None, **kw):  # cuda= since 4980319
        raise late

    monkeypatch.setattr(distributed, "join_group", join)
    monkeypatch.setattr(tdist, "is_initialized", lambda: False)
    with pytest.raises(tdist.DistNetworkError) as got:
        D.init_distributed("cpu")
    assert got.value is late and getattr(late, distributed._REPORTED)  # exit_process prints no traceback after it
    assert capsys.readouterr().err.splitlines() == [distributed.join_failure_line(1, late)]
    assert distributed.join_failure_line(1, late).startswith(
        "proxima: rank 1 failed: could not join the process group (store at MASTER_ADDR:MASTER_PORT 127.0.0.1:29500): "
        "DistNetworkError: The client socket has timed out after 60000ms")


@pytest.fixture
def killed_rank_1(tmp_path, monkeypatch):
    """proxima.torchrun's teardown marker: local rank 1 was killed by SIGKILL (torchrun.failure_close_marking)."""
    marker = tmp_path / "torn-down"
    marker.write_text("1 -9\n")
    monkeypatch.setenv(TEARDOWN_ENV, str(marker))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")


def test_an_rlhf_ranks_lost_contact_line_names_a_peer_killed_by_sigkill(killed_rank_1):
    line = D.lost_contact(RuntimeError(GLOO), Dist(0, 2, 0))
    assert isinstance(line, D.LostContact) and str(line) == (
        f"rank 0 stopped: lost contact with another rank (rank 1 was killed by SIGKILL ({KILLED_NOTE}), and torchrun "
        f"is ending the job): RuntimeError: {GLOO}")


def test_an_rlhf_rank_ended_by_torchruns_teardown_names_the_killed_peer(killed_rank_1):
    line = D.lost_contact(D.PeerEnded(), Dist(0, 2, 0))
    assert str(line) == (f"rank 0 stopped: lost contact with another rank (rank 1 was killed by SIGKILL ({KILLED_NOTE}), "
                         "and torchrun is ending the job): torchrun's teardown (SIGTERM) ended this rank")


# --- 2. python -m proxima.rlhf reads its flags and stops as `proxima rlhf` does ----------------------------------------
#: a sitecustomize that sends STOP_AT (a signal's name) as the module STOP_WHEN starts importing
STOP_AT_IMPORT = '''
import os, signal, sys

class _StopAt:
    sent = False

    def find_spec(self, name, path=None, target=None):
        if name == os.environ["STOP_WHEN"] and not _StopAt.sent:
            _StopAt.sent = True
            os.kill(os.getpid(), getattr(signal, os.environ["STOP_AT"]))
        return None

sys.meta_path.insert(0, _StopAt())
'''


def _python_m(module: str, args: list, tmp_path, **extra) -> subprocess.CompletedProcess:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(STOP_AT_IMPORT)
    env = {**_env(), "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "STOP_WHEN": "", "STOP_AT": "SIGTERM", **extra}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)


def test_python_m_proxima_rlhf_says_did_you_mean_for_a_mistyped_flag_as_proxima_rlhf_does(tmp_path):
    mine = _python_m("proxima.rlhf", ["--polcy", "gpt2", "--stpes", "3"], tmp_path)
    console = _python_m("proxima", ["rlhf", "--polcy", "gpt2", "--stpes", "3"], tmp_path)
    assert (mine.returncode, mine.stderr.splitlines()) == (2, [
        "proxima rlhf: error: unrecognized arguments: --polcy gpt2 --stpes 3; did you mean --policy or --steps? "
        "(see proxima rlhf --help)"]), mine.stderr
    assert (mine.returncode, mine.stderr) == (console.returncode, console.stderr)


@pytest.mark.parametrize("when", ["proxima.config", "torch"], ids=["as proxima imports", "as torch imports"])
def test_python_m_proxima_rlhf_stopped_as_it_starts_says_one_line_and_exits_143(tmp_path, when):
    done = _python_m("proxima.rlhf", ["--demo", "--steps", "1", "--run-dir", "run"], tmp_path, STOP_WHEN=when)
    assert (done.returncode, done.stdout) == (143, ""), done.stderr[-2000:]
    assert done.stderr == "proxima: stopped by SIGTERM; before training started; nothing was kept\n"
    assert not (tmp_path / "run").exists()


# --- 3. under torchrun the stop's lines are rank 0's only --------------------------------------------------------------
@pytest.mark.parametrize("rank, said", [("0", True), ("1", False)])
def test_a_stop_under_torchrun_is_said_by_rank_0_only(monkeypatch, capsys, rank, said):
    import signal

    from proxima.signals import SignalGuard, TrainingInterrupted, say_stopped

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", rank)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    guard = SignalGuard(lambda: None, 3.0)
    guard._handle(signal.SIGTERM, None)
    assert guard.stop.signum == signal.SIGTERM  # every rank stops; one says so
    say_stopped(TrainingInterrupted(signal.SIGTERM, Path("run/checkpoints/step_000000000512.pt")))
    lines = capsys.readouterr().err.splitlines()
    assert lines == ([
        "proxima: SIGTERM received; writing a checkpoint after this iteration (the same signal again 3 s or more from now "
        "exits at once)",
        "proxima: stopped by SIGTERM; checkpoint: run/checkpoints/step_000000000512.pt; continue with: proxima resume run"]
        if said else [])


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_a_two_process_run_stopped_by_sigterm_says_each_stop_line_once(tmp_path):
    from distributed_helpers import SMALL, start, stop, train_cmd, wait_for_rows

    proc = start(train_cmd(*SMALL, "--total-timesteps", str(512 * 100), "--run-dir", "run"), tmp_path)
    wait_for_rows(tmp_path / "run" / "metrics.csv", 2, proc)
    code, out, err = stop(proc)
    assert code == 143, err[-4000:]
    assert err.count("proxima: SIGTERM received; writing a checkpoint after this iteration") == 1, err[-4000:]
    assert err.count("proxima: stopped by SIGTERM; checkpoint: run/checkpoints/step_") == 1, err[-4000:]


# --- 4. a rank whose stdout's reader has gone says so, not that it lost contact with another rank -----------------------
@pytest.fixture
def stdout_pipe(monkeypatch):
    """sys.__stdout__ as the write end of a pipe; the test closes its read end (``| head`` having ended)."""
    read, write = os.pipe()
    out = os.fdopen(write, "w")
    monkeypatch.setattr(sys, "__stdout__", out)
    yield read
    out.close()


def test_stdout_closed_is_a_pipe_whose_reader_has_gone(stdout_pipe):
    assert distributed.stdout_closed() is False  # read end still open: a write would go through
    os.close(stdout_pipe)
    assert distributed.stdout_closed() is True


def test_a_broken_pipe_is_no_lost_peer():
    assert not distributed.is_peer_loss(BrokenPipeError(32, "Broken pipe"))  # "Broken pipe" in its text, not torch's
    assert not distributed.is_peer_loss(ConnectionResetError(104, "Connection reset by peer"))  # an env's socket
    assert distributed.is_peer_loss(RuntimeError(GLOO))


def test_a_rank_whose_stdout_closed_says_so_in_one_line(stdout_pipe, capsys):
    os.close(stdout_pipe)
    error = BrokenPipeError(32, "Broken pipe")
    distributed.DistContext(0, 2).report_failure(error, Path("run/checkpoints/step_000000008192.pt"))
    assert capsys.readouterr().err.splitlines() == [
        "proxima: rank 0 stopped: its stdout was closed (the program reading it ended, as `| head` does; send it to a "
        "file to keep it): BrokenPipeError: [Errno 32] Broken pipe; checkpoint: run/checkpoints/step_000000008192.pt; "
        "continue with: proxima resume run"]
    assert getattr(error, distributed._REPORTED)  # exit_process prints no traceback after it


def test_another_broken_pipe_is_the_ranks_own_failure(stdout_pipe, capsys):
    distributed.DistContext(1, 2).report_failure(BrokenPipeError(32, "Broken pipe"))  # stdout's reader still there
    assert capsys.readouterr().err.splitlines() == ["proxima: rank 1 failed: BrokenPipeError: [Errno 32] Broken pipe"]


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_a_two_process_run_whose_stdout_reader_ended_says_stdout_closed(tmp_path):
    from distributed_helpers import env, train_cmd

    small = ["--num-envs", "8", "--num-steps", "32", "--threads", "1", "--eval-episodes", "2"]
    proc = subprocess.Popen(train_cmd(*small, "--total-timesteps", "1024", "--run-dir", "run"), cwd=tmp_path, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # `| head -0`: rank 0's first print to stdout, at the run's end, meets EPIPE
    err = proc.communicate(timeout=240)[1]
    assert proc.returncode == 141, err[-4000:]
    said = [line for line in err.splitlines() if line.startswith("proxima: rank")]
    assert said == ["proxima: rank 0 stopped: its stdout was closed (the program reading it ended, as `| head` does; send "
                    "it to a file to keep it): BrokenPipeError: [Errno 32] Broken pipe; checkpoint: "
                    "run/checkpoints/step_000000001024.pt; continue with: proxima resume run"], err[-4000:]


# --- 5. every SignalGuard knows its last checkpoint: a second signal's line says whether one is on disk ------------------
def test_a_signal_guard_takes_its_last_checkpoint_and_its_second_signal_line_says_what_is_on_disk():
    from proxima.signals import SignalGuard

    with pytest.raises(TypeError, match="last_checkpoint"):
        SignalGuard()  # the vague 'a checkpoint already written stays loadable' had no caller left
    assert SignalGuard(lambda: None)._kept() == "no checkpoint was written"
    kept = SignalGuard(lambda: Path("run/checkpoints/step_000000000512.pt"))
    assert (kept._kept(), kept._resume()) == (
        "last checkpoint kept", "; checkpoint: run/checkpoints/step_000000000512.pt; continue with: proxima resume run")
