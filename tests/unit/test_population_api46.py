"""proxima.train_population: a population trained from Python is the one `proxima train --seeds --sweep` trains
(the same files and numbers), its result is what the files say, and its refusals are the command line's, raised."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import proxima
from cli_helpers import TINY_POP, error_line, run_main
from proxima import ConfigError, PPOConfig, ProximaError, TrainingInterrupted
from proxima.population_run import PopulationResult, seeds_given, sweep_given
from proxima.rundir import RunDirError

#: TINY_POP's sizes as PPOConfig fields: 2 envs x 16 steps, 32 steps an iteration per member
TINY = dict(env_id="CartPole-v1", num_envs=2, num_steps=16, num_minibatches=2, update_epochs=1, threads=1, progress=False)
#: the same population on the command line: 2 seeds x 2 learning rates, 2 iterations, 2 evaluation episodes
CLI_ARGS = ["train", "CartPole-v1", "--seeds", "1-2", "--sweep", "lr=0.0003,0.001", "--total-timesteps", "64",
            "--eval-episodes", "2", "--quiet", *TINY_POP]
MEMBERS = ["m000-seed1-lr0.0003", "m001-seed2-lr0.0003", "m002-seed1-lr0.001", "m003-seed2-lr0.001"]


def _config(**kw) -> PPOConfig:
    return PPOConfig(**{**TINY, "total_timesteps": 64, "eval_episodes": 2, **kw})


def _files(run_dir: Path) -> set:
    """The population's files, relative, with TensorBoard's host- and time-stamped names as one name."""
    def name(p: Path) -> str:
        p = p.with_name("events") if p.name.startswith("events.out.tfevents.") else p
        return p.relative_to(run_dir).as_posix()

    return {name(p) for p in run_dir.rglob("*") if p.is_file() and p.name != ".proxima.lock"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The same 4-member population trained from Python and by the CLI."""
    root = tmp_path_factory.mktemp("api46")
    config = _config()
    result = proxima.train_population(config, seeds=range(1, 3), sweep={"lr": [3e-4, 1e-3]}, run_dir=root / "py",
                                      quiet=True)
    assert proxima.cli.main([*CLI_ARGS, "--run-dir", str(root / "cli")]) == 0
    return config, result, root / "py", root / "cli"


def test_a_population_from_python_writes_the_files_and_numbers_of_the_clis(trained):
    _, result, py, cli = trained
    assert _files(py) == _files(cli)
    assert {"population.json", "checkpoints/step_000000000064.pt", "m000-seed1-lr0.0003/eval.json",
            "m003-seed2-lr0.001/checkpoints/step_000000000064.pt"} <= _files(py)
    doc_py, doc_cli = (json.loads((d / "population.json").read_text()) for d in (py, cli))
    for doc in (doc_py, doc_cli):  # the command only the CLI records, the wall time each run measured
        doc.pop("command", None), doc.pop("wall_seconds")
    assert doc_py == doc_cli
    assert [e["dir"] for e in doc_py["member_dirs"]] == MEMBERS
    for name in MEMBERS:  # bit-identical on the CPU: the same members trained the same steps
        assert json.loads((py / name / "eval.json").read_text())["returns"] == \
            json.loads((cli / name / "eval.json").read_text())["returns"]
    meta = json.loads((py / MEMBERS[0] / "meta.json").read_text())
    assert meta["command"].startswith("python: proxima.train_population(...) from ")


