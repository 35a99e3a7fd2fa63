"""Population review fixes (population_eval.py, population_report.py, population_run.py): ``eval RUN``
of a population still training takes a member's then-newest checkpoint when the one it chose was
rotated away; report.md says why a member could not be evaluated and the ``proxima eval`` that
evaluates it; ``train --seeds`` notes a --total-timesteps that is not a whole number of iterations;
``--sweep target_kl=none`` is spelled ``none`` in member folders and labels. (The plot band's
equality with the table's interval: test_population_views.py.)"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import yaml

from cli_helpers import TINY_POP, run_main
from proxima import checkpoint as ckpt
from proxima import population_eval, population_run
from proxima.population_eval import evaluate_population

TINY = TINY_POP


def _train(tmp_path: Path, capsys, *args: str, name: str = "R") -> Path:
    run = tmp_path / name
    code, _, err = run_main(["train", *args, *TINY, "--run-dir", str(run), "--quiet"], capsys)
    assert code == 0, err
    return run


def _rotate(member: Path) -> Path:
    """What a live trainer does to ``member`` between two reads: its newest checkpoint written under a
    later step and the one listed before removed (--keep-checkpoints); the new file's path."""
    import torch

    listed = ckpt.list_checkpoints(member)[-1]
    state = torch.load(listed, weights_only=True)
    # one iteration on, as the trainer would write it: eval checks a file's counters against its name
    batch = state["config"]["num_envs"] * state["config"]["num_steps"]
    state["global_step"] += batch
    state["iteration"] += 1
    newer = ckpt.checkpoint_path(member, state["global_step"])
    torch.save(state, newer)
    os.remove(listed)
    return newer


# --- 1. eval RUN of a population still training ---------------------------------------------------
def test_eval_of_a_population_takes_a_members_newest_checkpoint_when_the_chosen_one_was_rotated_away(tmp_path, capsys):
    run = _train(tmp_path, capsys, "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "64", "--checkpoint-every", "1",
                 "--eval-episodes", "0")
    second = run / "m001-seed2"
    chosen = ckpt.list_checkpoints(second)[-1]
    rotated = []

    def after(row):  # member 0 evaluated; member 1's file, checked before any evaluation, goes now
        if row["dir"] == "m000-seed1":
            rotated.append(_rotate(second))

    result = evaluate_population(run, episodes=1, on_member=after)
    assert rotated and not chosen.exists()
    rows = {r["dir"]: r for r in result["members"]}
    assert rows["m001-seed2"]["checkpoint"] == str(rotated[0])  # the file evaluated, not the one gone
    assert rows["m000-seed1"]["checkpoint"] == str(ckpt.list_checkpoints(run / "m000-seed1")[-1])
    assert [s["n"] for s in result["settings"]] == [2]


def test_eval_of_a_population_takes_the_newest_when_a_checkpoint_goes_between_its_listing_and_its_check(tmp_path, capsys,
                                                                                                        monkeypatch):
    run = _train(tmp_path, capsys, "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "64", "--checkpoint-every", "1",
                 "--eval-episodes", "0")
    listed, rotated = population_eval.member_checkpoint, []

    def member_checkpoint(d, best=False):
        path = listed(d, best)
        if d.name == "m001-seed2" and not rotated:
            rotated.append(_rotate(d))
        return path

    monkeypatch.setattr(population_eval, "member_checkpoint", member_checkpoint)
    code, out, err = run_main(["eval", str(run), "--episodes", "1", "--json"], capsys)
    assert code == 0, err
    rows = {r["dir"]: r for r in json.loads(out)["members"]}
    assert rows["m001-seed2"]["checkpoint"] == str(rotated[0])


def test_eval_of_a_population_never_swaps_a_damaged_checkpoint_for_an_older_one(tmp_path, capsys):
    run = _train(tmp_path, capsys, "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "64", "--checkpoint-every", "1",
                 "--eval-episodes", "0")
    damaged = ckpt.list_checkpoints(run / "m001-seed2")[-1]
    damaged.write_bytes(damaged.read_bytes()[:100])  # there, but cut short: never swapped for an older one
    code, out, err = run_main(["eval", str(run), "--episodes", "1", "--json"], capsys)
    assert code == 0, err  # the member is left out, named (test_rundir_review45), the others evaluated
    result = json.loads(out)
    assert [m["dir"] for m in result["members"]] == ["m000-seed1"]
    assert result["settings"][0]["left_out"][0][1].startswith(f"checkpoints/{damaged.name}: ")


# --- 2. report.md says why a member could not be evaluated ------------------------------------------
POLE = textwrap.dedent("""
    from gymnasium.envs.classic_control import CartPoleEnv


    class Pole(CartPoleEnv):
        pass
""")


def _report(run: Path, capsys) -> str:
    code, _, err = run_main(["report", str(run), "--episodes", "1"], capsys)
    assert code == 0, err
    return (run / "report.md").read_text()


