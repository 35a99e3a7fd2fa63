"""Review 32, mutation survivors in proxima/rlhf (models, rundir, data, fsdp, dist): each test pins what a user
sees, a value, an error line or an exit code, that one of the mutants changed without any test noticing."""

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from proxima.rlhf import dist as D  # noqa: E402
from proxima.rlhf import rundir  # noqa: E402
from proxima.rlhf.config import ConfigError, RLHFConfig  # noqa: E402
from proxima.rlhf.dist import Dist  # noqa: E402
from proxima.rlhf.models import quiet_transformers  # noqa: E402

quiet_transformers()


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    from proxima.rlhf.demo import prompts_list

    path = tmp_path_factory.mktemp("review32_prompts") / "prompts.txt"
    path.write_text("\n".join(prompts_list()) + "\n")
    return path


def _edit_config(folder, **fields) -> None:
    config = json.loads((folder / "config.json").read_text())
    for name, value in fields.items():
        if value is None:
            config.pop(name, None)
        else:
            config[name] = value
    (folder / "config.json").write_text(json.dumps(config))


# --- models.py ----------------------------------------------------------------------------------------------------
def test_a_checkpoint_with_dropout_trains_with_every_dropout_off_and_a_first_ratio_of_one(tmp_path, prompts):
    """A real GPT-2 stores resid/attn/embd_pdrop 0.1; the demo's model stores 0 and hid a dropout left on."""
    from rlhf_assets import save_gpt2

    from proxima.rlhf.trainer import RLHFTrainer

    source = save_gpt2(tmp_path / "model")
    _edit_config(source, resid_pdrop=0.1, attn_pdrop=0.1, embd_pdrop=0.1)
    t = RLHFTrainer(RLHFConfig(policy=str(source), prompts=str(prompts), reward="proxima.rlhf.demo:keyword_sentiment",
                               batch_size=8, num_minibatches=2, update_epochs=1, max_new_tokens=4, temperature=0.7,
                               print_every=0, plot=False, threads=1))
    drops = [m for model in (t.policy, t.value) for m in model.modules() if isinstance(m, nn.Dropout)]
    assert drops and [m.p for m in drops] == [0.0] * len(drops)
    b = t.compute_advantages(t.rollout())
    for m in t.trained_models():
        m.train()
    out = t.minibatch_loss(b, torch.arange(4))
    # dropout in the update's forward but not the rollout's: a ratio off 1 before any step was taken
    assert out["ratio"].item() == pytest.approx(1.0, abs=1e-5)
    assert abs(out["approx_kl"].item()) < 1e-6


def test_a_transformers_4_checkpoints_torch_dtype_is_the_released_dtype(tmp_path):
    from rlhf_assets import save_gpt2

    from proxima.rlhf.models import load_policy, stored_dtype

    assert stored_dtype({"torch_dtype": "bfloat16"}) == torch.bfloat16
    assert stored_dtype({"torch_dtype": "torch.float16"}) == torch.float16
    assert stored_dtype({"dtype": "float32", "torch_dtype": "bfloat16"}) == torch.float32  # 5.x's name wins
    source = save_gpt2(tmp_path / "model", dtype=torch.bfloat16)
    _edit_config(source, dtype=None, torch_dtype="bfloat16")  # as transformers 4.x wrote config.json
    model, _ = load_policy(str(source), seed=0)
    assert next(model.parameters()).dtype == torch.float32  # trained in float32 ...
    assert rundir.release_dtype(model, "auto") == torch.bfloat16  # ... released as stored


