"""A process group that cannot start says so in one line (distributed.check_socket_ifname, join_group,
init), PROXIMA_DIST_TIMEOUT is the collectives' timeout and not the start-up's, and a rank killed by
SIGKILL is named as such by its peers and by the job's last line (torchrun.failed_text, killed_peers)."""

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from proxima import distributed, doctor, torchrun
from proxima.config import ConfigError
from proxima.signals import TEARDOWN_ENV

REPO = Path(__file__).resolve().parents[2]
PROXIMA = [sys.executable, "-m", "proxima"]
KILLED = "often the out-of-memory killer: check dmesg or the job's memory limit; it printed nothing"


#: a rank's one line when GLOO_SOCKET_IFNAME=bogus0 names no interface (PPO's join; RLHF's, test_leftsig49, is the same)
BOGUS0_JOIN_LINE = (
    "proxima: rank 1 failed: could not join the process group (store at MASTER_ADDR:MASTER_PORT node0:29500): "
    "RuntimeError: ifa != nullptr. Unable to find address for: bogus0; check that every node reaches that address "
    "and that GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, if set, name this machine's interface to the others "
    "(docs/distributed.md, Multi-node)")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GLOO_SOCKET_IFNAME")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), **extra)
    return env


def _with_address() -> set:
    found = distributed.interface_addresses()
    if not found:
        pytest.skip("getifaddrs lists no interface with an address here")
    return found


# --- GLOO_SOCKET_IFNAME ---------------------------------------------------------------------------
def test_gloo_socket_ifname_naming_no_interface_is_one_line_that_lists_those_with_an_address():
    have = ", ".join(sorted(_with_address()))
    with pytest.raises(ConfigError) as e:
        distributed.check_socket_ifname({"GLOO_SOCKET_IFNAME": "bogus0"})
    assert str(e.value) == (f"GLOO_SOCKET_IFNAME='bogus0': no network interface of that name with an address here "
                            f"(interfaces with one: {have}); name one of them (several: comma-separated), or unset it "
                            "for gloo's own choice")


def test_gloo_socket_ifname_of_an_interface_without_an_address_is_refused_as_gloo_refuses_it():
    bare = sorted(name for _, name in socket.if_nameindex() if name not in _with_address())
    if not bare:
        pytest.skip("every interface here has an address (the reported machine's ifb0 had none)")
    with pytest.raises(ConfigError, match=f"^GLOO_SOCKET_IFNAME='{bare[0]}': no network interface of that name "
                                          "with an address here"):
        distributed.check_socket_ifname({"GLOO_SOCKET_IFNAME": bare[0]})


def test_gloo_socket_ifname_list_names_the_one_that_has_no_address_and_passes_when_all_do():
    good = sorted(_with_address())
    distributed.check_socket_ifname({"GLOO_SOCKET_IFNAME": ",".join(good)})  # gloo takes several, comma-separated
    distributed.check_socket_ifname({"GLOO_SOCKET_IFNAME": ""})  # empty: gloo's own choice
    distributed.check_socket_ifname({})
    with pytest.raises(ConfigError, match=f"^GLOO_SOCKET_IFNAME='{good[0]},bogus0': no network interface of the "
                                          "name 'bogus0' with an address here"):
        distributed.check_socket_ifname({"GLOO_SOCKET_IFNAME": f"{good[0]},bogus0"})


def test_nproc_refuses_a_wrong_gloo_socket_ifname_in_one_line_before_torchrun_starts(tmp_path):
    _with_address()
    run = tmp_path / "gl"
    out = subprocess.run([*PROXIMA, "train", "CartPole-v1", "--nproc", "2", "--num-envs", "2", "--num-steps", "32",
                          "--total-timesteps", "256", "--run-dir", str(run)],
                         cwd=tmp_path, env=_env(GLOO_SOCKET_IFNAME="bogus0"), capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "proxima train: error: GLOO_SOCKET_IFNAME='bogus0': no network interface of that name with an address here "
        "(interfaces with one: "), out.stderr
    assert not run.exists()


def test_doctor_reports_a_gloo_socket_ifname_that_no_rank_could_start_with(monkeypatch):
    _with_address()
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "bogus0")
    info = doctor.collect(test_build=False)
    if not info["distributed"]["gloo"]:
        pytest.skip("this torch has no gloo")
    assert info["gloo_ifname_problem"].startswith("GLOO_SOCKET_IFNAME='bogus0': no network interface of that name")
    assert any(h.startswith("GLOO_SOCKET_IFNAME='bogus0'") and h.endswith(
        "(every rank of a torchrun or --nproc run would fail to start)") for h in info["hints"])
    row = next(line for line in doctor.format_report(info).splitlines() if line.strip().startswith("distributed"))
    assert row.endswith("(GLOO_SOCKET_IFNAME names no interface with an address: see the hints)"), row


