"""`proxima report` of populations as a 10-seed comparison needs it: per-member returns in --json that line up with
their members, a broken member eval.json set aside (never the whole report), no verdict across unequal training
(naming a stopped population's resume), a pool never compared with one of its own populations, a pool's machines
said as they are, the command that evaluates every member over --episodes N, and a note where an extension
recomputed the learning rate schedule (config.yaml alone no longer reproduces the table)."""

import json
import shutil

import pytest

from tests.cli_helpers import error_line, run_main

#: tiny CartPole populations: 4 envs x 64 steps per member, 512 steps = two iterations
TINY = ["--num-envs", "4", "--num-steps", "64", "--backend", "native", "--threads", "1", "--no-progress", "--quiet"]
LRS = ["--sweep", "lr=2.5e-3,1e-3"]


def _train(argv: list) -> None:
    from proxima import cli

    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = e.code
    assert code == 0, argv


@pytest.fixture(scope="module")
def pops(tmp_path_factory):
    """{name: dir}: A (seeds 0-3) and B (seeds 4-7), both 512 steps of lr 2.5e-3 and 1e-3; E, A resumed with
    --total-timesteps 1024 (an extension, --anneal-lr on); Y, B whose resume to 1,024 stopped at once (its
    population.json and config.yaml name 1,024, its members and eval.json stayed at 512)."""
    root = tmp_path_factory.mktemp("pops")
    a, b = root / "A", root / "B"
    _train(["train", "CartPole-v1", "--seeds", "0-3", *LRS, "--total-timesteps", "512", *TINY, "--run-dir", str(a)])
    _train(["train", "CartPole-v1", "--seeds", "4-7", *LRS, "--total-timesteps", "512", *TINY, "--run-dir", str(b)])
    e, y = root / "E", root / "Y"
    shutil.copytree(a, e)
    _train(["resume", str(e), "--total-timesteps", "1024", "--quiet"])
    shutil.copytree(b, y)
    doc = json.loads((y / "population.json").read_text())
    doc["total_timesteps_per_member"] = 1024
    (y / "population.json").write_text(json.dumps(doc))
    for cfg in y.glob("m0*/config.yaml"):
        cfg.write_text(cfg.read_text().replace("total_timesteps: 512", "total_timesteps: 1024"))
    return {"root": root, "A": a, "B": b, "E": e, "Y": y}


def _copy(pops, name: str, tmp_path):
    dst = tmp_path / name
    shutil.copytree(pops[name], dst)
    return dst


def _eval_mean(member) -> float:
    return json.loads((member / "eval.json").read_text())["mean_return"]


def test_json_gives_each_member_its_own_return_null_for_one_left_out(pops, tmp_path, capsys):
    run = _copy(pops, "A", tmp_path)
    (run / "m001-seed1-lr0.0025" / "eval.json").unlink()
    code, _, err = run_main(["report", str(run), "--episodes", "0", "--json", str(tmp_path / "r.json")], capsys)
    assert code == 0, err
    row = json.loads((tmp_path / "r.json").read_text())["settings"][0]
    assert row["n"] == 3 and len(row["returns"]) == 3  # the values used, as before
    got = {m["dir"]: v for m, v in zip(row["member_dirs"], row["member_returns"])}
    assert got == {"m000-seed0-lr0.0025": _eval_mean(run / "m000-seed0-lr0.0025"), "m001-seed1-lr0.0025": None,
                   "m002-seed2-lr0.0025": _eval_mean(run / "m002-seed2-lr0.0025"),
                   "m003-seed3-lr0.0025": _eval_mean(run / "m003-seed3-lr0.0025")}


def test_a_broken_member_eval_json_is_set_aside_and_the_member_evaluated_again(pops, tmp_path, capsys):
    run = _copy(pops, "A", tmp_path)
    member = run / "m002-seed2-lr0.0025"
    recorded = _eval_mean(member)
    (member / "eval.json").write_text('{"mean_return": \n')
    code, _, err = run_main(["report", str(run), "--out", str(tmp_path / "r.md"), "--json", str(tmp_path / "r.json")],
                            capsys)
    assert code == 0, err
    row = json.loads((tmp_path / "r.json").read_text())["settings"][0]
    # the fresh evaluation plays the eval.json's own episodes (same seeds, same count): the same number
    assert row["n"] == 4 and dict(zip([m["dir"] for m in row["member_dirs"]], row["member_returns"]))["m002-seed2-lr0.0025"] == recorded
    note = [ln for ln in (tmp_path / "r.md").read_text().splitlines() if "m002-seed2-lr0.0025/eval.json" in ln]
    assert len(note) == 1 and "not valid JSON" in note[0] and "set aside" in note[0], note


