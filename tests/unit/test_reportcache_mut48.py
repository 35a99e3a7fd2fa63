"""Mutation survivors of commit 373a1ce (report.parsed_yaml's cache, the 80/1,000-character cell cap): the cache is
least recently used first and holds report.PARSED_MAX_FILES files, a rewritten file moves to its end, a parse error is
kept (its class too) and raised again, each reader gets its own deep copy, a file is kept by its resolved path, a file
gone since it was read is still parsed; a cell of exactly 80 characters is whole, a list is measured as written before
Markdown escaping, a number and the long cells (run_dir, env_kwargs, started from) are not cut at 80, a key is; two
runs whose values differ past the cut are in bold; a population's first line, shared config, versions and machine
rows, and "How they differ" cut as a run's report does."""

from __future__ import annotations

import json
import shutil
from collections import OrderedDict
from pathlib import Path

import pytest
import yaml

from proxima import plot, report
from proxima import population_report as pr
from proxima.config import yaml_alias_error
from tests.cli_helpers import tiny_cartpole_run, tiny_population

# parsed: tests/conftest.py's fixture, the length of every text config.load_yaml parses

CUT = report.CELL_MAX_CHARS


@pytest.fixture(autouse=True)
def _no_parse_kept(monkeypatch):
    monkeypatch.setattr(report, "_PARSED", OrderedDict())


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    return tiny_cartpole_run(tmp_path_factory, "mut48run")


@pytest.fixture(scope="module")
def population(tmp_path_factory) -> Path:
    return tiny_population(tmp_path_factory, "mut48pop", 64)


@pytest.fixture
def run(finished, tmp_path) -> Path:
    return Path(shutil.copytree(finished, tmp_path / "run"))


