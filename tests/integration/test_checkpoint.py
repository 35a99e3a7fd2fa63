"""Checkpoints (issue 5, items 1, 2, 4 and 5): the whole TrainState, written atomically and pruned,
loaded without running code, and every unusable file refused with one line naming it (exit 2 from
``proxima eval`` and ``proxima resume``)."""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from proxima import checkpoint as ckpt
from proxima import cli
from proxima.config import PPOConfig, from_dict
from proxima.trainer import Trainer, train
import warm_python

STEPS = 64  # 4 envs x 16 steps per iteration


def config(**overrides) -> PPOConfig:
    values = dict(env_id="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=4 * STEPS, num_minibatches=2,
                  update_epochs=2, progress=False, checkpoint_every=1, eval_episodes=0, threads=1)
    values.update(overrides)
    return PPOConfig(**values)


def run(cfg: PPOConfig, run_dir: Path, **kw):
    return train(cfg, run_dir=run_dir, quiet=True, evaluate_at_end=False, **kw)


def steps_of(run_dir: Path) -> list[int]:
    return [int(p.name[5:17]) for p in ckpt.list_checkpoints(run_dir)]


def temp_files(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.endswith(".tmp"))


def one_error_line(err: str, prog: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {lines}"
    assert lines[0].startswith(f"{prog}: error: "), lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory) -> Path:
    """One small valid checkpoint (1 iteration), shared by the bad-file tests."""
    run_dir = tmp_path_factory.mktemp("good") / "run"
    run(config(total_timesteps=STEPS), run_dir)
    return ckpt.list_checkpoints(run_dir)[-1]


# ------------------------------------------------------------------------------------ item 1
def test_checkpoint_holds_the_whole_train_state_and_keeps_the_last_k(tmp_path):
    cfg = config(total_timesteps=5 * STEPS, checkpoint_every=2, keep_checkpoints=2, norm_obs=True, norm_reward=True)
    run_dir = tmp_path / "run"
    run(cfg, run_dir)
    # every 2 iterations (2, 4) and at the end (5); the last 2 kept; no temp file left behind
    assert steps_of(run_dir) == [4 * STEPS, 5 * STEPS]
    assert temp_files(run_dir) == []

    state = ckpt.load_checkpoint(run_dir)
    assert state["format"] == ckpt.FORMAT and state["schema_version"] == ckpt.SCHEMA_VERSION
    assert state["iteration"] == 5 and state["global_step"] == 5 * STEPS
    assert {"proxima", "torch", "python", "numpy", "gymnasium"} <= set(state["versions"])
    resolved = {k: v for k, v in state["config"].items() if k != "run_dir"}
    # the resolved config: the caller's, with --encoder auto resolved (train() leaves the caller's object as given)
    assert resolved == {**{k: v for k, v in cfg.to_dict().items() if k != "run_dir"}, "encoder": "mlp"}
    assert state["lr_schedule"]["iteration"] == 5 and state["lr_schedule"]["num_iterations"] == 5
    assert state["optimizer"]["state"] and "lr" in state["optimizer"]["param_groups"][0]
    assert state["obs_normalizer"]["rms.count"] > 5 * STEPS  # statistics, not fresh ones
    assert state["reward_scaler"]["returns"].shape == (4,)
    assert state["env_backend"] == "native" and set(state["env"]) >= {"state", "elapsed", "ep_return", "generator"}
    assert {"python", "numpy", "torch", "cuda"} <= set(state["rng"])
    assert state["next_obs"].shape == (4, 4)

    # a Trainer restored from it reports the same state (agent, optimizer, normalizers, env, RNGs)
    trainer = Trainer(from_dict(state["config"]), run_dir=run_dir, resume_state=state)
    try:
        again = trainer.state_dict()
    finally:
        trainer.close()
    for key in ("agent", "obs_normalizer", "reward_scaler"):
        assert all(torch.equal(again[key][k], state[key][k]) for k in state[key]), key
    for k, v in state["env"]["state"].items():
        assert torch.equal(again["env"]["state"][k], v)
    assert torch.equal(again["env"]["generator"], state["env"]["generator"])
    assert torch.equal(again["rng"]["torch"], state["rng"]["torch"])
    assert again["rng"]["python"] == state["rng"]["python"]
    assert torch.equal(again["next_obs"], state["next_obs"])
    assert again["iteration"] == 5 and again["global_step"] == 5 * STEPS


