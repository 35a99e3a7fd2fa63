#!/usr/bin/env bash
# `make ci-train`: the CI loop, commit -> train -> evaluate -> report, inside the container.
#
# On the host: checks the settings, that the image (IMAGE, default proxima:<version>) was built from
# this checkout's HEAD (its PROXIMA_GIT_COMMIT, docker/README.md) and what the threshold is, all
# before training; then runs the image with CI_OUT (default runs/ci) mounted at /workspace/runs, no
# network, and this script as its command. Inside:
#   1. proxima train CI_ENV (default CartPole-v1: its default preset) into runs/ci-<commit>-<time>;
#   2. proxima eval of the trained policy (10 deterministic episodes) -> ci-eval.json;
#   3. proxima report -> report.md in the run directory, with a "CI verdict" section added.
# Exit status: 0 when the mean return reaches the threshold (PASS), 1 when it is below (FAIL), 2 on
# an error, with one line saying which: a bad setting, no threshold, an image from another commit, a
# failed step, a timeout, or a stop (SIGINT/SIGTERM here, or docker stop: the run writes a
# checkpoint first, and the line says how to continue it).
# The threshold is CI_MIN_RETURN when set, else the env's solved threshold registered with Gymnasium
# (its reward_threshold: 475 for CartPole-v1). Presets hold no threshold of their own.
# More settings: CI_TRAIN_ARGS (extra `proxima train` flags, e.g. "--total-timesteps 50000"),
# CONTAINER_ENGINE (docker or podman; default: docker when its daemon answers, else podman),
# CI_TIMEOUT (seconds, default 3600).
set -euo pipefail

if [[ "${1:-}" == --inside ]]; then
  cd /workspace
  run="runs/$CI_RUN_NAME"
  # The container's entrypoint sends SIGTERM to every process on a stop, proxima included: this shell
  # only notes it (forwarding it too would be a second signal, which stops proxima without a checkpoint).
  stopped=""
  trap 'stopped=SIGTERM' TERM
  trap 'stopped=SIGINT' INT
  # step WHAT COMMAND...: run one step; a stop or a failure ends the script with one line
  step() {
    local what="$1" rc
    shift
    set +e
    "$@"
    rc=$?
    set -e
    if [[ -n "$stopped" ]] || ((rc == 130 || rc == 143)); then
      stopped="${stopped:-$( ((rc == 130)) && echo SIGINT || echo SIGTERM)}"
      echo "ci-train: stopped by $stopped during $what (exit $rc), no verdict; continue the run with: proxima resume $run" >&2
      exit "$([[ "$stopped" == SIGINT ]] && echo 130 || echo 143)"
    fi
    if ((rc != 0)); then
      echo "ci-train: error: $what exited with status $rc" >&2
      exit 2
    fi
  }
  # shellcheck disable=SC2086 # CI_TRAIN_ARGS is a list of flags
  step "proxima train" proxima train "$CI_ENV" --run-dir "$run" --quiet ${CI_TRAIN_ARGS:-}
  step "proxima eval" proxima eval "$run" --episodes 10 --json >"$run/ci-eval.json"
  step "proxima report" proxima report "$run" --episodes 10 >/dev/null
  python - "$run" "$CI_THRESHOLD" "$CI_THRESHOLD_SOURCE" "$CI_COMMIT" <<'EOF'
import json, sys
from pathlib import Path

run, threshold, source, commit = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
try:
    mean = float(json.loads((run / "ci-eval.json").read_text())["mean_return"])
except (OSError, ValueError, KeyError, TypeError) as e:  # an error, not a FAIL (exit 1)
    sys.exit(print(f"ci-train: error: cannot read the mean return from {run}/ci-eval.json: {e!r}", file=sys.stderr) or 2)
verdict = "PASS" if mean >= threshold else "FAIL"
line = f"{verdict}: mean return {mean:g} over 10 episodes, threshold {threshold:g} ({source}), commit {commit}"
with open(run / "report.md", "a") as f:
    f.write(f"\n## CI verdict\n\n{line}\n")
