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


# ------------------------------------------------------------------------------------ mutation review
def test_round_ratios_refuse_sides_of_different_round_counts_and_skip_a_zero_base():
    import pytest

    with pytest.raises(ValueError, match="2 rounds of one side against 1 of the other"):
        tables.round_ratios([1.0, 2.0], [1.0])
    assert tables.round_ratios([1.0, 2.0], [0.0, 1.0]) == [2.0]


def test_cpu_share_is_per_process_and_nan_without_wall_time():
    assert tables.cpu_share(2.0, 1.0, 2) == 1.0
    assert tables.cpu_share(3.0, 2.0) == 1.5
    share = tables.cpu_share(1.0, 0.0, 1)
    assert share != share  # nan: no time passed


def test_starved_note_starts_below_0_9_of_a_core():
    assert tables.starved_note([0.9]) == ""
    assert "1 of 1" in tables.starved_note([0.89])


def test_accel_report_on_a_gpu_has_no_starved_note():
    """A process waiting for its GPU is idle by design: a share of 0.1 there says nothing of starvation."""
    rows = [("CartPole 64 envs", {"eager": {"sps": [100.0], "shares": [0.1]}})]
    p = accel.build_parser()
    for device, starved in (("cuda", False), ("cpu", True)):
        text = accel.report(p, p.parse_args(["--device", device, "--modes", "eager"]), ["eager"], rows, tables.started())
        assert ("rounds starved of CPU" in text) is starved, (device, text[-400:])


class Closing:
    """A trainer stand-in that records its close()."""

    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True


class BreakingTimed(FakeTimed):
    """FakeTimed whose iteration() raises ``error`` at its ``fail_at``-th call (1-based), with a trainer to close."""

    def __init__(self, rounds, log, name, fail_at=None, error="boom"):
        super().__init__(rounds, log, name)
        self.fail_at, self.error, self.calls, self.trainer = fail_at, error, 0, Closing()

    def iteration(self):
        self.calls += 1
        if self.calls == self.fail_at:
            self.log.append(self.name + "!")
            raise RuntimeError(self.error)
        return super().iteration()


def _mode_name(mode):
    return "+".join(f"{k}={v}" for k, v in sorted(mode.items())) or "eager"


def test_accel_base_trainer_lasts_one_round_per_other_mode(monkeypatch, capsys):
    got = {}

    def prepare(env_id, n, overrides, mode, device, iterations, threads):
        got[_mode_name(mode)] = iterations
        return FakeTimed([(100.0, 1.0)] * 10, [], "")

    monkeypatch.setattr(accel, "prepare", prepare)
    code, _, _ = run_main("accel", ["--cases", "0", "--modes", "eager,bf16,compile", "--repeats", "2"], capsys)
    assert code == 0
    assert got == {"eager": 4, "amp=bf16": 2, "compile=True": 2}


def test_accel_with_every_other_mode_failing_exits_1_naming_the_first_failure(monkeypatch, capsys):
    def prepare(env_id, n, overrides, mode, device, iterations, threads):
        if mode:
            raise RuntimeError(f"{_mode_name(mode)} broke")
        return FakeTimed([(100.0, 1.0)] * 4, [], "")

    monkeypatch.setattr(accel, "prepare", prepare)
    code, _, err = run_main("accel", ["--cases", "0", "--modes", "eager,bf16,compile", "--repeats", "1"], capsys)
    assert code == 1
    assert err.strip().splitlines()[-1] == "accel.py: error: no case and mode was measured; the first failed: amp=bf16 broke"
    assert "Traceback" not in err


def test_accel_closes_a_mode_whose_iteration_raised(monkeypatch, capsys):
    made = []

    def prepare(env_id, n, overrides, mode, device, iterations, threads):
        made.append(BreakingTimed([(100.0, 1.0)] * 4, [], _mode_name(mode), fail_at=2 if mode else None))
        return made[-1]

    monkeypatch.setattr(accel, "prepare", prepare)
    code, printed, _ = run_main("accel", ["--cases", "0", "--modes", "eager,bf16", "--repeats", "2"], capsys)
    assert code == 0 and "| failed: boom |" in printed
    assert made[1].trainer.closed


def test_accel_timed_closes_its_trainer_when_the_warm_up_fails(monkeypatch):
    import pytest

    import proxima.trainer

    built = []

    class FailingTrainer(Closing):
        def __init__(self, cfg, run_dir=None, quiet=False):
            super().__init__()
            built.append(self)

        def train_iteration(self):
            raise RuntimeError("compile failed")

    monkeypatch.setattr(proxima.trainer, "Trainer", FailingTrainer)
    with pytest.raises(RuntimeError, match="compile failed"):
        accel.Timed("CartPole-v1", 4, {}, {"compile": True}, "cpu", 1, 1)
    assert len(built) == 1 and built[0].closed


