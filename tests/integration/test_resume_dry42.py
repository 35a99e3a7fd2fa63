"""`proxima resume RUN --dry-run` points to the command that dry-runs a resume, and that command, as
given, checks a real run's resume and writes nothing."""

from __future__ import annotations

import re

import pytest

from tests.cli_helpers import one_error_line, run_main, snapshot, tiny_cartpole_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A finished tiny CartPole run without --eval-every, so without checkpoints/best.pt."""
    return tiny_cartpole_run(tmp_path_factory, "dry42")


def test_the_dry_run_resume_points_to_works_on_a_run_and_writes_nothing(run_dir, capsys):
    capsys.readouterr()
    code, _, err = run_main(["resume", str(run_dir), "--dry-run"], capsys)
    line = one_error_line(err, "proxima resume")
    assert code == 2 and "--trust-run" not in line
    pointed = re.search(r"`proxima (train --resume RUN --dry-run)`", line).group(1).split()
    before = snapshot(run_dir)
    code, out, err = run_main([str(run_dir) if word == "RUN" else word for word in pointed], capsys)
    assert code == 0, err
    assert out.startswith("env_id: CartPole-v1\n") and f"\nrun_dir: {run_dir}\n" in out
    assert snapshot(run_dir) == before


def test_eval_checkpoints_best_without_best_pt_gives_the_runs_line(run_dir, capsys):
    """RUN/checkpoints --best is RUN --best: the line names the run and where it records --eval-every."""
    capsys.readouterr()
    assert not (run_dir / "checkpoints" / "best.pt").exists()
    code, out, err = run_main(["eval", str(run_dir), "--best"], capsys)
    assert code == 2 and out == ""
    expected = one_error_line(err, "proxima eval")
    assert str(run_dir) in expected
    code, out, err = run_main(["eval", str(run_dir / "checkpoints"), "--best"], capsys)
    assert code == 2 and out == ""
    assert one_error_line(err, "proxima eval") == expected


def test_the_dry_run_of_a_resume_of_the_checkpoints_folder_is_the_runs(run_dir, capsys):
    """`proxima resume RUN/checkpoints` resumes RUN, so its dry run prints RUN's config (it raised an
    IndexError: RUN/checkpoints/checkpoints holds no step_*.pt)."""
    capsys.readouterr()
    before = snapshot(run_dir)
    outs = []
    for path in (run_dir, run_dir / "checkpoints"):
        code, out, err = run_main(["train", "--resume", str(path), "--dry-run"], capsys)
        assert code == 0, err
        outs.append(out)
    assert outs[0] == outs[1] and f"\nrun_dir: {run_dir}\n" in outs[1]
    assert snapshot(run_dir) == before
