"""An RLHF user's review (session 46), what needs no training: TRL's flag and key names are mapped to
Proxima's (and docs/rlhf.md's table says the same as the code); a resume of an RLHF run names what it
takes for an rlhf setting; a reward spec without its function names the form and the functions its file
defines, without running it; a reward function's missing column is named as one; a progress line rounds a
score as metrics.csv (and so the done line) does."""

import re
from pathlib import Path

import pytest
import torch

from proxima.rlhf.config import ConfigError, from_dict
from proxima.rlhf.rewards import RewardBatch, RewardError, RewardFunction, load_reward
from tests.cli_helpers import run_main

ROOT = Path(__file__).resolve().parents[2]


def rlhf_error(argv: list, capsys) -> str:
    code, out, err = run_main(["rlhf", *argv], capsys)
    assert code == 2 and out == "", err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("flag, meant", [
    ("--gradient-accumulation-steps", None),
    ("--response-length", "--max-new-tokens"),
    ("--save-steps", "--checkpoint-every"),
    ("--logging-steps", "--print-every"),
    ("--reward-model-path", "--reward"),
    ("--per-device-train-batch-size", "--micro-batch-size"),
    ("--num-ppo-epochs", "--update-epochs"),
    ("--cliprange-value", "--vf-clip-coef"),  # difflib said --clip-vloss
    ("--use-peft", "--lora"),
])
def test_trls_flags_get_the_flag_that_means_the_same(flag, meant, capsys):
    line = rlhf_error([flag, "4"], capsys)
    if meant is None:
        assert "did you mean" not in line and "--gradient-checkpointing" not in line
        assert ("--gradient-accumulation-steps is TRL's; the gradients of each minibatch (--batch-size / "
                "--num-minibatches responses) accumulate over its --micro-batch-size chunks, so TRL's "
                "per_device_train_batch_size P, gradient_accumulation_steps G and num_mini_batches M are "
                "--micro-batch-size = P, --num-minibatches = M and --batch-size = PxGxM") in line, line
    else:
        assert f"did you mean {meant} (TRL's {flag}" in line, line


@pytest.mark.parametrize("flag, said", [
    ("--report-to", "--report-to is TRL's; TensorBoard events and metrics.csv are always written into the run "
                    "directory, and nothing is sent elsewhere; drop it"),
    ("--ref-model", "--ref-model is TRL's; the reference is the policy's frozen copy, loaded again from --policy "
                    "(with --lora, the policy with its adapter switched off); nothing else sets it: drop it"),
])
def test_trls_flags_without_a_counterpart_say_what_to_do(flag, said, capsys):
    line = rlhf_error([flag, "x"], capsys)
    assert said in line and "did you mean" not in line, line


def test_learning_rate_is_accepted_as_lrs_other_name(tmp_path):
    cfg = from_dict({"learning_rate": 3e-6})
    assert cfg.lr == 3e-6


@pytest.mark.parametrize("key, said", [
    ("response_length", "unknown field 'response_length' (did you mean 'max_new_tokens'? TRL's response_length)"),
    ("gradient_accumulation_steps", "unknown field 'gradient_accumulation_steps' (TRL's gradient_accumulation_steps: "
                                    "the gradients of each minibatch (batch_size / num_minibatches responses) "
                                    "accumulate over its micro_batch_size chunks"),
    ("report_to", "unknown field 'report_to' (TRL's report_to: TensorBoard events and metrics.csv are always written"),
])
def test_a_config_files_trl_keys_are_named_in_its_words(key, said, tmp_path, capsys):
    (tmp_path / "rlhf.yaml").write_text(f"{key}: 4\n")
    line = rlhf_error(["--config", str(tmp_path / "rlhf.yaml")], capsys)
    assert f"{tmp_path / 'rlhf.yaml'}: {said}" in line, line


def docs_trl_flags() -> dict:
    """{TRL flag: Proxima flag or None} from docs/rlhf.md's "TRL's flags" table."""
    text = (ROOT / "docs" / "rlhf.md").read_text()
    section = text.split("### TRL's flags", 1)[1].split("\n#", 1)[0]
    table = {}
    for row in (line for line in section.splitlines() if line.startswith("| `")):
        trl, proxima = row.split("|")[1:3]
        ours = re.findall(r"`([^`]+)`", proxima)
        for name in re.findall(r"`([^`]+)`", trl):
            table[name] = ours[0] if ours else None
    return table


def test_the_docs_trl_flag_table_says_what_the_code_does():
    from proxima.rlhf.config import TRL_NAMES

    want = {"--" + key.replace("_", "-"): ("--" + field.replace("_", "-") if field else None)
            for key, (field, _) in TRL_NAMES.items()}
    assert docs_trl_flags() == want


def test_the_docs_trl_flags_section_is_under_coming_from_trl():
    text = (ROOT / "docs" / "rlhf.md").read_text()
    coming = text.split("## Coming from TRL", 1)[1].split("\n## ", 1)[0]
    assert "### TRL's flags" in coming


