"""Run directories: default names never collide, LoRA is seeded, a resume after SIGKILL duplicates
nothing, rewards resolve from any directory, `proxima resume RUN --steps N`, all-linear and merged LoRA."""

import errno
import json
import os
from pathlib import Path

import pytest
import torch

from proxima.cli import main as proxima_main
from proxima.rlhf import loop, resume, rundir, train_rlhf
from proxima.rlhf.config import ConfigError
from proxima.rlhf.rundir import list_checkpoints, read_metrics
from proxima.rlhf.trainer import RLHFTrainer
import warm_python


def resume_refused(*args, **kwargs) -> str:
    """resume()'s refusal of bad input (it raises), as the one line `proxima resume` prints for it."""
    from proxima.checkpoint import CheckpointError
    from proxima.diskspace import StorageError

    with pytest.raises((ConfigError, StorageError, CheckpointError)) as e:
        resume(*args, **kwargs)
    return f"proxima resume: error: {e.value}"


def test_two_runs_with_the_same_default_name_get_two_directories(tiny_cfg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(rundir, "default_run_dir", lambda seed, prefix="rlhf": rundir.Path("runs") / "same_second")
    a = train_rlhf(tiny_cfg(steps=1))
    b = train_rlhf(tiny_cfg(steps=1))
    assert a != b and b.name == "same_second-2"
    assert (a / "summary.json").exists() and (b / "summary.json").exists()


def test_claiming_a_run_directory_is_one_atomic_mkdir(tmp_path):
    base = tmp_path / "runs" / "x"
    claimed = [rundir.claim_run_dir(base) for _ in range(3)]
    assert [p.name for p in claimed] == ["x", "x-2", "x-3"] and all(p.is_dir() for p in claimed)


def lora_a(t):
    return {n: p.detach().clone() for n, p in t.policy.named_parameters() if "lora_A" in n}


def test_lora_initialization_is_seeded_whatever_ran_before(tiny_cfg):
    cfg = dict(lora=True, lora_r=4, lora_target_modules=["c_attn"], advantage="grpo", samples_per_prompt=2)
    torch.manual_seed(123)
    a = lora_a(RLHFTrainer(tiny_cfg(**cfg)))
    torch.manual_seed(456)
    b = lora_a(RLHFTrainer(tiny_cfg(**cfg)))
    assert a and all(torch.equal(a[k], b[k]) for k in a)
    c = lora_a(RLHFTrainer(tiny_cfg(seed=2, **cfg)))
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_a_resume_after_sigkill_duplicates_no_sample_metric_or_tensorboard_point(tiny_cfg, tmp_path):
    run_dir = train_rlhf(tiny_cfg(steps=3, checkpoint_every=2, run_dir=str(tmp_path / "run")))
    # what SIGKILL between step 3's logs and its checkpoint leaves: step 3 logged, the last checkpoint at 2
    list_checkpoints(run_dir)[-1].unlink()
    (run_dir / "summary.json").unlink()
    assert resume(run_dir, steps=4) == 0
    assert read_metrics(run_dir)["step"] == [1.0, 2.0, 3.0, 4.0]
    sample_steps = [json.loads(line)["step"] for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert sorted(set(sample_steps)) == [1, 2, 3, 4] and len(sample_steps) == 4 * 4  # samples_logged rows each

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert [e.step for e in events.Scalars("objective/kl")] == [1, 2, 3, 4]
    # TensorBoard's default (fast) loader shows every event in the files: none may be there twice
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    steps = [e.step for f in sorted(run_dir.glob("events.out.tfevents.*")) for e in EventFileLoader(str(f)).Load()
             if any(v.tag == "objective/kl" for v in e.summary.value)]
    assert sorted(steps) == [1, 2, 3, 4]


def test_a_resume_from_before_the_first_checkpoint_drops_every_logged_step(tiny_cfg, tmp_path):
    # what SIGKILL before any checkpoint leaves: steps 1-2 logged, no checkpoint (resumed from step 0)
    run_dir = train_rlhf(tiny_cfg(steps=2, checkpoint_every=0, run_dir=str(tmp_path / "run")))
    for c in list_checkpoints(run_dir):
        c.unlink()
    (run_dir / "summary.json").unlink()
    assert resume(run_dir, steps=3) == 0
    assert read_metrics(run_dir)["step"] == [1.0, 2.0, 3.0]
    sample_steps = [json.loads(line)["step"] for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert sample_steps == sorted(sample_steps) and len(sample_steps) == 3 * 4

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert [e.step for e in events.Scalars("objective/kl")] == [1, 2, 3]


def test_a_damaged_newest_checkpoint_is_set_aside_and_the_one_before_resumes(tiny_cfg, tmp_path, capsys):
    straight = train_rlhf(tiny_cfg(steps=3, checkpoint_every=1, run_dir=str(tmp_path / "a")))
    run_dir = train_rlhf(tiny_cfg(steps=2, checkpoint_every=1, run_dir=str(tmp_path / "b")))
    newest = list_checkpoints(run_dir)[-1]
    newest.write_bytes(newest.read_bytes()[:100])  # cut short, as a full disk leaves it
    assert resume(run_dir, steps=3) == 0
    err = capsys.readouterr().err
    assert f"{newest} is unusable" in err and "resuming from" in err and f"kept as {newest.name}.corrupt" in err
    assert (newest.parent / (newest.name + ".corrupt")).exists()
    a, b = rundir.load_checkpoint(list_checkpoints(straight)[-1]), rundir.load_checkpoint(list_checkpoints(run_dir)[-1])
    assert a["step"] == b["step"] == 3 and all(torch.equal(a["policy"][k], b["policy"][k]) for k in a["policy"])
    for c in list_checkpoints(run_dir):  # none loads: one line naming the newest
        c.write_bytes(b"junk")
    assert "older checkpoint(s) loads either" in resume_refused(run_dir, steps=4)


def test_a_live_run_directory_is_locked_against_a_resume(tiny_cfg, tmp_path, capsys):
    from proxima.rundir import RunLock

    run_dir = train_rlhf(tiny_cfg(steps=1, run_dir=str(tmp_path / "run")))
    assert not (run_dir / ".proxima.lock").exists()  # released when the run ended
    fresh = tmp_path / "fresh"
    held = [RunLock(run_dir), RunLock(fresh)]  # what live trainers hold
    for lock in held:
        lock.acquire()
    try:
        assert f"is in use by pid {os.getpid()}" in resume_refused(run_dir, steps=2)
        with pytest.raises(ConfigError, match="in use by pid"):
            train_rlhf(tiny_cfg(steps=1, run_dir=str(fresh)))
    finally:
        for lock in held:
            lock.release()
    assert read_metrics(run_dir)["step"] == [1.0]  # nothing was written by the refused calls
    assert not (fresh / "config.yaml").exists()


def test_a_module_function_reward_resolves_when_resuming_from_another_directory(tiny_cfg, tmp_path, monkeypatch):
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir(), elsewhere.mkdir()
    (work / "local_reward_mod.py").write_text("def short(prompts, responses):\n    return [-len(r) for r in responses]\n")
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(tmp_path / "nothing"))  # restores sys.path (and so forgets work/) afterwards
    run_dir = train_rlhf(tiny_cfg(reward="local_reward_mod:short", steps=1, run_dir=str(tmp_path / "run")))
    monkeypatch.chdir(elsewhere)
    import sys

    sys.path[:] = [p for p in sys.path if p not in (str(work), "")]
    sys.modules.pop("local_reward_mod", None)
    resume_refused(run_dir, steps=2)  # a run's recorded module:function is imported only when trusted
    assert resume(run_dir, steps=2, trust_run=True) == 0
    assert read_metrics(run_dir)["step"] == [1.0, 2.0]


def test_proxima_resume_with_steps_extends_an_rlhf_run(tiny_cfg, tmp_path, capsys):
    run_dir = train_rlhf(tiny_cfg(steps=1, run_dir=str(tmp_path / "run")))
    assert proxima_main(["resume", str(run_dir), "--steps", "3"]) == 0
    assert read_metrics(run_dir)["step"] == [1.0, 2.0, 3.0]
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 3


def test_a_kill_during_the_final_save_leaves_a_run_that_resume_finishes(tiny_cfg, tmp_path, capsys):
    run_dir = train_rlhf(tiny_cfg(steps=2, checkpoint_every=0, run_dir=str(tmp_path / "run")))
    weights = run_dir / "policy" / "model.safetensors"
    trained, summary = weights.read_bytes(), json.loads((run_dir / "summary.json").read_text())
    assert summary["final_step"] == 2 and loop.is_finished(run_dir, 2)
    capsys.readouterr()
    # what a kill mid-save leaves: policy/ weights cut short (written in place, before the rename), no
    # summary.json, and the rename's half-written .policy.partial/
    weights.write_bytes(trained[:1000])
    (run_dir / "summary.json").unlink()
    (run_dir / ".policy.partial").mkdir()
    assert not loop.is_finished(run_dir, 2)
    assert resume(run_dir) == 0
    assert capsys.readouterr().out == (f"{run_dir}: at step 2 of 2 but policy/ or summary.json is missing or "
                                       f"incomplete; writing them\n")
    assert weights.read_bytes() == trained and not (run_dir / ".policy.partial").exists()
    assert json.loads((run_dir / "summary.json").read_text()) == summary
    assert resume(run_dir) == 0 and "nothing to do" in capsys.readouterr().out
    (run_dir / "summary.json").write_text(json.dumps({**summary, "final_step": 1}))  # an earlier finish's
    assert not loop.is_finished(run_dir, 2)


def test_a_save_that_fails_midway_keeps_the_previous_policy_whole(tiny_cfg, tmp_path, monkeypatch, capsys):
    run_dir = train_rlhf(tiny_cfg(steps=1, checkpoint_every=1, run_dir=str(tmp_path / "run")))
    first = (run_dir / "policy" / "model.safetensors").read_bytes()

    def disk_full(folder):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(loop, "_fsync_tree", disk_full)  # every file of the new policy written, not yet renamed
    capsys.readouterr()
    err = resume_refused(run_dir, steps=2)
    assert err.startswith(f"proxima resume: error: {run_dir / 'policy'}: could not write (No space left on device; ")
    assert err.endswith(f"free there); free some space (or choose another folder) and try again; the previous policy/ "
                        f"is kept; `proxima resume {run_dir}` writes it from the last checkpoint; last good checkpoint: "
                        f"{run_dir / 'checkpoints' / 'step_000002.pt'}")
    assert not (run_dir / ".policy.partial").exists()  # its room is given back
    assert (run_dir / "policy" / "model.safetensors").read_bytes() == first and loop.policy_complete(run_dir / "policy")
    assert not loop.is_finished(run_dir, 2)  # summary.json is step 1's
    monkeypatch.undo()
    assert resume(run_dir) == 0
    assert (run_dir / "policy" / "model.safetensors").read_bytes() != first and loop.is_finished(run_dir, 2)
    assert sorted(p.name for p in run_dir.iterdir() if p.name.startswith(".policy")) == []


def one_line(capsys, prefix: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(prefix) and "Traceback" not in err, err
    return err


def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def rlhf_cli(assets, run_dir, *extra) -> int:
    from proxima.rlhf.__main__ import main

    return main(["--policy", str(assets / "model"), "--prompts", str(assets / "prompts.txt"), "--reward",
                 "proxima.rlhf.demo:keyword_sentiment", "--run-dir", str(run_dir), "--batch-size", "4",
                 "--max-new-tokens", "4", "--steps", "2", "--checkpoint-every", "1", "--sample-every", "1",
                 "--print-every", "0", "--no-plot", *extra])


def full_from_the_nth_open(monkeypatch, name: str, n: int) -> None:
    """rundir's open() of the file ``name`` fails as on a full disk from its n-th call on."""
    calls = []

    def full(path, *args, **kwargs):
        if Path(path).name == name:
            calls.append(path)
            if len(calls) >= n:
                no_space()
        return open(path, *args, **kwargs)

    monkeypatch.setattr(rundir, "open", full, raising=False)


def full_for_atomic_writes_of(monkeypatch, name: str) -> None:
    """The atomic writer (config.yaml, meta.json, curve.png, summary.json) finds no room for ``name``."""
    from proxima import atomic

    real = atomic.new_temp_file

    def full(path):
        if Path(path).name == name:
            no_space()
        return real(path)

    monkeypatch.setattr(atomic, "new_temp_file", full)


@pytest.mark.parametrize("name", ["config.yaml", "meta.json"])
def test_a_full_disk_at_the_start_of_a_run_is_one_line_and_leaves_no_run_directory(name, assets, tmp_path, capsys,
                                                                                    monkeypatch):
    full_for_atomic_writes_of(monkeypatch, name)
    run_dir = tmp_path / "run"
    assert rlhf_cli(assets, run_dir) == 2
    err = one_line(capsys, f"proxima rlhf: error: {run_dir / name}: could not start the run (No space left on device; ")
    assert err.endswith("free there); free some space (or choose another folder) and try again")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name, n, what, last", [
    ("metrics.csv", 3, "could not write", "last good checkpoint: {run}/checkpoints/step_000001.pt"),  # step 2's row
    ("samples.jsonl", 2, "could not write", "last good checkpoint: {run}/checkpoints/step_000001.pt"),
    ("events.out.tfevents.", 1, "could not open the run's logs", "no checkpoint was written yet (--checkpoint-every)"),
])
def test_a_full_disk_in_the_logs_is_one_line_naming_the_file_and_the_last_checkpoint(name, n, what, last, assets, tmp_path,
                                                                                     capsys, monkeypatch):
    if name.startswith("events"):  # the event file (logger.EventFile, written in the caller's thread) cannot be made
        from proxima import logger

        def full(path, *args, **kwargs):
            if Path(path).name.startswith(name):
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
            return open(path, *args, **kwargs)

        monkeypatch.setattr(logger, "open", full, raising=False)
    else:
        full_from_the_nth_open(monkeypatch, name, n)
    run_dir = tmp_path / "run"
    assert rlhf_cli(assets, run_dir) == 2
    err = one_line(capsys, f"proxima rlhf: error: {run_dir / name}")
    assert f": {what} (No space left on device; " in err, err
    assert err.endswith("free there); free some space (or choose another folder) and try again; " + last.format(run=run_dir))


@pytest.mark.parametrize("name", ["policy", "curve.png", "summary.json"])
def test_a_full_disk_while_a_run_finishes_is_one_line_and_resume_finishes_it(name, assets, tmp_path, capsys,
                                                                             monkeypatch):
    if name == "policy":  # safetensors raises its own error, not an OSError, after writing part of the file
        from safetensors import SafetensorError
        from transformers import modeling_utils

        def full(tensors, filename, metadata=None):
            Path(filename).write_bytes(b"half a file")
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

        monkeypatch.setattr(modeling_utils, "safe_save_file", full)
    else:
        full_for_atomic_writes_of(monkeypatch, name)
    run_dir = tmp_path / "run"
    assert rlhf_cli(assets, run_dir, "--plot") == 2
    err = one_line(capsys, f"proxima rlhf: error: {run_dir / name}: could not write (No space left on device; ")
    assert err.endswith(f"last good checkpoint: {run_dir / 'checkpoints' / 'step_000002.pt'}")
    assert ("writes it from the last checkpoint" in err) == (name == "policy")
    assert sorted(p.name for p in run_dir.iterdir() if p.name.startswith(".")) == []  # no .policy.partial, no temp file
    monkeypatch.undo()
    assert resume(run_dir) == 0
    assert loop.is_finished(run_dir, 2) and (run_dir / "curve.png").is_file()


@pytest.mark.parametrize("change", ["the release over the policy folder", "another LoRA base", "another tokenizer",
                                    "another chat template"])
def test_a_resume_refuses_a_policy_folder_that_changed_since_the_checkpoint(change, tiny_cfg, assets, tmp_path, capsys):
    """Checkpoints hold the trained weights only: the frozen reference (with LoRA, the base) is loaded from
    --policy again, and must be what the run started from."""
    import shutil

    from rlhf_assets import save_gpt2, word_tokenizer

    sft = tmp_path / "sft"
    shutil.copytree(assets / "model", sft)
    lora = dict(lora=True, lora_r=4, lora_target_modules=["c_attn"]) if "LoRA" in change else {}
    run_dir = train_rlhf(tiny_cfg(policy=str(sft), steps=2, run_dir=str(tmp_path / "run"), **lora))
    shutil.rmtree(sft)
    if change == "the release over the policy folder":
        shutil.copytree(run_dir / "policy", sft)
    elif change == "another LoRA base":
        save_gpt2(sft, seed=7)
    elif change == "another chat template":  # same vocabulary: conversation prompts would render as other texts
        from transformers import AutoTokenizer

        shutil.copytree(assets / "model", sft)
        tok = AutoTokenizer.from_pretrained(sft)
        tok.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
        tok.save_pretrained(sft)
    else:  # as many tokens, other ids
        shutil.copytree(assets / "model", sft)
        word_tokenizer(reverse=True).save_pretrained(sft)
    err = resume_refused(run_dir, steps=3)
    if change == "another tokenizer":
        assert err == (f"proxima resume: error: --policy {sft}: its tokenizer's vocabulary differs from the one checkpoint "
                       f"step_000002 was written with; restore it or start a new run")
    elif change == "another chat template":
        assert err == (f"proxima resume: error: --policy {sft}: its tokenizer's chat template differs from the one checkpoint "
                       f"step_000002 was written with (conversation prompts would render as other texts); restore it or "
                       f"start a new run")
    else:
        assert err == (f"proxima resume: error: --policy {sft}: its weights differ from those checkpoint step_000002 "
                       f"was written with; restore them or start a new run")
    assert read_metrics(run_dir)["step"] == [1.0, 2.0] and len(list_checkpoints(run_dir)) == 2  # nothing restored or written
    # a checkpoint from before the record resumes unchecked (docs/rlhf.md)
    newest = list_checkpoints(run_dir)[-1]
    state = rundir.load_checkpoint(newest)
    del state["initial_policy"]
    torch.save(state, newest)
    assert resume(run_dir, steps=3) == 0


@pytest.mark.parametrize("change", ["another reward model", "another reward tokenizer",
                                    "another reward model under the value model"])
def test_a_resume_refuses_a_reward_model_folder_that_changed_since_the_checkpoint(change, tiny_cfg, tmp_path, capsys):
    """Nor does a checkpoint hold a reward model (nor, with --value-init reward and LoRA, the value model's
    frozen base): each is loaded from its --reward folder again, and a changed one would change the
    objective. One record per reward model, in the order of the --reward specs; functions are not recorded."""
    from safetensors.torch import load_file, save_file

    from rlhf_assets import save_reward_model, word_tokenizer

    first, second = save_reward_model(tmp_path / "rm1"), save_reward_model(tmp_path / "rm2")
    if change == "another reward model under the value model":
        changed = first
        overrides = dict(reward=[str(first), "proxima.rlhf.demo:keyword_sentiment"], value_init="reward", lora=True,
                         lora_r=4, lora_target_modules=["c_attn"])
    else:
        changed = second
        overrides = dict(reward=["proxima.rlhf.demo:keyword_sentiment", str(first), str(second)])
    run_dir = train_rlhf(tiny_cfg(steps=2, run_dir=str(tmp_path / "run"), **overrides))
    if change == "another reward tokenizer":  # as many tokens, other ids
        word_tokenizer(reverse=True).save_pretrained(changed)
    else:  # a retrained head published over the folder
        weights = load_file(str(changed / "model.safetensors"))
        weights["score.weight"] = weights["score.weight"] + 1e-3
        save_file(weights, str(changed / "model.safetensors"), metadata={"format": "pt"})
    err = resume_refused(run_dir, steps=3)
    if change == "another reward tokenizer":
        assert err == (f"proxima resume: error: --reward {changed}: its tokenizer's vocabulary differs from the one "
                       f"checkpoint step_000002 was written with; restore it or start a new run")
    else:
        assert err == (f"proxima resume: error: --reward {changed}: its weights differ from those checkpoint step_000002 "
                       f"was written with; restore them or start a new run")
    assert read_metrics(run_dir)["step"] == [1.0, 2.0] and len(list_checkpoints(run_dir)) == 2  # nothing restored or written
    # a checkpoint from before the record resumes unchecked (docs/rlhf.md)
    newest = list_checkpoints(run_dir)[-1]
    state = rundir.load_checkpoint(newest)
    assert [Path(m["path"]) for m in state["reward_models"]] == ([first] if "value" in change else [first, second])
    del state["reward_models"]
    torch.save(state, newest)
    assert resume(run_dir, steps=3) == 0


def test_the_released_tokenizer_is_the_one_loaded_not_the_training_copy(tiny_cfg, tmp_path):
    """The trainer pads on the left with EOS as the pad token; the release keeps no pad token and right
    padding, or a later fine-tuning's collator would mask every EOS label."""
    from transformers import AutoTokenizer

    from rlhf_assets import save_gpt2, word_tokenizer

    t = RLHFTrainer(tiny_cfg(policy=str(save_gpt2(tmp_path / "m", tokenizer=word_tokenizer(pad=False)))))
    assert t.tokenizer.pad_token == "[EOS]" and t.tokenizer.padding_side == "left"
    (tmp_path / "run").mkdir()
    loop._save_policy(t, None, tmp_path / "run")
    released = AutoTokenizer.from_pretrained(tmp_path / "run" / "policy")
    assert released.pad_token is None and released.padding_side == "right"
    assert json.loads((tmp_path / "run" / "policy" / "tokenizer_config.json").read_text()).get("pad_token") is None


def lora_modules(t):
    return {n.rsplit(".lora_A", 1)[0].split("transformer.")[-1] for n, _ in t.policy.named_parameters() if "lora_A" in n}


def test_lora_target_modules_all_linear_adapts_every_linear_layer_but_the_output(tiny_cfg):
    t = RLHFTrainer(tiny_cfg(lora=True, lora_r=4, lora_target_modules=["all-linear"]))
    assert lora_modules(t) == {"h.0.attn.c_attn", "h.0.attn.c_proj", "h.0.mlp.c_fc", "h.0.mlp.c_proj"}


def test_merge_lora_saves_a_standalone_model_equal_to_policy_plus_adapter(tiny_cfg, tmp_path):
    from transformers import AutoModelForCausalLM

    cfg = tiny_cfg(lora=True, lora_r=4, lora_target_modules=["all-linear"], lr=1e-2, merge_lora=True, steps=2,
                   run_dir=str(tmp_path / "run"))
    run_dir = train_rlhf(cfg)
    assert not (run_dir / "policy" / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(run_dir / "policy").eval()
    t = RLHFTrainer(tiny_cfg(lora=True, lora_r=4, lora_target_modules=["all-linear"]))
    loop.load_checkpoint(t, list_checkpoints(run_dir)[-1])
    t.policy.eval()
    ids = torch.tensor([t.prompt_ids[0] + [5, 6, 7]])
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, t.policy(input_ids=ids).logits, rtol=1e-5, atol=1e-5)
        with t.policy.disable_adapter():  # the adapter did move the model
            assert (t.policy(input_ids=ids).logits - merged(ids).logits).abs().max() > 1e-4


def test_merge_lora_needs_lora(tiny_cfg):
    from proxima.rlhf.config import ConfigError, validate

    with pytest.raises(ConfigError, match="--merge-lora"):
        validate(tiny_cfg(merge_lora=True))


@pytest.mark.slow
def test_a_real_sigkill_mid_run_then_resume_leaves_every_step_logged_once(assets, tmp_path):
    """A real SIGKILL lands anywhere: mid-step, mid-log line, mid-checkpoint, and (resumed within the same
    second) an events file that TensorBoard would read in the wrong order by name."""
    import os
    import signal
    import subprocess
    import sys
    import time

    run_dir = tmp_path / "killed"
    args = [sys.executable, "-m", "proxima.rlhf", "--policy", str(assets / "model"), "--prompts", str(assets / "prompts.txt"),
            "--reward", "proxima.rlhf.demo:keyword_sentiment", "--run-dir", str(run_dir), "--batch-size", "4",
            "--max-new-tokens", "4", "--update-epochs", "1", "--steps", "400", "--checkpoint-every", "3",
            "--sample-every", "1", "--samples-logged", "2", "--print-every", "0", "--no-plot"]
    proc = warm_python.Popen(args, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not (run_dir / "checkpoints" / "step_000006.pt").exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)  # somewhere after step 6's checkpoint: mid-step, mid-log or mid-checkpoint
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    last = rundir.list_checkpoints(run_dir)[-1]
    steps = int(last.stem.split("_")[1]) + 2
    assert resume(run_dir, steps=steps) == 0
    assert read_metrics(run_dir)["step"] == [float(s) for s in range(1, steps + 1)]
    sample_steps = [json.loads(line)["step"] for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert sample_steps == [s for s in range(1, steps + 1) for _ in range(2)]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert [e.step for e in events.Scalars("objective/kl")] == list(range(1, steps + 1))


def test_checkpoint_writes_clean_temps_of_a_killed_save_and_a_full_disk_is_one_line(tmp_path, monkeypatch):
    import errno

    import torch

    from proxima.checkpoint import CheckpointError
    from proxima.rlhf import rundir

    (tmp_path / "checkpoints").mkdir()
    stale = tmp_path / "checkpoints" / ".step_000001.pt.3f9a.tmp"  # a save killed before its rename
    stale.write_bytes(b"partial")
    first = rundir.save_checkpoint(tmp_path, 2, {"format": "t", "w": torch.ones(2)}, keep=2)
    assert not stale.exists() and torch.equal(rundir.load_checkpoint(first)["w"], torch.ones(2))

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("proxima.checkpoint.os.replace", full)
    with pytest.raises(CheckpointError, match=r"step_000003\.pt.*could not write checkpoint.*earlier checkpoint is kept"):
        rundir.save_checkpoint(tmp_path, 3, {"w": torch.zeros(2)}, keep=2)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_000002.pt"]