def test_accel_a_failing_base_is_its_own_failure_and_later_modes_run_alone(monkeypatch, tmp_path, capsys):
    """The base's 2nd iteration raises while it alternates with bf16: the base's cell fails, bf16 keeps its
    first round's ratio and finishes alone, compile never alternates with the broken base."""
    log, made = [], {}

    def prepare(env_id, n, overrides, mode, device, iterations, threads):
        name = _mode_name(mode)
        made[name] = BreakingTimed([(100.0, 1.0), (200.0, 1.0), (300.0, 1.0)], log, name,
                                   fail_at=2 if name == "eager" else None, error="base broke")
        return made[name]

    monkeypatch.setattr(accel, "prepare", prepare)
    out = tmp_path / "accel.md"
    code, _, err = run_main("accel", ["--cases", "0", "--modes", "eager,bf16,compile", "--repeats", "3",
                                      "--out", str(out)], capsys)
    assert code == 0
    assert log == ["eager", "amp=bf16", "eager!", "amp=bf16", "amp=bf16"] + ["compile=True"] * 3
    assert made["eager"].trainer.closed
    assert ("| CartPole 64 envs | failed: base broke | 200 (100-300), 1.00 (1.00-1.00)x (timed alone: the base failed) "
            "| 200 (100-300) (timed alone: the base failed) |") in out.read_text()
    lines = [line.split()[3:] for line in err.splitlines() if line.startswith("CartPole 64 envs")]
    assert [line[0] for line in lines] == ["bf16", "compile", "eager"]  # the base's line last
    assert " ".join(lines[1]).endswith("(timed alone: the base failed)") and lines[-1] == ["eager", "failed:", "base", "broke"]


def test_accel_the_base_line_says_it_was_timed_when_only_the_first_mode_failed(monkeypatch, capsys):
    def prepare(env_id, n, overrides, mode, device, iterations, threads):
        if mode.get("amp"):
            raise RuntimeError("bf16 broke")
        return FakeTimed([(100.0, 1.0)] * 4, [], "")

    monkeypatch.setattr(accel, "prepare", prepare)
    code, _, err = run_main("accel", ["--cases", "0", "--modes", "eager,bf16,compile", "--repeats", "2"], capsys)
    assert code == 0
    base = [line for line in err.splitlines() if line.split()[3:4] == ["eager"]]
    assert len(base) == 1 and "median" in base[0] and "failed" not in base[0], err


# ------------------------------------------------------------------------------------ learning.py's header
def _learning_run(seed):
    return {"env_id": "CartPole-v1", "seed": seed, "eval_mean": 500.0, "eval_std": 0.0, "steps": 1000, "wall_s": 10.0,
            "train_s": 9.0, "final_episodic_return": 500.0, "command": f"proxima train CartPole-v1 --seed {seed}",
            "config": {}, "machine": "EPYC box", "load_start": 1.0, "load_end": 2.0, "finished": "2026-12-02T06:39:11"}


def test_learning_header_keeps_the_recorded_mujoco_exception_and_names_the_code(monkeypatch, tmp_path):
    """The committed files' header says the MuJoCo rows are not like-for-like and which code the rows ran on:
    a rerun of learning.py writes the same paragraph and a code line naming the commit it runs at."""
    import learning

    import proxima.train_state

    out = tmp_path / "learning.md"
    monkeypatch.setattr(proxima.train_state, "git_state", lambda: ("abcdef1234567890", False))
    learning.write_markdown(out, [_learning_run(1)], [])
    text = out.read_text()
    recorded = (ROOT / "benchmarks" / "results" / "learning.md").read_text()
    assert text.split("\n\n")[1] == recorded.split("\n\n")[1]  # the explanation paragraph, word for word
    code = [line for line in text.splitlines() if line.startswith("- code: ")]
    assert len(code) == 1 and "written by learning.py at commit abcdef1 on " in code[0], code
    assert code[0].endswith("so a row's command rerun today need not give its number: the pass counts are the claim")
    lines = text.splitlines()
    assert lines.index(code[0]) == lines.index("- training: device ?, ? torch thread(s) (--threads ?); "
                                               "one run at a time per learning.py process") + 1
    monkeypatch.setattr(proxima.train_state, "git_state", lambda: (None, None))
    learning.write_markdown(out, [_learning_run(1)], [])
    assert "at a copy that is not a git checkout (no commit known) on " in out.read_text()
