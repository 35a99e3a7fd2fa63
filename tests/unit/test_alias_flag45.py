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
