"""``proxima bench ENV_ID``: steps per second of the env alone, of the rollout and of full training.

For each ``--num-envs`` value and each backend (native torch env and Gymnasium adapter side by
side, or the comma-separated ``--backend`` list, e.g. ``envpool,gymnasium`` for Atari), one Trainer is built from the env's
preset (no run directory, no logger) and three things are timed on it. The bench sets num_envs,
the backend and --threads (default 1); --device, --compile, --compile-mode, --cudagraphs, --amp, --vector and
--num-steps override the preset only when typed (``--preset gpu`` measures on CUDA with CUDA graphs,
and is refused without CUDA as ``train --preset gpu`` is). A typed --device that is not CUDA leaves
the preset's --cudagraphs on, so it is refused as train refuses it: add --no-cudagraphs to measure
eager calls there (the --out file's settings and the JSON then say cudagraphs false):

  env       ``env.step`` with random actions drawn ahead of time (no policy)
  rollout   ``ppo.collect_rollout`` with the policy: T x N steps per call
  train     ``Trainer.train_iteration``: rollout + GAE + the update at the preset's epochs and
            minibatches, plus the once-per-iteration read the training loop does

Each measurement is warmed up, then run ``--repeats`` times for about ``--seconds`` each (whole
calls, at least one: a repeat of train is at least one iteration, however long); the warm-up is at
least 3 whole calls and is not timed, so a lazy --compile's compilation and a --cudagraphs capture
(both done in the first calls) are left out of every figure, and its seconds are reported; the table shows
the median and the min-max over the repeats, the Markdown file how long the repeats really ran and
the threads as the Trainer set them. The backends of one num_envs are built side by side and timed
in turn, one repeat of each per round (A, B, A, B, ...), and the train ratio between them is taken
per round and shown as the median (min-max) over the rounds: timing all of one backend's repeats
and then the other's put them in different phases of a shared machine's load, and the ratio of two
identical runs swung 2x. ``--train-only`` times train alone (what a
comparison of training throughput uses: the env and rollout measurements are a third of the time).
Results go to the console (or one JSON object per line with ``--json``, which with ``--cudagraphs``
also says whether every part was really replayed as a graph) and to a Markdown file that describes
the machine and the command. With ``--cudagraphs`` only train replays the graphs: env and rollout
are timed with eager calls, and their cells say "timed eager" (``timed_eager`` in the JSON).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shlex
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Optional

from .config import ConfigError
from .cpuinfo import cpu_model  # bench's tables and doctor name the CPU alike
from .terminal import machine_stdout, printable

DEFAULT_SIZES = "1,4,64,1024,4096"
#: where the default --num-envs list stops for a Gymnasium env with image observations: each env is a
#: Python object rendering its own frames, built one by one (CarRacing-v3: ~10 MB each, 1,024 of them
#: held 10 GB and were still being built after 150 s, on a machine that steps ~50 of them a second)
GYM_IMAGE_MAX_DEFAULT = 64
MEASURES = ("env", "rollout", "train")
#: the measures timed with eager calls even under --cudagraphs: a lone env.step is never captured,
#: and the rollout is timed by calling ``ppo.collect_rollout`` itself, not the trainer's captured
#: rollout part (only ``train_iteration`` replays the graphs), so they are marked, not passed off
#: as graph replays
EAGER_UNDER_GRAPHS = ("env", "rollout")
#: the flags that override the preset only when typed (None: not typed, the preset's value stands):
#: a default of their own would measure CPU eager under a --preset gpu label
PRESET_FLAGS = ("device", "compile", "compile_mode", "cudagraphs", "amp")


@dataclass
class Line:
    """One backend at one num_envs: samples of steps/s per measure (empty when skipped)."""

    backend: str
    num_envs: int
    samples: dict = field(default_factory=dict)
    skipped: Optional[str] = None
    #: with --cudagraphs, each part's state after the train measurement (graphs.part_states):
    #: 'graph' when it was replayed, 'eager: capture failed (...)' when its capture failed
    graphs: Optional[dict] = None
    #: seconds each timed repeat took, per measure: what --seconds asked is a target, not a limit
    seconds: dict = field(default_factory=dict)
    #: seconds the untimed warm-up took, per measure: at 4,096 envs x 128 steps it can cost as much as
    #: the measuring, and with --compile it holds the compilation, which no figure includes
    warmup: dict = field(default_factory=dict)
    #: how the Trainer ran on the CPU: torch intra-op threads, and whether actor and critic were
    #: computed on a thread each for some batch (``paired_batches``), which --threads alone does not say
    intra_op: Optional[int] = None
    paired: Optional[bool] = None
    #: with --compile, the compiled steps that ran eagerly after all (accel.eager_fallback: dynamo gave
    #: up on their frames), read after the measuring; None without --compile
    compile_eager: Optional[list] = None

    @property
    def compile_live(self) -> Optional[bool]:
        """With --compile: whether every compiled step ran compiled (False: some ran eagerly, so no
        figure is a compiled one); None without."""
        return None if self.compile_eager is None else not self.compile_eager

    @property
    def graphs_live(self) -> Optional[bool]:
        """With --cudagraphs: whether every part was replayed as a graph in the train measurement
        (False: some part ran eagerly, so the train figure is not a graph-replay figure); None without."""
        return None if self.graphs is None else all(v == "graph" for v in self.graphs.values())

    @property
    def timed_eager(self) -> Optional[list]:
        """With --cudagraphs: the measured columns that were timed eagerly all the same
        (``EAGER_UNDER_GRAPHS``); None without --cudagraphs, where every column is eager."""
        return None if self.graphs is None else [m for m in EAGER_UNDER_GRAPHS if self.samples.get(m)]

    def stat(self, measure: str) -> tuple:
        """(median, min, max) steps/s of ``measure``, or (None, None, None)."""
        xs = self.samples.get(measure)
        if not xs:
            return None, None, None
        return statistics.median(xs), min(xs), max(xs)


# ------------------------------------------------------------------------------------ timing
def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Samples(list):
    """Steps/s per timed run, with ``warmup_seconds``: the untimed warm-up's seconds (a --compile's
    compilation and a --cudagraphs capture included), which no figure counts."""

    warmup_seconds: Optional[float] = None


def warm_up(fn: Callable[[], None], seconds: float, device) -> tuple:
    """(calls per timed window, seconds the warm-up took) of ``fn``: at least 3 untimed calls (lazy
    init, allocator, --cudagraphs capture) and 20% of ``seconds``, unless one call is long."""
    warm_start, times = time.perf_counter(), []
    while True:
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
        if len(times) >= 3 and (times[-1] >= seconds or time.perf_counter() - warm_start >= 0.2 * seconds):
            break
    # Calls per run from a typical warm-up call: the last one alone let one stall (a GC pause, another
    # process) shrink every run's window to a few calls. The median, without the first call (lazy
    # init, a graph capture), and the lower of the two middle ones so a stall is never half of it.
    # Not "call until the clock says seconds": reading the clock between unsynchronized calls would
    # either need a sync per call on CUDA (which changes what is timed) or end late by whatever the
    # host had queued ahead of the device.
    per_call = statistics.median_low(times[1:])
    return max(1, int(seconds / max(per_call, 1e-9))), sum(times)


def timed_window(fn: Callable[[], None], calls: int, steps_per_call: int, device) -> tuple:
    """(steps/s, seconds) of ``calls`` back-to-back calls of ``fn``."""
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    _sync(device)
    elapsed = time.perf_counter() - t0
    return calls * steps_per_call / elapsed, elapsed


def measure_rounds(parts: list, seconds: float, repeats: int, device, durations: Optional[list] = None) -> list:
    """Steps/s of each of ``parts`` ((fn, steps per call) pairs), one ``Samples`` per part: each is
    warmed up in turn, then ``repeats`` rounds each time one window of about ``seconds`` of every
    part, in turn (A, B, A, B, ...). A ratio between parts is then taken per round: timing all of
    A's repeats, then all of B's, put each side in a different phase of the machine's load, and the
    ratio of two identical runs swung 2x. ``durations``: one list per part that gets each window's seconds."""
    sized, out = [], []
    for fn, _ in parts:
        calls, warm = warm_up(fn, seconds, device)
        samples = Samples()
        samples.warmup_seconds = warm
        sized.append(calls)
        out.append(samples)
    for _ in range(repeats):
        for k, (fn, steps) in enumerate(parts):
            sps, elapsed = timed_window(fn, sized[k], steps, device)
            out[k].append(sps)
            if durations is not None:
                durations[k].append(elapsed)
    return out


