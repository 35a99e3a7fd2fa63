#!/usr/bin/env bash
# The GPU checks of issues 3 and 4 as ONE prepared command for a session lent a CUDA machine
# (device time is short: everything runs in one call). See benchmarks/README.md, "GPU session".
#
# On the GPU machine, from the repository root:   bash benchmarks/gpu_session.sh
# Writes into $OUT (the device tool's folder) or benchmarks/results/gpu/:
#   doctor.txt, pytest-cuda.txt, accel-cuda.md (+ .log), bench-CartPole-v1-cuda.md (+ .log), summary.txt
# Each step has its own time limit, so one that hangs cannot take the others' time.
set -uo pipefail

out="${OUT:-benchmarks/results/gpu}"
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

step() {  # step NAME LIMIT_SECONDS COMMAND...: run it, record its status and time in summary.txt
  local name="$1" limit="$2" t0 rc
  shift 2
  t0=$(date +%s)
  timeout "$limit" "$@"
  rc=$?
  echo "$name: exit $rc, $(( $(date +%s) - t0 )) s" | tee -a "$out/summary.txt"
}

: > "$out/summary.txt"
step doctor 60 "$py" -m proxima doctor > "$out/doctor.txt" 2>&1
step pytest-cuda 150 "$py" -m pytest -q -p no:cacheprovider -m "not slow" -k cuda \
  tests/unit/test_hot_loop.py tests/unit/test_native_envs.py tests/unit/test_accel.py tests/integration/test_checkpoint.py \
  > "$out/pytest-cuda.txt" 2>&1
step accel 200 "$py" benchmarks/accel.py --device cuda --modes eager,compile,cudagraphs,bf16 --repeats 3 \
  --out "$out/accel-cuda.md" > "$out/accel-cuda.log" 2>&1
step bench 150 "$py" -m proxima bench CartPole-v1 --device cuda --backend native \
  --num-envs 4096,16384,65536,262144 --repeats 3 --out "$out/bench-CartPole-v1-cuda.md" > "$out/bench-CartPole-v1-cuda.log" 2>&1
