"""Mutation survivors of session 46's RLHF fixes, killed: an RLHF run or checkpoint given to a PPO reader is
named as its own (a run directory with a space quoted in the resume line, a checkpoint named from inside
RUN/checkpoints/, one in a folder that records no RLHF run, one under a PPO checkpoint's name), and a PPO
run is never called an RLHF run; TRL's flags get their exact hint, and resume keeps PPO's hint for a TRL
name that is also a PPO flag; a reward spec without its function names the module or package meant and
the functions its source defines; a keyword-only or positional-only column is named when missing; a new
run's failed step 1 takes back only the folders it made."""

import shlex
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from proxima.rlhf.config import ConfigError
from proxima.rlhf.rewards import RewardBatch, RewardError, RewardFunction, load_reward
from tests.cli_helpers import run_main

SPACED = "my run"  # a run directory whose name needs quoting in a shell


@pytest.fixture(scope="module")
def work(assets, tmp_path_factory):
    """A 2-step RLHF run in ``my run`` (checkpoints step_000001.pt and step_000002.pt)."""
    from proxima.rlhf import RLHFConfig, train_rlhf

    folder = tmp_path_factory.mktemp("mut46")
    train_rlhf(RLHFConfig(policy=str(assets / "model"), prompts=str(assets / "prompts.txt"),
                          reward="proxima.rlhf.demo:keyword_sentiment", batch_size=4, num_minibatches=1, update_epochs=1,
                          max_new_tokens=2, steps=2, print_every=0, sample_every=0, checkpoint_every=1, plot=False,
                          run_dir=str(folder / SPACED)))
    assert sorted(p.name for p in (folder / SPACED / "checkpoints").iterdir()) == ["step_000001.pt", "step_000002.pt"]
    return folder


