#!/usr/bin/env bash
# Proxima container entrypoint (runs under tini, as the unprivileged user).
#
#   1. refuses to start when JUPYTER_TOKEN is empty, unset or shorter than 16 characters (an open or
#      guessable Jupyter is a shell for anyone); then as root or as a uid other than the image's user
#      (--user 1234: no passwd entry, a home it cannot write), and when /workspace/runs is not writable
#      (a host folder Docker created for the mount is root's): one line each (checkpoints/ and
#      notebooks/ not writable: a note, they may be read-only on purpose);
#   2. starts a key-only sshd on $SSH_PORT (default 2222) when authorized keys are provided, from
#      /run/secrets/authorized_keys, a mounted ~/.ssh/authorized_keys, or $SSH_AUTHORIZED_KEYS;
#      the mounted files are read again at each login (sshd's AuthorizedKeysCommand is this script,
#      --print-authorized-keys), so a key removed from them is refused without a restart;
#      host keys are generated here, at start, never baked into the image (kept in $PROXIMA_SSHD_DIR,
#      default ~/.sshd: a volume there keeps them across containers); the container's environment,
#      secrets aside, is recorded for SSH sessions (write_session_env); it is said to be started
#      once it listens (a port it cannot bind stops the container, exit 1);
#   3. runs JupyterLab on $JUPYTER_PORT (default 8888, and no other: a port in use stops it at start;
#      token read from $JUPYTER_TOKEN), or the given command, and stays as its parent to stop the
#      container gracefully (4);
#   4. on SIGTERM (docker/podman stop, compose down) or when that command ends: SIGTERM to every process
#      of this user, so a training run started anywhere (tmux, docker exec, SSH, a Jupyter terminal,
#      ci_train.sh) writes its checkpoint and exits 143 (its own workers, e.g. --vector async's, are
#      left to it: see collect_first_wave); waits up to $PROXIMA_STOP_GRACE seconds (default 45)
#      for them (not for a Jupyter kernel at rest after its proxima.train() stopped: see
#      wait_gone), then stops the servers and exits. tini forwards signals to this script only, and
#      everything still running when it exits is SIGKILLed by the kernel: give the engine a stop
#      timeout above the grace (docker stop -t 60, compose's stop_grace_period: 60s).
# Both servers listen on $PROXIMA_LISTEN_ADDRESS (default 0.0.0.0: every address of the container's
# own network namespace, which `-p 127.0.0.1:...` publishes on the host's loopback only). With
# `--network host`, set it to 127.0.0.1 and pick free ports with JUPYTER_PORT and SSH_PORT.
#
# PROXIMA_ENTRYPOINT_DRY_RUN=1 does everything except launching sshd and Jupyter (used by tests).
set -euo pipefail

