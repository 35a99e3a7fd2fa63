"""The run's logs as a CleanRL/SB3 user reads them: the config as TensorBoard's hyperparameters text (fresh
and across a resume), a callback's TensorBoard-only scalars through the logger's public method, the
progress line's episode count under a full window, and the note for a one-number --seeds."""
import errno
import io
import math

import pytest

from proxima import cli
from proxima.diskspace import StorageError
from proxima.logger import CSV_COLUMNS, RunLogger
from tests.cli_helpers import TINY_POP, TINY_RUN, run_main

TAG = "hyperparameters/text_summary"  # the tag add_text's summary stores, as CleanRL's shows in TensorBoard


def _tables(run_dir) -> list:
    """[(step, {param: value})] of the run's hyperparameters texts, as TensorBoard loads them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    if TAG not in acc.Tags()["tensors"]:
        return []
    tables = []
    for event in acc.Tensors(TAG):
        lines = event.tensor_proto.string_val[0].decode().splitlines()
        assert lines[:2] == ["|param|value|", "|-|-|"]
        tables.append((event.step, dict(line.strip("|").split("|", 1) for line in lines[2:])))
    return tables


def _scalars(run_dir, tag: str) -> list:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


# ------------------------------------------------------------------------------- hyperparameters text
def test_a_run_writes_its_config_table_at_step_0_and_a_resume_that_changed_a_field_at_its_step(tmp_path):
    run_dir = tmp_path / "run"
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "128", "--lr", "0.001",
                     "--run-dir", str(run_dir), "--quiet"]) == 0
    [(step, table)] = _tables(run_dir)
    assert step == 0 and table["lr"] == "0.001" and table["env_id"] == "CartPole-v1" and table["total_timesteps"] == "128"
    assert table["hidden_sizes"] == "[64, 64]" and table["target_kl"] == "null"  # config.yaml's spelling

    assert cli.main(["resume", str(run_dir), "--total-timesteps", "192", "--quiet"]) == 0
    (first, old), (at, new) = _tables(run_dir)  # the rewritten events keep step 0's table
    assert (first, at) == (0, 128) and old["total_timesteps"] == "128" and new["total_timesteps"] == "192"
    assert {k for k in old if old[k] != new[k]} == {"total_timesteps"}


def test_a_resume_that_changed_nothing_writes_no_second_table(tmp_path):
    config = {"env_id": "CartPole-v1", "lr": 0.00025}
    logger = RunLogger(tmp_path, 128, progress=False, config=config)
    logger.log(1, 64, {"charts/SPS": 1.0})
    logger.close()
    logger = RunLogger(tmp_path, 128, resume_step=64, progress=False, config=config)
    logger.log(2, 128, {"charts/SPS": 1.0})
    logger.close()
    assert _tables(tmp_path) == [(0, {"env_id": "CartPole-v1", "lr": "0.00025"})]


def test_a_table_cell_escapes_a_pipe_and_a_line_break():
    from proxima.logger import hyperparameters_table

    text = hyperparameters_table({"env_kwargs": {"a": "x|y"}, "env\nid": "my_envs:Grid|v0"})
    assert text.splitlines()[2:] == ["|env_kwargs|{a: x\\|y}|", "|env id|my_envs:Grid\\|v0|"]


# ----------------------------------------------------------------------------- TensorBoard-only scalars
def test_scalars_go_to_tensorboard_only_at_the_step_given(tmp_path):
    logger = RunLogger(tmp_path, 128, progress=False)
    logger.log(1, 64, {"charts/SPS": 1.0})
    logger.scalars(64, {"custom/my_metric": 0.5, "custom/unmeasured": math.nan})
    logger.close()
    assert _scalars(tmp_path, "custom/my_metric") == [(64, 0.5)]
    assert _scalars(tmp_path, "custom/unmeasured") == []
    assert (tmp_path / "metrics.csv").read_text().splitlines()[0].split(",") == CSV_COLUMNS


def test_scalars_that_cannot_be_written_raise_one_line_naming_the_event_file(tmp_path):
    logger = RunLogger(tmp_path, 128, progress=False)
    path = logger._events.path

    def full(event):
        raise OSError(errno.ENOSPC, "No space left on device")

    logger._events.add = full
    with pytest.raises(StorageError) as e:
        logger.scalars(64, {"custom/x": 1.0})
    assert "could not write TensorBoard events" in str(e.value) and str(path) in str(e.value)
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------------------------- the progress line
def test_the_progress_line_says_how_many_episodes_its_return_is_over_until_the_window_is_full(tmp_path, monkeypatch):
    stream = io.StringIO()  # not a terminal: whole lines
    monkeypatch.setattr("sys.stderr", stream)
    monkeypatch.setattr("proxima.logger.LINE_SECONDS", 0.0)
    logger = RunLogger(tmp_path, 300, progress=True, rolling=True)
    for i, (n, ret) in enumerate([(0, math.nan), (2, -1188.8), (150, 10.0)]):
        logger.log(i + 1, 100 * (i + 1), {"episodes": n, "charts/episodic_return": ret, "charts/SPS": 100.0})
    logger.close()
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("| return -"), lines  # no episode ended yet: no "(100 ep)" window to name
    assert lines[1].endswith("| return (2 ep) -1188.8"), lines
    assert lines[2].endswith("| return (150 ep) 10.0"), lines  # 150 episodes of one iteration: the window holds them all


# ------------------------------------------------------------------------------------ --seeds N note
@pytest.mark.parametrize("seeds, extra, note", [
    ("2", [], "proxima train: note: --seeds 2 is one member, seed 2; for seeds 1 to 2 give --seeds 1-2"),
    ("1", [], "proxima train: note: --seeds 1 is one member, seed 1"),
    ("1-2", [], None),
    ("1,5,9", [], None),
    ("2", ["--sweep", "lr=0.001,0.002"], None),
])
def test_a_one_number_seeds_notes_it_is_one_member(seeds, extra, note, capsys, tmp_path):
    code, out, err = run_main(["train", "CartPole-v1", "--seeds", seeds, *extra, "--dry-run", "--total-timesteps", "64",
                               "--run-dir", str(tmp_path / "P"), *TINY_POP], capsys)
    assert code == 0
    notes = [line for line in err.splitlines() if "--seeds" in line]
    assert notes == ([note] if note else []), err
