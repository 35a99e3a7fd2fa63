"""Review 34, finding 4 (comparing settings and populations): a population report of two or more
settings compares each with the best by rliable's probability of improvement P(X > Y), with a
percentile-bootstrap interval that resamples each setting's members independently; ``proxima report
A B --out F.md`` of two populations gives one table of (population, setting) rows, each against the
first population's best row, and refuses populations that do not measure the same thing."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from proxima.logger import CSV_COLUMNS
from proxima.population_report import (BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, build_populations_report,
                                       probability_of_improvement, poi_ci)
from proxima.report import ReportError
from tests.cli_helpers import one_error_line, run_main

DOCS = Path(__file__).resolve().parents[2] / "docs" / "populations.md"
STEP = 4096


def _member(run: Path, i: int, value: float, settings: dict, env_id: str, episodes: int) -> dict:
    """A finished member by hand: config.yaml, a 2-row metrics.csv, an (empty) checkpoint of STEP and
    its eval.json of ``value`` over ``episodes`` episodes at STEP (nothing is loaded or evaluated)."""
    name = f"m{i:03d}-seed{i + 1}" + "".join(f"-{k}{v}" for k, v in settings.items())
    d = run / name
    (d / "checkpoints").mkdir(parents=True)
    (d / "checkpoints" / f"step_{STEP:012d}.pt").write_bytes(b"")
    (d / "config.yaml").write_text(yaml.safe_dump({"env_id": env_id, "seed": i + 1, "eval_episodes": episodes,
                                                   **settings}, sort_keys=False))
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for k, s in enumerate((STEP // 2, STEP)):
            w.writerow({"iteration": k + 1, "global_step": s, "time": 1.0 * (k + 1), "episodes": 1,
                        "charts/SPS": 1000, "charts/episodic_return": value})
    (d / "eval.json").write_text(json.dumps({"mean_return": value, "std_return": 0.0, "episodes": episodes,
                                             "deterministic": True, "global_step": STEP}))
    return {"dir": name, "seed": i + 1, "settings": settings}


def _population(run: Path, groups: dict, env_id: str = "Fake-v0", episodes: int = 20) -> Path:
    """A population directory of ``groups``: {lr value (None: seeds only): [members' eval returns]}."""
    entries, i = [], 0
    for lr, values in groups.items():
        for v in values:
            entries.append(_member(run, i, v, {} if lr is None else {"lr": lr}, env_id, episodes))
            i += 1
    (run / "population.json").write_text(json.dumps({
        "kind": "ppo-population", "env_id": env_id, "members": len(entries), "seeds": sorted({e["seed"] for e in entries}),
        "member_dirs": entries, "total_timesteps_per_member": STEP}))
    return run


def _p_by_ranks(x, y) -> float:
    """P(X > Y) as the Mann-Whitney U statistic over n*m (scipy.stats.mannwhitneyu's U of x): the rank sum of
    x among all values, ties given their mid rank, less n(n+1)/2. Another computation than the report's."""
    values = sorted(list(x) + list(y))
    mid = {v: (values.index(v) + 1 + len(values) - values[::-1].index(v)) / 2 for v in values}
    u = sum(mid[v] for v in x) - len(x) * (len(x) + 1) / 2
    return u / (len(x) * len(y))


def _ci_by_loop(x, y) -> tuple:
    """The 95% percentile-bootstrap interval of P(X > Y) the docs describe, one resample at a time: from numpy
    default_rng(0), x's member indices (2000, n), then y's (2000, m); each resample's P by ranks."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)  # the report's other intervals' seed and count: 0, 2000
    ix = rng.integers(0, len(x), (BOOTSTRAP_RESAMPLES, len(x)))
    iy = rng.integers(0, len(y), (BOOTSTRAP_RESAMPLES, len(y)))
    stats = [_p_by_ranks([x[j] for j in a], [y[j] for j in b]) for a, b in zip(ix, iy)]
    return float(np.quantile(stats, 0.025)), float(np.quantile(stats, 0.975))


#: lr=0.1 has the higher mean (one lucky seed), lr=0.2 the higher IQM: the best is lr=0.2; lr=0.3 ties
#: lr=0.2 at 30 (a tie counts half) and has 3 members (†); lr=0.4 has one (no interval)
SWEEP = {0.1: [10.0, 20.0, 30.0, 30.0, 500.0], 0.2: [25.0, 28.0, 30.0, 31.0, 33.0], 0.3: [30.0, 5.0, 40.0], 0.4: [29.0]}


def _comparison_rows(text: str) -> dict:
    """{setting: [members, P, CI]} of the report's Comparison table."""
    section = text[text.index("## Comparison"):]
    return {cells[0]: cells[1:] for line in section.splitlines() if line.startswith("| lr=")
            for cells in [[c.strip() for c in line.strip("|").split("|")]]}


def test_a_sweeps_report_compares_each_setting_with_the_best_by_probability_of_improvement(tmp_path, capsys):
    run = _population(tmp_path / "S", SWEEP)
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    text = (run / "report.md").read_text()
    assert "Y = lr=0.2 (the highest IQM)" in text  # by IQM, not by lr=0.1's higher mean
    assert "the chance that a run of X scores higher than a run of Y" in text
    rows = _comparison_rows(text)
    assert set(rows) == {"lr=0.1", "lr=0.3", "lr=0.4"}  # each other setting, against the best
    best = SWEEP[0.2]
    for lr, (members, p, ci) in ((k, rows[f"lr={k}"]) for k in (0.1, 0.3, 0.4)):
        x = SWEEP[lr]
        want = float(((np.sign(np.subtract.outer(x, best)) + 1) / 2).mean())  # numpy broadcasting
        assert want == pytest.approx(_p_by_ranks(x, best))  # = Mann-Whitney U / (n m)
        assert probability_of_improvement(x, best) == pytest.approx(want)
        assert (members, p) == (f"{len(x)} vs 5", f"{want:.2f}")
        if len(x) < 2:
            assert ci == "\u2014" and poi_ci(x, best) is None
        else:
            lo, hi = _ci_by_loop(x, best)
            np.testing.assert_allclose(poi_ci(x, best), (lo, hi), rtol=0, atol=1e-12)
            assert ci == f"[{lo:.2f}, {hi:.2f}]" + (" \u2020" if len(x) < 5 else "")
    assert rows["lr=0.3"][1] == "0.50"  # (2.5 + 0 + 5) of 15 pairs: 30 against 30 counts half (0.47 without)
    assert "\u2020 either setting has fewer than 5 members" in text
    run_main(["report", str(run), "--episodes", "0"], capsys)
    assert (run / "report.md").read_text() == text  # reproducible: the same seed, the same intervals


def test_a_single_setting_has_no_comparison(tmp_path, capsys):
    run = _population(tmp_path / "P", {None: [1.0, 2.0, 3.0]})
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    assert "## Comparison" not in (run / "report.md").read_text()


def test_report_of_two_populations_gives_rows_per_population_and_setting_against_the_first(tmp_path, capsys):
    a = _population(tmp_path / "A", {None: [20.0, 22.0, 30.0, 31.0]})
    b = _population(tmp_path / "B", {0.1: [25.0, 30.0, 35.0, 40.0], 0.2: [10.0, 12.0]})
    out = build_populations_report([a, b], out=tmp_path / "cmp.md", episodes=0)
    text = out.read_text()
    assert "Y = A (seeds only) (the first population's highest IQM)" in text
    rows = {tuple(c[:2]): c[2:] for line in text.splitlines() if line.startswith("| A |") or line.startswith("| B |")
            for c in [[x.strip() for x in line.strip("|").split("|")]]}
    assert list(rows) == [("A", "(seeds only)"), ("B", "lr=0.1"), ("B", "lr=0.2")]
    ref = [20.0, 22.0, 30.0, 31.0]
    assert [rows[("A", "(seeds only)")][i] for i in (0, 1, 3)] == ["4", "25.8", "26.0"]  # its own mean and IQM
    assert rows[("A", "(seeds only)")][-2:] == ["Y (reference)", "\u2014"]
    for key, x in ((("B", "lr=0.1"), [25.0, 30.0, 35.0, 40.0]), (("B", "lr=0.2"), [10.0, 12.0])):
        lo, hi = _ci_by_loop(x, ref)
        assert rows[key][-2:] == [f"{_p_by_ranks(x, ref):.2f}", f"[{lo:.2f}, {hi:.2f}] \u2020"], key
        assert rows[key][3] == f"{float(np.mean(sorted(x)[len(x) // 4:len(x) - len(x) // 4])):.1f}"  # each row its own IQM

    # through the CLI, as `proxima report A B --out cmp2.md`
    code, outp, err = run_main(["report", str(a), str(b), "--out", str(tmp_path / "cmp2.md"), "--episodes", "0"], capsys)
    assert (code, outp.strip()) == (0, f"wrote {tmp_path / 'cmp2.md'}"), err
    assert (tmp_path / "cmp2.md").read_text().split("![")[0] == text.split("![")[0]


@pytest.mark.parametrize("what", ["env id", "evaluation episodes", "final return"])
def test_populations_measured_differently_are_refused_with_one_line(tmp_path, capsys, what):
    a = _population(tmp_path / "A", {None: [1.0, 2.0]})
    b = _population(tmp_path / "B", {None: [3.0, 4.0]}, env_id="Other-v0" if what == "env id" else "Fake-v0",
                    episodes=10 if what == "evaluation episodes" else 20)
    if what == "final return":  # B without eval.json: its final return is the last training return
        for ev in b.glob("*/eval.json"):
            ev.unlink()
    want = {"env id": "env id Fake-v0 (A) vs Other-v0 (B)", "evaluation episodes": "evaluation episodes 20 (A) vs 10 (B)",
            "final return": "final return deterministic eval return (A) vs last (stochastic) training return (B)"}[what]
    with pytest.raises(ReportError, match=re.escape(want)):
        build_populations_report([a, b], out=tmp_path / "cmp.md", episodes=0)
    code, _, err = run_main(["report", str(a), str(b), "--out", str(tmp_path / "cmp.md"), "--episodes", "0"], capsys)
    line = one_error_line(err, "proxima report")
    assert code == 2 and line.startswith("these populations do not measure the same: ") and want in line, line
    if what == "evaluation episodes":  # both recorded in eval.json: no --episodes changes them
        assert line.endswith("their eval.json files hold different counts, which --episodes does not change: report "
                             "them alone"), line
    assert not (tmp_path / "cmp.md").exists()


def _no_evaluation(*args, **kwargs):
    raise AssertionError("a member was evaluated before the episode counts were compared")


def test_episode_counts_are_compared_before_any_member_is_evaluated(tmp_path, capsys, monkeypatch):
    """B's members have no eval.json and their own --eval-episodes 10: without --episodes the report
    would evaluate them over 10 against A's recorded 20; refused first, with the --episodes that matches."""
    import proxima.report

    monkeypatch.setattr(proxima.report, "evaluate_latest", _no_evaluation)
    a = _population(tmp_path / "A", {None: [1.0, 2.0]})
    b = _population(tmp_path / "B", {None: [3.0, 4.0]}, episodes=10)
    for ev in b.glob("*/eval.json"):
        ev.unlink()
    code, _, err = run_main(["report", str(a), str(b), "--out", str(tmp_path / "cmp.md")], capsys)
    line = one_error_line(err, "proxima report")
    assert code == 2 and "evaluation episodes 20 (A) vs 10 (B)" in line, line
    assert ("`--episodes 20` evaluates the members without an eval.json over the count the others recorded" in line)
    # --episodes 0 evaluates no one: the rows differ in their kind of return, which the line names
    with pytest.raises(ReportError) as e:
        build_populations_report([a, b], out=tmp_path / "cmp.md", episodes=0)
    assert ("final return deterministic eval return (A) vs last (stochastic) training return (B)" in str(e.value)
            and "evaluation episodes" not in str(e.value)), str(e.value)
    assert not (tmp_path / "cmp.md").exists()


def test_recorded_counts_that_differ_are_not_fixed_by_episodes_for_the_others(tmp_path):
    """A recorded 20, B 10, and one B member without eval.json: an --episodes N for that one cannot
    make A's and B's recorded counts one, so the line says so rather than suggest an N."""
    a = _population(tmp_path / "A", {None: [1.0, 2.0]})
    b = _population(tmp_path / "B", {None: [3.0, 4.0]}, episodes=10)
    next(b.glob("*/eval.json")).unlink()
    with pytest.raises(ReportError) as e:
        build_populations_report([a, b], out=tmp_path / "cmp.md", episodes=None)
    assert str(e.value).endswith("their eval.json files hold different counts, which --episodes does not change: "
                                 "report them alone"), str(e.value)


def test_a_diverged_members_leftover_eval_json_is_not_counted(tmp_path):
    """B's m001 diverged (population.json) yet keeps an eval.json of 10 episodes from before: it has no
    result, so B measures what A does (20 episodes) and the two are compared."""
    a = _population(tmp_path / "A", {None: [1.0, 2.0]})
    b = _population(tmp_path / "B", {None: [3.0, 4.0, 5.0]})
    doc = json.loads((b / "population.json").read_text())
    gone = doc["member_dirs"][1]
    gone["diverged"] = {"iteration": 3, "global_step": 1536, "reason": "non-finite loss"}
    (b / "population.json").write_text(json.dumps(doc))
    ev = b / gone["dir"] / "eval.json"
    ev.write_text(json.dumps({**json.loads(ev.read_text()), "episodes": 10}))
    text = build_populations_report([a, b], out=tmp_path / "cmp.md", episodes=0).read_text()
    assert "| B | (seeds only) | 2 of 3 (1 diverged) |" in text, text


def test_the_docs_say_what_the_comparison_is(tmp_path):
    text = " ".join(DOCS.read_text().split())
    assert "P(X > Y)" in text and "the chance that a run of X scores higher than a run of Y" in text
    assert "resampled independently" in text and "proxima report A B --out" in text
