"""`proxima plot RUN` and `proxima eval RUN` on a population directory: per-setting IQM curves with
a bootstrap band, every member evaluated with per-setting statistics, one-line errors."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from proxima.logger import CSV_COLUMNS, ROLLING_RETURN
from proxima.plot import aggregate, collect_panels, population_curves
from proxima.population_report import bootstrap_band, iqm, iqm_along
from tests.cli_helpers import run_main

PIL = pytest.importorskip("PIL.Image")


def _write_member(d: Path, steps, returns, env_id: str, seed: int, settings: dict) -> None:
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(f"env_id: {env_id}\nseed: {seed}\n" + "".join(f"{k}: {v}\n" for k, v in settings.items()))
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for i, (s, r) in enumerate(zip(steps, returns)):
            cell = "" if np.isnan(r) else repr(float(r))  # the rolling return too: what plot draws by default
            w.writerow({"iteration": i + 1, "global_step": s, "time": 0.1 * (i + 1), "episodes": 1,
                        "charts/episodic_return": cell, ROLLING_RETURN: cell, "losses/value_loss": 1.0})


def _fake_population(run: Path, settings_and_returns, steps, env_id="Fake-v0") -> Path:
    """A population directory by hand: [(settings, returns (members, X) with NaN for an empty cell)]."""
    entries = []
    for settings, returns in settings_and_returns:
        for seed, member_returns in enumerate(returns, start=1):
            name = f"m{len(entries):03d}-seed{seed}" + "".join(f"-{k}{v}" for k, v in settings.items())
            _write_member(run / name, steps, member_returns, env_id, seed, settings)
            entries.append({"dir": name, "seed": seed, "settings": settings})
    (run / "population.json").write_text(json.dumps({"kind": "ppo-population", "env_id": env_id, "members": len(entries),
                                                     "member_dirs": entries}))
    return run


def _assert_png(path: Path) -> None:
    with PIL.open(path) as im:
        assert im.format == "PNG" and im.size[0] > 0


# ------------------------------------------------------------------------------------ plot
def test_a_hand_computed_population_curve_is_the_iqm_over_members():
    x = np.array([100.0, 200.0])
    members = np.array([[0.0, 10.0], [1.0, 20.0], [2.0, 30.0], [100.0, 1000.0]])  # 4 members: IQM drops 1 at each end
    agg = aggregate([(x, y) for y in members], band="ci", stat="iqm")
    np.testing.assert_allclose(agg["y"], [1.5, 25.0])
    np.testing.assert_allclose(agg["mean"], [25.75, 265.0])
    np.testing.assert_allclose(aggregate([(x, y) for y in members], band="ci", stat="mean")["y"], [25.75, 265.0])


def test_population_plot_draws_per_setting_iqm_at_every_x_and_writes_a_png(tmp_path, capsys):
    rng = np.random.default_rng(0)
    steps = np.arange(1, 201) * 128
    a, b = rng.normal(100, 30, size=(16, 200)), rng.normal(50, 10, size=(16, 200))  # 16 members x 200 points
    run = _fake_population(tmp_path / "R", [({"lr": 0.001}, a), ({"lr": 0.0003}, b)], steps)
    env, metric, curves = population_curves(run)
    assert (env, metric) == ("Fake-v0", ROLLING_RETURN)
    assert [c.label for c in curves] == ["lr=0.001: IQM, 95% CI (16 members)", "lr=0.0003: IQM, 95% CI (16 members)"]
    for c, data in zip(curves, (a, b)):
        np.testing.assert_array_equal(c.x, steps)
        np.testing.assert_allclose(c.y, [iqm(data[:, j]) for j in range(200)], rtol=1e-12)
        assert np.all(c.lo <= c.y) and np.all(c.y <= c.hi)
    _, _, means = population_curves(run, stat="mean", band="minmax")
    np.testing.assert_allclose(means[0].y, a.mean(axis=0))
    np.testing.assert_allclose(means[0].lo, a.min(axis=0))
    assert means[0].label == "lr=0.001: mean, min-max (16 members)"

    code, out, err = run_main(["plot", str(run)], capsys)
    assert code == 0 and err == ""
    _assert_png(run / "curve.png")
    code, _, _ = run_main(["plot", str(run), "--stat", "mean", "--band", "std", "--out", str(tmp_path / "m.svg")], capsys)
    assert code == 0 and (tmp_path / "m.svg").read_text().lstrip().startswith("<?xml")


def test_ci_band_brackets_the_statistic_narrows_with_more_members_and_is_reproducible():
    rng = np.random.default_rng(1)
    x = np.arange(50.0)
    few, many = rng.normal(size=(4, 50)), rng.normal(size=(64, 50))
    for stat in ("iqm", "mean"):
        widths = []
        for data in (few, many):
            agg = aggregate([(x, y) for y in data], band="ci", stat=stat)
            assert np.all(agg["lo"] <= agg["y"]) and np.all(agg["y"] <= agg["hi"])
            widths.append(float(np.mean(agg["hi"] - agg["lo"])))
        assert widths[1] < widths[0] / 2  # a CI shrinks as 1/sqrt(members): 4 -> 64 is about 4x narrower
    again = aggregate([(x, y) for y in few], band="ci", stat="iqm")
    np.testing.assert_array_equal(again["lo"], aggregate([(x, y) for y in few], band="ci", stat="iqm")["lo"])


def test_statistics_at_an_x_count_only_the_members_present_there():
    rng = np.random.default_rng(2)
    stack = rng.normal(size=(9, 30))
    stack[rng.random(stack.shape) < 0.3] = np.nan
    stack[0, 0], stack[1:, 0] = 0.5, np.nan  # x point 0: one member only
    expected = [iqm(col[~np.isnan(col)]) for col in stack.T]
    np.testing.assert_allclose(iqm_along(stack, axis=0), expected, rtol=1e-12)
    lo, hi = bootstrap_band(stack, "iqm")
    assert np.isnan(lo[0]) and np.isnan(hi[0])  # one member: no band (a zero-width one would claim certainty)
    present = ~np.isnan(stack)
    for j in range(1, 30):  # a band never leaves the range of the members present at that x
        if present[:, j].sum() >= 2:
            assert stack[present[:, j], j].min() <= lo[j] <= hi[j] <= stack[present[:, j], j].max()
        else:
            assert np.isnan(lo[j]) and np.isnan(hi[j])


def test_the_band_uses_the_tables_resamples_and_is_its_interval_at_each_x():
    from proxima.population_report import BAND_RESAMPLES, BOOTSTRAP_RESAMPLES, bootstrap_ci

    assert BAND_RESAMPLES == BOOTSTRAP_RESAMPLES == 10_000
    x = np.array([30.0, 40.0, 5.0, 100.0, 2.0, 7.0, 50.0])
    assert bootstrap_ci(x, iqm) == (6.2, 60.0)  # the table's IQM interval
    # x at the middle one of three points, every member present there: the band is the table's interval, bit for bit;
    # at the others, some members missing, it is the interval of those present (in member order)
    stack = np.stack([x * 0.5, x, x + 1.0], axis=1)
    stack[[1, 4], 0] = np.nan
    for stat, fn in (("iqm", iqm), ("mean", np.mean)):
        lo, hi = bootstrap_band(stack, stat)
        assert (lo[1], hi[1]) == bootstrap_ci(x, fn)
        assert (lo[0], hi[0]) == bootstrap_ci(stack[~np.isnan(stack[:, 0]), 0], fn)
        assert (lo[2], hi[2]) == bootstrap_ci(x + 1.0, fn)
    many = np.random.default_rng(3).normal(100.0, 50.0, size=(40, 5))  # 40 members: sums past numpy's 8-wide blocks
    lo, hi = bootstrap_band(many, "mean")
    assert all((lo[j], hi[j]) == bootstrap_ci(many[:, j], np.mean) for j in range(5))


def test_members_with_empty_cells_carry_their_last_value_on_the_logged_steps(tmp_path):
    steps = np.array([100, 200, 300, 400])
    returns = np.array([[np.nan, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0], [1.0, 4.0, 5.0, 6.0], [1.0, 0.0, 1.0, 2.0]])
    run = _fake_population(tmp_path / "R", [({}, returns)], steps)
    _, _, [curve] = population_curves(run, stat="mean")
    assert curve.label == "mean, 95% CI \u2020 (4 members, fewer before step 200)"  # no sweep: no setting name
    np.testing.assert_allclose(curve.x, [100, 200, 300, 400])
    np.testing.assert_allclose(curve.y, [1.0, 2.0, 3.0, 4.0])
    # in the legend's title, not beside a band's swatch; nothing carried forward (member 0 only starts late): not said
    assert curve.band_label is None and curve.note == ("95% CI: 10000 bootstrap resamples,\ndefault_rng(0); none for < 2 "
                                                       "members\n\u2020 < 5 members: covers well under 95%")


def test_population_curves_are_on_the_logged_steps_and_a_strong_member_never_drops_out(tmp_path):
    steps = np.arange(1, 6) * 256
    # setting a: member 0 (strong, long episodes) finishes episodes in iterations 1 and 3 only
    a = np.array([[400.0, np.nan, 500.0, np.nan, np.nan], [10.0, 20.0, 30.0, 40.0, 50.0], [11.0, 21.0, 31.0, 41.0, 51.0],
                  [12.0, 22.0, 32.0, 42.0, 52.0]])
    b = np.array([[1.0, 2.0, 3.0, 4.0, 5.0]] * 2)
    run = _fake_population(tmp_path / "R", [({"lr": 0.001}, a), ({"lr": 0.0003}, b)], steps)
    _, _, (ca, cb) = population_curves(run, stat="mean")
    np.testing.assert_array_equal(ca.x, steps)  # real steps (256, 512, ...), not linspace points, in both settings
    np.testing.assert_array_equal(cb.x, steps)
    # the strong member counts at every step with its last return: 500 at steps 768-1280
    np.testing.assert_allclose(ca.y, [(400 + 33) / 4, (400 + 63) / 4, (500 + 93) / 4, (500 + 123) / 4, (500 + 153) / 4])
    assert ca.label == "lr=0.001: mean, 95% CI \u2020 (4 members)"
    _, _, (iq, _) = population_curves(run)  # IQM of 4: drops 1 at each end; the strong member is the top one
    assert iq.y[-1] == pytest.approx((51.0 + 52.0) / 2)
def test_population_and_plain_runs_are_drawn_in_their_own_panels(tmp_path, capsys):
    steps = np.array([100, 200, 300])
    pop = _fake_population(tmp_path / "R", [({"ent_coef": 0.01}, np.array([[1.0, 2, 3], [3.0, 4, 5], [5.0, 6, 9]]))], steps)
    for seed, ys in ((1, [0.0, 1, 2]), (2, [2.0, 3, 4])):
        _write_member(tmp_path / f"plain{seed}", steps, ys, "Fake-v0", seed, {})
    panels = collect_panels([pop, tmp_path / "plain1", tmp_path / "plain2"], panels="per-setting")  # per-env: one panel
    assert [p[0] for p in panels] == ["Fake-v0", "Fake-v0: population R"]
    [group], [setting] = panels[0][2], panels[1][2]
    assert group.label == "mean of 2 runs" and group.band_label == "min-max over runs"  # plain runs keep their defaults
    np.testing.assert_allclose(group.y, [1.0, 2.0, 3.0])
    assert setting.label == "ent_coef=0.01: IQM, 95% CI \u2020 (3 members)"
    np.testing.assert_allclose(setting.y, [3.0, 4.0, 17 / 3])  # 3 members: nothing trimmed, IQM = mean
    code, _, _ = run_main(["plot", str(pop), str(tmp_path / "plain1"), str(tmp_path / "plain2"), "--out",
                           str(tmp_path / "mix.png")], capsys)
    assert code == 0
    _assert_png(tmp_path / "mix.png")
    (tmp_path / "notarun").mkdir()  # of several directories, one that is not a run is skipped with a line
    code, _, err = run_main(["plot", str(pop), str(tmp_path / "notarun"), "--out", str(tmp_path / "skip.png")], capsys)
    bad = tmp_path / "notarun"
    assert code == 0 and err.strip() == f"proxima: note: skipping {bad}: {bad}: not a run directory (no metrics.csv)"

    member = pop / "m000-seed1-ent_coef0.01"  # a member is a plain run: its own line
    [(title, _, [line])] = collect_panels([member])
    assert line.label == member.name and line.lo is None
    np.testing.assert_allclose(line.y, [1.0, 2.0, 3.0])


def test_population_plot_errors_are_one_line_and_leave_no_file(tmp_path, capsys):
    run = _fake_population(tmp_path / "R", [({}, np.ones((2, 3)))], [1, 2, 3])
    code, _, err = run_main(["plot", str(run), "--metric", "no_such_metric"], capsys)
    assert code == 2 and err.startswith("proxima plot: error: unknown metric 'no_such_metric'") and err.count("\n") == 1
    (run / "m001-seed2" / "metrics.csv").unlink()  # a population given alone: a broken member is an error, not a skip
    code, _, err = run_main(["plot", str(run)], capsys)
    assert code == 2 and err.strip() == f"proxima plot: error: {run / 'm001-seed2'}: not a run directory (no metrics.csv)"
    shutil.rmtree(run / "m001-seed2")
    code, _, err = run_main(["plot", str(run)], capsys)
    missing = run / "m001-seed2"
    assert code == 2 and err.strip() == f"proxima plot: error: {missing}: member directory listed in population.json is missing"
    listed = json.loads((run / "population.json").read_text())
    listed["member_dirs"][0]["dir"] = "../elsewhere"  # population.json is data: it names folders of this run only
    (run / "population.json").write_text(json.dumps(listed))
    code, _, err = run_main(["plot", str(run)], capsys)
    assert code == 2 and "member entry '../elsewhere' is not a member folder of this run" in err
    (run / "population.json").write_text("{not json")
    code, _, err = run_main(["plot", str(run)], capsys)
    assert code == 2 and "population.json: not a readable population file" in err
    assert not (run / "curve.png").exists()


def _caption(run: Path) -> str:
    return next(ln for ln in (run / "report.md").read_text().splitlines() if ln.startswith("The curve is"))


def test_the_report_caption_names_the_drawn_column_and_each_settings_kind_of_return(tmp_path, capsys):
    steps = np.array([100, 200, 300])
    run = _fake_population(tmp_path / "R", [({"lr": 0.001}, np.ones((2, 3))), ({"lr": 0.0003}, np.ones((2, 3)))], steps)
    band = ("Its band: 95% CI per x, percentile bootstrap over members, 10000 resamples, numpy default_rng(0); not drawn "
            "where fewer than 2 members have a value.")
    # no eval.json anywhere: every setting's last training return; the per-iteration curve (the default is the rolling one)
    code, _, err = run_main(["report", str(run), "--metric", "charts/episodic_return"], capsys)
    assert code == 0, err
    assert _caption(run) == ("The curve is the training charts/episodic_return (stochastic actions, each member's last "
                             "logged value carried forward between the iterations in which it finished an episode); the "
                             f"table above is the last (stochastic) training return. {band}")
    for d in sorted(run.glob("m00[01]-*")):  # lr=0.001 evaluated, lr=0.0003 not
        (d / "eval.json").write_text(json.dumps({"mean_return": 7.0}))
    code, _, err = run_main(["report", str(run)], capsys)
    assert code == 0, err
    assert "the table above is per setting the deterministic eval return or the last (stochastic) training return, as " \
           "the line above it says." in _caption(run)
    assert "Final return per member, per setting: lr=0.001: eval; lr=0.0003: last training return." in \
           (run / "report.md").read_text()
    for d in sorted(run.glob("m00[23]-*")):
        (d / "eval.json").write_text(json.dumps({"mean_return": 7.0}))
    # a loss is drawn as its full column name, with neither episodes nor stochastic actions in its caption
    code, _, err = run_main(["report", str(run), "--metric", "value_loss"], capsys)
    assert code == 0, err
    assert _caption(run) == ("The curve is the training losses/value_loss (each member's last logged value carried forward "
                             "over iterations in which it logged none); the table above is the deterministic eval return. "
                             f"{band}")
    assert "IQM over members of losses/value_loss with a 95% bootstrap CI" in (run / "report.md").read_text()


# ------------------------------------------------------------------------------------ eval
SMALL = ["--total-timesteps", "512", "--num-envs", "2", "--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "1",
         "--eval-episodes", "2", "--threads", "1", "--quiet", "--no-progress"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny real population: seeds 1, 2 x lr 1e-3, 3e-4 (4 members, 512 steps each)."""
    from proxima import cli

    run = tmp_path_factory.mktemp("popeval") / "R"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1,2", "--sweep", "lr=1e-3,3e-4", "--run-dir", str(run), *SMALL]) == 0
    return run


