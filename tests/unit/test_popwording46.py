"""What a proxima.train_population caller is told to do next names train_population's own call (not train()'s,
nor the command line's flags), and doing it works: a run directory that holds a population, train() given a
population, another env, a module env not trusted, other seeds or sweep, the report's 'More seeds', a population
that stopped before its first checkpoint, and --sweep norm_adv with minibatches of one sample."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import proxima
from cli_helpers import error_line, run_main
from proxima import ConfigError, PPOConfig
from proxima.checkpoint import CheckpointError, list_checkpoints
from proxima.envs.gym_adapter import UntrustedEnvError
from proxima.rundir import RunDirError

#: 2 envs x 16 steps, 2 iterations per member
TINY = dict(num_envs=2, num_steps=16, num_minibatches=2, update_epochs=1, threads=1, progress=False, eval_episodes=1)
#: a gymnasium env named as module:Class, which a resume imports only when told to
MODULE_ENV = "gymnasium.envs.classic_control:CartPoleEnv"


def _config(**kw) -> PPOConfig:
    return PPOConfig(**{"env_id": "CartPole-v1", "total_timesteps": 64, **TINY, **kw})


@pytest.fixture(scope="module")
def pop(tmp_path_factory) -> Path:
    """A population of seeds 1, 2 trained from Python to its end."""
    run = tmp_path_factory.mktemp("popwording46") / "pop"
    proxima.train_population(_config(), seeds=[1, 2], run_dir=run, quiet=True)
    return run


def _copy(run: Path, tmp_path: Path) -> Path:
    shutil.copytree(run, tmp_path / "copy")
    return tmp_path / "copy"


# --- 1. a run directory that holds a population -------------------------------------------------------------
def test_a_new_population_in_a_populations_directory_names_train_populations_calls(pop):
    with pytest.raises(RunDirError) as e:  # its own seeds: resume='auto' continues it
        proxima.train_population(_config(), seeds=[1, 2], run_dir=pop, quiet=True)
    assert str(e.value) == (
        f"{pop} is not empty (checkpoints, m000-seed1, m001-seed2, population.json...): it holds another population; "
        f"continue it with train_population(..., resume='auto') (or proxima.train_population(None, resume='{pop}')), "
        "start over with train_population(..., overwrite=True) (the old directory is moved aside), or give "
        "train_population() another run_dir")
    result = proxima.train_population(None, resume=str(pop), quiet=True)  # the call named continues it
    assert [m.seed for m in result.members] == [1, 2]
    with pytest.raises(RunDirError, match=r"seeds=\[5\], run_dir=.*overwrite=True"):  # others: test_popsmall47
        proxima.train_population(_config(), seeds=[5], run_dir=pop, quiet=True)


def test_train_given_a_populations_directory_names_the_populations_resume_from_python(pop):
    with pytest.raises(CheckpointError) as e:
        proxima.train(_config(), run_dir=pop, resume="auto", quiet=True)
    assert str(e.value) == (f"{pop / 'checkpoints' / 'step_000000000064.pt'}: a population checkpoint (--seeds/--sweep); "
                            f"resume the whole population: proxima.train_population(None, resume='{pop}')")


def test_a_new_run_of_train_in_a_populations_directory_names_the_populations_resume_not_trains(pop):
    with pytest.raises(RunDirError) as e:
        proxima.train(_config(), run_dir=pop, quiet=True)
    assert str(e.value).endswith(
        f": it holds a population; continue it with proxima.train_population(None, resume='{pop}'), start over with "
        "train(..., overwrite=True) (the old directory is moved aside), or give train() another run_dir")


# --- 2. another env on a resume ---------------------------------------------------------------------------
def test_another_env_on_a_population_resume_names_train_population(pop):
    with pytest.raises(ConfigError) as e:
        proxima.train_population(_config(env_id="Acrobot-v1"), seeds=[1, 2], run_dir=pop, resume="auto", quiet=True)
    assert str(e.value) == (f"{pop / 'checkpoints' / 'step_000000000064.pt'}: the run trains 'CartPole-v1', not "
                            "env_id='Acrobot-v1'; a resume continues the same env: give train_population() another "
                            "run_dir for a new 'Acrobot-v1' run")


# --- 3. a recorded module:Class env, resumed from Python --------------------------------------------------
def test_a_module_env_population_resumed_from_python_names_the_config_and_trust_run_which_work(tmp_path):
    run = tmp_path / "modpop"
    proxima.train_population(_config(env_id=MODULE_ENV, total_timesteps=32), seeds=[1], run_dir=run, quiet=True)
    with pytest.raises(UntrustedEnvError) as e:
        proxima.train_population(None, resume=run, quiet=True)
    assert str(e.value).endswith(
        f"not done for an env id read from a file: name it in train_population()'s config, PPOConfig(env_id="
        f"'{MODULE_ENV}') (train_population takes no env_id), if you trust that module (or trust_run=True to trust "
        "this run's files)")
    assert "--env" not in str(e.value) and "proxima resume" not in str(e.value)
    proxima.train_population(PPOConfig(env_id=MODULE_ENV, total_timesteps=64), resume=run, quiet=True)
    assert [p.name for p in list_checkpoints(run)][-1] == "step_000000000064.pt"
    proxima.train_population(PPOConfig(total_timesteps=96), resume=run, trust_run=True, quiet=True)
    assert [p.name for p in list_checkpoints(run)][-1] == "step_000000000096.pt"


def test_a_module_env_run_resumed_by_train_names_env_id_and_trust_run_which_work(tmp_path):
    run = tmp_path / "modrun"
    proxima.train(_config(env_id=MODULE_ENV, total_timesteps=32), run_dir=run, quiet=True)
    with pytest.raises(UntrustedEnvError) as e:
        proxima.train(None, resume=run, quiet=True)
    assert str(e.value).endswith(f"not done for an env id read from a file: give train() env_id='{MODULE_ENV}' if you "
                                 "trust that module (or trust_run=True to trust this run's files)")
    proxima.train(None, resume=run, env_id=MODULE_ENV, quiet=True, overrides={"total_timesteps": 64})
    assert [p.name for p in list_checkpoints(run)][-1] == "step_000000000064.pt"


def test_a_module_env_resumed_on_the_command_line_still_names_its_flags(tmp_path, capsys):
    run = tmp_path / "modrun"
    proxima.train(_config(env_id=MODULE_ENV, total_timesteps=32), run_dir=run, quiet=True)
    code, _, err = run_main(["resume", str(run)], capsys)
    error_line(code, err, f"pass --env {MODULE_ENV} to `proxima resume`", "(or --trust-run")


# --- 4. other seeds or sweep on a resume ------------------------------------------------------------------
def test_other_seeds_on_a_resume_from_python_name_seeds_as_python_writes_them(pop):
    with pytest.raises(ConfigError) as e:
        proxima.train_population(_config(), seeds=[1, 3], run_dir=pop, resume="auto", quiet=True)
    assert str(e.value) == (f"seeds=[1, 3]: {pop} trains seeds [1, 2]; resume continues the same members: give "
                            "seeds=[1, 2] (or leave seeds out)")
    with pytest.raises(ConfigError, match=r"^seeds=\[1, 2, 3, 4, 5, 6, 7, \.\.\., 12\]: .* give seeds=\[1, 2\] "):
        proxima.train_population(_config(), seeds=range(1, 13), run_dir=pop, resume="auto", quiet=True)


def test_a_sweep_on_a_resume_from_python_names_sweep_as_python_writes_it(pop):
    with pytest.raises(ConfigError) as e:
        proxima.train_population(_config(), seeds=[1, 2], sweep={"lr": [1e-3, 3e-4]}, run_dir=pop, resume="auto",
                                 quiet=True)
    assert str(e.value) == (f"sweep={{'lr': [0.001, 0.0003]}}: {pop} was trained with no sweep (seeds only); resume "
                            "continues the same members: leave sweep out")


def test_a_resume_on_the_command_line_keeps_the_flags_words(pop, capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1,3", "--resume", "auto", "--run-dir", str(pop)], capsys)
    line = error_line(code, err)
    assert line.endswith(f"--seeds: {pop} trains seeds 1,2, not 1,3; resume continues the same members: give --seeds 1,2")


# --- 5. the report's More seeds ---------------------------------------------------------------------------
def test_more_seeds_of_a_python_population_names_a_train_population_call_that_trains_the_pool(pop, tmp_path, capsys):
    run = _copy(pop, tmp_path)
    code, _, err = run_main(["report", str(run)], capsys)
    assert code == 0, err
    section = (run / "report.md").read_text().partition("## More seeds")[2]
    new = tmp_path / "copy-seeds3-10"
    config = repr(str(run / "m000-seed1" / "config.yaml"))
    call = (f"proxima.train_population(proxima.config.from_dict(proxima.config.load_config_file({config})), "
            f"seeds=range(3, 11), run_dir={str(new)!r})")
    assert f"- from Python: `{call}` (the config of m000-seed1, whose seed and swept values each member " \
           "replaces)" in section
    assert "population.json with" not in section  # the file holds no command to edit
    eval(call.replace("run_dir=", "quiet=True, run_dir="))  # the call as printed trains the next seeds
    report = re.search(r"pool them with these .*?: `proxima (.*?)`", section).group(1).split()
    assert report == ["report", f"{run}+{new}", "--out", f"{tmp_path / 'copy-seeds1-10'}.md"]
    code, _, err = run_main(report, capsys)
    assert code == 0, err
    assert "10 members (10 seeds x 1 setting), pooled from 2 populations" in (tmp_path / "copy-seeds1-10.md").read_text()


# --- 6. a population that stopped before its first checkpoint ---------------------------------------------
def test_a_python_population_stopped_before_its_first_checkpoint_names_its_python_call(pop, tmp_path):
    run = _copy(pop, tmp_path)
    for folder in (run, run / "m000-seed1", run / "m001-seed2"):  # as a kill before the first checkpoint leaves it
        shutil.rmtree(folder / "checkpoints")
    with pytest.raises(CheckpointError) as e:
        proxima.load(run / "m000-seed1")
    line = str(e.value)
    assert line.startswith(f"{run / 'm000-seed1'}: the population stopped before its first checkpoint "), line
    # (its script, pytest's argv here, follows the call only when short: population_run._python_call)
    assert f"; the population is {run}; train it again from Python: proxima.train_population(...)" in line
    assert line.endswith(f", with run_dir={str(run)!r}, overwrite=True (the old directory is moved aside)")
    assert "--overwrite" not in line and "its command" not in line
    result = proxima.train_population(_config(), seeds=[1, 2], run_dir=run, overwrite=True, quiet=True)
    assert proxima.load(result.members[0].dir).env_id == "CartPole-v1"


# --- 7. --sweep norm_adv with minibatches of one sample ---------------------------------------------------
SMALL = ["--num-envs", "1", "--num-steps", "4", "--num-minibatches", "4", "--total-timesteps", "8"]


@pytest.mark.parametrize("values", ["true,false", "false,true", "true"])
def test_a_norm_adv_sweep_with_one_sample_minibatches_advises_what_the_sweep_takes(tmp_path, capsys, values):
    argv = ["train", "CartPole-v1", "--seeds", "1", "--run-dir", str(tmp_path / "p"), *SMALL, "--sweep"]
    code, _, err = run_main([*argv, f"norm_adv={values}"], capsys)
    line = error_line(code, err)
    assert line.endswith("--num-minibatches 4: gives minibatches of 1 sample; advantage normalization needs at least 2 "
                         "(lower --num-minibatches, or sweep norm_adv=false alone)"), line
    assert "--no-norm-adv" not in line
    code, _, err = run_main([*argv, "norm_adv=false", "--dry-run"], capsys)  # the advice, followed
    assert code == 0, err
    code, _, err = run_main([*argv, f"norm_adv={values}", "--num-minibatches", "2", "--dry-run"], capsys)
    assert code == 0, err


@pytest.mark.parametrize("values", [[True, False], [False, True], [True]])
def test_a_norm_adv_sweep_from_python_advises_in_python_words(tmp_path, values):
    config = PPOConfig(num_envs=1, num_steps=4, num_minibatches=4, total_timesteps=8, norm_adv=False)
    with pytest.raises(ConfigError) as e:
        proxima.train_population(config, seeds=[1], sweep={"norm_adv": values}, run_dir=tmp_path / "p", quiet=True)
    assert str(e.value) == ("PPOConfig.num_minibatches = 4: gives minibatches of 1 sample; advantage normalization needs "
                            "at least 2 (lower num_minibatches, or sweep norm_adv over [False] alone)")
    assert not (tmp_path / "p").exists()


def test_a_single_run_with_one_sample_minibatches_still_advises_no_norm_adv(capsys, tmp_path):
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(tmp_path / "r"), *SMALL], capsys)
    error_line(code, err, "(lower --num-minibatches, or add --no-norm-adv)")
