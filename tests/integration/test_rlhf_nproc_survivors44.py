"""Mutation survivors of `proxima rlhf --nproc K` (launch check, rlhf/cli.check_launch): the typed count's limit,
the prompts-per-process boundary, the demo's kl horizon over all processes, one GPU per process."""

import os

import pytest

from tests.integration import test_rlhf_nproc44 as base
from tests.integration.test_rlhf_nproc44 import PROMPTS, rlhf, write_config

assets, launches = base.assets, base.launches  # its fixtures: the saved model and prompts, the recorded launches

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def two_cpus(monkeypatch):
    from proxima import cpuinfo

    monkeypatch.setattr(cpuinfo, "usable_cpus", lambda root=None: 2)  # PROCS_PER_CPU x 2 = at most 8 processes


def refused(monkeypatch, capsys, *args) -> str:
    assert rlhf(monkeypatch, *args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_a_typed_nproc_over_the_cpu_limit_is_refused_as_train_refuses_it(assets, tmp_path, launches, monkeypatch,
                                                                         capsys, two_cpus):
    from proxima.cpuinfo import cpus_text

    def line(n):  # train --nproc's line (launch.check_nproc)
        return (f"--nproc {n}: must be at most 8 (4 x {cpus_text(2)}); give --nproc 8 or fewer (several machines: "
                "torchrun on each, docs/distributed.md)")

    path = write_config(assets, tmp_path, "run")
    assert refused(monkeypatch, capsys, "--config", path, "--nproc", "100000") == f"proxima rlhf: error: {line(100000)}"
    assert refused(monkeypatch, capsys, "--demo", "--run-dir", tmp_path / "demo", "--nproc", "9") == (
        f"proxima rlhf: error: {line(9)}")
    assert launches.started == []
    from tests.cli_helpers import run_main

    code, _, err = run_main(["train", "CartPole-v1", "--nproc", "9"], capsys)
    assert (code, err.strip().splitlines()[-1]) == (2, f"proxima train: error: {line(9)}")


def test_as_many_prompts_as_processes_is_enough(assets, tmp_path, launches, monkeypatch, two_cpus):
    from proxima.rlhf.cli import check_launch

    path = write_config(assets, tmp_path, "run")
    check_launch(len(PROMPTS), ["rlhf", "--config", str(path)])  # one prompt each: no ConfigError
    assert rlhf(monkeypatch, "--config", path, "--nproc", str(len(PROMPTS))) == 0
    [(cmd, _)] = launches.started
    assert cmd[cmd.index("--nproc-per-node") + 1] == "4"


def test_the_demo_counts_the_kl_horizon_over_all_processes_once_up_front(tmp_path, launches, monkeypatch, capsys,
                                                                       two_cpus):
    demo = ["--demo", "--run-dir", tmp_path / "demo", "--batch-size", "4", "--adaptive-kl", "--kl-horizon", "3"]
    # one process: 4 responses per update, 3 x 5 > 4, allowed; four: 16 responses, 3 x 5 <= 16, refused
    assert rlhf(monkeypatch, *demo, "--nproc", "2") == 0 and len(launches.started) == 1
    assert refused(monkeypatch, capsys, *demo, "--nproc", "4") == (
        "proxima rlhf: error: --kl-horizon 3: with --adaptive-kl each step multiplies beta by as little as 1 - 0.2 x 16 "
        "responses per update (--batch-size 4 x 4 processes) / 3, which is 0 or negative; use --kl-horizon 4 or more "
        "(the smallest allowed for 16 responses per update)")
    assert len(launches.started) == 1


def test_one_gpu_per_process_allows_as_many_processes_as_devices(assets, tmp_path, launches, monkeypatch, capsys,
                                                                 two_cpus):
    import torch

    from proxima import device

    monkeypatch.setattr(device, "resolve_device", lambda name, arg="--device": torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    path = write_config(assets, tmp_path, "run", device="cuda")
    assert rlhf(monkeypatch, "--config", path, "--nproc", "2") == 0 and len(launches.started) == 1
    assert refused(monkeypatch, capsys, "--config", path, "--nproc", "3") == (
        "proxima rlhf: error: --nproc 3: one GPU per process (--device cuda), and this machine has 2 CUDA device(s); "
        "give --nproc 2 or fewer")
    assert len(launches.started) == 1
