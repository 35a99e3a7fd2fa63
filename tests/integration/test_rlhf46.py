"""An RLHF user's review (session 46), on tiny trained runs: an RLHF run or checkpoint given to a PPO resume
names its directory and the resume that works (not "no other checkpoint loads", not "stopped before its first
checkpoint"); a new run whose reward fails at step 1 leaves no directory; docs/rlhf.md's rlhf.yaml, offline
reward model and "Using the trained model" blocks run; a --lora run shows no third-party warnings."""

import os
import re
import shutil
import warnings
from pathlib import Path

import pytest

from tests.cli_helpers import run_main

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "docs" / "rlhf.md").read_text()
SMALL = ["--batch-size", "4", "--num-minibatches", "2", "--update-epochs", "1", "--max-new-tokens", "4",
         "--print-every", "0", "--sample-every", "0", "--no-plot"]


def block(lang: str, after: str, nth: int = 0) -> str:
    """The ``nth`` fenced ``lang`` block of docs/rlhf.md after the text ``after``."""
    return re.findall(rf"```{lang}\n(.*?)```", DOCS.split(after, 1)[1], flags=re.S)[nth]


def cli(argv: list, capsys) -> tuple:
    code, out, err = run_main(argv, capsys)
    return code, out, err


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A demo run's RUN/demo/model (2 pretraining steps), the docs' offline reward model built from it, and a
    2-step run against that reward model (its checkpoints step_000001.pt and step_000002.pt)."""
    folder = tmp_path_factory.mktemp("rlhf46")
    from proxima.cli import main

    assert main(["rlhf", "--demo", "--demo-pretrain-steps", "2", "--steps", "1", *SMALL,
                 "--run-dir", str(folder / "demo_run")]) == 0
    code = block("python", "To try the pipeline offline").replace(
        "runs/rlhf-demo__1__20261201-120000/demo/model", str(folder / "demo_run" / "demo" / "model"))
    here = os.getcwd()
    os.chdir(folder)
    try:
        exec(compile(code, "docs/rlhf.md", "exec"), {})  # writes ./my-reward-model
        assert main(["rlhf", "--policy", "demo_run/demo/model", "--prompts", "demo_run/demo/prompts.txt",
                     "--reward", "./my-reward-model", "--steps", "2", "--checkpoint-every", "1", *SMALL,
                     "--run-dir", "r_part"]) == 0
    finally:
        os.chdir(here)
    return folder


# ---------------------------------------------------------------------------------------------
# 1: an RLHF run or its checkpoint given to a PPO resume
# ---------------------------------------------------------------------------------------------
RUN_LINE = ("r_part is an RLHF run (proxima rlhf), not a PPO one: continue it with proxima resume r_part [--steps N]; "
            "its trained policy is r_part/policy (docs/rlhf.md)")
FILE_LINE = ("r_part/checkpoints/step_000002.pt: a checkpoint of the RLHF run r_part (proxima rlhf), not a PPO one: "
             "continue it with proxima resume r_part [--steps N]; its trained policy is r_part/policy (docs/rlhf.md)")


@pytest.mark.parametrize("argv, prog, line", [
    (["resume", "r_part/checkpoints/step_000002.pt"], "resume", FILE_LINE),
    (["resume", "r_part/checkpoints/step_000001.pt"], "resume", FILE_LINE.replace("step_000002", "step_000001")),
    (["train", "--resume", "r_part/checkpoints/step_000002.pt"], "train", FILE_LINE),
    (["train", "--resume", "r_part"], "train", RUN_LINE),
    (["train", "--resume", "r_part/checkpoints"], "train", RUN_LINE),
])
def test_an_rlhf_run_or_checkpoint_given_to_a_ppo_resume_names_the_run_and_its_resume(work, monkeypatch, capsys,
                                                                                      argv, prog, line):
    monkeypatch.chdir(work)
    before = sorted(p.name for p in (work / "r_part" / "checkpoints").iterdir())
    code, out, err = cli(argv, capsys)
    assert code == 2 and err == f"proxima {prog}: error: {line}\n", err
    assert sorted(p.name for p in (work / "r_part" / "checkpoints").iterdir()) == before  # nothing set aside


def test_the_resume_the_line_names_continues_the_run(work, tmp_path, monkeypatch, capsys):
    shutil.copytree(work / "r_part", tmp_path / "r_part")
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(["resume", "r_part", "--steps", "3"], capsys)
    assert code == 0, err
    assert "proxima: resuming r_part at step 2 of 3" in err and "done: 3 steps" in out


def test_an_rlhf_setting_given_to_the_resume_of_an_rlhf_run_names_what_it_takes(work, monkeypatch, capsys):
    monkeypatch.chdir(work)
    code, _, err = cli(["resume", "r_part", "--print-every", "1"], capsys)
    assert code == 2 and "--checkpoint-every" not in err
    assert ("--print-every is a setting of proxima rlhf, recorded in the run's config.yaml: an RLHF run's resume "
            "takes only --steps N, --trust-run and --quiet (a new run with other settings: proxima rlhf --config "
            "RUN/config.yaml --print-every ...)") in err, err


# ---------------------------------------------------------------------------------------------
# 5: a new run whose reward fails at step 1 keeps nothing
# ---------------------------------------------------------------------------------------------
def test_a_new_run_whose_reward_fails_at_step_1_leaves_no_directory(work, tmp_path, monkeypatch, capsys):
    (tmp_path / "one.py").write_text("def one(prompts, responses):\n    return [0.0]\n")  # passes the trial call
    monkeypatch.chdir(tmp_path)
    model, prompts = work / "demo_run" / "demo" / "model", work / "demo_run" / "demo" / "prompts.txt"
    code, _, err = cli(["rlhf", "--policy", str(model), "--prompts", str(prompts), "--reward", "one.py:one",
                        "--steps", "2", *SMALL], capsys)
    assert code == 2, err
    assert err.strip().endswith("at step 1: returned 1 scores for 4 responses; the new run keeps nothing, so the same "
                                "command runs again once the reward is fixed"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.py"]  # no runs/ either: the run made it
    code, _, err = cli(["rlhf", "--policy", str(model), "--prompts", str(prompts), "--reward", "one.py:one",
                        "--steps", "2", *SMALL, "--run-dir", "a/b"], capsys)
    assert code == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["one.py"], err


# ---------------------------------------------------------------------------------------------
# 2 and 6: the docs' blocks
# ---------------------------------------------------------------------------------------------
def test_the_docs_rlhf_yaml_trains_with_its_values(work, tmp_path, monkeypatch, capsys):
    import json

    import yaml

    monkeypatch.chdir(tmp_path)
    (tmp_path / "rlhf.yaml").write_text(block("yaml", "An `rlhf.yaml` for the commands above"))
    shutil.copytree(work / "demo_run" / "demo" / "model", tmp_path / "my-sft-model")
    shutil.copytree(work / "my-reward-model", tmp_path / "my-reward-model")
    lines = (work / "demo_run" / "demo" / "prompts.txt").read_text().split("\n")
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in lines if p))
    code, _, err = cli(["rlhf", "--config", "rlhf.yaml", "--steps", "1", "--batch-size", "32", "--max-new-tokens", "4",
                        "--update-epochs", "1", "--no-plot"], capsys)
    assert code == 0, err
    recorded = yaml.safe_load((tmp_path / "runs" / "my-rlhf" / "config.yaml").read_text())
    assert (recorded["lr"], recorded["kl_coef"], recorded["micro_batch_size"], recorded["num_minibatches"],
            recorded["checkpoint_every"]) == (1e-6, 0.05, 8, 4, 50)
    assert recorded["policy"] == str(tmp_path / "my-sft-model") and recorded["reward"] == [str(tmp_path / "my-reward-model")]


def run_using_block(nth: int, policy: Path) -> dict:
    """Run docs/rlhf.md's nth "Using the trained model" block on ``policy``; its namespace."""
    code = block("python", "## Using the trained model", nth)
    placeholder = "runs/my-rlhf/policy" if nth == 0 else "runs/my-rlhf-lora/policy"
    assert placeholder in code
    namespace: dict = {}
    exec(compile(code.replace(placeholder, str(policy)), "docs/rlhf.md", "exec"), namespace)
    return namespace


