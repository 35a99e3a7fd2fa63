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
    values = dict(env_id="CartPole-v1", num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1, threads=1,
                  progress=False, eval_episodes=0, norm_obs=True, total_timesteps=128)
    return PPOConfig(**{**values, **kw})


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
    # the file loaded, absolute: the source's newest checkpoint changes as that run is extended
    assert f"init_from: {source}/checkpoints/step_000000000256.pt\n" in (run / "config.yaml").read_text()
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
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, *flags, "--total-timesteps", "64", "--init-from", str(source),
                             "--run-dir", str(run)], capsys)
    full = line if line.endswith("to start from it") else line + " to start from it"
    assert error_line(code, err) == f"proxima train: error: --init-from {source}: {full}"
    assert not run.exists()


def test_another_envs_spaces_are_refused(source, tmp_path, capsys):
    code, _, err = run_main(["train", "Acrobot-v1", *TINY_RUN, "--norm-obs", "--total-timesteps", "64", "--init-from",
                             str(source), "--run-dir", str(tmp_path / "x")], capsys)
    error_line(code, err, "its policy acts on the observation space Box(..., (4,), float32), and Acrobot-v1's is "
               "Box(..., (6,), float32); it can only start a run on an env of the same spaces")


def test_a_missing_path_is_refused_before_the_env_is_built_and_populations_refuse_the_flag(tmp_path, capsys):
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--init-from",
                             str(tmp_path / "nope")], capsys)
    error_line(code, err, "no such file or directory (a checkpoint file or a run directory)")
    with pytest.raises(ConfigError, match=r"PPOConfig.init_from = .*no such file or directory"):
        from proxima import train

        train(_config(init_from=str(tmp_path / "nope")), run_dir=tmp_path / "y")
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--seeds", "1,2", "--init-from",
                             str(tmp_path)], capsys)
    error_line(code, err, "--init-from is not supported with --seeds/--sweep")


def _source_file(source) -> str:
    return str(source / "checkpoints" / "step_000000000256.pt")


def test_the_run_records_the_absolute_checkpoint_file_and_replays_from_another_directory(source, tmp_path, capsys,
                                                                                       monkeypatch):
    import json

    monkeypatch.chdir(source.parent)
    run = tmp_path / "b"
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--norm-obs", "--total-timesteps", "64",
                             "--init-from", source.name, "--run-dir", str(run), "--quiet"], capsys)  # relative, as typed
    assert code == 0, err
    assert "starting from" not in err  # --quiet
    assert f"init_from: {_source_file(source)}\n" in (run / "config.yaml").read_text()
    assert json.loads((run / "meta.json").read_text())["init_from"] == {
        "checkpoint": _source_file(source), "global_step": 256, "env_id": "CartPole-v1"}
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    assert f"| started from | {_source_file(source)} (step 256 of CartPole-v1) |" in (run / "report.md").read_text()
    monkeypatch.chdir(tmp_path)  # where runs/src names nothing: the file's path still does
    code, out, err = run_main(["train", "--config", str(run / "config.yaml"), "--run-dir", str(tmp_path / "again"),
                               "--dry-run"], capsys)
    assert code == 0, err
    assert f"init_from: {_source_file(source)}" in out


def test_the_dry_run_prints_the_checkpoint_file_the_run_records(source, tmp_path, capsys, monkeypatch):
    import yaml

    monkeypatch.chdir(source.parent)
    argv = ["train", "CartPole-v1", *TINY_RUN, "--norm-obs", "--total-timesteps", "64", "--init-from", source.name,
            "--run-dir", str(tmp_path / "b"), "--quiet"]  # a run directory, relative, as typed
    code, out, err = run_main([*argv, "--dry-run"], capsys)
    assert code == 0, err
    code, _, err = run_main(argv, capsys)
    assert code == 0, err
    recorded = yaml.safe_load((tmp_path / "b" / "config.yaml").read_text())
    assert recorded["init_from"] == _source_file(source)
    assert yaml.safe_load(out) == recorded


def test_a_checkpoint_inside_the_run_directory_the_new_run_takes_is_refused(source, tmp_path, capsys):
    import shutil

    own = tmp_path / "self"
    shutil.copytree(source, own)
    for dry in ([], ["--dry-run"]):
        code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--norm-obs", "--total-timesteps", "64", "--init-from",
                                 str(own), "--run-dir", str(own), "--overwrite", *dry], capsys)
        assert error_line(code, err) == (f"proxima train: error: --init-from {own}: {own}/checkpoints/step_000000000256.pt "
                                         f"is inside --run-dir {own}, which this new run takes; copy the checkpoint out of "
                                         "it, or give another --run-dir")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["self"]  # --overwrite moved nothing aside


