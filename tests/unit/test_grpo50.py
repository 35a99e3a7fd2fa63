"""grpo and rloo train no value model: its settings (--vf-coef, --vf-clip-coef, --no-clip-vloss, as
--value-init) are refused there when they differ from their defaults, as any setting nothing reads
(config.IGNORED_WITHOUT); their defaults, gae and a recorded config.yaml's resume still pass."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tiny local models only: nothing may be downloaded
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import yaml  # noqa: E402

from proxima.rlhf.config import ConfigError, RLHFConfig, from_dict, validate  # noqa: E402
from tests.cli_helpers import one_error_line, run_main  # noqa: E402

VALUE_MODEL = [  # (field, a value other than the default, the line's start, its advice)
    ("vf_coef", 0.5, "--vf-coef 0.5: weighs the loss of the value model", "drop --vf-coef"),
    ("vf_clip_coef", 0.3, "--vf-clip-coef 0.3: clips the predictions of the value model", "drop --vf-clip-coef"),
    ("clip_vloss", False, "--no-clip-vloss: turns off the clipping of the loss of the value model",
     "leave --clip-vloss at its default (on)"),
]


def cfg(**kw) -> RLHFConfig:
    return RLHFConfig(policy="p", prompts="p.txt", reward=["m:f"], **kw)


@pytest.mark.parametrize("advantage", ["grpo", "rloo"])
@pytest.mark.parametrize("name, value, start, fix", VALUE_MODEL)
def test_a_value_model_setting_is_refused_where_there_is_no_value_model(advantage, name, value, start, fix):
    with pytest.raises(ConfigError) as e:
        validate(cfg(advantage=advantage, samples_per_prompt=2, **{name: value}))
    assert str(e.value) == f"{start}, which --advantage {advantage} does not have; {fix}, or use --advantage gae"
    assert e.value.field == name  # so a --config file's key is named (cli.in_file_words)


@pytest.mark.parametrize("advantage", ["grpo", "rloo"])
@pytest.mark.parametrize("name", ["vf_coef", "vf_clip_coef", "clip_vloss"])
def test_a_value_model_setting_at_its_default_passes_without_a_value_model(advantage, name):
    given = cfg(advantage=advantage, samples_per_prompt=2)
    setattr(given, name, getattr(RLHFConfig(), name))  # typed as the default: nothing changes, nothing to refuse
    validate(given)


@pytest.mark.parametrize("name, value, start, fix", VALUE_MODEL)
def test_a_value_model_setting_passes_with_gae(name, value, start, fix):
    validate(cfg(advantage="gae", **{name: value}))


def test_value_lr_stays_accepted_with_grpo_as_the_demo_sets_it():
    """README: `proxima rlhf --demo --advantage grpo`; the demo's defaults carry value_lr 1e-3."""
    from proxima.rlhf.demo import demo_config

    demo = demo_config()
    demo.policy, demo.prompts, demo.advantage, demo.samples_per_prompt = "p", "p.txt", "grpo", 4
    validate(demo)


def test_a_config_files_value_model_setting_is_named_by_its_key(tmp_path, capsys):
    from tests.rlhf_assets import save_gpt2
    from proxima.rlhf.demo import prompts_list

    save_gpt2(tmp_path / "pol")
    (tmp_path / "prompts.txt").write_text("\n".join(prompts_list()[:4]) + "\n")
    (tmp_path / "rlhf.yaml").write_text("samples_per_prompt: 2\nclip_vloss: false\n")
    capsys.readouterr()  # save_gpt2's progress bar
    code, out, err = run_main(["rlhf", "--policy", str(tmp_path / "pol"), "--prompts", str(tmp_path / "prompts.txt"),
                               "--reward", "proxima.rlhf.demo:keyword_sentiment", "--batch-size", "4", "--steps", "1",
                               "--advantage", "grpo", "--config", str(tmp_path / "rlhf.yaml"),
                               "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 2 and out == "", err
    file = tmp_path / "rlhf.yaml"
    assert one_error_line(err, "proxima rlhf") == (
        f"{file}: clip_vloss False: turns off the clipping of the loss of the value model, which --advantage grpo does "
        f"not have; leave clip_vloss in {file} at its default (on), or use --advantage gae")
    assert not (tmp_path / "run").exists()


def test_a_recorded_grpo_config_yaml_with_every_default_loads():
    recorded = yaml.safe_load(yaml.safe_dump(cfg(advantage="grpo", samples_per_prompt=2).to_dict()))
    validate(from_dict(recorded))


def test_a_grpo_run_recorded_with_value_model_settings_still_resumes(tmp_path, capsys):
    """An earlier version let --advantage grpo start with --vf-coef 0.5 --no-clip-vloss: its resume runs on."""
    from proxima.rlhf import api
    from proxima.rlhf.demo import prompts_list
    from tests.rlhf_assets import save_gpt2

    save_gpt2(tmp_path / "model")
    (tmp_path / "prompts.txt").write_text("\n".join(prompts_list()) + "\n")
    run = api.train_rlhf(RLHFConfig(
        policy=str(tmp_path / "model"), prompts=str(tmp_path / "prompts.txt"),
        reward="proxima.rlhf.demo:keyword_sentiment", advantage="grpo", samples_per_prompt=2, batch_size=4,
        num_minibatches=1, update_epochs=1, max_new_tokens=4, steps=1, print_every=0, sample_every=0,
        checkpoint_every=1, plot=False, run_dir=str(tmp_path / "run"), threads=1))
    recorded = yaml.safe_load((run / "config.yaml").read_text())
    recorded.update(vf_coef=0.5, vf_clip_coef=0.3, clip_vloss=False)
    (run / "config.yaml").write_text(yaml.safe_dump(recorded))
    code, out, err = run_main(["resume", str(run), "--steps", "2"], capsys)
    assert code == 0, err
    assert (run / "checkpoints" / "step_000002.pt").is_file()
