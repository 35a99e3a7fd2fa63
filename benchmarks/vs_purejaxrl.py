"""Proxima against PureJaxRL, side by side in one run: training steps/s at the same PPO shape.

The shape of ../shared/perf/H200-2026-11-30.md: native CartPole, 16-step rollouts, 4 epochs x 4
minibatches, 64x64 tanh actor and critic (Proxima's default CartPole preset with --num-steps 16;
PureJaxRL's CartPole config with NUM_STEPS 16). For each env count and each of ``--repeats``
rounds, one Proxima measurement (``proxima bench ... --json``: whole training iterations after
warm-up) and one PureJaxRL run (the anchor's ``--configs ENVSx16xTOTAL``: one jitted training run
after compilation, compile time excluded) alternate, so both see the same machine load. On the
CPU both processes are bound to the same single core by default (``--cpus one``): PureJaxRL's XLA
thread pool takes every core otherwise, whatever ``XLA_FLAGS`` say (1.5-1.6 of this machine's 2).
``--cpus all --threads 2`` compares the whole machine against the whole machine.

    .venv/bin/python benchmarks/vs_purejaxrl.py                                  # CPU, 4,096 envs, both on one core
    .venv/bin/python benchmarks/vs_purejaxrl.py --device cuda --cudagraphs --num-envs 2048,65536,1048576 \\
        --out benchmarks/results/vs-purejaxrl-cuda.md

PureJaxRL runs in its own interpreter (``--jax-python``, default ``.jax-venv/bin/python`` when it
exists, else ``python3``) from the anchor file (``--anchor``, default ../shared/anchors/
purejaxrl_cartpole.py or .anchors/purejaxrl_cartpole.py); ../shared/anchors/README.md says how to
install it. Results: the table on stdout, appended to ``--out`` when given.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from proxima.bench import parse_sizes
from tables import arg_problem, command, emit, machine_line, median_range, refuse, started  # benchmarks/tables.py

ROOT = Path(__file__).resolve().parents[1]
ANCHORS = (ROOT.parent / "shared" / "anchors" / "purejaxrl_cartpole.py", ROOT / ".anchors" / "purejaxrl_cartpole.py")
#: PureJaxRL's total timesteps per env count: runs of ~5-15 s at the speeds measured so far
PJR_TOTAL = {"cpu": {4096: 4e6}, "cuda": {2048: 2e7, 4096: 4e7, 65536: 1e8, 1048576: 3.4e8}}


def pinned_core() -> int:
    """The core both sides run on with ``--cpus one``: the last this process may use."""
    return max(os.sched_getaffinity(0))


def cpu_binding(cpus: str):
    """A ``preexec_fn`` binding a child to one core (``cpus == "one"``), or None (``"all"``).

    Why: the XLA flags of ``single_thread_env`` do not bind jax 0.11's CPU runtime, whose
    ``tf_XLAEigen`` pool has a thread per core: unbound, PureJaxRL used 1.5-1.6 of this machine's
    2 cores (whole-process CPU time / wall time) while Proxima used 1. Its pool sizes itself from
    the affinity mask, so one core bound is one core used."""
    if cpus == "all":
        return None
    core = pinned_core()
    return lambda: os.sched_setaffinity(0, {core})


def single_thread_env(device: str) -> dict:
    # this tree first, the caller's path after it (gpu_session.sh puts carried wheels there)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path)
    if device == "cpu":  # XLA's own thread pools, as ../shared/anchors/README.md runs it
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        env["JAX_PLATFORMS"] = "cpu"
    return env


def proxima_cmd(args, envs, repeats: int = 1) -> list:
    cmd = [sys.executable, "-m", "proxima", "bench", "CartPole-v1", "--device", args.device, "--backend", "native",
           "--num-steps", "16", "--num-envs", str(envs), "--repeats", str(repeats), "--seconds", str(args.seconds),
           "--threads", str(args.threads), "--json"]
    return cmd + (["--compile"] if args.compile else []) + (["--cudagraphs"] if args.cudagraphs else [])


def pjr_config(args, envs: int) -> str:
    total = PJR_TOTAL.get(args.device.split(":")[0], {}).get(envs, envs * 16 * 200)
    return f"{envs}x16x{total:g}"


def pjr_cmd(args, envs: int) -> list:
    return [args.jax_python, str(args.anchor), "--configs", pjr_config(args, envs)]


def child_cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_json_lines(cmd: list, env: dict, timeout: float, cpus: str = "all") -> list:
    """The JSON lines ``cmd`` prints; the last one gets "cores_used": the whole process's CPU
    seconds over its wall seconds (start-up and, for PureJaxRL, compilation included)."""
    cpu0, t0 = child_cpu_seconds(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout,
                          preexec_fn=cpu_binding(cpus))
    wall = time.perf_counter() - t0
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({proc.returncode}): {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    lines[-1]["cores_used"] = (child_cpu_seconds() - cpu0) / wall
    return lines


def run_json(cmd: list, env: dict, timeout: float, cpus: str = "all") -> dict:
    return run_json_lines(cmd, env, timeout, cpus)[-1]


def alternating(args, env: dict, sizes: list) -> list:
    """Per size, --repeats rounds of one Proxima process then one PureJaxRL process (fair under load)."""
    rows = []
    for envs in sizes:
        ours, theirs, compile_s, cores = [], [], [], ([], [])
        for r in range(args.repeats):
            res = run_json(proxima_cmd(args, envs), env, args.timeout, args.cpus)
            ours.append(res["train_sps"])
            cores[0].append(res["cores_used"])
            res = run_json(pjr_cmd(args, envs), env, args.timeout, args.cpus)
            theirs.append(res["steps_per_second"])
            compile_s.append(res["compile_seconds"])
            cores[1].append(res["cores_used"])
            print(f"{envs} envs, round {r + 1}: Proxima {ours[-1]:,.0f} steps/s ({cores[0][-1]:.2f} cores), "
                  f"PureJaxRL {theirs[-1]:,.0f} steps/s ({cores[1][-1]:.2f} cores)", flush=True)
        rows.append((envs, ours, theirs, sorted(o / t for o, t in zip(ours, theirs)), compile_s, cores))
    return rows


def single_call(args, env: dict, sizes: list) -> list:
    """One Proxima process (every size, --repeats each) and one PureJaxRL process (every size
    --repeats times): two start-ups instead of 2 x sizes x repeats, for a machine rented by the
    minute. Ratio = median / median; its range pairs the extremes (ours min / theirs max ..)."""
    our_lines = run_json_lines(proxima_cmd(args, ",".join(map(str, sizes)), args.repeats), env, args.timeout, args.cpus)
    ours = {line["num_envs"]: line for line in our_lines}
    configs = [pjr_config(args, envs) for envs in sizes for _ in range(args.repeats)]
    theirs: dict = {}
    their_lines = run_json_lines([args.jax_python, str(args.anchor), "--configs", *configs], env, args.timeout, args.cpus)
    for res in their_lines:
        theirs.setdefault(res["num_envs"], []).append(res)
    cores = ([our_lines[-1]["cores_used"]], [their_lines[-1]["cores_used"]])  # one process per side
    rows = []
    for envs in sizes:
        o = ours[envs]
        mine = [o["train_sps_min"], o["train_sps"], o["train_sps_max"]]
        sps = sorted(r["steps_per_second"] for r in theirs[envs])
        ratios = [mine[0] / sps[-1], mine[1] / statistics.median(sps), mine[2] / sps[0]]
        rows.append((envs, mine, sps, ratios, [r["compile_seconds"] for r in theirs[envs]], cores))
        print(f"{envs} envs: Proxima {mine[1]:,.0f} steps/s, PureJaxRL {statistics.median(sps):,.0f} steps/s", flush=True)
    return rows


def fmt(xs: list) -> str:
    """Steps/s as 'median (min-max)' in k or M."""
    return median_range(xs, fmt=lambda v: f"{v / 1e6:.2f}M" if v >= 1e6 else f"{v / 1e3:.1f}k")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--num-envs", default="4096", help="comma-separated env counts")
    p.add_argument("--repeats", type=int, default=3, help="alternating rounds (default 3)")
    p.add_argument("--seconds", type=float, default=10.0,
                   help="Proxima's timed seconds per round (default 10: on a shared machine the load comes in "
                        "phases of seconds, and PureJaxRL's figure averages a whole ~20 s run; a 2 s window "
                        "catches one phase, which made single rounds swing 0.7x-1.1x)")
    p.add_argument("--cpus", choices=("one", "all"), default=None,
                   help="one: both sides bound to the same single core (the default on CPU: PureJaxRL's XLA "
                        "pool otherwise takes every core, whatever its flags say); all: unbound (the default on CUDA)")
    p.add_argument("--threads", type=int, default=1, help="Proxima's --threads (default 1)")
    p.add_argument("--compile", action="store_true", help="Proxima with --compile")
    p.add_argument("--cudagraphs", action="store_true", help="Proxima with --cudagraphs")
    p.add_argument("--jax-python", default=str(ROOT / ".jax-venv" / "bin" / "python") if (ROOT / ".jax-venv").exists() else "python3")
    p.add_argument("--anchor", type=Path, default=next((a for a in ANCHORS if a.exists()), ANCHORS[0]))
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per subprocess")
    p.add_argument("--single-call", action="store_true",
                   help="one process per side for all sizes and repeats instead of alternating rounds (a GPU machine's time is short)")
    p.add_argument("--out", default=None, help="append the Markdown table here (default: print only)")
    args = p.parse_args(argv)
    try:
        sizes = parse_sizes(args.num_envs)
    except ValueError as e:
        return refuse("vs_purejaxrl.py", str(e))
    problem = arg_problem(args, at_least_one=("repeats", "threads"), positive=("seconds", "timeout"))
    if problem:
        return refuse("vs_purejaxrl.py", problem)
    if args.cpus is None:
        args.cpus = "one" if args.device == "cpu" else "all"
    if args.cpus == "one" and args.threads != 1:
        return refuse("vs_purejaxrl.py", f"--threads {args.threads}: above 1 needs --cpus all (one core bound runs one thread at a time)")
    if not args.anchor.exists():
        return refuse("vs_purejaxrl.py", f"--anchor {args.anchor}: no PureJaxRL anchor there (see ../shared/anchors/README.md)")
    env = single_thread_env(args.device)
    start = started()
    rows = single_call(args, env, sizes) if args.single_call else alternating(args, env, sizes)
    mode = " ".join(f for f, on in (("--compile", args.compile), ("--cudagraphs", args.cudagraphs)) if on) or "eager"
    lines = [f"## Proxima ({mode}) vs PureJaxRL, {args.device}, {datetime.now():%Y-%m-%d %H:%M}", "",
             f"{machine_line(args.threads, start)}. Native CartPole, "
             "16-step rollouts, 4 epochs x 4 minibatches, 64x64 tanh; "
             + (f"both processes bound to core {pinned_core()} (PureJaxRL's XLA pool sizes itself from the affinity mask). "
                if args.cpus == "one" else f"unbound on {os.cpu_count()} cores, Proxima --threads {args.threads}. ")
             + "Cores used: whole-process CPU time / wall time (start-up and compilation included). "
             + (f"Median (min-max) of {args.repeats} repeats per side, each side in one process; ratio = median / median "
              "(range: extreme against extreme)." if args.single_call else
              f"Median (min-max) of {args.repeats} alternating rounds; ratio = per-round Proxima / PureJaxRL."), "",
             "| envs | Proxima steps/s | PureJaxRL steps/s | Proxima / PureJaxRL | cores used (Proxima, PureJaxRL) | PureJaxRL compile s |",
             "|---:|---:|---:|---:|---:|---:|"]
    for envs, ours, theirs, ratios, compile_s, cores in rows:
        lines.append(f"| {envs:,} | {fmt(ours)} | {fmt(theirs)} | {statistics.median(ratios):.2f} "
                     f"({ratios[0]:.2f}-{ratios[-1]:.2f}) | {statistics.median(cores[0]):.2f}, {statistics.median(cores[1]):.2f} "
                     f"| {statistics.median(compile_s):.1f} |")
    lines += ["", command("vs_purejaxrl.py", p, args),
              f"Proxima: `{shlex.join(['proxima', *proxima_cmd(args, 0, args.repeats if args.single_call else 1)[3:]]).replace('--num-envs 0', '--num-envs N')}`",
              f"PureJaxRL: `python purejaxrl_cartpole.py --configs Nx16xTOTAL` (TOTAL: {PJR_TOTAL.get(args.device.split(':')[0], {})})", ""]
    return emit("\n".join(lines), args.out, script="vs_purejaxrl.py")


if __name__ == "__main__":
    sys.exit(main())
