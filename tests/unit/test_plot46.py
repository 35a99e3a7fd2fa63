"""`proxima plot` user review 46: a bash-loop sweep is one chart (a curve per setting, in the sweep's
order), a population's "last value carried forward" is a note in the legend's title and only when
something was carried, and plot_runs takes one directory as a str or Path."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from cli_helpers import fake_run_dir
from proxima.cli import main
from proxima.logger import CSV_COLUMNS
from proxima.plot import plot_runs

pytest.importorskip("matplotlib")

LRS = ("1e-4", "3e-4", "1e-3", "3e-3", "1e-2", "3e-2")


def _axes(fig) -> list:
    return [ax for ax in fig.axes if ax.get_visible()]


def _labels(ax) -> list[str]:
    return [ln.get_label() for ln in ax.get_lines()]


def _legend(ax) -> tuple[str, list[str]]:
    legend = ax.get_legend()
    return legend.get_title().get_text(), [t.get_text() for t in legend.get_texts()]


def _sweep(root: Path) -> Path:
    """`for lr in 1e-4 ... 3e-2; do proxima train ... --lr $lr --run-dir sweep/lr$lr; done`, by hand."""
    for i, lr in enumerate(LRS):
        fake_run_dir(root / "sweep", f"lr{float(lr)}", returns=(1.0 + i, 2.0 + i), lr=float(lr), total_timesteps=2048,
                     num_envs=4)
    return root / "sweep"


# ------------------------------------------------------------------------------------ 1. a sweep on one chart
def test_a_bash_loop_sweep_folder_is_one_panel_with_a_curve_per_lr_in_numeric_order(tmp_path, drawn):
    sweep = _sweep(tmp_path)
    assert main(["plot", str(sweep), "--out", str(tmp_path / "sweep.png")]) == 0
    fig = drawn[-1]
    (ax,) = _axes(fig)  # was six panels, 1920x840
    assert tuple(fig.get_size_inches() * fig.dpi) == (640, 420)
    assert ax.get_title() == "Fake-v0"
    # by the value of lr, not the names' string order (lr0.01, lr0.001, lr0.0001 first)
    assert _labels(ax) == ["lr=0.0001", "lr=0.0003", "lr=0.001", "lr=0.003", "lr=0.01", "lr=0.03"]
    assert _legend(ax)[1] == _labels(ax)


def test_runs_differing_in_lr_or_total_timesteps_share_a_panel_with_a_curve_per_setting_in_the_order_given(tmp_path, drawn):
    a1 = fake_run_dir(tmp_path, "a1", lr=0.001, total_timesteps=2048)
    a2 = fake_run_dir(tmp_path, "a2", returns=(3.0, 4.0), lr=0.001, total_timesteps=2048, seed=2)
    b = fake_run_dir(tmp_path, "b", lr=0.0003, total_timesteps=2048)
    c = fake_run_dir(tmp_path, "c", lr=0.001, total_timesteps=4096)
    assert main(["plot", str(b), str(a1), str(c), str(a2), "--out", str(tmp_path / "two.png"),
                 "--metric", "charts/episodic_return"]) == 0
    (ax,) = _axes(drawn[-1])
    assert _labels(ax) == ["lr=0.0003, total_timesteps=2048", "lr=0.001, total_timesteps=2048: mean of 2 runs",
                           "lr=0.001, total_timesteps=4096"]
    title, entries = _legend(ax)
    # the seeds' band is said once, in the legend's title: a swatch in the group's colour read as one setting's
    assert title == "shaded: min-max over runs" and entries == _labels(ax)
    ((lo, hi),) = [(p.get_paths()[0].vertices[:, 1].min(), p.get_paths()[0].vertices[:, 1].max()) for p in ax.collections]
    assert (lo, hi) == (1.0, 4.0)  # min-max over a1 (1, 2) and a2 (3, 4)


def test_panels_per_setting_draws_a_panel_per_setting_titled_with_what_differs(tmp_path, drawn):
    sweep = _sweep(tmp_path)
    assert main(["plot", str(sweep), "--out", str(tmp_path / "sweep.png"), "--panels", "per-setting"]) == 0
    axes = _axes(drawn[-1])
    assert [ax.get_title() for ax in axes] == [f"Fake-v0 (lr={v})" for v in ("0.0001", "0.0003", "0.001", "0.003", "0.01",
                                                                             "0.03")]
    assert [_labels(ax) for ax in axes] == [[f"lr{float(lr)}"] for lr in LRS]


def test_plot_help_names_the_default_panels(capsys):
    with pytest.raises(SystemExit):
        main(["plot", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--panels {per-env,per-setting}" in text and "per-env (the default)" in text


def test_an_unknown_panels_value_is_a_plot_error_naming_the_choices(tmp_path):
    from proxima.plot import PlotError

    run = fake_run_dir(tmp_path, "a")
    with pytest.raises(PlotError, match=r"^--panels 'env': choose one of per-env, per-setting$"):
        plot_runs([run], tmp_path / "x.png", panels="env")
    assert not (tmp_path / "x.png").exists()


# ------------------------------------------------------------------------------------ 3. the population's note
def _population(run: Path, times: list[list[float]], returns: list[list[float]], lrs=(0.001, 0.0003)) -> Path:
    """Two settings of two members each, logged at steps 100, 200, 300 at the ``times`` given (one list per member)."""
    entries = []
    for i, (member_times, member_returns) in enumerate(zip(times, returns)):
        settings = {"lr": lrs[i // 2]}
        name = f"m{i:03d}-seed{i % 2 + 1}-lr{settings['lr']}"
        (run / name).mkdir(parents=True)
        (run / name / "config.yaml").write_text(f"env_id: Fake-v0\nseed: {i % 2 + 1}\nlr: {settings['lr']}\n")
        with open(run / name / "metrics.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
            w.writeheader()
            for k, (t, r) in enumerate(zip(member_times, member_returns), 1):
                w.writerow({"iteration": k, "global_step": 100 * k, "time": t, "episodes": 1,
                            "charts/episodic_return": r, "charts/episodic_return_100": r})
        entries.append({"dir": name, "seed": i % 2 + 1, "settings": settings})
    (run / "population.json").write_text(json.dumps({"kind": "ppo-population", "env_id": "Fake-v0", "members": 4,
                                                     "seeds": [1, 2], "member_dirs": entries}))
    return run


TIMES = [[1.0, 2.0, 3.0], [1.5, 2.5, 3.5], [1.2, 2.2, 3.2], [1.7, 2.7, 3.7]]  # each member's own wall times
RETURNS = [[10.0, 20.0, 30.0], [12.0, 22.0, 32.0], [5.0, 6.0, 7.0], [8.0, 9.0, 10.0]]


def test_a_population_by_time_says_carried_forward_in_the_legend_title_not_beside_a_band(tmp_path, drawn):
    pop = _population(tmp_path / "pop", TIMES, RETURNS)
    assert main(["plot", str(pop), "--x", "time", "--band", "std", "--stat", "mean", "--out", str(tmp_path / "t.png"),
                 "--metric", "charts/episodic_return"]) == 0
    (ax,) = _axes(drawn[-1])
    title, entries = _legend(ax)
    assert title == "last value carried forward"  # the members' times differ: each carried to the others' times
    assert entries == ["lr=0.001: mean, mean \u00b11 std (n-1) (2 members, fewer before 1.5 s, fewer past 3.0 s)",
                       "lr=0.0003: mean, mean \u00b11 std (n-1) (2 members, fewer before 1.7 s, fewer past 3.2 s)"]
    assert len(ax.collections) == 2  # both bands drawn, neither named in the legend


def test_a_population_ci_note_is_in_the_legend_title_and_no_entry_of_the_legend(tmp_path, drawn):
    pop = _population(tmp_path / "pop", TIMES, RETURNS)
    assert main(["plot", str(pop), "--x", "time", "--band", "ci", "--out", str(tmp_path / "c.png")]) == 0
    title, entries = _legend(_axes(drawn[-1])[0])
    assert title.startswith("last value carried forward\n95% CI: 10000 bootstrap resamples,")
    assert len(entries) == 2 and not any("carried" in t or "resamples" in t for t in entries)


def test_a_population_whose_members_logged_every_step_says_nothing_was_carried_forward(tmp_path, drawn):
    pop = _population(tmp_path / "pop", TIMES, RETURNS)
    assert main(["plot", str(pop), "--band", "std", "--stat", "mean", "--out", str(tmp_path / "s.png")]) == 0
    title, entries = _legend(_axes(drawn[-1])[0])
    assert title == ""  # every member has a value at steps 100, 200 and 300: nothing carried, no note
    assert entries == ["lr=0.001: mean, mean \u00b11 std (n-1) (2 members)", "lr=0.0003: mean, mean \u00b11 std (n-1) (2 members)"]


def test_a_member_that_ended_early_is_said_to_be_carried_forward(tmp_path, drawn):
    returns = [list(r) for r in RETURNS]
    returns[3][2] = ""  # its last iteration finished no episode: its return of step 200 carried on to step 300
    pop = _population(tmp_path / "pop", TIMES, returns)
    assert main(["plot", str(pop), "--band", "std", "--stat", "mean", "--out", str(tmp_path / "e.png")]) == 0
    assert _legend(_axes(drawn[-1])[0])[0] == "last value carried forward"


# ------------------------------------------------------------------------------------ 4. one directory as a str
@pytest.mark.parametrize("as_given", [str, Path])
def test_plot_runs_takes_one_run_directory_as_a_str_or_path(tmp_path, drawn, capsys, as_given):
    run = fake_run_dir(tmp_path / "runs", "a", returns=(5.0, 7.0))
    out = plot_runs(as_given(run), as_given(tmp_path / "x.png"), metric="charts/episodic_return")
    assert out == tmp_path / "x.png" and out.stat().st_size > 0
    (ax,) = _axes(drawn[-1])
    ((line,),) = [ax.get_lines()]
    assert line.get_label() == "a" and list(line.get_ydata()) == [5.0, 7.0]
    assert "skipping" not in capsys.readouterr().err  # was: 'skipping a: a: no such directory', one per character


def test_a_long_setting_label_is_wrapped_in_the_legend_and_the_panel_keeps_its_size(tmp_path, drawn, recwarn):
    from proxima.plot import ENTRY_CHARS

    long = {f"option_{i}": "x" * 12 for i in range(12)}
    runs = [fake_run_dir(tmp_path, "a", env_kwargs={"max_episode_steps": 200}), fake_run_dir(tmp_path, "b", env_kwargs=long)]
    assert main(["plot", *map(str, runs), "--out", str(tmp_path / "t.png")]) == 0
    fig = drawn[-1]
    (ax,) = _axes(fig)
    entries = _legend(ax)[1]
    assert entries[0] == "env_kwargs={'max_episode_steps': 200}"
    assert len(entries[1].splitlines()) > 1 and all(len(line) <= ENTRY_CHARS for line in entries[1].splitlines())
    assert not [w for w in recwarn if "constrained_layout not applied" in str(w.message)]  # axes not collapsed to zero
