"""Mutation-testing kills for b9345e0, 1a49fc0, d4cb051 and a70b90f: the lost-contact line and the
teardown marker's killed ranks, GLOO_SOCKET_IFNAME's check (and getifaddrs read through ctypes), the
start-up's JOIN_MIN_TIMEOUT and the collectives' own timeout, init's one-line join failure, torch's held
log lines, the launcher's stop handling once torchrun has ended, and the --nproc K in the advice lines."""

import ctypes
import datetime
import json
import logging
import os
import signal
import socket
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from proxima import checkpoint as ckpt
from proxima import distributed, torchrun
from proxima.config import ConfigError
from proxima.launch import other_count_advice
from proxima.signals import TEARDOWN_ENV
from tests.unit.test_torchrun48 import handlers_back, torch_lines  # noqa: F401 - fixtures (stop handlers back; torch's log records)

KILLED = "often the out-of-memory killer: check dmesg or the job's memory limit; it printed nothing"


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.delenv("PET_LOG_DIR", raising=False)
    return tmp


# --- the lost-contact line ---------------------------------------------------------------------------
def test_several_killed_peers_are_named_in_rank_order_and_only_sigkill_gets_the_oom_note():
    line = distributed.lost_contact_line(0, 4, "E", True, {3: "SIGTERM", 1: "SIGKILL"})
    assert line == ("proxima: rank 0 stopped: lost contact with another rank (rank 1 was killed by SIGKILL "
                    f"({KILLED}); rank 3 was killed by SIGTERM, and torchrun is ending the job): E")


def test_a_peer_lost_outside_a_teardown_and_in_a_larger_job_is_another_rank():
    assert distributed.lost_contact_line(2, 4, "E", True, {}) == (
        "proxima: rank 2 stopped: lost contact with another rank (another rank failed, and torchrun is ending the "
        "job; its error is above): E")
    assert distributed.lost_contact_line(1, 2, "E", False, {}) == (
        "proxima: rank 1 stopped: lost contact with another rank (it failed or was stopped; its error is above): E")


# --- the teardown marker's killed ranks ---------------------------------------------------------------
def test_killed_peers_keeps_only_signals_reads_every_line_and_skips_a_bad_one(tmp_path):
    marker = tmp_path / "torn-down"
    # a garbage line first, an exit 0 (no kill), an exit 1, a signal number with no name, 8 local ranks
    lines = ["garbage", "0 0", "1 1", "2 -99"] + [f"{r} -9" for r in range(3, 8)]
    marker.write_text("\n".join(lines) + "\n")
    env = {TEARDOWN_ENV: str(marker), "RANK": "8", "LOCAL_RANK": "0"}
    assert distributed.killed_peers(env) == {10: "signal 99", **{8 + r: "SIGKILL" for r in range(3, 8)}}
    assert distributed.killed_peers({TEARDOWN_ENV: str(tmp_path / "gone"), "RANK": "0"}) == {}
    assert distributed.killed_peers({TEARDOWN_ENV: str(marker), "RANK": "x"}) == {}


def test_failed_text_keeps_the_sign_and_an_unreadable_failure_still_ends_the_ranks(tmp_path):
    assert torchrun.failed_text({0: SimpleNamespace(exitcode=1), 3: SimpleNamespace(exitcode=-9)}) == "0 1\n3 -9\n"
    marker = str(tmp_path / "torn-down")
    closed = []
    close: dict = {}
    noting, marked = torchrun.failure_close_marking(marker, lambda agent: close["marked"](agent),
                                                     lambda ctx: closed.append(ctx))
    close["marked"] = marked
    agent = SimpleNamespace(_remaining_restarts=0, _failures={1: SimpleNamespace(exitcode=None)})
    noting(agent)  # int(None): no marker text, but the close goes on
    assert closed == [agent]


# --- GLOO_SOCKET_IFNAME -------------------------------------------------------------------------------
def test_an_unreadable_interface_list_checks_nothing_and_an_empty_one_says_none(monkeypatch):
    monkeypatch.setattr(distributed, "interface_addresses", lambda: None)
    distributed.check_socket_ifname({"GLOO_SOCKET_IFNAME": "bogus0"})
    monkeypatch.setattr(distributed, "interface_addresses", lambda: set())
    with pytest.raises(ConfigError, match=r"\(interfaces with one: none\)"):
        distributed.check_socket_ifname({"GLOO_SOCKET_IFNAME": "bogus0"})
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "bogus1")  # no environ given: this process's
    with pytest.raises(ConfigError, match="^GLOO_SOCKET_IFNAME='bogus1'"):
        distributed.check_socket_ifname()


