"""Review 36 (a hyperparameter-study user's): a setting that lost members to divergence is never
silently the "best" (its statistics are of its survivors); the Comparison says whether the highest IQM
is told apart from the others at these seeds (P(X > Y)'s interval against 0.5); the population report
records the shared config, sweep, seeds, command, versions and commit; an end-of-run evaluation
error of a population names the member and says training finished and its checkpoints are kept; a
refused swept value names --sweep; the docs list --init-from among the refusals and say how to export
a member."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from proxima import checkpoint as ckpt
from proxima import population_report as pr
from proxima.envs import classic
from tests.cli_helpers import TINY_POP, error_line, module_written_in, run_main
from tests.integration import test_review34_compare as cmp
from tests.integration.test_guards import GlitchEnv

DOCS = Path(__file__).resolve().parents[2] / "docs" / "populations.md"


def _mark_diverged(run: Path, names: list) -> None:
    """Record members as training records a divergence: population.json's entry, no eval.json."""
    doc = json.loads((run / "population.json").read_text())
    for e in doc["member_dirs"]:
        if e["dir"] in names:
            e["diverged"] = {"iteration": 3, "global_step": 1536, "reason": "non-finite loss"}
            (run / e["dir"] / "eval.json").unlink()
    (run / "population.json").write_text(json.dumps(doc))


def _report(run: Path, capsys) -> str:
    code, _, err = run_main(["report", str(run), "--episodes", "0", "--threshold", "150"], capsys)
    assert code == 0, err
    return (run / "report.md").read_text()


def _verdict(text: str) -> str:
    return next(line for line in text.split("## Comparison", 1)[1].splitlines() if line.startswith("Y = "))


# ------------------------------------------------------------------ 1. diverged members and "best"
def test_a_setting_that_lost_its_weakest_members_to_divergence_is_not_ranked_best(tmp_path, capsys):
    """lr=0.2 loses its 4 weakest of 10 seeds: over its 6 survivors its IQM (335) beats the stable
    lr=0.1 (145), which is Y; the row says 4 diverged and a note says lr=0.2 was not ranked."""
    stable = [100.0 + 10 * k for k in range(10)]
    unstable = [10.0, 20.0, 30.0, 40.0, 310.0, 320.0, 330.0, 340.0, 350.0, 360.0]
    run = cmp._population(tmp_path / "S", {0.1: stable, 0.2: unstable})
    _mark_diverged(run, [f"m{10 + k:03d}-seed{11 + k}-lr0.2" for k in range(4)])
    text = _report(run, capsys)
    rows = {c[0]: c[1:] for line in text.split("## Comparison")[0].splitlines() if line.startswith("| lr=")
            for c in [[x.strip() for x in line.strip("|").split("|")]]}
    assert rows["lr=0.2"][0] == "6 of 10 (4 diverged)" and rows["lr=0.2"][3] == "335.0"  # its IQM, over survivors
    assert rows["lr=0.2"][5] == "60% (6 of 10)"  # the same row counts the diverged as failures
    assert rows["lr=0.1"][0] == "10" and rows["lr=0.1"][3] == "145.0"
    assert "Y = lr=0.1 (the highest IQM of the settings with no member left out)" in text
    assert ("- lr=0.2 had the highest IQM, 335.0, over 6 of its 10 members (left out: 4 diverged): not ranked"
            in text)
    assert _verdict(text).startswith("Y = lr=0.1: the highest IQM of the settings with no member left out; ")
    # when every setting lost members, Y is the highest IQM over survivors, and the report says that is all it is
    _mark_diverged(run, ["m000-seed1-lr0.1"])
    text = _report(run, capsys)
    assert ("Y = lr=0.2 (the highest IQM over its members left in; every setting lost members (see the notes))"
            in text)
    assert "not ranked" not in text


