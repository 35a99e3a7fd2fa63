"""Input at the edges: folders without a tokenizer, malformed tokenizer files, chat templates that raise,
Unicode line separators in prompts, a prompts file that changed before a resume, a non-causal policy, a
reward module that exits at import, paths as rewards, and the demo's folders after an early error."""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from proxima.rlhf import RLHFConfig, resume, train_rlhf
from proxima.rlhf.__main__ import main
from proxima.rlhf.config import ConfigError, reward_specs, validate
from proxima.rlhf.data import load_prompts
from proxima.rlhf.models import load_policy, read_tokenizer
from proxima.rlhf.rewards import RewardError, RewardModel
from proxima.rlhf.rundir import list_checkpoints
from proxima.rlhf.trainer import RLHFTrainer
from rlhf_assets import save_reward_model

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
#: the demo's chat template, and one that refuses a system message as Gemma's and Mistral's do
PLAIN_TEMPLATE = "{% for m in messages %}{{ m['content'] }} {% endfor %}{% if add_generation_prompt %}the{% endif %}"
NO_SYSTEM = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"


def resume_refused(*args, **kwargs) -> str:
    """resume()'s refusal of bad input (it raises), as the one line `proxima resume` prints for it."""
    from proxima.checkpoint import CheckpointError
    from proxima.diskspace import StorageError

    with pytest.raises((ConfigError, StorageError, CheckpointError)) as e:
        resume(*args, **kwargs)
    return f"proxima resume: error: {e.value}"


def args(assets, run_dir, *extra):
    return ["--policy", str(assets / "model"), "--prompts", str(assets / "prompts.txt"),
            "--reward", "proxima.rlhf.demo:keyword_sentiment", "--run-dir", str(run_dir), "--batch-size", "4",
            "--num-minibatches", "1", "--max-new-tokens", "4", "--update-epochs", "1", "--steps", "1",
            "--print-every", "0", "--no-plot", *extra]


def one_line_error(capsys, code) -> str:
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("proxima rlhf: error: ") and "Traceback" not in err, err
    return err


