"""A population's files are data: an edited population.json (a seed of text, null, NaN or past MAX_SEED, a member
folder listed twice, a setting no --sweep wrote, a member folder linked out of the run) is refused in one line naming
the file and the entry, by ``proxima report`` (A and A+A2) and by PopulationResult.read; report's "More seeds" never
advises a seed --seeds refuses, nor a command report.md cannot show as it runs (a directory named with ESC or a
newline, or one argparse would read as an option); a pool's refusal names a 10 MB value by its first characters."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import yaml

from proxima.checkpoint import CheckpointError
from proxima.config import MAX_SEED
from proxima.population_report import next_seeds
from proxima.population_run import PopulationResult
from tests.cli_helpers import one_error_line, run_main
from tests.unit.test_report_pool46 import _population

PROG = "proxima report"
COMMAND = ["proxima", "train", "--env", "Fake-v0", "--seeds", "1-2"]
PYTHON_CALL = "python: proxima.train_population(cfg, seeds=[1, 2]) from study.py"


def _edit(run: Path, edit) -> None:
    path = run / "population.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def _more_seeds(text: str) -> str:
    """report.md's "## More seeds" section (up to the next blank line after its advice)."""
    assert "## More seeds" in text, text
    return text.split("## More seeds", 1)[1].split("Per member:", 1)[0]


# --- seeds ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed, shown", [("3", "'3'"), (None, "None"), (math.nan, "nan"), (math.inf, "inf"),
                                         ([1], "[1]"), ({"a": 1}, "{'a': 1}"), (True, "True"), (-5, "-5"),
                                         (MAX_SEED + 1, str(MAX_SEED + 1))],
                         ids=["text", "null", "nan", "inf", "list", "dict", "bool", "negative", "past-max"])
def test_a_pooled_population_whose_member_seed_was_edited_is_refused_naming_the_file_and_entry(tmp_path, capsys,
                                                                                               seed, shown):
    a = _population(tmp_path / "A", {1: 10.0, 2: 20.0}, command=COMMAND)
    a2 = _population(tmp_path / "A2", {3: 12.0, 4: 22.0}, command=COMMAND)
    _edit(a2, lambda doc: doc["member_dirs"][0].update(seed=seed))
    out = tmp_path / "p.md"
    code, _, err = run_main(["report", f"{a}+{a2}", "--out", str(out)], capsys)
    assert code == 2
    assert one_error_line(err, PROG) == (f"{a2 / 'population.json'}: member entry 'm000-seed3' has seed {shown}, not an "
                                         "integer in 0..2,147,483,647; the population's population.json was damaged or "
                                         "edited")
    assert not out.exists()


def test_a_single_population_whose_member_seed_is_text_is_refused_in_one_line(tmp_path, capsys):
    a = _population(tmp_path / "A", {1: 10.0, 2: 20.0}, command=COMMAND)
    _edit(a, lambda doc: doc["member_dirs"][1].update(seed="2"))
    code, _, err = run_main(["report", str(a)], capsys)
    assert code == 2
    assert one_error_line(err, PROG).startswith(f"{a / 'population.json'}: member entry 'm001-seed2' has seed '2', ")


def test_a_member_folder_listed_twice_is_refused_instead_of_counted_again(tmp_path, capsys):
    a = _population(tmp_path / "A", {1: 10.0, 2: 20.0}, command=COMMAND)
    a2 = _population(tmp_path / "A2", {3: 12.0, 4: 22.0}, command=COMMAND)
    _edit(a2, lambda doc: doc["member_dirs"].extend({"dir": "m000-seed3", "seed": s, "settings": {}} for s in (50, 51)))
    js = tmp_path / "p.json"
    for argv in (["report", f"{a}+{a2}", "--out", str(tmp_path / "p.md"), "--json", str(js)],
                 ["report", str(a2), "--out", str(tmp_path / "q.md"), "--json", str(js)]):
        code, _, err = run_main(argv, capsys)
        assert code == 2  # not a report of n=14 (or n=4 for A2 alone) from 4 (2) members
        assert one_error_line(err, PROG) == (f"{a2 / 'population.json'}: member folder 'm000-seed3' is listed twice "
                                             "(seeds 3 and 50); the population's population.json was damaged or "
                                             "edited: keep one entry per folder")
        assert not js.exists()