def test_a_run_of_4_processes_on_one_host_counts_each_processs_copies(monkeypatch):
    from proxima import sizing
    from proxima.rlhf.models import check_model_fits

    one_process = 3 * 1_000_000 * 4  # 3 float32 copies of 1M parameters
    monkeypatch.setattr(sizing, "free_memory", lambda device: 2 * one_process)
    check_model_fits("p", 1_000_000, torch.float32, 3, "policy, reference, value model", torch.device("cpu"))
    with pytest.raises(ConfigError) as e:
        check_model_fits("p", 1_000_000, torch.float32, 3, "policy, reference, value model", torch.device("cpu"),
                         processes=4)
    assert str(e.value).startswith("--policy 'p': 1,000,000 parameters, ")
    assert "the run holds 3 copies in each of 4 processes (policy, reference, value model), " in str(e.value)


def test_a_reward_models_score_bias_starts_the_value_head(tmp_path, monkeypatch):
    from transformers import GPT2Config, GPT2ForSequenceClassification

    from proxima.rlhf import models
    from proxima.rlhf.demo import build_model, build_tokenizer

    tok = build_tokenizer()
    policy = build_model(tok, n_layer=1, n_embd=32, n_head=2, n_positions=48)
    torch.manual_seed(3)
    rm = GPT2ForSequenceClassification(GPT2Config(vocab_size=len(tok), n_positions=48, n_embd=32, n_layer=1, n_head=2,
                                                  num_labels=1, pad_token_id=tok.pad_token_id))
    rm.score = nn.Linear(32, 1, bias=True)  # as a reward model trained with a biased head stores it
    with torch.no_grad():
        rm.score.bias.fill_(0.75)
    monkeypatch.setattr(models, "load_pretrained", lambda *a, **k: rm)
    value = models.make_value_model("reward", policy, str(tmp_path / "rm"), seed=0)
    assert value.head.bias.tolist() == [0.75]
    torch.testing.assert_close(value.head.weight, rm.score.weight)
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad():  # the value model's first estimate is the reward model's score, bias included
        torch.testing.assert_close(value(ids, torch.ones_like(ids), torch.arange(3)[None])[0, -1],
                                   rm(ids).logits[0, 0])


# --- rundir.py: checkpoints ---------------------------------------------------------------------------------------
def _checkpoint(tmp_path, change=None):
    """A sound one-process checkpoint without a value model, written as save_checkpoint writes it, with ``change``
    applied to its state first; its file."""
    torch.manual_seed(0)
    weight = nn.Parameter(torch.randn(3, 2))
    opt = torch.optim.Adam([weight], lr=1e-3)
    weight.grad = torch.ones_like(weight)
    opt.step()
    order = torch.randperm(6)
    state = {"format": rundir.CHECKPOINT_FORMAT, "step": 1, "seconds": 1.5, "fsdp": False,
             "ranks": [{"rng": torch.get_rng_state(), "cuda_rng": None, "sampler": {"order": order, "pos": 2}}],
             "policy": {"w": weight.detach().clone()}, "opt_policy": opt.state_dict(), "value": {}, "opt_value": {},
             "kl": {"value": 0.05}}
    if change is not None:
        change(state)
    (tmp_path / "run").mkdir(exist_ok=True)
    return rundir.save_checkpoint(tmp_path / "run", state["step"], state, keep=5)


def test_a_checkpoint_at_the_end_of_a_prompt_pass_is_sound(tmp_path):
    file = _checkpoint(tmp_path, lambda s: s["ranks"][0]["sampler"].__setitem__("pos", 6))
    state = rundir.load_sound_checkpoint(file)
    assert state["ranks"][0]["sampler"]["pos"] == 6
    assert rundir.load_newest_usable(tmp_path / "run")[0] == file  # not set aside as damaged


def _group(key, value):
    return lambda s: s["opt_policy"]["param_groups"][0].__setitem__(key, value)


