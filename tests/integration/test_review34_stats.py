"""Review 34 (population statistics): the report names the step(s) and the episodes its evaluation
returns were measured at, eval and report run a run's own --eval-episodes unless --episodes says
otherwise (one number per population, whichever command gives it), a population plotted alone
leaves out a member with no return yet, a 95% CI of fewer than 5 members is marked † in the plot as
in the report, and a member's throughput is said to be per member."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from proxima.logger import CSV_COLUMNS
from proxima.plot import population_curves
from tests.cli_helpers import fake_run_dir, one_error_line, run_main, tiny_cartpole_run, tiny_population

DOCS = Path(__file__).resolve().parents[2] / "docs" / "populations.md"
STEPS = [512, 1024, 1536, 2048, 2560, 3072, 3584, 4096]


def _member(run: Path, i: int, returns, eval_step=None, eval_episodes=20, checkpoint=None, settings=None) -> dict:
    """A member directory by hand: config.yaml, metrics.csv over STEPS (None: an empty return cell),
    an eval.json of ``eval_step`` (None: none) and an empty checkpoint file named for the step
    ``checkpoint`` (its name is the step the report reads: nothing loads it here)."""
    settings = settings or {}
    name = f"m{i:03d}-seed{i + 1}" + "".join(f"-{k}{v}" for k, v in settings.items())
    d = run / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump({"env_id": "Fake-v0", "seed": i + 1, "eval_episodes": eval_episodes,
                                                   **settings}, sort_keys=False))
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for k, (s, r) in enumerate(zip(STEPS, returns)):
            w.writerow({"iteration": k + 1, "global_step": s, "time": 0.5 * (k + 1), "episodes": 0 if r is None else 1,
                        "charts/SPS": 1000, "charts/episodic_return": "" if r is None else r})
    if checkpoint is not None:
        (d / "checkpoints").mkdir()
        (d / "checkpoints" / f"step_{checkpoint:012d}.pt").write_bytes(b"")
    if eval_step is not None:
        (d / "eval.json").write_text(json.dumps({"mean_return": 100.0 + i, "std_return": 0.0, "episodes": eval_episodes,
                                                 "deterministic": True, "global_step": eval_step}))
    return {"dir": name, "seed": i + 1, "settings": settings}


def _population(run: Path, entries: list, total: int = 8192) -> Path:
    (run / "population.json").write_text(json.dumps({"kind": "ppo-population", "env_id": "Fake-v0", "members": len(entries),
                                                     "seeds": [e["seed"] for e in entries], "member_dirs": entries,
                                                     "total_timesteps_per_member": total}))
    return run


def _source_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("Final return per member"))


# ------------------------------------------------------------------------------------ 1. the step evaluated
def test_a_killed_populations_report_names_the_older_step_its_members_were_evaluated_at(tmp_path, capsys):
    # killed after the checkpoint of step 3,584, metrics.csv on to 4,096: the returns are of 3,584
    run = _population(tmp_path / "P", [_member(tmp_path / "P", i, [10.0 * (k + 1) for k in range(8)], eval_step=3584,
                                               checkpoint=3584) for i in range(2)])
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    text = (run / "report.md").read_text()
    assert "4,096 of 8,192 steps each so far" in text
    assert ("Evaluated at step 3,584 (the members' newest checkpoints; their metrics.csv reached 4,096), over 20 "
            "episodes per member.") in _source_line(text)
    assert "different steps" not in text


def test_members_evaluated_at_different_steps_get_the_range_and_evals_note(tmp_path, capsys):
    run = tmp_path / "P"
    returns = [10.0 * (k + 1) for k in range(8)]
    run = _population(run, [_member(run, 0, returns, eval_step=4096, checkpoint=4096),
                            _member(run, 1, returns, eval_step=3584, checkpoint=3584),
                            _member(run, 2, returns, eval_step=4096, checkpoint=4096)])
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    text = (run / "report.md").read_text()
    assert "Evaluated at steps 3,584 to 4,096 (members differ: see the note below), over 20 episodes per member." \
        in _source_line(text)
    assert ("- note: the members were evaluated at different steps (3,584-4,096; m001-seed2 at 3,584; m000-seed1, "
            "m002-seed3 at 4,096), so the settings compare unequal amounts of training") in text
    assert "| (seeds only) | 3 | 101.0 |" in text  # all three counted, as eval counts them, and said


# ------------------------------------------------------------------------------------ 2. the episodes evaluated
@pytest.fixture(scope="module")
def pop(tmp_path_factory):
    """A finished 2-member population of 64 steps each (checkpoints, no eval.json: --eval-episodes 0)."""
    return tiny_population(tmp_path_factory, "review34", 64)


def _own_episodes(pop: Path, dest: Path, episodes: int) -> Path:
    """A copy of ``pop`` whose members' config.yaml record --eval-episodes ``episodes``."""
    run = dest / "P"
    shutil.copytree(pop, run)
    for m in ("m000-seed1", "m001-seed2"):
        config = yaml.safe_load((run / m / "config.yaml").read_text())
        (run / m / "config.yaml").write_text(yaml.safe_dump({**config, "eval_episodes": episodes}, sort_keys=False))
    return run