# ------------------------------------------------------------------ 2. told apart, or not, at these seeds
def test_the_comparison_says_whether_the_highest_iqm_is_told_apart_at_these_seeds(tmp_path, capsys):
    apart = cmp._population(tmp_path / "A", {0.1: [100.0, 102.0, 104.0, 106.0, 108.0], 0.2: [1.0, 2.0, 3.0, 4.0, 5.0]})
    text = _report(apart, capsys)
    p = pr.permutation_p([1.0, 2.0, 3.0, 4.0, 5.0], [100.0, 102.0, 104.0, 106.0, 108.0])
    assert _verdict(text) == ("Y = lr=0.1: the highest IQM, and better than every other setting compared at "
                              f"these seeds (lr=0.2: p = {p:.2g}, each at most 0.05/2). ({pr.CLAIM_METHOD}.)")
    x, y = [10.0, 20.0, 30.0, 41.0, 50.0], [12.0, 22.0, 28.0, 40.0, 49.0]  # IQMs 30.3 and 30.0: a toss-up
    close = cmp._population(tmp_path / "C", {0.1: x, 0.2: y})
    text = _report(close, capsys)
    lo, hi = pr.poi_ci(y, x)
    assert lo < 0.5 < hi
    p = min(pr.permutation_p(y, x), pr.permutation_p(x, y))  # neither direction reaches the level: the smaller p
    assert _verdict(text) == (f"Y = lr=0.1: the highest IQM; not distinguishable from lr=0.2 (P(X > Y) "
                              f"{pr.probability_of_improvement(y, x):.2f}, p = {p:.2g}, above 0.05/2) at these seeds. "
                              f"Run more seeds to tell them apart. ({pr.CLAIM_METHOD}.)")
    # two populations, each setting against the first one's highest IQM: the same verdict
    out = pr.build_populations_report([close, apart], out=tmp_path / "cmp.md", episodes=0).read_text()
    line = next(ln for ln in out.splitlines() if ln.startswith("Y = "))
    # A's lr=0.2 (1-5) is below every member of Y; A's lr=0.1 (100-108) above every one: each told apart, its own way
    p = min(pr.permutation_p(y, x), pr.permutation_p(x, y))
    assert line.startswith("Y = C: lr=0.1: the first population's highest IQM; A: lr=0.1 is better than Y (P(X > Y) 1.00, "
                           "p = 0.004, at most 0.05/12); Y is better than A: lr=0.2 (p = 0.004); ")
    # 4 rows: each test at 0.05/12, C: lr=0.2's toss-up is above it
    assert (f"not distinguishable from C: lr=0.2 (P(X > Y) {pr.probability_of_improvement(y, x):.2f}, p = {p:.2g}, "
            "above 0.05/12)") in line
    assert line.endswith(f"Run more seeds to tell them apart. ({pr.CLAIM_METHOD}.)")


# ------------------------------------------------------------------ 3. config, sweep, command, versions
def _meta(torch_version: str, commit: str) -> dict:
    return {"kind": "ppo", "versions": {"proxima": "0.1.0", "python": "3.11.7", "torch": torch_version},
            "device": "cpu", "git_commit": commit, "git_dirty": False, "host": "box",
            "command": ["proxima", "train"], "machine": {"platform": "Linux-x86_64", "cpu_count": 2}}


