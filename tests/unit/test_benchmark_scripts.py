"""The benchmark scripts (benchmarks/*.py) refuse bad arguments with one line before measuring,
append to results files without deleting what they hold, and record the machine and the full
command. Nothing here measures: each script's measuring function is replaced by a stand-in."""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import warm_python

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import tables  # noqa: E402  (benchmarks/tables.py)

SCRIPTS = ("hostmem", "mlp_kernel", "threads", "cpu_parts", "vs_revision", "vs_purejaxrl", "solve_time",
           "population_speed", "population_vs_purejaxrl", "accel", "sb3_compare", "distributed")
MODULES = {name: importlib.import_module(name) for name in SCRIPTS}  # imported here: their import noise is not the test's
#: what each script runs to measure (a process, a Trainer, a venv): replaced by ``boom`` in ``no_work``
MEASURING = {"hostmem": ["measure"], "threads": ["run_json"], "vs_revision": ["bench_sps"], "solve_time": ["run_seed"],
             "population_speed": ["measure"], "vs_purejaxrl": ["run_json_lines", "alternating", "single_call"],
             "accel": ["prepare", "Trainer"], "population_vs_purejaxrl": ["run_proxima", "run_purejaxrl"],
             "sb3_compare": ["ensure_bench_venv", "run_sb3"], "distributed": ["run_once"]}


def boom(*args, **kwargs):
    raise AssertionError("measured before the arguments were checked")


@pytest.fixture
def no_work(monkeypatch):
    """No script may measure, build a Trainer or start a process; git may only be asked (rev-parse)."""
    import proxima.trainer

    monkeypatch.setattr(proxima.trainer, "Trainer", boom)
    for name, attrs in MEASURING.items():
        for attr in attrs:
            monkeypatch.setattr(MODULES[name], attr, boom, raising=False)
    real = subprocess.run

    def only_git_questions(cmd, *args, **kwargs):
        if list(cmd[:2]) != ["git", "rev-parse"]:
            raise AssertionError(f"started {cmd}")
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", only_git_questions)


def run_main(name: str, argv: list, capsys) -> tuple:
    code = MODULES[name].main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------------------ item 1
def test_one_seed_against_itself_is_1x():
    """population_speed passed 2 as median_range's scale: one seed against itself read 0.5x."""
    rounds = [{1: {"wall": 2.0, "train": 1.0, "evals": [500.0]}, 8: {"wall": 5.0, "train": 3.0, "evals": [500.0] * 8}}]
    text = MODULES["population_speed"].table(SimpleNamespace(threshold=475.0), [1, 8], rounds)
    assert "| 1 | 2.0 (2.0-2.0) | 1.0 (1.0-1.0) | 1.00 (1.00-1.00)x | 1/1 |" in text
    assert "| 8 | 5.0 (5.0-5.0) | 3.0 (3.0-3.0) | 2.50 (2.50-2.50)x | 8/8 |" in text


def test_median_range_takes_its_options_by_name_only():
    assert tables.median_range([1000.0, 3000.0, 2000.0], scale=1e3, unit="k") == "2.0k (1.0k-3.0k)"
    assert tables.median_range([1.0, 2.0], digits=2) == "1.50 (1.00-2.00)"
    with pytest.raises(TypeError):
        tables.median_range([1.0], 2)  # the mistake of item 1 is no longer expressible


# ------------------------------------------------------------------------------------ items 5 and 6
PARTS = "; ".join(MODULES["cpu_parts"].part_names())
BAD = [
    ("hostmem", ["--repeats", "0"], "--repeats 0: must be at least 1"),
    ("hostmem", ["--iterations", "0"], "--iterations 0: must be at least 1"),
    ("mlp_kernel", ["--iterations", "0"], "--iterations 0: must be at least 1"),
    ("mlp_kernel", ["--num-envs", "0"], "--num-envs 0: must be at least 1"),
    ("threads", ["--rounds", "0"], "--rounds 0: must be at least 1"),
    ("threads", ["--num-envs", ""], "--num-envs '': expected a comma-separated list of positive integers, e.g. 1,4,64"),
    ("threads", ["--num-envs", "4096,"], "--num-envs '4096,': expected a comma-separated list of positive integers, e.g. 1,4,64"),
    ("threads", ["--seconds", "0"], "--seconds 0: must be a positive number"),
    ("cpu_parts", ["--only", "nomatch"], f"--only 'nomatch': matches no part (the parts: {PARTS})"),
    ("cpu_parts", ["--calls", "0"], "--calls 0: must be at least 1"),
    ("vs_revision", ["--rev", "HEAD", "--rounds", "0"], "--rounds 0: must be at least 1"),
    ("vs_revision", ["--rev", "HEAD:README.md"], "--rev HEAD:README.md: not a commit of this repository"),
    ("vs_purejaxrl", ["--repeats", "0"], "--repeats 0: must be at least 1"),
    ("vs_purejaxrl", ["--num-envs", ""], "--num-envs '': expected a comma-separated list of positive integers, e.g. 1,4,64"),
    # a budget the margins eat whole: it printed "Proxima: timed out after -6 s" and exited 0
    ("vs_purejaxrl", ["--single-call", "--time-budget", "12"],
     "--time-budget 12: leaves Proxima no time (--anchor-margin 15 s for PureJaxRL's last config and 3 s for the table come off "
     "it first); give more than 18"),
    ("vs_purejaxrl", ["--single-call", "--time-budget", "18"],
     "--time-budget 18: leaves Proxima no time (--anchor-margin 15 s for PureJaxRL's last config and 3 s for the table come off "
     "it first); give more than 18"),
    ("vs_purejaxrl", ["--time-budget", "3"], "--time-budget 3: leaves Proxima no time (3 s for the table come off it first); give more than 3"),
    ("solve_time", ["--seeds", "5-1"], "--seeds '5-1': expected seeds like 1-16 or 1,5,9 (a range low-high, ascending)"),
    ("solve_time", ["--seeds", ""], "--seeds '': expected seeds like 1-16 or 1,5,9 (a range low-high, ascending)"),
    ("solve_time", ["--seeds", "abc"], "--seeds 'abc': expected seeds like 1-16 or 1,5,9 (a range low-high, ascending)"),
    ("solve_time", ["--preset", "nosuch", "--seeds", "1,2"],
     "--preset 'nosuch': no such preset for CartPole-v1 (available: default, fast, gpu; see `proxima presets`)"),
    ("solve_time", ["--set", "lr"], "--set lr: expected FIELD=VALUE, e.g. lr=3e-3"),
    ("population_speed", ["--sizes", ""], "--sizes '': expected a comma-separated list of positive integers, e.g. 1,4,64"),
    ("population_speed", ["--sizes", "0"], "--sizes '0': expected a comma-separated list of positive integers, e.g. 1,4,64"),
    ("population_speed", ["--repeats", "0"], "--repeats 0: must be at least 1"),
    ("population_speed", ["--preset", "nope"],
     "--preset 'nope': no such preset for CartPole-v1 (available: default, fast, gpu; see `proxima presets`)"),
    ("population_speed", ["--env-id", "NoSuch-v0"],
     "--preset 'fast': no such preset: NoSuch-v0 has no presets (see `proxima presets`)"),
    ("population_speed", ["--device", "bogus"], "--device 'bogus': not a torch device (cpu, cuda, cuda:1, auto)"),
    ("threads", ["--seconds", "inf"], "--seconds inf: must be a positive number"),
    ("accel", ["--repeats", "0"], "--repeats 0: must be at least 1"),
    ("accel", ["--modes", "eager,bogus"],
     "--modes eager,bogus: no mode 'bogus' (modes: eager, compile, bf16, compile+bf16, cudagraphs, compile+cudagraphs)"),
    ("accel", ["--cases", "9"], "--cases '9': expected comma-separated case numbers from 0 to 4, e.g. 0,2"),
    ("population_vs_purejaxrl", ["--agents", "0"], "--agents 0: must be at least 1"),
    ("sb3_compare", ["--repeats", "0"], "--repeats 0: must be at least 1"),
    ("distributed", ["--procs", "1,x"], "--procs '1,x': expected a comma-separated list of positive integers, e.g. 1,4,64"),
]


