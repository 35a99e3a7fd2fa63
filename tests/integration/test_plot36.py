"""`proxima plot` after review 36 (a paper's baseline section): a group of plain runs is aligned as a
population's members are (each run's last value carried to its last logged step, on the steps
logged), runs without values are counted in the legend, PDFs embed TrueType fonts, --dpi and
--label, a folder of runs stands for its runs, and eval/* without --eval-every says so."""

from __future__ import annotations

import json
import shutil
import struct

import numpy as np
import pytest

from tests.cli_helpers import error_line, fake_run_dir, run_main

pytest.importorskip("matplotlib")

from proxima.plot import collect_panels, parse_labels, plot_runs  # noqa: E402

#: the synthetic runs' returns, as logged per iteration (the default curve is the rolling return rebuilt from them)
PER_ITERATION = "charts/episodic_return"
STEPS = (100, 200, 300, 400)


def _population(root, runs) -> object:
    """A seeds-only population directory whose members' metrics.csv are copies of ``runs``'."""
    pop = root / "pop"
    pop.mkdir()
    entries = []
    for i, run in enumerate(runs):
        name = f"m{i:03d}-seed{i + 1}"
        shutil.copytree(run, pop / name)
        entries.append({"dir": name, "seed": i + 1, "settings": {}})
    (pop / "population.json").write_text(json.dumps({"kind": "ppo-population", "env_id": "Fake-v0",
                                                     "members": len(entries), "member_dirs": entries}))
    return pop


def test_runs_of_one_length_are_averaged_to_the_end_with_their_last_values_carried(tmp_path):
    # a's last iteration finished no episode (an empty cell): it still trained to step 400
    a = fake_run_dir(tmp_path, "a", STEPS, (1.0, 2.0, 3.0, None))
    b = fake_run_dir(tmp_path, "b", STEPS, (3.0, 4.0, 5.0, 6.0), seed=2)
    [(_, _, [curve])] = collect_panels([a, b], PER_ITERATION)
    assert curve.label == "mean of 2 runs"  # not "fewer past the shorter runs' end": neither is shorter
    np.testing.assert_array_equal(curve.x, STEPS)
    np.testing.assert_allclose(curve.y, [2.0, 3.0, 4.0, (3.0 + 6.0) / 2])
    assert (curve.lo[-1], curve.hi[-1]) == (3.0, 6.0)
    # a run that trained fewer steps does drop out past its end, and the legend says so
    short = fake_run_dir(tmp_path, "short", STEPS[:2], (1.0, 2.0), seed=3)
    [(_, _, [curve])] = collect_panels([short, b], PER_ITERATION)
    assert curve.label == "mean of 2 runs (fewer past the shorter runs' end)"
    np.testing.assert_allclose(curve.y, [2.0, 3.0, 5.0, 6.0])
    [(_, _, [setting])] = collect_panels([_population(tmp_path, [short, b])], PER_ITERATION, stat="mean", band="minmax")
    assert setting.label == "mean, min-max (2 members, fewer past step 200)"  # one rule for members too
    np.testing.assert_allclose(setting.y, curve.y)


def test_a_group_of_runs_and_a_population_of_the_same_metrics_draw_the_same_curve(tmp_path):
    # sparse returns at different steps (as Acrobot's): no point between logged steps, no extreme smoothed away
    steps = tuple(range(100, 1100, 100))
    runs = [fake_run_dir(tmp_path / "plain", "s1", steps, (None, -500, None, None, -300, None, None, None, -222, None)),
            fake_run_dir(tmp_path / "plain", "s2", steps, (-480, None, None, -389, None, None, -250, None, None, None), seed=2),
            fake_run_dir(tmp_path / "plain", "s3", steps, (None, None, -450, None, None, -410, None, -260, None, -240),
                         seed=3)]
    pop = _population(tmp_path, runs)
    [(_, _, [group])] = collect_panels(runs, PER_ITERATION, stat="mean", band="minmax")
    [(_, _, [setting])] = collect_panels([pop], PER_ITERATION, stat="mean", band="minmax")
    for field in ("x", "y", "lo", "hi"):
        np.testing.assert_array_equal(getattr(group, field), getattr(setting, field), err_msg=field)
    assert group.x[-1] == 1000 and group.hi.max() == -222.0 and -389.0 in group.hi
    np.testing.assert_allclose(group.y[-1], (-222 - 250 - 240) / 3)


