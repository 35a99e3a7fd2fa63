"""Review 29: the CPU and memory limits count what this process may use, not the whole machine: its
affinity mask (`taskset`), its cgroup CPU quota (`docker --cpus`) and its cgroup memory limit
(`docker --memory`), read from a fake cgroup tree here (cpuinfo.CGROUP_ROOT, cpuinfo.SELF_CGROUP)."""

from __future__ import annotations

import json
import os

import pytest
import torch
from cli_helpers import TINY_RUN, one_error_line, run_main

from proxima import checkpoint as ckpt
from proxima import cli, cpuinfo, sizing
from proxima.config import ConfigError
from proxima.diskspace import human_bytes

MIB = 1 << 20


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """make(cpus, usable, files, v2, self_cgroup): a machine of ``cpus`` CPUs, an affinity mask of
    ``usable`` of them and a cgroup tree of ``files`` ({path under the mount: text or bytes});
    ``v2``: a unified (cgroup v2) mount, else a v1 one per controller; ``self_cgroup``: the text of
    /proc/self/cgroup. Returns the mount."""
    root, own = tmp_path / "cgroup", tmp_path / "self-cgroup"
    root.mkdir()
    own.write_text("0::/\n")
    # raising=False: the tests also run, and fail on what they assert, against code without these names
    monkeypatch.setattr(cpuinfo, "CGROUP_ROOT", str(root), raising=False)
    monkeypatch.setattr(cpuinfo, "SELF_CGROUP", str(own), raising=False)
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)

    def make(cpus=2, usable=None, files=None, v2=True, self_cgroup=None):
        monkeypatch.setattr(os, "cpu_count", lambda: cpus)
        mask = set(range(cpus if usable is None else usable))
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: mask, raising=False)
        if v2:
            (root / "cgroup.controllers").write_text("cpu memory\n")
        for rel, text in (files or {}).items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
        if self_cgroup is not None:
            own.write_text(self_cgroup)
        return root

    return make


# ------------------------------------------------------------------------------------ CPUs
def test_threads_limit_counts_the_affinity_mask(machine, capsys, tmp_path):
    machine(cpus=2, usable=1)  # `taskset -c 0` on 2 CPUs
    code, out, err = run_main(["train", "CartPole-v1", "--threads", "8", "--dry-run", "--run-dir", str(tmp_path / "r")],
                              capsys)
    assert (code, out) == (2, "")
    assert one_error_line(err, "proxima train") == (
        "--threads 8: must be at most 4 (4 x the 1 CPU this process may use); more threads than cores only slow torch "
        "down; give --threads 4 or fewer")
    code, _, err = run_main(["train", "CartPole-v1", "--threads", "4", "--dry-run", "--run-dir", str(tmp_path / "r")],
                            capsys)
    assert code == 0, err


def test_threads_limit_counts_a_cgroup_v2_cpu_quota(machine, capsys, tmp_path):
    machine(cpus=64, files={"cpu.max": "150000 100000\n"})  # docker --cpus=1.5 on 64 CPUs: 2 may run at once
    code, _, err = run_main(["train", "CartPole-v1", "--threads", "9", "--dry-run", "--run-dir", str(tmp_path / "r")],
                            capsys)
    assert code == 2
    assert one_error_line(err, "proxima train").startswith(
        "--threads 9: must be at most 8 (4 x the 2 CPUs this process may use);")
    assert cpuinfo.usable_cpus() == 2


def test_no_cgroup_quota_leaves_the_machine_and_says_so(machine):
    from proxima.config import max_threads, threads_limit_text

    machine(cpus=64, files={"cpu.max": "max 100000\n"})
    assert cpuinfo.usable_cpus() == 64 and max_threads() == 256
    assert "(4 x this machine's 64 CPUs)" in threads_limit_text()


def test_cgroup_v1_quota_of_the_process_and_of_a_parent(machine):
    # a container's own cgroup is the mount, while /proc/self/cgroup names the host's path for it
    machine(cpus=64, v2=False, self_cgroup="4:cpu,cpuacct:/docker/abc\n0::/\n",
            files={"cpu,cpuacct/cpu.cfs_quota_us": "100000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"})
    assert cpuinfo.usable_cpus() == 1


def test_a_parents_cgroup_v1_quota_binds_the_cgroups_under_it(machine):
    machine(cpus=64, v2=False, self_cgroup="4:cpu,cpuacct:/slice/run\n",
            files={"cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
                   "cpu,cpuacct/slice/cpu.cfs_quota_us": "250000\n", "cpu,cpuacct/slice/cpu.cfs_period_us": "100000\n",
                   "cpu,cpuacct/slice/run/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/slice/run/cpu.cfs_period_us": "100000\n"})
    assert cpuinfo.usable_cpus() == 3