@pytest.mark.parametrize("flag", ["--print-every", "--max-new-tokens", "--response-length"])
def test_an_rlhf_setting_given_to_resume_says_what_a_resume_takes(flag, tmp_path, capsys):
    code, _, err = run_main(["resume", str(tmp_path), flag, "1"], capsys)
    assert code == 2
    assert "did you mean --checkpoint-every" not in err and "did you mean" not in err, err
    assert (f"{flag} is a setting of proxima rlhf, recorded in the run's config.yaml: an RLHF run's resume takes "
            "only --steps N, --trust-run and --quiet") in err, err


def test_an_sb3_name_given_to_resume_keeps_its_ppo_hint(tmp_path, capsys):
    code, _, err = run_main(["resume", str(tmp_path), "--batch-size", "64"], capsys)
    assert code == 2 and "did you mean --num-minibatches" in err, err


MY_REWARDS = '''import re

print("SHOULD NOT RUN")

def math_answer(prompts, responses, answer, **unused):
    return [1.0 if re.findall(r"-?\\d+", r)[-1:] == [str(a)] else 0.0 for r, a in zip(responses, answer)]

def brevity(prompts, responses):
    return [-len(r.split()) / 10 for r in responses]

def _helper():
    pass
'''


@pytest.fixture
def rewards_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_rewards.py").write_text(MY_REWARDS)
    return tmp_path


@pytest.mark.parametrize("spec, said", [
    ("my_rewards.py", "name the function: my_rewards.py:FUNCTION (it defines math_answer, brevity)"),
    ("my_rewards.brevity", "name the function after a colon: my_rewards:brevity (my_rewards.py defines math_answer, brevity)"),
    ("my_rewards", "name the function: my_rewards:FUNCTION (my_rewards.py defines math_answer, brevity)"),
    ("none.py", "no such file none.py"),
])
def test_a_reward_named_without_its_function_names_the_form_and_runs_nothing(spec, said, rewards_file, capsys):
    with pytest.raises(ConfigError) as e:
        load_reward(spec, torch.device("cpu"), import_path=[str(rewards_file)])
    assert str(e.value).startswith(f"--reward {spec!r}: {said}"), str(e.value)
    assert "SHOULD NOT RUN" not in capsys.readouterr().out


class Row:
    def __init__(self, prompt, columns, line):
        self.prompt, self.columns, self.line, self.is_conversation = prompt, columns, line, False


def test_a_function_that_needs_a_column_the_prompts_lack_names_it(rewards_file):
    reward = RewardFunction(lambda prompts, responses, answer, **unused: [0.0] * len(responses),
                            "my_rewards:math_answer", "math_answer")
    batch = RewardBatch(rows=[Row("the food was", {}, 1)], responses=["good"], texts=["the food was good"], step=0)
    with pytest.raises(RewardError) as e:
        reward(batch)
    assert str(e.value) == (
        "reward my_rewards:math_answer on the trial call before training: math_answer() needs a column 'answer', which "
        "the prompts file does not have (its rows hold a prompt and nothing else); give each row an 'answer' field "
        "(JSON lines: {\"prompt\": \"...\", \"answer\": ...}), or give the parameter a default")
    other = RewardBatch(rows=[Row("2 + 3 =", {"label": 5, "id": 1}, 1)], responses=["5"], texts=["2 + 3 = 5"], step=3)
    with pytest.raises(RewardError, match=r"at step 3: math_answer\(\) needs a column 'answer', which the prompts file "
                                          r"does not have \(its rows have 'id', 'label'\)"):
        reward(other)


def test_a_column_with_a_default_or_given_is_no_refusal():
    def f(prompts, responses, answer=None, *, weight=1.0):
        return [weight] * len(responses)

    reward = RewardFunction(f, "m:f", "f")
    assert reward.required == []
    given = RewardFunction(lambda prompts, responses, answer: [float(a) for a in answer], "m:g", "g")
    batch = RewardBatch(rows=[Row("2 + 3 =", {"answer": 5}, 1)], responses=["5"], texts=["2 + 3 = 5"], step=1)
    assert given(batch) == [5.0]


def test_the_progress_line_rounds_a_score_as_metrics_csv_and_the_done_line_do():
    from proxima.rlhf.loop import progress_line

    score = torch.tensor(-0.2125, dtype=torch.float32).item()  # -0.21250000596...: -0.213 as it is
    metrics = {"objective/scores": score, "objective/kl": 0.0, "objective/kl_coef": 0.05, "val/response_length": 4.0,
               "val/eos_rate": 1.0, "val/ratio": 1.0, "charts/seconds_per_step": 0.1}
    assert f"{score:+.3f}" == "-0.213"
    logged = float(f"{score:.6g}")  # metrics.csv's -0.2125, whose mean over one step the done line prints
    assert f"{logged:+.3f}" == "-0.212"
    assert "score -0.212 " in progress_line(1, 1, metrics)