# --- joining ---------------------------------------------------------------------------------------
def test_a_1ms_dist_timeout_still_connects_and_is_the_collectives_timeout_not_the_stores(tmp_path):
    # with the store's wait at 1 ms even a single rank failed to connect to its own store (DistNetworkError)
    script = textwrap.dedent("""
        import datetime, os, socket
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        import torch, torch.distributed as dist
        from proxima.distributed import join_group
        join_group("gloo", datetime.timedelta(milliseconds=1))
        backend = dist.group.WORLD._get_backend(torch.device("cpu"))
        print(dist.distributed_c10d._get_default_store().timeout.total_seconds(), backend.options._timeout.total_seconds())
        dist.destroy_process_group()
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    store, collectives = (float(w) for w in out.stdout.split())
    assert store == distributed.JOIN_MIN_TIMEOUT == 60.0
    assert collectives == 0.001


def test_a_rank_that_cannot_join_prints_one_rank_failed_line_and_no_traceback(tmp_path):
    # what gloo raised for GLOO_SOCKET_IFNAME=bogus0 (before the check) and a store's timeout: C++ frames below
    script = textwrap.dedent("""
        import os
        os.environ.update(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", MASTER_ADDR="node0", MASTER_PORT="29500")
        from proxima import distributed

        def join_group(backend, timeout=None):
            raise RuntimeError("[enforce fail at /__w/gloo/transport/tcp/device.cc:84] ifa != nullptr. Unable to find "
                               "address for: bogus0\\nframe #0: c10::ThrowEnforceNotMet\\nframe #1: gloo::Device")

        distributed.join_group = join_group
        distributed.exit_process(lambda: distributed.context() and 0)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1
    assert out.stderr.splitlines() == [BOGUS0_JOIN_LINE], out.stderr


def test_join_failure_line_keeps_the_first_line_of_a_store_connection_error(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    error = RuntimeError("The client socket has timed out after 60000ms while trying to connect to (127.0.0.1, 29500)."
                         "\nException raised from throwTimeoutError at /__w/pytorch/TCPStore.cpp:1\nframe #0: ...")
    assert distributed.join_failure_line(0, error) == (
        "proxima: rank 0 failed: could not join the process group (store at MASTER_ADDR:MASTER_PORT 127.0.0.1:29500): "
        "RuntimeError: The client socket has timed out after 60000ms while trying to connect to (127.0.0.1, 29500).; "
        "check that every node reaches that address and that GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, if set, name "
        "this machine's interface to the others (docs/distributed.md, Multi-node)")


# --- a rank killed by SIGKILL ------------------------------------------------------------------------
def test_torchrun_writes_the_failed_ranks_into_the_teardown_marker_and_a_peer_reads_the_killed_one(tmp_path):
    marker = str(tmp_path / "torn-down")
    close: dict = {}
    noting, marked = torchrun.failure_close_marking(marker, lambda agent: close["marked"](agent), lambda ctx: None)
    close["marked"] = marked
    # torch's SubprocessContext: {local rank: ProcessFailure}; -9: killed by SIGKILL
    noting(SimpleNamespace(_remaining_restarts=0, _failures={1: SimpleNamespace(exitcode=-9)}))
    assert Path(marker).read_text() == "1 -9\n"
    assert distributed.killed_peers({TEARDOWN_ENV: marker, "RANK": "0", "LOCAL_RANK": "0"}) == {1: "SIGKILL"}
    # on a second node (ranks 4..7), local rank 1 is rank 5; an exit code is no kill
    Path(marker).write_text("1 -9\n2 1\n")
    assert distributed.killed_peers({TEARDOWN_ENV: marker, "RANK": "6", "LOCAL_RANK": "2"}) == {5: "SIGKILL"}
    assert distributed.killed_peers({"RANK": "0", "LOCAL_RANK": "0"}) == {}  # a torchrun started by hand


def test_the_lost_contact_line_says_a_rank_was_killed_by_sigkill_not_that_its_error_is_above():
    line = distributed.lost_contact_line(0, 2, "RuntimeError: Connection reset by peer", True, {1: "SIGKILL"})
    assert line == ("proxima: rank 0 stopped: lost contact with another rank (rank 1 was killed by SIGKILL "
                    f"({KILLED}), and torchrun is ending the job): RuntimeError: Connection reset by peer")
    assert "its error is above" not in line
    # a rank that failed with an error of its own: as before
    assert distributed.lost_contact_line(0, 2, "E", True, {}) == (
        "proxima: rank 0 stopped: lost contact with another rank (rank 1 failed, and torchrun is ending the job; "
        "its error is above): E")


def test_the_jobs_last_line_says_where_to_look_for_a_sigkill(capsys):
    failures = {0: SimpleNamespace(exitcode=1), 1: SimpleNamespace(exitcode=-9)}
    assert torchrun.child_failure_exit(failures, first=1) == 1
    assert capsys.readouterr().err == (f"proxima: the job failed: rank 1 (first) was killed by SIGKILL ({KILLED}); "
                                       "rank 0 exited 1; each rank's own lines above say why\n")