def measure(fn: Callable[[], None], steps_per_call: int, seconds: float, repeats: int, device,
            durations: Optional[list] = None) -> "Samples":
    """Warm ``fn`` up, then time ``repeats`` runs of about ``seconds`` each; steps/s per run
    (``Samples``: with the warm-up's seconds). ``durations``: a list that gets each run's seconds
    (a run is whole calls, at least one)."""
    return measure_rounds([(fn, steps_per_call)], seconds, repeats, device,
                          None if durations is None else [durations])[0]


def random_actions(space, num_envs: int, device, count: int = 16):
    """``count`` batches of random actions (count, N, ...) for ``space``, drawn on ``device``, as
    BatchedEnv.step takes them: the space's own values (a Discrete's and MultiDiscrete's from its start)."""
    import gymnasium as gym
    import numpy as np
    import torch

    from .envs.spaces import bounded, index_space

    space = index_space(space)  # a MultiBinary takes its bits flat, as MultiDiscrete([2] * n)
    if isinstance(space, gym.spaces.Discrete):
        return torch.randint(int(space.start), int(space.start) + int(space.n), (count, num_envs), device=device)
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = torch.as_tensor(np.asarray(space.nvec, dtype=np.int64).reshape(-1), device=device)
        start = torch.as_tensor(np.asarray(space.start, dtype=np.int64).reshape(-1), device=device)
        return (torch.rand((count, num_envs, nvec.numel()), device=device) * nvec).long().clamp(max=nvec - 1) + start
    sides = torch.as_tensor(bounded(space), device=device)
    # an unbounded side (inf, or float64's +-finfo.max, inf in float32) has no uniform draw: a bound plus or
    # minus |N(0, 1)| where one side is bounded, N(0, 1) where neither is, so that every action is finite
    low = torch.as_tensor(space.low.reshape(-1), dtype=torch.float32, device=device).where(sides[0], 0.0)
    high = torch.as_tensor(space.high.reshape(-1), dtype=torch.float32, device=device).where(sides[1], 0.0)
    shape = (count, num_envs, low.numel())
    # low + (high - low) * u overflows to inf where the width passes float32's max (Box(-1e38, 3e38)); the
    # weighted sum of the bounds never does, and the clamp keeps its rounding inside them
    u = torch.rand(shape, device=device)
    uniform = (low * (1 - u) + high * u).clamp(low, high)
    if bool(sides.all()):  # every bound finite: the uniform draw alone, as before unbounded Boxes were taken
        return uniform
    normal = torch.randn(shape, device=device)
    return torch.where(sides[0] & sides[1], uniform,
                       torch.where(sides[0], low + normal.abs(), torch.where(sides[1], high - normal.abs(), normal)))


# ------------------------------------------------------------------------------------ one line
def base_config(args):
    """The preset's PPOConfig for ``args.env_id`` with the typed PRESET_FLAGS, --vector and
    --num-steps over it (ConfigError for an unknown preset). A typed --device never turns the
    preset's --cudagraphs off: train refuses that pair (check_line refuses it here too), and eager
    calls measured under the preset's label would pass for its graphed setting; --no-cudagraphs is
    how a user asks for eager."""
    from . import presets
    from .config import PPOConfig

    cfg = presets.resolve(args.env_id, args.preset, PPOConfig(), python=False)
    sources = getattr(cfg, "_sources", None) or {}
    for name in PRESET_FLAGS:
        value = getattr(args, name, None)
        if value is not None:
            setattr(cfg, name, value)
            sources.pop(name, None)  # typed: a refusal names the flag, not the preset, even where they agree
    if getattr(args, "vector", None):
        cfg.vector = args.vector
    if getattr(args, "num_steps", None) is not None:  # 0 reaches validate (the Trainer) and is refused there, not ignored
        cfg.num_steps = args.num_steps
    return cfg


def bench_config(args, backend: str, num_envs: int):
    """The preset's PPOConfig for ``args.env_id`` with the bench's overrides (``base_config``)."""
    cfg = base_config(args)
    cfg.backend, cfg.num_envs, cfg.threads = backend, num_envs, args.threads
    cfg.progress, cfg.checkpoint_every, cfg.eval_episodes = False, 0, 0
    # far more steps than the bench runs, so the annealed learning rate stays near its start
    cfg.total_timesteps = cfg.num_envs * cfg.num_steps * 1_000_000
    return cfg


class DoesNotFit(ConfigError):
    """A ConfigError of check_fits (the line does not fit in memory), told apart from the other
    refusals of ``check_line``: the default --num-envs list drops such a size; a typed one is refused."""


def check_line(args, backend: str, num_envs: int):
    """The PPOConfig of one line, validated and checked against free memory as train checks it
    (ConfigError before any buffer is allocated; DoesNotFit, a ConfigError, for the memory);
    ``run`` checks every line before measuring any."""
    from .config import validate
    from .device import resolve_device
    from .sizing import check_fits, env_probe
    from .trainer import check_device_flags

    cfg = bench_config(args, backend, num_envs)
    try:
        validate(cfg)
        device = resolve_device(cfg.device)
        check_device_flags(cfg, device)  # --cudagraphs on a CPU: refused before a line is measured, not at its Trainer
    except ConfigError as e:
        raise in_bench_flags(e, cfg) from None
    try:
        check_fits(cfg, device, env_probe(cfg))
    except ConfigError as e:
        raise DoesNotFit(str(in_bench_flags(e, cfg))) from None
    return cfg


def in_bench_flags(e, cfg):
    """``e`` (a ConfigError of validate or check_fits) in bench's words: those name train's
    --num-minibatches and --hidden-sizes, which bench takes from the preset (--preset chooses it)."""
    from .config import ConfigError

    message = str(e)
    if message.startswith("--num-minibatches "):  # validate: the minibatches do not divide the batch
        m, batch = cfg.num_minibatches, cfg.num_envs * cfg.num_steps
        return ConfigError(f"--num-envs {cfg.num_envs} x --num-steps {cfg.num_steps} = {batch:,}: must be a multiple of the "
                           f"preset's num_minibatches ({m}) and at least {2 * m} (2 rows per minibatch); "
                           "choose other --num-envs or --num-steps, or another --preset")
    if "--num-minibatches" in message or "--hidden-sizes" in message:  # check_fits' advice
        return ConfigError(f"{message} (bench takes num_minibatches and hidden_sizes from the preset: choose another --preset)")
    return e


def bench_line(args, backend: str, num_envs: int) -> tuple:
    """(Line, PPOConfig, device) of one backend at ``num_envs`` (``bench_lines``)."""
    return bench_lines(args, [backend], num_envs)[0]


def bench_lines(args, backends: list, num_envs: int) -> list:
    """Build a Trainer for each of ``backends`` at ``num_envs`` and time env, rollout and train on
    them, the backends in turn within each repeat (``measure_rounds``), so that their per-round
    ratio compares windows a few seconds apart. [(Line, PPOConfig, device)], in ``backends``' order.
    The Trainers exist side by side: each line is checked against the memory left by the ones built
    before it."""
    import torch

    from .trainer import Trainer

    built = []  # (line, cfg, trainer)
    try:
        for backend in backends:
            cfg = check_line(args, backend, num_envs)
            trainer = Trainer(cfg, quiet=True)
            # as the Trainer set them: --threads 2 may mean one intra-op thread each for actor and critic
            built.append((Line(backend, num_envs, intra_op=torch.get_num_threads(),
                               paired=paired_batches(cfg, trainer.side is not None)), cfg, trainer))
        device = built[0][2].device
        timed = [measured_calls(trainer, cfg, num_envs) for _, cfg, trainer in built]
        for name in measures_of(args):
            for line, _, _ in built:
                line.seconds[name] = []
            results = measure_rounds([fns[name] for fns in timed], args.seconds, args.repeats, device,
                                     [line.seconds[name] for line, _, _ in built])
            for (line, _, _), samples in zip(built, results):
                line.samples[name] = samples
                warm = getattr(samples, "warmup_seconds", None)
                line.warmup[name] = [warm] if warm is not None else []
        for line, cfg, trainer in built:
            if getattr(cfg, "compile", False):  # a stand-in config may not say
                from .accel import eager_fallback

                line.compile_eager = eager_fallback(trainer)
            if cfg.cudagraphs:
                from .graphs import trainer_graph_states

                line.graphs = trainer_graph_states(trainer)
    finally:
        # last built first: each Trainer puts back the thread count and denormal flag it found, which
        # for all but the first were an earlier Trainer's, so only this order leaves the caller's
        for _, _, trainer in reversed(built):
            trainer.close()
    return [(line, cfg, trainer.device) for line, cfg, trainer in built]


