"""Review 32's surviving mutants of population_eval.py and population_report.py: ``seed=0`` is a seed,
``evaluate_population`` records the step limit it used, a stochastic member's line says so, the n < 5
footnote and the different-steps note appear exactly when due, a threshold of 0 still counts the
members that reach it, key order does not split a setting, and a member entry without a seed is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxima.config import MAX_EVAL_STEPS
from proxima.population_eval import evaluate_population, format_member, format_summary
from proxima.population_report import (BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, FEW_MEMBERS_NOTE, PopulationError,
                                       member_statistics, read_settings)
from tests.cli_helpers import run_main, tiny_population


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> Path:
    """A population of seeds only, m000-seed1 and m001-seed2, of one 32-step iteration each."""
    return tiny_population(tmp_path_factory, "seeds", 32)


def _setting(label: str, means: list) -> dict:
    """A settings row as evaluate_population makes it, over members named after the label."""
    names = [f"m{i:03d}-{label}" for i in range(len(means))]
    stats = member_statistics(names, means)
    for key in ("members", "solved", "solved_count"):
        stats.pop(key)
    return {"settings": {"lr": label}, "label": f"lr={label}", "members": names, "mean_returns": means, **stats,
            "resamples": BOOTSTRAP_RESAMPLES, "rng": f"numpy default_rng({BOOTSTRAP_SEED})", "cut_members": 0}


def _member(name: str, step: int) -> dict:
    return {"dir": name, "mean_return": 10.0, "std_return": 0.0, "episodes": 1, "deterministic": True,
            "global_step": step}


def _population(tmp_path: Path, entries: list) -> Path:
    """A population folder holding ``entries`` as population.json's member_dirs, each one's folder made."""
    run = tmp_path / "P"
    run.mkdir()
    for e in entries:
        (run / e["dir"]).mkdir()
    (run / "population.json").write_text(json.dumps({"member_dirs": entries}))
    return run


# --- evaluate_population ---------------------------------------------------------------------------
def test_seed_0_evaluates_every_member_with_env_seed_0_not_its_own(seeds):
    result = evaluate_population(seeds, episodes=1, seed=0)
    assert [(m["dir"], m["eval_seed"]) for m in result["members"]] == [("m000-seed1", 0), ("m001-seed2", 0)]
    # without a seed each member's own: its config's seed + 1,000,000, so 0 above is the one given
    default = evaluate_population(seeds, episodes=1)
    assert [m["eval_seed"] for m in default["members"]] == [1_000_001, 1_000_002]


def test_evaluate_population_without_max_steps_records_the_default_limit_it_used(seeds):
    result = evaluate_population(seeds, episodes=1)
    assert result["max_steps"] == MAX_EVAL_STEPS == 100_000
    assert evaluate_population(seeds, episodes=1, max_steps=7)["max_steps"] == 7


def test_a_stochastic_evaluations_member_lines_say_stochastic(seeds, capsys):
    code, out, err = run_main(["eval", str(seeds), "--episodes", "1", "--stochastic"], capsys)
    lines = out.strip().splitlines()
    assert code == 0, err
    assert [ln.split(": ")[0] for ln in lines[:2]] == ["m000-seed1", "m001-seed2"]
    assert all(ln.endswith(" at step 32 over 1 episode (stochastic)") for ln in lines[:2]), lines


# --- format_member / format_summary ------------------------------------------------------------------
def test_a_member_line_says_stochastic_or_deterministic_as_evaluated():
    row = _member("m000-seed1", 500)
    assert format_member(row) == "m000-seed1: 10.00 +- 0.00 at step 500 over 1 episode (deterministic)"
    row["deterministic"] = False
    assert format_member(row) == "m000-seed1: 10.00 +- 0.00 at step 500 over 1 episode (stochastic)"


def test_the_few_members_footnote_comes_only_with_a_flagged_interval():
    one = {"env_id": "CartPole-v1", "max_steps": MAX_EVAL_STEPS, "members": [_member("m000-a", 64)],
           "settings": [_setting("a", [10.0])]}
    lines = format_summary(one).splitlines()
    # one member counted: no interval ("—"), so nothing flagged with † and no footnote explaining it
    assert len(lines) == 1 and "\u2020" not in lines[0] and "mean 10.00 \u2014," in lines[0]
    two = {**one, "settings": [_setting("a", [10.0]), _setting("b", [10.0, 20.0])]}
    lines = format_summary(two).splitlines()
    assert lines[-1] == f"\u2020 {FEW_MEMBERS_NOTE}" and sum(ln.startswith("\u2020") for ln in lines) == 1


def test_the_different_steps_note_spans_the_lowest_to_the_highest_step_whatever_the_order():
    members = [_member("m000-a", 100), _member("m001-a", 200), _member("m002-a", 100)]
    result = {"env_id": "CartPole-v1", "max_steps": MAX_EVAL_STEPS, "members": members,
              "settings": [_setting("a", [10.0, 10.0, 10.0])]}
    note = format_summary(result).splitlines()[-1]
    assert note.startswith("note: the members were evaluated at different steps (100-200; each member's line says its own)")
    same = {**result, "members": [_member(f"m00{i}-a", 100) for i in range(3)]}
    assert not any(ln.startswith("note:") for ln in format_summary(same).splitlines())


# --- population_report ----------------------------------------------------------------------------
def test_a_threshold_of_0_counts_the_members_that_reach_it():
    stats = member_statistics(["a", "b"], [0.0, -1.0], threshold=0.0)
    assert (stats["solved_count"], stats["solved"]) == (1, 0.5)
    assert (member_statistics(["a", "b"], [0.0, -1.0])["solved_count"], stats["n"]) == (None, 2)


def test_settings_that_differ_only_in_key_order_are_one_setting(tmp_path):
    run = _population(tmp_path, [
        {"dir": "m000-seed1-lr0.001-ent_coef0", "seed": 1, "settings": {"lr": 0.001, "ent_coef": 0}},
        {"dir": "m001-seed2-lr0.001-ent_coef0", "seed": 2, "settings": {"ent_coef": 0, "lr": 0.001}},
    ])
    settings = read_settings(run)
    assert len(settings) == 1
    assert settings[0].label == "lr=0.001, ent_coef=0"
    assert settings[0].members == [(1, run / "m000-seed1-lr0.001-ent_coef0"), (2, run / "m001-seed2-lr0.001-ent_coef0")]


def test_a_member_entry_without_a_seed_is_not_a_readable_population_file(tmp_path, capsys):
    run = _population(tmp_path, [{"dir": "m000-seed1", "seed": 1, "settings": {}}, {"dir": "m001-seed2", "settings": {}}])
    expected = f"{run / 'population.json'}: not a readable population file (KeyError)"
    with pytest.raises(PopulationError) as caught:
        read_settings(run)
    assert str(caught.value) == expected
    code, out, err = run_main(["eval", str(run), "--episodes", "1"], capsys)
    assert (code, out, err.strip().splitlines()) == (2, "", [f"proxima eval: error: {expected}"])
