"""Mutation-testing follow-up of 90f6816 (population_report: broken member eval.json, pools of unequal training,
a pool compared with its own part, a pool's machines, --episodes N's command, the recomputed-schedule note) and
f5955fc (population_run: an extending resume stopped before its first checkpoint, a plain resume's note on
population.json's other target, the progress line's mean rolling return): each test pins behaviour a mutant of
that code changed while every existing test still passed."""

import json
import math
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import proxima
from tests.cli_helpers import error_line, run_main
from tests.unit import test_popreport48 as base

#: A and B (4 seeds x lr 2.5e-3, 1e-3, 512 steps), E (A extended to 1,024 under --anneal-lr), Y (B whose extension
#: stopped at once: population.json says 1,024, members 512): test_popreport48's module fixture
pops = base.pops


def _members(run: Path, lr: str) -> list:
    return sorted(run.glob(f"m0*-lr{lr}"))


def _report(run_arg: str, tmp_path, capsys, *flags) -> str:
    code, _, err = run_main(["report", run_arg, "--out", str(tmp_path / "r.md"), *flags], capsys)
    assert code == 0, err
    return (tmp_path / "r.md").read_text()


# ---------------------------------------------------------------------------------------------- eval.json set aside
def test_broken_eval_json_notes_say_one_file_or_several_as_they_are(pops, tmp_path, capsys):
    run = base._copy(pops, "A", tmp_path)
    two = _members(run, "0.0025")[1:3]
    one = _members(run, "0.001")[0]
    recorded = {m.name: base._eval_mean(m) for m in [*two, one]}
    for m in [*two, one]:
        (m / "eval.json").write_text("{not json")
    text = _report(str(run), tmp_path, capsys, "--json", str(tmp_path / "r.json"))
    notes = {ln.split(":", 1)[0]: ln for ln in text.splitlines() if "set aside" in ln}
    plural, single = notes["- lr=0.0025"], notes["- lr=0.001"]
    assert all(f"{m.name}/eval.json" in plural for m in two) and one.name not in plural, plural
    assert plural.endswith(" - those eval.json were set aside, the members evaluated from their latest checkpoint "
                           "instead (as without one); delete or restore the file to end this note."), plural
    assert single.endswith(" - that eval.json was set aside, the member evaluated from its latest checkpoint instead "
                           "(as without one); delete or restore the file to end this note."), single
    rows = json.loads((tmp_path / "r.json").read_text())["settings"]
    got = {m["dir"]: v for r in rows for m, v in zip(r["member_dirs"], r["member_returns"])}
    assert {name: got[name] for name in recorded} == recorded  # evaluated again: the same episodes, the same numbers


def test_an_eval_json_without_mean_return_is_set_aside_with_its_reason(pops, tmp_path, capsys):
    run = base._copy(pops, "A", tmp_path)
    member = _members(run, "0.0025")[0]
    doc = json.loads((member / "eval.json").read_text())
    del doc["mean_return"]
    (member / "eval.json").write_text(json.dumps(doc))
    text = _report(str(run), tmp_path, capsys, "--episodes", "0")
    assert "| lr=0.0025 | 3 of 4 |" in text
    assert f"1 member whose eval.json could not be read ({member.name}: " in text and "has no mean_return" in text


def test_an_eval_json_of_an_older_step_evaluated_again_is_not_called_set_aside(pops, tmp_path, capsys):
    run = base._copy(pops, "A", tmp_path)
    member = _members(run, "0.0025")[0]
    doc = json.loads((member / "eval.json").read_text())
    doc["global_step"] = 256
    (member / "eval.json").write_text(json.dumps(doc))
    text = _report(str(run), tmp_path, capsys)
    assert "delete or restore the file to end this note" not in text and "| lr=0.0025 | 4 |" in text


# ------------------------------------------------------------------------------------- --episodes N's command
def test_every_member_over_names_each_pooled_population_and_a_device(pops):
    from proxima.population_report import every_member_over, read_pool

    a, b = pops["A"], pops["B"]
    pool = read_pool([a, b], ["A", "B"])
    assert every_member_over(pool, 3).startswith(f"`proxima eval {a} --episodes 3` and `proxima eval {b} --episodes 3` "
                                                 "evaluate every member over 3 episodes and ")
    assert every_member_over(a, 5, "cuda:1").startswith(f"`proxima eval {a} --episodes 5 --device cuda:1` evaluates "
                                                        "every member over 5 episodes")


