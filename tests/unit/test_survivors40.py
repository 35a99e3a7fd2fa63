"""--env-kwargs typed as KEY=VALUE pairs: the 'not valid JSON' line's example echoes the pairs only when every
word is one, and a value JSON has no number for (NaN) is quoted, not written as JSON refuses it."""

from __future__ import annotations

from tests.cli_helpers import error_line, run_main


def test_pairs_mixed_with_a_bare_word_get_the_generic_example(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--env-kwargs", "continuous=false junk"], capsys)
    assert error_line(code, err) == (
        "proxima train: error: --env-kwargs 'continuous=false junk': not valid JSON (Expecting value at column 1); "
        """e.g. --env-kwargs '{"size": 8, "continuous": false}'""")


def test_a_nan_value_is_suggested_as_a_string(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--env-kwargs", "x=NaN"], capsys)
    assert error_line(code, err) == (
        "proxima train: error: --env-kwargs 'x=NaN': not valid JSON (Expecting value at column 1); "
        """e.g. --env-kwargs '{"x": "NaN"}'""")