def test_eval_and_report_run_the_members_own_eval_episodes_and_give_one_number(pop, tmp_path, capsys):
    run = _own_episodes(pop, tmp_path, 3)
    code, out, err = run_main(["eval", str(run), "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert [m["episodes"] for m in result["members"]] == [3, 3] and result["episodes"] == 3  # not 10
    code, _, err = run_main(["report", str(run)], capsys)
    assert code == 0, err
    text = (run / "report.md").read_text()
    assert "Evaluated at step 64, over 3 episodes per member." in _source_line(text)
    [s] = result["settings"]
    row = next(line for line in text.splitlines() if line.startswith("| (seeds only) |"))
    assert row.split(" | ")[2] == f"{s['mean']:.1f}" and row.split(" | ")[4] == f"{s['iqm']:.1f}"  # the same population, one number
    code, out, err = run_main(["eval", str(run), "--episodes", "2", "--json"], capsys)  # typed: it wins
    assert code == 0 and [m["episodes"] for m in json.loads(out)["members"]] == [2, 2], err


def test_an_explicit_episodes_beside_eval_json_of_another_count_is_said_not_mixed_unsaid(pop, tmp_path, capsys):
    run = _own_episodes(pop, tmp_path, 3)
    (run / "m000-seed1" / "eval.json").write_text(json.dumps({"mean_return": 9.0, "std_return": 0.0, "episodes": 3,
                                                             "deterministic": True, "global_step": 64}))
    code, _, err = run_main(["report", str(run), "--episodes", "2"], capsys)
    assert code == 0, err
    text = (run / "report.md").read_text()
    assert "over 2 to 3 episodes (members differ: see the note below)" in _source_line(text)
    assert ("- (seeds only): its members' evaluations ran different numbers of episodes (m001-seed2 over 2; m000-seed1 "
            "over 3); each member's mean counts as one value") in text
    code, _, err = run_main(["report", str(run)], capsys)  # without --episodes: the members' own 3, one count
    assert code == 0, err
    text = (run / "report.md").read_text()
    assert "over 3 episodes per member." in _source_line(text) and "different numbers of episodes" not in text


def test_a_single_runs_eval_and_report_run_its_own_eval_episodes(tmp_path_factory, capsys):
    run = tiny_cartpole_run(tmp_path_factory, "review34run")  # --eval-episodes 0: no eval.json
    config = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**config, "eval_episodes": 3}, sort_keys=False))
    code, out, err = run_main(["eval", str(run)], capsys)
    assert code == 0 and " over 3 episodes " in out, (out, err)
    code, _, err = run_main(["report", str(run)], capsys)
    assert code == 0, err
    assert "over 3 episodes, deterministic policy at step 128" in (run / "report.md").read_text()