# --- More seeds ----------------------------------------------------------------------------------------------------

def test_next_seeds_past_max_seed_are_the_lowest_unused_ones():
    assert next_seeds([1, 2, 3, 4, 5]) == [6, 7, 8, 9, 10]
    assert next_seeds([MAX_SEED - 1, MAX_SEED]) == list(range(0, 8))
    assert next_seeds([0, MAX_SEED - 2]) == sorted([MAX_SEED - 1, MAX_SEED, *range(1, 7)])


def test_more_seeds_of_seeds_at_the_top_advises_seeds_train_takes(tmp_path, capsys):
    top = {MAX_SEED - 1: 10.0, MAX_SEED: 20.0}
    a = _population(tmp_path / "A", top, command=["proxima", "train", "--env", "Fake-v0", "--seeds", "2147483646-2147483647"])
    code, _, err = run_main(["report", str(a)], capsys)
    assert code == 0, err
    section = _more_seeds((a / "report.md").read_text())
    assert f"- `proxima train --env Fake-v0 --seeds 0-7 --run-dir {a}-seeds0-7`" in section
    assert f"--out {a}-seeds0-7,2147483646,2147483647.md`" in section
    assert str(MAX_SEED + 1) not in section


def test_more_seeds_of_a_python_population_at_the_top_names_a_call_not_a_traceback(tmp_path, capsys):
    b = _population(tmp_path / "B", {MAX_SEED - 3: 10.0, MAX_SEED - 2: 20.0})
    for member in ("m000-seed2147483644", "m001-seed2147483645"):
        (b / member / "meta.json").write_text(json.dumps({"command": PYTHON_CALL}))
    code, _, err = run_main(["report", str(b)], capsys)
    assert code == 0, err
    section = _more_seeds((b / "report.md").read_text())
    assert f"seeds=[0, 1, 2, 3, 4, 5, 2147483646, 2147483647], run_dir='{b}-seeds0-5,2147483646,2147483647')" in section


@pytest.mark.parametrize("name, shown", [("e\x1b[31mR", "`e\\x1b[31mR`"), ("x\ny", "`x\\ny`")], ids=["esc", "newline"])
def test_more_seeds_of_a_directory_named_with_control_characters_gives_no_command(tmp_path, capsys, monkeypatch,
                                                                                  name, shown):
    monkeypatch.chdir(tmp_path)
    _population(Path(name), {1: 10.0, 2: 20.0}, command=COMMAND)
    code, _, err = run_main(["report", name, "--out", "r.md"], capsys)
    assert code == 0, err
    text = (tmp_path / "r.md").read_text()
    assert "\x1b" not in text
    section = _more_seeds(text)
    assert "proxima train" not in section and "proxima report" not in section
    assert (f"To add seeds to {shown}, rename it first: its path holds a control character (a newline, ESC), which a "
            "command in this file cannot show as it runs.") in section


def test_more_seeds_of_a_directory_named_like_an_option_keeps_its_dot_slash(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _population(Path("-A"), {5: 5.0, 6: 6.0}, command=COMMAND)
    _population(Path("A B"), {1: 1.0, 2: 2.0}, command=COMMAND)
    code, _, err = run_main(["report", "./-A+A B", "--out", "r.md"], capsys)
    assert code == 0, err
    section = _more_seeds((tmp_path / "r.md").read_text())
    assert "- `proxima train --env Fake-v0 --seeds 7-12 --run-dir ./-A-seeds7-12`" in section
    assert "`proxima report './-A+A B+./-A-seeds7-12' --out ./-A-seeds1,2,5-12.md`" in section


# --- pool refusals -------------------------------------------------------------------------------------------------

def test_a_pool_refusal_names_a_huge_value_by_its_first_characters_and_length(tmp_path, capsys):
    a = _population(tmp_path / "A", {1: 10.0, 2: 20.0}, command=COMMAND)
    a2 = _population(tmp_path / "A2", {3: 12.0, 4: 22.0}, command=COMMAND)
    config = a2 / "m000-seed3" / "config.yaml"
    fields = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**fields, "env_kwargs": {"blob": "x" * 100_000}}))
    code, _, err = run_main(["report", f"{a}+{a2}", "--out", str(tmp_path / "p.md")], capsys)
    assert code == 2
    line = one_error_line(err, PROG)
    assert line.startswith('env_kwargs: absent in A, {"blob": "' + "x" * 190)
    assert "… (100,012 characters) in A2; " in line and len(line) < 600


