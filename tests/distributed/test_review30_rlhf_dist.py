"""Review 30, `proxima rlhf` under torchrun (2 CPU processes, gloo): --fsdp loads only shards onto the device,
gradients are averaged (not summed) across ranks, a rank that fails alone leaves one line per rank and exit 2,
charts/seconds_per_step adds up to the run's seconds, and too few prompts for the processes is one line."""

import json
import math
import sys
from pathlib import Path

import pytest
import torch
import yaml
from distributed_helpers import run

from proxima.rlhf.config import RLHFConfig
from proxima.rlhf.dist import Dist
from proxima.rlhf.rundir import read_metrics
from proxima.rlhf.trainer import RLHFTrainer

TORCHRUN = [sys.executable, "-m", "proxima.torchrun", "--standalone", "--nproc-per-node", "2"]
LOST = "rank 0 stopped: lost contact with another rank ("  # then why (distributed.lost_contact_line) and the error


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    from rlhf_assets import save_gpt2

    from proxima.rlhf.demo import prompts_list

    folder = tmp_path_factory.mktemp("review30_assets")
    save_gpt2(folder / "model")
    (folder / "prompts.txt").write_text("\n".join(prompts_list()) + "\n")
    return folder


def config(assets, folder: Path, **overrides) -> Path:
    cfg = {"policy": str(assets / "model"), "prompts": str(assets / "prompts.txt"),
           "reward": "proxima.rlhf.demo:keyword_sentiment", "batch_size": 4, "num_minibatches": 2, "micro_batch_size": 1,
           "update_epochs": 1, "max_new_tokens": 4, "steps": 2, "lr": 1e-3, "print_every": 1, "sample_every": 1,
           "checkpoint_every": 1, "plot": False, "threads": 1}
    cfg.update(overrides)
    path = folder / "rlhf.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def launch(cmd, cwd: Path):
    return run(cmd, cwd, HF_HUB_OFFLINE=1, TRANSFORMERS_OFFLINE=1, TOKENIZERS_PARALLELISM="false")


def lines(text: str, start: str) -> list:
    return [line for line in text.splitlines() if line.startswith(start)]


def replaced_note(cfg: Path) -> str:
    """Rank 0's note (once, not per rank) when --reward replaces config()'s keyword_sentiment."""
    return (f"proxima rlhf: note: --reward replaces the rewards of --config {cfg}; not used: "
            "proxima.rlhf.demo:keyword_sentiment (repeat --reward for each reward to keep)")


# --- 1. --fsdp: no model reaches the device whole ----------------------------------------------------------------
PEAK = r'''
import inspect, json, sys, torch
import proxima.rlhf.fsdp as F
from proxima.rlhf import dist as D
from proxima.rlhf.config import RLHFConfig
from proxima.rlhf.trainer import RLHFTrainer

out, assets = sys.argv[1], sys.argv[2]
torch.set_num_threads(1)
peak = [0]


def resident(t):
    """Parameter elements of the run's models held on its device (a shard: its own elements only)."""
    n = 0
    for m in (t.policy, t.ref, t.value):
        for p in (m.parameters() if m is not None else ()):
            local = p.to_local() if hasattr(p, "to_local") else p
            if local.device == t.device:
                n += local.numel()
    return n


def watched(orig):
    def call(*args, **kwargs):
        t = inspect.currentframe().f_back.f_locals.get("self")
        if isinstance(t, RLHFTrainer):
            peak[0] = max(peak[0], resident(t))
        result = orig(*args, **kwargs)
        if isinstance(t, RLHFTrainer):
            peak[0] = max(peak[0], resident(t))
        return result
    return call


for name in ("shard", "place_shards"):  # place_shards: the fixed code's; the old one sharded models already moved
    if hasattr(F, name):
        setattr(F, name, watched(getattr(F, name)))
d = D.init_distributed("cpu")
cfg = RLHFConfig(policy=assets + "/model", prompts=assets + "/prompts.txt", reward="proxima.rlhf.demo:keyword_sentiment",
                 batch_size=4, num_minibatches=2, max_new_tokens=4, fsdp=True, plot=False)
t = RLHFTrainer(cfg, d)
peak[0] = max(peak[0], resident(t))
full = F.full_model_state(t.policy)  # collective: the sharded weights, gathered
same = None
if d.rank == 0:
    from transformers import AutoModelForCausalLM
    loaded = AutoModelForCausalLM.from_pretrained(assets + "/model").state_dict()
    same = all(torch.equal(full[k], loaded[k]) for k in full)
models = [t.policy, t.ref, t.value]
json.dump({"peak": peak[0], "policy": sum(p.numel() for p in t.policy.parameters()),
           "models": sum(p.numel() for m in models for p in m.parameters()), "same_weights": same},
          open(f"{out}/rank{d.rank}.json", "w"))
D.shutdown(d)
'''