DAMAGED = {
    "negative kl": (lambda s: s["kl"].__setitem__("value", -1.0), "kl.value is -1.0, not a finite number >= 0"),
    "negative lr": (_group("lr", -1e-3), "opt_policy.param_groups[0].lr is -0.001, not a learning rate >= 0"),
    "beta of 1": (_group("betas", (0.9, 1.0)),
                  "opt_policy.param_groups[0].betas is a tuple of 2, not two numbers in [0, 1)"),
    "eps 0": (_group("eps", 0.0), "opt_policy.param_groups[0].eps is 0.0, not a number > 0"),
    "negative prompt index": (lambda s: s["ranks"][0]["sampler"]["order"].__setitem__(0, -1),
                              "ranks[0].sampler.order is a int64 tensor of shape (6,), not a 1-D tensor of prompt "
                              "indices >= 0"),
}


@pytest.mark.parametrize("damage", list(DAMAGED))
def test_a_damaged_field_is_one_line_naming_the_file_and_the_field(tmp_path, damage):
    change, message = DAMAGED[damage]
    file = _checkpoint(tmp_path, change)
    with pytest.raises(ConfigError) as e:
        rundir.load_sound_checkpoint(file)
    assert str(e.value) == f"{file}: {message}; the checkpoint is damaged or was edited"


# --- rundir.py: summary, new run folder ---------------------------------------------------------------------------
def test_the_summary_of_15_steps_averages_the_first_and_last_2(tmp_path):
    lines = ["step,objective/scores,objective/kl"] + [f"{i},{i}.0,{i / 10}" for i in range(1, 16)]
    (tmp_path / "metrics.csv").write_text("\n".join(lines) + "\n")
    summary = rundir.write_summary(tmp_path, 3.0, {})
    assert summary["steps"] == 15
    assert (summary["reward_first"], summary["reward_last"]) == (1.5, 14.5)  # ceil(10% of 15) = 2 steps each
    assert summary["kl_first"] == pytest.approx(0.15) and summary["kl_last"] == pytest.approx(1.45)
    assert json.loads((tmp_path / "summary.json").read_text())["reward_first"] == 1.5


def test_a_reward_file_inside_the_run_folders_policy_is_named_by_its_flag(tmp_path, prompts, capsys):
    from rlhf_assets import save_gpt2

    from tests.cli_helpers import error_line, run_main

    model = save_gpt2(tmp_path / "model")
    proj = tmp_path / "proj"
    (proj / "policy").mkdir(parents=True)
    (proj / "policy" / "r.py").write_text("def fn(prompts, responses, **kw):\n    return [0.0] * len(prompts)\n")
    spec = f"{proj / 'policy' / 'r.py'}:fn"
    code, _, err = run_main(["rlhf", "--policy", str(model), "--prompts", str(prompts), "--reward", spec, "--steps", "1",
                             "--batch-size", "8", "--max-new-tokens", "4", "--print-every", "0", "--no-plot",
                             "--run-dir", str(proj)], capsys)
    assert error_line(code, err) == (f"proxima rlhf: error: --reward {spec}: lies in policy of --run-dir {proj}, which a "
                                     "new run writes (and would replace); choose another --run-dir, or move it out of "
                                     "there")
    assert sorted(p.name for p in proj.rglob("*")) == ["policy", "r.py"]


# --- data.py ------------------------------------------------------------------------------------------------------
def test_the_ranks_prompt_shares_are_disjoint_and_cover_every_prompt():
    from proxima.rlhf.data import PromptSampler

    shares = [PromptSampler(10, rank, 3).next(len(range(rank, 10, 3))) for rank in range(3)]
    assert [sorted(s) for s in shares] == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]


def test_a_changed_answer_column_changes_the_prompts_hash(tmp_path):
    from proxima.rlhf.data import load_prompts, prompts_sha256

    (tmp_path / "a.jsonl").write_text('{"prompt": "2 + 2 =", "answer": "4"}\n')
    (tmp_path / "b.jsonl").write_text('{"prompt": "2 + 2 =", "answer": "5"}\n')
    (tmp_path / "c.jsonl").write_text('{"answer": "4",   "prompt": "2 + 2 ="}\r\n')
    a, b, c = (prompts_sha256(load_prompts(str(tmp_path / n))) for n in ("a.jsonl", "b.jsonl", "c.jsonl"))
    assert a != b  # the resume's check that the file changed sees a changed answer
    assert a == c  # and nothing the run cannot see


