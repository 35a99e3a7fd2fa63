"""`proxima report` parses each config.yaml once (report.parsed_yaml: the report's table, its edit notes, the curve's
label and setting read one parse; a file rewritten since is parsed again), and cuts a cell's text from a run's files
(meta.json's preset, the env id, a config.yaml value, a note's value) to report.CELL_MAX_CHARS, its start kept."""

from __future__ import annotations

import json
import os
import shutil
from collections import OrderedDict
from pathlib import Path

import pytest

from proxima import report
from tests.cli_helpers import tiny_cartpole_run, tiny_population

# parsed: tests/conftest.py's fixture, the length of every text config.load_yaml parses


@pytest.fixture(autouse=True)
def _no_parse_kept(monkeypatch):
    """Each test starts with no config.yaml parsed (another test's report may have read one)."""
    monkeypatch.setattr(report, "_PARSED", OrderedDict(), raising=False)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    return tiny_cartpole_run(tmp_path_factory, "cache48")


@pytest.fixture(scope="module")
def population(tmp_path_factory) -> Path:
    return tiny_population(tmp_path_factory, "cache48pop", 64)


@pytest.fixture
def run(finished, tmp_path) -> Path:
    """A copy of the finished run, this test's to edit."""
    return Path(shutil.copytree(finished, tmp_path / "run"))


def _config_row(text: str, field: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {field} |"))


def test_a_report_of_one_run_parses_its_config_yaml_once(run, parsed):
    report.build_report([run], out=run / "r.md", episodes=0)
    assert parsed == [len((run / "config.yaml").read_text())]  # 7 parses before: 46 s for a 1 MiB file


def test_a_report_of_a_population_parses_each_members_config_yaml_once(population, tmp_path, parsed):
    pop = Path(shutil.copytree(population, tmp_path / "P"))
    report.build_population_report(pop, out=tmp_path / "p.md")
    members = sorted(pop.glob("m*/config.yaml"))
    assert len(members) == 2
    assert sorted(parsed) == sorted(len(p.read_text()) for p in members)


def test_a_config_yaml_rewritten_between_two_reports_is_parsed_again(run, parsed):
    out, path = run / "r.md", run / "config.yaml"
    report.build_report([run], out=out, episodes=0)
    assert _config_row(out.read_text(), "clip_coef") == "| clip_coef | 0.2 |"
    report.build_report([run], out=out, episodes=0)
    assert len(parsed) == 1  # unchanged: its parse is kept

    # the same size and, as a coarse clock can leave it, the same mtime: the text itself differs
    before = path.stat()
    path.write_text(path.read_text().replace("clip_coef: 0.2\n", "clip_coef: 0.3\n"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    report.build_report([run], out=out, episodes=0)
    assert _config_row(out.read_text(), "clip_coef") == "| clip_coef | 0.3 |"

    path.write_text(path.read_text().replace("clip_coef: 0.3\n", "clip_coef: 0.25\n"))
    report.build_report([run], out=out, episodes=0)
    assert _config_row(out.read_text(), "clip_coef") == "| clip_coef | 0.25 |"
    assert len(parsed) == 3


def test_a_10_kb_preset_in_meta_json_is_cut_to_its_start_and_an_ellipsis(run):
    meta = json.loads((run / "meta.json").read_text())
    meta["preset"] = "CartPole-v1/tuned" + "Z" * 10_000 + "END"
    (run / "meta.json").write_text(json.dumps(meta))
    report.build_report([run], out=run / "r.md", episodes=0)
    text = (run / "r.md").read_text()
    row = _config_row(text, "preset")
    assert row == "| preset | CartPole-v1/tuned" + "Z" * (report.CELL_MAX_CHARS - 3 - 17) + "... |"
    assert "END" not in text


def test_a_long_env_id_is_cut_in_the_title_the_table_and_the_edit_note(run):
    config = (run / "config.yaml").read_text()
    env = "CartPole-v1" + "x" * 5_000
    (run / "config.yaml").write_text(config.replace("env_id: CartPole-v1\n", f"env_id: {env}\n"))
    report.build_report([run], out=run / "r.md", episodes=0)
    text = (run / "r.md").read_text()
    cut = env[:report.CELL_MAX_CHARS - 3] + "..."
    assert text.splitlines()[0] == f"# Proxima report: {cut}"
    assert _config_row(text, "env") == f"| env | {cut} |"
    assert _config_row(text, "env_id") == f"| env_id | {cut} |"
    # the edit note quotes the config's env id as far as a cell shows it, and the checkpoint's whole
    note = next(line for line in text.splitlines() if "was edited after the run wrote it" in line)
    assert f"env_id {repr(env)[:report.CELL_MAX_CHARS - 3]}... differs" in note and "'CartPole-v1'" in note
    assert "x" * report.CELL_MAX_CHARS not in text


def test_a_long_config_value_is_cut_and_numbers_are_not(run):
    (run / "config.yaml").write_text((run / "config.yaml").read_text() + "pad: [" + ", ".join(["p" * 9] * 500) + "]\n")
    report.build_report([run], out=run / "r.md", episodes=0)
    text = (run / "r.md").read_text()
    assert _config_row(text, "pad") == "| pad | " + ", ".join(["p" * 9] * 7) + ", ... |"  # 77 characters, then ...
    assert _config_row(text, "iterations") == "| iterations | 2 |"
    assert _config_row(text, "total_timesteps") == "| total_timesteps | 128 |"


def test_a_command_is_cut_only_past_the_long_cells_limit(run):
    meta = json.loads((run / "meta.json").read_text())
    meta["command"] = ["proxima", "train", "CartPole-v1", "--run-dir", "/some/long/path/" + "d" * 150]
    (run / "meta.json").write_text(json.dumps(meta))
    report.build_report([run], out=run / "r.md", episodes=0)
    assert "d" * 150 in _config_row((run / "r.md").read_text(), "command")  # a real command: whole


def test_a_populations_shared_config_value_is_cut_as_a_runs_is(population, tmp_path):
    pop = Path(shutil.copytree(population, tmp_path / "P"))
    for config in pop.glob("m*/config.yaml"):
        config.write_text(config.read_text() + "pad: " + "q" * 3_000 + "\n")
    report.build_population_report(pop, out=tmp_path / "p.md")
    text = (tmp_path / "p.md").read_text()
    assert _config_row(text, "pad") == "| pad | " + "q" * (report.CELL_MAX_CHARS - 3) + "... |"
    assert "q" * report.CELL_MAX_CHARS not in text


def test_the_cache_keeps_at_most_parsed_max_bytes_of_text_and_always_the_newest(tmp_path, monkeypatch):
    # a notebook building many reports must not keep 256 one-megabyte configs parsed (~10x their text in objects)
    monkeypatch.setattr(report, "_PARSED", OrderedDict())
    monkeypatch.setattr(report, "PARSED_MAX_BYTES", 1000)
    texts = {}
    for name in ("a", "b", "c"):
        path = tmp_path / f"{name}.yaml"
        texts[name] = f"key: {name}\npad: '{'x' * 390}'\n"
        path.write_text(texts[name])
        assert report.parsed_yaml(path, texts[name])["key"] == name
    kept = [Path(k).stem for k in report._PARSED]
    assert kept == ["b", "c"]  # 3 x ~405 bytes > 1,000: the least recently used went
    big = tmp_path / "big.yaml"
    big.write_text("key: big\npad: '" + "y" * 2000 + "'\n")
    assert report.parsed_yaml(big, big.read_text())["key"] == "big"
    assert [Path(k).stem for k in report._PARSED] == ["big"]  # over the cap alone: kept, the others dropped