@pytest.mark.parametrize("name, argv, message", BAD, ids=[f"{n} {' '.join(a)}" for n, a, _ in BAD])
def test_bad_values_are_one_line_and_exit_2_before_any_work(name, argv, message, no_work, tmp_path, capsys):
    out = tmp_path / "results.md"
    code, _, err = run_main(name, [*argv, "--out", str(out)], capsys)
    assert (code, err.splitlines()) == (2, [f"{name}.py: error: {message}"])
    assert not out.exists()


# ------------------------------------------------------------------------------------ item 2
REQUIRED = {"vs_revision": ["--rev", "HEAD"]}


@pytest.mark.parametrize("name", [n for n in SCRIPTS])
def test_an_out_that_cannot_be_written_is_refused_first(name, no_work, tmp_path, capsys):
    code, _, err = run_main(name, [*REQUIRED.get(name, []), "--out", str(tmp_path)], capsys)
    assert (code, err.splitlines()) == (
        2, [f"{name}.py: error: --out {tmp_path}: is a directory (give a file name, e.g. {tmp_path / 'results.md'})"])
    (tmp_path / "file").write_text("x")
    code, _, err = run_main(name, [*REQUIRED.get(name, []), "--out", str(tmp_path / "file" / "t.md")], capsys)
    assert (code, err.splitlines()) == (2, [f"{name}.py: error: --out {tmp_path / 'file' / 't.md'}: {tmp_path / 'file'} is a file, not a folder"])


def test_emit_creates_missing_folders_and_appends(tmp_path, capsys):
    out = tmp_path / "new" / "folder" / "t.md"
    assert tables.emit("first", str(out)) == 0
    assert tables.emit("second\n", str(out)) == 0
    assert out.read_text() == "first\n\nsecond\n"
    assert capsys.readouterr().out == "first\nsecond\n\n"


def test_a_failed_append_leaves_the_file_as_it_was(tmp_path, capsys, monkeypatch):
    out = tmp_path / "t.md"
    out.write_text("# recorded\n")

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    assert tables.emit("table", str(out), script="x.py") == 2
    assert out.read_text() == "# recorded\n"
    assert [p.name for p in tmp_path.iterdir()] == ["t.md"]  # no temporary file left behind
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"x.py: error: {out}: could not write (No space left on device")


# ------------------------------------------------------------------------------------ item 3
def as_prepare(measure):
    """accel.prepare's stand-in made of ``measure(env_id, n, overrides, mode, ...) -> {"sps": [...], "graphs": ...}``
    (raising as it raises): each timed iteration gives the next of its "sps" in turn, on a full core."""
    class Fake:
        def __init__(self, result):
            self.result, self.i = result, 0

        def iteration(self):
            self.i += 1
            return self.result["sps"][(self.i - 1) % len(self.result["sps"])], 1.0

        def close(self):
            return {"graphs": self.result.get("graphs"), "compile_eager": self.result.get("compile_eager", [])}

    return lambda *a: Fake(measure(*a))


@pytest.fixture
def fake_accel(monkeypatch):
    monkeypatch.setattr(MODULES["accel"], "prepare", as_prepare(lambda *a, **k: {"sps": [1000.0, 2000.0, 3000.0], "graphs": None}))


def test_accel_without_out_only_prints(fake_accel, capsys):
    recorded = ROOT / "benchmarks" / "results" / "accel-cpu.md"
    before = recorded.read_bytes()
    try:
        code, out, _ = run_main("accel", ["--modes", "eager", "--cases", "0", "--repeats", "1"], capsys)
        after = recorded.read_bytes()
    finally:
        if recorded.read_bytes() != before:  # the old script replaced it: put the record back
            recorded.write_bytes(before)
    assert code == 0 and after == before
    assert "| CartPole 64 envs | 1,000 (1,000-1,000), 1.00x |" in out  # --repeats 1: one round


def test_accel_appends_a_section_and_records_the_whole_command(fake_accel, tmp_path, capsys):
    out = tmp_path / "accel.md"
    out.write_text("# recorded\n\nhand-written notes\n")
    code, _, _ = run_main("accel", ["--modes", "eager,bf16", "--cases", "0,2", "--repeats", "1", "--out", str(out)], capsys)
    text = out.read_text()
    assert code == 0 and text.startswith("# recorded\n\nhand-written notes\n\n## Training throughput: eager vs bf16 (cpu), ")
    assert (f"Command: `python benchmarks/accel.py --device cpu --modes eager,bf16 --repeats 1 --threads 1 --cases 0,2 "
            f"--out {out}`") in text
    assert "load average (1 min)" in text and "CPU tanh: " in text and "GPU: " in text
    assert "| CartPole 16,384 envs |" in text and "| CartPole 1,024 envs |" not in text


def test_sb3_report_is_appended_and_keeps_the_reading(tmp_path):
    from datetime import datetime

    out = tmp_path / "sb3.md"
    out.write_text("# Proxima vs Stable-Baselines3\n\nold table\n\n## Reading\n\nwritten by hand\n")
    res = {"command": "python benchmarks/sb3_compare.py", "sb3_sps": [10.0, 20.0, 30.0], "proxima_sps": {"16": [100.0, 200.0, 300.0]},
           "fast_preset": "{}", "fast": [{"seed": 1, "wall": 8.0, "cpu": 7.0, "eval": 500.0,
                                          "command": "proxima train CartPole-v1 --preset fast --seed 1"}]}
    MODULES["sb3_compare"].write_report(out, SimpleNamespace(repeats=3, proxima_envs=4096), res, datetime(2026, 12, 2, 10, 0), [1.0])
    text = out.read_text()
    assert text.startswith("# Proxima vs Stable-Baselines3\n\nold table\n\n## Reading\n\nwritten by hand\n\n"
                           "## Proxima vs Stable-Baselines3: PPO on CartPole-v1, 2026-12-02 10:00\n")
    assert "### Training throughput" in text and "**10.0x**" in text
    # item 11: the fast preset's final evaluation, as the preset has it
    from proxima.presets import all_presets

    episodes = all_presets()["CartPole-v1"]["fast"]["config"]["eval_episodes"]
    assert f"final evaluation of the deterministic policy on {episodes} episodes" in text


# ------------------------------------------------------------------------------------ item 7
def fake_seeds(monkeypatch, results: dict):
    def run_seed(args, seed, workdir):
        wall, outcome = results[seed]
        if isinstance(outcome, str):
            return {"seed": seed, "wall": wall, "error": outcome}
        return {"seed": seed, "wall": wall, "mean_return": outcome, "std_return": 0.0, "steps": 1000, "command": "proxima"}

    monkeypatch.setattr(MODULES["solve_time"], "run_seed", run_seed)


def test_failed_seeds_are_left_out_of_the_wall_median_and_named(monkeypatch, tmp_path, capsys):
    fake_seeds(monkeypatch, {1: (10.0, 500.0), 2: (0.5, "ConfigError: boom"), 3: (20.0, 480.0)})
    out = tmp_path / "solve.md"
    code, _, _ = run_main("solve_time", ["--seeds", "1-3", "--out", str(out)], capsys)
    text = out.read_text()
    assert code == 0
    assert ("**2 of 3 seeds solved**; wall median 15.00 s (range 10.00-20.00 s) over the 2 seeds that finished; "
            "seed 2 failed (the error in the row) and is left out of it.") in text
    assert "| 2 | 0.50 | - | error: ConfigError: boom | no |" in text


def test_parallel_seeds_run_at_once_and_the_table_keeps_seed_order(monkeypatch, tmp_path, capsys):
    import threading

    barrier = threading.Barrier(3, timeout=10)  # all three must be running at once, or this times out

    def run_seed(args, seed, workdir):
        barrier.wait()
        return {"seed": seed, "wall": float(seed), "mean_return": 500.0, "std_return": 0.0, "steps": 1000, "command": "proxima"}

    monkeypatch.setattr(MODULES["solve_time"], "run_seed", run_seed)
    out = tmp_path / "solve.md"
    code, _, _ = run_main("solve_time", ["--seeds", "3,1,2", "--parallel", "3", "--out", str(out)], capsys)
    text = out.read_text()
    assert code == 0
    assert "3 seeds at a time (each wall from its own launch)" in text
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ") and "seed" not in line]
    assert rows == ["3", "1", "2"]  # the order asked for, whatever order they finished in
    assert "--parallel 3" in text  # the Command line reproduces it
    assert run_main("solve_time", ["--parallel", "0"], capsys)[0] == 2