def fits_copies(world: int, device: str) -> tuple:
    """(copies, processes) _model_fits counts for --fsdp on ``world`` processes of ``device``."""
    t = RLHFTrainer.__new__(RLHFTrainer)
    t.cfg = RLHFConfig(policy="p", prompts="p.txt", reward="proxima.rlhf.demo:keyword_sentiment", fsdp=True)
    t.dist, t.device, t.critic = Dist(0, world, 0), torch.device(device, 0) if device == "cuda" else torch.device(device), True
    check = t._model_fits(torch.float32)
    return check.keywords["copies"], check.keywords["processes"]


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_fsdp_puts_only_each_ranks_shards_on_the_device_and_the_memory_check_counts_that_peak(assets, tmp_path):
    script = tmp_path / "peak.py"
    script.write_text(PEAK)
    res = launch([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script),
                  str(tmp_path), str(assets)], tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["same_weights"] is True  # the shards hold the loaded weights exactly
    for r in ranks:
        # policy, reference and value model: each rank holds its half of them, never one whole (the old code moved
        # all three whole to the device before sharding: 3 policy-size copies on every GPU)
        assert r["peak"] <= 0.52 * r["models"], r
        # in policy-size copies, within what the memory check counts for 2 GPUs
        copies, processes = fits_copies(2, "cuda")
        assert processes == 1 and r["peak"] <= copies * r["policy"], (r, copies)
    # for N GPUs the load's peak is 1/N of the three models, within the check's count, which is training's
    peak_copies = ranks[0]["models"] / ranks[0]["policy"]  # ~3
    for world in (2, 4, 8, 16, 64):
        copies, processes = fits_copies(world, "cuda")
        assert processes == 1 and copies == max(math.ceil(9 / world), math.ceil(3 / world)) >= peak_copies / world


# --- 3. gradients averaged across ranks, not summed -----------------------------------------------------------------
GRADS = r'''
import copy, json, sys, torch
from proxima.rlhf import dist as D, fsdp as F
from proxima.rlhf.demo import build_model, build_tokenizer

out = sys.argv[1]
torch.set_num_threads(1)
d = D.init_distributed("cpu")
r = d.rank
res = {}
a, b = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2, 2))
a.grad = torch.tensor([1.0, 2.0, 3.0]) * (r + 1)
if r == 0:
    b.grad = torch.full((2, 2), 4.0)  # none on rank 1: sent as zeros
D.average_gradients([a, b], d)
res["a"], res["b"] = a.grad.tolist(), b.grad.tolist()
res["mean"] = D.mean_across(torch.tensor([float(r + 1), 10.0 * r]), d).tolist()

# FSDP's reduce-scattered gradients: the mean of what each rank's own batch gives the whole model
tok = build_tokenizer()
model = build_model(tok, n_layer=1, n_embd=16, n_head=2, n_positions=16, seed=0)
whole = copy.deepcopy(model)
ids = torch.tensor([[1 + r, 5, 7 + r, 9]])
whole(input_ids=ids, labels=ids).loss.backward()
own = D.gather_objects({n: p.grad.clone() for n, p in whole.named_parameters()}, d)
F.shard(model, model)
model(input_ids=ids, labels=ids).loss.backward()
worst = 0.0
for n, p in model.named_parameters():
    g = F.full_tensor(p.grad)
    mean = (own[0][n] + own[1][n]) / 2
    worst = max(worst, float((g - mean).abs().max() / mean.abs().max().clamp_min(1e-12)))
res["fsdp_rel_err"] = worst
res["ranks_differ"] = max(float((own[0][n] - own[1][n]).abs().max()) for n in own[0])
json.dump(res, open(f"{out}/rank{r}.json", "w"))
D.shutdown(d)
'''


