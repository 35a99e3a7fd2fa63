"""proxima.train_population, what mutation testing of the Python population API found untested: refusals of
seeds and sweep in Python's words, PopulationResult.read of an edited population.json, settings_table's
threshold, paths with ~, the resume paths (resume='auto' with a config, a checkpoint file, a single run, a
run with no checkpoint), and the keyword arguments train_population passes on (overwrite, evaluate_at_end,
trust_run)."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

import proxima
from cli_helpers import TINY_POP, error_line, run_main
from proxima import ConfigError, PPOConfig, TrainingInterrupted
from proxima.checkpoint import CheckpointError
from proxima.population_run import PopulationResult, seeds_given, sweep_given
from proxima.rundir import RunDirError

#: 2 envs x 16 steps: 32 steps an iteration per member
TINY = dict(env_id="CartPole-v1", num_envs=2, num_steps=16, num_minibatches=2, update_epochs=1, threads=1, progress=False)
SWEEP = {"lr": [3e-4, 1e-3]}


def _config(**kw) -> PPOConfig:
    return PPOConfig(**{**TINY, "total_timesteps": 32, "eval_episodes": 0, **kw})


def _steps(run: Path) -> list:
    return [int(p.stem.split("_")[1]) for p in sorted((run / "checkpoints").glob("step_*.pt"))]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A 4-member population (seeds 1, 2 x lr 3e-4, 1e-3) of one iteration, evaluated (2 episodes each), from a
    config that sets seed and lr to values other than the defaults; tests copy it before changing it."""
    run = tmp_path_factory.mktemp("papi46") / "pop"
    proxima.train_population(_config(seed=7, lr=5e-4, eval_episodes=2), seeds=[1, 2], sweep=SWEEP, run_dir=run, quiet=True)
    return run


def _copy(base: Path, tmp_path: Path, name: str = "pop") -> Path:
    shutil.copytree(base, tmp_path / name)
    return tmp_path / name


# --- seeds and sweep ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seeds", [{1, 2}, frozenset([3])])
def test_a_set_of_seeds_is_refused_as_unordered(seeds):
    with pytest.raises(ConfigError) as info:
        seeds_given(seeds)
    assert str(info.value) == ("seeds: expected a range, list or tuple of integer seeds (e.g. seeds=range(1, 11) or "
                               f"seeds=[1, 5, 9]), got {type(seeds).__name__}")


def test_a_refusal_shows_eight_seeds_whole_and_elides_a_longer_list():
    with pytest.raises(ConfigError) as info:
        seeds_given([1, 2, 3, 4, 5, 6, 7, 1])
    assert str(info.value) == "seeds=[1, 2, 3, 4, 5, 6, 7, 1]: a seed is repeated"
    with pytest.raises(ConfigError) as info:
        seeds_given([1, 2, 3, 4, 5, 6, 7, 8, 9, 1])
    assert str(info.value) == "seeds=[1, 2, 3, 4, 5, 6, 7, ..., 1]: a seed is repeated"


def test_the_most_members_is_allowed_and_one_more_refused(monkeypatch):
    monkeypatch.setattr("proxima.population.MAX_MEMBERS", 3)
    assert seeds_given(range(3)) == [0, 1, 2]
    with pytest.raises(ConfigError) as info:
        seeds_given(range(4))
    assert str(info.value) == "seeds: 4 seeds; a population holds at most 3"


@pytest.mark.parametrize("sweep, line", [
    ({"lr": ["1e-3,3e-4"]}, "sweep['lr']: value '1e-3,3e-4': expected a number; give the values as a list, "
                            "e.g. sweep={'lr': [3e-4, 1e-3]}"),
    ({"lr": "1e-3,3e-4"}, "sweep['lr']: expected a list of values, got '1e-3,3e-4'; e.g. sweep={'lr': [3e-4, 1e-3]}"),
    ({1: [0.1]}, "sweep: key 1: expected a field name (e.g. sweep={'lr': [3e-4, 1e-3]})"),
    ({"lr": [True]}, "sweep={'lr': [True]}: value True: expected a number"),
])
def test_sweep_refusals_name_the_value_the_script_gave(sweep, line):
    with pytest.raises(ConfigError) as info:
        sweep_given(sweep)
    assert str(info.value) == line


def test_sweep_values_round_trip_exactly_and_integers_pick_a_switch():
    import numpy as np

    third = 1 / 3
    assert sweep_given({"lr": [2.5e-7, np.float64(third)]}) == {"lr": [2.5e-7, third]}
    assert sweep_given({"lr": [2.5e-7, np.float64(third)]})["lr"][1] == third  # not 0.333333
    assert sweep_given({"norm_adv": [1, 0]}) == {"norm_adv": [True, False]}


