"""The benchmark scripts (benchmarks/*.py) refuse bad arguments with one line before measuring,
append to results files without deleting what they hold, and record the machine and the full
command. Nothing here measures: each script's measuring function is replaced by a stand-in."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import tables  # noqa: E402  (benchmarks/tables.py)

SCRIPTS = ("hostmem", "mlp_kernel", "threads", "cpu_parts", "vs_revision", "vs_purejaxrl", "solve_time",
           "population_speed", "population_vs_purejaxrl", "accel", "sb3_compare", "distributed")
MODULES = {name: importlib.import_module(name) for name in SCRIPTS}  # imported here: their import noise is not the test's
#: what each script runs to measure (a process, a Trainer, a venv): replaced by ``boom`` in ``no_work``
MEASURING = {"hostmem": ["measure"], "threads": ["run_json"], "vs_revision": ["bench_sps"], "solve_time": ["run_seed"],
             "population_speed": ["measure"], "vs_purejaxrl": ["run_json_lines", "alternating", "single_call"],
             "accel": ["measure", "Trainer"], "population_vs_purejaxrl": ["run_proxima", "run_purejaxrl"],
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
    ("solve_time", ["--seeds", "5-1"], "--seeds '5-1': expected seeds like 1-16 or 1,5,9 (a range low-high, ascending)"),
    ("solve_time", ["--seeds", ""], "--seeds '': expected seeds like 1-16 or 1,5,9 (a range low-high, ascending)"),
    ("solve_time", ["--seeds", "abc"], "--seeds 'abc': expected seeds like 1-16 or 1,5,9 (a range low-high, ascending)"),
    ("solve_time", ["--preset", "nosuch", "--seeds", "1,2"],
     "--preset 'nosuch': no such preset for CartPole-v1 (available: default, fast, gpu; see `proxima presets`)"),
    ("solve_time", ["--set", "lr"], "--set lr: expected FIELD=VALUE, e.g. lr=3e-3"),
    ("population_speed", ["--sizes", ""], "--sizes '': expected a comma-separated list of positive integers, e.g. 1,4,64"),
    ("population_speed", ["--sizes", "0"], "--sizes '0': expected a comma-separated list of positive integers, e.g. 1,4,64"),
    ("population_speed", ["--repeats", "0"], "--repeats 0: must be at least 1"),
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
@pytest.fixture
def fake_accel(monkeypatch):
    monkeypatch.setattr(MODULES["accel"], "measure", lambda *a, **k: [1000.0, 2000.0, 3000.0])


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
    assert "| CartPole 64 envs | 2,000 [1,000-3,000] (1.00x) |" in out


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


def test_every_seed_failing_appends_nothing(monkeypatch, tmp_path, capsys):
    fake_seeds(monkeypatch, {1: (0.4, "proxima train: error: boom"), 2: (0.5, "proxima train: error: boom")})
    out = tmp_path / "solve.md"
    code, _, err = run_main("solve_time", ["--seeds", "1,2", "--out", str(out)], capsys)
    assert (code, err.splitlines()) == (2, ["solve_time.py: error: every seed failed; seed 1: proxima train: error: boom"])
    assert not out.exists()


# ------------------------------------------------------------------------------------ item 10
def test_machine_line_names_the_gpu_the_date_and_the_load(monkeypatch):
    import torch

    line = tables.machine_line(1, tables.started())
    assert re.search(r"CPU: .+, \d+ cores; torch \S+, torch threads: 1; GPU: \S.*; Python \S+; CPU tanh: \w+; "
                     r"\d{4}-\d\d-\d\d \d\d:\d\d, load average \(1 min\) \d+\.\d\d at start, \d+\.\d\d at end$", line), line
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
    monkeypatch.setattr(mod, "run_proxima", lambda args, run_dir: {"wall": 3.0, "train": 2.0, "mean_final_return": 500.0})
    monkeypatch.setattr(mod, "run_purejaxrl", lambda args: {"wall": 5.0, "run_seconds": 4.0, "final_return_mean": 500.0})
    out = tmp_path / "pop.md"
    code, _, _ = run_main("population_vs_purejaxrl", ["--device", "cpu", "--agents", "2", "--anchor", "an chor.py",
                                                      "--jax-python", "py", "--out", str(out)], capsys)
    text = out.read_text()
    assert code == 0 and "CPU: " in text and "GPU: " in text and "PureJaxRL training s / Proxima training s: 2.00" in text
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
    monkeypatch.setattr(mod, "bench_sps", lambda tree, args: 1000.0)
    real = subprocess.run

    def git(cmd, *args, **kwargs):  # the worktree is not made: the measurement is a stand-in
        if list(cmd[:2]) == ["git", "rev-parse"]:
            return real(cmd, *args, **kwargs)
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
