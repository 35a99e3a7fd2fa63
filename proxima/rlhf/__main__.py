"""`python -m proxima.rlhf [flags]`: the `proxima rlhf` command without the rest of the CLI (torchrun's -m target)."""

import argparse
import sys

from .cli import one_line_error, register


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="proxima")
    parser.error = one_line_error  # unrecognized arguments are reported by the top-level parser
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["rlhf"] + list(sys.argv[1:] if argv is None else argv))
    return args.func(args)


if __name__ == "__main__":
    from ..distributed import exit_process

    exit_process(main)
