"""``--threads 2`` against ``--threads 1``: training steps/s of whole processes, side by side.

    .venv/bin/python benchmarks/threads.py                          # 4,096 envs, 6 rounds
    .venv/bin/python benchmarks/threads.py --num-envs 1024,4096 --out benchmarks/results/threads-cpu.md

Each round runs one ``proxima bench`` process per thread count (order alternating between rounds,
so both meet the machine's phases alike), unbound, at the vs-PureJaxRL shape: native CartPole,
16-step rollouts, 4 epochs x 4 minibatches, 64x64 tanh. With ``--threads 2`` the actor and the
critic are computed side by side on two threads (proxima/side_thread.py); the table gives each
count's training steps/s, median (min-max), the cores each process used (CPU seconds / wall
seconds, start-up included) and the per-round ratio. The pairing needs a batch of 2,048 rows
(side_thread.MIN_ROWS: the rollout's num_envs, or a minibatch's num_envs x 16 / 4): a size whose
batches are all smaller runs --threads 2 as --threads 1, and its row says "not paired" (from
``proxima bench --json``'s "paired"). A size named twice is measured once.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

from proxima.bench import parse_sizes
from tables import (ChildFailed, arg_problem, bench_problem, command, distinct, emit, machine_line, markdown_table,  # benchmarks/tables.py
                    median_range, parser, refuse, started, stopping_children)
from vs_purejaxrl import proxima_cmd, run_json, single_thread_env


def main(argv=None) -> int:
    p = parser("threads.py", __doc__.split("\n\n")[0])
    p.add_argument("--num-envs", default="4096", help="comma-separated env counts (default 4096); below 512 envs (a "
                   "minibatch of 2,048 rows) --threads 2 is not paired, and the row says so")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=10.0, help="timed seconds of training per process")
    p.add_argument("--out", default=None, help="append the table to this file")
    args = p.parse_args(argv)
    try:
        sizes = distinct(parse_sizes(args.num_envs))
    except ValueError as e:
        return refuse("threads.py", str(e))
    problem = arg_problem(args, at_least_one=("rounds",), positive=("seconds",))
    if not problem:  # what every `proxima bench` below would refuse (a size that cannot fit), before any is measured
        problem = bench_problem(bench_cmd(args, ",".join(map(str, sizes)), 1)[4:])
    if problem:
        return refuse("threads.py", problem)
    try:
        with stopping_children("threads.py"):  # a SIGTERM or Ctrl-C kills the running `proxima bench` too
            return measure_all(p, args, sizes)
    except ChildFailed as e:  # one line, not a traceback; nothing is written (the table comes at the end)
        return refuse("threads.py", str(e))


def bench_cmd(args, envs, threads: int) -> list:
    return proxima_cmd(SimpleNamespace(device="cpu", seconds=args.seconds, threads=threads, compile=False, cudagraphs=False),
                       envs)


def not_paired_text(envs: int) -> str:
    """The mark of a --threads 2 cell whose process paired no batch (its JSON's "paired" false)."""
    from proxima.side_thread import MIN_ROWS

    if max(envs, envs * 16 // 4) < MIN_ROWS:  # the rollout's batch and a minibatch's (16 steps, 4 minibatches)
        return f"not paired (batch below {MIN_ROWS:,} rows: same as --threads 1)"
    return "not paired (same as --threads 1)"


def measure_all(p, args, sizes: list) -> int:
    start = started()
    rows = []
    for envs in sizes:
        sps, cores, paired = {1: [], 2: []}, {1: [], 2: []}, []
        for r in range(args.rounds):
            for threads in ((1, 2) if r % 2 == 0 else (2, 1)):
                res = run_json(bench_cmd(args, envs, threads), single_thread_env("cpu"), timeout=600)
                sps[threads].append(res["train_sps"])
                cores[threads].append(res["cores_used"])
                if threads == 2:
                    paired.append(res.get("paired"))
            print(f"{envs} envs, round {r + 1}: 1 thread {sps[1][-1]:,.0f}, 2 threads {sps[2][-1]:,.0f} steps/s",
                  file=sys.stderr, flush=True)
        ratios = [b / a for a, b in zip(sps[1], sps[2])]
        # the caption says "actor and critic side by side": a row where no batch was paired must not read so
        two = median_range(sps[2], scale=1e3, unit="k") + (f" {not_paired_text(envs)}" if any(x is False for x in paired) else "")
        rows.append([f"{envs:,}", median_range(sps[1], scale=1e3, unit="k"), two,
                     f"**{median_range(ratios, digits=2)}**", f"{median_range(cores[1], digits=2)}, {median_range(cores[2], digits=2)}"])
    table = markdown_table(["envs", "--threads 1 steps/s", "--threads 2 steps/s", "2 / 1 per round", "cores used (1, 2)"], rows)
    return emit("\n".join([f"`--threads 2` (actor and critic side by side) against `--threads 1`: native CartPole, 16-step "
                           f"rollouts, 4 epochs x 4 minibatches, 64x64 tanh; {args.rounds} rounds of one `proxima bench` process "
                           f"per count, {args.seconds:g} s windows, order alternating, unbound. {machine_line('1 and 2', start)}",
                           "", table, "", command("threads.py", p, args), ""]), args.out, script="threads.py")


if __name__ == "__main__":
    sys.exit(main())
