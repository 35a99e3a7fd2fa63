"""Stable-Baselines3's and CleanRL's flag names on the command line: an unknown one is sent to the
flag that means it here (config.FOREIGN_NAMES), not to the nearest spelling difflib finds
(--clip-range was told --clip-reward, --batch-size --hidden-sizes, --lam --amp, --cuda --cudagraphs)."""

from __future__ import annotations

import pytest

from proxima import cli
from proxima.config import FOREIGN_NAMES, FOREIGN_NOTES
from tests.cli_helpers import error_line, run_main

MINIBATCH_NOTE = "(it counts minibatches: --num-envs x --num-steps / your minibatch size)"


@pytest.mark.parametrize("flags, suggestion", [
    (["--clip-range", "0.1"], "--clip-coef"),
    (["--clip_range", "0.1"], "--clip-coef"),
    (["--batch-size", "64"], f"--num-minibatches {MINIBATCH_NOTE}"),
    (["--batch-size=64"], f"--num-minibatches {MINIBATCH_NOTE}"),
    (["--minibatch-size", "16"], f"--num-minibatches {MINIBATCH_NOTE}"),
    (["--lam", "0.9"], "--gae-lambda"),
    (["--net-arch", "64"], "--hidden-sizes (one list for both the actor's and the critic's hidden layers, e.g. --hidden-sizes "
                           "64,64; separate pi/vf sizes (dict(pi=[..], vf=[..])) are not supported)"),
    (["--cuda"], "--device cuda"),
    (["--no-cuda"], "--device cpu"),
    (["--n-steps", "5"], "--num-steps"),
    (["--n-epochs", "3"], "--update-epochs"),
    (["--n-envs", "2"], "--num-envs"),
    (["--n-timesteps", "1000"], "--total-timesteps"),
    (["--clip-range-vf", "0.2"], "--vf-clip-coef (--vf-clip-coef X with --clip-vloss (the default) clips differently: "
     "CleanRL's max of the clipped and unclipped squared errors, where SB3 takes the clipped one alone; SB3's "
     "clip_range_vf=None is --no-clip-vloss)"),
    (["--torch-deterministic"], "--deterministic"),
    (["--no-torch-deterministic"], "--no-deterministic"),
    (["--no-normalize-advantage"], "--no-norm-adv"),
    (["--policy", "MlpPolicy"], "--encoder (MlpPolicy is --encoder mlp, CnnPolicy --encoder cnn)"),
    (["--exp-name", "x"], "--run-dir (the run's directory, by default runs/<env>__<seed>__<time>)"),
])
def test_a_foreign_flag_is_told_its_flag_here(flags, suggestion, capsys):
    code, out, err = run_main(["train", "CartPole-v1", *flags], capsys)
    line = error_line(code, err)
    assert line == (f"proxima train: error: unrecognized arguments: {' '.join(flags)}; did you mean {suggestion}? "
                    "(see proxima train --help)")
    assert out == ""


