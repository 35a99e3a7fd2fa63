"""Data-parallel scaling on CPU: training steps/s with 1 and with 2 processes.

Each run trains native CartPole with 64 envs per process, 128 steps per rollout, one torch thread
per process (``--threads 1``, ``OMP_NUM_THREADS=1``), for a fixed number of iterations:

    1 process:   python -m proxima train CartPole-v1 --backend native --num-envs 64 ...
    K processes: python -m torch.distributed.run --nproc-per-node K --standalone -m proxima train ...

Steps/s is read from the run's metrics.csv: (global steps after the last iteration - after the
first) / (loop time between them), so start-up and the first (warm-up) iteration are left out; global
steps count every process's envs (``--iterations`` 2 times the second alone). A run that fails is
one error line naming it (exit 2), and a SIGTERM or Ctrl-C kills the running processes and removes
the temporary folder (exit 143 or 130). Each configuration is repeated, runs one at a time, the
configurations alternating within a round; the median and the range are reported, and "vs 1 process"
is the median (min-max) of the per-round ratios (benchmarks/README.md's rule). A note follows the
table when a run's processes got under 0.9 of a core each (CPU seconds of the run's process tree per
wall second, per process): its ratios are then unreliable. Prints the report; with --out FILE it is
also appended to FILE as a new dated section (the record is benchmarks/results/distributed-cpu.md):

    OMP_NUM_THREADS=1 python benchmarks/distributed.py --procs 1,2 --repeats 3 --iterations 20 --out benchmarks/results/distributed-cpu.md
"""

from __future__ import annotations

import csv
import os
import platform
import resource
import shlex
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

from tables import (ChildFailed, arg_problem, cpu_share, median_range, refuse, round_ratios, run_child, starved_note,  # benchmarks/tables.py
                    parser, stopping_children)

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "benchmarks" / "results" / "distributed-cpu.md"


def train_args(num_envs: int, num_steps: int, iterations: int, procs: int, run_dir: Path) -> list:
    total = iterations * num_envs * num_steps * procs
    return ["train", "CartPole-v1", "--backend", "native", "--num-envs", str(num_envs), "--num-steps", str(num_steps),
            "--total-timesteps", str(total), "--threads", "1", "--eval-episodes", "0", "--checkpoint-every", "0",
            "--no-progress", "--quiet", "--seed", "1", "--run-dir", str(run_dir)]


def command(procs: int, args: list) -> list:
    if procs == 1:
        return [sys.executable, "-m", "proxima", *args]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(procs), "--standalone", "-m", "proxima", *args]


def steps_per_second(metrics: Path) -> float:
    with open(metrics, newline="") as f:
        rows = list(csv.DictReader(f))
    if len(rows) < 2:  # the first row is the start of the timed span: one row times nothing (main asks for 2)
        raise ChildFailed(f"{metrics}: {len(rows)} iteration(s) logged, 2 are needed to time one; run more (--iterations)")
    first, last = rows[0], rows[-1]
    return (int(last["global_step"]) - int(first["global_step"])) / (float(last["time"]) - float(first["time"]))


