"""A refusal raised to a Python caller (proxima.train, PPOConfig, presets.resolve, make_env) names the
keyword argument the script wrote (``preset='fsat'``, ``lr=0.01``, ``device='cuda'``), never a CLI
flag it did not type; the command line keeps its flags (tests pinning the CLI's lines stay as they were)."""

import shutil

import pytest
import torch

import proxima
from proxima import ConfigError, PPOConfig, presets
from tests.cli_helpers import edit_checkpoint, one_error_line, run_main

TINY = dict(env_id="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1, threads=1,
            progress=False, eval_episodes=0)


@pytest.fixture
def no_cuda(monkeypatch):
    """A machine without a usable GPU, whichever this one is: the refusals below are the CPU's."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished 64-step CartPole run, trained from Python."""
    run_dir = tmp_path_factory.mktemp("wording40") / "run"
    proxima.train(PPOConfig(total_timesteps=64, **TINY), run_dir=run_dir, quiet=True, evaluate_at_end=False)
    return run_dir


def test_an_unknown_preset_names_resolves_argument_and_the_cli_keeps_its_flag():
    with pytest.raises(ConfigError) as info:
        presets.resolve("CartPole-v1", "fsat")
    assert str(info.value) == ("preset='fsat': no such preset for CartPole-v1 (available: default, fast, gpu; see "
                               "`proxima presets`); did you mean preset='fast'?")
    with pytest.raises(ConfigError) as info:
        presets.resolve("CartPole-v1", "fsat", python=False)  # cli.py's and bench.py's call
    assert str(info.value).startswith("--preset 'fsat': no such preset for CartPole-v1 (")
    assert str(info.value).endswith("; did you mean --preset fast?")


def test_make_env_names_its_device_argument(no_cuda):
    with pytest.raises(ConfigError) as info:
        proxima.make_env("CartPole-v1", 1, device="cuda")
    assert str(info.value) == "device='cuda': CUDA is not usable here (run `proxima doctor`); use device='cpu'"


def test_a_cuda_preset_on_a_cpu_names_the_preset_resolve_was_given(no_cuda, tmp_path):
    with pytest.raises(ConfigError) as info:
        proxima.train(presets.resolve("CartPole-v1", "gpu"), run_dir=tmp_path / "r", quiet=True)
    assert str(info.value) == ("preset='gpu' needs CUDA, which is not usable here (run `proxima doctor`); "
                               "on a CPU use preset='fast'")
    assert not (tmp_path / "r").exists()


def test_a_graphed_preset_moved_to_the_cpu_names_its_fields(no_cuda, tmp_path):
    cfg = presets.resolve("CartPole-v1", "gpu")
    cfg.device = "cpu"  # the preset's cudagraphs=True stays
    with pytest.raises(ConfigError) as info:
        proxima.train(cfg, run_dir=tmp_path / "r", quiet=True)
    assert str(info.value) == ("preset='gpu' turns on cudagraphs, which needs a CUDA device (got device='cpu'); "
                               "on a CPU use preset='fast', or set cudagraphs=False")
    assert not (tmp_path / "r").exists()


def test_a_python_resume_that_changes_lr_names_the_field_and_the_safe_fields(run):
    with pytest.raises(ConfigError) as info:
        proxima.train(PPOConfig(total_timesteps=128, **dict(TINY, lr=0.01)), resume=run, quiet=True)
    line = str(info.value)
    assert line.startswith("lr=0.01: cannot change when resuming (the run was trained with 0.00025); safe to change "
                           "on resume: total_timesteps, ")
    assert "--" not in line, line


def test_a_graphed_run_resumed_from_python_on_a_cpu_names_cudagraphs_false(run, tmp_path):
    copy = shutil.copytree(run, tmp_path / "copy")
    edit_checkpoint(copy, lambda state: state["config"].update(cudagraphs=True))  # as a cudagraphs=True run records it
    with pytest.raises(ConfigError) as info:
        proxima.train(None, resume=copy, quiet=True)
    assert str(info.value) == ("device='cpu': the run was trained with cudagraphs=True, which needs a CUDA device; "
                               "set cudagraphs=False to resume it on the CPU")


def test_bench_names_an_unknown_preset_as_the_flag_typed(capsys):
    """bench's base_config resolves with python=False: its refusal (before any env is built) names
    --preset, not resolve's keyword argument the user never wrote."""
    code, out, err = run_main(["bench", "CartPole-v1", "--preset", "fsat"], capsys)
    assert (code, out) == (2, "")
    line = one_error_line(err, "proxima bench")
    assert line.startswith("--preset 'fsat': no such preset for CartPole-v1 ("), line
    assert line.endswith("; did you mean --preset fast?"), line


@pytest.fixture
def cuda_only_cartpole(monkeypatch):
    """CartPole-v1 with its gpu preset only: an env none of whose presets runs on a CPU."""
    table = dict(presets.all_presets())
    table["CartPole-v1"] = {"gpu": table["CartPole-v1"]["gpu"]}
    monkeypatch.setattr(presets, "all_presets", lambda: table)


def test_a_cuda_preset_of_an_env_without_a_cpu_preset_names_the_fields_or_flags(no_cuda, cuda_only_cartpole, tmp_path,
                                                                                capsys):
    with pytest.raises(ConfigError) as info:
        proxima.train(presets.resolve("CartPole-v1", "gpu"), run_dir=tmp_path / "r", quiet=True)
    assert str(info.value) == ("preset='gpu' needs CUDA, which is not usable here (run `proxima doctor`); "
                               "on a CPU set device='cpu', cudagraphs=False")
    assert not (tmp_path / "r").exists()
    code, out, err = run_main(["train", "CartPole-v1", "--preset", "gpu", "--run-dir", str(tmp_path / "c")], capsys)
    assert (code, out) == (2, "")
    assert one_error_line(err, "proxima train") == ("--preset gpu needs CUDA, which is not usable here (run `proxima "
                                                    "doctor`); on a CPU add --device cpu --no-cudagraphs")
    assert not (tmp_path / "c").exists()


def test_train_names_cudagraphs_and_device_as_the_script_set_them(no_cuda, tmp_path):
    """Beside the preset's line: a script's own cudagraphs=True on the CPU, and device='cuda' where CUDA is
    not usable, in the words load() and make_env use (python_words left ``device cpu``, ``device 'cuda'``); the
    CLI keeps its flags (tests/integration/test_train_config.py pins its lines)."""
    with pytest.raises(ConfigError) as info:
        proxima.train(PPOConfig(cudagraphs=True, device="cpu", **TINY), run_dir=tmp_path / "a", quiet=True)
    assert str(info.value) == "cudagraphs needs a CUDA device (got device='cpu')"
    with pytest.raises(ConfigError) as info:
        proxima.train(PPOConfig(device="cuda", **TINY), run_dir=tmp_path / "b", quiet=True)
    assert str(info.value) == "device='cuda': CUDA is not usable here (run `proxima doctor`); use device='cpu'"
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()