def _fake_libc(monkeypatch, entries, result=0):
    """ctypes.CDLL's libc with a getifaddrs that lists ``entries`` ((name, family or None: no address))."""
    keep, freed = [], []

    class Libc:
        def getifaddrs(self, ref):
            if result:
                return result
            pointer = ref._obj
            node_type = pointer._type_
            sockaddr_type = dict(node_type._fields_)["addr"]._type_
            nodes = []
            for name, family in entries:
                node = node_type()
                node.name = name.encode()
                if family is not None:
                    sa = sockaddr_type()
                    raw = (bytes([16, family]) if sys.platform == "darwin" or "bsd" in sys.platform
                           else family.to_bytes(2, sys.byteorder))
                    sa.head[:] = list(raw)
                    keep.append(sa)
                    node.addr = ctypes.pointer(sa)
                nodes.append(node)
            for a, b in zip(nodes, nodes[1:]):
                a.next = ctypes.pointer(b)
            keep.extend(nodes)
            if nodes:
                pointer.contents = nodes[0]
            return 0

        def freeifaddrs(self, head):
            freed.append(True)

    monkeypatch.setattr(ctypes, "CDLL", lambda *a, **k: Libc())
    return freed


def test_interface_addresses_counts_ipv4_and_ipv6_only_and_skips_an_entry_without_address(monkeypatch):
    packet = getattr(socket, "AF_PACKET", 17)
    freed = _fake_libc(monkeypatch, [("v4", socket.AF_INET), ("v6only", socket.AF_INET6), ("down", None),
                                     ("raw", packet)])
    assert distributed.interface_addresses() == {"v4", "v6only"}
    assert freed == [True]


def test_interface_addresses_is_none_when_getifaddrs_fails(monkeypatch):
    _fake_libc(monkeypatch, [], result=-1)
    assert distributed.interface_addresses() is None


# --- joining the group ------------------------------------------------------------------------------
class _Store:
    def __init__(self, seen):
        self.seen = seen

    def set_timeout(self, wait):
        self.seen["store"] = wait


def _fake_dist(monkeypatch):
    import torch.distributed as dist

    seen: dict = {}

    def rendezvous(url, timeout):
        seen["rendezvous"] = timeout
        return iter([(_Store(seen), 0, 2)])

    monkeypatch.setattr(dist, "rendezvous", rendezvous)
    monkeypatch.setattr(dist, "PrefixStore", lambda prefix, store: (prefix, store))
    monkeypatch.setattr(dist, "init_process_group", lambda **kw: seen.update(group=kw.get("timeout", "default")))
    monkeypatch.setattr(dist.distributed_c10d, "_set_pg_timeout", lambda t, *a: seen.update(later=t), raising=False)
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    return seen


def test_a_short_timeout_is_set_after_a_start_up_of_at_least_a_minute(monkeypatch):
    seen = _fake_dist(monkeypatch)
    short = datetime.timedelta(milliseconds=1)
    minute = datetime.timedelta(seconds=60)
    distributed.join_group("gloo", short)
    assert seen == {"rendezvous": minute, "store": minute, "group": minute, "later": short}


def test_a_long_timeout_is_the_start_ups_too_and_none_is_torchs_default(monkeypatch):
    import torch.distributed as dist

    seen = _fake_dist(monkeypatch)
    long = datetime.timedelta(seconds=120)
    distributed.join_group("gloo", long)
    assert seen == {"rendezvous": long, "store": long, "group": long}
    seen.clear()
    distributed.join_group("gloo", None)
    default = dist.distributed_c10d.default_pg_timeout
    assert seen == {"rendezvous": default, "store": default, "group": "default"}


def test_join_group_checks_the_interface_before_the_store(monkeypatch):
    seen = _fake_dist(monkeypatch)
    monkeypatch.setattr(distributed, "interface_addresses", lambda: {"lo"})
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "bogus0")
    with pytest.raises(ConfigError, match="^GLOO_SOCKET_IFNAME='bogus0'"):
        distributed.join_group("gloo", None)
    assert seen == {}


def _init_env(monkeypatch, error):
    import torch.distributed as dist

    from proxima import accel

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.7")
    monkeypatch.setenv("MASTER_PORT", "29511")
    monkeypatch.setattr(accel, "claim_cache_dir", lambda: None)
    monkeypatch.setattr(dist, "is_initialized", lambda: False)

    def join(backend, timeout):
        raise error

    monkeypatch.setattr(distributed, "join_group", join)


def test_init_says_a_refused_interface_in_the_commands_line_only(monkeypatch, capsys):
    _init_env(monkeypatch, ConfigError("GLOO_SOCKET_IFNAME='bogus0': no network interface"))
    with pytest.raises(ConfigError):
        distributed.init()
    assert capsys.readouterr().err == ""


def test_init_prints_one_line_for_a_rank_that_cannot_join(monkeypatch, capsys):
    _init_env(monkeypatch, RuntimeError("[enforce fail at ../gloo/transport/tcp/device.cc:83] ifa != nullptr. "
                                        "Unable to find address for: eth9\nframe #0: ..."))
    with pytest.raises(RuntimeError):
        distributed.init()
    assert capsys.readouterr().err == (
        "proxima: rank 1 failed: could not join the process group (store at MASTER_ADDR:MASTER_PORT 10.0.0.7:29511): "
        "RuntimeError: ifa != nullptr. Unable to find address for: eth9; check that every node reaches that address "
        "and that GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, if set, name this machine's interface to the others "
        "(docs/distributed.md, Multi-node)\n")


