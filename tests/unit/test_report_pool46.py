"""``proxima report A+A2`` (or ``report A A2 --pool``): populations of one setting trained apart (the
same command on seeds 1-5, then 6-10) are reported as one, every number over the union of their
members; populations of another setting, or a seed given twice, are refused in one line; a report that
advises more seeds names the train command of the next ones and the report that pools them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from proxima.logger import CSV_COLUMNS
from proxima.population_report import bootstrap_ci, iqm
from tests.cli_helpers import one_error_line, run_main

STEP = 4096
PROG = "proxima report"


def _population(run: Path, returns: dict, lrs=(None,), episodes: int = 20, command=None, env_id: str = "Fake-v0",
                diverged=(), **config) -> Path:
    """A finished population made by hand (nothing trained, loaded or evaluated): per lr in ``lrs`` (None:
    seeds only) a member per seed of ``returns`` ({seed: eval return}), each with config.yaml (``config``
    on top of the usual fields), a 2-row metrics.csv, an empty checkpoint and its eval.json at STEP; the members
    named in ``diverged`` recorded in population.json as diverged at iteration 3."""
    entries = []
    for lr in lrs:
        for seed, value in returns.items():
            settings = {} if lr is None else {"lr": lr}
            name = f"m{len(entries):03d}-seed{seed}" + ("" if lr is None else f"-lr{lr}")
            d = run / name
            (d / "checkpoints").mkdir(parents=True)
            (d / "checkpoints" / f"step_{STEP:012d}.pt").write_bytes(b"")
            fields = {"env_id": env_id, "seed": seed, "total_timesteps": STEP, "eval_episodes": episodes,
                      "run_dir": str(d), **settings, **config}
            (d / "config.yaml").write_text(yaml.safe_dump(fields, sort_keys=False))
            with open(d / "metrics.csv", "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
                w.writeheader()
                for k, s in enumerate((STEP // 2, STEP)):
                    w.writerow({"iteration": k + 1, "global_step": s, "time": 1.0 * (k + 1), "episodes": 1,
                                "charts/SPS": 1000, "charts/episodic_return": value})
            (d / "eval.json").write_text(json.dumps({"mean_return": value + (lr or 0), "std_return": 0.0,
                                                     "episodes": episodes, "deterministic": True, "global_step": STEP}))
            entries.append({"dir": name, "seed": seed, "settings": settings,
                            **({"diverged": {"iteration": 3}} if name in diverged else {})})
    doc = {"kind": "ppo-population", "env_id": env_id, "members": len(entries), "seeds": sorted(returns),
           "member_dirs": entries, "total_timesteps_per_member": STEP,
           "sweep": {} if lrs == (None,) else {"lr": list(lrs)}}
    if command is not None:
        doc["command"] = command
    (run / "population.json").write_text(json.dumps(doc))
    return run


FIRST = {1: 10.0, 2: 20.0, 3: 30.0, 4: 40.0, 5: 500.0}
ADDED = {6: 25.0, 7: 28.0, 8: 31.0, 9: 33.0, 10: 35.0}


def _rows(path: Path) -> list:
    return json.loads(path.read_text())["settings"]


def test_a_pooled_report_gives_the_iqm_and_interval_of_the_union_of_both_populations(tmp_path, capsys):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    out, js = tmp_path / "pooled.md", tmp_path / "pooled.json"
    code, _, err = run_main(["report", f"{a}+{a2}", "--out", str(out), "--json", str(js)], capsys)
    assert code == 0, err
    union = np.array(list(FIRST.values()) + list(ADDED.values()))
    (row,) = _rows(js)
    assert row["n"] == 10 and sorted(s["seed"] for s in row["member_dirs"]) == list(range(1, 11))
    assert row["iqm"] == pytest.approx(float(np.mean(np.sort(union)[2:8])))  # floor(10/4) = 2 dropped at each end
    assert row["iqm_ci"] == pytest.approx(list(bootstrap_ci(union, iqm)))
    assert json.loads(js.read_text())["pooled"] == [{"dir": str(a), "seeds": [1, 2, 3, 4, 5]},
                                                     {"dir": str(a2), "seeds": [6, 7, 8, 9, 10]}]
    text = out.read_text()
    assert "Fake-v0: 10 members (10 seeds x 1 setting), pooled from 2 populations" in text
    assert f"| A+A2 | (seeds only) | {a} | 1-5 (5 seeds) | 5 |" in text
    assert f"| A+A2 | (seeds only) | {a2} | 6-10 (5 seeds) | 5 |" in text
    assert "| (seeds only) | 10 | " in text  # the table's members column: no "5 of 10", no †


def test_pool_flag_pools_every_directory_given_as_plus_does(tmp_path, capsys):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    code, _, err = run_main(["report", str(a), str(a2), "--pool", "--out", str(tmp_path / "p.md"),
                             "--json", str(tmp_path / "p.json")], capsys)
    assert code == 0, err
    assert _rows(tmp_path / "p.json")[0]["n"] == 10


def test_pooled_sweeps_compare_each_setting_over_both_populations_members(tmp_path, capsys):
    a = _population(tmp_path / "A", FIRST, lrs=(0.1, 0.2))
    a2 = _population(tmp_path / "A2", ADDED, lrs=(0.1, 0.2))
    code, _, err = run_main(["report", f"{a}+{a2}", "--out", str(tmp_path / "p.md"), "--json", str(tmp_path / "p.json")],
                            capsys)
    assert code == 0, err
    doc = json.loads((tmp_path / "p.json").read_text())
    assert [(r["setting"], r["n"]) for r in doc["settings"]] == [("lr=0.1", 10), ("lr=0.2", 10)]
    # every lr=0.2 member's return is its seed's lr=0.1 return + 0.1: the 10 vs 10 comparison is over all of them
    (against,) = doc["comparison"]["against"]
    assert against["setting"] == "lr=0.1" and against["permutation_p"] is not None


def test_a_population_and_a_pool_are_compared_as_report_a_b_compares_two(tmp_path, capsys):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    b = _population(tmp_path / "B", {s: v + 1 for s, v in {**FIRST, **ADDED}.items()}, num_envs=4)
    code, _, err = run_main(["report", f"{a}+{a2}", str(b), "--out", str(tmp_path / "c.md"),
                             "--json", str(tmp_path / "c.json")], capsys)
    assert code == 0, err
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    assert [(r["population"], r["n"]) for r in rows] == [("A+A2", 10), ("B", 10)]
    assert "| num_envs | — | 4 |" in (tmp_path / "c.md").read_text()  # How they differ: the pool's config against B's


def test_pooling_populations_of_another_total_timesteps_is_refused_naming_the_field_and_both_values(tmp_path, capsys):
    a = _population(tmp_path / "A", FIRST)
    a2 = _population(tmp_path / "A2", ADDED, total_timesteps=50000)
    out = tmp_path / "p.md"
    code, _, err = run_main(["report", f"{a}+{a2}", "--out", str(out)], capsys)
    assert code == 2
    assert one_error_line(err, PROG).startswith("total_timesteps: 4096 in A, 50000 in A2; ")
    assert not out.exists()


def test_pooling_a_seed_twice_is_refused_naming_the_seed_and_both_member_dirs(tmp_path, capsys):
    a = _population(tmp_path / "A", FIRST)
    a2 = _population(tmp_path / "A2", {5: 1.0, 6: 2.0})
    code, _, err = run_main(["report", f"{a}+{a2}", "--out", str(tmp_path / "p.md")], capsys)
    assert code == 2
    assert ("seed 5 twice in the pooled setting (seeds only): A/m004-seed5 and A2/m000-seed5; "
            in one_error_line(err, PROG))


def test_pooling_populations_of_other_sweeps_is_refused_naming_both(tmp_path, capsys):
    a = _population(tmp_path / "A", FIRST, lrs=(0.1, 0.2))
    a2 = _population(tmp_path / "A2", ADDED, lrs=(0.1,))
    code, _, err = run_main(["report", f"{a}+{a2}", "--out", str(tmp_path / "p.md")], capsys)
    assert code == 2
    assert "settings: lr=0.1; lr=0.2 in A, lr=0.1 in A2; " in one_error_line(err, PROG)


def test_pooling_a_single_run_or_without_out_is_refused_in_one_line(tmp_path, capsys):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    code, _, err = run_main(["report", f"{a}+{a2}"], capsys)
    assert code == 2 and "give --out FILE.md for the pooled report" in one_error_line(err, PROG)
    code, _, err = run_main(["report", f"{a}+{a / 'm000-seed1'}", "--out", str(tmp_path / "p.md")], capsys)
    assert code == 2 and "m000-seed1: a single run; pooling" in one_error_line(err, PROG)


def test_populations_evaluated_over_other_episode_counts_are_refused_as_another_setting(tmp_path, capsys):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED, episodes=10)
    code, _, err = run_main(["report", f"{a}+{a2}", "--out", str(tmp_path / "p.md")], capsys)
    assert code == 2  # eval_episodes is a config field: another count is another setting
    assert "eval_episodes: 20 in A, 10 in A2" in one_error_line(err, PROG)


def test_a_report_that_advises_more_seeds_names_the_next_seeds_train_command_and_the_pooled_report(tmp_path, capsys):
    command = ["proxima", "train", "Fake-v0", "--seeds", "1-5", "--run-dir", str(tmp_path / "A"), "--overwrite"]
    a = _population(tmp_path / "A", dict(list(FIRST.items())[:3]), lrs=(0.1, 0.2), command=command)
    code, _, err = run_main(["report", str(a)], capsys)
    assert code == 0, err
    text = (a / "report.md").read_text()
    new = f"{tmp_path / 'A'}-seeds4-10"  # 3 seeds: to 10
    assert f"- `proxima train Fake-v0 --seeds 4-10 --run-dir {new}`" in text
    assert f"`proxima report {a}+{new} --out {tmp_path / 'A'}-seeds1-10.md`" in text


def test_more_seeds_of_a_population_without_a_recorded_command_says_where_its_command_is(tmp_path, capsys):
    a = _population(tmp_path / "A", FIRST, lrs=(0.1, 0.2))
    a2 = _population(tmp_path / "A2", ADDED, lrs=(0.1, 0.2))
    out = tmp_path / "p.md"
    code, _, err = run_main(["report", f"{a}+{a2}", "--out", str(out)], capsys)
    assert code == 0, err
    text = out.read_text()
    assert "Run more seeds" in text  # 10 vs 10, one return apart by 0.1: no claim
    new = f"{tmp_path / 'A'}-seeds11-20"
    assert f"- the command in {a / 'population.json'} with `--seeds 11-20 --run-dir {new}` in place of its own" in text
    assert f"`proxima report {a}+{a2}+{new} --out {tmp_path / 'A'}-seeds1-20.md`" in text


def test_normalize_scores_a_pooled_task_over_the_union_of_its_populations_members(tmp_path, capsys):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    b = _population(tmp_path / "B", {s: 50.0 for s in range(1, 11)}, env_id="Other-v0")
    code, _, err = run_main(["report", f"{a}+{a2}", str(b), "--normalize", "--score-range", "Fake-v0=0:100",
                             "--score-range", "Other-v0=0:100", "--out", str(tmp_path / "agg.md"),
                             "--json", str(tmp_path / "agg.json")], capsys)
    assert code == 0, err
    doc = json.loads((tmp_path / "agg.json").read_text())
    (row,) = doc["rows"]
    union = sorted(list(FIRST.values()) + list(ADDED.values()))
    assert row["runs"] == {"Fake-v0": 10, "Other-v0": 10}
    assert row["scores"]["Fake-v0"] == pytest.approx([v / 100 for v in list(FIRST.values()) + list(ADDED.values())])
    assert [t["dir"] for t in doc["tasks"]] == [f"{a}+{a2}", str(b)]
    scores = np.array(union + [50.0] * 10) / 100  # the IQM of all 20 (run, task) scores pooled
    assert row["iqm"] == pytest.approx(float(np.mean(np.sort(scores)[5:15])))
