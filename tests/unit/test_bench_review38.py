"""Review 38's findings on the benchmark scripts: accel.py, rlhf.py and distributed.py report the
median (min-max) of per-round ratios (benchmarks/README.md's rule), with accel.py's modes alternating
within a round; a ratio table says when a round's process got under 0.9 of a core; and the scripts
that write into the committed results by default say so in --help (distributed.py prints only)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import accel  # noqa: E402
import distributed  # noqa: E402
import rlhf  # noqa: E402
import tables  # noqa: E402

from tests.unit.test_benchmark_scripts import run_main  # noqa: E402


# ------------------------------------------------------------------------------------ per-round ratios
def test_round_ratios_pair_each_round_not_the_medians():
    # medians 300 / 100 would say 3.00; the rounds say 2, 3 and 6
    assert tables.round_ratios([200.0, 300.0, 600.0], [100.0, 100.0, 100.0]) == [2.0, 3.0, 6.0]
    assert tables.round_ratios([400.0, 300.0, 300.0], [100.0, 150.0, 300.0]) == [4.0, 2.0, 1.0]


def test_starved_note_only_when_a_round_got_under_0_9_of_a_core():
    assert tables.starved_note([0.95, 1.0, float("nan")]) == ""
    note = tables.starved_note([0.95, 0.4, 1.0])
    assert "rounds starved of CPU: ratios unreliable" in note and "1 of 3" in note and "lowest 0.40" in note


class FakeTimed:
    """accel.Timed's stand-in: iteration() gives the next (steps/s, cores used) of ``rounds``."""

    def __init__(self, rounds, log, name):
        self.rounds, self.log, self.name = list(rounds), log, name

    def iteration(self):
        self.log.append(self.name)
        return self.rounds.pop(0)

    def close(self):
        return {"graphs": None, "compile_eager": []}


def test_accel_alternates_modes_within_a_round_and_reports_per_round_ratios(monkeypatch, tmp_path, capsys):
    log = []
    # eager's rounds 100, 200, 400 against bf16's 300, 200, 400: per round 3, 1, 1 -> median 1.00 (medians: 300/200 = 1.50)
    timings = {"eager": [(100.0, 1.0), (200.0, 1.0), (400.0, 1.0)], "bf16": [(300.0, 1.0), (200.0, 1.0), (400.0, 1.0)]}

    def prepare(env_id, n, overrides, mode, device, iterations, threads):
        name = "bf16" if mode else "eager"
        return FakeTimed(timings[name], log, name)

    monkeypatch.setattr(accel, "prepare", prepare)
    out = tmp_path / "accel.md"
    code, _, _ = run_main("accel", ["--cases", "0", "--modes", "eager,bf16", "--repeats", "3", "--out", str(out)], capsys)
    text = out.read_text()
    assert code == 0
    assert log == ["eager", "bf16"] * 3  # A, B, A, B, ...: not all of eager's repeats and then bf16's
    assert "| CartPole 64 envs | 200 (100-400), 1.00x | 300 (200-400), 1.00 (1.00-3.00)x |" in text
    assert "starved" not in text


def test_accel_notes_rounds_starved_of_cpu(monkeypatch, tmp_path, capsys):
    timings = {"eager": [(100.0, 1.0)], "bf16": [(150.0, 0.3)]}
    monkeypatch.setattr(accel, "prepare", lambda env_id, n, o, mode, *a: FakeTimed(timings["bf16" if mode else "eager"], [], ""))
    code, printed, _ = run_main("accel", ["--cases", "0", "--modes", "eager,bf16", "--repeats", "1"], capsys)
    assert code == 0
    assert "**Note: rounds starved of CPU: ratios unreliable.** 1 of 2 timed measurements" in printed


def test_rlhf_ratio_is_the_median_of_per_round_ratios_and_notes_starved_rounds(monkeypatch, capsys):
    # rounds: TRL 0.4, 0.9, 1.0 s against Proxima 0.2, 0.1, 0.5 s -> 2, 9, 2: median 2.00 (medians: 0.9/0.2 = 4.50)
    steps = {"trl": iter([0.4, 0.9, 1.0]), "proxima": iter([0.2, 0.1, 0.5])}
    calls = []

    def worker(python, library, *a):
        calls.append(library)
        s = next(steps[library])
        return {"step_s": s, "cpu_s": s * (0.5 if s == 0.1 else 1.0), "tokens_per_s": 100.0, "length": 32.0}

    monkeypatch.setattr(rlhf, "build_assets", lambda folder: None)
    monkeypatch.setattr(rlhf, "TRL_VENV", Path(sys.executable).parent.parent)  # any python that exists
    monkeypatch.setattr(rlhf, "run_worker", worker)
    code = rlhf.main(["--repeats", "3"])
    out = capsys.readouterr().out
    assert code == 0 and calls == ["proxima", "trl"] * 3
    assert "TRL / Proxima, per round: seconds per step 2.00 (2.00-9.00)x; CPU seconds per step 2.00 (2.00-18.00)x" in out
    assert "rounds starved of CPU: ratios unreliable.** 1 of 6" in out and "lowest 0.50" in out


def test_distributed_vs_1_process_is_the_median_of_per_round_ratios(monkeypatch, capsys):
    # rounds: 1 proc 100, 200, 100; 2 procs 300, 220, 110 -> 3.0, 1.1, 1.1: median 1.10 (medians: 220/100 = 2.20)
    sps = iter([100.0, 300.0, 200.0, 220.0, 100.0, 110.0])
    shares = iter([1.0, 0.95, 1.0, 0.95, 1.0, 0.5])

    def run_once(p, args_fn, workdir, tag):
        return {"procs": p, "sps": next(sps), "wall": 1.0, "load": 1.0, "share": next(shares)}

    monkeypatch.setattr(distributed, "run_once", run_once)
    code = distributed.main(["--procs", "1,2", "--repeats", "3"])
    out = capsys.readouterr().out
    assert code == 0
    assert "| 2 | 128 | 220 | 110 - 300 | 1.10 (1.10-3.00)x | 3 |" in out
    assert "| 1 | 64 | 100 | 100 - 200 | 1.00 (1.00-1.00)x | 3 |" in out
    assert "rounds starved of CPU: ratios unreliable.** 1 of 6" in out


# ------------------------------------------------------------------------------------ defaults of --out
def test_distributed_without_out_writes_nothing(monkeypatch, capsys):
    record = ROOT / "benchmarks" / "results" / "distributed-cpu.md"
    before = record.read_bytes()
    saved = []
    import proxima.bench

    monkeypatch.setattr(proxima.bench, "save_markdown", lambda path, text: saved.append(path))
    monkeypatch.setattr(distributed, "run_once",
                        lambda p, f, w, t: {"procs": p, "sps": 100.0, "wall": 1.0, "load": 1.0, "share": 1.0})
    assert distributed.main(["--procs", "1", "--repeats", "1"]) == 0
    assert saved == [] and record.read_bytes() == before
    assert "wrote " not in capsys.readouterr().out


def test_scripts_writing_the_record_by_default_name_it_in_help():
    for script, default in (("sb3_compare.py", "benchmarks/results/sb3-compare.md"),
                            ("learning.py", "benchmarks/results/learning.md")):
        r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--help"], capture_output=True, text=True,
                           timeout=60, env={"COLUMNS": "400", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
        out_help = " ".join(r.stdout.split("--out OUT", 2)[-1].split())
        assert r.returncode == 0 and f"(default: the committed record, {default};" in out_help, (script, r.stdout[-400:])