def test_every_seed_failing_appends_nothing(monkeypatch, tmp_path, capsys):
    fake_seeds(monkeypatch, {1: (0.4, "proxima train: error: boom"), 2: (0.5, "proxima train: error: boom")})
    out = tmp_path / "solve.md"
    code, _, err = run_main("solve_time", ["--seeds", "1,2", "--out", str(out)], capsys)
    assert (code, err.splitlines()) == (2, ["solve_time.py: error: every seed failed; seed 1: proxima train: error: boom"])
    assert not out.exists()


def test_a_seed_whose_cuda_graphs_fell_back_is_marked_and_counted(monkeypatch, tmp_path, capsys):
    """A --preset gpu seed whose capture failed still exits 0 (train runs that part eagerly and says
    so on stderr): run_seed read stderr only on failure, so its eager wall was a graphed row."""
    note = "proxima: note: could not capture the update as a CUDA graph (operation not permitted); it runs eagerly\n"
    real = subprocess.run

    def fake_train(cmd, *args, **kwargs):  # proxima train as it ends: eval.json, metrics.csv, its stderr
        if list(cmd[1:3]) != ["-m", "proxima"]:
            return real(cmd, *args, **kwargs)
        run_dir, seed = Path(cmd[cmd.index("--run-dir") + 1]), int(cmd[cmd.index("--seed") + 1])
        run_dir.mkdir(parents=True)
        (run_dir / "eval.json").write_text(json.dumps({"mean_return": 500.0, "std_return": 0.0}))
        (run_dir / "metrics.csv").write_text("global_step\n65536\n")
        return subprocess.CompletedProcess(cmd, 0, "", note if seed == 2 else "")

    monkeypatch.setattr(subprocess, "run", fake_train)
    monkeypatch.setattr("proxima.device.resolve_device", lambda name: None)  # a CUDA machine's flags; this one may have none
    out = tmp_path / "solve.md"
    code, printed, _ = run_main("solve_time", ["--preset", "gpu", "--device", "cuda", "--seeds", "1-3", "--out", str(out)], capsys)
    text = out.read_text()
    assert code == 0
    assert "seed 2: " in printed and printed.count("(graphs fell back: eager (update))") == 1
    rows = [line for line in text.splitlines() if line.startswith("| ") and "seed" not in line]
    assert [row.split(" | ")[0] for row in rows] == ["| 1", "| 2 **graphs fell back: eager (update)**", "| 3"]
    assert ("**3 of 3 seeds solved**; wall median ") in text
    assert ("; 1 of 3 seeds fell back from CUDA graphs to eager (marked in the row): its wall is not a graph-replay "
            "time.") in text


# ------------------------------------------------------------------------------------ item 10
def test_machine_line_names_the_gpu_the_date_and_the_load(monkeypatch):
    import torch

    line = tables.machine_line(1, tables.started())
    assert re.search(r"CPU: .+, \d+ cores, SIMD torch \w+, numpy tanh \w+; torch \S+, torch threads: 1; GPU: \S.*; Python \S+; CPU tanh: \w+; "
                     r"proxima \S+, git commit [^;]+; "
                     r"\d{4}-\d\d-\d\d \d\d:\d\d[+-]\d\d:\d\d, load average \(1 min\) \d+\.\d\d at start, \d+\.\d\d at end$", line), line
    if not torch.cuda.is_available():
        assert "GPU: none;" in line
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    assert "GPU: NVIDIA H200;" in tables.machine_line(1, tables.started())


