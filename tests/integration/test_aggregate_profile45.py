"""``proxima report A B --normalize --out agg.md`` draws the performance profile (rliable's
plot_performance_profiles) as agg_profile.png beside agg.md, linked under its profile table, renamed into
place with agg.md, the curves and --json or not at all; --json holds the plotted grid. Populations built by
hand (eval.json files, tests/integration/test_report_tasks44.py's): nothing is trained or evaluated."""

from __future__ import annotations

import errno
import json
import struct

import pytest

from proxima import aggregate as ag
from tests.cli_helpers import error_line, run_main
from tests.integration import test_review34_compare as cmp
from tests.integration.test_report_tasks44 import HAND, _tasks


def _png_size(path) -> tuple:
    """(width, height) of a PNG from its IHDR chunk; AssertionError for a file that is not a PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", path
    return struct.unpack(">II", data[16:24])


def _listing(root) -> list:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_the_profile_is_drawn_beside_the_report_and_linked_under_its_table(tmp_path, capsys):
    a, b = _tasks(tmp_path)
    out, js = tmp_path / "agg.md", tmp_path / "agg.json"
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), "--json", str(js), *HAND], capsys)
    assert code == 0, err
    image = tmp_path / "agg_profile.png"
    width, height = _png_size(image)
    assert image.stat().st_size > 1000 and width > 100 and height > 100
    section = out.read_text().split("### Performance profile")[1].split("### Per task")[0]
    table_end = section.index("| (seeds only) |")
    assert section.index("](agg_profile.png)") > table_end
    assert "dashed: tau = 1, the reference" in section and "Not drawn" not in section
    # the plotted grid, to redraw it: 0 to 1.25 (the highest score is 1), the table's taus on it with its numbers
    [row] = json.loads(js.read_text())["rows"]
    curve = row["profile_curve"]
    assert sorted(curve) == ["ci_high", "ci_low", "fraction", "tau"]
    assert curve["tau"][0] == 0.0 and curve["tau"][-1] == 1.25 and len(set(map(len, curve.values()))) == 1
    for p in row["profile"]:
        i = curve["tau"].index(p["tau"])
        assert curve["fraction"][i] == p["fraction"] and [curve["ci_low"][i], curve["ci_high"][i]] == p["ci"]
    # by hand: scores 1, .5, .2 and .8, .2, .5; above 0.9 only the 1; above 0.1 all six
    tau = curve["tau"]
    assert curve["fraction"][max(i for i, t in enumerate(tau) if t <= 0.1)] == pytest.approx(1.0)
    assert curve["fraction"][min(i for i, t in enumerate(tau) if t >= 0.9)] == pytest.approx(1 / 6)
    assert "](agg_curve.png)" in out.read_text() and _png_size(tmp_path / "agg_curve.png")


def test_a_setting_not_aggregated_is_not_drawn_and_the_caption_says_so(tmp_path, capsys):
    a, b = _tasks(tmp_path, {0.1: [500.0, 250.0], 0.2: [400.0, 300.0]}, {0.1: [-100.0, -200.0], 0.2: [-300.0, -400.0]})
    for d in b.iterdir():  # every lr=0.2 member of Acrobot-v1 without a return
        if d.is_dir() and d.name.endswith("lr0.2"):
            (d / "eval.json").write_text(json.dumps({"mean_return": float("nan"), "episodes": 20, "global_step": cmp.STEP}))
    out, js = tmp_path / "agg.md", tmp_path / "agg.json"
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), "--json", str(js), *HAND], capsys)
    assert code == 0, err
    text = out.read_text()
    assert "](agg_profile.png)" in text
    assert "Not drawn: lr=0.2 (not aggregated: a task without a final return)." in text
    rows = {r["setting"]: r for r in json.loads(js.read_text())["rows"]}
    assert rows["lr=0.2"]["profile_curve"] is None and len(rows["lr=0.1"]["profile_curve"]["tau"]) >= ag.PROFILE_GRID_POINTS


def test_no_setting_aggregated_draws_no_profile_and_says_why(tmp_path, capsys):
    a, b = _tasks(tmp_path)
    for ev in b.glob("*/eval.json"):
        ev.write_text(json.dumps({"mean_return": float("nan"), "episodes": 20, "global_step": cmp.STEP}))
    out = tmp_path / "agg.md"
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), *HAND], capsys)
    assert code == 0, err
    assert "No performance-profile plot: no setting is aggregated" in out.read_text()
    assert not (tmp_path / "agg_profile.png").exists()


def test_a_single_run_task_has_its_curve_drawn_without_a_band(tmp_path, capsys):
    a, b = _tasks(tmp_path, cartpole={None: [500.0]})
    out = tmp_path / "agg.md"
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), *HAND], capsys)
    assert code == 0, err
    assert "No band: (seeds only) (a task with fewer than 2 runs)." in out.read_text()
    assert _png_size(tmp_path / "agg_profile.png")


@pytest.mark.parametrize("point", ["json", "md"])
def test_a_failed_write_leaves_none_of_the_files(tmp_path, capsys, monkeypatch, point):
    from proxima import atomic

    a, b = _tasks(tmp_path)
    out, js = tmp_path / "out" / "agg.md", tmp_path / "out" / "agg.json"
    listing = _listing(tmp_path)
    written = atomic.write_atomic

    def full(path, *args, **kwargs):
        if path.suffix == "." + point:
            raise OSError(errno.ENOSPC, "No space left on device")
        return written(path, *args, **kwargs)

    monkeypatch.setattr(atomic, "write_atomic", full)
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), "--json", str(js), *HAND], capsys)
    error_line(code, err, f"{out if point == 'md' else js}: could not write (No space left")
    # no agg.md, agg.json, agg_curve.png nor agg_profile.png, and no temporary of any (the folder --out made stays)
    assert _listing(tmp_path) == sorted(listing + ["out"])


def test_a_failed_write_leaves_the_earlier_profile_as_it_was(tmp_path, capsys, monkeypatch):
    from proxima import atomic

    a, b = _tasks(tmp_path)
    out = tmp_path / "agg.md"
    assert run_main(["report", str(a), str(b), "--normalize", "--out", str(out), *HAND], capsys)[0] == 0
    files = [out, tmp_path / "agg_curve.png", tmp_path / "agg_profile.png"]
    before, listing = [f.read_bytes() for f in files], _listing(tmp_path)

    def full(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic, "write_atomic", full)
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), "--score-range",
                             "CartPole-v1=0:1000", "--score-range", "Acrobot-v1=-500:0"], capsys)
    error_line(code, err, f"{out}: could not write (No space left")
    assert [f.read_bytes() for f in files] == before and _listing(tmp_path) == listing


def test_the_comparison_of_populations_of_one_env_draws_no_profile(tmp_path, capsys):
    a = cmp._population(tmp_path / "A", {None: [10.0, 20.0]}, env_id="CartPole-v1")
    b = cmp._population(tmp_path / "B", {None: [30.0, 40.0]}, env_id="CartPole-v1")
    code, _, err = run_main(["report", str(a), str(b), "--out", str(tmp_path / "cmp.md")], capsys)
    assert code == 0, err
    assert (tmp_path / "cmp_curve.png").exists() and not (tmp_path / "cmp_profile.png").exists()
    assert "profile" not in (tmp_path / "cmp.md").read_text()


def test_the_caption_says_how_many_taus_from_where_to_where(tmp_path, capsys):
    a, b = _tasks(tmp_path)
    out, js = tmp_path / "agg.md", tmp_path / "agg.json"
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), "--json", str(js), *HAND], capsys)
    assert code == 0, err
    [row] = json.loads(js.read_text())["rows"]
    taus = row["profile_curve"]["tau"]
    # scores 1, .5, .2, .8, .2, .5: 151 even taus 1/120 apart from 0 to 1.25, every table tau and score one of them
    assert len(taus) == 151
    assert "The profile at 151 taus from 0 to 1.25 (the table's among them)" in out.read_text()


def test_a_profile_path_that_is_a_folder_gets_the_report_without_the_plot(tmp_path, capsys):
    a, b = _tasks(tmp_path)
    (tmp_path / "agg_profile.png").mkdir()
    out = tmp_path / "agg.md"
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), *HAND], capsys)
    assert code == 0, err
    assert f"No performance-profile plot: {tmp_path / 'agg_profile.png'}: " in out.read_text()
    assert (tmp_path / "agg_profile.png").is_dir() and not any((tmp_path / "agg_profile.png").iterdir())


@pytest.mark.parametrize("failure, says", [
    (OSError(errno.ENOSPC, "No space left on device"), "agg_profile.png: could not write (No space left on device"),
    (ValueError("bad\nImage size too large"), "agg_profile.png: could not draw it (Image size too large)"),
])
def test_a_profile_that_cannot_be_drawn_leaves_no_file_and_the_report_says_why(tmp_path, capsys, monkeypatch,
                                                                                failure, says):
    from proxima import population_report as pr

    a, b = _tasks(tmp_path)
    out = tmp_path / "agg.md"
    listing = _listing(tmp_path)

    def fails(*args, **kwargs):
        raise failure

    monkeypatch.setattr(pr, "profile_figure", fails)
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), *HAND], capsys)
    assert code == 0, err
    line = next(ln for ln in out.read_text().splitlines() if ln.startswith("No performance-profile plot: "))
    assert says in line
    # the report and its curve, and no profile nor any temporary of one
    assert _listing(tmp_path) == sorted(listing + ["agg.md", "agg_curve.png"])


def test_the_caption_says_the_band_is_pointwise(tmp_path, capsys):
    # each tau's own 95% interval (as rliable's): no band that holds the whole curve 95% of the time
    a, b = _tasks(tmp_path)
    out = tmp_path / "agg.md"
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), *HAND], capsys)
    assert code == 0, err
    text = out.read_text()
    assert "with a pointwise 95% stratified-bootstrap CI](agg_profile.png)" in text
    assert "its pointwise 95% CI shaded (the table's stratified bootstrap, the same resamples)" in text


def test_an_outlier_leaves_every_score_on_the_plotted_grid(tmp_path, capsys):
    # CartPole-v1 on 0..500: 150,000 scores 300; Acrobot-v1 on -500..0: -750 scores -0.5
    a, b = _tasks(tmp_path, {None: [500.0, 250.0, 150000.0]}, {None: [-100.0, -750.0, -250.0]})
    out, js = tmp_path / "agg.md", tmp_path / "agg.json"
    code, _, err = run_main(["report", str(a), str(b), "--normalize", "--out", str(out), "--json", str(js), *HAND], capsys)
    assert code == 0, err
    [row] = json.loads(js.read_text())["rows"]
    tau, fraction = row["profile_curve"]["tau"], row["profile_curve"]["fraction"]
    assert {-0.5, 0.5, 0.8, 1.0, 300.0} <= set(tau)
    assert [t for t in tau if 0 <= t <= 1.25] == [0.25, 0.5, 0.75, 0.8, 1.0]
    # the curve starts at 1 one even step below -0.5, then steps down at every score
    assert tau[0] == pytest.approx(-0.5 - 300.5 / 150) and fraction[0] == 1.0
    assert fraction[tau.index(-0.5)] == 5 / 6 and fraction[tau.index(0.8)] == 2 / 6 and fraction[tau.index(300.0)] == 0
    assert f"The profile at {len(tau)} taus from {tau[0]:g} to 300 (the table's among them)" in out.read_text()
