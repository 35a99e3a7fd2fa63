"""A population's per-member logging, batched (RunLogger flush_seconds, population_run.LOG_FLUSH_SECONDS)
and written without a TensorBoard thread per member, loses no row or event: every iteration's row
and event reach each member's files after a normal run, a stop and an exception, and the rows up to
a checkpoint are in the files when the checkpoint is."""

from __future__ import annotations

import csv
import gc
import os
import struct

import pytest
import torch

from proxima import checkpoint as ckpt
from proxima import population_run
from proxima.config import PPOConfig
from proxima.logger import RunLogger, _event_records
from proxima.population import Population, member_configs
from proxima.population_run import train_population
from proxima.signals import TrainingInterrupted

SEEDS = [1, 2, 3]


def _cfg(**kw) -> PPOConfig:  # 2 envs x 32 steps: 64 steps per member per iteration, 5 iterations
    base = dict(env_id="CartPole-v1", backend="native", num_envs=2, num_steps=32, total_timesteps=320, num_minibatches=2,
                update_epochs=1, threads=1, progress=False, eval_episodes=0, checkpoint_every=0)
    base.update(kw)
    return PPOConfig(**base)


@pytest.fixture
def never_by_time(monkeypatch):
    """Loggers that flush only when told (before a checkpoint, on close): what a fast iteration gets
    between two of LOG_FLUSH_SECONDS' flushes, whatever this machine's speed."""
    monkeypatch.setattr(population_run, "LOG_FLUSH_SECONDS", 3600.0)


def _csv_steps(member_dir) -> list:
    with open(member_dir / "metrics.csv", newline="") as f:
        return [int(r["global_step"]) for r in csv.DictReader(f)]


def _event_steps(member_dir) -> list:
    # the scalar rows only: the hyperparameters text at step 0 is no iteration's row
    return [e.step for p in sorted(member_dir.glob("events.out.tfevents.*")) for _, e in _event_records(p)
            if e.HasField("summary") and any(v.HasField("simple_value") for v in e.summary.value)]


def _members(run_dir) -> list:
    return sorted(d for d in run_dir.iterdir() if d.name.startswith("m0"))


def _writer_threads() -> int:
    return sum(type(o).__name__ == "_AsyncWriterThread" for o in gc.get_objects())


def test_every_member_holds_every_iterations_row_and_event_after_a_normal_run(tmp_path, never_by_time, monkeypatch):
    threads = []
    real = population_run._log_members

    def counting(*args, **kwargs):
        real(*args, **kwargs)
        threads.append(_writer_threads())

    monkeypatch.setattr(population_run, "_log_members", counting)
    run = train_population(member_configs(_cfg(), SEEDS), SEEDS, {}, run_dir=tmp_path / "R", quiet=True, evaluate_at_end=False)
    assert len(_members(run)) == 3
    for d in _members(run):
        assert _csv_steps(d) == [64, 128, 192, 256, 320], d.name
        assert _event_steps(d) == [64, 128, 192, 256, 320], d.name
    assert threads == [0] * 5  # the members' events are written in the loop's thread: no writer thread per member


def test_a_stopped_population_keeps_every_row_up_to_its_checkpoint(tmp_path, never_by_time):
    with pytest.raises(TrainingInterrupted) as e:  # SIGINT in iteration 2 of 5
        train_population(member_configs(_cfg(), SEEDS), SEEDS, {}, run_dir=tmp_path / "R", quiet=True, stop_after=2)
    assert e.value.checkpoint.name == "step_000000000128.pt"
    for d in _members(tmp_path / "R"):
        assert _csv_steps(d) == [64, 128] and _event_steps(d) == [64, 128], d.name


def test_an_exception_mid_run_still_writes_every_members_rows(tmp_path, never_by_time, monkeypatch):
    real_iteration = Population.train_iteration

    def fourth_fails(pop):
        if pop.iteration == 3:
            raise RuntimeError("boom in iteration 4")
        return real_iteration(pop)

    monkeypatch.setattr(Population, "train_iteration", fourth_fails)
    with pytest.raises(RuntimeError, match="boom in iteration 4"):
        train_population(member_configs(_cfg(), SEEDS), SEEDS, {}, run_dir=tmp_path / "R", quiet=True)
    for d in _members(tmp_path / "R"):  # no checkpoint flushed them: closing the loggers did
        assert _csv_steps(d) == [64, 128, 192] and _event_steps(d) == [64, 128, 192], d.name


def test_every_logger_is_closed_even_when_one_cannot_be(tmp_path, monkeypatch):
    loggers = [RunLogger(tmp_path / f"m00{i}", total_steps=1000, progress=False, flush_seconds=3600) for i in range(3)]
    for lg in loggers:
        lg.log(1, 64, {"charts/SPS": 1.0})
    real_close = RunLogger.close

    def first_full(logger):
        real_close(logger)
        if logger is loggers[0]:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(RunLogger, "close", first_full)
    with pytest.raises(OSError, match="No space left"):  # the first failure, raised once all were closed
        population_run._close_loggers(loggers)
    # the loggers are still referenced: their rows are in the files because they were closed
    assert [(_csv_steps(lg.run_dir), _event_steps(lg.run_dir)) for lg in loggers] == [([64], [64])] * 3


