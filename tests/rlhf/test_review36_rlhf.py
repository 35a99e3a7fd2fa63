"""Review 36 (RLHF): a reward model of another vocabulary reads what its own tokenizer gives (a BERT
classifier's [CLS] ... [SEP]) and a Llama-style one still gets one BOS; a new run from a run's
config.yaml gets a new directory from any working directory, and config.yaml records run_dir absolute;
a note when CUDA is there but --device was left at cpu; the done: line labels its 10% windows; the
released config.json keeps 4.x's torch_dtype."""

import json
from pathlib import Path

import pytest
import torch
import yaml

from rlhf_assets import save_gpt2, save_reward_model

from proxima.rlhf import loop
from proxima.rlhf.api import DEVICE_LEFT_DEFAULT, resume
from proxima.rlhf.data import PromptRow
from proxima.rlhf.demo import SPECIALS, build_tokenizer
from proxima.rlhf.rewards import RewardBatch, RewardModel
from proxima.rlhf.trainer import RLHFTrainer
from tests.cli_helpers import run_main
from tests.rlhf import test_review28_inputs as m28

CPU = torch.device("cpu")


def batch(texts, texts_with_stop=None):
    rows = [PromptRow(t, {}, line=i + 1) for i, t in enumerate(texts)]
    return RewardBatch(rows, list(texts), list(texts), 1, texts_with_stop)


# ---------------------------------------------------------------- 1. the reward model's own special tokens
def save_bert_rm(folder, bos_eos=False):
    """A BERT classifier with one label and a WordPiece tokenizer of the demo's words (post-processor
    [CLS] $A [SEP]); ``bos_eos``: the tokenizer also names [CLS] and [SEP] its BOS and EOS, as DeBERTa's."""
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    words = sorted(w for w in build_tokenizer().get_vocab() if w not in SPECIALS)
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, "##ly", "##s"])}
    tok = BertTokenizer(vocab=vocab, **({"bos_token": "[CLS]", "eos_token": "[SEP]"} if bos_eos else {}))
    torch.manual_seed(0)
    # initializer_range 0.5: a pooled [CLS] and a pooled first word score far apart
    model = BertForSequenceClassification(BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64, num_labels=1, pad_token_id=0, initializer_range=0.5))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module", params=["bert", "deberta-style"])
def bert_rm(request, tmp_path_factory):
    return save_bert_rm(tmp_path_factory.mktemp("r36_bert") / "rm", bos_eos=request.param == "deberta-style")


def hf_scores(folder, texts):
    """What the reward model says of each text read as transformers' users read it: model(**tok(text))."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        return torch.tensor([model(**tok(t, return_tensors="pt")).logits[0, 0].item() for t in texts])


TEXTS = ["the movie was good", "the food was really bad and slow", "honestly", "the hotel seemed quite lovely overall"]


def test_an_encoder_reward_model_scores_what_its_tokenizer_gives(bert_rm):
    """Catches the text encoded without special tokens plus only a BOS: BERT (no bos_token) then read no
    [CLS] and pooled the first word; DeBERTa-style ([CLS] as BOS) lost its [SEP]."""
    rm = RewardModel(str(bert_rm), CPU)
    rm.read_with(build_tokenizer())  # the policy's vocabulary is another: plain text
    ids = rm.encode(batch(TEXTS).rows, TEXTS, TEXTS)
    assert ids == [rm.tokenizer(t)["input_ids"] for t in TEXTS]
    assert all(x[0] == rm.tokenizer.cls_token_id and x[-1] == rm.tokenizer.sep_token_id for x in ids)
    torch.testing.assert_close(rm(batch(TEXTS)), hf_scores(bert_rm, TEXTS), rtol=0, atol=1e-5)


def test_a_run_logs_the_bert_reward_models_own_score(tiny_cfg, bert_rm, tmp_path):
    """End to end: each logged score is model(**tok(prompt + response)) of the validated reward model."""
    from proxima.rlhf import train_rlhf

    run = train_rlhf(tiny_cfg(reward=str(bert_rm), steps=1, batch_size=4, num_minibatches=1, update_epochs=1,
                              missing_eos_penalty=0.0, run_dir=str(tmp_path / "run")))
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    texts = [f"{r['prompt']} {r['response']}" for r in rows]
    torch.testing.assert_close(torch.tensor([r["score"] for r in rows]), hf_scores(bert_rm, texts), rtol=0, atol=1e-5)


def old_encode(tok, text):
    """How a reward model of the policy's vocabulary, or a Llama-style one, read text before this review."""
    x = tok(text, add_special_tokens=False)["input_ids"]
    bos = tok.bos_token_id
    adds = bos is not None and tok("x")["input_ids"][:1] == [bos]
    return [bos] + x if adds and x[:1] != [bos] else x