def test_the_population_report_records_config_sweep_seeds_command_and_versions(tmp_path, capsys):
    run = cmp._population(tmp_path / "S", {0.1: [1.0, 2.0], 0.2: [3.0, 4.0]})
    doc = json.loads((run / "population.json").read_text())
    doc.update(sweep={"lr": [0.1, 0.2]}, seeds=[1, 2],
               command=["proxima", "train", "Fake-v0", "--seeds", "1-2", "--sweep", "lr=0.1,0.2", "--run-dir", "my runs/S"])
    (run / "population.json").write_text(json.dumps(doc))
    names = [e["dir"] for e in doc["member_dirs"]]
    for i, name in enumerate(names):
        (run / name / "meta.json").write_text(json.dumps(_meta("2.13.0" if i != 3 else "2.12.1", "abc123")))
    with open(run / names[0] / "config.yaml", "a") as f:  # a member edited by hand: not swept, yet not shared
        f.write("clip_obs: 5.0\n")
    text = _report(run, capsys)
    section = text.split("## Config and versions", 1)[1]
    # a code span padded as report._code writes every one (Markdown drops one space each side)
    assert ("- command: `proxima train Fake-v0 --seeds 1-2 --sweep lr=0.1,0.2 --run-dir 'my runs/S'` (population.json)"
            in section)
    assert "- seeds: 1,2 (2 seeds)" in section and "- sweep: lr = 0.1, 0.2" in section
    fields = {c[0]: c[1] for line in section.split("### Versions", 1)[0].splitlines() if line.startswith("| ")
              for c in [[x.strip() for x in line.strip("|").split("|")]]}
    # shared: equal in every member; the seed and the swept lr are per member, not "shared"
    assert fields == {"field": "value", "env_id": "Fake-v0", "eval_episodes": "20"}
    assert "- note: these fields are not swept yet differ between members: clip_obs (each member's" in section
    assert "| torch | 2.13.0 |" in section and "| git commit | abc123 |" in section and "| host | box |" in section
    assert f"- note: 1 member recorded other versions or another git commit than {names[0]}: {names[3]}" in section


# ------------------------------------------------------------------ 4. the end-of-run evaluation's error
#: a module env whose reward is NaN at step 3 of the episode of member seed2's evaluation (eval seed
#: 1,000,002, --eval-episodes 1: its one episode's env seed is episode_seeds'), finite in training
EVAL_NAN_ENV = '''
import gymnasium as gym
import numpy as np
from gymnasium import spaces

from proxima.evaluate import episode_seeds

BAD_SEED = episode_seeds(1_000_002, 1)[0]


class EvalNaN(gym.Env):
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)
    bad = False

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.bad = seed == BAD_SEED
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        reward = float("nan") if self.bad and self.t == 3 else 1.0
        return np.zeros(2, np.float32), reward, False, self.t >= 8, {}
'''


@pytest.fixture
def eval_nan_env(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "evalnan36", EVAL_NAN_ENV)


def test_a_nan_in_a_members_end_of_run_evaluation_names_it_and_says_training_is_kept(tmp_path, capsys, eval_nan_env):
    """m001-seed2's evaluation meets a NaN: m002-seed3 after it is still evaluated, population.json
    still gets its wall time and records the failure, and the report says why m001 has no eval.json
    rather than advising an evaluation that meets the same NaN."""
    run = tmp_path / "pop"
    code, _, err = run_main(["train", "evalnan36:EvalNaN", "--seeds", "1-3", *TINY_POP, "--total-timesteps", "32",
                             "--eval-episodes", "1", "--quiet", "--run-dir", str(run)], capsys)
    last = ckpt.list_checkpoints(run)[-1]
    line = error_line(code, err, f"{run / 'm001-seed2'}: non-finite reward nan from env 0 at evaluation step 3")
    assert line.endswith(f"; training finished, its checkpoints are kept ({last}); left unevaluated (no eval.json): "
                         "m001-seed2")
    assert (run / "m000-seed1" / "eval.json").is_file() and not (run / "m001-seed2" / "eval.json").exists()
    assert (run / "m002-seed3" / "eval.json").is_file()  # the member after the failed one is still evaluated
    doc = json.loads((run / "population.json").read_text())
    assert isinstance(doc["wall_seconds"], float)  # the run's final record, written though the evaluation failed
    entries = {e["dir"]: e for e in doc["member_dirs"]}
    assert "non-finite reward nan" in entries["m001-seed2"]["eval_error"]
    assert "eval_error" not in entries["m002-seed3"] and entries["m002-seed3"]["eval_mean_return"] == 8.0
    text = _report(run, capsys)
    assert "--episodes N" not in text
    assert ("left out rather than mixed with training returns: the end-of-run evaluation failed (population.json) for "
            "m001-seed2: non-finite reward nan") in text