def loadavg() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def run_once(procs: int, args_fn, workdir: Path, tag: str) -> dict:
    run_dir = workdir / tag
    cmd = command(procs, args_fn(run_dir))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    load0 = loadavg()
    # the run's processes (torchrun and its workers) are reaped before run_child returns: their CPU time is in here
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = run_child(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if res.returncode != 0:  # one line: the run and its last stderr line, not 3,000 characters of it
        shown = shlex.join(["python", *cmd[1:]])
        raise ChildFailed(f"`{shown}` failed (exit {res.returncode}): {(res.stderr.strip().splitlines() or ['no output'])[-1]}")
    return {"procs": procs, "sps": steps_per_second(run_dir / "metrics.csv"), "wall": wall, "load": (load0 + loadavg()) / 2,
            "share": cpu_share(cpu, wall, procs)}


def machine() -> dict:
    import torch

    from proxima.bench import cpu_model

    cpu = cpu_model()
    from proxima.cpuinfo import usable_cpus

    usable = usable_cpus()  # the affinity mask and a container's CPU quota, as proxima bench counts them
    return {"cpu": cpu, "cores": os.cpu_count(), "usable": usable, "torch": torch.__version__,
            "python": platform.python_version(), "os": f"{platform.system()} {platform.release()}"}


def table(results: list, procs_list: list) -> list:
    """The table's lines; "vs 1 process": the median (min-max) of each round's ratio to the 1-process
    run of that round ('-' without one). ``results`` in the order run: round by round."""
    ones = [r["sps"] for r in results if r["procs"] == 1]
    lines = ["| processes | envs (total) | steps/s median | range (min - max) | vs 1 process | runs | load avg (1 min) |",
             "|---|---|---|---|---|---|---|"]
    for p in procs_list:
        rs = [r for r in results if r["procs"] == p]
        sps = [r["sps"] for r in rs]
        med = statistics.median(sps)
        ratio = f"{median_range(round_ratios(sps, ones), digits=2)}x" if ones else "-"
        loads = [r["load"] for r in rs]
        lines.append(f"| {p} | {rs[0]['envs'] * p} | {med:,.0f} | {min(sps):,.0f} - {max(sps):,.0f} | {ratio} | {len(rs)} | "
                     f"{min(loads):.1f} - {max(loads):.1f} |")
    return lines


def run_config(num_envs: int, num_steps: int, iterations: int):
    """The PPOConfig each run trains with (train_args' flags over CartPole's defaults and preset), as
    `proxima train` reads it: the epochs and minibatches the report names come from here, not from text."""
    from proxima.cli import build_parser, config_from_args

    return config_from_args(build_parser().parse_args(train_args(num_envs, num_steps, iterations, 1, Path("DIR"))),
                            "proxima train")


def notes(results: list, m: dict, cfg) -> list:
    """The report's closing notes; ``cfg``: the runs' PPOConfig (run_config)."""
    load = statistics.mean(r["load"] for r in results)
    most = max(r["procs"] for r in results)
    out = ["Reading the numbers:", "",
           f"- Ideal scaling is K x: each process does exactly the work of the 1-process run (its own {cfg.num_envs} envs, "
           "its own update), and the only extra work is the gradient all-reduce (about 9k parameters, once per minibatch: "
           f"{cfg.update_epochs * cfg.num_minibatches} times an iteration, {cfg.update_epochs} epochs x {cfg.num_minibatches} "
           "minibatches) plus one metrics all-reduce and one stop vote per iteration."]
    if most > m["usable"] or load >= m["usable"]:
        out.append(f"- Here {most} processes share {m['usable']} usable cores with each other, the OS and other jobs "
                   f"(mean load average {load:.1f} on {m['usable']} cores during the runs): they compete for CPU time, so the "
                   "measured gain is well below ideal and says little about a machine with a free core per process. The "
                   "1-process run also leaves its idle core to the other jobs, which the ratio cannot show.")
    out += ["- Data parallelism on CPU pays when each process gets cores of its own; across GPUs (NCCL) or nodes is "
            "what it is for. For a small MLP on one machine, more envs in one process (see benchmarks/results/learning.md and "
            "the `fast` presets) is the cheaper way to use a core.", ""]
    return out


def main(argv=None) -> int:
    ap = parser("distributed.py", __doc__.splitlines()[0])
    ap.add_argument("--procs", default="1,2", help="process counts, comma separated (default 1,2)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=20, help="PPO iterations per run (the first is left out of steps/s)")
    ap.add_argument("--num-envs", type=int, default=64, help="envs per process")
    ap.add_argument("--num-steps", type=int, default=128)
    ap.add_argument("--out", default=None, help=f"markdown file to append the report to (default: print only; '-' too); "
                    f"the record is {RECORD.relative_to(ROOT)}")
    a = ap.parse_args(argv)
    from proxima.bench import parse_sizes

    try:
        procs_list = parse_sizes(a.procs, "--procs")
    except ValueError as e:
        return refuse("distributed.py", str(e))
    problem = arg_problem(a, at_least_one=("repeats", "num_envs", "num_steps"), files=("out",) if a.out not in (None, "-") else ())
    if not problem and a.iterations < 2:  # the first iteration is left out: one leaves nothing to time
        problem = f"--iterations {a.iterations}: must be at least 2 (the first is left out of steps/s)"
    if problem:
        return refuse("distributed.py", problem)
    results = []
    started = datetime.now().isoformat(timespec="seconds")
    with stopping_children("distributed.py", "proxima-bench-dist-") as tmp:
        for rep in range(a.repeats):  # interleaved, so slow phases of a shared machine hit every configuration
            for p in procs_list:
                try:
                    r = run_once(p, lambda d, p=p: train_args(a.num_envs, a.num_steps, a.iterations, p, d), tmp, f"p{p}-r{rep}")
                except ChildFailed as e:  # one line, not a traceback; nothing is written (the table comes at the end)
                    return refuse("distributed.py", str(e))
                r["envs"] = a.num_envs
                results.append(r)
                print(f"procs {p} repeat {rep + 1}: {r['sps']:,.0f} steps/s (process wall {r['wall']:.1f} s, load {r['load']:.1f})", flush=True)
    m = machine()
    cfg = run_config(a.num_envs, a.num_steps, a.iterations)
    example = {p: shlex.join(["OMP_NUM_THREADS=1", *command(p, train_args(a.num_envs, a.num_steps, a.iterations, p, Path("DIR")))]).replace(sys.executable, "python")
               for p in procs_list}
    lines = [
        f"# Distributed (data-parallel) scaling on CPU, {started[:16].replace('T', ' ')}",
        "",
        f"Training steps/s (env steps over all processes per second of the training loop, first iteration left out) for native CartPole-v1, "
        f"{a.num_envs} envs per process, {a.num_steps} steps per rollout, {a.iterations} iterations per run, default PPO settings "
        f"({cfg.update_epochs} epochs x {cfg.num_minibatches} minibatches), one torch thread per process, gloo all-reduce of the gradients (DDP) with 2+ processes. "
        f"{a.repeats} runs per configuration, interleaved, one run at a time.",
        "",
        "```",
        f"OMP_NUM_THREADS=1 python benchmarks/distributed.py --procs {a.procs} --repeats {a.repeats} --iterations {a.iterations} --num-envs {a.num_envs} --num-steps {a.num_steps}"
        + (f" --out {shlex.quote(a.out)}" if a.out not in (None, "-") else ""),
        "```",
        "",
        "Each run is:",
        "",
        "```",
        *example.values(),
        "```",
        "",
        f"- machine: {m['cpu']}, {m['cores']} logical cores ({m['usable']} usable), {m['os']}; torch {m['torch']}, Python {m['python']}; recorded {started}",
        "- the machine was shared with other jobs: load average column; numbers are only comparable within this table",
        "",
        *table(results, procs_list),
        "",
        *([note, ""] if (note := starved_note([r["share"] for r in results])) else []),
        "Per run (steps/s): " + "; ".join(f"{p} proc: " + ", ".join(f"{r['sps']:,.0f}" for r in results if r["procs"] == p) for p in procs_list),
        "",
        "Cores used per process, per run: " + "; ".join(f"{p} proc: " + ", ".join(f"{r['share']:.2f}" for r in results if r["procs"] == p)
                                                        for p in procs_list),
        "",
        *notes(results, m, cfg),
    ]
    text = "\n".join(lines)
    print(text)
    if a.out not in (None, "-"):
        from proxima.bench import save_markdown

        save_markdown(Path(a.out), text)  # an earlier run's table stays: a trial run must not replace the record
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