@pytest.fixture(scope="module")
def llama_style_rm(tmp_path_factory):
    """A reward model whose tokenizer adds [BOS] to plain text, as Llama's does."""
    return save_reward_model(tmp_path_factory.mktemp("r36_bos_rm") / "rm", tokenizer=m28.chat_tokenizer())


@pytest.fixture(scope="module")
def gpt2_style_rm(tmp_path_factory):
    return save_reward_model(tmp_path_factory.mktemp("r36_gpt2_rm") / "rm")


@pytest.mark.parametrize("which", ["llama_style_rm", "gpt2_style_rm"])
def test_a_causal_lm_reward_model_reads_the_same_ids_as_before_with_one_bos(which, request):
    """The policy's own text (its BOS, the EOS it emitted) and plain text: the ids of before, never a
    second [BOS] or [EOS]. Catches a prefix or suffix added without looking at what the text holds."""
    rm = RewardModel(str(request.getfixturevalue(which)), CPU)
    texts = ["the movie was good", "[BOS] the movie was good", "the movie was good [EOS]", "[BOS] the food [EOS]"]
    ids = rm.encode(batch(texts).rows, texts, texts)
    assert ids == [old_encode(rm.tokenizer, t) for t in texts]
    bos = rm.tokenizer.bos_token_id
    assert [x.count(bos) for x in ids] == ([1, 1, 1, 1] if which == "llama_style_rm" else [0, 0, 0, 0])
    assert [x.count(rm.tokenizer.eos_token_id) for x in ids] == [0, 0, 1, 1]


@pytest.fixture(scope="module")
def bos_eos_rm(tmp_path_factory):
    """A reward model whose tokenizer wraps plain text in [BOS] ... [EOS] (Llama's add_eos_token=True)."""
    from tokenizers import processors

    tok = m28.chat_tokenizer()
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single="[BOS] $A [EOS]", special_tokens=[(t, tok.convert_tokens_to_ids(t)) for t in ("[BOS]", "[EOS]")])
    return save_reward_model(tmp_path_factory.mktemp("r36_bos_eos_rm") / "rm", tokenizer=tok)


def test_a_tokenizer_that_adds_an_eos_adds_it_once(bos_eos_rm):
    """The EOS the policy emitted (same vocabulary: the text holds it) is not doubled; a response cut at
    --max-new-tokens gets the EOS tok(text) gives. Catches a suffix added whatever the text ends with."""
    rm = RewardModel(str(bos_eos_rm), CPU)
    texts = ["the movie was good", "[BOS] the movie was good [EOS]", "the movie was good [EOS]"]
    ids = rm.encode(batch(texts).rows, texts, texts)
    assert ids == [rm.tokenizer("the movie was good")["input_ids"]] * 3
    assert ids[0][0] == rm.tokenizer.bos_token_id and ids[0][-1] == rm.tokenizer.eos_token_id


# ---------------------------------------------------------------- 2. a new run from a run's config.yaml
SMALL = ["--steps", "1", "--batch-size", "4", "--num-minibatches", "1", "--update-epochs", "1", "--max-new-tokens", "4",
         "--print-every", "0", "--sample-every", "0", "--no-plot"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("r36_models")
    (folder / "p.txt").write_text("the movie was\nthe food was\n")
    return save_gpt2(folder / "policy"), save_reward_model(folder / "rm"), folder / "p.txt"


def new_runs(folder: Path) -> list:
    return sorted(p.name for p in (folder / "runs").iterdir()) if (folder / "runs").is_dir() else []


def test_a_new_run_from_a_runs_config_yaml_gets_a_new_directory_from_any_folder(models, tmp_path, monkeypatch, capsys):
    """As `proxima train --config RUN/config.yaml`. Catches the run's own run_dir kept: from its folder
    `--run-dir 'runs/a1': already holds a run`, and from another folder a second runs/a1 there."""
    policy, rm, prompts = models
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["rlhf", "--policy", str(policy), "--reward", str(rm), "--prompts", str(prompts),
                             "--run-dir", "runs/a1", *SMALL], capsys)
    assert code == 0, err
    config = tmp_path / "runs" / "a1" / "config.yaml"
    assert yaml.safe_load(config.read_text())["run_dir"] == str(tmp_path / "runs" / "a1")  # absolute, as typed relative
    before = config.read_bytes()

    code, _, err = run_main(["rlhf", "--config", "runs/a1/config.yaml", "--steps", "1"], capsys)
    assert code == 0, err
    assert err.strip() == (f"proxima rlhf: note: --config runs/a1/config.yaml: run_dir {tmp_path / 'runs' / 'a1'} is "
                           "that run's own directory; this run gets a new one (choose it with --run-dir DIR)")
    made = [n for n in new_runs(tmp_path) if n != "a1"]
    assert len(made) == 1 and made[0].startswith("rlhf__1__")
    assert yaml.safe_load((tmp_path / "runs" / made[0] / "config.yaml").read_text())["run_dir"] == str(
        tmp_path / "runs" / made[0])
    assert config.read_bytes() == before and (tmp_path / "runs" / "a1" / "checkpoints" / "step_000001.pt").is_file()
    # --run-dir typed: that run's directory is not taken, so no note says "this run gets a new one"
    code, _, err = run_main(["rlhf", "--config", "runs/a1/config.yaml", "--steps", "1", "--run-dir", "runs/b"], capsys)
    assert code == 0 and err.strip() == "", err
    assert (tmp_path / "runs" / "b" / "checkpoints" / "step_000001.pt").is_file()

    # a config.yaml of an older version records run_dir relative to where that run started
    config.write_text(config.read_text().replace(f"run_dir: {tmp_path / 'runs' / 'a1'}", "run_dir: runs/a1"))
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")
    code, _, err = run_main(["rlhf", "--config", "../runs/a1/config.yaml", "--steps", "1"], capsys)
    assert code == 0, err
    assert "run_dir runs/a1 is that run's own directory; this run gets a new one" in err
    assert not (tmp_path / "other" / "runs" / "a1").exists()
    assert len(new_runs(tmp_path / "other")) == 1 and new_runs(tmp_path / "other")[0].startswith("rlhf__1__")


