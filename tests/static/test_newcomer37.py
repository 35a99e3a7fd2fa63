"""A newcomer's review (s37): `make setup PYTHON=...` over an existing .venv, the lock's cover of the
extras, and the flag-typo hints for a flag's first word."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.cli_helpers import error_line, run_main

ROOT = Path(__file__).resolve().parents[2]
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


# ------------------------------------------------------------------ make setup PYTHON=... (bug 1, #9)
def _fake_python(path: Path, version: str, real: str) -> Path:
    """Answers the Makefile's questions (at least 3.11?, the version, the interpreter's real path)."""
    ok = tuple(map(int, version.split("."))) >= (3, 11)
    path.write_text(f'#!/bin/sh\ncase "$2" in *">="*) echo {ok};; *"%d"*) echo {version};; '
                    f'*realpath*) echo {real};; esac\n')
    path.chmod(0o755)
    return path


@pytest.fixture
def venv(tmp_path):
    """A set-up .venv (stamp newer than pyproject.toml and the lock) made with a Python 3.11.7 at base/."""
    base = tmp_path / "base" / "python3.11"
    base.parent.mkdir()
    _fake_python(base, "3.11.7", str(base))
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(base)
    (venv / "pyvenv.cfg").write_text(f"home = {base.parent}\nversion = 3.11.7\nexecutable = {base}\n")
    (venv / ".proxima-installed").touch()
    return venv


def _make(venv: Path, *args: str, env: dict | None = None) -> tuple[int, list]:
    out = subprocess.run(["make", "-s", "-C", str(ROOT), "setup", f"VENV={venv}", *args],
                         capture_output=True, text=True, timeout=60, env=env)
    # "Makefile:N: *** ...  Stop." is make's frame around the $(error) text
    return out.returncode, [re.sub(r"^Makefile:\d+: \*\*\* (.*)\.  Stop\.$", r"\1", line) for line in out.stderr.splitlines()]


@needs_make
def test_make_setup_with_another_python_over_an_existing_venv_stops_in_one_line(tmp_path, venv):
    """It printed nothing and exited 0: the user went on training on the old Python."""
    other = _fake_python(tmp_path / "python3.12", "3.12.1", "/opt/py312/bin/python3.12")
    code, lines = _make(venv, f"PYTHON={other}")
    assert code == 2
    assert lines == [f"{other} is Python 3.12.1 (/opt/py312/bin/python3.12), but {venv} was made with Python "
                     f"3.11.7 ({venv.parent / 'base' / 'python3.11'}): remove it first (make clean, or rm -rf "
                     f"{venv}), then make setup PYTHON={other}"]
    # the interpreter .venv was made with, named again: set up, nothing to do
    same = _fake_python(tmp_path / "python3.11", "3.11.7", str(venv.parent / "base" / "python3.11"))
    assert _make(venv, f"PYTHON={same}") == (0, [])
    # the same version elsewhere (an exported PYTHON in CI, a venv made with --copies): nothing to do either
    elsewhere = _fake_python(tmp_path / "py", "3.11.7", "/usr/local/bin/python3.11")
    assert _make(venv, f"PYTHON={elsewhere}") == (0, [])


@needs_make
def test_make_setup_refuses_an_old_python_even_when_the_venv_exists(tmp_path, venv):
    """Named, an old Python is refused as on a fresh clone; as the default (CI's `make test` on a set-up
    machine, no PYTHON given) it is not questioned: setup stays a no-op."""
    bin_dir = tmp_path / "path"
    bin_dir.mkdir()
    old = _fake_python(bin_dir / "python3.11", "3.10.13", "/opt/py310/bin/python3.10")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    code, lines = _make(venv, f"PYTHON={old}", env=env)
    assert code == 2
    assert lines == [f"{old} is Python 3.10.13; Proxima needs Python 3.11 or newer (requirements.lock pins numpy "
                     "2.4.x); choose one with PYTHON: make setup PYTHON=python3.11"]
    assert _make(venv, env=env) == (0, [])


@needs_make
def test_make_setup_shows_why_a_python_that_exists_did_not_run(tmp_path):
    """A pyenv shim of a version not selected: "no Python found" hid pyenv's own explanation."""
    shim = tmp_path / "python3.12"
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.12: command not found' >&2\necho >&2\nexit 127\n")
    shim.chmod(0o755)
    venv = tmp_path / "venv"
    code, lines = _make(venv, f"PYTHON={shim}")
    assert code == 2
    assert lines == [f"{shim} ({shim}) did not run: pyenv: python3.12: command not found; Proxima needs Python "
                     "3.11 or newer (requirements.lock pins numpy 2.4.x); choose one with PYTHON: make setup "
                     "PYTHON=python3.11"]
    assert not venv.exists()


