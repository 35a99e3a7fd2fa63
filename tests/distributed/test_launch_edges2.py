"""Edges of a multi-process run: a rank that lost its peer is not diagnosed as an env failure; a stop
with no checkpoint says so; the launcher checks a resumed config before it starts any rank."""

from __future__ import annotations

import signal
import sys

import pytest
import torch
import torch.distributed as dist

from proxima import distributed
from proxima.cli import main
from proxima.config import PPOConfig
from distributed_helpers import RecordingPopen, record_launches

PEER_LOSS = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
             "[127.0.0.1]:64225. This is typically caused by a remote worker crashing.")


# --- a lost peer is reported as such, never diagnosed as the env's failure -------------------------
@pytest.fixture
def process_group(tmp_path):
    """A real (one-process, gloo) process group, as a rank is in under torchrun; left afterwards."""
    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture
def env_check(monkeypatch):
    """check_env patched to record its calls and find a violation (the contract check of a Gymnasium env)."""
    from proxima.envs import checker

    calls = []

    def check_env(env_id, **kwargs):
        calls.append(env_id)
        return ["reset() returned an observation outside the observation space"]

    monkeypatch.setattr(checker, "check_env", check_env)
    return calls


def _gym_config():
    return PPOConfig(env_id="CartPole-v1", backend="gymnasium")


def test_a_lost_peer_in_a_process_group_is_not_diagnosed(process_group, env_check, capsys):
    from proxima.run_setup import diagnose_failure

    for error in (RuntimeError(PEER_LOSS), dist.DistNetworkError("Connection reset by peer")):
        problem = diagnose_failure(error, _gym_config(), lambda: "last good checkpoint: RUN/checkpoints/step_N.pt")
        assert problem is error
    assert env_check == []  # the user's env was not built and stepped again
    distributed.DistContext(rank=0, world_size=2).report_failure(problem)
    err = capsys.readouterr().err
    assert err.startswith("proxima: rank 0 stopped: lost contact with another rank (it failed or was stopped; ")
    # any other failure of a Gymnasium env is still checked against the contract, in a process group too
    problem = diagnose_failure(RuntimeError("shape mismatch somewhere"), _gym_config(), None)
    assert env_check == ["CartPole-v1"]
    assert "breaks the env contract: reset() returned an observation outside" in str(problem)


def test_a_peer_loss_text_outside_a_process_group_is_still_diagnosed(env_check):
    """Only a rank in a process group can have lost a peer: a single process's error that merely reads
    like one goes through the env check as before."""
    from proxima.run_setup import diagnose_failure

    assert not dist.is_initialized()
    problem = diagnose_failure(RuntimeError(PEER_LOSS), _gym_config(), None)
    assert env_check == ["CartPole-v1"]
    assert "breaks the env contract" in str(problem) and "Connection closed by peer" in str(problem)


def test_a_stop_without_a_checkpoint_says_none_was_written():
    from proxima.signals import TrainingInterrupted, checkpoint_line

    assert checkpoint_line(None) == "no checkpoint was written"
    stop = TrainingInterrupted(signal.SIGTERM, None)
    assert str(stop) == "stopped by SIGTERM; no checkpoint was written" and stop.exit_code == 143
    assert "None" not in str(TrainingInterrupted(signal.SIGTERM, None, "outside an iteration; " + checkpoint_line(None)))


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_gymnasium_env_rank_that_loses_its_peer_says_so(tmp_path):
    """The reviewer's repro: rank 1 fails at iteration 2 of a Gymnasium-backed run; rank 0 prints the
    documented line, not a stop with 'checkpoint: None' nor the env's contract (~20 s, 2 processes)."""
    from distributed_helpers import run

    res = run([sys.executable, "-m", "proxima", "train", "CartPole-v1", "--backend", "gymnasium", "--nproc", "2",
               "--num-envs", "2", "--num-steps", "32", "--total-timesteps", "4096", "--threads", "1", "--no-progress",
               "--run-dir", "run", "--eval-episodes", "0"], tmp_path, timeout=120,
              PROXIMA_TEST_FAIL_RANK=1, PROXIMA_TEST_FAIL_ITER=2, PROXIMA_DIST_TIMEOUT=60)
    assert res.returncode != 0
    assert "proxima: rank 1 failed: RuntimeError: test failure injected on rank 1 at iteration 2" in res.stderr
    assert "proxima: rank 0 stopped: lost contact with another rank" in res.stderr, res.stderr[-3000:]
    assert "checkpoint: None" not in res.stderr and "env contract" not in res.stderr, res.stderr[-3000:]