def test_a_resume_that_trains_records_run_dir_absolute(models, tmp_path, monkeypatch, capsys):
    """Catches a resume given a relative path writing that path into config.yaml."""
    policy, rm, prompts = models
    monkeypatch.chdir(tmp_path)
    assert run_main(["rlhf", "--policy", str(policy), "--reward", str(rm), "--prompts", str(prompts),
                     "--run-dir", "r", *SMALL], capsys)[0] == 0
    config = tmp_path / "r" / "config.yaml"
    config.write_text(config.read_text().replace(f"run_dir: {tmp_path / 'r'}", "run_dir: r"))  # an older version's
    assert resume("r", steps=2, quiet=True) == 0
    recorded = yaml.safe_load(config.read_text())
    assert recorded["steps"] == 2 and recorded["run_dir"] == str(tmp_path / "r")


# ---------------------------------------------------------------- 3. the CPU default with CUDA there, 4. done:
def test_a_visible_gpu_left_unused_by_the_default_device_is_noted_and_done_labels_its_windows(
        models, tmp_path, monkeypatch, capsys):
    """Catches the run on one CPU thread with a GPU there and no word of it, a note printed although
    --device cpu was typed, the default changed, and the done: line's score pair left unlabelled."""
    policy, rm, prompts = models
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    args = ["rlhf", "--policy", str(policy), "--reward", str(rm), "--prompts", str(prompts), *SMALL]
    code, out, err = run_main([*args, "--run-dir", str(tmp_path / "a")], capsys)
    assert code == 0, err
    assert err.strip() == ("proxima rlhf: note: CUDA is available, but this run trains on the CPU (--device defaults "
                           "to cpu); pass --device cuda (or --device auto) to train on the GPU")
    assert yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())["device"] == "cpu"
    # the CLI's "left at the default" is its own: a later train_rlhf(cfg) in this process is not told it was
    assert DEVICE_LEFT_DEFAULT.get() is False
    s = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert out.strip() == (f"done: 1 steps in {s['seconds']:.1f} s; score {s['reward_first']:+.3f} (first 10% of "
                           f"steps) -> {s['reward_last']:+.3f} (last 10%), KL {s['kl_last']:.3f} (last 10%); "
                           f"run directory {tmp_path / 'a'}")

    code, _, err = run_main([*args, "--run-dir", str(tmp_path / "b"), "--device", "cpu"], capsys)
    assert code == 0 and err.strip() == "", err
    (tmp_path / "c.yaml").write_text("device: cpu\n")  # chosen in the --config file: chosen too
    code, _, err = run_main([*args, "--run-dir", str(tmp_path / "c"), "--config", str(tmp_path / "c.yaml")], capsys)
    assert code == 0 and err.strip() == "", err


# ---------------------------------------------------------------- 5. torch_dtype in the released config.json
@pytest.mark.parametrize("release_dtype, dtype", [("auto", "bfloat16"), ("float16", "float16")])
def test_the_released_config_json_names_its_dtype_for_transformers_4_too(tiny_cfg, tmp_path, release_dtype, dtype):
    """Catches a release whose config.json says only transformers 5's dtype, which 4.x does not read."""
    from transformers import AutoModelForCausalLM

    source = save_gpt2(tmp_path / "m", dtype=torch.bfloat16)
    t = RLHFTrainer(tiny_cfg(policy=str(source), release_dtype=release_dtype))
    (tmp_path / "run").mkdir()
    loop._save_policy(t, None, tmp_path / "run")
    config = json.loads((tmp_path / "run" / "policy" / "config.json").read_text())
    assert config["torch_dtype"] == config["dtype"] == dtype
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "policy").dtype == getattr(torch, dtype)


