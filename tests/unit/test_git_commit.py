"""train_state.git_commit(): HEAD of the checkout the package runs from, else $PROXIMA_GIT_COMMIT (what
the container image's build records, docker/README.md) when it looks like a commit, else None."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import proxima
from proxima.train_state import git_commit
import warm_python

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
    out = warm_python.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(package.parent)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "None"


# --- git_dirty: whether the checkout differed from the commit it records ------------------------------------------
GIT_USER = {"GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x", "GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@x"}


def _git_record_of(package_parent: Path, tmp_path: Path, **env) -> dict:
    """train_state.git_record() in a process that imports the Proxima copy under ``package_parent``."""
    import json
    import sys

    code = "import json; from proxima.train_state import git_record; print(json.dumps(git_record()))"
    base = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "PROXIMA_GIT_COMMIT")}
    out = warm_python.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={**base, "PYTHONPATH": str(package_parent), **env})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture
def own_checkout(tmp_path) -> Path:
    """A git checkout of a copy of Proxima (its root holds the package, as this repository's does), committed."""
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(Path(proxima.__file__).resolve().parent, repo / "proxima", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "README.md").write_text("proxima\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "proxima"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env={**os.environ, **GIT_USER}, capture_output=True)
    return repo


def test_git_dirty_says_whether_a_tracked_file_differs_from_the_recorded_commit(own_checkout, tmp_path):
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=own_checkout, capture_output=True, text=True).stdout.strip()
    assert _git_record_of(own_checkout, tmp_path) == {"git_commit": head, "git_dirty": False}
    (own_checkout / "scratch.txt").write_text("untracked\n")  # a file git does not track is no change to the code
    assert _git_record_of(own_checkout, tmp_path) == {"git_commit": head, "git_dirty": False}
    with open(own_checkout / "README.md", "a") as f:  # any tracked file, not only the package's
        f.write("edited\n")
    assert _git_record_of(own_checkout, tmp_path) == {"git_commit": head, "git_dirty": True}


def test_git_dirty_is_none_without_a_checkout_or_git(tmp_path, monkeypatch):
    """Outside a checkout the recorded commit (the image's) says nothing about local edits: null, not false."""
    record = _git_record_of(Path(proxima.__file__).resolve().parents[1], tmp_path, GIT_DIR=str(tmp_path / "none"),
                            PROXIMA_GIT_COMMIT=COMMIT)
    assert record == {"git_commit": COMMIT, "git_dirty": None}
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on PATH
    monkeypatch.delenv("PROXIMA_GIT_COMMIT", raising=False)
    from proxima.train_state import git_record

    assert git_record() == {"git_commit": None, "git_dirty": None}
