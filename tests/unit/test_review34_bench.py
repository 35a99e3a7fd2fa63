"""Review 34 (benchmarks): population_speed.py compares equal work and shows it, ``proxima bench
--json`` describes its own run, the untimed warm-up is measured and said, and a relative path in a
recorded command is written as the repository root needs it. Stand-ins replace the training."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from proxima import bench

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import tables  # noqa: E402  (benchmarks/tables.py)

population_speed = importlib.import_module("population_speed")

FULL, STOPPED = 549_888, 145_920  # the fast preset's steps without and with its stop rule


def fake_train(calls: list):
    """``proxima train`` as population_speed starts it: writes each member's metrics.csv and eval.json.
    A single run that keeps the preset's stop rule stops early, as the fast preset's does; a
    population's members always train every step."""

    real = subprocess.run

    def run(cmd, *args, **kwargs):
        if "train" not in cmd:  # platform's own questions (uname -p) for the machine line
            return real(cmd, *args, **kwargs)
        calls.append(list(cmd))
        run_dir = Path(cmd[cmd.index("--run-dir") + 1])
        stop_rule_off = "--stop-return" in cmd and cmd[cmd.index("--stop-return") + 1] == "none"
        if "--seeds" in cmd:
            k = int(cmd[cmd.index("--seeds") + 1].split("-")[1])
            dirs = [f"seed{i}" for i in range(1, k + 1)]
            run_dir.mkdir(parents=True)
            (run_dir / "population.json").write_text(json.dumps({"member_dirs": [{"dir": d} for d in dirs]}))
            members, steps, seconds = [run_dir / d for d in dirs], FULL, 10.0
        else:
            members, steps, seconds = [run_dir], FULL if stop_rule_off else STOPPED, 4.0
        for m in members:
            m.mkdir(parents=True, exist_ok=True)
            (m / "metrics.csv").write_text(f"iteration,global_step,time\n1,1000,0.1\n2,{steps},{seconds}\n")
            (m / "eval.json").write_text(json.dumps({"mean_return": 500.0}))
        return SimpleNamespace(returncode=0, stdout="", stderr="")

    return run


def test_population_speed_one_seed_trains_as_many_steps_as_each_member(monkeypatch, tmp_path, capsys):
    """The fast preset's stop rule ended one seed at 145,920 steps while members trained 550k: the
    wall ratio compared a quarter of the work with the whole of it."""
    calls = []
    monkeypatch.setattr(subprocess, "run", fake_train(calls))  # tables.run_child looks it up at each call
    out = tmp_path / "pop.md"
    code = population_speed.main(["--sizes", "1,2", "--repeats", "1", "--out", str(out)])
    text = out.read_text()
    assert code == 0 and len(calls) == 2
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[1:-1]]
            for line in text.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")}
    # same steps per member on both sides, and the steps/s of all members over the training clock
    assert rows["1"][5] == rows["2"][5] == f"{FULL:,} ({FULL:,}-{FULL:,})"
    assert rows["1"][6] == f"{FULL / 4.0 / 1e3:.1f}k ({FULL / 4.0 / 1e3:.1f}k-{FULL / 4.0 / 1e3:.1f}k)"
    assert rows["2"][6].startswith(f"{2 * FULL / 10.0 / 1e3:.1f}k (")
    assert "| steps trained per member | training steps/s, all members |" in text
    assert "--stop-return none" in text


def test_population_speed_table_shows_unequal_work_when_there_is_some():
    rounds = [{1: {"wall": 2.0, "train": 1.0, "evals": [500.0], "steps": [STOPPED]},
               8: {"wall": 5.0, "train": 4.0, "evals": [500.0] * 8, "steps": [FULL] * 8}}]
    text = population_speed.table(SimpleNamespace(threshold=475.0), [1, 8], rounds)
    assert f"| 1/1 | {STOPPED:,} ({STOPPED:,}-{STOPPED:,}) | 145.9k (145.9k-145.9k) |" in text
    assert f"| 8/8 | {FULL:,} ({FULL:,}-{FULL:,}) | 1099.8k (1099.8k-1099.8k) |" in text