def test_the_help_of_eval_and_report_names_the_default_episodes(capsys):
    for command in ("eval", "report"):
        code, out, _ = run_main([command, "--help"], capsys)
        assert code == 0 and "--eval-episodes" in " ".join(out.split()), command


# ------------------------------------------------------------------------------------ 3. a member with no return yet
def test_a_population_plotted_alone_leaves_out_a_member_with_no_return_yet(tmp_path, capsys):
    run = tmp_path / "P"
    run = _population(run, [_member(run, 0, [10.0 * (k + 1) for k in range(8)]), _member(run, 1, [None] * 8),
                            _member(run, 2, [20.0 * (k + 1) for k in range(8)])])
    code, out, err = run_main(["plot", str(run)], capsys)
    assert (code, out.strip()) == (0, f"wrote {run / 'curve.png'}"), err
    assert f"proxima: note: leaving out {run / 'm001-seed2'}: " in err
    _, _, (curve,) = population_curves(run, "charts/episodic_return")  # as logged: the default rebuilds the rolling one
    assert curve.label == "IQM, 95% CI \u2020 (2 of 3 members; m001 no values)"
    np.testing.assert_allclose(curve.y, [15.0 * (k + 1) for k in range(8)])
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)  # its curve too
    assert code == 0 and "No learning curve" not in (run / "report.md").read_text(), err

    blank = tmp_path / "B"
    blank = _population(blank, [_member(blank, i, [None] * 8) for i in range(2)])  # none has one: still an error
    code, _, err = run_main(["plot", str(blank)], capsys)
    assert code == 2 and "no values of charts/episodic_return_100" in one_error_line(err, "proxima plot")
    assert not (blank / "curve.png").exists()


# ------------------------------------------------------------------------------------ 4. the † in the plot
def test_a_plotted_ci_of_fewer_than_5_members_is_marked_as_the_report_marks_it(tmp_path):
    for n, mark in ((4, " \u2020"), (5, "")):
        run = tmp_path / f"P{n}"
        run = _population(run, [_member(run, i, [10.0 * (k + i) for k in range(8)]) for i in range(n)])
        _, _, (curve,) = population_curves(run)
        assert curve.label == f"IQM, 95% CI{mark} ({n} members)"
        assert ("\u2020 < 5 members: covers well under 95%" in curve.note) == bool(mark)
        _, _, (mean,) = population_curves(run, band="minmax")  # not a CI: nothing to mark
        assert "\u2020" not in mean.label and "\u2020" not in (mean.note or "")
    text = " ".join(DOCS.read_text().split())
    assert "nominal 95%" in text and "n = 5" in text and "0.85" in text and "0.91" in text


# ------------------------------------------------------------------------------------ 5. per-member throughput
def test_a_members_report_says_its_throughput_is_per_member(tmp_path, capsys):
    run = tmp_path / "P"
    run = _population(run, [_member(run, i, [10.0] * 8) for i in range(2)])
    code, _, err = run_main(["report", str(run / "m000-seed1"), "--episodes", "0"], capsys)
    assert code == 0, err
    assert "| throughput | 1,024 steps/s per member |" in (run / "m000-seed1" / "report.md").read_text()  # 4,096 / 4.0 s
    plain = fake_run_dir(tmp_path, "plain", steps=(100, 200), returns=(1.0, 2.0))
    code, _, err = run_main(["report", str(plain), "--episodes", "0"], capsys)
    assert code == 0, err
    assert "| throughput | 1,000 steps/s |" in (plain / "report.md").read_text()  # a single run: its own, no words
    text = " ".join(DOCS.read_text().split())
    assert "SPS (the population's" not in text and "per member" in text[text.index("iteration, step, time and SPS"):][:200]