def test_an_empty_member_config_yaml_is_said_to_be_empty_not_missing(tmp_path, capsys):
    run = cmp._population(tmp_path / "S", {0.1: [1.0, 2.0], 0.2: [3.0, 4.0]})
    names = [e["dir"] for e in json.loads((run / "population.json").read_text())["member_dirs"]]
    (run / names[0] / "config.yaml").write_text("")
    (run / names[1] / "config.yaml").unlink()
    section = _report(run, capsys).split("## Config and versions", 1)[1]
    assert f"- note: config.yaml holds no fields (empty or not a mapping) in {names[0]}." in section
    assert f"- note: no config.yaml in {names[1]}." in section


def test_identical_returns_at_the_cap_are_not_advised_more_seeds(tmp_path, capsys):
    """Every member at CartPole's cap: P(X > Y) is 0.5 with CI [0.50, 0.50], which contains 0.5 (not
    told apart) and which more seeds cannot change."""
    run = cmp._population(tmp_path / "S", {0.1: [500.0] * 5, 0.2: [500.0] * 5})
    assert _verdict(_report(run, capsys)) == (
        "Y = lr=0.1: the highest IQM; not distinguishable from lr=0.2 (P(X > Y) 0.50, p = 1, above 0.05/2) at "
        f"these seeds. The settings' returns are identical, which more seeds cannot tell apart. ({pr.CLAIM_METHOD}.)")


class _EvalGlitch(GlitchEnv):
    """A native env (so a population evaluates every member in one batched env): a NaN reward at the
    3rd step in row 4 of the 6-row evaluation env (2 members x 3 episodes): member 1's env 1. The
    training envs (other sizes) never glitch."""

    field, bad_env, bad_step = "reward", 4, 3
    max_episode_steps = 8

    def _dynamics(self, action):
        if self.num_envs != 6:
            self.bad_step = -1
        return super()._dynamics(action)


def test_a_nan_in_the_batched_evaluation_of_members_names_the_members_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(classic.NATIVE_ENVS, "EvalGlitch-v0", _EvalGlitch)
    run = tmp_path / "pop"
    code, _, err = run_main(["train", "EvalGlitch-v0", "--seeds", "1-2", *TINY_POP, "--total-timesteps", "32",
                             "--eval-episodes", "3", "--quiet", "--run-dir", str(run)], capsys)
    line = error_line(code, err, f"{run / 'm001-seed2'}: non-finite reward nan from member 1 env 1 at evaluation step 3")
    # one batched env for all members: none got an evaluation, which the line says; the wall time is recorded
    assert line.endswith(f"; training finished, its checkpoints are kept ({ckpt.list_checkpoints(run)[-1]}); "
                         "left unevaluated (no eval.json): m000-seed1, m001-seed2")
    assert "wall_seconds" in json.loads((run / "population.json").read_text())


# ------------------------------------------------------------------ 6. a refused swept value names --sweep
@pytest.mark.parametrize("sweep, value", [("lr=nan", "nan"), ("lr=nan,1e-3", "nan"), ("gamma=2,0.9", "2.0")])
def test_a_refused_first_swept_value_names_sweep_not_the_flag(tmp_path, capsys, sweep, value):
    name = sweep.partition("=")[0]
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--sweep", sweep, *TINY_POP,
                             "--run-dir", str(tmp_path / "r")], capsys)
    line = error_line(code, err, f"error: --sweep {name}: value {value}: must be")
    assert f"--{name} " not in line
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------ 5. the docs
def test_the_docs_list_init_from_as_refused_and_say_how_to_export_a_member():
    text = DOCS.read_text()
    refused = text.split("## Not yet (refused with one line, exit 2)", 1)[1].split("\n## ", 1)[0]
    assert "`--init-from`" in refused
    flat = " ".join(text.split())
    assert "proxima train ENV --init-from RUN/<member dir>" in flat and "proxima eval RUN/<member dir>" in flat
    assert re.search(r"not ranked", flat) and "not distinguishable from" in flat and "## Config and versions" in flat