def test_the_result_is_what_the_population_json_and_eval_json_hold(trained):
    _, result, py, _ = trained
    assert result.run_dir == py
    assert [m.dir for m in result.members] == [py / n for n in MEMBERS]
    assert [m.seed for m in result.members] == [1, 2, 1, 2]
    assert [m.settings for m in result.members] == [{"lr": 3e-4}] * 2 + [{"lr": 1e-3}] * 2
    assert [m.diverged for m in result.members] == [None] * 4
    for m in result.members:
        assert m.eval_mean_return == json.loads((m.dir / "eval.json").read_text())["mean_return"]
    assert PopulationResult.read(py) == result
    table = result.settings_table()
    assert [row["settings"] for row in table] == [{"lr": 3e-4}, {"lr": 1e-3}]
    assert [row["kind"] for row in table] == ["eval", "eval"]
    assert [row["returns"] for row in table] == [[m.eval_mean_return for m in result.members[:2]],
                                                [m.eval_mean_return for m in result.members[2:]]]
    policy = proxima.load(result.members[3].dir)  # a member is a run directory
    assert policy.config["seed"] == 2 and policy.config["lr"] == 1e-3 and policy.global_step == 64


def test_the_config_passed_in_is_left_as_it_was(trained):
    config, *_ = trained
    assert config == _config()


@pytest.mark.parametrize("seeds", [range(3, 6), [3, 4, 5], (3, 4, 5), "3-5"])
def test_seeds_as_a_range_list_tuple_or_the_flags_text(seeds):
    assert seeds_given(seeds) == [3, 4, 5]


@pytest.mark.parametrize("seeds, line", [
    ([1, 2, 1], "seeds=[1, 2, 1]: a seed is repeated"),
    ([1, -3], "seeds=[1, -3]: seed -3 is outside 0..2,147,483,647"),
    ([], "seeds: empty; give at least one seed (e.g. seeds=range(1, 11) or seeds=[1, 5, 9])"),
    (range(0), "seeds: empty; give at least one seed"),
    ([1, 2.5], "seeds: 2.5 is not an integer seed"),
    ([True, 2], "seeds: True is not an integer seed"),
    (10, "seeds=10: expected a list of seeds, not a count; seeds=[10] trains seed 10, seeds=range(1, 11) 10 seeds"),
    (range(2_000_000), "seeds: 2,000,000 seeds; a population holds at most 1,000,000"),
    ("1-3,2", "--seeds '1-3,2': a seed is repeated"),
])
def test_bad_seeds_are_a_config_error_and_nothing_is_written(tmp_path, seeds, line):
    with pytest.raises(ConfigError) as info:
        proxima.train_population(_config(), seeds=seeds, run_dir=tmp_path / "pop", quiet=True)
    assert str(info.value).startswith(line), str(info.value)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "pop").exists()


def test_a_refused_sweep_raises_the_line_the_cli_prints_naming_the_sweep_entry(tmp_path, capsys):
    with pytest.raises(ConfigError) as info:
        proxima.train_population(_config(), seeds=[1, 2], sweep={"num_envs": [2, 4]}, run_dir=tmp_path / "py")
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--sweep", "num_envs=2,4", "--run-dir",
                             str(tmp_path / "cli"), *TINY_POP], capsys)
    entry, flag = "sweep={'num_envs': [2, 4]}", "error: --sweep num_envs"
    assert str(info.value).startswith(entry + ": changes the shapes or the env of the batched program")
    assert error_line(code, err).endswith(flag + str(info.value)[len(entry):])  # the CLI's why, after its flag
    assert not (tmp_path / "py").exists()


@pytest.mark.parametrize("sweep, line", [
    ({"lr": [1e-3, 1e-3]}, "sweep={'lr': [0.001, 0.001]}: a value is repeated"),
    ({"lr": 1e-3}, "sweep['lr']: expected a list of values, got 0.001"),
    ({"lr": []}, "sweep['lr']: no values"),
    ({"seed": [1, 2]}, "sweep={'seed': [1, 2]}: give seeds with seeds="),
    ({"gamma": [0.9, 2.0]}, "sweep={'gamma': [0.9, 2.0]}: value 2.0: must be in (0, 1]"),
    ({"lr": [float("nan")]}, "sweep={'lr': [nan]}: value nan: must be a finite number"),
    ([("lr", [1e-3])], "sweep: expected a dict of field: [values]"),
])
def test_bad_sweeps_are_a_config_error(tmp_path, sweep, line):
    with pytest.raises(ConfigError) as info:
        proxima.train_population(_config(), seeds=[1], sweep=sweep, run_dir=tmp_path / "pop")
    assert str(info.value).startswith(line), str(info.value)
    assert not (tmp_path / "pop").exists()


