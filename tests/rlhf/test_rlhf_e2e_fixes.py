"""Findings of an end-to-end review of RLHF: a reward fixed on disk is imported again in the same process,
advice to resume names --trust-run when the run's reward is code, a file.py reward imports modules beside
it, a lone \\r stays inside a prompt, the value model returns no view, and the reference scores the same
weights exactly as the policy at step 0."""

from __future__ import annotations

import os
import signal
import sys

import pytest
import torch

from proxima.rlhf import loop, resume, train_rlhf
from proxima.rlhf.config import ConfigError
from proxima.rlhf.data import load_prompts
from proxima.rlhf.rewards import RewardBatch, RewardError, load_rewards
from proxima.signals import TrainingInterrupted
from tests.cli_helpers import imports_taken_back


def _batch(responses: list) -> RewardBatch:
    from proxima.rlhf.data import PromptRow

    return RewardBatch([PromptRow("p", line=i + 1) for i in range(len(responses))], responses, [""] * len(responses), 1)


@pytest.fixture
def clean_imports():
    """sys.path and sys.modules as they were: the modules these tests write are taken out again."""
    yield from imports_taken_back("e2efix")


# --- 1. a module:function reward fixed on disk runs its new code in the same process ---------------------
def test_a_reward_module_edited_in_place_is_executed_again(tmp_path, clean_imports):
    module = tmp_path / "judge_e2efix.py"
    module.write_text("def score(prompts, responses):\n    return [0.0] * len(responses)\n")
    spec = ["judge_e2efix:score"]
    assert load_rewards(spec, [], torch.device("cpu"), import_path=[str(tmp_path)])(_batch(["a"]))[0].tolist() == [0.0]
    # the same size, saved within the same second: a __pycache__ entry would still pass for the old source
    module.write_text("def score(prompts, responses):\n    return [1.0] * len(responses)\n")
    assert load_rewards(spec, [], torch.device("cpu"), import_path=[str(tmp_path)])(_batch(["a"]))[0].tolist() == [1.0]
    held = sys.modules["judge_e2efix"]
    # new code that fails: one line, and the module keeps what it had, never half of each
    module.write_text("def other(prompts, responses):\n    return []\n\nraise RuntimeError('half done')\n")
    with pytest.raises(ConfigError, match=r"cannot import judge_e2efix: RuntimeError: half done"):
        load_rewards(spec, [], torch.device("cpu"), import_path=[str(tmp_path)])
    assert sys.modules["judge_e2efix"] is held and not hasattr(held, "other") and held.score([], ["x"]) == [1.0]
    # a function deleted from the file is gone, not left over from the earlier import
    module.write_text("def renamed(prompts, responses):\n    return [2.0] * len(responses)\n")
    with pytest.raises(ConfigError, match="judge_e2efix has no function score"):
        load_rewards(spec, [], torch.device("cpu"), import_path=[str(tmp_path)])


def test_a_reward_package_loaded_twice_keeps_its_links_to_its_submodules(tmp_path, clean_imports):
    """Two rewards of one package (or a resume in the same process) run it again: its code that reaches a
    submodule through the package (pkg.helpers.f) still finds it."""
    pkg = tmp_path / "pkg_e2efix"
    pkg.mkdir()
    (pkg / "helpers.py").write_text("def n_words(text):\n    return len(text.split())\n")
    (pkg / "__init__.py").write_text(
        "import pkg_e2efix.helpers\n\n"
        "def length(prompts, responses):\n    return [float(pkg_e2efix.helpers.n_words(r)) for r in responses]\n\n"
        "def brevity(prompts, responses):\n    return [-float(len(r)) for r in responses]\n")
    reward = load_rewards(["pkg_e2efix:length", "pkg_e2efix:brevity"], [1.0, 0.0], torch.device("cpu"),
                          import_path=[str(tmp_path)])
    assert reward(_batch(["two words"]))[0].tolist() == [2.0]


