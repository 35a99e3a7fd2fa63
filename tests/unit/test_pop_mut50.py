"""Mutation tests (pop_mut50) of a0bb01f (population_report/population_eval: the missing member folder's advice
in every report, the A+A2 learning-rate refusal, More seeds after a resume, the rolling training return, report
A B's resume lines, one-member note and re-evaluation hint) and 7897aa5 (plot: populations of one env overlaid
in one panel, plot --json's numbers, refusals and atomic writes). Populations are written as files (config.yaml,
metrics.csv, population.json, meta.json) as training leaves them, except where a real resume is the point
(test_pop50's trained ``pops``)."""

from __future__ import annotations

import csv
import errno
import json
import math
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import error_line, fake_run_dir, one_error_line, run_main
from proxima import population_report as pr
from proxima.logger import CSV_COLUMNS
from proxima.report import ReportError
from tests.unit.test_pop50 import ONE_MEMBER_NOTE, pops

__all__ = ["pops"]  # test_pop50's trained populations (A resumed under --anneal-lr, B one seed, C 3 eval episodes)

mpl = pytest.importorskip("matplotlib")

METRIC = "charts/episodic_return"
ADVICE = "member directory listed in population.json is missing; restore it from a copy of the run, or train it again: "


def _pop(run: Path, seeds=(1, 2), env_id: str = "Fake-v0", iterations: int = 4, lr=None, total: int = 400,
         command=True, resumes=None, lengths=None) -> Path:
    """A population of one setting as `proxima train ENV --seeds ...` leaves it: per member config.yaml, metrics.csv
    (steps 100, 200, ...; ``lr``: {seed: [lr per iteration]}), meta.json (``resumes``); population.json with its
    command (``command`` True: the usual one; a list: that one) and total_timesteps_per_member ``total`` (also each
    config.yaml's total_timesteps, as a resume with --total-timesteps leaves both: a whole number of iterations)."""
    entries = []
    for i, seed in enumerate(seeds):
        name = f"m{i:03d}-seed{seed}"
        (run / name).mkdir(parents=True)
        (run / name / "config.yaml").write_text(f"env_id: {env_id}\nseed: {seed}\ntotal_timesteps: {total}\n")
        n = (lengths or {}).get(seed, iterations)
        with open(run / name / "metrics.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
            w.writeheader()
            for k in range(1, n + 1):
                row = {"iteration": k, "global_step": 100 * k, "time": 0.1 * k, "episodes": 1,
                       METRIC: 10.0 * seed + k, "charts/episodic_return_100": 10.0 * seed + k}
                if lr is not None:
                    row["charts/learning_rate"] = repr(lr[seed][k - 1])
                w.writerow(row)
        (run / name / "meta.json").write_text(json.dumps({"resumes": resumes} if resumes else {}))
        entries.append({"dir": name, "seed": seed, "settings": {}})
    if command is True:
        command = ["proxima", "train", env_id, "--seeds", "1-2", "--total-timesteps", "400", "--run-dir", str(run)]
    doc = {"kind": "ppo-population", "env_id": env_id, "members": len(seeds), "seeds": list(seeds),
           "member_dirs": entries, "total_timesteps_per_member": total}
    if command is not None:
        doc["command"] = command
    (run / "population.json").write_text(json.dumps(doc))
    return run


def _gone(run: Path, member: str = "m001-seed2") -> Path:
    import shutil

    shutil.rmtree(run / member)
    return run / member


# ------------------------------------------------------------------------------------ a missing member folder
@pytest.mark.parametrize("how", ["pool", "compare", "normalize"])
def test_every_report_form_says_what_to_do_about_a_missing_member_folder(tmp_path, capsys, how):
    a = _pop(tmp_path / "A")
    other = _pop(tmp_path / "B", seeds=(3, 4), env_id="Other-v0" if how == "normalize" else "Fake-v0")
    gone = _gone(other, "m001-seed4")
    argv = {"pool": ["report", f"{a}+{other}"], "compare": ["report", str(a), str(other)],
            "normalize": ["report", str(a), str(other), "--normalize", "--score-range", "Fake-v0=0:100",
                          "--score-range", "Other-v0=0:100"]}[how]
    code, _, err = run_main([*argv, "--episodes", "0", "--out", str(tmp_path / "r.md")], capsys)
    line = one_error_line(err, "proxima report")
    assert code == 2 and line.startswith(f"{gone}: {ADVICE}proxima train Other-v0" if how == "normalize" else
                                         f"{gone}: {ADVICE}proxima train Fake-v0"), line
    assert line.endswith(f"--run-dir {other} --overwrite (the old directory is moved aside)"), line
    assert not (tmp_path / "r.md").exists()


# ------------------------------------------------------------------------------------ A+A2: learning rates
def _lrs(seeds, values):
    return {s: list(values) for s in seeds}


def test_pooling_members_whose_learning_rates_differ_by_one_percent_is_refused_at_that_step(tmp_path):
    a = _pop(tmp_path / "A", lr=_lrs((1, 2), [1e-3, 7.5e-4, 5e-4, 2.5e-4]))
    a2 = _pop(tmp_path / "A2", seeds=(3, 4), lr=_lrs((3, 4), [1e-3, 7.5e-4, 5.05e-4, 2.5e-4]))
    with pytest.raises(ReportError) as e:
        pr.read_pool([a, a2], ["A", "A2"])
    assert str(e.value).startswith("learning rate schedule: A/m000-seed1 logged lr 0.0005 at step 300, "
                                   "A2/m000-seed3 0.000505; "), e.value


def test_pooling_members_of_one_schedule_logged_as_float32_is_accepted_whatever_their_lengths(tmp_path):
    sched = [1e-3, 7.5e-4, 5e-4, 2.5e-4, 1e-4, 5e-5]
    a = _pop(tmp_path / "A", lr=_lrs((1, 2), sched))
    noisy = [float(np.float32(v)) for v in sched]  # as the logger's float32 writes them: not bit-equal
    assert noisy != sched
    a2 = _pop(tmp_path / "A2", seeds=(3, 4), lr=_lrs((3, 4), noisy), lengths={3: 6, 4: 2})
    pool = pr.read_pool([a, a2], ["A", "A2"])
    assert sorted(seed for st in pr.settings_of(pool) for seed, _ in st.members) == [1, 2, 3, 4]


# ------------------------------------------------------------------------------------ More seeds' command
def test_more_seeds_replaces_a_total_timesteps_written_with_an_equals_sign(tmp_path):
    a = _pop(tmp_path / "A", total=800, command=["proxima", "train", "Fake-v0", "--seeds=1-2", "--total-timesteps=400",
                                                 "--run-dir", str(tmp_path / "A")])
    assert pr._train_more(a, [3], tmp_path / "new") == (
        f"`proxima train Fake-v0 --total-timesteps=800 --seeds 3 --run-dir {tmp_path / 'new'}`")


@pytest.mark.parametrize("resumed", [False, True])
def test_more_seeds_names_the_trained_total_for_a_preset_total_only_after_a_resume(tmp_path, resumed):
    """No --total-timesteps in the command (the preset's): a resume that changed it has it named, else nothing."""
    cmd = ["proxima", "train", "Fake-v0", "--seeds", "1-2", "--run-dir", str(tmp_path / "A")]
    a = _pop(tmp_path / "A", total=800, command=cmd,
             resumes=[{"step": 400, "command": ["proxima", "resume", "A", "--total-timesteps", "800"]}] if resumed else None)
    extra = "--total-timesteps 800 " if resumed else ""
    assert pr._train_more(a, [3], tmp_path / "new") == (
        f"`proxima train Fake-v0 {extra}--seeds 3 --run-dir {tmp_path / 'new'}`")


def test_more_seeds_after_a_recomputed_schedule_says_to_train_again_on_more_seeds(pops, capsys, tmp_path):
    _, a, _, _ = pops
    code, _, err = run_main(["report", str(a), "--episodes", "0", "--out", str(tmp_path / "a.md")], capsys)
    assert code == 0, err
    text = (tmp_path / "a.md").read_text()
    assert ONE_MEMBER_NOTE not in text  # two seeds: a CI, no n = 1 note
    more = text.split("## More seeds")[1].split("\n## ")[0]
    assert "To add seeds, train the same setting again on more seeds into a new directory:" in more
    assert "on the next ones" not in more and "pool them" not in more


# ------------------------------------------------------------------------------------ report A B
def test_a_comparison_with_a_one_seed_population_gets_the_one_member_note(pops, capsys, tmp_path):
    _, a, b, _ = pops
    code, _, err = run_main(["report", str(a), str(b), "--out", str(tmp_path / "ab.md")], capsys)
    assert code == 0, err
    assert f"- {ONE_MEMBER_NOTE}." in (tmp_path / "ab.md").read_text()


def test_the_episode_count_hint_names_only_the_populations_evaluated_otherwise(pops, capsys, tmp_path):
    _, a, b, c = pops
    code, _, err = run_main(["report", str(b), str(a), str(c), "--out", str(tmp_path / "bac.md")], capsys)
    line = one_error_line(err, "proxima report")
    assert code == 2 and f"; `proxima resume {c} --eval-episodes 2` evaluates the members again" in line, line
    assert f"proxima resume {a} " not in line, line


def test_no_resume_is_named_when_the_first_population_holds_several_counts(pops, capsys, tmp_path):
    """The first population's members evaluated over 2 and 3 episodes: no one count to re-evaluate the others over."""
    import shutil

    _, a, b, _ = pops
    mixed = tmp_path / "A"
    shutil.copytree(a, mixed)
    ev = mixed / "m001-seed2" / "eval.json"
    doc = json.loads(ev.read_text())
    doc["episodes"] = 3
    ev.write_text(json.dumps(doc))
    code, _, err = run_main(["report", str(mixed), str(b), "--out", str(tmp_path / "ab.md")], capsys)
    line = one_error_line(err, "proxima report")
    assert code == 2 and line.endswith("; their eval.json files hold different counts, which --episodes does not "
                                       "change: report them alone"), line
    assert "proxima resume" not in line, line


def test_resume_lines_list_each_resume_once_in_step_order_and_skip_a_record_without_a_step(tmp_path):
    resumes = [{"step": 800, "command": ["proxima", "resume", "A", "--total-timesteps", "1600"]},
               {"step": 400, "command": ["proxima", "resume", "A", "--total-timesteps", "800"]},
               {"step": "later", "command": ["proxima", "resume", "A", "--eval-episodes", "5"]}]
    a = _pop(tmp_path / "A", total=1600, resumes=resumes)
    lines = pr.resume_lines(a, json.loads((a / "population.json").read_text()))
    assert lines == ["  - resumed at step 400: `proxima resume A --total-timesteps 800`",
                     "  - resumed at step 800: `proxima resume A --total-timesteps 1600`",
                     "  - trained to 1,600 steps per member (population.json's total_timesteps_per_member)"]


# ------------------------------------------------------------------------------------ the training return
def test_a_logged_inf_last_return_is_the_members_return_not_the_rolling_one_before_it(tmp_path):
    d = tmp_path / "m000-seed1"
    d.mkdir()
    (d / "metrics.csv").write_text("iteration,global_step,episodes,charts/episodic_return,charts/episodic_return_100\n"
                                   "1,256,4,20.0,20.0\n2,512,1,inf,20.0\n")
    value, source = pr.member_final_return(d, episodes=0)
    assert (value, source) == (math.inf, "last training return")


# ------------------------------------------------------------------------------------ plot: one panel per env
@pytest.fixture
def cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _visible(fig) -> list:
    return [ax for ax in fig.axes if ax.get_visible()]


def test_merged_panel_says_the_ci_lines_once_and_the_few_members_caveat(cwd, capsys, drawn):
    _pop(cwd / "A", seeds=(1, 2, 3, 4, 5))
    _pop(cwd / "B", seeds=(6, 7, 8))
    code, _, err = run_main(["plot", "A", "B", "--metric", METRIC, "--out", "ab.png"], capsys)
    assert code == 0, err
    (ax,) = _visible(drawn[-1])
    title = ax.get_legend().get_title().get_text()
    assert title.count("95% CI: 10000 bootstrap resamples") == 1, title
    assert title.count("\u2020 < 5 members: covers well under 95%") == 1, title


def test_a_pool_overlaid_with_a_population_is_named_as_pooled(cwd, capsys, drawn):
    _pop(cwd / "A")
    _pop(cwd / "A2", seeds=(3, 4))
    _pop(cwd / "B", seeds=(5, 6))
    code, _, err = run_main(["plot", "A+A2", "B", "--metric", METRIC, "--out", "p.png"], capsys)
    assert code == 0, err
    (ax,) = _visible(drawn[-1])
    labels = [ln.get_label() for ln in ax.get_lines()]
    assert labels[0].startswith("A+A2, 2 populations pooled: IQM") and labels[1].startswith("B: IQM"), labels


# ------------------------------------------------------------------------------------ plot --json
@pytest.mark.parametrize("target", ["A/m000-seed1/eval.json", "A/Population.json"])
def test_json_never_takes_the_name_of_a_run_file_in_a_member_folder_or_in_another_case(cwd, capsys, target):
    _pop(cwd / "A")
    code, _, err = run_main(["plot", "A", "--metric", METRIC, "--out", "a.png", "--json", target], capsys)
    error_line(code, err, f"--json {target}: ", "is a file Proxima writes in a run directory")
    assert not Path("a.png").exists() and not Path(target).exists()


def test_json_refuses_an_existing_json_that_is_not_an_object(cwd, capsys):
    _pop(cwd / "A")
    Path("list.json").write_text("[1, 2]\n")
    code, _, err = run_main(["plot", "A", "--metric", METRIC, "--out", "a.png", "--json", "list.json"], capsys)
    error_line(code, err, "--json list.json: exists and is not a file `proxima plot --json` wrote")
    assert Path("list.json").read_text() == "[1, 2]\n"


def test_json_of_a_ci_over_one_member_is_null_and_x_is_the_x_drawn(cwd, capsys):
    _pop(cwd / "A", seeds=(1, 2, 3), lengths={1: 6})  # steps 500, 600: seed 1 alone
    code, _, err = run_main(["plot", "A", "--metric", METRIC, "--x", "time", "--out", "a.png", "--json", "a.json"], capsys)
    assert code == 0, err
    doc = json.loads(Path("a.json").read_text())
    assert doc["x"] == "time"
    (curve,) = doc["panels"][0]["curves"]
    assert curve["count"] == [3, 3, 3, 3, 1, 1]
    assert curve["low"][-1] is None and curve["high"][-1] is None and curve["y"][-1] == 16.0
    assert curve["low"][0] is not None


@pytest.mark.parametrize("failing", ["a.json", "a.png"])
def test_a_failed_write_leaves_neither_file_and_names_the_one_that_failed(cwd, capsys, monkeypatch, failing):
    import proxima.atomic as atomic

    _pop(cwd / "A")
    real = atomic.write_atomic
    wrote = []

    def write_atomic(path, data, *args, **kwargs):
        wrote.append(Path(path).name)
        if len(wrote) == (1 if failing == "a.json" else 2):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data, *args, **kwargs)

    monkeypatch.setattr(atomic, "write_atomic", write_atomic)
    code, _, err = run_main(["plot", "A", "--metric", METRIC, "--out", "a.png", "--json", "a.json"], capsys)
    line = error_line(code, err, failing)
    assert ("a.png" if failing == "a.json" else "a.json") not in line, line
    assert not Path("a.png").exists() and not Path("a.json").exists()
    assert all(name not in ("a.png", "a.json") for name in wrote)  # temporaries, renamed only once both are written