def test_runs_without_values_are_counted_in_the_legend(tmp_path, capsys):
    a = fake_run_dir(tmp_path, "a", STEPS, (1.0, 2.0, 3.0, 4.0))
    empty = [fake_run_dir(tmp_path, f"e{i}", STEPS, (None,) * 4, seed=i) for i in (2, 3)]
    [(_, _, [curve])] = collect_panels([a, *empty])
    assert curve.label == "a (1 of 3 runs; 2 without values)"
    b = fake_run_dir(tmp_path, "b", STEPS, (3.0, 4.0, 5.0, 6.0), seed=4)
    [(_, _, [curve])] = collect_panels([a, b, empty[0]])
    assert curve.label == "mean of 2 of 3 runs; 1 without values"
    # an env none of whose runs has a value keeps its panel, which says why it is empty
    other = [fake_run_dir(tmp_path, f"o{i}", STEPS, (None,) * 4, env_id="Other-v0", seed=i) for i in (1, 2)]
    panels = collect_panels([a, *other])
    assert [(t, [c.label for c in cs]) for t, _, cs in panels] == [
        ("Fake-v0", ["a"]), ("Other-v0", ["not drawn (2 runs without values)"])]
    assert len(panels[1][2][0].x) == 0
    capsys.readouterr()
    code, _, err = run_main(["plot", str(a), *map(str, other), "--out", str(tmp_path / "c.png")], capsys)
    assert code == 0 and (tmp_path / "c.png").is_file()
    assert err.count("proxima: note: skipping") == 2  # each still named on stderr


def test_a_pdf_embeds_truetype_fonts_not_type3(tmp_path):
    run = fake_run_dir(tmp_path, "a", STEPS, (1.0, 2.0, 3.0, 4.0))
    data = plot_runs([run], tmp_path / "c.pdf", title="CartPole: PPO").read_bytes()
    assert b"Type3" not in data
    assert b"/FontFile2" in data  # the TrueType font program, embedded (Type 42)


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_dpi_sets_a_png_resolution_and_is_checked(tmp_path, capsys):
    run = fake_run_dir(tmp_path, "a", STEPS, (1.0, 2.0, 3.0, 4.0))
    assert run_main(["plot", str(run), "--out", str(tmp_path / "100.png")], capsys)[0] == 0
    assert run_main(["plot", str(run), "--out", str(tmp_path / "300.png"), "--dpi", "300"], capsys)[0] == 0
    assert _png_size(tmp_path / "100.png") == (640, 420)  # one 6.4 x 4.2 inch panel at the default 100 dpi
    assert _png_size(tmp_path / "300.png") == (1920, 1260)
    for bad in ("0", "5000"):
        code, _, err = run_main(["plot", str(run), "--out", str(tmp_path / "bad.png"), "--dpi", bad], capsys)
        assert error_line(code, err).endswith(f"--dpi {bad}: must be a whole number from 1 to 1200")
    assert not (tmp_path / "bad.png").exists()


def test_label_names_a_run_a_group_and_a_population(tmp_path, capsys):
    a = fake_run_dir(tmp_path, "a", STEPS, (1.0, 2.0, 3.0, 4.0))
    b = fake_run_dir(tmp_path, "b", STEPS, (3.0, 4.0, 5.0, 6.0), seed=2)
    solo = fake_run_dir(tmp_path, "solo", STEPS, (1.0, 2.0, 3.0, 4.0), lr=0.01)
    labels = parse_labels([f"{a}=PPO lr=3e-4", f"{solo}=lr=0.01"], [a, b, solo])  # a NAME may hold "="
    assert labels == {a: "PPO lr=3e-4", solo: "lr=0.01"}
    panels = collect_panels([a, b, solo], labels=labels)
    assert sorted(c.label for _, _, cs in panels for c in cs) == ["PPO lr=3e-4: mean of 2 runs", "lr=0.01"]
    pop = _population(tmp_path, [a, b])
    [(title, _, _)] = collect_panels([pop], labels={pop: "ours"})
    assert title == "Fake-v0: ours"
    out = tmp_path / "x.png"
    code, _, err = run_main(["plot", str(a), str(b), "--label", f"{a}=X", "--label", f"{b}=Y", "--out", str(out)], capsys)
    error_line(code, err, f"--label: {a} and {b} are one curve (same env and settings) but labelled 'X' and 'Y'")
    code, _, err = run_main(["plot", str(a), "--label", f"{tmp_path / 'zz'}=X", "--out", str(out)], capsys)
    error_line(code, err, f"--label {tmp_path / 'zz'}=X: {tmp_path / 'zz'} is not one of the directories plotted ({a})")
    code, _, err = run_main(["plot", str(a), "--label", "noequals", "--out", str(out)], capsys)
    error_line(code, err, "--label noequals: give DIR=NAME, DIR one of the directories plotted")
    assert not out.exists()


