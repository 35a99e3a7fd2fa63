"""Review 31's findings on population runs after training (population_eval.py, evaluate.py, plot.py):
``eval RUN`` of a population with no checkpoint at all says why as the report does; each member's
line says its step and the summary says when the steps differ; a setting's line counts the members
with episodes cut at --max-steps; a diverged member evaluated or plotted on its own says it
diverged; the no-sweep setting is named as the report names it; docs/populations.md documents
evaluate_population's signature."""

from __future__ import annotations

import inspect
import json
import shutil
from pathlib import Path

import pytest

from cli_helpers import error_line, run_main, snapshot
from proxima import checkpoint as ckpt
from proxima import cli
from proxima.population_eval import evaluate_population
from cli_helpers import TINY_POP as TINY

DOCS = Path(__file__).resolve().parents[2] / "docs" / "populations.md"
# 2 iterations of 32 steps, a checkpoint at each (the default --keep-checkpoints keeps both)
SHORT = ["--total-timesteps", "64", "--checkpoint-every", "1", "--eval-episodes", "0", "--quiet", *TINY]


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> Path:
    """A population of seeds only: m000-seed1, m001-seed2, checkpoints at steps 32 and 64."""
    run = tmp_path_factory.mktemp("seeds") / "R"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(run), *SHORT]) == 0
    return run


@pytest.fixture(scope="module")
def diverged(tmp_path_factory) -> Path:
    """m000-seed1-lr0.001, and m001-seed1-lr1e+38, which diverges at iteration 1 (lr 1e38 overflows Adam's first step)."""
    run = tmp_path_factory.mktemp("diverged") / "R"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1", "--sweep", "lr=1e-3,1e38", "--run-dir", str(run), *SHORT]) == 0
    return run


def _copy(run: Path, tmp_path: Path) -> Path:
    shutil.copytree(run, tmp_path / "R")
    return tmp_path / "R"


# --- 1. no member has a checkpoint --------------------------------------------------------------
def test_eval_of_a_population_with_no_checkpoint_at_all_says_why_as_the_report_does(seeds, tmp_path, capsys):
    run = _copy(seeds, tmp_path)
    for folder in [run, *sorted(run.glob("m0*"))]:  # as a SIGKILL before the first checkpoint leaves it
        shutil.rmtree(folder / "checkpoints")
        (folder / "checkpoints").mkdir()
    expected = (f"proxima eval: error: {run}: no member has a checkpoint to evaluate: the population stopped before its "
                "first checkpoint (one is written every --checkpoint-every N iterations and at the end), so there is "
                f"nothing to evaluate or resume; train the population {run} again from the start: its command "
                "(population.json) with --overwrite")
    for extra in ([], ["--best"], ["--json"]):
        code, out, err = run_main(["eval", str(run), "--episodes", "1", *extra], capsys)
        assert (code, out, err.strip().splitlines()) == (2, "", [expected]), extra
    code, _, err = run_main(["report", str(run)], capsys)  # the report's words for the same population
    assert code == 0 and expected.split(": no member has a checkpoint to evaluate: ")[1] in err


# --- 2. each member's step, and a note when they differ -----------------------------------------
def test_each_members_line_says_its_step_and_a_last_line_says_when_the_steps_differ(seeds, tmp_path, capsys):
    code, out, err = run_main(["eval", str(seeds), "--episodes", "1"], capsys)
    lines = out.strip().splitlines()
    assert code == 0, err
    assert lines[0].startswith("m000-seed1: ") and " at step 64 over 1 episode (deterministic)" in lines[0]
    assert " at step 64 over 1 episode" in lines[1] and not any(ln.startswith("note:") for ln in lines)

    run = _copy(seeds, tmp_path)
    ckpt.list_checkpoints(run / "m001-seed2")[-1].unlink()  # as a live population's member read before its newest
    code, out, err = run_main(["eval", str(run), "--episodes", "1"], capsys)
    lines = out.strip().splitlines()
    assert code == 0, err
    assert " at step 64 over " in lines[0] and lines[1].startswith("m001-seed2: ") and " at step 32 over " in lines[1]
    assert lines[-1] == ("note: the members were evaluated at different steps (32-64; each member's line says its own), "
                         "so the settings compare unequal amounts of training (a population still training writes new "
                         "checkpoints as they are read: evaluate it again once it has stopped)")
    result = evaluate_population(run, episodes=1)
    assert [m["global_step"] for m in result["members"]] == [64, 32]


