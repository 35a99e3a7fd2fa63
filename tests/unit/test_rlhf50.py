"""An RLHF user's review (session 50): docs/rlhf.md's classifier reward runs (it scores an empty response)
and a reward that raises names the empty response; TRL's reward signatures are refused at load naming the
one to write; a setting nothing reads (--kl-target without --adaptive-kl, --lora-r without --lora, ...)
is refused; TRL's warmup/weight-decay/resume/hub flags get their own answer, not difflib's; `proxima rlhf
--resume RUN` and an RLHF run's resume with a setting of proxima rlhf say the command to use; RLHFConfig's
unknown keywords name the field; a prompt too long for the positions names the --max-prompt-length that
fits; a Hub id as --policy says it is never downloaded."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tiny local models only: nothing may be downloaded
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import re  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import yaml  # noqa: E402

from proxima.config import UnknownFieldError  # noqa: E402
from proxima.rlhf.config import ConfigError, RLHFConfig, from_dict, validate  # noqa: E402
from proxima.rlhf.data import PromptRow  # noqa: E402
from proxima.rlhf.rewards import RewardBatch, RewardError, RewardFunction  # noqa: E402
from tests.cli_helpers import one_error_line, run_main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RLHF = ["--batch-size", "4", "--num-minibatches", "1", "--update-epochs", "1", "--max-new-tokens", "4",
        "--steps", "1", "--print-every", "0", "--sample-every", "0", "--no-plot", "--threads", "1"]


def rlhf_error(argv: list, capsys, prog: str = "proxima rlhf") -> str:
    code, out, err = run_main(argv, capsys)
    assert code == 2 and out == "", err
    return one_error_line(err, prog)


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    from tests.rlhf_assets import save_gpt2

    from proxima.rlhf.demo import prompts_list

    folder = tmp_path_factory.mktemp("rlhf50")
    save_gpt2(folder / "pol")
    (folder / "prompts.txt").write_text("\n".join(prompts_list()[:4]) + "\n")
    return folder


def base(assets) -> list:
    return ["rlhf", "--policy", str(assets / "pol"), "--prompts", str(assets / "prompts.txt"), *RLHF]


def cfg(**kw) -> RLHFConfig:
    return RLHFConfig(policy="p", prompts="p.txt", reward=["m:f"], **kw)


# --- 1. an empty response -----------------------------------------------------------------------------------------
def docs_classifier() -> str:
    text = (ROOT / "docs" / "rlhf.md").read_text()
    return re.search(r"```python\n(# classifier\.py\n.*?)```", text, re.S).group(1)


def test_the_docs_classifier_reward_trains_though_the_trial_call_gives_an_empty_response(assets, tmp_path, capsys,
                                                                                         monkeypatch):
    """Was refused: 'on the trial call before training: raised RuntimeError: cannot reshape tensor of 0 elements'."""
    from transformers import GPT2Config, GPT2ForSequenceClassification

    from proxima.rlhf.demo import build_tokenizer

    tok = build_tokenizer()
    GPT2ForSequenceClassification(GPT2Config(vocab_size=len(tok), n_positions=48, n_embd=32, n_layer=1, n_head=2,
                                             num_labels=2, pad_token_id=tok.pad_token_id)).save_pretrained(tmp_path / "rm_2label")
    tok.save_pretrained(tmp_path / "rm_2label")
    (tmp_path / "classifier.py").write_text(docs_classifier())
    monkeypatch.chdir(tmp_path)  # the block loads ./rm_2label
    code, out, err = run_main([*base(assets), "--reward", "classifier.py:positive", "--run-dir", str(tmp_path / "run")],
                              capsys)
    assert code == 0, err
    assert (tmp_path / "run" / "checkpoints" / "step_000001.pt").is_file()


def one_row_batch(response: str, step: int = 0) -> RewardBatch:
    return RewardBatch([PromptRow("the movie was", {}, line=7)], [response], ["the movie was" + response], step=step)


def test_a_reward_that_raises_on_an_empty_response_names_the_sample_and_says_it_is_empty():
    def per_char(prompts, responses):
        return [1.0 / len(r) for r in responses]

    with pytest.raises(RewardError) as e:
        RewardFunction(per_char, "r.py:per_char", "per_char")(one_row_batch(""))
    assert str(e.value) == (
        "reward r.py:per_char on the trial call before training: raised ZeroDivisionError: float division by zero; "
        "sample 0 (prompts line 7, response '') is empty, as a policy that emits EOS at once gives in training: the "
        "reward must score an empty response too (score prompt + response, or give '' a fixed score)")


def test_a_reward_that_raises_on_a_non_empty_response_keeps_its_line():
    def broken(prompts, responses):
        raise ValueError("no")

    with pytest.raises(RewardError) as e:
        RewardFunction(broken, "r.py:broken", "broken")(one_row_batch(" good", step=3))
    assert str(e.value) == "reward r.py:broken at step 3: raised ValueError: no"


# --- 2. TRL's reward signatures --------------------------------------------------------------------------------------
def reward_len(completions, **kwargs):
    return [float(len(c)) for c in completions]


def reward_kw(*, prompts, completions, **kwargs):
    return [float(len(c)) for c in completions]


def reward_pc(prompts, completions, **kwargs):
    return [float(len(c)) for c in completions]


@pytest.mark.parametrize("func, shown", [
    (reward_len, "reward_len(completions, **kwargs)"),  # was: raised TypeError: takes 1 positional argument but 2
    (reward_kw, "reward_kw(*, prompts, completions, **kwargs)"),  # was: needs a column 'prompts'
])
def test_trls_reward_signatures_are_refused_at_load_naming_the_call_and_the_fix(func, shown):
    with pytest.raises(RewardError) as e:
        RewardFunction(func, f"trl.py:{func.__name__}", func.__name__)
    assert str(e.value) == (
        f"--reward 'trl.py:{func.__name__}': {shown} is TRL's signature; a reward is called as f(prompts, responses, "
        f"**columns), positionally (TRL passes completions=): define def {func.__name__}(prompts, completions, **kwargs)")


def test_trls_signature_with_prompts_first_is_a_reward_as_it_is():
    assert RewardFunction(reward_pc, "trl.py:reward_pc", "reward_pc")(one_row_batch("abc")) == [3.0]


def test_the_docs_say_how_a_trl_reward_is_called_where_a_trl_user_looks():
    text = (ROOT / "docs" / "rlhf.md").read_text()
    coming = text.split("## Coming from TRL", 1)[1].split("\n## ", 1)[0]
    assert "`f(prompts, responses, **columns)`" in coming and "`def reward_len(prompts, completions, **kwargs)`" in coming


# --- 3. settings nothing reads ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("given, line", [
    (dict(kl_target=3.0), "--kl-target 3.0: only --adaptive-kl reads it (without it beta stays --kl-coef every "
                          "step); add --adaptive-kl, or drop --kl-target"),
    (dict(kl_horizon=500), "--kl-horizon 500: only --adaptive-kl reads it (without it beta stays --kl-coef every "
                           "step); add --adaptive-kl, or drop --kl-horizon"),
    (dict(lora_r=4), "--lora-r 4: needs --lora; add --lora, or drop --lora-r"),
    (dict(lora_alpha=8), "--lora-alpha 8: needs --lora; add --lora, or drop --lora-alpha"),
    (dict(lora_target_modules=["c_attn"]), "--lora-target-modules ['c_attn']: needs --lora; add --lora, or drop "
                                           "--lora-target-modules"),
    (dict(advantage="grpo", samples_per_prompt=2, value_init="reward"),
     "--value-init 'reward': starts the value model, which --advantage grpo does not have; drop --value-init, or use "
     "--advantage gae"),
    (dict(merge_lora=True), "--merge-lora: needs --lora"),  # was: '--merge-lora True: needs --lora'
])
def test_a_setting_nothing_would_read_is_refused(given, line):
    with pytest.raises(ConfigError) as e:
        validate(cfg(**given))
    assert str(e.value) == line


@pytest.mark.parametrize("given", [dict(kl_target=3.0, kl_horizon=500, adaptive_kl=True),
                                   dict(lora=True, lora_r=4, lora_alpha=8, lora_target_modules=["c_attn"]),
                                   dict(advantage="grpo", samples_per_prompt=2, value_init="policy")])
def test_the_same_settings_with_what_reads_them_pass(given):
    validate(cfg(**given))


def test_a_config_yaml_that_records_every_default_still_loads(tmp_path):
    recorded = yaml.safe_load(yaml.safe_dump(cfg(advantage="rloo", samples_per_prompt=2).to_dict()))
    validate(from_dict(recorded))


def test_a_resumed_runs_recorded_setting_that_nothing_reads_is_let_pass():
    validate(cfg(kl_target=3.0), new_run=False)  # an earlier version allowed it; its run ignored it as the resume does


def test_a_config_files_setting_nothing_reads_is_named_by_its_key(assets, tmp_path, capsys):
    (tmp_path / "rlhf.yaml").write_text("kl_target: 3\n")
    line = rlhf_error([*base(assets), "--reward", "proxima.rlhf.demo:keyword_sentiment", "--config",
                       str(tmp_path / "rlhf.yaml")], capsys)
    assert line.startswith(f"{tmp_path / 'rlhf.yaml'}: kl_target 3.0: only --adaptive-kl reads it"), line


# --- 4 and 5. TRL's flags difflib got wrong; --resume ------------------------------------------------------------------
@pytest.mark.parametrize("flag, said", [
    ("--warmup-steps", "--warmup-steps is TRL's; no learning-rate warmup here"),  # was: did you mean --steps?
    ("--warmup-ratio", "--warmup-ratio is TRL's; no learning-rate warmup here"),
    ("--weight-decay", "--weight-decay is TRL's; Adam's weight decay is not offered (it is 0); drop it"),
    ("--adam-epsilon", "--adam-epsilon is TRL's; Adam's epsilon is not offered (it is 1e-5, as PPO's); drop it"),
    ("--resume-from-checkpoint", "--resume-from-checkpoint is TRL's; a run is continued by `proxima resume RUN`"),
    ("--trust-remote-code", "--trust-remote-code is TRL's; refused by design"),
    ("--push-to-hub", "--push-to-hub is TRL's; nothing is uploaded: upload RUN/policy"),
    ("--model-name", "did you mean --policy (TRL's --model-name; a local model directory)?"),
])
def test_trls_flags_difflib_sent_elsewhere_get_their_own_answer(flag, said, capsys):
    line = rlhf_error(["rlhf", flag, "x"], capsys)
    assert said in line, line
    assert "--steps?" not in line and "--keep-checkpoints" not in line, line


def test_a_config_files_resume_from_checkpoint_is_not_keep_checkpoints(tmp_path, capsys):
    (tmp_path / "rlhf.yaml").write_text("resume_from_checkpoint: out/checkpoint-50\n")
    line = rlhf_error(["rlhf", "--config", str(tmp_path / "rlhf.yaml")], capsys)
    assert line == (f"{tmp_path / 'rlhf.yaml'}: unknown field 'resume_from_checkpoint' (TRL's resume_from_checkpoint: "
                    "a run is continued by `proxima resume RUN`, from its config.yaml and latest checkpoint; drop it)")


def test_rlhf_resume_flag_names_the_resume_command_with_the_run(capsys):
    line = rlhf_error(["rlhf", "--resume", "ga0b"], capsys)
    assert line == ("unrecognized arguments: --resume ga0b; proxima rlhf takes no --resume: continue the run with "
                    "`proxima resume ga0b [--steps N]` (see proxima rlhf --help)")


# --- 6. an RLHF run's resume given a setting of proxima rlhf ------------------------------------------------------------
@pytest.fixture(scope="module")
def rlhf_run(tmp_path_factory):
    from tests.rlhf_assets import finished_tiny_rlhf_run

    return finished_tiny_rlhf_run(tmp_path_factory.mktemp("rlhf50_run"))


@pytest.mark.parametrize("flag", ["--lr", "--device", "--seed", "--threads", "--clip-coef", "--run-dir"])
def test_an_rlhf_setting_given_to_an_rlhf_runs_resume_names_the_new_run_that_changes_it(rlhf_run, flag, capsys):
    line = rlhf_error(["resume", str(rlhf_run), "--steps", "3", flag, "1"], capsys, "proxima resume")
    assert line == (f"{flag}: {rlhf_run} is an RLHF run, whose settings its config.yaml records: an RLHF run's resume "
                    f"takes only --steps N, --trust-run and --quiet (a new run with other settings: proxima rlhf "
                    f"--config {rlhf_run / 'config.yaml'} {flag} ...)")


def test_a_ppo_only_flag_to_an_rlhf_runs_resume_still_says_ppo_flags_do_not_apply(rlhf_run, capsys):
    line = rlhf_error(["resume", str(rlhf_run), "--num-envs", "3"], capsys, "proxima resume")
    assert line == (f"--num-envs: {rlhf_run} is an RLHF run; PPO flags do not apply to it (an RLHF resume takes only "
                    "--steps N, --trust-run and --quiet)")


def test_config_to_an_rlhf_runs_resume_points_to_proxima_rlhf_not_train(rlhf_run, capsys):
    line = rlhf_error(["resume", str(rlhf_run), "--config", "x.yaml"], capsys, "proxima resume")
    assert "proxima train --resume" not in line, line
    assert ("proxima resume takes no --config: an RLHF run's resume takes only --steps N, --trust-run and --quiet; a "
            "new run with the file's values: `proxima rlhf --config x.yaml`") in line, line


# --- 7. RLHFConfig's unknown keywords ------------------------------------------------------------------------------------
@pytest.mark.parametrize("given, said", [
    (dict(learning_rate=1e-5), "RLHFConfig(learning_rate=1e-05): not an RLHFConfig field (did you mean 'lr'? TRL's "
                               "learning_rate)"),
    (dict(per_device_train_batch_size=2), "RLHFConfig(per_device_train_batch_size=2): not an RLHFConfig field (did "
                                          "you mean 'micro_batch_size'? TRL's per_device_train_batch_size: "),
    (dict(fp16=True), "RLHFConfig(fp16=True): not an RLHFConfig field (TRL's fp16: fp16 mixed precision is not offered"),
    (dict(polcy="x"), "RLHFConfig(polcy='x'): not an RLHFConfig field (did you mean 'policy'?)"),
])
def test_rlhfconfigs_unknown_keywords_name_the_field_as_ppoconfigs_do(given, said):
    with pytest.raises(UnknownFieldError) as e:  # a ConfigError, and still the TypeError it was
        RLHFConfig(policy="p", **given)
    assert str(e.value).startswith(said), str(e.value)
    assert isinstance(e.value, ConfigError) and isinstance(e.value, TypeError)


# --- 8. positions; a Hub id ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("extra, fix", [
    ([], "use --truncate-prompts --max-prompt-length 44"),
    (["--truncate-prompts"], "use --max-prompt-length 44"),
])
def test_a_prompt_too_long_for_the_positions_names_the_max_prompt_length_that_fits(assets, tmp_path, extra, fix, capsys):
    (tmp_path / "long.txt").write_text("the movie was good " * 20 + "\n")  # 80 tokens, 48 positions
    argv = [*base(assets), "--prompts", str(tmp_path / "long.txt"), "--reward", "proxima.rlhf.demo:keyword_sentiment",
            "--run-dir", str(tmp_path / "run"), *extra]
    line = rlhf_error(argv, capsys)
    assert line == ("--max-new-tokens 4: the longest prompt (line 1, 80 tokens) + 4 new tokens = 84, more than the "
                    f"policy's 48 positions; {fix}")
    assert not (tmp_path / "run").exists()


def test_a_short_prompt_with_too_many_new_tokens_names_both_values_that_fit(assets, tmp_path, capsys):
    argv = [*base(assets), "--max-new-tokens", "46", "--reward", "proxima.rlhf.demo:keyword_sentiment",
            "--run-dir", str(tmp_path / "run")]
    line = rlhf_error(argv, capsys)
    assert line.endswith("more than the policy's 48 positions; use --max-new-tokens 45 or --truncate-prompts "
                         "--max-prompt-length 2"), line


@pytest.mark.parametrize("hub_id", ["gpt2", "openai-community/gpt2"])
def test_a_hub_id_as_policy_says_it_is_never_downloaded(hub_id, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.txt").write_text("a\n")
    line = rlhf_error(["rlhf", "--policy", hub_id, "--prompts", "p.txt", "--reward", "proxima.rlhf.demo:keyword_sentiment"],
                      capsys)
    assert line == (f"--policy '{hub_id}': no such directory; a Hugging Face Hub id is never downloaded: give a local "
                    "directory (one saved with save_pretrained, or a snapshot of the Hub's model)")
