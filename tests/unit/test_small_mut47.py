"""Mutation gaps of session 47's small items (test_small47, test_popsmall47): an RLHF --config file's hyphenated key,
its other keys in the advice and its kl_horizon named by the file; a PPO population's checkpoints/ folder is not
taken for its run by the RLHF resume's path; config.yaml's size checked for every run and population compared
(not the first alone), a damaged population.json left to its reader; backend auto pooled without a meta.json;
train --seeds into a population's directory worded for another sweep, a '+' in its name, the seeds it lacks, a
directory with no checkpoint and a damaged seed list; train_population's lines in Python's words; a sweep of
exactly eight values shown whole and a hyphenated sweep key named as written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import proxima
import proxima.config
from proxima import ConfigError, cli
from proxima.rundir import RunDirError
from tests.cli_helpers import error_line, run_main
from tests.unit.test_popsmall47 import ARGS, MIB, TAIL, _config, _padded
from tests.unit.test_report_pool46 import ADDED, FIRST, _population
from tests.unit.test_small47 import _rlhf_config_error


# parsed: tests/conftest.py's fixture


@pytest.fixture(scope="module")
def pop(tmp_path_factory) -> Path:
    """A finished population of seeds 1 and 2 (one 32-step iteration each), as test_popsmall47's."""
    run = tmp_path_factory.mktemp("small_mut47_pop") / "P"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(run), *ARGS]) == 0
    return run


# --- an RLHF --config file's values named by the file ------------------------------------------------------------
def test_a_hyphenated_key_of_the_file_is_named_as_written_not_as_another_name(tmp_path, capsys):
    line = _rlhf_config_error(tmp_path, capsys, {"batch_size": 8, "num_minibatches": 2, "micro-batch-size": 3})
    assert line == (f"{tmp_path / 'rlhf.yaml'}: micro-batch-size 3: must divide the minibatch size "
                    "batch_size / num_minibatches = 4")


def test_the_advice_names_every_field_the_file_set_by_its_key(tmp_path, capsys):
    # batch_size and max_new_tokens from the file, max_prompt_length the default: only that one stays a flag
    f = tmp_path / "rlhf.yaml"
    line = _rlhf_config_error(tmp_path, capsys, {"batch_size": 65536, "max_new_tokens": 1000})
    assert line == (f"{f}: batch_size 65536: x (max_prompt_length 128 + max_new_tokens 1000) = 73,924,608 tokens in one "
                    "rollout, more than the 67,108,864 a process can hold (ids, log-probs, values and the KV cache of every "
                    f"token); lower batch_size in {f}, --max-prompt-length or max_new_tokens in {f}")


def test_a_files_kl_horizon_too_short_for_adaptive_kl_is_named_by_the_file(tmp_path, capsys):
    f = tmp_path / "rlhf.yaml"
    line = _rlhf_config_error(tmp_path, capsys, {"adaptive_kl": True, "kl_horizon": 2, "batch_size": 64})
    assert line.startswith(f"{f}: kl_horizon 2: with adaptive_kl in {f} each step multiplies beta by as little as "
                           "1 - 0.2 x 64 responses per update (batch_size 64 x 1 process) / 2, which is 0 or negative; "), line
    assert "--kl-horizon" not in line and "13" in line.split("negative; ")[1]


def test_a_typed_kl_horizon_is_refused_as_the_flag(tmp_path, capsys):
    line = _rlhf_config_error(tmp_path, capsys, {"adaptive_kl": True, "kl_horizon": 20, "batch_size": 64},
                              "--kl-horizon", "2")
    assert line.startswith("--kl-horizon 2: with --adaptive-kl each step multiplies beta"), line


# --- resume of a PPO population's checkpoints/ folder: not the RLHF run's path --------------------------------------
def test_resume_of_a_populations_checkpoints_folder_resumes_the_population(pop, capsys):
    # as RUN/checkpoints resumes RUN (test_left2_47 checks the resume that trains on)
    before = sorted(p.name for p in (pop / "checkpoints").iterdir())
    folder = run_main(["resume", str(pop / "checkpoints")], capsys)
    assert folder == run_main(["resume", str(pop)], capsys)
    assert folder[0] == 0 and f"run directory: {pop}" in folder[1]
    assert sorted(p.name for p in (pop / "checkpoints").iterdir()) == before


# --- config.yaml's size: every directory compared, a damaged population.json left to its reader ----------------------
def test_the_second_population_compared_has_its_large_config_refused_before_any_parse(tmp_path, capsys, parsed):
    a, b = _population(tmp_path / "A", FIRST), _population(tmp_path / "B", ADDED, lrs=(0.01,))
    big = _padded(b / "m001-seed7-lr0.01" / "config.yaml", MIB + 1)
    code, _, err = run_main(["report", str(a), str(b), "--out", str(tmp_path / "ab.md")], capsys)
    assert error_line(code, err) == f"proxima report: error: {big}: 1,048,577 bytes, more than the 1,048,576 {TAIL}"
    assert max(parsed, default=0) < 10_000
    assert not (tmp_path / "ab.md").exists()


