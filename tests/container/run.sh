#!/usr/bin/env bash
# `make test-container`: build docker/Dockerfile for real, run it, and check it from outside.
#
# These machines have no Docker engine and reach no registry, so (docker/README.md, "How the test
# builds it without a registry"):
#   1. apt installs podman, runc, debootstrap, openssh-client, sshpass, curl when one is missing
#      (no apt or no root: one line saying what is missing, exit 1; never a silent skip);
#   2. a Debian bookworm root file system made with debootstrap is imported as $BASE (reused when
#      podman already holds it);
#   3. the wheels (the CPU torch 2.13.0 on this machine's disk, the project's dependencies at the
#      versions of requirements.lock, JupyterLab) are downloaded on the host into $CACHE/wheels
#      (reused while the requirements are unchanged) and lent to the build as its `wheels` context;
#   4. docker/Dockerfile is built unchanged, with BASE_IMAGE=$BASE and what that base implies
#      (TORCH_CUDA=0, PIP_NO_INDEX=1, the wheels) as the only differences from a real build, and
#      PROXIMA_GIT_COMMIT (this checkout's HEAD), as the documented build passes it;
#   5. containers run with --network host, their servers bound to 127.0.0.1 on free ports, and are
#      checked from outside (the list is printed as it goes, and counted at the end); last, the
#      main container is stopped while four training runs (two in tmux over SSH, with --vector
#      async, one with podman exec, and proxima.train() in a Jupyter kernel, which lives on after
#      it) are going, and each must have written a checkpoint and said "stopped by SIGTERM", the
#      stop not waiting out its grace for the kernel.
# Every wait is bounded, every container is removed by name on exit. Needs root (debootstrap and
# rootful podman). Settings: IMAGE (default proxima:<version>), PROXIMA_CONTAINER_CACHE (default
# ~/.cache/proxima-container), PYTHON (a Python >= 3.11 with pip, for the wheel download),
# PROXIMA_TEST_PREFIX (the containers' names, default proxima-test) and PROXIMA_TEST_PORT_BASE (the
# first port to try for the servers; default: any free port), so that two runs on one machine, or a
# run beside other containers, need not collide.

# "A && B || die ...": die exits, so it runs exactly when A or B fails (what SC2015 warns about).
# shellcheck disable=SC2015
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)"
IMAGE="${IMAGE:-proxima:$VERSION}"
BASE="localhost/proxima-test-base:bookworm"
CACHE="${PROXIMA_CONTAINER_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/proxima-container}"
PY="${PYTHON:-python3}"
PREFIX="${PROXIMA_TEST_PREFIX:-proxima-test}" # container names: $PREFIX-token, -main, ... (removed at start and on exit)
LOGS="$CACHE/logs"
START=$SECONDS
CHECKS=0

say() { printf 'test-container: %s\n' "$*"; }
die() {
  printf 'test-container: FAIL: %s\n' "$*" >&2
  exit 1
}
ok() {
  CHECKS=$((CHECKS + 1))
  printf 'test-container: ok %2d  %s\n' "$CHECKS" "$*"
}
# expect_rc WANT RC WHAT OUTPUT: fail with the output's tail when the exit status is not WANT
expect_rc() {
  [[ "$2" == "$1" ]] || die "$3: exit status $2, expected $1; output: $(tail -n 5 <<<"$4" | tr '\n' ' ')"
}

# ---- 1. tooling ---------------------------------------------------------------------------------
[[ "$(id -u)" == 0 ]] || die "needs root (debootstrap and rootful podman); CI runs it as root"
declare -A PACKAGE_OF=([podman]=podman [runc]=runc [debootstrap]=debootstrap [ssh]=openssh-client
  [ssh-keygen]=openssh-client [sshpass]=sshpass [curl]=curl [ss]=iproute2 [setpriv]=util-linux)
