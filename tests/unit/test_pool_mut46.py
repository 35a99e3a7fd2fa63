"""Mutation-testing gaps of ``proxima report A+A2`` (pooling populations of one setting): what a user sees
when a directory's name holds a ``+``, a member diverged or lacks its config, a sweep lists its settings in
another order, a report pools and compares at once, the recorded train command spells its flags otherwise,
and where --json or --score-range may go. Populations are made by hand (nothing trained or evaluated)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.cli_helpers import one_error_line, run_main
from tests.unit.test_report_pool46 import ADDED, FIRST, _population

PROG = "proxima report"


def _report(args: list, capsys) -> tuple:
    code, _, err = run_main(["report", *map(str, args)], capsys)
    return code, err


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def test_a_population_whose_directory_name_holds_a_plus_is_that_directory_not_a_pool(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _population(tmp_path / "a+b", FIRST)
    code, err = _report(["a+b", "--out", "r.md", "--json", "r.json"], capsys)
    assert code == 0, err
    assert _json(tmp_path / "r.json")["population"] == "a+b" and _json(tmp_path / "r.json")["settings"][0]["n"] == 5
    assert (tmp_path / "r.md").read_text().startswith("# Population report: a+b\n")
    assert "## Pooled" not in (tmp_path / "r.md").read_text()


def test_a_plus_named_population_pools_with_another_given_apart_with_pool(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _population(tmp_path / "a+b", FIRST), _population(tmp_path / "A2", ADDED)
    code, err = _report(["a+b", "A2", "--pool", "--out", "p.md", "--json", "p.json"], capsys)
    assert code == 0, err
    doc = _json(tmp_path / "p.json")
    assert doc["pooled"] == [{"dir": "a+b", "seeds": [1, 2, 3, 4, 5]}, {"dir": "A2", "seeds": [6, 7, 8, 9, 10]}]
    assert doc["settings"][0]["n"] == 10


def test_a_doubled_plus_or_a_population_named_twice_in_a_pool_counts_it_once(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    for i, arg in enumerate(["A++A2", "A+A2+./A"]):
        code, err = _report([arg, "--out", f"p{i}.md", "--json", f"p{i}.json"], capsys)
        assert code == 0, (arg, err)
        doc = _json(tmp_path / f"p{i}.json")
        assert [p["dir"] for p in doc["pooled"]] == ["A", "A2"], arg
        assert doc["settings"][0]["n"] == 10, arg


def test_pool_flag_over_one_population_named_twice_reports_that_population_alone(tmp_path, capsys):
    a = _population(tmp_path / "A", FIRST)
    code, err = _report([a, f"{tmp_path}/./A", "--pool", "--out", tmp_path / "p.md", "--json", tmp_path / "p.json"],
                        capsys)
    assert code == 0, err
    doc = _json(tmp_path / "p.json")
    assert doc["settings"][0]["n"] == 5 and "pooled" not in doc


def test_a_sweep_pools_with_one_that_lists_its_settings_in_another_order(tmp_path, capsys):
    a = _population(tmp_path / "A", FIRST, lrs=(0.1, 0.2))
    a2 = _population(tmp_path / "A2", ADDED, lrs=(0.2, 0.1))
    code, err = _report([f"{a}+{a2}", "--out", tmp_path / "p.md", "--json", tmp_path / "p.json"], capsys)
    assert code == 0, err
    rows = _json(tmp_path / "p.json")["settings"]
    assert [(r["setting"], r["n"]) for r in rows] == [("lr=0.1", 10), ("lr=0.2", 10)]
    # each setting holds its own members of both populations: lr=0.2's returns are lr=0.1's + 0.1
    assert rows[1]["mean"] == pytest.approx(rows[0]["mean"] + 0.1)
    assert rows[0]["mean"] == pytest.approx(np.mean([*FIRST.values(), *ADDED.values()]) + 0.1)


def test_a_pooled_sweeps_first_line_counts_seeds_not_members(tmp_path, capsys):
    a = _population(tmp_path / "A", FIRST, lrs=(0.1, 0.2))
    a2 = _population(tmp_path / "A2", ADDED, lrs=(0.1, 0.2))
    code, err = _report([f"{a}+{a2}", "--out", tmp_path / "p.md"], capsys)
    assert code == 0, err
    text = (tmp_path / "p.md").read_text()
    assert "Fake-v0: 20 members (10 seeds x 2 settings), pooled from 2 populations (A: 4,096 steps each" in text


def test_a_diverged_member_of_the_added_population_is_left_out_of_the_pool_by_its_pooled_name(tmp_path, capsys):
    a = _population(tmp_path / "A", FIRST)
    a2 = _population(tmp_path / "A2", ADDED, diverged=("m001-seed7",))
    out, js = tmp_path / "p.md", tmp_path / "p.json"
    code, err = _report([f"{a}+{a2}", "--out", out, "--json", js], capsys)
    assert code == 0, err
    (row,) = _json(js)["settings"]
    kept = [v for s, v in {**FIRST, **ADDED}.items() if s != 7]
    assert row["n"] == 9 and row["mean"] == pytest.approx(np.mean(kept))
    text = out.read_text()
    assert "| (seeds only) | 9 of 10 (1 diverged) | " in text
    assert "- (seeds only): left out: A2/m001-seed7 (diverged at iteration 3)." in text


def test_a_pool_of_one_fully_diverged_population_still_reads_its_final_returns_as_eval(tmp_path, capsys):
    a = _population(tmp_path / "A", FIRST)
    a2 = _population(tmp_path / "A2", {6: 1.0, 7: 2.0}, diverged=("m000-seed6", "m001-seed7"))
    out = tmp_path / "p.md"
    code, err = _report([f"{a}+{a2}", "--out", out], capsys)
    assert code == 0, err
    text = out.read_text()
    assert "Final return per member: eval. Evaluated at step 4,096, over 20 episodes per member." in text
    assert "every member diverged" not in text.split("## Pooled")[0]


def test_the_pooled_members_are_named_by_population_in_the_json(tmp_path, capsys):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    js = tmp_path / "p.json"
    code, err = _report([f"{a}+{a2}", "--out", tmp_path / "p.md", "--json", js], capsys)
    assert code == 0, err
    doc = _json(js)
    assert doc["population"] == f"{a}+{a2}"
    dirs = [m["dir"] for m in doc["settings"][0]["member_dirs"]]
    assert dirs == [f"A/m00{i}-seed{i + 1}" for i in range(5)] + [f"A2/m00{i}-seed{i + 6}" for i in range(5)]


def test_a_pool_compared_with_a_population_marks_only_the_pool_as_pooled(tmp_path, capsys):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    b = _population(tmp_path / "B", {s: v + 1 for s, v in {**FIRST, **ADDED}.items()})
    out, js = tmp_path / "c.md", tmp_path / "c.json"
    code, err = _report([f"{a}+{a2}", b, "--out", out, "--json", js], capsys)
    assert code == 0, err
    pops = _json(js)["populations"]
    assert pops[0]["dir"] == f"{a}+{a2}" and [p["dir"] for p in pops[0]["pooled"]] == [str(a), str(a2)]
    assert pops[1] == {"name": "B", "dir": str(b)}
    pooled = out.read_text().split("## Pooled")[1].split("\n\n")[2]  # the Pooled table
    assert pooled.count("\n| A+A2 |") == 2 and "| B |" not in pooled
    # How they differ: each pooled population's command line, then B's
    assert "- A: command not recorded" in out.read_text() and "- A2: command not recorded" in out.read_text()


def test_more_seeds_drops_the_recorded_seeds_run_dir_and_overwrite_in_any_spelling(tmp_path, capsys):
    command = ["proxima", "train", "Fake-v0", "--seeds=1-3", "--overwrite", "--lr", "0.1",
               "--run-dir=" + str(tmp_path / "A")]
    a = _population(tmp_path / "A", dict(list(FIRST.items())[:3]), lrs=(0.1, 0.2), command=command)
    code, err = _report([a], capsys)
    assert code == 0, err
    text = (a / "report.md").read_text()
    new = f"{tmp_path / 'A'}-seeds4-10"
    assert f"- `proxima train Fake-v0 --lr 0.1 --seeds 4-10 --run-dir {new}`\n" in text


def test_more_seeds_of_the_current_directory_trains_beside_it(tmp_path, capsys, monkeypatch):
    a = _population(tmp_path / "A", dict(list(FIRST.items())[:3]), lrs=(0.1, 0.2),
                    command=["proxima", "train", "Fake-v0", "--seeds", "1-3", "--run-dir", str(tmp_path / "A")])
    monkeypatch.chdir(a)
    code, err = _report([".", "--out", tmp_path / "r.md"], capsys)
    assert code == 0, err
    text = (tmp_path / "r.md").read_text()
    new = tmp_path.resolve() / "A-seeds4-10"
    assert f"- `proxima train Fake-v0 --seeds 4-10 --run-dir {new}`" in text
    assert f"`proxima report .+{new} --out {tmp_path.resolve() / 'A-seeds1-10'}.md`" in text


def test_a_pooled_json_into_a_members_folder_is_refused_and_its_eval_json_kept(tmp_path, capsys):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    target = a2 / "m000-seed6" / "eval.json"
    before = target.read_text()
    code, err = _report([f"{a}+{a2}", "--out", tmp_path / "p.md", "--json", target], capsys)
    assert code == 2
    assert "eval.json is a file Proxima writes in a run directory" in one_error_line(err, PROG)
    assert target.read_text() == before and not (tmp_path / "p.md").exists()


def test_score_range_without_normalize_is_refused_for_a_pool(tmp_path, capsys):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    out = tmp_path / "p.md"
    code, err = _report([f"{a}+{a2}", "--score-range", "Fake-v0=0:100", "--out", out], capsys)
    assert code == 2
    assert one_error_line(err, PROG) == ("--score-range ENV=LOW:HIGH applies with --normalize "
                                         "(a report over several tasks)")
    assert not out.exists()


def test_a_member_without_its_config_yaml_is_refused_naming_it(tmp_path, capsys):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    (a2 / "m002-seed8" / "config.yaml").unlink()
    code, err = _report([f"{a}+{a2}", "--out", tmp_path / "p.md"], capsys)
    assert code == 2
    assert one_error_line(err, PROG).startswith(f"{a2 / 'm002-seed8' / 'config.yaml'}: missing "
                                                "or empty; + pools populations whose members' config.yaml")


def test_a_member_config_that_is_not_yaml_is_refused_with_its_own_line(tmp_path, capsys):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    (a2 / "m002-seed8" / "config.yaml").write_text("env_id: [unclosed\n")
    code, err = _report([f"{a}+{a2}", "--out", tmp_path / "p.md"], capsys)
    assert code == 2
    line = one_error_line(err, PROG)
    assert line.startswith(f"{a2 / 'm002-seed8' / 'config.yaml'}: not valid YAML")
    assert line.endswith("; + compares every member's config.yaml before pooling")


def test_a_config_field_only_the_added_population_records_is_refused_as_another_setting(tmp_path, capsys):
    a = _population(tmp_path / "A", FIRST)
    a2 = _population(tmp_path / "A2", ADDED, norm_obs=True)
    code, err = _report([f"{a}+{a2}", "--out", tmp_path / "p.md"], capsys)
    assert code == 2
    assert one_error_line(err, PROG).startswith("norm_obs: absent in A, true in A2; ")


def test_a_pooled_report_refuses_a_device_that_is_no_torch_device_before_writing(tmp_path, capsys):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    out = tmp_path / "p.md"
    code, err = _report([f"{a}+{a2}", "--device", "nonsense", "--out", out], capsys)
    assert code == 2
    assert one_error_line(err, PROG) == ("--device 'nonsense': not a torch device "
                                         "(cpu, cuda, cuda:1, auto)")
    assert not out.exists()


def test_a_failed_end_of_run_evaluation_of_an_added_member_is_named_by_its_pooled_name(tmp_path, capsys):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    (a2 / "m002-seed8" / "eval.json").unlink()
    doc = json.loads((a2 / "population.json").read_text())
    doc["member_dirs"][2]["eval_error"] = "env step raised ValueError"
    (a2 / "population.json").write_text(json.dumps(doc))
    out = tmp_path / "p.md"
    code, err = _report([f"{a}+{a2}", "--episodes", "0", "--out", out], capsys)
    assert code == 0, err
    assert ("- (seeds only): eval for 9 of 10; 1 member without eval.json (A2/m002-seed8), left out rather than mixed "
            "with training returns: the end-of-run evaluation failed (population.json) for A2/m002-seed8: env step "
            "raised ValueError.") in out.read_text()


def test_evaluations_of_other_episode_counts_in_a_pool_name_each_populations_eval_command(tmp_path, capsys):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    ev = json.loads((a2 / "m000-seed6" / "eval.json").read_text())
    (a2 / "m000-seed6" / "eval.json").write_text(json.dumps({**ev, "episodes": 10}))
    out = tmp_path / "p.md"
    code, err = _report([f"{a}+{a2}", "--out", out], capsys)
    assert code == 0, err
    text = out.read_text()
    assert "its members' evaluations ran different numbers of episodes (" in text
    assert f"each member's mean counts as one value: `proxima eval {a}` and `proxima eval {a2}` evaluates" in text


def test_the_pooled_provenance_notes_a_population_that_ran_another_git_commit(tmp_path, capsys):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    for d, commit in ((a / "m000-seed1", "1" * 40), (a2 / "m000-seed6", "2" * 40)):
        (d / "meta.json").write_text(json.dumps({"kind": "ppo", "versions": {"proxima": "0.1.0", "torch": "2.0"},
                                                 "git_commit": commit, "git_dirty": False}))
    out = tmp_path / "p.md"
    code, err = _report([f"{a}+{a2}", "--out", out], capsys)
    assert code == 0, err
    assert ("- note: A2 recorded other versions or another git commit than A (`proxima report RUN/<member dir>` "
            "shows each one's).") in out.read_text()
    (a2 / "m000-seed6" / "meta.json").write_text((a / "m000-seed1" / "meta.json").read_text())
    code, err = _report([f"{a}+{a2}", "--out", out], capsys)
    assert code == 0, err
    assert "recorded other versions or another git commit" not in out.read_text()


def test_a_diverged_pooled_member_plans_no_evaluation_when_a_pool_is_compared(tmp_path, capsys):
    a = _population(tmp_path / "A", FIRST)
    a2 = _population(tmp_path / "A2", ADDED, diverged=("m001-seed7",))
    (a2 / "m001-seed7" / "eval.json").unlink()  # frozen by a non-finite update: never evaluated
    b = _population(tmp_path / "B", {s: v + 1 for s, v in {**FIRST, **ADDED}.items()})
    js = tmp_path / "c.json"
    code, err = _report([f"{a}+{a2}", b, "--episodes", "5", "--out", tmp_path / "c.md", "--json", js], capsys)
    assert code == 0, err  # every member left evaluated over 20 episodes in eval.json: they measure the same
    rows = _json(js)["rows"]
    assert [(r["population"], r["n"]) for r in rows] == [("A+A2", 9), ("B", 10)]
