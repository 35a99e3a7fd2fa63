"""A whole-number float for an integer field of a PPOConfig built in Python (``num_envs=4.0``, as a
sweep computing ``2 ** k / 2`` gives): validate stores the int it stands for, so the run trains as
with ``4`` and config.yaml records ``4``; a non-whole float is still refused naming the field."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from proxima.config import FIELDS, ConfigError, PPOConfig, validate

#: every integer field (bools are ints to Python, not to the config)
INT_FIELDS = [name for name, f in FIELDS.items()
              if f.default is not dataclasses.MISSING and isinstance(f.default, int) and not isinstance(f.default, bool)]


@pytest.mark.parametrize("name", INT_FIELDS)
def test_a_whole_float_becomes_the_int_and_a_fraction_is_refused(name):
    default = FIELDS[name].default
    cfg = PPOConfig(**{name: float(default)})
    validate(cfg)
    assert getattr(cfg, name) == default and type(getattr(cfg, name)) is int
    cfg = PPOConfig(**{name: default + 0.5})
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    assert str(info.value) == f"PPOConfig.{name} = {default + 0.5!r}: expected an integer"


def test_whole_float_hidden_sizes_become_ints_and_a_fraction_is_refused():
    cfg = PPOConfig(hidden_sizes=[64.0, 32.0])
    validate(cfg)
    assert cfg.hidden_sizes == [64, 32] and [type(h) for h in cfg.hidden_sizes] == [int, int]
    with pytest.raises(ConfigError) as info:
        validate(PPOConfig(hidden_sizes=[64.0, 32.5]))
    assert str(info.value) == "PPOConfig.hidden_sizes = [64.0, 32.5]: expected a list of ints, e.g. [64, 64]"


def test_a_python_run_with_whole_floats_trains_and_records_ints(tmp_path):
    import proxima

    # INT_FIELDS comes out of the defaults; these must stay in it for the parametrized test to cover them
    assert {"num_envs", "num_steps", "total_timesteps", "num_minibatches", "update_epochs", "seed"} <= set(INT_FIELDS)
    cfg = PPOConfig(env_id="CartPole-v1", num_envs=4.0, num_steps=16.0, total_timesteps=128.0, num_minibatches=2.0,
                    update_epochs=1.0, hidden_sizes=[8.0, 8.0], seed=3.0, eval_episodes=0.0, threads=1.0, progress=False)
    run_dir, _ = proxima.train(cfg, run_dir=tmp_path / "run", quiet=True)
    text = (run_dir / "config.yaml").read_text()
    recorded = yaml.safe_load(text)
    for name in ("num_envs", "num_steps", "total_timesteps", "num_minibatches", "update_epochs", "seed", "eval_episodes", "threads"):
        assert type(recorded[name]) is int, (name, recorded[name])
    assert recorded["hidden_sizes"] == [8, 8] and all(type(h) is int for h in recorded["hidden_sizes"])
    assert (recorded["num_envs"], recorded["num_steps"], recorded["total_timesteps"], recorded["seed"]) == (4, 16, 128, 3)


def test_rlhf_config_from_python_converts_whole_floats_and_names_a_wrong_type():
    """RLHFConfig built in Python skips from_dict's conversions: validate does them, so batch_size=4.0
    is 4 (config.yaml records 4) and steps='abc' is one ConfigError naming the field, not a TypeError."""
    from proxima.rlhf.config import RLHFConfig
    from proxima.rlhf.config import validate as validate_rlhf

    base = dict(policy=Path("/models/policy"), reward="proxima.rlhf.demo:keyword_sentiment", prompts="p.txt")
    cfg = RLHFConfig(batch_size=4.0, seed=1.0, steps=2.0, **base)
    validate_rlhf(cfg)
    assert (cfg.batch_size, cfg.seed, cfg.steps) == (4, 1, 2)
    assert all(type(v) is int for v in (cfg.batch_size, cfg.seed, cfg.steps))
    assert cfg.policy == "/models/policy"
    for field, value, expected in (("steps", 2.5, "an integer"), ("steps", "abc", "an integer"), ("lr", "x", "a number")):
        with pytest.raises(ConfigError, match=rf"^RLHFConfig: field '{field}' got {value!r}, expected {expected}$"):
            validate_rlhf(RLHFConfig(**{**base, field: value}))


def test_rlhf_config_from_python_takes_paths_in_lists_and_a_numpy_weight_array():
    """docs/rlhf.md: a pathlib.Path wherever a string goes; list fields too (reward_import_path), and a
    numpy array of reward weights, as before validate converted fields."""
    import numpy as np

    from proxima.rlhf.config import RLHFConfig
    from proxima.rlhf.config import validate as validate_rlhf

    cfg = RLHFConfig(policy="/m", reward=["a:f", "b:g"], prompts="p.txt", reward_import_path=[Path("rw"), "x"],
                     reward_weights=np.array([0.5, 1.5]))
    validate_rlhf(cfg)
    assert cfg.reward_import_path == ["rw", "x"]
    assert cfg.reward_weights == [0.5, 1.5] and all(type(w) is float for w in cfg.reward_weights)