def measured_calls(trainer, cfg, num_envs: int) -> dict:
    """measure name -> (function, env steps per call) timed on ``trainer``."""
    from . import ppo

    env, device = trainer.env, trainer.device
    actions = random_actions(env.single_action_space, num_envs, device)
    state = {"i": 0}

    def env_step() -> None:
        i = state["i"] = (state["i"] + 1) % actions.shape[0]
        trainer.next_obs.copy_(env.step(actions[i])[0])

    def rollout() -> None:
        trainer.next_obs.copy_(ppo.collect_rollout(env, trainer.policy_step, trainer.rollout, trainer.next_obs,
                                                   trainer.obs_norm, trainer.reward_scaler))

    def train() -> None:
        out = trainer.train_iteration()
        bool(out["nonfinite"])  # the once-per-iteration read of Trainer.run

    batch = cfg.num_steps * num_envs
    return {"env": (env_step, num_envs), "rollout": (rollout, batch), "train": (train, batch)}


def paired_batches(cfg, side: bool) -> bool:
    """Whether a Trainer with a side thread (``side``: side_thread.pairs said yes) computes some batch
    of ``cfg`` with actor and critic side by side: the rollout's (num_envs rows) or a minibatch's
    reaches side_thread.MIN_ROWS. Below it every batch runs on the caller's thread, as with --threads 1,
    though the Trainer halved its intra-op threads."""
    from .side_thread import MIN_ROWS

    minibatch = cfg.num_envs * cfg.num_steps // max(cfg.num_minibatches, 1)
    return side and max(cfg.num_envs, minibatch) >= MIN_ROWS


def measures_of(args) -> tuple:
    """The measures a run times: all three, or train alone with --train-only."""
    return ("train",) if getattr(args, "train_only", False) else MEASURES


# ------------------------------------------------------------------------------------ output
def fmt_sps(x: Optional[float]) -> str:
    if x is None:
        return "-"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def fmt_cell(line: Line, measure_name: str) -> str:
    med, lo, hi = line.stat(measure_name)
    if med is None:
        return "-"
    return f"{fmt_sps(med)} ({fmt_sps(lo)}-{fmt_sps(hi)})"


def train_x_gym(lines: list) -> dict:
    """id(line) -> the per-round ratios of its train steps/s over Gymnasium's at the same num_envs,
    for the native and EnvPool lines that have a Gymnasium line measured in the same rounds: round k
    of one over round k of the other (``bench_lines`` times them in turn), never a median over a
    median of windows taken minutes apart."""
    gym = {ln.num_envs: ln.samples.get("train") for ln in lines if ln.backend == "gymnasium" and not ln.skipped}
    out = {}
    for ln in lines:
        ours, theirs = ln.samples.get("train"), gym.get(ln.num_envs)
        if ln.backend in ("native", "envpool") and ours and theirs and len(ours) == len(theirs):
            out[id(ln)] = [a / b for a, b in zip(ours, theirs)]
    return out


def fmt_ratio(ratios: Optional[list]) -> str:
    """'2.0x' for one round, '2.0x (1.8-2.3)' (median, min-max over the rounds) for more, '' for none."""
    if not ratios:
        return ""
    if len(ratios) == 1:
        return f"{ratios[0]:.1f}x"
    return f"{statistics.median(ratios):.1f}x ({min(ratios):.1f}-{max(ratios):.1f})"


def table_rows(lines: list) -> list:
    """Rows of strings: backend, envs, env, rollout, train, (native or envpool)/gymnasium train ratio
    (``train_x_gym``: median (min-max) of the per-round ratios)."""
    ratios = train_x_gym(lines)
    rows = []
    for ln in lines:
        if ln.skipped:
            rows.append((ln.backend, f"{ln.num_envs:,}", f"skipped ({ln.skipped})", "", "", ""))
            continue
        ratio = fmt_ratio(ratios.get(id(ln)))
        cells = [fmt_cell(ln, m) + (" timed eager" if m in (ln.timed_eager or ()) else "") for m in MEASURES]
        if ln.graphs_live is False:  # never an eager figure under a --cudagraphs heading
            cells[-1] += " graphs fell back: eager (" + "; ".join(f"{k}: {v}" for k, v in ln.graphs.items() if v != "graph") + ")"
        if ln.compile_live is False:  # never an eager figure under a --compile heading
            cells[-1] += f" compile fell back: eager ({', '.join(ln.compile_eager)})"
        rows.append((ln.backend, f"{ln.num_envs:,}{paired_mark(ln, lines)}", *cells, ratio))
    return rows


HEADER = ("backend", "num_envs", "env steps/s", "rollout steps/s", "train steps/s", "train x gym")


def format_table(lines: list) -> str:
    rows = [HEADER] + table_rows(lines)
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    out = []
    for j, r in enumerate(rows):
        out.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())
        if j == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


#: the terminal table's legend (the --out file says the same at more length, docs/performance.md in full)
LEGEND = ("env: env.step with random actions, no policy; rollout: collect_rollout with the policy; "
          "train: whole iterations (rollout + GAE + update)",
          "cells: steps/s, median (min-max) over the timed rounds; "
          "train x gym: train steps/s over Gymnasium's at the same num_envs")


def switches_line(args, device, lines: list) -> str:
    """The line above the text table naming what the figures ran with (device; the preset, T, epochs and
    minibatches where not the env's default preset's; threads, amp, compile and the mode that ran,
    cudagraphs, the backends whose lines ran; --vector where not sync and a Gymnasium line ran; --train-only), so two pasted
    tables of other switches differ. The threads as the measured ``lines`` ran them (threads_text, as the
    --out file says them): --threads 2 with every batch below side_thread.MIN_ROWS ran as --threads 1."""
    from . import presets
    from .config import PPOConfig

    ran, default = base_config(args), presets.resolve(args.env_id, None, PPOConfig(), python=False)
    shape = [] if args.preset in (None, "default") else [f"preset {args.preset}"]
    if (ran.num_steps, ran.update_epochs, ran.num_minibatches) != (default.num_steps, default.update_epochs, default.num_minibatches):
        shape.append(f"T {ran.num_steps}, {ran.update_epochs} epochs x {ran.num_minibatches} minibatches")
    # the backends whose lines ran, not --backend's words: 'both' of an env with no native twin runs Gymnasium alone
    measured = list(dict.fromkeys(ln.backend for ln in lines if not ln.skipped)) or backends_for(args.env_id, args.backend)
    vector = ran.vector != "sync" and "gymnasium" in measured
    return (f"{args.env_id} on {device}: {''.join(f'{s}, ' for s in shape)}threads {threads_text(lines, args.threads)}, "
            f"amp {ran.amp}, compile {compile_text(ran, device)}, cudagraphs {'on' if ran.cudagraphs else 'off'}, "
            f"backend{'s' if len(measured) > 1 else ''} {', '.join(measured)}" + (f", vector {ran.vector}" if vector else "")
            + (", train only" if getattr(args, "train_only", False) else ""))


def compile_text(ran, device) -> str:
    """'off', or 'on (mode M)' with the mode that ran on ``device`` (trainer.compile_mode_run: reduce-overhead
    compiles in the default mode on a CPU, which the text says)."""
    from .trainer import compile_mode_run

    if not ran.compile:
        return "off"
    mode = compile_mode_run(ran, device)
    return f"on (mode {mode})" if mode == ran.compile_mode else f"on (mode {mode}: {ran.compile_mode} has only CUDA graphs)"


def format_table_with_legend(lines: list) -> str:
    """``format_table`` and, under it, the ``LEGEND`` lines that say what its columns measure."""
    return "\n".join([format_table(lines), *LEGEND])


def markdown_table(lines: list) -> str:
    out = ["| " + " | ".join(HEADER) + " |", "|" + "|".join(["---"] + ["---:"] * (len(HEADER) - 1)) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in table_rows(lines)]
    return "\n".join(out)


