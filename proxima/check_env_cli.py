"""The ``proxima check-env`` parser, apart from the checker (proxima.envs.checker), whose package
imports torch and gymnasium: ``proxima --help`` and ``proxima check-env --help`` need neither. The
checker is imported when the command runs."""

from __future__ import annotations

import argparse

from .config import MAX_SEED, int_arg

#: check-env's --steps default and most, here (no torch, no gymnasium) so that the parser, the checker
#: (checker.run) and the adapter's check-env hints (gym_adapter.check_env_flags) read one definition
CHECK_STEPS = 200
#: about a minute of CartPole-v1 (100,000 steps took 7 s on a 2-CPU VM)
MAX_CHECK_STEPS = 1_000_000


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``check-env TARGET [--steps N] [--seed S]`` to an argparse subparsers object."""
    p = subparsers.add_parser(
        "check-env",
        help="Check your env against the Gymnasium API and Proxima's contract.",
        description="Check an env (a Gymnasium id or module:ClassName) against the Gymnasium API and Proxima's "
        "contract. A Gymnasium env: spaces, reset(seed) and step determinism, obs shape/dtype/bounds, finite values, the 5-tuple "
        "step, autoreset. A torch-native env: spaces, reset and step shapes and dtypes, finite values, reset(seed) determinism, "
        "autoreset (not step determinism nor obs bounds). "
        "An Atari id (Pong-v5) is checked as Gymnasium's ALE with Proxima's wrappers, the env --backend gymnasium trains on "
        "(it needs ale-py); EnvPool's envs, which --backend auto trains on when EnvPool is installed, are not checked. "
        "Before its OK line (or its count of violations) it prints the 'spaces: ...' line a new run of the env prints: "
        "how proxima train, with the env's preset, reads the observation and acts (once the spaces were read as supported). "
        "Exit status: 0 clean, 1 violations, 2 the target cannot be resolved.",
    )
    p.add_argument("target", metavar="TARGET", help="Gymnasium id (CartPole-v1) or module:ClassName of your gymnasium.Env or torch-native env "
                   "(a NativeEnv subclass: docs/native_envs.md).")
    p.add_argument("--steps", type=int_arg, default=CHECK_STEPS, metavar="N",
                   help=f"Random steps to run, with resets when episodes end (default {CHECK_STEPS}, at most {MAX_CHECK_STEPS:,}; "
                   "0 checks the spaces and reset only).")
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