log() { printf 'proxima-entrypoint: %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# sshd's AuthorizedKeysCommand (start_sshd): print the mounted key files as they are now, at each
# login, so that a key removed from them is refused at once (a copy made at start kept it working
# until a restart). sshd runs it with a bare environment, without JUPYTER_TOKEN: before that check.
if [[ "${1:-}" == --print-authorized-keys ]]; then
  shift
  for f in "$@"; do
    [[ -f "$f" && -r "$f" ]] || continue
    cat -- "$f" || true
    printf '\n'
  done
  exit 0
fi

# ---- 1. the token comes first: nothing is started or written before this check ---------------
if [[ -z "${JUPYTER_TOKEN:-}" ]]; then
  die "JUPYTER_TOKEN is empty or unset; refusing to start JupyterLab without a token (e.g. export JUPYTER_TOKEN=\$(openssl rand -hex 24))"
fi
if [[ "${JUPYTER_TOKEN}" =~ [[:space:]] ]]; then
  die "JUPYTER_TOKEN contains whitespace; use a plain random string (e.g. openssl rand -hex 24)"
fi
if ((${#JUPYTER_TOKEN} < 16)); then
  die "JUPYTER_TOKEN is shorter than 16 characters; refusing to start JupyterLab with a guessable token (e.g. export JUPYTER_TOKEN=\$(openssl rand -hex 24))"
fi

DRY_RUN="${PROXIMA_ENTRYPOINT_DRY_RUN:-0}"
SSHD="${PROXIMA_SSHD:-/usr/sbin/sshd}"
SSH_PORT="${SSH_PORT:-2222}"
JUPYTER_PORT="${JUPYTER_PORT:-8888}"
LISTEN_ADDRESS="${PROXIMA_LISTEN_ADDRESS:-0.0.0.0}"
NOTEBOOK_DIR="${PROXIMA_NOTEBOOK_DIR:-/workspace}"
KEYS_SECRET="${SSH_AUTHORIZED_KEYS_FILE:-/run/secrets/authorized_keys}"
WORKSPACE="${PROXIMA_WORKSPACE:-/workspace}"
HOME="${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}"
SSHD_DIR="${PROXIMA_SSHD_DIR:-$HOME/.sshd}"
MY_UID="$(id -u)"
MY_GID="$(id -g)"

if [[ "$MY_UID" == 0 && "$DRY_RUN" != 1 ]]; then
  die "running as root; this image runs as the unprivileged user 'proxima' (do not pass --user 0 / user: root)"
fi
# Another uid (--user 1234, compose's user:) has no passwd entry and owns neither the home nor
# /workspace: Jupyter, sshd and `id -un` would each fail later with a traceback of their own.
IMAGE_USER="${PROXIMA_USER:-proxima}"
if IMAGE_IDS="$(getent passwd "$IMAGE_USER" | cut -d: -f3,4)" && [[ -n "$IMAGE_IDS" ]] \
  && [[ "$MY_UID" != 0 && "$MY_UID" != "${IMAGE_IDS%%:*}" ]]; then
  die "running as uid $MY_UID (--user, or compose's user:), but this image's user is $IMAGE_USER, uid ${IMAGE_IDS%%:*}: leave out --user, or rebuild the image with --build-arg PROXIMA_UID=$MY_UID --build-arg PROXIMA_GID=$MY_GID (docker/README.md), or with rootless podman run with --userns=keep-id:uid=${IMAGE_IDS%%:*},gid=${IMAGE_IDS#*:}"
fi
USER_NAME="$(id -un)"

# is_mount_point DIR: something is mounted at DIR (a volume), as /proc/self/mountinfo says (its
# fifth field is the mount point): no findmnt or mountpoint needed in the image
is_mount_point() {
  local mnt
  while read -r _ _ _ _ mnt _; do
    [[ "$mnt" == "$1" ]] && return 0
  done 2>/dev/null </proc/self/mountinfo
  return 1
}

# The folders work is kept in: a run that cannot write runs/ fails later with an error that blames
# its lock file, and Jupyter would refuse to save a notebook only when it is saved.
for dir in "$WORKSPACE/runs" "$WORKSPACE/checkpoints" "$WORKSPACE/notebooks"; do
  [[ -d "$dir" && (! -w "$dir" || ! -x "$dir") ]] || continue
  read -r owner group mode < <(stat -L -c '%u %g %a' "$dir")
  if [[ "$owner" == "$MY_UID" ]] && (((8#$mode >> 6 & 3) == 3)); then
    # its owner may write and enter it, and cannot: the file system is read-only (EROFS), which no
    # chmod on the host changes
    if is_mount_point "$dir"; then
      fix="the folder mounted there is mounted read-only (:ro, or a read-only volume): mount it read-write"
    else
      fix="nothing is mounted there and the container's own file system is read-only (--read-only): mount a host folder there, e.g. -v \"\$PWD/${dir##*/}:$dir\" (docker/README.md)"
    fi
  elif [[ "$owner" == "$MY_UID" ]]; then
    fix="mount it read-write and give its owner write permission (on the host: chmod u+rwx on the folder mounted there)"
  else
    # uid 0 is no uid to rebuild with (the build refuses it): a folder Docker made for the mount
    fix="on the host, give the folder mounted there to uid $MY_UID: sudo chown $MY_UID:$MY_GID ${dir##*/}"
    [[ "$owner" == 0 ]] || fix+=", or rebuild the image with --build-arg PROXIMA_UID=$owner --build-arg PROXIMA_GID=$group"
    fix+="; with rootless podman run with --userns=keep-id:uid=$MY_UID,gid=$MY_GID"
  fi
  line="$dir is not writable by $USER_NAME (uid $MY_UID): it is owned by uid $owner, gid $group, mode $mode; $fix"
  # runs/ is where every run writes; checkpoints/ and notebooks/ may be read-only on purpose (a
  # mounted set of checkpoints to evaluate): a note, and the container starts
  [[ "$dir" == "$WORKSPACE/runs" ]] && die "$line"
  log "note: $line (fine if it is read-only on purpose)"
done

# proc_field PID KEY: FIELD = the first word of KEY (State, Uid, SigIgn...) in /proc/PID/status
# (no subshell: these run for every process, every half second while waiting). The file is taken in
# one read (mapfile), never line by line: bash's `read` seeks back after each line of a file, and /proc
# writes the file anew at each seek, so each line came from a later version, at an offset of the
# earlier ones. A busy process's State going from "S (sleeping)" to "R (running)", one character
# shorter, between two lines had a later line read as "igCgt:" (1 read in 6 of a busy process's
# SigCgt): its trainer seemed to have no SIGTERM handler and an env worker was put in a stop's first
# wave (the container check caught one in CI), or a PPid or Uid went unread the same way.
FIELD=""
proc_field() {
  local line
  local -a lines
  FIELD=""
  mapfile -t lines 2>/dev/null <"/proc/$1/status" || return 1
  for line in "${lines[@]}"; do
    if [[ "$line" =~ ^$2:[[:space:]]+([^[:space:]]+) ]]; then
      FIELD="${BASH_REMATCH[1]}"
      return 0
    fi
  done
  return 1
}
# alive PID: the process exists and is not a zombie
alive() {
  proc_field "$1" State && [[ "$FIELD" != Z ]]
}
# listens PID PORT: 0 when PID holds a listening TCP socket on PORT, 1 when it does not (yet), 2 when
# /proc cannot tell (its net tables or PID's descriptors unreadable). From /proc: no ss in the image.
listens() {
  local pid="$1" suffix f addr st inode fd link readable=0
  local -A inodes=()
  [[ "$2" =~ ^[0-9]+$ ]] || return 2
  printf -v suffix ':%04X' "$2"
  for f in /proc/net/tcp /proc/net/tcp6; do
    [[ -r "$f" ]] || continue
    readable=1
    # sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...; st 0A is LISTEN
    while read -r _ addr _ st _ _ _ _ _ inode _; do
      [[ "$st" == 0A && "$addr" == *"$suffix" ]] && inodes[$inode]=1
    done <"$f"
  done
  [[ "$readable" == 1 && -r "/proc/$pid/fd" ]] || return 2
  ((${#inodes[@]})) || return 1
  for fd in "/proc/$pid/fd/"*; do
    link="$(readlink "$fd" 2>/dev/null)" || continue
    [[ "$link" == "socket:["*"]" && -n "${inodes[${link:8:-1}]:-}" ]] && return 0
  done
  return 1
}

# ---- 2. key-only sshd, as this user, on an unprivileged port -----------------------------------
collect_keys() {
  local f
  for f in "$KEYS_SECRET" "$HOME/.ssh/authorized_keys"; do
    if [[ -f "$f" && -r "$f" ]]; then
      cat "$f"
      printf '\n'
    fi
  done
  if [[ -n "${SSH_AUTHORIZED_KEYS:-}" ]]; then
    printf '%s\n' "$SSH_AUTHORIZED_KEYS"
  fi
}

# A key file that is mounted but cannot be read would otherwise be skipped in silence (and the log
# would say that no key was given): stop, naming the file, its owner and mode.
check_key_files() {
  local f
  for f in "$KEYS_SECRET" "$HOME/.ssh/authorized_keys"; do
    [[ -e "$f" || -L "$f" ]] || continue
    if [[ -d "$f" ]]; then
      die "SSH key file $f is a directory (Docker creates one when the host file to mount does not exist): mount the public key file itself"
    fi
    if [[ ! -f "$f" || ! -r "$f" ]]; then
      die "SSH key file $f is not readable by $USER_NAME (uid $(id -u)): it is owned by $(stat -L -c '%U:%G (uid %u, gid %g), mode %a' "$f" 2>/dev/null || echo 'an unknown user (broken link?)'); make it readable by uid $(id -u) on the host (a public key is not secret: chmod 644), or with rootless podman run with --userns=keep-id:uid=$(id -u),gid=$(id -g)"
    fi
  done
}

# write_session_env FILE: the container's environment as shell lines (export NAME='value', POSIX
# quoting: spaces, quotes and newlines survive) for SSH sessions, which sshd starts from a fresh
# environment (UsePAM no): -e CUDA_VISIBLE_DEVICES, HF_HOME, a W&B key, and the image's own ENV
# (PIP_BREAK_SYSTEM_PACKAGES, the CUDA base's LD_LIBRARY_PATH) would be lost over SSH, and in tmux
# started from there. /etc/profile.d/proxima-env.sh (the Dockerfile) reads it once per SSH session.
# Left out: the secrets (the token; the keys, which need not follow anyone around), what each
# session or shell sets for itself (HOME, TERM, SSH_*, ...), and bash's read-only variables.
write_session_env() {
  local name quote="'\\''"
  for name in $(compgen -e); do
    case "$name" in
      JUPYTER_TOKEN | SSH_AUTHORIZED_KEYS) continue ;;
      HOME | HOSTNAME | PWD | OLDPWD | SHLVL | _ | TERM | USER | LOGNAME | MAIL | SHELL | TMUX | TMUX_PANE) continue ;;
      SSH_CLIENT | SSH_CONNECTION | SSH_TTY | SSH_AUTH_SOCK | SSH_ORIGINAL_COMMAND | PROXIMA_SSH_ENV_LOADED) continue ;;
      BASH* | SHELLOPTS | UID | EUID | PPID) continue ;;
    esac
    printf "export %s='%s'\n" "$name" "${!name//\'/$quote}"
  done >"$1"
  # the first shell of a session loads it; the shells and tmux servers under it inherit instead, so
  # an `export` typed in the session is not undone by the next one
  printf 'export PROXIMA_SSH_ENV_LOADED=1\n' >>"$1"
  # the umask made a new file 600; one left by an earlier start keeps its mode unless set here
  chmod 600 "$1"
}

start_sshd() {
  local keys ak cfg t old_umask self path
  check_key_files
  keys="$(collect_keys | grep -Ev '^[[:space:]]*(#|$)' || true)"
  if [[ -z "$keys" ]]; then
    log "no SSH public keys (mount /run/secrets/authorized_keys or ~/.ssh/authorized_keys, or set SSH_AUTHORIZED_KEYS); sshd not started"
    return 0
  fi
  # sshd_config takes these unquoted, and AuthorizedKeysCommand's words expand % tokens
  self="$(readlink -f "$0")"
  for path in "$SSHD_DIR" "$KEYS_SECRET" "$HOME" "$self"; do
    [[ "$path" =~ ^/[A-Za-z0-9._/-]+$ ]] \
      || die "path '$path' (PROXIMA_SSHD_DIR, SSH_AUTHORIZED_KEYS_FILE, HOME or this script) goes into sshd's config: use only letters, digits and . _ / -"
  done

  old_umask="$(umask)"
  umask 077 # only for the sshd files; restored below so notebooks and runs keep normal modes
  # a volume there keeps the host keys (docker/README.md); one this user cannot write, or the
  # container's own file system under --read-only, would fail below with mkdir's or chmod's words
  if ! mkdir -p "$SSHD_DIR" 2>/dev/null || ! chmod 700 "$SSHD_DIR" 2>/dev/null || [[ ! -w "$SSHD_DIR" ]]; then
    die "$SSHD_DIR (sshd's host keys and settings) is not writable by $USER_NAME (uid $MY_UID)$(stat -L -c ': owned by uid %u, gid %g, mode %a' "$SSHD_DIR" 2>/dev/null || true); mount a volume there that uid $MY_UID can write (e.g. -v proxima-sshd:$SSHD_DIR), which also keeps the host keys (with --read-only, mount one at $HOME: docker/README.md)"
  fi
  # each line on its own: ssh-keygen -l accepts a file in which any one line parses, so a mistyped
  # second key would otherwise be dropped silently
  local line n=0 one="$SSHD_DIR/one_key.pub"
  while IFS= read -r line; do
    n=$((n + 1))
    printf '%s\n' "$line" >"$one"
    if ! ssh-keygen -l -f "$one" >/dev/null 2>&1; then
      rm -f "$one"
      die "SSH key line ${n} is not a valid public key (expected lines like 'ssh-ed25519 AAAA... comment'): ${line:0:40}"
    fi
  done <<<"$keys"
  rm -f "$one"
  # sshd's own file holds SSH_AUTHORIZED_KEYS only, which is fixed for the container's life; the
  # mounted files are read at each login (AuthorizedKeysCommand below), as they are then
  ak="$SSHD_DIR/authorized_keys"
  { [[ -z "${SSH_AUTHORIZED_KEYS:-}" ]] || printf '%s\n' "$SSH_AUTHORIZED_KEYS"; } | { grep -Ev '^[[:space:]]*(#|$)' || true; } >"$ak"
  chmod 600 "$ak"

  # Host keys: made here on first start of this container, never shipped in the image.
  for t in ed25519 ecdsa; do
    if [[ ! -s "$SSHD_DIR/ssh_host_${t}_key" ]]; then
      ssh-keygen -q -t "$t" -N '' -C "proxima-container-host-key" -f "$SSHD_DIR/ssh_host_${t}_key"
    fi
  done

  # internal-sftp -d: sftp, and scp (which speaks sftp since OpenSSH 9.0), start in /workspace, where
  # the volumes are, as ssh logins and commands do (~/.bashrc, the Dockerfile); not the home folder.
  cfg="$SSHD_DIR/sshd_config"
  cat >"$cfg" <<EOF
# generated by proxima-entrypoint at container start
Port ${SSH_PORT}
ListenAddress ${LISTEN_ADDRESS}
HostKey ${SSHD_DIR}/ssh_host_ed25519_key
HostKey ${SSHD_DIR}/ssh_host_ecdsa_key
PidFile ${SSHD_DIR}/sshd.pid
AuthorizedKeysFile ${ak}
AuthorizedKeysCommand ${self} --print-authorized-keys ${KEYS_SECRET} ${HOME}/.ssh/authorized_keys
AuthorizedKeysCommandUser ${USER_NAME}
AllowUsers ${USER_NAME}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitEmptyPasswords no
PermitRootLogin no
UsePAM no
StrictModes yes
X11Forwarding no
AllowTcpForwarding yes
PrintMotd no
Subsystem sftp internal-sftp -d /workspace
EOF
  # An SSH session starts from a fresh environment (UsePAM no), without the image's ENV: pass on the
  # commit, or every run started over SSH records git_commit null. Only what proxima accepts as a
  # commit (7 to 40 hex digits, as the build checks): anything else could add lines to this config.
  if [[ -n "${PROXIMA_GIT_COMMIT:-}" ]]; then
    if [[ "$PROXIMA_GIT_COMMIT" =~ ^[0-9a-fA-F]{7,40}$ ]]; then
      printf 'SetEnv PROXIMA_GIT_COMMIT=%s\n' "$PROXIMA_GIT_COMMIT" >>"$cfg"
    else
      log "PROXIMA_GIT_COMMIT is not a commit (7 to 40 hex digits): not passed to SSH sessions, whose runs record git_commit null"
    fi
  fi
  chmod 600 "$cfg"
  # at a fixed place, as /etc/profile.d/proxima-env.sh finds it; a home this user cannot write
  # (--read-only with a volume at ~/.sshd only) costs SSH sessions the environment, not the start
  if ! write_session_env "$HOME/.proxima-session-env" 2>/dev/null; then
    log "note: cannot write $HOME/.proxima-session-env: SSH sessions start without the container's environment (-e variables, the image's ENV)"
  fi
  umask "$old_umask"

  log "ssh host key fingerprints (check them on first connect):"
  for t in ed25519 ecdsa; do
    ssh-keygen -l -f "$SSHD_DIR/ssh_host_${t}_key.pub" >&2
  done

  if [[ "$DRY_RUN" == 1 ]]; then
    log "dry run: would start $SSHD -D -e -f $cfg (port $SSH_PORT)"
    return 0
  fi
  [[ -x "$SSHD" ]] || die "sshd not found at $SSHD"
  "$SSHD" -t -f "$cfg" || die "sshd rejected its generated config $cfg"
  "$SSHD" -D -e -f "$cfg" &
  local pid=$! rc tenths=0
  # sshd that cannot bind its port (in use, or below 1024 for this user) says so on stderr and exits:
  # wait until it listens (or, where /proc cannot tell, still runs after 1 s) before saying it started
  while :; do
    if ! alive "$pid"; then
      rc=0
      wait "$pid" || rc=$?
      die "sshd exited at start (status $rc) and does not listen on port $SSH_PORT: see its message above (port in use, or below 1024, which this user may not bind)"
    fi
    rc=0
    listens "$pid" "$SSH_PORT" || rc=$?
    ((rc == 0 || (rc == 2 && tenths >= 10))) && break
    ((tenths < 100)) || die "sshd (pid $pid) runs but does not listen on port $SSH_PORT after 10 s"
    sleep 0.1
    tenths=$((tenths + 1))
  done
  log "sshd started on port $SSH_PORT for user $USER_NAME (key-only)"
}

start_sshd

# Runs, checkpoints and notebooks written to the container's own file system go with it (docker rm,
# run --rm, compose down), which nothing else says until they are gone: a note when no volume is there.
unmounted=()
for dir in "$WORKSPACE/runs" "$WORKSPACE/checkpoints" "$WORKSPACE/notebooks"; do
  [[ -d "$dir" ]] && ! is_mount_point "$dir" && unmounted+=("$dir")
done
if ((${#unmounted[@]})); then
  where="${unmounted[-1]}"
  if ((${#unmounted[@]} > 1)); then
    printf -v head '%s, ' "${unmounted[@]:0:${#unmounted[@]}-1}"
    where="${head%, } and $where"
  fi
  log "note: no volume is mounted at $where: what is written there is lost with the container (docker rm, run --rm, compose down); mount host folders there to keep it (docker/README.md)"
fi

# ---- 3. JupyterLab (or the command given to `docker run`), with this script as its parent -------
export JUPYTER_TOKEN # jupyter_server reads the token from the environment: it never appears in ps
main_is_jupyter=0 # the command is a Jupyter server: kept out of a stop's first wave (collect_first_wave)
if (($# > 0)); then
  cmd=("$@")
  if [[ "${1##*/}" == jupyter || "${1##*/}" == jupyter-* ]]; then
    main_is_jupyter=1
  fi
else
  main_is_jupyter=1
  # port_retries=0: by default Jupyter moves to the next free port in silence when JUPYTER_PORT is
  # taken (--network host), and the health check and the user's tunnel then reach another server
  cmd=(jupyter lab --ip="$LISTEN_ADDRESS" --port="$JUPYTER_PORT" --no-browser
    --ServerApp.port_retries=0 --ServerApp.root_dir="$NOTEBOOK_DIR")
fi
STOP_GRACE="${PROXIMA_STOP_GRACE:-45}"
[[ "$STOP_GRACE" =~ ^[0-9]+$ ]] || die "PROXIMA_STOP_GRACE must be a whole number of seconds, got '$STOP_GRACE'"
# 1: a stop also logs how it sorted each process of the user (the container test sets it, so that a
# wave that missed a trainer says which rule left it out)
STOP_DEBUG="${PROXIMA_STOP_DEBUG:-0}"
if [[ "$DRY_RUN" == 1 ]]; then
  log "dry run: would exec ${cmd[*]}"
  exit 0
fi

# ---- 4. a graceful stop for every process of this user -----------------------------------------
# Why not `exec`: tini (process 1) forwards a signal to its child only, and when that child exits the
# kernel SIGKILLs every other process of the container. A run started in tmux, with docker exec, over
# SSH or in a Jupyter terminal would never see the SIGTERM it turns into a checkpoint (docs/reliability.md).
main_pid=""

# ignores_term PID: SIGTERM is ignored by PID (an interactive shell): nothing to wait for
ignores_term() {
  proc_field "$1" SigIgn && (((16#$FIELD >> 14) & 1))
}
# handles_term PID: PID has a SIGTERM handler of its own (proxima train, torchrun, a Jupyter server)
handles_term() {
  proc_field "$1" SigCgt && (((16#$FIELD >> 14) & 1))
}
# same_program PID PID2: both run the same executable (a forked worker; torchrun's ranks, same python)
same_program() {
  local a b
  a="$(readlink "/proc/$1/exe" 2>/dev/null)" && b="$(readlink "/proc/$2/exe" 2>/dev/null)" \
    && [[ -n "$a" && "$a" == "$b" ]]
}
# holds_terminals PID: a server whose exit would hang up the terminals of the processes under it
# (tmux, screen, sshd, Jupyter with a terminal open): a hangup is SIGHUP, which stops a training
# run at once, without the checkpoint that SIGTERM gives. These are stopped after everything else.
holds_terminals() {
  local comm
  read -r comm 2>/dev/null <"/proc/$1/comm" || return 1
  case "$comm" in
    sshd | sshd-session | "tmux: server" | SCREEN) return 0 ;;
  esac
  [[ -n "$(find "/proc/$1/fd" -maxdepth 1 \( -lname /dev/ptmx -o -lname /dev/pts/ptmx \) -print -quit 2>/dev/null)" ]]
}
# collect_user_pids: USER_PIDS = every live process of this user but process 1 and this script
# (filled in place: a subshell would list itself)
USER_PIDS=()
collect_user_pids() {
  local dir pid
  USER_PIDS=()
  for dir in /proc/[0-9]*; do
    pid="${dir#/proc/}"
    ((pid != 1 && pid != $$)) || continue
    proc_field "$pid" Uid || continue
    if [[ "$FIELD" == "$MY_UID" ]] && alive "$pid"; then
      USER_PIDS+=("$pid")
    fi
  done
}
# collect_first_wave: WAVE = the processes to stop first. Not the servers that hold terminals (above),
# nor the JupyterLab this script runs (its shutdown closes its terminals), nor a session leader with a
# terminal while a process with a SIGTERM handler of its own runs in its session: `bash -c 'proxima
# train ...; echo done'` or `timeout 900 proxima train ...` in a tmux pane, exiting first, would hang
# up the pane's terminal under proxima (SIGHUP).
# Nor a worker whose parent is in the wave, has a SIGTERM handler and runs the same program:
# --vector async's env workers under proxima train, torchrun under the --nproc launcher and the ranks
# under torchrun. The parent stops them itself once its checkpoint is written; a SIGTERM of their own
# would kill them inside the iteration the parent finishes first, and no checkpoint would come. (A
# Jupyter kernel stays in the wave: its parent, the JupyterLab above, is not in it.)
WAVE=()
HELD="" # the session leaders held back, and the processes in their sessions, for the log
collect_first_wave() {
  local pid parent stat rest sid tty top i
  local -a candidates=() kept=()
  local -A candidate=() stopper=() leader_sid=() busy_sid=() in_wave=()
  collect_user_pids
  for pid in "${USER_PIDS[@]}"; do
    [[ "$main_is_jupyter" == 1 && "$pid" == "$main_pid" ]] && continue
    holds_terminals "$pid" && continue
    candidates+=("$pid")
    candidate[$pid]=1
  done
  for pid in "${candidates[@]}"; do
    if proc_field "$pid" PPid && parent="$FIELD" && [[ -n "${candidate[$parent]:-}" ]] \
      && handles_term "$parent" && same_program "$pid" "$parent"; then
      stopper[$pid]="$parent" # not counted below: proxima in a tmux pane leads a session of its workers
      continue
    fi
    read -r stat 2>/dev/null <"/proc/$pid/stat" || continue
    rest="${stat##*) }" # the fields after "(comm)", which may hold spaces
    read -r _ _ _ sid tty _ <<<"$rest"
    # What holds a leader back is a process in its session that stops gracefully, a SIGTERM handler of
    # its own (proxima train under `timeout`, a shell's trap or `bash -c '...; echo'`): the leader's
    # exit would hang up its terminal mid-checkpoint. A process without a handler dies of the same
    # wave anyway: counted, a short-lived one (the container test caught one in CI) held back proxima
    # leading its pane, whose env workers were then signalled themselves and the checkpoint was lost.
    if [[ "$sid" == "$pid" && "$tty" != 0 ]]; then
      leader_sid[$pid]="$sid"
    elif handles_term "$pid"; then
      busy_sid[$sid]+=" $pid"
    fi
    kept+=("$pid")
  done
  WAVE=()
  HELD=""
  for pid in "${kept[@]}"; do
    if [[ -n "${leader_sid[$pid]:-}" && -n "${busy_sid[${leader_sid[$pid]}]:-}" ]]; then
      # shellcheck disable=SC2086 # the session's pids, split on purpose
      HELD+="; $(describe "$pid") until $(describe ${busy_sid[${leader_sid[$pid]}]}) in its terminal session"
      continue
    fi
    WAVE+=("$pid")
    in_wave[$pid]=1
  done
  # a worker whose topmost stopper was held back after all (a session leader above) gets it itself
  for pid in "${!stopper[@]}"; do
    top="${stopper[$pid]}"
    for ((i = 0; i < 64; i++)); do
      [[ -n "${stopper[$top]:-}" ]] || break
      top="${stopper[$top]}"
    done
    [[ -n "${in_wave[$top]:-}" ]] || WAVE+=("$pid")
  done
  [[ "${STOP_DEBUG:-0}" != 1 ]] || sort_detail
}
# sort_detail (PROXIMA_STOP_DEBUG=1; called by collect_first_wave, whose locals it reads): SORTED =
# each process of the user with the rule that placed it and what that rule read
SORTED=""
sort_detail() {
  local pid comm role stat rest state ppid sid tty term
  local -A waved=()
  for pid in "${WAVE[@]}"; do waved[$pid]=1; done
  SORTED=""
  for pid in "${USER_PIDS[@]}"; do
    if [[ -n "${waved[$pid]:-}" ]]; then role=wave
    elif [[ -n "${stopper[$pid]:-}" ]]; then role="worker-of-${stopper[$pid]}"
    elif [[ -z "${candidate[$pid]:-}" ]]; then role="not-a-candidate"
    elif [[ -n "${leader_sid[$pid]:-}" ]]; then role=held
    else role="left-out"
    fi
    read -r comm 2>/dev/null <"/proc/$pid/comm" || comm="?"
    state="?" ppid="?" sid="?" tty="?"
    if read -r stat 2>/dev/null <"/proc/$pid/stat"; then
      rest="${stat##*) }"
      read -r state ppid _ sid tty _ <<<"$rest"
    fi
    if handles_term "$pid"; then term=1; else term=0; fi
    SORTED+=" $pid ($comm) $role: state $state ppid $ppid sid $sid tty $tty term-handler $term;"
  done
}
# kernel_at_rest PID: PID is a kernel of the JupyterLab this script runs (its child) that took the
# stop's SIGTERM and now waits for the next cell: SIGTERM is back at its default action (neither
# blocked nor pending: proxima.train() puts the caller's handler back once its stop is done), it is
# asleep and has no child process (an env's workers, not ended yet). TICKS: its CPU time so far (clock
# ticks), which wait_gone watches. One pass of /proc/PID/status and of /proc/PID/stat.
TICKS=0
kernel_at_rest() {
  local line value mask=0 seen=0 ppid="" state="" stat kids t
  local -a f lines
  [[ "$main_is_jupyter" == 1 && -n "$main_pid" ]] || return 1
  # one read, as proc_field takes it (a line-by-line read could mix two versions of the file)
  mapfile -t lines 2>/dev/null <"/proc/$1/status" || return 1
  for line in "${lines[@]}"; do
    [[ "$line" =~ ^([A-Za-z]+):[[:space:]]+([^[:space:]]+) ]] || continue
    value="${BASH_REMATCH[2]}"
    case "${BASH_REMATCH[1]}" in
      PPid) ppid="$value" ;;
      State) state="$value" ;;
      SigPnd | ShdPnd | SigBlk | SigIgn | SigCgt)
        mask=$((mask | 16#$value))
        seen=$((seen + 1))
        ;;
    esac
  done
  [[ "$ppid" == "$main_pid" && "$state" == S ]] && ((seen == 5 && ((mask >> 14) & 1) == 0)) || return 1
  for t in "/proc/$1/task/"*/children; do
    kids=""
    read -r kids 2>/dev/null <"$t" || [[ -r "$t" ]] || return 1 # no children file: cannot tell
    [[ -z "$kids" ]] || return 1
  done
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  read -r -a f <<<"${stat##*) }" # after "(comm)": state ppid ... utime (12th) stime (13th)
  TICKS=$((f[11] + f[12]))
}
# wait_gone SECONDS PID...: wait until each PID is gone, a zombie, ignores SIGTERM, or is a Jupyter
# kernel at rest (kernel_at_rest, using at most 1 tick of CPU time between looks) on SETTLE_POLLS + 1
# looks in a row, about 2 s. Such a kernel ran proxima.train(), whose stop wrote its checkpoint, and
# lives on by design (docs/reliability.md): there is nothing more to wait for, and the SIGTERM to
# every process that follows ends it (it had waited out the whole grace). Only kernels: any other
# process still running will exit by itself (a `proxima train` has its handler removed while it
# closes its env and exits, which took over 2 s with the container test's load).
# SETTLED: those kernels; LEFT: what still runs at the timeout. 1 on timeout.
SETTLE_POLLS=4
SETTLED=()
LEFT=()
wait_gone() {
  local deadline=$((SECONDS + $1)) pid
  local -A calm=() ticks=()
  shift
  SETTLED=()
  while :; do
    LEFT=()
    for pid in "$@"; do
      if ! alive "$pid" || ignores_term "$pid"; then continue; fi
      if kernel_at_rest "$pid"; then
        if [[ -n "${ticks[$pid]:-}" ]] && ((TICKS - ticks[$pid] <= 1)); then
          calm[$pid]=$((${calm[$pid]:-0} + 1))
        else
          calm[$pid]=0
        fi
        ticks[$pid]=$TICKS
        ((calm[$pid] <= SETTLE_POLLS)) || continue
      else
        calm[$pid]=0
        unset "ticks[$pid]"
      fi
      LEFT+=("$pid")
    done
    if ((${#LEFT[@]} == 0)); then
      for pid in "${!calm[@]}"; do
        ((calm[$pid] <= SETTLE_POLLS)) || ! alive "$pid" || SETTLED+=("$pid")
      done
      return 0
    fi
    ((SECONDS < deadline)) || return 1
    sleep 0.5
  done
}
describe() {
  local pid comm out=""
  for pid in "$@"; do
    read -r comm 2>/dev/null <"/proc/$pid/comm" || continue
    out+=" $pid ($comm)"
  done
  printf '%s' "${out# }"
}
# stop_all WHY: SIGTERM to the first wave and up to STOP_GRACE seconds for it, then SIGTERM to every
# process of this user (kill -1 never reaches process 1 or this script) and up to 10 s more
stop_all() {
  local why="$1" t0=$SECONDS pid
  if [[ "$OWN_PIDS" != 1 ]]; then
    log "$why: process 1 is not this container's tini (--pid=host?): SIGTERM to ${cmd[0]} only, not to every process"
    kill -TERM "$main_pid" 2>/dev/null || true
    wait_gone "$STOP_GRACE" "$main_pid" || true
    return 0
  fi
  collect_first_wave
  if ((${#WAVE[@]})); then
    log "$why: SIGTERM to $(describe "${WAVE[@]}") (a training run writes a checkpoint and exits 143); waiting up to ${STOP_GRACE} s"
    [[ -z "$HELD" ]] || log "$why: held back${HELD#;}"
    [[ -z "$SORTED" ]] || log "$why: sorted:${SORTED%;}"
    for pid in "${WAVE[@]}"; do
      kill -TERM "$pid" 2>/dev/null && kill -CONT "$pid" 2>/dev/null || true
    done
    if ! wait_gone "$STOP_GRACE" "${WAVE[@]}"; then
      log "still running after ${STOP_GRACE} s (PROXIMA_STOP_GRACE): $(describe "${LEFT[@]}")"
    elif ((${#SETTLED[@]})); then
      log "$why: $(describe "${SETTLED[@]}"): Jupyter kernel that took the SIGTERM and lives on, at rest (its proxima.train() stopped after its checkpoint): ended with the SIGTERM to every process, not waited for"
    fi
  fi
  kill -TERM -1 2>/dev/null || true
  collect_user_pids
  ((${#USER_PIDS[@]} == 0)) || wait_gone 10 "${USER_PIDS[@]}" || true
  log "$why: stopped in $((SECONDS - t0)) s"
}

# Only when process 1 is the container's own (tini, our parent; or docker run --init's docker-init or
# podman's catatonit in front of tini, our grandparent) are "all processes of this user" the
# container's: with `--pid=host` they would be the host user's too, and then a stop signals the
# command alone, as tini did.
OWN_PIDS=0
read -r init_comm 2>/dev/null </proc/1/comm || init_comm=""
if [[ "$init_comm" != systemd && "$init_comm" != init ]] \
  && { ((PPID == 1)) || { proc_field "$PPID" PPid && [[ "$FIELD" == 1 ]]; }; }; then
  OWN_PIDS=1
fi

stop_signal=""
trap 'stop_signal=TERM' TERM
trap 'stop_signal=INT' INT
log "starting: ${cmd[*]}"
# in a subshell that puts SIGINT/SIGQUIT back (bash ignores them in background jobs) and keeps stdin
# (bash gives background jobs /dev/null), so the command behaves as if it had been exec'd
(
  trap - INT QUIT
  exec "${cmd[@]}"
) <&0 &
main_pid=$!
status=""
while :; do
  set +e
  wait "$main_pid"
  rc=$?
  set -e
  case "$stop_signal" in
    TERM) break ;;
    INT)
      # from a terminal (docker run -it) Ctrl-C reached the command already; else pass it on, as tini did
      stop_signal=""
      [[ -t 0 ]] || kill -INT "$main_pid" 2>/dev/null || true
      continue
      ;;
  esac
  if ! alive "$main_pid"; then
    status=$rc
    break
  fi
done
if [[ -n "$status" ]]; then
  stop_all "${cmd[0]} exited with status $status"
  exit "$status"
fi
stop_all "SIGTERM"
# the command's own status when it has ended by now (proxima train: 143), else 143 (SIGTERM)
set +e
if alive "$main_pid"; then
  exit 143
fi
wait "$main_pid"
exit $?