def json_line(line: Line, args, cfg, device, run: Optional[dict] = None, ratios: Optional[list] = None) -> dict:
    """One JSON object of a line. ``run``: what the whole run shares (``run_record``: timestamp,
    machine, load); made here when not given. ``ratios``: the line's per-round train ratios over
    Gymnasium (``train_x_gym``), None where it has none."""
    from .trainer import compile_mode_run

    ran = cfg if cfg is not None else base_config(args)  # a skipped line has no config of its own
    d = {"env_id": args.env_id, "device": str(device), "backend": line.backend, "num_envs": line.num_envs,
         "num_steps": cfg.num_steps if cfg else None, "update_epochs": cfg.update_epochs if cfg else None,
         "num_minibatches": cfg.num_minibatches if cfg else None, "threads": args.threads, "repeats": args.repeats,
         "preset": args.preset or "default", "compile": bool(ran.compile), "cudagraphs": bool(ran.cudagraphs),
         "compile_mode": compile_mode_run(ran, device) if ran.compile else None,  # the mode that ran (compile_text)
         "amp": ran.amp, "skipped": line.skipped,  # the switches too: a compiled result is told from an eager one
         "train_only": bool(getattr(args, "train_only", False)),
         # what ran, not what was asked: with --cudagraphs, whether every part was replayed as a graph
         # (false when a capture failed and that part fell back to eager) and each part's state
         "cudagraphs_live": line.graphs_live, "graph_parts": line.graphs,
         # with --cudagraphs, the *_sps figures of these measures are eager calls, not graph replays
         "timed_eager": line.timed_eager,
         # with --compile, whether every compiled step ran compiled (false: dynamo ran these eagerly)
         "compile_live": line.compile_live, "compile_eager": line.compile_eager,
         # what --threads became: torch's intra-op threads, and whether actor and critic ran side by side
         # for some batch (false at --threads 2 where every batch is below side_thread.MIN_ROWS)
         "intra_op": line.intra_op, "paired": line.paired,
         # round k of this backend's train over round k of Gymnasium's (timed in turn), and their median
         "train_x_gym_rounds": ratios, "train_x_gym": statistics.median(ratios) if ratios else None}
    for m in MEASURES:
        med, lo, hi = line.stat(m)
        d[f"{m}_sps"], d[f"{m}_sps_min"], d[f"{m}_sps_max"] = med, lo, hi
    # what the --out file records and the medians alone do not: without them an async line reads as a
    # sync one and a result cannot be placed on a machine or a date
    d.update({"vector": ran.vector, "hidden_sizes": list(ran.hidden_sizes), "encoder": ran.encoder,
              "seconds": getattr(args, "seconds", None),
              # per measure, one entry per timed repeat: its steps/s and its measured seconds
              "samples": {m: list(xs) for m, xs in line.samples.items()},
              "durations": {m: list(xs) for m, xs in line.seconds.items()},
              # the untimed warm-up (>= 3 whole calls; --compile's compilation happens in it)
              "warmup_seconds": {m: (xs[0] if xs else None) for m, xs in line.warmup.items()}})
    d.update(run if run is not None else run_record(device, started_now(), os.getloadavg()[0]))
    return d


def started_now() -> datetime:
    """Now in local time with its UTC offset: a run's ``timestamp`` and its --out file's "Recorded" line read as
    meta.json's times do (train_state.started_now: 2026-12-08T06:13:36+09:00), never a naive local time."""
    return datetime.now().astimezone()


def run_record(device, started: datetime, load0: float, args=None) -> dict:
    """What every JSON line of one run shares: when it started, the machine (as ``machine_lines``
    writes it in the --out file), the 1-minute load average at its start and now, and the command
    that reproduces it (None without ``args``)."""
    return {"timestamp": started.isoformat(timespec="seconds"), "machine": machine_info(device),
            "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)],
            "command": command_line(args) if args is not None else None}


def machine_info(device) -> dict:
    """The machine as ``machine_lines`` writes it, as a mapping (the JSON lines' ``machine``)."""
    import gymnasium
    import torch

    from . import __version__
    from .cpuinfo import simd_text, usable_cpus
    from .tanh_cpu import MODE
    from .train_state import git_state

    device = torch.device(device)
    gpu = None
    if torch.cuda.is_available():
        gpu = f"{torch.cuda.get_device_name(device if device.type == 'cuda' else 0)} (CUDA {torch.version.cuda})"
    return {"cpu": cpu_model(), "logical_cores": os.cpu_count(), "usable_cores": usable_cpus(), "simd": simd_text(),
            "cpu_tanh": MODE, "torch": torch.__version__, "gymnasium": gymnasium.__version__,
            "python": platform.python_version(), "os": f"{platform.system()} {platform.release()}",
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"), "gpu": gpu,
            # the code measured, as a run's meta.json records it (train_state.git_state)
            "proxima": __version__, **dict(zip(("git_commit", "git_dirty"), git_state()))}


def machine_lines(device, threads) -> list:
    """The machine as a results file describes it; ``threads``: torch's intra-op threads (a count,
    or threads_text's account of how bench's Trainers ran)."""
    m = machine_info(device)
    rows = [f"- CPU: {m['cpu']}, {m['logical_cores']} logical cores ({m['usable_cores']} usable by this process); "
            f"SIMD {m['simd']}; CPU tanh {m['cpu_tanh']}",
            f"- torch {m['torch']}, gymnasium {m['gymnasium']}, Python {m['python']}, {m['os']}",
            f"- proxima {m['proxima']}, git commit {m['git_commit'] or 'unknown (not a git checkout)'}"
            + (" with uncommitted changes" if m["git_dirty"] else ""),
            f"- torch intra-op threads: {threads}; OMP_NUM_THREADS={m['omp_num_threads']}"]
    if m["gpu"]:
        rows.append(f"- GPU: {m['gpu']}; this run used {device}")
    else:
        rows.append("- GPU: none available on this machine (CUDA numbers not measured)")
    return rows


def threads_text(lines: list, asked: int) -> str:
    """How the measured lines' Trainers ran, from what each recorded: '1', or with actor and critic
    paired (side_thread.py) '1 each on two threads, actor and critic side by side ...' (--threads 2),
    or, where the Trainer halved its threads for a side thread that no batch reached, that it was not paired.
    Where the sizes ran in more than one way (--threads 2 paired at 64 envs, not at 4), each way names
    its sizes ('... at 4 envs; ... at 64 and 1,024 envs'), and the table's rows say theirs (paired_mark)."""
    from .side_thread import MIN_ROWS

    ran = sorted({(ln.intra_op, ln.paired) for ln in lines if ln.intra_op is not None})
    if not ran:
        return f"{asked} (--threads {asked}; no line was measured)"

    def text(n: int, paired: bool) -> str:
        if paired:
            return (f"{n} each on two threads, actor and critic side by side for batches of {MIN_ROWS:,}+ rows "
                    f"(--threads {asked})")
        if n < asked:  # a side thread took half, but every batch was below MIN_ROWS: one thread did the work
            return unpaired_threads(n, asked)
        return str(n)

    def where(n: int, paired: bool) -> str:
        sizes = list(dict.fromkeys(f"{ln.num_envs:,}" for ln in lines if (ln.intra_op, ln.paired) == (n, paired)))
        return f" at {', '.join(sizes[:-1]) + ' and ' if len(sizes) > 1 else ''}{sizes[-1]} envs"

    return "; ".join(text(n, paired) + (where(n, paired) if len(ran) > 1 else "") for n, paired in ran)


def paired_mark(line, lines: list) -> str:
    """' (paired)' or ' (not paired)' after a row's num_envs where the measured ``lines`` ran --threads
    in more than one way (threads_text names the sizes too); '' where they all ran alike, as the line
    above the table then says for every row."""
    ran = {(ln.intra_op, ln.paired) for ln in lines if ln.intra_op is not None}
    if len(ran) < 2 or line.intra_op is None:
        return ""
    return " (paired)" if line.paired else " (not paired)"