def test_a_broken_eval_json_without_evaluation_leaves_only_that_member_out(pops, tmp_path, capsys):
    run = _copy(pops, "A", tmp_path)
    (run / "m002-seed2-lr0.0025" / "eval.json").write_text("[1, 2")
    code, _, err = run_main(["report", str(run), "--episodes", "0", "--out", str(tmp_path / "r.md")], capsys)
    assert code == 0, err
    text = (tmp_path / "r.md").read_text()
    assert "| lr=0.0025 | 3 of 4 |" in text
    assert "1 member whose eval.json could not be read (m002-seed2-lr0.0025: " in text


def test_a_pool_with_a_stopped_population_names_its_resume_and_makes_no_verdict(pops, capsys):
    e, y, root = pops["E"], pops["Y"], pops["root"]
    code, _, err = run_main(["report", f"{e}+{y}", "--out", str(root / "ey.md"), "--json", str(root / "ey.json")], capsys)
    assert code == 0, err
    text = (root / "ey.md").read_text()
    assert f"{y} stopped at 512 of 1,024 steps; `proxima resume {y}` continues it" in text
    assert "a population still training writes new checkpoints" not in text
    assert "No setting is called better than another across unequal training: the comparison below makes no " in text
    against = json.loads((root / "ey.json").read_text())["comparison"]["against"][0]
    assert against["permutation_p"] is None and against["better"] is None
    assert against["no_claim"] == "members evaluated at different steps (512-1,024): unequal training, no claim"
    verdict = json.loads((root / "ey.json").read_text())["comparison"]["verdict"]
    assert "no claim against lr=" in verdict and "better than" not in verdict.split("(both one-sided")[0]


def test_a_pool_and_one_of_its_own_populations_are_refused(pops, capsys):
    a, b, root = pops["A"], pops["B"], pops["root"]
    out = root / "ab_b.md"
    code, _, err = run_main(["report", f"{a}+{b}", str(b), "--out", str(out)], capsys)
    error_line(code, err, f"{b}: in both {a}+{b} and {b}", "assume independent", f"`proxima report {a} {b} --out FILE.md`")
    assert not out.exists()


def test_a_pools_versions_heading_says_each_population_trained_apart_and_names_another_machine(pops, tmp_path, capsys):
    a, b = pops["A"], _copy(pops, "B", tmp_path)
    for meta in b.glob("m0*/meta.json"):
        doc = json.loads(meta.read_text())
        doc["host"] = "box2"
        meta.write_text(json.dumps(doc))
    code, _, err = run_main(["report", f"{a}+{b}", "--out", str(tmp_path / "p.md")], capsys)
    assert code == 0, err
    text = (tmp_path / "p.md").read_text()
    assert "(the members train in one process, on one machine)" not in text
    assert "each pooled population trained in its own process" in text
    note = [ln for ln in text.splitlines() if ln.startswith("- note: the pooled populations trained on different machines: ")]
    assert len(note) == 1 and "host: " in note[0] and "box2 in B" in note[0], note


def test_episodes_n_kept_eval_json_note_names_the_command_that_evaluates_every_member_over_n(pops, capsys):
    a, root = pops["A"], pops["root"]
    code, _, err = run_main(["report", str(a), "--episodes", "3", "--out", str(root / "e3.md")], capsys)
    assert code == 0, err
    assert f"`proxima eval {a} --episodes 3` evaluates every member over 3 episodes" in err
    code, out, err = run_main(["eval", str(a), "--episodes", "3"], capsys)  # and that command does it
    assert code == 0, err
    assert out.count("over 3 episodes (deterministic)") == 8


def test_an_extension_under_anneal_lr_is_noted_in_config_and_versions(pops, capsys):
    e, a, root = pops["E"], pops["A"], pops["root"]
    code, _, err = run_main(["report", str(e), "--out", str(root / "ext.md")], capsys)
    assert code == 0, err
    config = (root / "ext.md").read_text().split("## Config and versions")[1]
    note = [ln for ln in config.splitlines() if "learning rate schedule was recomputed" in ln]
    assert len(note) == 1 and "after step 512 for every member" in note[0], config
    # iteration 2 of the first plan (2 iterations) trained at half the lr, a 4-iteration plan's at three quarters
    assert "logged lr 0.00125 there, where a run planned for 1,024 steps trains at 0.00187" in note[0], note
    # the resume's own command line as meta.json records it (here pytest's argv: the resume ran in this process)
    assert "; the resume: `" in note[0] and "does not reproduce this table" in note[0]
    code, _, err = run_main(["report", str(a), "--out", str(root / "a.md")], capsys)
    assert code == 0, err
    assert "schedule was recomputed" not in (root / "a.md").read_text()
