"""The Python API review (round 34): a misspelt field set on a PPOConfig (an attribute or a keyword)
is refused naming the field meant, train(None) says what it needs, proxima.train shows its keyword
arguments, and a bool field given 0/1 records a bool."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import yaml

import proxima
import proxima.trainer
from proxima import ConfigError, PPOConfig
from proxima.config import from_dict, validate
from proxima.presets import resolve
from tests.cli_helpers import tiny_cartpole_run

#: one iteration of 4 envs x 16 steps, no evaluation (TINY_RUN's settings, as PPOConfig fields)
TINY = dict(env_id="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1, total_timesteps=64,
            eval_episodes=0, progress=False, threads=1)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    return tiny_cartpole_run(tmp_path_factory, "review34_pyapi")


# --- a field misspelt as an attribute -------------------------------------------------------------------------
def test_an_attribute_that_is_no_field_is_refused_naming_the_field_meant():
    """docs/python_api.md's pattern with SB3's name: `cfg = resolve(...); cfg.learning_rate = 1e-2` trained with the
    preset's lr, saying nothing (config.yaml had lr 0.008 and no learning_rate)."""
    cfg = resolve("CartPole-v1", "fast")
    cfg.learning_rate = 1e-2
    with pytest.raises(ConfigError) as e:
        validate(cfg, python=True)
    assert str(e.value) == ("PPOConfig.learning_rate = 0.01: not a PPOConfig field, so the run would ignore it "
                            "(did you mean 'lr'?)")


def test_train_refuses_the_attribute_before_anything_is_written(tmp_path):
    cfg = PPOConfig(**TINY, run_dir=str(tmp_path / "run"))
    cfg.n_steps = 256
    cfg.num_env = 8
    with pytest.raises(ConfigError) as e:
        proxima.train(cfg, quiet=True)
    assert str(e.value) == ("PPOConfig.n_steps = 256: not a PPOConfig field, so the run would ignore it "
                            "(did you mean 'num_steps'?) (and 1 more: num_env)")
    assert not (tmp_path / "run").exists()


def test_a_resume_refuses_the_attribute_too(finished_run):
    """A resume trains with the run's recorded config, so validate() never saw the caller's attribute."""
    cfg = PPOConfig(**{**TINY, "total_timesteps": 256})
    cfg.learning_rate = 1e-3
    before = sorted(p.name for p in (finished_run / "checkpoints").iterdir())
    with pytest.raises(ConfigError, match=r"^PPOConfig.learning_rate = 0.001: not a PPOConfig field, so the run "
                                          r"would ignore it \(did you mean 'lr'\?\)$"):
        proxima.train(cfg, resume=finished_run, quiet=True, evaluate_at_end=False)
    assert sorted(p.name for p in (finished_run / "checkpoints").iterdir()) == before


def test_a_preset_over_a_base_with_such_an_attribute_refuses_it():
    """resolve() copies the base field by field (dataclasses.replace), which dropped the attribute."""
    base = PPOConfig()
    base.ent_coeff = 0.0
    with pytest.raises(ConfigError, match=r"^PPOConfig.ent_coeff = 0.0: .*\(did you mean 'ent_coef'\?\)$"):
        resolve("CartPole-v1", "fast", base)


def test_private_attributes_are_bookkeeping_not_fields():
    """from_dict's _sources (which preset set each field) is the code's own; a user's _name is no misspelt field."""
    cfg = resolve("CartPole-v1", "fast")
    assert cfg._sources
    cfg._sweep_tag = "a"
    validate(cfg, python=True)


# --- a field misspelt as a keyword ------------------------------------------------------------------------------
@pytest.mark.parametrize("name, hint", [
    ("learning_rate", "(did you mean 'lr'?)"),
    ("n_steps", "(did you mean 'num_steps'?)"),
    ("n_envs", "(did you mean 'num_envs'?)"),
    ("n_epochs", "(did you mean 'update_epochs'?)"),
    ("clip_range", "(did you mean 'clip_coef'?)"),  # difflib alone: clip_reward
    ("normalize_advantage", "(did you mean 'norm_adv'?)"),  # difflib alone: none
    ("torch_deterministic", "(did you mean 'deterministic'?)"),
    ("batch_size", "(did you mean 'num_minibatches'? it counts minibatches: num_envs x num_steps / your minibatch size)"),
    ("policy_kwargs", "(did you mean 'hidden_sizes'? net_arch=[64, 64] is hidden_sizes=[64, 64], activation_fn is "
                      "activation='tanh' or 'relu', log_std_init is log_std_init=X; ortho_init has no counterpart "
                      "(layers are initialized orthogonally): drop it, results will differ where it was set)"),  # difflib alone: env_kwargs
])
def test_an_sb3_or_cleanrl_keyword_is_a_config_error_naming_the_field(name, hint):
    with pytest.raises(ConfigError) as e:
        PPOConfig(**{name: 64})
    assert str(e.value) == f"PPOConfig({name}=64): not a PPOConfig field {hint}"
    assert isinstance(e.value, TypeError)  # what an unexpected keyword argument raised before: `except TypeError` still holds


