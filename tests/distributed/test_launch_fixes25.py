"""The --nproc launcher after its ranks: a job whose ranks all stopped or refused alike exits with their
code, not torchrun's "FAILED" traceback and 1; any other failure gets one line naming the ranks; what
every rank would refuse of a resume (a module env not named, a metrics.csv that is no file) or of a
new run's directory (a folder not writable) is refused once, before torchrun starts; a run in use by
a --nproc run names the launcher to signal."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import warm_python
from cli_helpers import edit_checkpoint, one_error_line, run_main
from distributed_helpers import env, record_launches

TINY = ["--num-envs", "4", "--num-steps", "16", "--total-timesteps", "128", "--threads", "1", "--no-progress",
        "--eval-episodes", "0"]

# each rank exits with the code at its index of RANK_CODES, after a moment (so both have started); a
# failing rank waits for the ranks that succeed to have exited (their done_<rank> file, then a moment),
# else torchrun's teardown SIGTERM may reach a rank still starting on a loaded machine, and the line
# names it as killed
RANK_SCRIPT = textwrap.dedent("""
    import os, pathlib, sys, time
    codes = [int(c) for c in os.environ["RANK_CODES"].split(",")]
    rank = int(os.environ["RANK"])
    time.sleep(0.5)
    if codes[rank] == 0:
        pathlib.Path(f"done_{rank}").touch()
    else:
        deadline = time.time() + 60
        while time.time() < deadline and not all(pathlib.Path(f"done_{r}").exists() for r, c in enumerate(codes) if c == 0):
            time.sleep(0.05)
        time.sleep(0.5)
    sys.exit(codes[rank])
""")


def _torchrun(tmp_path, codes: str) -> subprocess.CompletedProcess:
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    cmd = [sys.executable, "-m", "proxima.torchrun", "--nproc-per-node", "2", "--standalone", str(script)]
    # a warm launcher (warm_python: torch imported already); the ranks, which import nothing, start cold as torchrun starts them
    return warm_python.run(cmd, cwd=tmp_path, env=env(RANK_CODES=codes), capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("codes, rc", [("143,143", 143), ("2,2", 2)])
def test_ranks_that_all_stopped_or_refused_alike_give_their_code_without_a_traceback(tmp_path, codes, rc):
    done = _torchrun(tmp_path, codes)
    assert done.returncode == rc, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "FAILED" not in done.stderr, done.stderr[-3000:]
    assert "proxima: the job failed" not in done.stderr


def test_any_other_failure_is_one_line_naming_the_ranks_and_exit_1(tmp_path):
    done = _torchrun(tmp_path, "1,0")
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "FAILED" not in done.stderr, done.stderr[-3000:]
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("proxima:")]
    assert lines == ["proxima: the job failed: rank 0 (first) exited 1; each rank's own lines above say why"]


def test_ranks_torchrun_ended_after_a_refusal_do_not_hide_it():
    """torchrun ends the other ranks with SIGTERM once one fails: killed (-15) or stopped by their
    handler (143), they do not turn a refusal (2) or a Ctrl-C (130) into a failure."""
    from proxima.torchrun import quiet_exit_code

    assert quiet_exit_code([2, -15]) == quiet_exit_code([143, 2]) == 2
    assert quiet_exit_code([130, -15]) == 130
    assert quiet_exit_code([143, -15]) == 143
    assert quiet_exit_code([1, 143]) is None and quiet_exit_code([2, 130]) is None and quiet_exit_code([-9, 1]) is None


@pytest.fixture
def two_process_run(tmp_path, monkeypatch, capsys):
    """R (cwd: tmp_path): a finished CartPole run whose checkpoint reads as a 2-process run's, so that
    `proxima resume R` launches 2 ranks (test_docs_promises.as_two_processes)."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", "R", *TINY], capsys)
    assert code == 0, err

    def as_two_processes(state):
        state["world_size"], state["iteration"], state["ranks"] = 2, state["iteration"] // 2, [{}, {}]
        state["config"]["total_timesteps"] = 100_000  # not complete: the resume trains

    edit_checkpoint(tmp_path / "R", as_two_processes)
    monkeypatch.setattr(sys, "argv", ["proxima", "resume", "R"])
    return tmp_path / "R"


def test_a_resume_of_a_module_env_run_without_env_is_refused_before_launch(two_process_run, capsys, monkeypatch):
    def module_env(state):
        state["config"]["env_id"] = "failenv:FailEnv"

    edit_checkpoint(two_process_run, module_env)
    config = two_process_run / "config.yaml"  # the run's own record says so too: not another run's checkpoint
    config.write_text(config.read_text().replace("env_id: CartPole-v1", "env_id: failenv:FailEnv"))
    started = record_launches(monkeypatch)
    code, _, err = run_main(["resume", "R"], capsys)
    assert code == 2, err
    line = one_error_line(err, "proxima resume")
    assert "the recorded env 'failenv:FailEnv' would import and run module 'failenv'" in line
    assert "pass --env failenv:FailEnv to `proxima resume`" in line
    assert started == []