def test_a_second_single_runs_large_config_is_refused_before_any_parse(tmp_path, capsys, parsed):
    a = _population(tmp_path / "A", FIRST)
    big = _padded(a / "m001-seed2" / "config.yaml", MIB + 1)
    code, _, err = run_main(["report", str(a / "m000-seed1"), str(a / "m001-seed2"), "--out", str(tmp_path / "r.md")],
                            capsys)
    assert error_line(code, err) == f"proxima report: error: {big}: 1,048,577 bytes, more than the 1,048,576 {TAIL}"
    assert max(parsed, default=0) < 10_000


@pytest.mark.parametrize("more", [[], ["--pool"], ["--normalize"]])
def test_a_single_runs_large_config_is_named_before_what_else_the_command_asks_is_refused(tmp_path, capsys, more):
    # the damaged file first: not 'a single run; pooling (+, --pool) takes populations' or --normalize's line
    a = _population(tmp_path / "A", FIRST)
    big = _padded(a / "m000-seed1" / "config.yaml", MIB + 1)
    code, _, err = run_main(["report", str(a / "m000-seed1"), str(a / "m001-seed2"), *more, "--out", str(tmp_path / "r.md")],
                            capsys)
    assert error_line(code, err) == f"proxima report: error: {big}: 1,048,577 bytes, more than the 1,048,576 {TAIL}"

@pytest.mark.parametrize("doc, why", [
    ([1], "TypeError"),  # not a mapping
    ({"kind": "ppo-population", "member_dirs": "m000-seed1"}, "TypeError"),  # member_dirs not a list
    ({"kind": "ppo-population", "member_dirs": [None, 3]}, "TypeError"),  # entries not mappings
    ({"kind": "ppo-population", "member_dirs": [{"dir": "../X"}]}, "KeyError"),  # a member outside the population
])
def test_a_damaged_population_file_is_its_readers_to_refuse_not_the_size_check(tmp_path, capsys, doc, why):
    a = _population(tmp_path / "A", FIRST)
    (a / "population.json").write_text(json.dumps(doc))
    (tmp_path / "X").mkdir()  # a large config.yaml beside it, which the size check never looks at through '../X'
    _padded(_population(tmp_path / "Y", {1: 1.0}) / "m000-seed1" / "config.yaml", MIB + 1).rename(tmp_path / "X" / "config.yaml")
    code, _, err = run_main(["report", str(a), "--out", str(tmp_path / "a.md")], capsys)
    assert error_line(code, err) == f"proxima report: error: {a / 'population.json'}: not a readable population file ({why})"


# --- backend auto pooled without a meta.json ---------------------------------------------------------------------------
def test_a_backend_auto_population_without_meta_json_pools_by_the_backend_its_env_id_picks(tmp_path, capsys):
    a = _population(tmp_path / "A", FIRST, env_id="CartPole-v1", backend="auto")  # no meta.json: auto picks native
    a2 = _population(tmp_path / "A2", ADDED, env_id="CartPole-v1", backend="native")
    js = tmp_path / "pooled.json"
    code, _, err = run_main(["report", f"{a}+{a2}", "--out", str(tmp_path / "pooled.md"), "--json", str(js)], capsys)
    assert code == 0, err
    (row,) = json.loads(js.read_text())["settings"]
    assert sorted(m["seed"] for m in row["member_dirs"]) == list(range(1, 11))


# --- train --seeds into a population's directory -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    """A finished population of seed 1 over lr 0.001 and 0.002 (one 32-step iteration each)."""
    run = tmp_path_factory.mktemp("small_mut47") / "S"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1", "--sweep", "lr=0.001,0.002", "--run-dir", str(run), *ARGS]) == 0
    return run


def _dry_line(capsys, run_dir, *argv) -> str:
    code, _, err = run_main(["train", "CartPole-v1", *argv, "--run-dir", str(run_dir), *ARGS, "--dry-run"], capsys)
    return error_line(code, err)


OVER = "start over with --overwrite (the old directory is moved aside)"


def test_a_swept_population_is_named_by_its_sweep_when_another_setting_is_asked_for(swept, capsys):
    head = f"proxima train: error: {swept} is not empty (checkpoints, m000-seed1-lr0.001, m001-seed1-lr0.002, population.json...)"
    tail = (": it holds a population of another setting (--sweep lr=0.001,0.002), which a resume continues as it is; "
            f"choose another --run-dir for this one (`proxima report {swept} NEW_DIR --out FILE.md` then compares the "
            f"two), or {OVER}")
    assert _dry_line(capsys, swept, "--seeds", "1", "--sweep", "lr=0.001,0.003") == head + tail
    assert _dry_line(capsys, swept, "--seeds", "1-2") == head + tail  # no sweep asked for


