"""What the benchmark numbers rest on: the timed windows of ``proxima bench`` (``measure``), the
results file that runs write section by section (``benchmarks/tables.Section``), and the cells that
--cudagraphs times eagerly. Nothing here measures a Trainer: a fake clock and fake lines stand in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from proxima import bench

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import tables  # noqa: E402  (benchmarks/tables.py)


# ------------------------------------------------------------------------------------ measure
TICK = 1 / 1024  # a call of about 1 ms, exact in binary: the sums below are exact


class FakeClock:
    """perf_counter that moves only when the fake function runs: ``times`` (seconds) one by one."""

    def __init__(self, times):
        self.now, self.calls, self.times = 0.0, 0, iter(times)

    def perf_counter(self) -> float:
        return self.now

    def fn(self) -> None:
        self.calls += 1
        self.now += next(self.times)


def fake_measure(monkeypatch, times, seconds: float, repeats: int) -> tuple:
    """(durations, steps/s of 1 step per call, fake clock) of ``bench.measure`` over calls taking ``times``."""
    clock = FakeClock(times)
    monkeypatch.setattr(bench, "time", SimpleNamespace(perf_counter=clock.perf_counter))
    durations = []
    sps = bench.measure(clock.fn, 1, seconds, repeats, SimpleNamespace(type="cpu"), durations)
    return durations, sps, clock


def test_one_stalled_warm_up_call_does_not_shrink_the_timed_windows(monkeypatch):
    # the warm-up stops once 20% of --seconds has passed: with 1 ms calls and a 1/8 s stall on call
    # 100, call 100 is its last one, the one the old sizing read (windows of 7 calls, 7 ms)
    times = [TICK] * 99 + [TICK + 0.125] + [TICK] * 10_000
    durations, sps, clock = fake_measure(monkeypatch, times, 1.0, 3)
    assert clock.calls == 100 + 3 * 1024  # the stall ended the warm-up; then 1024 calls a window
    assert durations == pytest.approx([1.0, 1.0, 1.0])
    assert sps == pytest.approx([1024.0] * 3)


def test_a_slow_first_call_and_a_stall_among_three_long_warm_up_calls(monkeypatch):
    # calls of 0.4 s: the warm-up makes 3 (lazy init first, a stall last); a window is 2 calls
    durations, _, _ = fake_measure(monkeypatch, [3.0, 0.4, 2.0] + [0.4] * 100, 1.0, 2)
    assert durations == pytest.approx([0.8, 0.8])


# ------------------------------------------------------------------------------------ Section
def test_two_sections_on_one_file_and_a_note_added_meanwhile_are_all_kept(tmp_path, capsys):
    out = tmp_path / "results.md"
    out.write_bytes(b"# results\r\n\r\nwritten by hand, caf\xe9\r\n")
    a, b = tables.Section(str(out), "a.py"), tables.Section(str(out), "b.py")
    a.update("## A\n\nrow a1\n")
    b.update("## B\n\nrow b1\n")
    with out.open("ab") as f:  # a note added by hand while both run
        f.write(b"\nnote added mid-run\n")
    a.update("## A\n\nrow a1\nrow a2\n")
    b.update("## B\n\nrow b1\nrow b2\n")
    assert a.finish("## A\n\nrow a1\nrow a2\nrow a3\n") == 0
    assert b.finish("## B\n\nrow b1\nrow b2\nrow b3\n") == 0
    capsys.readouterr()
    # each section where it was first written, the rest byte for byte; finish drops the markers
    assert out.read_bytes() == (b"# results\r\n\r\nwritten by hand, caf\xe9\r\n"
                                b"\n## A\n\nrow a1\nrow a2\nrow a3\n"
                                b"\n## B\n\nrow b1\nrow b2\nrow b3\n"
                                b"\nnote added mid-run\n")
    assert [p.name for p in tmp_path.iterdir()] == ["results.md"]


def test_a_partial_section_is_marked_and_replaced_in_place(tmp_path):
    out = tmp_path / "results.md"
    section = tables.Section(str(out), "x.py")
    section.update("## X\n\nrow 1\n")
    out.write_text(out.read_text() + "\nafter\n")
    section.update("## X\n\nrow 1\nrow 2\n")
    lines = out.read_text().splitlines()
    assert lines[0].startswith("<!-- section ") and lines[0].endswith(" of x.py: rewritten as the run goes -->")
    assert lines[1:5] == ["## X", "", "row 1", "row 2"]
    assert lines[5].startswith("<!-- end of section ") and lines[6:] == ["", "after"]
    # the file replaced meanwhile (its section gone): the section is appended again, not lost
    out.write_text("# new file\n")
    section.update("## X\n\nrow 1\nrow 2\nrow 3\n")
    assert out.read_text().startswith("# new file\n\n<!-- section ") and "row 3\n<!-- end of section " in out.read_text()


def test_two_processes_writing_one_results_file_at_once_keep_both_sections(tmp_path):
    out = tmp_path / "results.md"
    out.write_text("# results\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import tables\n"
            "name = sys.argv[3]; s = tables.Section(sys.argv[2], name)\n"
            "for i in range(40):\n"
            "    s.update(f'## {name}\\n\\n' + ''.join(f'row {j}\\n' for j in range(i + 1)))\n"
            "s.finish(f'## {name}\\n\\ndone\\n')\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(ROOT / "benchmarks"), str(out), name],
                              stdout=subprocess.DEVNULL) for name in ("P", "Q")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    text = out.read_text()
    assert text.startswith("# results\n\n") and "## P\n\ndone\n" in text and "## Q\n\ndone\n" in text
    assert "<!--" not in text and "row" not in text
    assert [p.name for p in tmp_path.iterdir()] == ["results.md"]


# ------------------------------------------------------------------------------------ --cudagraphs
GRAPHS = {"rollout": "graph", "advantages": "graph", "update": "graph"}


def test_cudagraphs_marks_env_and_rollout_as_timed_eager(tmp_path):
    args = SimpleNamespace(env_id="CartPole-v1", threads=1, repeats=1, preset=None, compile=False, cudagraphs=True,
                           amp="none", train_only=False, num_envs="2048", device="cuda", backend="native", seconds=1.0,
                           max_gym_envs=4096, num_steps=None, vector=None)
    line = bench.Line("native", 2048, {"env": [3e6], "rollout": [2e6], "train": [1e6]}, graphs=dict(GRAPHS),
                      seconds={"env": [1.0], "rollout": [1.0], "train": [1.0]})
    (row,) = bench.table_rows([line])
    assert row[2:5] == ("3.00M (3.00M-3.00M) timed eager", "2.00M (2.00M-2.00M) timed eager", "1.00M (1.00M-1.00M)")
    d = bench.json_line(line, args, None, "cuda")
    assert d["timed_eager"] == ["env", "rollout"] and d["cudagraphs_live"] is True
    # --train-only under --cudagraphs: nothing was timed eagerly; without --cudagraphs: not applicable
    assert bench.Line("native", 2048, {"train": [1e6]}, graphs=dict(GRAPHS)).timed_eager == []
    plain = bench.Line("native", 2048, {"env": [3e6], "rollout": [2e6], "train": [1e6]})
    assert plain.timed_eager is None and "timed eager" not in " ".join(bench.table_rows([plain])[0])
    out = tmp_path / "bench.md"
    import torch

    bench.write_markdown(out, args, [line], None, torch.device("cpu"), bench.datetime.now(), (0.0, 0.0))
    text = out.read_text()
    assert "--cudagraphs: only train replays the graphs; env and rollout are timed with eager calls ('timed eager')." in text
    assert "| native | 2,048 | 3.00M (3.00M-3.00M) timed eager | 2.00M (2.00M-2.00M) timed eager | 1.00M" in text


def test_help_says_env_and_rollout_are_timed_eagerly_with_cudagraphs():
    import argparse

    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    text = " ".join(p.format_help().split())
    assert "only the train column replays them: env and rollout are timed eagerly, marked 'timed eager'" in text
    assert '"timed_eager" lists the measures timed with eager calls' in text
