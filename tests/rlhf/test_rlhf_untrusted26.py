"""`proxima rlhf` input a stranger may hand over: a --config file naming reward code (its own or a run's
config.yaml downloaded alone), a --config that is a FIFO, sizes that cannot fit (10**12 responses, a
config.json asking for a 40 GB model) and a pytorch_model.bin that pickles code. Each is one line, exit 2,
nothing imported, allocated or written."""

import os
import subprocess
import sys

import pytest
import torch
import yaml

from proxima.rlhf.__main__ import main as rlhf_main
from proxima.rlhf.config import ConfigError, validate
from rlhf_assets import save_gpt2

PAYLOAD = 'open({marker!r}, "w").write("ran")\n\ndef score(prompts, responses):\n    return [0.0] * len(prompts)\n'


def one_line_error(capsys, code) -> str:
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("proxima rlhf: error: ") and "Traceback" not in err, err
    return err


def small_run(assets, run_dir) -> list:
    return ["--policy", str(assets / "model"), "--prompts", str(assets / "prompts.txt"), "--run-dir", str(run_dir),
            "--steps", "1", "--batch-size", "4", "--max-new-tokens", "4", "--update-epochs", "1", "--print-every", "0",
            "--no-plot"]


@pytest.fixture
def payload(tmp_path, monkeypatch):
    """(folder, marker): a module payload26.py in its own folder that writes ``marker`` when imported; the
    folder is not on sys.path, and the module is forgotten after the test."""
    folder = tmp_path / "dl"
    folder.mkdir()
    marker = tmp_path / "PWNED"
    (folder / "payload26.py").write_text(PAYLOAD.format(marker=str(marker)))
    monkeypatch.chdir(tmp_path)
    yield folder, marker
    sys.modules.pop("payload26", None)


def downloaded_config(assets, folder, **extra):
    """A run's config.yaml saved alone (no meta.json beside it, its run_dir elsewhere): data, whoever wrote it."""
    cfg = {"policy": str(assets / "model"), "prompts": str(assets / "prompts.txt"), "reward": ["payload26:score"],
           "reward_import_path": [str(folder)], "run_dir": "/somewhere/else/run", "steps": 1, "batch_size": 4,
           "max_new_tokens": 4, "update_epochs": 1, "print_every": 0, "plot": False, **extra}
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_config_files_reward_module_is_refused_unless_a_flag_names_it(assets, tmp_path, payload, capsys):
    folder, marker = payload
    config = downloaded_config(assets, folder)
    new = tmp_path / "new"
    code = rlhf_main(["--config", str(config), "--run-dir", str(new)])
    err = one_line_error(capsys, code)
    assert err == (f"proxima rlhf: error: {config}: the recorded reward 'payload26:score' would import and run module "
                   "'payload26'; not done for a reward read from a --config file: give it on the command line "
                   "(--reward payload26:score), or pass --trust-run if you trust that code")
    assert not marker.exists() and not new.exists()


def test_a_config_files_reward_import_path_is_refused_for_a_typed_reward(assets, tmp_path, payload, capsys):
    folder, marker = payload
    config = downloaded_config(assets, folder)
    new = tmp_path / "new"
    # --reward typed is the user's own, but the file would still choose the folder it is imported from
    code = rlhf_main(["--config", str(config), "--run-dir", str(new), "--reward", "payload26:score"])
    err = one_line_error(capsys, code)
    assert f"{config}: reward_import_path {folder} would be searched first" in err
    assert f"(--reward-import-path {folder}), or pass --trust-run" in err
    assert not marker.exists() and not new.exists()


def test_the_flags_that_name_the_code_let_it_run(assets, tmp_path, payload, capsys):
    folder, marker = payload
    config = downloaded_config(assets, folder)
    code = rlhf_main(["--config", str(config), "--run-dir", str(tmp_path / "a"), "--reward", "payload26:score",
                      "--reward-import-path", str(folder)])
    assert code == 0, capsys.readouterr().err
    assert marker.exists()
    marker.unlink()
    sys.modules.pop("payload26", None)
    assert rlhf_main(["--config", str(config), "--run-dir", str(tmp_path / "b"), "--trust-run"]) == 0, capsys.readouterr().err
    assert marker.exists()


def test_trust_run_without_a_config_file_is_refused(assets, tmp_path, capsys):
    code = rlhf_main(small_run(assets, tmp_path / "run") + ["--reward", "proxima.rlhf.demo:keyword_sentiment", "--trust-run"])
    assert "--trust-run: trusts the rewards of a --config file; give --config FILE" in one_line_error(capsys, code)
    assert not (tmp_path / "run").exists()


