"""Review 30, populations with hyperparameter sweeps: 12 settings draw 12 distinct curves; a setting's
curve ends where training ended; a population whose every member diverged says so in plot, eval and
report; counts read in the singular for one; a sweep of one value is labelled everywhere; the
per-iteration progress line keeps to a width and says "diverged"."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import types
from pathlib import Path

import pytest

from cli_helpers import run_main
from proxima import cli
from proxima.logger import CSV_COLUMNS
from proxima.plot import plot_runs, population_curves

TINY = ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1", "--eval-episodes", "1",
        "--threads", "1"]
LRS = "1e-4,2e-4,3e-4,4e-4,5e-4,6e-4,7e-4,8e-4,9e-4,1e-3,2e-3,3e-3"


def _train(argv: list) -> tuple:
    """(exit code, stdout, stderr) of ``proxima train ARGV`` in this process (module fixtures have no capsys)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(["train", "CartPole-v1", *argv])
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """One seed x 12 learning rates, 128 steps each, progress lines on."""
    run = tmp_path_factory.mktemp("pop") / "many"
    code, out, err = _train(["--seeds", "1", "--sweep", f"lr={LRS}", "--total-timesteps", "128", *TINY, "--run-dir", str(run)])
    assert code == 0, err
    return run, out, err


def _drawn(run: Path, monkeypatch):
    """The figure ``proxima plot RUN`` saves (plot_runs), caught as it is saved."""
    from matplotlib.figure import Figure

    saved, save = [], Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (saved.append(self), save(self, *a, **k))[1])
    plot_runs([run], run / "curve.png")
    return saved[0]


# ------------------------------------------------------------------------------ 1 and 4: 12 settings of 1 member
def test_twelve_settings_draw_twelve_lines_of_pairwise_distinct_colour_and_style(many, monkeypatch):
    from matplotlib.colors import to_rgba

    run, _, _ = many
    ax = _drawn(run, monkeypatch).axes[0]
    lines = [ln for ln in ax.get_lines() if len(ln.get_xdata())]
    assert len(lines) == 12
    styles = [(to_rgba(ln.get_color()), ln.get_linestyle()) for ln in lines]
    assert len(set(styles)) == 12, styles  # matplotlib's cycle gave lr=0.0001 and lr=0.002 the same blue


def test_one_member_per_setting_reads_singular_and_lists_no_ci_band(many, monkeypatch):
    run, _, _ = many
    _, _, curves = population_curves(run)
    assert curves[0].label == "lr=0.0001: IQM (1 member)"
    assert all(c.label.endswith(": IQM (1 member)") for c in curves), [c.label for c in curves]
    legend = _drawn(run, monkeypatch).axes[0].get_legend()
    texts = [t.get_text() for t in legend.get_texts()]
    assert len(texts) == 12 and not any("95% CI" in t for t in texts)  # no swatch for a band of NaN
    assert legend.get_title().get_text() == ""  # each member has its return at every step it logged: nothing carried forward


def test_closing_lines_and_report_header_count_one_member_and_one_seed(many, capsys):
    run, out, _ = many
    closing = [ln for ln in out.splitlines() if ln.startswith("eval ")]
    assert len(closing) == 12 and closing[0].startswith("eval CartPole-v1 lr=0.0001: 1 member, mean ")
    assert "1 members" not in out
    assert run_main(["report", str(run)], capsys)[0] == 0
    text = (run / "report.md").read_text()
    assert "CartPole-v1: 12 members (1 seed x 12 settings), 128 steps each" in text


def test_the_progress_line_of_twelve_settings_keeps_to_200_columns(many):
    _, _, err = many
    progress = [ln for ln in err.splitlines() if ln.startswith("population 12 members | step ")]
    assert len(progress) == 2, err
    for ln in progress:  # was 700+ characters
        assert len(ln) <= 200 and ln.split(" | ")[2].startswith("mean rolling return lr=0.0001: "), ln
        assert "+10 more settings" in ln, ln


# ------------------------------------------------------------------------------ progress line, unit
def _pop(lrs: list, seeds: list, diverged: set):
    from proxima.config import PPOConfig
    from proxima.population import member_configs

    configs = member_configs(PPOConfig(env_id="CartPole-v1"), seeds, {"lr": lrs})
    return types.SimpleNamespace(configs=configs, members=len(configs),
                                 diverged_at=[{"iteration": 1} if i in diverged else None for i in range(len(configs))])