def test_eval_of_a_population_evaluates_every_member_and_sums_up_each_setting(trained, capsys):
    code, out, err = run_main(["eval", str(trained), "--episodes", "3", "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    listed = json.loads((trained / "population.json").read_text())["member_dirs"]
    assert [m["dir"] for m in result["members"]] == [e["dir"] for e in listed]
    for m in result["members"]:
        assert m["episodes"] == 3 and len(m["returns"]) == 3 and m["eval_seed"] == m["seed"] + 1_000_000
    assert [s["settings"] for s in result["settings"]] == [{"lr": 1e-3}, {"lr": 3e-4}]
    for s in result["settings"]:
        means = [m["mean_return"] for m in result["members"] if m["settings"] == s["settings"]]
        assert s["mean_returns"] == means and len(means) == 2
        assert s["iqm"] == pytest.approx(iqm(np.array(means))) and s["mean"] == pytest.approx(np.mean(means))
        assert s["iqm_ci"][0] <= s["iqm"] <= s["iqm_ci"][1]
        assert (s["n"], s["left_out"], s["few"], s["resamples"], s["level"], s["rng"]) == (2, [], True, 10_000, 0.95,
                                                                                          "numpy default_rng(0)")
        assert s["ci_note"].startswith("n < 5: percentile-bootstrap intervals cover well under 95%")

    # a member's result is what `proxima eval RUN/<member>` gives for it alone
    first = result["members"][0]
    code, out, _ = run_main(["eval", str(trained / first["dir"]), "--episodes", "3", "--json"], capsys)
    assert code == 0 and json.loads(out)["returns"] == first["returns"]

    code, out, _ = run_main(["eval", str(trained), "--episodes", "2", "--seed", "7", "--json"], capsys)
    assert code == 0 and {m["eval_seed"] for m in json.loads(out)["members"]} == {7}


def test_eval_of_a_population_prints_a_line_per_member_and_per_setting(trained, capsys):
    code, out, _ = run_main(["eval", str(trained), "--episodes", "2"], capsys)
    lines = out.strip().splitlines()
    assert code == 0 and len(lines) == 7
    assert lines[0].startswith("m000-seed1-lr0.001: ") and lines[0].endswith("over 2 episodes (deterministic)")
    assert lines[4].startswith("CartPole-v1 lr=0.001 (2 members): mean ") and "IQM" in lines[4]
    assert lines[4].endswith("\u2020 (95% percentile-bootstrap CIs over members, 10000 resamples, numpy default_rng(0))")
    assert lines[5].startswith("CartPole-v1 lr=0.0003 (2 members): mean ")
    assert lines[6] == ("\u2020 n < 5: percentile-bootstrap intervals cover well under 95% (about 50-80% for n = 2-4); "
                        "run more seeds")


def test_eval_names_a_member_without_a_checkpoint_and_evaluates_the_others(trained, tmp_path, capsys):
    run = tmp_path / "R"
    shutil.copytree(trained, run)
    member = run / "m002-seed1-lr0.0003"
    for f in (member / "checkpoints").iterdir():
        f.unlink()
    code, out, err = run_main(["eval", str(run), "--episodes", "2"], capsys)
    assert code == 0, err
    assert err.strip().splitlines() == [f"proxima: note: {member}: left out, not evaluated: no checkpoint "
                                        "(checkpoints/step_*.pt) to evaluate; the other members are evaluated"]
    assert "lr=0.0003 (1 of 2 members)" in out and out.count("left out: m002-seed1-lr0.0003 (no checkpoint ") == 1
    code, _, err = run_main(["eval", str(run), "--video", str(tmp_path / "v.gif")], capsys)
    assert code == 2 and "--video: " in err and "record one member" in err
