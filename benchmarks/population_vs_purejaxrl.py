"""256 CartPole agents at once, Proxima's population against PureJaxRL's vmapped seeds, in one call.

    python benchmarks/population_vs_purejaxrl.py --device cuda --cudagraphs --out benchmarks/results/population-cuda.md

The shape of ../shared/perf/H200-2026-11-30.md: 256 agents, 4 envs x 128 steps each, 500k steps
per agent (PureJaxRL: ``--configs 4x128x5e5x256``, one jitted ``vmap`` over seeds; 8.55 s after a
17 s compile on an H200). Proxima: ``proxima train CartPole-v1 --seeds 1-256 --num-envs 4
--num-steps 128 --total-timesteps 500000`` in a subprocess, timed from launch to exit, with its
training wall (population.json) and the members' final episodic returns (metrics.csv). One
round each (a GPU session is short); the table gives both sides and the ratio of training walls.

PureJaxRL runs first, with the anchor's ``--no-warm-run``: its training s is then its first
execution after the ahead-of-time compile, as Proxima's training wall is its first run (the warm
run, ~8.6 s on an H200, measured nothing the table shows), and the shorter, more predictable side
is the one a time limit does not cut. The final return is the same statistic on both sides
(``TAIL_FRAC``): per agent, the mean return of the episodes that finished in its last 5% of
iterations (updates), then the mean over agents: the anchor's ``final_return_mean`` (``--tail-frac``)
and, for Proxima, the rows of each member's metrics.csv weighted by their ``episodes``.

On ``--device cpu`` both sides are bound to one core (``vs_purejaxrl.cpu_binding``: PureJaxRL's XLA
pool takes every core otherwise). With ``--out`` the section is written after each side's row
(marked partial until both are in), so a run stopped by a time limit keeps the side that finished;
``--time-budget`` caps both sides together, counted from the script's first line (torch's import
included: a caller's time limit counts it too), and each subprocess gets at most what is left of
it, so a slow first side leaves the second one a row saying it ran out of time rather than a killed
script. A ``--cudagraphs`` population whose capture fell back to eager says so in its row.

PureJaxRL runs in its own interpreter, ``--jax-python`` (default, as ``vs_purejaxrl.py``'s:
``.jax-venv/bin/python`` when it exists, else ``python3``), which must import jax, chex, flax, optax
and gymnax: with an anchor to run, that is checked before anything is measured (else one error line
naming --jax-python, exit 2, nothing written; ``make jax-venv`` makes .jax-venv), as are --device
(default ``auto``: CUDA when it is usable, else the CPU) and the arguments. The anchor is the
repository's benchmarks/anchors/purejaxrl_cartpole.py unless ``--anchor`` names another; with
``--anchor ''`` (or none found) only Proxima's row is measured. The exit status is 1 when a side has a failed row (it says why): a table without
both figures is no comparison. A SIGTERM (a time limit) or Ctrl-C kills the running side's
processes and removes the temporary folder (exit 143 or 130); the section keeps the rows finished.
"""

from __future__ import annotations

import time

#: when this script started: --time-budget counts from here (the imports below take torch's, seconds)
LAUNCHED = time.perf_counter()

import argparse  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from tables import (Section, arg_problem, command, machine_line, partial_note, refuse, run_child, started,  # noqa: E402
                    parser, stopping_children)
from vs_purejaxrl import ANCHORS, cpu_binding, default_jax_python, jax_python_problem, single_thread_env  # noqa: E402


#: seconds kept back from --time-budget for writing the table after the last subprocess
RESERVE = 3.0
#: the final return's window on both sides: each agent's last 5% of iterations (the anchor's default --tail-frac)
TAIL_FRAC = 0.05


def timeout_for(args, deadline) -> float:
    """A subprocess's time limit: --timeout, or what is left of --time-budget (``deadline``, a
    perf_counter time) when that is less. Raises subprocess.TimeoutExpired when nothing is left."""
    if deadline is None:
        return args.timeout
    left = deadline - time.perf_counter() - RESERVE
    if left < 1.0:
        raise subprocess.TimeoutExpired("(not started)", 0, output=f"--time-budget {args.time_budget:g} s used up")
    return min(args.timeout, left)


def graphs_note(stderr: str) -> str:
    """'' or which parts fell back to eager, from the notes ``proxima train`` printed (graphs.Replay)."""
    parts = re.findall(r"could not capture the (\w+) as a CUDA graph", stderr)
    return f"graphs fell back: eager ({', '.join(dict.fromkeys(parts))})" if parts else ""


