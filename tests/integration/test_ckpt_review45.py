"""Review 45 (checkpoints and evaluation): a run directory whose newest checkpoint is damaged names its
newest sound one to proxima.load() and --init-from as it does to eval; eval and load() of a run
directory refuse another run's checkpoint copied in, as resume does; a population member's resume
names its population where it lies (or that it is not next to it) and the --init-from way; eval's
result and line record the --env-kwargs given."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import pytest

from cli_helpers import error_line, run_main
from proxima import checkpoint as ckpt
from proxima import cli, load
from proxima.config import ConfigError, PPOConfig
from proxima.evaluate import evaluate, format_result

#: 4 envs x 16 steps = 64 steps an iteration; 3 iterations, a checkpoint each
SMALL = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--checkpoint-every", "1",
         "--threads", "1", "--no-progress", "--quiet"]
POP = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", "64",
       "--eval-episodes", "0", "--threads", "1", "--no-progress", "--quiet"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("trained") / "run"
    code = cli.main(["train", "CartPole-v1", "--run-dir", str(run), "--total-timesteps", "192", "--eval-episodes", "2", "--eval-every", "64",
                           *SMALL])
    assert code == 0
    return run


@pytest.fixture(scope="module")
def other(tmp_path_factory) -> Path:
    """Another run of the same env: 32 steps a rollout, ending past `trained` (step 256)."""
    run = tmp_path_factory.mktemp("other") / "run"
    args = [a if a != "16" else "32" for a in SMALL]
    assert cli.main(["train", "CartPole-v1", "--run-dir", str(run), "--total-timesteps", "256", "--eval-episodes", "0",
                           *args]) == 0
    return run


@pytest.fixture
def run(trained, tmp_path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "run"))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:1000])


# ------------------------------------------------------------------ 1. a damaged newest checkpoint: one line for all
def test_load_and_init_from_name_the_newest_sound_checkpoint_as_eval_does(run, tmp_path, capsys):
    *_, sound, newest = ckpt.list_checkpoints(run)
    _truncate(newest)
    damaged = f"{newest}: truncated checkpoint (1000 bytes, the end of the archive is missing)"
    aside = f"(proxima resume {run} continues from it and sets the damaged one aside)"

    code, _, err = run_main(["eval", str(run), "--episodes", "1"], capsys)
    assert error_line(code, err).endswith(f"{damaged}; the run's newest sound checkpoint is {sound}: evaluate it with "
                                          f"proxima eval {sound} {aside}")

    for given in (run, run / "checkpoints"):  # RUN/checkpoints is RUN
        with pytest.raises(ckpt.CheckpointError) as e:
            load(given)
        assert str(e.value) == (f"{damaged}; the run's newest sound checkpoint is {sound}: load it with "
                                f"proxima.load({str(sound)!r}) {aside}")
    assert load(sound).global_step == 128  # the call the line names loads

    new = tmp_path / "tuned"
    code, _, err = run_main(["train", "CartPole-v1", "--init-from", str(run), "--run-dir", str(new), "--total-timesteps", "64",
                             "--eval-episodes", "0", *SMALL], capsys)
    line = error_line(code, err)
    assert line.endswith(f"--init-from {run}: {damaged}; the run's newest sound checkpoint is {sound}: start from it with "
                         f"--init-from {sound} {aside}"), line
    assert not new.exists()
    # the flag the line names starts the run, and the run records that file
    code, _, err = run_main(["train", "CartPole-v1", "--init-from", line.split("start from it with --init-from ")[1].split()[0],
                             "--run-dir", str(new), "--total-timesteps", "64", "--eval-episodes", "0", *SMALL], capsys)
    assert code == 0, err
    assert json.loads((new / "meta.json").read_text())["init_from"]["checkpoint"] == str(sound)

    from proxima import train

    with pytest.raises(ConfigError) as e:  # from Python: in PPOConfig's words
        train(PPOConfig(env_id="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=64, init_from=str(run),
                        eval_episodes=0, progress=False), run_dir=tmp_path / "py", quiet=True)
    assert str(e.value).endswith(f"start from it with PPOConfig.init_from = {str(sound)!r} {aside}"), str(e.value)


def test_a_damaged_newest_with_only_best_pt_sound_names_best_pt_in_each_readers_words(run, capsys):
    for path in ckpt.list_checkpoints(run):
        _truncate(path)
    best = run / "checkpoints" / "best.pt"
    assert best.is_file()
    with pytest.raises(ckpt.CheckpointError) as e:
        load(run)
    assert ", or load it: proxima.load(" + repr(str(best)) + ")" in str(e.value), str(e.value)
    code, _, err = run_main(["train", "CartPole-v1", "--init-from", str(run), "--total-timesteps", "64", *SMALL], capsys)
    assert error_line(code, err).endswith(f", or start from it: --init-from {best}")


# ------------------------------------------------------------------ 2. another run's checkpoint copied in
def test_eval_and_load_refuse_another_runs_checkpoint_copied_into_a_run_as_resume_does(run, other, capsys):
    foreign = ckpt.list_checkpoints(other)[-1]
    copied = run / "checkpoints" / foreign.name
    shutil.copy(foreign, copied)
    code, _, err = run_main(["resume", str(run)], capsys)
    resume_line = error_line(code, err).removeprefix("proxima resume: error: ")
    assert resume_line.startswith(f"{copied}: records num_steps 32 where {run / 'config.yaml'} says 16: not this run's "
                                  "checkpoint; move it out of"), resume_line

    for given in (run, run / "checkpoints"):
        code, out, err = run_main(["eval", str(given), "--episodes", "1", "--json"], capsys)
        assert error_line(code, err).removeprefix("proxima eval: error: ") == resume_line
        assert out == ""
        with pytest.raises(ckpt.CheckpointError) as e:
            load(given)
        assert str(e.value) == resume_line
    code, _, err = run_main(["train", "CartPole-v1", "--init-from", str(run), "--total-timesteps", "64", *SMALL], capsys)
    assert error_line(code, err).endswith(f"--init-from {run}: {resume_line}")

    # the file named by its path is read as it is, as is a run without a config.yaml
    code, out, err = run_main(["eval", str(copied), "--episodes", "1", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["global_step"] == 256
    (run / "config.yaml").unlink()
    assert load(run).global_step == 256
    code, out, err = run_main(["eval", str(run), "--episodes", "1", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["checkpoint"] == str(copied)


def test_a_run_of_its_own_checkpoints_still_evaluates_and_loads(run, capsys):
    code, out, err = run_main(["eval", str(run), "--episodes", "1", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["global_step"] == 192
    assert load(run).global_step == 192


# ------------------------------------------------------------------ 3. a population member's resume
@pytest.fixture(scope="module")
def population(tmp_path_factory) -> Path:
    """A 2-seed population trained with a relative --run-dir (``pop``) from its parent folder."""
    where = tmp_path_factory.mktemp("population")
    cwd = os.getcwd()
    os.chdir(where)
    try:
        assert cli.main(["train", "CartPole-v1", "--seeds", "1,2", "--run-dir", "pop", *POP]) == 0
    finally:
        os.chdir(cwd)
    return where / "pop"


def _member(pop: Path) -> Path:
    return pop / json.loads((pop / "population.json").read_text())["member_dirs"][1]["dir"]


def test_a_member_copied_out_of_its_population_says_it_is_not_next_to_it_and_names_init_from(population, tmp_path, capsys,
                                                                                              monkeypatch):
    copy = Path(shutil.copytree(_member(population), tmp_path / "memcopy"))
    monkeypatch.chdir("/")  # not the folder it was trained from, where "pop" would name the population
    code, _, err = run_main(["resume", str(copy)], capsys)
    line = error_line(code, err, "holds its weights only")
    assert "proxima resume pop" not in line
    assert (f"its population (trained with --run-dir pop) is not next to it (no population.json in {tmp_path.resolve()}): "
            "resume the whole population from its own directory, proxima resume POPULATION_DIR, ") in line, line
    assert line.endswith(f"or train this member on alone, a new run from its weights: proxima train CartPole-v1 --init-from "
                         f"{copy.resolve()}"), line
    # the command named starts a new run from the member's weights, from any folder
    argv = shlex.split(line.split(": proxima ")[-1])
    new = tmp_path / "alone"
    code, _, err = run_main([*argv, "--run-dir", str(new), "--total-timesteps", "64", "--eval-episodes", "0", *SMALL], capsys)
    assert code == 0, err
    assert json.loads((new / "meta.json").read_text())["init_from"]["checkpoint"] == str(ckpt.list_checkpoints(copy)[-1])


def test_a_member_in_its_population_names_the_population_where_it_lies_and_init_from(population, capsys, monkeypatch):
    member = _member(population)
    monkeypatch.chdir("/")
    code, _, err = run_main(["resume", str(member)], capsys)
    line = error_line(code, err, "holds its weights only")
    assert line.endswith(f"resume the whole population: proxima resume {population.resolve()}, or train this member on "
                         f"alone, a new run from its weights: proxima train CartPole-v1 --init-from {member.resolve()}"), line


# ------------------------------------------------------------------ 4. --env-kwargs in eval's result and line
def test_eval_records_the_env_kwargs_given_in_json_and_line(run, capsys):
    kwargs = '{"max_episode_steps": 5}'
    code, out, err = run_main(["eval", str(run), "--episodes", "2", "--env-kwargs", kwargs, "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["env_kwargs"] == {"max_episode_steps": 5}
    assert result["lengths"] == [5, 5]  # the kwargs were the env's
    code, out, err = run_main(["eval", str(run), "--episodes", "2", "--env-kwargs", kwargs], capsys)
    assert code == 0, err
    assert out.strip() == 'CartPole-v1 (env kwargs {"max_episode_steps": 5}): 5.00 +- 0.00 at step 192 over 2 episodes (deterministic)'

    # the run's own env: nothing added, as in the eval.json training wrote (whose keys are unchanged)
    code, out, err = run_main(["eval", str(run), "--episodes", "2", "--json"], capsys)
    assert code == 0, err
    assert "env_kwargs" not in json.loads(out)
    written = json.loads((run / "eval.json").read_text())
    assert "env_kwargs" not in written
    assert format_result(written).startswith("CartPole-v1: ")

    # from Python: load(env_kwargs=...) then evaluate()
    result = evaluate(load(run, env_kwargs={"max_episode_steps": 3}), episodes=1)
    assert result["env_kwargs"] == {"max_episode_steps": 3} and result["lengths"] == [3]
    assert "env_kwargs" not in evaluate(load(run), episodes=1)
