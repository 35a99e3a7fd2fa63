"""Review fixes (distributed, round 25): a stop during an --eval-every evaluation abandons it and
reaches the stop's checkpoint and line (under torchrun the evaluation outlasted torchrun's 30 s
shutdown timeout and both ranks were killed before it); a CUDA machine whose torch has no NCCL
joins the process group with gloo instead of failing at init."""

from __future__ import annotations

import csv
import os
import signal

import pytest
import torch

from cli_helpers import run_main
from proxima import checkpoint as ckpt
from proxima import distributed
from proxima import evaluate as evaluate_mod

STEPS = 64  # 4 envs x 16 steps per iteration


def _eval_rows(run_dir) -> dict:
    with open(run_dir / "metrics.csv", newline="") as f:
        return {int(r["global_step"]): r.get("eval/mean_return", "") for r in csv.DictReader(f)}


# ------------------------------------------------------------------------ 1. a stop during --eval-every
def test_a_sigint_during_an_eval_every_evaluation_abandons_it_and_checkpoints_that_iteration(tmp_path, monkeypatch, capsys):
    """The second evaluation (global step 128) gets SIGINT at its third step: it stops there, logs no
    eval value, leaves best.pt as the first evaluation wrote it, and the run checkpoints step 128 and
    exits 130 with the stop line. Before the fix it played its episodes to the end first."""
    real = evaluate_mod.first_episodes
    calls = {"evals": 0, "acts": 0}
    run = tmp_path / "run"
    best_before = {}

    def first_episodes(env, obs, act, *args, **kwargs):
        calls["evals"] += 1
        if calls["evals"] != 2:
            return real(env, obs, act, *args, **kwargs)
        best_before["bytes"] = ckpt.best_checkpoint_path(run).read_bytes()

        def act_then_stop(o):
            calls["acts"] += 1
            if calls["acts"] == 3:
                os.kill(os.getpid(), signal.SIGINT)  # the loop's SignalGuard only records it
            return act(o)

        return real(env, obs, act_then_stop, *args, **kwargs)

    monkeypatch.setattr(evaluate_mod, "first_episodes", first_episodes)
    code, _, err = run_main(["train", "CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2",
                             "--update-epochs", "1", "--total-timesteps", str(8 * STEPS), "--eval-every", str(STEPS),
                             "--eval-episodes", "3", "--checkpoint-every", "0", "--no-progress", "--run-dir", str(run)], capsys)
    assert code == 130, err
    assert calls["evals"] == 2 and calls["acts"] == 3  # abandoned at the step after the signal
    stop_at = ckpt.checkpoint_path(run, 2 * STEPS)
    assert err.strip().splitlines()[-1] == f"proxima: stopped by SIGINT; checkpoint: {stop_at}; continue with: proxima resume {run}"
    assert ("proxima: note: the --eval-every evaluation at global step 128 was abandoned for the stop; "
            "no eval value is logged for this iteration") in err
    assert [p.name for p in ckpt.list_checkpoints(run)] == [stop_at.name]
    rows = _eval_rows(run)
    assert sorted(rows) == [STEPS, 2 * STEPS]
    assert rows[STEPS] != "" and rows[2 * STEPS] == ""  # never a mean over part of the episodes
    assert ckpt.best_checkpoint_path(run).read_bytes() == best_before["bytes"]
    assert torch.load(ckpt.best_checkpoint_path(run), weights_only=False)["global_step"] == STEPS


def test_first_episodes_stops_at_the_step_the_stop_check_says_so():
    from proxima.evaluate import EvaluationStopped

    class Env:
        device = torch.device("cpu")
        steps = 0

        def step(self, action):
            self.steps += 1
            return torch.zeros(2, 1), torch.ones(2), torch.zeros(2, dtype=torch.bool), torch.zeros(2, dtype=torch.bool), {}

    env = Env()
    with pytest.raises(EvaluationStopped):
        evaluate_mod.first_episodes(env, torch.zeros(2, 1), lambda o: torch.zeros(2, dtype=torch.int64), 100,
                                    stop=lambda: env.steps >= 4)
    assert env.steps == 4


# ------------------------------------------------------------------------ 2. CUDA without NCCL
@pytest.mark.parametrize("nccl, rank, backend, note", [(False, 0, "gloo", True), (False, 1, "gloo", False),
                                                       (True, 0, "cpu:gloo,cuda:nccl", False)])
def test_init_asks_for_gloo_on_cuda_when_torch_has_no_nccl(nccl, rank, backend, note, monkeypatch, capsys):
    import torch.distributed as dist

    asked = []
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", str(rank))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)  # no torch.cuda.set_device: CUDA is never touched
    monkeypatch.setattr(dist, "is_nccl_available", lambda: nccl)
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed, "join_group", lambda backend, timeout=None: asked.append(backend))
    monkeypatch.setattr(distributed, "_OWNS_GROUP", False)
    ctx = distributed.init()
    assert asked == [backend] and ctx.rank == rank
    err = capsys.readouterr().err
    if note:
        assert err == ("proxima: note: this torch build has no NCCL; the ranks exchange GPU tensors through gloo "
                       "(slower; a torch build with NCCL uses it)\n")
    else:
        assert err == ""
