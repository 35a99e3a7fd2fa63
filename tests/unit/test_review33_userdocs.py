"""What a user reviewing the docs against the CLI found (session 33): an RLHF run given to eval, plot
or report is named as one (eval used to call it a run that stopped before its first checkpoint and
advise retraining it with a command that fails); --sweep value errors name the --sweep item; eval's
--seed range says where its top comes from; check-env --steps 0 says nothing was stepped; resume's
--help separates the flags a resume may change from those it only checks; a resume prints the run
directory as typed."""
import json

import pytest
import torch

from proxima import cli
from tests.cli_helpers import TINY_RUN, error_line, run_main


@pytest.fixture()
def rlhf_run(tmp_path):
    """A directory shaped as proxima rlhf leaves one: meta.json of kind rlhf, metrics.csv without
    global_step or episodes, an RLHF checkpoint."""
    run = tmp_path / "rl"
    (run / "checkpoints").mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"kind": "rlhf"}))
    (run / "metrics.csv").write_text("step,objective/scores\n1,0.5\n2,0.7\n")
    torch.save({"format": "proxima-rlhf-1", "step": 2, "ranks": 1}, run / "checkpoints" / "step_000002.pt")
    return run


@pytest.mark.parametrize("command", ["eval", "plot", "report"])
def test_eval_plot_and_report_name_an_rlhf_run_and_where_its_results_are(rlhf_run, command, capsys):
    code, out, err = run_main([command, str(rlhf_run)], capsys)
    line = error_line(code, err, f"proxima {command}: error: {rlhf_run}: an RLHF run (proxima rlhf), not a PPO run",
                      f"its trained policy is {rlhf_run / 'policy'}", str(rlhf_run / "curve.png"))
    assert "first checkpoint" not in line and "train it again" not in line
    assert sorted(p.name for p in rlhf_run.iterdir()) == ["checkpoints", "meta.json", "metrics.csv"]  # nothing written or moved


@pytest.mark.parametrize("inside", ["checkpoints/step_000002.pt", "checkpoints"])
def test_eval_of_a_checkpoint_in_an_rlhf_run_names_the_run(rlhf_run, inside, capsys):
    code, _, err = run_main(["eval", str(rlhf_run / inside)], capsys)
    error_line(code, err, f"{rlhf_run}: an RLHF run (proxima rlhf), not a PPO run")


def test_a_loose_rlhf_checkpoint_is_named_as_one_not_as_a_foreign_file(rlhf_run, tmp_path, capsys):
    loose = tmp_path / "loose.pt"
    loose.write_bytes((rlhf_run / "checkpoints" / "step_000002.pt").read_bytes())
    code, _, err = run_main(["eval", str(loose)], capsys)
    line = error_line(code, err, f"{loose}: an RLHF checkpoint (proxima rlhf), not a PPO one", "proxima resume RUN")
    assert "not a Proxima checkpoint" not in line


@pytest.mark.parametrize("item, bad", [("lr=abc", "abc"), ("lr=1e-3,abc", "abc"), ("ent_coef=0,,0.01", "")])
def test_a_sweep_value_error_names_the_sweep_item_not_a_flag_never_typed(item, bad, tmp_path, capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--sweep", item, "--dry-run", "--run-dir", str(tmp_path / "r")], capsys)
    line = error_line(code, err, f"--sweep {item}: {bad!r}: ")
    assert "--lr " not in line and "--ent-coef" not in line


def test_eval_seed_range_says_where_its_top_comes_from(tmp_path, capsys):
    code, _, err = run_main(["eval", str(tmp_path), "--seed", "2148483648"], capsys)
    error_line(code, err, "--seed 2148483648: must be an integer from 0 to 2,148,483,647 (train's largest seed, "
               "2,147,483,647, plus the 1,000,000 an eval adds to a run's seed)")
    code, _, _ = run_main(["eval", str(tmp_path / "none"), "--seed", "2148483647"], capsys)  # the top itself passes the check
    assert code == 2
    code, out, _ = run_main(["eval", "--help"], capsys)
    assert " ".join(out.split()).count("0 to 2,148,483,647") == 1 and "steps per episode at most" in " ".join(out.split())


def test_check_env_with_no_steps_says_the_env_was_never_stepped(capsys):
    code, out, _ = run_main(["check-env", "CartPole-v1", "--steps", "0"], capsys)
    assert code == 0
    lines = out.strip().splitlines()
    assert lines == ["NOTE --steps 0: the env was built and reset, never stepped; the checks of step() did not run",
                     "spaces: obs Box(4,) float32 -> 4 features, MLP 64x64 tanh; action Discrete(2) -> categorical over 2",
                     "OK: CartPole-v1 passes 10 checks"]
    code, out, _ = run_main(["check-env", "CartPole-v1", "--steps", "5"], capsys)
    # stepped: no --steps 0 note; the only note says that no episode ended, so autoreset went unchecked
    assert code == 0 and "never stepped" not in out
    assert [ln for ln in out.splitlines() if ln.startswith("NOTE")] == [
        "NOTE no episode ended in 5 steps (max_episode_steps = 500): autoreset was not checked; give --steps above 500"]


def test_resume_help_puts_the_flags_it_may_change_apart_from_those_it_checks(capsys):
    code, out, _ = run_main(["resume", "--help"], capsys)
    assert code == 0
    changes, checked = out.index("what a resume may change:"), out.index("the run's settings:")
    sections = sorted([(changes, "changes"), (checked, "checked")])

    def section(flag):
        at = out.index(f"\n  {flag}")
        return [name for start, name in sections if start < at][-1]

    for flag in ("--total-timesteps", "--checkpoint-every", "--eval-episodes", "--device", "--threads", "--run-dir"):
        assert section(flag) == "changes", flag
    for flag in ("--lr", "--num-envs", "--seed", "--gamma", "--hidden-sizes"):
        assert section(flag) == "checked", flag


def test_a_resume_prints_the_run_directory_as_typed(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", "a", "--quiet"]) == 0
    capsys.readouterr()
    code, out, _ = run_main(["resume", "a", "--total-timesteps", "128", "--quiet"], capsys)
    assert code == 0 and out.strip().splitlines()[-1] == "run directory: a"
    code, out, _ = run_main(["resume", "a/checkpoints/step_000000000128.pt", "--quiet"], capsys)
    assert code == 0 and out.strip().splitlines()[-1] == "run directory: a"


@pytest.mark.parametrize("item, line", [("gamma=0.99,2", "--sweep gamma: value 2.0: must be in (0, 1]"),
                                        ("lr=1e-3,-1", "--sweep lr: value -1.0: must be positive")])
def test_a_swept_value_out_of_range_names_the_sweep(item, line, tmp_path, capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--sweep", item, "--dry-run", "--run-dir", str(tmp_path / "r")], capsys)
    assert error_line(code, err) == f"proxima train: error: {line}"
    # a value given as a flag to every member is still named by its flag
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--gamma", "2", "--dry-run", "--run-dir", str(tmp_path / "r")],
                            capsys)
    assert error_line(code, err) == "proxima train: error: --gamma 2.0: must be in (0, 1]"