# ------------------------------------------------------------------------------- pools of unequal training
def test_a_pool_names_only_its_stopped_population_with_resume_it_to_its_end(pops, tmp_path, capsys):
    e, y = pops["E"], pops["Y"]
    text = _report(f"{e}+{y}", tmp_path, capsys)
    note = [ln for ln in text.splitlines() if ln.startswith("- note: the members were evaluated at different steps")]
    assert len(note) == 1, note
    assert (f"({y} stopped at 512 of 1,024 steps; `proxima resume {y}` continues it: resume it to its end, then report "
            "again).") in note[0], note
    assert f"{e} " not in note[0], note  # E is finished: not a population to resume


def test_a_population_still_training_is_not_one_to_resume(pops, monkeypatch):
    from proxima import report
    from proxima.population_report import _stopped_short

    y = pops["Y"]
    assert _stopped_short(y) == [f"{y} stopped at 512 of 1,024 steps; `proxima resume {y}` continues it"]
    monkeypatch.setattr(report, "_in_progress", lambda run_dir: "locked by pid 1")  # a process trains it now
    assert _stopped_short(y) == []


def test_only_a_pool_withholds_the_permutation_test_across_unequal_steps(pops):
    from proxima.population_report import read_pool, settings_comparison, summarize_settings

    a, b = pops["A"], pops["B"]
    rows = summarize_settings(a, episodes=0, quiet=True)
    first = next(iter(rows[0]["measured"]))
    st, count = rows[0]["measured"][first]
    rows[0]["measured"][first] = (st // 2, count)  # one member read at another step (a population still training)
    alone = settings_comparison(rows, a)
    assert all("no_claim" not in c for *_, c in alone["compared"])
    pooled = settings_comparison(rows, read_pool([a, b], ["A", "B"]))
    assert [c["no_claim"] for *_, c in pooled["compared"]] == ["members evaluated at different steps (256-512): unequal "
                                                               "training, no claim"]


# ------------------------------------------------------------------------ a pool compared with its own part
def test_a_pools_own_population_spelled_another_way_is_refused(pops, capsys):
    a, b, root = pops["A"], pops["B"], pops["root"]
    out = root / "spelled.md"
    other = f"{a}/../B"
    code, _, err = run_main(["report", f"{a}+{b}", other, "--out", str(out)], capsys)
    error_line(code, err, f"{other}: in both {a}+{b} and {other}", "assume independent")
    assert not out.exists()


def test_the_pool_named_second_is_the_one_reported_apart(pops, capsys):
    a, b, root = pops["A"], pops["B"], pops["root"]
    code, _, err = run_main(["report", str(b), f"{a}+{b}", "--out", str(root / "second.md")], capsys)
    error_line(code, err, f"{b}: in both {b} and {a}+{b}", f"report {a}+{b} alone",
               f"`proxima report {a} {b} --out FILE.md`")


# ------------------------------------------------------------------------------------------- a pool's machines
def test_a_pools_machine_note_follows_the_versions_table_after_a_blank_line(pops, tmp_path, capsys):
    a, b = pops["A"], base._copy(pops, "B", tmp_path)
    for meta in b.glob("m0*/meta.json"):
        doc = json.loads(meta.read_text())
        doc["host"] = "box2"
        meta.write_text(json.dumps(doc))
    lines = _report(f"{a}+{b}", tmp_path, capsys).splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("- note: the pooled populations trained on different "))
    assert lines[at - 1] == "" and lines[at - 2].startswith("|"), lines[at - 3:at + 1]


# ------------------------------------------------------------------------------------ the recomputed schedule
def test_no_schedule_note_for_members_that_do_not_anneal(pops, tmp_path, capsys):
    run = base._copy(pops, "E", tmp_path)
    for cfg in run.glob("m0*/config.yaml"):
        text = cfg.read_text()
        assert "anneal_lr: true" in text
        cfg.write_text(text.replace("anneal_lr: true", "anneal_lr: false"))
    assert "schedule was recomputed" not in _report(str(run), tmp_path, capsys)


