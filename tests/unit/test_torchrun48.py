"""proxima.torchrun, the --nproc launcher's torchrun: a rank that wrote to a closed pipe (``| head``) ends the job
with 141 and no 'job failed' line (PIPE_CODE); torch's own log lines are held and printed only for a real
failure (HeldLogs); the ranks' error files go to the launcher's own folder, removed with it, never to a
/tmp/torchelastic_* left behind (needs_log_dir); a stop after the ranks completed the run exits 0 (run_completed)."""

import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from proxima import torchrun

REPO = Path(__file__).resolve().parents[2]
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


@pytest.fixture
def handlers_back():
    before = {sig: signal.getsignal(sig) for sig in STOPS}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """tempfile's folder (torch's /tmp/torchelastic_*, the launcher's marker folder) in tmp_path."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


@pytest.fixture
def torch_lines():
    """The records that reach torch's own handler on "torch.distributed" (what torchrun prints on stderr)."""
    seen = []

    class Catch(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    catch = Catch()
    logger = logging.getLogger("torch.distributed")
    logger.addHandler(catch)
    yield seen
    logger.removeHandler(catch)


def _failures(**codes) -> dict:
    return {int(rank[1:]): SimpleNamespace(exitcode=code) for rank, code in codes.items()}


# --- a closed pipe ----------------------------------------------------------------------------------
@pytest.mark.parametrize("codes", [{"r0": 141}, {"r0": 141, "r1": -signal.SIGTERM}, {"r0": 141, "r1": 141}])
def test_a_rank_that_wrote_to_a_closed_pipe_ends_the_job_with_141_and_no_failed_line(capsys, codes):
    assert torchrun.child_failure_exit(_failures(**codes), first=0) == 141
    assert capsys.readouterr().err == ""


def test_a_pipe_code_beside_a_real_failure_is_still_the_job_failed_line(capsys):
    assert torchrun.child_failure_exit(_failures(r0=141, r1=1), first=1) == 1
    assert capsys.readouterr().err == ("proxima: the job failed: rank 1 (first) exited 1; rank 0 exited 141; "
                                       "each rank's own lines above say why\n")


# --- torch's own log lines --------------------------------------------------------------------------
def test_torchs_warnings_and_errors_are_held_until_shown(torch_lines):
    api = logging.getLogger("torch.distributed.elastic.multiprocessing.api")
    with torchrun.HeldLogs() as logs:
        api.error("failed (exitcode: %s) local_rank: %s", 143, 0)
        logging.getLogger("torch.distributed.launcher.api").warning("Received 15 death signal, shutting down workers")
    assert torch_lines == []
    logs.show()
    assert torch_lines == ["failed (exitcode: 143) local_rank: 0", "Received 15 death signal, shutting down workers"]
    assert logging.getLogger("torch.distributed.elastic").propagate and api.handlers == []


def test_torchs_info_lines_pass_at_once(torch_lines):
    api = logging.getLogger("torch.distributed.elastic.multiprocessing.api")
    level = api.level
    api.setLevel(logging.INFO)  # as LOGLEVEL=INFO sets it
    try:
        with torchrun.HeldLogs():
            api.info("starting 2 processes")
            assert torch_lines == ["starting 2 processes"]
    finally:
        api.setLevel(level)


def _fake_torchrun(monkeypatch, run):
    import torch.distributed.run as torch_run

    monkeypatch.setattr(torch_run, "main", run)


def test_a_stop_drops_torchs_lines_and_a_real_failure_prints_them_before_the_jobs_line(
        monkeypatch, handlers_back, own_tmp, torch_lines, capsys):
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    api = logging.getLogger("torch.distributed.elastic.multiprocessing.api")

    def failing(code):
        def run(argv):
            api.error("failed (exitcode: %s) local_rank: 0", code)
            failure = ProcessFailure(local_rank=0, pid=1, exitcode=code, error_file="/nonexistent")
            raise ChildFailedError("proxima", {0: failure})
        return run

    _fake_torchrun(monkeypatch, failing(143))
    assert torchrun.main([]) == 143
    assert torch_lines == [] and capsys.readouterr().err == ""
    _fake_torchrun(monkeypatch, failing(1))
    assert torchrun.main([]) == 1
    assert torch_lines == ["failed (exitcode: 1) local_rank: 0"]
    assert capsys.readouterr().err == "proxima: the job failed: rank 0 (first) exited 1; each rank's own lines above say why\n"


# --- torchrun's log folder --------------------------------------------------------------------------
COMMAND = ["--nproc-per-node", "2", "--standalone", "-m", "proxima", "train", "CartPole-v1"]


def test_torchrun_without_a_log_dir_would_leave_a_folder_of_its_own(monkeypatch):
    monkeypatch.delenv("PET_LOG_DIR", raising=False)
    assert torchrun.needs_log_dir(COMMAND)


@pytest.mark.parametrize("own", [["--log-dir", "/mine"], ["--log_dir=/mine"], ["--redirects", "3"], ["--tee", "1"]])
def test_a_log_dir_or_log_files_asked_for_keep_torchs_folder(monkeypatch, own):
    monkeypatch.delenv("PET_LOG_DIR", raising=False)
    assert not torchrun.needs_log_dir([*own, *COMMAND])


def test_a_log_dir_set_by_pet_log_dir_is_kept(monkeypatch):
    monkeypatch.setenv("PET_LOG_DIR", "/mine")
    assert not torchrun.needs_log_dir(COMMAND)


def test_a_command_torchrun_refuses_is_left_to_torchrun_to_say(capsys):
    assert not torchrun.needs_log_dir(["--no-such-option"])
    assert not torchrun.needs_log_dir(["--help"])
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("ends", ["returns", "fails"])
def test_torchruns_log_folder_is_in_the_launchers_folder_and_removed_with_it(monkeypatch, handlers_back, own_tmp, ends):
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
    from torch.distributed.run import parse_args

    monkeypatch.delenv("PET_LOG_DIR", raising=False)
    given = []

    def run(argv):
        log_dir = parse_args(argv).log_dir  # as torchrun reads it
        given.append(log_dir)
        os.makedirs(os.path.join(log_dir, "run_x", "attempt_0", "0"))  # as torch makes it
        if ends == "fails":
            raise ChildFailedError("proxima", {0: ProcessFailure(local_rank=0, pid=1, exitcode=2, error_file="/no")})

    _fake_torchrun(monkeypatch, run)
    assert torchrun.main(COMMAND) == (0 if ends == "returns" else 2)
    assert given[0].startswith(str(own_tmp / torchrun.MARKER_PREFIX))
    assert list(own_tmp.iterdir()) == []
    assert "PET_LOG_DIR" not in os.environ


# --- a stop after the run completed -----------------------------------------------------------------
def _agent(**codes):
    handlers = {int(r[1:]): SimpleNamespace(proc=SimpleNamespace(poll=lambda c=c: c)) for r, c in codes.items()}
    return SimpleNamespace(_pcontext=SimpleNamespace(subprocess_handlers=handlers))


@pytest.mark.parametrize("codes, done", [
    ({"r0": 0, "r1": 0}, True),
    ({"r0": 0, "r1": -signal.SIGTERM}, True),  # ended by torchrun's teardown on its way out
    ({"r0": 143, "r1": 143}, False),  # stopped with a checkpoint: not completed
    ({"r0": 0, "r1": None}, False),  # still running
    ({"r0": 0, "r1": 1}, False),
    ({"r1": 0}, False),
])
def test_the_run_completed_when_rank_0_exited_0_and_no_other_failed(codes, done):
    assert torchrun.run_completed(_agent(**codes)) is done


def test_no_agent_or_no_ranks_is_no_completed_run():
    assert not torchrun.run_completed(SimpleNamespace(_pcontext=None))
    assert not torchrun.run_completed(_agent())


@pytest.mark.parametrize("codes, exit_code, line", [
    ({"r0": 0, "r1": 0}, 0, "proxima: SIGTERM came after the run had completed; exit 0\n"),
    ({"r0": 143, "r1": 143}, 143, ""),
])
def test_a_stop_as_torchrun_tears_down_a_completed_run_exits_0(monkeypatch, handlers_back, own_tmp, torch_lines,
                                                                capsys, codes, exit_code, line):
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.multiprocessing.api import SignalException

    monkeypatch.setattr(LocalElasticAgent, "_start_workers", lambda self, group: None)
    agent = _agent(**codes)

    def run(argv):
        LocalElasticAgent._start_workers(agent, None)
        logging.getLogger("torch.distributed.elastic.agent.server.api").warning("Received 15 death signal")
        raise SignalException("stop", signal.SIGTERM)

    _fake_torchrun(monkeypatch, run)
    assert torchrun.main([]) == exit_code
    assert capsys.readouterr().err == line
    assert torch_lines == []


# --- two real --nproc 2 runs ------------------------------------------------------------------------
def _env(tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOGLEVEL")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), TMPDIR=str(tmp))
    return env


def _train(tmp_path, run_dir, steps):
    return [sys.executable, "-m", "proxima", "train", "CartPole-v1", "--nproc", "2", "--num-envs", "4", "--num-steps", "32",
            "--total-timesteps", str(steps), "--run-dir", str(tmp_path / run_dir)]


def test_a_nproc_run_piped_into_head_exits_141_quietly_and_leaves_no_torchelastic_folder(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    with open(tmp_path / "err", "w") as err:
        proc = subprocess.Popen(_train(tmp_path, "pipe", 1024), cwd=tmp_path, env=_env(tmp), stdout=subprocess.PIPE,
                                stderr=err)
        proc.stdout.close()  # as `| head -1` does once it has its line: rank 0's next line meets a closed pipe
        code = proc.wait(timeout=300)
    stderr = (tmp_path / "err").read_text()
    assert code == 141, stderr
    assert "job failed" not in stderr and "exitcode" not in stderr, stderr
    assert (tmp_path / "pipe" / "checkpoints" / "step_000000001024.pt").is_file()
    assert list(tmp.iterdir()) == []


def test_a_sigterm_to_a_nproc_run_prints_no_torch_log_lines(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    with open(tmp_path / "err", "w") as err:
        proc = subprocess.Popen(_train(tmp_path, "stop", 200192), cwd=tmp_path, env=_env(tmp),
                                stdout=subprocess.DEVNULL, stderr=err)
        try:
            deadline = time.monotonic() + 240
            while "step 256/" not in (tmp_path / "err").read_text() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    stderr = (tmp_path / "err").read_text()
    assert code == 143, stderr
    assert "proxima: stopped by SIGTERM; checkpoint: " in stderr
    assert not [line for line in stderr.splitlines() if line[:1] in "EW" and "] " in line], stderr
    assert list(tmp.iterdir()) == []
