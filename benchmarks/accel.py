"""Eager vs --compile vs --amp bf16 training throughput, side by side in one run.

Measures full PPO iterations (rollout + GAE + update) with Trainer.train_iteration after a warm-up
iteration (which is where compilation happens), repeated --repeats times; reports the median and
the min-max range of env steps per second and the ratio to eager measured in the same run.

    python benchmarks/accel.py                      # CPU, the issue's table
    python benchmarks/accel.py --device cuda --modes eager,compile,cudagraphs,bf16

Writes benchmarks/results/accel-<device>.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import torch

from proxima.config import PPOConfig
from proxima.graphs import WARMUP
from proxima.presets import resolve
from proxima.trainer import Trainer

MODES = {
    "eager": {},
    "compile": {"compile": True},
    "bf16": {"amp": "bf16"},
    "compile+bf16": {"compile": True, "amp": "bf16"},
    "cudagraphs": {"cudagraphs": True},
    "compile+cudagraphs": {"compile": True, "cudagraphs": True},
}

CASES = [  # (label, env id, num_envs, overrides)
    ("CartPole 64 envs", "CartPole-v1", 64, {}),
    ("CartPole 1,024 envs", "CartPole-v1", 1024, {}),
    ("CartPole 16,384 envs", "CartPole-v1", 16384, {"num_steps": 16}),
    ("17-obs/6-act, 256x256 MLP, 64 envs", "LinearQuadratic-v0", 64, {"hidden_sizes": [256, 256], "num_steps": 128, "num_minibatches": 4, "update_epochs": 4, "ent_coef": 0.0}),
    ("17-obs/6-act, 256x256 MLP, 1,024 envs", "LinearQuadratic-v0", 1024, {"hidden_sizes": [256, 256], "num_steps": 32, "num_minibatches": 4, "update_epochs": 4, "ent_coef": 0.0}),
]


def measure(env_id: str, num_envs: int, overrides: dict, mode: dict, device: str, repeats: int, threads: int) -> list[float]:
    cfg = resolve(env_id, None, PPOConfig())
    cfg.num_envs, cfg.device, cfg.threads, cfg.progress = num_envs, device, threads, False
    for k, v in {**overrides, **mode}.items():
        setattr(cfg, k, v)
    cfg.total_timesteps = cfg.num_envs * cfg.num_steps * (repeats + WARMUP + 3)
    trainer = Trainer(cfg, run_dir=Path("/tmp/proxima-bench-unused"), quiet=True)
    for _ in range(WARMUP + 1):  # warm-up: compilation, allocator, caches, and the graphs' capture
        trainer.train_iteration()
    out = []
    for _ in range(repeats):
        if trainer.device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        metrics = trainer.train_iteration()
        float(metrics["policy_loss"])  # wait for the device
        out.append(trainer.steps_per_iteration / (time.perf_counter() - t))
    trainer.close()
    return out


def machine() -> str:
    from proxima.bench import cpu_model

    cpu = cpu_model()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return f"{cpu}, {os.cpu_count()} cores, GPU: {gpu}, torch {torch.__version__}, Python {platform.python_version()}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--modes", default="eager,compile,bf16")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cases", default="", help="comma-separated case indices (default all)")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    modes = args.modes.split(",")
    cases = [CASES[int(i)] for i in args.cases.split(",")] if args.cases else CASES
    rows = []
    for label, env_id, n, overrides in cases:
        results = {}
        for m in modes:
            sps = measure(env_id, n, overrides, MODES[m], args.device, args.repeats, args.threads)
            results[m] = sps
            print(f"{label:<42} {m:<13} median {statistics.median(sps):>12,.0f} steps/s  range {min(sps):,.0f}-{max(sps):,.0f}", flush=True)
        rows.append((label, results))
    base = modes[0]
    lines = [f"# Training throughput: {' vs '.join(modes)} ({args.device})", "",
             f"Machine: {machine()}; torch threads {args.threads}; {date.today().isoformat()}.",
             f"Command: `python benchmarks/accel.py --device {args.device} --modes {args.modes} --repeats {args.repeats} --threads {args.threads}`", "",
             "Full PPO iterations (rollout + GAE + update at the preset's epochs/minibatches), env steps/s, median of "
             f"{args.repeats} iterations after a warm-up (compile time excluded), range in brackets; ratio = median / {base} median.", "",
             "| task | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    for label, results in rows:
        b = statistics.median(results[base])
        cells = []
        for m in modes:
            med = statistics.median(results[m])
            cells.append(f"{med:,.0f} [{min(results[m]):,.0f}-{max(results[m]):,.0f}] ({med / b:.2f}x)")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    out = Path(args.out or Path(__file__).parent / "results" / f"accel-{args.device.split(':')[0]}.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