# ------------------------------------------------------------------------------------ item 4 (crash)
def test_crash_between_temp_write_and_replace_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    calls = []

    def crash_on_third(tmp, path):
        calls.append(path)
        assert tmp.exists() and tmp.parent == path.parent  # the temp file is complete, in the same folder
        if len(calls) == 3:
            raise RuntimeError("simulated crash before os.replace")

    monkeypatch.setattr(ckpt, "_before_replace", crash_on_third)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(config(), run_dir)
    monkeypatch.undo()

    assert steps_of(run_dir) == [STEPS, 2 * STEPS]  # the third never replaced anything
    assert temp_files(run_dir) == []
    assert ckpt.load_checkpoint(run_dir)["global_step"] == 2 * STEPS

    # a writer killed outright (no cleanup) leaves its temp file: ignored by readers, removed by the next save
    stale = run_dir / "checkpoints" / f".step_{3 * STEPS:012d}.pt.99999.tmp"
    stale.write_bytes(b"PK\x03\x04 half a checkpoint")
    assert ckpt.resolve_checkpoint(run_dir).name == f"step_{2 * STEPS:012d}.pt"
    run(None, run_dir, resume=run_dir)
    assert not stale.exists()
    assert ckpt.load_checkpoint(run_dir)["global_step"] == 4 * STEPS


def test_write_error_is_one_line_and_keeps_the_previous_file(tmp_path, monkeypatch):
    target = tmp_path / "checkpoints" / "step_000000000064.pt"
    ckpt.atomic_torch_save({"x": torch.zeros(3)}, target)

    def disk_full(tmp, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt, "_before_replace", disk_full)
    with pytest.raises(ckpt.CheckpointError) as info:
        ckpt.atomic_torch_save({"x": torch.ones(3)}, target)
    assert str(info.value).startswith(f"{target}: could not write checkpoint (No space left on device; ")
    assert " free there)" in str(info.value) and str(info.value).endswith("any earlier checkpoint is kept")
    assert torch.equal(torch.load(target, weights_only=True)["x"], torch.zeros(3))
    assert [p.name for p in target.parent.iterdir()] == [target.name]


