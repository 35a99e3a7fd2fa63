#!/usr/bin/env bash
# `make ci-train`: the CI loop, commit -> train -> evaluate -> report, inside the container.
#
# On the host: runs the image (IMAGE, default proxima:<version>, built from this commit) with CI_OUT
# (default runs/ci) mounted at /workspace/runs, no network, and this script as its command. Inside:
#   1. proxima train CI_ENV (default CartPole-v1: its default preset) into runs/ci-<commit>-<time>;
#   2. proxima eval of the trained policy (10 deterministic episodes) -> ci-eval.json;
#   3. proxima report -> report.md in the run directory, with a "CI verdict" section added;
#   4. exit 0 when the mean return reaches the threshold, 1 when it is below, 2 on an error.
# The threshold is CI_MIN_RETURN when set, else the env's solved threshold registered with Gymnasium
# (its reward_threshold: 475 for CartPole-v1). Presets hold no threshold of their own.
# More settings: CI_TRAIN_ARGS (extra `proxima train` flags, e.g. "--total-timesteps 50000"),
# CONTAINER_ENGINE (docker or podman; default: docker when its daemon answers, else podman),
# CI_TIMEOUT (seconds, default 3600).
set -euo pipefail

if [[ "${1:-}" == --inside ]]; then
  cd /workspace
  run="runs/$CI_RUN_NAME"
  # shellcheck disable=SC2086 # CI_TRAIN_ARGS is a list of flags
  proxima train "$CI_ENV" --run-dir "$run" --quiet ${CI_TRAIN_ARGS:-} || exit 2
  proxima eval "$run" --episodes 10 --json >"$run/ci-eval.json" || exit 2
  proxima report "$run" --episodes 10 >/dev/null || exit 2
  python - "$run" "$CI_ENV" "${CI_MIN_RETURN:-}" "$CI_COMMIT" <<'EOF'
import json, sys
from pathlib import Path

import gymnasium

run, env_id, min_return, commit = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
mean = json.loads((run / "ci-eval.json").read_text())["mean_return"]
if min_return:
    threshold, source = float(min_return), "CI_MIN_RETURN"
else:
    try:
        threshold = gymnasium.spec(env_id).reward_threshold
    except gymnasium.error.Error:
        threshold = None
    if threshold is None:
        sys.exit(f"ci-train: error: {env_id} has no registered reward_threshold; set CI_MIN_RETURN")
    source = f"{env_id}'s reward_threshold in Gymnasium"
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
timeout 60 "$ENGINE" image inspect "$IMAGE" >/dev/null 2>&1 \
  || die "image $IMAGE not found: build it from this commit first (docker build -f docker/Dockerfile -t $IMAGE . ; on this project's test machines: make test-container)"

commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
[[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]] || commit="$commit-dirty"
name="ci-$commit-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
# The image runs as its user (uid 1000 unless built with PROXIMA_UID): root hands it the folder.
user="$("$ENGINE" image inspect -f '{{.Config.User}}' "$IMAGE")"
if [[ "$(id -u)" == 0 ]]; then
  chown "${user%%:*}:${user#*:}" "$OUT"
fi

container="proxima-ci-train-$$"
trap 'timeout 60 "$ENGINE" rm -f "$container" >/dev/null 2>&1 || true' EXIT
echo "ci-train: $ENGINE run $IMAGE: train ${CI_ENV:-CartPole-v1} ${CI_TRAIN_ARGS:-}-> $OUT/$name"
set +e
timeout "${CI_TIMEOUT:-3600}" "$ENGINE" run --rm --name "$container" --network none --no-healthcheck \
  -e JUPYTER_TOKEN="unused-batch-job-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')" \
  -e CI_ENV="${CI_ENV:-CartPole-v1}" -e CI_TRAIN_ARGS="${CI_TRAIN_ARGS:-}" -e CI_MIN_RETURN="${CI_MIN_RETURN:-}" \
  -e CI_RUN_NAME="$name" -e CI_COMMIT="$commit" \
  -v "$OUT:/workspace/runs" -v "$ROOT/docker/ci_train.sh:/usr/local/bin/proxima-ci-train:ro" \
  "$IMAGE" bash /usr/local/bin/proxima-ci-train --inside
rc=$?
set -e
((rc != 124)) || die "timed out after ${CI_TIMEOUT:-3600} s"
[[ ! -f "$OUT/$name/report.md" ]] || echo "ci-train: report: $OUT/$name/report.md"
exit "$rc"
