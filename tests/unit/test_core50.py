"""approx_kl never below 0 for tiny log ratios; compute_gae's one-line error for non-bool dones;
CleanRL's --save-model, --upload-model, --hf-entity and --gae (flags and dump keys) told what to do."""

from __future__ import annotations

import math

import pytest
import torch
import yaml

from proxima import ppo
from tests.cli_helpers import run_main


def _k3(x: float) -> float:
    """The k3 estimator's exact value for one log ratio, in float64."""
    return math.expm1(x) - x


@pytest.mark.parametrize("x", [3e-8, -3e-8, 1e-6, -1e-6, 1e-3, -1e-3])
def test_approx_kl_of_a_tiny_log_ratio_is_its_k3_value_never_negative(x):
    # float32 exp(3e-8) rounds to 1.0, so (ratio - 1) - logratio gave -3e-8; at 1e-3 it was 10% off
    old = torch.zeros(64)
    new = old + torch.tensor(x, dtype=torch.float32)
    adv, values = torch.linspace(-1, 1, 64), torch.zeros(64)
    out = ppo.ppo_loss(new, old, adv, values, values, values + 1, torch.ones(64),
                       clip_coef=0.2, vf_coef=0.5, ent_coef=0.0)
    got = out["approx_kl"].item()
    xf = float(torch.tensor(x, dtype=torch.float32))  # the log ratio float32 holds
    assert got >= 0.0
    # within float32's rounding of x itself (the old (ratio - 1) - logratio was off by ~ulp(1.0) = 1.2e-7)
    assert got == pytest.approx(_k3(xf), abs=2 * torch.finfo(torch.float32).eps * abs(xf))


def test_approx_kl_of_a_whole_update_at_a_tiny_learning_rate_is_never_negative():
    logratio = torch.linspace(-5e-8, 5e-8, 101)
    t = {"ratio": logratio.exp(), "logratio": logratio}
    terms = ppo.monitor_terms(t, 0.2, False)
    assert (terms["approx_kl"] >= 0).all()
    assert terms["old_approx_kl"].min().item() < 0  # k1 beside it may dip below 0, as the docs say


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("name", ["terminated", "done"])
def test_compute_gae_refuses_non_bool_dones_naming_the_argument_and_the_fix(name, dtype):
    x = torch.zeros(4, 2)
    flags = {"terminated": torch.zeros(4, 2, dtype=torch.bool), "done": torch.zeros(4, 2, dtype=torch.bool)}
    flags[name] = flags[name].to(dtype)
    with pytest.raises(ValueError) as e:
        ppo.compute_gae(x, x, x, flags["terminated"], flags["done"], 0.99, 0.95)
    dt = str(dtype).replace("torch.", "")
    assert str(e.value) == f"compute_gae: {name} must be bool (got {dt}): pass {name}.bool()"


def test_compute_gae_with_bool_dones_still_bootstraps_and_cuts():
    r = torch.ones(2, 1)
    v = torch.zeros(2, 1)
    nv = torch.full((2, 1), 10.0)
    term = torch.tensor([[False], [True]])
    adv, ret = ppo.compute_gae(r, v, nv, term, term, 0.5, 1.0)
    # step 1 terminated: no bootstrap; step 0: 1 + 0.5 * 10 bootstrapped, plus 0.5 * step 1's advantage
    assert adv[:, 0].tolist() == [6.5, 1.0]


@pytest.mark.parametrize("flags, said", [
    (["--save-model"], "--save-model; every run writes checkpoints into its run directory (a final one, and one each "
                       "--checkpoint-every iterations), save_model or not"),
    (["--upload-model", "--hf-entity", "me"], "--upload-model --hf-entity me; no Hugging Face Hub upload here: "
                                              "upload the run directory (its checkpoints) yourself"),
    (["--gae"], "--gae; GAE is always on (CleanRL's gae: false is --gae-lambda 1.0 here)"),
    (["--gae", "False"], "--gae False: GAE is always on: CleanRL's gae: false (its plain discounted returns) is "
                         "--gae-lambda 1.0 here (gae_lambda: 1.0 in a file); drop it"),
])
def test_cleanrls_model_and_gae_flags_are_told_what_to_do(flags, said, capsys):
    code, _, err = run_main(["train", "CartPole-v1", *flags, "--dry-run"], capsys)
    assert code == 2
    line = err.strip().splitlines()[-1]
    assert said in line
    assert "did you mean" not in line  # difflib sent --save-model to --compile-mode, --gae to --gae-lambda


@pytest.mark.parametrize("extra, said", [
    ({"save_model": False}, "every run writes checkpoints into its run directory (a final one, and one "
                            "each --checkpoint-every iterations), save_model or not"),
    ({"upload_model": False}, "no Hugging Face Hub upload here: upload the run directory (its "
                              "checkpoints) yourself"),
    ({"hf_entity": ""}, "no Hugging Face Hub upload here: upload the run directory (its checkpoints) "
                        "yourself"),
    ({"gae": True}, "GAE is always on (CleanRL's gae: false is --gae-lambda 1.0 here)"),
    ({"gae": False}, "GAE is always on: CleanRL's gae: false (its plain discounted returns) is --gae-lambda 1.0 "
                     "here (gae_lambda: 1.0 in a file)"),
])
def test_a_cleanrl_dumps_model_and_gae_keys_are_told_what_to_do(extra, said, tmp_path, capsys):
    path = tmp_path / "cleanrl.yaml"
    path.write_text(yaml.safe_dump({"env_id": "CartPole-v1", "seed": 1, **extra}))
    code, _, err = run_main(["train", "--config", str(path), "--dry-run"], capsys)
    assert code == 2
    assert err.strip().splitlines()[-1].endswith(f"unknown field '{next(iter(extra))}' ({said}; drop it)")
