"""`proxima rlhf` from the command line: one-line errors, the run directory, resume."""

import json
import os
import socket

import pytest
import torch
import yaml

from proxima.rlhf import RLHFConfig, resume, train_rlhf
from proxima.rlhf.__main__ import main
from proxima.rlhf.config import ConfigError
from proxima.rlhf.rundir import list_checkpoints, load_checkpoint, read_metrics


def base_args(assets, run_dir):
    return ["--policy", str(assets / "model"), "--prompts", str(assets / "prompts.txt"),
            "--reward", "proxima.rlhf.demo:keyword_sentiment", "--run-dir", str(run_dir),
            "--batch-size", "4", "--max-new-tokens", "4", "--update-epochs", "1", "--print-every", "0"]


def one_line_error(capsys, code, expected_code=2):
    err = capsys.readouterr().err.strip()
    assert code == expected_code, err
    assert len(err.splitlines()) == 1 and err.startswith("proxima rlhf: error: "), err
    return err


@pytest.mark.parametrize("change, words", [
    (["--prompts", "missing.txt"], "--prompts"),
    (["--policy", "no/such/model"], "--policy"),
    (["--lr", "fast"], "--lr 'fast'"),
    (["--batch-size", "5", "--num-minibatches", "2"], "--num-minibatches"),
    (["--advantage", "grpo"], "--samples-per-prompt"),
    (["--reward", "no_such_module:score"], "--reward"),
    (["--reward", "proxima.rlhf.demo:no_such_function"], "no_such_function"),
    (["--kl-estimator", "k2"], "k1, k3"),
    (["--temperature", "1e-45"], "--temperature 1e-45: must be at least 0.001"),  # logits / 1e-45 overflow
    (["--seed", "18446744073709551"], "--seed 18446744073709551: must be an integer from 0 to 2,147,483,647"),
    (["--seed", "-5"], "--seed -5: must be an integer from 0"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(assets, tmp_path, capsys, change, words):
    run_dir = tmp_path / "run"
    code = main(base_args(assets, run_dir) + change)
    assert words in one_line_error(capsys, code)
    assert not run_dir.exists()


def test_unknown_field_in_the_yaml_file_is_named(assets, tmp_path, capsys):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("lr: 0.001\nlearnig_rates: 3\n")  # learning_rate itself is lr's other name (test_rlhf42)
    code = main(base_args(assets, tmp_path / "run") + ["--config", str(cfg_file)])
    assert "unknown field 'learnig_rates' (did you mean 'lr'?)" in one_line_error(capsys, code)
    assert not (tmp_path / "run").exists()


def test_unknown_flag_is_one_line_too(assets, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(base_args(assets, tmp_path / "run") + ["--no-such-flag", "1"])
    one_line_error(capsys, e.value.code)


def test_a_run_writes_config_meta_events_metrics_checkpoints_samples_and_summary(assets, tmp_path, capsys):
    run_dir = tmp_path / "run"
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(yaml.safe_dump({"steps": 3, "lr": 1e-3, "checkpoint_every": 2, "sample_every": 2}))
    assert main(base_args(assets, run_dir) + ["--config", str(cfg_file), "--steps", "4"]) == 0  # flag beats file
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["steps"] == 4 and config["lr"] == 1e-3
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["kind"] == "rlhf" and meta["host"] == socket.gethostname() and meta["cwd"] == os.getcwd()
    assert [p.name for p in list_checkpoints(run_dir)] == ["step_000002.pt", "step_000004.pt"]
    assert (run_dir / "policy" / "config.json").exists()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert {"reward_first", "reward_last", "kl_last", "steps", "seconds"} <= set(summary) and summary["steps"] == 4
    assert len(read_metrics(run_dir)["step"]) == 4
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert {s["step"] for s in samples} == {1, 2, 4} and {"prompt", "response", "score"} <= set(samples[0])

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"tensors": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for tag in ("objective/kl", "objective/entropy", "objective/rlhf_reward", "objective/scores", "policy/approxkl",
                "policy/clipfrac", "val/clipfrac", "val/ratio", "val/response_length", "val/eos_rate"):
        assert tag in tags, tag
    assert any("samples" in t for t in events.Tags()["tensors"])
    assert "done: 4 steps" in capsys.readouterr().out


def test_a_run_directory_is_never_overwritten(assets, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(base_args(assets, run_dir) + ["--steps", "1"]) == 0
    capsys.readouterr()
    assert "resume" in one_line_error(capsys, main(base_args(assets, run_dir) + ["--steps", "1"]))


def test_stop_and_resume_is_bit_identical_to_an_uninterrupted_run(tiny_cfg, tmp_path):
    straight = train_rlhf(tiny_cfg(steps=4, checkpoint_every=2, run_dir=str(tmp_path / "a")))
    halted = train_rlhf(tiny_cfg(steps=2, checkpoint_every=2, run_dir=str(tmp_path / "b")))
    assert resume(halted, steps=4) == 0
    a, b = load_checkpoint(list_checkpoints(straight)[-1]), load_checkpoint(list_checkpoints(halted)[-1])
    assert a["step"] == b["step"] == 4
    for part in ("policy", "value"):
        assert a[part].keys() == b[part].keys()
        assert all(torch.equal(a[part][k], b[part][k]) for k in a[part])
    ma, mb = read_metrics(straight), read_metrics(halted)
    assert ma["objective/scores"] == mb["objective/scores"] and ma["objective/kl"] == mb["objective/kl"]


def test_a_damaged_checkpoint_is_reported_by_name(tmp_path):
    bad = tmp_path / "step_000001.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="step_000001.pt"):
        load_checkpoint(bad)


def test_a_diverging_update_stops_with_one_line_and_saves_no_nan_weights(assets, tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = main(base_args(assets, run_dir) + ["--steps", "3", "--lr", "1e30", "--checkpoint-every", "0"])
    err = one_line_error(capsys, code)
    assert ": the update diverged and nothing of this step was saved; no checkpoint was written yet" in err
    assert "non-finite " in err and "try a lower --lr" in err
    assert not (run_dir / "policy").exists() and not (run_dir / "summary.json").exists()
    assert list_checkpoints(run_dir) == []


def test_a_diverged_run_names_its_last_good_checkpoint(tiny_cfg, tmp_path, monkeypatch):
    from proxima.rlhf import loop as rlhf_loop
    from proxima.rlhf.trainer import RLHFTrainer

    real = RLHFTrainer.train_step

    def step_3_goes_nan(self):
        metrics, samples = real(self)
        if self.step == 3:
            metrics["losses/value_loss"] = float("nan")
        return metrics, samples

    monkeypatch.setattr(RLHFTrainer, "train_step", step_3_goes_nan)
    with pytest.raises(rlhf_loop.DivergedError, match=r"non-finite losses/value_loss \(nan\) at step 3: .*last good checkpoint: .*step_0*2\.pt"):
        train_rlhf(tiny_cfg(steps=4, checkpoint_every=1, run_dir=str(tmp_path / "run")))
    assert read_metrics(tmp_path / "run")["step"] == [1.0, 2.0]  # step 3 was not logged
    assert [c.name for c in list_checkpoints(tmp_path / "run")][-1].endswith("2.pt")


def test_nan_weights_are_never_written(tiny_cfg, tmp_path, monkeypatch):
    from proxima.rlhf import loop as rlhf_loop

    monkeypatch.setattr(rlhf_loop, "_weights_finite", lambda t: t.step < 2)
    with pytest.raises(rlhf_loop.DivergedError, match="non-finite weights after step 2: not writing the checkpoint of step 2"):
        train_rlhf(tiny_cfg(steps=2, checkpoint_every=1, run_dir=str(tmp_path / "run")))
    assert len(list_checkpoints(tmp_path / "run")) == 1 and not (tmp_path / "run" / "policy").exists()


def test_python_api_returns_the_run_directory(tiny_cfg, tmp_path):
    run_dir = train_rlhf(tiny_cfg(steps=1, run_dir=str(tmp_path / "api")))
    assert run_dir.resolve() == (tmp_path / "api").resolve()
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 1
    assert (run_dir / "policy").is_dir() and [p.name for p in list_checkpoints(run_dir)] != []


def test_bare_rlhf_says_to_give_a_policy_a_config_or_try_the_demo(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main([])
    err = one_line_error(capsys, code)
    assert err == ("proxima rlhf: error: --policy is required (a Hugging Face causal LM folder); give --policy PATH (or "
                   "--config FILE.yaml with policy:), or try the offline demo: proxima rlhf --demo")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def finished_rlhf_run(assets, tmp_path_factory):
    """A 2-step RLHF run (checkpoint every step), shared by the resume tests that must leave it as it is."""
    run_dir = tmp_path_factory.mktemp("resume_flags") / "run"
    train_rlhf(RLHFConfig(policy=str(assets / "model"), prompts=str(assets / "prompts.txt"),
                          reward="proxima.rlhf.demo:keyword_sentiment", batch_size=4, max_new_tokens=4, update_epochs=1,
                          steps=2, print_every=1, sample_every=0, checkpoint_every=1, plot=False, run_dir=str(run_dir)))
    return run_dir


@pytest.mark.parametrize("flags, named", [
    (["--steps", "7", "--lr", "5", "--device", "cuda", "--quiet"], "--lr"),
    (["--device", "cuda"], "--device"),
    (["--total-timesteps", "1", "--num-envs", "7"], "--total-timesteps"),  # the first one typed is named
    (["--num-envs", "7", "--total-timesteps", "1"], "--num-envs"),
    (["--learning-rate", "5"], "--lr"),  # the hidden alias of --lr
    (["--no-norm-obs"], "--norm-obs"),
    (["--run-dir", "elsewhere"], "--run-dir"),
    (["--env", "CartPole-v1"], "--env"),
])
def test_an_rlhf_resume_refuses_every_ppo_flag_with_one_line_and_changes_nothing(finished_rlhf_run, capsys, flags, named):
    from cli_helpers import snapshot

    from proxima.cli import main as proxima_main

    before = snapshot(finished_rlhf_run)
    code = proxima_main(["resume", str(finished_rlhf_run), *flags])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    if named in ("--lr", "--device", "--run-dir"):  # proxima rlhf's settings too: the new run that changes one
        assert err == (f"proxima resume: error: {named}: {finished_rlhf_run} is an RLHF run, whose settings its "
                       "config.yaml records: an RLHF run's resume takes only --steps N, --trust-run and --quiet (a new "
                       f"run with other settings: proxima rlhf --config {finished_rlhf_run / 'config.yaml'} {named} ...)\n")
    else:
        assert err == (f"proxima resume: error: {named}: {finished_rlhf_run} is an RLHF run; PPO flags do not apply to it "
                       "(an RLHF resume takes only --steps N, --trust-run and --quiet)\n")
    assert snapshot(finished_rlhf_run) == before
    assert yaml.safe_load((finished_rlhf_run / "config.yaml").read_text())["steps"] == 2


def test_an_rlhf_resume_with_quiet_prints_no_progress_lines_and_keeps_print_every(finished_rlhf_run, tmp_path, capsys):
    import shutil

    from proxima.cli import main as proxima_main

    run = tmp_path / "run"
    shutil.copytree(finished_rlhf_run, run)
    capsys.readouterr()
    assert proxima_main(["resume", str(run), "--steps", "3", "--quiet"]) == 0
    out = capsys.readouterr().out
    # no progress line; the closing done line (with the run directory) prints under --quiet too
    assert "step 3/3" not in out and out.count("\n") == 1 and out.startswith("done: 3 steps in "), out
    assert load_checkpoint(list_checkpoints(run)[-1])["step"] == 3
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["steps"] == 3 and config["print_every"] == 1  # --quiet is this resume's, not the run's
    assert proxima_main(["resume", str(run), "--steps", "4"]) == 0  # without --quiet: the run's print_every 1
    assert "step 4/4  score " in capsys.readouterr().out


def test_a_run_recorded_with_top_k_by_an_earlier_version_is_refused_naming_its_config(finished_rlhf_run, tmp_path, capsys):
    import shutil

    from proxima.cli import main as proxima_main

    run = tmp_path / "old"
    shutil.copytree(finished_rlhf_run, run)
    config = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**config, "top_k": 5, "top_p": 0.9}))
    code = proxima_main(["resume", str(run), "--steps", "3"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == (f"proxima resume: error: {run / 'config.yaml'}: records top_k: 5, top_p: 0.9 (allowed by earlier versions), "
                   "which makes PPO's samples off-policy: its log-probs and KL score the whole softmax; set top_k: 0 and "
                   "top_p: 1.0 there to continue with unfiltered sampling, or start a new run\n")