def test_gradients_and_metrics_are_averaged_across_ranks_not_summed(tmp_path):
    script = tmp_path / "grads.py"
    script.write_text(GRADS)
    res = launch([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script),
                  str(tmp_path)], tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    for r in (0, 1):
        got = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert got["a"] == [1.5, 3.0, 4.5]  # (1x + 2x) / 2; summed would be 3x
        assert got["b"] == [[2.0, 2.0], [2.0, 2.0]]  # a rank without a gradient counts as zeros
        assert got["mean"] == [1.5, 5.0]
        assert got["ranks_differ"] > 1e-3  # the ranks' own gradients differ, so a sum or one rank's would show
        assert got["fsdp_rel_err"] < 1e-5, got


# --- 2. a rank that fails alone: one line per rank, exit 2, no traceback --------------------------------------------
NAN_REWARD = '''import os
calls = {"n": 0}


def nanr(prompts, responses):
    calls["n"] += 1  # 1: the trial call before training; 2: step 1; 3: step 2
    bad = os.environ.get("RANK") == "1" and calls["n"] >= 3
    return [float("nan") if bad else 0.0 for _ in responses]
'''


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_a_reward_that_fails_on_one_rank_gives_each_rank_one_line_and_exit_2(assets, tmp_path):
    (tmp_path / "rk.py").write_text(NAN_REWARD)
    cfg = config(assets, tmp_path)
    res = launch([*TORCHRUN, "-m", "proxima.rlhf", "--config", str(cfg), "--reward", f"{tmp_path}/rk.py:nanr",
                  "--steps", "4", "--run-dir", "run"], tmp_path)
    assert res.returncode == 2, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "SIGTERM" not in res.stderr.replace("closing signal SIGTERM", ""), res.stderr
    said = lines(res.stderr, "proxima")
    # rank 0's note comes at parsing, before the ranks meet: first, and once
    assert len(said) == 3 and said[0] == replaced_note(cfg), res.stderr
    assert any(s.startswith(f"proxima rlhf: error: reward {tmp_path}/rk.py:nanr at step 2: ") and "non-finite score nan" in s for s in said)
    assert any(s.startswith(f"proxima rlhf: error: {LOST}") and "): RuntimeError: " in s for s in said), res.stderr

    # the resume fails at its step 3 the same way (the trial call and step 2 come first)
    res = launch([sys.executable, "-m", "proxima", "resume", "--trust-run", "run"], tmp_path)
    assert res.returncode == 2, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "SIGTERM" not in res.stderr.replace("closing signal SIGTERM", ""), res.stderr
    said = [s for s in lines(res.stderr, "proxima") if "is an RLHF run of 2 processes" not in s
            and not s.startswith("proxima: resuming run at step ")]  # rank 0's note before its first step
    assert len(said) == 2, res.stderr
    assert any(s.startswith(f"proxima resume: error: reward {tmp_path}/rk.py:nanr at step 3: ") for s in said), res.stderr
    assert any(s.startswith(f"proxima resume: error: {LOST}") and "): RuntimeError: " in s for s in said), res.stderr


