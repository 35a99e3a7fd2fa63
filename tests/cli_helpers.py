"""Running the CLI in-process from tests: exit code and captured output, SystemExit included."""

from __future__ import annotations

from proxima import cli


def run_main(argv: list, capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``proxima ARGV`` run in this process."""
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err
