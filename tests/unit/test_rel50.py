"""Review 50 (reliability): the README's requeue idiom runs as written; a second Ctrl-C ends stdout with
the run directory and leaves no lock; a resume accepts --backend naming what auto chose for the run; a
run that lost config.yaml and meta.json is recreated with the note; a run's own file given to resume
points at the run; a run killed during its start (only its lock left) says how to start it again; a
--checkpoint-every 0 run's line names its cadence; a bad --device on a finished run is refused before
its note; --keep-checkpoints K on a finished run prunes to the newest K."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import proxima
from proxima.rundir import LOCK_NAME, RunLock
from tests.cli_helpers import TINY_RUN, run_main

ROOT = Path(__file__).resolve().parents[2]
#: the checkout whose proxima these tests import (a clone's, for a failing-first run of old code)
CODE = Path(proxima.__file__).resolve().parents[1]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(CODE), "OMP_NUM_THREADS": "1"}


def _tiny(run_dir, *more, capsys, steps=128) -> None:
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(run_dir), "--total-timesteps", str(steps),
                             *TINY_RUN, "--quiet", *more], capsys)
    assert code == 0, err


# -- 1. the documented requeue idiom, run literally ---------------------------------------------------------------

@pytest.mark.parametrize("doc", ["README.md", "docs/reliability.md"])
def test_the_documented_requeue_idiom_resumes_the_run_it_names(doc, tmp_path):
    text = " ".join((ROOT / doc).read_text().split())  # a line wrapped in the middle of the span joined back
    [idiom] = set(re.findall(r"`(RUN=\$\(proxima train \.\.\. \| tail -1\)[^`]*)`", text))
    assert "proxima resume" in idiom
    shim = tmp_path / "bin" / "proxima"  # `proxima` on PATH: this checkout's, as a user's installed one
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m proxima "$@"\n')
    shim.chmod(0o755)
    args = " ".join(["CartPole-v1", "--run-dir", "runs/cp", "--total-timesteps", "128", *TINY_RUN])
    script = idiom.replace("...", args, 1) + '\necho "RUN=[$RUN]"\n'
    out = subprocess.run(["bash", "-ec", script], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**_env(), "PATH": f"{shim.parent}:{os.environ['PATH']}"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "RUN=[runs/cp]" in out.stdout
    assert "runs/cp/checkpoints/step_000000000128.pt: the run is complete (128 steps)" in out.stderr  # the resume ran


# -- 2. a second Ctrl-C ------------------------------------------------------------------------------------------

def test_a_second_interrupt_ends_stdout_with_the_run_directory_and_removes_the_lock(tmp_path):
    # wide layers: an iteration takes long enough for both signals to land inside it, after the first checkpoint
    proc = subprocess.Popen([sys.executable, "-m", "proxima", "train", "CartPole-v1", "--run-dir", "N",
                             "--total-timesteps", "20480", "--num-envs", "4", "--hidden-sizes", "2048,2048",
                             "--checkpoint-every", "1", "--eval-episodes", "0", "--no-progress", "--threads", "1"],
                            cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not list((tmp_path / "N" / "checkpoints").glob("step_*.pt")) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "proxima: second interrupt, exiting now (last checkpoint kept); checkpoint: N/checkpoints/step_" in err
    assert out.splitlines()[-1:] == ["run directory: N"]
    assert not (tmp_path / "N" / LOCK_NAME).exists()


# -- 3. --backend naming what auto chose -------------------------------------------------------------------------

def test_a_resume_takes_the_backend_auto_chose_for_the_run_and_refuses_another(tmp_path, capsys):
    run = tmp_path / "run"
    _tiny(run, capsys=capsys)
    assert "backend: auto" in (run / "config.yaml").read_text()
    code, out, err = run_main(["resume", str(run), "--backend", "native", "--total-timesteps", "192"], capsys)
    assert code == 0, err
    assert (run / "checkpoints" / "step_000000000192.pt").is_file()
    code, _, err = run_main(["resume", str(run), "--backend", "gymnasium", "--total-timesteps", "256"], capsys)
    assert code == 2
    assert err == ("proxima resume: error: --backend 'gymnasium': cannot change when resuming (the run was trained with "
                   "'auto', which chose 'native'); leave it out, or give --backend native\n")


# -- 4. config.yaml and meta.json both gone ----------------------------------------------------------------------

def test_a_resume_of_a_run_without_config_and_meta_recreates_meta_with_its_marker_and_note(tmp_path, capsys):
    run = tmp_path / "run"
    _tiny(run, capsys=capsys)
    (run / "config.yaml").unlink()
    (run / "meta.json").unlink()
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "192"], capsys)
    assert code == 0, err
    assert f"proxima: note: {run / 'meta.json'} was missing; recreated from this resume at step 128" in err
    assert json.loads((run / "meta.json").read_text())["recreated_at_step"] == 128


# -- 5. a run's own file given to resume -------------------------------------------------------------------------

@pytest.mark.parametrize("name, more", [("config.yaml", []), ("metrics.csv", ["--run-dir", "elsewhere"])])
def test_resume_of_a_runs_own_file_says_it_is_no_checkpoint_and_how_to_resume_the_run(name, more, tmp_path, capsys,
                                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    _tiny("run", capsys=capsys)
    code, _, err = run_main(["resume", f"run/{name}", *more], capsys)
    assert code == 2
    assert err == (f"proxima resume: error: run/{name}: not a checkpoint but a file of the run run; to continue that "
                   "run: proxima resume run\n")
    assert not (tmp_path / "elsewhere").exists()


# -- 6. a run killed during its start ----------------------------------------------------------------------------

def test_a_directory_holding_only_a_dead_runs_lock_says_how_to_start_the_run_again(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lock = RunLock("D")
    lock.acquire()
    lock._beat_stop.set()  # the heartbeat of this process's lock: a killed run's lock is refreshed by no one
    dead = subprocess.Popen(["true"])
    dead.wait()
    owner = json.loads((tmp_path / "D" / LOCK_NAME).read_text())
    (tmp_path / "D" / LOCK_NAME).write_text(json.dumps({**owner, "pid": dead.pid}))  # a start killed by kill -9
    line = ("D: the run stopped during its start, before it wrote any file but its lock (.proxima.lock), so there is "
            "nothing to evaluate or resume; train it again from the start: proxima train ENV_ID --run-dir D")
    for command in ("resume", "eval"):
        code, _, err = run_main([command, "D"], capsys)
        assert (code, err) == (2, f"proxima {command}: error: {line}\n")
    # the command it names works as given (no --overwrite needed: nothing is there but the stale lock)
    code, out, err = run_main(["train", "CartPole-v1", "--run-dir", "D", "--total-timesteps", "64", *TINY_RUN], capsys)
    assert code == 0, err
    assert out.splitlines()[-1] == "run directory: D"


# -- 8. a --checkpoint-every 0 run's cadence ---------------------------------------------------------------------

def test_a_run_of_checkpoint_every_0_stopped_before_its_first_checkpoint_names_its_clock_cadence(tmp_path, capsys,
                                                                                                 monkeypatch):
    monkeypatch.chdir(tmp_path)
    _tiny("S", "--checkpoint-every", "0", "--checkpoint-minutes", "5", capsys=capsys)
    # as a kill before the first checkpoint leaves it: the start's files, no checkpoint, no row logged
    for path in (tmp_path / "S" / "checkpoints").iterdir():
        path.unlink()
    csv = tmp_path / "S" / "metrics.csv"
    csv.write_text(csv.read_text().splitlines(keepends=True)[0])
    code, _, err = run_main(["resume", "S"], capsys)
    assert code == 2
    assert err == ("proxima resume: error: S: the run stopped before its first checkpoint (with --checkpoint-every 0, one "
                   "is written every 5 minutes (--checkpoint-minutes) and at the end), so there is nothing to evaluate "
                   "or resume; train it again from the start: proxima train --config S/config.yaml --resume auto (its "
                   "files are moved aside)\n")


# -- 7. --device on a finished run -------------------------------------------------------------------------------

@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_cuda_device_on_a_finished_runs_resume_is_refused_before_the_complete_note(tmp_path, capsys):
    run = tmp_path / "run"
    _tiny(run, capsys=capsys)
    code, out, err = run_main(["resume", str(run), "--device", "cuda"], capsys)
    assert (code, out) == (2, "")
    assert err == ("proxima resume: error: --device 'cuda': CUDA is not usable here (run `proxima doctor`); "
                   "use --device cpu\n")


# -- 9. --keep-checkpoints on a finished run ---------------------------------------------------------------------

def test_keep_checkpoints_on_a_finished_runs_resume_prunes_to_the_newest_k(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _tiny("L", "--checkpoint-every", "1", "--keep-checkpoints", "0", capsys=capsys, steps=256)
    folder = tmp_path / "L" / "checkpoints"
    assert len(list(folder.glob("step_*.pt"))) == 4
    code, out, err = run_main(["resume", "L", "--keep-checkpoints", "2"], capsys)
    assert code == 0, err
    assert sorted(p.name for p in folder.glob("step_*.pt")) == ["step_000000000192.pt", "step_000000000256.pt"]
    assert ("proxima: note: --keep-checkpoints 2: removed the run's 2 oldest checkpoint(s) from L/checkpoints, keeping "
            "the newest 2 (the run trains nothing more, and writes no checkpoint)") in err
    assert "keep_checkpoints: 0" in (tmp_path / "L" / "config.yaml").read_text()  # the run's own value, as documented
