#!/usr/bin/env bash
# Every GPU check as ONE prepared command for a session lent a CUDA machine (device time is short:
# everything runs in one call, each step under its own time limit, <= ~9 minutes in all).
# See benchmarks/README.md, "GPU session".
#
# On the GPU machine, from the repository root:   bash benchmarks/gpu_session.sh
# Carry (device tool `carry`): .whl (gymnasium, farama-notifications, gymnax, six wheels): see benchmarks/README.md.
# The PureJaxRL anchor is the repository's benchmarks/anchors/purejaxrl_cartpole.py (a carried .anchors/ copy
# is used only where a tree lacks it).
# Writes into $OUT (the device tool's folder) or benchmarks/results/gpu/ at most 7 files, since the
# device tool brings back at most 8: summary.txt, pytest-cuda.txt, vs-purejaxrl-cuda.md, solve-gpu.md,
# accel-cuda.md, population-cuda.md, and logs.tar.gz (doctor.txt, purejaxrl-solve.json,
# pendulum-cudagraphs.txt, a .log per step), repacked after every step so that a call cut short
# still returns what ran; each table script rewrites its table after every row, so a step cut short
# by its limit still leaves the rows it finished (marked partial). Step limits add up to 513 s, each
# with the estimate behind it (../shared/perf/H200-2026-11-30.md), and `timeout -k 3` ends a step
# that ignores SIGTERM 3 s later: 540 s at worst. The start-up's own limits (pip 10 s, the import
# check 20 s, each with a 3 s grace: 36 s at worst, ~12 s as measured before the check imported
# proxima, tensorboard and pytest too) come out of the remaining
# ~60 s of the call's 600 s, with packing the logs and slack: the steps keep the limits their
# estimates need, since a start-up that hangs leaves nothing for them anyway.
set -uo pipefail

out="${OUT:-benchmarks/results/gpu}"
# a fresh folder per run: a fixed --run-dir would hold the last run's files on a warm machine, and
# proxima train refuses a run folder that is not empty
work="$(mktemp -d "${TMPDIR:-/tmp}/gpu-session.XXXXXX")"
trap 'rm -rf "$work"' EXIT
logs="$work/logs"  # everything but the tables; packed into $out/logs.tar.gz
runs="$work/runs"  # the run folders of steps that train; not packed (checkpoints), gone at exit
mkdir -p "$logs" "$runs"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"   # the package from this tree, not installed
py="${PYTHON:-python3}"

# packages the machine's image lacks travel as wheels in .whl/ (benchmarks/README.md says which).
# Each start-up command has a limit too: a pip or a CUDA initialisation that hangs would otherwise
# take the whole call. est. ~3 s (4 small wheels, no index, no deps); limit 10
if compgen -G ".whl/*.whl" > /dev/null; then
  if timeout -k 3 10 "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl; then
    export PYTHONPATH="$PYTHONPATH:/tmp/site"
  else
    echo "gpu_session: installing .whl/*.whl failed or took over 10 s (exit $?); going on without them"
  fi
