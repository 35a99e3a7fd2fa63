"""`python -m proxima.rlhf [flags]`: the `proxima rlhf` command without the rest of the CLI (torchrun's -m target)."""

import argparse
import functools
import sys

from .cli import one_line_error, register


def _read(argv=None) -> argparse.Namespace:
    """The parsed flags; --help and usage errors exit here (before torch is imported)."""
    parser = argparse.ArgumentParser(prog="proxima")
    parser.error = one_line_error  # unrecognized arguments are reported by the top-level parser
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["rlhf"] + list(sys.argv[1:] if argv is None else argv))


def main(argv=None) -> int:
    args = _read(argv)
    return args.func(args)


if __name__ == "__main__":
    args = _read()
    from ..distributed import exit_process  # imports torch: only for a run

    exit_process(functools.partial(args.func, args))