# --- a resume's config is checked before any rank starts --------------------------------------------
@pytest.fixture
def two_process_run(tmp_path, monkeypatch):
    """A run directory whose checkpoint (load_checkpoint/load_resumable patched) 2 processes wrote, and
    a launcher whose Popen only records."""
    from proxima import checkpoint

    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    path = run_dir / "checkpoints" / "step_000000004096.pt"
    path.write_bytes(b"")
    state = {"world_size": 2, "path": str(path), "config": PPOConfig(num_envs=8, num_steps=256).to_dict(),
             "global_step": 4096, "ranks": [{}, {}]}
    monkeypatch.setattr(checkpoint, "load_checkpoint", lambda p: state)
    monkeypatch.setattr(checkpoint, "load_resumable", lambda p, **kw: state)
    for name in ("TORCHELASTIC_RUN_ID", "WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    record_launches(monkeypatch)
    return run_dir


def _run(monkeypatch, argv):
    monkeypatch.setattr(sys, "argv", ["proxima", *argv])
    return main(argv)


@pytest.mark.parametrize("flags, line", [
    (["--threads", "0"], "proxima resume: error: --threads 0: must be at least 1"),
    (["--eval-every", "-5"], "proxima resume: error: --eval-every -5: must be 0 or more"),
    (["--keep-checkpoints", "-1"], "proxima resume: error: --keep-checkpoints -1: must be 0 (keep every checkpoint) or more"),
])
def test_resume_of_a_multi_process_run_checks_its_config_before_launching(two_process_run, monkeypatch, capsys, flags, line):
    assert _run(monkeypatch, ["resume", str(two_process_run), *flags]) == 2
    assert capsys.readouterr().err.splitlines() == [line]
    assert RecordingPopen.started == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("command", [["resume", "RUN"], ["train", "--resume", "RUN", "--nproc", "2"]])
def test_resume_on_cuda_without_cuda_fails_before_launching(two_process_run, monkeypatch, capsys, command):
    argv = [str(two_process_run) if a == "RUN" else a for a in command] + ["--device", "cuda"]
    assert _run(monkeypatch, argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"proxima {command[0]}: error: --device 'cuda': CUDA is not usable here (run `proxima doctor`); use --device cpu"]
    assert RecordingPopen.started == []


def test_resume_with_valid_flags_still_launches(two_process_run, monkeypatch, capsys):
    """The checks refuse the bad values only: the same resume with good ones starts torchrun with 2."""
    argv = ["resume", str(two_process_run), "--threads", "1", "--keep-checkpoints", "2", "--device", "cpu"]
    assert _run(monkeypatch, argv) == 0
    assert len(RecordingPopen.started) == 1
    cmd = RecordingPopen.started[0]
    assert cmd[cmd.index("--nproc-per-node") + 1] == "2" and cmd[-len(argv):] == argv


def test_a_launch_refusing_a_config_file_value_names_the_file(tmp_path, monkeypatch, capsys):
    # the launcher checks once before starting ranks; the line names the file, as the same command with --dry-run does
    started = record_launches(monkeypatch)
    config = tmp_path / "c.yaml"
    config.write_text("num_envs: 3\nnum_steps: 5\nnum_minibatches: 16\n")
    for extra in ([], ["--dry-run"]):
        argv = ["train", "--config", str(config), "--nproc", "2", "--run-dir", str(tmp_path / "run"), *extra]
        monkeypatch.setattr(sys, "argv", ["proxima", *argv])  # what the launcher passes on to its ranks
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2 and err.strip().startswith(f"proxima train: error: {config}: num_minibatches 16"), err
    assert started == [] and not (tmp_path / "run").exists()