# -------------------------------------------------------------------------- population_run: resume's target
TINY = ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1", "--eval-episodes", "1",
        "--threads", "1", "--backend", "native"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_an_extending_resume_of_a_finished_population_has_no_differing_target_note(tmp_path, capsys):
    run = tmp_path / "P"
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "64", *TINY, "--quiet",
                             "--run-dir", str(run)], capsys)
    assert code == 0, err
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "128", "--quiet"], capsys)
    assert code == 0, err
    assert "differs from the checkpoint's" not in err, err
    assert json.loads((run / "population.json").read_text())["total_timesteps_per_member"] == 128


def test_an_extended_stop_of_a_module_env_population_names_the_env_and_the_total(tmp_path, monkeypatch):
    from proxima.population_run import _extended_line
    from proxima.signals import hold_python_caller

    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    pop = tmp_path / "pop"
    (pop / "checkpoints").mkdir(parents=True)
    (pop / "population.json").write_text('{"kind": "ppo-population", "env_id": "my_envs:Walker", "members": 2}')
    step = pop / "checkpoints" / "step_000000000064.pt"
    release = hold_python_caller(True)
    try:
        line = _extended_line(step, 128)
    finally:
        release()
    assert line == (f"checkpoint: {step}; continue with: proxima.train_population(proxima.PPOConfig(env_id="
                    f"'my_envs:Walker', total_timesteps=128), resume='{pop}') (in a shell: proxima resume --env "
                    f"my_envs:Walker {pop} --total-timesteps 128)")


# ------------------------------------------------------------------------------------ the progress line
def _line(rolling: list, diverged: list, capsys) -> str:
    from proxima.population_run import _progress

    configs = [proxima.PPOConfig(env_id="CartPole-v1", lr=lr, seed=i) for i, lr in enumerate([1e-3, 1e-3, 1e-3, 3e-4])]
    pop = SimpleNamespace(members=4, diverged_at=diverged, configs=configs)
    capsys.readouterr()
    _progress(rolling, pop, 640, 1.5, ["lr"], width=1000)
    return capsys.readouterr().err.strip()


def test_the_progress_line_counts_only_members_with_an_episode_and_spans_their_windows(capsys):
    line = _line([(10.0, 3), (math.nan, 0), (20.0, 12), (7.0, 5)], [None, None, None, None], capsys)
    assert line == ("population 4 members | step 640/member | mean rolling return lr=0.001: 15.0 (2 of 3 members, 3-12 ep "
                    "each); lr=0.0003: 7.0 (1 of 1 member, 5 ep) | 1.5s")


def test_the_progress_line_says_diverged_members(capsys):
    line = _line([(10.0, 4), (30.0, 4), (99.0, 9), (7.5, 2)], [None, None, 128, None], capsys)
    assert line == ("population 4 members | step 640/member | mean rolling return lr=0.001: 20.0 (2 of 2 members, 4 ep "
                    "each, 1 diverged); lr=0.0003: 7.5 (1 of 1 member, 2 ep) | 1.5s")


# a bug found by this file's mutation round (f5955fc): IndexError (counts[0] of no counts) killed the run
def test_the_progress_line_gives_a_dash_for_a_setting_with_no_episode_yet(capsys):
    line = _line([(10.0, 4), (30.0, 4), (math.nan, 0), (math.nan, 0)], [None, None, None, None], capsys)
    assert line == ("population 4 members | step 640/member | mean rolling return lr=0.001: 20.0 (2 of 3 members, 4 ep "
                    "each); lr=0.0003: \u2014 (0 of 1 member) | 1.5s")


def test_a_shell_stop_of_an_extending_resume_carries_the_total(tmp_path):
    from proxima.population_run import _extended_line
    from proxima.signals import hold_python_caller

    pop = tmp_path / "pop"
    (pop / "checkpoints").mkdir(parents=True)
    (pop / "population.json").write_text('{"kind": "ppo-population", "env_id": "CartPole-v1", "members": 2}')
    step = pop / "checkpoints" / "step_000000000064.pt"
    release = hold_python_caller(False)
    try:
        line = _extended_line(step, 4096)
    finally:
        release()
    assert line == f"checkpoint: {step}; continue with: proxima resume {shlex.quote(str(pop))} --total-timesteps 4096"
