"""SIGINT / SIGTERM (issue 5, item 4): a real `proxima train` process stopped by a signal writes a
checkpoint and exits 130 / 143; `proxima resume` continues it with metrics.csv steps that neither
repeat nor skip; a second SIGINT exits at once and leaves the last checkpoint loadable."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from proxima import checkpoint as ckpt
from cli_helpers import stop
import warm_python

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

BATCH = 4 * 128  # default num_envs x num_steps of CartPole-v1


def env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def csv_steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.csv"
    if not path.exists():
        return []
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) < 2:
        return []
    col = rows[0].index("global_step")
    return [int(r[col]) for r in rows[1:] if len(r) == len(rows[0])]


def wait_for_rows(proc: subprocess.Popen, run_dir: Path, more_than: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while len(csv_steps(run_dir)) <= more_than:
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"process ended early ({proc.returncode}): {err[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("no new metrics.csv row in time")
        time.sleep(0.05)


def signal_after_rows(args: list, cwd: Path, watch: Path, more_than: int, signum: int) -> tuple[int, str]:
    """Run ``proxima ARGS`` until ``watch``/metrics.csv has more than ``more_than`` rows, then send
    ``signum``: (exit code, stderr)."""
    proc = warm_python.Popen([sys.executable, "-m", "proxima", *args], cwd=cwd, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_rows(proc, watch, more_than)
    return stop(proc, signum)


def test_sigint_checkpoints_and_exits_130_then_resume_continues_until_sigterm_143(tmp_path):
    run_dir = tmp_path / "run"
    args = ["train", "CartPole-v1", "--total-timesteps", "10000000", "--run-dir", str(run_dir), "--no-progress",
            "--checkpoint-every", "1000"]
    code, err = signal_after_rows(args, tmp_path, run_dir, 0, signal.SIGINT)
    assert code == 130, err
    assert "SIGINT received; writing a checkpoint after this iteration" in err
    assert "stopped by SIGINT; checkpoint: " in err and "Traceback" not in err

    # the checkpoint of the stop iteration exists, loads, and matches the last CSV row
    first = csv_steps(run_dir)
    assert first == [BATCH * i for i in range(1, len(first) + 1)]
    state = ckpt.load_checkpoint(run_dir)
    assert state["global_step"] == first[-1] and state["iteration"] == len(first)
    assert err.strip().splitlines()[-1] == (f"proxima: stopped by SIGINT; checkpoint: {ckpt.checkpoint_path(run_dir, first[-1])}; "
                                            f"continue with: proxima resume {run_dir}")

    # `proxima resume` continues in the same directory with the saved config; SIGTERM it after one more row
    code, err = signal_after_rows(["resume", str(run_dir)], tmp_path, run_dir, len(first), signal.SIGTERM)
    assert code == 143, err
    assert f"resuming {run_dir} at global step {first[-1]:,}" in err
    assert "stopped by SIGTERM; checkpoint: " in err and "Traceback" not in err

    steps = csv_steps(run_dir)
    assert steps[: len(first)] == first and len(steps) > len(first)
    assert steps == [BATCH * i for i in range(1, len(steps) + 1)]  # continues: no duplicate, no gap
    state = ckpt.load_checkpoint(run_dir)
    assert state["global_step"] == steps[-1]
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == [f"step_{first[-1]:012d}.pt", f"step_{steps[-1]:012d}.pt"]


SECOND_SIGINT_MID_WRITE = textwrap.dedent("""
    import os, signal, sys
    from proxima import checkpoint, cli

    writes = []

    def before_replace(tmp, path):
        writes.append(path)
        if len(writes) == 2:  # the second checkpoint is written to its temp file, not yet in place
            os.kill(os.getpid(), signal.SIGINT)  # first: finish the iteration, checkpoint, stop
            os.kill(os.getpid(), signal.SIGINT)  # second: exit at once, right here
            print("still running after the second SIGINT", file=sys.stderr)

    checkpoint._before_replace = before_replace
    sys.exit(cli.main(sys.argv[1:]))
