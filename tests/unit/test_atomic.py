"""atomic.py: a file is replaced whole, never written through a symbolic link, and a failure leaves
the old file and no temp file."""

from __future__ import annotations

import os

import pytest

from proxima.atomic import atomic_open, leads_outside, write_atomic
from proxima.bench import append_file, write_file


def test_a_link_at_the_target_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("PRECIOUS")
    (tmp_path / "run").mkdir()
    target = tmp_path / "run" / "report.md"
    target.symlink_to(victim)
    write_atomic(target, "report")
    assert victim.read_text() == "PRECIOUS"
    assert not target.is_symlink() and target.read_text() == "report"
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["report.md"]


def test_links_at_predictable_temp_names_are_left_alone(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("PRECIOUS")
    for name in ("metrics.csv.tmp", f".metrics.csv.{os.getpid()}.tmp"):
        (tmp_path / name).symlink_to(victim)
    with atomic_open(tmp_path / "metrics.csv", "w", newline="") as f:
        f.write("a,b\n")
    assert victim.read_text() == "PRECIOUS" and (tmp_path / "metrics.csv").read_text() == "a,b\n"


def test_an_error_keeps_the_old_file_and_leaves_no_temp_file(tmp_path):
    target = tmp_path / "eval.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_open(target, "w") as f:
            f.write("half")
            raise RuntimeError("disk full")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["eval.json"]


def test_the_file_gets_the_mode_open_would_give_it(tmp_path):
    umask = os.umask(0o022)
    try:
        write_atomic(tmp_path / "a.txt", b"x")
    finally:
        os.umask(umask)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o644


def test_leads_outside(tmp_path):
    run = tmp_path / "run"
    (run / "inside").mkdir(parents=True)
    (run / "in").symlink_to(run / "inside")
    (run / "out").symlink_to(tmp_path)
    (run / "dangling").symlink_to(tmp_path / "nowhere")
    assert not leads_outside(run / "in", run) and not leads_outside(run / "missing", run)
    assert leads_outside(run / "out", run) and leads_outside(run / "dangling", run) and leads_outside(run / "out" / "x", run)


def test_bench_results_files_are_written_whole_and_keep_a_users_link(tmp_path):
    real = tmp_path / "results" / "bench.md"
    real.parent.mkdir()
    real.write_text("a\n")
    link = tmp_path / "bench.md"
    link.symlink_to(real)  # the user's own link to the results file: updated through it, as before
    append_file(link, "b\n")
    assert link.is_symlink() and real.read_text() == "a\nb\n"
    write_file(tmp_path / "new" / "x.md", "x")
    assert (tmp_path / "new" / "x.md").read_text() == "x"
    assert not [p for p in tmp_path.rglob("*.tmp")]