def test_from_python_another_setting_is_named_as_train_populations_sweep(swept):
    with pytest.raises(RunDirError) as e:
        proxima.train_population(_config(), seeds=[1], sweep={"lr": [0.001, 0.003]}, run_dir=swept, quiet=True)
    assert str(e.value).split("...): ", 1)[1] == (
        "it holds a population of another setting (sweep={'lr': [0.001, 0.002]}), which a resume continues as it is; "
        f"give train_population() another run_dir for this one (`proxima report {swept} NEW_DIR --out FILE.md` then "
        "compares the two), or start over with train_population(..., overwrite=True) (the old directory is moved aside)")


def test_from_python_seeds_it_holds_already_are_named_as_a_list(pop):
    with pytest.raises(RunDirError) as e:
        proxima.train_population(_config(), seeds=[2], run_dir=pop, quiet=True)
    assert str(e.value).split("...): ", 1)[1] == (
        f"it holds a population of seeds [1, 2], [2] among them (`proxima report {pop}` reports it); to train them "
        "again, start over with train_population(..., overwrite=True) (the old directory is moved aside)")


def test_only_the_seeds_it_lacks_train_beside_it_and_the_report_names_them_all(pop, capsys):
    assert _dry_line(capsys, pop, "--seeds", "2-3").split("...): ", 1)[1] == (
        f"it holds a population of seeds 1,2, which --resume auto continues with those seeds only; to add seed 3, train "
        f"it into a new directory (--seeds 3 --run-dir {pop}-seeds3) and pool the two: `proxima report "
        f"{pop}+{pop}-seeds3 --out {pop}-seeds1-3.md` (docs/populations.md, More seeds); or {OVER}")


def test_a_plus_in_the_populations_name_is_pooled_with_pool_not_a_plus(pop, tmp_path, capsys):
    run = shutil.copytree(pop, tmp_path / "a+b")
    assert _dry_line(capsys, run, "--seeds", "3").split("...): ", 1)[1] == (
        f"it holds a population of seeds 1,2, which --resume auto continues with those seeds only; to add seed 3, train "
        f"it into a new directory (--seeds 3 --run-dir {run}-seeds3) and pool the two: `proxima report {run} "
        f"{run}-seeds3 --pool --out {run}-seeds1-3.md` (docs/populations.md, More seeds); or {OVER}")


def test_a_space_in_the_populations_name_is_quoted_in_every_pasteable_command(pop, swept, tmp_path, capsys):
    run = shutil.copytree(pop, tmp_path / "my pop")
    assert _dry_line(capsys, run, "--seeds", "3").split("...): ", 1)[1] == (
        f"it holds a population of seeds 1,2, which --resume auto continues with those seeds only; to add seed 3, train "
        f"it into a new directory (--seeds 3 --run-dir '{run}-seeds3') and pool the two: `proxima report "
        f"'{run}+{run}-seeds3' --out '{run}-seeds1-3.md'` (docs/populations.md, More seeds); or {OVER}")
    assert f"(`proxima report '{run}'` reports it)" in _dry_line(capsys, run, "--seeds", "1")
    other = shutil.copytree(swept, tmp_path / "my sweep")
    assert f"(`proxima report '{other}' NEW_DIR --out FILE.md` then compares the two)" in _dry_line(capsys, other, "--seeds", "1")

def test_a_population_that_wrote_no_checkpoint_keeps_the_start_over_line(pop, tmp_path, capsys):
    run = shutil.copytree(pop, tmp_path / "Q")
    for f in (run / "checkpoints").iterdir():
        f.unlink()
    assert _dry_line(capsys, run, "--seeds", "3").split("...): ", 1)[1] == (
        "it holds another run, which wrote no checkpoint; start over with --resume auto or --overwrite (either moves "
        "the old directory aside), or choose another --run-dir")


def test_a_population_file_with_no_seeds_keeps_the_resume_line(pop, tmp_path, capsys):
    run = shutil.copytree(pop, tmp_path / "E")
    doc = json.loads((run / "population.json").read_text())
    (run / "population.json").write_text(json.dumps({**doc, "seeds": []}))
    assert _dry_line(capsys, run, "--seeds", "3").split("...): ", 1)[1] == (
        f"it holds another run; continue it with --resume auto (or `proxima resume {run}`), start over with --overwrite "
        "(the old directory is moved aside), or choose another --run-dir")


# --- train_population's sweep entry -------------------------------------------------------------------------------------
@pytest.mark.parametrize("sweep, line", [
    ({"lr": [1e-3] * 8}, "sweep={'lr': [0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001]}: a value is repeated"),
    ({"learning-rate": [1e-3, 1e-3]}, "sweep={'learning-rate': [0.001, 0.001]}: a value is repeated"),
])
def test_eight_values_are_shown_whole_and_a_hyphenated_key_as_written(tmp_path, sweep, line):
    with pytest.raises(ConfigError) as e:
        proxima.train_population(_config(), seeds=[1], sweep=sweep, run_dir=tmp_path / "pop", quiet=True)
    assert str(e.value) == line
    assert not (tmp_path / "pop").exists()
