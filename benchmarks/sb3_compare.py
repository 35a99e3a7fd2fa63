"""Proxima against Stable-Baselines3 PPO on CartPole-v1, in one run of this script.

    .venv/bin/python benchmarks/sb3_compare.py            # everything, ~15-30 min on 1 core
    .venv/bin/python benchmarks/sb3_compare.py --help

SB3 runs in its own virtualenv, ``.bench-venv`` (created on first use with ``pip install
torch==2.13.0 stable-baselines3==2.9.*``, so both sides use the same torch), with CleanRL's
``ppo.py`` settings: 4 envs (DummyVecEnv), 128 steps, minibatches of 128 (4 per epoch), 4 epochs,
lr 2.5e-4 annealed linearly, gamma 0.99, GAE lambda 0.95, clip 0.2 (value loss too), entropy 0.01,
value 0.5, grad norm 0.5, separate 64x64 tanh actor and critic, orthogonal init, 1 torch thread.

Measured, in this order:

1. SB3 training steps/s: ``model.learn`` over whole rollouts after a warm-up, ``--repeats`` times.
2. Proxima training steps/s: ``Trainer.train_iteration`` on the native CartPole at
   ``--proxima-envs`` (4,096) envs, the default preset otherwise (4 epochs x 4 minibatches),
   ``--repeats`` times, for each rollout length in ``--proxima-steps``: 128 (SB3's n_steps, the
   headline ratio) and 16 (the same update on 8x smaller minibatches, which stay in cache).
3. SB3 time to solve: wall time from launching the process to the first periodic evaluation
   (deterministic policy, 10 episodes, every 10k steps) with a mean return >= 475, and the time
   of the whole run (``--sb3-total-timesteps``, CleanRL's 500k).
4. Proxima time to solve: ``proxima train CartPole-v1 --preset fast`` as a subprocess, timed around
   the whole process (Python start, imports, training, checkpoint, the final evaluation over the
   preset's ``eval_episodes``, 20), with the evaluation's mean return, for each of ``--seeds``.

Results go to the console and to ``--out`` (default ``benchmarks/results/sb3-compare.md``): a new
file, or a new dated section appended to the file there (what it holds, such as its "Reading"
section, is kept). A part that fails (an SB3 worker, a ``proxima train``) ends the run with one error
line (exit 2), after the report of what was measured before it is written, marked incomplete (and
``--json``); a ``.bench-venv`` that cannot be made (pip, no network) is one line too. A SIGTERM or
Ctrl-C kills the running worker and removes the temporary folder (exit 143 or 130).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

from tables import ChildFailed, arg_problem, command_text, flag, parser, refuse, run_child, stopping_children  # benchmarks/tables.py

ROOT = Path(__file__).resolve().parents[1]
BENCH_VENV = ROOT / ".bench-venv"
BENCH_PY = BENCH_VENV / "bin" / "python"
SB3_REQUIREMENTS = ["torch==2.13.0", "stable-baselines3==2.9.*"]
SOLVED = 475.0

#: CleanRL ppo.py's CartPole settings, as SB3 arguments
SB3_SETTINGS = dict(n_steps=128, batch_size=128, n_epochs=4, gamma=0.99, gae_lambda=0.95, clip_range=0.2,
                    clip_range_vf=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5)
SB3_ENVS, SB3_LR = 4, 2.5e-4


# =============================================================================================
# SB3 side: runs inside .bench-venv (imports neither proxima nor anything the project pins)
# =============================================================================================
def sb3_model(seed: int):
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv

    torch.set_num_threads(1)
    env = make_vec_env("CartPole-v1", n_envs=SB3_ENVS, seed=seed, vec_env_cls=DummyVecEnv)
    policy_kwargs = dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=torch.nn.Tanh, ortho_init=True)
    return PPO("MlpPolicy", env, learning_rate=lambda progress_remaining: SB3_LR * progress_remaining,
               policy_kwargs=policy_kwargs, seed=seed, device="cpu", verbose=0, **SB3_SETTINGS)


def sb3_worker_sps(seed: int, repeats: int, rollouts: int) -> dict:
    """Steps/s of model.learn over ``rollouts`` whole rollouts (512 steps each), ``repeats`` times."""
    model = sb3_model(seed)
    per_rollout = SB3_ENVS * SB3_SETTINGS["n_steps"]
    model.learn(total_timesteps=2 * per_rollout)  # warm-up: first rollouts, lazy init
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model.learn(total_timesteps=rollouts * per_rollout, reset_num_timesteps=False)
        samples.append(rollouts * per_rollout / (time.perf_counter() - t0))
    return {"sps": samples}


def sb3_worker_solve(seed: int, total_timesteps: int, eval_every: int, eval_episodes: int) -> dict:
    """Train for ``total_timesteps``; evaluate every ``eval_every`` steps; report when it first solves."""
    import gymnasium as gym
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy

    model = sb3_model(seed)
    eval_env = gym.make("CartPole-v1")
    eval_env.reset(seed=seed + 1_000_000)

    class Evaluate(BaseCallback):
        def __init__(self):
            super().__init__()
            self.next_eval, self.eval_seconds, self.history = eval_every, 0.0, []
            self.solved_at = self.solved_step = self.solved_eval_seconds = None

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_eval:
                return True
            self.next_eval += eval_every
            t0 = time.perf_counter()
            mean, _ = evaluate_policy(self.model, eval_env, n_eval_episodes=eval_episodes, deterministic=True)
            self.eval_seconds += time.perf_counter() - t0
            self.history.append((self.num_timesteps, float(mean), time.time(), self.eval_seconds))
            if mean >= SOLVED and self.solved_at is None:
                self.solved_at, self.solved_step, self.solved_eval_seconds = time.time(), self.num_timesteps, self.eval_seconds
            return True

    cb = Evaluate()
    model.learn(total_timesteps=total_timesteps, callback=cb)
    return {"solved_at": cb.solved_at, "solved_step": cb.solved_step, "solved_eval_seconds": cb.solved_eval_seconds,
            "eval_seconds": cb.eval_seconds, "history": cb.history, "finished_at": time.time()}


def sb3_worker(argv: list) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=("sps", "solve"))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rollouts", type=int, default=10)
    p.add_argument("--total-timesteps", type=int, default=500_000)
    p.add_argument("--eval-every", type=int, default=10_000)
    p.add_argument("--eval-episodes", type=int, default=10)
    a = p.parse_args(argv)
    if a.mode == "sps":
        out = sb3_worker_sps(a.seed, a.repeats, a.rollouts)
    else:
        out = sb3_worker_solve(a.seed, a.total_timesteps, a.eval_every, a.eval_episodes)
    import stable_baselines3
    import torch

    out.update(sb3=stable_baselines3.__version__, torch=torch.__version__)
    print("SB3RESULT " + json.dumps(out), flush=True)
    return 0


# =============================================================================================
# Orchestration: runs in the project's .venv
# =============================================================================================
def ensure_bench_venv() -> None:
    """Create .bench-venv with torch 2.13.0 and SB3 2.9 unless it already works. ChildFailed (one
    line: the step, its exit status, its last output line, what to do) when a step fails: pip
    without a network was a CalledProcessError traceback."""
    check = "import stable_baselines3, torch; assert torch.__version__.split('+')[0] == '2.13.0', torch.__version__"
    if BENCH_PY.exists() and run_child([str(BENCH_PY), "-c", check], capture_output=True).returncode == 0:
        return
    log(f"creating {BENCH_VENV} ({' '.join(SB3_REQUIREMENTS)}) ...")
    base = getattr(sys, "_base_executable", sys.executable)
    for cmd in ([base, "-m", "venv", str(BENCH_VENV)], [str(BENCH_PY), "-m", "pip", "install", "--quiet", *SB3_REQUIREMENTS],
                [str(BENCH_PY), "-c", check]):
        try:
            p = run_child(cmd, capture_output=True, text=True)
        except OSError as e:
            raise ChildFailed(f"{BENCH_VENV}: cannot run `{shlex.join(cmd)}` ({e.strerror or e})") from None
        if p.returncode != 0:
            last = (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or ["no output"])[-1]
            raise ChildFailed(f"{BENCH_VENV} could not be made: `{shlex.join(cmd)}` failed (exit {p.returncode}): {last}; "
                              f"it needs the network (or create it by hand: pip install {' '.join(SB3_REQUIREMENTS)})")


def log(msg: str) -> None:
    print(f"[sb3_compare {datetime.now().strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_sb3(mode: str, *args: str) -> tuple:
    """Run the SB3 worker in .bench-venv; (result dict, launch time, wall seconds, child CPU seconds)."""
    cmd = [str(BENCH_PY), str(Path(__file__).resolve()), "--sb3-worker", mode, *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    launched, t0 = time.time(), time.perf_counter()
    p = run_child(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next((x for x in p.stdout.splitlines() if x.startswith("SB3RESULT ")), None)
    if p.returncode != 0 or line is None:
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise ChildFailed(f"the SB3 {mode} worker ({' '.join(args)}) failed (exit {p.returncode}): {last}")
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return json.loads(line[len("SB3RESULT "):]), launched, wall, cpu


def proxima_train_sps(num_envs: int, num_steps: int, repeats: int, seconds: float) -> list:
    """Steps/s of Trainer.train_iteration on the native CartPole (default preset; num_envs, num_steps overridden)."""
    import torch

    from proxima.bench import measure
    from proxima.config import PPOConfig
    from proxima.presets import resolve
    from proxima.trainer import Trainer

    cfg = resolve("CartPole-v1", None, PPOConfig())
    cfg.num_envs, cfg.num_steps, cfg.backend, cfg.device, cfg.threads, cfg.progress = num_envs, num_steps, "native", "cpu", 1, False
    cfg.total_timesteps = cfg.num_envs * cfg.num_steps * 1_000_000  # the lr stays near its start
    torch.set_num_threads(1)
    trainer = Trainer(cfg, quiet=True)
    log(f"proxima: {num_envs} envs x {cfg.num_steps} steps, {cfg.update_epochs} epochs x {cfg.num_minibatches} minibatches")

    def step():
        out = trainer.train_iteration()
        bool(out["nonfinite"])

    try:
        return measure(step, cfg.num_envs * cfg.num_steps, seconds, repeats, trainer.device)
    finally:
        trainer.close()


def proxima_fast_solve(seed: int, workdir: Path) -> dict:
    """``proxima train CartPole-v1 --preset fast``, timed around the whole process."""
    run_dir = workdir / f"fast-seed{seed}"
    shown = ["train", "CartPole-v1", "--preset", "fast", "--seed", str(seed)]
    cmd = [str(ROOT / ".venv" / "bin" / "proxima"), *shown, "--run-dir", str(run_dir), "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = run_child(cmd, capture_output=True, text=True, env=env, cwd=workdir)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise ChildFailed(f"`proxima train CartPole-v1 --preset fast --seed {seed}` failed (exit {p.returncode}): "
                          f"{(p.stderr.strip().splitlines() or ['no output'])[-1]}")
    result = json.loads((run_dir / "eval.json").read_text())
    return {"seed": seed, "wall": wall, "cpu": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime),
            "eval": result["mean_return"], "command": shlex.join(["proxima", *shown, "--run-dir", "DIR", "--no-progress"])}


def stable_solve(history: list, launched: float) -> dict:
    """The first evaluation from which every later one stays >= 475 (a policy that stays solved)."""
    first = None
    for i, (step, mean, at, eval_seconds) in enumerate(history):
        if mean >= SOLVED and all(h[1] >= SOLVED for h in history[i:]):
            first = (step, at - launched, at - launched - eval_seconds)
            break
    return {"stable_step": first[0] if first else None, "stable_wall": first[1] if first else None,
            "stable_wall_no_eval": first[2] if first else None}


def med_range(xs: list, fmt: str = "{:,.0f}") -> str:
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def fast_preset() -> dict:
    from proxima.presets import all_presets

    return all_presets()["CartPole-v1"]["fast"]["config"]


def fast_preset_line() -> str:
    return json.dumps(fast_preset())


def write_report(path: Path, a, res: dict, started: datetime, loads: list) -> str:
    import torch

    from proxima.bench import machine_lines, save_markdown
    from proxima.config import PPOConfig

    sb3_sps = res["sb3_sps"]
    L = [
        f"# Proxima vs Stable-Baselines3: PPO on CartPole-v1, {started:%Y-%m-%d %H:%M}",
        "",
        f"Recorded {started.isoformat(timespec='seconds')} by `{res['command']}` (one run; every number below comes from it).",
        "",
        *([f"**Incomplete: the run stopped at a failure ({res['failed']}); the parts below are those measured before it.**", ""]
          if res.get("failed") else []),
        *machine_lines(torch.device("cpu"), 1),
        f"- SB3 {res.get('sb3_version', '?')} with torch {res.get('sb3_torch', '?')} in `.bench-venv`; Proxima in `.venv`",
        f"- load average (1 min) at start / after each part: {' / '.join(f'{x:.2f}' for x in loads)}",
        "",
        "## Training throughput (steps/s, median (min-max) of "
        f"{a.repeats} repeats)",
        "",
        "| what | settings | steps/s |",
        "|---|---|---:|",
        f"| SB3 PPO | CleanRL settings: 4 envs (DummyVecEnv) x 128 steps, 4 epochs x 4 minibatches of 128, 64x64 tanh | {med_range(sb3_sps)} |",
    ]
    for T, px_sps in res.get("proxima_sps", {}).items():
        ratio = statistics.median(px_sps) / statistics.median(sb3_sps)
        lo, hi = min(px_sps) / max(sb3_sps), max(px_sps) / min(sb3_sps)
        mb = a.proxima_envs * int(T) // 4
        L += [f"| Proxima PPO | native CartPole, {a.proxima_envs:,} envs x {T} steps, 4 epochs x 4 minibatches of {mb:,}, 64x64 tanh | {med_range(px_sps)} |",
              f"| **ratio** | Proxima ({T} steps) / SB3, of medians (range: worst-best pairing); Proxima at 4,096 envs against SB3 at 4: a batch-size comparison, not like for like | **{ratio:.1f}x** ({lo:.1f}x-{hi:.1f}x) |"]
    L.append("")
    if res.get("sb3_solve"):
        s = res["sb3_solve"]
        L += ["## SB3 time to solve (CleanRL settings)", "",
              "Deterministic policy evaluated on 10 episodes every 10k steps, from the launch of the process. "
              "The evaluations themselves take time; the columns \"without eval time\" take it out. "
              "Deterministic CartPole evaluations often hit 500 early and fall back later, so two times are given: "
              "the first evaluation >= 475, and the first one from which every later evaluation stays >= 475 "
              "(comparable to Proxima's single evaluation at the end of its run).", "",
              "| seed | first eval >= 475: step | wall (s) | without eval time (s) | stays >= 475 from: step | wall (s) | without eval time (s) | whole run (s) |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for row in s:
            first = (f"{row['solved_step']:,} | {row['to_solve']:.1f} | {row['to_solve'] - row['solved_eval_seconds']:.1f}"
                     if row["solved_step"] is not None else "not solved | - | -")
            stable = (f"{row['stable_step']:,} | {row['stable_wall']:.1f} | {row['stable_wall_no_eval']:.1f}"
                      if row.get("stable_step") is not None else "never | - | -")
            L.append(f"| {row['seed']} | {first} | {stable} | {row['total']:.1f} |")
        if len(s) > 1:
            def col(key):
                xs = [r[key] for r in s if r.get(key) is not None]
                return med_range(xs, "{:.1f}") if len(xs) == len(s) else "-"
            L.append(f"| median (range) | | {col('to_solve')} | | | {col('stable_wall')} | {col('stable_wall_no_eval')} | {col('total')} |")
        L.append("")
        for row in s:
            L += [f"Evaluations, seed {row['seed']} (step: mean return): " + ", ".join(f"{h[0] // 1000}k: {h[1]:.0f}" for h in row["history"]), ""]
    if res.get("fast"):
        rows = res["fast"]
        walls = [r["wall"] for r in rows]
        episodes = fast_preset().get("eval_episodes", PPOConfig().eval_episodes)  # what the runs were evaluated on
        L += ["## Proxima time to solve: `proxima train CartPole-v1 --preset fast`", "",
              "Wall time around the whole process (Python start, imports, TensorBoard writer, training, checkpoint, "
              f"final evaluation of the deterministic policy on {episodes} episodes); target: eval >= 475 within 10 s.", "",
              f"`fast` preset: `{res['fast_preset']}`", "",
              "| seed | wall (s) | process CPU time (s) | eval mean return | solved within 10 s |", "|---:|---:|---:|---:|---|"]
        for r in rows:
            ok = "yes" if r["eval"] >= SOLVED and r["wall"] <= 10.0 else "no"
            L.append(f"| {r['seed']} | {r['wall']:.2f} | {r['cpu']:.2f} | {r['eval']:.1f} | {ok} |")
        L += [f"| median (range) | {med_range(walls, '{:.2f}')} | {med_range([r['cpu'] for r in rows], '{:.2f}')} | "
              f"{med_range([r['eval'] for r in rows], '{:.1f}')} | |", "",
              "Command per seed: `" + rows[0]["command"].replace(f"--seed {rows[0]['seed']}", "--seed SEED") + "`", ""]
    text = "\n".join(L)
    save_markdown(path, text)  # appended as a new section when the file holds an earlier run and its reading
    return text


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--sb3-worker"]:
        return sb3_worker(argv[1:])
    p = parser("sb3_compare.py", __doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3, help="timed repeats of each throughput measurement (default 3)")
    p.add_argument("--sb3-rollouts", type=int, default=10, help="SB3 rollouts (of 512 steps) per timed repeat (default 10)")
    p.add_argument("--proxima-envs", type=int, default=4096, help="native envs for Proxima's throughput (default 4096)")
    p.add_argument("--proxima-steps", default="128,16",
                   help="rollout lengths T for Proxima's throughput, one row each (default 128 = SB3's n_steps, and 16)")
    p.add_argument("--seconds", type=float, default=5.0, help="target seconds of one Proxima timed repeat (at least one iteration)")
    p.add_argument("--seeds", default="1,2,3", help="seeds of the Proxima fast-preset runs (default 1,2,3)")
    p.add_argument("--sb3-seeds", default="1,2,3", help="seeds of the SB3 time-to-solve runs (default 1,2,3)")
    p.add_argument("--sb3-total-timesteps", type=int, default=500_000, help="SB3 time-to-solve run length (default 500k, CleanRL's)")
    p.add_argument("--skip-sb3-solve", action="store_true", help="skip the (long) SB3 time-to-solve runs")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sb3-compare.md"),
                   help="Markdown results file the report is appended to as a new dated section (default: the committed "
                        "record, benchmarks/results/sb3-compare.md; give a file of your own for a trial run)")
    p.add_argument("--json", default=None, metavar="FILE", help="also write every raw number to FILE")
    a = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported (the checks import proxima); the workers get it too
    sys.path.insert(0, str(ROOT))
    problem = arg_problem(a, at_least_one=("repeats", "sb3_rollouts", "proxima_envs", "sb3_total_timesteps"),
                          positive=("seconds",), files=("out", "json"))
    if problem:
        return refuse("sb3_compare.py", problem)
    from proxima.bench import parse_sizes, started_now

    try:
        steps, seeds, sb3_seeds = (parse_sizes(getattr(a, dest), flag(dest))
                                   for dest in ("proxima_steps", "seeds", "sb3_seeds"))
    except ValueError as e:
        return refuse("sb3_compare.py", str(e))
    started, loads = started_now(), [os.getloadavg()[0]]  # with its UTC offset, as the other tables' times
    res: dict = {"command": command_text("sb3_compare.py", p, a)}
    with stopping_children("sb3_compare.py", "proxima-fast-") as tmp:
        try:
            ensure_bench_venv()
        except ChildFailed as e:  # nothing measured yet: nothing to write
            return refuse("sb3_compare.py", str(e))
        try:
            measure_all(a, res, steps, seeds, sb3_seeds, tmp, loads)
        except ChildFailed as e:
            # the parts measured before (minutes of them) are written, marked incomplete, rather than lost
            res["failed"] = str(e)
    if res.get("sb3_sps"):
        text = write_report(Path(a.out), a, res, started, loads)
        print(text)
        log(f"wrote {a.out}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    if "failed" in res:
        where = [x for x in (a.out if res.get("sb3_sps") else None, a.json) if x]
        return refuse("sb3_compare.py", res["failed"] + (f"; what was measured before it is in {' and '.join(where)}" if where else ""))
    return 0


def measure_all(a, res: dict, steps: list, seeds: list, sb3_seeds: list, tmp: Path, loads: list) -> None:
    """Every part, in order, into ``res`` as each finishes (a part's failure leaves the ones before)."""
    log(f"SB3 throughput: {a.repeats} x {a.sb3_rollouts} rollouts ...")
    out, _, _, _ = run_sb3("sps", "--repeats", str(a.repeats), "--rollouts", str(a.sb3_rollouts))
    res["sb3_sps"], res["sb3_version"], res["sb3_torch"] = out["sps"], out["sb3"], out["torch"]
    log(f"SB3: {med_range(res['sb3_sps'])} steps/s")
    res["proxima_sps"] = {}
    for T in steps:
        sps = res["proxima_sps"][str(T)] = proxima_train_sps(a.proxima_envs, T, a.repeats, a.seconds)
        log(f"Proxima ({T} steps): {med_range(sps)} steps/s; ratio {statistics.median(sps) / statistics.median(res['sb3_sps']):.1f}x")
    loads.append(os.getloadavg()[0])

    res["fast"], res["fast_preset"] = [], fast_preset_line()
    for seed in seeds:
        r = proxima_fast_solve(seed, tmp)
        log(f"proxima --preset fast seed {seed}: {r['wall']:.2f} s wall, {r['cpu']:.2f} s CPU, eval {r['eval']:.1f}")
        res["fast"].append(r)
    loads.append(os.getloadavg()[0])

    if not a.skip_sb3_solve:
        res["sb3_solve"] = []
        for seed in sb3_seeds:
            log(f"SB3 time to solve, seed {seed}, {a.sb3_total_timesteps:,} steps ...")
            out, launched, wall, _ = run_sb3("solve", "--seed", str(seed), "--total-timesteps", str(a.sb3_total_timesteps))
            row = {"seed": seed, "solved_step": out["solved_step"], "total": wall, "history": out["history"],
                   "solved_eval_seconds": out["solved_eval_seconds"],
                   "to_solve": (out["solved_at"] - launched) if out["solved_at"] else None}
            row.update(stable_solve(out["history"], launched))
            log(f"SB3 seed {seed}: solved at step {row['solved_step']}, {row['to_solve']} s; whole run {wall:.1f} s")
            res["sb3_solve"].append(row)
        loads.append(os.getloadavg()[0])


if __name__ == "__main__":
    sys.exit(main())