def test_json_of_a_single_plain_run_counts_it_once(tmp_path, capsys):
    run = fake_run_dir(tmp_path, "solo", returns=(1.0, 2.0))
    code, _, err = run_main(["plot", str(run), "--metric", METRIC, "--out", str(tmp_path / "s.png"),
                             "--json", str(tmp_path / "s.json")], capsys)
    assert code == 0, err
    (curve,) = json.loads((tmp_path / "s.json").read_text())["panels"][0]["curves"]
    assert (curve["count"], curve["stat"], curve["band"]) == ([1, 1], None, None)


def test_a_rename_that_fails_is_one_line_naming_the_json_and_replaces_neither(cwd, capsys, monkeypatch):
    import proxima.atomic as atomic

    _pop(cwd / "A")

    def replace_into(tmp, target):
        raise OSError(errno.EACCES, "Permission denied", str(target))

    monkeypatch.setattr(atomic, "replace_into", replace_into)
    code, _, err = run_main(["plot", "A", "--metric", METRIC, "--out", "a.png", "--json", "a.json"], capsys)
    line = error_line(code, err, "a.json")
    assert line.startswith("proxima plot: error: "), line
    assert not Path("a.png").exists() and not Path("a.json").exists()
    assert [p.name for p in cwd.iterdir() if p.name.startswith(".")] == []  # no temporary left behind
