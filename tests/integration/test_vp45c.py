"""Mutation survivors of review 45 (commits f162dd6, ad64c65), integration level: the combined report's
"How they differ" (a field the members of one population disagree on, a population with no config.yaml,
a name holding markup); a resume's missing-member check (a member that is a file, several missing); a
resume dry run's --anneal-lr note; where a dry run measures the free disk."""

from __future__ import annotations

import json
import shutil

import yaml

from proxima import population_report as pr
from proxima.report import _md
from tests.cli_helpers import TINY_POP, error_line, run_main, snapshot
from tests.integration import test_review34_compare as cmp
from tests.integration import test_poprun45 as poprun45
from tests.integration.test_poprun45 import _copy, _targets
from tests.integration.test_verdict45 import STRONG, WEAK, _with_config

pop = poprun45.pop  # the fixture: a finished 3-seed population of 2 iterations, --anneal-lr, trained once here


def _doc(run) -> dict:
    return json.loads((run / "population.json").read_text())


# ---------------------------------------------------------------- How they differ
def test_a_field_the_members_of_one_population_disagree_on_says_so(tmp_path):
    a = _with_config(cmp._population(tmp_path / "a", {None: WEAK}), num_envs=4, gamma=0.99)
    b = _with_config(cmp._population(tmp_path / "b", {None: STRONG}), num_envs=4, gamma=0.9)
    first = a / _doc(a)["member_dirs"][0]["dir"] / "config.yaml"
    first.write_text(yaml.safe_dump({**yaml.safe_load(first.read_text()), "num_envs": 8}, sort_keys=False))
    lines = pr.differences_section([a, b], ["a", "b"], [_doc(a), _doc(b)])
    assert [line for line in lines if line.startswith("| ")] == [
        "| field | a | b |", "| gamma | 0.99 | 0.9 |", "| num_envs | differs between members | 4 |"]


def test_a_population_with_no_config_yaml_is_named_and_two_are_not_compared(tmp_path):
    a = _with_config(cmp._population(tmp_path / "a", {None: WEAK}), num_envs=4)
    b = cmp._population(tmp_path / "b", {None: STRONG})
    for e in _doc(b)["member_dirs"]:
        (b / e["dir"] / "config.yaml").unlink()
    lines = pr.differences_section([a, b], ["a", "b"], [_doc(a), _doc(b)])
    assert "No two populations have a config.yaml to compare." in lines
    assert "- note: no member's config.yaml could be read in b." in lines
    assert not any(line.startswith("| ") for line in lines)
    assert not any(line.startswith("No config field differs") for line in lines)


def test_a_population_name_holding_markup_is_shown_not_rendered(tmp_path):
    a = _with_config(cmp._population(tmp_path / "a", {None: WEAK}), ["proxima", "train", "CartPole-v1"], num_envs=4)
    b = _with_config(cmp._population(tmp_path / "b", {None: STRONG}), num_envs=2)
    name = "a[click](http://evil)"
    assert _md(name) != name
    lines = pr.differences_section([a, b], [name, "b"], [_doc(a), _doc(b)])
    assert f"| field | {_md(name)} | b |" in lines
    assert f"- {_md(name)}: `proxima train CartPole-v1`" in lines
    assert not any(name in line.replace(_md(name), "") for line in lines)


# ---------------------------------------------------------------- the resume's missing-member check
def test_a_member_folder_that_is_a_file_is_refused_before_anything_is_written(pop, tmp_path, capsys):
    run = _copy(pop, tmp_path)
    shutil.rmtree(run / "m001-seed2")
    (run / "m001-seed2").write_text("not a folder")
    before = snapshot(run)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "128", "--no-progress"], capsys)
    error_line(code, err, f"{run / 'm001-seed2'}: member m001-seed2's folder is not a folder")
    assert snapshot(run) == before


def test_several_member_folders_missing_are_counted(pop, tmp_path, capsys):
    run = _copy(pop, tmp_path)
    shutil.rmtree(run / "m000-seed1")
    shutil.rmtree(run / "m002-seed3")
    before = snapshot(run)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "128", "--no-progress"], capsys)
    error_line(code, err, f"{run / 'm000-seed1'}: member m000-seed1's folder is missing (2 of the 3 members' folders "
                          "are, first m000-seed1)")
    assert snapshot(run) == before
    assert _targets(run)["population.json"] == 64


# ---------------------------------------------------------------- the resume dry run's notes
def test_a_resume_dry_run_gives_the_anneal_lr_note_the_resume_gives(pop, tmp_path, capsys):
    run = _copy(pop, tmp_path)
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-3", "--resume", str(run), "--total-timesteps", "128",
                             "--dry-run", *TINY_POP], capsys)
    assert code == 0, err
    dry = [line for line in err.splitlines() if "--anneal-lr" in line]
    code, _, real = run_main(["resume", str(run), "--total-timesteps", "128", "--no-progress"], capsys)
    assert code == 0, real
    assert dry and dry == [line for line in real.splitlines() if "--anneal-lr" in line]


# ---------------------------------------------------------------- where the dry run measures the disk
def test_a_dry_run_measures_the_free_disk_where_the_run_would_go(tmp_path, monkeypatch, capsys):
    from proxima import diskspace

    asked, real = [], diskspace.free_bytes
    monkeypatch.setattr(diskspace, "free_bytes", lambda path: asked.append(path) or real(path))
    run = tmp_path / "there" / "p2"
    code, out, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(run), "--total-timesteps", "64",
                               "--quiet", "--dry-run", *TINY_POP], capsys)
    assert code == 0, err
    assert asked[-1] == run and json.loads(out)["estimate"]["disk_free_bytes"] is not None
