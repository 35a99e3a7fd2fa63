"""Review 49's findings on the day's commits: NCCL_SOCKET_IFNAME checked only for runs on CUDA, make_env's
refusals in a Python caller's words, the missing-extra check shared by the CLI and the Python API, tqdm in
doctor's tables, and one copy each of the join failure's report, the extras' modules and the guarded find_spec."""

from __future__ import annotations

import sys

import pytest
import torch

from tests.cli_helpers import run_main


# --- 1. NCCL_SOCKET_IFNAME: only a run whose tensors are on CUDA starts NCCL -----------------------------------
@pytest.fixture
def bogus_nccl(monkeypatch):
    """A machine where CUDA and NCCL are (nccl_used) and NCCL_SOCKET_IFNAME selects no interface here."""
    from proxima import distributed

    monkeypatch.setattr(distributed, "interface_addresses", lambda: {"lo", "eth0"})
    monkeypatch.setattr(distributed, "nccl_used", lambda: True)
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "bogus0")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)


def test_nproc_of_a_cpu_run_where_cuda_and_nccl_are_ignores_nccl_socket_ifname(bogus_nccl):
    from proxima import launch

    launch._check(2, ["train", "CartPole-v1", "--device", "cpu", "--num-envs", "2", "--num-steps", "32",
                      "--total-timesteps", "256"])  # no ConfigError: its ranks never start NCCL


def test_nproc_checks_nccl_socket_ifname_for_ranks_on_cuda(bogus_nccl):
    from proxima import launch
    from proxima.config import ConfigError

    launch._check_nccl(torch.device("cpu"))
    with pytest.raises(ConfigError, match=r"^NCCL_SOCKET_IFNAME='bogus0': selects no network interface with an address "
                                          r"here \(interfaces with one: eth0, lo\)"):
        launch._check_nccl(torch.device("cuda", 0))


def test_a_rank_of_a_cpu_run_joins_without_reading_nccl_socket_ifname(bogus_nccl, monkeypatch):
    """distributed.init joins with 'cpu:gloo,cuda:nccl' wherever CUDA is, before the run's --device is known."""
    import torch.distributed as dist

    from proxima import distributed

    class Rendezvous(Exception):
        pass

    def rendezvous(*args, **kwargs):
        raise Rendezvous()

    monkeypatch.setattr(dist, "rendezvous", rendezvous)
    with pytest.raises(Rendezvous):  # on to the store: no ConfigError first
        distributed.join_group("cpu:gloo,cuda:nccl")
    ctx = distributed.DistContext(rank=1, world_size=2, local_rank=1)
    assert ctx.device_for("cpu") == torch.device("cpu")


def test_a_rank_that_resolves_a_cuda_device_checks_nccl_socket_ifname(bogus_nccl, monkeypatch):
    from proxima import device as device_mod
    from proxima import distributed
    from proxima.config import ConfigError

    monkeypatch.setattr(device_mod, "resolve_device", lambda name, arg="--device": torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ConfigError, match=r"^NCCL_SOCKET_IFNAME='bogus0': selects no network interface"):
        distributed.DistContext(rank=1, world_size=2, local_rank=1).device_for("cuda")