def test_a_diverged_setting_says_diverged_on_the_progress_line(capsys):
    from proxima.population_run import _progress

    pop = _pop([1e-3, 1e38], [1, 2], diverged={1, 2, 3})  # members: lr=0.001 (seeds 1, 2), lr=1e+38 (seeds 1, 2)
    rolling = [(20.0, 1), (math.nan, 0), (math.nan, 0), (math.nan, 0)]  # each member's (rolling return, its episodes)
    _progress(rolling, pop, 64, 0.5)  # stderr no terminal: up to 200 columns
    assert capsys.readouterr().err == ("population 4 members | step 64/member | mean rolling return lr=0.001: 20.0 (1 of 1 "
                                       "member, 1 ep, 1 diverged); lr=1e+38: diverged | 0.5s\n")


def test_a_sweep_of_one_value_is_labelled_on_the_progress_and_closing_lines(tmp_path):
    code, out, err = _train(["--seeds", "1,2", "--sweep", "lr=1e-3", "--total-timesteps", "64", *TINY,
                             "--run-dir", str(tmp_path / "one")])
    assert code == 0, err
    assert "population 2 members | step 64/member | mean rolling return lr=0.001: " in err, err
    assert "eval CartPole-v1 lr=0.001: 2 members, mean of means " in out, out


# ------------------------------------------------------------------------------ 2: curves end at the end
def _member(d: Path, returns: list, lr: float, seed: int) -> None:
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(f"env_id: CartPole-v1\nseed: {seed}\nlr: {lr}\n")
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for i, r in enumerate(returns, 1):  # a None: an iteration in which no episode ended (an empty cell)
            w.writerow({"iteration": i, "global_step": 128 * i, "time": 0.1 * i, "episodes": 0 if r is None else 1,
                        "charts/episodic_return": "" if r is None else r})


def test_a_setting_curve_ends_at_its_members_last_logged_step_not_their_last_episode(tmp_path):
    run = tmp_path / "sw"
    members = [({"lr": 0.001}, [10, 20, 30, 40]), ({"lr": 0.001}, [12, 22, 32, None]),
               ({"lr": 0.03}, [15, 25, None, None]), ({"lr": 0.03}, [17, None, 37, None])]
    entries = []
    for i, (settings, returns) in enumerate(members):
        name = f"m{i:03d}-seed{i % 2 + 1}-lr{settings['lr']}"
        _member(run / name, returns, settings["lr"], i % 2 + 1)
        entries.append({"dir": name, "seed": i % 2 + 1, "settings": settings})
    (run / "population.json").write_text(json.dumps({"kind": "ppo-population", "env_id": "CartPole-v1", "members": 4,
                                                     "seeds": [1, 2], "member_dirs": entries}))
    # the per-iteration return (the default curve is the rolling one since session 44): its carry-forward
    per_iteration = "charts/episodic_return"
    _, _, curves = population_curves(run, metric=per_iteration, stat="mean", band="minmax")
    assert [c.x[-1] for c in curves] == [512.0, 512.0]  # lr=0.03 ended at 384, where its last episode did
    assert curves[1].y[-1] == pytest.approx((25 + 37) / 2)  # both members' last returns, carried on
    _, _, by_time = population_curves(run, metric=per_iteration, x="time", stat="mean", band="minmax")
    assert [c.x[-1] for c in by_time] == pytest.approx([0.4, 0.4])


# ------------------------------------------------------------------------------ 3: every member diverged
def test_plot_eval_and_report_say_every_member_diverged(tmp_path, capsys):
    run = tmp_path / "alldiv"
    code, _, err = _train(["--seeds", "1,2", "--sweep", "lr=1e38,2e38", "--total-timesteps", "128", *TINY,
                           "--run-dir", str(run)])
    assert code == 2 and "every member has now diverged" in err, err
    why = (f"every member diverged{{}} (each one's iteration and cause: {run / 'population.json'}; the first, "
           "m000-seed1-lr1e+38, at iteration 1: non-finite loss, gradient or weights in its update; try a lower --lr or "
           "--max-grad-norm)")

    code, out, err = run_main(["plot", str(run)], capsys)
    assert (code, out) == (2, "")
    assert err.splitlines() == [f"proxima plot: error: {run}: no curve to draw: " + why.format("")]  # was "no rows yet"
    assert not (run / "curve.png").exists()

    code, out, err = run_main(["eval", str(run)], capsys)
    assert (code, out) == (2, "")
    assert err.splitlines() == [f"proxima eval: error: {run}: no member has a checkpoint to evaluate: "
                                + why.format(" before the first checkpoint")]  # was "evaluate the others one by one"

    assert run_main(["report", str(run)], capsys)[0] == 0
    text = (run / "report.md").read_text()
    assert "Final return per member: " + "none, as " + why.format("") + "." in text  # was "Final return per member: ."
    assert "No learning curve: every member diverged, and a diverged member is left out of its setting's curve" in text
    assert "no rows yet" not in text and not (run / "report_curve.png").exists()
