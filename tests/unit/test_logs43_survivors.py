"""Issue 43's logs, pinned where a mutation review of fa8c5ce found them unchecked: the hyperparameters table a
resume compares with is the last one the kept events hold, the progress line's episode count after a resume, a
callback's scalars() written back to a deleted events file and handed to the OS at once, a table cell's carriage
return, and the --seeds N note's --quiet and --resume guards."""
import io
import math

from proxima.logger import RunLogger, hyperparameters_table
from tests.cli_helpers import TINY_POP, run_main
from tests.unit import test_logs43 as base

A = {"env_id": "CartPole-v1", "lr": 0.00025}
B = {"env_id": "CartPole-v1", "lr": 0.001}
TABLE_A = {"env_id": "CartPole-v1", "lr": "0.00025"}
TABLE_B = {"env_id": "CartPole-v1", "lr": "0.001"}


def _run(run_dir, configs) -> None:
    """One logger per config, each resuming at the step the one before logged its last row (64 steps a row)."""
    for i, config in enumerate(configs):
        logger = RunLogger(run_dir, 64 * len(configs), resume_step=64 * i if i else None, progress=False, config=config)
        logger.log(i + 1, 64 * (i + 1), {"charts/SPS": 1.0})
        logger.close()


# ------------------------------------------------------------------------------- hyperparameters text
def test_a_resume_compares_its_config_with_the_last_table_not_the_first(tmp_path):
    _run(tmp_path / "ABA", [A, B, A])  # back to A: it differs from B, the table standing for the run now
    assert base._tables(tmp_path / "ABA") == [(0, TABLE_A), (64, TABLE_B), (128, TABLE_A)]
    _run(tmp_path / "ABB", [A, B, B])  # B again: already shown
    assert base._tables(tmp_path / "ABB") == [(0, TABLE_A), (64, TABLE_B)]


def test_a_table_written_after_the_resume_step_does_not_count_as_shown(tmp_path):
    logger = RunLogger(tmp_path, 256, progress=False, config=A)
    logger.log(1, 64, {"charts/SPS": 1.0})
    logger.log(2, 128, {"charts/SPS": 1.0})
    logger.close()
    logger = RunLogger(tmp_path, 256, resume_step=128, progress=False, config=B)
    logger.log(3, 192, {"charts/SPS": 1.0})
    logger.close()
    assert base._tables(tmp_path) == [(0, TABLE_A), (128, TABLE_B)]
    # back to step 64 with B: step 128's table goes with the events after 64, so B is new again there
    logger = RunLogger(tmp_path, 256, resume_step=64, progress=False, config=B)
    logger.log(2, 128, {"charts/SPS": 1.0})
    logger.close()
    assert base._tables(tmp_path) == [(0, TABLE_A), (64, TABLE_B)]


def test_a_table_cell_turns_a_carriage_return_into_a_space():
    # a string value is YAML's spelling ("my_envs:Grid\rv0", escaped); a name is shown as it is
    text = hyperparameters_table({"env\rid": "my_envs:Grid\rv0", "lr": 0.001})
    assert text.splitlines()[2:] == ['|env id|"my_envs:Grid\\rv0"|', "|lr|0.001|"]


# ---------------------------------------------------------------------------------- the progress line
def test_a_resumed_progress_line_counts_the_episodes_the_kept_rows_hold(tmp_path, monkeypatch):
    logger = RunLogger(tmp_path, 300, progress=False, rolling=True)
    logger.log(1, 100, {"episodes": 2, "charts/episodic_return": -1188.8, "charts/SPS": 100.0})
    logger.close()
    stream = io.StringIO()  # not a terminal: whole lines
    monkeypatch.setattr("sys.stderr", stream)
    monkeypatch.setattr("proxima.logger.LINE_SECONDS", 0.0)
    logger = RunLogger(tmp_path, 300, resume_step=100, progress=True, rolling=True)
    # episodes not counted (a diverged member's row): the window and its return stay the kept rows'
    logger.log(2, 200, {"episodes": math.nan, "charts/episodic_return": math.nan, "charts/SPS": 100.0})
    logger.close()
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("| return (2 ep) -1188.8"), lines  # not "(100 ep)": 2 episodes are no full window


# ----------------------------------------------------------------------------- TensorBoard-only scalars
def test_scalars_write_a_deleted_events_file_back_with_the_value(tmp_path):
    logger = RunLogger(tmp_path, 128, progress=False)
    logger.log(1, 64, {"charts/SPS": 1.0})
    path = logger._events.path
    path.unlink()  # rm RUN/events.* while the run trains
    logger.scalars(64, {"custom/my_metric": 0.5})
    assert path.exists()
    logger.close()
    assert base._scalars(tmp_path, "custom/my_metric") == [(64, 0.5)]
    assert base._scalars(tmp_path, "charts/SPS") == [(64, 1.0)]  # the events before the deletion came back too


def test_scalars_of_a_logger_with_no_flush_interval_are_on_disk_before_close(tmp_path):
    logger = RunLogger(tmp_path, 128, progress=False, flush_seconds=0.0)
    try:
        logger.scalars(64, {"custom/my_metric": 0.5})
        assert base._scalars(tmp_path, "custom/my_metric") == [(64, 0.5)]  # read while the logger is open
    finally:
        logger.close()


# ------------------------------------------------------------------------------------ --seeds N note
def test_a_one_number_seeds_note_is_not_printed_under_quiet_or_a_resume(capsys, tmp_path):
    for extra in (["--quiet"], ["--resume", "auto"]):  # auto with no run there: a new population, still no note
        code, out, err = run_main(["train", "CartPole-v1", "--seeds", "2", *extra, "--dry-run", "--total-timesteps", "64",
                                   "--run-dir", str(tmp_path / "P"), *TINY_POP], capsys)
        assert code == 0, err
        assert [line for line in err.splitlines() if "--seeds" in line] == [], (extra, err)
