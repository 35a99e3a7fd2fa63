"""``proxima bench``: a tiny run prints one JSON line per backend and size and writes its table."""

from __future__ import annotations

import json

import pytest

from proxima.cli import main
import warm_python


def test_tiny_bench_prints_json_for_both_backends_and_writes_the_table(tmp_path, capsys):
    out = tmp_path / "bench.md"
    code = main(["bench", "CartPole-v1", "--num-envs", "2,8", "--num-steps", "16", "--seconds", "0.05", "--repeats", "1", "--json",
                 "--out", str(out)])
    assert code == 0
    lines = [json.loads(row) for row in capsys.readouterr().out.splitlines() if row.strip()]
    assert {(d["backend"], d["num_envs"]) for d in lines} == {(b, n) for b in ("native", "gymnasium") for n in (2, 8)}
    for d in lines:
        assert d["skipped"] is None
        for m in ("env", "rollout", "train"):
            assert d[f"{m}_sps"] > 0
            assert d[f"{m}_sps_min"] <= d[f"{m}_sps"] <= d[f"{m}_sps_max"]
    text = out.read_text()
    assert "proxima bench CartPole-v1 --num-envs 2,8" in text  # the command that reproduces it
    assert "CPU:" in text and "torch" in text and "threads: 1" in text
    assert text.count("| native |") == 2 and text.count("| gymnasium |") == 2


def test_gymnasium_above_the_cap_is_reported_as_skipped(tmp_path, capsys):
    code = main(["bench", "CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--seconds", "0.02", "--repeats", "1",
                 "--max-gym-envs", "2", "--out", str(tmp_path / "b.md")])
    assert code == 0
    table = capsys.readouterr().out
    assert "skipped (> --max-gym-envs 2)" in table
    assert "skipped" in (tmp_path / "b.md").read_text()


@pytest.mark.parametrize("argv, message", [
    (["--num-envs", "4,x"], "--num-envs '4,x'"),
    (["--backend", "native", "--num-envs", "2"], "no native env"),
    (["--device", "cuda:7"], "--device"),
])
def test_bad_options_are_one_line_errors(argv, message, tmp_path, capsys):
    env_id = "LunarLander-v3" if "native" in argv else "CartPole-v1"
    if argv[0] == "--device":
        import torch

        if torch.cuda.device_count() > 7:
            pytest.skip("this machine has a cuda:7")
    code = main(["bench", env_id, *argv, "--seconds", "0.01", "--repeats", "1", "--out", str(tmp_path / "b.md")])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and err.count("error:") == 1
    assert not (tmp_path / "b.md").exists()


@pytest.mark.parametrize("seconds", ["inf", "nan", "0", "-1"])
def test_seconds_that_is_not_a_positive_finite_number_is_refused(seconds, tmp_path, capsys):
    """--seconds inf was accepted and the warm-up loop, which runs until that much time has passed, never ended."""
    out = tmp_path / "b.md"
    code = main(["bench", "CartPole-v1", "--num-envs", "2", "--repeats", "1", "--seconds", seconds, "--out", str(out)])
    shown = f"{float(seconds):g}"
    assert (code, capsys.readouterr().err.splitlines()) == (2, [f"proxima bench: error: --seconds {shown}: must be a positive number"])
    assert not out.exists()


