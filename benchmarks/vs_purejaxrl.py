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
exists, else ``python3``; ``make jax-venv`` makes it, benchmarks/anchors/README.md says what it holds)
from the anchor file (``--anchor``, default the repository's benchmarks/anchors/purejaxrl_cartpole.py),
with JAX's persistent compilation cache in a temporary folder (``--jax-cache``), so that
only the first run of each config compiles. Before anything is measured, that interpreter must import
jax, chex, flax, optax and gymnax (else one error line naming --jax-python, exit 2, nothing written),
and what ``proxima bench`` would refuse in Proxima's flags is refused the same way before that check.
Results: the table on stdout, appended to ``--out`` when given, where it is rewritten after every result either side prints and marked partial until the
end: a run stopped by a time limit leaves what it measured. ``--time-budget`` bounds the whole run
for a caller with a time limit (the GPU session): PureJaxRL then reports the configs it has no time
for as "skipped", and "skipped" or "error" lines are notes in the table. With ``--cudagraphs`` a
size whose graphs fell back to eager says so in its row (``proxima bench --json``'s
"cudagraphs_live"). A SIGTERM (a time limit) or Ctrl-C kills both sides' processes and removes the
temporary folder (exit 143 or 130); the section keeps what was measured.
"""

from __future__ import annotations

import time

#: when this script started: --time-budget counts from here, so torch's import (through proxima.bench
#: below, seconds on a GPU machine) is inside it, as it is inside the time limit of a caller
LAUNCHED = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import queue  # noqa: E402
import resource  # noqa: E402
import shlex  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402

from proxima.bench import parse_sizes  # noqa: E402
from tables import (ChildFailed, Section, arg_problem, bench_problem, command, distinct, kill_group, machine_line,  # noqa: E402
                    median_range, parser, partial_note, refuse, run_child, start_child, started, stopping_children)  # benchmarks/tables.py

ROOT = Path(__file__).resolve().parents[1]
#: where --anchor's default is looked for, the first that exists: the copy shipped in the repository, then
#: the places older checkouts kept the team's copy (gpu_session.sh's carried .anchors/, shared/ beside the repository)
ANCHORS = (ROOT / "benchmarks" / "anchors" / "purejaxrl_cartpole.py", ROOT / ".anchors" / "purejaxrl_cartpole.py",
           ROOT.parent / "shared" / "anchors" / "purejaxrl_cartpole.py")
#: where a user is told to look when PureJaxRL's side cannot run
INSTALL_HINT = "or run `make jax-venv` to make .jax-venv, the default --jax-python (benchmarks/anchors/README.md)"
#: PureJaxRL's total timesteps per env count: runs of ~5-15 s at the speeds measured so far
PJR_TOTAL = {"cpu": {4096: 4e6}, "cuda": {2048: 2e7, 4096: 4e7, 65536: 1e8, 1048576: 3.4e8}}
#: seconds of --time-budget kept for writing the table after the last subprocess
RESERVE = 3.0


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
    if device == "cpu":  # XLA's own thread pools, as benchmarks/anchors/README.md runs it
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        env["JAX_PLATFORMS"] = "cpu"
    return env


def jax_env(env: dict, cache_dir) -> dict:
    """``env`` for the PureJaxRL process, with JAX's persistent compilation cache in ``cache_dir``
    (None: off). The anchor compiles each config afresh (``jax.jit`` of a new closure); with the cache
    every repeat of a config after the first loads the compiled program instead (on this machine's
    CPU: 9-11 s of compilation down to ~1.5 s of tracing and loading). Every program is cached,
    however quick its compilation."""
    if cache_dir is None:
        return env
    return dict(env, JAX_COMPILATION_CACHE_DIR=str(cache_dir), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")


def proxima_cmd(args, envs, repeats: int = 1) -> list:
    # --train-only: the table compares training iterations; the env-alone and rollout-alone
    # measurements of `proxima bench` would add a third to the time and appear nowhere
    cmd = [sys.executable, "-m", "proxima", "bench", "CartPole-v1", "--device", args.device, "--backend", "native",
           "--num-steps", "16", "--num-envs", str(envs), "--repeats", str(repeats), "--seconds", str(args.seconds),
           "--threads", str(args.threads), "--train-only", "--json"]
    return cmd + (["--compile"] if args.compile else []) + (["--cudagraphs"] if args.cudagraphs else [])


def pjr_total(args, envs: int) -> float:
    """PureJaxRL's TOTAL timesteps at ``envs``: PJR_TOTAL's, else 200 updates of envs x 16."""
    return PJR_TOTAL.get(args.device.split(":")[0], {}).get(envs, envs * 16 * 200)


def pjr_config(args, envs: int) -> str:
    return f"{envs}x16x{pjr_total(args, envs):g}"


def pjr_cmd(args, envs: int) -> list:
    return [args.jax_python, str(args.anchor), "--configs", pjr_config(args, envs)]


def shown_command(cmd: list) -> str:
    """``cmd`` as a user would type it: ``proxima bench ...`` rather than this interpreter's path and ``-m proxima``."""
    if list(cmd[:3]) == [sys.executable, "-m", "proxima"]:
        cmd = ["proxima", *cmd[3:]]
    return shlex.join(cmd)


def child_cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def stream_json_lines(cmd: list, env: dict, timeout: float, cpus: str = "all", on_line=None) -> tuple:
    """Run ``cmd`` and hand each JSON line it prints to ``on_line`` as it comes (both sides flush a
    line per result), so a run cut short keeps what was measured. Killed after ``timeout`` seconds.
    Returns (lines, problem, cores): ``problem`` is '' or why the process did not finish well
    ("timed out after 80 s", "exit 1: <its last stderr line>", "printed no result"); ``cores`` the
    whole process's CPU seconds over its wall seconds (start-up and, for PureJaxRL, compilation
    included). Reading stops 2 s after the process ends even if a process it started still holds
    its output open."""
    cpu0, t0 = child_cpu_seconds(), time.perf_counter()
    killed, lines = False, []
    with tempfile.TemporaryFile("w+") as err:
        try:
            proc = start_child(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=ROOT,
                               preexec_fn=cpu_binding(cpus))
        except OSError as e:  # no such interpreter, not executable: a problem of this side, as an exit would be
            return [], f"cannot start {cmd[0]}: {e.strerror or e}", 0.0
        printed: queue.Queue = queue.Queue()

        def read() -> None:
            for raw in proc.stdout:
                printed.put(raw)
            printed.put(None)

        threading.Thread(target=read, daemon=True).start()
        ended = None
        try:
            while True:
                try:
                    raw = printed.get(timeout=0.2)
                except queue.Empty:
                    raw = ""
                if raw is None:
                    break
                if raw.startswith("{"):
                    try:
                        line = json.loads(raw)
                    except json.JSONDecodeError:  # a line cut by the kill
                        line = None
                    if line is not None:
                        lines.append(line)
                        if on_line is not None:
                            on_line(line)
                now = time.perf_counter()
                if proc.poll() is None and now - t0 > timeout:
                    killed = True
                    kill_group(proc.pid)
                if proc.poll() is not None:
                    ended = ended or now
                    if now - ended > 2.0:
                        break
        finally:
            kill_group(proc.pid)  # what it started and left running too (the 2 s above), not only itself
            proc.wait()
        wall = time.perf_counter() - t0
        err.seek(0)
        last = (err.read().strip().splitlines() or ["?"])[-1]
    if killed:
        problem = f"timed out after {timeout:.0f} s"
    elif proc.returncode != 0:
        problem = f"exit {proc.returncode}: {last}"
    else:
        problem = "" if lines else f"printed no result: {last}"
    return lines, problem, (child_cpu_seconds() - cpu0) / max(wall, 1e-9)


def run_json_lines(cmd: list, env: dict, timeout: float, cpus: str = "all") -> list:
    """The JSON lines ``cmd`` prints; the last one gets "cores_used": the whole process's CPU
    seconds over its wall seconds (start-up and, for PureJaxRL, compilation included).
    ``tables.ChildFailed`` (one line ending with the process's last stderr line) when it failed or
    timed out."""
    lines, problem, cores = stream_json_lines(cmd, env, timeout, cpus)
    if problem:
        raise ChildFailed(f"`{shown_command(cmd)}` failed ({problem})")
    lines[-1]["cores_used"] = cores
    return lines


def run_json(cmd: list, env: dict, timeout: float, cpus: str = "all") -> dict:
    return run_json_lines(cmd, env, timeout, cpus)[-1]


#: what the anchor imports (`make jax-venv` installs them into .jax-venv, the default --jax-python)
PJR_PACKAGES = ("jax", "chex", "flax", "optax", "gymnax")


def jax_python_problem(jax_python: str, env: dict, timeout: float) -> str:
    """'' when ``jax_python`` runs and imports PureJaxRL's packages, else one line naming
    --jax-python and what is missing. Checked before Proxima is measured: a missing interpreter was
    found only at PureJaxRL's first run, after minutes of Proxima, as a traceback."""
    cmd = [jax_python, "-c", f"import {', '.join(PJR_PACKAGES)}"]
    try:
        proc = run_child(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    except OSError as e:
        return f"--jax-python {jax_python}: cannot run it ({e.strerror or e}); give an interpreter with {', '.join(PJR_PACKAGES)}"
    except subprocess.TimeoutExpired:
        return f"--jax-python {jax_python}: importing {', '.join(PJR_PACKAGES)} took over {timeout:.0f} s (--timeout, --time-budget)"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return (f"--jax-python {jax_python}: cannot import PureJaxRL's packages ({last}); install "
                f"{', '.join(PJR_PACKAGES)} there, {INSTALL_HINT}")
    return ""


def pjr_sps(line: dict) -> float:
    """PureJaxRL's steps/s over the steps it trained: the anchor trains TOTAL // (envs x 16) whole
    updates, and its ``steps_per_second`` divides the TOTAL asked for (1.33% more than trained at
    1,048,576 envs x 16 of 3.4e8); ``actual_steps_per_second`` (or ``actual_timesteps_per_seed`` over
    ``run_seconds``) is what was trained."""
    if line.get("actual_steps_per_second") is not None:
        return float(line["actual_steps_per_second"])
    if line.get("actual_timesteps_per_seed") is not None and line.get("run_seconds"):
        return line["actual_timesteps_per_seed"] * line.get("num_seeds", 1) / line["run_seconds"]
    return float(line["steps_per_second"])


def pjr_jit_seconds(line: dict):
    """PureJaxRL's compile time: the anchor's ``jit_only_seconds`` (trace, lower and compile). Its
    ``compile_seconds`` is that plus the whole first execution of the config (the untimed warm run),
    seconds more that are no compilation. None from an anchor that does not write it."""
    return line.get("jit_only_seconds")


def pjr_problem(line: dict) -> str:
    """'' for a PureJaxRL result line; for the lines the anchor prints instead of a result (and exits
    0 all the same), what they say: 'skipped (time budget 80s used up)', 'error: ...'."""
    if "skipped" in line:
        return f"skipped ({line['skipped']})"
    if "error" in line:
        return f"error: {line['error']}"
    return "" if "steps_per_second" in line else "no steps_per_second in its line"


def graphs_problem(args, line: dict) -> str:
    """With --cudagraphs, '' when `proxima bench` replayed every part as a graph, else the parts
    that ran eagerly: its figures are then no graph-replay figures and the row says so."""
    if not args.cudagraphs or line.get("cudagraphs_live") is True:
        return ""
    parts = line.get("graph_parts") or {}
    bad = "; ".join(f"{k}: {v}" for k, v in parts.items() if v != "graph") or "not reported"
    return f"graphs fell back: eager ({bad})"


class Results:
    """What both sides measured so far, per env count; ``rows`` makes the table's rows from it at
    any moment (a size with one side only shows '-' for the other)."""

    def __init__(self, sizes: list, repeats: int):
        self.sizes, self.repeats = sizes, repeats
        self.ours: dict = {n: [] for n in sizes}    # steps/s (single call: [min, median, max] of the one process)
        self.theirs: dict = {n: [] for n in sizes}  # PureJaxRL's result lines
        self.cores: dict = {n: ([], []) for n in sizes}
        self.notes: dict = {n: [] for n in sizes}
        self.graphs: dict = {n: "" for n in sizes}
        self.pairs: dict = {n: [] for n in sizes}   # alternating rounds: (ours, theirs) of one round

    def note(self, envs, text: str) -> None:
        if text and text not in self.notes[envs]:
            self.notes[envs].append(text)

    def complete(self, envs) -> bool:
        return bool(self.ours[envs]) and len(self.theirs[envs]) >= self.repeats

    def rows(self, single_call: bool) -> list:
        rows = []
        for envs in self.sizes:
            ours, theirs = self.ours[envs], sorted(pjr_sps(r) for r in self.theirs[envs])
            if single_call:
                ratios = ([ours[0] / theirs[-1], ours[1] / statistics.median(theirs), ours[2] / theirs[0]]
                          if ours and theirs else [])
            else:
                ratios = sorted(o / t for o, t in self.pairs[envs])
            rows.append({"envs": envs, "ours": ours, "theirs": theirs, "ratios": ratios,
                         "compile": [pjr_jit_seconds(r) for r in self.theirs[envs]], "cores": self.cores[envs],
                         "notes": self.notes[envs], "graphs": self.graphs[envs]})
        return rows


def alternating(args, env: dict, sizes: list, deadline=None, results=None, on_update=None) -> list:
    """Per size, --repeats rounds of one Proxima process then one PureJaxRL process (fair under load)."""
    res = results or Results(sizes, args.repeats)
    jenv = jax_env(env, getattr(args, "jax_cache_dir", None))
    for envs in sizes:
        for r in range(args.repeats):
            left = time_left(deadline)
            if left is not None and left < 1.0:
                res.note(envs, f"round {r + 1} and later not run (--time-budget {args.time_budget:g} s used up)")
                break
            limit = args.timeout if left is None else min(args.timeout, left)
            lines, problem, cores = stream_json_lines(proxima_cmd(args, envs), env, limit, args.cpus)
            if problem or lines[-1].get("train_sps") is None:
                res.note(envs, f"Proxima round {r + 1}: {problem or 'no train figure'}")
                break
            ours = lines[-1]
            res.graphs[envs] = res.graphs[envs] or graphs_problem(args, ours)
            left = time_left(deadline)
            limit = args.timeout if left is None else min(args.timeout, left)
            lines, problem, pcores = stream_json_lines(pjr_cmd(args, envs), jenv, limit, args.cpus)
            theirs = next((x for x in lines if not pjr_problem(x)), None)
            if theirs is None:
                res.note(envs, f"PureJaxRL round {r + 1}: {problem or pjr_problem(lines[-1])}")
                break
            res.ours[envs].append(ours["train_sps"])
            res.theirs[envs].append(theirs)
            res.pairs[envs].append((ours["train_sps"], pjr_sps(theirs)))
            res.cores[envs][0].append(cores)
            res.cores[envs][1].append(pcores)
            print(f"{envs} envs, round {r + 1}: Proxima {ours['train_sps']:,.0f} steps/s ({cores:.2f} cores), "
                  f"PureJaxRL {pjr_sps(theirs):,.0f} steps/s ({pcores:.2f} cores)", flush=True)
            if on_update is not None:
                on_update(res)
    return res.rows(single_call=False)


def time_left(deadline):
    """Seconds left before ``deadline`` (a perf_counter time) less RESERVE for the table; None without one."""
    return None if deadline is None else deadline - time.perf_counter() - RESERVE


def single_call(args, env: dict, sizes: list, deadline=None, results=None, on_update=None) -> list:
    """One Proxima process (every size, --repeats each) and one PureJaxRL process (every size
    --repeats times, round after round: 2,048, 65,536, 1,048,576, then again): two start-ups instead
    of 2 x sizes x repeats, for a machine rented by the minute. Ratio = median / median; its range
    pairs the extremes (ours min / theirs max ..). Each line either side prints goes into the
    table at once (``on_update``). With a deadline (--time-budget) PureJaxRL gets --time-budget of
    what is left less --anchor-margin, so it prints "skipped" for the configs it has no time for
    rather than being killed in one, and PureJaxRL runs only the sizes Proxima measured."""
    res = results or Results(sizes, args.repeats)

    def ours(line: dict) -> None:
        envs = line.get("num_envs")
        if envs in res.ours and line.get("train_sps") is not None:
            res.ours[envs] = [line["train_sps_min"], line["train_sps"], line["train_sps_max"]]
            res.graphs[envs] = graphs_problem(args, line)
            print(f"{envs} envs: Proxima {line['train_sps']:,.0f} steps/s" + (f" ({res.graphs[envs]})" if res.graphs[envs] else ""),
                  flush=True)
        elif envs in res.ours:
            res.note(envs, f"Proxima: {line.get('skipped') or 'no train figure'}")
        if on_update is not None:
            on_update(res)

    left = time_left(deadline)
    limit = args.timeout if left is None else min(args.timeout, left - args.anchor_margin)
    if limit < 1.0:  # the start-up took what --time-budget had for Proxima (main refuses a budget that never has any)
        for envs in sizes:
            res.note(envs, f"not run: {left:.0f} s of --time-budget left, not more than --anchor-margin {args.anchor_margin:g} s")
        return res.rows(single_call=True)
    _, problem, cores = stream_json_lines(proxima_cmd(args, ",".join(map(str, sizes)), args.repeats), env, limit, args.cpus, ours)
    measured = [n for n in sizes if res.ours[n]]
    for envs in sizes:
        if res.ours[envs]:
            res.cores[envs][0].append(cores)  # one process for every size
        else:
            res.note(envs, f"Proxima: {problem or 'not measured'}; PureJaxRL not run at this size")
    if not measured:
        return res.rows(single_call=True)

    def theirs(line: dict) -> None:
        envs = line.get("num_envs")
        if envs not in res.theirs:
            return
        problem = pjr_problem(line)
        if problem:
            res.note(envs, f"PureJaxRL: {problem}")
        else:
            res.theirs[envs].append(line)
            jit = pjr_jit_seconds(line)
            print(f"{envs} envs: PureJaxRL {pjr_sps(line):,.0f} steps/s" + (f" (jit {jit:.1f} s)" if jit is not None else ""), flush=True)
        if on_update is not None:
            on_update(res)

    configs = [pjr_config(args, envs) for _ in range(args.repeats) for envs in measured]  # round after round
    cmd = [args.jax_python, str(args.anchor), "--configs", *configs]
    left = time_left(deadline)
    if left is not None:
        budget = left - args.anchor_margin
        if budget < 1.0:
            for envs in measured:
                res.note(envs, f"PureJaxRL not run: {left:.0f} s of --time-budget left, less than --anchor-margin {args.anchor_margin:g} s")
            return res.rows(single_call=True)
        cmd += ["--time-budget", f"{budget:.0f}"]
    limit = args.timeout if left is None else min(args.timeout, left)
    _, problem, cores = stream_json_lines(cmd, jax_env(env, getattr(args, "jax_cache_dir", None)), limit, args.cpus, theirs)
    for envs in measured:
        res.cores[envs][1].append(cores)
        if problem and len(res.theirs[envs]) < args.repeats:
            res.note(envs, f"PureJaxRL: {problem}")
    return res.rows(single_call=True)


def fmt(xs: list) -> str:
    """Steps/s as 'median (min-max)' in k or M."""
    return median_range(xs, fmt=lambda v: f"{v / 1e6:.2f}M" if v >= 1e6 else f"{v / 1e3:.1f}k")


def compile_cell(compile_s: list, cached: bool) -> str:
    """PureJaxRL's compile seconds (``pjr_jit_seconds``: jit only): the first (cold) run's, and with
    the persistent cache the median of the others (which load the compiled program)."""
    compile_s = [s for s in compile_s if s is not None]
    if not compile_s:
        return "-"
    if not cached:
        return f"{statistics.median(compile_s):.1f}"
    rest = compile_s[1:]
    return f"{compile_s[0]:.1f}" + (f" ({statistics.median(rest):.1f} cached)" if rest else "")


def table_lines(args, rows: list) -> list:
    """The Markdown table; a notes column only when some row has one."""
    notes = any(r["notes"] or r["graphs"] for r in rows)
    out = ["| envs | Proxima steps/s | PureJaxRL steps/s | Proxima / PureJaxRL | cores used (Proxima, PureJaxRL) | PureJaxRL jit s |"
           + (" notes |" if notes else ""),
           "|---:|---:|---:|---:|---:|---:|" + ("---|" if notes else "")]
    cached = getattr(args, "jax_cache_dir", None) is not None
    for r in rows:
        ours = fmt(r["ours"]) if r["ours"] else "-"
        if r["graphs"] and r["ours"]:
            ours = f"**graphs fell back: eager** {ours}"  # never an eager figure under a --cudagraphs heading
        ratio = (f"{statistics.median(r['ratios']):.2f} ({r['ratios'][0]:.2f}-{r['ratios'][-1]:.2f})" if r["ratios"] else "-")
        cores = ", ".join(f"{statistics.median(c):.2f}" if c else "-" for c in r["cores"])
        cells = [f"{r['envs']:,}", ours, fmt(r["theirs"]) if r["theirs"] else "-", ratio, cores, compile_cell(r["compile"], cached)]
        if notes:
            cells.append("; ".join(([r["graphs"]] if r["graphs"] else []) + r["notes"]))
        out.append("| " + " | ".join(cells) + " |")
    return out


def report(p, args, rows: list, start: tuple, partial: str = "") -> str:
    mode = " ".join(f for f, on in (("--compile", args.compile), ("--cudagraphs", args.cudagraphs)) if on) or "eager"
    cache = (" PureJaxRL with JAX's persistent compilation cache (a fresh folder per run): its first run of a size "
             "compiles, the others load the program (jit s: first, then the others' median)."
             if getattr(args, "jax_cache_dir", None) is not None else "")
    lines = [f"## Proxima ({mode}) vs PureJaxRL, {args.device}, {start[0]:%Y-%m-%d %H:%M}", "",
             *([partial, ""] if partial else []),
             f"{machine_line(args.threads, start)}. Native CartPole, "
             "16-step rollouts, 4 epochs x 4 minibatches, 64x64 tanh; "
             + (f"both processes bound to core {pinned_core()} (PureJaxRL's XLA pool sizes itself from the affinity mask). "
                if args.cpus == "one" else f"unbound on {os.cpu_count()} cores, Proxima --threads {args.threads}. ")
             + "Cores used: whole-process CPU time / wall time (start-up and compilation included). "
             + (f"Median (min-max) of {args.repeats} repeats per side, each side in one process; ratio = median / median "
              "(range: extreme against extreme)." if args.single_call else
              f"Median (min-max) of {args.repeats} alternating rounds; ratio = per-round Proxima / PureJaxRL.")
             + " PureJaxRL steps/s: the steps it trained (TOTAL // (envs x 16) whole updates) over its timed run's seconds;"
             " jit s: its trace, lower and compile (`jit_only_seconds`), without the warm run." + cache, "",
             *table_lines(args, rows)]
    lines += ["", command("vs_purejaxrl.py", p, args),
              f"Proxima: `{shlex.join(['proxima', *proxima_cmd(args, 0, args.repeats if args.single_call else 1)[3:]]).replace('--num-envs 0', '--num-envs N')}`",
              "PureJaxRL: `python purejaxrl_cartpole.py --configs Nx16xTOTAL` (TOTAL per envs N: "
              + ", ".join(f"{r['envs']:,}: {pjr_total(args, r['envs']):,.0f}" for r in rows) + ")", ""]
    return "\n".join(lines)


def default_anchor() -> Path:
    """--anchor's default: the first of ``ANCHORS`` that exists (the repository's copy in a checkout)."""
    return next((a for a in ANCHORS if a.is_file()), ANCHORS[0])


def default_jax_python() -> str:
    """PureJaxRL's interpreter when --jax-python is not given: .jax-venv's (``make jax-venv`` makes it),
    else python3. Not this interpreter: the project's .venv has no JAX."""
    venv = ROOT / ".jax-venv"
    return str(venv / "bin" / "python") if venv.exists() else "python3"


def build_parser() -> argparse.ArgumentParser:
    p = parser("vs_purejaxrl.py", __doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--num-envs", default="4096", help="comma-separated env counts (one named twice is measured once)")
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
    p.add_argument("--jax-python", default=default_jax_python(),
                   help="PureJaxRL's interpreter, with jax, chex, flax, optax and gymnax (default: .jax-venv/bin/python, "
                        "which `make jax-venv` makes, when it exists, else python3)")
    p.add_argument("--anchor", type=Path, default=default_anchor(),
                   help="PureJaxRL's purejaxrl_cartpole.py (default: the repository's benchmarks/anchors/purejaxrl_cartpole.py)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per subprocess")
    p.add_argument("--time-budget", type=float, default=None,
                   help="seconds for the whole run (a time limit around it): no subprocess outlives it (each gets at most "
                        f"what is left less {RESERVE:g} s for the table), and with --single-call PureJaxRL gets the anchor's "
                        "--time-budget of what is left less --anchor-margin, so it reports the configs it has no time for as "
                        "skipped instead of being killed (default: none)")
    p.add_argument("--anchor-margin", type=float, default=15.0,
                   help="with --time-budget: seconds kept for PureJaxRL's last config, which the anchor starts as long as its "
                        "budget is not used up (default 15: compile, warm run and timed run at 1,048,576 envs on an H200)")
    p.add_argument("--jax-cache", choices=("on", "off"), default="on",
                   help="on: PureJaxRL with JAX's persistent compilation cache in a fresh temporary folder, so every run of "
                        "a config after its first loads the compiled program (default); off: every run compiles")
    p.add_argument("--single-call", action="store_true",
                   help="one process per side for all sizes and repeats instead of alternating rounds (a GPU machine's time is short)")
    p.add_argument("--out", default=None, help="append the Markdown table here, rewritten after every result of either side "
                   "and marked partial until the end (default: print only)")
    return p


def main(argv=None, launched: float = None) -> int:
    """``launched``: the perf_counter time --time-budget counts from (the script passes LAUNCHED,
    before its imports); by default, this call."""
    t0 = time.perf_counter() if launched is None else launched
    p = build_parser()
    args = p.parse_args(argv)
    try:
        sizes = distinct(parse_sizes(args.num_envs))  # a size named twice pooled both sizes' rounds into one row, printed twice
    except ValueError as e:
        return refuse("vs_purejaxrl.py", str(e))
    problem = arg_problem(args, at_least_one=("repeats", "threads"), positive=("seconds", "timeout"))
    if not problem and args.time_budget is not None:
        problem = arg_problem(args, positive=("time_budget",), files=())
    if not problem and not (args.anchor_margin >= 0 and math.isfinite(args.anchor_margin)):
        problem = f"--anchor-margin {args.anchor_margin:g}: must be 0 or more"
    if not problem and args.time_budget is not None:
        kept = RESERVE + (args.anchor_margin if args.single_call else 0.0)
        if args.time_budget <= kept:
            kept_for = (f"--anchor-margin {args.anchor_margin:g} s for PureJaxRL's last config and {RESERVE:g} s for the table"
                        if args.single_call else f"{RESERVE:g} s for the table")
            problem = (f"--time-budget {args.time_budget:g}: leaves Proxima no time ({kept_for} come off it first); "
                       f"give more than {kept:g}")
    if problem:
        return refuse("vs_purejaxrl.py", problem)
    if args.cpus is None:
        args.cpus = "one" if args.device == "cpu" else "all"
    if args.cpus == "one" and args.threads != 1:
        return refuse("vs_purejaxrl.py", f"--threads {args.threads}: above 1 needs --cpus all (one core bound runs one thread at a time)")
    if not args.anchor.exists():
        return refuse("vs_purejaxrl.py", f"--anchor {args.anchor}: no PureJaxRL anchor there; give the file, the "
                      "repository's is benchmarks/anchors/purejaxrl_cartpole.py")
    # what Proxima's `proxima bench` would refuse (--seconds above its limit, a size that cannot fit, --device
    # cuda without CUDA), checked here in seconds: found by the first bench process, it came after the JAX
    # check's ~15 s and appended a section with no row
    repeats = args.repeats if args.single_call else 1
    problem = bench_problem(proxima_cmd(args, ",".join(map(str, sizes)), repeats)[4:])
    if problem:
        return refuse("vs_purejaxrl.py", problem)
    env = single_thread_env(args.device)
    # before Proxima is measured and --out is touched; inside --time-budget like every process
    probe_limit = args.timeout if args.time_budget is None else max(1.0, min(args.timeout, t0 + args.time_budget - time.perf_counter() - RESERVE))
    problem = jax_python_problem(args.jax_python, env, probe_limit)
    if problem:
        return refuse("vs_purejaxrl.py", problem)
    start = started()
    machine_line(args.threads, start)  # torch imported and CUDA set up here now, not in the middle of a measurement
    deadline = None if args.time_budget is None else t0 + args.time_budget
    section = Section(args.out, "vs_purejaxrl.py")
    results = Results(sizes, args.repeats)

    def update(res: Results) -> None:
        done = sum(res.complete(n) for n in sizes)
        section.update(report(p, args, res.rows(args.single_call), start, partial_note(done, len(sizes), "sizes complete")))

    with stopping_children("vs_purejaxrl.py", "proxima-jax-cache-") as cache:
        args.jax_cache_dir = str(cache) if args.jax_cache == "on" else None
        rows = (single_call if args.single_call else alternating)(args, env, sizes, deadline, results, update)
        code = section.finish(report(p, args, rows, start))
    if code == 0 and not any(r["ratios"] for r in rows):
        print("vs_purejaxrl.py: error: no size was measured on both sides (the table's notes say why)", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main(launched=LAUNCHED))
