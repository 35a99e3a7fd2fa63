"""--init-from PATH: a new run that starts from another run's policy (its weights and --norm-obs
statistics) with a fresh optimizer, schedule, counters and RNG streams; refused, before anything is
written, where the checkpoint holds another network or was trained on other spaces."""
import pytest
import torch

from proxima import PPOConfig, load
from proxima.config import ConfigError
from proxima.trainer import Trainer
from tests.cli_helpers import TINY_RUN, error_line, run_main

SOURCE = ["--norm-obs", "--total-timesteps", "256"]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A finished 4-iteration CartPole run under --norm-obs: the checkpoint to start from."""
    from proxima import cli

    run = tmp_path_factory.mktemp("init") / "src"
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, *SOURCE, "--run-dir", str(run), "--quiet"]) == 0
    return run


def _config(**kw) -> PPOConfig:
    return PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1, threads=1,
                     progress=False, eval_episodes=0, norm_obs=True, total_timesteps=128, **kw)


def test_the_new_run_starts_with_the_checkpoints_weights_and_statistics_and_nothing_else(source, tmp_path):
    loaded = load(source)
    trainer = Trainer(_config(init_from=str(source)), run_dir=tmp_path / "new", quiet=True)
    try:
        for name, value in loaded.agent.state_dict().items():
            assert torch.equal(trainer.agent.state_dict()[name], value), name
        # the statistics go on from the checkpoint's: its count, plus the new envs' first observations
        assert int(trainer.obs_norm.rms.count) == int(loaded.obs_normalizer.rms.count) + 4
        assert trainer.global_step == 0 and trainer.iteration == 0
        assert not trainer.optimizer.state  # a fresh optimizer: no moments carried over
        rng_after = torch.get_rng_state()
    finally:
        trainer.close()
    # the old network's initialization drew on a fork: the run's own streams are its seed's, as without --init-from
    fresh = Trainer(_config(), run_dir=tmp_path / "fresh", quiet=True)
    try:
        assert torch.equal(torch.get_rng_state(), rng_after)
        first = next(iter(loaded.agent.state_dict()))
        assert not torch.equal(fresh.agent.state_dict()[first], loaded.agent.state_dict()[first])  # it did replace them
    finally:
        fresh.close()


def test_a_run_from_the_cli_trains_on_says_where_it_started_and_resumes_from_its_own_checkpoints(source, tmp_path, capsys):
    run = tmp_path / "b"
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--norm-obs", "--total-timesteps", "128", "--lr", "1e-4",
                             "--init-from", str(source), "--run-dir", str(run)], capsys)
    assert code == 0, err
    assert f"proxima: starting from the policy of {source}/checkpoints/step_000000000256.pt (CartPole-v1, step 256)" in err
    assert "init_from: " + str(source) in (run / "config.yaml").read_text()
    assert load(run).global_step == 128  # its own steps, counted from 0
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "192", "--quiet"], capsys)
    assert code == 0, err
    assert "starting from the policy" not in err  # a resume reads the run's own weights
    assert load(run).global_step == 192


@pytest.mark.parametrize("flags, line", [
    (["--no-norm-obs"], "its network has norm_obs True, this run's False; give --norm-obs to start from it"),
    (["--norm-obs", "--hidden-sizes", "32,32"], "its network has hidden_sizes 64,64, this run's 32,32; give --hidden-sizes 64,64"),
    (["--norm-obs", "--activation", "relu"], "its network has activation tanh, this run's relu; give --activation tanh"),
])
def test_another_network_is_refused_naming_the_flag_and_nothing_is_written(source, tmp_path, capsys, flags, line):
    run = tmp_path / "x"
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, *flags, "--init-from", str(source), "--run-dir", str(run)], capsys)
    full = line if line.endswith("to start from it") else line + " to start from it"
    assert error_line(code, err) == f"proxima train: error: --init-from {source}: {full}"
    assert not run.exists()


def test_another_envs_spaces_are_refused(source, tmp_path, capsys):
    code, _, err = run_main(["train", "Acrobot-v1", *TINY_RUN, "--norm-obs", "--init-from", str(source),
                             "--run-dir", str(tmp_path / "x")], capsys)
    error_line(code, err, "its policy acts on the observation space Box(..., (4,), float32), and Acrobot-v1's is "
               "Box(..., (6,), float32); it can only start a run on an env of the same spaces")


def test_a_missing_path_is_refused_before_the_env_is_built_and_populations_refuse_the_flag(tmp_path, capsys):
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--init-from", str(tmp_path / "nope")], capsys)
    error_line(code, err, "no such file or directory (a checkpoint file or a run directory)")
    with pytest.raises(ConfigError, match=r"PPOConfig.init_from = .*no such file or directory"):
        from proxima import train

        train(_config(init_from=str(tmp_path / "nope")), run_dir=tmp_path / "y")
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--seeds", "1,2", "--init-from", str(tmp_path)], capsys)
    error_line(code, err, "--init-from is not supported with --seeds/--sweep")
