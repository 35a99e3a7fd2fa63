"""Report leftovers, review 49: the final evaluation's success rate in report.md and --json (an env that reports
info['is_success']), and nothing else where no run's did."""

from __future__ import annotations

import json

from proxima import cli
from tests.cli_helpers import fake_run_dir

EVAL = {"mean_return": 2.0, "std_return": 0.0, "episodes": 10, "returns": [2.0] * 10, "global_step": 200}


def _run_with_eval(root, name: str, **fields):
    run = fake_run_dir(root, name)
    (run / "eval.json").write_text(json.dumps({**EVAL, **fields}))
    return run


def _row(text: str, label: str) -> list:
    """The cells of report.md's Results row ``label`` (after the label), or [] where there is none."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == label:
            return cells[1:]
    return []


def test_report_shows_the_final_eval_success_rate_blank_for_a_run_whose_env_reported_none(tmp_path, capsys):
    a = _run_with_eval(tmp_path, "a", success_rate=0.8)
    b = _run_with_eval(tmp_path, "b")  # no episode reported info['is_success']: no rate, not a rate of 0
    c = _run_with_eval(tmp_path, "c", success_rate=0.5, success_episodes=4)
    out, js = tmp_path / "r.md", tmp_path / "r.json"
    assert cli.main(["report", str(a), str(b), str(c), "--out", str(out), "--json", str(js)]) == 0
    assert _row(out.read_text(), "final eval success rate") == ["0.80", "\u2014", "0.50 over 4 of 10 episodes"]
    evals = [r["final_eval"] for r in json.loads(js.read_text())["runs"]]
    assert [(e["success_rate"], e["success_episodes"]) for e in evals] == [(0.8, 10), (None, None), (0.5, 4)]


def test_report_has_no_success_rate_row_when_no_run_reported_one(tmp_path, capsys):
    run = _run_with_eval(tmp_path, "a")
    assert cli.main(["report", str(run)]) == 0
    text = (run / "report.md").read_text()
    assert "success rate" not in text and _row(text, "final eval return")


def test_report_refuses_an_eval_json_success_rate_outside_0_to_1_in_one_line(tmp_path, capsys):
    run = _run_with_eval(tmp_path, "a", success_rate=1.5)
    assert cli.main(["report", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"proxima report: error: {run / 'eval.json'}: success_rate is not a rate from 0 to 1 (1.5)"]
    assert not (run / "report.md").exists()


def _evaluated_run(root, name: str = "run"):
    """A fake run trained with --eval-every 100 whose two evaluations logged eval/mean_return and no
    eval/success_rate: an env that never reports info['is_success']."""
    import csv

    from proxima.logger import CSV_COLUMNS

    run = fake_run_dir(root, name, eval_every=100)
    with open(run / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for i, step in enumerate((100, 200)):
            w.writerow({"iteration": i + 1, "global_step": step, "time": 0.1 * (i + 1), "episodes": 1,
                        "charts/episodic_return": 1.0, "eval/mean_return": 5.0})
    return run


def test_plot_of_eval_success_rate_after_evaluations_says_the_env_never_reported_is_success(tmp_path, capsys):
    run = _evaluated_run(tmp_path)
    assert cli.main(["plot", str(run), "--metric", "eval/success_rate"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"proxima plot: error: {run / 'metrics.csv'}: no values of eval/success_rate (the env never "
                   "reported info['is_success'] at an evaluated episode's end; the run's evaluations are in "
                   "eval/mean_return)"]


def test_plot_of_charts_success_rate_never_reported_says_why_it_is_blank(tmp_path, capsys):
    run = fake_run_dir(tmp_path, "run")
    assert cli.main(["plot", str(run), "--metric", "charts/success_rate"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"proxima plot: error: {run / 'metrics.csv'}: no values of charts/success_rate (the env never reported "
        "info['is_success'] at an episode's end; native envs and population members never do)"]


def test_plot_of_eval_success_rate_before_any_evaluation_still_says_when_it_evaluates(tmp_path, capsys):
    run = fake_run_dir(tmp_path, "run", eval_every=1000)  # 200 steps: no evaluation yet, eval/mean_return blank
    assert cli.main(["plot", str(run), "--metric", "eval/success_rate"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "no values of eval/success_rate (no evaluation yet: this run evaluates every 1,000 steps, --eval-every)")


def test_build_report_quiet_prints_no_single_point_note_and_the_command_still_does(tmp_path, capsys):
    from proxima.report import build_report

    run = fake_run_dir(tmp_path, "run", steps=(100,), returns=(1.0,))  # one logged value: a single point
    (run / "eval.json").write_text(json.dumps(EVAL))
    build_report([run], metric="charts/episodic_return", quiet=True)
    assert capsys.readouterr().err == ""
    assert (run / "report_curve.png").is_file()
    assert cli.main(["report", str(run), "--metric", "charts/episodic_return"]) == 0
    assert "drawn as a single point" in capsys.readouterr().err


def _killed_population(root, logged: int, checkpoint: int):
    """A fake seeds-only population of two members whose metrics.csv reached ``logged`` steps each of 20,480,
    its newest population checkpoint at ``checkpoint`` (a kill between checkpoints) and an eval.json each."""
    import csv

    from proxima.logger import CSV_COLUMNS

    run = root / "P"
    entries = []
    for seed in (1, 2):
        d = run / f"m{seed - 1:03d}-seed{seed}"
        d.mkdir(parents=True)
        (d / "eval.json").write_text(json.dumps({"mean_return": 10.0 * seed}))
        with open(d / "metrics.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
            w.writeheader()
            for i, step in enumerate(range(512, logged + 1, 512)):
                w.writerow({"iteration": i + 1, "global_step": step, "time": 0.1 * (i + 1), "episodes": 1,
                            "charts/episodic_return": 20.0})
        entries.append({"dir": d.name, "seed": seed, "settings": {}})
    (run / "population.json").write_text(json.dumps({
        "kind": "ppo-population", "env_id": "CartPole-v1", "members": 2, "seeds": [1, 2], "member_dirs": entries,
        "total_timesteps_per_member": 20480}))
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / f"step_{checkpoint:012d}.pt").write_bytes(b"not read")
    return run


def test_a_killed_populations_steps_name_the_checkpoint_a_resume_continues_from(tmp_path, capsys):
    import shlex

    from proxima.population_report import training_progress

    run = _killed_population(tmp_path, logged=3584, checkpoint=3072)
    doc = json.loads((run / "population.json").read_text())
    resume = f"proxima resume {shlex.quote(str(run))}"
    assert training_progress(run, doc) == (f"3,584 of 20,480 steps each logged so far; last checkpoint at 3,072 "
                                           f"(stopped; `{resume}` continues it from there), 0.7 s of training")
    assert cli.main(["report", str(run)]) == 0
    assert "steps each logged so far; last checkpoint at 3,072" in (run / "report.md").read_text()
    (run / "checkpoints" / "step_000000003584.pt").write_bytes(b"not read")  # a stop's checkpoint: at the last row
    assert training_progress(run, doc) == (f"3,584 of 20,480 steps each so far (stopped; `{resume}` continues it), "
                                           "0.7 s of training")


def test_the_performance_profile_fits_its_title_and_legend_to_the_axes_as_the_other_figures_do():
    from tests.unit.test_aggregate_profile45 import _aggregated
    from tests.unit.test_plotfit48 import _outside

    from proxima.population_report import profile_figure

    wide = ["MMMMMMMMMMMMMMMM-v0", "WWWWWWWWWWWWWWWW-v0", "MWMWMWMWMWMWMWMW-v0"]  # 56 characters a line overran the axes
    long_value = "0.1 " + "with a very long setting label " * 6  # a legend entry wider than half the axes
    aggs = _aggregated([{long_value: [0.2, 0.4], 0.2: [0.9, 1.0]}] * 3, labels=(f"lr={long_value}", "lr=0.2"))
    fig = profile_figure(aggs, wide)
    fig.canvas.draw()
    renderer, ax = fig.canvas.get_renderer(), fig.axes[0]
    title = ax.title
    lines = title.get_text().split("\n")
    widths = [renderer.get_text_width_height_descent(line, title.get_fontproperties(), ismath=False)[0] for line in lines]
    assert max(widths) <= ax.bbox.width, (lines, widths, ax.bbox.width)
    assert " ".join(lines).replace(" ...", "").split() == [w for w in " ".join(lines).split() if w != "..."]
    for word in " ".join(lines).replace(" ...", "").split():  # wrapped at spaces: no id cut in two
        assert word in f"Performance profile over 3 tasks: {', '.join(wide)}".split()
    assert _outside(fig) == []