def test_a_prompt_of_exactly_max_prompt_length_tokens_is_kept_whole():
    from proxima.rlhf.data import PromptRow, encode_prompts
    from proxima.rlhf.demo import build_tokenizer

    tok = build_tokenizer()
    row = PromptRow("the food was really good", line=1, file="p.txt")
    ids = encode_prompts(tok, [row], 100, truncate=False)[0]
    assert len(ids) >= 3
    assert encode_prompts(tok, [row], len(ids), truncate=False) == [ids]
    with pytest.raises(ConfigError, match=rf"^--prompts p.txt:1: {len(ids)} tokens, more than --max-prompt-length "
                                          rf"{len(ids) - 1}; "):
        encode_prompts(tok, [row], len(ids) - 1, truncate=False)


# --- fsdp.py ------------------------------------------------------------------------------------------------------
def test_placing_the_held_weights_restores_buffers_as_llamas_rotary_frequencies(tmp_path):
    from rlhf_assets import save_llama
    from transformers import AutoModelForCausalLM

    from proxima.rlhf import fsdp

    model = AutoModelForCausalLM.from_pretrained(save_llama(tmp_path / "llama")).eval()
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    assert any("inv_freq" in n for n in buffers)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        before = model(ids).logits
    held = fsdp.take_weights(model)
    assert {p.device.type for p in model.parameters()} == {"meta"}
    fsdp.place_shards(model, held, torch.device("cpu"))  # one process: nothing sharded, the whole model placed
    for name, b in model.named_buffers():
        torch.testing.assert_close(b, buffers[name], rtol=0, atol=0, msg=name)
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, before, rtol=0, atol=0)


def test_fsdp_refuses_a_model_that_names_no_transformer_block():
    from proxima.rlhf import fsdp

    class Bare(nn.Module):
        _no_split_modules = ["NoSuchBlock"]

        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(2, 2)

    with pytest.raises(ConfigError) as e:
        fsdp.check_blocks([nn.Linear(2, 2), Bare()])
    assert str(e.value) == "--fsdp: Linear names no transformer block class (_no_split_modules)"
    with pytest.raises(ConfigError, match=r"^--fsdp: Bare names no transformer block class"):
        fsdp.check_blocks([Bare()])


# --- dist.py ------------------------------------------------------------------------------------------------------
def _store(keys: dict):
    """test_review30_rlhfdist's fake torchrun store, holding ``keys`` already (rank 0's error)."""
    from tests.unit.test_review30_rlhfdist import _Store

    store = _Store()
    store.keys.update(keys)
    return store


def test_a_rank_with_rank_0s_own_error_ends_quietly_with_exit_2(monkeypatch):
    from proxima import distributed

    monkeypatch.setattr(distributed, "_ENDS_WITH_COMMAND", True)
    monkeypatch.setattr(D.signal, "signal", lambda *a: None)  # this test process keeps its SIGTERM
    monkeypatch.setattr(D, "SAME_ERROR_WAIT", 0.3)
    monkeypatch.setattr(D, "_ENDED", False)
    monkeypatch.setattr(D, "_JOINED", 1)
    failed = f"{D._FAILED}/1"
    monkeypatch.setattr(D, "_STORE", _store({f"{failed}/0": b"ValueError: bad input"}))
    out = D.end_after_failure(Dist(1, 2, 1), ValueError("bad input"))
    assert isinstance(out, SystemExit) and out.code == 2  # the CLI's exit code for bad input, rank 0 says the line
    monkeypatch.setattr(D, "_STORE", _store({f"{failed}/0": b"ValueError: another"}))
    out = D.end_after_failure(Dist(1, 2, 1), ValueError("bad input"))
    assert isinstance(out, ValueError) and str(out) == "bad input"  # its own error: its own line