# --- 3. the members with cut episodes, per setting ----------------------------------------------
def test_a_settings_line_and_json_count_the_members_with_episodes_cut_at_max_steps(seeds, capsys):
    code, out, err = run_main(["eval", str(seeds), "--episodes", "2", "--max-steps", "5"], capsys)
    assert code == 0, err
    setting = out.strip().splitlines()[2]
    assert setting.startswith("CartPole-v1 (2 members, seeds only): mean 5.00 ")
    assert setting.endswith("; all 2 members counted had episodes cut at 5 steps (--max-steps), with their return so far")
    code, out, err = run_main(["eval", str(seeds), "--episodes", "2", "--max-steps", "5", "--json"], capsys)
    result = json.loads(out)
    assert code == 0 and result["max_steps"] == 5 and [s["cut_members"] for s in result["settings"]] == [2]
    code, out, _ = run_main(["eval", str(seeds), "--episodes", "1", "--json"], capsys)  # none cut: 0, no words
    assert code == 0 and [s["cut_members"] for s in json.loads(out)["settings"]] == [0]


def test_a_member_left_out_is_not_counted_among_those_with_cut_episodes(diverged, capsys):
    code, out, err = run_main(["eval", str(diverged), "--episodes", "1", "--max-steps", "5", "--json"], capsys)
    assert code == 0, err
    settings = json.loads(out)["settings"]
    assert [(s["label"], s["n"], s["cut_members"]) for s in settings] == [("lr=0.001", 1, 1), ("lr=1e+38", 0, 0)]
    code, out, _ = run_main(["eval", str(diverged), "--episodes", "1", "--max-steps", "5"], capsys)
    lines = out.strip().splitlines()
    assert code == 0 and lines[2].startswith("CartPole-v1 lr=0.001 (1 member): ")
    assert lines[2].endswith("; its one member counted had episodes cut at 5 steps (--max-steps), with their return so far")
    assert lines[3].startswith("CartPole-v1 lr=1e+38 (0 of 1 member): ") and "cut" not in lines[3]


# --- 4. a diverged member on its own ------------------------------------------------------------
def test_eval_of_a_diverged_member_on_its_own_says_it_diverged(diverged, tmp_path, capsys):
    member = diverged / "m001-seed1-lr1e+38"
    code, out, err = run_main(["eval", str(member), "--episodes", "1"], capsys)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("CartPole-v1: ")
    assert lines[1] == ("note: this population member diverged at iteration 1 (non-finite loss, gradient or weights in its "
                        "update; try a lower --lr or --max-grad-norm): its checkpoints since hold its last finite weights, "
                        "frozen, so this score is no result of training (its population's statistics leave it out)")
    code, out, _ = run_main(["eval", str(member), "--episodes", "1", "--json"], capsys)
    assert code == 0 and json.loads(out)["diverged"] == {
        "iteration": 1, "text": "diverged at iteration 1 (non-finite loss, gradient or weights in its update; try a lower "
                                "--lr or --max-grad-norm)"}
    # a checkpoint file of it, and the member copied out of its population (its own diverged.json): the same
    code, out, _ = run_main(["eval", str(ckpt.list_checkpoints(member)[-1]), "--episodes", "1", "--json"], capsys)
    assert code == 0 and json.loads(out)["diverged"]["iteration"] == 1
    alone = tmp_path / "alone"
    shutil.copytree(member, alone)
    code, out, _ = run_main(["eval", str(alone), "--episodes", "1", "--json"], capsys)
    assert code == 0 and json.loads(out)["diverged"]["iteration"] == 1
    # a member that trained on: no note, no field
    code, out, _ = run_main(["eval", str(diverged / "m000-seed1-lr0.001"), "--episodes", "1"], capsys)
    assert code == 0 and len(out.strip().splitlines()) == 1
    code, out, _ = run_main(["eval", str(diverged / "m000-seed1-lr0.001"), "--episodes", "1", "--json"], capsys)
    assert code == 0 and "diverged" not in json.loads(out)


