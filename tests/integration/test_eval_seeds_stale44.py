"""An eval.json an older Proxima wrote for a Gymnasium or EnvPool env played episode i from ``seed + i``
(evaluate.old_episode_seeds): a resume of the finished run, or a population's report, does not show it
as the evaluation of today's rule (episode_seeds); a native env's, whose seeding did not change, stays."""

from __future__ import annotations

import json

import pytest

from proxima import cli
from proxima import evaluate as ev
from proxima import population_report as pr
from proxima.checkpoint import load_policy
from tests.cli_helpers import TINY_RUN, run_main, tiny_population

STEPS = 128


def finished_run(tmp_path_factory, name: str, backend: str):
    """A finished CartPole run on ``backend`` with an end-of-run eval.json of 3 episodes."""
    run = tmp_path_factory.mktemp(name) / "run"
    argv = ["train", "CartPole-v1", *TINY_RUN, "--backend", backend, "--total-timesteps", str(STEPS),
            "--run-dir", str(run), "--quiet"]
    argv[argv.index("--eval-episodes") + 1] = "3"
    assert cli.main(argv) == 0
    return run


@pytest.fixture(scope="module")
def gym_run(tmp_path_factory):
    return finished_run(tmp_path_factory, "stale44g", "gymnasium")


@pytest.fixture(scope="module")
def native_run(tmp_path_factory):
    return finished_run(tmp_path_factory, "stale44n", "native")


def as_older_proxima(run, returns=(1.0, 2.0, 3.0)) -> dict:
    """Rewrite run/eval.json as an older Proxima wrote it: no episode_seeds, other returns (its own
    summary consistent with them, so that it reads as a measurement, not an edit)."""
    path = run / "eval.json"
    data = json.loads(path.read_text())
    data.pop("episode_seeds", None)
    mean = sum(returns) / len(returns)
    std = (sum((r - mean) ** 2 for r in returns) / len(returns)) ** 0.5
    data.update(returns=list(returns), lengths=[int(r) for r in returns], mean_return=mean, std_return=std)
    path.write_text(json.dumps(data, indent=2))
    return data


def test_a_gymnasium_evaluation_records_its_episode_seeds_rule(gym_run, native_run):
    gym, native = (json.loads((r / "eval.json").read_text()) for r in (gym_run, native_run))
    assert (gym["backend"], gym["episode_seeds"]) == ("gymnasium", "SeedSequence")
    assert native["backend"] == "native" and "episode_seeds" not in native  # its env's own generator, seeded e


def test_resuming_a_finished_gymnasium_run_evaluates_an_older_eval_json_again(gym_run, capsys):
    new = json.loads((gym_run / "eval.json").read_text())
    as_older_proxima(gym_run)
    assert ev.current_eval(gym_run, STEPS, 3) is None
    code, _, err = run_main(["resume", str(gym_run), "--no-progress"], capsys)
    assert code == 0, err
    again = json.loads((gym_run / "eval.json").read_text())
    assert (again["returns"], again["episode_seeds"], again["global_step"]) == (new["returns"], "SeedSequence", STEPS)


def test_a_native_runs_older_eval_json_stays_current(native_run, capsys):
    old = as_older_proxima(native_run)
    assert ev.current_eval(native_run, STEPS, 3) == old
    code, _, err = run_main(["resume", str(native_run), "--no-progress"], capsys)
    assert code == 0, err
    assert json.loads((native_run / "eval.json").read_text())["returns"] == [1.0, 2.0, 3.0]  # shown, not recomputed


def test_only_an_eval_json_of_a_recorded_non_native_backend_is_of_the_older_rule():
    assert not ev.old_episode_seeds({"mean_return": 1.0})  # older still: which env it ran is not recorded
    assert not ev.old_episode_seeds({"backend": "native"})
    assert not ev.old_episode_seeds({"backend": "envpool", "episode_seeds": "SeedSequence"})
    assert ev.old_episode_seeds({"backend": "envpool"})


