"""--quiet keeps the notes of what a run does otherwise than asked (QUIET_HELP): an abandoned evaluation."""
from __future__ import annotations

import pytest

from proxima.trainer import Trainer, TrainingInterrupted
from tests.unit import test_review28_resume as r28


def test_a_stop_that_abandons_a_due_evaluation_says_so_under_quiet(tmp_path, capsys):
    """The note was dropped under --quiet: a quiet run stopped in an evaluation's iteration logged no eval
    value for it and said nothing, though --help promises such notes still print."""
    trainer = Trainer(r28._config(), run_dir=tmp_path / "run", quiet=True)
    try:
        with pytest.raises(TrainingInterrupted):
            trainer.run(stop_after=3)  # a SIGINT during iteration 3, before its evaluation
    finally:
        trainer.close()
    err = capsys.readouterr().err
    assert (f"proxima: note: the --eval-every evaluation at global step {3 * r28.STEPS} was abandoned for the stop; "
            "no eval value is logged for this iteration until the run is resumed") in err, err


@pytest.mark.parametrize("given", ["False", 0, None])
def test_evaluate_refuses_a_deterministic_that_is_no_bool(given):
    """deterministic="False" (a string, always true) evaluated the deterministic policy without a word."""
    from proxima.evaluate import evaluate

    with pytest.raises(ValueError) as e:
        evaluate(object(), episodes=1, deterministic=given)
    assert str(e.value) == f"evaluate: deterministic={given!r}: must be True or False"
