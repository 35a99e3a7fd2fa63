"""Time to solve CartPole with a preset, over many seeds: the robustness table of `--preset fast`.

    .venv/bin/python benchmarks/solve_time.py                          # fast preset, seeds 1-10
    .venv/bin/python benchmarks/solve_time.py --preset gpu --device cuda --out benchmarks/results/solve-gpu.md
    .venv/bin/python benchmarks/solve_time.py --set lr=3e-3 --set num_envs=512 --seeds 7,9   # try a variant

Each seed is one ``proxima train ENV --preset P --seed S`` subprocess, timed from launch to exit
(Python start, imports, training, the checkpoint and the final evaluation). "Solved" means the final
deterministic evaluation over ``--eval-episodes`` (20) episodes has a mean return >= ``--threshold``
(475). The section's header records the preset's config as it resolved when the table was made
(PPOConfig defaults <- the preset), so a later change to the preset does not pass for the one that
ran. The table gives, per seed, the wall time and the evaluation, then the count solved and the
median and range of the wall time. Runs are sequential, one torch thread each; ``--parallel K`` runs
K seeds at a time (a GPU machine's start-ups overlap: each wall is still from its own launch, and
sharing the machine can only lengthen it, so the figures are upper bounds). With ``--out`` the
section is rewritten after every seed (marked partial until the last), so a run stopped by a time
limit leaves the seeds it finished; a run whose every seed failed appends nothing. A seed of a
``--cudagraphs`` preset (``gpu``) whose capture fell back to eager (``proxima train``'s note on
stderr) is marked "graphs fell back" in its row, and the summary line says how many did. A SIGTERM
(a time limit) or Ctrl-C kills the seeds' processes and removes their temporary folder
(``tables.stopping_children``), exit status 143 or 130; the section keeps the seeds finished.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

from population_vs_purejaxrl import graphs_note  # the tables read train's fallback note one way
from tables import (Section, arg_problem, command, machine_line, partial_note, refuse, run_child, started,  # benchmarks/tables.py
                    parser, stopping_children)

ROOT = Path(__file__).resolve().parents[1]


def run_seed(args, seed: int, workdir: Path) -> dict:
    run_dir = workdir / f"seed{seed}"
    cmd = [sys.executable, "-m", "proxima", "train", args.env_id, "--preset", args.preset, "--seed", str(seed),
           "--run-dir", str(run_dir), "--no-progress", "--eval-episodes", str(args.eval_episodes),
           "--threads", "1", "--device", args.device]
    for item in args.set:
        key, _, value = item.partition("=")
        cmd += [f"--{key.replace('_', '-')}", value]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)  # keep carried wheels' path
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path)
    t0 = time.perf_counter()
    proc = run_child(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"seed": seed, "wall": wall, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    result = json.loads((run_dir / "eval.json").read_text())
    with open(run_dir / "metrics.csv") as f:  # the steps trained: fewer than the total where --stop-return stopped it
        steps = int(list(csv.DictReader(f))[-1]["global_step"])
    row = {"seed": seed, "wall": wall, "mean_return": result["mean_return"], "std_return": result["std_return"],
           "steps": steps, "command": shlex.join(["proxima", *cmd[3:]])}
    note = graphs_note(proc.stderr)  # a failed capture exits 0: its wall is an eager one, not a graph replay's
    return {**row, "graphs": note} if note else row


def table(args, rows: list, machine: str, command_line: str, total: int = 0) -> str:
    """The Markdown section of a run. Seeds whose process failed are rows with their error, left out
    of the wall median (a crash's time says nothing about the time to solve) and named under it.
    ``total``: the seeds the run has, when more than ``rows``: the section is marked partial."""
    solved = [r for r in rows if r.get("mean_return", -1e9) >= args.threshold]
    done = [r for r in rows if "error" not in r]
    failed = [r for r in rows if "error" in r]
    eager = [r for r in done if r.get("graphs")]
    walls = [r["wall"] for r in done]
    lines = [f"## `proxima train {args.env_id} --preset {args.preset}`" + (" " + " ".join(f"--{s}" for s in args.set) if args.set else ""),
             *(["", partial_note(len(rows), total, "seeds")] if total > len(rows) else []),
             "", f"device {args.device}, {machine}; "
             + (f"{args.parallel} seeds at a time (each wall from its own launch); " if args.parallel > 1 else "")
             + f"{args.eval_episodes}-episode deterministic evaluation, solved = mean >= {args.threshold:g}", "",
             preset_line(args), "",
             "| seed | wall from launch (s) | steps trained | eval mean +- std | solved |", "|---:|---:|---:|---:|:---:|"]
    for r in rows:
        ev = f"{r['mean_return']:.1f} +- {r['std_return']:.1f}" if "mean_return" in r else f"error: {r['error']}"
        steps = f"{r['steps']:,}" if "steps" in r else "-"
        seed = f"{r['seed']} **{r['graphs']}**" if r.get("graphs") else str(r["seed"])
        lines.append(f"| {seed} | {r['wall']:.2f} | {steps} | {ev} | {'yes' if r in solved else 'no'} |")
    summary = (f"**{len(solved)} of {len(rows)} seeds solved**; wall median {statistics.median(walls):.2f} s "
               f"(range {min(walls):.2f}-{max(walls):.2f} s)")
    if failed:
        summary += (f" over the {len(done)} seeds that finished; seed{'s' if len(failed) > 1 else ''} "
                    f"{', '.join(str(r['seed']) for r in failed)} failed (the error in the row) and {'are' if len(failed) > 1 else 'is'} "
                    "left out of it")
    if eager:
        summary += (f"; {len(eager)} of {len(done)} seeds fell back from CUDA graphs to eager (marked in the row): "
                    + ("their walls are not graph-replay times" if len(eager) > 1 else "its wall is not a graph-replay time"))
    lines += ["", summary + ".", "", command_line, ""]
    return "\n".join(lines)


#: fields run_seed sets on the command line (or that only name where a seed writes): not the preset's to record
PER_RUN = ("env_id", "seed", "run_dir", "threads", "progress", "device", "eval_episodes")


def preset_line(args) -> str:
    """The preset as it resolves now, every field but PER_RUN, as compact JSON: presets change
    (CartPole's fast was 450k steps at clip 0.2 on 2026-11-29) and the heading names only the preset."""
    from proxima.presets import resolve

    cfg = {k: v for k, v in resolve(args.env_id, args.preset).to_dict().items() if k not in PER_RUN}
    given = " (the heading's flags override it)" if args.set else ""
    return f"`{args.preset}` preset as resolved for this table{given}: `{json.dumps(cfg, separators=(',', ':'))}`"


def build_parser() -> argparse.ArgumentParser:
    p = parser("solve_time.py", __doc__.split("\n")[0])
    p.add_argument("--env-id", default="CartPole-v1")
    p.add_argument("--preset", default="fast")
    p.add_argument("--seeds", default="1-10", help="'1-10' or '1,4,7'")
    p.add_argument("--device", default="cpu")
    p.add_argument("--eval-episodes", type=int, default=20)
    p.add_argument("--threshold", type=float, default=475.0)
    p.add_argument("--parallel", type=int, default=1, metavar="K",
                   help="run K seeds at a time (default 1); each wall is still from its own launch")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="extra train flag, e.g. lr=3e-3")
    p.add_argument("--out", default=None, help="append the table to this Markdown file, rewritten after every seed "
                   "(default: print only)")
    return p


def main(argv=None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    # no evaluation, or a threshold of nan, leaves nothing to call solved
    problem = arg_problem(args, at_least_one=("eval_episodes", "parallel"), finite=("threshold",))
    for item in args.set:
        field, equals, _ = item.partition("=")
        if not (field and equals):
            problem = problem or f"--set {item}: expected FIELD=VALUE, e.g. lr=3e-3"
    if problem:
        return refuse("solve_time.py", problem)

    from proxima.config import ConfigError, PPOConfig
    from proxima.device import resolve_device
    from proxima.population import parse_seeds
    from proxima.presets import resolve

    try:  # train's own checks of --seeds, --preset and --device, before any seed is run (each refused it alike)
        seeds = parse_seeds(args.seeds)
        resolve(args.env_id, args.preset, PPOConfig(), python=False)
        resolve_device(args.device)
    except ConfigError as e:
        return refuse("solve_time.py", str(e))
    start = started()
    section = Section(args.out, "solve_time.py")
    rows = []
    with stopping_children("solve_time.py", "proxima-solve-") as tmp, \
            concurrent.futures.ThreadPoolExecutor(max_workers=args.parallel) as pool:
        futures = [pool.submit(run_seed, args, seed, tmp) for seed in seeds]
        for future in concurrent.futures.as_completed(futures):
            r = future.result()
            rows = sorted([*rows, r], key=lambda row: seeds.index(row["seed"]))
            print(f"seed {r['seed']}: {r['wall']:.2f} s, " + (f"eval {r['mean_return']:.1f}" if "mean_return" in r else r["error"])
                  + (f" ({r['graphs']})" if r.get("graphs") else ""), flush=True)
            if any("error" not in r for r in rows) and len(rows) < len(seeds):  # the seeds so far, in case the run is cut short
                section.update(table(args, rows, machine_line(1, start), command("solve_time.py", p, args), len(seeds)))
    if all("error" in r for r in rows):  # a table of errors is no result: nothing is appended
        return refuse("solve_time.py", f"every seed failed; seed {rows[0]['seed']}: {rows[0]['error']}")
    text = table(args, rows, machine_line(1, start), command("solve_time.py", p, args))
    return section.finish(text)


if __name__ == "__main__":
    sys.exit(main())
