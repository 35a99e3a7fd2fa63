"""Review 33: behaviour of .ci/run, docker/ci_train.sh, benchmarks/gpu_session.sh and docker/entrypoint.sh that
no test ran (mutations of these lines survived): each test runs the script (or the entrypoint's own functions)
with stand-ins for the tools it calls, in temporary folders, and checks its exit status, files and lines."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.static.test_docker import ENTRYPOINT, NODE, _dry_run, _first_wave, keypair, sandbox, unprivileged  # noqa: F401
from tests.static.test_gpu_session import SCRIPT as SESSION, STEPS, STUB

ROOT = Path(__file__).resolve().parents[2]


def _exe(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


# ------------------------------------------------------------------------------------------ .ci/run
def test_ci_run_fails_when_make_test_fails_and_stops_there(tmp_path):
    """`set -e` in .ci/run: a failing `make test` fails CI, and the container test is not run after it."""
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "make.calls"
    # fails on its first call only: `make test-container` after it would pass
    _exe(bin_dir / "make", f'#!/bin/sh\necho "$*" >> {calls}\n[ "$(wc -l < {calls})" -gt 1 ] || exit 2\n')
    r = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0, r.stdout + r.stderr
    assert calls.read_text().splitlines() == ["test"]


# ------------------------------------------------------------------------------------ docker/ci_train.sh
FAKE_HEAD = "0123456789abcdef0123456789abcdef01234567"

# a stand-in for docker: the image's inspections, `run --entrypoint python` (the threshold: the real Python and
# Gymnasium), and `run ... --inside`: the script's inside part, run here with /workspace a folder of the test
FAKE_DOCKER = r"""#!/usr/bin/env bash
echo "$1 $2" >> "$FAKE_LOG"
case "$1" in
  info | rm | stop) exit 0 ;;
  image)
    if [[ "${3:-}" == -f && "$4" == *Config.Env* ]]; then printf 'PATH=/usr/bin\nPROXIMA_GIT_COMMIT=%s\n' "$FAKE_IMAGE_COMMIT"
    elif [[ "${3:-}" == -f ]]; then echo "$(id -u):$(id -g)"; fi
    exit 0 ;;
  run)
    shift
    envs=() entry="" runs="" script=""
    while [[ $# -gt 0 ]]; do
      case "$1" in
        -e) envs+=("$2"); shift 2 ;;
        -v) if [[ "$2" == *:/workspace/runs ]]; then runs="${2%%:*}"; else script="${2%%:*}"; fi; shift 2 ;;
        --entrypoint) entry="$2"; shift 2 ;;
        --name | --network | --stop-timeout) shift 2 ;;
        --rm | --no-healthcheck) shift ;;
        *) break ;;
      esac
    done
    shift  # the image
    [[ -z "$entry" ]] || exec "$entry" "$@"
    mkdir -p "$FAKE_WS" && ln -sfn "$runs" "$FAKE_WS/runs"
    sed "s#^  cd /workspace\$#  cd $FAKE_WS#" "$script" > "$FAKE_WS/inside.sh"
    exec env "${envs[@]}" bash "$FAKE_WS/inside.sh" --inside ;;
esac
exit 99
"""

FAKE_PROXIMA = r"""#!/usr/bin/env bash
case "$1" in
  train)
    d="$(printf "%s\n" "$@" | sed -n "/^--run-dir$/{n;p}")"; mkdir -p "$d"
    [[ -z "${FAKE_TRAIN_SLEEP:-}" ]] || exec sleep "$FAKE_TRAIN_SLEEP"
    exit "${FAKE_TRAIN_RC:-0}" ;;
  eval) echo "{\"mean_return\": $FAKE_MEAN}" ;;
  report) echo "# report" > "$2/report.md" ;;
esac
"""

FAKE_GIT = f"""#!/bin/sh
case "$*" in
  "rev-parse HEAD") echo {FAKE_HEAD} ;;
  "rev-parse --short HEAD") echo {FAKE_HEAD[:7]} ;;
