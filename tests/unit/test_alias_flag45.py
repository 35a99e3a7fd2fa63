"""A refused value is named by the flag the user typed: --learning-rate (SB3's name for --lr) is not
reported as --lr, which they never wrote; --lr stays --lr. The minibatch counts a refusal offers come
from config.minibatch_counts, the one divisor rule."""

from __future__ import annotations

from cli_helpers import error_line, run_main


def test_a_refused_learning_rate_names_the_flag_typed(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--learning-rate", "lin_1e-3", "--dry-run"], capsys)
    line = error_line(code, err, "--learning-rate 'lin_1e-3': expected a number")
    assert "--lr " not in line.split(":", 2)[1], line
    code, _, err = run_main(["train", "CartPole-v1", "--lr", "lin_1e-3", "--dry-run"], capsys)
    error_line(code, err, "--lr 'lin_1e-3': expected a number")


def test_a_default_num_minibatches_refusal_offers_the_counts_validate_takes(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--num-envs", "5", "--num-steps", "5", "--dry-run"], capsys)
    line = error_line(code, err, "num_minibatches 4 (the default): must divide the batch")
    assert line.endswith("give --num-minibatches 1 or 5"), line  # 25 of 1 sample each: refused under norm_adv


def test_zoo_hyperparams_advice_is_typeable(capsys):
    """rl-zoo's --hyperparams translated into flags a user can paste: a switch in its --flag / --no-flag form
    (never `--norm-obs X`, which is refused, nor the on form for a false), a lin_ schedule as its number."""
    code, _, err = run_main(["train", "CartPole-v1", "--hyperparams", "normalize:false", "learning_rate:lin_0.001"], capsys)
    line = error_line(code, err, "--hyperparams is rl-zoo's: give them as flags: --no-norm-obs (")
    assert "--norm-obs X" not in line and "--lr 0.001 (the zoo's lin_0.001, a linear decay to 0" in line, line
    code, _, err = run_main(["train", "CartPole-v1", "--hyperparams", "normalize:True"], capsys)
    assert "give them as flags: --norm-obs (" in error_line(code, err, "--hyperparams is rl-zoo's")


def test_resume_nproc_without_a_count_does_not_eat_the_next_flag(tmp_path, capsys):
    """`proxima resume RUN --nproc --total-timesteps N`: --nproc has no count, and --total-timesteps stays a flag
    (it was taken as --nproc's value, and N reported as an unrecognized argument)."""
    code, _, err = run_main(["resume", str(tmp_path), "--nproc", "--total-timesteps", "8192"], capsys)
    line = error_line(code, err, "--nproc: proxima resume starts as many processes as the run was trained with")
    assert "unrecognized arguments" not in line, line


def test_zoo_hyperparams_named_without_a_value_get_their_flag(capsys):
    """`--hyperparams learning_rate` (no :value): its flag with the value to give, never 'drop learning_rate (no flag
    here)' of a setting that has one."""
    code, _, err = run_main(["train", "CartPole-v1", "--hyperparams", "learning_rate", "n_envs:8"], capsys)
    line = error_line(code, err, "give them as flags: --lr VALUE --num-envs 8")
    assert "drop learning_rate" not in line, line
