"""``proxima report A+A2`` fixes: a population named twice in one argument (``A+A``, ``A+./A``, ``A+``) is
that population's report, not 'no such directory'; populations that differ only in fields that change neither
what a member learns nor how its return is measured (checkpoints, progress, device, threads, ...) pool, and the
report names the difference; a pool whose one population trained past its members' evaluation says which.
Populations are made by hand (test_pool_mut46's fixture: nothing trained or evaluated)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from proxima.config import FIELDS
from proxima.logger import CSV_COLUMNS
from proxima.population_report import POOL_FREE_FIELDS
from tests.cli_helpers import one_error_line
from tests.unit.test_pool_mut46 import PROG, _json, _report
from tests.unit.test_report_pool46 import ADDED, FIRST, STEP, _population

DOCS = Path(__file__).resolve().parents[2] / "docs" / "populations.md"


@pytest.mark.parametrize("arg", ["A+A", "A+./A", "A+L", "A+"])
def test_a_population_named_twice_in_one_argument_is_that_population_alone(tmp_path, capsys, monkeypatch, arg):
    monkeypatch.chdir(tmp_path)
    _population(tmp_path / "A", FIRST)
    (tmp_path / "L").symlink_to("A")
    code, err = _report([arg, "--out", "x.md", "--json", "x.json"], capsys)
    assert code == 0, err
    doc = _json(tmp_path / "x.json")
    assert doc["population"] == "A" and doc["settings"][0]["n"] == 5 and "pooled" not in doc
    assert (tmp_path / "x.md").read_text().startswith("# Population report: A\n")


def test_a_population_named_twice_beside_another_is_compared_with_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _population(tmp_path / "A", FIRST), _population(tmp_path / "B", ADDED)
    code, err = _report(["A+A", "B", "--out", "cmp.md", "--json", "cmp.json"], capsys)
    assert code == 0, err
    doc = _json(tmp_path / "cmp.json")
    assert doc["kind"] == "populations" and [p["dir"] for p in doc["populations"]] == ["A", "B"]
    assert [(r["population"], r["n"]) for r in doc["rows"]] == [("A", 5), ("B", 5)]


#: a value of each POOL_FREE_FIELDS field other than the one A records
OTHER = {"device": "cuda", "threads": 2, "flush_denormal": False, "keep_host_memory": False, "deterministic": False,
         "compile": True, "compile_mode": "max-autotune", "cudagraphs": True, "vector": "async", "checkpoint_every": 10,
         "checkpoint_minutes": 0.0, "keep_checkpoints": 0, "progress": False, "debug_checks": True, "plot": True,
         "stop_return": 475.0, "stop_episodes": 5}


def test_populations_differing_only_in_bookkeeping_fields_pool_and_the_report_names_them(tmp_path, capsys):
    assert set(OTHER) == set(POOL_FREE_FIELDS)
    ours = {k: FIELDS[k].default for k in POOL_FREE_FIELDS}
    a = _population(tmp_path / "A", FIRST, **ours)
    a2 = _population(tmp_path / "A2", ADDED, **OTHER)
    out = tmp_path / "p.md"
    code, err = _report([f"{a}+{a2}", "--out", out, "--json", tmp_path / "p.json"], capsys)
    assert code == 0, err
    assert _json(tmp_path / "p.json")["settings"][0]["n"] == 10
    text = out.read_text()
    assert "checkpoint_every: 50 in A, 10 in A2; " in text and "device: cpu in A, cuda in A2; " in text
    assert "; stop_episodes: 20 in A, 5 in A2." in text
    (note,) = [line for line in text.splitlines() if "checkpoint_every: 50 in A" in line]
    assert note.startswith("- note: fields that change no member's learning or measured return differ between the "
                           "populations, pooled as they are (docs/populations.md): ")
    assert note.count(" in A2") == len(POOL_FREE_FIELDS)


def test_populations_alike_in_bookkeeping_fields_have_no_note_of_them(tmp_path, capsys):
    a, a2 = _population(tmp_path / "A", FIRST, checkpoint_every=10), _population(tmp_path / "A2", ADDED, checkpoint_every=10)
    code, err = _report([f"{a}+{a2}", "--out", tmp_path / "p.md"], capsys)
    assert code == 0, err
    assert "change no member's learning or measured return differ" not in (tmp_path / "p.md").read_text()


@pytest.mark.parametrize("field, ours, theirs", [("eval_episodes", 20, 10), ("eval_every", 0, 5000),
                                                 ("init_from", None, "runs/x"), ("amp", "none", "bf16"),
                                                 ("backend", "native", "gymnasium"), ("lr", 0.001, 0.002)])
def test_populations_differing_in_what_changes_learning_or_its_measure_are_still_refused(tmp_path, capsys, field,
                                                                                          ours, theirs):
    a = _population(tmp_path / "A", FIRST, **{field: ours})
    a2 = _population(tmp_path / "A2", ADDED, **{field: theirs})
    code, err = _report([f"{a}+{a2}", "--out", tmp_path / "p.md"], capsys)
    assert code == 2
    shown = lambda v: "null" if v is None else str(v)  # noqa: E731
    assert one_error_line(err, PROG).startswith(f"{field}: {shown(ours)} in A, {shown(theirs)} in A2; a pool (A+A2) ")
    assert not (tmp_path / "p.md").exists()


def test_the_fields_pooling_lets_differ_are_config_fields_listed_in_the_docs():
    section = DOCS.read_text().split("### More seeds: pooling")[1].split("\n### ")[0]
    listed = set(re.findall(r"`(\w+)`", section.split("Pooled populations may differ")[1].split("Everything else")[0]))
    assert set(POOL_FREE_FIELDS) <= set(FIELDS)
    assert set(POOL_FREE_FIELDS) == listed - {"POOL_FREE_FIELDS"}
    assert not {"eval_episodes", "eval_every", "init_from", "amp", "total_timesteps"} & set(POOL_FREE_FIELDS)


def _train_on(member: Path, step: int) -> None:
    """A metrics.csv row at ``step`` past the member's checkpoint and eval.json (a population stopped between
    checkpoints)."""
    with open(member / "metrics.csv", "a", newline="") as f:
        csv.DictWriter(f, fieldnames=CSV_COLUMNS).writerow({"iteration": 3, "global_step": step, "time": 3.0,
                                                            "episodes": 1, "charts/SPS": 1000,
                                                            "charts/episodic_return": 1.0})


@pytest.mark.parametrize("order", [("A", "A2"), ("A2", "A")])
def test_a_pool_names_the_population_that_trained_past_its_members_evaluation(tmp_path, capsys, monkeypatch, order):
    monkeypatch.chdir(tmp_path)
    a = _population(tmp_path / "A", FIRST)
    _population(tmp_path / "A2", ADDED)
    for member in (m for m in a.iterdir() if m.is_dir()):
        _train_on(member, STEP + 2048)
    code, err = _report(["+".join(order), "--out", "p.md"], capsys)
    assert code == 0, err
    assert (f"Evaluated at step {STEP:,} (the members' newest checkpoints; A's members' metrics.csv reached "
            f"{STEP + 2048:,}), over 20 episodes per member.") in (tmp_path / "p.md").read_text()


def test_a_pool_whose_populations_stopped_at_their_evaluation_says_no_more(tmp_path, capsys):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    code, err = _report([f"{a}+{a2}", "--out", tmp_path / "p.md"], capsys)
    assert code == 0, err
    assert f"Evaluated at step {STEP:,}, over 20 episodes per member." in (tmp_path / "p.md").read_text()


def test_the_pool_free_fields_are_the_population_run_wide_fields_but_those_that_change_learning_or_the_measure():
    # two lists of one fact: a field added to population._RUN_WIDE must be decided for pooling too
    from proxima.population import _RUN_WIDE

    assert set(POOL_FREE_FIELDS) == _RUN_WIDE - {"amp", "init_from", "eval_episodes", "eval_every", "run_dir"}


def test_sweeping_vector_is_refused_as_a_setting_of_the_whole_run(capsys):
    from tests.cli_helpers import error_line, run_main

    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--sweep", "vector=sync,async", "--dry-run"], capsys)
    line = error_line(code, err)
    assert "changes the shapes" not in line and "whole run" in line, line