def small_batch_threads_note(cfg, intra_op: Optional[int], device, python: bool = False, bench: bool = False) -> str:
    """The note (after ``note: ``) on --threads that became as many (``intra_op`` > 1) torch intra-op threads
    on the CPU, the agent not paired (side_thread.pairs), for a run whose every batch is below
    side_thread.MIN_ROWS (neither the rollout's num_envs rows nor a minibatch's reach it). There several threads
    per op can be tens of times slower than one when other processes share the cores (Pendulum-v1, 4
    envs, --threads 2 on a shared 2-core CPU in our runs; docs/performance.md, Threads). "" otherwise.
    ``bench``: proxima bench's (its size, and compare with the same bench); ``python``: PPOConfig's names.
    train and resume say it at their start (trainer.note_switches), bench at the first such size."""
    from .side_thread import MIN_ROWS

    # intra_op below cfg.threads: a side thread took half, for a pairing no batch reaches, which
    # unpaired_threads_note (train) and unpaired_threads (bench's cell) say
    if cfg is None or not intra_op or intra_op < 2 or intra_op != cfg.threads or str(device).split(":")[0] != "cpu":
        return ""
    if max(cfg.num_envs, cfg.num_envs * cfg.num_steps // max(cfg.num_minibatches, 1)) >= MIN_ROWS:
        return ""
    asked = f"PPOConfig.threads={cfg.threads}" if python else f"--threads {cfg.threads}"
    where = f"at {cfg.num_envs:,} envs" if bench else "here"  # bench: its first such size, said once
    why = (" (actor and critic are paired only for a discrete-action MLP agent without "
           + ("compile or amp)" if python else "--compile or --amp)"))
    then = ("compare with the same bench at --threads 1" if bench else
            f"compare with proxima bench {shlex.quote(cfg.env_id)} --num-envs {cfg.num_envs} --num-steps {cfg.num_steps} "
            f"--threads {cfg.threads} and --threads 1")
    return (f"{asked}: {intra_op} intra-op threads on every batch below {MIN_ROWS:,} rows, which is every batch {where}{why}; "
            f"on small batches several threads can be tens of times slower than one when other processes share "
            f"the cores: {then}")


def unpaired_threads(n: int, asked: int) -> str:
    """The threads of a Trainer that halved --threads ``asked`` to ``n`` for a side thread that no batch
    reached (paired_batches False): '1 (--threads 2: not paired, every batch below 2,048 rows: the same as
    --threads 1)'. bench's threads (threads_text) and train's note at its start say it alike."""
    from .side_thread import MIN_ROWS

    return f"{n} (--threads {asked}: not paired, every batch below {MIN_ROWS:,} rows: the same as --threads {n})"


def repeats_text(lines: list, args) -> str:
    """The repeats as they ran: their count and measured seconds (--seconds is a target: a repeat is
    whole calls, at least one, and one train call is a whole iteration of T x num_envs steps)."""
    spans = [x for ln in lines for xs in ln.seconds.values() for x in xs]
    if not spans:
        return f"{args.repeats} repeats"
    took = f"{min(spans):.3g}-{max(spans):.3g} s" if max(spans) > min(spans) else f"{spans[0]:.3g} s"
    return (f"{args.repeats} repeats of {took} each (measured; --seconds {args.seconds:g} asks for about that much, "
            "but a repeat is at least one call, and one train call is one whole iteration)")


def warmup_text(lines: list) -> str:
    """The untimed warm-up as it ran: at least 3 whole calls per measurement, and how long each
    measurement's whole warm-up took."""
    spans = [xs[0] for ln in lines for xs in ln.warmup.values() if xs]
    took = ""
    if spans:  # a whole warm-up's seconds, all its calls (and a compilation) together: "each" read as per call
        took = f"{min(spans):.3g}-{max(spans):.3g} s" if max(spans) > min(spans) else f"{spans[0]:.3g} s"
        took = f" ({took} per measurement, all its warm-up calls together)"
    return (f"an untimed warm-up of at least 3 whole calls per measurement{took}, which holds any --compile "
            "compilation and --cudagraphs capture: no figure includes them")


def command_line(args) -> str:
    """The canonical command that reproduces this run (every option spelled out, the preset's
    switches as they ran: --no-cudagraphs where it turned the preset's off)."""
    from . import presets
    from .config import PPOConfig

    ran, preset = base_config(args), presets.resolve(args.env_id, args.preset, PPOConfig(), python=False)
    argv = ["proxima", "bench", args.env_id, "--num-envs", args.num_envs, "--device", str(ran.device),
            "--backend", args.backend, "--repeats", str(args.repeats), "--threads", str(args.threads),
            "--seconds", f"{args.seconds:g}", "--max-gym-envs", str(args.max_gym_envs)]
    if args.preset:
        argv += ["--preset", args.preset]
    if args.num_steps is not None:
        argv += ["--num-steps", str(args.num_steps)]
    for name in ("compile", "cudagraphs"):
        if getattr(ran, name) or getattr(preset, name):
            argv.append(f"--{name}" if getattr(ran, name) else f"--no-{name}")
        if name == "compile" and ran.compile and (ran.compile_mode != "default" or preset.compile_mode != "default"):
            argv += ["--compile-mode", ran.compile_mode]
    if ran.amp != "none" or preset.amp != "none":
        argv += ["--amp", ran.amp]
    if args.vector:
        argv += ["--vector", args.vector]
    if getattr(args, "train_only", False):
        argv.append("--train-only")
    return shlex.join(argv)


def write_markdown(path: Path, args, lines: list, cfg, device, started: datetime, load: tuple, stopped: str = "") -> None:
    """The report of a run to ``path`` (save_markdown); ``stopped``: stopped_text's note of a run cut short,
    said above the table, which then holds only the sizes that finished."""
    desc = (f"preset `{args.preset or 'default'}`: T = {cfg.num_steps} steps per env per rollout, "
            f"{cfg.update_epochs} epochs x {cfg.num_minibatches} minibatches, hidden {cfg.hidden_sizes}, "
            f"compile {cfg.compile}{compile_text(cfg, device)[2:] if cfg.compile else ''}, cudagraphs {cfg.cudagraphs}, amp {cfg.amp}, encoder {cfg.encoder}, "
            f"Gymnasium vector {cfg.vector}") if cfg else "no line was measured"
    text = "\n".join([
        f"# proxima bench {args.env_id} on {device}, {started:%Y-%m-%d %H:%M}",
        "",
        f"Recorded {started.isoformat(timespec='seconds')} by:",
        "",
        "```",
        command_line(args),
        "```",
        "",
        *machine_lines(device, threads_text(lines, args.threads)),
        f"- load average (1 min) at start / end: {load[0]:.2f} / {load[1]:.2f}",
        f"- {desc}",
        "",
        f"Steps per second, median (min-max) of {repeats_text(lines, args)}, after {warmup_text(lines)}. "
        "env: `env.step` with random actions, no policy; rollout: `collect_rollout` with the policy; "
        "train: `Trainer.train_iteration` (rollout + GAE + update). "
        "Backends of one num_envs are timed in turn, one window of each per repeat (round). "
        "train x gym: the native or EnvPool backend's train steps/s over Gymnasium's at the same num_envs, "
        "per round; median (min-max) over the rounds."
        + (" --train-only: env and rollout were not measured ('-')." if getattr(args, "train_only", False) else "")
        + (" --cudagraphs: only train replays the graphs; env and rollout are timed with eager calls ('timed eager')."
           if (cfg if cfg is not None else base_config(args)).cudagraphs and not getattr(args, "train_only", False) else ""),
        "",
        *([f"**Incomplete: {stopped}.** The table holds the sizes measured before it.", ""] if stopped else []),
        markdown_table(lines),
        "",
    ])
    save_markdown(path, text)


@contextlib.contextmanager
def folder_lock(folder: Path):
    """Hold an exclusive lock (flock) on ``folder`` while the block runs, so that two runs writing
    one results file do not read it at the same time and each replace it without the other's latest
    section. The folder, not the file: the file is replaced by a rename, so a lock on it would be on
    a file no longer there; and no lock file is left beside the results. Not reentrant: a second
    lock of the same folder inside the block waits for ever (flock locks per open). Best effort:
    where a folder cannot be locked (no fcntl, a filesystem without flock), the block runs unlocked."""
    fd = None
    try:
        import fcntl

        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        fcntl.flock(fd, fcntl.LOCK_EX)
    except (ImportError, OSError):
        pass
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock


def write_file(path, data) -> None:
    """Replace ``path`` (created with its folders if missing) with ``data`` (bytes, or text written
    as UTF-8), all or nothing: ``data`` goes to a temporary file that then replaces ``path``, so a
    full disk or a kill leaves the file as it was, never half of it."""
    from .atomic import write_atomic

    path = Path(os.path.realpath(path))  # a symlinked results file stays a link to the updated file
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data)  # the temp file at a fresh name (O_EXCL): a link planted at a temp name is never followed


def append_file(path, text: str, between: str = "") -> None:
    """Append ``text`` to ``path`` (created with its folders if missing), all or nothing
    (``write_file``): what the file held is kept byte for byte, line endings included. ``between``
    goes first when the file already holds something (a blank line between two sections)."""
    _append(path, lambda had: (between if had else "") + text)


def _append(path, text_for: Callable[[bool], str]) -> None:
    """Append ``text_for(whether the file holds something)`` to ``path``, reading and replacing it
    under ``folder_lock``: two runs appending to one results file at once each read the file and
    replaced it with their own section added, and one of the two sections was lost."""
    real = Path(os.path.realpath(path))
    with folder_lock(real.parent):
        old = real.read_bytes() if real.exists() else b""
        write_file(real, old + text_for(bool(old)).encode("utf-8"))


def demote_headings(text: str) -> str:
    """Every Markdown heading of ``text`` one level down ('# T' -> '## T'), code blocks left alone."""
    out, fenced = [], False
    for row in text.split("\n"):
        if row.startswith("```"):
            fenced = not fenced
        out.append("#" + row if row.startswith("#") and not fenced else row)
    return "\n".join(out)


def has_content(path) -> bool:
    """Whether ``path`` is a file with something in it (what ``save_markdown`` appends to)."""
    path = Path(path)
    return path.is_file() and path.stat().st_size > 0


def save_markdown(path, text: str) -> None:
    """Write a report (``text``, under one '# ' title) to ``path``. A file that already holds something
    keeps it: the report is appended as a new section (its headings one level down), because results
    files also hold analysis written by hand ("Reading the table") that a new run must not delete."""
    _append(path, lambda had: "\n" + demote_headings(text.strip("\n")) + "\n" if had else text.strip("\n") + "\n")


