"""`proxima rlhf ... --nproc K` starts K processes through the same torchrun launch as `proxima train --nproc K`
(launch.launch_torchrun): the command it builds, the checks it makes once before any process starts, and a real
2-process run on gloo that trains exactly as a torchrun typed by hand."""

import csv
import json
import os
import sys
from types import SimpleNamespace

import pytest
import yaml

import warm_python
from rlhf_assets import save_gpt2

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

PROMPTS = ["the movie was", "the food was", "honestly the hotel", "the service seemed"]


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rlhf_nproc")
    save_gpt2(folder / "model")
    (folder / "prompts.txt").write_text("\n".join(PROMPTS) + "\n")
    return folder


def config(assets, run_dir, **overrides) -> dict:
    """A 2-step run small enough for two CPU processes (as tests/rlhf/conftest.py's two_process_config)."""
    cfg = {"policy": str(assets / "model"), "prompts": str(assets / "prompts.txt"),
           "reward": "proxima.rlhf.demo:keyword_sentiment", "batch_size": 4, "num_minibatches": 2, "micro_batch_size": 1,
           "update_epochs": 1, "max_new_tokens": 4, "steps": 2, "lr": 1e-3, "print_every": 0, "sample_every": 1,
           "checkpoint_every": 1, "plot": False, "run_dir": str(run_dir)}
    cfg.update(overrides)
    return cfg


def write_config(assets, folder, name, **overrides):
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config(assets, folder / name, **overrides)))
    return path


class Launches:
    """launch's Popen: records each command and the command line the ranks are told the user typed, and
    'exits' 0, so no rank starts."""

    def __init__(self):
        self.started = []

    def Popen(self, cmd, env=None, **kwargs):
        from proxima.launch import COMMAND_ENV

        self.started.append((cmd, json.loads(env[COMMAND_ENV])))
        return SimpleNamespace(pid=0, wait=lambda: 0, poll=lambda: 0, send_signal=lambda s: None)


@pytest.fixture
def launches(monkeypatch):
    from proxima import launch

    for name in ("TORCHELASTIC_RUN_ID", "WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    recorder = Launches()
    monkeypatch.setattr(launch, "subprocess", SimpleNamespace(Popen=recorder.Popen))
    return recorder


def rlhf(monkeypatch, *args):
    """`proxima rlhf ARGS` in this process, with sys.argv as the console script leaves it."""
    from proxima.cli import main

    argv = ["rlhf", *map(str, args)]
    monkeypatch.setattr(sys, "argv", ["proxima", *argv])
    return main(argv)


@pytest.mark.parametrize("flags", [["--nproc", "2"], ["--nproc=2", "--fsdp"]])
def test_nproc_starts_the_run_under_torchrun_with_nproc_stripped(flags, assets, tmp_path, launches, monkeypatch):
    path = write_config(assets, tmp_path, "run")
    assert rlhf(monkeypatch, "--config", path, *flags) == 0
    rest = flags[1:] if flags[0] == "--nproc=2" else flags[2:]
    assert launches.started == [([sys.executable, "-m", "proxima.torchrun", "--nproc-per-node", "2", "--standalone",
                                  "-m", "proxima", "rlhf", "--config", str(path), *rest],
                                 ["proxima", "rlhf", "--config", str(path), *flags])]
    assert not (tmp_path / "run").exists()  # the ranks write the run, not the launcher


def test_python_m_proxima_rlhf_launches_the_same_command_and_records_its_own(assets, tmp_path, launches, monkeypatch):
    import proxima.rlhf.__main__ as rlhf_main

    path = write_config(assets, tmp_path, "run")
    program = os.path.join(os.path.dirname(rlhf_main.__file__), "__main__.py")
    monkeypatch.setattr(sys, "argv", [program, "--config", str(path), "--nproc", "2"])
    assert rlhf_main.main(["--config", str(path), "--nproc", "2"]) == 0
    assert launches.started == [([sys.executable, "-m", "proxima.torchrun", "--nproc-per-node", "2", "--standalone",
                                  "-m", "proxima", "rlhf", "--config", str(path)],
                                 [sys.executable, "-m", "proxima.rlhf", "--config", str(path), "--nproc", "2"])]


def test_what_every_process_would_refuse_is_one_line_before_any_starts(assets, tmp_path, launches, monkeypatch, capsys):
    def refused(*args):
        assert rlhf(monkeypatch, *args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        return err[0]

    path = write_config(assets, tmp_path, "run")
    assert refused("--config", path, "--nproc", "0") == "proxima rlhf: error: --nproc 0: must be at least 1"
    assert refused("--config", path, "--nproc", "5") == (
        f"proxima rlhf: error: --prompts {assets / 'prompts.txt'}: 4 prompt(s) for 5 processes, each of which draws from "
        "its own share (prompts rank, rank + 5, ...); give at least 5 prompts, or train with fewer processes")
    # the horizon counts the responses of all processes: 4 x 4 = 16 > 5 x 3
    assert refused("--config", path, "--nproc", "4", "--adaptive-kl", "--kl-horizon", "3").startswith(
        "proxima rlhf: error: --kl-horizon 3: with --adaptive-kl each step multiplies beta by as little as 1 - 0.2 x 16 "
        "responses per update (--batch-size 4 x 4 processes)")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "meta.json").write_text('{"kind": "rlhf"}')
    assert refused("--config", path, "--nproc", "2").startswith(f"proxima rlhf: error: --run-dir '{tmp_path / 'run'}': "
                                                                "already holds a run")
    assert refused("--demo", "--policy", assets / "model", "--nproc", "2") == (
        "proxima rlhf: error: --policy: --demo builds its own model and prompts; drop --policy, or drop --demo to "
        "train on yours")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")  # typed to a rank of a torchrun: it would launch again
    assert refused("--config", path, "--nproc", "2") == ("proxima rlhf: error: --nproc: this process already runs under "
                                                         "torchrun; drop --nproc (torchrun sets the process count)")
    assert launches.started == []


def metrics(run_dir) -> list:
    """metrics.csv without its timing columns (the only ones two identical runs may differ in)."""
    timing = ("charts/seconds_per_step", "charts/tokens_per_second")
    with open(run_dir / "metrics.csv", newline="") as f:
        return [{k: v for k, v in row.items() if k not in timing and "time" not in k} for row in csv.DictReader(f)]


@pytest.mark.slow
def test_proxima_rlhf_nproc_2_trains_as_the_torchrun_typed_by_hand(assets, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONFAULTHANDLER": "1"}
    launched = write_config(assets, tmp_path, "launched")
    res = warm_python.run([sys.executable, "-m", "proxima", "rlhf", "--config", str(launched), "--nproc", "2"],
                          capture_output=True, text=True, timeout=240, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    by_hand = write_config(assets, tmp_path, "by_hand")
    res = warm_python.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "proxima.rlhf", "--config", str(by_hand)], capture_output=True, text=True, timeout=240,
                          env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    ours, theirs = (json.loads((tmp_path / n / "summary.json").read_text()) for n in ("launched", "by_hand"))
    assert ours["world_size"] == 2 and ours["steps"] == 2 and ours["ranks_in_sync"]
    assert ours["param_checksums"] == theirs["param_checksums"]
    assert metrics(tmp_path / "launched") == metrics(tmp_path / "by_hand") and len(metrics(tmp_path / "launched")) == 2
    meta = json.loads((tmp_path / "launched" / "meta.json").read_text())
    assert meta["world_size"] == 2
    assert meta["command"] == [sys.executable, "-m", "proxima", "rlhf", "--config", str(launched), "--nproc", "2"]