# --- PopulationResult ----------------------------------------------------------------------------------------------

def _edit(run: Path, edit) -> None:
    doc = json.loads((run / "population.json").read_text())
    edit(doc)
    (run / "population.json").write_text(json.dumps(doc))


def test_read_keeps_only_a_number_as_eval_mean_and_a_dict_as_diverged(base, tmp_path):
    run = _copy(base, tmp_path)

    def edit(doc):
        doc["member_dirs"][0]["eval_mean_return"] = True
        doc["member_dirs"][1]["diverged"] = "yes"
        doc["member_dirs"][2]["eval_mean_return"] = 12

    _edit(run, edit)
    members = PopulationResult.read(run).members
    assert members[0].eval_mean_return is None
    assert members[1].diverged is None
    assert members[2].eval_mean_return == 12.0 and isinstance(members[2].eval_mean_return, float)


@pytest.mark.parametrize("edit", [
    lambda doc: doc["member_dirs"][1].update(seed="2"),
    lambda doc: doc["member_dirs"][1].update(settings=["lr", 1e-3]),
    lambda doc: doc["member_dirs"][1].update(dir="../elsewhere"),
    lambda doc: doc.update(member_dirs={"m000": {"dir": "m000-seed1-lr0.0003", "seed": 1}}),
], ids=["seed-text", "settings-list", "dir-outside", "member-dirs-dict"])
def test_read_refuses_an_edited_member_entry_naming_the_file(base, tmp_path, edit):
    run = _copy(base, tmp_path)
    _edit(run, edit)
    with pytest.raises(CheckpointError) as info:
        PopulationResult.read(run)
    message = str(info.value)
    assert message.startswith(f"{run / 'population.json'}: member_dirs holds "), message
    assert message.endswith("where a member entry (dir, seed, settings) belongs; the population's population.json was "
                            "damaged or edited"), message


def test_settings_table_counts_the_members_at_or_above_the_threshold(base):
    result = PopulationResult.read(base)
    means = [m.eval_mean_return for m in result.members]
    threshold = max(means)
    rows = result.settings_table(threshold=threshold)
    for row, members in zip(rows, (means[:2], means[2:])):
        reached = sum(value >= threshold for value in members)
        assert row["solved_count"] == reached and row["solved"] == reached / 2
    assert sum(row["solved_count"] for row in rows) >= 1
    assert [row["solved"] for row in result.settings_table()] == [None, None]


# --- a new population ----------------------------------------------------------------------------------------------

