"""Review 37 (checkpoint trust): an edited checkpoint is one line naming the file and the field, never a
traceback nor a silent load: a sparse or meta tensor, weights or optimizer state of another dtype, Adam
settings or an env backend other than Proxima writes, a negative second moment, counters that disagree
with the file's name (eval and report check them as resume does)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from proxima import checkpoint as ckpt
from tests.cli_helpers import TINY_RUN, edit_checkpoint, error_line, run_main, tiny_cartpole_run


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    return tiny_cartpole_run(tmp_path_factory, "trust37")


def edited(run: Path, tmp_path: Path, edit) -> Path:
    """A copy of the run whose (only) checkpoint ``edit(state)`` changed."""
    copy = Path(shutil.copytree(run, tmp_path / "run", symlinks=True))
    edit_checkpoint(copy, edit)
    return copy


def _set(field: str, make):
    def edit(state):
        state["agent"][field] = make(state["agent"][field])
    return edit


# -- bug 2: a tensor that is not a plain strided CPU tensor ---------------------------------------------------------

@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support")
@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
@pytest.mark.parametrize("make, kind", [(lambda t: t.to_sparse(), "sparse_coo"), (lambda t: t.to_sparse_csr(), "sparse_csr"),
                                        (lambda t: t.to("meta"), "meta"),
                                        (lambda t: torch.quantize_per_tensor(t, 0.01, 0, torch.qint8), "quantized")])
def test_a_sparse_or_meta_weight_is_one_line_naming_the_key(finished, tmp_path, capsys, make, kind):
    run = edited(finished, tmp_path, _set("actor.0.weight", make))
    code, _, err = run_main(["eval", str(run), "--episodes", "1"], capsys)
    error_line(code, err, "step_000000000128.pt: agent.actor.0.weight is a " + kind + " tensor, not a plain (strided CPU) tensor")


@pytest.mark.parametrize("command", [["resume", "{run}", "--quiet"],
                                     ["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--init-from", "{run}",
                                      "--run-dir", "{tmp}/new", "--quiet"]])
def test_a_sparse_optimizer_moment_is_refused_by_resume_and_init_from(finished, tmp_path, capsys, command):
    def edit(state):
        state["optimizer"]["state"][0]["exp_avg"] = state["optimizer"]["state"][0]["exp_avg"].to_sparse()
    run = edited(finished, tmp_path, edit)
    argv = [a.format(run=run, tmp=tmp_path) for a in command]
    code, _, err = run_main(argv, capsys)
    error_line(code, err, "optimizer.state.0.exp_avg is a sparse_coo tensor")


# -- bug 3: dtypes ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("make, words", [(lambda t: t.long(), "agent.actor.0.weight has dtype int64; Proxima writes weights"),
                                         (lambda t: t.bool(), "agent.actor.0.weight has dtype bool; Proxima writes weights"),
                                         (lambda t: t.double(), "agent.actor.0.weight has dtype float64; Proxima writes this weight as float32")])
def test_weights_of_another_dtype_are_refused_naming_key_and_dtype(finished, tmp_path, capsys, make, words):
    run = edited(finished, tmp_path, _set("actor.0.weight", make))
    for argv in (["eval", str(run), "--episodes", "1"],
                 ["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--init-from", str(run),
                  "--run-dir", str(tmp_path / "new"), "--quiet"]):
        code, _, err = run_main(argv, capsys)
        error_line(code, err, words)
    assert not (tmp_path / "new").exists()


def test_a_float64_weight_is_refused_by_resume(finished, tmp_path, capsys):
    run = edited(finished, tmp_path, _set("critic.0.bias", lambda t: t.double()))
    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)
    error_line(code, err, "agent.critic.0.bias has dtype float64; Proxima writes this weight as float32")


@pytest.mark.parametrize("key, make, words", [
    ("exp_avg", lambda t: t.long(), "optimizer.state.0.exp_avg has dtype int64; Proxima writes the optimizer's state as floating point"),
    ("exp_avg", lambda t: t.double(), "optimizer.state.0.exp_avg has dtype float64; Proxima writes it as its parameter's float32"),
    ("exp_avg_sq", lambda t: -t - 1.0, "optimizer.state.0.exp_avg_sq holds 256 negative value(s) of 256 (it is >= 0)"),
    ("exp_avg_sq", lambda t: torch.full_like(t, -1e-8), "optimizer.state.0.exp_avg_sq holds 256 negative value(s) of 256"),
    ("step", lambda t: torch.full_like(t, -3.0), "optimizer.state.0.step holds 1 negative value(s) of 1")])
def test_optimizer_state_of_another_dtype_or_negative_moment_is_refused(finished, tmp_path, capsys, key, make, words):
    def edit(state):
        state["optimizer"]["state"][0][key] = make(state["optimizer"]["state"][0][key])
    run = edited(finished, tmp_path, edit)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "192", "--quiet"], capsys)
    line = error_line(code, err, words)
    assert "--lr" not in line  # the file's damage, not the learning rate


# -- bug 5: Adam settings, lr and env_backend as Proxima writes them ------------------------------------------------

@pytest.mark.parametrize("key, value, words", [("eps", 10.0, "optimizer.param_groups[0].eps is 10.0; Proxima's optimizer uses 1e-05"),
                                               ("betas", (0.5, 0.999), "optimizer.param_groups[0].betas is (0.5, 0.999); "
                                                                       "Proxima's optimizer uses (0.9, 0.999)"),
                                               ("weight_decay", 0.1, "optimizer.param_groups[0].weight_decay is 0.1; "),
                                               ("amsgrad", True, "optimizer.param_groups[0].amsgrad is True; "),
                                               ("maximize", True, "optimizer.param_groups[0].maximize is True; ")])
def test_edited_adam_settings_are_refused_naming_the_field(finished, tmp_path, capsys, key, value, words):
    def edit(state):
        state["optimizer"]["param_groups"][0][key] = value
    run = edited(finished, tmp_path, edit)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "192", "--quiet"], capsys)
    error_line(code, err, words)
    assert [p.name for p in ckpt.list_checkpoints(run)] == ["step_000000000128.pt"]  # nothing trained


def test_an_edited_lr_without_annealing_is_refused(tmp_path, capsys):
    from proxima import cli

    run = tmp_path / "fixed"
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--no-anneal-lr", "--lr", "0.001",
                     "--run-dir", str(run), "--quiet"]) == 0
    capsys.readouterr()

    def edit(state):
        state["optimizer"]["param_groups"][0]["lr"] = torch.tensor(0.5)
    edit_checkpoint(run, edit)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "128", "--quiet"], capsys)
    error_line(code, err, "optimizer.param_groups[0].lr is 0.5; the run's recorded lr is 0.001")


def test_an_env_backend_edited_away_from_the_saved_env_state_is_refused(finished, tmp_path, capsys):
    def edit(state):
        assert state["env_backend"] == "native" and state["env"] is not None
        state["env_backend"] = "gymnasium"
    run = edited(finished, tmp_path, edit)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "192", "--quiet"], capsys)
    error_line(code, err, "env_backend is 'gymnasium', but the file holds the env state its recorded config's native env writes")
    assert "restarts episodes" not in err


# -- bug 4: eval and report check the counters and the file's name as resume does ----------------------------------

@pytest.mark.parametrize("edit, words", [
    (lambda s: s.update(global_step=999_999), "global_step 999,999 does not match iteration 2"),
    (lambda s: s.update(global_step=torch.tensor(128)), "global_step is tensor(128), not an integer >= 0"),
    (lambda s: s.update(global_step=64, iteration=1), "global_step 64 does not match the file's name (step 128)")])
def test_eval_and_report_check_the_counters_as_resume_does(finished, tmp_path, capsys, edit, words):
    run = edited(finished, tmp_path, edit)
    code, out, err = run_main(["eval", str(run), "--episodes", "1"], capsys)
    error_line(code, err, "step_000000000128.pt: " + words)
    assert "999,999" not in out
    code, _, err = run_main(["report", str(run), "--episodes", "1"], capsys)
    assert code == 0, err
    assert f"could not evaluate: {ckpt.list_checkpoints(run)[-1]}: {words}" in (run / "report.md").read_text()
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "192", "--quiet"], capsys)
    error_line(code, err, words)


# -- bug 1: an edited eval.json or config.yaml is named, not shown as fact ------------------------------------------

@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """A finished run with an eval.json of 3 episodes."""
    from proxima import cli

    run = tmp_path_factory.mktemp("trust37ev") / "run"
    flags = [a for a in TINY_RUN if a not in ("--eval-episodes", "0")]
    assert cli.main(["train", "CartPole-v1", *flags, "--eval-episodes", "3", "--total-timesteps", "64",
                     "--run-dir", str(run), "--quiet"]) == 0
    return run


def copied(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "run", symlinks=True))


def test_an_eval_json_whose_mean_disagrees_with_its_returns_is_named_by_report_and_evaluated_again_by_resume(
        evaluated, tmp_path, capsys):
    import json

    run = copied(evaluated, tmp_path)
    saved = json.loads((run / "eval.json").read_text())
    true_mean = sum(saved["returns"]) / len(saved["returns"])
    assert true_mean != 500.0
    saved.update(mean_return=500.0, std_return=0.0)
    (run / "eval.json").write_text(json.dumps(saved))
    code, _, err = run_main(["report", str(run)], capsys)
    assert code == 0, err
    text = (run / "report.md").read_text()
    assert (f"- {run / 'eval.json'}: mean_return 500.00 and std_return 0.00 disagree with its returns (mean {true_mean:.2f}, "
            "std ") in text
    assert "the file was edited" in text
    code, out, err = run_main(["resume", str(run)], capsys)
    assert code == 0, err
    assert "500.00" not in out and f"{true_mean:.2f}" in out  # measured again, not the edited headline
    assert json.loads((run / "eval.json").read_text())["mean_return"] == pytest.approx(true_mean)


def test_an_unedited_run_gets_no_edit_note(evaluated, tmp_path, capsys):
    run = copied(evaluated, tmp_path)
    code, _, err = run_main(["report", str(run)], capsys)
    assert code == 0, err
    assert "was edited" not in (run / "report.md").read_text()


@pytest.mark.parametrize("field, value, shown", [("env_id", "Acrobot-v1", "env_id 'Acrobot-v1' differs from"),
                                                 ("seed", 7, "seed 7 differs from"),
                                                 ("hidden_sizes", [8], "hidden_sizes `[8]` differs from")])
def test_report_notes_a_config_yaml_that_disagrees_with_the_checkpoint(evaluated, tmp_path, capsys, field, value, shown):
    import yaml

    run = copied(evaluated, tmp_path)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg[field] = value
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    code, _, err = run_main(["report", str(run)], capsys)
    assert code == 0, err
    notes = [ln for ln in (run / "report.md").read_text().splitlines() if "config.yaml was edited" in ln]
    assert notes == [f"- {run / 'config.yaml'}: {shown} {ckpt.list_checkpoints(run)[-1]}'s recorded "
                     f"{ {'env_id': repr('CartPole-v1'), 'seed': '1', 'hidden_sizes': '`[64, 64]`'}[field]}: config.yaml "
                     "was edited after the run wrote it; the checkpoint's config is what trained"]


# -- ux 8: report.md shows meta.json's strings, never renders them ---------------------------------------------------

def test_report_md_puts_markup_from_meta_json_in_code_spans(evaluated, tmp_path, capsys):
    import json

    run = copied(evaluated, tmp_path)
    meta = json.loads((run / "meta.json").read_text())
    meta["git_commit"], meta["git_dirty"] = "[click me](http://evil.example)", False
    meta["command"] = ["proxima", "train", "<img src=x onerror=alert(1)>"]
    (run / "meta.json").write_text(json.dumps(meta))
    code, _, err = run_main(["report", str(run)], capsys)
    assert code == 0, err
    text = (run / "report.md").read_text()
    assert "| git commit | `[click me](http://evil.example)` |" in text
    assert "| command | `proxima train '<img src=x onerror=alert(1)>'` |" in text
    for line in text.splitlines():  # nowhere outside a code span
        if "evil.example" in line or "<img" in line:
            assert line.count("`") >= 2, line


# -- mutation review 37 (mut4): survivors ---------------------------------------------------------------------------

def test_a_fixed_default_lr_run_resumes_though_the_lr_is_not_exact_in_float32(tmp_path, capsys):
    """Adam keeps 2.5e-4 (the default lr) as float32 0.000250000011...: not an edit."""
    from proxima import cli

    run = tmp_path / "fixed"
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--no-anneal-lr",
                     "--run-dir", str(run), "--quiet"]) == 0
    capsys.readouterr()
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "128", "--quiet"], capsys)
    assert code == 0, err
    assert "error" not in err and "config.yaml" not in err, err  # --total-timesteps is resume-safe: no edit note
    assert [p.name for p in ckpt.list_checkpoints(run)][-1] == "step_000000000128.pt"


def test_eval_checks_the_counters_of_a_one_env_run(tmp_path, capsys):
    from proxima import cli

    run = tmp_path / "one"
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--num-envs", "1", "--num-steps", "32", "--total-timesteps", "64",
                     "--run-dir", str(run), "--quiet"]) == 0
    capsys.readouterr()
    path = edit_checkpoint(run, lambda s: s.update(global_step=s["iteration"] * 32 + 32))
    path.rename(path.with_name("step_000000000096.pt"))  # the name agrees: only the counters disagree
    code, _, err = run_main(["eval", str(run), "--episodes", "1"], capsys)
    error_line(code, err, "global_step 96 does not match iteration 2")


def test_train_resume_dry_run_refuses_a_renamed_checkpoint(finished, tmp_path, capsys):
    run = copied(finished, tmp_path)
    (run / "checkpoints" / "step_000000000128.pt").rename(run / "checkpoints" / "step_000000000256.pt")
    code, _, err = run_main(["train", "CartPole-v1", "--resume", str(run), "--dry-run"], capsys)
    error_line(code, err, "does not match the file's name")


def test_a_non_string_env_backend_is_refused_without_env_state(finished, tmp_path, capsys):
    def edit(state):
        state["env_backend"], state["env"] = 5, None
    run = edited(finished, tmp_path, edit)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "192", "--quiet"], capsys)
    error_line(code, err, "env_backend is 5")


def _report_notes(run: Path, capsys, **fields) -> list:
    import yaml

    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg.update(fields)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    code, _, err = run_main(["report", str(run)], capsys)
    assert code == 0, err
    return [ln for ln in (run / "report.md").read_text().splitlines() if "was edited" in ln]


@pytest.mark.parametrize("fields", [{"env_id": "gymnasium.envs.classic_control:CartPole-v1"},
                                    {"total_timesteps": 999, "eval_episodes": 7}])
def test_report_notes_no_edit_for_the_same_env_or_resume_safe_fields(evaluated, tmp_path, capsys, fields):
    assert _report_notes(copied(evaluated, tmp_path), capsys, **fields) == []


def test_report_names_every_edited_config_field(evaluated, tmp_path, capsys):
    notes = _report_notes(copied(evaluated, tmp_path), capsys, seed=7, hidden_sizes=[8])
    assert len(notes) == 1 and "hidden_sizes `[8]` (and seed) differs from" in notes[0], notes


def test_an_eval_json_with_only_its_std_edited_is_noticed(evaluated, tmp_path, capsys):
    import json

    run = copied(evaluated, tmp_path)
    saved = json.loads((run / "eval.json").read_text())
    saved["std_return"] += 0.5
    (run / "eval.json").write_text(json.dumps(saved))
    code, _, err = run_main(["report", str(run)], capsys)
    assert code == 0, err
    assert "disagree with its returns" in (run / "report.md").read_text()


@pytest.mark.parametrize("data", [{"returns": [float("nan"), 1.0], "mean_return": float("nan"), "std_return": float("nan")},
                                  {"returns": [], "mean_return": 0.0, "std_return": 0.0},
                                  {"returns": [True, False], "mean_return": 0.0, "std_return": 0.0}])
def test_edited_summary_has_nothing_to_say_of_returns_it_cannot_compare(data):
    from proxima.evaluate import edited_summary

    assert edited_summary(data) is None
    assert edited_summary({"returns": [1.0, 3.0], "mean_return": 2.0, "std_return": 1.5}) is not None  # it does compare


def test_report_md_fences_backticks_and_shows_a_link_like_env_id_as_code(evaluated, tmp_path, capsys):
    import json

    import yaml

    run = copied(evaluated, tmp_path)
    meta = json.loads((run / "meta.json").read_text())
    meta["git_commit"], meta["git_dirty"] = "`[x](http://e)`", False
    meta["command"] = ["proxima", "train", "a>b"]
    (run / "meta.json").write_text(json.dumps(meta))
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["env_id"] = "[x](http://e)"
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    code, _, err = run_main(["report", str(run)], capsys)
    assert code == 0, err
    text = (run / "report.md").read_text()
    assert "| git commit | `` `[x](http://e)` `` |" in text
    assert "# Proxima report: `[x](http://e)`" in text.splitlines()
    assert "| command | `proxima train 'a>b'` |" in text
