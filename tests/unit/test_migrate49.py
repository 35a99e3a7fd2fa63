"""SB3/CleanRL habits from a migration review: callbacks' frequencies, Python's keywords, train()'s arguments."""
import pytest

from proxima import PPOConfig, train
from proxima.cli import main
from proxima.config import ConfigError, from_dict


def _refusal(**kwargs) -> str:
    with pytest.raises(Exception) as e:
        PPOConfig(**kwargs)
    return str(e.value)


def _cli_error(capsys, *args) -> str:
    assert main(["train", "CartPole-v1", "--total-timesteps", "64", "--dry-run", *args]) == 2
    return capsys.readouterr().err


def test_eval_freq_says_eval_every_counts_all_envs_steps(capsys):
    err = _cli_error(capsys, "--eval-freq", "1000")
    assert "did you mean --eval-every" in err and "eval_freq x --num-envs" in err
    with pytest.raises(ConfigError, match=r"'eval_freq' \(did you mean 'eval_every'\? .*eval_freq x num_envs"):
        from_dict({"eval_freq": 1000}, source="f.yaml")
    assert "eval_freq x num_envs" in _refusal(eval_freq=1000)


def test_save_freq_says_checkpoint_every_counts_iterations_and_keep_checkpoints_0_keeps_all(capsys):
    err = _cli_error(capsys, "--save-freq", "1000")
    assert "did you mean --checkpoint-every" in err
    assert "save_freq / --num-steps" in err and "--keep-checkpoints 0 keeps every checkpoint" in err
    with pytest.raises(ConfigError, match=r"'save_freq' \(did you mean 'checkpoint_every'\? .*save_freq / num_steps; "
                                          r"keep_checkpoints=0 keeps every"):
        from_dict({"save_freq": 1000}, source="f.yaml")
    assert "save_freq / num_steps" in _refusal(save_freq=1)


def test_verbose_says_there_is_no_verbosity_setting_not_overwrite(capsys):
    err = _cli_error(capsys, "--verbose", "1")
    assert "overwrite" not in err and "--verbose: no verbosity setting: drop it" in err
    with pytest.raises(ConfigError, match="unknown field 'verbose': no verbosity setting: drop it"):
        from_dict({"verbose": 1}, source="f.yaml")
    said = _refusal(verbose=1)
    assert "overwrite" not in said and "no verbosity setting" in said


@pytest.mark.parametrize("kwargs, said", [
    (dict(learning_starts=0), "an off-policy setting"),
    (dict(env_wrapper="x"), "no wrapper field"),
    (dict(policy="MlpPolicy"), "SB3's policy class: drop it"),
    (dict(use_sde=True), "no gSDE here"),
    (dict(sde_sample_freq=4), "no gSDE here"),
    (dict(frame_stack=4), "Atari ids always stack the last 4 frames"),
])
def test_python_keywords_get_the_same_hints_as_a_file(kwargs, said):
    text = _refusal(**kwargs)
    assert said in text and "did you mean" not in text
    with pytest.raises(ConfigError, match=said.replace("'", ".")):
        from_dict(kwargs, source="f.yaml")


def test_train_total_timesteps_keyword_says_it_is_a_ppoconfig_field():
    with pytest.raises(TypeError, match=r"total_timesteps is a PPOConfig field: PPOConfig\(\.\.\., total_timesteps=N\)"):
        train(PPOConfig(env_id="CartPole-v1"), total_timesteps=64)
    with pytest.raises(TypeError, match=r"'lr' is|lr is a PPOConfig field: PPOConfig\(\.\.\., lr=X\)"):
        train(PPOConfig(env_id="CartPole-v1"), lr=1e-3)


@pytest.mark.parametrize("kwargs, said", [
    (dict(lr="lin_3e-4"), "is lr=3e-4 with anneal_lr=True"),
    (dict(clip_coef="lin_0.2"), "no schedule for clip_coef: it stays constant; give clip_coef=0.2"),
])
def test_python_schedule_strings_are_translated_as_in_a_file(kwargs, said):
    with pytest.raises(ConfigError, match="expected a number") as e:
        train(PPOConfig(env_id="CartPole-v1", total_timesteps=64, **kwargs))
    assert said in str(e.value)


def test_a_file_with_two_schedules_names_both_in_one_line(tmp_path, capsys):
    (tmp_path / "zoo.yaml").write_text("learning_rate: lin_3e-4\nclip_coef: lin_0.2\n")
    assert main(["train", "CartPole-v1", "--config", str(tmp_path / "zoo.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "schedules no field takes: learning_rate: lin_3e-4 (" in err and "is lr 3e-4 with anneal_lr true" in err
    assert "clip_coef: lin_0.2 (no schedule for clip_coef: it stays constant; give 0.2)" in err


def test_a_cleanrl_dump_says_what_its_tracking_and_video_keys_are_and_cuda_in_file_words(tmp_path):
    values = {"cuda": True, "track": False, "wandb_project_name": "cleanRL", "capture_video": False}
    with pytest.raises(ConfigError) as e:
        from_dict(values, source="args.yaml")
    said = str(e.value)
    assert "cuda (device: cuda)" in said and "device='cuda'" not in said
    assert "track (nothing is sent to Weights & Biases; drop it)" in said
    assert "wandb_project_name (no Weights & Biases here" in said
    assert "capture_video (no video is recorded while training; drop it)" in said
    with pytest.raises(ConfigError, match=r"unknown field 'cuda' \(device: cpu\)"):
        from_dict({"cuda": False}, source="args.yaml")
    assert "proxima eval RUN_DIR --video FILE.mp4" in _refusal(capture_video=True)
    assert "nothing is sent to Weights & Biases" in _refusal(track=False)

