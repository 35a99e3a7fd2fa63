"""Review 47's fresh fixes: train's --compile says its CPU speed in its one compiling note; the CPU switch
notes name PPOConfig's fields from Python and say the figure is a 2-core CPU's; an unpaired --threads is an
actionable line; --log-std-init with --init-from is refused; NativeEnv._normal takes tensor mean/std; the
preset line of a generic Atari id names the game. Nothing compiles for real (test_accel43's stub)."""

from __future__ import annotations

import pytest
import torch

from proxima import trainer
from proxima.config import PPOConfig
from proxima.envs import make_env
from tests.cli_helpers import run_main
from tests.unit import test_accel43 as accel43

cache, recorded_compile = accel43.cache, accel43.recorded_compile  # fixtures: compile stubbed, a fresh cache folder
TRAIN = ["train", "CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--total-timesteps", "64", "--eval-episodes", "0",
         "--no-plot"]


def test_train_with_compile_on_a_cpu_prints_one_compile_note_the_cache_then_the_speed(recorded_compile, cache, tmp_path,
                                                                                      capsys):
    code, _, err = run_main([*TRAIN, "--compile", "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 0, err
    assert [line for line in err.splitlines() if "--compile" in line] == [
        "proxima: note: --compile: compiling the rollout and update steps; the first launch compiles: about a minute on "
        f"a CPU (its kernels are cached in {cache}; a later launch reads them: ~10-20 s); on a CPU, compiled small MLPs "
        "trained slower than eager in our runs (docs/performance.md); measure with proxima bench CartPole-v1 --compile"], err


def test_python_switch_notes_name_ppoconfig_fields_and_the_2_core_cpu():
    cfg = PPOConfig(env_id="Pendulum-v1", amp="bf16", compile=True, compile_mode="reduce-overhead")
    assert trainer.cpu_switch_notes(cfg, torch.device("cpu"), python=True) == [
        "PPOConfig.compile_mode='reduce-overhead': CUDA graphs, which a CPU has none of: compiling in the default mode",
        "PPOConfig.compile=True: on a CPU, compiled small MLPs trained slower than eager in our runs "
        "(docs/performance.md); measure with proxima bench Pendulum-v1 --compile",
        "PPOConfig.amp='bf16': on a CPU, small MLPs trained slower in bf16 than in fp32 in our runs "
        "(docs/performance.md); measure with proxima bench Pendulum-v1 --amp bf16"]
    # train's own list leaves --compile's speed to the compiling note
    assert [n.split(":")[0] for n in trainer.cpu_switch_notes(cfg, "cpu", python=True, compile_note=False)] == [
        "PPOConfig.compile_mode='reduce-overhead'", "PPOConfig.amp='bf16'"]


def test_python_train_with_amp_bf16_notes_the_field(tmp_path, capsys):
    import proxima

    cfg = PPOConfig(env_id="CartPole-v1", amp="bf16", num_envs=4, num_steps=16, total_timesteps=64, eval_episodes=0,
                    plot=False, run_dir=str(tmp_path / "run"))
    proxima.train(cfg)
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "bf16" in line]
    assert notes == ["proxima: note: PPOConfig.amp='bf16': on a CPU, small MLPs trained slower in bf16 than in fp32 "
                     "in our runs (docs/performance.md); measure with proxima bench CartPole-v1 --amp bf16"], err


def test_unpaired_threads_note_says_what_ran_and_what_would_pair():
    cfg = PPOConfig(threads=2, num_envs=4, num_steps=16, num_minibatches=4)
    assert trainer.unpaired_threads_note(cfg) == (
        "--threads 2: no batch reaches 2,048 rows, so the paired side thread is not used (1 intra-op thread); "
        "drop --threads, or train with more envs (num_envs >= 2,048 or num_envs x num_steps / num_minibatches >= 2,048)")
    assert trainer.unpaired_threads_note(cfg, python=True).startswith(
        "PPOConfig.threads=2: no batch reaches ") and "; drop threads, or " in trainer.unpaired_threads_note(cfg, True)
    # --threads 4 runs 2 intra-op threads: dropping it would lose one, so the line only says how to pair
    four = trainer.unpaired_threads_note(PPOConfig(threads=4, num_envs=4))
    assert four.startswith("--threads 4: no batch reaches 2,048 rows, so the paired side thread is not used (2 intra-op threads); ") and "drop" not in four




def _pendulum(tmp_path, capsys, *extra):
    return run_main(["train", "Pendulum-v1", "--num-envs", "2", "--num-steps", "8", "--num-minibatches", "2",
                     "--total-timesteps", "16", "--eval-episodes", "0", "--no-plot", *extra], capsys)


def test_log_std_init_with_init_from_is_refused_before_a_run_dir(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = _pendulum(tmp_path, capsys, "--run-dir", "pa")
    assert code == 0, err
    code, _, err = _pendulum(tmp_path, capsys, "--init-from", "pa", "--log-std-init", "-2", "--run-dir", "pb")
    assert code == 2 and err.strip().splitlines()[-1] == (
        "proxima train: error: --log-std-init -2 with --init-from: the weights (and log std) come from pa's checkpoint; "
        "drop one"), err
    assert not (tmp_path / "pb").exists()
    import proxima

    with pytest.raises(proxima.ConfigError) as e:
        proxima.train(PPOConfig(env_id="Pendulum-v1", init_from="pa", log_std_init=-2.0, num_envs=2, num_steps=8,
                                total_timesteps=16, run_dir=str(tmp_path / "pc")))
    assert str(e.value) == ("log_std_init=-2 with init_from: the weights (and log std) come from pa's checkpoint; "
                            "drop one")
    assert not (tmp_path / "pc").exists()


def test_native_normal_takes_tensor_mean_and_std():
    env = make_env("Pendulum-v1", 3, "cpu", "native", seed=0)
    native = getattr(env, "env", env)
    mean, std = torch.tensor([10.0, 20.0, 30.0]), torch.tensor([0.0, 0.0, 2.0])
    x = native._normal((3,), mean, std)  # was: Boolean value of Tensor with more than one value is ambiguous
    assert x[:2].tolist() == [10.0, 20.0] and x[2].item() != 30.0
    assert native._normal((3,), torch.tensor(5.0), 0.0).tolist() == [5.0, 5.0, 5.0]
    assert native._normal((3,), 5, 0).tolist() == [5.0, 5.0, 5.0]


def test_a_generic_atari_ids_preset_line_names_the_game(capsys):
    from proxima.presets import resolve

    cfg = resolve("ALE/Boxing-v5")  # a game atari.yaml has no preset of its own for
    trainer._note_preset(cfg)
    line = capsys.readouterr().err.strip()
    assert line.startswith("proxima: preset ALE/Boxing-v5 (the Atari preset <Game>-v5/default): "), line
