"""Hostile-input review hostB50: a population.json total past a float (report's learning rate check), a member
config.yaml total that train refuses (More seeds' command), a backtick in More seeds' commands (report.md's code
spans), A+A2's learning-rate refusal without a recorded resume, and --json at a file name another run reads.
Populations are written as files, as training leaves them (config.yaml, metrics.csv, meta.json, population.json)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from cli_helpers import one_error_line, run_main
from proxima import population_report as pr
from proxima.logger import CSV_COLUMNS
from proxima.report import ReportError

pytest.importorskip("matplotlib")

LR0 = 1e-3
#: four iterations of 100 steps annealed over a 400-step total: lr0 * (1 - (i - 1) / 4)
ANNEALED = [LR0, 7.5e-4, 5e-4, 2.5e-4]


def _pop(run: Path, seeds=(1, 2), total: int = 400, config_total=None, lr=ANNEALED, resumes=None,
         command=None) -> Path:
    """A population of one setting of Fake-v0 (num_envs 1 x num_steps 100, --anneal-lr from LR0): per member
    config.yaml (total_timesteps ``config_total``, default ``total``), metrics.csv of four iterations logging
    ``lr``, meta.json (``resumes``); population.json with total_timesteps_per_member ``total``."""
    entries = []
    for i, seed in enumerate(seeds):
        name = f"m{i:03d}-seed{seed}"
        (run / name).mkdir(parents=True)
        (run / name / "config.yaml").write_text(
            f"env_id: Fake-v0\nseed: {seed}\ntotal_timesteps: {total if config_total is None else config_total}\n"
            f"num_envs: 1\nnum_steps: 100\nlr: {LR0}\nanneal_lr: true\n")
        with open(run / name / "metrics.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
            w.writeheader()
            for k in range(1, 5):
                w.writerow({"iteration": k, "global_step": 100 * k, "time": 0.1 * k, "episodes": 1,
                            "charts/episodic_return": 10.0 * seed + k, "charts/episodic_return_100": 10.0 * seed + k,
                            "charts/learning_rate": repr(lr[k - 1])})
        (run / name / "meta.json").write_text(json.dumps({"resumes": resumes} if resumes else {}))
        entries.append({"dir": name, "seed": seed, "settings": {}})
    command = command or ["proxima", "train", "Fake-v0", "--seeds", "1-2", "--total-timesteps", "400", "--run-dir", str(run)]
    (run / "population.json").write_text(json.dumps(
        {"kind": "ppo-population", "env_id": "Fake-v0", "members": len(seeds), "seeds": list(seeds),
         "member_dirs": entries, "total_timesteps_per_member": total, "command": command}))
    return run


def _more_seeds(run: Path, capsys, out: Path) -> str:
    code, _, err = run_main(["report", str(run), "--episodes", "0", "--out", str(out)], capsys)
    assert code == 0, err
    return out.read_text().split("## More seeds")[1].split("\n## ")[0]


# ------------------------------------------------------------------------------------ 1: a total past a float
def test_a_population_total_past_a_float_is_reported_without_a_traceback(tmp_path, capsys):
    """--total-timesteps 1e400 is a total train takes (an int): its schedule is lr0 * (1 - (i - 1) / I), exact."""
    run = _pop(tmp_path / "T", total=10**400, config_total=400)
    more = _more_seeds(run, capsys, tmp_path / "T.md")
    # the logged schedule (annealed over 400) is not that of 1e400 steps: the report names the step, not a crash
    assert "a resume recomputed its learning rate schedule (m000-seed1 after step 400" in more
    config = {"lr": LR0, "anneal_lr": True, "num_envs": 1, "num_steps": 100}
    assert pr.schedule_recomputed_at(run / "m000-seed1", config, 10**400) == (400, pytest.approx(2.5e-4), LR0)
    assert pr.schedule_recomputed_at(run / "m000-seed1", config, 400) is None


# ------------------------------------------------------------------------------------ 6: a total train refuses
@pytest.mark.parametrize("edited", ["0", "-5", "50", "'800'"])
def test_more_seeds_keeps_the_recorded_total_when_config_yaml_holds_one_train_refuses(tmp_path, edited):
    """0, -5, 50 (under one batch of 100 steps) and text: train refuses each; the command's own 400 stays."""
    run = _pop(tmp_path / "A", config_total=edited)
    assert pr._train_more(run, [3], tmp_path / "new") == (
        f"`proxima train Fake-v0 --total-timesteps 400 --seeds 3 --run-dir {tmp_path / 'new'}`")