def run_proxima(args, run_dir: Path, timeout: float = None) -> dict:
    cmd = [sys.executable, "-m", "proxima", "train", "CartPole-v1", "--seeds", f"1-{args.agents}", "--num-envs", "4",
           "--num-steps", "128", "--total-timesteps", str(args.total), "--device", args.device, "--eval-episodes", "0",
           "--checkpoint-every", "0", "--no-progress", "--quiet", "--run-dir", str(run_dir)]
    cmd += ["--cudagraphs"] if args.cudagraphs else []
    t0 = time.perf_counter()
    proc = run_child(cmd, capture_output=True, text=True, env=single_thread_env(args.device), cwd=ROOT,
                     timeout=args.timeout if timeout is None else timeout,
                     preexec_fn=cpu_binding("one" if args.device == "cpu" else "all"))
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"proxima failed ({proc.returncode}): {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    doc = json.loads((run_dir / "population.json").read_text())
    finals = [final_return(run_dir / m["dir"] / "metrics.csv") for m in doc["member_dirs"]]
    finite = [x for x in finals if math.isfinite(x)]
    return {"wall": wall, "train": doc["wall_seconds"], "mean_final_return": statistics.fmean(finite) if finite else math.nan,
            "graphs": graphs_note(proc.stderr) if args.cudagraphs else ""}


def final_return(metrics_csv: Path) -> float:
    """One member's final return as the anchor computes a seed's: the mean return of the episodes
    that finished in its last ceil(TAIL_FRAC x iterations) iterations. A metrics.csv row is one
    iteration; its return is the mean over its ``episodes``, so the rows are weighted by those. NaN
    when no episode finished there (the anchor's null; left out of the mean over agents, as its
    nanmean does)."""
    with open(metrics_csv) as f:
        rows = list(csv.DictReader(f))
    tail = rows[-max(1, math.ceil(TAIL_FRAC * len(rows))):] if rows else []
    done = [(float(r["charts/episodic_return"]), float(r["episodes"])) for r in tail if r["charts/episodic_return"]]
    episodes = sum(n for _, n in done)
    return sum(ret * n for ret, n in done) / episodes if episodes else math.nan


def run_purejaxrl(args, timeout: float = None) -> dict:
    # --no-warm-run: the timed execution is the first (module docstring); --tail-frac: TAIL_FRAC, whatever its default
    cmd = [args.jax_python, str(args.anchor), "--no-warm-run", "--tail-frac", f"{TAIL_FRAC:g}",
           "--configs", f"4x128x{args.total:g}x{args.agents}"]
    t0 = time.perf_counter()
    proc = run_child(cmd, capture_output=True, text=True, env=single_thread_env(args.device), cwd=ROOT,
                     timeout=args.timeout if timeout is None else timeout,
                     preexec_fn=cpu_binding("one" if args.device == "cpu" else "all"))
    wall = time.perf_counter() - t0
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"PureJaxRL failed ({proc.returncode}): {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    if "error" in lines[-1] or "skipped" in lines[-1]:  # the anchor reports a failed config on a line and exits 0
        raise RuntimeError(f"PureJaxRL: {lines[-1].get('error') or lines[-1].get('skipped')}")
    return {"wall": wall, **lines[-1]}


def failure(e: Exception) -> str:
    if isinstance(e, subprocess.TimeoutExpired):
        return f"not finished: {e.output}" if e.timeout == 0 else f"timed out after {e.timeout:.0f} s"
    return str(e)


def build_parser() -> argparse.ArgumentParser:
    p = parser("population_vs_purejaxrl.py", __doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto",
                   help="cpu, cuda, cuda:N or auto: CUDA when it is usable, else the CPU (default auto)")
    p.add_argument("--cudagraphs", action="store_true")
    p.add_argument("--agents", type=int, default=256)
    p.add_argument("--total", type=float, default=5e5, help="steps per agent (default 500k)")
    p.add_argument("--jax-python", default=default_jax_python(),
                   help="PureJaxRL's interpreter, with jax, chex, flax, optax and gymnax (default: .jax-venv/bin/python "
                        "when it exists, else python3; checked before anything is measured)")
    p.add_argument("--anchor", default=next((str(a) for a in ANCHORS if a.is_file()), None),
                   help="PureJaxRL's purejaxrl_cartpole.py (default: the repository's benchmarks/anchors/purejaxrl_cartpole.py; "
                        "'' or none found: Proxima's row only)")
    p.add_argument("--timeout", type=float, default=300, help="seconds per subprocess (default 300)")
    p.add_argument("--time-budget", type=float, default=None,
                   help="seconds for the whole run (a time limit around it): each subprocess gets at most what is left "
                        f"of it less {RESERVE:g} s for the table, and a side left without time is a row saying so (default: none)")
    p.add_argument("--out", default=None, help="append the table to this file, written after each side's row (default: print only)")
    return p