# ------------------------------------------------------------------ 7. verdict and notes, case by case
def test_a_setting_without_an_interval_is_not_distinguishable(tmp_path, capsys):
    """lr=0.2 has 1 member: no CI, so the verdict cannot say lr=0.1 is told apart from it."""
    run = cmp._population(tmp_path / "S", {0.1: [100.0, 102.0, 104.0, 106.0, 108.0], 0.2: [1.0]})
    assert _verdict(_report(run, capsys)) == (
        "Y = lr=0.1: the highest IQM; not distinguishable from lr=0.2 (P(X > Y) 0.00; fewer than "
        f"{pr.MIN_CLAIM_MEMBERS} members on a side: no claim) at these seeds. Run more seeds to tell them apart. "
        f"({pr.CLAIM_METHOD}.)")


def test_a_verdict_with_nothing_measured_says_nothing_is_compared():
    line = pr.verdict("A", [("B", {"p": None, "ci": None, "few": False, "why": "x"})])
    assert line == "Y = A: the highest IQM; no other setting is compared with it (see the notes below)."


def test_no_distinguishable_verdict_from_few_members(tmp_path, capsys):
    """3 vs 3 wholly apart: the bootstrap's interval is [0.00, 0.00], yet at n < 5 no claim is made."""
    run = cmp._population(tmp_path / "S", {0.1: [100.0, 102.0, 104.0], 0.2: [1.0, 2.0, 3.0]})
    assert _verdict(_report(run, capsys)).startswith(
        "Y = lr=0.1: the highest IQM; not distinguishable from lr=0.2 (P(X > Y) 0.00; fewer than 5 members on a "
        "side: no claim) at these seeds.")


def _three_settings(run: Path) -> Path:
    """lr=0.1 stable (IQM 145); lr=0.2 loses 4 of 10 (IQM of survivors 335, the highest); lr=0.3 loses 2."""
    stable = [100.0 + 10 * k for k in range(10)]
    unstable = [10.0, 20.0, 30.0, 40.0, 310.0, 320.0, 330.0, 340.0, 350.0, 360.0]
    lower = [5.0, 6.0, 150.0, 160.0, 170.0, 180.0, 190.0, 200.0, 210.0, 220.0]
    cmp._population(run, {0.1: stable, 0.2: unstable, 0.3: lower})
    _mark_diverged(run, [f"m{10 + k:03d}-seed{11 + k}-lr0.2" for k in range(4)]
                   + [f"m{20 + k:03d}-seed{21 + k}-lr0.3" for k in range(2)])
    return run


def test_only_the_top_diverged_setting_is_said_to_have_had_the_highest_iqm(tmp_path, capsys):
    text = _report(_three_settings(tmp_path / "S"), capsys)
    assert text.count("had the highest IQM") == 1 and "- lr=0.2 had the highest IQM, 335.0," in text
    assert text.count("has an IQM of") == 1 and "- lr=0.3 has an IQM of 185.0 over 8 of its 10 members (left out: 2 diverged)" in text


def test_a_report_of_two_populations_notes_the_setting_not_ranked(tmp_path):
    first = _three_settings(tmp_path / "A")
    second = cmp._population(tmp_path / "B", {0.1: [100.0, 102.0, 104.0, 106.0, 108.0]})
    out = pr.build_populations_report([first, second], out=tmp_path / "cmp.md", episodes=0).read_text()
    assert "had the highest IQM, 335.0, over 6 of its 10 members (left out: 4 diverged): not ranked" in out


def test_the_diverged_count_is_of_diverged_members_only(tmp_path, capsys):
    """4 of lr=0.2's members diverged and a 5th lacks eval.json: 5 are used, "(4 diverged)", not 5."""
    stable = [100.0 + 10 * k for k in range(10)]
    run = cmp._population(tmp_path / "S", {0.1: stable, 0.2: [200.0 + k for k in range(10)]})
    _mark_diverged(run, [f"m{10 + k:03d}-seed{11 + k}-lr0.2" for k in range(4)])
    (run / "m014-seed15-lr0.2" / "eval.json").unlink()
    rows = [line for line in _report(run, capsys).splitlines() if line.startswith("| lr=0.2 |")]
    assert rows[0].split("|")[2].strip() == "5 of 10 (4 diverged)"


