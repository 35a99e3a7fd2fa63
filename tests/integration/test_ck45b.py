"""Review 45b of checkpoints and run directories.

1. A population member whose newest checkpoint is damaged: eval's line names its population's resume
   (a member's own resume is refused), and that refusal comes before any checkpoint is set aside.
2. A damaged newest checkpoint whose next older one is another run's, copied in: never named as the
   run's newest sound checkpoint.
3. ``proxima eval POP --env-kwargs``: the summary line and --json's top level say the kwargs.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

from cli_helpers import error_line, run_main
from proxima import checkpoint as ckpt
from proxima import cli, load
from proxima.population_eval import evaluate_population

#: 4 envs x 16 steps = 64 steps an iteration, a checkpoint each
SMALL = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--checkpoint-every", "1",
         "--eval-episodes", "0", "--threads", "1", "--no-progress", "--quiet"]
POP = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", "64",
       "--checkpoint-every", "1", "--eval-episodes", "0", "--threads", "1", "--no-progress", "--quiet"]
KWARGS = '{"max_episode_steps": 50}'


@pytest.fixture(scope="module")
def population(tmp_path_factory) -> Path:
    """A 2-seed CartPole population trained with --env-kwargs: two checkpoints (32, 64) a member."""
    pop = tmp_path_factory.mktemp("ck45b") / "pop"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1,2", "--env-kwargs", KWARGS, "--run-dir", str(pop), *POP]) == 0
    return pop


@pytest.fixture
def popd(population, tmp_path) -> Path:
    return Path(shutil.copytree(population, tmp_path / "popd")).resolve()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("ck45b") / "run"
    assert cli.main(["train", "CartPole-v1", "--run-dir", str(run), "--total-timesteps", "192", *SMALL]) == 0
    return run


@pytest.fixture(scope="module")
def other(tmp_path_factory) -> Path:
    """Another CartPole run: 32 steps a rollout (128 an iteration)."""
    run = tmp_path_factory.mktemp("ck45b") / "other"
    args = [a if a != "16" else "32" for a in SMALL]
    assert cli.main(["train", "CartPole-v1", "--run-dir", str(run), "--total-timesteps", "128", *args]) == 0
    return run


@pytest.fixture
def run(trained, tmp_path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "run"))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:1000])


# ------------------------------------------------------------------ 1. a damaged member's newest checkpoint
def test_eval_of_a_member_with_a_damaged_newest_names_its_populations_resume(popd, capsys):
    member = popd / "m001-seed2"
    sound, newest = ckpt.list_checkpoints(member)
    _truncate(newest)
    code, _, err = run_main(["eval", str(member), "--episodes", "1"], capsys)
    line = error_line(code, err, f"the run's newest sound checkpoint is {sound}: evaluate it with proxima eval {sound}")
    assert line.endswith(f"(a population member: it resumes with its population, proxima resume {popd})"), line
    assert f"proxima resume {member}" not in line
    with pytest.raises(ckpt.CheckpointError) as e:
        load(member)
    assert str(e.value).endswith(f"(a population member: it resumes with its population, proxima resume {popd})")


def test_resume_of_a_member_with_a_damaged_newest_refuses_before_setting_it_aside(popd, capsys):
    member = popd / "m001-seed2"
    before = sorted(p.name for p in (member / "checkpoints").iterdir())
    newest = ckpt.list_checkpoints(member)[-1]
    _truncate(newest)
    code, _, err = run_main(["resume", str(member)], capsys)
    line = error_line(code, err, "a member of a population (--seeds/--sweep) holds its weights only")
    assert sorted(p.name for p in (member / "checkpoints").iterdir()) == before  # nothing renamed .corrupt
    assert "unusable" not in err
    # the member's own env kwargs go with the --init-from way on
    assert line.endswith(f"proxima train CartPole-v1 --env-kwargs {shlex.quote(KWARGS)} --init-from {member}"), line
    assert f"resume the whole population: proxima resume {popd}, " in line


def test_a_single_runs_resume_still_sets_a_damaged_newest_aside(run, capsys):
    newest = ckpt.list_checkpoints(run)[-1]
    _truncate(newest)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "192"], capsys)
    assert code == 0, err
    assert (newest.parent / (newest.name + ".corrupt")).is_file()
    assert f"{newest} is unusable (truncated checkpoint" in err and err.count("is unusable") == 1


# ------------------------------------------------------------------ 2. another run's checkpoint copied in
def test_another_runs_checkpoint_copied_in_is_not_named_the_runs_newest_sound_one(run, other, capsys):
    first, middle, newest = ckpt.list_checkpoints(run)
    _truncate(newest)
    shutil.copyfile(ckpt.list_checkpoints(other)[-1], middle)  # other's step 128, a sound CartPole checkpoint
    code, _, err = run_main(["eval", str(run), "--episodes", "1"], capsys)
    line = error_line(code, err, f"{newest}: truncated checkpoint")
    assert line.endswith(f"the run's newest sound checkpoint is {first}: evaluate it with proxima eval {first} "
                         f"(proxima resume {run} continues from it and sets the damaged one aside)"), line
    first.unlink()  # only the foreign one left: named as another run's, never as this one's
    code, _, err = run_main(["eval", str(run), "--episodes", "1"], capsys)
    line = error_line(code, err, f"{newest}: truncated checkpoint")
    assert "newest sound checkpoint" not in line
    assert ("; none of the 1 older checkpoint(s) is a sound one of this run's (1 of them loads but is another run's, "
            "copied in); ") in line, line


# ------------------------------------------------------------------ 3. eval POP --env-kwargs
def test_eval_of_a_population_with_env_kwargs_says_them_in_the_summary_and_json(popd, capsys):
    given = '{"max_episode_steps": 5}'
    code, out, err = run_main(["eval", str(popd), "--episodes", "1", "--env-kwargs", given, "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["env_kwargs"] == {"max_episode_steps": 5}
    assert [m["lengths"] for m in result["members"]] == [[5], [5]]  # the kwargs were the env's
    code, out, err = run_main(["eval", str(popd), "--episodes", "1", "--env-kwargs", given], capsys)
    assert code == 0, err
    summary = out.splitlines()[2]
    assert summary.startswith(f"CartPole-v1 (env kwargs {given}) (2 members, seeds only): mean 5.00 "), summary
    # the members' own env: nothing added
    code, out, err = run_main(["eval", str(popd), "--episodes", "1", "--json"], capsys)
    assert code == 0, err
    assert "env_kwargs" not in json.loads(out)


def test_evaluate_population_leaves_a_damaged_members_mean_return_none_not_nan(popd):
    _truncate(ckpt.list_checkpoints(popd / "m000-seed1")[-1])
    left = []
    result = evaluate_population(popd, episodes=1, on_left_out=lambda d, why: left.append(d.name))
    [setting] = result["settings"]
    assert setting["mean_returns"][0] is None and isinstance(setting["mean_returns"][1], float)
    assert left == ["m000-seed1"] and setting["n"] == 1


# ------------------------------------------------------------------ lines at their edges
def test_init_froms_line_quotes_a_sound_checkpoint_whose_path_holds_a_space(trained, tmp_path, capsys):
    run = Path(shutil.copytree(trained, tmp_path / "my run"))
    *_, sound, newest = ckpt.list_checkpoints(run)
    _truncate(newest)
    code, _, err = run_main(["train", "CartPole-v1", "--init-from", str(run), "--run-dir", str(tmp_path / "new"),
                             "--total-timesteps", "64", *SMALL], capsys)
    line = error_line(code, err, f"the run's newest sound checkpoint is {sound}: ")
    assert f": start from it with --init-from {shlex.quote(str(sound))} (proxima resume {shlex.quote(str(run))} " in line, line


def test_load_with_an_env_id_of_a_run_whose_newest_is_damaged_says_the_python_arguments(run, monkeypatch):
    _truncate(ckpt.list_checkpoints(run)[-1])
    real = ckpt.load_policy

    def refused_for_the_env(path, **kw):  # the older ones sound, but refused for the env given (as a space's bounds)
        real(path, **kw)
        raise ckpt.EnvMismatchError(f"{path}: trained on another env than {kw['env_id']}")

    monkeypatch.setattr(ckpt, "load_policy", refused_for_the_env)
    with pytest.raises(ckpt.CheckpointError) as e:
        load(run, env_id="Acrobot-v1")
    assert str(e.value).endswith("; 2 of the 2 older checkpoint(s) load but do not fit the env given: load one with the "
                                 "env the run was trained on (env_id=, env_kwargs=)"), str(e.value)


def test_eval_with_empty_env_kwargs_of_a_run_trained_with_kwargs_says_them(tmp_path, capsys):
    run = tmp_path / "kw"
    code, _, err = run_main(["train", "CartPole-v1", "--env-kwargs", KWARGS, "--run-dir", str(run), "--total-timesteps", "64",
                             *SMALL], capsys)
    assert code == 0, err
    code, out, err = run_main(["eval", str(run), "--episodes", "1", "--env-kwargs", "{}", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["env_kwargs"] == {}
    code, out, err = run_main(["eval", str(run), "--episodes", "1", "--env-kwargs", "{}"], capsys)
    assert code == 0, err
    assert out.strip().startswith("CartPole-v1 (env kwargs {}): "), out
