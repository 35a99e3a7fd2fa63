"""Follow-ups of --sweep of the switches, proxima.train_population and report pooling: the lines a population
prints spell a swept switch as --sweep does (true,false), name the switch flag the user typed (--no-norm-adv),
note a resume's recomputed schedule when any member anneals, and, for a population trained from Python, name
the Python call that continues it or trains it again."""

from __future__ import annotations

import functools
import json
import shutil

import pytest

import proxima
from proxima import population_run
from proxima.checkpoint import list_checkpoints
from proxima.config import ConfigError, PPOConfig
from proxima.population import PER_MEMBER_FIELDS, parse_sweep
from proxima.population_run import check_resume_flags, check_same_members, sweep_flags

from cli_helpers import run_main

SWEEP = {"anneal_lr": [False, True]}  # member 0 does not anneal, member 1 does


def _config() -> PPOConfig:  # 2 iterations of 2 envs x 16 steps per member
    return PPOConfig(env_id="CartPole-v1", backend="native", num_envs=2, num_steps=16, total_timesteps=64,
                     num_minibatches=2, update_epochs=1, threads=1, progress=False, eval_episodes=1, checkpoint_every=0)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """A population trained from Python with anneal_lr swept, stopped by a SIGINT in its first iteration
    (population_run.train_population's stop_after hook): (its directory, the TrainingInterrupted raised)."""
    run = tmp_path_factory.mktemp("popfollow46") / "pop"
    trained = population_run.train_population
    population_run.train_population = functools.partial(trained, stop_after=1)
    try:
        with pytest.raises(proxima.TrainingInterrupted) as e:
            proxima.train_population(_config(), seeds=[1], sweep=SWEEP, run_dir=run, quiet=True)
    finally:
        population_run.train_population = trained
    assert [p.name for p in list_checkpoints(run)] == ["step_000000000032.pt"]
    return run, e.value


def _copy(run, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    return copy


# --- 1. a swept switch is spelled as --sweep spells it ------------------------------------------------------


def test_sweep_flags_spell_a_switch_true_false_and_parse_back():
    flags = sweep_flags({"norm_adv": [True, False], "lr": [0.001]})
    assert flags == "--sweep norm_adv=true,false --sweep lr=0.001"  # was norm_adv=True,False: Python's repr
    items = [f.removeprefix("--sweep ") for f in flags.split(" --sweep ")]
    assert parse_sweep(items) == {"norm_adv": [True, False], "lr": [0.001]}


def test_a_resume_given_another_sweep_names_the_recorded_one_as_the_cli_spells_it(stopped, capsys):
    run, _ = stopped
    code, _, err = run_main(["train", "--seeds", "1", "--sweep", "anneal_lr=true", "--resume", str(run), "--dry-run"], capsys)
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        f"proxima train: error: --sweep: {run} was trained with --sweep anneal_lr=false,true, not --sweep anneal_lr=true; "
        "resume continues the same members: give --sweep anneal_lr=false,true")
    with pytest.raises(ConfigError, match=r"give --sweep clip_vloss=true,false$"):
        check_same_members(run, None, {}, [1], {"clip_vloss": [True, False]})


# --- 2. a switch typed beside its sweep is named as typed ---------------------------------------------------


@pytest.mark.parametrize("typed", ["--no-norm-adv", "--norm-adv", "--no-anneal-lr", "--anneal-lr", "--no-clip-vloss",
                                   "--clip-vloss"])
def test_a_switch_typed_with_its_sweep_is_refused_naming_the_flag_typed(typed, capsys):
    field = typed.removeprefix("--").removeprefix("no-").replace("-", "_")
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1", typed, "--sweep", f"{field}=true,false",
                             "--total-timesteps", "64", "--dry-run"], capsys)
    assert code == 2
    # was `--norm-adv false and ...`: a spelling the command line does not take
    assert err.strip().splitlines()[-1] == (f"proxima train: error: {typed} and --sweep {field}=... both set {field}; "
                                            "drop one")


def test_a_resume_given_a_swept_switch_names_the_flag_typed():
    with pytest.raises(ConfigError) as e:
        check_resume_flags({"norm_adv": False}, {"norm_adv": [True, False]}, PPOConfig(), "ckpt.pt")
    assert str(e.value) == "--no-norm-adv is swept in this population (true, false); it cannot be given on resume"
    with pytest.raises(ConfigError, match=r"^--lr is swept in this population \(0\.001, 0\.0003\)"):
        check_resume_flags({"lr": 3e-3}, {"lr": [1e-3, 3e-4]}, PPOConfig(), "ckpt.pt")


# --- 3. a resume that extends a population notes the schedule when any member anneals ----------------------


def test_extending_a_population_whose_first_member_does_not_anneal_notes_the_annealing_members(stopped, capsys):
    run, _ = stopped
    code, _, err = run_main(["train", "--seeds", "1", "--sweep", "anneal_lr=false,true", "--resume", str(run),
                             "--total-timesteps", "128", "--dry-run"], capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if "schedule is recomputed" in line]
    # was none: only member 0's anneal_lr (false) was looked at; member 1's iteration 2 trains at 1.88e-4 of a
    # 4-iteration schedule, up from the 1.25e-4 of the 2 it was planned for
    assert notes == ["proxima: note: anneal_lr=true (1 of the 2 members; the anneal_lr=false members' rate stays constant): "
                     "the learning rate schedule is recomputed over the resume's total (128 steps) as if the run had been "
                     "planned for it, reaching 0 after its last iteration, at step 128: iteration 2 trains at lr 0.000188, "
                     "iteration 1 trained at 0.00025"]


