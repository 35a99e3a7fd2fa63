"""train_state.git_commit(): HEAD of the checkout the package runs from, else $PROXIMA_GIT_COMMIT (what
the container image's build records, docker/README.md) when it looks like a commit, else None."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import proxima
from proxima.train_state import git_commit

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def no_checkout(monkeypatch, tmp_path):
    """git runs as if the package lay outside any checkout (an installed copy, as in the image)."""
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "not-a-repository"))
    monkeypatch.delenv("PROXIMA_GIT_COMMIT", raising=False)


@pytest.mark.parametrize("value", [COMMIT, COMMIT[:7], COMMIT.upper(), f"  {COMMIT}\n"])
def test_the_recorded_commit_is_used_outside_a_checkout(no_checkout, monkeypatch, value):
    monkeypatch.setenv("PROXIMA_GIT_COMMIT", value)
    assert git_commit() == value.strip().lower()


def test_the_recorded_commit_is_used_when_git_is_not_installed(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on PATH: subprocess raises FileNotFoundError
    monkeypatch.setenv("PROXIMA_GIT_COMMIT", COMMIT)
    assert git_commit() == COMMIT


@pytest.mark.parametrize("value", ["", "unknown", "012345", COMMIT + "0", "0123456789abcdeg", f"{COMMIT[:12]}-dirty",
                                   "$(git rev-parse HEAD)"])
def test_anything_but_7_to_40_hex_digits_is_ignored(no_checkout, monkeypatch, value):
    monkeypatch.setenv("PROXIMA_GIT_COMMIT", value)
    assert git_commit() is None


def test_nothing_recorded_outside_a_checkout_is_none(no_checkout):
    assert git_commit() is None


def test_the_checkout_wins_over_the_recorded_commit(monkeypatch):
    monkeypatch.delenv("GIT_DIR", raising=False)
    here = Path(proxima.__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
    except OSError:
        pytest.skip("git is not installed")
    if head.returncode != 0 or not head.stdout.strip():
        pytest.skip("the package does not run from a git checkout here")
    monkeypatch.setenv("PROXIMA_GIT_COMMIT", "f" * 40)
    assert git_commit() == head.stdout.strip()


def test_a_copy_inside_another_projects_checkout_does_not_record_that_projects_commit(tmp_path, monkeypatch):
    """A pip-installed Proxima in a venv inside the user's own git project: git, run in the package's
    folder, answers with the project's HEAD, which is not the commit Proxima runs from."""
    import shutil
    import sys

    project = tmp_path / "project"
    package = project / "venv" / "site-packages" / "proxima"
    shutil.copytree(Path(proxima.__file__).resolve().parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    env = {"GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x", "GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@x"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "project"]):
        subprocess.run(["git", *args], cwd=project, check=True, env={**os.environ, **env})
    monkeypatch.delenv("PROXIMA_GIT_COMMIT", raising=False)
    monkeypatch.delenv("GIT_DIR", raising=False)
    code = "from proxima.train_state import git_commit; print(git_commit())"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(package.parent)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "None"