def test_the_docs_load_and_generate_from_a_runs_policy(work, capsys):
    ns = run_using_block(0, work / "r_part" / "policy")
    assert ns["out"].shape[1] > ns["inputs"]["input_ids"].shape[1]  # it generated
    assert ns["inputs"]["input_ids"].tolist() == [ns["tokenizer"]("the food was")["input_ids"]]
    assert capsys.readouterr().out.strip() == ns["tokenizer"].decode(
        ns["out"][0, ns["inputs"]["input_ids"].shape[1]:], skip_special_tokens=True).strip()


def test_the_docs_render_a_conversation_with_the_chat_template_when_there_is_one(work, tmp_path):
    from transformers import AutoTokenizer

    policy = tmp_path / "policy"
    shutil.copytree(work / "r_part" / "policy", policy)
    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.chat_template = ("{% for m in messages %}{{ m['content'] }}{% endfor %}"
                               "{% if add_generation_prompt %} .{% endif %}")
    tokenizer.save_pretrained(policy)
    ns = run_using_block(0, policy)
    assert ns["inputs"]["input_ids"].tolist() == [tokenizer("the food was .", add_special_tokens=False)["input_ids"]]
    assert ns["out"].shape[1] > ns["inputs"]["input_ids"].shape[1]


def test_a_lora_run_shows_no_third_party_warnings_and_the_docs_load_its_adapter(work, monkeypatch, capsys):
    monkeypatch.chdir(work)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, _, err = cli(["rlhf", "--policy", "demo_run/demo/model", "--prompts", "demo_run/demo/prompts.txt",
                            "--reward", "./my-reward-model", "--lora", "--steps", "1", *SMALL, "--run-dir", "r_lora"],
                           capsys)
    assert code == 0, err
    shown = [f"{w.category.__name__}: {w.message}" for w in caught]
    assert not [w for w in shown if "is_gradient_checkpointing" in w or "fan_in_fan_out" in w], shown
    assert (work / "r_lora" / "policy" / "adapter_config.json").is_file()
    ns = run_using_block(1, work / "r_lora" / "policy")
    assert type(ns["model"]).__name__ == "GPT2LMHeadModel"  # merged: a plain transformers model
    assert ns["out"].shape[1] > ns["inputs"]["input_ids"].shape[1]