def one_error(argv: list, capsys) -> str:
    code, out, err = run_main(argv, capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def rlhf_file_line(file: str, run: str) -> str:
    return (f"{file}: a checkpoint of the RLHF run {run} (proxima rlhf), not a PPO one: continue it with proxima resume "
            f"{shlex.quote(run)} [--steps N]; its trained policy is {Path(run) / 'policy'} (docs/rlhf.md)")


GENERIC = ("{}: an RLHF checkpoint (proxima rlhf), not a PPO one: continue its run with proxima resume RUN; its trained "
           "policy is RUN/policy (docs/rlhf.md)")


# ---------------------------------------------------------------------------------------------
# an RLHF run or checkpoint given to a PPO reader
# ---------------------------------------------------------------------------------------------
def test_a_run_directory_with_a_space_is_quoted_in_the_resume_the_line_names(work, monkeypatch, capsys):
    monkeypatch.chdir(work)
    file = f"{SPACED}/checkpoints/step_000002.pt"
    line = one_error(["resume", file], capsys)
    assert line == "proxima resume: error: " + rlhf_file_line(file, SPACED), line
    assert "proxima resume 'my run' [--steps N]" in line  # pasted into a shell, it names one argument


def test_a_checkpoint_named_from_inside_the_runs_checkpoints_folder_names_the_run(work, monkeypatch, capsys):
    monkeypatch.chdir(work / SPACED / "checkpoints")
    run = str((work / SPACED).resolve())
    line = one_error(["resume", "step_000002.pt"], capsys)
    assert line == "proxima resume: error: " + rlhf_file_line("step_000002.pt", run), line
    line = one_error(["train", "--resume", "step_000001.pt"], capsys)
    assert line == "proxima train: error: " + rlhf_file_line("step_000001.pt", run), line


def test_a_ppo_run_without_checkpoints_is_not_called_an_rlhf_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ppo_run").mkdir()
    (tmp_path / "ppo_run" / "meta.json").write_text('{"kind": "ppo"}')
    line = one_error(["train", "--resume", "ppo_run"], capsys)
    assert "RLHF" not in line and "proxima rlhf" not in line, line
    assert line.startswith("proxima train: error: ppo_run: the run stopped before its first checkpoint"), line


def test_an_rlhf_checkpoint_in_a_folder_that_records_no_rlhf_run_gets_no_restore_or_start_over(work, tmp_path,
                                                                                              monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "other" / "checkpoints").mkdir(parents=True)
    for name in ("step_000001.pt", "step_000002.pt"):  # copied out of their run, without its meta.json
        shutil.copy(work / SPACED / "checkpoints" / name, tmp_path / "other" / "checkpoints" / name)
    for argv in (["resume", "other/checkpoints/step_000001.pt"], ["train", "--resume", "other/checkpoints/step_000001.pt"]):
        line = one_error(argv, capsys)
        assert line == f"proxima {argv[0]}: error: " + GENERIC.format("other/checkpoints/step_000001.pt"), line
    assert sorted(p.name for p in (tmp_path / "other" / "checkpoints").iterdir()) == ["step_000001.pt", "step_000002.pt"]


def test_load_of_a_folder_whose_newest_checkpoint_is_an_rlhf_one_names_no_other_checkpoint(work, tmp_path, monkeypatch):
    import proxima
    from proxima.checkpoint import RLHFRunError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mixed" / "checkpoints").mkdir(parents=True)
    shutil.copy(work / SPACED / "checkpoints" / "step_000002.pt", tmp_path / "mixed" / "checkpoints" / "step_000000000002.pt")
    with pytest.raises(RLHFRunError) as e:
        proxima.load("mixed")
    assert str(e.value) == GENERIC.format("mixed/checkpoints/step_000000000002.pt")


# ---------------------------------------------------------------------------------------------
# TRL's flags
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("flag, meant", [
    ("--response-length", "--max-new-tokens (TRL's --response-length)"),
    ("--lam", "--gae-lambda (TRL's --lam)"),
    ("--max-steps", "--steps (TRL's --max-steps)"),
])
def test_a_trl_flag_without_a_note_is_named_in_one_clause(flag, meant, capsys):
    line = one_error(["rlhf", flag, "3"], capsys)
    assert line == (f"proxima rlhf: error: unrecognized arguments: {flag} 3; did you mean {meant}? "
                    "(see proxima rlhf --help)"), line


@pytest.mark.parametrize("flag, meant", [("--max-steps", "--steps (TRL's --max-steps)"),
                                         ("--total-episodes", "--steps (TRL's --total-episodes; the run's responses are "
                                                              "--steps x --batch-size x processes)")])
def test_resume_given_a_trl_name_of_the_steps_names_steps(flag, meant, tmp_path, capsys):
    line = one_error(["resume", str(tmp_path), flag, "4"], capsys)
    assert line == (f"proxima resume: error: unrecognized arguments: {flag} 4; did you mean {meant}? "
                    "(see proxima resume --help)"), line


@pytest.mark.parametrize("flag, ours", [("--num-ppo-epochs", "--update-epochs"), ("--num-mini-batches", "--num-minibatches"),
                                        ("--save-steps", "--checkpoint-every"), ("--save-total-limit", "--keep-checkpoints")])
def test_resume_given_a_trl_name_of_any_other_setting_says_what_an_rlhf_resume_takes(flag, ours, tmp_path, capsys):
    # its flag here is PPO's on resume, which an RLHF run's resume refuses ('PPO flags do not apply to it'):
    # the line says what the resume takes, and the new run's flag
    line = one_error(["resume", str(tmp_path), flag, "4"], capsys)
    assert line == (f"proxima resume: error: unrecognized arguments: {flag} 4; {flag} is a setting of proxima rlhf, recorded "
                    "in the run's config.yaml: an RLHF run's resume takes only --steps N, --trust-run and --quiet (a new run "
                    f"with other settings: proxima rlhf --config RUN/config.yaml {ours} ...) (see proxima resume --help)"), line


# ---------------------------------------------------------------------------------------------
# a reward named without its function
# ---------------------------------------------------------------------------------------------
def spec_error(spec: str, folder: Path, import_path="given") -> str:
    with pytest.raises(ConfigError) as e:
        if import_path == "given":
            load_reward(spec, torch.device("cpu"), import_path=[str(folder)])
        else:
            load_reward(spec, torch.device("cpu"))
    return str(e.value)


@pytest.fixture
def reward_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("def package_level(prompts, responses):\n    return [0.0] * len(responses)\n")
    (tmp_path / "pkg" / "mod.py").write_text("def exact(prompts, responses):\n    return [1.0] * len(responses)\n\n"
                                             "async def judged(prompts, responses):\n    return []\n")
    (tmp_path / "many.py").write_text("".join(f"def f{i}(prompts, responses):\n    return []\n\n" for i in range(1, 10)))
    (tmp_path / "broken.py").write_text("def ok(prompts, responses):\n    return [0.0 for r in responses\n")
    (tmp_path / "my-rewards.py").write_text("def brevity(prompts, responses):\n    return []\n")
    return tmp_path


def test_a_module_of_a_package_is_named_as_that_module_not_as_a_function_of_the_package(reward_folder):
    assert spec_error("pkg.mod", reward_folder) == (
        "--reward 'pkg.mod': name the function: pkg.mod:FUNCTION (pkg/mod.py defines exact, judged)")


def test_a_function_of_a_package_named_with_a_dot_lists_its_init_functions(reward_folder):
    assert spec_error("pkg.package_level", reward_folder) == (
        "--reward 'pkg.package_level': name the function after a colon: pkg:package_level "
        "(pkg/__init__.py defines package_level)")


def test_a_dotted_spec_of_a_module_not_found_names_the_colon_form(reward_folder):
    assert spec_error("nomodule.brevity", reward_folder) == (
        "--reward 'nomodule.brevity': neither a reward-model directory nor module:function (or file.py:function); "
        "a function of module nomodule: nomodule:brevity")
    assert spec_error("nomodule", reward_folder) == (
        "--reward 'nomodule': neither a reward-model directory nor module:function (or file.py:function)")


def test_a_file_with_many_functions_lists_eight_and_counts_them(reward_folder):
    assert spec_error("many.py", reward_folder) == (
        "--reward 'many.py': name the function: many.py:FUNCTION (it defines f1, f2, f3, f4, f5, f6, f7, f8, ... "
        "(9 in all))")


def test_a_file_that_does_not_parse_gets_the_form_without_a_list(reward_folder):
    assert spec_error("broken.py", reward_folder) == "--reward 'broken.py': name the function: broken.py:FUNCTION"


def test_a_module_name_python_cannot_import_is_not_offered_as_a_module(reward_folder):
    assert spec_error("my-rewards", reward_folder) == (
        "--reward 'my-rewards': neither a reward-model directory nor module:function (or file.py:function)")


def test_without_an_import_path_the_working_directory_is_searched(reward_folder):
    assert spec_error("pkg.mod", reward_folder, import_path=None) == (
        "--reward 'pkg.mod': name the function: pkg.mod:FUNCTION (pkg/mod.py defines exact, judged)")


# ---------------------------------------------------------------------------------------------
# a reward's missing column
# ---------------------------------------------------------------------------------------------
class Row:
    def __init__(self, prompt, columns, line):
        self.prompt, self.columns, self.line, self.is_conversation = prompt, columns, line, False


def _batch(columns: dict) -> RewardBatch:
    return RewardBatch(rows=[Row("2 + 3 =", columns, 1)], responses=["5"], texts=["2 + 3 = 5"], step=2)


def test_a_keyword_only_column_missing_is_named_as_a_column():
    def scored(prompts, responses, *, answer):
        return [float(a) for a in answer]

    reward = RewardFunction(scored, "m:scored", "scored")
    assert reward.required == ["answer"]
    with pytest.raises(RewardError, match=r"^reward m:scored at step 2: scored\(\) needs a column 'answer', which the "
                                          r"prompts file does not have \(its rows have 'label'\)"):
        reward(_batch({"label": 5}))
    assert reward(_batch({"answer": 5})) == [5.0]


def test_a_positional_only_prompts_and_responses_are_not_columns():
    def scored(prompts, responses, /, answer):
        return [float(a) for a in answer]

    reward = RewardFunction(scored, "m:scored", "scored")
    assert reward.required == ["answer"]
    assert reward(_batch({"answer": 7})) == [7.0]
    with pytest.raises(RewardError, match=r"scored\(\) needs a column 'answer'"):
        reward(_batch({}))


def test_a_module_outside_the_working_directory_is_shown_by_its_full_path(reward_folder, monkeypatch):
    (reward_folder / "elsewhere").mkdir()
    monkeypatch.chdir(reward_folder / "elsewhere")
    assert spec_error("pkg.mod", reward_folder) == (
        f"--reward 'pkg.mod': name the function: pkg.mod:FUNCTION ({reward_folder / 'pkg' / 'mod.py'} defines exact, judged)")


# ---------------------------------------------------------------------------------------------
# --lora's silenced warnings are that call's only
# ---------------------------------------------------------------------------------------------
def test_apply_lora_leaves_the_warning_filters_as_they_were(assets, tiny_cfg):
    from transformers import AutoModelForCausalLM

    from proxima.rlhf.models import apply_lora

    model = AutoModelForCausalLM.from_pretrained(assets / "model")
    before = list(warnings.filters)
    adapted = apply_lora(model, tiny_cfg(lora=True), "CAUSAL_LM")
    assert list(warnings.filters) == before
    assert any("lora_" in name for name, _ in adapted.named_parameters())
    with warnings.catch_warnings(record=True) as caught:  # the user's own warning of those words is still shown
        warnings.simplefilter("default")
        warnings.warn("fan_in_fan_out is set to False in my own code", UserWarning)
    assert [str(w.message) for w in caught] == ["fan_in_fan_out is set to False in my own code"]


# ---------------------------------------------------------------------------------------------
# a reward failing: at step 1 of a new run nothing is kept (only the folders the run made go), at step 2
# the checkpoint of step 1 is written
# ---------------------------------------------------------------------------------------------
FLAKY = '''CALLS = [0]


def flaky(prompts, responses):
    CALLS[0] += 1
    return [0.0] * len(responses) if CALLS[0] <= {ok} else [0.0]
'''


def test_a_reward_failing_at_step_2_of_a_new_run_writes_the_checkpoint_of_step_1(assets, tmp_path):
    from proxima.rlhf import RLHFConfig, train_rlhf

    (tmp_path / "flaky.py").write_text(FLAKY.format(ok=2))  # the trial call and step 1 score 4 responses
    with pytest.raises(RewardError) as e:
        train_rlhf(RLHFConfig(policy=str(assets / "model"), prompts=str(assets / "prompts.txt"),
                              reward=f"{tmp_path / 'flaky.py'}:flaky", batch_size=4, num_minibatches=1, update_epochs=1,
                              max_new_tokens=2, steps=3, print_every=0, sample_every=0, checkpoint_every=0, plot=False,
                              run_dir=str(tmp_path / "run")))
    assert "at step 2: returned 1 scores for 4 responses; checkpoint of step 1 written" in str(e.value), str(e.value)
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step_000001.pt"]


def test_a_reward_failing_at_step_1_leaves_the_folders_above_the_run_that_were_there(assets, tmp_path, monkeypatch,
                                                                                     capsys):
    (tmp_path / "flaky.py").write_text(FLAKY.format(ok=1))
    (tmp_path / "mine").mkdir()  # the user's own empty folder, made before the run
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["rlhf", "--policy", str(assets / "model"), "--prompts", str(assets / "prompts.txt"),
                             "--reward", "flaky.py:flaky", "--steps", "2", "--batch-size", "4", "--num-minibatches", "1",
                             "--update-epochs", "1", "--max-new-tokens", "2", "--print-every", "0", "--sample-every", "0",
                             "--no-plot", "--run-dir", "mine/new/deeper/run"], capsys)
    assert code == 2, err
    assert err.strip().endswith("the new run keeps nothing, so the same command runs again once the reward is fixed"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flaky.py", "mine"]
    assert list((tmp_path / "mine").iterdir()) == []  # new/deeper/, both made by the run, went


def test_a_reward_failing_at_the_first_step_of_a_resume_writes_the_checkpoint_it_resumed(assets, tmp_path):
    from proxima.rlhf import RLHFConfig, train_rlhf
    from proxima.rlhf.api import resume

    (tmp_path / "flaky.py").write_text(FLAKY.format(ok=1000))
    run = train_rlhf(RLHFConfig(policy=str(assets / "model"), prompts=str(assets / "prompts.txt"),
                                reward=f"{tmp_path / 'flaky.py'}:flaky", batch_size=4, num_minibatches=1, update_epochs=1,
                                max_new_tokens=2, steps=1, print_every=0, sample_every=0, checkpoint_every=1, plot=False,
                                run_dir=str(tmp_path / "run")))
    (tmp_path / "flaky.py").write_text(FLAKY.format(ok=1))  # the resume's trial call passes, its step 2 fails
    with pytest.raises(RewardError) as e:
        resume(run, steps=2, trust_run=True, quiet=True)
    assert "at step 2: returned 1 scores for 4 responses; checkpoint of step 1 written" in str(e.value), str(e.value)
    assert "keeps nothing" not in str(e.value)
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step_000001.pt"]
    assert (tmp_path / "run" / "summary.json").is_file()


# ---------------------------------------------------------------------------------------------
# metrics.csv's cells and the progress line round alike, at 6 significant digits
# ---------------------------------------------------------------------------------------------
def test_metrics_are_logged_at_six_significant_digits_and_the_progress_line_reads_them_so():
    from proxima.rlhf.loop import progress_line
    from proxima.rlhf.rundir import as_logged, as_logged_text

    assert as_logged_text(1 / 3) == "0.333333" and as_logged_text(-0.41250049) == "-0.4125"
    assert as_logged(-0.41250049) == -0.4125
    metrics = {"objective/scores": -0.41250049, "objective/kl": 0.0004999999, "objective/kl_coef": 0.05,
               "val/response_length": 4.0, "val/eos_rate": 1.0, "val/ratio": 1.0, "charts/seconds_per_step": 0.1}
    assert progress_line(2, 3, metrics).startswith("step 2/3  score -0.412  kl 0.001  beta 0.05  len 4.0  eos 1.00")


def test_an_rlhf_checkpoint_newest_in_a_ppo_runs_folder_is_named_and_kept_not_set_aside(work, tmp_path_factory,
                                                                                         monkeypatch, capsys):
    # newest_that_loads took the RLHF file for a damaged one: it was renamed *.corrupt and the older PPO
    # checkpoint resumed in its place (or, with none older, the line ended in restore / start over)
    from tests.cli_helpers import tiny_cartpole_run

    run = tiny_cartpole_run(tmp_path_factory, "mixed46")
    monkeypatch.chdir(run.parent)
    before = sorted(p.name for p in (run / "checkpoints").iterdir())
    shutil.copy(work / SPACED / "checkpoints" / "step_000002.pt", run / "checkpoints" / "step_000000999999.pt")
    line = one_error(["resume", "run"], capsys)
    assert line.startswith("proxima resume: error: run/checkpoints/step_000000999999.pt: an RLHF checkpoint"), line
    assert "restore a copy" not in line and "start over" not in line and ".corrupt" not in line, line
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == sorted(before + ["step_000000999999.pt"])


def test_resume_of_an_rlhf_checkpoint_file_with_steps_names_its_runs_resume_and_that_resume_runs(work, tmp_path, monkeypatch,
                                                                                                   capsys):
    # it said 'give its directory (proxima resume RUN_DIR --steps N)', naming no directory
    shutil.copytree(work / SPACED, tmp_path / SPACED)
    monkeypatch.chdir(tmp_path)
    line = one_error(["resume", f"{SPACED}/checkpoints/step_000002.pt", "--steps", "3"], capsys)
    assert line == (f"proxima resume: error: --steps: {SPACED}/checkpoints/step_000002.pt is a checkpoint of the RLHF run "
                    f"{SPACED}; --steps extends the run from its directory: proxima resume '{SPACED}' --steps 3"), line
    code, _, err = run_main(["resume", SPACED, "--steps", "3", "--quiet"], capsys)  # the line's command, pasted
    assert code == 0, err
    assert (tmp_path / SPACED / "checkpoints" / "step_000003.pt").is_file()