@pytest.mark.parametrize("name", sorted(FOREIGN_NAMES))
def test_every_foreign_name_as_a_train_flag_gets_its_fields_flag(name, capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--" + name.replace("_", "-"), "1"], capsys)
    line = error_line(code, err)
    field = FOREIGN_NAMES[name]
    if field == "env_id":  # no --env-id flag on train: the positional
        assert "the env is the positional ENV_ID, no flag: proxima train 1" in line
    else:
        want = cli.FOREIGN_FLAGS.get(name, "--" + field.replace("_", "-"))
        assert f"; did you mean {want}" in line, line


def test_the_cli_has_a_note_in_flag_words_for_every_foreign_note():
    assert set(FOREIGN_NOTES) <= set(cli.FOREIGN_FLAG_NOTES)


def test_two_foreign_flags_and_a_typo_get_one_suggestion_each(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--lam", "0.9", "--num-env", "8", "--clip-range", "0.1"], capsys)
    assert error_line(code, err).endswith("; did you mean --gae-lambda or --num-envs or --clip-coef? (see proxima train --help)")


@pytest.mark.parametrize("argv, shown", [
    (["train", "CartPole-v1", "--env-id", "CartPole-v1"], "--env-id CartPole-v1"),
    (["train", "--env-id", "Acrobot-v1"], "--env-id"),  # argparse took Acrobot-v1 for ENV_ID: the line still shows it
    (["train", "--env-id=Acrobot-v1"], "--env-id=Acrobot-v1"),
    (["train", "--env", "Acrobot-v1"], "--env"),
])
def test_env_id_and_env_on_train_name_the_positional(argv, shown, capsys):
    code, _, err = run_main(argv, capsys)
    env = argv[-1].rpartition("=")[2]
    assert error_line(code, err) == (f"proxima train: error: unrecognized arguments: {shown}; the env is the positional "
                                     f"ENV_ID, no flag: proxima train {env} (see proxima train --help)")


def test_env_id_on_eval_is_its_env_flag(tmp_path, capsys):
    code, _, err = run_main(["eval", str(tmp_path), "--env-id", "CartPole-v1"], capsys)
    assert error_line(code, err).endswith("--env-id CartPole-v1; did you mean --env? (see proxima eval --help)")


def test_capture_video_points_at_eval_video(tmp_path, capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--capture-video"], capsys)
    error_line(code, err, "--capture-video; to record an episode of the trained policy: proxima eval RUN_DIR --video FILE.mp4")
    code, _, err = run_main(["eval", str(tmp_path), "--capture-video"], capsys)
    error_line(code, err, "--capture-video; did you mean --video?")


@pytest.mark.parametrize("flags", [["--track"], ["--wandb-project-name", "p"]])
def test_tracking_flags_name_the_logs_every_run_writes(flags, capsys):
    code, _, err = run_main(["train", "CartPole-v1", *flags], capsys)
    line = error_line(code, err, "no Weights & Biases here: every run writes TensorBoard events and metrics.csv")
    assert "did you mean" not in line  # --track was told --threads


def test_the_sb3_alias_learning_rate_still_trains_as_lr(capsys):
    code, out, err = run_main(["train", "CartPole-v1", "--learning-rate", "0.00123", "--dry-run"], capsys)
    assert code == 0, err
    assert "lr: 0.00123" in out


def test_a_config_file_with_sb3s_batch_size_gets_both_hints(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sb3.yaml").write_text("batch_size: 64\n")
    code, out, err = run_main(["train", "CartPole-v1", "--config", "sb3.yaml", "--dry-run"], capsys)
    assert error_line(code, err) == (
        "proxima train: error: sb3.yaml: unknown field 'batch_size' (did you mean 'num_minibatches'? it counts "
        "minibatches: num_envs x num_steps / your minibatch size); it is also a `proxima rlhf` setting (RLHFConfig): "
        "a file of those goes to `proxima rlhf --config`")
    assert out == ""


def test_two_flags_of_one_meaning_get_one_answer(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--batch-size", "64", "--minibatch-size", "16", "--track",
                             "--wandb-entity", "e"], capsys)
    line = error_line(code, err)
    assert line.count("--num-minibatches") == 1 and line.count("Weights & Biases") == 1, line


# --- where the hint must not be given, or must be given exactly ---------------------------------------------------------
@pytest.mark.parametrize("argv, line", [
    # report's --env is eval's (the module:Class env it may import): the hint names it, never a positional ENV_ID
    (["report", "R", "--env-id", "X"], "proxima report: error: unrecognized arguments: --env-id X; did you mean --env? "
     "(see proxima report --help)"),
    # the word after --env-id is the next flag, not the env: the placeholder, never "proxima train --num-envs"
    (["train", "--env-id", "--num-envs", "2"], "proxima train: error: unrecognized arguments: --env-id; the env is the "
     "positional ENV_ID, no flag: proxima train ENV_ID (see proxima train --help)"),
    # the command line shown is one the shell runs: an env id with a space quoted
    (["train", "--env-id", "a b"], "proxima train: error: unrecognized arguments: --env-id; the env is the positional "
     "ENV_ID, no flag: proxima train 'a b' (see proxima train --help)"),
    # eval takes no tracking advice (that is train's and resume's): difflib's nearest flag only
    (["eval", "R", "--track"], "proxima eval: error: unrecognized arguments: --track; did you mean --backend? "
     "(see proxima eval --help)"),
    # the negated form of a foreign flag whose note is about its value: the flag alone, no note
    (["train", "CartPole-v1", "--no-clip-range-vf"], "proxima train: error: unrecognized arguments: --no-clip-range-vf; "
     "did you mean --no-clip-vloss? (see proxima train --help)"),
    # a capitalised foreign flag is still theirs (difflib finds no flag near --Batch-Size)
    (["train", "CartPole-v1", "--Batch-Size", "64"], "proxima train: error: unrecognized arguments: --Batch-Size 64; "
     f"did you mean --num-minibatches {MINIBATCH_NOTE}? (see proxima train --help)"),
], ids=["no-env-on-report", "flag-after-env-id", "quoted-env", "no-tracking-advice-on-eval", "negated-no-note", "capitalised"])
def test_foreign_hints_only_where_they_apply(argv, line, capsys):
    code, out, err = run_main(argv, capsys)
    assert error_line(code, err) == line
    assert out == ""