def test_the_keyword_check_keeps_the_fields_signature_and_replace():
    """Jupyter's Shift-Tab on PPOConfig still lists the fields; dataclasses.replace passes through the check."""
    import dataclasses

    assert list(inspect.signature(PPOConfig).parameters) == [f.name for f in dataclasses.fields(PPOConfig)]
    with pytest.raises(ConfigError, match=r"^PPOConfig\(nsteps=8\): not a PPOConfig field \(did you mean 'num_steps'\?\)$"):
        dataclasses.replace(PPOConfig(), nsteps=8)


def test_a_yaml_key_of_sb3s_gets_the_same_suggestion():
    with pytest.raises(ConfigError) as e:
        from_dict({"clip_range": 0.1}, source="c.yaml")
    assert str(e.value) == "c.yaml: unknown field 'clip_range' (did you mean 'clip_coef'?)"


# --- train(None) ------------------------------------------------------------------------------------------------
def test_train_none_is_a_config_error_saying_what_it_needs():
    """Was AttributeError: 'NoneType' object has no attribute 'run_dir' (run_setup.py)."""
    with pytest.raises(ConfigError) as e:
        proxima.train(None)
    assert str(e.value) == ("train(config): expected a PPOConfig (PPOConfig(...) or proxima.presets.resolve(...)), got "
                            "None; train(None, resume=RUN_DIR) continues a run with its recorded config")


def test_train_none_with_resume_auto_and_nothing_to_continue_is_a_config_error(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(ConfigError) as e:
        proxima.train(None, resume="auto", run_dir=run)
    assert str(e.value) == (f"train(None, resume='auto'): {run} holds no checkpoint to continue, and a new run needs a "
                            "PPOConfig (PPOConfig(...) or proxima.presets.resolve(...))")
    assert not run.exists()
    with pytest.raises(ConfigError, match=r"^train\(None, resume='auto'\): give run_dir=RUN_DIR "):
        proxima.train(None, resume="auto")


# --- proxima.train's signature ------------------------------------------------------------------------------------
def test_proxima_train_shows_and_passes_the_trainers_keyword_arguments(monkeypatch):
    """Its (config, **kwargs) hid resume, overwrite, quiet, run_dir and evaluate_at_end from Shift-Tab."""
    signature = inspect.signature(proxima.train)
    assert signature == inspect.signature(proxima.trainer.train)
    for name in list(signature.parameters)[1:]:
        assert f"{name}:" in proxima.train.__doc__ or f"{name}," in proxima.train.__doc__
    seen = {}
    monkeypatch.setattr(proxima.trainer, "train", lambda config, **kw: seen.update(kw, config=config) or "trained")
    given = dict(run_dir="r", resume="auto", argv=["train"], quiet=True, evaluate_at_end=False, overwrite=True,
                 env_id="m:E", trust_run=True, overrides={"lr": 0.1}, sources={"lr": "--preset fast"}, callback=print)
    cfg = PPOConfig()
    assert proxima.train(cfg, **given) == "trained"
    assert seen == {**given, "config": cfg}


# --- bool fields given 0/1 ------------------------------------------------------------------------------------------
def test_a_bool_field_given_0_or_1_records_a_bool(tmp_path):
    """PPOConfig(anneal_lr=0, norm_obs=1) trained and config.yaml recorded anneal_lr: 0, norm_obs: 1."""
    cfg = PPOConfig(**TINY, anneal_lr=0, norm_obs=1, norm_reward=np.int64(1), plot=np.bool_(False),
                    run_dir=str(tmp_path / "run"))
    run_dir, _ = proxima.train(cfg, quiet=True)
    text = (run_dir / "config.yaml").read_text()
    for line in ("anneal_lr: false", "norm_obs: true", "norm_reward: true", "plot: false"):
        assert line in text.splitlines()
    recorded = yaml.safe_load(text)
    assert all(type(recorded[name]) is bool for name in ("anneal_lr", "norm_obs", "norm_reward", "plot"))


@pytest.mark.parametrize("value", [2, -1, 1.0, "1", None])
def test_a_bool_field_given_another_value_is_still_refused(value):
    with pytest.raises(ConfigError) as e:
        validate(PPOConfig(norm_obs=value), python=True)
    assert str(e.value) == f"PPOConfig.norm_obs = {value!r}: expected True or False"


def test_a_population_refuses_an_attribute_its_base_config_carries():
    """member_configs copies the base with dataclasses.replace, which drops an attribute that is no field:
    the population would train every member with the default lr, saying nothing."""
    from proxima.config import PPOConfig
    from proxima.population import member_configs

    base = PPOConfig(env_id="CartPole-v1")
    base.learning_rate = 1e-2
    with pytest.raises(ConfigError, match=r"^PPOConfig\.learning_rate = 0\.01: not a PPOConfig field.*did you mean 'lr'"):
        member_configs(base, [1, 2])
    del base.learning_rate
    assert [m.seed for m in member_configs(base, [1, 2])] == [1, 2]