def test_more_seeds_takes_a_config_yaml_total_train_accepts(tmp_path):
    run = _pop(tmp_path / "A", config_total=800)
    assert pr._train_more(run, [3], tmp_path / "new") == (
        f"`proxima train Fake-v0 --total-timesteps 800 --seeds 3 --run-dir {tmp_path / 'new'}`")


# ------------------------------------------------------------------------------------ 8: backticks in a command
def test_more_seeds_commands_holding_a_backtick_are_whole_code_spans(tmp_path, capsys):
    run = _pop(tmp_path / "A`b")
    more = _more_seeds(run, capsys, tmp_path / "r.md")
    new = f"{run}-seeds3-10"
    assert (f"- ``proxima train Fake-v0 --total-timesteps 400 --seeds 3-10 --run-dir '{new}'``") in more
    assert f"``proxima report '{run}+{new}' --out '{run}-seeds1-10.md' --episodes 0``." in more


# ------------------------------------------------------------------------------------ 11: A+A2 without a resume
def test_pooling_members_of_other_logged_learning_rates_without_a_resume_names_no_resume(tmp_path, capsys):
    a = _pop(tmp_path / "A")
    a2 = _pop(tmp_path / "A2", seeds=(3, 4), lr=[LR0, 7.5e-4, 1e308, 2.5e-4])  # a cell edited by hand
    code, _, err = run_main(["report", f"{a}+{a2}", "--episodes", "0", "--out", str(tmp_path / "r.md")], capsys)
    line = one_error_line(err, "proxima report")
    assert code == 2 and line.startswith("learning rate schedule: A/m000-seed1 logged lr 0.0005 at step 300, "
                                         "A2/m000-seed3 1e+308; their members logged different learning rates "
                                         "(charts/learning_rate in metrics.csv), which one setting does not: report "
                                         "them apart"), line
    assert "resume" not in line
    assert not (tmp_path / "r.md").exists()


def test_pooling_members_of_other_learning_rates_after_a_recorded_resume_names_the_resume(tmp_path):
    a = _pop(tmp_path / "A")
    a2 = _pop(tmp_path / "A2", seeds=(3, 4), lr=[LR0, 8e-4, 6e-4, 4e-4],
              resumes=[{"step": 100, "command": ["proxima", "resume", "A2", "--total-timesteps", "500"]}])
    with pytest.raises(ReportError) as e:
        pr.read_pool([a, a2], ["A", "A2"])
    assert "; a resume that extended --total-timesteps under --anneal-lr recomputed one's schedule" in str(e.value)


# ------------------------------------------------------------------------------------ 5: --json into another run
@pytest.mark.parametrize("name", ["diverged.json", "eval.json"])
@pytest.mark.parametrize("command", ["plot", "report"])
def test_json_at_a_file_another_run_reads_is_refused(tmp_path, capsys, name, command):
    """The run plotted is A; B (a member copied out: config.yaml and checkpoints/) is not plotted, and would read
    B/diverged.json or B/eval.json as its own."""
    a = _pop(tmp_path / "A")
    other = tmp_path / "B"
    other.mkdir()
    (other / "config.yaml").write_text("env_id: Fake-v0\n")
    (other / "checkpoints").mkdir()
    out = other / name
    extra = ["--episodes", "0"] if command == "report" else []
    code, _, err = run_main([command, str(a), "--out", str(tmp_path / f"r.{'md' if command == 'report' else 'png'}"),
                             "--json", str(out), *extra], capsys)
    line = one_error_line(err, f"proxima {command}")
    assert code == 2 and line == (f"--json {out}: {name} is a file Proxima writes in a run directory ({other}); give "
                                  f"another FILE.json (e.g. {other / ('report.json' if command == 'report' else 'curves.json')})")
    assert not out.exists()


def test_json_at_a_run_file_name_in_a_folder_of_no_run_is_written(tmp_path, capsys):
    a = _pop(tmp_path / "A")
    (tmp_path / "plain").mkdir()
    out = tmp_path / "plain" / "eval.json"
    code, _, err = run_main(["plot", str(a), "--out", str(tmp_path / "p.png"), "--json", str(out)], capsys)
    assert code == 0, err
    assert json.loads(out.read_text())["generator"] == "proxima plot"
