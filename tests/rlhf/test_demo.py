"""A shortened `proxima rlhf --demo`: pretrain a tiny GPT-2, then PPO must raise the reward."""

import dataclasses
import json

from proxima.rlhf.demo import demo_config, keyword_sentiment, run_demo


def test_keyword_sentiment_counts_positive_and_negative_words():
    assert keyword_sentiment(["p"] * 4, ["great and fun .", "dull .", "good but bad", "the room"]) == [1.0, -1.0, 0.0, 0.0]


def test_short_demo_raises_the_reward_with_bounded_kl(tmp_path):
    cfg = dataclasses.replace(demo_config(), steps=20, run_dir=str(tmp_path / "demo"), print_every=0, sample_every=0)
    run_dir = run_demo(cfg, pretrain_steps=50)  # 50: reward 0.05 -> 0.68, kl 1.07 (100: 0.07 -> 0.70, kl 0.67)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["reward_last"] > summary["reward_first"] + 0.3, summary
    assert summary["reward_last"] > 0.5, summary
    assert 0.0 <= summary["kl_last"] < 5.0, summary
    assert (run_dir / "curve.png").stat().st_size > 0
    assert (run_dir / "demo" / "model" / "config.json").exists()


def test_demo_takes_any_reward_function(tmp_path, capsys):
    from proxima.rlhf.__main__ import main

    module = tmp_path / "my_reward.py"
    module.write_text("def short(prompts, responses):\n    return [-len(r.split()) for r in responses]\n")
    code = main(["--demo", "--reward", f"{module}:short", "--steps", "2", "--run-dir", str(tmp_path / "d"),
                 "--print-every", "0", "--demo-pretrain-steps", "5"])
    assert code == 0, capsys.readouterr().err
    config = (tmp_path / "d" / "config.yaml").read_text()
    assert "my_reward.py:short" in config


def test_demo_input_refused_after_pretraining_leaves_no_directory(tmp_path, capsys, monkeypatch):
    from proxima.rlhf.__main__ import main

    # prompts + 100 new tokens exceed the tiny model's positions: refused by the trainer, after the assets are built
    code = main(["--demo", "--max-new-tokens", "100", "--demo-pretrain-steps", "1", "--run-dir", str(tmp_path / "d")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "max-new-tokens" in err.replace("_", "-"), err
    assert not (tmp_path / "d").exists()
    monkeypatch.chdir(tmp_path)  # the default run directory too
    assert main(["--demo", "--max-new-tokens", "100", "--demo-pretrain-steps", "1"]) == 2
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").iterdir()) == []
    (tmp_path / "mine").mkdir()  # a directory the user made is kept, empty again
    assert main(["--demo", "--max-new-tokens", "100", "--demo-pretrain-steps", "1", "--run-dir", str(tmp_path / "mine")]) == 2
    assert (tmp_path / "mine").is_dir() and list((tmp_path / "mine").iterdir()) == []


def test_demo_refuses_the_model_and_prompts_it_would_replace(tmp_path, capsys):
    from proxima.rlhf.__main__ import main

    for flag in ("--policy", "--prompts", "--tokenizer"):
        code = main(["--demo", flag, str(tmp_path / "x"), "--run-dir", str(tmp_path / "d")])
        err = capsys.readouterr().err.strip()
        assert code == 2 and f"{flag}: --demo builds its own model and prompts" in err, err
    assert not (tmp_path / "d").exists()


def test_demo_refuses_a_missing_cuda_before_pretraining(tmp_path, capsys, monkeypatch):
    import pytest
    import torch

    from proxima.rlhf import demo
    from proxima.rlhf.__main__ import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # also on a machine with a GPU
    monkeypatch.setattr(demo, "build_assets", lambda *a, **k: pytest.fail("pretrained before checking --device"))
    code = main(["--demo", "--device", "cuda", "--run-dir", str(tmp_path / "d")])
    err = capsys.readouterr().err
    assert (code, err) == (2, "proxima rlhf: error: --device 'cuda': CUDA is not usable here (run `proxima doctor`); "
                              "use --device cpu\n")
    assert not (tmp_path / "d").exists()


def test_demo_pretrain_steps_without_demo_is_refused_not_ignored(tmp_path, capsys, monkeypatch):
    # it was silently ignored: a run on the user's own model trained as if it had not been given
    from proxima.rlhf.__main__ import main

    monkeypatch.chdir(tmp_path)
    assert main(["--policy", str(tmp_path / "nowhere"), "--prompts", str(tmp_path / "p.txt"), "--reward",
                 "proxima.rlhf.demo:keyword_sentiment", "--demo-pretrain-steps", "5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "proxima rlhf: error: --demo-pretrain-steps: applies to --demo only (its tiny model's pretraining); drop it"
    assert list(tmp_path.iterdir()) == []