missing=()
for tool in "${!PACKAGE_OF[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${PACKAGE_OF[$tool]}")
done
mkdir -p "$LOGS"
if ((${#missing[@]})); then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and there is no apt-get here: install them by hand"
  say "installing ${missing[*]} with apt-get"
  # a fresh machine may be running apt itself at boot: wait for its lock rather than fail
  apt=(apt-get -o DPkg::Lock::Timeout=180)
  if ! { timeout 300 "${apt[@]}" update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 "${apt[@]}" install -y -qq "${missing[@]}"; } \
    >"$LOGS/apt.log" 2>&1 </dev/null; then
    die "cannot install the container tooling (${missing[*]}) with apt-get; see $LOGS/apt.log"
  fi
fi
export CONTAINERS_CONF="${CONTAINERS_CONF:-$ROOT/docker/containers.conf}"
timeout 60 podman info >"$LOGS/podman-info.log" 2>&1 \
  || die "podman does not work here ($(grep -m1 -i error "$LOGS/podman-info.log" || tail -n1 "$LOGS/podman-info.log")); see $LOGS/podman-info.log"

# Containers are removed by name at start (a killed earlier run) and on every exit.
CONTAINERS=("$PREFIX-token" "$PREFIX-main" "$PREFIX-control" "$PREFIX-busy")
CI_PID="" # a background make ci-train (5e): stopped on exit
WORK=""
# one name per call: podman 4.3 here once left a running container in place, exit status 0, when
# `rm -f` named several of which some did not exist
remove_containers() {
  local name
  for name in "$@"; do
    timeout 60 podman rm -f -t 0 "$name" >/dev/null 2>&1 || true
  done
}
SSHD_VOLUME="$PREFIX-sshd" # a named volume at ~/.sshd, as compose.yaml mounts one (5a)
cleanup() {
  local rc=$?
  [[ -z "$CI_PID" ]] || kill -TERM "$CI_PID" 2>/dev/null || true
  remove_containers "${CONTAINERS[@]}"
  timeout 60 podman volume rm -f "$SSHD_VOLUME" >/dev/null 2>&1 || true
  [[ -n "$WORK" ]] && rm -rf "$WORK"
  if ((rc == 0)); then
    say "all $CHECKS checks passed in $((SECONDS - START)) s"
  else
    say "failed after $CHECKS checks passed ($((SECONDS - START)) s); logs in $LOGS"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
remove_containers "${CONTAINERS[@]}"
timeout 60 podman volume rm -f "$SSHD_VOLUME" >/dev/null 2>&1 || true

# ---- 2. the Debian base, made once -------------------------------------------------------------
t0=$SECONDS
if ! podman image exists "$BASE"; then
  mirror="${PROXIMA_DEBIAN_MIRROR:-$(awk '$1 == "URIs:" && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)}"
  mirror="${mirror:-http://deb.debian.org/debian}"
  rootfs="$CACHE/rootfs.tmp"
  rm -rf "$rootfs"
  say "making the Debian bookworm base with debootstrap from $mirror (once; about a minute)"
  timeout 900 debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$LOGS/debootstrap.log" 2>&1 </dev/null \
    || die "debootstrap of Debian bookworm from $mirror failed; see $LOGS/debootstrap.log"
  tar --numeric-owner -C "$rootfs" -c . \
    | timeout 300 podman import --change 'CMD ["/bin/bash"]' - "$BASE" >"$LOGS/import.log" 2>&1 \
    || die "podman import of the Debian base failed; see $LOGS/import.log"
  rm -rf "$rootfs"
fi
ok "base image $BASE present ($((SECONDS - t0)) s)"

# ---- 3. wheels, downloaded on the host (pip inside the build cannot reach an index here) ----------
WHEELS="$CACHE/wheels"
jupyterlab="$(grep -o '"jupyterlab==[^"]*"' docker/Dockerfile | tr -d '"')"
[[ -n "$jupyterlab" ]] || die "docker/Dockerfile: no \"jupyterlab==VERSION\" pin found"
reqs="$("$PY" -c '
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["rlhf"]))
')" || die "cannot read the dependencies from pyproject.toml with $PY (needs Python >= 3.11)"
reqs="$(printf '%s\n%s\nsetuptools>=68\nwheel\n' "$reqs" "$jupyterlab")"
t0=$SECONDS
stamp="$( { printf '%s\n' "$reqs"; cat requirements.lock; } | sha256sum | cut -c1-16)"
if [[ "$(cat "$WHEELS/.stamp" 2>/dev/null)" != "$stamp" ]]; then
  say "downloading the wheels for Python 3.11.2 into $WHEELS"
  rm -rf "$WHEELS" && mkdir -p "$WHEELS"
  # --python-version: the image's Python is Debian's 3.11.2; without it a wheel needing a newer
  # 3.11.x could slip in. The lock's versions, so the image runs what the tests run.
  timeout 900 "$PY" -m pip download -q -d "$WHEELS" --only-binary=:all: --python-version 3.11.2 \
    -c requirements.lock -r /dev/stdin <<<"$reqs" >"$LOGS/pip-download.log" 2>&1 \
    || die "pip download of the image's wheels failed; see $LOGS/pip-download.log"
  compgen -G "$WHEELS/torch-2.13.0+cpu-*.whl" >/dev/null \
    || die "no CPU torch 2.13.0 wheel in $WHEELS (pip found another build; this machine's wheel store holds the CPU one)"
  ! compgen -G "$WHEELS/nvidia_*.whl" >/dev/null || die "CUDA wheels (nvidia_*) in $WHEELS: the CPU torch was not used"
  printf '%s\n' "$stamp" >"$WHEELS/.stamp" # only a complete, checked download is reused
fi
ok "wheels ready: CPU torch 2.13.0 and $(find "$WHEELS" -name '*.whl' | wc -l) wheels, no CUDA wheels ($((SECONDS - t0)) s)"

# ---- 4. build: the same Dockerfile; only the base and what it implies differ ---------------------
COMMIT="$(git rev-parse HEAD 2>/dev/null)" && [[ "$COMMIT" =~ ^[0-9a-f]{40}$ ]] \
  || die "cannot read this checkout's commit (git rev-parse HEAD): the image records it (PROXIMA_GIT_COMMIT)"
say "building $IMAGE from docker/Dockerfile on $BASE (commit ${COMMIT:0:12})"
t0=$SECONDS
timeout 1500 podman build --format docker -f docker/Dockerfile --ignorefile docker/Dockerfile.dockerignore \
  --build-arg BASE_IMAGE="$BASE" --build-arg TORCH_CUDA=0 --build-arg PIP_NO_INDEX=1 \
  --build-arg PROXIMA_GIT_COMMIT="$COMMIT" \
  --build-context wheels="$WHEELS" -t "$IMAGE" . >"$LOGS/build.log" 2>&1 </dev/null \
  || die "podman build failed; last lines: $(tail -n 3 "$LOGS/build.log" | tr '\n' ' ') (all in $LOGS/build.log)"
ok "image $IMAGE built in $((SECONDS - t0)) s"
# PROXIMA_UID=0 (--build-arg PROXIMA_UID="$(id -u)" run as root) is refused with one line, in the
# user step: the layers above it come from the cache, as PROXIMA_UID is declared only there.
t0=$SECONDS
set +e
timeout 600 podman build --format docker -f docker/Dockerfile --ignorefile docker/Dockerfile.dockerignore \
  --build-arg BASE_IMAGE="$BASE" --build-arg TORCH_CUDA=0 --build-arg PIP_NO_INDEX=1 \
  --build-arg PROXIMA_GIT_COMMIT="$COMMIT" --build-arg PROXIMA_UID=0 \
  --build-context wheels="$WHEELS" . >"$LOGS/build-uid0.log" 2>&1 </dev/null
rc=$?
set -e
((rc != 0)) || die "a build with PROXIMA_UID=0 succeeded; it must refuse uid 0"
[[ "$(grep -c 'PROXIMA_UID=0 is refused' "$LOGS/build-uid0.log")" == 1 ]] \
  && grep -q "PROXIMA_UID=0 is refused: the image's user needs a number other than 0 (root); build with the default 1000" "$LOGS/build-uid0.log" \
  && ! grep -q 'useradd:' "$LOGS/build-uid0.log" \
  || die "a build with PROXIMA_UID=0: expected one line 'PROXIMA_UID=0 is refused: ...'; see $LOGS/build-uid0.log"
# every RUN above the user step (apt, the dependencies, the project) was taken from the cache
cached="$(awk '/STEP [0-9]+\/[0-9]+: RUN /{run=1; next} run && /^--> Using cache/{n++} {run=0} END {print n+0}' "$LOGS/build-uid0.log")"
((cached >= 3)) || die "a build with PROXIMA_UID=0 re-ran the layers above the user step ($cached RUN steps from the cache; see $LOGS/build-uid0.log): declare ARG PROXIMA_UID just before it"
ok "a build with PROXIMA_UID=0 fails in the user step with one line (exit $rc), the $cached RUN layers above it from the cache ($((SECONDS - t0)) s)"
env_commit="$(podman image inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "$IMAGE" | sed -n 's/^PROXIMA_GIT_COMMIT=//p')"
[[ "$env_commit" == "$COMMIT" ]] || die "the image's PROXIMA_GIT_COMMIT is '$env_commit', expected $COMMIT"
ok "the image records the commit it was built from (PROXIMA_GIT_COMMIT=${COMMIT:0:12})"
# what the image installed is requirements.lock's (the versions the tests run), torch's local label aside
set +e
out="$(timeout 120 podman run --rm --network none --no-healthcheck --entrypoint python "$IMAGE" -m pip list --format=freeze 2>&1)"
rc=$?
set -e
expect_rc 0 "$rc" "pip list in the image" "$out"
checked="$(PIP_LIST="$out" "$PY" - requirements.lock <<'EOF'
import os, re, sys
def pins(lines):
    out = {}
    for line in lines:
        name, _, version = line.strip().partition("==")
        if version and not name.startswith("#"):
            out[re.sub(r"[-_.]+", "-", name).lower()] = version.split("+")[0]
    return out
lock, image = pins(open(sys.argv[1])), pins(os.environ["PIP_LIST"].splitlines())
both = sorted(set(lock) & set(image))
wrong = [f"{n} {image[n]} (lock: {lock[n]})" for n in both if image[n] != lock[n]]
if wrong or len(both) < 20:  # the message goes to stdout: the caller shows it
    print(f"the image's versions differ from requirements.lock: {', '.join(wrong) or f'only {len(both)} in common'}")
    sys.exit(1)
print(len(both))
EOF
)" || die "$checked"
ok "the image's packages are requirements.lock's versions ($checked checked, torch without its +cpu)"
env_lines="$(podman image inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "$IMAGE")"
grep -qx 'SHELL=/bin/bash' <<<"$env_lines" && grep -qx 'PIP_BREAK_SYSTEM_PACKAGES=1' <<<"$env_lines" \
  || die "the image's environment lacks SHELL=/bin/bash (Jupyter's terminals) or PIP_BREAK_SYSTEM_PACKAGES=1 (pip on Debian's Python): $(tr '\n' ' ' <<<"$env_lines")"
ok "the image sets SHELL=/bin/bash (Jupyter terminals open bash) and PIP_BREAK_SYSTEM_PACKAGES=1"
# The previous build's image, untagged now, would keep its ~2 GB of layers: drop dangling images
# (the layers this build shares with them stay, being its own).
timeout 300 podman image prune -f >/dev/null 2>&1 || true

WORK="$(mktemp -d /tmp/proxima-test-container.XXXXXX)"
chmod 755 "$WORK" # the host user with uid 1000 reads the runs below it
mkdir -p "$WORK/runs" "$WORK/checkpoints" "$WORK/notebooks"
cp notebooks/quickstart.ipynb "$WORK/notebooks/" # as the repository's notebooks/ is mounted (compose.yaml)
chown -R 1000:1000 "$WORK/runs" "$WORK/checkpoints" "$WORK/notebooks" # the image's user (uid/gid 1000)
read -r JUPYTER_PORT SSH_PORT CONTROL_PORT < <(PORT_BASE="${PROXIMA_TEST_PORT_BASE:-0}" "$PY" -c '
import os, socket
base, socks = int(os.environ["PORT_BASE"]), []
for port in ([0] * 3 if base == 0 else range(base, base + 1000)):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        continue
    socks.append(s)
    if len(socks) == 3:
        break
print(*(s.getsockname()[1] for s in socks))
')
TOKEN="$("$PY" -c 'import secrets; print(secrets.token_hex(24))')"
PASSWORD="$("$PY" -c 'import secrets; print(secrets.token_hex(12))')"
ssh-keygen -q -t ed25519 -N '' -C proxima-test -f "$WORK/id_ed25519"
# B: in a mounted authorized_keys at start; C: put there instead of B while the container runs
ssh-keygen -q -t ed25519 -N '' -C proxima-test-b -f "$WORK/id_b"
ssh-keygen -q -t ed25519 -N '' -C proxima-test-c -f "$WORK/id_c"
mkdir -m 755 "$WORK/keys"
cp "$WORK/id_b.pub" "$WORK/keys/authorized_keys"
chmod 644 "$WORK/keys/authorized_keys"
# a value given with -e that SSH sessions must get as it is: spaces, both quotes, a newline, a $
ENV_VALUE=$'a b \'c\' "d"\n$HOME \\ e'
SSH=(ssh -F /dev/null -o UserKnownHostsFile="$WORK/known_hosts" -o StrictHostKeyChecking=accept-new
  -o ConnectTimeout=10 -o LogLevel=ERROR)
KEY_SSH=("${SSH[@]}" -o BatchMode=yes -o IdentitiesOnly=yes -i "$WORK/id_ed25519" -p "$SSH_PORT")
PASSWORD_SSH=(sshpass -e "${SSH[@]}" -o PreferredAuthentications=password -o PubkeyAuthentication=no)

# http_status PATH [HEADER]: the status code of GET http://127.0.0.1:$JUPYTER_PORT/PATH
http_status() {
  local args=(-s -o /dev/null -w '%{http_code}' --max-time 10)
  [[ -n "${2:-}" ]] && args+=(-H "$2")
  curl "${args[@]}" "http://127.0.0.1:$JUPYTER_PORT$1" || true
}
# wait_for WHAT SECONDS CONTAINER COMMAND...: poll COMMAND once a second; fail when the container dies
wait_for() {
  local what="$1" limit="$2" name="$3" i
  shift 3
  for ((i = 0; i < limit; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    if [[ "$(podman inspect -f '{{.State.Running}}' "$name" 2>/dev/null)" != true ]]; then
      die "$what: container $name stopped; its log: $(podman logs "$name" 2>&1 | tail -n 5 | tr '\n' ' ')"
    fi
    sleep 1
  done
  die "$what: not ready after $limit s; log of $name: $(podman logs "$name" 2>&1 | tail -n 5 | tr '\n' ' ')"
}
jupyter_up() { [[ "$(http_status /api/status "Authorization: token $TOKEN")" == 200 ]]; }
listening() { [[ -n "$(ss -Hltn "sport = :$1")" ]]; }

# ---- 5a. the token is checked before anything starts --------------------------------------------
for case in "empty:" "short:0123456789abcde"; do
  token="${case#*:}"
  set +e
  out="$(timeout 120 podman run --rm --name "$PREFIX-token" --network none -e JUPYTER_TOKEN="$token" "$IMAGE" 2>&1)"
  rc=$?
  set -e
  expect_rc 1 "$rc" "JUPYTER_TOKEN ${case%%:*}" "$out"
  lines="$(grep -c '^proxima-entrypoint:' <<<"$out" || true)"
  want=$([[ -z "$token" ]] && echo "is empty or unset" || echo "is shorter than 16 characters")
  [[ "$lines" == 1 ]] && grep -q "^proxima-entrypoint: error: JUPYTER_TOKEN $want; refusing" <<<"$out" \
    || die "JUPYTER_TOKEN ${case%%:*}: expected one line 'JUPYTER_TOKEN $want; refusing ...', got: $out"
  ok "JUPYTER_TOKEN ${case%%:*}: the container stops at start (exit 1, one line: ...$want...)"
done

# A mounted key file the container's user cannot read stops it with one line naming the file, its
# owner and mode (it was once skipped in silence, the log saying no key had been given).
printf '%s\n' "$(cat "$WORK/id_ed25519.pub")" >"$WORK/unreadable_keys"
chmod 600 "$WORK/unreadable_keys" # root's, mode 600: uid 1000 in the container cannot read it
set +e
out="$(timeout 120 podman run --rm --name "$PREFIX-token" --network none -e JUPYTER_TOKEN="$TOKEN" \
  -v "$WORK/unreadable_keys:/run/secrets/authorized_keys:ro" "$IMAGE" 2>&1)"
rc=$?
set -e
expect_rc 1 "$rc" "an unreadable authorized_keys" "$out"
want="proxima-entrypoint: error: SSH key file /run/secrets/authorized_keys is not readable by proxima (uid 1000): it is owned by root:root (uid 0, gid 0), mode 600;"
[[ "$(grep -c '^proxima-entrypoint:' <<<"$out")" == 1 ]] && grep -qF "$want" <<<"$out" \
  || die "an unreadable authorized_keys: expected one line '$want ...', got: $out"
ok "a mounted authorized_keys it cannot read stops the container (exit 1, one line: file, owner root:root, mode 600)"

# Another uid than the image's user (--user 1234:1234) stops it with one line, before Jupyter and
# sshd fail on a home and a passwd entry they do not have.
set +e
out="$(timeout 120 podman run --rm --name "$PREFIX-token" --network none --user 1234:1234 -e JUPYTER_TOKEN="$TOKEN" "$IMAGE" 2>&1)"
rc=$?
set -e
expect_rc 1 "$rc" "--user 1234:1234" "$out"
want="proxima-entrypoint: error: running as uid 1234 (--user, or compose's user:), but this image's user is proxima, uid 1000: leave out --user, or rebuild the image with --build-arg PROXIMA_UID=1234 --build-arg PROXIMA_GID=1234 (docker/README.md), or with rootless podman run with --userns=keep-id:uid=1000,gid=1000"
[[ "$(grep -c '^proxima-entrypoint:' <<<"$out")" == 1 ]] && grep -qxF "$want" <<<"$out" && ! grep -q Traceback <<<"$out" \
  || die "--user 1234:1234: expected the one line '$want', got: $out"
ok "--user 1234:1234 stops the container (exit 1, one line naming PROXIMA_UID and --userns=keep-id)"

# A runs/ the image's user cannot write (what Docker creates for a missing host folder: root's,
# mode 755) stops it with one line naming the folder, its owner and mode, and the fix.
mkdir -m 755 "$WORK/rootruns"
set +e
out="$(timeout 120 podman run --rm --name "$PREFIX-token" --network none -e JUPYTER_TOKEN="$TOKEN" \
  -v "$WORK/rootruns:/workspace/runs" -v "$WORK/notebooks:/workspace/notebooks" "$IMAGE" 2>&1)"
rc=$?
set -e
expect_rc 1 "$rc" "a root-owned runs/" "$out"
want="proxima-entrypoint: error: /workspace/runs is not writable by proxima (uid 1000): it is owned by uid 0, gid 0, mode 755; on the host, give the folder mounted there to uid 1000: sudo chown 1000:1000 runs; with rootless podman run with --userns=keep-id:uid=1000,gid=1000"
[[ "$(grep -c '^proxima-entrypoint:' <<<"$out")" == 1 ]] && grep -qxF "$want" <<<"$out" \
  || die "a root-owned runs/: expected the one line '$want', got: $out"
ok "a mounted runs/ owned by root (mode 755) stops the container (exit 1, one line: folder, uid 0, mode 755, chown 1000:1000)"

# --read-only with nothing mounted: runs/ is the image's own and its user's, so the cause is the
# read-only root, which the line must name (it advised a chmod on a mounted folder there was not)
set +e
out="$(timeout 120 podman run --rm --name "$PREFIX-token" --network none --read-only -e JUPYTER_TOKEN="$TOKEN" "$IMAGE" 2>&1)"
rc=$?
set -e
expect_rc 1 "$rc" "--read-only with no volume" "$out"
want="proxima-entrypoint: error: /workspace/runs is not writable by proxima (uid 1000): it is owned by uid 1000, gid 1000, mode 755; nothing is mounted there and the container's own file system is read-only (--read-only): mount a host folder there, e.g. -v \"\$PWD/runs:/workspace/runs\" (docker/README.md)"
[[ "$(grep -c '^proxima-entrypoint:' <<<"$out")" == 1 ]] && grep -qxF "$want" <<<"$out" \
  || die "--read-only with no volume: expected the one line '$want', got: $out"
ok "--read-only with nothing mounted stops the container (exit 1, one line naming the read-only root and the volume to mount)"

# A named volume at ~/.sshd (compose.yaml's proxima-sshd) keeps the host keys across containers: the
# image's user must own the fresh volume (it starts as a copy of the image's ~/.sshd). Without a
# volume at runs/, checkpoints/ and notebooks/ the log says that what is written there goes with the container.
fingerprints=()
for i in 1 2; do
  set +e
  out="$(timeout 120 podman run --rm --name "$PREFIX-token" --network none --no-healthcheck -e JUPYTER_TOKEN="$TOKEN" \
    -e SSH_AUTHORIZED_KEYS="$(cat "$WORK/id_ed25519.pub")" -v "$SSHD_VOLUME:/home/proxima/.sshd" "$IMAGE" true 2>&1)"
  rc=$?
  set -e
  expect_rc 0 "$rc" "container $i with the volume $SSHD_VOLUME at /home/proxima/.sshd" "$out"
  fingerprints+=("$(grep -Eo 'SHA256:[A-Za-z0-9+/]+' <<<"$out" | paste -sd' ' -)")
  [[ -n "${fingerprints[-1]}" ]] || die "container $i with a volume at ~/.sshd printed no host key fingerprints: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
done
[[ "${fingerprints[0]}" == "${fingerprints[1]}" ]] \
  || die "two containers with the volume $SSHD_VOLUME at ~/.sshd presented different host keys: ${fingerprints[0]} / ${fingerprints[1]}"
grep -q '^proxima-entrypoint: note: no volume is mounted at /workspace/runs, /workspace/checkpoints and /workspace/notebooks: what is written there is lost with the container' <<<"$out" \
  || die "a container without volumes at runs/, checkpoints/ and notebooks/: no note that what is written there is lost with it: $(grep '^proxima-entrypoint:' <<<"$out" | tr '\n' ' ')"
ok "a named volume at ~/.sshd keeps the host keys across two containers; without volumes at runs/, checkpoints/ and notebooks/ the log notes that they go with the container"

# ---- 5b. the real container: Jupyter with a token, key-only SSH, volumes -------------------------
say "starting $PREFIX-main (--network host, Jupyter on 127.0.0.1:$JUPYTER_PORT, SSH on 127.0.0.1:$SSH_PORT)"
timeout 120 podman run -d --name "$PREFIX-main" --network host \
  -e JUPYTER_TOKEN="$TOKEN" -e JUPYTER_PORT="$JUPYTER_PORT" -e SSH_PORT="$SSH_PORT" \
  -e PROXIMA_LISTEN_ADDRESS=127.0.0.1 -e SSH_AUTHORIZED_KEYS="$(cat "$WORK/id_ed25519.pub")" -e PROXIMA_STOP_DEBUG=1 \
  -e PROXIMA_TEST_ENV="$ENV_VALUE" -v "$WORK/keys/authorized_keys:/run/secrets/authorized_keys:ro" \
  -v "$WORK/runs:/workspace/runs" -v "$WORK/checkpoints:/workspace/checkpoints" \
  -v "$WORK/notebooks:/workspace/notebooks" "$IMAGE" \
  >/dev/null 2>"$LOGS/podman-run.log" || die "podman run failed; see $LOGS/podman-run.log"
t0=$SECONDS
wait_for "Jupyter on 127.0.0.1:$JUPYTER_PORT" 120 "$PREFIX-main" jupyter_up
ok "Jupyter answers with the token after $((SECONDS - t0)) s"
wait_for "sshd on 127.0.0.1:$SSH_PORT" 30 "$PREFIX-main" listening "$SSH_PORT"

for port in "$JUPYTER_PORT" "$SSH_PORT"; do
  addrs="$(ss -Hltn "sport = :$port" | awk '{print $4}' | sort -u | tr '\n' ' ')"
  [[ "$addrs" == "127.0.0.1:$port " ]] || die "port $port listens on '$addrs', expected 127.0.0.1:$port only"
done
ok "Jupyter and sshd listen on 127.0.0.1 only"
# the image's HEALTHCHECK, run once by hand (podman schedules it with systemd, absent here)
timeout 60 podman healthcheck run "$PREFIX-main" >/dev/null 2>&1 \
  || die "the image's HEALTHCHECK fails against Jupyter on JUPYTER_PORT=$JUPYTER_PORT"
ok "the image's HEALTHCHECK passes (it follows JUPYTER_PORT)"

status="$(http_status /api/status)"
[[ "$status" == 403 ]] || die "/api/status without a token: HTTP $status, expected 403"
ok "/api/status without a token: 403"
status="$(http_status /api/status "Authorization: token wrong-$TOKEN")"
[[ "$status" == 403 ]] || die "/api/status with a wrong token (header): HTTP $status, expected 403"
status="$(http_status "/api/status?token=wrong-$TOKEN")"
[[ "$status" == 403 ]] || die "/api/status with a wrong token (query): HTTP $status, expected 403"
ok "/api/status with a wrong token (header and query): 403"
status="$(http_status /api/status "Authorization: token $TOKEN")"
[[ "$status" == 200 ]] || die "/api/status with the token (header): HTTP $status, expected 200"
status="$(http_status "/api/status?token=$TOKEN")"
[[ "$status" == 200 ]] || die "/api/status with the token (query): HTTP $status, expected 200"
ok "/api/status with the token (header and query): 200"
location="$(curl -s -o /dev/null -w '%{http_code} %{redirect_url}' --max-time 10 "http://127.0.0.1:$JUPYTER_PORT/lab")"
[[ "$location" =~ ^302\ .*/login ]] || die "/lab without a token: '$location', expected 302 to the login page"
ok "/lab without a token: 302 to /login"

# Jupyter's work is kept in the notebooks/ volume: the quickstart shows there, and a notebook saved
# through Jupyter lands in the host folder, so a new container finds it.
listing="$(curl -s --max-time 10 -H "Authorization: token $TOKEN" "http://127.0.0.1:$JUPYTER_PORT/api/contents/notebooks")"
grep -q '"name": *"quickstart.ipynb"' <<<"$listing" || die "Jupyter's notebooks/ does not list quickstart.ipynb: $(head -c 300 <<<"$listing")"
status="$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X PUT -H "Authorization: token $TOKEN" \
  -H 'Content-Type: application/json' --data '{"type": "notebook"}' \
  "http://127.0.0.1:$JUPYTER_PORT/api/contents/notebooks/saved-by-test.ipynb")"
[[ "$status" == 201 ]] || die "saving notebooks/saved-by-test.ipynb through Jupyter: HTTP $status, expected 201"
[[ "$(stat -c %u "$WORK/notebooks/saved-by-test.ipynb" 2>/dev/null)" == 1000 ]] \
  || die "a notebook saved in Jupyter's notebooks/ is not in the mounted host folder (owned by uid 1000)"
ok "Jupyter's notebooks/ is the mounted volume: quickstart.ipynb is listed, a saved notebook lands on the host"

# A JUPYTER_PORT in use (--network host) stops the container at start: Jupyter does not move to the
# next port in silence, where the health check and the user's tunnel would reach another server.
set +e
out="$(timeout 120 podman run --rm --name "$PREFIX-busy" --network host --no-healthcheck -e JUPYTER_TOKEN="$TOKEN" \
  -e JUPYTER_PORT="$JUPYTER_PORT" -e PROXIMA_LISTEN_ADDRESS=127.0.0.1 "$IMAGE" 2>&1)"
rc=$?
set -e
expect_rc 1 "$rc" "a second container on the busy JUPYTER_PORT=$JUPYTER_PORT" "$out"
grep -q "port $JUPYTER_PORT is not available" <<<"$out" && ! grep -q 'http://127\.0\.0\.1:[0-9]*/lab' <<<"$out" \
  || die "a busy JUPYTER_PORT: expected Jupyter's 'port $JUPYTER_PORT is not available' and no server, got: $(tail -n 5 <<<"$out" | tr '\n' ' ')"
ok "a JUPYTER_PORT in use stops the container at start (exit 1: 'port $JUPYTER_PORT is not available'), no server on another port"

set +e
out="$(timeout 60 "${KEY_SSH[@]}" proxima@127.0.0.1 'id -un; id -u' 2>&1)"
rc=$?
set -e
expect_rc 0 "$rc" "ssh with the key as proxima" "$out"
[[ "$out" == $'proxima\n1000' ]] || die "ssh with the key: logged in as '$out', expected proxima (uid 1000)"
ok "ssh with the key logs in as proxima (uid 1000)"

# SSH sessions get the container's environment (sshd starts them from a fresh one): a value given
# with -e, as it is, in `ssh host cmd`, in a login shell and in tmux started over SSH; the image's
# own ENV too; never the token or the keys (not in the environment, nor in any file of the home)
set +e
out="$(timeout 60 "${KEY_SSH[@]}" proxima@127.0.0.1 'printenv PROXIMA_TEST_ENV' 2>&1)"
rc=$?
login="$(timeout 60 "${KEY_SSH[@]}" -T proxima@127.0.0.1 <<<'printenv PROXIMA_TEST_ENV' 2>&1)"
login_rc=$?
# shellcheck disable=SC2016 # expanded by the container's shell
tmux_out="$(timeout 60 "${KEY_SSH[@]}" proxima@127.0.0.1 'tmux new -d -s envcheck "printenv PROXIMA_TEST_ENV >/tmp/envcheck.tmp; mv /tmp/envcheck.tmp /tmp/envcheck.out" \
  && for i in $(seq 100); do [ -e /tmp/envcheck.out ] && break; sleep 0.1; done; cat /tmp/envcheck.out; rm -f /tmp/envcheck.out' 2>&1)"
tmux_rc=$?
secrets="$(timeout 60 "${KEY_SSH[@]}" proxima@127.0.0.1 'printenv JUPYTER_TOKEN; printenv SSH_AUTHORIZED_KEYS; printenv PIP_BREAK_SYSTEM_PACKAGES' 2>&1)"
set -e
expect_rc 0 "$rc" "ssh ... printenv PROXIMA_TEST_ENV" "$out"
expect_rc 0 "$login_rc" "printenv PROXIMA_TEST_ENV in an ssh login shell" "$login"
expect_rc 0 "$tmux_rc" "printenv PROXIMA_TEST_ENV in tmux started over ssh" "$tmux_out"
for got in "ssh host cmd:$out" "a login shell:$login" "tmux over ssh:$tmux_out"; do
  [[ "${got#*:}" == "$ENV_VALUE" ]] \
    || die "PROXIMA_TEST_ENV given with -e, in ${got%%:*}: got $(printf '%q' "${got#*:}"), expected $(printf '%q' "$ENV_VALUE")"
done
[[ "$secrets" == 1 ]] || die "over ssh, JUPYTER_TOKEN and SSH_AUTHORIZED_KEYS must be unset and PIP_BREAK_SYSTEM_PACKAGES=1 (the image's ENV): got $(printf '%q' "$secrets")"
# the files the entrypoint writes (Jupyter's own runtime files hold the token, mode 600, as anywhere)
# shellcheck disable=SC2016 # expanded by the container's sh
found="$(timeout 60 podman exec -e T="$TOKEN" "$PREFIX-main" sh -c \
  'test -s ~/.proxima-session-env || echo "no ~/.proxima-session-env"; grep -rlF -e "$T" ~/.proxima-session-env ~/.sshd; true' 2>&1)"
[[ -z "$found" ]] || die "the files the entrypoint writes for sshd and SSH sessions: $found (the token must not be written there)"
ok "ssh sessions (a command, a login shell, tmux) get a -e value with spaces, quotes and a newline as given, and the image's PIP_BREAK_SYSTEM_PACKAGES; not the token (nor in the files written for them) or the keys"

# A mounted authorized_keys is read at each login: a key taken out of it is refused at once, and a
# key put in works, without a restart (it was copied once at start, and a removed key stayed valid)
B_SSH=("${SSH[@]}" -o BatchMode=yes -o IdentitiesOnly=yes -i "$WORK/id_b" -p "$SSH_PORT")
C_SSH=("${SSH[@]}" -o BatchMode=yes -o IdentitiesOnly=yes -i "$WORK/id_c" -p "$SSH_PORT")
set +e
out="$(timeout 60 "${B_SSH[@]}" proxima@127.0.0.1 id -un 2>&1)"
rc=$?
set -e
expect_rc 0 "$rc" "ssh with key B, in the mounted authorized_keys" "$out"
cat "$WORK/id_c.pub" >"$WORK/keys/authorized_keys" # in place: a file bind mount keeps its inode
set +e
out="$(timeout 60 "${B_SSH[@]}" proxima@127.0.0.1 id -un 2>&1)"
rc=$?
c_out="$(timeout 60 "${C_SSH[@]}" proxima@127.0.0.1 id -un 2>&1)"
c_rc=$?
set -e
expect_rc 255 "$rc" "ssh with key B after it was taken out of the mounted authorized_keys" "$out"
grep -q 'Permission denied (publickey)' <<<"$out" || die "key B taken out of the mounted file: expected 'Permission denied (publickey)', got: $out"
expect_rc 0 "$c_rc" "ssh with key C, put into the mounted authorized_keys while the container runs" "$c_out"
[[ "$c_out" == proxima ]] || die "ssh with key C printed '$c_out', expected proxima"
ok "a key taken out of the mounted authorized_keys is refused at once, and one put in logs in, without a restart"
fingerprint="$(ssh-keygen -l -f "$WORK/known_hosts" | awk '{print $2}' | head -n1)"
main_log="$(podman logs "$PREFIX-main" 2>&1)"
grep -qF "$fingerprint" <<<"$main_log" \
  || die "the host key sshd showed ($fingerprint) is not among the fingerprints in the container log"
ok "the server's host key fingerprint is the one printed in the container log"

# The account gets a real password so that only sshd's settings can refuse it; the control below
# shows the same sshpass command does log in where password login is on.
podman exec --user 0 -e PW="$PASSWORD" "$PREFIX-main" sh -c 'echo "proxima:$PW" | chpasswd'
set +e
out="$(SSHPASS="$PASSWORD" timeout 60 "${PASSWORD_SSH[@]}" -p "$SSH_PORT" proxima@127.0.0.1 id -un 2>&1)"
rc=$?
set -e
expect_rc 255 "$rc" "password login as proxima" "$out"
grep -q 'Permission denied (publickey)' <<<"$out" || die "password login: expected 'Permission denied (publickey)', got: $out"
ok "password login (right password) refused: server offers publickey only"
set +e
out="$(timeout 60 "${KEY_SSH[@]}" root@127.0.0.1 id -un 2>&1)"
rc=$?
set -e
expect_rc 255 "$rc" "ssh as root with the authorized key" "$out"
grep -q 'Permission denied' <<<"$out" || die "root login: expected 'Permission denied', got: $out"
ok "root login with the authorized key refused"

# Control: the same image with sshd (as root) allowing passwords; the same command must get in.
# shellcheck disable=SC2016 # $PW and $PORT expand inside the container
timeout 120 podman run -d --name "$PREFIX-control" --network host --no-healthcheck --user 0 --entrypoint /bin/bash \
  -e PW="$PASSWORD" -e PORT="$CONTROL_PORT" "$IMAGE" -c '
    set -e; echo "proxima:$PW" | chpasswd; mkdir -p /run/sshd; ssh-keygen -q -A
    printf "Port %s\nListenAddress 127.0.0.1\nPasswordAuthentication yes\nPubkeyAuthentication no\nUsePAM no\nPermitRootLogin no\nAllowUsers proxima\n" "$PORT" >/tmp/sshd_control
    exec /usr/sbin/sshd -D -e -f /tmp/sshd_control' >/dev/null 2>>"$LOGS/podman-run.log" \
  || die "podman run of the control container failed; see $LOGS/podman-run.log"
wait_for "control sshd on 127.0.0.1:$CONTROL_PORT" 30 "$PREFIX-control" listening "$CONTROL_PORT"
set +e
out="$(SSHPASS="$PASSWORD" timeout 60 "${PASSWORD_SSH[@]}" -p "$CONTROL_PORT" proxima@127.0.0.1 id -un 2>&1)"
rc=$?
set -e
expect_rc 0 "$rc" "control: password login where sshd allows it" "$out"
[[ "$out" == proxima ]] || die "control: password login printed '$out', expected proxima"
ok "control: the same password command logs in when sshd allows passwords (the refusal is not empty)"
remove_containers "$PREFIX-control"

# ---- 5c. proxima inside: doctor, train into the volume, restart, resume ----------------------------
set +e
out="$(timeout 120 "${KEY_SSH[@]}" proxima@127.0.0.1 proxima doctor 2>&1)"
rc=$?
set -e
expect_rc 0 "$rc" "proxima doctor over ssh" "$out"
grep -Eq '^ +torch +2\.13\.0\+cpu' <<<"$out" || die "proxima doctor: no 'torch 2.13.0+cpu' line in: $out"
ok "proxima doctor runs inside (over ssh): torch 2.13.0+cpu"
# install advice in the image names the image's command (no .venv, no checkout there), and that
# command works as the user on Debian's Python (PEP 668) as on the pytorch base's conda
want="mujoco not installed: install it in this container with: pip install -c /usr/local/share/proxima/constraints.txt 'gymnasium[mujoco]<2,>=1.1'"
grep -qF "$want" <<<"$out" && ! grep -q '\.venv/bin/pip' <<<"$out" \
  || die "proxima doctor in the image: no hint '$want' (or one naming .venv): $(grep -i 'mujoco' <<<"$out" | tr '\n' ' ')"
hint="$(timeout 60 podman exec "$PREFIX-main" python -c 'from proxima.config import install_hint; print(install_hint("rlhf"))')"
command="${hint#install it in this container with: }"
[[ "$command" == "pip install -c /usr/local/share/proxima/constraints.txt "* ]] || die "install_hint in the image: '$hint'"
set +e
# PIP_NO_INDEX: the rlhf extra is installed, so the command must only find it satisfied, offline
out="$(timeout 120 podman exec -e PIP_NO_INDEX=1 "$PREFIX-main" bash -c "$command" 2>&1)"
rc=$?
control="$(timeout 120 podman exec -e PIP_NO_INDEX=1 "$PREFIX-main" env -u PIP_BREAK_SYSTEM_PACKAGES bash -c "$command" 2>&1)"
control_rc=$?
set -e
expect_rc 0 "$rc" "the install hint's command in the image ($command)" "$out"
grep -q 'Requirement already satisfied: transformers' <<<"$out" || die "the install hint's command: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
((control_rc != 0)) && grep -q 'externally-managed-environment' <<<"$control" \
  || die "control: without PIP_BREAK_SYSTEM_PACKAGES, Debian's pip should refuse (PEP 668); got exit $control_rc: $(tail -n 2 <<<"$control" | tr '\n' ' ')"
ok "install hints in the image name its pip command (doctor: mujoco), and the rlhf one runs as proxima (refused by PEP 668 without the image's PIP_BREAK_SYSTEM_PACKAGES)"

# The documented tmux line keeps the pane after an early failure, so attaching shows the error
set +e
out="$(timeout 60 "${KEY_SSH[@]}" proxima@127.0.0.1 "cd /workspace && tmux new -d -s early 'proxima train NoSuchEnv-v0; exec bash' \
  && for i in \$(seq 60); do tmux capture-pane -p -J -t early | grep -q NoSuchEnv-v0 && break; sleep 1; done; \
  tmux capture-pane -p -J -t early; tmux kill-session -t early" 2>&1)"
rc=$?
set -e
expect_rc 0 "$rc" "tmux new -d -s early 'proxima train NoSuchEnv-v0; exec bash' over ssh" "$out"
grep -q "^proxima train: error: unknown env id 'NoSuchEnv-v0'" <<<"$out" || die "the documented tmux line lost an early failure; the pane showed: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
ok "tmux new -d -s NAME 'proxima train ...; exec bash' (the README's line): an early failure stays readable in the pane"

t0=$SECONDS
set +e
out="$(timeout 600 podman exec "$PREFIX-main" proxima train CartPole-v1 --total-timesteps 20000 --quiet 2>&1)"
rc=$?
set -e
expect_rc 0 "$rc" "proxima train CartPole-v1 --total-timesteps 20000" "$out"
mapfile -t run_dirs < <(find "$WORK/runs" -mindepth 1 -maxdepth 1 -type d)
((${#run_dirs[@]} == 1)) || die "expected one run directory in the mounted runs/, found ${#run_dirs[@]}: ${run_dirs[*]}"
RUN="${run_dirs[0]}"
RUN_NAME="$(basename "$RUN")"
for f in config.yaml meta.json metrics.csv eval.json; do
  [[ -s "$RUN/$f" ]] || die "run directory $RUN_NAME on the host has no $f"
done
# read as the host user that matches the image's uid (1000), as the README tells users to set up
read_as_1000() { setpriv --reuid 1000 --regid 1000 --clear-groups "$@"; }
last_step="$(read_as_1000 tail -n 1 "$RUN/metrics.csv" | cut -d, -f2)"
batch=$(($(sed -n 's/^num_envs: //p' "$RUN/config.yaml") * $(sed -n 's/^num_steps: //p' "$RUN/config.yaml")))
((last_step > 20000 - batch && last_step <= 20000)) \
  || die "metrics.csv's last global step is $last_step, expected the last whole batch of $batch steps up to 20000"
checkpoint="$(find "$RUN/checkpoints" -name 'step_*.pt' | sort | tail -n 1)"
[[ "$(basename "$checkpoint")" == "$(printf 'step_%012d.pt' "$last_step")" ]] \
  || die "the last checkpoint is '$(basename "$checkpoint")', expected step_$(printf '%012d' "$last_step").pt"
read_as_1000 cat "$checkpoint" >/dev/null || die "$checkpoint is not readable by uid 1000 on the host"
ok "proxima train CartPole-v1 --total-timesteps 20000 ($((SECONDS - t0)) s) wrote runs/$RUN_NAME to the host (step $last_step, $(basename "$checkpoint"))"
run_commit="$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("git_commit"))' "$RUN/meta.json")"
[[ "$run_commit" == "$COMMIT" ]] || die "runs/$RUN_NAME/meta.json records git_commit $run_commit, expected the image's commit $COMMIT"
ok "the run's meta.json records the image's commit (${COMMIT:0:12}), not null"
# A command over ssh, and sftp (scp's protocol), start in /workspace as a login does: with the cd at
# the end of ~/.bashrc, below Debian's interactive-only return, the command ran in the home folder and
# a relative runs/ went with the container, without a word
set +e
out="$(timeout 120 "${KEY_SSH[@]}" proxima@127.0.0.1 'pwd; proxima train CartPole-v1 --run-dir runs/ssh-cwd --num-envs 2 --num-steps 16 \
  --num-minibatches 2 --update-epochs 1 --total-timesteps 32 --eval-episodes 0 --no-progress --threads 1 --quiet' 2>&1)"
rc=$?
sftp_out="$(timeout 60 sftp -F /dev/null -o UserKnownHostsFile="$WORK/known_hosts" -o StrictHostKeyChecking=accept-new \
  -o ConnectTimeout=10 -o LogLevel=ERROR -o IdentitiesOnly=yes -i "$WORK/id_ed25519" -P "$SSH_PORT" -b - proxima@127.0.0.1 <<<pwd 2>&1)"
sftp_rc=$?
set -e
expect_rc 0 "$rc" "ssh ... 'pwd; proxima train CartPole-v1 --run-dir runs/ssh-cwd ...'" "$out"
[[ "$(head -n 1 <<<"$out")" == /workspace ]] || die "a command over ssh runs in '$(head -n 1 <<<"$out")', expected /workspace (where the volumes are)"
[[ "$(tail -n 1 "$WORK/runs/ssh-cwd/metrics.csv" 2>/dev/null | cut -d, -f2)" == 32 ]] \
  && compgen -G "$WORK/runs/ssh-cwd/checkpoints/step_*.pt" >/dev/null \
  || die "proxima train --run-dir runs/ssh-cwd over ssh: no metrics.csv ending at step 32 and checkpoint in the host's runs/ssh-cwd"
expect_rc 0 "$sftp_rc" "sftp -b - <<<pwd" "$sftp_out"
grep -qx 'Remote working directory: /workspace' <<<"$sftp_out" || die "sftp starts in another folder than /workspace: $(tr '\n' ' ' <<<"$sftp_out")"
ok "ssh host 'pwd; proxima train --run-dir runs/ssh-cwd ...' runs in /workspace, its run lands in the host's runs/; sftp starts there too"

timeout 120 podman restart -t 20 "$PREFIX-main" >/dev/null 2>>"$LOGS/podman-run.log" \
  || die "podman restart $PREFIX-main failed; see $LOGS/podman-run.log"
wait_for "Jupyter after the restart" 120 "$PREFIX-main" jupyter_up
wait_for "sshd after the restart" 30 "$PREFIX-main" listening "$SSH_PORT"
set +e
out="$(timeout 60 "${KEY_SSH[@]}" -o StrictHostKeyChecking=yes proxima@127.0.0.1 "cd /workspace && ls runs" 2>&1)"
rc=$?
set -e
expect_rc 0 "$rc" "ssh after the restart (same host key)" "$out"
grep -qx "$RUN_NAME" <<<"$out" || die "after the restart, /workspace/runs does not list $RUN_NAME: $out"
ok "after a container restart: Jupyter and ssh (same host key) answer, runs/$RUN_NAME is there"

eval_before="$(stat -c %Y "$RUN/eval.json")"
sleep 1
set +e
# --eval-episodes 3: another evaluation than the one on disk (a complete run resumed with the same
# settings shows eval.json's and writes nothing), so the restarted container must evaluate the policy
out="$(timeout 600 podman exec "$PREFIX-main" proxima resume "runs/$RUN_NAME" --eval-episodes 3 2>&1)"
rc=$?
set -e
expect_rc 0 "$rc" "proxima resume runs/$RUN_NAME --eval-episodes 3" "$out"
# a complete run trains nothing: its note names the checkpoint loaded (no "resuming at step N" line)
grep -q "$RUN_NAME/checkpoints/step_.*: the run is complete ($("$PY" -c "print(f'{$last_step:,}')") steps)" <<<"$out" \
  || die "proxima resume: no '... the run is complete ($last_step steps)' note: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
(("$(stat -c %Y "$RUN/eval.json")" > eval_before)) || die "proxima resume --eval-episodes 3 did not evaluate again (eval.json unchanged)"
grep -q '"episodes": 3' "$RUN/eval.json" || die "proxima resume --eval-episodes 3: eval.json does not hold 3 episodes"
ok "proxima resume runs/$RUN_NAME inside the restarted container: loaded step $last_step, evaluated again (3 episodes)"

# ---- 5d. the CI loop (make ci-train) on this image: a short run below and above a threshold ------
# configuration errors: exit 2 with one line, before any training (no run directory appears)
for case in "CI_MIN_RETURN=abc:CI_MIN_RETURN='abc' is not a number" \
  "CI_ENV=Pendulum-v1:Pendulum-v1 has no reward_threshold registered with Gymnasium; set CI_MIN_RETURN"; do
  setting="${case%%:*}" want="${case#*:}"
  set +e
  out="$(env "$setting" CI_OUT="$WORK/ci-error" IMAGE="$IMAGE" timeout 300 bash docker/ci_train.sh 2>&1)"
  rc=$?
  set -e
  expect_rc 2 "$rc" "make ci-train with $setting" "$out"
  [[ "$(grep -c '^ci-train:' <<<"$out")" == 1 ]] && grep -q "^ci-train: error: $want" <<<"$out" && ! grep -q Traceback <<<"$out" \
    || die "make ci-train with $setting: expected one line 'ci-train: error: $want...', got: $out"
  [[ -z "$(find "$WORK/ci-error" -mindepth 1 -maxdepth 1 2>/dev/null)" ]] || die "make ci-train with $setting started a run"
done
ok "make ci-train: a non-numeric CI_MIN_RETURN and an env without a threshold exit 2 with one line, before training"
# CI_OUT naming a folder of someone else's that holds files (CI_OUT=., /tmp): refused, not chowned
mkdir -m 755 "$WORK/ci-notmine"
touch "$WORK/ci-notmine/keep"
set +e
out="$(CI_OUT="$WORK/ci-notmine" CI_MIN_RETURN=5 IMAGE="$IMAGE" timeout 300 bash docker/ci_train.sh 2>&1)"
rc=$?
set -e
expect_rc 2 "$rc" "make ci-train with CI_OUT a root-owned folder holding files" "$out"
[[ "$(grep -c '^ci-train:' <<<"$out")" == 1 ]] \
  && grep -q "^ci-train: error: CI_OUT=$WORK/ci-notmine holds files and is owned by uid 0, not the image's user (uid 1000)" <<<"$out" \
  && [[ "$(stat -c %u "$WORK/ci-notmine")" == 0 ]] \
  || die "make ci-train with CI_OUT a root-owned folder holding files: expected one line 'ci-train: error: CI_OUT=... holds files and is owned by uid 0 ...' and the folder still root's (uid $(stat -c %u "$WORK/ci-notmine")), got: $out"
ok "make ci-train refuses a CI_OUT of another owner that holds files (exit 2, one line) and leaves its owner as it was"
for want in fail pass; do
  threshold=$([[ "$want" == pass ]] && echo 5 || echo "")
  set +e
  out="$(CI_OUT="$WORK/ci-$want" CI_TRAIN_ARGS="--total-timesteps 2048" CI_MIN_RETURN="$threshold" IMAGE="$IMAGE" \
    timeout 600 bash docker/ci_train.sh 2>&1)"
  rc=$?
  set -e
  report="$(find "$WORK/ci-$want" -name report.md | head -n 1)"
  [[ -n "$report" ]] || die "make ci-train ($want): no report.md in the volume; output: $(tail -n 5 <<<"$out" | tr '\n' ' ')"
  if [[ "$want" == fail ]]; then
    expect_rc 1 "$rc" "make ci-train below CartPole-v1's threshold 475" "$out"
    grep -q 'threshold 475' "$report" && grep -q 'FAIL' "$report" || die "ci-train report.md has no FAIL verdict against 475"
    ok "make ci-train after 2048 steps: exit 1, report.md says FAIL against CartPole-v1's threshold 475"
  else
    expect_rc 0 "$rc" "make ci-train with CI_MIN_RETURN=5" "$out"
    grep -q 'PASS' "$report" || die "ci-train report.md has no PASS verdict"
    ok "make ci-train with CI_MIN_RETURN=5: exit 0, report.md says PASS"
  fi
done

# ---- 5e. stopping the container stops every training run with a checkpoint ----------------------
# docker/podman stop sends SIGTERM to process 1 (tini), which passes it to the entrypoint only; the
# entrypoint passes it to every process of the user and waits for them, so runs started in tmux (over
# SSH, as the README says) and with podman exec write a checkpoint and exit 143, not SIGKILLed.
# One is a shell around proxima (`...; echo`): that shell dying first must not hang up its terminal.
# The other is the README's form, proxima leading its pane's session. Both run Gymnasium's
# AsyncVectorEnv (CartPole's default backend is the native one, which has no workers): its env
# workers are proxima's to stop (a SIGTERM of their own would kill them inside the iteration proxima
# finishes to write its checkpoint), also when they share proxima's session.
long=(--total-timesteps 5000000 --threads 1 --quiet)
async=(--backend gymnasium --vector async --num-envs 2)
set +e
out="$(timeout 60 "${KEY_SSH[@]}" proxima@127.0.0.1 "cd /workspace && tmux new -d -s train \
'proxima train CartPole-v1 --run-dir runs/stop-tmux ${async[*]} ${long[*]} 2>runs/stop-tmux.err; echo \"exit status \$?\" >>runs/stop-tmux.err' \
&& tmux new -d -s pane 'exec proxima train CartPole-v1 --run-dir runs/stop-pane ${async[*]} ${long[*]} 2>runs/stop-pane.err'" 2>&1)"
rc=$?
set -e
expect_rc 0 "$rc" "tmux new -d -s train 'proxima train ...' and tmux new -d -s pane 'exec proxima train ...' over ssh" "$out"
timeout 900 podman exec "$PREFIX-main" proxima train CartPole-v1 --run-dir runs/stop-exec "${long[@]}" \
  >"$WORK/stop-exec.out" 2>&1 &
exec_pid=$!
# ... and proxima.train() in a notebook kernel of the container's JupyterLab (started through its API,
# the code sent with jupyter_client from inside): the kernel lives on after its run stopped, and the
# stop must not wait out its grace (45 s) for it once the checkpoint is written
kernel_id="$(curl -s --max-time 30 -X POST -H "Authorization: token $TOKEN" "http://127.0.0.1:$JUPYTER_PORT/api/kernels" \
  | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["id"])')" || die "cannot start a kernel through Jupyter's /api/kernels"
kernel_code='import os, proxima
os.chdir("/workspace")
open("runs/stop-kernel.pid", "w").write(str(os.getpid()))
try:
    proxima.train(proxima.PPOConfig(env_id="CartPole-v1", total_timesteps=4_999_680, threads=1), run_dir="runs/stop-kernel", quiet=True)
except BaseException as e:
    open("runs/stop-kernel.out", "w").write(f"train raised {type(e).__name__}: {e}\n")
    raise'
set +e
out="$(timeout 120 podman exec -e KERNEL_ID="$kernel_id" -e CODE="$kernel_code" "$PREFIX-main" python -c '
import os, time
from jupyter_client import BlockingKernelClient
from jupyter_core.paths import jupyter_runtime_dir
c = BlockingKernelClient(connection_file=os.path.join(jupyter_runtime_dir(), "kernel-%s.json" % os.environ["KERNEL_ID"]))
c.load_connection_file()
c.start_channels()
c.wait_for_ready(timeout=60)
c.execute(os.environ["CODE"])
for _ in range(600):  # until the kernel runs it (its first line): the message is sent by then
    if os.path.exists("/workspace/runs/stop-kernel.pid"):
        break
    time.sleep(0.1)
else:
    raise SystemExit("the kernel did not run the code")
' 2>&1)"
rc=$?
set -e
expect_rc 0 "$rc" "proxima.train() sent to a Jupyter kernel" "$out"
# ... and make ci-train, stopped from the host (SIGTERM to the script, as a CI job's cancel does)
CI_OUT="$WORK/ci-stop" CI_TRAIN_ARGS="${long[*]}" CI_MIN_RETURN=5 IMAGE="$IMAGE" \
  timeout 900 bash docker/ci_train.sh >"$WORK/ci-stop.out" 2>&1 &
CI_PID=$!
training() { [[ -s "$WORK/runs/$1/metrics.csv" ]] && (($(wc -l <"$WORK/runs/$1/metrics.csv") >= 3)); }
ci_training() {
  local metrics
  metrics="$(compgen -G "$WORK/ci-stop/ci-*/metrics.csv" | head -n 1)"
  [[ -s "$metrics" ]] && (($(wc -l <"$metrics") >= 3))
}
wait_for "the run in tmux" 180 "$PREFIX-main" training stop-tmux
wait_for "the run leading its tmux pane" 180 "$PREFIX-main" training stop-pane
wait_for "the run under podman exec" 180 "$PREFIX-main" training stop-exec
wait_for "proxima.train() in a Jupyter kernel" 180 "$PREFIX-main" training stop-kernel
for ((i = 0; i < 180; i++)); do ci_training && break; kill -0 "$CI_PID" 2>/dev/null || break; sleep 1; done
ci_training || die "make ci-train did not start training: $(tail -n 3 "$WORK/ci-stop.out" | tr '\n' ' ')"
# The container's proxima processes, "PID PPID": the three trainers, and the env workers of the two
# --vector async runs (forked, so named proxima too, their parent a trainer). Whether a SIGTERM to a
# worker loses the checkpoint depends on where in the iteration it lands; whom the entrypoint signals
# does not, so that is checked below, against this list.
# shellcheck disable=SC2016 # expanded by the container's sh
tree="$(timeout 60 podman exec "$PREFIX-main" sh -c 'for s in /proc/[0-9]*/stat; do
  read -r pid comm state ppid _ 2>/dev/null <"$s" && [ "$comm" = "(proxima)" ] && [ "$state" != Z ] && echo "$pid $ppid"
done; true' 2>>"$LOGS/podman-run.log")" || die "podman exec: cannot list the processes in $PREFIX-main; see $LOGS/podman-run.log"
declare -A is_proxima=()
trainers=() workers=()
while read -r pid ppid; do [[ -z "$pid" ]] || is_proxima[$pid]=1; done <<<"$tree"
while read -r pid ppid; do
  [[ -n "$pid" ]] || continue
  if [[ -n "${is_proxima[$ppid]:-}" ]]; then workers+=("$pid"); else trainers+=("$pid"); fi
done <<<"$tree"
((${#trainers[@]} == 3 && ${#workers[@]} >= 4)) \
  || die "expected 3 proxima trainers and at least 4 env workers in $PREFIX-main before the stop; PID PPID: $(tr '\n' ',' <<<"$tree")"
t0=$SECONDS
kill -TERM "$CI_PID"
timeout 120 podman stop -t 60 "$PREFIX-main" >/dev/null 2>>"$LOGS/podman-run.log" || die "podman stop $PREFIX-main failed"
stop_s=$((SECONDS - t0))
state="$(podman inspect -f '{{.State.ExitCode}}' "$PREFIX-main")"
[[ "$state" != 137 ]] && ((stop_s < 60)) || die "podman stop took $stop_s s and the container exited $state: it was SIGKILLed"
set +e
wait "$exec_pid"
exec_rc=$?
wait "$CI_PID"
ci_rc=$?
set -e
CI_PID=""
podman logs "$PREFIX-main" >"$LOGS/main.log" 2>&1 || true
wave="$({ grep '^proxima-entrypoint: SIGTERM: SIGTERM to ' "$LOGS/main.log" || true; } | tail -n 1)"
held="$({ grep '^proxima-entrypoint: SIGTERM: held back ' "$LOGS/main.log" || true; } | tail -n 1)"
# PROXIMA_STOP_DEBUG=1: which rule placed each process, so that a failure here says why a trainer was left out
sorted="$({ grep '^proxima-entrypoint: SIGTERM: sorted:' "$LOGS/main.log" || true; } | tail -n 1)"
signalled="$({ grep -Eo '[0-9]+ \(proxima\)' <<<"$wave" || true; } | cut -d' ' -f1 | sort -n | paste -sd' ' -)"
want="$(printf '%s\n' "${trainers[@]}" | sort -n | paste -sd' ' -)"
[[ "$signalled" == "$want" ]] \
  || die "the stop's first SIGTERM reached proxima processes ${signalled:-none}; expected the trainers $want only, not their env workers ${workers[*]}: $wave${held:+ ($held)}${sorted:+ ($sorted)}; the container's log: $LOGS/main.log"
ok "the stop's first SIGTERM went to the 3 trainers and none of their ${#workers[@]} env workers (each trainer stops its own)"
for run in stop-tmux stop-pane stop-exec; do
  err="$WORK/runs/$run.err"
  [[ "$run" == stop-exec ]] && err="$WORK/stop-exec.out"
  line="$(grep -m1 'proxima: stopped by SIGTERM; checkpoint: ' "$err" || true)"
  [[ -n "$line" ]] || die "$run: no 'proxima: stopped by SIGTERM; checkpoint: ...' line; its output: $(tail -n 3 "$err" | tr '\n' ' ')"
  checkpoint="${line#*checkpoint: }"
  checkpoint="${checkpoint%%;*}"
  [[ -s "$WORK/$checkpoint" ]] || die "$run: the checkpoint it names, $checkpoint, is not on the host"
done
grep -qx 'exit status 143' "$WORK/runs/stop-tmux.err" || die "the run in tmux: $(tail -n 1 "$WORK/runs/stop-tmux.err"), expected exit status 143"
((exec_rc == 143)) || die "the run under podman exec exited $exec_rc, expected 143"
grep -q '^proxima-entrypoint: SIGTERM: SIGTERM to .*(proxima)' <(podman logs "$PREFIX-main" 2>&1) \
  || die "the container log has no 'proxima-entrypoint: SIGTERM: SIGTERM to ... (proxima)' line"
ok "podman stop during three training runs (two in tmux over ssh with --vector async, one with podman exec): each wrote a checkpoint and said 'stopped by SIGTERM', exit 143 where seen (stop took $stop_s s)"
# The kernel took the SIGTERM (its run wrote a checkpoint) and lived on: the stop ended it about 2 s
# later with the SIGTERM to every process, instead of waiting out PROXIMA_STOP_GRACE (45 s)
line="$(grep -m1 '^train raised TrainingInterrupted: stopped by SIGTERM; checkpoint: ' "$WORK/runs/stop-kernel.out" 2>/dev/null || true)"
[[ -n "$line" ]] || die "proxima.train() in a Jupyter kernel: no 'train raised TrainingInterrupted: stopped by SIGTERM; checkpoint: ...' in runs/stop-kernel.out: $(cat "$WORK/runs/stop-kernel.out" 2>&1 | tail -n 3 | tr '\n' ' ')"
checkpoint="${line#*checkpoint: }"
checkpoint="${checkpoint%%;*}"
[[ -s "$WORK/$checkpoint" ]] || die "proxima.train() in a Jupyter kernel: the checkpoint it names, $checkpoint, is not on the host"
kernel_pid="$(cat "$WORK/runs/stop-kernel.pid")"
still="$(grep 'still running after' "$LOGS/main.log" || true)"
[[ -z "$still" ]] && grep -q "^proxima-entrypoint: SIGTERM: $kernel_pid ([^)]*): Jupyter kernel that took the SIGTERM and lives on" "$LOGS/main.log" \
  && ((stop_s < 45)) \
  || die "the stop waited for the Jupyter kernel whose run had stopped (stop took $stop_s s): ${still:-no line naming kernel $kernel_pid as one that took the SIGTERM and lives on}; the container's log: $LOGS/main.log"
ok "proxima.train() in a Jupyter kernel: checkpoint written; the kernel, living on, was not waited for (stop took $stop_s s, grace 45 s)"
# sshd starts a session from a fresh environment: the image's commit reaches it only through the
# SetEnv line the entrypoint writes, and tmux's sessions inherit it from there
for run in stop-tmux stop-pane; do
  run_commit="$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("git_commit"))' "$WORK/runs/$run/meta.json" 2>&1)" \
    || die "cannot read git_commit from runs/$run/meta.json: $run_commit"
  [[ "$run_commit" == "$COMMIT" ]] \
    || die "runs/$run/meta.json (started in tmux over ssh) records git_commit $run_commit, expected the image's commit $COMMIT"
done
ok "the runs started in tmux over ssh record the image's commit (${COMMIT:0:12}) in meta.json, not null"
ci_out="$(cat "$WORK/ci-stop.out")"
expect_rc 2 "$ci_rc" "make ci-train stopped by SIGTERM" "$ci_out"
grep -q '^ci-train: stopped by SIGTERM during proxima train (exit 143)' <<<"$ci_out" \
  && grep -q '^ci-train: error: stopped before a verdict (exit 143)' <<<"$ci_out" \
  && compgen -G "$WORK/ci-stop/ci-*/checkpoints/step_*.pt" >/dev/null \
  || die "make ci-train stopped by SIGTERM: expected its run's checkpoint and the 'stopped by SIGTERM' lines, got: $(tail -n 4 <<<"$ci_out" | tr '\n' ' ')"
ok "make ci-train stopped by SIGTERM: its run wrote a checkpoint, exit 2 with 'stopped before a verdict'"
