"""Review 50's plot findings: two populations of one env (A vs B: another --num-envs) are overlaid in one
panel under the default ``--panels per-env``, a curve each in its own colour, as plain runs' settings are
(populations of other envs keep their own panels; ``--panels per-setting`` keeps a panel per population,
on a shared x-axis); ``proxima plot --json FILE.json`` writes exactly what is drawn (per curve its label,
x, the line, the band's low and high and the members counted at each x), atomically, replacing only an
earlier ``proxima plot --json`` file."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import error_line, fake_run_dir, run_main
from proxima.logger import CSV_COLUMNS

mpl = pytest.importorskip("matplotlib")

METRIC = "charts/episodic_return"
STEP = 100


def _returns(seed: int, iterations: int) -> list:
    """A member's return per iteration: rising, each seed on its own level and noise."""
    rng = np.random.default_rng(seed)
    return [round(10.0 * seed + 5.0 * k + float(rng.normal(0, 3)), 3) for k in range(1, iterations + 1)]


def _population(run: Path, seeds=(1, 2, 3, 4, 5), iterations: int = 8, env_id: str = "Fake-v0", num_envs: int = 4) -> Path:
    """A population of one setting (``--seeds``), a member per seed logging at steps 100, 200, ... as training does."""
    entries = []
    for i, seed in enumerate(seeds):
        name = f"m{i:03d}-seed{seed}"
        (run / name).mkdir(parents=True)
        (run / name / "config.yaml").write_text(f"env_id: {env_id}\nseed: {seed}\nnum_envs: {num_envs}\n")
        with open(run / name / "metrics.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
            w.writeheader()
            for k, r in enumerate(_returns(seed + num_envs, iterations), 1):
                w.writerow({"iteration": k, "global_step": STEP * k, "time": 0.1 * k, "episodes": 1, METRIC: r})
        entries.append({"dir": name, "seed": seed, "settings": {}})
    (run / "population.json").write_text(json.dumps({"kind": "ppo-population", "env_id": env_id, "members": len(seeds),
                                                     "seeds": list(seeds), "member_dirs": entries}))
    return run


def _members_at(pop: Path, step: int) -> np.ndarray:
    """Each member's METRIC at ``step``, read from its metrics.csv as a user would."""
    values = []
    for member in sorted(pop.glob("m*")):
        with open(member / "metrics.csv", newline="") as f:
            values += [float(r[METRIC]) for r in csv.DictReader(f) if int(r["global_step"]) == step]
    return np.array(values)


def _iqm(x: np.ndarray) -> float:
    """rliable's IQM by hand: sort, drop floor(n/4) values at each end, average the rest."""
    s, k = np.sort(x), len(x) // 4
    return float(s[k:len(s) - k].mean())


def _visible(fig) -> list:
    return [ax for ax in fig.axes if ax.get_visible()]


@pytest.fixture
def two(tmp_path, monkeypatch):
    """A (--num-envs 4, 8 iterations) and B (--num-envs 8, 4 iterations), both Fake-v0, the cwd their folder."""
    monkeypatch.chdir(tmp_path)
    return _population(tmp_path / "A"), _population(tmp_path / "B", iterations=4, num_envs=8)


# ------------------------------------------------------------------------------------ 7: one panel per env
def test_two_populations_of_one_env_are_overlaid_in_one_panel_a_coloured_curve_each(two, capsys, drawn):
    code, out, err = run_main(["plot", "A", "B", "--metric", METRIC, "--out", "ab.png"], capsys)
    assert (code, out.strip()) == (0, "wrote ab.png"), err
    (ax,) = _visible(drawn[-1])
    assert ax.get_title() == "Fake-v0"
    lines = ax.get_lines()
    assert [ln.get_label() for ln in lines] == ["A: IQM, 95% CI (5 members)", "B: IQM, 95% CI (5 members)"]
    assert lines[0].get_color() != lines[1].get_color()
    assert [ln.get_xdata()[-1] for ln in lines] == [800.0, 400.0]  # each where its training ended, on one axis
    assert len(ax.collections) == 2  # a CI band each
    assert ax.get_legend().get_title().get_text().startswith("95% CI: 10000 bootstrap resamples")


def test_per_setting_keeps_a_panel_per_population_on_shared_axes(two, capsys, drawn):
    code, _, err = run_main(["plot", "A", "B", "--metric", METRIC, "--panels", "per-setting", "--out", "ab.png"], capsys)
    assert code == 0, err
    a, b = _visible(drawn[-1])
    assert [a.get_title(), b.get_title()] == ["Fake-v0: population A", "Fake-v0: population B"]
    assert a.get_xlim() == b.get_xlim() and a.get_xlim()[1] >= 800.0  # B's 0-400 drawn on A's 0-800 scale
    assert a.get_ylim() == b.get_ylim()


def test_populations_of_other_envs_keep_their_own_panels(tmp_path, capsys, drawn):
    a, c = _population(tmp_path / "A"), _population(tmp_path / "C", env_id="Other-v0")
    code, _, err = run_main(["plot", str(a), str(c), "--metric", METRIC, "--out", str(tmp_path / "ac.png")], capsys)
    assert code == 0, err
    assert [ax.get_title() for ax in _visible(drawn[-1])] == ["Fake-v0: population A", "Other-v0: population C"]
    assert [len(ax.get_lines()) for ax in _visible(drawn[-1])] == [1, 1]


def test_a_population_joins_the_panel_of_plain_runs_of_its_env(tmp_path, capsys, drawn):
    pop = _population(tmp_path / "A")
    run = fake_run_dir(tmp_path, "solo")
    code, _, err = run_main(["plot", str(run), str(pop), "--metric", METRIC, "--label", f"{pop}=ours",
                             "--out", str(tmp_path / "o.png")], capsys)
    assert code == 0, err
    (ax,) = _visible(drawn[-1])
    assert [ln.get_label() for ln in ax.get_lines()] == ["solo", "ours: IQM, 95% CI (5 members)"]


# ------------------------------------------------------------------------------------ 8: --json, what is drawn
def test_json_holds_each_drawn_curve_its_iqm_ci_and_members_counted(two, capsys, drawn):
    code, out, err = run_main(["plot", "A", "B", "--metric", METRIC, "--out", "ab.png", "--json", "ab.json"], capsys)
    assert (code, out.strip()) == (0, "wrote ab.png and ab.json"), err
    doc = json.loads(Path("ab.json").read_text())
    assert (doc["generator"], doc["x"], doc["smooth"]) == ("proxima plot", "global_step", 1)
    assert (doc["ci"]["level"], doc["ci"]["resamples"], doc["ci"]["seed"]) == (0.95, 10000, 0)
    (panel,) = doc["panels"]
    assert (panel["title"], panel["env_id"], panel["metric"]) == ("Fake-v0", "Fake-v0", METRIC)
    a, b = panel["curves"]
    (ax,) = _visible(drawn[-1])
    for curve, line in zip((a, b), ax.get_lines()):  # exactly the drawn line
        assert curve["label"] == line.get_label()
        assert (curve["x"], curve["y"]) == (list(line.get_xdata()), list(line.get_ydata()))
        assert (curve["stat"], curve["band"]) == ("iqm", "ci")
    assert a["x"] == [100.0 * k for k in range(1, 9)] and b["x"] == [100.0 * k for k in range(1, 5)]
    assert a["count"] == [5] * 8 and b["count"] == [5] * 4
    # the centre at step 300 is the IQM of the five members' metrics.csv values there, recomputed by hand
    values = _members_at(Path("A"), 300)
    assert len(values) == 5
    assert a["y"][2] == pytest.approx(_iqm(values), abs=1e-9)
    assert b["y"][3] == pytest.approx(_iqm(_members_at(Path("B"), 400)), abs=1e-9)
    # and its band the 95% percentile bootstrap of the IQM: default_rng(0), 10000 resamples of the 5
    idx = np.random.default_rng(0).integers(0, 5, size=(10000, 5))
    stats = [_iqm(values[i]) for i in idx]
    assert [a["low"][2], a["high"][2]] == pytest.approx([np.quantile(stats, 0.025), np.quantile(stats, 0.975)], abs=1e-9)


def test_json_of_a_plain_run_and_a_group_has_their_own_statistic_and_counts(tmp_path, capsys):
    one = fake_run_dir(tmp_path, "one", returns=(1.0, 2.0), lr=0.01)
    g1 = fake_run_dir(tmp_path, "g1", returns=(1.0, 4.0), seed=1)
    g2 = fake_run_dir(tmp_path, "g2", returns=(3.0, 8.0), seed=2)
    out = tmp_path / "c.json"
    code, _, err = run_main(["plot", str(one), str(g1), str(g2), "--metric", METRIC, "--band", "std",
                             "--out", str(tmp_path / "c.png"), "--json", str(out)], capsys)
    assert code == 0, err
    doc = json.loads(out.read_text())
    (panel,) = doc["panels"]
    solo, group = panel["curves"]
    assert (solo["stat"], solo["band"], solo["y"], solo["low"], solo["count"]) == (None, None, [1.0, 2.0], [None, None], [1, 1])
    assert (group["stat"], group["band"], group["count"]) == ("mean", "std", [2, 2])
    assert group["y"] == [2.0, 6.0]
    assert group["low"][1] == pytest.approx(6.0 - np.std([4.0, 8.0], ddof=1))
    assert doc["ci"] is None  # no curve's band is a CI


def test_json_refuses_a_file_it_did_not_write_and_replaces_its_own(two, capsys):
    Path("notes.json").write_text('{"mine": 1}\n')
    code, _, err = run_main(["plot", "A", "--metric", METRIC, "--out", "a.png", "--json", "notes.json"], capsys)
    assert error_line(code, err) == ("proxima plot: error: --json notes.json: exists and is not a file `proxima plot "
                                     "--json` wrote; give another FILE.json (or remove it)")
    assert Path("notes.json").read_text() == '{"mine": 1}\n' and not Path("a.png").exists()
    for _ in range(2):  # an earlier export is replaced, as report --json replaces its own
        code, _, err = run_main(["plot", "A", "--metric", METRIC, "--out", "a.png", "--json", "a.json"], capsys)
        assert code == 0, err
    assert json.loads(Path("a.json").read_text())["panels"][0]["title"] == "Fake-v0: population A"


@pytest.mark.parametrize("target, line", [
    ("a.csv", "--json a.csv: not a .json file; give FILE.json (the curves' numbers as JSON)"),
    ("A/population.json", "--json A/population.json: population.json is a file Proxima writes in a run directory (A); "
                          "give another FILE.json (e.g. A/curves.json)"),
    ("A", "--json A: not a .json file"),
])
def test_json_refusals_are_one_line_and_write_nothing(two, capsys, target, line):
    before = Path("A/population.json").read_bytes()
    code, _, err = run_main(["plot", "A", "--metric", METRIC, "--out", "a.png", "--json", target], capsys)
    assert line in error_line(code, err)
    assert not Path("a.png").exists() and Path("A/population.json").read_bytes() == before


def test_a_plot_that_fails_writes_neither_file(two, capsys):
    code, _, err = run_main(["plot", "A", "--metric", "charts/nope", "--out", "a.png", "--json", "a.json"], capsys)
    error_line(code, err, "charts/nope")
    assert not Path("a.png").exists() and not Path("a.json").exists()
    assert [p.name for p in Path(".").iterdir() if p.name.startswith(".")] == []  # no temporary left behind