# ------------------------------------------------------------------------------------ bench --json
def test_bench_json_says_vector_hidden_sizes_repeats_machine_and_when(capsys):
    from proxima.cli import main

    before = datetime.now().astimezone().replace(microsecond=0)
    code = main(["bench", "CartPole-v1", "--backend", "gymnasium", "--vector", "async", "--num-envs", "2",
                 "--seconds", "0.01", "--repeats", "2", "--train-only", "--json"])
    assert code == 0
    (d,) = [json.loads(row) for row in capsys.readouterr().out.splitlines() if row.strip()]
    assert d["vector"] == "async" and d["hidden_sizes"] == [64, 64] and d["seconds"] == 0.01
    assert len(d["samples"]["train"]) == len(d["durations"]["train"]) == 2
    assert d["train_sps"] == pytest.approx(sorted(d["samples"]["train"])[0] / 2 + sorted(d["samples"]["train"])[1] / 2)
    assert d["warmup_seconds"]["train"] > 0
    assert d["machine"]["cpu"] == bench.cpu_model() and d["machine"]["logical_cores"] == os.cpu_count()
    assert d["machine"]["omp_num_threads"] == os.environ.get("OMP_NUM_THREADS", "unset")
    assert before <= datetime.fromisoformat(d["timestamp"]) <= datetime.now().astimezone()  # with its UTC offset
    assert "--vector async" in d["command"] and "--seconds 0.01" in d["command"]
    assert d["env_sps"] is None and d["backend"] == "gymnasium"  # the existing keys are still there


# ------------------------------------------------------------------------------------ warm-up
def test_the_warm_up_holds_a_slow_first_call_and_no_timed_repeat_does(monkeypatch):
    """A 0.5 s first call (a --compile's compilation) is in the warm-up seconds, not in any repeat."""
    now = {"t": 0.0}
    times = iter([0.5] + [0.125] * 100)

    def fn():
        now["t"] += next(times)

    monkeypatch.setattr(bench, "time", SimpleNamespace(perf_counter=lambda: now["t"]))
    durations = []
    sps = bench.measure(fn, 1, 0.25, 3, SimpleNamespace(type="cpu"), durations)
    assert sps.warmup_seconds == 0.75  # 3 calls: 0.5 + 0.125 + 0.125
    assert durations == [0.25, 0.25, 0.25] and sps == [8.0, 8.0, 8.0]


def test_out_file_and_stderr_report_the_untimed_warm_up(tmp_path, capsys):
    from proxima.cli import main

    out = tmp_path / "b.md"
    code = main(["bench", "CartPole-v1", "--backend", "native", "--num-envs", "2", "--seconds", "0.01", "--repeats", "1",
                 "--train-only", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0
    assert "proxima bench: native x 2 envs: warm-up " in err and " s, not timed" in err
    text = " ".join(out.read_text().split())
    assert "after an untimed warm-up of at least 3 whole calls per measurement (" in text
    assert "which holds any --compile compilation and --cudagraphs capture: no figure includes them" in text


# ------------------------------------------------------------------------------------ recorded commands
def parser_with_out() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--only", default=None)
    p.add_argument("--jax-python", default="python")
    p.add_argument("--out", default=None)
    return p


def test_a_relative_out_is_recorded_as_the_repository_root_runs_it(monkeypatch, tmp_path):
    p = parser_with_out()
    monkeypatch.chdir(tmp_path)  # outside the repository: the file's absolute path
    (tmp_path / "venv").mkdir()
    args = p.parse_args(["--only", "tanh numpy", "--jax-python", "venv", "--out", "vs.md"])
    assert tables.command_text("x.py", p, args) == (
        f"python benchmarks/x.py --only 'tanh numpy' --jax-python {tmp_path / 'venv'} --out {tmp_path / 'vs.md'}")
    monkeypatch.chdir(ROOT / "benchmarks")  # inside it: relative to the root, as an absolute repository path is
    args = p.parse_args(["--out", "results/new.md"])
    assert tables.command_text("x.py", p, args) == "python benchmarks/x.py --jax-python python --out benchmarks/results/new.md"
    args = p.parse_args(["--out", str(ROOT / "benchmarks" / "results" / "new.md")])
    assert tables.command_text("x.py", p, args) == "python benchmarks/x.py --jax-python python --out benchmarks/results/new.md"
