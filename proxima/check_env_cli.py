"""The ``proxima check-env`` parser, apart from the checker (proxima.envs.checker), whose package
imports torch and gymnasium: ``proxima --help`` and ``proxima check-env --help`` need neither. The
checker is imported when the command runs."""

from __future__ import annotations

import argparse

from .config import MAX_SEED, int_arg


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``check-env TARGET [--steps N] [--seed S]`` to an argparse subparsers object."""
    p = subparsers.add_parser(
        "check-env",
        help="Check your env against the Gymnasium API and Proxima's contract.",
        description="Check an env (a Gymnasium id or module:ClassName) against the Gymnasium API and Proxima's "
        "contract: spaces, reset(seed) and step determinism, obs shape/dtype/bounds, finite values, the 5-tuple step, autoreset. "
        "An Atari id (Pong-v5) is checked as Gymnasium's ALE with Proxima's wrappers, the env --backend gymnasium trains on "
        "(it needs ale-py); EnvPool's envs, which --backend auto trains on when EnvPool is installed, are not checked. "
        "Exit status: 0 clean, 1 violations, 2 the target cannot be resolved.",
    )
    p.add_argument("target", metavar="TARGET", help="Gymnasium id (CartPole-v1) or module:ClassName of your gymnasium.Env or torch-native env "
                   "(a NativeEnv subclass: docs/native_envs.md).")
    p.add_argument("--steps", type=int_arg, default=200, metavar="N", help="Random steps to run, with resets when episodes end (default 200; 0 checks the spaces and reset only).")
    p.add_argument("--seed", type=int_arg, default=0,
                   help=f"Seed of reset() and of the random actions, 0 to {MAX_SEED:,} as for proxima train (default 0).")
    # None when not given: config.coerce refuses '' (an unset shell variable) as train does
    p.add_argument("--env-kwargs", default=None, metavar="JSON",
                   help="Keyword arguments of the env's constructor as JSON, as for `proxima train --env-kwargs`.")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """proxima.envs.checker.run: the report, imported now that the command runs."""
    from .envs.checker import run as check

    return check(args)