@pytest.mark.parametrize("files", [
    {"cpu.max": "banana 100000\n"}, {"cpu.max": "100000 0\n"}, {"cpu.max": b"\xff\xfe 1\n"}, {"cpu.max": "1 2 3\n"},
    {"cpu.max/x": "a folder where the file should be"}, {},
])
def test_a_missing_or_garbled_cgroup_file_limits_nothing(machine, files):
    machine(cpus=4, usable=3, files=files)
    assert cpuinfo.usable_cpus() == 3


def test_an_unreadable_cgroup_tree_limits_nothing(machine, monkeypatch):
    machine(cpus=4, usable=3, files={"cpu.max": "100000 100000\n", "memory.max": "1\n", "memory.current": "0\n"})

    def denied(*a, **k):  # pathlib's is_dir raises PermissionError where a folder above may not be searched
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cpuinfo, "_cgroup_dirs", denied)
    assert cpuinfo.usable_cpus() == 3 and cpuinfo.cgroup_free_memory() is None


def test_a_cgroup_outside_the_namespace_reads_only_the_mount(machine):
    # /proc/self/cgroup names a cgroup outside this cgroup namespace as "/../x": never a folder above the mount
    root = machine(cpus=8, self_cgroup="0::/../outside\n", files={"cpu.max": "200000 100000\n"})
    (root.parent / "outside").mkdir()
    (root.parent / "outside" / "cpu.max").write_text("100000 100000\n")
    assert cpuinfo.usable_cpus() == 2


def test_no_cgroup_file_system_at_all(machine, tmp_path, monkeypatch):
    machine(cpus=4, usable=3, v2=False)
    monkeypatch.setattr(cpuinfo, "CGROUP_ROOT", str(tmp_path / "absent"))
    monkeypatch.setattr(cpuinfo, "SELF_CGROUP", str(tmp_path / "absent-too"))
    assert cpuinfo.usable_cpus() == 3 and cpuinfo.cgroup_free_memory() is None


def test_nproc_limit_counts_the_cpus_this_process_may_use(machine):
    from proxima.launch import check_nproc

    machine(cpus=2, usable=1)
    with pytest.raises(ConfigError) as e:
        check_nproc(5)
    assert str(e.value) == ("--nproc 5: must be at most 4 (4 x the 1 CPU this process may use); give --nproc 4 or fewer "
                            "(several machines: torchrun on each, docs/distributed.md)")


def test_proxima_resume_starts_no_more_processes_than_it_may_use(machine, tmp_path, monkeypatch):
    from proxima.run_setup import check_processes
    from proxima.signals import resume_route

    machine(cpus=2, usable=1)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "step_000000004096.pt").write_bytes(b"")
    monkeypatch.setattr(ckpt, "load_checkpoint", lambda path: {"world_size": 2})
    assert resume_route(tmp_path, 2) == "nproc"
    with pytest.raises(ConfigError) as e:
        cli._written_by(tmp_path)
    assert str(e.value).startswith(f"{tmp_path}: written by 2 processes, more than the 1 CPU this process may use "
                                   "(proxima resume starts no more); to run 2 here anyway: proxima train --resume")
    with pytest.raises(ckpt.CheckpointError) as e:  # the refusal of a resume with 1 names no `proxima resume` that refuses
        check_processes({"world_size": 2, "path": str(tmp_path / "checkpoints" / "step_000000004096.pt")}, 1, launcher=False)
    assert "proxima resume" not in str(e.value) and f"proxima train --resume {tmp_path} --nproc 2" in str(e.value)


def test_proxima_resume_of_the_checkpoints_folder_starts_the_processes_that_wrote_it(machine, tmp_path, monkeypatch):
    """`proxima resume RUN/checkpoints` is `proxima resume RUN`: it relaunches with the run's process count
    (counting none there, it resumed a 2-process run in one process, which train_state then refused)."""
    machine(cpus=4, usable=4)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "step_000000004096.pt").write_bytes(b"")
    (run / "config.yaml").write_text("env_id: CartPole-v1\n")
    monkeypatch.setattr(ckpt, "load_checkpoint", lambda path: {"world_size": 2})
    assert cli._written_by(run) == 2
    assert cli._written_by(run / "checkpoints") == 2


def test_rlhf_resume_starts_no_more_processes_than_it_may_use(machine, tmp_path):
    from proxima.rlhf.api import resume_processes

    machine(cpus=2, usable=1)
    (tmp_path / "meta.json").write_text(json.dumps({"world_size": 2}))
    with pytest.raises(ConfigError) as e:
        resume_processes(tmp_path)
    assert str(e.value).startswith(f"{tmp_path}: an RLHF run of 2 processes, more than the 1 CPU this process may use; ")