fi
# Every package a later step imports, so that an image without one (tensorboard: every training
# step's logger) stops here with one line, not with a traceback in each step after its limit is
# spent; and torch's version against the pin, a warning only (the image's own CUDA torch is what
# the session can use, but its numbers are then of that torch). est. ~9-11 s (torch's import and
# CUDA's set-up as a process start-up, then proxima, tensorboard's protos and pytest); limit 20
preflight=$(cat <<'PY'
import importlib, re, sys
from pathlib import Path


def fail(message):
    print(f"gpu_session: {message}", file=sys.stderr)
    sys.exit(3)


try:
    import torch
except Exception as e:
    fail(f"cannot import torch ({type(e).__name__}: {e})")
pins = [(name, re.search(pattern, Path(name).read_text(), re.M))
        for name, pattern in (("requirements.lock", r"^torch==([^\s;#]+)"), ("pyproject.toml", r'"torch==([^";\s]+)"'))
        if Path(name).is_file()]
pin = next(((name, m.group(1)) for name, m in pins if m), None)
if pin and torch.__version__.split("+")[0] != pin[1]:
    print(f"gpu_session: warning: torch {torch.__version__} here, {pin[0]} pins {pin[1]}: every number and test "
          "result of this session is of this torch")
missing = []
for name in ("gymnasium", "numpy", "yaml", "tensorboard.compat.proto.event_pb2", "pytest", "proxima.trainer",
             "proxima.bench", "proxima.cli"):
    try:
        importlib.import_module(name)
    except Exception as e:
        missing.append(f"{name} ({type(e).__name__}: {' '.join(str(e).split())})")  # one line for the summary
if missing:
    fail("cannot import " + "; ".join(missing) + ": install it in the image or carry its wheel in .whl/")
if not torch.cuda.is_available():
    fail(f"torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is False)")
PY
)
if timeout -k 3 20 "$py" -c "$preflight" > "$work/preflight.txt" 2> "$out/import-error.txt"; then rc=0; else rc=$?; fi
if (( rc != 0 )); then
  if (( rc == 124 || rc == 137 )); then
    why="no answer within 20 s"
  else  # the check's own line, else the last line of what the interpreter printed (a traceback's error)
    why=$(grep '^gpu_session: ' "$out/import-error.txt" | tail -n 1)
    why="${why#gpu_session: }"
    [[ -n "$why" ]] || why=$(tail -n 1 "$out/import-error.txt")
  fi
  { cat "$work/preflight.txt"; echo "gpu_session: start-up check failed: ${why:-exit $rc} (all of it: $out/import-error.txt)"; } \
    | tee "$out/summary.txt"
  exit 2
fi
rm -f "$out/import-error.txt"
anchor=""
for a in benchmarks/anchors/purejaxrl_cartpole.py .anchors/purejaxrl_cartpole.py ../shared/anchors/purejaxrl_cartpole.py; do [[ -f "$a" ]] && anchor="$a" && break; done

# what a step started in a process group of its own (the benchmark scripts start their children so,
# to kill them on SIGTERM) is out of reach of the group kill below when the script itself got the
# SIGKILL: each step's processes carry a token in their environment, and whatever still carries it
# once the step is over is killed (bash builtins only: nothing forked here inherits the token)
sweep() {  # sweep TOKEN: SIGKILL every process whose environment holds GPU_SESSION_STEP=TOKEN
  local d kv
  for d in /proc/[0-9]*; do
    [[ -r "$d/environ" ]] || continue
    while IFS= read -r -d '' kv; do
      if [[ "$kv" == "GPU_SESSION_STEP=$1" ]]; then kill -KILL "${d#/proc/}" 2> /dev/null; break; fi
    done 2> /dev/null < "$d/environ"  # 2> first: a process gone meanwhile is no error line
  done
}

step_note=""  # appended to the next step's summary line (population-256 without an anchor)

step() {  # step NAME LIMIT_SECONDS COMMAND...: run it, record its status and time in summary.txt
  local name="$1" limit="$2" t0 rc
  shift 2
  export GPU_SESSION_STEP="$$-$name"
  t0=$(date +%s)
  # -k 3: a process stuck in a CUDA call (or proxima deferring SIGTERM to the end of an iteration)
  # gets SIGKILL 3 s after the SIGTERM, instead of holding the call until its 600 s are gone. Every
  # step may use it, so it is in the budget (9 x 3 s); an iteration, the part SIGTERM waits for, takes
  # well under a second here, and a call stuck in CUDA does not end by waiting longer. timeout
  # sends that SIGKILL to its own child only: a driver script's children (proxima train/bench, the
  # anchor) stay in timeout's process group, which is killed whole once timeout returns, so nothing a
  # step started holds the GPU through the next ones
  timeout -k 3 "$limit" "$@" &
  local tpid=$!
  wait "$tpid"
  rc=$?
  kill -KILL -- "-$tpid" 2> /dev/null
  sweep "$GPU_SESSION_STEP"
  unset GPU_SESSION_STEP
  echo "$name: exit $rc, $(( $(date +%s) - t0 )) s$step_note" | tee -a "$out/summary.txt"
  step_note=""
  pack
}

pack() {  # logs.tar.gz from $logs, replaced whole (never a half-written archive)
  tar -czf "$work/logs.tar.gz" -C "$logs" . && mv -f "$work/logs.tar.gz" "$out/logs.tar.gz"
}