def test_rows_logged_before_a_checkpoint_are_in_the_files_when_it_is_written(tmp_path, never_by_time, monkeypatch):
    seen = []
    real = population_run.save_population

    def save_then_read(pop, run_dir, dirs, *args):
        path = real(pop, run_dir, dirs, *args)
        assert path.exists()
        # the loggers are still open here: what a kill now would leave on disk
        seen.append((pop.iteration * pop.steps_per_member, [(_csv_steps(d), _event_steps(d)) for d in dirs]))
        return path

    monkeypatch.setattr(population_run, "save_population", save_then_read)
    train_population(member_configs(_cfg(checkpoint_every=2), SEEDS), SEEDS, {}, run_dir=tmp_path / "R", quiet=True,
                     evaluate_at_end=False)
    assert [step for step, _ in seen] == [128, 256, 320]
    for step, files in seen:
        logged = list(range(64, step + 1, 64))
        assert files == [(logged, logged)] * 3, step


def test_a_logger_flushing_by_time_holds_its_rows_until_flushed(tmp_path):
    logger = RunLogger(tmp_path, total_steps=1000, progress=False, flush_seconds=3600)
    try:
        logger.log(1, 64, {"time": 0.1, "episodes": 1, "charts/episodic_return": 11.0, "charts/SPS": 100.0})
        logger.log(2, 128, {"time": 0.2, "episodes": 2, "charts/episodic_return": 12.0, "charts/SPS": 100.0})
        assert _csv_steps(tmp_path) == [] and _event_steps(tmp_path) == []  # the header (and file_version) only
        logger.flush()
        assert _csv_steps(tmp_path) == [64, 128] and _event_steps(tmp_path) == [64, 128]
        logger.log(3, 192, {"time": 0.3, "episodes": 3, "charts/episodic_return": float("nan"), "charts/SPS": 100.0})
    finally:
        logger.close()
    with open(tmp_path / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["charts/episodic_return"] for r in rows] == ["11.0", "12.0", ""]  # NaN: blank, as before
    # a single run's logger (flush_seconds 0) hands each row to the OS as it is logged
    single = tmp_path / "single"
    logger = RunLogger(single, total_steps=1000, progress=False)
    try:
        logger.log(1, 64, {"charts/SPS": 1.0})
        assert _csv_steps(single) == [64] and _event_steps(single) == [64]
    finally:
        logger.close()


def test_event_records_carry_tensorboards_own_checksums(tmp_path):
    """The events' CRC-32C (a numpy table, not tensorboard's byte loop) is the one TensorBoard checks,
    for events of every size (a long text event crosses the table's span)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    from proxima.logger import _masked_crc32c

    for n in [*range(0, 40), 333, 1023, 1024, 1025, 1028, 2049, 5000]:
        data = os.urandom(n)
        assert _masked_crc32c(data) == masked_crc32c(data), n
    logger = RunLogger(tmp_path, total_steps=1000, progress=False)
    try:
        logger.log(1, 64, {"charts/SPS": 1.5, "losses/value_loss": 2.25, "charts/episodic_return": float("inf")})
        logger.text("notes", "x" * 3000, 64)
    finally:
        logger.close()
    [path] = tmp_path.glob("events.out.tfevents.*")
    data, pos, records = path.read_bytes(), 0, 0
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos:pos + 8])
        assert struct.unpack("<I", data[pos + 8:pos + 12])[0] == masked_crc32c(data[pos:pos + 8])
        body = data[pos + 12:pos + 12 + length]
        assert struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])[0] == masked_crc32c(body)
        pos, records = pos + 16 + length, records + 1
    assert records == 3  # file_version, the scalars, the text
    events = list(EventFileLoader(str(path)).Load())
    assert events[0].file_version == "brain.Event:2"
    scalars = {v.tag: v for v in events[1].summary.value}
    assert events[1].step == 64 and set(scalars) == {"charts/SPS", "losses/value_loss"}  # inf: not logged


def test_a_members_checkpoint_holds_its_agents_state_dict(tmp_path):
    pop = Population(member_configs(_cfg(), SEEDS))
    try:
        pop.train_iteration()
        for i in range(len(SEEDS)):
            want, got = pop.member_agent(i).state_dict(), pop.member_state_dict(i)
            assert list(got) == list(want)
            for k in want:
                assert torch.equal(got[k], want[k]) and got[k].dtype == want[k].dtype, k
                assert got[k].untyped_storage().nbytes() == want[k].untyped_storage().nbytes(), k  # its own, not the stack's
    finally:
        pop.close()


def test_member_checkpoints_written_on_threads_load_and_keep_torchs_crc_setting(tmp_path):
    before = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(False)  # not torch's default: a save that sets it and never restores it shows
    try:
        run = train_population(member_configs(_cfg(total_timesteps=128), SEEDS), SEEDS, {}, run_dir=tmp_path / "R",
                               quiet=True, evaluate_at_end=False)
        assert torch.serialization.get_crc32_options() is False
    finally:
        torch.serialization.set_crc32_options(before)
    for i, d in enumerate(_members(run)):
        [path] = ckpt.list_checkpoints(d)
        state = ckpt.load_checkpoint(path)
        assert state["global_step"] == 128 and state["config"]["seed"] == SEEDS[i]
    assert not [p for p in run.rglob("*.tmp")]
