"""--help wraps at spaces only: argparse's textwrap broke lines at hyphens too, so a flag named in a
help text came out cut in two ("--eval-" / "episodes"), unreadable as the flag and not found by a
search of the help (report's --help after --normalize's lines, session 44)."""

import re

import pytest

from tests.cli_helpers import run_main

COMMANDS = [[], ["train"], ["eval"], ["resume"], ["report"], ["plot"], ["bench"], ["rlhf"], ["check-env"], ["doctor"],
            ["presets"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0] if c else "proxima")
def test_no_help_line_ends_inside_a_hyphenated_word(command, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_main([*command, "--help"], capsys)
    assert code == 0
    cut = [line for line in out.splitlines() if re.search(r"\w-$", line)]
    assert cut == [], cut


def test_report_help_names_eval_episodes_whole(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_main(["report", "--help"], capsys)
    assert code == 0 and "--eval-episodes" in out