def test_ab_report_has_the_machine_and_the_full_command(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(MODULES["hostmem"], "measure", lambda n, iters, keep: {"sps": 2000.0 if keep else 1000.0, "faults": 5.0})
    out = tmp_path / "hostmem.md"
    code, _, _ = run_main("hostmem", ["--repeats", "1", "--out", str(out)], capsys)
    text = out.read_text()
    assert code == 0 and "CPU: " in text and "GPU: " in text and "load average (1 min)" in text
    assert "on / off, per round: 2.00 (2.00-2.00)x" in text
    assert f"Command: `python benchmarks/hostmem.py --num-envs 4096 --iterations 4 --repeats 1 --out {out}`" in text


def test_population_speed_names_the_cpu_not_the_host(monkeypatch, tmp_path, capsys):
    import platform

    monkeypatch.setattr(MODULES["population_speed"], "measure",
                        lambda args, size, workdir, r: {"size": size, "wall": 2.0 * size, "train": 1.0, "evals": [500.0] * size})
    out = tmp_path / "pop.md"
    code, _, _ = run_main("population_speed", ["--sizes", "1,2", "--repeats", "1", "--out", str(out)], capsys)
    text = out.read_text()
    assert code == 0 and "torch threads: 1" in text and "GPU: " in text and f"{platform.node()} (" not in text
    assert ("Command: `python benchmarks/population_speed.py --env-id CartPole-v1 --preset fast --sizes 1,2 --repeats 1 "
            f"--threshold 475.0 --device cpu --out {out}`") in text
    assert "| 2 | 4.0 (4.0-4.0) | 1.0 (1.0-1.0) | 2.00 (2.00-2.00)x | 2/2 |" in text


def test_population_vs_purejaxrl_names_the_machine_and_quotes_its_command(monkeypatch, tmp_path, capsys):
    mod = MODULES["population_vs_purejaxrl"]
    monkeypatch.setattr(mod, "run_proxima", lambda args, run_dir, timeout=None: {"wall": 3.0, "train": 2.0, "mean_final_return": 500.0})
    monkeypatch.setattr(mod, "run_purejaxrl", lambda args, timeout=None: {"wall": 5.0, "run_seconds": 4.0, "final_return_mean": 500.0})
    out = tmp_path / "pop.md"
    code, _, _ = run_main("population_vs_purejaxrl", ["--device", "cpu", "--agents", "2", "--anchor", "an chor.py",
                                                      "--jax-python", "py", "--out", str(out)], capsys)
    text = out.read_text()
    assert code == 0 and "CPU: " in text and "GPU: " in text and "PureJaxRL training s / Proxima training s: 2.00" in text
    assert "| mean final episodic return (each agent's episodes in its last 5% of iterations) |" in text
    assert ("Command: `python benchmarks/population_vs_purejaxrl.py --device cpu --agents 2 --total 500000 --jax-python py "
            f"--anchor 'an chor.py' --timeout 300 --out {out}`") in text


# ------------------------------------------------------------------------------------ item 12
def test_command_spells_out_every_option_with_its_value():
    p = argparse.ArgumentParser()
    p.add_argument("--only", default=None)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--fast", action="store_true")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "x.md"))
    args = p.parse_args(["--only", "tanh numpy", "--set", "lr=1", "--set", "gamma=0.9", "--fast"])
    assert tables.command("x.py", p, args) == ("Command: `python benchmarks/x.py --only 'tanh numpy' --rounds 9 --seconds 10.0 "
                                               "--fast --set lr=1 --set gamma=0.9 --out benchmarks/results/x.md`")
    assert tables.command("x.py", p, p.parse_args([])) == (
        "Command: `python benchmarks/x.py --rounds 9 --seconds 10.0 --out benchmarks/results/x.md`")


def test_vs_revision_records_the_commit_it_measured(monkeypatch, tmp_path, capsys):
    mod = MODULES["vs_revision"]
    monkeypatch.setattr(mod, "bench_sps", lambda tree, args, name="": 1000.0)
    real = subprocess.run

    def git(cmd, *args, **kwargs):  # the worktree is not made: the measurement is a stand-in
        if list(cmd[:2]) == ["git", "rev-parse"] or list(cmd[:3]) == ["git", "--no-optional-locks", "status"]:
            return real(cmd, *args, **kwargs)  # questions: the commit measured, and the machine line's git_state
        assert list(cmd[:3]) in (["git", "worktree", "add"], ["git", "worktree", "remove"]), cmd
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", git)
    out = tmp_path / "rev.md"
    code, _, _ = run_main("vs_revision", ["--rev", "HEAD", "--rounds", "1", "--seconds", "1", "--out", str(out)], capsys)
    text = out.read_text()
    assert code == 0
    assert re.search(r"Command: `python benchmarks/vs_revision.py --rev [0-9a-f]{40} --num-envs 4096 --rounds 1 "
                     rf"--seconds 1.0 --out {re.escape(str(out))}`", text), text
    assert "load average (1 min)" in text and "this tree / " in text


# ------------------------------------------------------------------------------------ tables written as rows finish
# A GPU session runs each table script under a time limit: a script killed there must leave a valid
# results file, its earlier content byte for byte and a section (marked partial) with the rows it
# finished. "Killed" below is an exception no script catches, raised where the next row would start.
RECORDED = b"# recorded\r\n\r\nnotes written by hand, caf\xe9 (latin-1), CRLF line ends\r\n"


class Killed(BaseException):
    pass


def recorded_file(tmp_path) -> Path:
    out = tmp_path / "results.md"
    out.write_bytes(RECORDED)
    return out


#: the comments around a section still being written (tables.Section); a finished one has none
SECTION_MARKS = re.compile(r"<!-- section [0-9a-f]{16} of [^\n]*: rewritten as the run goes -->\n|<!-- end of section [0-9a-f]{16} -->\n")


def section_of(out: Path) -> str:
    """The run's section of ``out``, without the markers a run that did not finish leaves around it."""
    data = out.read_bytes()
    assert data.startswith(RECORDED + b"\n"), data[:200]  # what the file held, untouched, then a blank line
    text = data[len(RECORDED) + 1:].decode()
    assert len(SECTION_MARKS.findall(text)) in (0, 2), text  # none, or one begin and one end
    return SECTION_MARKS.sub("", text)


def test_section_updates_replace_only_the_run_s_own_section_and_survive_sigkill(tmp_path):
    # a real kill: the process dies right after its first update, with no chance to clean up
    out = recorded_file(tmp_path)
    code = (f"import os, signal, sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import tables\n"
            f"s = tables.Section({str(out)!r}, 'x.py')\n"
            "s.update('## run\\n\\nrow 1\\n'); s.update('## run\\n\\nrow 1\\nrow 2\\n')\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = warm_python.run([sys.executable, "-c", code], cwd=ROOT, timeout=60)
    assert proc.returncode == -9
    assert section_of(out) == "## run\n\nrow 1\nrow 2\n"
    assert out.read_bytes()[len(RECORDED) + 1:].startswith(b"<!-- section ")  # still marked: the run did not finish
    assert [p.name for p in tmp_path.iterdir()] == ["results.md"]  # no temporary file left


def test_section_finish_is_what_emit_appends(tmp_path, capsys):
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    for path in (a, b):
        path.write_text("# recorded\n")
    tables.emit("## table\n\n| x |\n", str(a))
    section = tables.Section(str(b))
    section.update("## table\n\n" + tables.partial_note(0, 1, "rows") + "\n")
    assert section.finish("## table\n\n| x |\n") == 0
    assert a.read_bytes() == b.read_bytes()
    # a new file: no blank line first; no --out: nothing written, only printed
    c = tmp_path / "c.md"
    tables.Section(str(c)).finish("## t\n")
    assert c.read_text() == "## t\n"
    assert tables.Section(None).finish("## t") == 0 and capsys.readouterr().out.endswith("## t\n")


def test_solve_time_killed_after_the_first_seed_leaves_that_seed(monkeypatch, tmp_path, capsys):
    def run_seed(args, seed, workdir):
        if seed > 1:
            raise Killed
        return {"seed": seed, "wall": 9.0, "mean_return": 500.0, "std_return": 0.0, "steps": 1000, "command": "proxima"}

    monkeypatch.setattr(MODULES["solve_time"], "run_seed", run_seed)
    out = recorded_file(tmp_path)
    with pytest.raises(Killed):
        run_main("solve_time", ["--seeds", "1-3", "--out", str(out)], capsys)
    text = section_of(out)
    assert text.startswith("## `proxima train CartPole-v1 --preset fast`\n\n**Partial: 1 of 3 seeds so far.**")
    assert "| 1 | 9.00 | 1,000 | 500.0 +- 0.0 | yes |" in text and "**1 of 1 seeds solved**" in text
    assert "Command: `python benchmarks/solve_time.py" in text
    # run to the end, the section is final: no partial mark
    fake_seeds(monkeypatch, {1: (9.0, 500.0), 2: (8.0, 480.0)})
    (tmp_path / "b").mkdir()
    out2 = recorded_file(tmp_path / "b")
    assert run_main("solve_time", ["--seeds", "1,2", "--out", str(out2)], capsys)[0] == 0
    assert "Partial" not in section_of(out2) and "**2 of 2 seeds solved**" in section_of(out2)


def test_accel_killed_during_the_last_mode_keeps_the_modes_measured(monkeypatch, tmp_path, capsys):
    def measure(env_id, n, overrides, mode, *a):
        if mode.get("compile"):
            raise Killed  # the cold compile, listed last, is where the step's time runs out
        return {"sps": [2000.0] if not mode else [4000.0],
                "graphs": {"rollout": "graph", "advantages": "graph", "update": "graph"} if mode.get("cudagraphs") else None}

    monkeypatch.setattr(MODULES["accel"], "prepare", as_prepare(measure))
    monkeypatch.setattr(MODULES["accel"], "config_problem", lambda *a: "")  # cudagraphs modes: a CUDA machine's run
    out = recorded_file(tmp_path)
    with pytest.raises(Killed):
        run_main("accel", ["--cases", "2", "--modes", "eager,cudagraphs,compile+cudagraphs", "--repeats", "1", "--out", str(out)], capsys)
    text = section_of(out)
    assert "**Partial: 2 of 3 case and mode measurements so far.**" in text
    assert "| CartPole 16,384 envs | 2,000 (2,000-2,000), 1.00x | 4,000 (4,000-4,000), 2.00 (2.00-2.00)x | - |" in text


def test_accel_marks_graphs_that_fell_back_and_a_failed_mode(monkeypatch, tmp_path, capsys):
    def measure(env_id, n, overrides, mode, *a):
        if mode.get("compile"):
            raise RuntimeError("inductor: boom\nmore")
        graphs = {"rollout": "graph", "advantages": "graph", "update": "eager: capture failed (no)"} if mode else None
        return {"sps": [1000.0], "graphs": graphs}

    monkeypatch.setattr(MODULES["accel"], "prepare", as_prepare(measure))
    monkeypatch.setattr(MODULES["accel"], "config_problem", lambda *a: "")  # cudagraphs modes: a CUDA machine's run
    out = tmp_path / "accel.md"
    code, _, err = run_main("accel", ["--cases", "2", "--modes", "eager,cudagraphs,compile+cudagraphs", "--repeats", "1",
                                      "--out", str(out)], capsys)
    text = out.read_text()
    assert code == 0 and "Partial" not in text
    assert ("| CartPole 16,384 envs | 1,000 (1,000-1,000), 1.00x | **graphs fell back: eager** (update: eager: capture failed (no)) "
            "1,000 (1,000-1,000), 1.00 (1.00-1.00)x | failed: inductor: boom |") in text
    assert "compile+cudagraphs failed: inductor: boom" in err


def test_population_killed_during_proxima_keeps_the_purejaxrl_row(monkeypatch, tmp_path, capsys):
    # PureJaxRL runs first (the shorter, more predictable side): a step limit cuts Proxima's run, not its
    mod = MODULES["population_vs_purejaxrl"]
    monkeypatch.setattr(mod, "run_purejaxrl", lambda args, timeout=None: {"wall": 25.0, "run_seconds": 8.6, "final_return_mean": 500.0})

    def killed(args, run_dir, timeout=None):
        raise Killed

    monkeypatch.setattr(mod, "run_proxima", killed)
    out = recorded_file(tmp_path)
    with pytest.raises(Killed):
        run_main("population_vs_purejaxrl", ["--device", "cpu", "--cudagraphs", "--anchor", "a.py", "--out", str(out)], capsys)
    text = section_of(out)
    assert text.startswith("**Partial: 1 of 2 rows so far.**")
    assert "| PureJaxRL vmap over seeds | 8.60 | 25.0 | 500.0 |" in text and "| Proxima" not in text


def test_population_reports_skipped_purejaxrl_and_graphs_that_fell_back(monkeypatch, tmp_path, capsys):
    mod = MODULES["population_vs_purejaxrl"]
    note = "proxima: note: could not capture the _part_update as a CUDA graph (x); it runs eagerly\n"
    assert mod.graphs_note(note) == "graphs fell back: eager (_part_update)" and mod.graphs_note("") == ""
    monkeypatch.setattr(mod, "run_proxima", lambda args, run_dir, timeout=None: {
        "wall": 60.0, "train": 50.0, "mean_final_return": 480.0, "graphs": mod.graphs_note(note)})

    class Proc:  # the anchor exits 0 after a "skipped" line (its --time-budget): a row, not a KeyError
        returncode, stderr = 0, ""
        stdout = json.dumps({"num_envs": 4, "skipped": "time budget 1s used up"}) + "\n"

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: Proc())
    out = tmp_path / "pop.md"
    code, _, _ = run_main("population_vs_purejaxrl", ["--device", "cpu", "--cudagraphs", "--anchor", "a.py", "--out", str(out)], capsys)
    text = out.read_text()
    assert code == 1  # a side failed: the table has its row, and the exit status says so (gpu_session's summary)
    assert "| Proxima population --cudagraphs **graphs fell back: eager (_part_update)** | 50.00 |" in text
    assert "| PureJaxRL | failed: PureJaxRL: time budget 1s used up | | |" in text


def test_population_time_budget_caps_each_side(monkeypatch, tmp_path, capsys):
    mod = MODULES["population_vs_purejaxrl"]
    limits = []

    def purejaxrl(args, timeout=None):
        limits.append(timeout)
        raise subprocess.TimeoutExpired("purejaxrl", timeout)

    monkeypatch.setattr(mod, "run_purejaxrl", purejaxrl)
    monkeypatch.setattr(mod, "run_proxima", lambda args, run_dir, timeout=None: limits.append(timeout) or {
        "wall": 5.0, "train": 4.0, "mean_final_return": 500.0})
    out = tmp_path / "pop.md"
    code, _, _ = run_main("population_vs_purejaxrl", ["--device", "cpu", "--anchor", "a.py", "--timeout", "100", "--time-budget", "50",
                                                      "--out", str(out)], capsys)
    assert code == 1 and 45 < limits[0] <= 47 and limits[1] <= 47  # 1: PureJaxRL's side timed out
    text = out.read_text()
    assert "| PureJaxRL | failed: timed out after 47 s | | |" in text
    assert text.index("| Proxima population |") < text.index("| PureJaxRL |")  # Proxima's row first, whatever ran first


def test_population_time_budget_counts_the_imports_before_main(monkeypatch, tmp_path, capsys):
    """The script hands main the time of its first line: torch's import (seconds on a GPU machine,
    through vs_purejaxrl's proxima.bench) is inside --time-budget, as it is inside the step's limit."""
    mod = MODULES["population_vs_purejaxrl"]
    limits = []
    monkeypatch.setattr(mod, "run_purejaxrl", lambda args, timeout=None: limits.append(timeout) or {
        "wall": 5.0, "run_seconds": 4.0, "final_return_mean": 500.0})
    monkeypatch.setattr(mod, "run_proxima", lambda args, run_dir, timeout=None: limits.append(timeout) or {
        "wall": 5.0, "train": 4.0, "mean_final_return": 500.0})
    code = mod.main(["--device", "cpu", "--anchor", "a.py", "--time-budget", "50"], launched=time.perf_counter() - 10.0)
    capsys.readouterr()
    assert code == 0 and 35 < limits[0] <= 37
    source = (ROOT / "benchmarks" / "population_vs_purejaxrl.py").read_text()
    first_code = [line for line in source.split('"""', 2)[2].splitlines() if line and not line.startswith("#")]
    assert first_code[:3] == ["from __future__ import annotations", "import time", "LAUNCHED = time.perf_counter()"], first_code[:3]
    assert "sys.exit(main(launched=LAUNCHED))" in source


def test_population_runs_purejaxrl_without_the_warm_run_and_with_the_same_tail(monkeypatch):
    mod = MODULES["population_vs_purejaxrl"]
    seen = []

    class Proc:
        returncode, stderr = 0, ""
        stdout = json.dumps({"num_envs": 4, "run_seconds": 8.6, "final_return_mean": 500.0}) + "\n"

    monkeypatch.setattr(subprocess, "run", lambda cmd, **k: seen.append(cmd) or Proc())
    args = mod.build_parser().parse_args(["--anchor", "a.py", "--jax-python", "py"])
    args.total = int(args.total)
    assert mod.run_purejaxrl(args)["run_seconds"] == 8.6
    cmd = seen[0]
    assert "--no-warm-run" in cmd and cmd[cmd.index("--tail-frac") + 1] == "0.05" and cmd[-1] == "4x128x500000x256"


def write_metrics(path: Path, rows: list) -> Path:
    """A member's metrics.csv: (episodes, mean return of those episodes or None) per iteration."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["iteration,global_step,time,episodes,charts/episodic_return"]
    lines += [f"{i + 1},{(i + 1) * 512},0.1,{n},{'' if ret is None else ret}" for i, (n, ret) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_population_final_return_is_the_anchor_s_statistic_per_member(tmp_path):
    """The anchor's final_return_mean: per seed, the mean return of the episodes finished in the last
    ceil(5% of updates); then the mean over seeds. It compared with Proxima's last logged row."""
    mod = MODULES["population_vs_purejaxrl"]
    # 40 iterations: the last 2 (ceil(2.0)); 3 episodes of 100 then 1 of 500: (300 + 500) / 4, not the last row's 500
    rows = [(5, 20.0)] * 38 + [(3, 100.0), (1, 500.0)]
    assert mod.final_return(write_metrics(tmp_path / "a" / "metrics.csv", rows)) == 200.0
    # 41 iterations: ceil(2.05) = 3, an iteration with no finished episode counts for nothing
    rows = [(5, 20.0)] * 38 + [(2, 50.0), (0, None), (2, 150.0)]
    assert mod.final_return(write_metrics(tmp_path / "b" / "metrics.csv", rows)) == 100.0
    # none finished in the window: NaN (the anchor's null), left out of the mean over members
    rows = [(5, 20.0)] * 38 + [(0, None), (0, None)]
    assert math.isnan(mod.final_return(write_metrics(tmp_path / "c" / "metrics.csv", rows)))


def test_population_proxima_row_averages_the_members_final_returns(monkeypatch, tmp_path):
    mod = MODULES["population_vs_purejaxrl"]
    run_dir = tmp_path / "pop"
    write_metrics(run_dir / "m1" / "metrics.csv", [(5, 20.0)] * 19 + [(2, 300.0)])
    write_metrics(run_dir / "m2" / "metrics.csv", [(5, 20.0)] * 19 + [(4, 500.0)])
    write_metrics(run_dir / "m3" / "metrics.csv", [(5, 20.0)] * 19 + [(0, None)])
    (run_dir / "population.json").write_text(json.dumps({"wall_seconds": 3.0, "member_dirs": [{"dir": "m1"}, {"dir": "m2"}, {"dir": "m3"}]}))

    class Proc:
        returncode, stderr = 0, ""

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: Proc())
    args = mod.build_parser().parse_args(["--device", "cpu", "--agents", "3"])
    args.total = int(args.total)
    assert mod.run_proxima(args, run_dir)["mean_final_return"] == 400.0


