"""A user review of population reports (pop50): More seeds and pooling after a resume, the training return
the table gives, what to do after a refusal, a one-seed population, a missing member folder."""

from __future__ import annotations

import csv
import json
import shutil
import sys

import pytest

from cli_helpers import one_error_line, run_main
from proxima import population_report as pr

ONE_MEMBER_NOTE = "n = 1: one seed gives no interval (\u2014) and says nothing of how seeds spread; run more seeds"

TRAIN = ["--num-envs", "2", "--num-steps", "64", "--quiet"]


def _train(capsys, monkeypatch, run_dir, seeds: str, total: int, eval_episodes: int = 2):
    """``proxima train CartPole-v1 --seeds S ...`` in this process, its population.json recording that command."""
    argv = ["proxima", "train", "CartPole-v1", "--seeds", seeds, *TRAIN, "--total-timesteps", str(total),
            "--eval-episodes", str(eval_episodes), "--run-dir", str(run_dir)]
    monkeypatch.setattr(sys, "argv", argv)
    code, _, err = run_main(argv[1:], capsys)
    assert code == 0, err
    return run_dir


@pytest.fixture(scope="module")
def pops(tmp_path_factory):
    """A: seeds 1-2 trained to 256 steps, then resumed to 512 (--anneal-lr: its schedule recomputed at step 256);
    B: seed 3 trained to 512 from the start; C: seed 1 to 256, evaluated over 3 episodes where A's are over 2."""
    root = tmp_path_factory.mktemp("pop50")
    mp = pytest.MonkeyPatch()

    class Cap:  # run_main's capsys, for a module fixture
        def readouterr(self):
            return "", ""

    try:
        a = _train(Cap(), mp, root / "A", "1-2", 256)
        mp.setattr(sys, "argv", ["proxima", "resume", str(a), "--total-timesteps", "512", "--quiet"])
        assert run_main(["resume", str(a), "--total-timesteps", "512", "--quiet"], Cap())[0] == 0
        b = _train(Cap(), mp, root / "B", "3", 512)
        c = _train(Cap(), mp, root / "C", "1", 256, eval_episodes=3)
    finally:
        mp.undo()
    return root, a, b, c


# ------------------------------------------------------------------------------------ 1: More seeds after a resume
def test_more_seeds_of_a_resumed_population_trains_to_its_trained_total_on_every_seed_afresh(pops, capsys):
    root, a, _, _ = pops
    code, _, err = run_main(["report", str(a), "--episodes", "0", "--out", str(root / "a.md")], capsys)
    assert code == 0, err
    more = (root / "a.md").read_text().split("## More seeds")[1].split("\n## ")[0]
    assert "--total-timesteps 256" not in more  # the first command's total, which the members trained past
    assert ("a resume recomputed its learning rate schedule (m000-seed1 after step 256: --anneal-lr over a new "
            "--total-timesteps), which a fresh run cannot match") in more
    assert f"--total-timesteps 512 --eval-episodes 2 --seeds 1-10 --run-dir {a}-seeds1-10`" in more
    assert f"then report them: `proxima report {a}-seeds1-10 --out {a}-seeds1-10.md --episodes 0`." in more


def test_more_seeds_command_trains_to_the_total_population_json_records_not_the_first_commands(pops, tmp_path):
    """A trained to 256 steps, then resumed to 512: the command's --total-timesteps 256 becomes 512 in its place."""
    _, a, _, _ = pops
    assert json.loads((a / "population.json").read_text())["command"][10:12] == ["--total-timesteps", "256"]
    assert pr._train_more(a, [3], tmp_path / "new") == (
        "`proxima train CartPole-v1 --num-envs 2 --num-steps 64 --quiet --total-timesteps 512 --eval-episodes 2 "
        f"--seeds 3 --run-dir {tmp_path / 'new'}`")


def test_pooling_members_trained_under_different_learning_rate_schedules_is_refused(pops, capsys):
    root, a, b, _ = pops
    code, _, err = run_main(["report", f"{a}+{b}", "--episodes", "0", "--out", str(root / "ab.md")], capsys)
    line = one_error_line(err, "proxima report")
    # iteration 2 of A trained at 0.00025 * (1 - 1/2) under its first total, B's at 0.00025 * (1 - 1/4)
    assert code == 2 and line.startswith("learning rate schedule: A/m000-seed1 logged lr 0.000125 at step 256, "
                                         "B/m000-seed3 0.000188; a resume that extended --total-timesteps under "
                                         "--anneal-lr recomputed one's schedule"), line
    assert line.endswith(f"report them apart (proxima report {a} {b} --out FILE.md), or train the setting afresh on "
                         "every seed"), line
    assert not (root / "ab.md").exists()