: > "$out/summary.txt"
tee -a "$out/summary.txt" < "$work/preflight.txt"  # the torch-version warning, if the check printed one
# Step limits (s), from the H200 timings of ../shared/perf/H200-2026-11-30.md; a process start-up
# (Python, torch, CUDA) is ~7-9 s there. Trimmed from 540 s in all where the estimates leave room,
# so that the 9 kill graces of 3 s fit too:
#   doctor 13 + pytest-cuda 55 + vs-purejaxrl 125 + purejaxrl-solve 20 + solve-gpu 45 + pendulum 25
#   + accel 50 + population-256 120 + pytest-cuda-compile 60 = 513, + 9 x 3 s of kill grace = 540
#   (the start-up's 36 s at worst fits in the call's remaining 60 s). No step times a second --compile launch against the disk compile
#   cache: two launches need ~45 s, which these 540 s do not have (benchmarks/README.md)
# est. ~10 s: imports and probes
step doctor 13 "$py" -m proxima doctor > "$logs/doctor.txt" 2>&1
# issue 12 items 1-2: graphed == eager, checkpoints across modes, launches per iteration, hot loop, native envs,
# graphed populations, fp16 checkpoints, doctor on a GPU: every test marked `gpu` (each test that skips without
# CUDA carries it; tests/static/test_gpu_session.py checks that, and that these files hold them all).
# est. 35-50 s: ~47 tests building small trainers, no compilation (the compile+graphs ones run last, below)
step pytest-cuda 55 "$py" -m pytest -v -rfE -p no:cacheprovider -m "gpu and not slow" -k "not compile+graphs" \
  tests/unit/test_graphs.py tests/unit/test_hot_loop.py tests/unit/test_native_envs.py tests/unit/test_accel.py tests/unit/test_population.py \
  tests/unit/test_doctor.py tests/unit/test_review29_normalize.py tests/unit/test_sweep_switches46.py > "$out/pytest-cuda.txt" 2>&1
# item 3: throughput side by side with PureJaxRL, one process per side (--single-call: 2 start-ups instead of 18)
if [[ -n "$anchor" ]]; then
  # est. ~95 s: Proxima ~21 s (start-up 8, then per size ~4.5 s of warm-up and 3 x 1 s, training only: --train-only);
  # PureJaxRL ~75 s (import 4; per size a cold compile ~6 s, the two other repeats load it from JAX's cache ~1.5 s;
  # warm run + timed run 2 x 1.5 s at 2,048 and 65,536 envs, 2 x 3.9 s at 1,048,576, three rounds).
  # The budget counts from the script's start: its torch import (~5 s), the peer's import probe (~4 s) and
  # CUDA set-up come first, 3 s are kept for the table: --time-budget 120 (110 left the last 1M-env run
  # "skipped"). PureJaxRL's anchor gets what is left less 15 s and prints "skipped" for what it cannot fit
  step vs-purejaxrl 125 "$py" benchmarks/vs_purejaxrl.py --device cuda --cudagraphs --single-call --jax-python "$py" --anchor "$anchor" \
    --num-envs 2048,65536,1048576 --repeats 3 --seconds 1 --time-budget 120 --out "$out/vs-purejaxrl-cuda.md" > "$logs/vs-purejaxrl-cuda.log" 2>&1
  # item 5: PureJaxRL's time to solve from launch (4 envs x 128 steps, 500k steps), as solve_time.py times ours.
  # est. 16 s: measured 15.7 s (import 3.7, compile 5.8, run 5.8); limit 20. The anchor's stderr tail goes into the log
  # and its exit status is the step's (a signal N as 128+N; 1 when it exits 0 with no result, only an "error" or
  # "skipped" line), so a failed run is not a summary line saying 0
  step purejaxrl-solve 20 "$py" -c "import subprocess, sys, time; t0 = time.perf_counter(); \
p = subprocess.run([sys.executable, '$anchor', '--no-warm-run', '--configs', '4x128x5e5'], capture_output=True, text=True); \
print(p.stdout.strip()); print('wall_from_launch_seconds', round(time.perf_counter() - t0, 2)); \
tail = p.stderr.strip().splitlines()[-20:]; print('\n'.join(['anchor stderr, last lines:', *tail]), file=sys.stderr) if tail else None; \
rc = p.returncode if p.returncode >= 0 else 128 - p.returncode; sys.exit(rc or int('steps_per_second' not in p.stdout))" \
    > "$logs/purejaxrl-solve.json" 2>&1