# ------------------------------------------------------------------------------------ command
def parse_sizes(text: str, flag: str = "--num-envs") -> list:
    """'1,4,64' -> [1, 4, 64]; ValueError naming ``flag`` and ``text`` for anything else (an empty
    piece, 0, a word)."""
    try:
        sizes = [int(s.replace("_", "")) for s in text.split(",")]  # an empty piece (1,,2) is refused too
    except ValueError:
        sizes = []
    if not sizes or any(n < 1 for n in sizes):
        raise ValueError(f"{flag} {text!r}: expected a comma-separated list of positive integers, e.g. 1,4,64")
    return sizes


BACKENDS = ("auto", "native", "gymnasium", "envpool", "both")


def native_alone(env_id: str) -> bool:
    """True for a torch-native env with no Gymnasium version (a user's module:Class NativeEnv, or a
    native-only built-in): there 'both' measures the native env alone. Imports a module:Class's module
    (the id was typed, and bench builds it anyway); EnvError when that fails."""
    from .envs.gym_adapter import native_only, user_native_class

    return native_only(env_id) or user_native_class(env_id) is not None


def both_note(env_id: str, backend: str) -> str:
    """The note that --backend both measured the native env alone, or ''."""
    if "both" not in [b.strip() for b in backend.split(",")] or not native_alone(env_id):
        return ""
    return (f"note: '{env_id}' is a torch-native env with no Gymnasium version: --backend both measures the native "
            "env alone")


def backends_for(env_id: str, backend: str) -> list:
    """The backends to measure: 'both' (native and Gymnasium where a native env exists, EnvPool and
    Gymnasium's ALE for an Atari game with EnvPool installed), 'auto' (the
    one train and eval build by default), one backend, or a comma-separated list such as
    'envpool,gymnasium'; ValueError for an unknown one."""
    from .envs import NATIVE_ENVS, auto_backend

    names = [b.strip() for b in backend.split(",") if b.strip()]
    bad = [b for b in names if b not in BACKENDS]
    if not names or bad:
        raise ValueError(f"--backend {backend!r}: expected one of {', '.join(BACKENDS)} or a comma-separated list (envpool,gymnasium)")
    out = []
    for b in names:
        if b == "both" and native_alone(env_id):  # no Gymnasium version to set beside it
            out.append("native")
        elif b == "both":  # what train builds by default beside Gymnasium's: for an Atari game, EnvPool when installed
            first = "native" if env_id in NATIVE_ENVS else "envpool" if auto_backend(env_id) == "envpool" else None
            out += [first, "gymnasium"] if first else ["gymnasium"]
        else:
            out.append(auto_backend(env_id) if b == "auto" else b)
    return list(dict.fromkeys(out))


def _atari_needs(env_id: str) -> None:
    """EnvError, train's line, for an Atari game with neither ale-py nor EnvPool installed, where --backend both
    or auto left the backend to choose: 'needs ale-py and opencv (or EnvPool)', not the 'needs ale-py and
    opencv' of the Gymnasium backend these resolve to (atari.make_atari names EnvPool only for auto)."""
    from .envs import atari

    if atari.game_name(env_id) is not None and not atari.has_envpool() and not atari.has_ale():
        atari.make_atari(env_id, 1, "cpu", "auto")  # raises before building anything: nothing is installed to build


def accel_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("proxima.accel") is not None


def out_file_problem(path, example: str = "results.md") -> str:
    """Why a results file cannot be written at ``path`` ('' when it can): diskspace.path_problem's
    checks of the name, then a file created (O_EXCL, a name of its own) and removed in the folder
    the write will create its temporary file in (the nearest existing one when folders are missing):
    /proc/x.md or a read-only folder passed the name checks and failed only after the measuring.
    Nothing is left behind."""
    import tempfile

    from .diskspace import path_problem

    problem = path_problem(path, example=example)
    if problem:
        return problem
    real = Path(os.path.realpath(path))
    folder = next((p for p in real.parents if p.exists()), real.parent)
    try:
        with tempfile.TemporaryFile(dir=folder):  # O_EXCL (or O_TMPFILE): never an existing file, gone when closed
            pass
    except OSError as e:
        return f"cannot create a file in {folder} ({e.strerror or type(e).__name__}); give a file in a folder you can write"
    return ""


def out_folder_problem(path) -> str:
    """Why ``path``'s folder does not take a results file: it does not exist (a typo such as /nonexistent
    would otherwise be created as a new folder tree), or ''. The name's own checks go first
    (``out_file_problem``)."""
    from .diskspace import path_problem

    if path_problem(path, example="results.md"):
        return ""  # out_file_problem says what is wrong with the name
    folder = Path(os.path.realpath(path)).parent
    if folder.is_dir():
        return ""
    return f"folder {folder} does not exist; create it first (mkdir -p {shlex.quote(str(folder))}) or give a file in an existing folder"


#: the most --repeats and --seconds take: a bench of 1e23 repeats, or of repeats of 1e23 s, ran until
#: killed, printing nothing; at these bounds one measurement already takes most of a day
MAX_REPEATS = 100
MAX_SECONDS = 600.0


def arguments_problem(args: argparse.Namespace) -> str:
    """What ``proxima bench`` would refuse in ``args`` before measuring, as its one error line
    (without the "proxima bench: error: " prefix), or ''. Besides ``run``, the benchmark scripts
    that start ``proxima bench`` processes call it first (benchmarks/tables.bench_problem), so a
    size that cannot fit is refused before minutes of measuring the others."""
    return plan(args)[0]


def plan(args: argparse.Namespace) -> tuple:
    """(problem, sizes, notes, gym_max): ``arguments_problem``'s line ('' when none), the --num-envs to
    measure, the notes to print (``default_sizes``: what the default list left out) and the most envs a
    Gymnasium line is measured at (--max-gym-envs, or less where ``default_sizes`` caps Gymnasium's lines)."""
    from .envs import EnvError

    try:
        # only None is not given: --num-envs "" (an unset "$N") is refused, not the default list
        problem, sizes, notes = "", parse_sizes(DEFAULT_SIZES if args.num_envs is None else args.num_envs), []
        backends = backends_for(args.env_id, args.backend)
        if {"both", "auto"} & {b.strip() for b in args.backend.split(",")}:
            _atari_needs(args.env_id)
    except (ValueError, EnvError) as e:  # EnvError: an id like Tennis-v5 that no installed package knows
        return str(e), [], [], args.max_gym_envs
    gym_max = args.max_gym_envs
    twice = next((n for i, n in enumerate(sizes) if n in sizes[:i]), None)
    if twice is not None:  # measured and written twice, one row a copy of the other
        return f"--num-envs {args.num_envs!r}: {twice} is listed twice; list each size once", [], [], gym_max
    problem = options_problem(args)
    if not problem:
        try:
            sizes, notes, gym_max = (default_sizes(args, sizes, backends) if args.num_envs is None else
                                     (check_sizes(args, sizes, backends), [], gym_max))
        except (ConfigError, EnvError) as e:
            problem = str(e)
        except ImportError as e:
            problem = f"{e}"
    return problem, sizes, notes, gym_max


def options_problem(args: argparse.Namespace) -> str:
    """arguments_problem's checks of the options but --num-envs and --backend, or ''."""
    for name in ("repeats", "threads"):
        if getattr(args, name) < 1:
            return f"--{name} {getattr(args, name)}: must be at least 1"
    if args.repeats > MAX_REPEATS:
        return f"--repeats {args.repeats}: must be at most {MAX_REPEATS} (timed repeats of each measurement)"
    if not (args.seconds > 0 and math.isfinite(args.seconds)):  # inf: the warm-up loop would never end
        return f"--seconds {args.seconds:g}: must be a positive number"
    if args.seconds > MAX_SECONDS:
        return f"--seconds {args.seconds:g}: must be at most {MAX_SECONDS:g} (the target of one timed repeat, 10 minutes)"
    if args.max_gym_envs < 0:
        return f"--max-gym-envs {args.max_gym_envs}: must be 0 or more"
    if args.out:  # a file that cannot be written fails now, not after minutes of measuring
        problem = out_folder_problem(args.out) or out_file_problem(args.out)
        if problem:
            return f"--out {args.out}: {problem}"
    from .config import coerce, cpu_preset_hint, preset_of
    from .device import resolve_device

    try:
        if getattr(args, "compile_mode", None) is not None:  # as train refuses the typed flag: the field's one line
            coerce("compile_mode", args.compile_mode, source="flag")
        base = base_config(args)
    except ConfigError as e:  # an unknown --preset or --compile-mode
        return str(e)
    if base.compile and not accel_available():
        return ("--compile needs proxima.accel (torch.compile / CUDA graphs), which this build does not have yet; "
                "run without --compile")
    try:
        resolve_device(base.device)
    except ConfigError as e:
        preset = preset_of(base, "device")  # not typed: the preset asked for it, as train says
        return (f"--preset {preset} needs CUDA, which is not usable here (run `proxima doctor`); {cpu_preset_hint(base)}"
                if preset else str(e))
    return ""


