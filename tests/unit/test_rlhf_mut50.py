"""Mutation tests (session 50) of commit 9341f45's RLHF checks, for what tests/unit/test_rlhf50.py left open:
RLHFConfig's several unknown keywords and its signature; --value-init with rloo; a config file's merge_lora;
a resumed run's recorded setting that nothing reads (check_resume); quoted runs and files in the resume/--resume
advice; a damaged meta.json under `resume RUN --config`; reward signatures that are not TRL's (one argument,
*args, a positional with a default, *rest); the first empty response named; the values _fitting offers at
their edges; --policy paths that are not Hub ids."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tiny local models only: nothing may be downloaded
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import inspect  # noqa: E402
import shutil  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402
import yaml  # noqa: E402

from proxima.config import UnknownFieldError  # noqa: E402
from proxima.rlhf.config import ConfigError, RLHFConfig, flag_hint, rlhf_resume_flag_line, validate  # noqa: E402
from proxima.rlhf.data import PromptRow  # noqa: E402
from proxima.rlhf.rewards import RewardBatch, RewardError, RewardFunction  # noqa: E402
from proxima.rlhf.trainer import RLHFTrainer  # noqa: E402
from tests.cli_helpers import one_error_line, run_main  # noqa: E402
from tests.unit.test_rlhf50 import assets  # noqa: E402,F401  (a tiny GPT-2 policy and four prompts)

RLHF = ["--batch-size", "4", "--num-minibatches", "1", "--update-epochs", "1", "--max-new-tokens", "4",
        "--steps", "1", "--print-every", "0", "--sample-every", "0", "--no-plot", "--threads", "1"]


def error_line(argv: list, capsys, prog: str = "proxima rlhf") -> str:
    code, out, err = run_main(argv, capsys)
    assert code == 2 and out == "", err
    return one_error_line(err, prog)


def cfg(**kw) -> RLHFConfig:
    return RLHFConfig(policy="p", prompts="p.txt", reward=["m:f"], **kw)


# --- RLHFConfig's unknown keywords -----------------------------------------------------------------------------------
def test_several_unknown_keywords_name_the_first_and_count_the_rest():
    with pytest.raises(UnknownFieldError) as e:
        RLHFConfig(policy="p", polcy="x", learning_rate=1e-5)
    assert str(e.value) == ("RLHFConfig(polcy='x'): not an RLHFConfig field (did you mean 'policy'?) (and 1 more: "
                            "learning_rate)")


def test_rlhfconfigs_signature_still_lists_its_fields():
    params = inspect.signature(RLHFConfig).parameters
    assert "policy" in params and "kl_target" in params and "kwargs" not in params


# --- settings nothing reads -----------------------------------------------------------------------------------------
def test_value_init_with_rloo_is_refused_too():
    with pytest.raises(ConfigError) as e:
        validate(cfg(advantage="rloo", samples_per_prompt=2, value_init="reward"))
    assert str(e.value) == ("--value-init 'reward': starts the value model, which --advantage rloo does not have; drop "
                            "--value-init, or use --advantage gae")




def test_a_config_files_merge_lora_without_lora_is_named_by_its_key_and_value(assets, tmp_path, capsys):
    (tmp_path / "rlhf.yaml").write_text("merge_lora: true\n")
    line = error_line(["rlhf", "--policy", str(assets / "pol"), "--prompts", str(assets / "prompts.txt"), *RLHF,
                       "--reward", "proxima.rlhf.demo:keyword_sentiment", "--config", str(tmp_path / "rlhf.yaml")], capsys)
    assert line == f"{tmp_path / 'rlhf.yaml'}: merge_lora True: needs --lora", line


@pytest.fixture(scope="module")
def rlhf_run(tmp_path_factory):
    from tests.rlhf_assets import finished_tiny_rlhf_run

    return finished_tiny_rlhf_run(tmp_path_factory.mktemp("rlhf_mut50_run"))


def test_a_resume_lets_pass_a_recorded_setting_nothing_reads(rlhf_run, tmp_path):
    """An earlier version let --kl-target without --adaptive-kl start a run: its resume is not refused."""
    from proxima.rlhf.api import check_resume

    run = tmp_path / "older"
    shutil.copytree(rlhf_run, run)
    recorded = yaml.safe_load((run / "config.yaml").read_text())
    assert recorded["adaptive_kl"] is False
    recorded["kl_target"] = 3.0
    (run / "config.yaml").write_text(yaml.safe_dump(recorded))
    assert check_resume(run, steps=2).kl_target == 3.0


# --- resume advice: quoted runs and files -----------------------------------------------------------------------------
def test_an_rlhf_runs_resume_flag_line_quotes_a_config_path_with_a_space():
    assert rlhf_resume_flag_line("--lr", "my run").endswith("(a new run with other settings: proxima rlhf --config "
                                                            "'my run/config.yaml' --lr ...)")


def test_rlhf_resume_quotes_the_run_it_names(capsys):
    line = error_line(["rlhf", "--resume", "my run"], capsys)
    assert "continue the run with `proxima resume 'my run' [--steps N]`" in line, line


def test_rlhf_resume_without_a_run_says_run():
    assert flag_hint("resume", "rlhf", [], None) == (
        "advice", "proxima rlhf takes no --resume: continue the run with `proxima resume RUN [--steps N]`")


def test_config_to_an_rlhf_runs_resume_quotes_the_file(rlhf_run, capsys):
    line = error_line(["resume", str(rlhf_run), "--config", "my cfg.yaml"], capsys, "proxima resume")
    assert "a new run with the file's values: `proxima rlhf --config 'my cfg.yaml'`" in line, line


def test_config_to_a_resume_of_a_run_with_a_damaged_meta_json_is_trains_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "meta.json").write_text("{")
    (tmp_path / "d" / "samples.jsonl").write_text("")  # RLHF's file: resumes_rlhf raises the meta.json's line
    monkeypatch.chdir(tmp_path)
    line = error_line(["resume", "d", "--config", "x.yaml"], capsys, "proxima resume")
    assert "proxima resume takes no --config: `proxima train --resume d --config x.yaml`" in line, line


# --- reward signatures that are not TRL's -------------------------------------------------------------------------------
def one_arg(texts):
    return [0.0] * len(texts)


def star_args(*args, **kwargs):
    return [float(len(r)) for r in args[1]]


def trl_scaled(completions, scale=2.0):
    return [scale] * len(completions)


def trl_rest(completions, *rest):
    return [0.0] * len(completions)


def test_a_one_argument_reward_is_refused_naming_prompts_responses():
    with pytest.raises(RewardError) as e:
        RewardFunction(one_arg, "r.py:one_arg", "one_arg")
    assert str(e.value) == ("--reward 'r.py:one_arg': one_arg(texts) cannot be called as a reward is, f(prompts, "
                            "responses, **columns), positionally: define def one_arg(prompts, responses)")


def test_a_star_args_reward_is_a_reward():
    batch = RewardBatch([PromptRow("p", {}, line=1)], ["abcd"], ["pabcd"], step=0)
    assert RewardFunction(star_args, "r.py:star_args", "star_args")(batch) == [4.0]


@pytest.mark.parametrize("func, fix", [(trl_scaled, "def trl_scaled(prompts, completions, scale)"),
                                       (trl_rest, "def trl_rest(prompts, completions)")])
def test_trls_signature_advice_keeps_the_defaults_and_drops_star_args(func, fix):
    with pytest.raises(RewardError) as e:
        RewardFunction(func, f"r.py:{func.__name__}", func.__name__)
    assert str(e.value).endswith(f"is TRL's signature; a reward is called as f(prompts, responses, **columns), "
                                 f"positionally (TRL passes completions=): define {fix}"), str(e.value)


def test_a_reward_that_raises_names_the_first_empty_response_not_sample_0():
    def per_char(prompts, responses):
        return [1.0 / len(r) for r in responses]

    rows = [PromptRow("a", {}, line=1), PromptRow("b", {}, line=2), PromptRow("c", {}, line=3)]
    batch = RewardBatch(rows, ["good", "", ""], ["agood", "b", "c"], step=5)
    with pytest.raises(RewardError) as e:
        RewardFunction(per_char, "r.py:per_char", "per_char")(batch)
    assert "; sample 1 (prompts line 2, response '') is empty" in str(e.value), str(e.value)


# --- the values that fit the positions, at their edges -----------------------------------------------------------------
def fitting(prompt_tokens: int, new: int, limit: int = 48, truncate: bool = False) -> str:
    trainer = SimpleNamespace(cfg=SimpleNamespace(max_new_tokens=new, truncate_prompts=truncate))
    return RLHFTrainer._fitting(trainer, prompt_tokens, limit)


def test_a_prompt_as_long_as_the_positions_offers_no_max_new_tokens_0():
    assert fitting(48, 4) == "use --truncate-prompts --max-prompt-length 44"


def test_max_new_tokens_as_many_as_the_positions_offers_no_max_prompt_length_0():
    assert fitting(10, 48, truncate=True) == "use --max-new-tokens 38"


def test_neither_value_fitting_says_lower_both():
    assert fitting(50, 48, truncate=True) == "lower --max-new-tokens below 48, and --max-prompt-length to the positions left"


# --- --policy paths that are not Hub ids ----------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", ["missing.json", "runs/a/policy"])
def test_a_missing_path_as_policy_is_not_called_a_hub_id(spec, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.txt").write_text("a\n")
    line = error_line(["rlhf", "--policy", spec, "--prompts", "p.txt", "--reward", "proxima.rlhf.demo:keyword_sentiment"],
                      capsys)
    assert line == f"--policy '{spec}': no such directory or .json config file"
