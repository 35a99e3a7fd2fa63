"""Eager vs --compile vs --amp bf16 training throughput, side by side in one run.

Measures full PPO iterations (rollout + GAE + update) with Trainer.train_iteration after a warm-up
iteration (which is where compilation happens). Each mode after the first (the base, eager by
default) is timed in --repeats rounds against the base, the two alternating iteration by iteration
(base, mode, base, mode, ...), so that a slow phase of a shared machine falls on both; reports the
median and the min-max range of env steps per second and the median (min-max) of the per-round
ratios to the base (benchmarks/README.md's rule), with a note under the table when a round's
process got under 0.9 of a core on the CPU (its ratios are then unreliable).

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
a base that fails in an iteration is its own cell's failure, and the modes after it are timed alone
(their cells say so); when no cell was measured, the table is printed, nothing is written and the
exit status is 1. A graphed mode whose capture fell back to eager says so in its cell ("graphs fell back: eager"),
never passing eager figures off as graph replays, as a compiled mode whose steps dynamo ran eagerly
does ("compile fell back: eager").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Optional

from tables import (Section, arg_problem, command, cpu_share, distinct, machine_line, median_range, partial_note,  # benchmarks/tables.py
                    parser, refuse, round_ratios, started, starved_note)

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


class Timed:
    """One case and mode's Trainer, built and warmed up (compilation, allocator, caches and the graphs'
    capture): ``iteration()`` times one PPO iteration, ``close()`` ends it. The modes of a case are
    alive together, two at a time, so that their iterations can alternate; ``iterations``: how many
    ``iteration()`` calls it will get (its total_timesteps leave room for them)."""

    def __init__(self, env_id: str, num_envs: int, overrides: dict, mode: dict, device: str, iterations: int, threads: int):
        from proxima.graphs import WARMUP
        from proxima.trainer import Trainer

        self.cfg = case_config(env_id, num_envs, overrides, mode, device, iterations, threads)
        self.trainer = Trainer(self.cfg, run_dir=Path("/tmp/proxima-bench-unused"), quiet=True)
        try:
            for _ in range(WARMUP + 1):
                self.trainer.train_iteration()
        except BaseException:
            # the caller never gets this object to close: a failed compile's trainer would hold its memory
            # (a GPU's) through every later mode
            try:
                self.trainer.close()
            except Exception:  # noqa: BLE001 - the warm-up's error is the one to report
                pass
            raise

    def iteration(self) -> tuple:
        """(env steps/s, cores the process used meanwhile: ``tables.cpu_share``) of one PPO iteration."""
        import torch

        if self.trainer.device.type == "cuda":
            torch.cuda.synchronize()
        t, c = time.perf_counter(), time.process_time()
        metrics = self.trainer.train_iteration()
        float(metrics["policy_loss"])  # wait for the device
        wall = time.perf_counter() - t
        return self.trainer.steps_per_iteration / wall, cpu_share(time.process_time() - c, wall)

    def close(self) -> dict:
        """{"graphs": each part's state (graphs.part_states) with --cudagraphs, else None, "compile_eager":
        the compiled steps that ran eagerly after all (accel.eager_fallback) with --compile, else []}."""
        from proxima.accel import eager_fallback
        from proxima.graphs import trainer_graph_states

        graphs = trainer_graph_states(self.trainer) if self.cfg.cudagraphs else None
        compile_eager = eager_fallback(self.trainer) if self.cfg.compile else []
        self.trainer.close()
        return {"graphs": graphs, "compile_eager": compile_eager}


def prepare(env_id: str, num_envs: int, overrides: dict, mode: dict, device: str, iterations: int, threads: int) -> Timed:
    """``Timed(...)``: what main builds per case and mode (a test's stand-in replaces this)."""
    return Timed(env_id, num_envs, overrides, mode, device, iterations, threads)


def error_of(e: Exception) -> dict:
    """A mode's result when it raised: its first line, for its cell."""
    return {"error": (str(e).strip().splitlines() or [type(e).__name__])[0][:200]}


def alternate(base: Optional[Timed], other: Optional[Timed], rounds: int, base_result: dict, result: dict) -> None:
    """Time ``rounds`` rounds, each one iteration of ``base`` then one of ``other`` (either may be
    None: the other is timed alone), appending to each result's "sps" and "shares" and to
    ``result``'s "ratios" (other / base within the round: ``tables.round_ratios``). An error of
    ``other`` is raised (its cell); one of ``base`` becomes ``base_result``'s (in place: the base's
    cell), and ``other`` is timed alone for the rest of the rounds ("alone" in ``result``), since
    the error is the base's, not this mode's."""
    for _ in range(rounds):
        b = None
        if base is not None and "error" not in base_result:
            try:
                b = base.iteration()
            except Exception as e:  # noqa: BLE001 - the base's cell says it
                base_result.clear()
                base_result.update(error_of(e))
        if "error" in base_result and other is not None:
            result["alone"] = True
        o = other.iteration() if other is not None else None
        for timed, side in ((b, base_result), (o, result)):
            if timed is not None:
                side.setdefault("sps", []).append(timed[0])
                side.setdefault("shares", []).append(timed[1])
        if b is not None and o is not None:
            result.setdefault("ratios", []).extend(round_ratios([o[0]], [b[0]]))


def close_quietly(timed: Timed) -> None:
    """Close a mode whose error is already its cell: its trainer's memory is the next mode's."""
    try:
        timed.trainer.close()
    except Exception:  # noqa: BLE001 - the error already recorded is the one to report
        pass


def fell_back(graphs) -> str:
    """'' when every part was replayed as a graph (or the mode has none), else the parts that ran eagerly."""
    if not graphs or all(v == "graph" for v in graphs.values()):
        return ""
    return "; ".join(f"{k}: {v}" for k, v in graphs.items() if v != "graph")


def cell(result, base) -> str:
    """One mode's cell: 'median (min-max)' of its steps/s (the README's "median (min-max)", as every
    other table writes it), then the median (min-max) of its per-round ratios to the base mode ('1.00x'
    in the base's own cell, no ratio when the base failed), '-' when not measured (yet), 'failed: ...'
    when it raised; marked when its graphs fell back to eager."""
    if result is None:
        return "-"
    if "error" in result:
        return f"failed: {result['error']}"
    if not result.get("sps"):  # the base before its first round, or every mode it alternated with failed
        return "-"
    sps = result["sps"]
    if result is base:
        ratio = ", 1.00x"
    else:
        ratios = result.get("ratios") or []
        ratio = f", {median_range(ratios, digits=2)}x" if ratios else ""
    text = median_range(sps, fmt=lambda v: f"{v:,.0f}") + ratio + ALONE_NOTE * bool(result.get("alone"))
    fallback = fell_back(result.get("graphs"))
    text = f"**graphs fell back: eager** ({fallback}) {text}" if fallback else text
    compile_eager = result.get("compile_eager")
    return f"**compile fell back: eager** ({', '.join(compile_eager)}) {text}" if compile_eager else text


#: a mode's cell and progress line when (some of) its rounds ran without the base, which had failed:
#: its steps/s then come from rounds no base iteration shared the machine's phase with
ALONE_NOTE = " (timed alone: the base failed)"


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
    p = parser("accel.py", __doc__.splitlines()[0])
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

    def progress(label: str, m: str, result: dict) -> None:
        if "error" in result or not result.get("sps"):
            print(f"{label:<42} {m:<13} failed: {result.get('error', 'not timed: every mode it alternated with failed')}",
                  file=sys.stderr, flush=True)
            return
        sps, ratios = result["sps"], result.get("ratios")
        fallback = fell_back(result.get("graphs"))
        compile_eager = result.get("compile_eager")
        print(f"{label:<42} {m:<13} median {statistics.median(sps):>12,.0f} steps/s  range {min(sps):,.0f}-{max(sps):,.0f}"
              + (f"  per-round ratio {median_range(ratios, digits=2)}x" if ratios else "")
              + (f"  graphs fell back: eager ({fallback})" if fallback else "")
              + (f"  compile fell back: eager ({', '.join(compile_eager)})" if compile_eager else "")
              + ALONE_NOTE * bool(result.get("alone")), file=sys.stderr, flush=True)

    def mark_done() -> None:
        nonlocal done
        done += 1
        if done < total and measured():  # a section of "failed:" cells alone is no result
            section.update(report(p, args, modes, rows, start, partial_note(done, total, "case and mode measurements")))

    base_mode, others = modes[0], modes[1:]
    for (label, env_id, n, overrides), (_, results) in zip(cases, rows):
        # the base is timed once per round of every other mode: its trainer's schedule must last that long
        iterations = args.repeats * max(1, len(others))
        base, base_result = None, {}
        try:
            base = prepare(env_id, n, overrides, MODES[base_mode], args.device, iterations, args.threads)
        except Exception as e:  # noqa: BLE001 - one mode's crash (a failed compile) is a cell, not the end of the table
            base_result = error_of(e)
        results[base_mode] = base_result
        if not others:
            alternate(base, None, args.repeats, base_result, {})
        base_counted = False  # in the partial note's count: once timed, as the modes it alternated with are
        for m in others:
            result = {}
            other = None
            try:
                other = prepare(env_id, n, overrides, MODES[m], args.device, args.repeats, args.threads)
                alternate(base, other, args.repeats, base_result, result)
                result.update(other.close())
            except Exception as e:  # noqa: BLE001
                result = error_of(e)
                if other is not None:  # its memory (a GPU's graphs) is needed by the next mode
                    close_quietly(other)
            results[m] = result
            if base is not None and "error" in base_result:  # failed in an iteration: the later modes run alone
                close_quietly(base)
                base = None
            if not base_counted and base_result.get("sps"):
                base_counted = True
                mark_done()
            progress(label, m, result)
            mark_done()
        if base is not None:
            try:
                base_result.update(base.close())
            except Exception as e:  # noqa: BLE001
                results[base_mode] = error_of(e)
        # after the case's modes: until the last, a later mode could still time the base or see it fail
        progress(label, base_mode, results[base_mode])
        if not base_counted:
            mark_done()
    if not measured():
        print(report(p, args, modes, rows, start), flush=True)
        first = next(r["error"] for _, results in rows for r in results.values() if "error" in r)
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
             f"the timed iterations after a warm-up (compile time excluded); each mode after {base} runs {args.repeats} rounds "
             f"alternating with {base} iteration by iteration, then the median (min-max) of the per-round ratios mode / {base}.", "",
             "| task | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    for label, results in rows:
        lines.append(f"| {label} | " + " | ".join(cell(results.get(m), results.get(base)) for m in modes) + " |")
    # on a GPU a process waiting for the device is idle by design: its CPU share says nothing of starvation
    note = "" if args.device.startswith("cuda") else starved_note(
        [s for _, results in rows for r in results.values() for s in r.get("shares", [])])
    return "\n".join(lines + (["", note] if note else [])) + "\n"


if __name__ == "__main__":
    sys.exit(main())
