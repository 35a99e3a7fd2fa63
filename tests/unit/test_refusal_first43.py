"""A command refused for its device flags prints its one error line alone: no note about the total
(not a multiple of the batch) before it, and no run directory."""
from tests.cli_helpers import run_main


def test_preset_gpu_on_a_cpu_is_refused_before_the_total_timesteps_note(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code, _, err = run_main(["train", "CartPole-v1", "--preset", "gpu", "--device", "cpu", "--total-timesteps", "2000",
                             "--run-dir", str(run_dir)], capsys)
    assert code == 2
    assert err.splitlines() == ["proxima train: error: --preset gpu turns on --cudagraphs, which needs a CUDA device "
                                "(got --device cpu); on a CPU use --preset fast, or add --no-cudagraphs"], err
    assert not run_dir.exists()


def test_amp_fp16_on_a_cpu_is_refused_before_the_total_timesteps_note(tmp_path, capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--amp", "fp16", "--device", "cpu", "--total-timesteps", "1000",
                             "--num-envs", "4", "--num-steps", "128", "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 2
    assert err.splitlines() == ["proxima train: error: --amp fp16 needs a CUDA device (GradScaler); use --amp bf16 on CPU"], err