# vs_purejaxrl: `stream_json_lines` replaced by a stand-in that prints the given lines
def fake_streams(monkeypatch, ours: list, theirs: list, kill_after: int = None, calls: list = None):
    mod = MODULES["vs_purejaxrl"]
    monkeypatch.setattr(mod, "jax_python_problem", lambda *a, **k: "")  # "py" stands for an interpreter with jax
    monkeypatch.setattr(mod, "bench_problem", lambda argv: "")  # VS_ARGS are a CUDA machine's; this one may have none
    printed = {"n": 0}

    def stream(cmd, env, timeout, cpus="all", on_line=None):
        if calls is not None:
            calls.append((cmd, env, timeout))
        lines = ours if "bench" in cmd else theirs
        for line in lines:
            if kill_after is not None and printed["n"] == kill_after:
                raise Killed
            printed["n"] += 1
            if on_line is not None:
                on_line(dict(line))
        return [dict(x) for x in lines], "", 0.99

    monkeypatch.setattr(mod, "stream_json_lines", stream)


def bench_line(n, sps, live=True):
    return {"num_envs": n, "train_sps": sps, "train_sps_min": sps * 0.9, "train_sps_max": sps * 1.1, "cudagraphs_live": live,
            "graph_parts": {"rollout": "graph", "advantages": "graph",
                            "update": "graph" if live else "eager: capture failed (operation not permitted)"}}


