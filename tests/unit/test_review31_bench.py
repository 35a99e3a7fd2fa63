"""Review 31's findings on the benchmark scripts and `proxima bench`: accel.py checks every case and
mode before measuring and writes nothing when nothing was measured; vs_purejaxrl.py checks Proxima's
bench flags before the JAX check; a size, mode or case named twice is measured once; results files
are appended under one lock; threads.py and `bench --json` say when --threads 2 paired nothing;
`bench --out` probes the folder; --threshold must be finite; solve_time.py resolves --device first."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from tests.unit.test_benchmark_scripts import (MODULES, ROOT, as_prepare, boom, fake_streams, no_work,  # noqa: F401 - no_work: fixture
                                               pjr_line, run_main)


# ------------------------------------------------------------------------------------ 1. accel.py checks first
def test_accel_refuses_a_config_the_trainer_would_refuse_before_measuring(no_work, tmp_path, capsys):
    from proxima.config import max_threads

    out, too_many = tmp_path / "accel.md", max_threads() + 1
    code, _, err = run_main("accel", ["--cases", "0,1", "--modes", "eager", "--threads", str(too_many), "--out", str(out)], capsys)
    (line,) = err.splitlines()
    assert code == 2 and line.startswith(f"accel.py: error: --threads {too_many}: must be at most {max_threads()} "), line
    assert "PPOConfig" not in line and not out.exists()
    code, _, err = run_main("accel", ["--cases", "0", "--modes", "eager,cudagraphs", "--device", "cpu", "--out", str(out)], capsys)
    assert (code, err.splitlines()) == (2, ["accel.py: error: --modes eager,cudagraphs: mode 'cudagraphs' (CartPole 64 envs): "
                                            "--cudagraphs needs a CUDA device (got --device cpu); drop it from --modes"])
    assert not out.exists()


def test_accel_with_no_cell_measured_exits_1_and_writes_nothing(monkeypatch, tmp_path, capsys):
    def measure(*args, **kwargs):
        raise RuntimeError("inductor: boom\nmore")

    monkeypatch.setattr(MODULES["accel"], "prepare", as_prepare(measure))
    out = tmp_path / "accel.md"
    code, printed, err = run_main("accel", ["--cases", "0,1", "--modes", "eager,bf16", "--repeats", "1", "--out", str(out)], capsys)
    assert code == 1 and not out.exists()
    assert "| CartPole 64 envs | failed: inductor: boom | failed: inductor: boom |" in printed  # the table is still printed
    assert err.splitlines()[-1] == ("accel.py: error: no case and mode was measured (nothing written to --out); "
                                    "the first failed: inductor: boom")


# ------------------------------------------------------------------------------------ 4, 5. named twice, measured once
def test_accel_measures_a_mode_named_twice_once(monkeypatch, tmp_path, capsys):
    calls = []

    def measure(env_id, n, overrides, mode, *a):
        calls.append(dict(mode))
        return {"sps": [1000.0 * len(calls)], "graphs": None}

    monkeypatch.setattr(MODULES["accel"], "prepare", as_prepare(measure))
    out = tmp_path / "accel.md"
    code, _, _ = run_main("accel", ["--cases", "0", "--modes", "eager,eager,bf16", "--repeats", "1", "--out", str(out)], capsys)
    text = out.read_text()
    assert code == 0 and calls == [{}, {"amp": "bf16"}]
    assert "| task | eager | bf16 |" in text
    assert "| CartPole 64 envs | 1,000 (1,000-1,000), 1.00x | 2,000 (2,000-2,000), 2.00 (2.00-2.00)x |" in text


def test_vs_purejaxrl_measures_a_size_named_twice_once(monkeypatch, tmp_path, capsys):
    calls = []
    ours = {"num_envs": 64, "train_sps": 1e4, "train_sps_min": 1e4, "train_sps_max": 1e4}
    fake_streams(monkeypatch, [ours], [pjr_line(64, 1e5)], calls=calls)
    out = tmp_path / "vs.md"
    code, _, _ = run_main("vs_purejaxrl", ["--num-envs", "64,64", "--repeats", "1", "--seconds", "0.3", "--anchor", __file__,
                                           "--jax-python", "py", "--out", str(out)], capsys)
    rows = [line for line in out.read_text().splitlines() if line.startswith("| 64 |")]
    assert code == 0 and len(calls) == 2, calls  # one round of one size: Proxima, then PureJaxRL
    assert rows == ["| 64 | 10.0k (10.0k-10.0k) | 100.0k (100.0k-100.0k) | 0.10 (0.10-0.10) | 0.99, 0.99 | 6.0 |"]


# ------------------------------------------------------------------------------------ 2. vs_purejaxrl.py: bench's flags first
def test_vs_purejaxrl_refuses_what_bench_would_before_the_jax_check(monkeypatch, no_work, tmp_path, capsys):
    monkeypatch.setattr(MODULES["vs_purejaxrl"], "jax_python_problem", boom)  # ~15 s on a real interpreter
    out = tmp_path / "vs.md"
    code, _, err = run_main("vs_purejaxrl", ["--seconds", "700", "--anchor", __file__, "--out", str(out)], capsys)
    assert (code, err.splitlines()) == (2, ["vs_purejaxrl.py: error: --seconds 700: must be at most 600 (the target of one "
                                            "timed repeat, 10 minutes)"])
    assert not out.exists()


# ------------------------------------------------------------------------------------ 3. one lock for every results writer
WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {benchmarks!r})
    from proxima.bench import save_markdown
    import tables
    out, tag, count, go, ready = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5])
    ready.touch()  # imported (torch with proxima.bench): the test says go once both writers are here
    while not go.exists():
        time.sleep(0.005)
    for i in range(count):
        if tag == "a":
            save_markdown(out, f"# run {{tag}} {{i}}\\n\\nbody\\n")
        else:
            tables.emit(f"## run {{tag}} {{i}}\\n\\nbody", out, script="w.py")
""")


