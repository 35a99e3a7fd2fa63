"""meta.json says where and how each part of a run was started: the host and working directory of the
first start and of every resume (a relative --config or a module env is the working directory's), the
command a population recorded (one that runs again), and a lost meta.json recreated by a resume says so."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys

import pytest

from proxima import cli
from proxima.population_run import resume_population
from proxima.report import _machine
from tests.cli_helpers import TINY_POP, TINY_RUN, run_main


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    where = tmp_path_factory.mktemp("where")
    old = os.getcwd()
    os.chdir(where)
    try:
        assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", "run", "--quiet"]) == 0
    finally:
        os.chdir(old)
    return where / "run"


def test_first_start_and_resume_record_host_and_working_directory(tmp_path, monkeypatch, capsys, finished):
    meta = json.loads((finished / "meta.json").read_text())
    assert meta["host"] == socket.gethostname()
    assert meta["cwd"] == str(finished.parent)  # the folder `--run-dir run` was relative to
    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, _, err = run_main(["resume", str(run_dir), "--total-timesteps", "128", "--quiet"], capsys)
    assert code == 0, err
    entry = json.loads((run_dir / "meta.json").read_text())["resumes"][0]
    assert entry["host"] == socket.gethostname() and entry["cwd"] == str(elsewhere)
    assert _machine(meta)["host"] == socket.gethostname()


def test_a_lost_meta_json_is_recreated_by_a_resume_that_says_so(tmp_path, capsys, finished):
    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir)
    (run_dir / "meta.json").unlink()
    code, _, err = run_main(["resume", str(run_dir), "--total-timesteps", "128"], capsys)
    assert code == 0, err
    assert f"{run_dir / 'meta.json'} was missing; recreated from this resume at step 64" in err
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["recreated_at_step"] == 64 and "resumes" not in meta
    cells = _machine(meta)
    assert cells["command"].endswith("(a resume at step 64: meta.json was lost and recreated)")
    assert cells["started"].endswith("(a resume at step 64: meta.json was lost and recreated)")
    # a loose checkpoint resumed into a new run directory starts that run's record: no note
    fresh = tmp_path / "fresh"
    checkpoint = tmp_path / "loose.pt"
    shutil.copy(sorted((finished / "checkpoints").glob("step_*.pt"))[-1], checkpoint)
    code, _, err = run_main(["resume", str(checkpoint), "--run-dir", str(fresh), "--total-timesteps", "128"], capsys)
    assert code == 0, err
    assert "was missing" not in err and "recreated_at_step" not in json.loads((fresh / "meta.json").read_text())


def test_a_population_records_the_command_typed_and_a_python_resume_the_call(tmp_path, monkeypatch, capsys):
    import proxima

    run_dir = tmp_path / "R"
    main = os.path.join(os.path.dirname(proxima.__file__), "__main__.py")
    # `python -m proxima train ...`: argv[0] is the package's __main__.py, which cannot be run as a file
    argv = [main, "train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(run_dir), "--total-timesteps", "64",
            "--eval-episodes", "0", "--quiet", *TINY_POP]
    monkeypatch.setattr(sys, "argv", argv)
    code, _, err = run_main(argv[1:], capsys)
    assert code == 0, err
    members = sorted(p for p in run_dir.iterdir() if p.name.startswith("m0"))
    first = json.loads((members[0] / "meta.json").read_text())
    assert first["command"][:3] == [sys.executable, "-m", "proxima"] and first["command"][3:] == argv[1:]
    assert first["host"] == socket.gethostname() and first["cwd"] == os.getcwd()
    monkeypatch.setattr(sys, "argv", ["study.py", "--fast"])
    resume_population(run_dir, overrides={"total_timesteps": 128}, quiet=True, evaluate_at_end=False)
    for m in members:
        entry = json.loads((m / "meta.json").read_text())["resumes"][-1]
        assert entry["command"] == "python: proxima.population_run.resume_population(...) from study.py --fast"
    # the CLI's resume records what was typed
    monkeypatch.setattr(sys, "argv", [main, "resume", str(run_dir), "--total-timesteps", "192", "--quiet"])
    code, _, err = run_main(["resume", str(run_dir), "--total-timesteps", "192", "--quiet"], capsys)
    assert code == 0, err
    entry = json.loads((members[1] / "meta.json").read_text())["resumes"][-1]
    assert entry["command"] == [sys.executable, "-m", "proxima", "resume", str(run_dir), "--total-timesteps", "192", "--quiet"]
    # `train ENV --seeds S --resume RUN`: that typed line too, not the Python call's placeholder
    typed = ["train", "CartPole-v1", "--seeds", "1-2", "--resume", str(run_dir), "--total-timesteps", "256", "--quiet"]
    monkeypatch.setattr(sys, "argv", [main, *typed])
    code, _, err = run_main(typed, capsys)
    assert code == 0, err
    entry = json.loads((members[0] / "meta.json").read_text())["resumes"][-1]
    assert len(json.loads((members[0] / "meta.json").read_text())["resumes"]) == 3
    assert entry["command"] == [sys.executable, "-m", "proxima", *typed]