def test_a_first_import_that_fails_leaves_nothing_in_sys_modules(tmp_path, clean_imports):
    (tmp_path / "broken_e2efix.py").write_text("raise ValueError('not yet')\n")
    with pytest.raises(ConfigError, match="cannot import broken_e2efix: ValueError: not yet"):
        load_rewards(["broken_e2efix:f"], [], torch.device("cpu"), import_path=[str(tmp_path)])
    assert "broken_e2efix" not in sys.modules


def test_a_reward_of_an_installed_library_is_not_run_again(clean_imports):
    import textwrap

    textwrap.e2efix_marker = True  # gone if the module were executed again
    try:
        # indent(text, prefix) takes two positional arguments, as a reward is called (dedent(text) is refused)
        load_rewards(["textwrap:indent"], [], torch.device("cpu"), import_path=["."])
        assert sys.modules["textwrap"] is textwrap and textwrap.e2efix_marker
    finally:
        del textwrap.e2efix_marker


FLAKY = """
calls = 0
def score(prompts, responses):
    global calls
    calls += 1
    return ["oops"] * len(responses) if calls >= 3 else [0.5] * len(responses)
"""


def test_fix_the_reward_and_resume_in_the_same_process(tiny_cfg, tmp_path, clean_imports, capsys):
    """The notebook of the review: the reward fails at step 2; the message says how to resume (with
    trust_run=True); the fixed file is what the resume runs, not the copy this process imported."""
    (tmp_path / "nb_e2efix.py").write_text(FLAKY)
    run = tmp_path / "run"
    cfg = tiny_cfg(reward="nb_e2efix:score", reward_import_path=[str(tmp_path)], steps=3, checkpoint_every=0,
                   missing_eos_penalty=0.0, run_dir=str(run))
    with pytest.raises(RewardError) as info:  # call 1 is the trial call, call 3 is step 2
        train_rlhf(cfg)
    message = str(info.value)
    assert "at step 2" in message and (f"fix the reward and continue with `proxima resume --trust-run {run}` "
                                       f"(`resume({str(run)!r}, trust_run=True)` in Python)") in message, message
    (tmp_path / "nb_e2efix.py").write_text("def score(prompts, responses):\n    return [0.25] * len(responses)\n")
    capsys.readouterr()
    assert resume(run, trust_run=True) == 0, capsys.readouterr().err
    from proxima.rlhf.rundir import read_metrics

    assert read_metrics(run)["objective/scores"][1:] == [0.25, 0.25]


# --- 2. the stop line of a run whose reward is code names --trust-run -------------------------------------
def test_a_stopped_run_whose_reward_is_code_says_to_resume_with_trust_run(tiny_cfg, tmp_path, clean_imports,
                                                                          monkeypatch):
    (tmp_path / "stop_e2efix.py").write_text("def score(prompts, responses):\n    return [0.0] * len(responses)\n")
    real_save = loop.save_checkpoint

    def save(t, run_dir):
        real_save(t, run_dir)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(loop, "save_checkpoint", save)
    run = tmp_path / "run"
    with pytest.raises(TrainingInterrupted) as info:
        train_rlhf(tiny_cfg(reward="stop_e2efix:score", reward_import_path=[str(tmp_path)], steps=2, checkpoint_every=1,
                            run_dir=str(run)))
    checkpoint = run / "checkpoints" / "step_000001.pt"
    assert str(info.value) == (f"stopped by SIGINT; checkpoint: {checkpoint}; continue with: proxima resume --trust-run "
                               f"{run} (resume({str(run)!r}, trust_run=True) in Python)")


def test_the_advice_names_trust_run_only_for_a_reward_that_is_code(tiny_cfg, tmp_path):
    assert not loop.needs_trust(tiny_cfg())  # Proxima's own reward: resumes without it
    assert loop.needs_trust(tiny_cfg(reward=["proxima.rlhf.demo:keyword_sentiment", f"{tmp_path / 'r.py'}:f"]))
    assert loop.resume_advice(tmp_path) == f"`proxima resume {tmp_path}`"
    assert loop.stop_line(tmp_path / "checkpoints" / "step_000001.pt", False).endswith(f"continue with: proxima resume {tmp_path}")