else  # one line per step not run, in the steps' order: a step missing from the summary was a step lost unsaid
  for name in vs-purejaxrl purejaxrl-solve; do
    echo "$name: skipped, no anchor (benchmarks/anchors/purejaxrl_cartpole.py is missing: git checkout -- benchmarks/anchors)" | tee -a "$out/summary.txt"
  done
fi
# item 5: the gpu preset, wall from launch, seeds 1-10, 5 at a time (16 CPU cores, one GPU: each wall is
# still from its own launch, and sharing can only lengthen it). est. ~25-40 s: per seed ~9-11 s (start-up
# 7-9, up to 550k steps replayed as graphs ~1-2 s, 20-episode evaluation), two waves, some slowdown from sharing
# (limit 45: 5 s over the estimate's top; it had 10 more before, 10 moved to population-256, 5 to vs-purejaxrl)
step solve-gpu 45 "$py" benchmarks/solve_time.py --preset gpu --device cuda --seeds 1-10 --parallel 5 --out "$out/solve-gpu.md" > "$logs/solve-gpu.log" 2>&1
# item 6: continuous control on the graphed path. est. ~15-20 s: start-up 8, 300k steps (73 iterations of
# 10 epochs x 16 minibatches, one graph replay each part), 20-episode evaluation; limit 25
step pendulum-cudagraphs 25 "$py" -m proxima train Pendulum-v1 --device cuda --cudagraphs --no-progress \
  --run-dir "$runs/pendulum-cudagraphs" --eval-episodes 20 > "$logs/pendulum-cudagraphs.txt" 2>&1
# the issue's shape only: native CartPole, 16-step rollouts, 4 x 4, 64x64 (case 2: 16,384 envs); the cold
# compile last, so that a time-out keeps the other two. est. ~45 s: start-up 8, eager and cudagraphs ~3 s each
# (3 warm-up + 3 timed iterations of 262k steps), compile+cudagraphs ~25-30 s (a cold inductor compile); limit 50
step accel 50 "$py" benchmarks/accel.py --device cuda --cases 2 --modes eager,cudagraphs,compile+cudagraphs --repeats 3 \
  --out "$out/accel-cuda.md" > "$logs/accel-cuda.log" 2>&1
# issue 13 item 4: 256 agents x 4 envs x 128 steps x 500k steps, population --cudagraphs vs PureJaxRL's vmap over seeds.
# est. ~85-105 s: the script's start-up ~5 (torch's import, counted in its --time-budget); PureJaxRL first, ~25-30 s
# (import 4, jit ~8.4, its one timed run 8.6: --no-warm-run drops the 8.6 s warm run the table never showed);
# Proxima ~55-70 s (977 iterations, 256 members' metrics rows each). --time-budget 115 (3 s of it for the table):
# the side left without time, Proxima, is a row saying so; the step's limit 5 s above it. Without an anchor
# Proxima's side runs alone (the script measures PureJaxRL only with one), and the summary line says so
if [[ -n "$anchor" ]]; then
  step population-256 120 "$py" benchmarks/population_vs_purejaxrl.py --device cuda --cudagraphs --jax-python "$py" --anchor "$anchor" \
    --timeout 110 --time-budget 115 --out "$out/population-cuda.md" > "$logs/population-cuda.log" 2>&1
else
  step_note=" (Proxima only: PureJaxRL skipped, no anchor)"
  step population-256 120 "$py" benchmarks/population_vs_purejaxrl.py --device cuda --cudagraphs \
    --timeout 110 --time-budget 115 --out "$out/population-cuda.md" > "$logs/population-cuda.log" 2>&1
fi
# issue 12 item 1, compiled: compile+graphs == eager, last (two cold inductor compiles, the slowest and least
# certain step), appended to pytest-cuda.txt. est. ~45-55 s: start-up 10, CartPole and Pendulum compiles ~20 s each
step pytest-cuda-compile 60 "$py" -m pytest -v -rfE -p no:cacheprovider -m "gpu and not slow" -k "compile+graphs" \
  tests/unit/test_graphs.py >> "$out/pytest-cuda.txt" 2>&1