def test_torch_dtype_is_added_in_each_sub_config_too(tmp_path):
    """A multimodal release: 4.x reads text_config.torch_dtype for the language model's weights."""
    from proxima.rlhf.rundir import add_torch_dtype

    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "llava", "dtype": "bfloat16", "text_config": {"model_type": "llama", "dtype": "bfloat16"},
        "vision_config": {"model_type": "clip_vision_model", "dtype": "float16"}}))
    add_torch_dtype(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["torch_dtype"] == config["text_config"]["torch_dtype"] == "bfloat16"
    assert config["vision_config"]["torch_dtype"] == "float16"


# ---------------------------------------------------------------- 6. conversations and the wrapping tokens
def conversations(n=2):
    rows = [PromptRow([{"role": "user", "content": "the movie was"}], {}, line=i + 1) for i in range(n)]
    responses = ["good", "really bad and slow"][:n]
    return rows, responses, [f"the movie was {r}" for r in responses]


def test_a_conversation_read_by_a_reward_model_without_a_chat_template_gets_its_cls_and_sep(bert_rm):
    """BERT has no chat template: it reads the policy's text with its post-processor's [CLS] ... [SEP]."""
    rm = RewardModel(str(bert_rm), CPU)
    rm.read_with(build_tokenizer())
    rows, responses, texts = conversations()
    ids = rm.encode(rows, responses, texts)
    assert ids == [rm.tokenizer(rm.render(r, s, t))["input_ids"] for r, s, t in zip(rows, responses, texts)]
    assert all(x[0] == rm.tokenizer.cls_token_id and x[-1] == rm.tokenizer.sep_token_id for x in ids)


CONTENT_ONLY = "{% for m in messages %}{{ m['content'] }} {% endfor %}"


@pytest.fixture(scope="module")
def named_bos_rm(tmp_path_factory):
    """As GPT-2's tokenizer (<|endoftext|>): a BOS named, none added to plain text; a chat template."""
    from tokenizers import processors

    tok = m28.chat_tokenizer(CONTENT_ONLY)
    tok._tokenizer.post_processor = processors.TemplateProcessing(single="$A", special_tokens=[])
    return save_reward_model(tmp_path_factory.mktemp("r36_named_bos_rm") / "rm", tokenizer=tok)


def test_a_chat_template_text_of_a_gpt2_style_reward_model_gets_no_bos(named_bos_rm):
    """A tokenizer that names a BOS but adds none: a templated text gets none either."""
    rm = RewardModel(str(named_bos_rm), CPU)
    assert rm.tokenizer.bos_token_id is not None and rm.prefix == [] and rm.tokenizer.chat_template == CONTENT_ONLY
    rows, responses, texts = conversations()
    ids = rm.encode(rows, responses, texts)
    assert ids == [rm.tokenizer(rm.render(r, s, t), add_special_tokens=False)["input_ids"]
                   for r, s, t in zip(rows, responses, texts)]
    assert all(rm.tokenizer.bos_token_id not in x for x in ids)


def test_a_chat_template_text_gets_no_eos_from_the_post_processor(bos_eos_rm):
    """The template places its own special tokens ([BOS] ... <|end|>): the post-processor's [EOS] is not
    added after it."""
    rm = RewardModel(str(bos_eos_rm), CPU)
    assert rm.suffix == [rm.tokenizer.eos_token_id]
    rows, responses, texts = conversations()
    ids = rm.encode(rows, responses, texts)
    assert ids == [rm.tokenizer(rm.render(r, s, t), add_special_tokens=False)["input_ids"]
                   for r, s, t in zip(rows, responses, texts)]
    assert all(x[0] == rm.tokenizer.bos_token_id and rm.tokenizer.eos_token_id not in x for x in ids)


def test_a_prefix_only_wrapper_that_is_not_a_bos_is_found():
    """A post-processor "[CLS] $A" with no bos_token: the prefix is [CLS], found at the last offset."""
    from tokenizers import processors

    from proxima.rlhf.rewards import wrapping_tokens

    tok = m28.chat_tokenizer()
    tok.bos_token = None
    cls = tok.convert_tokens_to_ids("<|user|>")
    tok._tokenizer.post_processor = processors.TemplateProcessing(single="<|user|> $A",
                                                                   special_tokens=[("<|user|>", cls)])
    assert tok("the")["input_ids"][0] == cls
    assert wrapping_tokens(tok) == ([cls], [])
