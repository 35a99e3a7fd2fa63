"""Populations as docs/populations.md describes them: --nproc on a population's resume names the one
fix (drop it) instead of a circle between `proxima resume` and `train --resume`; a population says
up front, and records in population.json, whether its members equal their single runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import one_error_line, run_main, snapshot, tiny_population

DOCS = Path(__file__).resolve().parents[2] / "docs" / "populations.md"
POPULATION_NPROC = "--nproc: a population trains in one process; drop --nproc"


@pytest.fixture(scope="module")
def population(tmp_path_factory):
    return tiny_population(tmp_path_factory, "pop41", 128)


@pytest.mark.parametrize("argv", [
    ["resume", "{run}", "--nproc", "2"],
    ["resume", "--nproc", "2", "{run}"],
    ["resume", "{run}/checkpoints/{ckpt}", "--nproc=2"],
    ["train", "--resume", "{run}", "--nproc", "2", "--total-timesteps", "256"],
    ["train", "--resume", "{run}/checkpoints/{ckpt}", "--nproc", "2"],
])
def test_nproc_on_a_population_resume_says_drop_nproc_and_changes_nothing(population, capsys, argv):
    ckpt = sorted(p.name for p in (population / "checkpoints").iterdir())[-1]
    before = snapshot(population)
    code, out, err = run_main([w.format(run=population, ckpt=ckpt) for w in argv], capsys)
    assert code == 2
    # before: resume pointed at `train --resume POP --nproc K`, which pointed back at `proxima resume POP`
    assert one_error_line(err, f"proxima {argv[0]}") == POPULATION_NPROC
    assert snapshot(population) == before


def test_target_kl_help_says_how_to_match_sb3s_one_and_three_halves_threshold():
    from proxima.cli import build_parser

    train = build_parser()._subparsers._group_actions[0].choices["train"]
    help_text = next(a.help for a in train._actions if "--target-kl" in a.option_strings)
    # SB3 stops at approx_kl > 1.5 * target_kl; here the threshold is target_kl itself
    assert "to match SB3's target_kl T, give 1.5*T" in help_text


def test_the_docs_comparison_example_is_the_reports_own_output(tmp_path, capsys):
    from tests.integration import test_review34_compare as compare

    run = compare._population(tmp_path / "S", compare.SWEEP)  # the sweep docs/populations.md names
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    report = (run / "report.md").read_text().splitlines()
    docs = DOCS.read_text()
    example = docs[docs.index("```markdown\n## Comparison"):].split("```", 2)[1].splitlines()
    verdict = next(line for line in example if line.startswith("Y = "))
    shown = verdict[:verdict.index(" (one-sided permutation test ...)")]
    assert any(line.startswith(shown + " (one-sided permutation test") for line in report), shown  # p = 0.35, not 0.34
    rows = [line for line in example if line.startswith("| lr=")]
    assert len(rows) == 3 and all(row in report for row in rows)