esac
"""


def ci_train(tmp_path: Path, mean: float = 475.0, image_commit: str = FAKE_HEAD, **env) -> tuple:
    """docker/ci_train.sh from a copy of the tree in ``tmp_path`` with stand-ins for docker, git and proxima:
    (the completed process, the docker calls, the run folders under CI_OUT)."""
    tree = tmp_path / "tree"
    (tree / "docker").mkdir(parents=True)
    shutil.copy(ROOT / "docker" / "ci_train.sh", tree / "docker" / "ci_train.sh")
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _exe(bin_dir / "docker", FAKE_DOCKER)
    _exe(bin_dir / "proxima", FAKE_PROXIMA)
    _exe(bin_dir / "git", FAKE_GIT)
    _exe(bin_dir / "python", f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')  # the venv's, with Gymnasium
    log, out = tmp_path / "docker.calls", tmp_path / "out"
    full = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "CONTAINER_ENGINE": "docker",
            "FAKE_LOG": str(log), "FAKE_IMAGE_COMMIT": image_commit, "FAKE_WS": str(tmp_path / "ws"),
            "FAKE_MEAN": repr(mean), "CI_OUT": str(out), **env}
    proc = subprocess.Popen(["bash", str(tree / "docker" / "ci_train.sh")], env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    calls = log.read_text().splitlines() if log.exists() else []
    runs = sorted(p for p in out.iterdir() if p.is_dir()) if out.exists() else []
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), calls, runs


@pytest.mark.parametrize("mean, rc, verdict", [(475.0, 0, "PASS"), (474.0, 1, "FAIL")])
def test_ci_train_passes_a_mean_return_that_reaches_the_gymnasium_threshold(tmp_path, mean, rc, verdict):
    """CartPole-v1's reward_threshold (475, read from Gymnasium in the image) reached exactly is a PASS."""
    r, calls, runs = ci_train(tmp_path, mean=mean)
    assert r.returncode == rc, r.stdout + r.stderr
    line = (f"{verdict}: mean return {mean:g} over 10 episodes, threshold 475 (CartPole-v1's reward_threshold "
            f"in Gymnasium), commit {FAKE_HEAD[:7]}")
    assert f"ci-train: {line}" in r.stdout.splitlines(), r.stdout + r.stderr
    assert len(runs) == 1 and f"## CI verdict\n\n{line}\n" in (runs[0] / "report.md").read_text()


def test_ci_train_refuses_an_image_of_another_commit_before_running_it(tmp_path):
    r, calls, runs = ci_train(tmp_path, image_commit="fedcba9876543210fedcba9876543210fedcba98", CI_MIN_RETURN="1")
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("ci-train: error: image proxima:") and "was built from commit fedcba987654" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not any(c.startswith("run") for c in calls), calls  # nothing was trained
    assert not runs


def test_ci_train_a_stopped_training_is_an_error_without_a_verdict(tmp_path):
    """proxima train stopped by SIGTERM (exit 143): the inside part says so and exits 143, the host exit 2."""
    r, calls, runs = ci_train(tmp_path, CI_MIN_RETURN="1", FAKE_TRAIN_RC="143")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "ci-train: stopped by SIGTERM during proxima train (exit 143), no verdict" in r.stderr, r.stderr
    assert "ci-train: error: stopped before a verdict (exit 143)" in r.stderr, r.stderr
    assert "PASS" not in r.stdout and "FAIL" not in r.stdout


def test_ci_train_a_run_past_ci_timeout_is_an_error(tmp_path):
    r, calls, runs = ci_train(tmp_path, CI_MIN_RETURN="1", CI_TIMEOUT="1", FAKE_TRAIN_SLEEP="60")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "ci-train: error: timed out after 1 s" in r.stderr, r.stderr
    assert "PASS" not in r.stdout


