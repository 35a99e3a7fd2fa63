"""Fresh-eyes review 35: the control-character refusal of a path flag says what that flag takes
(--init-from a checkpoint file or run directory, --run-dir a directory name)."""

from __future__ import annotations

import pytest

from tests.cli_helpers import TINY_RUN, error_line, run_main


@pytest.mark.parametrize("flag, wants", [
    ("--init-from", "the path of a checkpoint file or run directory"),
    ("--run-dir", "a directory name"),
])
def test_a_path_flag_with_a_control_character_is_refused_saying_what_the_flag_takes(flag, wants, tmp_path, monkeypatch,
                                                                                     capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["train", "CartPole-v1", *TINY_RUN, flag, "a\nb", "--dry-run"], capsys)
    assert error_line(code, err) == (f"proxima train: error: {flag} 'a\\nb': holds a control character (a newline, tab "
                                     f"or escape); give {wants} without one")
    assert out == "" and list(tmp_path.iterdir()) == []