# --- 3. a file.py reward imports modules beside it and from --reward-import-path ---------------------------
def test_a_reward_file_imports_modules_beside_it_and_from_the_import_path(tmp_path, clean_imports, monkeypatch):
    rw, extra = tmp_path / "rw", tmp_path / "extra"
    rw.mkdir()
    extra.mkdir()
    (rw / "helpers_e2efix.py").write_text("def n_words(s):\n    return len(s.split())\n")
    (rw / "lazy_e2efix.py").write_text("SCALE = 10\n")
    (extra / "extra_e2efix.py").write_text("OFFSET = 1\n")
    (rw / "score.py").write_text(
        "from helpers_e2efix import n_words\n"
        "import extra_e2efix\n"
        "def fn(prompts, responses):\n"
        "    import lazy_e2efix  # at call time: the folder is searched then too\n"
        "    return [-n_words(r) / lazy_e2efix.SCALE + extra_e2efix.OFFSET for r in responses]\n")
    monkeypatch.chdir(tmp_path)  # not the file's folder
    before = sys.path[:]
    rewards = load_rewards([f"{rw / 'score.py'}:fn"], [], torch.device("cpu"), import_path=[str(extra)])
    assert sys.path == before
    total, _ = rewards(_batch(["one two three", "x"]))
    assert total.tolist() == pytest.approx([0.7, 0.9]) and sys.path == before


# --- 5. a lone \r stays inside a prompt --------------------------------------------------------------------
def test_a_lone_carriage_return_stays_inside_its_prompt(tmp_path):
    (tmp_path / "p.txt").write_bytes(b"first\rsecond\nthird\n")
    rows = load_prompts(str(tmp_path / "p.txt"))
    assert [(r.prompt, r.line) for r in rows] == [("first\rsecond", 1), ("third", 2)]
    (tmp_path / "crlf.txt").write_bytes(b"first\r\nsecond\r\n")
    assert [(r.prompt, r.line) for r in load_prompts(str(tmp_path / "crlf.txt"))] == [("first", 1), ("second", 2)]


def test_a_jsonl_error_names_the_line_counted_by_newlines(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"prompt":\r"a"}\r\n{"prompt": "c",}\n')  # \r is JSON whitespace: row 1 is whole
    with pytest.raises(ConfigError, match=rf"^--prompts {path}:2: not JSON"):
        load_prompts(str(path))


# --- 6. the value model returns a tensor of its own (FSDP2 warns at every forward of a view) ----------------
def test_the_value_model_returns_no_view(assets):
    from proxima.rlhf.models import load_policy, make_value_model

    policy, _ = load_policy(str(assets / "model"), seed=0)
    value = make_value_model("policy", policy, None, seed=0)
    ids = torch.tensor([[3, 4, 5, 6]])
    out = value(ids, torch.ones_like(ids), torch.arange(4)[None])
    assert out.shape == (1, 4) and out.dtype == torch.float32 and out.requires_grad and out._base is None


# --- 7. the reference scores the same weights exactly as the policy --------------------------------------
def test_the_reference_scores_the_initial_policy_exactly_at_step_0(assets, tiny_cfg):
    from proxima.rlhf.models import response_logits
    from proxima.rlhf.trainer import RLHFTrainer

    t = RLHFTrainer(tiny_cfg(batch_size=2, num_minibatches=1, max_new_tokens=2, temperature=0.7))
    b = t.rollout()
    assert torch.equal(b["logprobs"], b["ref_logprobs"]) and not b["kl"].any()
    with torch.no_grad():
        args = (b["query_responses"], b["attention_mask"], b["position_ids"], b["responses"].shape[1], 0.7)
        assert torch.equal(response_logits(t.policy, *args), response_logits(t.ref, *args))
    t.train_step()  # the reference is never trained
    assert not any(p.grad is not None for p in t.ref.parameters())
