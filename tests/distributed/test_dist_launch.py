"""The launcher and the distributed helpers, in one process (no torchrun started)."""

from __future__ import annotations

import os
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from proxima import cpuinfo, distributed, launch
from proxima.cli import main
from proxima.config import ConfigError
import warm_python


def test_strip_nproc():
    argv = ["train", "CartPole-v1", "--nproc", "2", "--lr", "1e-3", "--nproc=4", "--num-envs", "8"]
    assert launch.strip_nproc(argv) == ["train", "CartPole-v1", "--lr", "1e-3", "--num-envs", "8"]


def test_torchrun_command():
    cmd = launch.torchrun_command(3, ["train", "CartPole-v1", "--nproc", "3", "--seed", "7"], python="py")
    assert cmd == ["py", "-m", "proxima.torchrun", "--nproc-per-node", "3", "--standalone",
                   "-m", "proxima", "train", "CartPole-v1", "--seed", "7"]


def test_torchrun_takes_a_stop_once_and_exits_with_its_code(monkeypatch):
    """A copy of the stop that reaches torchrun while it stops its ranks is not raised inside that
    shutdown (it printed a traceback from torchrun's logging); the stop ends in 128 + signum."""
    import os
    import signal

    import torch.distributed.run as run
    from torch.distributed.elastic.multiprocessing import api

    from proxima import torchrun

    raised = []

    def fake_torchrun(argv):  # as torchrun's agent: the handler installed, the signal, the shutdown
        old = signal.signal(signal.SIGTERM, api._terminate_process_handler)
        try:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.1)
            except api.SignalException:
                raised.append(1)
                os.kill(os.getpid(), signal.SIGTERM)  # the job-wide copy, during the shutdown
                time.sleep(0.1)
                raised.append("shutdown finished")
                raise
        finally:
            signal.signal(signal.SIGTERM, old)

    monkeypatch.setattr(run, "main", fake_torchrun)
    original = api._terminate_process_handler
    assert torchrun.main([]) == 143 and raised == [1, "shutdown finished"]
    assert api._terminate_process_handler is original  # as it was, for whatever runs next in this process


