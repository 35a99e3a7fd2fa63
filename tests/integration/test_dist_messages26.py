"""Multi-process messages: rank 0's failure in work it does for every rank (from_main) is printed once,
not once per rank; the RLHF process group falls back to gloo on CUDA without NCCL, as PPO's does; a
rank that does not answer within PROXIMA_DIST_TIMEOUT is named by the rank that waited for it."""

from __future__ import annotations

import shutil
import sys
import textwrap

import pytest

from cli_helpers import edit_checkpoint, run_main
from distributed_helpers import run

TINY = ["--num-envs", "4", "--num-steps", "16", "--total-timesteps", "128", "--threads", "1", "--no-progress",
        "--eval-episodes", "0", "--quiet"]


def test_a_refusal_of_rank_0_after_the_ranks_started_is_printed_once_and_exits_2(tmp_path, monkeypatch, capsys):
    """A complete 2-process run's checkpoint, copied out and resumed into a new directory: the launcher
    lets it through, rank 0 refuses it in from_main (run_setup.refuse_loose_finished) after both ranks
    started. Before, each rank printed the error twice ("rank R failed" and the command's line)."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", "R", *TINY], capsys)
    assert code == 0, err

    def as_two_processes(state):  # what a 2-process run's checkpoint holds (the run is complete)
        state["world_size"], state["iteration"], state["ranks"] = 2, state["iteration"] // 2, [{}, {}]

    shutil.copy(edit_checkpoint(tmp_path / "R", as_two_processes), tmp_path / "loose.pt")
    done = run([sys.executable, "-m", "proxima", "train", "CartPole-v1", "--nproc", "2", "--resume", "loose.pt",
                "--run-dir", "new", "--no-progress"], tmp_path, timeout=180)
    assert done.returncode == 2, done.stderr[-3000:]
    line = ("proxima train: error: loose.pt: the run is complete (128 steps); give --total-timesteps of at least 256 "
            "to extend it into new (nothing was written)")
    assert done.stderr.splitlines().count(line) == 1, done.stderr[-3000:]
    assert done.stderr.count("the run is complete") == 1, done.stderr[-3000:]
    assert "failed:" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "proxima: the job failed" not in done.stderr and "stopped by" not in done.stderr, done.stderr[-3000:]
    assert not (tmp_path / "new").exists()


SCRIPT = textwrap.dedent("""
    import os, sys, time, torch
    from proxima import distributed
    ctx = distributed.context()

    def refuse():
        raise ValueError("rank 0 refuses")

    try:  # from Python (no exit_process): every rank raises rank 0's error, only rank 0 reports it
        ctx.from_main(refuse)
    except ValueError as e:
        print(f"rank {ctx.rank} raised: {e}", flush=True)
        ctx.report_failure(e)
    if ctx.rank == 1:  # rank 1 does not answer within PROXIMA_DIST_TIMEOUT (1 s)
        time.sleep(2.5)
    try:
        ctx.agree_stop(0)
    except Exception as e:
        if ctx.rank == 0:
            ctx.report_failure(e)
    sys.stderr.flush()
    os._exit(0)
""")


def test_a_python_scripts_ranks_raise_rank_0s_error_and_a_silent_rank_is_named(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(SCRIPT)
    done = run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone", str(script)],
               tmp_path, timeout=120, PROXIMA_DIST_TIMEOUT=1)
    assert "rank 0 raised: rank 0 refuses" in done.stdout and "rank 1 raised: rank 0 refuses" in done.stdout, \
        done.stdout + done.stderr[-3000:]
    failed = [ln for ln in done.stderr.splitlines() if " failed: " in ln and ln.startswith("proxima: rank")]
    assert failed == ["proxima: rank 0 failed: ValueError: rank 0 refuses"], done.stderr[-3000:]
    hung = [ln for ln in done.stderr.splitlines() if ln.startswith("proxima: rank 0 stopped: ")]
    assert len(hung) == 1, done.stderr[-3000:]
    assert hung[0].startswith("proxima: rank 0 stopped: rank 1 did not reach the same collective within "
                              "PROXIMA_DIST_TIMEOUT=1 s (it hangs, e.g. in an env step, or is that much slower; "
                              "raise PROXIMA_DIST_TIMEOUT if it is only slow): "), hung[0]


def test_a_timeout_among_more_ranks_names_no_rank_it_cannot_know(capsys):
    from proxima import distributed

    timeout = RuntimeError("[gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 300000ms for recv operation")
    distributed.DistContext(rank=2, world_size=4).report_failure(timeout)
    assert capsys.readouterr().err.startswith("proxima: rank 2 stopped: another rank did not reach the same collective "
                                              "within PROXIMA_DIST_TIMEOUT=")


@pytest.mark.parametrize("device_type, backend", [("cuda", "gloo"), ("cpu", "gloo")])
def test_rlhf_on_cuda_without_nccl_uses_gloo_with_a_note(monkeypatch, capsys, device_type, backend):
    import torch.distributed as tdist

    from proxima.rlhf import dist

    asked = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(tdist, "is_nccl_available", lambda: False)
    monkeypatch.setattr(tdist, "is_initialized", lambda: False)
    monkeypatch.setattr(tdist, "rendezvous", lambda url, timeout: iter([(tdist.HashStore(), 0, 2)]))  # join_group's
    monkeypatch.setattr(tdist, "init_process_group", lambda backend, **kw: asked.append(backend))
    monkeypatch.setattr(tdist, "get_rank", lambda: 0)
    monkeypatch.setattr(tdist, "get_world_size", lambda: 2)
    d = dist.init_distributed(device_type)
    assert asked == [backend] and d.world_size == 2
    err = capsys.readouterr().err
    if device_type == "cuda":
        assert err == ("proxima: note: this torch build has no NCCL; the ranks exchange GPU tensors through gloo "
                       "(slower; a torch build with NCCL uses it)\n")
    else:
        assert err == ""


def test_rlhf_on_cuda_with_nccl_asks_for_nccl_without_a_note(monkeypatch, capsys):
    import torch.distributed as tdist

    from proxima.rlhf import dist

    asked = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(tdist, "is_nccl_available", lambda: True)
    monkeypatch.setattr(tdist, "is_initialized", lambda: False)
    monkeypatch.setattr(tdist, "rendezvous", lambda url, timeout: iter([(tdist.HashStore(), 0, 2)]))  # join_group's
    monkeypatch.setattr(tdist, "init_process_group", lambda backend, **kw: asked.append(backend))
    monkeypatch.setattr(tdist, "get_rank", lambda: 1)
    monkeypatch.setattr(tdist, "get_world_size", lambda: 2)
    dist.init_distributed("cuda")
    assert asked == ["cpu:gloo,cuda:nccl"] and capsys.readouterr().err == ""
