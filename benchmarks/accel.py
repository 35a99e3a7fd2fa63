"""Eager vs --compile vs --amp bf16 training throughput, side by side in one run.

Measures full PPO iterations (rollout + GAE + update) with Trainer.train_iteration after a warm-up
iteration (which is where compilation happens), repeated --repeats times; reports the median and
the min-max range of env steps per second and the ratio to eager measured in the same run.

    python benchmarks/accel.py                      # CPU, the issue's table
    python benchmarks/accel.py --device cuda --modes eager,compile,cudagraphs,bf16
    python benchmarks/accel.py --out benchmarks/results/accel-cpu.md

Prints the table; with ``--out FILE`` also appends it to FILE as a new dated section (the tables
recorded there are kept), rewritten after every case and mode measured and marked partial until the
last, so a run stopped by a time limit keeps what it measured (list a slow mode, e.g. a cold
compile, last). Every case and mode is checked as train checks it (--threads, --device, a mode the
device cannot run: ``cudagraphs`` on the CPU) before the first is measured: one error line, exit
status 2, nothing written. A mode named twice in --modes (or a case in --cases) is measured once. A
mode that fails while measured (a failed compile) is a cell with its error, not the end of the run;
when no cell was measured, the table is printed, nothing is written and the exit status is 1. A
graphed mode whose capture fell back to eager says so in its cell ("graphs fell back: eager"),
never passing eager figures off as graph replays, as a compiled mode whose steps dynamo ran eagerly
does ("compile fell back: eager").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from tables import (Section, arg_problem, command, distinct, machine_line, median_range, partial_note, refuse,  # benchmarks/tables.py
                    started)

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


def case_config(env_id: str, num_envs: int, overrides: dict, mode: dict, device: str, repeats: int, threads: int):
    """The PPOConfig one case and mode train with: the env's default preset, the case's overrides, the mode's."""
    from proxima.config import PPOConfig
    from proxima.graphs import WARMUP
    from proxima.presets import resolve

    cfg = resolve(env_id, None, PPOConfig())
    cfg.num_envs, cfg.device, cfg.threads, cfg.progress = num_envs, device, threads, False
    for k, v in {**overrides, **mode}.items():
        setattr(cfg, k, v)
    cfg.total_timesteps = cfg.num_envs * cfg.num_steps * (repeats + WARMUP + 3)
    return cfg


def config_problem(args, device, cases: list, modes: list) -> str:
    """What the Trainer would refuse in some case and mode, as one line naming accel.py's flag, or '':
    train's checks (validate, the flags the device cannot run, free memory) without building
    anything. The Trainer's own refusal names the field (PPOConfig.threads) and became a "failed:"
    cell in every column of a table written to --out with exit status 0. The cases without a mode
    first: what is wrong there is --threads or --device, whatever --modes says. ``device``: --device resolved."""
    from proxima.config import ConfigError, validate
    from proxima.sizing import check_fits, env_probe
    from proxima.trainer import check_device_flags

    for m in [None, *modes]:
        for label, env_id, n, overrides in cases:
            cfg = case_config(env_id, n, overrides, MODES[m] if m else {}, args.device, args.repeats, args.threads)
            try:
                validate(cfg)  # flag words (--threads 100), not PPOConfig's
                check_device_flags(cfg, device)
                check_fits(cfg, device, env_probe(cfg))
            except ConfigError as e:
                if m is None:
                    return str(e)
                return f"--modes {args.modes}: mode {m!r} ({label}): {e}; drop it from --modes"
    return ""


def measure(env_id: str, num_envs: int, overrides: dict, mode: dict, device: str, repeats: int, threads: int) -> dict:
    """{"sps": steps/s of each timed iteration, "graphs": each part's state (graphs.part_states) with
    --cudagraphs, else None, "compile_eager": the compiled steps that ran eagerly after all
    (accel.eager_fallback) with --compile, else []}."""
    import torch

    from proxima.graphs import WARMUP, trainer_graph_states
    from proxima.trainer import Trainer

    cfg = case_config(env_id, num_envs, overrides, mode, device, repeats, threads)
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
    graphs = trainer_graph_states(trainer) if cfg.cudagraphs else None
    from proxima.accel import eager_fallback

    compile_eager = eager_fallback(trainer) if cfg.compile else []
    trainer.close()
    return {"sps": out, "graphs": graphs, "compile_eager": compile_eager}


def fell_back(graphs) -> str:
    """'' when every part was replayed as a graph (or the mode has none), else the parts that ran eagerly."""
    if not graphs or all(v == "graph" for v in graphs.values()):
        return ""
    return "; ".join(f"{k}: {v}" for k, v in graphs.items() if v != "graph")


def cell(result, base) -> str:
    """One mode's cell: 'median (min-max), ratio to the base mode' (the README's "median (min-max)",
    as every other table writes it), '-' when not measured (yet), 'failed: ...' when it raised;
    marked when its graphs fell back to eager."""
    if result is None:
        return "-"
    if "error" in result:
        return f"failed: {result['error']}"
    sps = result["sps"]
    med = statistics.median(sps)
    ratio = f", {med / statistics.median(base['sps']):.2f}x" if base and "sps" in base else ""
    text = median_range(sps, fmt=lambda v: f"{v:,.0f}") + ratio
    fallback = fell_back(result.get("graphs"))
    text = f"**graphs fell back: eager** ({fallback}) {text}" if fallback else text
    compile_eager = result.get("compile_eager")
    return f"**compile fell back: eager** ({', '.join(compile_eager)}) {text}" if compile_eager else text


