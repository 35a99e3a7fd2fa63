"""256 CartPole agents at once, Proxima's population against PureJaxRL's vmapped seeds, in one call.

    python benchmarks/population_vs_purejaxrl.py --device cuda --cudagraphs --out benchmarks/results/population-cuda.md

The shape of ../shared/perf/H200-2026-11-30.md: 256 agents, 4 envs x 128 steps each, 500k steps
per agent (PureJaxRL: ``--configs 4x128x5e5x256``, one jitted ``vmap`` over seeds; 8.55 s after a
17 s compile on an H200). Proxima: ``proxima train CartPole-v1 --seeds 1-256 --num-envs 4
--num-steps 128 --total-timesteps 500000`` in a subprocess, timed from launch to exit, with its
training wall (population.json) and the members' final episodic returns (metrics.csv). One
round each (a GPU session is short); the table gives both sides and the ratio of training walls.
On ``--device cpu`` both sides are bound to one core (``vs_purejaxrl.cpu_binding``: PureJaxRL's XLA
pool takes every core otherwise).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from tables import arg_problem, command, emit, machine_line, refuse, started  # noqa: E402
from vs_purejaxrl import ANCHORS, cpu_binding, single_thread_env  # noqa: E402


def run_proxima(args, run_dir: Path) -> dict:
    cmd = [sys.executable, "-m", "proxima", "train", "CartPole-v1", "--seeds", f"1-{args.agents}", "--num-envs", "4",
           "--num-steps", "128", "--total-timesteps", str(args.total), "--device", args.device, "--eval-episodes", "0",
           "--checkpoint-every", "0", "--no-progress", "--quiet", "--run-dir", str(run_dir)]
    cmd += ["--cudagraphs"] if args.cudagraphs else []
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=single_thread_env(args.device), cwd=ROOT, timeout=args.timeout,
                          preexec_fn=cpu_binding("one" if args.device == "cpu" else "all"))
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"proxima failed ({proc.returncode}): {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    doc = json.loads((run_dir / "population.json").read_text())
    finals = []
    for m in doc["member_dirs"]:
        with open(run_dir / m["dir"] / "metrics.csv") as f:
            returns = [float(r["charts/episodic_return"]) for r in csv.DictReader(f) if r["charts/episodic_return"]]
        finals.append(returns[-1] if returns else math.nan)
    return {"wall": wall, "train": doc["wall_seconds"], "mean_final_return": statistics.fmean(finals)}


def run_purejaxrl(args) -> dict:
    cmd = [args.jax_python, str(args.anchor), "--configs", f"4x128x{args.total:g}x{args.agents}"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=single_thread_env(args.device), cwd=ROOT, timeout=args.timeout,
                          preexec_fn=cpu_binding("one" if args.device == "cpu" else "all"))
    wall = time.perf_counter() - t0
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"PureJaxRL failed ({proc.returncode}): {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return {"wall": wall, **lines[-1]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--cudagraphs", action="store_true")
    p.add_argument("--agents", type=int, default=256)
    p.add_argument("--total", type=float, default=5e5, help="steps per agent (default 500k)")
    p.add_argument("--jax-python", default=sys.executable)
    p.add_argument("--anchor", default=next((str(a) for a in ANCHORS if a.is_file()), None))
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    problem = arg_problem(args, at_least_one=("agents", "total"), positive=("timeout",))
    if problem:
        return refuse("population_vs_purejaxrl.py", problem)
    args.total = int(args.total)
    start = started()
    rows = []
    with tempfile.TemporaryDirectory(prefix="proxima-pop-") as tmp:
        try:
            ours = run_proxima(args, Path(tmp) / "pop")
            rows.append(f"| Proxima population{' --cudagraphs' if args.cudagraphs else ''} | {ours['train']:.2f} | {ours['wall']:.1f} | "
                        f"{ours['mean_final_return']:.1f} |")
            print(rows[-1], flush=True)  # in the log at once: a step limit may cut the other side
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            ours = None
            rows.append(f"| Proxima population | failed: {e} | | |")
    theirs = None
    if args.anchor:
        try:
            theirs = run_purejaxrl(args)
            rows.append(f"| PureJaxRL vmap over seeds | {theirs.get('run_seconds', math.nan):.2f} | {theirs['wall']:.1f} | "
                        f"{theirs.get('final_return_mean')} |")
            print(rows[-1], flush=True)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            rows.append(f"| PureJaxRL | failed: {e} | | |")
    ratio = ""
    if ours and theirs and theirs.get("run_seconds"):
        ratio = f"\n\nPureJaxRL training s / Proxima training s: {theirs['run_seconds'] / ours['train']:.2f}"
    text = (f"{args.agents} CartPole agents, 4 envs x 128 steps, {args.total:,} steps each, device {args.device}. "
            f"{machine_line(1, start)}\n\n"
            "| program | training s | process s (launch to exit) | mean final episodic return |\n|---|---:|---:|---:|\n"
            + "\n".join(rows) + ratio + f"\n\n{command('population_vs_purejaxrl.py', p, args)}\n")
    return emit(text, args.out, script="population_vs_purejaxrl.py")


if __name__ == "__main__":
    sys.exit(main())