def test_a_resume_whose_metrics_csv_is_a_directory_is_refused_before_launch(two_process_run, capsys, monkeypatch):
    started = record_launches(monkeypatch)
    code, _, err = run_main(["resume", "R"], capsys)  # as it is: launched
    assert code == 0 and len(started) == 1, err
    started.clear()
    (two_process_run / "metrics.csv").unlink()
    (two_process_run / "metrics.csv").mkdir()
    code, _, err = run_main(["resume", "R"], capsys)
    assert code == 2, err
    assert one_error_line(err, "proxima resume") == (f"{two_process_run.resolve()}/metrics.csv: is a directory, not a file; "
                                                     "proxima resume reads and rewrites it")
    assert started == []


def _not_writable_folder(tmp_path):
    """A folder this user may not create anything in (for root, who may write a chmod 555 folder, a
    read-only system folder where access(2) says so); None when there is none here."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    for candidate in (folder, "/proc/sys"):
        if os.path.isdir(candidate) and not os.access(candidate, os.W_OK):
            return candidate
    return None


def test_a_new_run_in_a_folder_not_writable_is_refused_before_launch(tmp_path, capsys, monkeypatch):
    folder = _not_writable_folder(tmp_path)
    if folder is None:
        pytest.skip("no folder here that access(2) reports not writable")
    run_dir = os.path.join(folder, "run")
    argv = ["train", "CartPole-v1", "--nproc", "2", "--run-dir", run_dir, *TINY]
    monkeypatch.setattr(sys, "argv", ["proxima", *argv])
    started = record_launches(monkeypatch)
    try:
        code, _, err = run_main(argv, capsys)
    finally:
        (tmp_path / "ro").chmod(0o755)
    assert code == 2, err
    assert one_error_line(err, "proxima train") == (f"--run-dir {run_dir}: cannot create it (Permission denied in {folder}); "
                                                    "choose another --run-dir")
    assert started == [] and not os.path.exists(run_dir)


# the process tree of a --nproc run: launcher (its command line holds "proxima") -> proxima.torchrun -> rank 0
_RANK = "import time; time.sleep(120)"
_TORCHRUN = ("import subprocess, sys\np = subprocess.Popen([sys.executable, '-c', %r])\n"
             "import os\nprint(os.getpid(), p.pid, flush=True)\np.wait()\n" % _RANK)
_LAUNCHER = "import subprocess, sys\nsubprocess.run([sys.executable, '-c', %r, 'proxima.torchrun'])\n" % _TORCHRUN


def test_a_run_in_use_by_a_nproc_run_names_its_launcher(tmp_path, capsys, monkeypatch):
    import json
    import socket

    from proxima import rundir

    launcher = subprocess.Popen([sys.executable, "-c", _LAUNCHER, "proxima"], stdout=subprocess.PIPE, text=True)
    torchrun = rank0 = None
    try:
        torchrun, rank0 = (int(p) for p in launcher.stdout.readline().split())
        run = tmp_path / "run"
        run.mkdir()
        (run / rundir.LOCK_NAME).write_text(json.dumps({"pid": rank0, "host": socket.gethostname(),
                                                        "start": rundir._process_start(rank0), "since": "now"}))
        argv = ["train", "CartPole-v1", "--nproc", "2", "--run-dir", str(run), *TINY]
        monkeypatch.setattr(sys, "argv", ["proxima", *argv])
        started = record_launches(monkeypatch)
        code, _, err = run_main(argv, capsys)
        assert code == 2 and started == [], err
        line = one_error_line(err, "proxima train")
        assert line.startswith(f"run {run} is in use by pid {rank0} ")
        assert line.endswith(f"; pid {rank0} is rank 0 of a --nproc run: stop that run by signalling its launcher, "
                             f"pid {launcher.pid} (kill -INT {launcher.pid}: every rank checkpoints and stops)")
    finally:
        for pid in (rank0, torchrun):
            if pid is not None:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
        launcher.wait(timeout=30)


def test_another_runs_checkpoint_is_refused_before_launch(two_process_run, capsys, monkeypatch):
    # every rank refused it (run_setup.check_same_run) after torchrun started them: K copies of the line
    started = record_launches(monkeypatch)
    edit_checkpoint(two_process_run, lambda s: s["config"].__setitem__("seed", 7))
    code, _, err = run_main(["resume", "R"], capsys)
    assert code == 2, err
    line = one_error_line(err, "proxima resume")
    assert line.startswith("R/checkpoints/step_000000000128.pt: records seed 7 where ") and "says 1: not this run's checkpoint" in line, line
    assert started == []