def pjr_line(n, sps, jit_s=6.0, warm_s=20.0):
    """The anchor's fields (purejaxrl_cartpole.py, run_config): ``compile_seconds`` is jit plus its
    whole untimed warm run; ``steps_per_second`` the TOTAL asked for, ``actual_*`` what was trained."""
    return {"num_envs": n, "steps_per_second": sps, "actual_steps_per_second": sps, "jit_only_seconds": jit_s,
            "first_run_seconds": warm_s, "warm_run": True, "compile_seconds": jit_s + warm_s}


VS_ARGS = ["--device", "cuda", "--cudagraphs", "--single-call", "--anchor", __file__, "--jax-python", "py", "--num-envs", "2048,65536",
           "--repeats", "2", "--seconds", "1"]


def test_vs_purejaxrl_killed_after_the_first_row_keeps_it(monkeypatch, tmp_path, capsys):
    fake_streams(monkeypatch, [bench_line(2048, 1e6), bench_line(65536, 5e6)],
                 [pjr_line(2048, 1e7), pjr_line(65536, 6e7), pjr_line(2048, 1e7, 1.5), pjr_line(65536, 6e7, 1.5)], kill_after=5)
    out = recorded_file(tmp_path)
    with pytest.raises(Killed):
        run_main("vs_purejaxrl", [*VS_ARGS, "--out", str(out)], capsys)
    text = section_of(out)
    assert "**Partial: 1 of 2 sizes complete so far.**" in text
    # 2,048 envs: both repeats of PureJaxRL in (round-major order: 2,048, 65,536, 2,048); 65,536: one of two
    assert "| 2,048 | 1.00M (900.0k-1.10M) | 10.00M (10.00M-10.00M) | 0.10 (0.09-0.11) | 0.99, - | 6.0 (1.5 cached) |" in text
    assert "| 65,536 | 5.00M (4.50M-5.50M) | 60.00M (60.00M-60.00M) |" in text


def test_vs_purejaxrl_reports_skipped_and_error_lines_and_graphs_that_fell_back(monkeypatch, tmp_path, capsys):
    calls = []
    fake_streams(monkeypatch, [bench_line(2048, 1e6, live=False), bench_line(65536, 5e6)],
                 [pjr_line(2048, 1e7), pjr_line(65536, 6e7),
                  {"num_envs": 2048, "skipped": "time budget 60.0s used up"}, {"num_envs": 65536, "error": "XlaRuntimeError: OOM"}],
                 calls=calls)
    out = tmp_path / "vs.md"
    code, _, _ = run_main("vs_purejaxrl", [*VS_ARGS, "--time-budget", "100", "--out", str(out)], capsys)
    text = out.read_text()
    assert code == 0 and "Partial" not in text
    row = next(line for line in text.splitlines() if line.startswith("| 2,048 |"))
    assert row.startswith("| 2,048 | **graphs fell back: eager** 1.00M (900.0k-1.10M) | 10.00M")
    assert "graphs fell back: eager (update: eager: capture failed (operation not permitted))" in row
    assert "PureJaxRL: skipped (time budget 60.0s used up)" in row
    assert "PureJaxRL: error: XlaRuntimeError: OOM" in next(line for line in text.splitlines() if line.startswith("| 65,536 |"))
    # Proxima measures training only; PureJaxRL round after round, with a budget under what is left, and JAX's cache
    (bench_cmd, _, bench_limit), (pjr_cmd, pjr_env, pjr_limit) = calls
    assert "--train-only" in bench_cmd and bench_limit <= 100 - 3 - 15
    configs = pjr_cmd[pjr_cmd.index("--configs") + 1:pjr_cmd.index("--time-budget")]
    assert configs == ["2048x16x2e+07", "65536x16x1e+08"] * 2
    budget = float(pjr_cmd[pjr_cmd.index("--time-budget") + 1])
    assert 80 <= budget <= 100 - 3 - 15 and budget < pjr_limit <= 100 - 3
    assert pjr_env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0" and Path(pjr_env["JAX_COMPILATION_CACHE_DIR"]).name.startswith(
        "proxima-jax-cache-")
    assert "--time-budget 100.0 --anchor-margin 15.0 --jax-cache on" in text


def test_vs_purejaxrl_without_any_pair_still_writes_the_table_and_fails(monkeypatch, tmp_path, capsys):
    mod = MODULES["vs_purejaxrl"]

    def stream(cmd, env, timeout, cpus="all", on_line=None):
        return [], "exit 1: CUDA out of memory", 1.0

    monkeypatch.setattr(mod, "stream_json_lines", stream)
    monkeypatch.setattr(mod, "jax_python_problem", lambda *a, **k: "")
    monkeypatch.setattr(mod, "bench_problem", lambda argv: "")  # VS_ARGS are a CUDA machine's; this one may have none
    out = tmp_path / "vs.md"
    code, _, err = run_main("vs_purejaxrl", [*VS_ARGS, "--out", str(out)], capsys)
    assert code == 1 and "no size was measured on both sides" in err
    assert "Proxima: exit 1: CUDA out of memory; PureJaxRL not run at this size" in out.read_text()


def test_vs_purejaxrl_compile_column_is_jit_only_not_the_warm_run(monkeypatch, tmp_path, capsys):
    """The anchor's compile_seconds is jit plus one whole untimed warm run (20 s here); the column,
    as benchmarks/README.md describes it, is the jit alone: cold, then the cached median."""
    fake_streams(monkeypatch, [bench_line(2048, 1e6)], [pjr_line(2048, 1e7, jit_s=6.0), pjr_line(2048, 1e7, jit_s=1.5)])
    out = tmp_path / "vs.md"
    code, _, _ = run_main("vs_purejaxrl", [*VS_ARGS, "--num-envs", "2048", "--out", str(out)], capsys)
    text = out.read_text()
    assert code == 0 and "| PureJaxRL jit s |" in text
    row = next(line for line in text.splitlines() if line.startswith("| 2,048 |"))
    assert row.endswith("| 6.0 (1.5 cached) |") and "26.0" not in row and "21.5" not in row


def test_vs_purejaxrl_counts_the_steps_purejaxrl_trained_not_the_total_asked(monkeypatch, tmp_path, capsys):
    """1,048,576 envs x 16 of 3.4e8: the anchor trains 20 whole updates (335,544,320 steps) and its
    steps_per_second divides the 3.4e8 asked for, 1.33% more. 2.0 s of timed run here."""
    asked, trained = 3.4e8, 20 * 1048576 * 16
    with_actual = dict(pjr_line(1048576, asked / 2.0), actual_steps_per_second=trained / 2.0)
    without = {k: v for k, v in with_actual.items() if k != "actual_steps_per_second"}
    without.update(actual_timesteps_per_seed=trained, num_seeds=1, run_seconds=2.0)  # an anchor with only the count
    for line in (with_actual, without):
        fake_streams(monkeypatch, [bench_line(1048576, 1.6e8)], [line])
        out = tmp_path / f"vs{len(line)}.md"
        args = [*VS_ARGS, "--num-envs", "1048576", "--repeats", "1", "--out", str(out)]
        code, _, _ = run_main("vs_purejaxrl", args, capsys)
        row = next(x for x in out.read_text().splitlines() if x.startswith("| 1,048,576 |"))
        assert code == 0 and "| 167.77M (167.77M-167.77M) |" in row and "170.00M" not in row, row
        assert "| 0.95 (0.86-1.05) |" in row  # 1.6e8 / 167.77M, not / 170M (0.94)