# ------------------------------------------------------------------------------ benchmarks/gpu_session.sh
def session(tmp_path: Path, stub: str = STUB, out: "Path | None" = None, script: Path = SESSION,
            tree_files: "dict | None" = None) -> subprocess.CompletedProcess:
    """gpu_session.sh in a fake tree ``tmp_path/tree`` (an anchor carried) with a stand-in python3; OUT is
    ``out`` (None: unset)."""
    tree = tmp_path / "tree"
    (tree / ".anchors").mkdir(parents=True, exist_ok=True)
    (tree / ".anchors" / "purejaxrl_cartpole.py").write_text("# the anchor\n")
    for name, text in (tree_files or {}).items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    python = _exe(tmp_path / "python3", stub)
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    env.update(PYTHON=str(python), TMPDIR=str(tmp_path))
    if out is not None:
        out.mkdir(exist_ok=True)
        env["OUT"] = str(out)
    return subprocess.run(["bash", str(script)], cwd=tree, env=env, capture_output=True, text=True, timeout=120)


def _summary(out: Path) -> list:
    return (out / "summary.txt").read_text().splitlines()


def test_gpu_session_without_out_writes_into_benchmarks_results_gpu(tmp_path):
    r = session(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "tree" / "benchmarks" / "results" / "gpu"
    assert [line.split(":")[0] for line in _summary(out)] == STEPS
    assert (out / "logs.tar.gz").is_file()


def test_gpu_session_imports_the_carried_wheels(tmp_path):
    """The wheels of .whl/ go to /tmp/site (pip, here a stand-in), which the import check and steps see."""
    seen = tmp_path / "pythonpath"
    stub = STUB.replace('&& exit 0', f'&& {{ echo "$PYTHONPATH" > {seen}; exit 0; }}', 1)
    r = session(tmp_path, stub, out=tmp_path / "out", tree_files={".whl/x-1.0-py3-none-any.whl": ""})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "/tmp/site" in seen.read_text().strip().split(":"), seen.read_text()


def test_gpu_session_cuts_a_step_at_its_limit_and_runs_the_next(tmp_path):
    """A copy whose doctor step has a limit of 1 s (13 in the script): a doctor that hangs is cut there."""
    text = SESSION.read_text()
    assert text.count("\nstep doctor 13 ") == 1
    script = tmp_path / "gpu_session.sh"
    script.write_text(text.replace("\nstep doctor 13 ", "\nstep doctor 1 "))
    echo = STUB.splitlines()[2]
    stub = STUB.replace(echo, echo + '\n[[ "$*" == *"proxima doctor"* ]] && exec sleep 30')
    r = session(tmp_path, stub, out=tmp_path / "out", script=script)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = _summary(tmp_path / "out")
    assert re.fullmatch(r"doctor: exit 124, [1-3] s", summary[0]), summary
    assert [line.split(":")[0] for line in summary] == STEPS and all(": exit 0, " in s for s in summary[1:]), summary


def test_gpu_session_starts_a_fresh_summary_on_a_second_run(tmp_path):
    out = tmp_path / "out"
    for _ in range(2):
        r = session(tmp_path, out=out)
        assert r.returncode == 0, r.stdout + r.stderr
    assert [line.split(":")[0] for line in _summary(out)] == STEPS


def test_gpu_session_repacks_the_logs_after_each_step(tmp_path):
    """The script SIGKILLed during the accel step (a call cut short): the earlier steps' logs came back."""
    echo = STUB.splitlines()[2]
    stub = STUB.replace(echo, echo + '\n[[ "$*" == *benchmarks/accel.py* ]] && { kill -KILL "${GPU_SESSION_STEP%%-*}"; exit 0; }')
    out = tmp_path / "out"
    session(tmp_path, stub, out=out)
    assert [line.split(":")[0] for line in _summary(out)] == STEPS[:STEPS.index("accel")]
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = {Path(m.name).name for m in tar.getmembers() if m.isfile()}
    assert {"doctor.txt", "purejaxrl-solve.json", "pendulum-cudagraphs.txt", "solve-gpu.log"} <= names, names


def test_gpu_session_a_killed_purejaxrl_anchor_exits_137(tmp_path):
    """The anchor killed by SIGKILL (returncode -9): the step exits 128 + 9, as a shell says it."""
    echo = STUB.splitlines()[2]
    real = f'[[ "$1" == "-c" && "$2" == *wall_from_launch_seconds* ]] && exec {shlex.quote(sys.executable)} "$@"'
    stub = STUB.replace(echo, real + "\n" + echo)
    out = tmp_path / "out"
    r = session(tmp_path, stub, out=out,
                tree_files={".anchors/purejaxrl_cartpole.py": "import os\nos.kill(os.getpid(), 9)\n"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert any(line.startswith("purejaxrl-solve: exit 137, ") for line in _summary(out)), _summary(out)


# --------------------------------------------------------------------------------------- docker/entrypoint.sh
def test_entrypoint_refuses_a_long_token_with_whitespace(sandbox):
    env, marker, home = sandbox
    env["JUPYTER_TOKEN"] = "0123456789abcdef 0123"
    r = subprocess.run(["bash", str(ENTRYPOINT)], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "proxima-entrypoint: error: JUPYTER_TOKEN contains whitespace; use a plain random string (e.g. openssl rand -hex 24)"]
    assert not marker.exists()


def test_entrypoint_puts_the_callers_umask_back_for_the_command(unprivileged, keypair, tmp_path):
    """sshd's files are written under umask 077; the command (Jupyter, a run) gets the caller's umask."""
    base, prefix = unprivileged
    # a stub sshd that listens at once (the entrypoint waits for its port) and exits by itself
    python = next((c for c in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3")
                   if subprocess.run([*prefix, "/bin/sh", "-c", f'exec "{c}" -c ""'], capture_output=True,
                                     cwd=base).returncode == 0), None)
    if python is None:
        pytest.skip("no python that the unprivileged user may run, for the stub sshd")
    listener = ("import os, socket, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                "s.bind(('127.0.0.1', int(os.environ['SSH_PORT']))); s.listen(); time.sleep(3)")
    entrypoint = base / "entrypoint.sh"  # a copy the other user can read, as _entrypoint_with_sshd makes
    shutil.copy(ENTRYPOINT, entrypoint)
    entrypoint.chmod(0o755)
    home = base / "home"
    home.mkdir()
    home.chmod(0o777)
    sshd = _exe(base / "sshd", f'#!/bin/sh\n[ "$1" = -t ] && exit 0\nexec {python} -c "{listener}" </dev/null >/dev/null 2>&1\n')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "PROXIMA_SSHD": str(sshd),
           "SSH_AUTHORIZED_KEYS_FILE": str(base / "no-such-secret"), "SSH_AUTHORIZED_KEYS": keypair,
           "JUPYTER_TOKEN": "0123456789abcdef0123", "SSH_PORT": str(port), "PROXIMA_LISTEN_ADDRESS": "127.0.0.1"}
    r = subprocess.run([*prefix, "/bin/sh", "-c", 'umask 0027; exec "$@"', "sh", "bash", str(entrypoint),
                        "bash", "-c", "umask"], env=env, capture_output=True, text=True, timeout=60, cwd=base)
    assert r.returncode == 0, r.stderr
    assert "sshd started" in r.stderr, r.stderr
    assert r.stdout.strip().splitlines() == ["0027"], r.stdout


def test_entrypoint_stops_when_the_key_file_is_a_directory(sandbox, keypair, tmp_path):
    env, _, home = sandbox
    keys = tmp_path / "authorized_keys"
    keys.mkdir()
    r = _dry_run(env, SSH_AUTHORIZED_KEYS=keypair, SSH_AUTHORIZED_KEYS_FILE=str(keys))
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith(f"proxima-entrypoint: error: SSH key file {keys} is a directory")
    assert not (home / ".sshd" / "sshd_config").exists()


def test_entrypoint_passes_no_commit_of_41_hex_digits(sandbox, keypair):
    env, _, home = sandbox
    r = _dry_run(env, SSH_AUTHORIZED_KEYS=keypair, PROXIMA_GIT_COMMIT="a" * 41)
    assert r.returncode == 0, r.stderr
    assert not [line for line in (home / ".sshd" / "sshd_config").read_text().splitlines() if line.startswith("SetEnv")]
    assert len([line for line in r.stderr.splitlines() if "PROXIMA_GIT_COMMIT is not a commit" in line]) == 1


def test_entrypoint_refuses_a_stop_grace_that_is_not_whole_seconds(sandbox, keypair):
    env, _, _ = sandbox
    r = _dry_run(env, SSH_AUTHORIZED_KEYS=keypair, PROXIMA_STOP_GRACE="5s")
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        "proxima-entrypoint: error: PROXIMA_STOP_GRACE must be a whole number of seconds, got '5s'")
    assert "would exec" not in r.stderr


def _wait_for_lines(path: Path, names: set, seconds: float = 30) -> dict:
    import time
    deadline = time.monotonic() + seconds
    got: dict = {}
    while time.monotonic() < deadline:
        got = dict(line.split() for line in path.read_text().splitlines()) if path.exists() else {}
        if set(got) >= names:
            return {k: int(v) for k, v in got.items()}
        time.sleep(0.05)
    raise AssertionError(f"processes did not come up: {sorted(got)}")


def test_first_wave_leaves_out_a_process_that_holds_a_terminal_master(tmp_path):
    """A process holding /dev/ptmx (a terminal server: tmux, a Jupyter terminal's server) is no candidate:
    its SIGTERM would hang up its panes' programs (SIGHUP, no checkpoint)."""
    pids = tmp_path / "pids"
    code = (f"import os, time; m, s = os.openpty(); open({str(pids)!r}, 'a').write(f'ptmx {{os.getpid()}}\\n'); "
            "time.sleep(60)")
    shell = subprocess.Popen(["/bin/sh", "-c", '"$@" & wait', "sh", sys.executable, "-c", code])
    try:
        pid = _wait_for_lines(pids, {"ptmx"})["ptmx"]
        wave, roles = _first_wave(main_pid=shell.pid, debug=True)
        assert pid not in wave
        assert roles[pid] == "not-a-candidate", roles.get(pid)
    finally:
        for p in [*_maybe(pids).values(), shell.pid]:
            _kill(p)
        shell.wait(timeout=30)


def _maybe(path: Path) -> dict:
    return {k: int(v) for k, v in (line.split() for line in path.read_text().splitlines())} if path.exists() else {}


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_first_wave_signals_a_session_leader_without_a_terminal(tmp_path):
    """`setsid bash -c 'proxima train ...; echo'` with no terminal leads a session but has none to hang up:
    nothing holds it back, so the shell is in the wave (only a leader with a terminal is held)."""
    node, pids = tmp_path / "node.py", tmp_path / "pids"
    node.write_text(NODE)
    inner = f"echo shell $$ >> {pids}; {sys.executable} {node} trainer x {pids}; echo done"
    outer = subprocess.Popen(["/bin/sh", "-c", '"$@" & wait', "sh", "setsid", "/bin/bash", "-c", inner],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        tree = _wait_for_lines(pids, {"shell", "x", "x.w1", "x.w1.g", "x.w2"})
        stat = Path(f"/proc/{tree['shell']}/stat").read_text().rsplit(") ", 1)[-1].split()
        assert int(stat[3]) == tree["shell"] and stat[4] == "0"  # a session leader without a terminal
        wave, roles = _first_wave(main_pid=outer.pid, debug=True)
        assert tree["shell"] in wave, roles.get(tree["shell"])
        assert tree["x"] in wave
    finally:
        for p in [*_maybe(pids).values(), outer.pid]:
            _kill(p)
        outer.wait(timeout=30)