@pytest.mark.parametrize("flags, given, line", [
    (["Acrobot-v1", "--norm-obs"], "{source}", "its policy acts on the observation space Box(..., (4,), float32), and "
     "Acrobot-v1's is Box(..., (6,), float32); it can only start a run on an env of the same spaces"),
    (["CartPole-v1", "--no-norm-obs"], "{source}", "its network has norm_obs True, this run's False; give --norm-obs to "
     "start from it"),
    (["CartPole-v1", "--norm-obs"], "{source}/config.yaml", "{source}/config.yaml: not a Proxima checkpoint"),
    (["CartPole-v1", "--norm-obs"], "{empty}", "{empty}: not a Proxima run directory (no checkpoints/step_*.pt inside)"),
])
def test_the_dry_run_checks_the_checkpoint_as_the_run_would(source, tmp_path, capsys, flags, given, line):
    empty = tmp_path / "empty"
    empty.mkdir()
    given = given.format(source=source, empty=empty)
    code, out, err = run_main(["train", flags[0], *TINY_RUN, *flags[1:], "--init-from", given, "--dry-run"], capsys)
    line = line.format(source=source, empty=empty)
    assert error_line(code, err).startswith(f"proxima train: error: --init-from {given}: {line}")
    assert out == ""


def test_the_checkpoints_folder_is_read_as_its_run(source, tmp_path, capsys):
    run = tmp_path / "b"
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--norm-obs", "--total-timesteps", "64",
                             "--init-from", str(source / "checkpoints"), "--run-dir", str(run)], capsys)
    assert code == 0, err
    assert f"starting from the policy of {_source_file(source)} (CartPole-v1, step 256)" in err


def test_python_refusals_name_the_fields_as_a_python_caller_sets_them(source, tmp_path):
    from proxima import train

    cfg = _config(init_from=str(source))
    cfg.norm_obs = False
    with pytest.raises(ConfigError, match=r"^PPOConfig.init_from = '.*': its network has norm_obs True, this run's False; "
                                          r"give norm_obs=True to start from it$"):
        train(cfg, run_dir=tmp_path / "a", quiet=True)
    with pytest.raises(ConfigError, match=r"its network has hidden_sizes \[64, 64\], this run's \[32, 32\]; give "
                                          r"hidden_sizes=\[64, 64\] to start from it$"):
        train(_config(init_from=str(source), hidden_sizes=[32, 32]), run_dir=tmp_path / "b", quiet=True)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_resume_with_init_from_says_none_and_how_to_start_a_new_run_from_it(source, tmp_path, capsys):
    run = tmp_path / "b"
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--norm-obs", "--total-timesteps", "64", "--run-dir",
                             str(run), "--quiet"], capsys)
    assert code == 0, err
    code, _, err = run_main(["resume", str(run), "--init-from", str(source)], capsys)
    assert error_line(code, err) == (f"proxima resume: error: --init-from {source}: a resume continues from the run's own "
                                     "checkpoints (the run was trained with --init-from none); to start a new run from "
                                     f"that policy: proxima train CartPole-v1 --init-from {source} --run-dir NEW_DIR")
    from proxima import train

    with pytest.raises(ConfigError, match=r"^PPOConfig.init_from = '.*': a resume continues from the run's own checkpoints "
                                          r"\(the run was trained with init_from=None\); to start a new run from that "
                                          r"policy: train\(PPOConfig\(env_id='CartPole-v1', init_from='.*', \.\.\.\), "
                                          r"run_dir=NEW_DIR\)$"):
        train(_config(init_from=str(source)), resume=run, quiet=True)


def test_a_rerun_of_the_same_script_with_resume_auto_resumes_from_its_own_checkpoint(source, tmp_path, capsys):
    """The run records the file it loaded; the script names the source directory (relative or not) again."""
    from proxima import train

    cfg = _config(init_from=str(source), total_timesteps=128, checkpoint_every=1)
    train(cfg, run_dir=tmp_path / "b", quiet=True, evaluate_at_end=False, callback=lambda row: row["iteration"] < 1)
    _, policy = train(cfg, run_dir=tmp_path / "b", resume="auto", quiet=True, evaluate_at_end=False)
    assert policy.global_step == 128


def test_an_env_object_or_class_as_env_id_is_a_config_error_naming_the_field(tmp_path, monkeypatch):
    import gymnasium as gym

    monkeypatch.chdir(tmp_path)  # the default run directory, runs/..., would be named here
    from proxima import train
    from proxima.envs.classic import CartPole

    env = gym.make("CartPole-v1")
    try:
        with pytest.raises(ConfigError, match=r"^PPOConfig.env_id = <TimeLimit.*: takes an env id string \('CartPole-v1'\) or "
                                              r"'module:Class', not an env object: the run builds its own envs; give its id "
                                              r"'CartPole-v1'$"):
            train(_config(env_id=env), quiet=True)
    finally:
        env.close()
    with pytest.raises(ConfigError, match=r"not the class itself; give 'proxima.envs.classic:CartPole'$"):
        train(_config(env_id=CartPole), quiet=True)
    assert not (tmp_path / "runs").exists()