def test_a_join_error_without_text_is_named_by_its_class(monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    assert distributed.join_failure_line(3, TimeoutError()).startswith(
        "proxima: rank 3 failed: could not join the process group (store at MASTER_ADDR:MASTER_PORT ?:?): "
        "TimeoutError; check")


# --- the launcher's torchrun -------------------------------------------------------------------------
def _fake_torchrun(monkeypatch, run):
    import torch.distributed.run as torch_run

    monkeypatch.setattr(torch_run, "main", run)


def test_a_stop_that_is_no_quiet_code_shows_torchs_lines(monkeypatch, handlers_back, own_tmp, torch_lines):
    from torch.distributed.elastic.multiprocessing.api import SignalException

    def run(argv):
        logging.getLogger("torch.distributed.elastic.agent.server.api").warning("Received 3 death signal")
        raise SignalException("stop", signal.SIGQUIT)

    _fake_torchrun(monkeypatch, run)
    assert torchrun.main([]) == 128 + signal.SIGQUIT
    assert torch_lines == ["Received 3 death signal"]


def test_an_error_of_torchrun_itself_shows_torchs_lines(monkeypatch, handlers_back, own_tmp, torch_lines):
    def run(argv):
        logging.getLogger("torch.distributed.elastic.agent.server.api").error("rendezvous failed")
        raise RuntimeError("broken")

    _fake_torchrun(monkeypatch, run)
    with pytest.raises(RuntimeError, match="broken"):
        torchrun.main([])
    assert torch_lines == ["rendezvous failed"]


def test_the_launchers_own_process_ignores_stops_once_torchrun_has_ended(monkeypatch, handlers_back, own_tmp):
    _fake_torchrun(monkeypatch, lambda argv: None)
    monkeypatch.setattr(sys, "argv", ["proxima.torchrun", "--nproc-per-node", "2", "--standalone", "-m", "proxima"])
    assert torchrun.main(None) == 0
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_a_launch_from_python_keeps_its_stop_handlers(monkeypatch, handlers_back, own_tmp):
    _fake_torchrun(monkeypatch, lambda argv: None)
    before = signal.getsignal(signal.SIGTERM)
    assert torchrun.main([]) == 0
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_users_pet_log_dir_is_given_back_as_it_was(monkeypatch, handlers_back, own_tmp):
    seen = []
    _fake_torchrun(monkeypatch, lambda argv: seen.append(os.environ.get("PET_LOG_DIR")))
    monkeypatch.setenv("PET_LOG_DIR", str(own_tmp.parent / "mine"))
    assert torchrun.main(["--nproc-per-node", "2", "--standalone", "-m", "proxima"]) == 0
    assert seen == [str(own_tmp.parent / "mine")] and os.environ["PET_LOG_DIR"] == seen[0]


def test_a_rank_that_cannot_be_polled_is_no_completed_run():
    def poll():
        raise OSError("gone")

    agent = SimpleNamespace(_pcontext=SimpleNamespace(subprocess_handlers={0: SimpleNamespace(proc=SimpleNamespace(poll=poll))}))
    assert torchrun.run_completed(agent) is False


# --- --nproc K in the advice -------------------------------------------------------------------------
def _run_files(run: Path, world: int, config: bool = True) -> Path:
    (run / "checkpoints").mkdir(parents=True)
    if config:
        (run / "config.yaml").write_text("env_id: CartPole-v1\n")
    (run / "meta.json").write_text(json.dumps({"kind": "ppo", "world_size": world}))
    (run / "metrics.csv").write_text("")
    return run


def test_a_run_without_its_config_trains_again_and_starts_over_with_its_count(tmp_path):
    run = _run_files(tmp_path / "nc", world=3, config=False)
    assert str(ckpt.no_checkpoint_error(run)).endswith(
        f"train it again from the start: proxima train ENV_ID --run-dir {run} --overwrite --nproc 3 (its files are moved aside)")
    assert ckpt.start_over(run, best_tried=True).endswith(
        f"start over with proxima train ENV_ID --run-dir {run} --overwrite --nproc 3 (the old run is moved aside)")


def test_other_count_advice_quotes_an_env_id_with_a_space_and_drops_nproc_1():
    line = other_count_advice("runs/a", "my envs:Grid", 1)
    assert line.startswith("to continue with another count, start a new run from its weights: proxima train "
                           "'my envs:Grid' --init-from runs/a (its weights")


def test_more_processes_than_cpus_names_a_module_env_the_resume_left_out(tmp_path, monkeypatch):
    from proxima import cli, cpuinfo

    run = _run_files(tmp_path / "p3", world=3)
    (run / "config.yaml").write_text("env_id: my_envs:Walker\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "_checkpoint_processes", lambda path: 3)
    monkeypatch.setattr(cpuinfo, "usable_cpus", lambda root=None: 2)
    with pytest.raises(ConfigError) as e:
        cli._written_by(run.relative_to(tmp_path), None, ["resume", "p3"])
    assert str(e.value).endswith("to run 3 here anyway: proxima resume p3 --env my_envs:Walker --nproc 3")