def test_without_out_the_bench_only_prints(tmp_path, capsys, monkeypatch):
    """The recorded tables under benchmarks/results are never overwritten by a plain `proxima bench`."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    code = main(["bench", "CartPole-v1", "--num-envs", "2", "--num-steps", "16", "--backend", "native", "--seconds", "0.01",
                 "--repeats", "1"])
    out, err = capsys.readouterr()
    assert code == 0 and "native" in out.split("\n", 2)[2]  # a table row below the header
    assert "wrote" not in err
    assert [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")] == ["benchmarks", "benchmarks/results"]


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_threads_benchmark_writes_both_counts_and_the_ratio(tmp_path):
    """benchmarks/threads.py: --threads 1 and 2 as whole `proxima bench` processes, one row per env count."""
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "threads.md"
    proc = warm_python.run([sys.executable, str(root / "benchmarks" / "threads.py"), "--num-envs", "8", "--rounds", "1",
                           "--seconds", "0.05", "--out", str(out)], capture_output=True, text=True, cwd=root, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "| envs | --threads 1 steps/s | --threads 2 steps/s | 2 / 1 per round |" in text
    row = next(line for line in text.splitlines() if line.startswith("| 8 |"))
    assert row.count("k (") == 2 and "python benchmarks/threads.py --num-envs 8" in text


def test_an_existing_out_file_gets_a_new_section_and_keeps_what_it_holds(tmp_path, capsys):
    """benchmarks/results/bench-CartPole-v1-cpu.md holds analysis written by hand under its table."""
    out = tmp_path / "bench.md"
    recorded = "# proxima bench CartPole-v1 on cpu\n\n| old table |\n\n## Reading the table\n\nwritten by hand\n"
    out.write_text(recorded)
    code = main(["bench", "CartPole-v1", "--num-envs", "2", "--num-steps", "16", "--backend", "native", "--seconds", "0.01",
                 "--repeats", "1", "--out", str(out)])
    err = capsys.readouterr().err
    text = out.read_text()
    assert code == 0 and f"appended a section to {out}" in err
    assert text.startswith(recorded + "\n## proxima bench CartPole-v1 on cpu, ")
    assert text.count("| native | 2 |") == 1 and "```\nproxima bench CartPole-v1 --num-envs 2 " in text
    assert [p.name for p in tmp_path.iterdir()] == ["bench.md"]  # no temporary file left


def test_help_says_out_appends():
    import argparse

    from proxima.bench import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    assert "when FILE exists, they are appended to it as a new dated section" in " ".join(p.format_help().split())


def test_train_only_times_training_alone(tmp_path, capsys):
    """--train-only: what a training-throughput comparison (benchmarks/vs_purejaxrl.py) needs, without
    the env-alone and rollout-alone measurements, which take a third of the time per size."""
    out = tmp_path / "bench.md"
    code = main(["bench", "CartPole-v1", "--num-envs", "2", "--num-steps", "16", "--backend", "native", "--seconds", "0.02",
                 "--repeats", "1", "--train-only", "--json", "--out", str(out)])
    assert code == 0
    (d,) = [json.loads(row) for row in capsys.readouterr().out.splitlines() if row.strip()]
    assert d["train_only"] is True and d["train_sps"] > 0
    assert d["env_sps"] is None and d["rollout_sps"] is None
    # no --cudagraphs: nothing to report about graphs
    assert d["cudagraphs"] is False and d["cudagraphs_live"] is None and d["graph_parts"] is None
    text = out.read_text()
    assert "--train-only" in text and "| native | 2 | - | - | " in text and "--train-only: env and rollout were not measured" in text


def test_help_says_what_train_only_and_cudagraphs_live_mean():
    import argparse

    from proxima.bench import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    text = " ".join(p.format_help().split())
    assert "--train-only time whole training iterations only, not the env alone nor the rollout alone" in text
    assert '"cudagraphs_live" says whether every part was replayed as a graph' in text


def test_graphs_that_fell_back_are_reported_not_passed_off_as_replays():
    from types import SimpleNamespace

    from proxima.bench import Line, json_line, table_rows

    args = SimpleNamespace(env_id="CartPole-v1", threads=1, repeats=1, preset=None, compile=False, cudagraphs=True, amp="none",
                           train_only=True)
    live = Line("native", 2048, {"train": [1e6]}, graphs={"rollout": "graph", "advantages": "graph", "update": "graph"})
    fell = Line("native", 65536, {"train": [2e6]},
                graphs={"rollout": "graph", "advantages": "graph", "update": "eager: capture failed (boom)"})
    assert json_line(live, args, None, "cuda")["cudagraphs_live"] is True
    d = json_line(fell, args, None, "cuda")
    assert d["cudagraphs_live"] is False and d["graph_parts"]["update"] == "eager: capture failed (boom)"
    rows = table_rows([live, fell])
    assert rows[0][4] == "1.00M (1.00M-1.00M)"
    assert rows[1][4] == "2.00M (2.00M-2.00M) graphs fell back: eager (update: eager: capture failed (boom))"
