"""Populations record the preset a single run records (each member's meta.json "preset", population.json's "preset",
shown by `proxima report`), and take one --log-std-init for every member: each member starts with that log std, equal
to its single run's at init bit for bit; a sweep of it, a non-Box env and --init-from are still refused with one line."""

import json

import pytest
import torch

import proxima
from proxima import cli, presets
from proxima.config import PPOConfig
from proxima.population import Population, member_configs
from proxima.trainer import Trainer
from tests.cli_helpers import error_line, run_main

#: a Pendulum population of 2 envs x 16 steps per member: 32-step batches, 4 iterations
TINY = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1",
        "--no-progress", "--eval-episodes", "0", "--total-timesteps", "128"]


@pytest.fixture(scope="module")
def log_std_population(tmp_path_factory):
    """`proxima train Pendulum-v1 --seeds 0-1 --log-std-init -1` (the default preset applies): (exit code, stderr, RUN)."""
    run = tmp_path_factory.mktemp("pop") / "p"
    try:
        code = cli.main(["train", "Pendulum-v1", "--seeds", "0-1", "--log-std-init", "-1", *TINY, "--run-dir", str(run),
                         "--quiet"])
    except SystemExit as e:
        code = e.code
    return code, run


def _members(run):
    return sorted(d for d in run.iterdir() if d.is_dir() and d.name.startswith("m0"))


def test_every_members_meta_json_and_population_json_record_the_preset(log_std_population):
    code, run = log_std_population
    assert code == 0
    members = _members(run)
    assert [d.name for d in members] == ["m000-seed0", "m001-seed1"]
    for d in members:
        assert json.loads((d / "meta.json").read_text())["preset"] == "Pendulum-v1/default"
    assert json.loads((run / "population.json").read_text())["preset"] == "Pendulum-v1/default"


def test_report_of_a_population_and_of_a_member_shows_the_preset(log_std_population, tmp_path, capsys):
    _, run = log_std_population
    for target, out in ((run, tmp_path / "pop.md"), (run / "m001-seed1", tmp_path / "member.md")):
        code, _, err = run_main(["report", str(target), "--out", str(out)], capsys)
        assert code == 0, err
        assert "| preset | Pendulum-v1/default |" in out.read_text().splitlines()


def test_a_population_given_log_std_init_trains_each_member_from_it(log_std_population):
    code, run = log_std_population
    assert code == 0
    for d in _members(run):
        assert "log_std_init: -1.0" in (d / "config.yaml").read_text().splitlines()
        assert (d / "checkpoints").is_dir() and any((d / "checkpoints").glob("step_*.pt"))


def test_preset_none_is_recorded_as_none_in_every_member(tmp_path, capsys):
    run = tmp_path / "none"
    code, _, err = run_main(["train", "Pendulum-v1", "--preset", "none", "--seeds", "0-1", *TINY, "--run-dir", str(run),
                             "--quiet"], capsys)
    assert code == 0, err
    assert [json.loads((d / "meta.json").read_text())["preset"] for d in _members(run)] == ["none", "none"]
    assert json.loads((run / "population.json").read_text())["preset"] == "none"


def test_train_population_from_python_records_the_preset_and_takes_log_std_init(tmp_path):
    cfg = presets.resolve("Pendulum-v1", "default")
    cfg.log_std_init, cfg.num_envs, cfg.num_steps, cfg.num_minibatches = -0.5, 2, 16, 2
    cfg.update_epochs, cfg.total_timesteps, cfg.eval_episodes, cfg.progress, cfg.threads = 1, 64, 0, False, 1
    run = proxima.train_population(cfg, seeds=[3, 4], run_dir=tmp_path / "py", quiet=True).run_dir
    members = _members(run)
    assert len(members) == 2
    for d in members:
        assert json.loads((d / "meta.json").read_text())["preset"] == "Pendulum-v1/default"
        assert "log_std_init: -0.5" in (d / "config.yaml").read_text().splitlines()


def test_each_member_starts_as_its_single_run_with_that_log_std_bit_for_bit():
    cfg = PPOConfig(env_id="Pendulum-v1", log_std_init=-1.0, num_envs=2, num_steps=16, num_minibatches=2,
                    total_timesteps=64, progress=False, eval_episodes=0, threads=1)
    pop = Population(member_configs(cfg, [0, 1]))
    try:
        for k, seed in enumerate([0, 1]):
            member = pop.member_state_dict(k)
            assert torch.equal(member["actor_logstd"], torch.full((1, 1), -1.0))
            single = Trainer(member_configs(cfg, [seed])[0])
            try:
                want = single.agent.state_dict()
            finally:
                single.close()
            assert member.keys() == want.keys()
            for name in want:
                assert torch.equal(member[name], want[name]), (seed, name)
    finally:
        pop.close()