def test_two_runs_appending_to_one_results_file_at_once_keep_every_section(tmp_path):
    """save_markdown (proxima bench --out) and tables.emit read the file and replaced it without a
    lock: two runs at once lost 288 of 600 sections. Both now take the results folder's lock."""
    sync = tmp_path / "sync"  # go and the writers' ready files, away from the results folder's listing
    sync.mkdir()
    out, go, count = tmp_path / "results.md", sync / "go", 150
    ready = [sync / f"ready-{tag}" for tag in "ab"]
    code = WRITER.format(benchmarks=str(ROOT / "benchmarks"))
    procs = [subprocess.Popen([sys.executable, "-c", code, str(out), tag, str(count), str(go), str(r)], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for tag, r in zip("ab", ready)]
    try:
        # go only once both have imported (a fixed wait was shorter than torch's import on a loaded
        # machine): both then start writing together, whatever the machine's speed
        deadline = time.monotonic() + 120
        while not all(r.exists() for r in ready):
            for proc in procs:
                assert proc.poll() is None, f"a writer ended before it was ready: {proc.communicate()[1]}"
            assert time.monotonic() < deadline, "the writers were not ready after 120 s"
            time.sleep(0.01)
        go.touch()
        for proc in procs:
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    headings = [line for line in out.read_text().splitlines() if line.startswith("#")]
    for tag in "ab":
        got = sorted(int(h.split()[-1]) for h in headings if h.split()[-2] == tag)
        assert got == list(range(count)), f"{tag}: {count - len(got)} of {count} sections lost"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.md", "sync"]  # no lock file beside the results


def test_tables_and_bench_share_one_lock():
    import tables

    import proxima.bench

    assert tables.folder_lock is proxima.bench.folder_lock


# ------------------------------------------------------------------------------------ 6. --threads 2 that pairs nothing
def test_threads_marks_a_size_whose_batches_are_too_small_to_pair(monkeypatch, tmp_path, capsys):
    def run_json(cmd, env, timeout):
        envs, threads = int(cmd[cmd.index("--num-envs") + 1]), int(cmd[cmd.index("--threads") + 1])
        return {"num_envs": envs, "train_sps": 1000.0 * threads, "cores_used": 1.0, "intra_op": 1,
                "paired": threads == 2 and envs >= 512}

    monkeypatch.setattr(MODULES["threads"], "run_json", run_json)
    out = tmp_path / "t.md"
    code, _, _ = run_main("threads", ["--num-envs", "64,4096", "--rounds", "1", "--seconds", "0.5", "--out", str(out)], capsys)
    rows = {line.split(" | ")[0]: line for line in out.read_text().splitlines() if line.startswith("| ") and "envs" not in line}
    assert code == 0
    assert "| 2.0k (2.0k-2.0k) not paired (batch below 2,048 rows: same as --threads 1) |" in rows["| 64"]
    assert "not paired" not in rows["| 4,096"]


def test_bench_json_says_the_intra_op_threads_and_whether_a_batch_was_paired(capsys):
    import json

    import torch

    from proxima import bench
    from proxima.cli import build_parser

    args = build_parser().parse_args(["bench", "CartPole-v1", "--backend", "native", "--num-envs", "64,512", "--num-steps", "16",
                                      "--threads", "2", "--repeats", "1", "--seconds", "0.05", "--train-only", "--json"])
    before = torch.get_num_threads()
    try:
        assert bench.run(args) == 0
    finally:
        torch.set_num_threads(before)  # bench sets --threads for the process it owns; here that is pytest's
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    # 64 envs: rollout batches of 64 rows, minibatches of 256, all below side_thread.MIN_ROWS (2,048)
    assert [(x["num_envs"], x["intra_op"], x["paired"]) for x in lines] == [(64, 1, False), (512, 1, True)]


def test_bench_threads_text_says_when_threads_2_paired_nothing():
    from proxima.bench import Line, threads_text

    assert threads_text([Line("native", 64, intra_op=1, paired=False)], 2) == (
        "1 (--threads 2: not paired, every batch below 2,048 rows: the same as --threads 1)")
    assert threads_text([Line("native", 64, intra_op=1, paired=False)], 1) == "1"


# ------------------------------------------------------------------------------------ 7. an --out no file can be made in
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc takes no new file on Linux only")
def test_bench_out_in_a_folder_that_takes_no_file_is_refused_before_measuring(monkeypatch, tmp_path, capsys):
    from proxima import bench
    from proxima.cli import build_parser

    monkeypatch.setattr(bench, "bench_line", boom)
    args = build_parser().parse_args(["bench", "CartPole-v1", "--num-envs", "4", "--out", "/proc/nope.md"])
    assert bench.run(args) == 2
    assert capsys.readouterr().err.splitlines() == [
        "proxima bench: error: --out /proc/nope.md: cannot create a file in /proc (No such file or directory); "
        "give a file in a folder you can write"]
    # a folder that takes files: nothing is left behind, no folder of a missing path is made
    assert bench.out_file_problem(tmp_path / "a" / "b" / "r.md") == "" and bench.out_file_problem(tmp_path / "r.md") == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc takes no new file on Linux only")
def test_a_script_s_out_in_a_folder_that_takes_no_file_is_refused_first(no_work, capsys):
    code, _, err = run_main("threads", ["--num-envs", "8", "--out", "/proc/nope.md"], capsys)
    assert (code, err.splitlines()) == (2, ["threads.py: error: --out /proc/nope.md: cannot create a file in /proc (No such file "
                                            "or directory); give a file in a folder you can write"])


# ------------------------------------------------------------------------------------ 8, 9. --threshold, --device
@pytest.mark.parametrize("name", ["population_speed", "solve_time"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_threshold_that_is_not_a_finite_number_is_refused(name, value, no_work, tmp_path, capsys):
    out = tmp_path / "r.md"
    code, _, err = run_main(name, ["--threshold", value, "--out", str(out)], capsys)
    assert (code, err.splitlines()) == (2, [f"{name}.py: error: --threshold {value}: must be a finite number"])
    assert not out.exists()


def test_solve_time_refuses_cuda_without_it_before_any_seed(monkeypatch, no_work, tmp_path, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a machine without CUDA, whatever this one has
    out = tmp_path / "solve.md"
    code, _, err = run_main("solve_time", ["--device", "cuda", "--seeds", "1-3", "--out", str(out)], capsys)
    assert (code, err.splitlines()) == (2, ["solve_time.py: error: --device 'cuda': CUDA is not usable here (run `proxima "
                                            "doctor`); use --device cpu"])
    assert not out.exists()