# --- 4. train_population's docstring points to the one list of sweepable fields -----------------------------


def test_train_population_docstring_points_to_the_sweepable_fields_list():
    doc = proxima.train_population.__doc__
    assert "proxima.population.PER_MEMBER_FIELDS" in doc
    named = [f for f in PER_MEMBER_FIELDS if f in doc.replace("PER_MEMBER_FIELDS", "")]
    # no copy of the list that misses a field (it named the numbers, not the switches); its examples sweep
    assert named == ["lr", "norm_adv"]
    assert population_run.sweep_given({"lr": [3e-4, 1e-3], "norm_adv": [True, False]}) == \
        {"lr": [3e-4, 1e-3], "norm_adv": [True, False]}


# --- 5. a stop from Python names train_population's call --------------------------------------------------------


def test_a_stop_from_python_names_the_train_population_call_that_continues_it(stopped, tmp_path):
    run, e = stopped
    # was `continue with: proxima resume RUN`: signals.python_resume had no call for a population
    assert str(e) == (f"stopped by SIGINT; checkpoint: {run / 'checkpoints' / 'step_000000000032.pt'}; continue with: "
                      f"proxima.train_population(None, resume={str(run)!r}) (in a shell: proxima resume {run})")
    copy = _copy(run, tmp_path)
    result = proxima.train_population(None, resume=str(copy), quiet=True)  # the call named, on a copy
    assert [p.name for p in list_checkpoints(copy)] == ["step_000000000032.pt", "step_000000000064.pt"]
    assert [m.settings for m in result.members] == [{"anneal_lr": False}, {"anneal_lr": True}]


def test_a_python_stop_of_a_module_env_population_names_the_env_in_the_config(tmp_path, monkeypatch):
    """A resume imports a recorded module:Class env only when named: train_population has no env_id, its config does."""
    import signal

    from proxima.signals import TrainingInterrupted, hold_python_caller

    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    pop = tmp_path / "pop"
    (pop / "checkpoints").mkdir(parents=True)
    (pop / "population.json").write_text('{"kind": "ppo-population", "env_id": "my_envs:Walker", "members": 2}')
    step = pop / "checkpoints" / "step_000000000064.pt"
    release = hold_python_caller(True)
    try:
        line = str(TrainingInterrupted(signal.SIGTERM, step))
    finally:
        release()
    assert line == (f"stopped by SIGTERM; checkpoint: {step}; continue with: proxima.train_population("
                    f"proxima.PPOConfig(env_id='my_envs:Walker'), resume='{pop}') (in a shell: proxima resume --env "
                    f"my_envs:Walker {pop})")


# --- 6. training a Python-trained population again names its Python call -----------------------------------


def test_a_population_from_python_is_trained_again_by_its_python_call(stopped, tmp_path, capsys):
    run, _ = stopped
    copy = _copy(run, tmp_path)
    assert "command" not in json.loads((copy / "population.json").read_text())  # only the CLI records one
    shutil.rmtree(copy / "m001-seed1-anneal_lrtrue")
    code, _, err = run_main(["resume", str(copy)], capsys)
    assert code == 2
    line = err.strip().splitlines()[-1]
    # was "train it again: the command in COPY/population.json with --overwrite": a command the file does not hold
    assert line.startswith(f"proxima resume: error: {copy / 'm001-seed1-anneal_lrtrue'}: member m001-seed1-anneal_lrtrue's "
                           "folder is missing; ")
    assert "; train it again: the command in" not in line and ", or train it again from Python: " in line
    said = line.split(", or train it again from Python: ", 1)[1]
    assert said.startswith("proxima.train_population(...)")  # from where it ran (pytest's argv) when that is short
    assert said.endswith(f", as its members' meta.json records it, with run_dir={str(copy)!r}, overwrite=True (the old "
                         "directory is moved aside)")


def test_a_long_recorded_call_is_echoed_without_where_it_ran(stopped, tmp_path):
    copy = _copy(stopped[0], tmp_path)
    for meta in copy.glob("m*/meta.json"):
        doc = json.loads(meta.read_text())
        doc["command"] = "python: proxima.train_population(...) from study.py " + "--flag " * 60
        meta.write_text(json.dumps(doc))
    assert population_run._train_again(copy) == (
        f"train it again from Python: proxima.train_population(...), as its members' meta.json records it, with "
        f"run_dir={str(copy)!r}, overwrite=True (the old directory is moved aside)")


def test_without_a_member_record_the_advice_still_says_the_population_json_holds_no_command(stopped, tmp_path):
    copy = _copy(stopped[0], tmp_path)
    for meta in copy.glob("m*/meta.json"):
        meta.unlink()
    assert population_run._train_again(copy) == (
        f"train it again from Python: the call that trained it (population.json records no command), with "
        f"run_dir={str(copy)!r}, overwrite=True (the old directory is moved aside)")
