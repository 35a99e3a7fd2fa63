"""Review 27 (RLHF maths): the adaptive-KL horizon bound, what --vf-coef does, where a reward model reads
its score (the last real token, its EOS included), its micro-batches, and the per-process token mean."""

from pathlib import Path

import pytest
import torch

from proxima.rlhf import dist as D
from proxima.rlhf import rewards as R
from proxima.rlhf import trainer as T
from proxima.rlhf.__main__ import main
from proxima.rlhf.config import FIELDS, ConfigError, validate
from proxima.rlhf.data import PromptRow
from proxima.rlhf.kl import KLController
from proxima.rlhf.trainer import RLHFTrainer
from rlhf_assets import save_reward_model, word_tokenizer

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rlhf.md"


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    """A reward model with the demo tokenizer, the policy's: pad [PAD] = 0, EOS [EOS]."""
    return save_reward_model(tmp_path_factory.mktemp("rm27") / "rm")


@pytest.fixture(scope="module")
def rm_eos_pad_dir(tmp_path_factory):
    """A reward model whose tokenizer has no pad token: RewardModel pads with its EOS."""
    return save_reward_model(tmp_path_factory.mktemp("rm27_nopad") / "rm", tokenizer=word_tokenizer(pad=False))


def logit_alone(rm, ids):
    """The reward model's head at the last of ``ids``, one unpadded sequence, no pooling involved."""
    with torch.no_grad():
        hidden = rm.model.transformer(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
        return float(rm.model.score(hidden)[0])


# ---------------------------------------------------------------------------------------------
# 1. adaptive KL: a horizon of 0.2 x the responses per update or less is refused
# ---------------------------------------------------------------------------------------------
def test_a_kl_horizon_that_could_flip_beta_is_one_line_exit_2_before_any_model_loads(tmp_path, capsys):
    """16 responses, horizon 3: beta x (1 - 0.2 x 16 / 3) < 0 after a step of low KL. The policy folder does
    not exist: the error names --kl-horizon, so it came before the policy was looked at."""
    run_dir = tmp_path / "run"
    code = main(["--policy", str(tmp_path / "no_such_model"), "--prompts", str(tmp_path / "p.txt"),
                 "--reward", "proxima.rlhf.demo:keyword_sentiment", "--run-dir", str(run_dir),
                 "--adaptive-kl", "--batch-size", "16", "--kl-horizon", "3"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err == ("proxima rlhf: error: --kl-horizon 3: with --adaptive-kl each step multiplies beta by as little as "
                   "1 - 0.2 x 16 responses per update (--batch-size 16 x 1 process) / 3, which is 0 or negative; use "
                   "--kl-horizon 4 or more (the smallest allowed for 16 responses per update)")
    assert not run_dir.exists()


def test_the_bound_is_exact_and_applies_only_under_adaptive_kl(tiny_cfg):
    with pytest.raises(ConfigError, match=r"--kl-horizon 2: .* use --kl-horizon 3 or more"):
        validate(tiny_cfg(adaptive_kl=True, batch_size=10, num_minibatches=2, kl_horizon=2))  # factor 1 - 1 = 0
    validate(tiny_cfg(adaptive_kl=True, batch_size=10, num_minibatches=2, kl_horizon=3))
    with pytest.raises(ConfigError, match=r"--kl-horizon 1: only --adaptive-kl reads it"):  # fixed beta: unused, refused
        validate(tiny_cfg(adaptive_kl=False, batch_size=10, num_minibatches=2, kl_horizon=1))
    c = KLController(0.05, adaptive=True, target=6.0, horizon=3)  # the smallest allowed keeps beta positive
    for _ in range(20):
        c.update(0.0, 10)
    assert c.value > 0


def test_the_trainer_counts_every_process_before_loading_a_model(tiny_cfg, tmp_path):
    """4 responses per process pass validate() at horizon 3; 4 processes make 16 per update, refused."""
    cfg = tiny_cfg(adaptive_kl=True, batch_size=4, num_minibatches=1, kl_horizon=3, policy=str(tmp_path / "missing"))
    validate(cfg)
    with pytest.raises(ConfigError) as e:
        RLHFTrainer(cfg, D.Dist(rank=0, world_size=4, local_rank=0))
    assert str(e.value).startswith("--kl-horizon 3: ")
    assert "16 responses per update (--batch-size 4 x 4 processes)" in str(e.value)
    assert "use --kl-horizon 4 or more" in str(e.value)


# ---------------------------------------------------------------------------------------------
# 2. --vf-coef: a scale of the value model's gradient before its own clip, never the policy's
# ---------------------------------------------------------------------------------------------
def test_vf_coef_help_says_what_it_does_and_names_value_lr():
    doc = FIELDS["vf_coef"].metadata["help"]
    assert "--value-lr" in doc and "gae" in doc and "clip" in doc and "policy" in doc
    text = DOCS.read_text()
    assert "`--value-lr` (default `--lr`) is the control of the value model's step size" in text
    assert "`--vf-coef` has no effect with grpo and rloo" in text


def test_vf_coef_changes_nothing_once_every_value_gradient_is_clipped(tiny_cfg):
    """What the help now says: with the clip always active, vf_coef 1 and 10 give the same value update, and
    the policy's update is bit-identical whatever the coefficient."""
    after = {}
    for vf in (1.0, 10.0):
        t = RLHFTrainer(tiny_cfg(vf_coef=vf, max_grad_norm=1e-3, update_epochs=1))
        t.update(t.compute_advantages(t.rollout()))
        after[vf] = ([p.detach().clone() for p in t.value_params], [p.detach().clone() for p in t.policy_params])
    for a, b in zip(after[1.0][0], after[10.0][0]):
        torch.testing.assert_close(a, b)
    assert all(torch.equal(a, b) for a, b in zip(after[1.0][1], after[10.0][1]))


# ---------------------------------------------------------------------------------------------
# 3. the score is read at the last real token, even when that token is the pad id
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("which, last", [("rm_dir", "[PAD]"), ("rm_eos_pad_dir", "[EOS]")])
def test_an_input_ending_in_the_pad_id_is_scored_at_that_token(which, last, request):
    rm = R.RewardModel(str(request.getfixturevalue(which)), torch.device("cpu"))
    assert rm.tokenizer.pad_token == last  # the demo's [PAD]; with no pad token, the EOS standing in
    texts = [f"the movie was good {last}", "the movie was good", f"the food was really good and the hotel {last}"]
    rows = [PromptRow("x")] * len(texts)
    scores = rm(R.RewardBatch(rows, [""] * len(texts), texts, step=1))
    ids = rm.encode(rows, [""] * len(texts), texts)
    assert ids[0][-1] == rm.tokenizer.pad_token_id == ids[2][-1]
    for i, x in enumerate(ids):
        assert scores[i].item() == pytest.approx(logit_alone(rm, x), abs=1e-5)
    assert abs(scores[0].item() - scores[1].item()) > 1e-3  # the [PAD] is read, not skipped


# ---------------------------------------------------------------------------------------------
# 4. a reward model of the policy's vocabulary reads the stop token the policy emitted
# ---------------------------------------------------------------------------------------------
def test_a_same_vocabulary_reward_model_reads_the_emitted_eos_and_a_cut_response_has_none(tiny_cfg, rm_dir, monkeypatch):
    t = RLHFTrainer(tiny_cfg(reward=str(rm_dir), batch_size=4, num_minibatches=1, max_new_tokens=6))
    tok = t.tokenizer
    eos, pad = tok.eos_token_id, tok.pad_token_id
    w = {s: tok.convert_tokens_to_ids(s) for s in ("the", "movie", "was", "good", "bland")}
    assert tok.unk_token_id not in w.values()
    fixed = torch.tensor([[w["good"], eos, pad, pad, pad, pad],  # ends with EOS
                          [w["the"], w["movie"], w["was"], w["good"], w["bland"], w["good"]],  # cut at 6 tokens
                          [w["the"], w["movie"], w["was"], w["good"], w["bland"], pad],  # cut; its last token is [PAD]
                          [eos, pad, pad, pad, pad, pad]])  # EOS at once
    monkeypatch.setattr(T, "generate", lambda model, query, *a, **k: fixed.to(query.device))
    rm, seen = t.reward.models[0], []
    encode = rm.encode
    monkeypatch.setattr(rm, "encode", lambda *a: seen.append(encode(*a)) or seen[-1])
    b = t.rollout()
    assert b["has_eos"].tolist() == [True, False, False, True]
    ids = seen[-1]
    assert [x[-1] for x in ids] == [eos, w["good"], pad, eos]
    assert ids[0][-2:] == [w["good"], eos] and eos not in ids[1] + ids[2]
    raw = b["scores"] + t.cfg.missing_eos_penalty * (~b["has_eos"]).float()
    for i, x in enumerate(ids):
        assert raw[i].item() == pytest.approx(logit_alone(rm, x), abs=1e-5)


def test_a_reward_model_of_another_vocabulary_still_reads_the_text_without_the_eos(rm_dir):
    rm = R.RewardModel(str(rm_dir), torch.device("cpu"))
    rm.read_with(word_tokenizer(reverse=True))  # as many tokens, other ids: another vocabulary
    rows = [PromptRow("x")]
    with_stop = R.RewardBatch(rows, ["good"], ["the movie was good"], 1, texts_with_stop=["the movie was good [EOS]"])
    without = R.RewardBatch(rows, ["good"], ["the movie was good"], 1)
    assert rm(with_stop).item() == rm(without).item()


# ---------------------------------------------------------------------------------------------
# 5. the reward model runs --micro-batch-size inputs per forward
# ---------------------------------------------------------------------------------------------
def test_the_reward_model_runs_in_micro_batches_with_the_same_scores(tiny_cfg, rm_dir):
    texts = ["the movie was good", "the food", "the food was really good and the hotel", "bland", "the movie [PAD]"]
    rows = [PromptRow("x")] * len(texts)
    whole = R.RewardModel(str(rm_dir), torch.device("cpu"))
    chunked = R.RewardModel(str(rm_dir), torch.device("cpu"), micro_batch_size=2)
    sizes = []
    chunked.model.register_forward_pre_hook(lambda m, a, kw: sizes.append(kw["input_ids"].shape[0]), with_kwargs=True)
    batch = R.RewardBatch(rows, [""] * len(texts), texts, step=1)
    torch.testing.assert_close(chunked(batch), whole(batch), rtol=1e-5, atol=1e-6)
    assert sizes == [2, 2, 1]

    t = RLHFTrainer(tiny_cfg(reward=str(rm_dir), batch_size=8, num_minibatches=2, micro_batch_size=2))
    sizes.clear()
    t.reward.models[0].model.register_forward_pre_hook(lambda m, a, kw: sizes.append(kw["input_ids"].shape[0]),
                                                       with_kwargs=True)
    t.rollout()
    assert sizes == [2, 2, 2, 2]


# ---------------------------------------------------------------------------------------------
# 6. under torchrun the token mean is per process
# ---------------------------------------------------------------------------------------------
def test_processes_are_averaged_equally_so_the_token_mean_is_per_process(tiny_cfg, mixed_length_prompts):
    """Two halves of one minibatch (two processes' parts): their plain average is what torchrun applies; it
    equals the full minibatch's gradient only when weighted by token counts, as the docs now say."""
    t = RLHFTrainer(tiny_cfg(prompts=str(mixed_length_prompts), num_minibatches=1, update_epochs=1))
    bias = torch.zeros(t.policy.lm_head.out_features)
    bias[t.tokenizer.eos_token_id] = 2.0
    t.policy.lm_head.register_forward_hook(lambda m, i, o: o + bias)
    b = t.compute_advantages(t.rollout())
    for m in t.trained_models():
        m.train()

    def grads(inds):
        t.accumulate_gradients(b, inds)
        return torch.cat([p.grad.flatten() for p in t.policy_params])

    full, g0, g1 = grads(torch.arange(8)), grads(torch.arange(4)), grads(torch.arange(4, 8))
    n0, n1 = float(b["mask"][:4].sum()), float(b["mask"][4:].sum())
    assert n0 != n1
    torch.testing.assert_close((n0 * g0 + n1 * g1) / (n0 + n1), full, rtol=1e-4, atol=1e-6)
    assert ((g0 + g1) / 2 - full).norm() > 1e-3 * full.norm()
    assert "Under torchrun this holds per process: each process takes the token mean over" in DOCS.read_text()


# ---------------------------------------------------------------------------------------------
# day-diff review: a resume of an RLHF run (its stop line above the CPUs; a horizon recorded earlier)
# ---------------------------------------------------------------------------------------------
def _rlhf_run_files(run_dir: Path, cfg, world: int) -> Path:
    """The files a resume reads first (meta.json, config.yaml) of an RLHF run of ``world`` processes."""
    import json

    import yaml

    run_dir.mkdir()
    (run_dir / "meta.json").write_text(json.dumps({"kind": "rlhf", "world_size": world,
                                                   "command": ["proxima", "rlhf", "--run-dir", str(run_dir)]}))
    (run_dir / "config.yaml").write_text(yaml.safe_dump({**cfg.to_dict(), "run_dir": str(run_dir)}))
    return run_dir


@pytest.fixture
def no_torchrun(monkeypatch):
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("in_rank", [False, True])
def test_an_rlhf_run_above_the_cpus_is_told_its_torchrun_command_as_resume_refuses(tiny_cfg, tmp_path, monkeypatch,
                                                                                    no_torchrun, in_rank):
    from proxima import signals
    from proxima.rlhf import loop
    from proxima.rlhf.api import resume_processes

    monkeypatch.chdir(tmp_path)
    _rlhf_run_files(tmp_path / "R", tiny_cfg(), 4)
    last = Path("R") / "checkpoints" / "step_000002.pt"
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    with pytest.raises(ConfigError, match="under the torchrun command that ran it"):
        resume_processes(Path("R"))  # `proxima resume R` refuses
    if in_rank:  # a rank of the job says it (its own count); else the count comes from meta.json
        monkeypatch.setenv("WORLD_SIZE", "4")
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert signals.resume_route(Path("R"), 4) == "torchrun"
    how = "under the same torchrun command (4 processes)"
    assert signals.checkpoint_line(last) == f"checkpoint: {last}; continue with: proxima resume R, {how}"
    assert loop.stop_line(last, False) == f"checkpoint: {last}; continue with: proxima resume R, {how}"
    assert loop.stop_line(last, True) == f"checkpoint: {last}; continue with: proxima resume --trust-run R, {how}"
    assert loop.resume_advice(Path("R")) == f"`proxima resume R` {how}"

    monkeypatch.setattr("os.cpu_count", lambda: 4)  # the CPUs for every process: `proxima resume` starts them
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(4)), raising=False)
    monkeypatch.setattr("proxima.cpuinfo.CGROUP_ROOT", "/nonexistent-cgroup")  # a CI box's CPU quota must not count
    assert signals.checkpoint_line(last) == f"checkpoint: {last}; continue with: proxima resume R"
    assert loop.stop_line(last, True) == (f"checkpoint: {last}; continue with: proxima resume --trust-run R "
                                          "(resume('R', trust_run=True) in Python)")
    assert loop.resume_advice(Path("R")) == "`proxima resume R`"


@pytest.mark.parametrize("world, batch, each", [(1, 16, "batch_size 16 x 1 process"), (2, 8, "batch_size 8 x 2 processes")])
def test_a_recorded_horizon_now_refused_names_config_yaml_and_the_way_to_continue(tiny_cfg, tmp_path, monkeypatch,
                                                                                 capsys, no_torchrun, world, batch, each):
    """A run an earlier version started with horizon 3 for 16 responses per update: still refused (beta could
    turn negative), in words a resume can act on, not a --kl-horizon flag `proxima resume` does not take."""
    from proxima import cli
    from proxima.rlhf.api import check_resume

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    run_dir = _rlhf_run_files(tmp_path / "R", tiny_cfg(adaptive_kl=True, batch_size=batch, num_minibatches=2,
                                                       kl_horizon=3), world)
    config = run_dir / "config.yaml"
    expected = (f"{config}: records kl_horizon 3 with adaptive_kl (allowed by earlier versions), with which each step "
                f"multiplies beta by as little as 1 - 0.2 x 16 responses per update ({each}) / 3, which is 0 or "
                "negative; set kl_horizon: 4 or more there (the smallest allowed for 16 responses per update) to "
                "continue, or start a new run")
    with pytest.raises(ConfigError) as e:
        check_resume(run_dir)  # the resume's first step, and the launcher's before it starts the run's processes
    assert str(e.value) == expected
    if world == 1:
        before = config.read_text()
        assert cli.main(["resume", str(run_dir)]) == 2
        out, err = capsys.readouterr()
        assert (out, err) == ("", f"proxima resume: error: {expected}\n")
        assert config.read_text() == before and sorted(p.name for p in run_dir.iterdir()) == ["config.yaml", "meta.json"]
    config.write_text(config.read_text().replace("kl_horizon: 3", "kl_horizon: 4"))  # the way out it names
    assert check_resume(run_dir).kl_horizon == 4


def test_rlhf_resume_commands_quote_the_run_path():
    # was: `proxima resume r b` (pasted, it resumed a run named r with a stray argument)
    from pathlib import Path

    from proxima.rlhf.loop import resume_advice, resume_command

    assert resume_command(Path("runs/r b")) == "proxima resume 'runs/r b'"
    assert resume_command(Path("runs/$(touch X)"), True) == "proxima resume --trust-run 'runs/$(touch X)'"
    assert resume_advice(Path("runs/r b")) == "`proxima resume 'runs/r b'`"
