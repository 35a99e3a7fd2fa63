"""Review 32, mutation survivors in proxima/rlhf's user surfaces (api.py, cli.py, demo.py): each test pins an
error line, an exit status, a folder kept or removed, or the learning rates, that one mutant changed unnoticed."""

import dataclasses
import json
import os
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

from proxima.rlhf import api, demo, rundir  # noqa: E402
from proxima.rlhf.__main__ import _read, main  # noqa: E402
from proxima.rlhf.config import ConfigError  # noqa: E402
from proxima.rlhf.models import quiet_transformers  # noqa: E402
from tests.cli_helpers import one_error_line, run_main, snapshot  # noqa: E402

quiet_transformers()

#: a --demo of one PPO step on 4 samples: the demo's whole path in a few seconds
TINY_DEMO = ["--demo", "--steps", "1", "--batch-size", "4", "--num-minibatches", "1", "--update-epochs", "1",
             "--max-new-tokens", "4", "--print-every", "0", "--sample-every", "0", "--no-plot", "--threads", "1"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished 1-step RLHF run on a tiny GPT-2 (its real meta.json, config.yaml and summary.json)."""
    from rlhf_assets import finished_tiny_rlhf_run

    return finished_tiny_rlhf_run(tmp_path_factory.mktemp("review32_rlhfapi"))


@pytest.fixture
def run_copy(finished_run, tmp_path):
    """A copy of the finished run, for a test to damage."""
    return shutil.copytree(finished_run, tmp_path / "run")


# --- 1. api._read_meta: a meta.json of valid JSON that is no object -------------------------------------------------
@pytest.mark.parametrize("text, kind", [("[]", "list"), ("3", "int"), ('"rlhf"', "str")])
def test_a_meta_json_that_is_no_object_is_a_one_line_config_error(run_copy, capsys, text, kind):
    (run_copy / "meta.json").write_text(text)
    expected = rf"meta.json: expected a JSON object, got {kind}; the run directory's meta.json was damaged or edited"
    with pytest.raises(ConfigError, match=expected):
        api.check_resume(run_copy)
    with pytest.raises(ConfigError, match=expected):
        api.resume(run_copy)
    # the launcher's process count: 1, and resume's own line says what is wrong (not an AttributeError)
    assert api.recorded_processes(run_copy) == 1
    code, out, err = run_main(["resume", str(run_copy)], capsys)
    assert code == 2 and "Traceback" not in err, err
    assert "meta.json" in one_error_line(err, "proxima resume")


# --- 2. api.check_resume: a run of another kind ---------------------------------------------------------------------
@pytest.mark.parametrize("meta, shown", [({"kind": "ppo"}, "'ppo'"), ({}, "None")])
def test_resume_of_a_run_that_is_not_rlhf_names_the_recorded_kind(run_copy, meta, shown):
    (run_copy / "meta.json").write_text(json.dumps(meta))
    expected = f"{run_copy}: meta.json says kind {shown}, not 'rlhf'"
    for call in (api.resume, api.check_resume):
        with pytest.raises(ConfigError) as e:
            call(run_copy)
        assert str(e.value) == expected


# --- 3. cli.run: --demo-pretrain-steps -1 refused, 0 allowed --------------------------------------------------------
def test_demo_pretrain_steps_minus_one_is_refused_and_zero_is_allowed(tmp_path, capsys):
    refused = tmp_path / "refused"
    assert main([*TINY_DEMO, "--demo-pretrain-steps", "-1", "--run-dir", str(refused)]) == 2
    out, err = capsys.readouterr()
    assert err == "proxima rlhf: error: --demo-pretrain-steps -1: must be 0 or more\n", err
    assert "pretraining" not in out and not refused.exists()

    kept = tmp_path / "kept"
    assert main([*TINY_DEMO, "--demo-pretrain-steps", "0", "--run-dir", str(kept)]) == 0, capsys.readouterr().err
    assert "for 0 steps" in capsys.readouterr().out
    assert json.loads((kept / "summary.json").read_text())["steps"] == 1


# --- 4. cli.run: the "done:" line is rank 0's only ------------------------------------------------------------------
def test_done_line_is_printed_by_rank_zero_only(finished_run, monkeypatch, capsys):
    monkeypatch.setattr(api, "train_rlhf", lambda cfg: finished_run)  # the run is there: only the last line is in question
    monkeypatch.delenv("RANK", raising=False)
    assert main(["--steps", "1"]) == 0
    assert capsys.readouterr().out.count("done: 1 steps in ") == 1
    monkeypatch.setenv("RANK", "1")  # another rank of a torchrun job: rank 0 says it for the job
    assert main(["--steps", "1"]) == 0
    assert "done:" not in capsys.readouterr().out


# --- 5. cli.run: a KeyboardInterrupt that escapes as such exits 130 -------------------------------------------------
def test_a_keyboard_interrupt_from_the_run_exits_130(monkeypatch, capsys):
    def interrupted(cfg):
        raise KeyboardInterrupt  # as a user's reward function may raise it before any handler is installed

    monkeypatch.setattr(api, "train_rlhf", interrupted)
    from proxima.rlhf import cli

    assert cli.run(_read(["--steps", "1"])) == 130
    assert "done:" not in capsys.readouterr().out


# --- 6. demo.run_demo: a failure in an auto-named folder claimed as base-2 --------------------------------------------
def test_a_failed_demo_removes_the_base_2_folder_it_claimed_and_keeps_the_existing_base(tmp_path, monkeypatch):
    base = tmp_path / "runs" / "rlhf-demo__0__fixed"
    base.mkdir(parents=True)
    (base / "notes.txt").write_text("another demo's, started in the same second\n")
    before = snapshot(tmp_path)
    monkeypatch.setattr(rundir, "default_run_dir", lambda seed, prefix="rlhf": base)

    def broken(folder, pretrain_steps, seed, corpus_size=4000):
        assert folder.parent.name == "rlhf-demo__0__fixed-2"  # claimed next to the existing one
        raise RuntimeError("pretraining failed")

    monkeypatch.setattr(demo, "build_assets", broken)
    with pytest.raises(RuntimeError, match="pretraining failed"):
        demo.run_demo(dataclasses.replace(demo.demo_config(), run_dir=None, threads=1), pretrain_steps=1)
    assert not (tmp_path / "runs" / "rlhf-demo__0__fixed-2").exists()
    assert snapshot(tmp_path) == before


# --- 7. demo.pretrain: the learning rate decays linearly to 0 --------------------------------------------------------
def test_pretraining_decays_the_learning_rate_linearly(monkeypatch):
    tokenizer = demo.build_tokenizer()
    model = demo.build_model(tokenizer, n_layer=1, n_embd=16, n_head=2, n_positions=32)
    seen, step = [], torch.optim.AdamW.step

    def spy(self, *args, **kwargs):
        seen.append(self.param_groups[0]["lr"])
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    sentences = ["the food was really good .", "the movie is dull ."]
    demo.pretrain(model, tokenizer, sentences, steps=3, batch_size=2, lr=0.03)
    assert seen == pytest.approx([0.03, 0.02, 0.01])
