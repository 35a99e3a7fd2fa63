"""`python -m proxima.rlhf [flags]`: the `proxima rlhf` command (torchrun's -m target), read and run as the console
script reads and runs it (cli.entry): a mistyped flag's did-you-mean, one line for a stop while it starts."""

import sys


def _read(argv=None):
    """The parsed flags, read as `proxima rlhf FLAGS` (cli._read); --help and usage errors exit here (before torch is
    imported)."""
    from ..cli import _read as read_command_line

    args = read_command_line(["rlhf", *(sys.argv[1:] if argv is None else argv)])
    if isinstance(args, int):  # a usage error (its line is printed), help
        raise SystemExit(args)
    return args


def main(argv=None) -> int:
    args = _read(argv)
    return args.func(args)


if __name__ == "__main__":
    from ..cli import entry

    entry(["rlhf", *sys.argv[1:]])