# ------------------------------------------------------------------ 8. provenance of a real population
def test_the_config_section_of_a_trained_population(tmp_path, capsys):
    """A real population's members record their own run_dir and seed: neither is "shared" nor a
    difference; a member's field that differs only in the middle one is noted; a config.yaml gone, an
    unreadable config.yaml and meta.json are named and the report still exits 0; another git commit
    alone is noted; the command is not a machine row (population.json's line above says it)."""
    run = tmp_path / "pop"
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-4", *TINY_POP, "--total-timesteps", "32",
                             "--eval-episodes", "0", "--quiet", "--run-dir", str(run)], capsys)
    assert code == 0, err
    names = [e["dir"] for e in json.loads((run / "population.json").read_text())["member_dirs"]]
    assert all("run_dir" in (run / n / "config.yaml").read_text() for n in names)
    section = _report(run, capsys).split("## Config and versions", 1)[1]
    assert "- sweep: none (seeds only)" in section
    assert "| run_dir |" not in section and "| seed |" not in section and "| env_id | CartPole-v1 |" in section
    assert "not swept yet differ" not in section and "other versions or another git commit" not in section
    assert "| command |" not in section
    # m001 alone edited: its first and last members agree, yet the field is not shared
    cfg = yaml.safe_load((run / names[1] / "config.yaml").read_text())
    (run / names[1] / "config.yaml").write_text(yaml.safe_dump({**cfg, "clip_obs": 5.0}))
    meta = json.loads((run / names[2] / "meta.json").read_text())
    meta["git_commit"] = "0123abc"  # the same versions, another commit
    (run / names[2] / "meta.json").write_text(json.dumps(meta))
    (run / names[3] / "config.yaml").unlink()
    section = _report(run, capsys).split("## Config and versions", 1)[1]
    assert "- note: these fields are not swept yet differ between members: clip_obs" in section
    assert f"- note: no config.yaml in {names[3]}." in section
    assert f"recorded other versions or another git commit than {names[0]}: {names[2]} " in section
    # unreadable files: named, never the report's failure
    (run / names[1] / "config.yaml").write_text("a: *undefined\n")
    (run / names[2] / "meta.json").write_text("{not json")
    section = _report(run, capsys).split("## Config and versions", 1)[1]
    notes = [line for line in section.splitlines() if line.startswith("- note: ")]
    assert any(names[1] in n and "config.yaml" in n for n in notes), notes
    assert any(names[2] in n and "meta.json" in n for n in notes), notes


@pytest.mark.parametrize("episodes", [5, 20, 0, None])
def test_an_episodes_the_recorded_results_do_not_use_is_noted(tmp_path, capsys, episodes):
    """Every member has an eval.json of 20 episodes: --episodes 5 is not applied to them, which a note
    says with the count used; --episodes 20 (the same), 0 and none (each one's own count) need no note."""
    run = cmp._population(tmp_path / "S", {0.1: [1.0, 2.0], 0.2: [3.0, 4.0]})
    capsys.readouterr()
    pr.summarize_settings(run, episodes=episodes, quiet=False)
    err = capsys.readouterr().err
    if episodes == 5:
        assert err == ("proxima: note: --episodes 5 applies only to members without an eval.json of their last step; "
                       "the others' eval.json results are used as recorded (over 20 episodes: see the line above the "
                       f"table); `proxima eval {run} --episodes 5` evaluates every member over 5 episodes and prints "
                       "each setting's mean and IQM as this table does (--json for the numbers; it writes no eval.json, "
                       "so this report keeps the recorded ones)\n")
    else:
        assert err == ""