def test_a_folder_of_runs_stands_for_its_runs(tmp_path, capsys, monkeypatch):
    runs = tmp_path / "runs"
    a = fake_run_dir(runs, "a", STEPS, (1.0, 2.0, 3.0, 4.0))
    b = fake_run_dir(runs, "b", STEPS, (3.0, 4.0, 5.0, 6.0), seed=2)
    (runs / "notes").mkdir()  # not a run: not counted
    (runs / "README.txt").write_text("x")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["plot", "runs"], capsys)
    assert code == 0, err
    assert err.splitlines() == ["proxima: note: runs is not a run directory; plotting the 2 run directories in it"]
    assert out.strip() == "wrote curve.png" and (tmp_path / "curve.png").is_file()
    assert [c.label for _, _, cs in collect_panels([a, b]) for c in cs] == ["mean of 2 runs"]
    code, _, err = run_main(["plot", "runs/notes"], capsys)  # a folder with no run in it: the error, and a hint
    assert error_line(code, err) == ("proxima plot: error: runs/notes: not a run directory (no metrics.csv), nor a "
                                     "folder holding run directories; give RUN_DIR (e.g. runs/CartPole-v1__1__<time>)")


def test_eval_metric_without_eval_every_says_so(tmp_path, capsys):
    run = fake_run_dir(tmp_path, "a", STEPS, (1.0, 2.0, 3.0, 4.0), eval_every=0)
    code, _, err = run_main(["plot", str(run), "--metric", "eval/mean_return", "--out", str(tmp_path / "e.png")], capsys)
    assert error_line(code, err).endswith(f"{run / 'metrics.csv'}: no values of eval/mean_return (the run was trained "
                                          "without --eval-every N, which logs eval/* every N steps)")
    every = fake_run_dir(tmp_path, "b", STEPS, (1.0, 2.0, 3.0, 4.0), eval_every=50000)
    code, _, err = run_main(["plot", str(every), "--metric", "eval/mean_return", "--out", str(tmp_path / "e.png")], capsys)
    assert error_line(code, err).endswith("(no evaluation yet: this run evaluates every 50,000 steps, --eval-every)")


def test_a_folder_with_runs_a_level_deeper_and_a_label_on_the_folder_are_told(tmp_path, capsys, monkeypatch):
    """`plot runs` with runs/acro/{s1,s2} beside a population: the note counts the population apart and
    names acro as skipped (its runs are a level deeper); --label runs=X names the folder's runs to label;
    a bad --dpi is one line, before any note."""
    runs = tmp_path / "runs"
    a = fake_run_dir(runs, "a", STEPS, (1.0, 2.0, 3.0, 4.0))
    _population(runs, [fake_run_dir(tmp_path / "m", "m1", STEPS, (1.0, 2.0, 3.0, 4.0))])
    fake_run_dir(runs / "acro", "s1", STEPS, (1.0, 2.0, 3.0, 4.0))
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["plot", "runs", "--out", "c.svg"], capsys)
    assert code == 0, err
    assert err.splitlines() == ["proxima: note: runs is not a run directory; plotting the 2 directories (1 run, 1 population) "
                                "in it; skipped acro, which holds runs a level deeper (give them too: runs/acro/*)"]
    code, _, err = run_main(["plot", "runs", "--out", "c.svg", "--label", "runs=X"], capsys)
    error_line(code, err, "--label runs=X: runs is a folder of the runs plotted; label one of them (e.g. --label runs/a=NAME)")
    code, _, err = run_main(["plot", "runs", "--out", "c.svg", "--dpi", "0"], capsys)
    assert error_line(code, err) == "proxima plot: error: --dpi 0: must be a whole number from 1 to 1200"
    assert a.is_dir()