# ------------------------------------------------------------------------------------ memory
@pytest.mark.parametrize("v2", [True, False])
def test_free_memory_on_cpu_is_what_the_cgroup_memory_limit_leaves(machine, v2):
    # limit 100 MiB, 60 MiB in use of which 10 MiB inactive page cache (reclaimed before the OOM killer): 50 MiB free
    files = ({"memory.max": f"{100 * MIB}\n", "memory.current": f"{60 * MIB}\n",
              "memory.stat": f"anon {50 * MIB}\nfile {10 * MIB}\ninactive_file {10 * MIB}\n"} if v2 else
             {"memory/memory.limit_in_bytes": f"{100 * MIB}\n", "memory/memory.usage_in_bytes": f"{60 * MIB}\n",
              "memory/memory.stat": f"inactive_file 0\ntotal_inactive_file {10 * MIB}\n"})
    machine(v2=v2, files=files, self_cgroup="0::/\n" if v2 else "5:memory:/\n")
    assert sizing.free_memory(torch.device("cpu")) == 50 * MIB


@pytest.mark.parametrize("v2", [True, False])
def test_active_page_cache_counts_as_free_as_memavailable_counts_it(machine, v2):
    """Only inactive_file was taken off the usage: a container that had read a big file (6 GiB of active
    page cache, which the kernel reclaims before it kills) was refused runs that fit. Shmem stays used."""
    stat = (f"anon {MIB}\nshmem {MIB}\nactive_file {6 * MIB}\ninactive_file {MIB}\n" if v2 else
            f"total_shmem {MIB}\ntotal_active_file {6 * MIB}\ntotal_inactive_file {MIB}\n")
    pre = "" if v2 else "memory/"
    files = {f"{pre}memory.max" if v2 else f"{pre}memory.limit_in_bytes": f"{10 * MIB}\n",
             f"{pre}memory.current" if v2 else f"{pre}memory.usage_in_bytes": f"{9 * MIB}\n", f"{pre}memory.stat": stat}
    machine(v2=v2, files=files, self_cgroup="0::/\n" if v2 else "5:memory:/\n")
    assert cpuinfo.cgroup_free_memory() == 8 * MIB  # 10 - (9 - 6 - 1)


def test_a_parents_memory_limit_counts_and_no_limit_is_none(machine):
    machine(self_cgroup="0::/job\n",
            files={"memory.max": f"{80 * MIB}\n", "memory.current": f"{70 * MIB}\n",  # the parent: 10 MiB left
                   "job/memory.max": f"{100 * MIB}\n", "job/memory.current": f"{5 * MIB}\n"})
    assert cpuinfo.cgroup_free_memory() == 10 * MIB
    (cpuinfo.Path(cpuinfo.CGROUP_ROOT) / "memory.max").write_text("max\n")
    assert cpuinfo.cgroup_free_memory() == 95 * MIB
    (cpuinfo.Path(cpuinfo.CGROUP_ROOT) / "job" / "memory.max").write_text("max\n")
    assert cpuinfo.cgroup_free_memory() is None


def test_cgroup_v1_no_limit_is_none(machine):
    machine(v2=False, self_cgroup="5:memory:/\n",  # v1 writes "no limit" as LONG_MAX rounded down to a page
            files={"memory/memory.limit_in_bytes": "9223372036854771712\n", "memory/memory.usage_in_bytes": "3000000000\n"})
    assert cpuinfo.cgroup_free_memory() is None


def test_train_refuses_a_run_the_containers_memory_cannot_hold(machine, capsys, tmp_path):
    # ~0.4 GB in all: what the host has free passes it (the code before this fix let it through), a 64 MiB container not
    machine(files={"memory.max": f"{64 * MIB}\n", "memory.current": "0\n"})
    code, out, err = run_main(["train", "CartPole-v1", "--num-envs", "10000", "--total-timesteps", "1280000", "--dry-run",
                               "--run-dir", str(tmp_path / "r")], capsys)
    assert (code, out) == (2, "")
    line = one_error_line(err, "proxima train")
    assert line.startswith("one minibatch (--num-envs 10000 ") and f", {human_bytes(64 * MIB)} free;" in line, line


# ------------------------------------------------------------------------------------ not on the hot path
def test_a_run_reads_the_limits_once_per_command_not_per_step(machine, capsys, tmp_path, monkeypatch):
    machine(cpus=2)
    reads = []
    dirs = cpuinfo._cgroup_dirs
    monkeypatch.setattr(cpuinfo, "_cgroup_dirs", lambda *a, **k: reads.append(a) or dirs(*a, **k))
    counts = []
    for total in (64, 64 * 8):  # 1 iteration, then 8
        reads.clear()
        code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", str(total),
                                 "--run-dir", str(tmp_path / f"r{total}")], capsys)
        assert code == 0, err
        counts.append(len(reads))
    assert counts[0] == counts[1] and counts[0] <= 10, counts
