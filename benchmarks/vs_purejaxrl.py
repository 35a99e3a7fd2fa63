"""Proxima against PureJaxRL, side by side in one run: training steps/s at the same PPO shape.

The shape of ../shared/perf/H200-2026-11-30.md: native CartPole, 16-step rollouts, 4 epochs x 4
minibatches, 64x64 tanh actor and critic (Proxima's default CartPole preset with --num-steps 16;
PureJaxRL's CartPole config with NUM_STEPS 16). For each env count and each of ``--repeats``
rounds, one Proxima measurement (``proxima bench ... --json``: whole training iterations after
warm-up) and one PureJaxRL run (the anchor's ``--configs ENVSx16xTOTAL``: one jitted training run
after compilation, compile time excluded) alternate, so both see the same machine load.

    .venv/bin/python benchmarks/vs_purejaxrl.py                                  # CPU, 4,096 envs, 1 thread each
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
import platform
import shlex
import statistics
import subprocess
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ANCHORS = (ROOT.parent / "shared" / "anchors" / "purejaxrl_cartpole.py", ROOT / ".anchors" / "purejaxrl_cartpole.py")
#: PureJaxRL's total timesteps per env count: runs of ~5-15 s at the speeds measured so far
PJR_TOTAL = {"cpu": {4096: 4e6}, "cuda": {2048: 2e7, 4096: 4e7, 65536: 1e8, 1048576: 3.4e8}}


def single_thread_env(device: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    if device == "cpu":  # XLA's own thread pools, as ../shared/anchors/README.md runs it
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        env["JAX_PLATFORMS"] = "cpu"
    return env


def proxima_cmd(args, envs: int) -> list:
    cmd = [sys.executable, "-m", "proxima", "bench", "CartPole-v1", "--device", args.device, "--backend", "native",
           "--num-steps", "16", "--num-envs", str(envs), "--repeats", "1", "--seconds", str(args.seconds),
           "--threads", "1", "--json"]
    return cmd + (["--compile"] if args.compile else []) + (["--cudagraphs"] if args.cudagraphs else [])


def pjr_cmd(args, envs: int) -> list:
    total = PJR_TOTAL.get(args.device.split(":")[0], {}).get(envs, envs * 16 * 200)
    return [args.jax_python, str(args.anchor), "--configs", f"{envs}x16x{total:g}"]


def run_json(cmd: list, env: dict, timeout: float) -> dict:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({proc.returncode}): {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(lines[-1])


def fmt(xs: list) -> str:
    if not xs:
        return "-"
    k = lambda v: f"{v / 1e6:.2f}M" if v >= 1e6 else f"{v / 1e3:.1f}k"  # noqa: E731
    return f"{k(statistics.median(xs))} ({k(min(xs))}-{k(max(xs))})"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--num-envs", default="4096", help="comma-separated env counts")
    p.add_argument("--repeats", type=int, default=3, help="alternating rounds (default 3)")
    p.add_argument("--seconds", type=float, default=2.0, help="Proxima's timed seconds per round")
    p.add_argument("--compile", action="store_true", help="Proxima with --compile")
    p.add_argument("--cudagraphs", action="store_true", help="Proxima with --cudagraphs")
    p.add_argument("--jax-python", default=str(ROOT / ".jax-venv" / "bin" / "python") if (ROOT / ".jax-venv").exists() else "python3")
    p.add_argument("--anchor", type=Path, default=next((a for a in ANCHORS if a.exists()), ANCHORS[0]))
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per subprocess")
    p.add_argument("--out", default=None, help="append the Markdown table here (default: print only)")
    args = p.parse_args(argv)
    if not args.anchor.exists():
        print(f"vs_purejaxrl: no PureJaxRL anchor at {args.anchor} (see ../shared/anchors/README.md)", file=sys.stderr)
        return 2
    env = single_thread_env(args.device)
    rows = []
    for envs in (int(x) for x in args.num_envs.split(",")):
        ours, theirs, compile_s = [], [], []
        for r in range(args.repeats):
            line = run_json(proxima_cmd(args, envs), env, args.timeout)
            ours.append(line["train_sps"])
            res = run_json(pjr_cmd(args, envs), env, args.timeout)
            theirs.append(res["steps_per_second"])
            compile_s.append(res["compile_seconds"])
            print(f"{envs} envs, round {r + 1}: Proxima {ours[-1]:,.0f} steps/s, PureJaxRL {theirs[-1]:,.0f} steps/s", flush=True)
        ratios = sorted(o / t for o, t in zip(ours, theirs))
        rows.append((envs, ours, theirs, ratios, compile_s))
    mode = " ".join(f for f, on in (("--compile", args.compile), ("--cudagraphs", args.cudagraphs)) if on) or "eager"
    lines = [f"## Proxima ({mode}) vs PureJaxRL, {args.device}, {datetime.now():%Y-%m-%d %H:%M}", "",
             f"{platform.processor() or platform.machine()}, Python {platform.python_version()}; native CartPole, "
             "16-step rollouts, 4 epochs x 4 minibatches, 64x64 tanh; 1 intra-op thread each on CPU. "
             f"Median (min-max) of {args.repeats} alternating rounds; ratio = per-round Proxima / PureJaxRL.", "",
             "| envs | Proxima steps/s | PureJaxRL steps/s | Proxima / PureJaxRL | PureJaxRL compile s |",
             "|---:|---:|---:|---:|---:|"]
    for envs, ours, theirs, ratios, compile_s in rows:
        lines.append(f"| {envs:,} | {fmt(ours)} | {fmt(theirs)} | {statistics.median(ratios):.2f} "
                     f"({ratios[0]:.2f}-{ratios[-1]:.2f}) | {statistics.median(compile_s):.1f} |")
    lines += ["", f"Command: `python benchmarks/vs_purejaxrl.py {' '.join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))}`",
              f"Proxima per round: `{shlex.join(['proxima', *proxima_cmd(args, 0)[3:]]).replace('--num-envs 0', '--num-envs N')}`",
              f"PureJaxRL per round: `python purejaxrl_cartpole.py --configs Nx16xTOTAL` (TOTAL: {PJR_TOTAL.get(args.device.split(':')[0], {})})", ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
