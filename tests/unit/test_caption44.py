"""The population report's curve caption says what the default curve (the rolling return since session
44) is: it fell to the "a loss or other per-iteration column: no episodes" words."""

from proxima.population_report import curve_caption

ROWS = [{"sources": ["m000"], "kind": "eval", "diverged": []}]


def test_the_rolling_return_curve_is_captioned_as_the_mean_of_the_last_100_training_episodes():
    caption = curve_caption(ROWS, "charts/episodic_return_100")
    assert caption.startswith("The curve is the training charts/episodic_return_100 (stochastic actions, each member's "
                              "mean return over its last 100 training episodes")
    assert "the table above is the deterministic eval return" in caption


def test_a_loss_curve_keeps_its_own_caption():
    assert "no episodes" not in curve_caption(ROWS, "losses/value_loss")
    assert "carried forward over iterations in which it logged none" in curve_caption(ROWS, "losses/value_loss")
