"""s45 config review, through the CLI with a trained run or a built env: a resume's --config of another
run's config.yaml, a resume's dry run after config.yaml was edited, --preset default of an env without
presets, and a zoo entry or a one-width hidden_sizes given by --config."""
import shutil

import pytest
import yaml

from tests.cli_helpers import error_line, run_main

TINY = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--total-timesteps", "32",
        "--eval-episodes", "0", "--quiet"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """r1, a finished tiny run, and r7, a copy of it (how a run is continued elsewhere)."""
    root = tmp_path_factory.mktemp("review45")
    capsys = _NullCapture()
    code, _, err = run_main(["train", "CartPole-v1", *TINY, "--run-dir", str(root / "r1")], capsys)
    assert code == 0, err
    shutil.copytree(root / "r1", root / "r7")
    return root


class _NullCapture:
    """run_main's capsys for a module fixture (pytest's capsys is function-scoped): the output is not read."""

    def readouterr(self):
        return "", ""


# -- 5. --resume RUN --config ANOTHER_RUN/config.yaml: that file's run_dir is dropped, with a note ---------------

def test_resume_with_another_runs_config_drops_its_run_dir_with_a_note(trained, monkeypatch, capsys):
    monkeypatch.chdir(trained)
    code, out, err = run_main(["train", "--resume", "r7", "--config", "r1/config.yaml", "--dry-run"], capsys)
    assert code == 0, err
    assert "drop --run-dir" not in err
    assert (f"proxima train: note: --config r1/config.yaml: run_dir {trained / 'r1'} is that run's own directory, not "
            f"used: the resume continues r7 in its own ({(trained / 'r7').resolve()})") in err
    assert yaml.safe_load(out.split("\n#")[0])["run_dir"] == str((trained / "r7").resolve())


def test_resume_with_its_own_config_continues_there_without_a_note(trained, monkeypatch, capsys):
    monkeypatch.chdir(trained)
    code, _, err = run_main(["train", "--resume", "r1", "--config", "r1/config.yaml", "--dry-run"], capsys)
    assert code == 0, err
    assert "own directory" not in err


# -- 10a. a resume's dry run notes an edited config.yaml, as the resume does ---------------------------------------

def test_resume_dry_run_notes_an_edited_config_yaml(trained, tmp_path, capsys):
    run = tmp_path / "r"
    shutil.copytree(trained / "r1", run)
    text = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(text.replace("lr: 0.00025\n", "lr: 0.01\n"))
    assert "lr: 0.01\n" in (run / "config.yaml").read_text()
    code, out, err = run_main(["train", "--resume", str(run), "--dry-run"], capsys)
    assert code == 0, err
    assert (f"proxima: note: {run.resolve() / 'config.yaml'}: lr 0.01 differs from the checkpoint's 0.00025; resume reads "
            "the config from the checkpoint, not config.yaml") in err
    assert "lr: 0.00025\n" in out  # the dry run's config is the checkpoint's
    assert (run / "config.yaml").read_text().count("lr: 0.01\n") == 1  # nothing written


# -- 7. --preset default of an env without presets trains as without --preset --------------------------------------

def test_preset_default_of_an_env_without_presets_is_taken_with_a_note(capsys):
    env = "tests.probe_envs:ConstantReward"
    code, out, err = run_main(["train", env, "--preset", "default", "--total-timesteps", "1024", "--dry-run"], capsys)
    assert code == 0, err
    assert (f"proxima train: note: --preset default: {env} has no presets; it trains on PPOConfig's defaults") in err
    code, plain, _ = run_main(["train", env, "--total-timesteps", "1024", "--dry-run"], capsys)
    assert out == plain


# -- 2 and 9 through --config ---------------------------------------------------------------------------------------

def test_a_zoo_entry_file_is_refused_naming_the_env_id(tmp_path, capsys):
    (tmp_path / "zoo.yaml").write_text("CartPole-v1:\n  n_envs: 8\n  n_steps: 32\n  policy: 'MlpPolicy'\n")
    code, _, err = run_main(["train", "--config", str(tmp_path / "zoo.yaml"), "--dry-run"], capsys)
    error_line(code, err, f"proxima train: error: {tmp_path / 'zoo.yaml'}: 'CartPole-v1' is an env id: an rl-zoo entry's "
                          "keys go at the top level of the file; give the id as ENV_ID")


def test_a_files_single_hidden_width_trains_one_layer(tmp_path, capsys):
    (tmp_path / "h.yaml").write_text("hidden_sizes: 64\n")
    code, out, err = run_main(["train", "CartPole-v1", "--config", str(tmp_path / "h.yaml"), "--dry-run"], capsys)
    assert code == 0, err
    assert yaml.safe_load(out.split("\n#")[0])["hidden_sizes"] == [64]
    code, out, err = run_main(["train", "CartPole-v1", "--hidden-sizes", "[64, 32]", "--dry-run"], capsys)
    assert code == 0, err
    assert yaml.safe_load(out.split("\n#")[0])["hidden_sizes"] == [64, 32]