def test_report_names_a_truncated_checkpoint_as_the_reason_a_member_was_not_evaluated(tmp_path, capsys):
    run = _train(tmp_path, capsys, "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "64", "--eval-episodes", "1")
    member = run / "m001-seed2"
    (member / "eval.json").unlink()
    damaged = ckpt.list_checkpoints(member)[-1]
    damaged.write_bytes(damaged.read_bytes()[:100])
    text = _report(run, capsys)
    [note] = [line for line in text.splitlines() if "without eval.json" in line]
    assert "no checkpoint" not in note
    assert f"the report could not evaluate it: m001-seed2: checkpoints/{damaged.name}: " in note
    assert "truncated" in note or "corrupted" in note, note


def test_report_names_the_eval_command_that_evaluates_a_member_of_a_module_env(tmp_path, capsys, monkeypatch):
    (tmp_path / "pole25.py").write_text(POLE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    run = _train(tmp_path, capsys, "pole25:Pole", "--seeds", "1-3", "--total-timesteps", "64", "--eval-episodes", "1")
    for name in ("m001-seed2", "m002-seed3"):
        (run / name / "eval.json").unlink()
    text = _report(run, capsys)
    [note] = [line for line in text.splitlines() if "without eval.json" in line]
    assert "no checkpoint" not in note
    command = f"proxima report {run} --env pole25:Pole --episodes 1"
    assert (f"the report could not evaluate them: m001-seed2, m002-seed3: its env pole25:Pole is a module:Class, which the "
            f"report does not import from a run's files (`{command}` evaluates them, if you trust that module).") in note, note
    code, out, err = run_main(command.split()[1:], capsys)  # the command named fills the table
    assert code == 0, err
    assert "without eval.json" not in (run / "report.md").read_text()


# --- 3. train --seeds notes a total that is not a whole number of iterations -------------------------
NOTE = ("proxima: note: --total-timesteps 1,000 is not a multiple of the batch (512 steps = num_envs x num_steps): "
        "training 512 steps (1 iteration)")


def test_train_seeds_dry_run_notes_a_total_that_is_not_a_whole_number_of_iterations(tmp_path, capsys):
    code, out, err = run_main(["train", "CartPole-v1", "--seeds", "1,2", "--num-envs", "4", "--num-steps", "128",
                               "--total-timesteps", "1000", "--dry-run"], capsys)
    assert code == 0, err
    assert NOTE in err.splitlines()
    assert json.loads(out)["config"]["total_timesteps"] == 1000  # the total typed, as a single run's dry run shows it


def test_train_seeds_notes_the_total_under_quiet_and_records_it_as_a_single_run_does(tmp_path, capsys):
    run = tmp_path / "R"
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1,2", *TINY, "--total-timesteps", "100", "--eval-episodes", "0",
                             "--run-dir", str(run), "--quiet"], capsys)
    assert code == 0, err
    assert ("proxima: note: --total-timesteps 100 is not a multiple of the batch (32 steps = num_envs x num_steps): "
            "training 96 steps (3 iterations)") in err.splitlines()
    assert json.loads((run / "population.json").read_text())["total_timesteps_per_member"] == 96
    assert yaml.safe_load((run / "m000-seed1" / "config.yaml").read_text())["total_timesteps"] == 100  # as typed


def test_train_seeds_gives_no_note_for_a_whole_number_of_iterations(tmp_path, capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1,2", "--num-envs", "4", "--num-steps", "128",
                             "--total-timesteps", "1024", "--dry-run"], capsys)
    assert code == 0, err
    assert "not a multiple" not in err


# --- 5. none spelled as the flags spell it -------------------------------------------------------------
def test_a_sweep_of_target_kl_none_is_spelled_none_in_member_folders_labels_and_evals_summary(tmp_path, capsys):
    run = _train(tmp_path, capsys, "CartPole-v1", "--seeds", "1", "--sweep", "target_kl=none,0.01", "--total-timesteps", "32",
                 "--eval-episodes", "1")
    assert sorted(p.name for p in run.glob("m0*")) == ["m000-seed1-target_klnone", "m001-seed1-target_kl0.01"]
    code, out, err = run_main(["eval", str(run), "--episodes", "1"], capsys)
    assert code == 0, err
    summary = [line for line in out.splitlines() if line.startswith("CartPole-v1 ")]
    assert summary[0].startswith("CartPole-v1 target_kl=none (1 member): ")
    assert summary[1].startswith("CartPole-v1 target_kl=0.01 (1 member): ")
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    assert "| target_kl=none | 1 |" in (run / "report.md").read_text()


def test_a_population_with_an_older_target_klNone_member_folder_still_resumes(tmp_path, capsys, monkeypatch):
    old = population_run.member_dir_name

    def as_before(index, cfg, swept):  # the name an earlier Proxima gave: Python's None
        return old(index, cfg, swept).replace("target_klnone", "target_klNone")

    monkeypatch.setattr(population_run, "member_dir_name", as_before)
    run = _train(tmp_path, capsys, "CartPole-v1", "--seeds", "1", "--sweep", "target_kl=none,0.01", "--total-timesteps", "32",
                 "--eval-episodes", "0")
    monkeypatch.setattr(population_run, "member_dir_name", old)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "64", "--quiet"], capsys)
    assert code == 0, err
    assert sorted(p.name for p in run.glob("m0*")) == ["m000-seed1-target_klNone", "m001-seed1-target_kl0.01"]
    assert [p.name for p in ckpt.list_checkpoints(run / "m000-seed1-target_klNone")][-1] == "step_000000000064.pt"
