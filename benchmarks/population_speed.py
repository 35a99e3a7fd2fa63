"""Populations against one seed: the wall of 8 and 16 seeds trained as one batched program.

    .venv/bin/python benchmarks/population_speed.py                     # fast preset: 1 vs 8 vs 16 seeds, 3 rounds
    .venv/bin/python benchmarks/population_speed.py --sizes 1,8 --repeats 5 --out benchmarks/results/population-cpu.md

Each measurement is one ``proxima train ENV --preset P --stop-return none`` subprocess timed from
launch to exit (Python start, imports, training, checkpoints, every member's final evaluation):
``--seed 1`` for a size of 1, ``--seeds 1-K`` (one population) otherwise. ``--stop-return none``
because a population trains every member for --total-timesteps and ignores a preset's stop rule
(the fast preset's stops a single run at a mean return of 500, after ~146k of its 550k steps): with
the rule, one seed did a quarter of a member's work and the wall ratio was off several times. Rounds
alternate the sizes, so all sizes see the same machine load; the table gives per size the median and
range of the process wall, of the training part alone (the members' ``metrics.csv`` clock), the
ratio to one seed per round (median and range), how many members' final evaluations reach
``--threshold``, and, so that the table shows both sides did the same work, the steps each member
trained and the steps per second of the training part over all members. One torch thread each
(``--threads 1``, ``OMP_NUM_THREADS=1``).
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from pathlib import Path

from proxima.bench import parse_sizes
from tables import (ChildFailed, arg_problem, command as command_line, emit, machine_line, median_range, refuse,  # benchmarks/tables.py
                    parser, run_child, started, stopping_children)

ROOT = Path(__file__).resolve().parents[1]


def command(args, size: int, run_dir: Path) -> list:
    seeds = ["--seed", "1"] if size == 1 else ["--seeds", f"1-{size}"]
    # no stop rule on either side: a population ignores it, so a single run that kept it did less work
    return [sys.executable, "-m", "proxima", "train", args.env_id, "--preset", args.preset, *seeds, "--run-dir", str(run_dir),
            "--stop-return", "none", "--no-progress", "--quiet", "--threads", "1", "--device", args.device]


def member_dirs(run_dir: Path) -> list:
    doc = run_dir / "population.json"
    if not doc.is_file():
        return [run_dir]
    return [run_dir / m["dir"] for m in json.loads(doc.read_text())["member_dirs"]]


def trained(member: Path) -> tuple:
    """(training seconds, steps trained) of a member (or single run): its metrics.csv's last row."""
    with open(member / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    return float(rows[-1]["time"]), int(float(rows[-1]["global_step"]))


def measure(args, size: int, workdir: Path, round_: int) -> dict:
    run_dir = workdir / f"r{round_}-size{size}"
    cmd = command(args, size, run_dir)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path)
    t0 = time.perf_counter()
    proc = run_child(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        which = "1 seed" if size == 1 else f"{size} seeds"
        raise ChildFailed(f"proxima train ({which}, round {round_ + 1}) failed (exit {proc.returncode}): "
                          f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
    members = member_dirs(run_dir)
    evals = [json.loads((m / "eval.json").read_text())["mean_return"] for m in members]
    # the members train in one program: the first one's clock is the population's training time
    return {"size": size, "wall": wall, "train": trained(members[0])[0], "evals": evals,
            "steps": [trained(m)[1] for m in members]}


def table(args, sizes: list, rounds: list) -> str:
    lines = ["| seeds | process wall s, median (range) | training s | wall / one seed, per round | members solved (>= "
             f"{args.threshold:g}) | steps trained per member | training steps/s, all members |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for size in sizes:
        runs = [r[size] for r in rounds]
        ratios = [r[size]["wall"] / r[1]["wall"] for r in rounds] if 1 in sizes else []
        solved = [sum(e >= args.threshold for e in x["evals"]) for x in runs]
        # the work done: equal steps per member on both sides is what makes the wall ratio a fair one
        steps = [n for x in runs for n in x.get("steps", [])]
        rates = [sum(x["steps"]) / x["train"] for x in runs if x.get("steps") and x["train"] > 0]
        lines.append(f"| {size} | {median_range([x['wall'] for x in runs])} | {median_range([x['train'] for x in runs])} | "
                     f"{median_range(ratios, digits=2) + 'x' if ratios else '-'} | {', '.join(f'{s}/{size}' for s in solved)} | "
                     f"{median_range(steps, fmt=lambda v: f'{v:,.0f}')} | {median_range(rates, fmt=lambda v: f'{v / 1e3:.1f}k')} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = parser("population_speed.py", __doc__.split("\n\n")[0])
    p.add_argument("--env-id", default="CartPole-v1")
    p.add_argument("--preset", default="fast")
    p.add_argument("--sizes", default="1,8,16", help="population sizes; 1 = a single run (default 1,8,16)")
    p.add_argument("--repeats", type=int, default=3, help="rounds (default 3)")
    p.add_argument("--threshold", type=float, default=475.0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default=None, help="also append the table to this Markdown file")
    args = p.parse_args(argv)
    try:
        sizes = list(dict.fromkeys(parse_sizes(args.sizes, "--sizes")))  # a size named twice is measured once
    except ValueError as e:
        return refuse("population_speed.py", str(e))
    problem = arg_problem(args, at_least_one=("repeats",), finite=("threshold",))
    if problem:
        return refuse("population_speed.py", problem)
    from proxima.config import ConfigError, PPOConfig
    from proxima.device import resolve_device
    from proxima.presets import resolve

    try:  # train's own checks of --env-id/--preset and --device, before any process is started
        resolve(args.env_id, args.preset, PPOConfig(), python=False)
        resolve_device(args.device)
    except ConfigError as e:
        return refuse("population_speed.py", str(e))
    start = started()
    rounds = []
    with stopping_children("population_speed.py", "proxima-popspeed-") as tmp:
        for r in range(args.repeats):
            order = sizes if r % 2 == 0 else list(reversed(sizes))
            try:
                rounds.append({size: measure(args, size, tmp, r) for size in order})
            except ChildFailed as e:  # one line, not a traceback; nothing is written (the table comes at the end)
                return refuse("population_speed.py", str(e))
            print(f"round {r + 1}: " + ", ".join(f"{s} seeds {rounds[-1][s]['wall']:.1f}s" for s in sizes), file=sys.stderr)
    text = table(args, sizes, rounds)
    when = start[0]
    return emit(text, args.out, f"## {args.env_id} --preset {args.preset}, {when:%Y-%m-%d %H:%M}\n\n"
                                f"{machine_line(1, start)}; {args.repeats} alternating rounds; every run with "
                                "--stop-return none (a population ignores the stop rule: both sides train every step); "
                                f"{command_line('population_speed.py', p, args)}\n\n{text}", script="population_speed.py")


if __name__ == "__main__":
    sys.exit(main())