def check_sizes(args, sizes: list, backends: list, gym_max: Optional[int] = None) -> list:
    """Check every line of typed --num-envs ``sizes`` (ConfigError for the first refused): a size
    that cannot fit stops before any other is measured, so a typo never measures less than asked.
    A Gymnasium line above ``gym_max`` (default --max-gym-envs) is not measured, so not checked."""
    gym_max = args.max_gym_envs if gym_max is None else gym_max
    for n in sizes:
        for backend in backends:
            if not (backend == "gymnasium" and n > gym_max):
                check_line(args, backend, n)
    return sizes


def default_sizes(args, sizes: list, backends: list) -> tuple:
    """(sizes, notes, gym_max) of the default --num-envs list (``sizes``), which asks for no size in
    particular: for a Gymnasium env with image observations its Gymnasium lines stop at
    GYM_IMAGE_MAX_DEFAULT (``gym_max``, as --max-gym-envs caps them; the other backends' lines, EnvPool's
    of an Atari game, keep every size), and a size whose line does not fit in memory (DoesNotFit) is left
    out rather than refusing the sizes that fit, each left out in one note (a line). Other refusals refuse
    as check_sizes does; so does a list with no size left (the smallest's refusal)."""
    notes, gym_max = [], args.max_gym_envs
    if "gymnasium" in backends and gym_images(args):
        over = [n for n in sizes if n > GYM_IMAGE_MAX_DEFAULT]
        gym_max = min(gym_max, GYM_IMAGE_MAX_DEFAULT)
        # a size left with no line to measure is dropped; one with another backend's line keeps it
        sizes = [n for n in sizes if any(b != "gymnasium" or n <= GYM_IMAGE_MAX_DEFAULT for b in backends)]
        if over:
            notes.append(f"note: the default --num-envs stops Gymnasium at {GYM_IMAGE_MAX_DEFAULT} envs for {args.env_id}, "
                         f"an env with image observations (each Gymnasium env a Python object rendering its own frames, "
                         f"built one by one): {_counts(over)} envs not measured for Gymnasium; type --num-envs to "
                         f"measure them")
    fits, dropped = [], []
    for n in sizes:
        try:
            check_sizes(args, [n], backends, gym_max)
            fits.append(n)
        except DoesNotFit as e:
            dropped.append((n, str(e)))
    if not fits and dropped:
        raise DoesNotFit(dropped[0][1])
    if dropped:
        notes.append(f"note: the default --num-envs leaves out {_counts([n for n, _ in dropped])} envs, which do not fit "
                     f"in memory (at {dropped[0][0]:,}: {dropped[0][1]})")
    return fits, notes, gym_max


def _counts(sizes: list) -> str:
    return ", ".join(f"{n:,}" for n in sizes)


def gym_images(args) -> bool:
    """Whether ``args.env_id`` as a Gymnasium env has image observations (one env built to read them)."""
    from .sizing import env_probe

    layout = env_probe(bench_config(args, "gymnasium", 1))().layout
    return layout is not None and layout.has_image


def run(args: argparse.Namespace) -> int:
    """Entry point of ``proxima bench``; returns the exit status."""
    # --json's lines are for a program: a module:Class env that prints as the checks or the timings
    # build and reset it writes to stderr
    with machine_stdout(args.json) as stdout:
        return _run(args, stdout)


def _run(args: argparse.Namespace, stdout) -> int:
    """run, its --json lines printed to ``stdout`` (the real one)."""
    prog = "proxima bench"

    def fail(message: str) -> int:
        sys.stderr.write(f"{prog}: error: {printable(str(message))}\n")
        return 2

    problem, sizes, notes, gym_max = plan(args)
    if problem:
        return fail(problem)
    # the command --out records names the sizes measured: rerunning it measures them again, not the default list;
    # and the Gymnasium cap they ran under (--max-gym-envs 64 where the default list capped an image env's)
    args.num_envs = ",".join(map(str, sizes))
    gym_skip = (f"> {gym_max}: the default --num-envs for a Gymnasium image env" if gym_max < args.max_gym_envs else
                f"> --max-gym-envs {args.max_gym_envs}")
    args.max_gym_envs = gym_max

    import torch

    from .checkpoint import CheckpointError
    from .device import resolve_device
    from .envs import EnvError
    from .signals import OutsideLoop, TrainingInterrupted

    backends = backends_for(args.env_id, args.backend)  # checked above
    for note in [both_note(args.env_id, args.backend), *notes]:
        if note:  # stderr: --json's stdout is for a program
            print(f"{prog}: {note}", file=sys.stderr)
    from .trainer import threads_note

    threads = threads_note(args.threads)  # train's note on more threads than CPUs
    if threads:
        print(f"{prog}: note: {threads}", file=sys.stderr)
    if args.compile_mode is not None:  # train's note: a mode without --compile would be dropped without a word
        from .trainer import _note_compile_mode

        _note_compile_mode(base_config(args), {"compile_mode": args.compile_mode})
    from .trainer import cpu_switch_notes, vector_note

    device = resolve_device(base_config(args).device)
    # train's notes: --vector that no measured backend builds, --compile and --amp bf16 on a CPU
    said = [vector_note(args.vector, args.backend, backends) if args.vector else "",
            *cpu_switch_notes(base_config(args), device, bench=True)]
    for note in filter(None, said):
        print(f"{prog}: note: {note}", file=sys.stderr)
    torch.set_num_threads(args.threads)
    started, load0 = started_now(), os.getloadavg()[0]
    record = run_record(device, started, load0, args) if args.json else None
    lines, last_cfg, noted = [], None, set()
    stop, at, measured = None, None, []  # stop: (what the table's note says, exit status, stderr line) of a size cut short
    try:
        # SIGTERM raises here as SIGINT does (TrainingInterrupted), not kill the process: the sizes
        # already measured, minutes of them at 4,096 envs, are printed and saved before it exits
        with OutsideLoop() as outside:
            for n in sizes:
                measured = [b for b in backends if not (b == "gymnasium" and n > args.max_gym_envs)]
                done, at = {}, n
                if measured:  # stderr, --json too: its stdout stays the JSON lines, and a long run does not look hung
                    print(f"{prog}: {', '.join(measured)} x {n:,} envs"
                          + (" (timed in turn, a window of each per repeat)" if len(measured) > 1 else "") + " ...",
                          file=sys.stderr, flush=True)
                    try:
                        results = bench_lines(args, measured, n)
                    except (ConfigError, EnvError, CheckpointError, ImportError) as e:  # ImportError: a missing optional package
                        if outside.signum:  # the stop's signal ended --vector async's workers: not the env's failure
                            raise TrainingInterrupted(outside.signum, None) from None
                        stop = (f"failed: {printable(str(e))}", 2, f"{prog}: error: {printable(str(e))}")
                        break
                    except Exception as e:  # a crash (out of memory at a big size): the finished sizes first, then its traceback
                        why = (str(e).strip().splitlines() or [""])[0]
                        keep_partial(args, lines, last_cfg, device, started, load0, sizes, n, measured,
                                     f"failed: {printable(f'{type(e).__name__}: {why}')}")
                        raise
                    for line, cfg, device in results:
                        done[line.backend], last_cfg = (line, cfg), cfg
                        # the untimed part: minutes at 4,096 Gymnasium envs, and where a compile goes (--json too)
                        warm = sum(xs[0] for xs in line.warmup.values() if xs)
                        print(f"{prog}: {line.backend} x {n:,} envs: warm-up {warm:.1f} s, not timed"
                              + (" (compilation included)" if line.compile_live else "")
                              + (f"; compile fell back: eager ({', '.join(line.compile_eager)}), its figures are eager ones"
                                 if line.compile_live is False else ""), file=sys.stderr, flush=True)
                        note = small_batch_threads_note(cfg, line.intra_op, device, bench=True)
                        if note and not noted:  # once a run, at its first size whose batches are all small
                            noted.add(n)
                            print(f"{prog}: note: {note}", file=sys.stderr, flush=True)
                size_lines = []
                for backend in backends:
                    line, cfg = done.get(backend) or (Line(backend, n, skipped=gym_skip), None)
                    size_lines.append((line, cfg))
                ratios = train_x_gym([line for line, _ in size_lines])
                for line, cfg in size_lines:
                    lines.append(line)
                    if args.json:
                        record["load_average"][1] = round(os.getloadavg()[0], 2)
                        print(json.dumps(json_line(line, args, cfg, device, record, ratios.get(id(line)))), file=stdout, flush=True)
                at = None
    except KeyboardInterrupt as e:  # Ctrl-C (a plain KeyboardInterrupt too) or SIGTERM
        signum = e.signum if isinstance(e, TrainingInterrupted) else signal.SIGINT
        name = signal.Signals(signum).name
        stop = (f"interrupted ({name})", 128 + signum,
                f"{prog}: stopped by {name}" + (f" at {at:,} envs" if at is not None else ""))
    if stop is not None:
        why, code, said = stop
        keep_partial(args, lines, last_cfg, device, started, load0, sizes, at, measured if at is not None else [], why)
        sys.stderr.write(said + "\n")
        return code
    if not args.json:
        print(switches_line(args, device, lines))
        print(format_table_with_legend(lines))
    if args.out:  # results go only where --out says: the repository's recorded tables are never overwritten by default
        if not save_out(args, lines, last_cfg, device, started, load0):
            return 2
    return 0


