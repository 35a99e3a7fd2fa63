"""`python -m proxima.rlhf [flags]`: the `proxima rlhf` command without the rest of the CLI (torchrun's -m target)."""

import argparse
import sys

from .cli import register


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="proxima")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    args = parser.parse_args(["rlhf"] + list(sys.argv[1:] if argv is None else argv))
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
