"""Survivors of the mutation review of the callback guard (user review 43): a callback changing
trainer.cfg in place, replacing it, or changing it and then raising leaves the checkpoint with the
run's own config; a change to an equal value of another type is still a change; the advice names
init_from=RUN_DIR unless every changed field is resume-safe; tensors and arrays a callback adds reach
TensorBoard; help(PPOConfig) shows the defaults of factory fields."""

import dataclasses

import numpy as np
import pytest
import torch

import proxima
from proxima import PPOConfig, load, train
from tests.unit import test_python_api43 as api43


def _refusal(tmp_path, change, error=proxima.ConfigError):
    """The message of ``error`` raised by a run whose callback calls ``change(trainer)`` at iteration 1."""
    def cb(row, trainer):
        change(trainer)

    with pytest.raises(error) as e:
        api43._train(tmp_path / "run", cb)
    return str(e.value)


def _resumes_with_the_runs_config(run_dir):
    """The checkpoint of the refused iteration records the run's config, and the run resumes from it."""
    assert load(run_dir).config["hidden_sizes"] == [64, 64] and load(run_dir).config["env_kwargs"] == {}
    assert load(run_dir).config["lr"] == 2.5e-4
    _, policy = train(None, resume=run_dir, quiet=True, evaluate_at_end=False)
    assert policy.config["hidden_sizes"] == [64, 64] and policy.config["lr"] == 2.5e-4


@pytest.mark.parametrize("change, said", [
    (lambda t: t.cfg.hidden_sizes.append(8), "it changed trainer.cfg.hidden_sizes ([64, 64] -> [64, 64, 8]); "),
    (lambda t: t.cfg.env_kwargs.__setitem__("x", 1), "it changed trainer.cfg.env_kwargs ({} -> {'x': 1}); "),
], ids=["hidden_sizes", "env_kwargs"])
def test_a_list_or_dict_field_changed_in_place_is_refused_and_put_back(tmp_path, change, said):
    assert said in _refusal(tmp_path, change)
    _resumes_with_the_runs_config(tmp_path / "run")


def test_a_callback_changing_trainer_cfg_then_raising_raises_its_error_and_the_checkpoint_keeps_the_runs_config(tmp_path):
    def change(trainer):
        trainer.cfg.lr = 1e-3
        raise RuntimeError("the callback's own error")

    assert _refusal(tmp_path, change, RuntimeError) == "the callback's own error"  # as it came, not the ConfigError
    _resumes_with_the_runs_config(tmp_path / "run")


def test_a_callback_replacing_trainer_cfg_is_refused_and_the_run_keeps_its_config(tmp_path):
    trainers = []

    def change(trainer):
        trainers.append(trainer)
        trainer.cfg = dataclasses.replace(trainer.cfg, lr=1e-3)

    message = _refusal(tmp_path, change)
    assert message.endswith("it replaced trainer.cfg; the run trains with the config it started with, which is put "
                            "back (the checkpoints record it); to train with another config, stop the run (return "
                            "False) and start a new one, train(PPOConfig(..., init_from=RUN_DIR)) to start from its "
                            "weights")
    assert trainers[0].cfg.lr == 2.5e-4
    _resumes_with_the_runs_config(tmp_path / "run")


@pytest.mark.parametrize("field, value, said", [
    ("total_timesteps", 256.0, "trainer.cfg.total_timesteps (256 -> 256.0)"),  # 256.0 == 256, yet not an int
    ("norm_adv", 1, "trainer.cfg.norm_adv (True -> 1)"),  # 1 == True, yet not a bool
], ids=["int_to_float", "bool_to_int"])
def test_an_equal_value_of_another_type_is_a_change(tmp_path, field, value, said):
    assert said in _refusal(tmp_path, lambda t: setattr(t.cfg, field, value))
    assert load(tmp_path / "run").config[field] == getattr(PPOConfig(**api43.TINY), field)
    assert type(load(tmp_path / "run").config[field]) is type(getattr(PPOConfig(**api43.TINY), field))


def test_changing_a_resume_safe_field_and_another_is_told_to_start_from_the_weights(tmp_path):
    def change(trainer):
        trainer.cfg.total_timesteps = 512  # resume-safe
        trainer.cfg.gamma = 0.9  # the run's identity: a resume refuses it

    message = _refusal(tmp_path, change)
    assert message.endswith("to train with it, stop the run (return False) and start a new one from its weights: "
                            "train(PPOConfig(..., total_timesteps=512, gamma=0.9, init_from=RUN_DIR))")
    assert "resume=RUN_DIR" not in message


def test_a_non_str_key_a_callback_adds_is_refused_naming_the_key(tmp_path):
    def cb(row):
        row[1] = 0.5

    with pytest.raises(TypeError) as e:
        api43._train(tmp_path / "run", cb)
    assert str(e.value) == ("train(callback=test_a_non_str_key_a_callback_adds_is_refused_naming_the_key.<locals>.cb): "
                            "added the key 1 to the row; a key it adds is a TensorBoard tag: give a str "
                            "(e.g. 'custom/my_metric')")


def test_one_element_tensors_and_arrays_a_callback_adds_reach_tensorboard(tmp_path):
    def cb(row):
        row["custom/tensor"] = torch.tensor(1.5) * row["iteration"]
        row["custom/array"] = np.array([2.0]) * row["iteration"]
        row["custom/np_int"] = np.int64(3)

    run_dir, _ = api43._train(tmp_path / "run", cb, total_timesteps=128)
    assert api43._scalars(run_dir, "custom/tensor") == [(64, 1.5), (128, 3.0)]
    assert api43._scalars(run_dir, "custom/array") == [(64, 2.0), (128, 4.0)]
    assert api43._scalars(run_dir, "custom/np_int") == [(64, 3.0), (128, 3.0)]


@pytest.mark.parametrize("value, kind", [
    (torch.tensor([1.0, 2.0]), "Tensor"),  # several elements: no one scalar
    (torch.tensor(1 + 2j), "Tensor"),  # complex: no real number
    (np.array([1 + 1j]), "ndarray"),
    (np.array(["a"]), "ndarray"),
], ids=["tensor_of_two", "complex_tensor", "complex_array", "str_array"])
def test_a_tensor_or_array_that_is_no_real_scalar_is_refused_naming_the_key(tmp_path, value, kind):
    def cb(row):
        row["custom/bad"] = value

    with pytest.raises(TypeError) as e:
        api43._train(tmp_path / "run", cb)
    assert f"row['custom/bad'] is a {kind}; a key the callback adds is logged to TensorBoard as a scalar" in str(e.value)


def test_help_of_ppoconfig_shows_the_default_of_a_field_made_by_a_factory():
    lines = PPOConfig.__doc__.splitlines()
    assert any(line.startswith("    hidden_sizes (list, default [64, 64]): Hidden layer widths") for line in lines)
    assert any(line.startswith("    env_kwargs (dict, default {}): Keyword arguments") for line in lines)
    assert "_MISSING_TYPE" not in PPOConfig.__doc__
