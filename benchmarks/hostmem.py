"""keep_host_memory on and off: training steps/s and page faults per iteration, side by side.

    .venv/bin/python benchmarks/hostmem.py                       # 4,096 native CartPole envs, 3 rounds
    .venv/bin/python benchmarks/hostmem.py --num-envs 1024 --out benchmarks/results/hostmem-cpu.md

The setting is process-wide and one-way (proxima/hostmem.py), so each measurement is a fresh
process: a Trainer at the vs-PureJaxRL shape (native CartPole, 16 steps, 4 epochs x 4
minibatches, 64x64 tanh, one thread), 2 warm-up iterations, then ``--iterations`` timed ones,
reporting training steps/s and minor page faults per iteration. Rounds alternate on/off so both
see the same machine load; the table gives median (range) and the per-round ratio on/off, with
``tables.starved_note`` under it when a process got under 0.9 of a core in its timed iterations
(its CPU seconds over their wall seconds): the ratio is then unreliable.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tables import (ChildFailed, ab_report, arg_problem, cpu_share, markdown_table, median_range, parser, refuse,  # benchmarks/tables.py
                    run_child, started, stopping_children)

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, resource, sys, time
from proxima.config import PPOConfig
from proxima.trainer import Trainer
n, iters, keep = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
cfg = PPOConfig(env_id="CartPole-v1", backend="native", num_envs=n, num_steps=16, total_timesteps=n * 16 * 10_000,
                threads=1, progress=False, eval_episodes=0, checkpoint_every=0, keep_host_memory=keep)
t = Trainer(cfg, quiet=True)
for _ in range(2):
    t.train_iteration()
f0, t0, c0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter(), time.process_time()
for _ in range(iters):
    t.train_iteration()
dt, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"sps": n * 16 * iters / dt, "faults": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / iters,
                  "cpu": cpu, "wall": dt}))
"""


def measure(num_envs: int, iterations: int, keep: bool) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    proc = run_child([sys.executable, "-c", PROBE, str(num_envs), str(iterations), "1" if keep else "0"],
                     capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    if proc.returncode != 0:
        raise ChildFailed(f"the {'on' if keep else 'off'} process failed (exit {proc.returncode}): "
                          f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = parser("hostmem.py", __doc__.split("\n\n")[0])
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--iterations", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None, help="append the table to this file")
    args = p.parse_args(argv)
    problem = arg_problem(args, at_least_one=("num_envs", "iterations", "repeats"))
    if problem:
        return refuse("hostmem.py", problem)
    start = started()
    rows = {True: [], False: []}
    with stopping_children("hostmem.py"):  # a SIGTERM or Ctrl-C kills the running process too
        for r in range(args.repeats):
            for keep in ((True, False) if r % 2 == 0 else (False, True)):
                try:
                    rows[keep].append(measure(args.num_envs, args.iterations, keep))
                except ChildFailed as e:  # one line, not a traceback; nothing is written (the table comes at the end)
                    return refuse("hostmem.py", str(e))
            print(f"round {r + 1}: on {rows[True][-1]['sps']:,.0f} steps/s, off {rows[False][-1]['sps']:,.0f} steps/s", file=sys.stderr)
    ratios = [a["sps"] / b["sps"] for a, b in zip(rows[True], rows[False])]
    sps = {keep: [x["sps"] for x in rows[keep]] for keep in rows}
    # each process's timed iterations: the cores it got (nan, unknown, from a result without its CPU time)
    shares = [cpu_share(x["cpu"], x["wall"]) if "cpu" in x else float("nan") for keep in rows for x in rows[keep]]
    faults = {keep: [x["faults"] for x in rows[keep]] for keep in rows}
    table = markdown_table(["keep_host_memory", "training steps/s", "minor page faults per iteration"], [
        ["on (default)", median_range(sps[True], scale=1e3, unit="k"), median_range(faults[True], digits=0)],
        ["off (`--no-keep-host-memory`)", median_range(sps[False], scale=1e3, unit="k"), median_range(faults[False], digits=0)]])
    return ab_report(f"native CartPole, {args.num_envs:,} envs x 16 steps, 4 epochs x 4 minibatches, 1 thread; "
                     f"{args.repeats} alternating rounds of fresh processes, {args.iterations} timed iterations each",
                     table, "on / off", ratios, "hostmem.py", p, args, start, shares=shares)


if __name__ == "__main__":
    sys.exit(main())