@pytest.fixture
def no_spawn(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the launcher started a process for a run that should fail first")

    # the launcher's own Popen only: its checks may run other subprocesses (platform.processor)
    monkeypatch.setattr(launch, "subprocess", SimpleNamespace(Popen=refuse))


def test_bad_config_fails_before_launching(no_spawn, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["proxima", "train", "CartPole-v1", "--nproc", "2", "--num-envs", "0"])
    assert main(sys.argv[1:]) == 2
    assert "--num-envs" in capsys.readouterr().err


def test_batch_larger_than_total_counts_all_processes(no_spawn, capsys, monkeypatch):
    argv = ["train", "CartPole-v1", "--nproc", "2", "--num-envs", "4", "--num-steps", "128", "--total-timesteps", "600"]
    monkeypatch.setattr(sys, "argv", ["proxima", *argv])
    assert main(argv) == 2
    assert "x 2 processes = 1,024 steps" in capsys.readouterr().err


def test_k_cpu_processes_that_each_fit_but_not_together_are_refused_before_launching(no_spawn, capsys, monkeypatch):
    """On the CPU the ranks share the machine's memory, each with its own buffers and networks."""
    import torch

    from proxima import sizing
    from proxima.config import PPOConfig

    cfg = PPOConfig(env_id="CartPole-v1", num_envs=65536, num_steps=64)
    one = sizing.estimate_bytes(cfg, 4, 1, True) + sizing.eval_bytes(cfg, 4, True) + sizing.network_bytes(cfg, 4, 1, None)
    monkeypatch.setattr(sizing, "free_memory", lambda device: int(1.5 * one))
    sizing.check_fits(cfg, torch.device("cpu"), lambda: (4, 1, True), processes=1)  # one process fits
    argv = ["train", "CartPole-v1", "--num-envs", "65536", "--num-steps", "64", "--total-timesteps", "10000000"]
    monkeypatch.setattr(sys, "argv", ["proxima", *argv, "--nproc", "2"])
    assert main([*argv, "--nproc", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("proxima train: error: --nproc 2: 2 processes on cpu each hold their own buffers and networks") and (
        "lower --nproc, --num-envs or --num-steps" in err), err


def test_nproc_under_torchrun_is_refused(no_spawn, capsys, monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    monkeypatch.setattr(sys, "argv", ["proxima", "train", "CartPole-v1", "--nproc", "2"])
    assert main(sys.argv[1:]) == 2
    assert "already runs under torchrun" in capsys.readouterr().err


def test_resume_starts_as_many_processes_as_wrote_the_checkpoint(monkeypatch, capsys, tmp_path):
    from proxima import checkpoint

    started = []
    def fake_launch(n, argv, announce=None):  # the real one prints ``announce`` once its checks pass
        started.append((n, argv))
        print(announce, file=sys.stderr)
        return 0

    monkeypatch.setattr(launch, "launch_torchrun", fake_launch)
    # the launcher reads the count without setting anything aside (load_checkpoint, never load_resumable)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "step_000000004096.pt").write_bytes(b"")
    monkeypatch.setattr(checkpoint, "load_checkpoint", lambda path: {"world_size": 2})
    for name in ("TORCHELASTIC_RUN_ID", "WORLD_SIZE", "RANK"):
        monkeypatch.delenv(name, raising=False)
    argv = ["resume", str(tmp_path), "--total-timesteps", "4096"]
    monkeypatch.setattr(sys, "argv", ["proxima", *argv])
    assert main(argv) == 0
    assert started == [(2, argv)]
    assert f"{tmp_path} was written by 2 processes: resuming with 2 processes on this machine" in capsys.readouterr().err
    # a count recorded in a file is data: never more processes than this machine has CPUs
    monkeypatch.setattr(checkpoint, "load_checkpoint", lambda path: {"world_size": 10_000})
    monkeypatch.setattr(launch.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(cpuinfo, "CGROUP_ROOT", "/nonexistent-cgroup")  # a CI box's CPU quota must not count
    assert main(argv) == 2
    assert len(started) == 1
    assert "written by 10000 processes, more than this machine's 8 CPUs; resume it under the torchrun command" in capsys.readouterr().err


def fake_launch(monkeypatch, code: int) -> dict:
    """launch.subprocess.Popen replaced by a torchrun that exits ``code`` at once: {cmd, kw} of the call."""
    calls = {}

    class Fake:
        pid = 0

        def __init__(self, cmd, **kw):
            calls["cmd"], calls["kw"] = cmd, kw

        def wait(self):
            return code

        def poll(self):
            return code

    monkeypatch.setattr(launch, "subprocess", SimpleNamespace(Popen=Fake))
    return calls


def test_launcher_returns_child_exit_code(monkeypatch):
    calls = fake_launch(monkeypatch, 3)
    assert launch.launch_torchrun(2, ["train", "CartPole-v1", "--nproc", "2"]) == 3
    assert calls["cmd"][1:] == ["-m", "proxima.torchrun", "--nproc-per-node", "2", "--standalone", "-m", "proxima", "train", "CartPole-v1"]
    assert calls["kw"]["start_new_session"] is True
    assert calls["kw"]["env"]["OMP_NUM_THREADS"]


def test_the_launch_keeps_the_current_directory_off_every_processs_path(monkeypatch, tmp_path):
    """A run directory is data: torchrun and its ranks never import from the current directory
    (PYTHONSAFEPATH, or the -c start before 3.11; tests/unit/test_run_code_safety.py runs it)."""
    calls = fake_launch(monkeypatch, 0)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "my_envs"))
    assert launch.launch_torchrun(2, ["train", "CartPole-v1", "--nproc", "2"], env=dict(os.environ)) == 0
    cmd, child_env = calls["cmd"], calls["kw"]["env"]
    if sys.version_info >= (3, 11):  # read by torchrun and inherited by the ranks it starts
        assert child_env.get("PYTHONSAFEPATH") == "1"
    else:
        assert cmd[1] == "-c" and "--no-python" in cmd
    assert child_env["PYTHONPATH"] == str(tmp_path / "my_envs")  # the user's own env modules still import


def test_single_process_context_is_a_no_op():
    ctx = distributed.DistContext()
    assert not ctx.enabled and ctx.is_main
    m = torch.nn.Linear(2, 2)
    assert ctx.wrap(m) is m
    assert ctx.from_main(lambda: 41) == 41
    assert ctx.gather_to_main({"a": 1}) == [{"a": 1}]
    assert ctx.agree_stop(15) == 15

    def step(mb):
        return {"approx_kl": torch.tensor(0.5)}

    assert ctx.sync_kl(step) is step
    metrics = ctx.reduce_metrics({"ep_count": torch.tensor(3.0), "nonfinite": torch.tensor(False), "policy_loss": torch.tensor(0.25)})
    assert metrics == {"ep_count": 3.0, "nonfinite": False, "policy_loss": 0.25}
    with pytest.raises(ConfigError):
        ctx.from_main(lambda: (_ for _ in ()).throw(ConfigError("bad")))


def test_local_state_overlays_this_ranks_pieces():
    state = {"world_size": 2, "agent": "A", "env": "e0", "rng": "r0",
             "ranks": [{"env": "e0", "rng": "r0"}, {"env": "e1", "rng": "r1"}]}
    assert distributed.local_state(state, 1)["env"] == "e1"
    assert distributed.local_state(state, 1)["agent"] == "A"
    assert distributed.local_state(state, 0)["rng"] == "r0"
    # a checkpoint of another world size is left alone (the trainer reports the mismatch)
    assert distributed.local_state({**state, "world_size": 4}, 1)["env"] == "e0"
    assert distributed.local_state({"env": "e0"}, 1)["env"] == "e0"


def test_failure_line_names_the_rank(capsys):
    ctx = distributed.DistContext(rank=3, world_size=4)
    ctx.report_failure(ValueError("boom\nsecond line"))
    assert capsys.readouterr().err == "proxima: rank 3 failed: ValueError: boom\n"
    ctx.report_failure(RuntimeError("[pair.cc:553] Connection closed by peer [127.0.0.1]:1"))
    assert capsys.readouterr().err.startswith("proxima: rank 3 stopped: lost contact with another rank")
    distributed.DistContext().report_failure(ValueError("x"))  # single process: the CLI's own message suffices
    assert capsys.readouterr().err == ""


def test_test_hooks_off_by_default(monkeypatch):
    monkeypatch.delenv("PROXIMA_TEST_FAIL_RANK", raising=False)
    monkeypatch.delenv("PROXIMA_DEBUG_DUMP_PARAMS", raising=False)
    assert distributed._test_hooks(0) == {"fail_at": None, "dump_params": None}
    monkeypatch.setenv("PROXIMA_TEST_FAIL_RANK", "1")
    monkeypatch.setenv("PROXIMA_TEST_FAIL_ITER", "2")
    assert distributed._test_hooks(0)["fail_at"] is None
    ctx = distributed.DistContext(rank=1, world_size=2, **distributed._test_hooks(1))
    ctx.check_test_failure(1)
    with pytest.raises(RuntimeError, match="test failure injected on rank 1 at iteration 2"):
        ctx.check_test_failure(2)


@pytest.mark.parametrize("body,world,code,err", [
    ("return 3", "2", 3, ""),
    ("raise ValueError('bad rank')", "2", 1, "ValueError: bad rank"),
    ("raise SystemExit('one line')", "2", 1, "one line"),
    ("print('out', end=''); return None", "2", 0, ""),
    ("return 4", "1", 4, ""),  # not a torchrun rank: the ordinary SystemExit
])
def test_exit_process_keeps_the_status_and_the_output(body, world, code, err, tmp_path):
    """A torchrun rank ends with os._exit (no interpreter finalization, where gloo's worker threads
    can abort a finished rank), but with main's status and everything it printed."""
    script = tmp_path / "entry.py"
    script.write_text("import atexit\nfrom proxima.distributed import exit_process\n"
                      "atexit.register(lambda: print('finalized', end=''))\n"
                      f"def main():\n    {body}\nexit_process(main)\n")
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("RANK", "WORLD_SIZE")}
    res = warm_python.run([sys.executable, str(script)], env={**env, "WORLD_SIZE": world}, capture_output=True, text=True, timeout=60)
    assert res.returncode == code
    assert err in res.stderr
    assert res.stdout.startswith("out") == ("print" in body)
    assert res.stdout.endswith("finalized") == (world == "1")  # finalization skipped only for a rank


def _fake_run(tmp_path, world: int):
    """A run directory with one checkpoint file, which load_checkpoint/load_resumable (patched) read
    as written by ``world`` processes."""
    run_dir = tmp_path / "r1"
    (run_dir / "checkpoints").mkdir(parents=True)
    path = run_dir / "checkpoints" / "step_000000004096.pt"
    path.write_bytes(b"")
    from proxima.config import PPOConfig

    state = {"world_size": world, "path": str(path), "config": PPOConfig(num_envs=8, num_steps=256).to_dict(),
             "global_step": 4096, "ranks": [{}] * world}
    return run_dir, state


def test_resume_with_another_process_count_fails_before_launching(no_spawn, capsys, monkeypatch, tmp_path):
    from proxima import checkpoint

    run_dir, state = _fake_run(tmp_path, 2)
    monkeypatch.setattr(checkpoint, "load_resumable", lambda path, **kw: state)
    argv = ["train", "--resume", str(run_dir), "--nproc", "3"]
    monkeypatch.setattr(sys, "argv", ["proxima", *argv])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    # the command names the run (it said "RUN_DIR", a placeholder, before)
    assert f"written by 2 process(es), resumed with --nproc 3; use the same count (proxima resume {run_dir} starts 2)" in err[0]


def test_resume_of_a_run_in_use_fails_before_reading_it(no_spawn, capsys, monkeypatch, tmp_path):
    from proxima import checkpoint
    from proxima.rundir import RunSession

    run_dir, state = _fake_run(tmp_path, 2)
    monkeypatch.setattr(checkpoint, "load_checkpoint", lambda path: state)  # `proxima resume` reads the count: 2

    def never(*a, **k):
        raise AssertionError("the launcher read a live run's checkpoints")

    monkeypatch.setattr(checkpoint, "load_resumable", never)
    for name in ("TORCHELASTIC_RUN_ID", "WORLD_SIZE", "RANK"):
        monkeypatch.delenv(name, raising=False)
    # a link to its checkpoint from outside any run: the ranks train in (and lock) the run that
    # holds the file, so that is the lock the launcher checks; a link from another run's
    # checkpoints/ is refused before any lock (checkpoint.check_inside_run)
    target = run_dir / "checkpoints" / "step_000000004096.pt"
    (tmp_path / "other" / "checkpoints").mkdir(parents=True)
    (tmp_path / "other" / "checkpoints" / target.name).symlink_to(target)
    (tmp_path / "loose.pt").symlink_to(target)
    session = RunSession()
    session.lock_existing(run_dir)  # a run training in this process, as far as the lock says
    try:
        for argv in (["resume", str(run_dir)], ["train", "--resume", str(target), "--nproc", "2"],
                     ["train", "--resume", str(tmp_path / "loose.pt"), "--nproc", "2"]):
            monkeypatch.setattr(sys, "argv", ["proxima", *argv])
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert f"run {run_dir.resolve()} is in use by pid {__import__('os').getpid()}" in err, argv
            assert "Traceback" not in err and err.count("\n") == 1, err  # the error alone, no "resuming with 2" first
        argv = ["resume", str(tmp_path / "other" / "checkpoints" / target.name)]
        monkeypatch.setattr(sys, "argv", ["proxima", *argv])
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "is a symbolic link to" in err and "outside the run directory" in err and err.count("\n") == 1, err
    finally:
        session.release()


@pytest.mark.parametrize("extra", [["--nproc", "2"], ["--dry-run"], ["--nproc", "2", "--dry-run"]])
def test_norm_obs_of_an_image_env_fails_up_front(no_spawn, capsys, monkeypatch, extra):
    argv = ["train", "PixelQuadrant-v0", "--norm-obs", "--num-envs", "4", *extra]
    monkeypatch.setattr(sys, "argv", ["proxima", *argv])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--norm-obs: this env's observations hold an image" in err[0], err


def test_checkpoint_of_several_processes_without_rank_pieces_is_refused():
    from proxima.checkpoint import CheckpointError

    state = {"world_size": 2, "agent": "A", "env": "e0", "path": "runs/r/checkpoints/best.pt"}
    with pytest.raises(CheckpointError, match=r"runs/r/checkpoints/best.pt: holds only rank 0's env and RNG state of a "
                       r"2-process run, so it cannot be resumed .*\(proxima eval runs/r --best\); resume from the run's "
                       r"periodic checkpoints, runs/r/checkpoints/step_N.pt \(proxima resume runs/r\)"):
        distributed.local_state(state, 1)
    assert distributed.local_state({**state, "world_size": 1}, 0)["env"] == "e0"  # one process: nothing per rank


def test_patient_collective_outlasts_the_hang_timeout(tmp_path):
    """from_main(patient=True) waits for rank 0 longer than the default group's timeout, which still
    ends a plain collective that waits as long (2 gloo processes, 1 s timeout, rank 0 busy 1.8 s)."""
    script = tmp_path / "patient.py"
    script.write_text(
        "import os, time, torch\n"
        "from proxima import distributed\n"
        "ctx = distributed.context()\n"
        "def slow():\n"
        "    time.sleep(1.8)\n"
        "    return 'evaluated'\n"
        "print(f'rank {ctx.rank}: {ctx.from_main(slow, patient=True)}', flush=True)\n"
        "try:\n"
        "    ctx.from_main(slow)\n"
        "    print(f'rank {ctx.rank}: plain wait ok', flush=True)\n"
        "except Exception as e:\n"
        "    print(f'rank {ctx.rank}: plain wait failed', flush=True)\n"
        "os._exit(0)\n")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("PROXIMA_")}
    env.update(OMP_NUM_THREADS="1", PROXIMA_DIST_TIMEOUT="1")
    res = warm_python.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone", str(script)],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert "rank 0: evaluated" in res.stdout and "rank 1: evaluated" in res.stdout, res.stdout + res.stderr[-3000:]
    assert "rank 1: plain wait failed" in res.stdout, res.stdout  # the timeout still catches a rank that does not answer
