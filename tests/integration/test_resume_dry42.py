"""`proxima resume RUN --dry-run` points to the command that dry-runs a resume, and that command, as
given, checks a real run's resume and writes nothing."""

from __future__ import annotations

import re

from tests.cli_helpers import one_error_line, run_main, snapshot, tiny_cartpole_run


def test_the_dry_run_resume_points_to_works_on_a_run_and_writes_nothing(tmp_path_factory, capsys):
    run_dir = tiny_cartpole_run(tmp_path_factory, "dry42")
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