def test_sweep_values_keep_their_exact_value_and_aliases_name_the_field():
    import numpy as np

    assert sweep_given({"learning_rate": [np.float64(3e-4), 1e-3], "target_kl": [None, 0.02], "ent_coef": [0, 1]}) == \
        {"lr": [3e-4, 1e-3], "target_kl": [None, 0.02], "ent_coef": [0.0, 1.0]}


def test_a_refused_config_value_names_the_ppoconfig_field(tmp_path):
    with pytest.raises(ConfigError) as info:
        proxima.train_population(_config(gamma=2.0), seeds=[1, 2], run_dir=tmp_path / "pop")
    assert str(info.value).startswith("PPOConfig.gamma = 2.0: "), str(info.value)
    with pytest.raises(ConfigError, match=r"^train_population\(config\): expected a PPOConfig .*, got dict$"):
        proxima.train_population(dict(TINY), seeds=[1])


def test_a_directory_that_holds_files_is_refused_naming_overwrite_true(tmp_path):
    (tmp_path / "pop").mkdir()
    (tmp_path / "pop" / "notes.txt").write_text("mine")
    with pytest.raises(RunDirError) as info:
        proxima.train_population(_config(), seeds=[1], run_dir=tmp_path / "pop", quiet=True)
    assert isinstance(info.value, ProximaError)
    assert "overwrite=True" in str(info.value) and "--overwrite" not in str(info.value), str(info.value)
    assert (tmp_path / "pop" / "notes.txt").read_text() == "mine"


def test_ctrl_c_raises_training_interrupted_with_a_checkpoint_and_resume_finishes_it(tmp_path, monkeypatch):
    from proxima.population import Population

    step = Population.train_iteration

    def interrupted_once(self):  # Ctrl-C during the first iteration
        out = step(self)
        if self.iteration == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return out

    monkeypatch.setattr(Population, "train_iteration", interrupted_once)
    run = tmp_path / "pop"
    with pytest.raises(TrainingInterrupted) as info:
        proxima.train_population(_config(total_timesteps=96, eval_episodes=0), seeds=(1, 2), run_dir=run, quiet=True)
    assert Path(info.value.checkpoint) == run / "checkpoints" / "step_000000000032.pt"
    monkeypatch.setattr(Population, "train_iteration", step)
    with pytest.raises(ConfigError) as refused:  # a resume continues the members it was given, or none
        proxima.train_population(None, seeds=[1, 2, 3], resume=run, quiet=True)
    assert str(refused.value).startswith(f"seeds=[1, 2, 3]: {run} trains seeds [1, 2]"), str(refused.value)
    assert "give seeds=[1, 2] (or leave seeds out)" in str(refused.value)
    result = proxima.train_population(None, resume=run, quiet=True)
    assert result.run_dir == run and [m.seed for m in result.members] == [1, 2]
    assert [p.name for p in sorted((run / "checkpoints").glob("step_*.pt"))][-1] == "step_000000000096.pt"


def test_importing_proxima_and_reaching_train_population_imports_no_torch():
    code = "import sys, proxima; proxima.train_population; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    assert "train_population" in proxima.__all__


def test_notes_name_the_ppoconfig_fields_the_script_set_not_flags(tmp_path, capsys):
    proxima.train_population(_config(total_timesteps=48, stop_return=100.0, eval_episodes=0), seeds=[1], run_dir=tmp_path / "p")
    err = capsys.readouterr().err
    assert ("proxima: note: PPOConfig.stop_return = 100 applies to single runs; each member of the population trains for "
            "total_timesteps\n") in err
    assert ("proxima: note: PPOConfig.total_timesteps = 48 is not a multiple of the batch (32 steps = num_envs x "
            "num_steps): training 32 steps (1 iteration)\n") in err
    assert "--" not in err.replace("--sweep", "")