def test_a_resume_and_its_dry_run_do_not_need_the_source_any_more(source, tmp_path, capsys):
    import shutil

    copy, run = tmp_path / "src", tmp_path / "b"
    shutil.copytree(source, copy)
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--norm-obs", "--total-timesteps", "64", "--init-from",
                             str(copy), "--run-dir", str(run), "--quiet"], capsys)
    assert code == 0, err
    shutil.rmtree(copy)  # its init_from is history: the run goes on from its own checkpoints
    code, out, err = run_main(["train", "--resume", str(run), "--total-timesteps", "128", "--dry-run"], capsys)
    assert code == 0, err
    assert "total_timesteps: 128" in out
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "128"], capsys)  # not --quiet: no start line to hide
    assert code == 0, err
    assert "starting from" not in err and "resuming" in err
    assert load(run).global_step == 128
    from proxima import train

    _, policy = train(_config(total_timesteps=192), resume=run, quiet=True, evaluate_at_end=False)
    assert policy.global_step == 192


#: envs of one kind but for the named part: 40x40 images (the cnn encoder's default), action bounds
ENVS = '''
import gymnasium as gym
import numpy as np


class Image(gym.Env):
    observation_space = gym.spaces.Box(0, 255, (40, 40, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros((40, 40, 3), np.uint8), {}

    def step(self, action):
        self.t += 1
        return np.full((40, 40, 3), self.t, np.uint8), 1.0, self.t >= 8, False, {}


class Unit(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 1.0, self.t >= 8, False, {}


class Double(Unit):
    action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
'''

SHORT = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--eval-episodes", "0",
         "--no-progress", "--threads", "1", "--total-timesteps", "32"]


@pytest.fixture
def envs(tmp_path, monkeypatch):
    from tests.cli_helpers import module_written_in

    yield from module_written_in(tmp_path, monkeypatch, "initfrom35_envs", ENVS)


def test_an_mlp_checkpoint_on_an_image_env_is_refused_naming_the_encoder_flag(envs, tmp_path, capsys):
    code, _, err = run_main(["train", "initfrom35_envs:Image", *SHORT, "--encoder", "mlp", "--run-dir", "a", "--quiet"], capsys)
    assert code == 0, err
    code, _, err = run_main(["train", "initfrom35_envs:Image", *SHORT, "--init-from", "a", "--run-dir", "b"], capsys)
    assert error_line(code, err) == ("proxima train: error: --init-from a: its network has encoder mlp, this run's cnn; "
                                     "give --encoder mlp to start from it")
    assert not (tmp_path / "b").exists()


def test_action_spaces_that_differ_only_in_their_bounds_are_refused_showing_both(envs, tmp_path, capsys):
    # the actions a policy learned are offset and clipped by its bounds: on other ones it would act otherwise
    code, _, err = run_main(["train", "initfrom35_envs:Unit", *SHORT, "--run-dir", "a", "--quiet"], capsys)
    assert code == 0, err
    code, _, err = run_main(["train", "initfrom35_envs:Double", *SHORT, "--init-from", "a", "--run-dir", "b"], capsys)
    assert error_line(code, err) == (
        "proxima train: error: --init-from a: its policy acts on the action space Box(-1.0, 1.0, (1,), float32), and "
        "initfrom35_envs:Double's is Box(-2.0, 2.0, (1,), float32); it can only start a run on an env of the same spaces")
    assert not (tmp_path / "b").exists()


def test_a_population_directory_is_refused_naming_a_members(tmp_path, capsys):
    from tests.cli_helpers import TINY_POP

    pop = tmp_path / "pop"
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1,2", *TINY_POP, "--eval-episodes", "0", "--total-timesteps",
                             "32", "--run-dir", str(pop), "--quiet"], capsys)
    assert code == 0, err
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--init-from", str(pop),
                             "--run-dir", str(tmp_path / "b")], capsys)
    assert error_line(code, err) == (f"proxima train: error: --init-from {pop}: a population's checkpoint holds many members; "
                                     "give one member's run directory (RUN/m000-seed1 ...)")


def test_a_source_without_norm_obs_names_the_no_flag_and_an_older_checkpoint_without_encoder_is_an_mlp(tmp_path, capsys):
    plain = tmp_path / "plain"
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(plain), "--quiet"],
                            capsys)
    assert code == 0, err
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--norm-obs", "--total-timesteps", "64", "--init-from",
                             str(plain), "--run-dir", str(tmp_path / "x")], capsys)
    error_line(code, err, "its network has norm_obs False, this run's True; give --no-norm-obs to start from it")
    # a checkpoint written before the encoder field existed: its network is an MLP, as this run's
    old = tmp_path / "old.pt"
    state = torch.load(plain / "checkpoints" / "step_000000000064.pt", weights_only=True)
    del state["config"]["encoder"]
    torch.save(state, old)
    code, _, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--init-from", str(old),
                             "--run-dir", str(tmp_path / "b")], capsys)
    assert code == 0, err
    assert f"starting from the policy of {old} (CartPole-v1, step 64)" in err


def test_a_path_object_as_init_from_starts_the_run_and_config_yaml_records_text(source, tmp_path):
    from pathlib import Path

    from proxima import train

    _, policy = train(_config(init_from=Path(source), total_timesteps=64), run_dir=tmp_path / "b", quiet=True,
                      evaluate_at_end=False)
    assert policy.global_step == 64
    assert f"init_from: {_source_file(source)}\n" in (tmp_path / "b" / "config.yaml").read_text()  # a str, not !!python/object