# --- 4. one clock: the steps' seconds add up to the run's -----------------------------------------------------------
@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_seconds_per_step_add_up_to_the_runs_seconds_under_torchrun(assets, tmp_path):
    cfg = config(assets, tmp_path, steps=3)
    res = launch([*TORCHRUN, "-m", "proxima.rlhf", "--config", str(cfg), "--run-dir", "run"], tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    per_step = read_metrics(tmp_path / "run")["charts/seconds_per_step"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert len(per_step) == 3 and summary["steps"] == 3
    # rank 0's own clock against the ranks' mean (which counted the waits for rank 0's checkpoints) was 0.2 s
    # against 0.5 s; one clock now: the slowest rank's wall per step, summed
    assert abs(sum(per_step) - summary["seconds"]) <= 0.002, (per_step, summary["seconds"])
    shown = [float(line.split()[-2]) for line in lines(res.stdout, "step ")]
    assert shown == [round(s, 3) for s in per_step], (shown, per_step)
    assert f"done: 3 steps in {summary['seconds']:.1f} s;" in res.stdout and res.stdout.count("done: ") == 1, res.stdout


# --- 5. fewer prompts than processes: one line, at once, on every rank ----------------------------------------------
def test_fewer_prompts_than_processes_is_one_line_from_every_rank_before_any_model_loads(assets, tmp_path):
    (tmp_path / "one.txt").write_text("the food was\n")
    cfg = config(assets, tmp_path, prompts=str(tmp_path / "one.txt"))
    res = launch([*TORCHRUN, "-m", "proxima.rlhf", "--config", str(cfg), "--run-dir", "run"], tmp_path)
    assert res.returncode == 2, res.stderr[-3000:]
    assert lines(res.stderr, "proxima") == [
        f"proxima rlhf: error: --prompts {tmp_path / 'one.txt'}: 1 prompt(s) for 2 processes, each of which draws from "
        "its own share (prompts rank, rank + 2, ...); give at least 2 prompts, or train with fewer processes"], res.stderr
    assert "Traceback" not in res.stderr and "stopped by" not in res.stderr
    assert not (tmp_path / "run").exists()


# --- 6. torchrun's teardown ends a rank outside any collective at once, with its line -------------------------------
SLOW_REWARD = '''import os, time
calls = {"n": 0}


def r(prompts, responses):
    calls["n"] += 1  # 1: the trial call before training; 2: step 1
    if calls["n"] >= 2:
        if os.environ.get("RANK") == "1":
            raise RuntimeError("rank 1 reward broke")
        time.sleep(40)  # rank 0's step-1 reward outlasts torchrun's 30 s from its SIGTERM to its SIGKILL
    return [0.0 for _ in responses]
'''


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_a_rank_in_a_slow_reward_ends_at_torchruns_teardown_with_its_line_and_leaves_no_new_run(assets, tmp_path):
    import time

    (tmp_path / "slow.py").write_text(SLOW_REWARD)
    cfg = config(assets, tmp_path)
    start = time.monotonic()
    res = launch([*TORCHRUN, "-m", "proxima.rlhf", "--config", str(cfg), "--reward", f"{tmp_path}/slow.py:r",
                  "--steps", "3", "--run-dir", "run"], tmp_path)
    took = time.monotonic() - start
    # the old rank 0 ignored the SIGTERM and slept on: killed 30 s later, no line, run/ and its lock left, exit 1
    assert res.returncode == 2, res.stderr[-3000:]
    assert took < 40, took  # not after the sleep: at the SIGTERM that followed rank 1's exit
    assert "Traceback" not in res.stderr and "stopped by" not in res.stderr, res.stderr
    assert lines(res.stderr, "proxima") == [
        replaced_note(cfg),
        f"proxima rlhf: error: reward {tmp_path}/slow.py:r at step 1: raised RuntimeError: rank 1 reward broke; "
        "the new run keeps nothing, so the same command runs again once the reward is fixed",
        f"proxima rlhf: error: {LOST}rank 1 failed, and torchrun is ending the job; its error is above): torchrun's "
        "teardown (SIGTERM) ended this rank"], res.stderr
    assert not (tmp_path / "run").exists()  # a new run that failed before its first step: nothing kept


SAME_LATER = '''import os, time


def r(prompts, responses):
    if os.environ.get("RANK") == "1":
        time.sleep(1)  # rank 1 reaches rank 0's error a second later
    raise RuntimeError("bad input on every rank")
'''


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_an_error_every_rank_gives_within_the_wait_is_printed_once_when_rank_0_is_first(assets, tmp_path):
    (tmp_path / "bad.py").write_text(SAME_LATER)
    cfg = config(assets, tmp_path)
    res = launch([*TORCHRUN, "-m", "proxima.rlhf", "--config", str(cfg), "--reward", f"{tmp_path}/bad.py:r",
                  "--run-dir", "run"], tmp_path)
    assert res.returncode == 2, res.stderr[-3000:]
    # rank 0 waits for rank 1 to end (dist.SAME_ERROR_WAIT) before its exit brings torchrun's teardown, which would
    # end rank 1 on its way there with the lost-contact line
    assert lines(res.stderr, "proxima") == [
        replaced_note(cfg),
        f"proxima rlhf: error: reward {tmp_path}/bad.py:r on the trial call before training: raised RuntimeError: bad "
        "input on every rank"], res.stderr
    assert not (tmp_path / "run").exists()
