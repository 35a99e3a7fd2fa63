"""Text from a run's files reaches the terminal as one line: an error naming an env id, a config key or a
file name that holds a newline or an escape sequence shows it escaped (terminal.printable), so a crafted
run cannot set the terminal's title, hide what follows or forge a `proxima:` line."""

from __future__ import annotations

import pytest
from cli_helpers import run_main

from proxima.population_run import is_plain_name
from proxima.terminal import printable

ESC_TITLE = "\x1b]0;OWNED\x07\x1b[2J"


def test_printable_escapes_only_what_is_not_printable():
    assert printable("CartPole-v1 é ü 日本") == "CartPole-v1 é ü 日本"
    assert printable(f"a{ESC_TITLE}b\nproxima: note: fake") == "a\\x1b]0;OWNED\\x07\\x1b[2Jb\\nproxima: note: fake"
    assert printable("tab\there\r") == "tab\\there\\r"


def _assert_one_clean_line(err: str) -> str:
    assert "\x1b" not in err and "\x07" not in err, repr(err)
    lines = err.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_an_unknown_config_key_from_a_file_is_shown_escaped(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f'env_id: CartPole-v1\n"{ESC_TITLE.encode("unicode_escape").decode()}\\nproxima: note: ok": 1\n')
    code, _, err = run_main(["train", "--config", str(cfg), "--dry-run"], capsys)
    assert code == 2
    line = _assert_one_clean_line(err)
    assert "unknown field '\\x1b]0;OWNED\\x07\\x1b[2J\\nproxima: note: ok'" in line


def test_a_file_name_in_a_not_empty_folder_is_shown_escaped(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "\x1b[31mRED\x1b[0m").write_text("")
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(run), "--total-timesteps", "512", "--quiet"], capsys)
    assert code == 2
    assert "\\x1b[31mRED\\x1b[0m" in _assert_one_clean_line(err)


@pytest.mark.parametrize("name", ["m000\x1b[8m", "m000\nproxima: note: x", "m\x00"])
def test_a_population_member_name_must_be_printable(name):
    assert not is_plain_name(name) and is_plain_name("m000-seed1")