# ------------------------------------------------------------------------------------ 2: the rolling training return
def test_last_training_return_is_the_rolling_return_not_the_last_iterations_mean(tmp_path):
    d = tmp_path / "m000-seed1"
    d.mkdir()
    (d / "metrics.csv").write_text("iteration,global_step,episodes,charts/episodic_return,charts/episodic_return_100\n"
                                   "1,256,4,20.0,20.0\n2,512,1,215.0,59.0\n3,768,0,,59.0\n")
    assert pr.member_final_return(d, episodes=0) == (59.0, "last training return")  # was 215.0, one episode's
    # a member logged before the rolling column: its last per-iteration mean, as before
    (d / "metrics.csv").write_text("global_step,charts/episodic_return\n256,25.4\n512,\n")
    assert pr.member_final_return(d, episodes=0) == (25.4, "last training return")


def test_report_of_training_returns_names_the_rolling_column(pops, capsys, tmp_path):
    _, _, b, _ = pops
    run = tmp_path / "B"
    shutil.copytree(b, run)
    for ev in run.glob("*/eval.json"):
        ev.unlink()
    with open(run / "m000-seed3" / "metrics.csv") as f:
        rolling = float([r for r in csv.DictReader(f) if r["charts/episodic_return_100"]][-1]["charts/episodic_return_100"])
    code, _, err = run_main(["report", str(run), "--episodes", "0", "--json", str(tmp_path / "b.json")], capsys)
    assert code == 0, err
    text = (run / "report.md").read_text()
    assert "Last training return: each member's last charts/episodic_return_100" in text
    assert json.loads((tmp_path / "b.json").read_text())["settings"][0]["mean"] == pytest.approx(rolling)


# ------------------------------------------------------------------------------------ 3: episode counts
def test_a_comparison_of_other_eval_episode_counts_names_the_resume_that_evaluates_again(pops, capsys, tmp_path):
    root, _, b, c = pops
    code, _, err = run_main(["report", str(b), str(c), "--out", str(tmp_path / "bc.md")], capsys)
    line = one_error_line(err, "proxima report")
    assert code == 2 and line.endswith(f"`proxima resume {c} --eval-episodes 2` evaluates the members again over 2 "
                                       "episodes, rewriting their eval.json; as they are, their eval.json files hold "
                                       "different counts, which --episodes does not change: report them alone"), line
    again = tmp_path / "C"
    shutil.copytree(c, again)
    assert run_main(["resume", str(again), "--eval-episodes", "2", "--quiet"], capsys)[0] == 0
    code, _, err = run_main(["report", str(b), str(again), "--out", str(tmp_path / "bc.md")], capsys)
    assert code == 0, err


# ------------------------------------------------------------------------------------ 4: a resumed population compared
def test_a_comparison_carries_each_populations_resume_and_schedule_note(pops, capsys, tmp_path):
    _, a, b, _ = pops
    code, _, err = run_main(["report", str(a), str(b), "--out", str(tmp_path / "ab.md")], capsys)
    assert code == 0, err
    commands = (tmp_path / "ab.md").read_text().split("Each population's command")[1]
    a_part, b_part = commands.split("\n- B: ")
    assert "--total-timesteps 256" in a_part and "  - resumed at step 256: `" in a_part
    assert "  - trained to 512 steps per member (population.json's total_timesteps_per_member)" in a_part
    assert "  - note: the learning rate schedule was recomputed after step 256 for every member" in a_part
    assert "resumed" not in b_part


# ------------------------------------------------------------------------------------ 5: one seed
def test_a_single_seed_report_gets_the_one_member_note_and_more_seeds(pops, capsys, tmp_path):
    _, _, b, _ = pops
    code, _, err = run_main(["report", str(b), "--out", str(tmp_path / "b.md")], capsys)
    assert code == 0, err
    text = (tmp_path / "b.md").read_text()
    assert f"- {ONE_MEMBER_NOTE}." in text and "## More seeds" in text and "--seeds 4-12" in text


# ------------------------------------------------------------------------------------ 6: a missing member folder
@pytest.mark.parametrize("command", ["report", "eval"])
def test_a_missing_member_folder_says_what_to_do(pops, capsys, tmp_path, command):
    _, a, _, _ = pops
    run = tmp_path / "A"
    shutil.copytree(a, run)
    shutil.rmtree(run / "m001-seed2")
    code, _, err = run_main([command, str(run)], capsys)
    line = one_error_line(err, f"proxima {command}")
    assert code == 2 and line.startswith(f"{run / 'm001-seed2'}: member directory listed in population.json is missing; "
                                         "restore it from a copy of the run, or train it again: "), line