# ------------------------------------------------------------------------------------ item 2
class RunsCommand:
    """Unpickling this object runs ``touch MARKER`` (the classic malicious pickle)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


def test_file_that_runs_code_on_unpickle_is_refused_and_runs_nothing(tmp_path, good_checkpoint):
    evil, marker = tmp_path / "evil.pt", tmp_path / "MARKER"
    state = torch.load(good_checkpoint, weights_only=True)
    state["agent"] = RunsCommand(marker)  # inside an otherwise valid-looking checkpoint
    torch.save(state, evil)

    # the payload is live: a plain torch.load (weights_only=False) would run it
    proof = tmp_path / "PROOF"
    torch.save(RunsCommand(proof), tmp_path / "proof.pt")
    torch.load(tmp_path / "proof.pt", weights_only=False)
    assert proof.exists()

    with pytest.raises(ckpt.CheckpointError) as info:
        ckpt.load_checkpoint(evil)
    message = str(info.value)
    assert message.startswith(f"{evil}: refused to load") and "system" in message and "\n" not in message
    assert not marker.exists()

    # the CLI, in a fresh process: exit 2, one line naming the file, nothing run
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = warm_python.run([sys.executable, "-m", "proxima", "eval", str(evil)], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=120)
    assert out.returncode == 2, out.stderr
    line = one_error_line(out.stderr, "proxima eval")
    assert str(evil) in line and "refused to load" in line
    assert out.stdout == ""
    assert not marker.exists()

    # a plain (non-torch) pickle with the same payload is refused before anything is unpickled
    import pickle

    legacy = tmp_path / "legacy.pt"
    legacy.write_bytes(pickle.dumps(RunsCommand(marker)))
    with pytest.raises(ckpt.CheckpointError, match="not a Proxima checkpoint"):
        ckpt.load_checkpoint(legacy)
    assert not marker.exists()


# ------------------------------------------------------------------------------------ item 5
def _flip_byte_in_largest_record(data: bytes, path: Path) -> bytes:
    with zipfile.ZipFile(path) as zf:
        info = max(zf.infolist(), key=lambda i: i.file_size)
    with open(path, "rb") as f:
        f.seek(info.header_offset + 28)
        extra_len = int.from_bytes(f.read(2), "little")  # the local header's own extra field length
    start = info.header_offset + 30 + len(info.filename.encode()) + extra_len
    pos = start + info.file_size // 2
    out = bytearray(data)
    out[pos] ^= 0xFF
    return bytes(out)


def make_bad_file(kind: str, good: Path, dest: Path) -> None:
    data = good.read_bytes()
    if kind == "empty":
        dest.write_bytes(b"")
    elif kind == "random":
        dest.write_bytes(random.Random(0).randbytes(4096))
    elif kind == "truncated":
        dest.write_bytes(data[: len(data) // 2])
    elif kind == "corrupted":
        dest.write_bytes(_flip_byte_in_largest_record(data, good))
    elif kind == "foreign":
        torch.save({"a": 1}, dest)
    elif kind == "newer":
        state = torch.load(good, weights_only=True)
        state["schema_version"] = ckpt.SCHEMA_VERSION + 1
        torch.save(state, dest)
    elif kind == "incomplete":
        state = torch.load(good, weights_only=True)
        del state["agent"]
        torch.save(state, dest)
    else:
        raise ValueError(kind)


BAD = {
    "empty": "empty file (0 bytes), not a checkpoint",
    "random": "not a Proxima checkpoint (not a torch zip archive)",
    "truncated": "truncated checkpoint",
    "corrupted": "corrupted checkpoint (checksum mismatch in record",
    "foreign": "not a Proxima checkpoint (a torch file holding a dict with keys 'a')",
    "newer": f"checkpoint schema version {ckpt.SCHEMA_VERSION + 1} is newer than this Proxima supports ({ckpt.SCHEMA_VERSION}); upgrade proxima",
    "incomplete": "incomplete checkpoint (missing 'agent')",
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_unusable_checkpoint_is_one_line_naming_the_file_exit_2(kind, tmp_path, good_checkpoint, capsys):
    bad = tmp_path / "checkpoints" / good_checkpoint.name  # a run directory whose latest checkpoint is bad
    bad.parent.mkdir()
    make_bad_file(kind, good_checkpoint, bad)
    with pytest.raises(ckpt.CheckpointError) as info:
        ckpt.load_checkpoint(bad)
    assert str(info.value) == f"{bad}: {BAD[kind]}" or str(info.value).startswith(f"{bad}: {BAD[kind]}")

    assert cli.main(["eval", str(bad)]) == 2
    captured = capsys.readouterr()
    line = one_error_line(captured.err, "proxima eval")
    assert line.startswith(f"proxima eval: error: {bad}: {BAD[kind]}")
    assert captured.out == ""

    assert cli.main(["resume", str(tmp_path)]) == 2
    line = one_error_line(capsys.readouterr().err, "proxima resume")
    assert line.startswith(f"proxima resume: error: {bad}: {BAD[kind]}")
    assert not (tmp_path / "metrics.csv").exists()  # nothing started


def test_resume_of_a_folder_without_checkpoints_is_one_line(tmp_path, capsys):
    assert cli.main(["resume", str(tmp_path / "nope")]) == 2
    assert one_error_line(capsys.readouterr().err, "proxima resume") == f"proxima resume: error: {tmp_path / 'nope'}: no such file or directory"
    assert cli.main(["resume", str(tmp_path)]) == 2
    line = one_error_line(capsys.readouterr().err, "proxima resume")
    assert line == f"proxima resume: error: {tmp_path}: not a Proxima run directory (no checkpoints/step_*.pt inside)"


def test_good_checkpoint_still_evaluates(good_checkpoint, tmp_path, capsys):
    copy = tmp_path / "copy.pt"
    shutil.copy(good_checkpoint, copy)
    assert cli.main(["eval", str(copy), "--episodes", "1", "--json"]) == 0
    assert '"episodes": 1' in capsys.readouterr().out


# ------------------------------------------------------------------------------------ a run read while it trains
@pytest.fixture
def rotated_run(tmp_path) -> Path:
    """A run of 2 iterations that kept only its newest checkpoint (--keep-checkpoints 1): step 64 is gone."""
    run_dir = tmp_path / "live"
    run(config(total_timesteps=2 * STEPS, keep_checkpoints=1), run_dir)
    assert steps_of(run_dir) == [2 * STEPS]
    return run_dir


def test_a_checkpoint_rotated_away_after_listing_is_not_corrupt_and_the_newest_is_read(rotated_run, monkeypatch, capsys):
    listed = ckpt.list_checkpoints
    calls = []

    def listed_just_before_the_run_pruned_it(run_dir):  # what a reader saw one iteration earlier
        calls.append(run_dir)
        return [ckpt.checkpoint_path(run_dir, STEPS)] if len(calls) == 1 else listed(run_dir)

    monkeypatch.setattr(ckpt, "list_checkpoints", listed_just_before_the_run_pruned_it)
    assert cli.main(["eval", str(rotated_run), "--episodes", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 1
    assert len(calls) == 2  # listed again once the first file was gone


def test_a_checkpoint_removed_while_it_is_read_still_loads(rotated_run, monkeypatch):
    checked = ckpt._check_archive

    def check_then_the_run_prunes_it(path, *rest):  # removed between the archive check and the unpickling
        checked(path, *rest)
        Path(path).unlink()

    monkeypatch.setattr(ckpt, "_check_archive", check_then_the_run_prunes_it)
    assert ckpt.load_checkpoint(rotated_run)["global_step"] == 2 * STEPS  # the file opened is read, not the name again


def test_a_missing_checkpoint_is_never_called_corrupt(rotated_run, monkeypatch, capsys):
    gone = ckpt.checkpoint_path(rotated_run, STEPS)
    monkeypatch.setattr(ckpt, "list_checkpoints", lambda run_dir: [gone])  # rotated away every time it is listed
    assert cli.main(["eval", str(rotated_run)]) == 2
    line = one_error_line(capsys.readouterr().err, "proxima eval")
    assert line == (f"proxima eval: error: {rotated_run}: its newest checkpoint was removed while being opened "
                    f"{ckpt.VANISHED_RETRIES} times (the run is writing checkpoints faster than they can be read); "
                    "try again, or raise its --keep-checkpoints")
    monkeypatch.undo()
    assert cli.main(["eval", str(gone)]) == 2  # a file named by the user
    assert one_error_line(capsys.readouterr().err, "proxima eval") == f"proxima eval: error: {gone}: no such file or directory"


def test_eval_of_a_run_with_no_checkpoint_yet_says_so(tmp_path, capsys):
    import socket

    run_dir = tmp_path / "started"
    run_dir.mkdir()
    for name in ("config.yaml", "meta.json", "metrics.csv"):  # what a run writes before its first checkpoint
        (run_dir / name).write_text("")
    assert cli.main(["eval", str(run_dir)]) == 2
    assert one_error_line(capsys.readouterr().err, "proxima eval") == (
        f"proxima eval: error: {run_dir}: the run stopped before its first checkpoint (one is written every "
        "--checkpoint-every N iterations and at the end), so there is nothing to evaluate or resume; train it again "
        f"from the start: proxima train --config {run_dir / 'config.yaml'} --resume auto (its files are moved aside)")
    (run_dir / ".proxima.lock").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))  # training now
    assert cli.main(["eval", str(run_dir)]) == 2
    assert f"{run_dir}: the run is in progress and has no checkpoint yet (" in one_error_line(capsys.readouterr().err, "proxima eval")