def test_pooled_populations_whose_configs_both_hold_nan_are_one_setting(tmp_path, capsys):
    a = _population(tmp_path / "A", {1: 10.0, 2: 20.0}, command=COMMAND, ent_coef=math.nan,
                    env_kwargs={"thr": math.nan})
    a2 = _population(tmp_path / "A2", {3: 12.0, 4: 22.0}, command=COMMAND, ent_coef=math.nan,
                     env_kwargs={"thr": math.nan})
    js = tmp_path / "p.json"
    code, _, err = run_main(["report", f"{a}+{a2}", "--out", str(tmp_path / "p.md"), "--json", str(js)], capsys)
    assert code == 0, err
    assert json.loads(js.read_text())["settings"][0]["n"] == 4


def test_a_pool_refusal_of_two_members_of_the_first_population_names_both_members(tmp_path, capsys):
    a = _population(tmp_path / "A", {1: 10.0, 2: 20.0}, command=COMMAND)
    a2 = _population(tmp_path / "A2", {3: 12.0, 4: 22.0}, command=COMMAND)
    config = a / "m001-seed2" / "config.yaml"
    config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "ent_coef": 0.5}))
    code, _, err = run_main(["report", f"{a}+{a2}", "--out", str(tmp_path / "p.md")], capsys)
    assert code == 2
    assert one_error_line(err, PROG).startswith("ent_coef: absent in A/m000-seed1, 0.5 in A/m001-seed2; ")


# --- PopulationResult.read -----------------------------------------------------------------------------------------

def test_read_refuses_an_eval_mean_return_past_a_float_naming_the_entry(tmp_path):
    a = _population(tmp_path / "A", {1: 10.0, 2: 20.0})
    _edit(a, lambda doc: doc["member_dirs"][0].update(eval_mean_return=10 ** 400))
    with pytest.raises(CheckpointError) as info:
        PopulationResult.read(a)
    assert str(info.value) == (f"{a / 'population.json'}: member entry 'm000-seed1' has eval_mean_return "
                               f"{'1' + '0' * 199}… (401 characters), past a float's range; the population's "
                               "population.json was damaged or edited")


def test_read_refuses_a_setting_no_sweep_wrote_as_report_does(tmp_path):
    a = _population(tmp_path / "A", {1: 10.0, 2: 20.0})
    _edit(a, lambda doc: doc["member_dirs"][0].update(settings={"\x1b[31m": [1, {"a": 2}]}))
    with pytest.raises(CheckpointError) as info:
        PopulationResult.read(a)
    assert str(info.value).startswith(f"{a / 'population.json'}: member entry 'm000-seed1' has setting '\\x1b[31m', "
                                      "not a field a population sweeps (lr, ")


def test_read_refuses_a_member_folder_linked_out_of_the_population(tmp_path):
    a = _population(tmp_path / "A", {1: 10.0, 2: 20.0})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    member = a / "m000-seed1"
    os.rename(member, tmp_path / "moved")
    os.symlink(elsewhere, member)
    with pytest.raises(CheckpointError) as info:
        PopulationResult.read(a)
    assert str(info.value).startswith(f"{member}: is a symbolic link to {elsewhere}, outside the population directory {a}; ")