def copy_without_tokenizer(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    for name in TOKENIZER_FILES:
        (dest / name).unlink()
    return dest


def with_template(source: Path, dest: Path, template: str) -> Path:
    shutil.copytree(source, dest)
    (dest / "chat_template.jinja").write_text(template)
    return dest


def conversations(path: Path, *first_messages: dict) -> Path:
    """One conversation per line, each the given first message (if any) and a user turn."""
    path.write_text("".join(json.dumps({"messages": ([m] if m else []) + [{"role": "user", "content": "the movie"}]})
                            + "\n" for m in first_messages))
    return path


# ---------------------------------------------------------------------------------------------
# 1: tokenizer files
# ---------------------------------------------------------------------------------------------
def test_a_policy_folder_without_tokenizer_files_is_refused_unless_tokenizer_names_one(assets, tiny_cfg, tmp_path,
                                                                                      capsys):
    # transformers 5.x builds an empty GPT2Tokenizer from such a folder, and the run trained on it
    policy = copy_without_tokenizer(assets / "model", tmp_path / "notok")
    code = main(args(assets, tmp_path / "run", "--policy", str(policy)))
    err = one_line_error(capsys, code)
    assert "--policy: no tokenizer of its own" in err and "give --tokenizer DIR" in err, err
    assert not (tmp_path / "run").exists()
    # a tokenizer that lives elsewhere still works
    trainer = RLHFTrainer(tiny_cfg(policy=str(policy), tokenizer=str(assets / "model")))
    assert len(trainer.tokenizer) == trainer.policy.get_input_embeddings().num_embeddings


def test_a_tokenizer_folder_without_tokenizer_files_is_refused(assets, tmp_path, capsys):
    tokenizer = copy_without_tokenizer(assets / "model", tmp_path / "notok")
    code = main(args(assets, tmp_path / "run", "--tokenizer", str(tokenizer)))
    err = one_line_error(capsys, code)
    assert f"--tokenizer '{tokenizer}': no tokenizer files (tokenizer.json" in err, err
    # a tokenizer_config.json alone: transformers builds a GPT2Tokenizer without a vocabulary
    (tokenizer / "tokenizer_config.json").write_text('{"tokenizer_class": "GPT2Tokenizer", "eos_token": "[EOS]"}')
    with pytest.raises(ConfigError, match="the tokenizer has an empty vocabulary"):
        read_tokenizer(str(tokenizer))


def test_a_reward_model_folder_without_tokenizer_files_is_refused(tmp_path):
    folder = save_reward_model(tmp_path / "rm")
    for name in TOKENIZER_FILES:
        (folder / name).unlink()
    with pytest.raises(ConfigError, match=r"^--reward '.*rm': no tokenizer files \(tokenizer.json"):
        RewardModel(str(folder), torch.device("cpu"))


def test_a_malformed_tokenizer_json_is_one_line_naming_the_file(assets, tmp_path, capsys):
    policy = shutil.copytree(assets / "model", tmp_path / "badtok")
    data = json.loads((policy / "tokenizer.json").read_text())
    data["model"]["vocab"] = None  # the tokenizers library raises a bare Exception for this
    (policy / "tokenizer.json").write_text(json.dumps(data))
    code = main(args(assets, tmp_path / "run", "--policy", str(policy)))
    err = one_line_error(capsys, code)
    assert "cannot load the tokenizer (tokenizer.json): invalid type: null" in err, err


def test_a_tokenizer_without_eos_is_blamed_on_the_flag_that_named_it(assets, tmp_path, capsys):
    """The policy's own tokenizer (no --tokenizer given) is --policy's fault, named with its folder, not a
    --tokenizer the user never passed; the same folder given as --tokenizer is --tokenizer's."""
    folder = shutil.copytree(assets / "model", tmp_path / "noeos")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    del config["eos_token"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    for name in ("config.json", "generation_config.json"):  # their eos ids would stand in for the tokenizer's
        if (folder / name).is_file():
            data = json.loads((folder / name).read_text())
            data["eos_token_id"] = None
            (folder / name).write_text(json.dumps(data))
    expected = "the tokenizer has no EOS token and the policy's generation_config.json names no eos_token_id"
    err = one_line_error(capsys, main(args(assets, tmp_path / "run", "--policy", str(folder))))
    assert err.startswith(f"proxima rlhf: error: --policy '{folder}': {expected}"), err
    # --tokenizer names it, with a policy of no eos ids either
    err = one_line_error(capsys, main(args(assets, tmp_path / "run", "--policy", str(folder), "--tokenizer", str(folder))))
    assert err.startswith(f"proxima rlhf: error: --tokenizer '{folder}': {expected}"), err
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------------------------------
# 2: chat templates that raise
# ---------------------------------------------------------------------------------------------
def test_a_chat_template_that_refuses_a_prompt_is_one_line_naming_file_and_line(assets, tmp_path, capsys):
    policy = with_template(assets / "model", tmp_path / "chat", NO_SYSTEM + PLAIN_TEMPLATE)
    prompts = conversations(tmp_path / "p.jsonl", None, {"role": "system", "content": "be kind"})
    code = main(args(assets, tmp_path / "run", "--policy", str(policy), "--prompts", str(prompts)))
    err = one_line_error(capsys, code)
    assert f"--prompts {prompts}:2: the tokenizer's chat template refused the conversation: TemplateError: " \
           "System role not supported" in err, err
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def chat_policy(assets, tmp_path_factory):
    return with_template(assets / "model", tmp_path_factory.mktemp("chat") / "model", PLAIN_TEMPLATE)


def reward_model_with_template(folder: Path, template: str) -> Path:
    save_reward_model(folder)
    (folder / "chat_template.jinja").write_text(template)
    return folder


def test_a_reward_model_template_that_raises_on_the_trial_call_is_one_line(assets, chat_policy, tmp_path, capsys):
    rm = reward_model_with_template(tmp_path / "rm", NO_SYSTEM + PLAIN_TEMPLATE)
    prompts = conversations(tmp_path / "p.jsonl", {"role": "system", "content": "be kind"})
    code = main(args(assets, tmp_path / "run", "--policy", str(chat_policy), "--prompts", str(prompts),
                     "--reward", str(rm)))
    err = one_line_error(capsys, code)
    assert "on the trial call before training: its chat template failed on prompts line 1: TemplateError: " \
           "System role not supported" in err, err
    assert not (tmp_path / "run").exists()


def test_a_reward_model_template_that_raises_at_step_1_of_a_new_run_keeps_nothing(chat_policy, tiny_cfg, tmp_path):
    # the trial call and the positions check render an empty response, which this template accepts
    rm = reward_model_with_template(tmp_path / "rm", "{% if messages[-1]['content'] %}"
                                    "{{ raise_exception('answers are not supported') }}{% endif %}" + PLAIN_TEMPLATE)
    prompts = conversations(tmp_path / "p.jsonl", None, None)
    run_dir = tmp_path / "run"
    with pytest.raises(RewardError) as e:
        train_rlhf(tiny_cfg(policy=str(chat_policy), prompts=str(prompts), reward=str(rm), run_dir=str(run_dir),
                            checkpoint_every=0))
    message = str(e.value)
    assert "at step 1: its chat template failed on prompts line" in message, message
    assert "TemplateError: answers are not supported" in message and "the new run keeps nothing" in message
    assert not run_dir.exists()  # no finished step to keep (docs/rlhf.md); a later step's failure writes a checkpoint


# ---------------------------------------------------------------------------------------------
# 3: lines end at "\n" only
# ---------------------------------------------------------------------------------------------
SEPARATORS = "\u2028\u2029\u0085\x0b\x0c\x1c\x1d\x1e"


def test_prompt_files_split_at_newlines_only_keeping_unicode_separators_and_line_numbers(tmp_path):
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text(json.dumps({"prompt": f"the{SEPARATORS}movie", "note": f"a{SEPARATORS}b"}, ensure_ascii=False)
                     + "\n\n" + json.dumps({"prompt": "the film"}) + "\r\n")
    rows = load_prompts(str(jsonl))
    assert [(r.prompt, r.line) for r in rows] == [(f"the{SEPARATORS}movie", 1), ("the film", 3)]
    assert rows[0].columns == {"note": f"a{SEPARATORS}b"}

    text = tmp_path / "p.txt"
    text.write_text(f"the{SEPARATORS}movie was\nthe film\n")
    assert [(r.prompt, r.line) for r in load_prompts(str(text))] == [(f"the{SEPARATORS}movie was", 1), ("the film", 2)]

    jsonl.write_text(json.dumps({"prompt": f"a{SEPARATORS}b"}, ensure_ascii=False) + "\n{broken\n")
    with pytest.raises(ConfigError, match=r"p\.jsonl:2: not JSON"):
        load_prompts(str(jsonl))


# ---------------------------------------------------------------------------------------------
# 4: a prompts file that changed before a resume
# ---------------------------------------------------------------------------------------------
def trained_run(assets, tiny_cfg, tmp_path) -> tuple:
    prompts = tmp_path / "prompts.txt"
    shutil.copy(assets / "prompts.txt", prompts)
    run_dir = train_rlhf(tiny_cfg(prompts=str(prompts), run_dir=str(tmp_path / "run"), sample_every=0))
    return run_dir, prompts


def untouched(run_dir: Path) -> dict:
    return {p.name: p.read_bytes() for p in [run_dir / "config.yaml", *list_checkpoints(run_dir)]}


def test_resume_refuses_a_prompts_file_that_changed_before_rewriting_anything(assets, tiny_cfg, tmp_path, capsys):
    run_dir, prompts = trained_run(assets, tiny_cfg, tmp_path)
    before = untouched(run_dir)
    original = prompts.read_text()

    prompts.write_text("the movie was\n")  # regenerated with fewer rows: the checkpoint's prompt order indexes 80
    err = resume_refused(run_dir, steps=4)
    assert err == (f"proxima resume: error: --prompts {prompts}: 1 prompts, but checkpoint step_000002 was written "
                   "with 80 (the file changed); restore it or start a new run"), err
    assert untouched(run_dir) == before  # config.yaml still says steps: 2

    prompts.write_text(original.replace("the movie was", "the movie is"))  # as many rows, another prompt
    err = resume_refused(run_dir, steps=4)
    assert f"--prompts {prompts}: its 80 prompts differ from those checkpoint step_000002 was written with" in err, err
    assert untouched(run_dir) == before

    prompts.write_text(original.replace("\n", "\r\n"))  # the same rows, other line endings: resumes
    assert resume(run_dir, steps=3) == 0, capsys.readouterr().err


def test_a_checkpoint_without_the_prompts_record_resumes_and_is_checked_for_range(assets, tiny_cfg, tmp_path, capsys):
    run_dir, prompts = trained_run(assets, tiny_cfg, tmp_path)
    for file in list_checkpoints(run_dir):  # as written before the count and hash were recorded
        state = torch.load(file, weights_only=True)
        del state["prompts"]
        torch.save(state, file)
    original = prompts.read_text()
    prompts.write_text("the movie was\nthe film is\n")
    err = resume_refused(run_dir, steps=3)
    assert f"--prompts {prompts}: 2 prompts, but checkpoint step_000002 draws prompt " in err, err
    assert "(the file changed); restore it or start a new run" in err

    prompts.write_text(original)
    assert resume(run_dir, steps=3) == 0, capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# 5: a policy that is not causal
# ---------------------------------------------------------------------------------------------
def bert_config(vocab_size: int) -> dict:
    return {"model_type": "bert", "vocab_size": vocab_size, "hidden_size": 32, "num_hidden_layers": 1,
            "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 48}


def test_a_bidirectional_policy_is_refused(assets, tmp_path, capsys):
    from transformers import BertConfig, BertForMaskedLM

    from proxima.rlhf.demo import build_tokenizer

    tok = build_tokenizer()
    config = bert_config(len(tok))
    folder = tmp_path / "bert"  # AutoModelForCausalLM makes it a BertLMHeadModel with is_decoder false
    BertForMaskedLM(BertConfig(**{k: v for k, v in config.items() if k != "model_type"})).save_pretrained(folder)
    tok.save_pretrained(folder)
    code = main(args(assets, tmp_path / "run", "--policy", str(folder)))
    err = one_line_error(capsys, code)
    assert f"--policy '{folder}': BertLMHeadModel is not causal (is_decoder is false in its config)" in err, err
    assert not (tmp_path / "run").exists()

    (tmp_path / "bert.json").write_text(json.dumps(config))  # a fresh model from a config: the same
    with pytest.raises(ConfigError, match="BertLMHeadModel is not causal"):
        load_policy(str(tmp_path / "bert.json"), seed=0)
    config["is_decoder"] = True  # BERT as a decoder is causal
    (tmp_path / "bert.json").write_text(json.dumps(config))
    load_policy(str(tmp_path / "bert.json"), seed=0)


# ---------------------------------------------------------------------------------------------
# 6: a reward module that calls sys.exit at import
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("body, code_shown", [("import sys\nsys.exit('bye')\n", "'bye'"),
                                              ("raise SystemExit(3)\n", "3")])
def test_a_reward_module_that_exits_at_import_is_one_line(assets, tmp_path, capsys, body, code_shown):
    module = tmp_path / "exits.py"
    module.write_text(body + "def f(prompts, responses):\n    return [0.0] * len(responses)\n")
    code = main(args(assets, tmp_path / "run", "--reward", f"{module}:f"))
    assert one_line_error(capsys, code) == (f"proxima rlhf: error: --reward '{module}:f': importing it called "
                                            f"sys.exit({code_shown})")


# ---------------------------------------------------------------------------------------------
# 7: paths as rewards in the Python API
# ---------------------------------------------------------------------------------------------
def test_rlhf_config_takes_paths_as_rewards(assets, tmp_path):
    rm = save_reward_model(tmp_path / "rm")
    cfg = RLHFConfig(policy=str(assets / "model"), prompts=str(assets / "prompts.txt"), reward=rm)
    assert reward_specs(cfg) == [str(rm)]
    validate(cfg)
    assert cfg.reward == [str(rm)]
    cfg = RLHFConfig(policy=str(assets / "model"), prompts=str(assets / "prompts.txt"),
                     reward=[rm, "proxima.rlhf.demo:keyword_sentiment"], value_init="reward")
    validate(cfg)  # --value-init reward finds the reward-model directory among them
    assert cfg.reward == [str(rm), "proxima.rlhf.demo:keyword_sentiment"]


# ---------------------------------------------------------------------------------------------
# 8: the demo takes back the folders it created
# ---------------------------------------------------------------------------------------------
def test_a_demo_refused_after_pretraining_removes_the_empty_folders_it_created(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    refused = ["--demo", "--max-new-tokens", "100", "--demo-pretrain-steps", "1"]  # beyond the model's positions
    assert main(refused) == 2  # the default runs/rlhf-demo__...
    assert not (tmp_path / "runs").exists()
    assert main(refused + ["--run-dir", "newdir/deeper/x"]) == 2
    assert not (tmp_path / "newdir").exists()
    (tmp_path / "mine").mkdir()  # a folder the user made stays, and so does anything else in a parent
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "other").mkdir()
    assert main(refused + ["--run-dir", "mine/new/x"]) == 2
    assert main(refused) == 2
    assert sorted(os.listdir(tmp_path)) == ["mine", "runs"] and os.listdir(tmp_path / "mine") == []
    assert os.listdir(tmp_path / "runs") == ["other"]
    capsys.readouterr()


def test_numpy_and_tensor_scalars_in_an_rlhf_config_train_and_are_recorded_as_numbers(tiny_cfg, tmp_path):
    import numpy as np
    import yaml

    cfg = tiny_cfg(lr=np.float64(2e-4), batch_size=np.int64(8), temperature=torch.tensor(0.9), steps=1,
                   run_dir=str(tmp_path / "run"))
    run_dir = train_rlhf(cfg)  # config.yaml could not be written before: RepresenterError after the models loaded
    recorded = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert (recorded["lr"], recorded["batch_size"]) == (2e-4, 8) and abs(recorded["temperature"] - 0.9) < 1e-6


def test_a_lora_target_only_the_policy_has_names_the_value_model(assets, tmp_path, capsys):
    """With a critic the value backbone gets an adapter on the same targets: `lm_head` (the policy's output
    layer, not the backbone's) was refused as "not found in the base model", which the policy has."""
    err = one_line_error(capsys, main(args(assets, tmp_path / "run", "--lora", "--lora-target-modules", "lm_head")))
    assert "not in the value model's backbone (GPT2Model)" in err and "critic-free --advantage" in err, err
    assert not (tmp_path / "run").exists()


def test_gradient_checkpointing_on_a_model_without_it_is_one_line(assets, tmp_path, capsys, monkeypatch):
    """transformers raises ValueError for a causal LM without checkpointing (JetMoe, CTRL, XLNet, ...): a
    traceback and exit 1 before."""
    from transformers import GPT2LMHeadModel

    monkeypatch.setattr(GPT2LMHeadModel, "supports_gradient_checkpointing", False)
    err = one_line_error(capsys, main(args(assets, tmp_path / "run", "--gradient-checkpointing")))
    assert err.startswith("proxima rlhf: error: --gradient-checkpointing: ") and err.endswith("; drop the flag"), err
    assert not (tmp_path / "run").exists()