@pytest.mark.parametrize("sweep", [["--sweep", "log_std_init=-1,0"], ["--sweep", "log-std-init=-1,0"]])
@pytest.mark.parametrize("dry", [[], ["--dry-run"]])
def test_a_sweep_of_log_std_init_is_still_refused_saying_why(sweep, dry, tmp_path, capsys):
    code, _, err = run_main(["train", "Pendulum-v1", "--seeds", "1-2", *sweep, *TINY, *dry, "--run-dir",
                             str(tmp_path / "p")], capsys)
    assert error_line(code, err) == (
        "proxima train: error: --sweep log_std_init: one setting for every member of a population (not per member "
        "yet: each member starts from the one log_std_init given); give every member one with --log-std-init V, or "
        "train one population per value")
    assert not (tmp_path / "p").exists()
    with pytest.raises(proxima.ConfigError, match=r"^sweep=\{'log_std_init': \[\.\.\.\]\}: one setting for every "
                                                  r"member .*PPOConfig\(log_std_init=V\), or train one population per value$"):
        proxima.train_population(PPOConfig(env_id="Pendulum-v1"), seeds=[1, 2], sweep={"log_std_init": [-1.0, 0.0]})


@pytest.mark.parametrize("dry", [[], ["--dry-run"]])
def test_a_population_of_a_non_box_env_refuses_log_std_init_as_a_single_run(dry, tmp_path, capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "0-1", "--log-std-init", "-1", *TINY, *dry,
                             "--run-dir", str(tmp_path / "c")], capsys)
    assert error_line(code, err) == ("proxima train: error: --log-std-init -1: Box actions only (a Normal's log std); "
                                     "this env's action space is Discrete(2), which has none: drop --log-std-init")
    assert not (tmp_path / "c").exists()
    with pytest.raises(proxima.ConfigError, match=r"^log_std_init=-1: Box actions only .*: drop log_std_init$"):
        proxima.train_population(PPOConfig(env_id="CartPole-v1", log_std_init=-1.0, num_envs=2, num_steps=16,
                                            total_timesteps=64), seeds=[0, 1], run_dir=tmp_path / "c")
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("dry", [[], ["--dry-run"]])
def test_a_population_still_refuses_init_from_and_an_out_of_range_log_std_init(dry, log_std_population, tmp_path, capsys):
    _, run = log_std_population
    code, _, err = run_main(["train", "Pendulum-v1", "--seeds", "0-1", "--log-std-init", "-1", "--init-from",
                             str(run / "m000-seed0"), *TINY, *dry, "--run-dir", str(tmp_path / "i")], capsys)
    assert error_line(code, err) == ("proxima train: error: --init-from is not supported with --seeds/--sweep (not wired "
                                     "for populations yet: members start from fresh networks); drop it")
    code, _, err = run_main(["train", "Pendulum-v1", "--seeds", "0-1", "--log-std-init", "30", *TINY, *dry,
                             "--run-dir", str(tmp_path / "r")], capsys)
    assert error_line(code, err).endswith("--log-std-init 30.0: must be a number in [-20, 20] (the std is exp of it: "
                                          "-2 is std 0.14, 0 std 1)")
    assert not (tmp_path / "i").exists() and not (tmp_path / "r").exists()


def test_members_built_with_different_log_std_inits_are_refused_as_not_per_member_yet():
    from proxima.population import PER_MEMBER_FIELDS, check_members, check_sweep_field

    why = "is one setting for every member of a population (not per member yet)"
    with pytest.raises(proxima.ConfigError) as e:
        check_sweep_field("log_std_init")
    assert str(e.value).startswith(f"--sweep log_std_init: {why}; sweepable: ")
    members = [PPOConfig(env_id="Pendulum-v1", seed=1), PPOConfig(env_id="Pendulum-v1", seed=2, log_std_init=-1.0)]
    with pytest.raises(proxima.ConfigError) as e:
        check_members(members)
    assert str(e.value) == f"--sweep log_std_init: {why}; only {', '.join(PER_MEMBER_FIELDS)} can differ between members"