""")


def test_second_sigint_exits_at_once_and_the_last_checkpoint_stays_loadable(tmp_path):
    run_dir = tmp_path / "run"
    script = tmp_path / "second_sigint.py"
    script.write_text(SECOND_SIGINT_MID_WRITE)
    cmd = [sys.executable, str(script), "train", "CartPole-v1", "--total-timesteps", "100000", "--num-steps", "32",
           "--run-dir", str(run_dir), "--no-progress", "--checkpoint-every", "1", "--eval-episodes", "0"]
    out = warm_python.run(cmd, cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=180)
    assert out.returncode == 130, out.stderr
    assert "second interrupt, exiting now (last checkpoint kept)" in out.stderr
    assert "still running" not in out.stderr and "Traceback" not in out.stderr

    # the checkpoint being written never replaced anything; the one before it loads
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == [f"step_{128:012d}.pt"]
    assert ckpt.load_checkpoint(run_dir)["global_step"] == 128
    # its temp file is left (no cleanup on an immediate exit), ignored by readers, removed by the next save
    assert [p.name for p in (run_dir / "checkpoints").glob(".step_*.tmp")]


def test_a_population_stops_on_sigterm_with_a_checkpoint_and_resume_continues_it(tmp_path):
    # populations (--seeds) take signals as a single run does: checkpoint, exit 128+signum, resume
    run_dir = tmp_path / "pop"
    args = ["train", "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "10000000", "--run-dir", str(run_dir),
            "--no-progress", "--quiet", "--checkpoint-every", "1000"]
    member = run_dir / "m001-seed2"
    code, err = signal_after_rows(args, tmp_path, member, 0, signal.SIGTERM)
    assert code == 143, err
    assert "stopped by SIGTERM; checkpoint: " in err and "Traceback" not in err
    first = csv_steps(member)
    state = ckpt.load_checkpoint(ckpt.list_checkpoints(run_dir)[-1])
    assert state["kind"] == "ppo-population" and state["global_step"] == first[-1]
    assert err.strip().splitlines()[-1] == (f"proxima: stopped by SIGTERM; checkpoint: {ckpt.checkpoint_path(run_dir, first[-1])}; "
                                            f"continue with: proxima resume {run_dir}")

    code, err = signal_after_rows(["resume", str(run_dir)], tmp_path, member, len(first), signal.SIGINT)
    assert code == 130, err
    assert f"resuming population {run_dir} (2 members) at step {first[-1]:,} per member" in err
    steps = csv_steps(member)
    assert steps[: len(first)] == first and steps == [BATCH * i for i in range(1, len(steps) + 1)]


def _signal_after(monkeypatch, module, name, signum):
    """Make ``module.name`` (a step of train() outside the loop) deliver ``signum`` to this process as it returns."""
    real = getattr(module, name)

    def then_signal(*args, **kwargs):
        out = real(*args, **kwargs)
        os.kill(os.getpid(), signum)
        time.sleep(0.5)  # the handler runs at the next bytecode; never reached
        return out

    monkeypatch.setattr(module, name, then_signal)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_after_config_yaml_but_before_the_loop_leaves_no_half_run(tmp_path, capsys, monkeypatch, signum):
    from proxima import train_state
    from cli_helpers import run_main

    # pytest started under nohup or `&` has SIGINT ignored, not default_int_handler: what was there is put back
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    _signal_after(monkeypatch, train_state, "open_run_dir", signum)  # config.yaml and meta.json are written
    code, _, err = run_main(["train", "CartPole-v1", "--total-timesteps", "1024", "--run-dir", str(tmp_path / "R"),
                             "--no-progress", "--threads", "1"], capsys)
    assert code == 128 + signum
    assert err.strip().splitlines()[-1] == f"proxima: stopped by {signal.Signals(signum).name}; before training started; nothing was kept"
    assert not (tmp_path / "R").exists()  # no config.yaml, meta.json or lock left: a new train there just works
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_a_signal_during_the_end_of_run_eval_says_training_is_complete(tmp_path, capsys, monkeypatch):
    from proxima import evaluate
    from cli_helpers import run_main

    _signal_after(monkeypatch, evaluate, "first_episodes", signal.SIGTERM)
    code, _, err = run_main(["train", "CartPole-v1", "--total-timesteps", "1024", "--run-dir", str(tmp_path / "R"),
                             "--no-progress", "--threads", "1", "--eval-episodes", "2"], capsys)
    last = ckpt.list_checkpoints(tmp_path / "R")[-1]
    assert code == 143
    assert err.strip().splitlines()[-1] == (f"proxima: stopped by SIGTERM; during the end-of-run evaluation; training is complete "
                                            f"(checkpoint: {last}); `proxima eval {tmp_path / 'R'}` evaluates it")
    assert last.name == "step_000000001024.pt" and not (tmp_path / "R" / ".proxima.lock").exists()
    assert not (tmp_path / "R" / "eval.json").exists()


def test_a_population_stopped_before_its_first_iteration_leaves_nothing(tmp_path, capsys, monkeypatch):
    from proxima import population_run
    from cli_helpers import run_main

    _signal_after(monkeypatch, population_run, "_write_layout", signal.SIGTERM)  # population.json and member dirs written
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "1024", "--run-dir",
                             str(tmp_path / "P"), "--no-progress", "--threads", "1"], capsys)
    assert code == 143, err
    assert err.strip().splitlines()[-1] == "proxima: stopped by SIGTERM; before training started; nothing was kept"
    assert not (tmp_path / "P").exists()


def test_the_stop_line_says_how_to_continue_the_run(monkeypatch):
    from proxima.signals import TrainingInterrupted

    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    path = Path("runs/int2/checkpoints/step_000000001024.pt")
    assert str(TrainingInterrupted(signal.SIGINT, path)) == (
        "stopped by SIGINT; checkpoint: runs/int2/checkpoints/step_000000001024.pt; continue with: proxima resume runs/int2")
    # under torchrun (--nproc 2) on one machine: `proxima resume` starts the 2 processes itself
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert str(TrainingInterrupted(signal.SIGTERM, path)) == (
        "stopped by SIGTERM; checkpoint: runs/int2/checkpoints/step_000000001024.pt; continue with: "
        "proxima resume runs/int2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")  # two machines
    assert str(TrainingInterrupted(signal.SIGTERM, path)) == (
        "stopped by SIGTERM; checkpoint: runs/int2/checkpoints/step_000000001024.pt; continue with: "
        "proxima resume runs/int2, under the same torchrun command (2 processes)")


def test_a_resumed_run_stopped_before_its_loop_says_how_to_continue(tmp_path, capsys, monkeypatch):
    from proxima import train_state
    from cli_helpers import run_main

    run = tmp_path / "R"
    code, _, err = run_main(["train", "CartPole-v1", "--total-timesteps", "1024", "--run-dir", str(run), "--no-progress",
                             "--threads", "1", "--eval-episodes", "0"], capsys)
    assert code == 0, err
    last = ckpt.list_checkpoints(run)[-1]
    _signal_after(monkeypatch, train_state, "open_run_dir", signal.SIGTERM)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "2048", "--no-progress"], capsys)
    assert code == 143, err
    assert err.strip().splitlines()[-1] == (f"proxima: stopped by SIGTERM; outside an iteration; the run is as its last "
                                            f"checkpoint left it; checkpoint: {last}; continue with: proxima resume {run} "
                                            "--total-timesteps 2048")  # config.yaml says 2048 already, the checkpoint not
    assert ckpt.list_checkpoints(run)[-1] == last


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_whole_process_group_of_an_async_run_stops_it_cleanly(tmp_path, signum):
    """Ctrl-C in a terminal (or a scheduler's kill of the process group) reaches --vector async's
    worker processes too. SIGINT: the workers leave it to the trainer, which checkpoints the iteration
    (exit 130); it used to crash on an unpicklable TrainingInterrupted raised in a worker. SIGTERM ends
    the workers (Process.terminate() must still work): one line naming the last checkpoint, exit 143."""
    run_dir = tmp_path / "run"
    args = ["train", "CartPole-v1", "--backend", "gymnasium", "--vector", "async", "--num-envs", "2", "--num-steps", "128",
            "--total-timesteps", "10000000", "--eval-episodes", "0", "--threads", "1", "--run-dir", str(run_dir),
            "--no-progress", "--checkpoint-every", "1"]
    proc = warm_python.Popen([sys.executable, "-m", "proxima", *args], cwd=tmp_path, env=env(), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_rows(proc, run_dir, 1)
    os.killpg(proc.pid, signum)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the run did not exit")
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    if signum == signal.SIGINT:
        assert proc.returncode == 130, err
        steps = csv_steps(run_dir)
        assert last == (f"proxima: stopped by SIGINT; checkpoint: {ckpt.checkpoint_path(run_dir, steps[-1])}; "
                        f"continue with: proxima resume {run_dir}")
    else:  # the workers die at once: the iteration fails if it was stepping the envs, else it ends and checkpoints
        assert proc.returncode == 143, err
        newest = ckpt.list_checkpoints(run_dir)[-1]
        assert last in (f"proxima: stopped by SIGTERM; it ended the env's worker processes (--vector async) too, before "
                        f"the iteration's end; the run is as its last checkpoint left it; checkpoint: {newest}; continue "
                        f"with: proxima resume {run_dir}",
                        f"proxima: stopped by SIGTERM; checkpoint: {newest}; continue with: proxima resume {run_dir}"), err
    assert ckpt.load_checkpoint(run_dir)["global_step"] == csv_steps(run_dir)[-1]  # the rows end at the checkpoint kept