def parse_cases(text: str) -> list:
    """'0,2' -> [CASES[0], CASES[2]]; '' -> every case; ValueError naming --cases otherwise."""
    if not text:
        return list(CASES)
    try:
        picked = [int(i) for i in text.split(",")]
    except ValueError:
        picked = []
    if not picked or any(not 0 <= i < len(CASES) for i in picked):
        raise ValueError(f"--cases {text!r}: expected comma-separated case numbers from 0 to {len(CASES) - 1}, e.g. 0,2")
    return [CASES[i] for i in distinct(picked)]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--modes", default="eager,compile,bf16",
                   help=f"comma-separated, measured in this order (a slow one, such as a cold compile, last; one "
                        f"named twice is measured once), the first is the base of the ratios: {', '.join(MODES)}")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cases", default="", help="comma-separated case indices (default all): "
                   + "; ".join(f"{i}: {c[0]}" + (f" x {c[3]['num_steps']} steps" if "num_steps" in c[3] else "") for i, c in enumerate(CASES)))
    p.add_argument("--out", default=None, help="append the table to this file, rewritten after every case and mode "
                   "(default: print only)")
    return p


def main(argv=None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    modes = distinct(args.modes.split(","))  # twice in the table's columns showed the second measurement in both
    unknown = [m for m in modes if m not in MODES]
    if unknown:  # before the first mode is measured, not at the unknown one
        return refuse("accel.py", f"--modes {args.modes}: no mode {unknown[0]!r} (modes: {', '.join(MODES)})")
    try:
        cases = parse_cases(args.cases)
    except ValueError as e:
        return refuse("accel.py", str(e))
    problem = arg_problem(args, at_least_one=("repeats", "threads"))
    if problem:
        return refuse("accel.py", problem)

    import torch

    from proxima.config import ConfigError
    from proxima.device import resolve_device

    try:  # --device cuda on a machine without one: train's one line, before the first case
        device = resolve_device(args.device)
    except ConfigError as e:
        return refuse("accel.py", str(e))
    problem = config_problem(args, device, cases, modes)
    if problem:
        return refuse("accel.py", problem)
    torch.set_num_threads(args.threads)
    start = started()
    section = Section(args.out, "accel.py")
    rows = [(label, {}) for label, *_ in cases]
    total, done = len(cases) * len(modes), 0

    def measured() -> bool:
        return any("sps" in r for _, results in rows for r in results.values())

    for (label, env_id, n, overrides), (_, results) in zip(cases, rows):
        for m in modes:
            try:
                results[m] = measure(env_id, n, overrides, MODES[m], args.device, args.repeats, args.threads)
                sps = results[m]["sps"]
                fallback = fell_back(results[m]["graphs"])
                compile_eager = results[m].get("compile_eager")
                print(f"{label:<42} {m:<13} median {statistics.median(sps):>12,.0f} steps/s  range {min(sps):,.0f}-{max(sps):,.0f}"
                      + (f"  graphs fell back: eager ({fallback})" if fallback else "")
                      + (f"  compile fell back: eager ({', '.join(compile_eager)})" if compile_eager else ""), file=sys.stderr, flush=True)
            except Exception as e:  # noqa: BLE001 - one mode's crash (a failed compile) is a cell, not the end of the table
                results[m] = {"error": (str(e).strip().splitlines() or [type(e).__name__])[0][:200]}
                print(f"{label:<42} {m:<13} failed: {results[m]['error']}", file=sys.stderr, flush=True)
            done += 1
            if done < total and measured():  # a section of "failed:" cells alone is no result
                section.update(report(p, args, modes, rows, start, partial_note(done, total, "case and mode measurements")))
    if not measured():
        print(report(p, args, modes, rows, start), flush=True)
        first = next(r["error"] for _, results in rows for r in results.values())
        print(f"accel.py: error: no case and mode was measured{' (nothing written to --out)' if args.out else ''}; "
              f"the first failed: {first}", file=sys.stderr)
        return 1
    return section.finish(report(p, args, modes, rows, start))


def report(p, args, modes: list, rows: list, start: tuple, partial: str = "") -> str:
    """The Markdown section: one row per case, one cell per mode ('-' where not measured yet)."""
    base = modes[0]
    lines = [f"## Training throughput: {' vs '.join(modes)} ({args.device}), {start[0]:%Y-%m-%d %H:%M}", "",
             *([partial, ""] if partial else []),
             f"{machine_line(args.threads, start)}.", "",
             command("accel.py", p, args), "",
             "Full PPO iterations (rollout + GAE + update at the preset's epochs/minibatches), env steps/s: median (min-max) of "
             f"{args.repeats} iterations after a warm-up (compile time excluded), then the ratio median / {base} median.", "",
             "| task | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    for label, results in rows:
        lines.append(f"| {label} | " + " | ".join(cell(results.get(m), results.get(base)) for m in modes) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