def _row(text: str, field: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {field} |"))


def _files(tmp_path, n: int) -> list:
    paths = []
    for i in range(n):
        p = tmp_path / f"c{i}.yaml"
        p.write_text(f"i: {i}\n")
        paths.append(p)
    return paths


def _read(path: Path):
    return report.parsed_yaml(path, path.read_text())


# ---------------------------------------------------------------- parsed_yaml's cache
def test_the_least_recently_used_file_is_the_one_let_go(tmp_path, parsed, monkeypatch):
    monkeypatch.setattr(report, "PARSED_MAX_FILES", 2)
    a, b, c = _files(tmp_path, 3)
    assert [_read(a), _read(b), _read(a), _read(c)] == [{"i": 0}, {"i": 1}, {"i": 0}, {"i": 2}]
    assert len(parsed) == 3  # a read again: kept
    _read(a)
    assert len(parsed) == 3  # a used after b: b let go, a kept
    _read(b)
    assert len(parsed) == 4


def test_a_file_parsed_again_after_a_rewrite_counts_as_the_newest(tmp_path, parsed, monkeypatch):
    monkeypatch.setattr(report, "PARSED_MAX_FILES", 2)
    a, b, c = _files(tmp_path, 3)
    _read(a), _read(b)
    a.write_text("i: 10\n")
    assert _read(a) == {"i": 10}
    _read(c)  # b is the oldest now
    assert len(parsed) == 4
    assert _read(a) == {"i": 10}
    assert len(parsed) == 4


def test_the_cache_holds_256_files_and_no_more(tmp_path, parsed):
    assert report.PARSED_MAX_FILES == 256
    paths = _files(tmp_path, 258)
    for p in paths:
        _read(p)
    assert len(parsed) == 258 and len(report._PARSED) == 256
    for p in paths[2:]:
        _read(p)
    assert len(parsed) == 258  # the newest 256: every one kept
    _read(paths[0])
    assert len(parsed) == 259


def test_a_parse_error_is_kept_and_raised_again_of_its_own_class(tmp_path, parsed):
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    for _ in range(2):
        with pytest.raises(yaml.YAMLError):
            _read(bad)
    alias = tmp_path / "alias.yaml"
    alias.write_text("a: &x 1\nb: *x\n")
    for _ in range(2):
        with pytest.raises(yaml_alias_error()):
            _read(alias)
    assert len(parsed) == 2


def test_an_alias_is_refused_by_the_report_each_time_it_reads_the_file(run):
    (run / "config.yaml").write_text("env_id: &x CartPole-v1\nother: *x\n")
    for _ in range(2):
        with pytest.raises(report.ReportError, match="alias"):
            report._read_yaml(run / "config.yaml")


def test_plot_reads_a_config_yaml_that_does_not_parse_as_none_each_time(run, parsed):
    (run / "config.yaml").write_text("env_id: [CartPole\n")
    assert plot.run_config(run) == {}
    assert plot.run_config(run) == {}
    assert len(parsed) == 1


def test_each_reader_gets_its_own_copy(tmp_path, parsed):
    p = tmp_path / "c.yaml"
    p.write_text("hidden_sizes: [64, 64]\nenv_kwargs: {a: 1}\n")
    first = _read(p)
    first["hidden_sizes"].append(1)
    first["env_kwargs"]["b"] = 2
    first["new"] = 3
    assert _read(p) == {"hidden_sizes": [64, 64], "env_kwargs": {"a": 1}}
    assert len(parsed) == 1


def test_a_file_is_kept_by_its_resolved_path(tmp_path, parsed):
    p = tmp_path / "c.yaml"
    p.write_text("i: 1\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(p)
    assert _read(p) == _read(link) == _read(tmp_path / "." / "c.yaml") == {"i": 1}
    assert len(parsed) == 1


def test_a_file_gone_since_it_was_read_is_still_parsed(tmp_path):
    assert report.parsed_yaml(tmp_path / "gone.yaml", "seed: 3\n") == {"seed": 3}
    assert not report._PARSED


# ---------------------------------------------------------------- the cell cap
def _with_meta(run: Path, **fields) -> None:
    meta = json.loads((run / "meta.json").read_text())
    meta.update(fields)
    (run / "meta.json").write_text(json.dumps(meta))


def _with_config(run: Path, extra: str) -> str:
    (run / "config.yaml").write_text((run / "config.yaml").read_text() + extra)
    report.build_report([run], out=run / "r.md", episodes=0)
    return (run / "r.md").read_text()


def test_a_preset_of_exactly_80_characters_is_whole_and_of_81_cut(run):
    for n, shown in ((CUT, "p" * CUT), (CUT + 1, "p" * (CUT - 3) + "...")):
        _with_meta(run, preset="p" * n)
        report.build_report([run], out=run / "r.md", episodes=0)
        assert _row((run / "r.md").read_text(), "preset") == f"| preset | {shown} |"


def test_a_list_is_measured_as_written_before_markdown_escapes_it(run):
    # 7 items of 9 characters: 75 as written, 89 once each item is in a code span
    text = _with_config(run, "pad: [" + ", ".join(["a*bcdefgh"] * 7) + "]\nexact: [" + ", ".join(["e" * 8] * 8) + "]\n")
    assert _row(text, "pad") == "| pad | " + ", ".join(["`a*bcdefgh`"] * 7) + " |"
    assert _row(text, "exact") == "| exact | " + ", ".join(["e" * 8] * 8) + " |"  # 78 characters: whole


def test_a_list_of_exactly_80_characters_is_whole_and_of_81_cut(run):
    items80, items81 = ["e" * 8] * 7 + ["e" * 10], ["e" * 8] * 7 + ["e" * 11]
    text = _with_config(run, f"e80: [{', '.join(items80)}]\ne81: [{', '.join(items81)}]\n")
    assert len(", ".join(items80)) == CUT
    assert _row(text, "e80") == f"| e80 | {', '.join(items80)} |"
    assert _row(text, "e81") == f"| e81 | {', '.join(items81)[:CUT - 3]}... |"


def test_a_mapping_is_cut_and_a_long_number_is_not(run):
    text = _with_config(run, "padmap: {" + ", ".join(f"k{i}: vvvvvvvv" for i in range(20)) + "}\nbig: " + "9" * 120 + "\n")
    assert _row(text, "padmap") == "| padmap | " + ", ".join(f"k{i}=vvvvvvvv" for i in range(20))[:CUT - 3] + "... |"
    assert _row(text, "big") == "| big | " + "9" * 120 + " |"


def test_a_long_key_is_cut(run):
    text = _with_config(run, "k" * 200 + ": 1\n")
    assert f"| {'k' * (CUT - 3)}... | 1 |" in text.splitlines()


def test_run_dir_and_env_kwargs_are_cut_only_past_1000_characters(run):
    path = "/" + "r" * 500
    kwargs = ", ".join(f"kw{i}: {i}" for i in range(60))
    config = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text("\n".join(f"env_kwargs: {{{kwargs}}}" if line.startswith("env_kwargs:") else line
                                               for line in config.splitlines()) + "\n")
    text = _with_config(run, "").replace("\\_", "_")
    assert _row(text, "env_kwargs") == "| env_kwargs | " + ", ".join(f"kw{i}={i}" for i in range(60)) + " |"
    config = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text("\n".join(f"run_dir: {path}" if line.startswith("run_dir:") else line
                                               for line in config.splitlines()) + "\n")
    report.build_report([run], out=run / "r.md", episodes=0)
    assert _row((run / "r.md").read_text(), "run_dir") == f"| run_dir | {path} |"
    config = (run / "config.yaml").read_text()
    long = "/" + "s" * 1100
    (run / "config.yaml").write_text(config.replace(path, long))
    report.build_report([run], out=run / "r.md", episodes=0)
    assert _row((run / "r.md").read_text(), "run_dir") == f"| run_dir | {long[:997]}... |"


def test_started_from_is_cut_only_past_1000_characters(run):
    checkpoint = "/ckpt/" + "c" * 300 + "/latest.pt"
    _with_meta(run, init_from={"checkpoint": checkpoint, "global_step": 64, "env_id": "CartPole-v1"})
    report.build_report([run], out=run / "r.md", episodes=0)
    assert _row((run / "r.md").read_text(), "started from") == f"| started from | {checkpoint} (step 64 of CartPole-v1) |"


def test_two_runs_whose_values_differ_past_the_cut_are_in_bold(finished, tmp_path):
    runs = [Path(shutil.copytree(finished, tmp_path / name)) for name in ("one", "two")]
    for r, end in zip(runs, "AB"):
        (r / "config.yaml").write_text((r / "config.yaml").read_text() + f"pad: {'s' * 100}{end}\nsame: {'t' * 100}\n")
    report.build_report(runs, out=tmp_path / "r.md", episodes=0)
    text = (tmp_path / "r.md").read_text()
    cut = "s" * (CUT - 3) + "..."
    assert f"| **pad** | {cut} | {cut} |" in text.splitlines()
    assert f"| same | {'t' * (CUT - 3)}... | {'t' * (CUT - 3)}... |" in text.splitlines()


def test_the_checkpoints_recorded_value_in_an_edit_note_is_cut(run, monkeypatch):
    from proxima import checkpoint

    load = checkpoint.load_checkpoint
    env = "CartPole-v1" + "y" * 500

    def long_env(*args, **kwargs):
        state = load(*args, **kwargs)
        return {**state, "config": {**state["config"], "env_id": env}}

    monkeypatch.setattr(checkpoint, "load_checkpoint", long_env)
    notes = report._edit_notes(run, {}, report._read_yaml(run / "config.yaml"))
    assert len(notes) == 1
    assert f"recorded {repr(env)[:CUT - 3]}...: config.yaml was edited" in notes[0]
    assert "y" * CUT not in notes[0]


# ---------------------------------------------------------------- a population's report
def test_a_populations_first_line_shared_config_versions_and_machine_are_cut(population, tmp_path):
    pop = Path(shutil.copytree(population, tmp_path / "P"))
    doc = json.loads((pop / "population.json").read_text())
    env = "CartPole-v1" + "z" * 300
    for config in pop.glob("m*/config.yaml"):
        kwargs = "{" + ", ".join(f"kw{i}: {i}" for i in range(60)) + "}"
        config.write_text("\n".join(f"env_kwargs: {kwargs}" if line.startswith("env_kwargs:") else line
                                     for line in config.read_text().splitlines()) + "\n" + "k" * 200 + ": 1\n")
    first = pop / doc["member_dirs"][0]["dir"] / "meta.json"
    meta = json.loads(first.read_text())
    meta["versions"] = {**meta.get("versions", {}), "numpy": "1." + "9" * 200}
    meta["host"] = "h" * 300
    meta["preset"] = "p" * 300
    first.write_text(json.dumps(meta))
    text = pr.provenance_section(pop, doc)
    lines = "\n".join(text if isinstance(text, list) else [text]).replace("\\_", "_").splitlines()
    assert f"| {'k' * (CUT - 3)}... | 1 |" in lines
    assert _row("\n".join(lines), "env_kwargs") == "| env_kwargs | " + ", ".join(f"kw{i}={i}" for i in range(60)) + " |"
    assert _row("\n".join(lines), "numpy") == "| numpy | 1." + "9" * (CUT - 5) + "... |"
    assert _row("\n".join(lines), "host") == f"| host | {'h' * 300} |"
    assert _row("\n".join(lines), "preset") == f"| preset | {'p' * (CUT - 3)}... |"
    line = pr._first_line(pop, {**doc, "env_id": env}, [])
    assert line.startswith(f"{env[:CUT - 3]}...: 2 members") and "z" * CUT not in line


def test_how_they_differ_compares_whole_values_and_shows_them_cut(population, tmp_path):
    pops = [Path(shutil.copytree(population, tmp_path / name)) for name in ("a", "b")]
    for p, end in zip(pops, "AB"):
        for config in p.glob("m*/config.yaml"):
            config.write_text(config.read_text() + f"pad: {'s' * 100}{end}\n{'k' * 200}: {end}\n")
    docs = [json.loads((p / "population.json").read_text()) for p in pops]
    lines = pr.differences_section(pops, ["a", "b"], docs)
    cut = "s" * (CUT - 3) + "..."
    assert f"| pad | {cut} | {cut} |" in lines
    assert f"| {'k' * (CUT - 3)}... | A | B |" in lines


def test_a_pooled_populations_first_line_and_a_tasks_reports_rows_cut_the_env_id(population):
    doc = {**json.loads((population / "population.json").read_text()), "env_id": "CartPole-v1" + "z" * 300}
    cut = doc["env_id"][:CUT - 3] + "..."
    pool = pr.Pool(dirs=[population, population], names=["A", "B"], docs=[doc, doc], settings=[])
    assert pr._first_line(pool, doc, []).startswith(f"{cut}: 0 members (0 seeds x 0 settings), pooled from 2 populations")
    text = pr.render_tasks([population], ["P"], [doc], [(0.0, 500.0, "given")], [[]], [], 0)
    assert f"| {cut} | P | 0 | 500 | given |" in text.splitlines()
    assert "z" * CUT not in text
