#!/usr/bin/env bash
# Every GPU check as ONE prepared command for a session lent a CUDA machine (device time is short:
# everything runs in one call, each step under its own time limit, <= ~9 minutes in all).
# See benchmarks/README.md, "GPU session".
#
# On the GPU machine, from the repository root:   bash benchmarks/gpu_session.sh
# Carry (device tool `carry`): .whl (gymnasium, farama-notifications, gymnax, six wheels) and
# .anchors (a copy of ../shared/anchors/purejaxrl_cartpole.py): see benchmarks/README.md.
# Writes into $OUT (the device tool's folder) or benchmarks/results/gpu/ at most 7 files, since the
# device tool brings back at most 8: summary.txt, pytest-cuda.txt, vs-purejaxrl-cuda.md, solve-gpu.md,
# accel-cuda.md, population-cuda.md, and logs.tar.gz (doctor.txt, purejaxrl-solve.json,
# pendulum-cudagraphs.txt, a .log per step), repacked after every step so that a call cut short
# still returns what ran. Step limits add up to 540 s.
set -uo pipefail

out="${OUT:-benchmarks/results/gpu}"
logs="$(mktemp -d "${TMPDIR:-/tmp}/gpu-session.XXXXXX")"  # everything but the tables; packed into $out/logs.tar.gz
trap 'rm -rf "$logs" "$logs.tar.gz"' EXIT
mkdir -p "$out"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"   # the package from this tree, not installed
py="${PYTHON:-python3}"

# packages the machine's image lacks travel as wheels in .whl/ (benchmarks/README.md says which)
if compgen -G ".whl/*.whl" > /dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
if ! "$py" -c "import gymnasium, torch; assert torch.cuda.is_available()" 2> "$out/import-error.txt"; then
  echo "gpu_session: need gymnasium and a CUDA torch here (see $out/import-error.txt)" | tee "$out/summary.txt"
  exit 2
fi
rm -f "$out/import-error.txt"
anchor=""
for a in ../shared/anchors/purejaxrl_cartpole.py .anchors/purejaxrl_cartpole.py; do [[ -f "$a" ]] && anchor="$a" && break; done

step() {  # step NAME LIMIT_SECONDS COMMAND...: run it, record its status and time in summary.txt
  local name="$1" limit="$2" t0 rc
  shift 2
  t0=$(date +%s)
  timeout "$limit" "$@"
  rc=$?
  echo "$name: exit $rc, $(( $(date +%s) - t0 )) s" | tee -a "$out/summary.txt"
  pack
}

pack() {  # logs.tar.gz from $logs, replaced whole (never a half-written archive)
  tar -czf "$logs.tar.gz" -C "$logs" . && mv -f "$logs.tar.gz" "$out/logs.tar.gz"
}

: > "$out/summary.txt"
step doctor 20 "$py" -m proxima doctor > "$logs/doctor.txt" 2>&1
# issue 12 items 1-2: graphed == eager, compiled+graphed == eager, checkpoints across modes, launches per iteration
step pytest-cuda 90 "$py" -m pytest -q -p no:cacheprovider -m "not slow" -k cuda \
  tests/unit/test_graphs.py tests/unit/test_hot_loop.py tests/unit/test_native_envs.py tests/unit/test_accel.py tests/unit/test_population.py \
  tests/integration/test_checkpoint.py > "$out/pytest-cuda.txt" 2>&1
# item 3: throughput side by side with PureJaxRL, one call, alternating rounds
if [[ -n "$anchor" ]]; then
  # one process per side (--single-call): 2 start-ups instead of 18 on a machine rented by the minute
  step vs-purejaxrl 150 "$py" benchmarks/vs_purejaxrl.py --device cuda --cudagraphs --single-call --jax-python "$py" --anchor "$anchor" \
    --num-envs 2048,65536,1048576 --repeats 3 --seconds 1 --out "$out/vs-purejaxrl-cuda.md" > "$logs/vs-purejaxrl-cuda.log" 2>&1
  # item 5: PureJaxRL's time to solve from launch (4 envs x 128 steps, 500k steps), as solve_time.py times ours
  step purejaxrl-solve 30 "$py" -c "import subprocess, sys, time; t0 = time.perf_counter(); \
p = subprocess.run([sys.executable, '$anchor', '--no-warm-run', '--configs', '4x128x5e5'], capture_output=True, text=True); \
print(p.stdout.strip()); print('wall_from_launch_seconds', round(time.perf_counter() - t0, 2))" > "$logs/purejaxrl-solve.json" 2>&1
else
  echo "vs-purejaxrl: skipped, no anchor (carry .anchors/purejaxrl_cartpole.py)" | tee -a "$out/summary.txt"
fi
# item 5: the gpu preset, 10 seeds, wall from launch (550k steps since 2026-12-01: 10 s more, taken from doctor's limit)
step solve-gpu 80 "$py" benchmarks/solve_time.py --preset gpu --device cuda --out "$out/solve-gpu.md" > "$logs/solve-gpu.log" 2>&1
# item 6: continuous control on the graphed path
step pendulum-cudagraphs 40 "$py" -m proxima train Pendulum-v1 --device cuda --cudagraphs --no-progress \
  --run-dir /tmp/pendulum-cudagraphs --eval-episodes 20 > "$logs/pendulum-cudagraphs.txt" 2>&1
step accel 40 "$py" benchmarks/accel.py --device cuda --modes eager,cudagraphs,compile+cudagraphs --repeats 3 \
  --out "$out/accel-cuda.md" > "$logs/accel-cuda.log" 2>&1
# issue 13 item 4: 256 agents x 4 envs x 128 steps x 500k steps, population --cudagraphs vs PureJaxRL's vmap over seeds
if [[ -n "$anchor" ]]; then
  step population-256 90 "$py" benchmarks/population_vs_purejaxrl.py --device cuda --cudagraphs --jax-python "$py" --anchor "$anchor" \
    --timeout 80 --out "$out/population-cuda.md" > "$logs/population-cuda.log" 2>&1
fi