def main(argv=None, launched: float = None) -> int:
    """``launched``: the perf_counter time --time-budget counts from (the script passes LAUNCHED,
    before its imports); by default, this call."""
    t0 = time.perf_counter() if launched is None else launched
    p = build_parser()
    args = p.parse_args(argv)
    problem = arg_problem(args, at_least_one=("agents", "total"), positive=("timeout",))
    if not problem and args.time_budget is not None and not (args.time_budget > 0 and math.isfinite(args.time_budget)):
        problem = f"--time-budget {args.time_budget:g}: must be a positive number"
    if problem:
        return refuse("population_vs_purejaxrl.py", problem)
    from proxima.config import ConfigError
    from proxima.device import resolve_device

    try:  # train's own check, before either side runs: --device cuda on a CPU machine was two failed rows and exit 0
        args.device = str(resolve_device(args.device))  # auto -> what ran, in the table and its Command: line
    except ConfigError as e:
        return refuse("population_vs_purejaxrl.py", str(e))
    # an anchor file that is not there fails as PureJaxRL's row (its own message); one that is needs the interpreter
    if args.anchor and Path(args.anchor).is_file():
        left = args.timeout if args.time_budget is None else t0 + args.time_budget - time.perf_counter() - RESERVE
        problem = jax_python_problem(args.jax_python, single_thread_env(args.device), max(1.0, min(args.timeout, left)))
        if problem:
            return refuse("population_vs_purejaxrl.py", problem)
    args.total = int(args.total)
    start = started()
    deadline = None if args.time_budget is None else t0 + args.time_budget
    section = Section(args.out, "population_vs_purejaxrl.py")
    sides = ["purejaxrl", "proxima"] if args.anchor else ["proxima"]  # PureJaxRL first: module docstring
    rows: dict = {}
    results: dict = {}
    with stopping_children("population_vs_purejaxrl.py", "proxima-pop-") as tmp:
        for side in sides:
            try:
                if side == "proxima":
                    ours = results[side] = run_proxima(args, tmp / "pop", timeout_for(args, deadline))
                    rows[side] = (f"| Proxima population{' --cudagraphs' if args.cudagraphs else ''}"
                                  f"{' **' + ours['graphs'] + '**' if ours.get('graphs') else ''} | {ours['train']:.2f} | "
                                  f"{ours['wall']:.1f} | {ours['mean_final_return']:.1f} |")
                else:
                    theirs = results[side] = run_purejaxrl(args, timeout_for(args, deadline))
                    final = theirs.get("final_return_mean")
                    rows[side] = (f"| PureJaxRL vmap over seeds | {theirs.get('run_seconds', math.nan):.2f} | {theirs['wall']:.1f} | "
                                  f"{'-' if final is None else f'{final:.1f}'} |")
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                results[side] = None
                rows[side] = f"| {'Proxima population' if side == 'proxima' else 'PureJaxRL'} | failed: {failure(e)} | | |"
            print(rows[side], flush=True)  # in the log at once: a step limit may cut the other side
            if len(rows) < len(sides):
                section.update(report(p, args, start, rows, results.get("proxima"), results.get("purejaxrl"),
                                      partial_note(len(rows), len(sides), "rows")))
    code = section.finish(report(p, args, start, rows, results.get("proxima"), results.get("purejaxrl")))
    failed = [side for side in sides if results.get(side) is None]
    if code == 0 and failed:  # gpu_session.sh's summary read "population-256: exit 0" over two failed rows
        names = " and ".join("Proxima" if side == "proxima" else "PureJaxRL" for side in failed)
        print(f"population_vs_purejaxrl.py: error: {names} failed (the table's row says why)", file=sys.stderr)
        return 1
    return code


def report(p, args, start, rows: dict, ours, theirs, partial: str = "") -> str:
    """The section: Proxima's row first, then PureJaxRL's (``rows``: {"proxima"|"purejaxrl": row}, those so far)."""
    ratio = ""
    if ours and theirs and theirs.get("run_seconds"):
        ratio = f"\n\nPureJaxRL training s / Proxima training s: {theirs['run_seconds'] / ours['train']:.2f}"
        if ours.get("graphs"):
            ratio += f" (Proxima's {ours['graphs']}: not a graph-replay figure)"
    final = f"mean final episodic return (each agent's episodes in its last {TAIL_FRAC:.0%} of iterations)"
    return ((f"{partial}\n\n" if partial else "")
            + f"{args.agents} CartPole agents, 4 envs x 128 steps, {args.total:,} steps each, device {args.device}. "
            f"{machine_line(1, start)}. PureJaxRL ran first, without a warm run (`--no-warm-run`): both sides' training s "
            "is their first run. Proxima's training s (population.json's wall_seconds) also holds what it writes while it "
            "trains (each agent's metrics.csv and TensorBoard rows, its checkpoints, the last one included); PureJaxRL's "
            "(the anchor's run_seconds) is the jitted training call alone, its metrics kept on the device.\n\n"
            f"| program | training s | process s (launch to exit) | {final} |\n|---|---:|---:|---:|\n"
            + "\n".join(rows[side] for side in ("proxima", "purejaxrl") if side in rows) + ratio
            + f"\n\n{command('population_vs_purejaxrl.py', p, args)}\n")


if __name__ == "__main__":
    sys.exit(main(launched=LAUNCHED))
