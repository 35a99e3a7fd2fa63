"""RLHF's MetricsLogger writes its TensorBoard events as PPO's RunLogger does (logger.EventFile, in the
caller's thread): one event per step holding every scalar, the samples table as add_text's text summary,
a full disk raised by the call that writes as one line naming the event file, no writer thread and no
threading.excepthook of its own; a resume still drops what was logged after the checkpoint."""

import errno
import threading
from pathlib import Path

import pytest

from proxima import logger as logger_module
from proxima.diskspace import StorageError
from proxima.logger import RunLogger
from proxima.rlhf.rundir import MetricsLogger, read_metrics

ROWS = [{"prompt": "a | b", "response": "good\nday", "score": 1.0}, {"prompt": [{"role": "user", "content": "hi"}],
                                                                    "response": "bad", "score": -0.5}]


def events_of(path: Path) -> list:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    return [e for f in sorted(path.glob("events.out.tfevents.*")) for e in EventFileLoader(str(f)).Load()]


def accumulator(path: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(path), size_guidance={"tensors": 0, "scalars": 0})
    events.Reload()
    return events


class FullFile:
    """An event file on a disk that fills up: writes fail with ENOSPC once ``state['full']`` says so."""

    def __init__(self, real, state):
        self.real, self.state = real, state

    def write(self, data):
        self.state["writes"] += 1
        if self.state["full"] or self.state["writes"] >= self.state["from"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.real.write(data)

    def flush(self):
        self.real.flush()

    def close(self):
        self.real.close()


def fill_event_files(monkeypatch, full=False, from_write=10**9) -> dict:
    """Event files opened from now on fail their writes as on a full disk (when ``full``, or from
    write number ``from_write`` on, counted over every event file)."""
    state = {"full": full, "writes": 0, "from": from_write}

    def opener(path, *args, **kwargs):
        real = open(path, *args, **kwargs)
        return FullFile(real, state) if Path(path).name.startswith("events.out.tfevents.") else real

    monkeypatch.setattr(logger_module, "open", opener, raising=False)
    return state


def test_one_event_per_step_holds_every_scalar_and_the_samples_are_add_texts_text_summary(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    log = MetricsLogger(tmp_path)
    log.log(1, {"objective/kl": 0.5, "objective/scores": 1.25})
    log.log_samples(1, ROWS)
    log.log(2, {"objective/kl": 0.25, "objective/scores": 2.0})
    log.close()

    scalar_events = [e for e in events_of(tmp_path) if any(v.tag.startswith("objective/") for v in e.summary.value)]
    assert [(e.step, sorted(v.tag for v in e.summary.value)) for e in scalar_events] == \
        [(1, ["objective/kl", "objective/scores"]), (2, ["objective/kl", "objective/scores"])]
    events = accumulator(tmp_path)
    assert [(s.step, s.value) for s in events.Scalars("objective/kl")] == [(1, 0.5), (2, 0.25)]
    assert [(s.step, s.value) for s in events.Scalars("objective/scores")] == [(1, 1.25), (2, 2.0)]

    reference = tmp_path / "add_text"
    table = ("| prompt | response | score |\n|---|---|---|\n| a \\| b | good day | 1.000 |\n"
             '| [{"role": "user", "content": "hi"}] | bad | -0.500 |\n')
    writer = SummaryWriter(str(reference))
    writer.add_text("samples", table, 1)
    writer.close()
    ours, theirs = events, accumulator(reference)
    assert ours.Tags()["tensors"] == theirs.Tags()["tensors"] == ["samples/text_summary"]
    assert ours.SummaryMetadata("samples/text_summary") == theirs.SummaryMetadata("samples/text_summary")
    [mine], [ref] = ours.Tensors("samples/text_summary"), theirs.Tensors("samples/text_summary")
    assert mine.step == ref.step == 1 and mine.tensor_proto == ref.tensor_proto
    assert read_metrics(tmp_path)["step"] == [1.0, 2.0]


def test_the_loggers_start_no_writer_thread_and_leave_threading_excepthook_alone(tmp_path):
    hook, threads = threading.excepthook, set(threading.enumerate())
    rlhf = MetricsLogger(tmp_path / "rlhf")
    ppo = RunLogger(tmp_path / "ppo", total_steps=1, progress=False)
    rlhf.log(1, {"objective/kl": 0.5})
    rlhf.log_samples(1, ROWS)
    ppo.log(1, 128, {"charts/SPS": 1.0})
    # nothing writes from another thread: no thread's failed write to hide, so no hook of Proxima's
    assert threading.excepthook is hook
    assert set(threading.enumerate()) == threads
    rlhf.close()
    ppo.close()
    assert threading.excepthook is hook


@pytest.mark.parametrize("call", ["log", "log_samples"])
def test_a_full_disk_is_raised_by_the_call_that_writes_as_one_line_naming_the_event_file(call, tmp_path, monkeypatch):
    state = fill_event_files(monkeypatch)
    log = MetricsLogger(tmp_path)
    [file] = tmp_path.glob("events.out.tfevents.*")
    state["full"] = True
    with pytest.raises(StorageError) as e:
        log.log(1, {"objective/kl": 0.5}) if call == "log" else log.log_samples(1, ROWS)
    message = str(e.value)
    assert message.startswith(f"{file}: could not write TensorBoard events (No space left on device; ")
    assert message.endswith("free some space (or choose another folder) and try again") and "\n" not in message
    # the step's CSV row and samples come after its events: none is written for a step whose events failed
    assert not (tmp_path / "metrics.csv").exists() and not (tmp_path / "samples.jsonl").exists()
    log.close()


@pytest.mark.parametrize("make", [lambda d: MetricsLogger(d), lambda d: RunLogger(d, total_steps=1, progress=False)],
                         ids=["MetricsLogger", "RunLogger"])
def test_an_event_file_whose_header_cannot_be_written_is_named_and_removed(make, tmp_path, monkeypatch):
    fill_event_files(monkeypatch, full=True)
    with pytest.raises(StorageError) as e:
        make(tmp_path)
    prefix = f"{tmp_path / 'events.out.tfevents.'}"
    message = str(e.value)
    assert message.startswith(prefix) and ": could not open the run's logs (No space left on device; " in message, message
    assert list(tmp_path.glob("events.out.tfevents.*")) == []  # a file with no event is not left behind


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_full_disk_at_step_2s_events_is_one_line_exit_2_naming_the_file_and_the_checkpoint(assets, tmp_path, monkeypatch,
                                                                                             capsys):
    from proxima.rlhf.__main__ import main

    # writes: the file's header, step 1's scalars, step 1's samples; step 2's scalars find the disk full
    fill_event_files(monkeypatch, from_write=4)
    run_dir = tmp_path / "run"
    code = main(["--policy", str(assets / "model"), "--prompts", str(assets / "prompts.txt"), "--reward",
                 "proxima.rlhf.demo:keyword_sentiment", "--run-dir", str(run_dir), "--batch-size", "4",
                 "--max-new-tokens", "4", "--steps", "2", "--checkpoint-every", "1", "--sample-every", "1",
                 "--print-every", "0", "--no-plot"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    [file] = run_dir.glob("events.out.tfevents.*")
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"proxima rlhf: error: {file}: could not write TensorBoard events (No space left on device; "), err
    assert err.endswith(f"last good checkpoint: {run_dir / 'checkpoints' / 'step_000001.pt'}"), err
    assert read_metrics(run_dir)["step"] == [1.0]
    assert [(s.step) for s in accumulator(run_dir).Scalars("objective/kl")] == [1]


def test_a_resume_drops_the_events_rows_and_samples_logged_after_its_checkpoint(tmp_path):
    log = MetricsLogger(tmp_path)
    for step in (1, 2, 3):
        log.log(step, {"objective/kl": float(step)})
        log.log_samples(step, ROWS)
    log.close()  # as a SIGKILL after step 3's logs leaves them, the last checkpoint at step 2
    log = MetricsLogger(tmp_path, resume_step=2)
    for step in (3, 4):
        log.log(step, {"objective/kl": 10.0 * step})
        log.log_samples(step, ROWS)
    log.close()
    events = accumulator(tmp_path)
    assert [(s.step, s.value) for s in events.Scalars("objective/kl")] == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0)]
    # TensorBoard's default (fast) loader shows every event in the files: none may be there twice
    loaded = events_of(tmp_path)
    assert sorted(e.step for e in loaded if any(v.tag == "objective/kl" for v in e.summary.value)) == [1, 2, 3, 4]
    assert sorted(e.step for e in loaded if any(v.tag == "samples/text_summary" for v in e.summary.value)) == [1, 2, 3, 4]
    assert read_metrics(tmp_path) == {"step": [1.0, 2.0, 3.0, 4.0], "objective/kl": [1.0, 2.0, 30.0, 40.0]}
