"""This tree against an earlier git revision: training steps/s side by side, processes alternating.

    .venv/bin/python benchmarks/vs_revision.py --rev 92d0988                    # 6 rounds, 4,096 envs
    .venv/bin/python benchmarks/vs_revision.py --rev 92d0988 --out benchmarks/results/vs-revision-cpu.md

The revision is checked out into a temporary git worktree (removed at the end). Each round runs one
``proxima bench`` process of each tree (the order alternating between rounds, so both meet the
machine's phases alike), with this interpreter and one intra-op thread, at the vs-PureJaxRL shape:
native CartPole, 16-step rollouts, 4 epochs x 4 minibatches, 64x64 tanh. The table gives each
tree's training steps/s, median (min-max), and the per-round ratio this tree / the revision: the
gain of the commits in between, measured as whole processes (what ``vs_purejaxrl.py`` measures),
not as an in-process A/B of one part. A process that got under 0.9 of a core (its CPU seconds over
its wall seconds, start-up included) puts ``tables.starved_note`` under the table: the ratio is
then unreliable.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from tables import (ChildFailed, ab_report, arg_problem, bench_problem, cpu_share, markdown_table, median_range, parser,  # benchmarks/tables.py
                    refuse, run_child, started, stopping_children)

ROOT = Path(__file__).resolve().parents[1]


def bench_argv(args) -> list:
    """The words after ``proxima bench`` of every process (both trees)."""
    return ["CartPole-v1", "--device", "cpu", "--backend", "native", "--num-steps", "16", "--num-envs", str(args.num_envs),
            "--repeats", "1", "--seconds", str(args.seconds), "--threads", "1", "--json"]


def bench_sps(tree: Path, args, name: str = "") -> float:
    """One ``proxima bench`` process of ``tree``: its training steps/s. ``tables.ChildFailed`` (one
    line: which tree, the exit status and the process's last stderr line) when it fails."""
    cmd = [sys.executable, "-m", "proxima", "bench", *bench_argv(args)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(tree))
    proc = run_child(cmd, capture_output=True, text=True, env=env, cwd=tree, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise ChildFailed(f"proxima bench of {name or tree} failed (exit {proc.returncode}): "
                          f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
    return float(json.loads(lines[-1])["train_sps"])


def children_cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed_bench(tree: Path, args, name: str = "") -> tuple:
    """(``bench_sps``'s steps/s, the cores its process got: CPU seconds over wall seconds, start-up
    included; nan, unknown, when no process ran: a stand-in)."""
    c0, t0 = children_cpu_seconds(), time.perf_counter()
    sps = bench_sps(tree, args, name)
    cpu = children_cpu_seconds() - c0
    return sps, (cpu_share(cpu, time.perf_counter() - t0) if cpu > 0 else float("nan"))


def main(argv=None) -> int:
    p = parser("vs_revision.py", __doc__.split("\n\n")[0])
    p.add_argument("--rev", required=True, help="the git revision to compare against (a commit, tag or branch)")
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=10.0, help="timed seconds of training per process")
    p.add_argument("--out", default=None, help="append the table to this file")
    args = p.parse_args(argv)
    problem = arg_problem(args, at_least_one=("num_envs", "rounds"), positive=("seconds",))
    if not problem:  # what this tree's `proxima bench` would refuse (a size that cannot fit), before a worktree is made
        problem = bench_problem(bench_argv(args))
    if problem:
        return refuse("vs_revision.py", problem)
    # a commit, not any object (HEAD:README.md is a blob, which `git worktree add` fails on after the checks)
    rev = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{args.rev}^{{commit}}"],
                         capture_output=True, text=True, cwd=ROOT)
    if rev.returncode != 0 or not rev.stdout.strip():
        return refuse("vs_revision.py", f"--rev {args.rev}: not a commit of this repository")
    args.rev = rev.stdout.strip()  # the Command: line names the commit measured, not HEAD~1 (which moves)
    short = args.rev[:10]
    start = started()
    # a SIGTERM or Ctrl-C kills the running `proxima bench`; the `finally` below still removes the worktree
    with stopping_children("vs_revision.py", "proxima-rev-") as tmp:
        other = tmp / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(other), args.rev], cwd=ROOT, check=True)
        sps, shares = {"this": [], "rev": []}, []
        failed = ""
        try:
            for r in range(args.rounds):
                for side in (("this", "rev") if r % 2 == 0 else ("rev", "this")):
                    tree, name = (ROOT, "this tree") if side == "this" else (other, f"revision {short}")
                    rate, share = timed_bench(tree, args, name)
                    sps[side].append(rate)
                    shares.append(share)
                print(f"round {r + 1}: this tree {sps['this'][-1]:,.0f}, {short} {sps['rev'][-1]:,.0f} steps/s",
                      file=sys.stderr)
        except ChildFailed as e:  # e.g. the revision's bench refuses what this tree's accepted: one line, no table
            failed = str(e)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=ROOT, check=False)
    if failed:
        return refuse("vs_revision.py", failed)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    ratios = [a / b for a, b in zip(sps["this"], sps["rev"])]
    table = markdown_table(["tree", "training steps/s"], [
        [f"this tree (HEAD {head}, with any uncommitted changes)", median_range(sps["this"], scale=1e3, unit="k")],
        [f"revision {short}", median_range(sps["rev"], scale=1e3, unit="k")]])
    return ab_report(f"native CartPole, {args.num_envs:,} envs x 16 steps, 4 epochs x 4 minibatches, 64x64 tanh, 1 thread; "
                     f"{args.rounds} rounds of one `proxima bench` process per tree, {args.seconds:g} s windows, order alternating; "
                     "the machine line's CPU tanh is this tree's.",
                     table, f"this tree / {short}", ratios, "vs_revision.py", p, args, start, shares=shares)


if __name__ == "__main__":
    sys.exit(main())
