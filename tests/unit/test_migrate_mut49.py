"""Mutation survivors of review 49's migration hints (FOREIGN_ADVICE in config.py, foreign_value_note,
_cuda_in_file, the schedules line, Python's schedule words, train()'s PPOConfig-field keyword)."""
import pytest

from proxima import PPOConfig, train
from proxima.config import ConfigError, from_dict


def _refusal(**kwargs) -> str:
    with pytest.raises(Exception) as e:
        PPOConfig(**kwargs)
    return str(e.value)


def _file(values: dict) -> str:
    with pytest.raises(ConfigError) as e:
        from_dict(values, source="f.yaml")
    return str(e.value)


def test_python_keyword_note_reads_the_other_keywords():
    # batch_size's note is 'num_minibatches: 1 here' only when num_envs x num_steps (given beside it) <= batch_size
    said = _refusal(num_envs=1, num_steps=8, batch_size=256)
    assert "num_minibatches: 1 here: it counts minibatches, 1 when batch_size >= num_envs x num_steps" in said
    assert "did you mean" not in said


def test_an_empty_track_in_a_file_or_python_is_off():
    assert _file({"track": None}) == "f.yaml: unknown field 'track' (nothing is sent to Weights & Biases; drop it)"
    assert "(nothing is sent to Weights & Biases; drop it)" in _refusal(track=None)
    assert "no Weights & Biases here" in _file({"track": True})


def test_no_cuda_in_a_file_is_the_device_inverted():
    assert _file({"no_cuda": True}) == "f.yaml: unknown field 'no_cuda' (device: cpu)"
    assert _file({"no_cuda": False}) == "f.yaml: unknown field 'no_cuda' (device: cuda)"
    said = _file({"no_cuda": True, "track": False})
    assert "no_cuda (device: cpu)" in said and "track (nothing is sent to Weights & Biases; drop it)" in said


def test_wandb_entity_and_tensorboard_log_say_what_stands_for_them():
    assert "wandb_entity='me'): not a PPOConfig field (no Weights & Biases here: every run writes TensorBoard" \
        in _refusal(wandb_entity="me")
    assert "wandb_entity (no Weights & Biases here" in _file({"wandb_entity": "me", "track": True})
    said = _file({"tensorboard_log": "logs"})
    assert said == ("f.yaml: unknown field 'tensorboard_log' (every run writes its TensorBoard events into its run "
                    "directory (--run-dir DIR); drop it)")
    assert "(--run-dir DIR); drop it" in _refusal(tensorboard_log="logs")


def test_one_unknown_key_beside_two_schedules_is_named_first():
    said = _file({"foo_bar": 1, "learning_rate": "lin_3e-4", "clip_coef": "lin_0.2"})
    assert said == "f.yaml: unknown field 'foo_bar'"


def test_separate_pi_vf_sizes_are_not_a_schedule():
    said = _file({"learning_rate": "lin_3e-4", "hidden_sizes": {"pi": [64], "vf": [64]}})
    assert "schedules no field takes" not in said
    assert "field 'learning_rate' (lr's other name) got 'lin_3e-4', expected a number" in said


def test_vf_clip_coef_schedule_in_a_file_and_from_python():
    assert _file({"vf_clip_coef": "lin_0.2"}).endswith("(no schedule for vf_clip_coef: it stays constant; give 0.2)")
    with pytest.raises(ConfigError) as e:
        train(PPOConfig(env_id="CartPole-v1", total_timesteps=64, vf_clip_coef="lin_0.2"))
    assert "no schedule for vf_clip_coef: it stays constant; give vf_clip_coef=0.2" in str(e.value)


def test_train_keywords_field_hint_is_for_fields_only():
    with pytest.raises(TypeError) as e:
        train(PPOConfig(env_id="CartPole-v1"), total_timesteps=64, foo=1)
    assert "total_timesteps is a PPOConfig field: PPOConfig(..., total_timesteps=N)" in str(e.value)
    with pytest.raises(TypeError) as e:
        train(PPOConfig(env_id="CartPole-v1"), foo=1)
    assert str(e.value) == "train() got an unexpected keyword argument 'foo'"