def test_plot_of_a_diverged_member_on_its_own_says_it_diverged(diverged, tmp_path, capsys):
    member = diverged / "m001-seed1-lr1e+38"
    before = snapshot(member)
    code, out, err = run_main(["plot", str(member)], capsys)
    line = error_line(code, err, "no values of charts/episodic_return_100: this population member diverged at iteration 1 "
                                 "(non-finite loss")
    assert "no episode finished yet" not in line and out == "" and snapshot(member) == before
    out_file = tmp_path / "sps.png"
    code, out, err = run_main(["plot", str(member), "--metric", "charts/SPS", "--out", str(out_file)], capsys)
    assert code == 0 and out_file.is_file(), err
    assert (f"proxima: note: {member}: this population member diverged at iteration 1 (non-finite loss, gradient or "
            "weights in its update; try a lower --lr or --max-grad-norm): frozen from then on") in err
    code, _, err = run_main(["plot", str(diverged / "m000-seed1-lr0.001"), "--metric", "charts/SPS", "--out",
                             str(tmp_path / "ok.png")], capsys)
    assert code == 0 and "diverged" not in err


# --- 5. one name for the no-sweep setting; the Python API in the docs ---------------------------
def test_eval_names_the_no_sweep_setting_as_the_report_does(seeds, tmp_path, capsys):
    run = _copy(seeds, tmp_path)
    code, out, err = run_main(["eval", str(run), "--episodes", "1"], capsys)
    assert code == 0, err
    assert out.strip().splitlines()[2].startswith("CartPole-v1 (2 members, seeds only): ")
    assert cli.main(["report", str(run)]) == 0
    assert "| (seeds only) | 2 |" in (run / "report.md").read_text()


def test_the_docs_give_evaluate_populations_signature_and_say_the_other_tools_are_the_command_lines():
    text = DOCS.read_text()
    call = text[text.index("result = evaluate_population("):]
    call = call[:call.index("```")]
    for name, param in inspect.signature(evaluate_population).parameters.items():
        value = param.default
        default = "" if value is inspect.Parameter.empty else f'="{value}"' if isinstance(value, str) else f"={value!r}"
        assert (f"{name}{default}" if name != "run_dir" else '"runs/sweep"') in call, name
    assert "its report and its plot are command-line only" in text


def test_a_checkpoint_from_before_a_member_diverged_gets_no_note(diverged, tmp_path, capsys):
    """Day review 31: the note came with every checkpoint of a member that diverged at some point,
    though one saved before the diverging iteration's step holds weights training made."""
    alone = tmp_path / "alone"
    shutil.copytree(diverged / "m001-seed1-lr1e+38", alone)  # its own diverged.json, as if it diverged at iteration 2
    record = json.loads((alone / "diverged.json").read_text())
    record.update(iteration=2, global_step=64)
    (alone / "diverged.json").write_text(json.dumps(record))
    first, last = ckpt.list_checkpoints(alone)
    code, out, _ = run_main(["eval", str(first), "--episodes", "1", "--json"], capsys)  # step 32: before it
    assert code == 0 and "diverged" not in json.loads(out)
    code, out, _ = run_main(["eval", str(last), "--episodes", "1", "--json"], capsys)  # step 64: frozen from then on
    assert code == 0 and json.loads(out)["diverged"]["iteration"] == 2
