"""Mutation gaps of session 46's hostile-input hardening: a seed of -1 refused (0 and MAX_SEED taken), a value of
exactly 200 characters shown whole in a refusal, NaN inside a nested config value equal to NaN, a list config value
of another length refused by a pool (not compared over the shorter one), plot's legend clip at exactly 540
characters and of a long field name, a missing run that is not a symlink loop, one symlink loop spelled twice taken
once, and a reward file's hint at exactly 1 MB (no ', ...') and past 256 kB (scanned, not parsed with ast)."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest
import yaml

from proxima.config import MAX_SEED
from proxima.plot import _clip, _setting_labels, path_problem, unique_dirs
from proxima.population_report import PopulationError, _same, read_settings, shortened
from proxima.rlhf.rewards import HINT_AST_BYTES, HINT_SCAN_BYTES, _defines
from tests.cli_helpers import one_error_line, run_main
from tests.unit.test_report_pool46 import _population

COMMAND = ["proxima", "train", "--env", "Fake-v0", "--seeds", "1-2"]


def _set_seed(run: Path, index: int, seed) -> None:
    path = run / "population.json"
    doc = json.loads(path.read_text())
    doc["member_dirs"][index]["seed"] = seed
    path.write_text(json.dumps(doc))


# --- population_report ---------------------------------------------------------------------------------------------

def test_a_seed_of_minus_one_is_refused_and_the_ends_of_the_range_are_taken(tmp_path):
    a = _population(tmp_path / "A", {1: 10.0, 2: 20.0}, command=COMMAND)
    _set_seed(a, 0, -1)
    with pytest.raises(PopulationError) as e:
        read_settings(a)
    assert str(e.value) == (f"{a / 'population.json'}: member entry 'm000-seed1' has seed -1, not an integer in "
                            "0..2,147,483,647; the population's population.json was damaged or edited")
    _set_seed(a, 0, 0)
    _set_seed(a, 1, MAX_SEED)
    (setting,) = read_settings(a)
    assert sorted(seed for seed, _ in setting.members) == [0, MAX_SEED]


def test_a_value_of_exactly_200_characters_is_shown_whole_and_201_is_cut_with_its_length():
    assert shortened("x" * 200) == "x" * 200
    assert shortened("x" * 201) == "x" * 200 + "… (201 characters)"


def test_nan_nested_in_a_config_value_is_equal_to_nan_and_lists_of_other_lengths_are_not_equal():
    # two NaN objects (not the one YAML shares): nested in a dict or a list they are still one setting
    assert _same({"thr": float("nan")}, {"thr": float("nan")})
    assert _same({"thr": [1.0, float("nan")]}, {"thr": [1.0, float("nan")]})
    assert not _same({"thr": float("nan")}, {"thr": 1.0})
    assert not _same([1], [1, 2]) and not _same({"sizes": [64]}, {"sizes": [64, 64]})


def test_a_pool_of_configs_whose_list_values_differ_in_length_is_refused(tmp_path, capsys):
    a = _population(tmp_path / "A", {1: 10.0, 2: 20.0}, command=COMMAND, env_kwargs={"sizes": [64, 64]})
    a2 = _population(tmp_path / "A2", {3: 12.0, 4: 22.0}, command=COMMAND, env_kwargs={"sizes": [64, 64]})
    config = a2 / "m000-seed3" / "config.yaml"
    config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "env_kwargs": {"sizes": [64]}}))
    out = tmp_path / "p.md"
    code, _, err = run_main(["report", f"{a}+{a2}", "--out", str(out)], capsys)
    assert code == 2, err  # not one setting of n=4: the second population's first member has one layer fewer
    line = one_error_line(err, "proxima report")
    assert line.startswith('env_kwargs: `{"sizes": [64, 64]}` in A, `{"sizes": [64]}` in A2; '), line
    assert not out.exists()


# --- plot ----------------------------------------------------------------------------------------------------------

def test_a_legend_value_of_exactly_540_characters_is_kept_whole_and_541_is_cut():
    assert _clip("v" * 540) == "v" * 540
    assert _clip("v" * 541) == "v" * 40 + "... (541 characters)"


def test_a_field_name_too_long_for_a_legend_entry_is_cut_in_its_label():
    labels = _setting_labels([{"k" * 600: 1}, {"k" * 600: 2}])
    assert labels == ["k" * 40 + "... (600 characters)=1", "k" * 40 + "... (600 characters)=2"]


def test_a_missing_run_directory_is_no_such_directory_not_a_symlink_loop(tmp_path):
    missing = tmp_path / "nope"
    assert path_problem(missing) == f"{missing}: no such directory"
    os.symlink("nowhere", tmp_path / "dangling")  # a link to nothing is missing too, not a loop
    assert path_problem(tmp_path / "dangling") == f"{tmp_path / 'dangling'}: no such directory"


def test_one_symlink_loop_named_twice_is_one_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.symlink("loop2", tmp_path / "loop1")
    os.symlink("loop1", tmp_path / "loop2")
    assert unique_dirs(["loop1", str(tmp_path / "loop1"), "loop2"]) == [Path("loop1"), Path("loop2")]


# --- rlhf reward hint ----------------------------------------------------------------------------------------------

def _reward_file(path: Path, size: int) -> Path:
    head = "def first(prompts, responses):\n    return 0\n"
    tail = "def last(prompts, responses):\n    return 1\n"
    line = "# " + "p" * 77 + "\n"  # 80 bytes
    pad = size - len(head) - len(tail)
    body = line * (pad // len(line)) + "#" * (pad % len(line) - 1) + "\n" if pad % len(line) else line * (pad // len(line))
    path.write_text(head + body + tail)
    assert path.stat().st_size == size
    return path


def test_a_reward_file_of_exactly_one_megabyte_is_read_whole_without_a_cut_mark(tmp_path):
    f = _reward_file(tmp_path / "mb.py", HINT_SCAN_BYTES)
    assert _defines(str(f), "it") == " (it defines first, last)"
    g = _reward_file(tmp_path / "over.py", HINT_SCAN_BYTES + 100)  # past it: the tail is not read, and said so
    assert _defines(str(g), "it") == " (it defines first, ...)"


def test_a_reward_file_past_256_kb_is_scanned_not_parsed_with_ast(tmp_path, monkeypatch):
    sizes = []
    parse = ast.parse

    def spy(source, *args, **kwargs):
        sizes.append(len(source))
        return parse(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", spy)
    small = _reward_file(tmp_path / "small.py", 4096)
    assert _defines(str(small), "it") == " (it defines first, last)"
    assert sizes == [4096]
    big = _reward_file(tmp_path / "big.py", HINT_AST_BYTES + 1)
    assert _defines(str(big), "it") == " (it defines first, last)"
    assert sizes == [4096]  # ast holds about 400 bytes per byte of source: a big file is never handed to it