print(f"ci-train: {line}")
sys.exit(0 if verdict == "PASS" else 1)
EOF
  exit $?
fi

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
die() {
  printf 'ci-train: error: %s\n' "$*" >&2
  exit 2
}

# ---- the settings, before anything is started -------------------------------------------------
CI_ENV="${CI_ENV:-CartPole-v1}"
MIN_RETURN="${CI_MIN_RETURN:-}"
TIMEOUT="${CI_TIMEOUT:-3600}"
if [[ -n "$MIN_RETURN" ]] && ! [[ "$MIN_RETURN" =~ ^[+-]?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][+-]?[0-9]+)?$ ]]; then
  die "CI_MIN_RETURN='$MIN_RETURN' is not a number (e.g. CI_MIN_RETURN=450)"
fi
[[ "$TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "CI_TIMEOUT='$TIMEOUT' is not a whole number of seconds"

VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)"
IMAGE="${IMAGE:-proxima:$VERSION}"
OUT="${CI_OUT:-runs/ci}"
ENGINE="${CONTAINER_ENGINE:-}"
if [[ -z "$ENGINE" ]]; then
  if command -v docker >/dev/null 2>&1 && timeout 20 docker info >/dev/null 2>&1; then
    ENGINE=docker
  elif command -v podman >/dev/null 2>&1; then
    ENGINE=podman
  else
    die "no container engine: install Docker or podman (or set CONTAINER_ENGINE)"
  fi
fi
if [[ "$ENGINE" == podman ]]; then
  export CONTAINERS_CONF="${CONTAINERS_CONF:-$ROOT/docker/containers.conf}"
fi
build_hint="docker build -f docker/Dockerfile --build-arg PROXIMA_GIT_COMMIT=\$(git rev-parse HEAD) -t $IMAGE . ; on this project's test machines: make test-container"
timeout 60 "$ENGINE" image inspect "$IMAGE" >/dev/null 2>&1 \
  || die "image $IMAGE not found: build it from this commit first ($build_hint)"

# ---- the image must hold this checkout's commit (what the build recorded in PROXIMA_GIT_COMMIT) ----
head="$(git rev-parse HEAD 2>/dev/null || true)"
image_commit="$(timeout 60 "$ENGINE" image inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "$IMAGE" \
  | sed -n 's/^PROXIMA_GIT_COMMIT=//p')"
if [[ -n "$head" ]]; then
  if [[ -z "$image_commit" ]]; then
    die "image $IMAGE records no commit (built without --build-arg PROXIMA_GIT_COMMIT), so it may not hold this checkout's code (HEAD ${head:0:12}): rebuild it ($build_hint)"
  elif [[ "${head,,}" != "${image_commit,,}"* ]]; then
    die "image $IMAGE was built from commit ${image_commit:0:12}, this checkout is at ${head:0:12}: rebuild it ($build_hint)"
  fi
fi
commit="$(git rev-parse --short HEAD 2>/dev/null || echo "${image_commit:0:7}")"
commit="${commit:-unknown}"
[[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]] || commit="$commit-dirty"

# ---- the threshold: CI_MIN_RETURN, else the env's reward_threshold (asked of the image's Gymnasium) ----
if [[ -n "$MIN_RETURN" ]]; then
  threshold="$MIN_RETURN" source="CI_MIN_RETURN"
else
  set +e
  found="$(timeout 120 "$ENGINE" run --rm --network none --no-healthcheck --entrypoint python "$IMAGE" -c '
import sys
import gymnasium
env_id = sys.argv[1]
try:
    threshold = gymnasium.spec(env_id).reward_threshold
except gymnasium.error.Error:
    sys.exit(print(f"ci-train: error: {env_id} is not registered with Gymnasium, so it has no reward_threshold; set CI_MIN_RETURN", file=sys.stderr) or 2)
if threshold is None:
    sys.exit(print(f"ci-train: error: {env_id} has no reward_threshold registered with Gymnasium; set CI_MIN_RETURN", file=sys.stderr) or 2)
print(f"{float(threshold)!r}")
' "$CI_ENV")"
  rc=$?
  set -e
  ((rc != 2)) || exit 2 # its one line is out already
  ((rc == 0)) && [[ -n "$found" ]] || die "cannot read $CI_ENV's reward_threshold in $IMAGE (exit $rc)"
  threshold="$found" source="$CI_ENV's reward_threshold in Gymnasium"
fi

name="ci-$commit-$(date -u +%Y%m%d-%H%M%S)"
# The image runs as its user (uid 1000 unless built with PROXIMA_UID): root hands it the folder, but
# only one made here or still empty. CI_OUT may name any folder (CI_OUT=. or /tmp), whose owner a
# CI job must not change behind the user's back.
user="$("$ENGINE" image inspect -f '{{.Config.User}}' "$IMAGE")"
if [[ "$(id -u)" == 0 ]]; then
  if [[ -d "$OUT" && -n "$(find "$OUT" -mindepth 1 -maxdepth 1 -print -quit 2>/dev/null)" ]]; then
    owner="$(stat -L -c %u "$OUT")"
    [[ "$owner" == "${user%%:*}" ]] \
      || die "CI_OUT=$OUT holds files and is owned by uid $owner, not the image's user (uid ${user%%:*}), which writes the run there: name a new or empty folder (it is given to uid ${user%%:*}), or run chown ${user} $OUT yourself"
  else
    mkdir -p "$OUT"
    chown "${user%%:*}:${user#*:}" "$OUT"
  fi
fi
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

# ---- the run: in the background, so that SIGINT/SIGTERM here stop the container gracefully ----------
container="proxima-ci-train-$$"
trap 'timeout 60 "$ENGINE" rm -f "$container" >/dev/null 2>&1 || true' EXIT
# shellcheck disable=SC2329 # called by the INT/TERM traps below
stop_container() {
  echo "ci-train: $1: stopping the container (the run writes a checkpoint first)" >&2
  timeout 90 "$ENGINE" stop -t 60 "$container" >/dev/null 2>&1 || true
}
echo "ci-train: $ENGINE run $IMAGE: train $CI_ENV ${CI_TRAIN_ARGS:-}-> $OUT/$name"
timeout "$TIMEOUT" "$ENGINE" run --rm --name "$container" --network none --no-healthcheck --stop-timeout 60 \
  -e JUPYTER_TOKEN="unused-batch-job-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')" \
  -e CI_ENV="$CI_ENV" -e CI_TRAIN_ARGS="${CI_TRAIN_ARGS:-}" -e CI_THRESHOLD="$threshold" \
  -e CI_THRESHOLD_SOURCE="$source" -e CI_RUN_NAME="$name" -e CI_COMMIT="$commit" \
  -v "$OUT:/workspace/runs" -v "$ROOT/docker/ci_train.sh:/usr/local/bin/proxima-ci-train:ro" \
  "$IMAGE" bash /usr/local/bin/proxima-ci-train --inside &
run_pid=$!
trap 'stop_container SIGTERM' TERM
trap 'stop_container SIGINT' INT
while :; do
  set +e
  wait "$run_pid"
  rc=$?
  set -e
  kill -0 "$run_pid" 2>/dev/null || break # else a trap interrupted the wait: wait again
done
trap - TERM INT
((rc != 124)) || die "timed out after $TIMEOUT s (the run's last checkpoint is in $OUT/$name)"
[[ ! -f "$OUT/$name/report.md" ]] || echo "ci-train: report: $OUT/$name/report.md"
case "$rc" in
  0 | 1 | 2) exit "$rc" ;;
  130 | 143) die "stopped before a verdict (exit $rc); a stopped training run keeps its checkpoint in $OUT/$name" ;;
  *) die "$ENGINE run exited with status $rc (no verdict); see the output above" ;;
esac