def test_a_population_report_does_not_use_a_members_older_eval_json(gym_run, capsys):
    as_older_proxima(gym_run)
    stale: dict = {}
    value, source = pr.member_final_return(gym_run, 0, stale=stale)
    assert source == "last training return" and stale == {gym_run.name: pr.OLD_SEEDS}
    value, source = pr.member_final_return(gym_run, 3)  # evaluated again, under today's rule
    # its eval.json is there, set aside: the source does not say "no eval.json"
    assert (source, value) == (pr.REEVALUATED, ev.evaluate(load_policy(gym_run), episodes=3)["mean_return"])
    # a population of this one member: its eval.json is no recorded count of the report's evaluations
    (gym_run.parent / "population.json").write_text(json.dumps({"member_dirs": [{"dir": gym_run.name, "seed": 1}]}))
    assert pr.planned_episodes(gym_run.parent, 0) == (set(), set())
    r = {"eval_missing": [gym_run.name], "members": 2, "stale_eval": {gym_run.name: pr.OLD_SEEDS},
         "left_out": [[gym_run.name, pr.OLD_SEEDS]], "not_evaluated": {}}
    notes = pr._row_notes(gym_run, r, "seeds", None, 0)
    assert notes[0] == (f"- seeds: eval for 1 of 2; 1 member whose eval.json an older Proxima seeded (episode k from "
                        f"seed + k: {gym_run.name}), left out rather than mixed with training returns: run `proxima "
                        f"report {gym_run} --episodes N` to evaluate them.")


def test_a_reports_fresh_evaluation_names_the_eval_json_it_set_aside(native_run):
    """A run whose eval.json is of an earlier step is evaluated again; the source names that file rather than
    saying "no eval.json" of a directory that holds one (and says "no eval.json" only where there is none)."""
    from proxima import report

    path = native_run / "eval.json"
    data = json.loads(path.read_text())
    data["global_step"] = 64  # of an earlier step than the run's last (STEPS): not its result
    path.write_text(json.dumps(data, indent=2))
    fresh = report.final_eval(native_run, {}, {}, 2)
    assert fresh["source"] == f"evaluated now from step_{STEPS:012d}.pt (eval.json of step 64 set aside)"
    path.unlink()
    assert report.final_eval(native_run, {}, {}, 2)["source"] == f"evaluated now from step_{STEPS:012d}.pt (no eval.json)"


def test_an_eval_json_of_a_step_past_a_thousand_is_named_with_its_step_grouped(native_run):
    from proxima import report

    # of a later step than the run's last (STEPS): a timeline given up
    (native_run / "eval.json").write_text(json.dumps({"mean_return": 9.0, "episodes": 3, "global_step": 1024}))
    fresh = report.final_eval(native_run, {}, {}, 2)
    assert fresh["source"] == f"evaluated now from step_{STEPS:012d}.pt (eval.json of step 1,024 set aside)"


def test_a_member_evaluated_again_past_its_eval_json_counts_as_evaluated(tmp_path_factory, capsys):
    pop = tiny_population(tmp_path_factory, "stale44pop", 64)
    m0 = sorted(d for d in pop.iterdir() if d.is_dir() and d.name.startswith("m000"))[0]
    (m0 / "eval.json").write_text(json.dumps({"mean_return": 9.0, "episodes": 1, "global_step": 32}))  # not step 64
    [row] = pr.summarize_settings(pop, episodes=1)
    # both members evaluated now (m000's eval.json set aside, m001 without one): one kind of final return, not mixed
    assert (row["kind"], row["n"]) == ("eval", 2), row
    assert row["sources"] == sorted([pr.EVALUATED_NOW, pr.REEVALUATED])
    code, _, err = run_main(["report", str(pop), "--episodes", "1"], capsys)
    assert code == 0, err
    assert "(eval.json set aside)" in (pop / "report.md").read_text()