def stopped_text(sizes: list, lines: list, at: Optional[int], measured: list, why: str) -> str:
    """The note of a run cut short: the size it stopped at, why (the error line, or 'interrupted
    (SIGINT)'), and the sizes left unmeasured."""
    finished = {ln.num_envs for ln in lines}
    left = [n for n in sizes if n not in finished]
    where = f"stopped at {at:,} envs" + (f" ({', '.join(measured)})" if measured else "") if at is not None else "stopped"
    return f"{where}: {why}" + (f"; not measured: {', '.join(f'{n:,}' for n in left)} envs" if left else "")


def keep_partial(args, lines: list, cfg, device, started: datetime, load0: float, sizes: list, at: Optional[int],
                 measured: list, why: str) -> None:
    """After a size failed or a stop: the table of the sizes that finished with a note of the one cut
    short, printed and written to --out, so one failure at the largest size does not throw away the
    minutes spent on the smaller ones. Nothing when no size was measured: an empty table records nothing."""
    if not any(not ln.skipped for ln in lines):
        return
    note = stopped_text(sizes, lines, at, measured, why)
    if not args.json:
        print(switches_line(args, device, lines))
        print(format_table_with_legend(lines))
        print(note, flush=True)
    if args.out:
        save_out(args, lines, cfg, device, started, load0, note)


def save_out(args, lines: list, cfg, device, started: datetime, load0: float, stopped: str = "") -> bool:
    """Write (or append to) --out; False, with its one error line said, when the file cannot be written."""
    prog = "proxima bench"
    out = Path(args.out)
    existed = has_content(out)
    try:
        write_markdown(out, args, lines, cfg, device, started, (load0, os.getloadavg()[0]), stopped)
    except OSError as e:
        from .diskspace import describe

        print(f"{prog}: error: {printable(describe(out, e))}", file=sys.stderr)
        return False
    print(f"{prog}: {'appended a section to' if existed else 'wrote'} {out}", file=sys.stderr)
    return True


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("env_id", metavar="ENV_ID", help="Gymnasium id or module:ClassName")
    p.add_argument("--num-envs", default=None, metavar="N1,N2,...",
                   help=f"env counts to measure (default {DEFAULT_SIZES}; Gymnasium's lines up to {GYM_IMAGE_MAX_DEFAULT} for an env "
                        "with image observations, whose Gymnasium envs are Python objects that each render their frames; a default "
                        "size that does not fit in memory is left out, with a note naming it; a typed size that does not "
                        "fit is refused, before any is measured)")
    p.add_argument("--device", default=None, help="torch device: cpu, cuda, cuda:1 or auto (default: the preset's, which is cpu "
                   "unless the preset says cuda, as --preset gpu does); one that is not CUDA with a preset that turns on "
                   "--cudagraphs (gpu) is refused, as train refuses it: add --no-cudagraphs to measure eager calls")
    p.add_argument("--backend", default="both", metavar="{auto,native,gymnasium,envpool,both}[,...]",
                   help="env backend(s), comma separated (envpool,gymnasium for Atari); both = native and Gymnasium "
                        "side by side where a native env exists (EnvPool and Gymnasium's ALE for Atari with EnvPool "
                        "installed); auto = the one train uses by default (default both)")
    p.add_argument("--vector", default=None, choices=("sync", "async"),
                   help="Gymnasium vectorization for the gymnasium backend (default: the preset's, else sync)")
    p.add_argument("--preset", default=None, help="the env's preset to take the training settings from (default: its 'default'); "
                   "the bench's --num-envs, --backend and --threads replace the preset's, the other flags only when typed")
    p.add_argument("--num-steps", type=int, default=None, metavar="T", help="override the preset's steps per env per rollout")
    p.add_argument("--repeats", type=int, default=3, help=f"timed repeats per measurement, at most {MAX_REPEATS}; the table "
                   "shows median and min-max; the backends of one num_envs take their repeats in turn, and "
                   "'train x gym' is the median (min-max) of the per-repeat ratios (default 3)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads, as train's --threads: with 2, actor and critic side by side for a discrete-action agent at 2,048+ rows (default 1)")
    p.add_argument("--seconds", type=float, default=1.0, help=f"target time of one timed repeat, at most {MAX_SECONDS:g}: "
                   "whole calls, at least one "
                   "(a train call is one iteration, which may take longer); --out records the measured time. An untimed "
                   "warm-up of at least 3 whole calls comes first in every measurement (default 1.0)")
    p.add_argument("--max-gym-envs", type=int, default=4096,
                   help="skip the Gymnasium backend above this many envs; it steps envs one by one in Python (default 4096)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the acting and update steps (needs proxima.accel; default: the preset's, off); "
                        "compilation happens in the untimed warm-up, so no figure includes it (its seconds are printed)")
    add_compile_mode(p)
    p.add_argument("--cudagraphs", action=argparse.BooleanOptionalAction, default=None,
                   help="replay each iteration's rollout, advantages and update as CUDA graphs (CUDA only; with --compile, of the compiled steps); "
                        "only the train column replays them: env and rollout are timed eagerly, marked 'timed eager' "
                        "(default: the preset's, on for --preset gpu)")
    p.add_argument("--amp", default=None, choices=("none", "bf16", "fp16"),
                   help="mixed precision of the forward passes (default: the preset's, none)")
    p.add_argument("--train-only", action="store_true",
                   help="time whole training iterations only, not the env alone nor the rollout alone (their columns show "
                        "'-'; about a third of the time per size): what a training-throughput comparison needs")
    p.add_argument("--json", action="store_true", help="print one JSON object per backend and num_envs instead of the table (stdout holds only them; "
                   "the progress, notes and each line's warm-up seconds go to stderr, as without --json); "
                   "with --cudagraphs, \"cudagraphs_live\" says whether every part was replayed as a graph (false: a capture "
                   "failed and that part ran eagerly) and \"timed_eager\" lists the measures timed with eager calls "
                   "(env and rollout: only train replays the graphs); \"intra_op\" and \"paired\" say how --threads ran "
                   "(paired: actor and critic side by side for some batch of 2,048+ rows); \"train_x_gym\" is the median of "
                   "the per-round training ratios over Gymnasium (\"train_x_gym_rounds\": each round's; null on Gymnasium's "
                   "line); with --compile, \"compile_eager\" names a step that ran eagerly after all")
    p.add_argument("--out", default=None, metavar="FILE", help="also write the results as Markdown (table, machine, "
                   "command) to FILE, e.g. benchmarks/results/bench-CartPole-v1-cpu.md; when FILE exists, they are appended "
                   "to it as a new dated section and what it holds is kept; its folder must exist; a bench cut short (an env error, Ctrl-C, SIGTERM) still "
                   "prints and writes the sizes it finished, with a line naming the size it stopped at (default: print only)")
    p.add_argument("--no-out", action="store_true", help=argparse.SUPPRESS)  # the old opt-out; printing only is the default now


def add_compile_mode(p: argparse.ArgumentParser) -> None:
    """--compile-mode as train's (the PPOConfig field's choices and help, checked by options_problem
    as train checks a typed flag), defaulting to the preset's."""
    from .config import FIELDS

    f = FIELDS["compile_mode"]
    p.add_argument("--compile-mode", dest="compile_mode", default=None, metavar="{" + ",".join(f.metadata["choices"]) + "}",
                   help=f"{f.metadata['help']} (default: the preset's, {f.default})")


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``bench`` subcommand to an argparse subparsers object."""
    p = subparsers.add_parser("bench", help="measure env, rollout and training steps/s against num_envs",
                              description="Steps per second of the env alone, of the rollout and of full PPO training, "
                                          "for each --num-envs, native and Gymnasium backends side by side.")
    add_arguments(p)
    p.set_defaults(func=run)
    return p