def test_a_config_and_run_dir_under_home_are_expanded_and_the_config_left_as_given(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    config = _config(run_dir="~/from_config")
    result = proxima.train_population(config, seeds=[1], quiet=True)
    assert result.run_dir == tmp_path / "home" / "from_config"
    assert (tmp_path / "home" / "from_config" / "population.json").is_file()
    assert config.run_dir == "~/from_config"  # the caller's config, not the expanded copy
    result = proxima.train_population(_config(), seeds=[1], run_dir="~/from_arg", quiet=True)
    assert Path(result.run_dir) == tmp_path / "home" / "from_arg"
    assert (tmp_path / "home" / "from_arg" / "m000-seed1" / "config.yaml").is_file()
    assert not (tmp_path / "~").exists()


def test_without_seeds_the_configs_seed_trains(tmp_path):
    result = proxima.train_population(_config(seed=7), run_dir=tmp_path / "pop", quiet=True)
    assert [(m.dir.name, m.seed) for m in result.members] == [("m000-seed7", 7)]
    with pytest.raises(ConfigError) as info:
        proxima.train_population(_config(seed=None), run_dir=tmp_path / "none", quiet=True)
    assert str(info.value) == ("train_population(seeds=None): PPOConfig.seed is None too; give the members' seeds, "
                               "e.g. seeds=range(1, 11)")
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize("kw, line", [
    (dict(config=None), "train_population(config): expected a PPOConfig (PPOConfig(...) or proxima.presets.resolve(...)), "
                        "got None; train_population(None, resume=RUN_DIR) continues a population with its recorded config"),
    (dict(run_dir=" "), "train_population(run_dir=' '): empty; give a directory (or None)"),
    (dict(resume=""), "train_population(resume=''): empty; give a directory (or None)"),
])
def test_refused_arguments_raise_one_line(tmp_path, monkeypatch, kw, line):
    monkeypatch.chdir(tmp_path)
    kw = {"config": _config(), "seeds": [1], **kw}
    with pytest.raises(ConfigError) as info:
        proxima.train_population(kw.pop("config"), quiet=True, **kw)
    assert str(info.value) == line
    assert os.listdir(tmp_path) == []


def test_evaluate_at_end_false_writes_no_eval(tmp_path):
    result = proxima.train_population(_config(eval_episodes=2), seeds=[1], run_dir=tmp_path / "pop", quiet=True,
                                      evaluate_at_end=False)
    assert [m.eval_mean_return for m in result.members] == [None]
    assert not (tmp_path / "pop" / "m000-seed1" / "eval.json").exists()


def test_overwrite_true_moves_the_old_directory_aside_and_trains(tmp_path):
    (tmp_path / "pop").mkdir()
    (tmp_path / "pop" / "notes.txt").write_text("mine")
    result = proxima.train_population(_config(), seeds=[1], run_dir=tmp_path / "pop", quiet=True, overwrite=True)
    assert [m.seed for m in result.members] == [1] and _steps(tmp_path / "pop") == [32]
    assert not (tmp_path / "pop" / "notes.txt").exists()
    [aside] = [p for p in tmp_path.iterdir() if p.name != "pop"]
    assert (aside / "notes.txt").read_text() == "mine"


def test_a_preset_total_that_is_not_whole_iterations_is_not_noted(tmp_path, monkeypatch, capsys):
    """The default 500,000 steps over 48-step batches: the config's own total, not one the script set (as
    train() leaves a preset's total unnoted); one iteration trains, then Ctrl-C."""
    from proxima.population import Population

    step = Population.train_iteration

    def interrupted(self):
        out = step(self)
        os.kill(os.getpid(), signal.SIGINT)
        return out

    monkeypatch.setattr(Population, "train_iteration", interrupted)
    config = PPOConfig(**{**TINY, "num_envs": 3, "num_minibatches": 2, "eval_episodes": 0})
    assert config.total_timesteps % 48
    with pytest.raises(TrainingInterrupted):
        proxima.train_population(config, seeds=[1], run_dir=tmp_path / "pop", quiet=True)
    assert "is not a multiple of the batch" not in capsys.readouterr().err
    assert _steps(tmp_path / "pop") == [48]


# --- resume ---------------------------------------------------------------------------------------------------------

def test_rerunning_the_cell_with_resume_auto_and_a_larger_total_continues(base, tmp_path):
    """The config sets seed 7 and lr 5e-4 (swept): neither counts as a flag given to the resume."""
    run = _copy(base, tmp_path)
    result = proxima.train_population(_config(seed=7, lr=5e-4, total_timesteps=64), seeds=[1, 2], sweep=SWEEP,
                                      run_dir=run, resume="auto", quiet=True)
    assert _steps(run) == [32, 64]
    assert [(m.seed, m.settings) for m in result.members] == [(1, {"lr": 3e-4}), (2, {"lr": 3e-4}), (1, {"lr": 1e-3}),
                                                               (2, {"lr": 1e-3})]


def test_resume_auto_finds_the_run_dir_in_the_config(base, tmp_path):
    run = _copy(base, tmp_path)
    result = proxima.train_population(_config(total_timesteps=64, run_dir=str(run)), seeds=[1, 2], sweep=SWEEP,
                                      resume="auto", quiet=True)
    assert result.run_dir == run and _steps(run) == [32, 64]


def test_resume_auto_of_another_env_is_refused(base, tmp_path):
    run = _copy(base, tmp_path)
    with pytest.raises(ConfigError) as info:
        proxima.train_population(_config(env_id="Acrobot-v1", total_timesteps=64), seeds=[1, 2], sweep=SWEEP, run_dir=run,
                                 resume="auto", quiet=True)
    assert str(info.value).startswith(f"{run / 'checkpoints' / 'step_000000000032.pt'}: the run trains 'CartPole-v1', "
                                      "not env_id='Acrobot-v1'; "), str(info.value)
    assert _steps(run) == [32]


def test_resume_auto_on_a_new_directory_starts_a_population_there(tmp_path):
    result = proxima.train_population(_config(), seeds=[3], run_dir=tmp_path / "new", resume="auto", quiet=True)
    assert result.run_dir == tmp_path / "new" and [m.dir.name for m in result.members] == ["m000-seed3"]
    assert _steps(tmp_path / "new") == [32]
    with pytest.raises(ConfigError) as info:
        proxima.train_population(None, run_dir=tmp_path / "empty", resume="auto", quiet=True)
    assert str(info.value) == (f"train_population(None, resume='auto'): {tmp_path / 'empty'} holds no checkpoint to "
                               "continue, and a new population needs a PPOConfig (PPOConfig(...) or "
                               "proxima.presets.resolve(...))")


def test_resume_auto_restarts_a_population_that_wrote_no_checkpoint(base, tmp_path, capsys):
    run = _copy(base, tmp_path)
    for checkpoints in run.rglob("checkpoints"):
        shutil.rmtree(checkpoints)
    with pytest.raises(RunDirError):  # without resume='auto' the directory is another run's
        proxima.train_population(_config(), seeds=[1, 2], run_dir=run, quiet=True)
    capsys.readouterr()
    result = proxima.train_population(_config(), seeds=[5], run_dir=run, resume="auto", quiet=True)
    assert [m.seed for m in result.members] == [5] and _steps(run) == [32]
    err = capsys.readouterr().err
    assert f"proxima: resume='auto' found no checkpoint to continue: moved the old {run} to " in err, err
    [aside] = [p for p in tmp_path.iterdir() if p.name != "pop"]
    assert (aside / "m003-seed2-lr0.001" / "config.yaml").is_file()


def test_resume_auto_on_a_single_run_names_train(tmp_path):
    single = tmp_path / "single"
    proxima.train(_config(), run_dir=single, quiet=True)
    with pytest.raises(ConfigError) as info:
        proxima.train_population(_config(), seeds=[1], run_dir=single, resume="auto", quiet=True)
    assert str(info.value) == (f"train_population(resume='auto'): {single} holds a single run, not a population; continue "
                               f"it with proxima.train(None, resume={str(single)!r})")


def test_resume_from_a_checkpoint_file_and_run_dir_elsewhere(base, tmp_path):
    run = _copy(base, tmp_path)
    file = run / "checkpoints" / "step_000000000032.pt"
    with pytest.raises(ConfigError) as info:
        proxima.train_population(None, resume=file, run_dir=tmp_path / "else", quiet=True)
    assert str(info.value) == (f"train_population(run_dir={str(tmp_path / 'else')!r}, resume={str(file)!r}): a population "
                               f"continues in its own directory, {run}; drop run_dir")
    assert not (tmp_path / "else").exists()
    result = proxima.train_population(PPOConfig(total_timesteps=64), resume=file, quiet=True)
    assert result.run_dir == run and _steps(run) == [32, 64]


POLE = "from gymnasium.envs.classic_control import CartPoleEnv\n\n\nclass Pole(CartPoleEnv):\n    pass\n"


def test_trust_run_resumes_a_population_of_a_module_env(tmp_path, monkeypatch):
    (tmp_path / "pole_papi46.py").write_text(POLE)
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "pop"
    proxima.train_population(_config(env_id="pole_papi46:Pole"), seeds=[1], run_dir=run, quiet=True)
    with pytest.raises(proxima.UntrustedEnvError):
        proxima.train_population(PPOConfig(total_timesteps=64), resume=run, quiet=True)
    assert _steps(run) == [32]
    proxima.train_population(PPOConfig(total_timesteps=64), resume=run, quiet=True, trust_run=True)
    assert _steps(run) == [32, 64]


def test_two_single_run_fields_are_noted_in_one_line(tmp_path, capsys):
    proxima.train_population(_config(stop_return=100.0, stop_episodes=5), seeds=[1], run_dir=tmp_path / "pop")
    assert ("proxima: note: PPOConfig.stop_return = 100 and PPOConfig.stop_episodes = 5 apply to single runs; each member "
            "of the population trains for total_timesteps\n") in capsys.readouterr().err


def test_sized_members_counts_every_setting_times_every_seed(monkeypatch, capsys):
    """A population of 1 seed x 4 learning rates that does not fit where one member would: refused by the sizing
    train --seeds and train_population start with (here a dry run, which builds and trains nothing)."""
    import torch

    from proxima.population import _memory_need
    from proxima.sizing import env_probe

    config = _config(eval_episodes=10)
    sizes = env_probe(config)()
    one, four = (_memory_need(config, n, torch.device("cpu"), sizes)[0] for n in (1, 4))
    assert one < four
    monkeypatch.setattr("proxima.sizing.free_memory", lambda device: (one + four) // 2)
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1", "--sweep", "lr=1e-4,2e-4,3e-4,4e-4", "--dry-run",
                             "--total-timesteps", "32", *TINY_POP], capsys)
    assert "error: --seeds/--sweep: 4 members x 2 envs x 16 steps needs " in error_line(code, err)