def test_vs_purejaxrl_gives_proxima_no_negative_time_limit(monkeypatch):
    """A start-up that took what --time-budget had for Proxima: a note per size, no process started
    with a limit below 1 s (it printed "Proxima: timed out after -6 s")."""
    mod = MODULES["vs_purejaxrl"]
    monkeypatch.setattr(mod, "stream_json_lines", boom)
    args = mod.build_parser().parse_args(VS_ARGS)
    rows = mod.single_call(args, {}, [2048, 65536], deadline=time.perf_counter() + 10.0)
    assert [r["notes"] for r in rows] == [["not run: 7 s of --time-budget left, not more than --anchor-margin 15 s"]] * 2


def test_vs_purejaxrl_time_budget_counts_from_the_script_s_first_line():
    """torch's import (through proxima.bench, ~4.5 s here, more on a GPU machine) is inside the budget:
    the script hands main the time its first line ran, before any import."""
    source = (ROOT / "benchmarks" / "vs_purejaxrl.py").read_text()
    first_code = [line for line in source.split('"""', 2)[2].splitlines() if line and not line.startswith("#")]
    assert first_code[:3] == ["from __future__ import annotations", "import time", "LAUNCHED = time.perf_counter()"], first_code[:3]
    assert 'sys.exit(main(launched=LAUNCHED))' in source


def test_stream_json_lines_hands_lines_over_as_they_come_and_kills_at_the_timeout():
    mod = MODULES["vs_purejaxrl"]
    seen = []
    code = "import json, time\nprint(json.dumps({'a': 1}), flush=True)\ntime.sleep(30)\nprint(json.dumps({'a': 2}))\n"
    t0 = time.perf_counter()
    lines, problem, cores = mod.stream_json_lines([sys.executable, "-c", code], dict(os.environ), 3.0, on_line=seen.append)
    assert time.perf_counter() - t0 < 20
    assert seen == lines == [{"a": 1}] and problem == "timed out after 3 s" and cores >= 0
    lines, problem, _ = mod.stream_json_lines([sys.executable, "-c", "import sys; print('{\"a\": 3}'); sys.exit('boom')"],
                                              dict(os.environ), 30)
    assert lines == [{"a": 3}] and problem == "exit 1: boom"


def test_vs_purejaxrl_proxima_command_parses_with_bench_and_measures_training_only():
    from proxima.cli import build_parser

    mod = MODULES["vs_purejaxrl"]
    args = mod.build_parser().parse_args(["--device", "cuda", "--cudagraphs"])
    bench = build_parser().parse_args(mod.proxima_cmd(args, "2048,65536", 3)[3:])
    assert bench.func.__module__ == "proxima.bench" and bench.train_only and bench.json and bench.cudagraphs


# ------------------------------------------------------------------------------------ mlp_kernel.py: "off" is the plain modules
KERNEL_FUNCTIONS = ("forward_block", "backward_block", "_forward_blocks", "backward_blocks", "mlp_forward")


def count_kernel_calls(monkeypatch) -> dict:
    """{mlp_cpu function: calls}, counted from now on (the kernel's entry points, whoever calls them)."""
    from proxima import mlp_cpu

    calls = dict.fromkeys(KERNEL_FUNCTIONS, 0)
    for name in KERNEL_FUNCTIONS:
        def counted(*a, _real=getattr(mlp_cpu, name), _name=name, **k):
            calls[_name] += 1
            return _real(*a, **k)

        monkeypatch.setattr(mlp_cpu, name, counted)
    return calls


def test_mlp_kernel_off_runs_no_row_block_kernel_anywhere_in_an_iteration(monkeypatch, tmp_path):
    """With only mlp_cpu.eligible off, grad_cpu.BlockGradients still ran the kernel in the update
    (forward_block 32 and backward_block 32 calls an iteration at 1,024 envs x 16 steps), so "off"
    did not measure the plain modules. Each setting of mlp_kernel.py, one iteration of a Trainer."""
    from proxima.config import PPOConfig
    from proxima.trainer import Trainer

    mod = MODULES["mlp_kernel"]
    n = 1024
    trainer = Trainer(PPOConfig(env_id="CartPole-v1", backend="native", num_envs=n, num_steps=16, total_timesteps=n * 16 * 100,
                                threads=1, progress=False, eval_episodes=0, checkpoint_every=0), run_dir=tmp_path / "run", quiet=True)
    calls = count_kernel_calls(monkeypatch)
    seen = {}
    try:
        for name in ("on", "off", "on"):
            with mod.SETTINGS[name]():
                trainer.train_iteration()
            seen[name] = dict(calls)
            calls.update(dict.fromkeys(calls, 0))
    finally:
        trainer.close()
    assert seen["off"] == dict.fromkeys(KERNEL_FUNCTIONS, 0), seen["off"]
    assert seen["on"]["forward_block"] > 0 and seen["on"]["backward_block"] > 0, seen["on"]  # the count sees the kernel
    # and "off" put everything back: the second "on" ran the kernel again
    from proxima import grad_cpu, mlp_cpu

    assert mlp_cpu.eligible.__name__ == "eligible" and grad_cpu.BlockGradients.covers.__name__ == "covers"


# ------------------------------------------------------------------------------------ machine, date and load in every table
def test_learning_table_names_when_its_runs_finished(tmp_path):
    """learning.py's header named the machines and the load but no date: it now gives the span of
    its runs' recorded finish times, and says so when a run has none."""
    import learning

    def run(seed, finished=None):
        r = {"env_id": "CartPole-v1", "seed": seed, "eval_mean": 500.0, "eval_std": 0.0, "steps": 1000, "wall_s": 10.0,
             "train_s": 9.0, "final_episodic_return": 500.0, "command": f"proxima train CartPole-v1 --seed {seed}", "config": {},
             "machine": "EPYC box", "load_start": 1.0, "load_end": 2.0}
        return dict(r, finished=finished) if finished else r

    out = tmp_path / "learning.md"
    runs = [run(1, "2026-12-02T06:39:11"), run(2, "2026-11-29T21:42:02"), run(3)]
    learning.write_markdown(out, runs, [])
    text = out.read_text()
    assert "- runs finished: 2026-11-29 21:42 to 2026-12-02 06:39 (1 run(s) without a date)\n" in text
    assert "- machine: EPYC box" in text and "- load average (1 min) during the runs: 1.0 to 2.0" in text
    assert learning.load_state(out)[0] == runs  # the new line is no header the records are read from


def test_rlhf_prints_the_machine_date_and_load_above_its_table(monkeypatch, capsys):
    """rlhf.py printed its settings and table only: no CPU, date or load. Its models and workers are
    stand-ins here."""
    import rlhf

    monkeypatch.setattr(rlhf, "build_assets", lambda folder: None)
    monkeypatch.setattr(rlhf, "run_worker", lambda *a: {"step_s": 0.5, "cpu_s": 0.4, "tokens_per_s": 1000.0, "length": 32.0})
    monkeypatch.setattr(sys, "argv", ["rlhf.py", "--repeats", "1", "--libraries", "proxima"])
    assert rlhf.main() == 0
    out = capsys.readouterr().out
    assert re.search(r"^CPU: .+, torch threads: 1; GPU: .+; \d{4}-\d\d-\d\d \d\d:\d\d[+-]\d\d:\d\d, load average \(1 min\) "
                     r"\d+\.\d\d at start, \d+\.\d\d at end$", out, flags=re.M), out
    assert out.index("load average") < out.index("| Proxima |")


# ------------------------------------------------------------------------------------ a child's refusal is one line
# A `proxima train` / `proxima bench` child that refused its flags (exit 2, one line) became a Python
# traceback of the script, exit 1. Checked up front where cheap; a child's failure is the script's one line.
def failing_run(last_line: str, calls: list = None):
    def run(cmd, *args, **kwargs):
        if calls is not None:
            calls.append(list(cmd))
        return subprocess.CompletedProcess(cmd, 2, "", f"some warning\n{last_line}\n")

    return run


def test_population_speed_turns_a_failed_train_into_its_one_line(monkeypatch, tmp_path, capsys):
    calls = []
    monkeypatch.setattr(subprocess, "run", failing_run("proxima train: error: --num-envs 256: too many", calls))
    out = tmp_path / "pop.md"
    code, _, err = run_main("population_speed", ["--sizes", "1,8", "--repeats", "2", "--out", str(out)], capsys)
    assert (code, err.splitlines()) == (2, ["population_speed.py: error: proxima train (1 seed, round 1) failed (exit 2): "
                                            "proxima train: error: --num-envs 256: too many"])
    assert len(calls) == 1 and not out.exists()  # stopped at the first failure, no table