def test_a_config_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "c.yaml"
    os.mkfifo(fifo)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    try:  # before the fix the open() waited for a writer forever
        proc = subprocess.run([sys.executable, "-m", "proxima.rlhf", "--config", str(fifo)], capture_output=True,
                              text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("proxima rlhf --config FIFO hangs")
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"proxima rlhf: error: --config {fifo}: ") and "not a regular file (a FIFO" in err, err


@pytest.mark.parametrize("field, value, words", [
    ("batch_size", 10 ** 12, "--batch-size 1000000000000: must be at most 65,536"),
    ("max_new_tokens", 10 ** 12, "--max-new-tokens 1000000000000: must be at most 1,048,576"),
    ("max_prompt_length", 10 ** 9, "--max-prompt-length 1000000000: must be at most 1,048,576"),
    ("lora_r", 10 ** 9, "--lora-r 1000000000: must be at most 65,536"),
])
def test_sizes_that_cannot_fit_are_refused_at_validation(tiny_cfg, field, value, words):
    with pytest.raises(ConfigError) as e:
        validate(tiny_cfg(**{field: value}))
    assert str(e.value).startswith(words), e.value


def test_a_rollout_too_many_tokens_is_refused_naming_the_product(tiny_cfg):
    # each size within its own cap: 65,536 responses of 1,024 + 1,024 tokens
    with pytest.raises(ConfigError) as e:
        validate(tiny_cfg(batch_size=65536, num_minibatches=1, max_prompt_length=1024, max_new_tokens=1024))
    assert str(e.value).startswith("--batch-size 65536: x (max_prompt_length 1024 + max_new_tokens 1024) = "
                                   "134,217,728 tokens in one rollout, more than the 67,108,864"), e.value


def test_a_huge_batch_size_from_the_command_line_is_one_line(assets, tmp_path, capsys):
    code = rlhf_main(small_run(assets, tmp_path / "run") + ["--reward", "proxima.rlhf.demo:keyword_sentiment",
                                                            "--batch-size", "1000000000000"])
    assert "--batch-size 1000000000000: must be at most 65,536" in one_line_error(capsys, code)
    assert not (tmp_path / "run").exists()


def test_the_parameter_count_builds_nothing(tmp_path):
    from proxima.rlhf.models import parameter_count

    # the reviewer's config.json: 9.7e9 parameters, 39 GB in float32; counted on the meta device in seconds
    huge = {"model_type": "gpt2", "n_embd": 4096, "n_head": 32, "n_layer": 48, "n_positions": 64, "vocab_size": 64}
    assert parameter_count(huge) == 9_666_764_800
    small = {**huge, "n_embd": 64, "n_head": 2, "n_layer": 2}  # as built for real: tied weights counted once
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = dict(small)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(fields.pop("model_type"), **fields))
    assert parameter_count(small) == sum(p.numel() for p in model.parameters())


def test_a_policy_too_big_for_memory_is_refused_before_it_is_built(assets, tmp_path, capsys, monkeypatch):
    from proxima import sizing

    config = tmp_path / "config.json"
    config.write_text('{"model_type": "gpt2", "n_embd": 64, "n_head": 2, "n_layer": 2, "n_positions": 48, '
                      '"vocab_size": 64}')
    monkeypatch.setattr(sizing, "free_memory", lambda device: 1 << 20)  # 1 MiB free: the model needs ~0.4 MB a copy
    argv = small_run(assets, tmp_path / "run") + ["--policy", str(config), "--tokenizer", str(assets / "model"),
                                                  "--reward", "proxima.rlhf.demo:keyword_sentiment"]
    err = one_line_error(capsys, rlhf_main(argv))
    assert err.startswith(f"proxima rlhf: error: --policy '{config}': 107,264 parameters, 419.0 KiB in float32; the run "
                          "holds 9 copies (policy, its gradients, Adam's 2 moments, reference, value model with its "
                          "gradients and moments), ~3.7 MiB on cpu, 1.0 MiB free; use a smaller model, --lora or"), err
    assert not (tmp_path / "run").exists()


def test_a_pickle_that_runs_code_is_refused_without_torchs_advice(tmp_path, assets, capsys):
    folder = save_gpt2(tmp_path / "evil")
    (folder / "model.safetensors").unlink()  # the reviewer's folder: config, tokenizer and a pytorch_model.bin only
    marker = tmp_path / "PWNED"

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    torch.save({"transformer.wte.weight": Payload()}, folder / "pytorch_model.bin")
    argv = small_run(assets, tmp_path / "run") + ["--policy", str(folder), "--reward", "proxima.rlhf.demo:keyword_sentiment"]
    err = one_line_error(capsys, rlhf_main(argv))
    assert f"--policy '{folder}': refused to load its weights: the file references posix.system, which would run code" in err
    assert "Re-running" not in err and "will likely succeed" not in err and "weights_only set to False" not in err
    assert not marker.exists() and not (tmp_path / "run").exists()