def test_make_report_trains_whole_iterations(capsys):
    """50,000 steps drew the project's own note on a partial iteration of the 512-step CartPole batch."""
    text = (ROOT / "Makefile").read_text()
    recipe = text[text.index("\nreport: setup"):].split("\n\n")[0]
    train = re.search(r"proxima (train .*?) --run-dir", recipe).group(1).split()
    code, out, err = run_main([*train, "--dry-run"], capsys)
    assert code == 0, err
    assert "not a multiple of the batch" not in err, err
    assert re.search(r"batch 512 .* 100 iterations = 51,200 steps", out), out


# ------------------------------------------------------------------ the lock pins every extra (bug 2)
def _lock() -> dict:
    lines = (ROOT / "requirements.lock").read_text().splitlines()
    return {canonicalize_name(name): version for name, _, version in
            (line.partition("==") for line in lines if "==" in line and not line.startswith("#"))}


def _unpinned(req: Requirement, lock: dict, seen: set) -> list:
    """Names reachable from ``req`` (its extras through the installed metadata) that the lock lacks."""
    name = canonicalize_name(req.name)
    missing = [] if name in lock or name == "proxima" else [name]
    for extra in sorted(req.extras):
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            sub = Requirement(text)
            if sub.marker is not None and sub.marker.evaluate({"extra": extra}) \
                    and not sub.marker.evaluate({"extra": ""}):  # this extra's own requirement
                missing += _unpinned(sub, lock, seen)
    return missing


def test_requirements_lock_pins_every_extras_dependencies():
    """[mujoco] (gymnasium[mujoco]) resolved mujoco freely: a new release could change the presets' results."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lock, seen = _lock(), set()
    missing = {extra: sorted(set(m for text in reqs for m in _unpinned(Requirement(text), lock, seen)))
               for extra, reqs in project["optional-dependencies"].items()}
    assert {extra: names for extra, names in missing.items() if names} == {}
    # mujoco's own dependencies, as pip resolves them with the lock (no mujoco installed here to read)
    assert {"mujoco", "mujoco-core", "mujoco-studio", "mujoco-studio-wasm", "pyopengl", "websockets", "glfw"} <= set(lock)


# ------------------------------------------------------------------ a flag's first word (ux 7)
@pytest.mark.parametrize("flag, meant", [
    ("--ent", "--ent-coef"),    # difflib said --quiet
    ("--clip", "--clip-coef"),  # difflib said --clip-obs; CleanRL's PPO clip is meant
])
def test_a_flags_first_word_is_told_the_flag_it_starts(flag, meant, capsys):
    code, _, err = run_main(["train", "CartPole-v1", flag, "0.1", "--dry-run"], capsys)
    assert error_line(code, err).endswith(f"unrecognized arguments: {flag} 0.1; did you mean {meant}? "
                                          "(see proxima train --help)")


# ------------------------------------------------------------------ review 37, mutation round 3
@needs_make
def test_make_setup_takes_python_from_the_environment_as_given(tmp_path, venv):
    """`PYTHON=python3.12 make setup` (an environment variable, not a make argument) over another .venv."""
    other = _fake_python(tmp_path / "python3.12", "3.12.1", "/opt/py312/bin/python3.12")
    code, lines = _make(venv, env={"PATH": "/usr/bin:/bin", "PYTHON": str(other)})
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith(f"{other} is Python 3.12.1 (/opt/py312/bin/python3.12), but {venv}")
    assert "remove it first" in lines[0]


@needs_make
def test_make_setup_on_a_fresh_clone_refuses_an_old_default_python(tmp_path):
    bin_dir = tmp_path / "path"
    bin_dir.mkdir()
    old = _fake_python(bin_dir / "python3.11", "3.10.13", "/opt/py310/bin/python3.10")
    fresh = tmp_path / "new-venv"  # no pyvenv.cfg: nothing set up yet, and no PYTHON given
    code, lines = _make(fresh, env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert code == 2
    assert lines == [f"{old} is Python 3.10.13; Proxima needs Python 3.11 or newer (requirements.lock pins numpy "
                     "2.4.x); choose one with PYTHON: make setup PYTHON=python3.11"]
    assert not fresh.exists()


def test_the_makefiles_python_bound_is_3_11():
    """The fake interpreters answer the `>=` question without evaluating it: the bound itself is read here."""
    text = (ROOT / "Makefile").read_text()
    assert re.findall(r"sys\.version_info >= \((\d+), (\d+)\)", text) == [("3", "11")]