def test_threads_refuses_a_size_bench_would_refuse_before_measuring(no_work, tmp_path, capsys):
    out = tmp_path / "t.md"
    code, _, err = run_main("threads", ["--num-envs", "8,1000000000", "--rounds", "1", "--out", str(out)], capsys)
    (line,) = err.splitlines()
    assert code == 2 and line.startswith("threads.py: error: one minibatch (--num-envs 1000000000 x --num-steps 16 / --num-minibatches 4 = 4,000,000,000 rows) needs ~") and "free" in line
    assert not out.exists()


def test_threads_turns_a_failed_bench_into_its_one_line(monkeypatch, tmp_path, capsys):
    def stream(cmd, env, timeout, cpus="all", on_line=None):
        return [], "exit 2: proxima bench: error: CUDA is busy", 1.0

    monkeypatch.setattr(MODULES["vs_purejaxrl"], "stream_json_lines", stream)
    out = tmp_path / "t.md"
    code, _, err = run_main("threads", ["--num-envs", "8", "--rounds", "1", "--seconds", "0.5", "--out", str(out)], capsys)
    (line,) = err.splitlines()
    assert code == 2 and line.startswith("threads.py: error: `proxima bench CartPole-v1 --device cpu ")
    assert line.endswith("--threads 1 --train-only --json` failed (exit 2: proxima bench: error: CUDA is busy)")
    assert not out.exists()


def test_vs_revision_refuses_a_size_bench_would_refuse_before_making_a_worktree(no_work, tmp_path, capsys):
    out = tmp_path / "rev.md"
    code, _, err = run_main("vs_revision", ["--rev", "HEAD", "--num-envs", "1000000000", "--out", str(out)], capsys)
    (line,) = err.splitlines()
    assert code == 2 and line.startswith("vs_revision.py: error: one minibatch (--num-envs 1000000000 x --num-steps 16 / --num-minibatches 4 = 4,000,000,000 rows) needs ~")
    assert not out.exists()


def test_vs_revision_bench_sps_raises_the_child_s_last_line(monkeypatch):
    mod = MODULES["vs_revision"]
    monkeypatch.setattr(subprocess, "run", failing_run("proxima bench: error: --num-envs 4096: unknown flag --json"))
    args = SimpleNamespace(num_envs=4096, seconds=1.0)
    with pytest.raises(tables.ChildFailed) as e:
        mod.bench_sps(Path("/tmp/tree"), args, "revision abc")
    assert str(e.value) == ("proxima bench of revision abc failed (exit 2): proxima bench: error: --num-envs 4096: "
                            "unknown flag --json")


def test_vs_revision_turns_a_failed_bench_into_one_line_and_removes_the_worktree(monkeypatch, tmp_path, capsys):
    mod = MODULES["vs_revision"]

    def bench(tree, args, name=""):
        if name.startswith("revision"):
            raise tables.ChildFailed(f"proxima bench of {name} failed (exit 2): proxima bench: error: --threads: unknown")
        return 1000.0

    monkeypatch.setattr(mod, "bench_sps", bench)
    real, git = subprocess.run, []

    def fake_git(cmd, *args, **kwargs):
        if list(cmd[:2]) == ["git", "rev-parse"]:
            return real(cmd, *args, **kwargs)
        git.append(cmd[2])
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_git)
    out = tmp_path / "rev.md"
    code, _, err = run_main("vs_revision", ["--rev", "HEAD", "--rounds", "2", "--seconds", "1", "--out", str(out)], capsys)
    (line,) = err.splitlines()
    assert code == 2 and re.fullmatch(r"vs_revision\.py: error: proxima bench of revision [0-9a-f]{10} failed \(exit 2\): "
                                      r"proxima bench: error: --threads: unknown", line), line
    assert git == ["add", "remove"] and not out.exists()  # the worktree is removed, no table appended


# ------------------------------------------------------------------------------------ vs_purejaxrl's peer interpreter
def fake_python(tmp_path: Path, stderr: str, code: int) -> str:
    path = tmp_path / "fake-python"
    path.write_text(f"#!/bin/sh\necho \"{stderr}\" >&2\nexit {code}\n")
    path.chmod(0o755)
    return str(path)


def test_vs_purejaxrl_probes_the_jax_python_before_measuring(monkeypatch, tmp_path, capsys):
    """--jax-python /nonexistent raised FileNotFoundError after Proxima was measured, and with
    --single-call left a "Partial" section in --out."""
    mod = MODULES["vs_purejaxrl"]
    monkeypatch.setattr(mod, "stream_json_lines", boom)
    out = tmp_path / "vs.md"
    args = ["--single-call", "--anchor", __file__, "--num-envs", "8", "--repeats", "1", "--out", str(out)]
    code, _, err = run_main("vs_purejaxrl", [*args, "--jax-python", "/nonexistent/python"], capsys)
    assert (code, err.splitlines()) == (2, ["vs_purejaxrl.py: error: --jax-python /nonexistent/python: cannot run it (No such "
                                            "file or directory); give an interpreter with jax, chex, flax, optax, gymnax"])
    no_chex = fake_python(tmp_path, "ModuleNotFoundError: No module named 'chex'", 1)
    code, _, err = run_main("vs_purejaxrl", [*args, "--jax-python", no_chex], capsys)
    assert (code, err.splitlines()) == (2, [f"vs_purejaxrl.py: error: --jax-python {no_chex}: cannot import PureJaxRL's packages "
                                            "(ModuleNotFoundError: No module named 'chex'); install jax, chex, flax, optax, "
                                            "gymnax there, or run `make jax-venv` to make .jax-venv, the default --jax-python "
                                            "(benchmarks/anchors/README.md)"])
    assert not out.exists()
    assert mod.jax_python_problem(fake_python(tmp_path, "", 0), dict(os.environ), 30) == ""


def test_stream_json_lines_reports_a_command_that_cannot_start():
    mod = MODULES["vs_purejaxrl"]
    assert mod.stream_json_lines(["/nonexistent/python", "x.py"], dict(os.environ), 5) == (
        [], "cannot start /nonexistent/python: No such file or directory", 0.0)


# ------------------------------------------------------------------------------------ cpu_parts --only
def test_cpu_parts_only_takes_exact_names_or_text_they_contain():
    mod = MODULES["cpu_parts"]
    names = mod.part_names()
    acting = "acting, 4,096 envs (no_grad): actor, sample, log-prob"
    assert mod.select_parts(acting, names) == ([acting], "")  # an exact name: that part alone
    assert len(mod.select_parts("acting", names)[0]) == 5  # text: every part whose name contains it
    assert mod.select_parts("tanh numpy", names)[0] == [n for n in names if n.startswith("tanh numpy")]
    both = f"advantages (4,096 x 16); {acting}"
    assert mod.select_parts(both, names) == ([acting, "advantages (4,096 x 16)"], "")  # table order
    assert mod.select_parts(f"{acting}; nomatch", names) == (
        [], f"--only '{acting}; nomatch': 'nomatch' matches no part (the parts: {PARTS})")


def test_cpu_parts_results_say_how_to_measure_each_table_s_rows():
    """Each table of cpu-parts.md, with the last cpu_parts.py command given with it (its Command:
    line, or the note under it for a table recorded when the parts were fewer), selects as many
    parts as the table has rows: `--only tanh` recorded 3 rows and selects 7 today."""
    import shlex

    mod = MODULES["cpu_parts"]
    text = (ROOT / "benchmarks" / "results" / "cpu-parts.md").read_text()
    tables_ = text.split("CPU time per call, ")[1:]
    assert len(tables_) >= 6
    for block in tables_:
        rows = [ln for ln in block.splitlines() if ln.startswith("| ") and not ln.startswith("| part |")]
        command = re.findall(r"`(python benchmarks/cpu_parts\.py[^`]*)`", block)[-1]
        words = shlex.split(command)
        only = words[words.index("--only") + 1] if "--only" in words else None
        selected, problem = mod.select_parts(only, mod.part_names())
        assert (len(selected), problem) == (len(rows), ""), command
