"""A new RLHF run never writes over a file of its folder (the names it writes are refused there); the files of
a run are data, read bounded and never waited on (a FIFO planted at a name): one line naming the file, exit 2,
nothing of the run changed. A damaged policy/ of a finished run is written again from its last checkpoint."""

import os
import shutil
import struct
import threading
import time

import pytest

from proxima.cli import main as proxima_main
from proxima.rlhf import loop, resume, rundir, train_rlhf
from proxima.rlhf.config import ConfigError, RLHFConfig


def config(assets, run_dir, **overrides) -> RLHFConfig:
    base = dict(policy=str(assets / "model"), prompts=str(assets / "prompts.txt"),
                reward="proxima.rlhf.demo:keyword_sentiment", batch_size=8, num_minibatches=2, update_epochs=1,
                max_new_tokens=4, lr=1e-3, steps=2, print_every=0, sample_every=1, checkpoint_every=1, plot=False,
                run_dir=str(run_dir))
    base.update(overrides)
    return RLHFConfig(**base)


def resume_refused(*args, **kwargs) -> str:
    """resume()'s refusal of bad input (it raises), as the one line `proxima resume` prints for it."""
    from proxima.checkpoint import CheckpointError
    from proxima.diskspace import StorageError

    with pytest.raises((ConfigError, StorageError, CheckpointError)) as e:
        resume(*args, **kwargs)
    return f"proxima resume: error: {e.value}"


def snapshot(folder) -> dict:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def flags(assets, run_dir, policy=None) -> list:
    return ["rlhf", "--policy", str(policy or assets / "model"), "--prompts", str(assets / "prompts.txt"),
            "--reward", "proxima.rlhf.demo:keyword_sentiment", "--steps", "1", "--batch-size", "8",
            "--max-new-tokens", "4", "--print-every", "0", "--no-plot", "--run-dir", str(run_dir)]


# ---------------------------------------------------------------------------------------------
# a new run into a folder that holds what it would write
# ---------------------------------------------------------------------------------------------
def test_a_new_run_refuses_a_folder_holding_names_it_writes_and_changes_nothing(assets, tmp_path, capsys):
    proj = tmp_path / "proj"
    (proj / "policy").mkdir(parents=True)
    (proj / "policy" / "precious.txt").write_text("mine")
    for name in ("metrics.csv", "samples.jsonl", "summary.json", "notes.txt", "events.out.tfevents.1.host"):
        (proj / name).write_text("mine")
    before = snapshot(proj)
    assert proxima_main(flags(assets, proj)) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"proxima rlhf: error: --run-dir {proj}: already holds events.out.tfevents.1.host, metrics.csv, policy/, "
        "samples.jsonl, summary.json, which a new run writes (and would replace); choose another --run-dir, or move "
        "those away (other files may stay)"]
    assert snapshot(proj) == before
    # what a folder holds besides those stays, and the run goes there
    for name in ("policy", "metrics.csv", "samples.jsonl", "summary.json", "events.out.tfevents.1.host"):
        shutil.move(proj / name, tmp_path / name)
    assert proxima_main(flags(assets, proj)) == 0
    assert (proj / "notes.txt").read_text() == "mine" and loop.policy_complete(proj / "policy")


def test_the_demo_refuses_such_a_folder_before_it_writes_its_model(tmp_path, capsys):
    proj = tmp_path / "proj"
    (proj / "checkpoints").mkdir(parents=True)
    (proj / "curve.png").write_bytes(b"mine")
    before = snapshot(proj)
    assert proxima_main(["rlhf", "--demo", "--demo-pretrain-steps", "0", "--steps", "1", "--run-dir", str(proj)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"proxima rlhf: error: --run-dir {proj}: already holds checkpoints/, curve.png, which a new run writes "
                   "(and would replace); choose another --run-dir, or move those away (other files may stay)"]
    assert snapshot(proj) == before  # no demo/ either


def test_an_input_model_inside_the_run_folder_is_never_replaced(assets, tmp_path, capsys):
    proj = tmp_path / "proj2"
    shutil.copytree(assets / "model", proj / "policy")  # the user's SFT model, where the run writes its policy/
    before = snapshot(proj)
    assert proxima_main(flags(assets, proj, policy=proj / "policy")) == 2
    # the line names the flag
    assert capsys.readouterr().err == (f"proxima rlhf: error: --policy {proj / 'policy'}: lies in policy of --run-dir "
                                       f"{proj}, which a new run writes (and would replace); choose another --run-dir, "
                                       "or move it out of there\n")
    assert snapshot(proj) == before
    with pytest.raises(ConfigError) as info:  # without the config, the folder's own name
        rundir.check_new_run_dir(proj)
    assert "already holds policy/, which a new run writes" in str(info.value)


# ---------------------------------------------------------------------------------------------
# a run's files are data: bounded reads, no FIFO waited on
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def finished(assets, tmp_path_factory):
    return train_rlhf(config(assets, tmp_path_factory.mktemp("runfiles") / "run"))


@pytest.fixture
def run(finished, tmp_path):
    return shutil.copytree(finished, tmp_path / "run")


def _unblock_later(fifo, after: float = 3.0, until: float = 30.0) -> None:
    """Open ``fifo`` for writing (and close it) once a reader waits on it, from ``after`` seconds on: the code
    before the fix, which waited on it, reads EOF then instead of hanging the test."""
    def go():
        time.sleep(after)
        deadline = time.monotonic() + until
        while time.monotonic() < deadline:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                return
            except OSError:
                time.sleep(0.05)

    threading.Thread(target=go, daemon=True).start()


@pytest.mark.parametrize("name", ["config.yaml", "samples.jsonl", "metrics.csv"])
def test_a_fifo_at_a_run_file_is_one_line_and_the_resume_changes_nothing(run, name, capsys):
    (run / name).unlink()
    os.mkfifo(run / name)
    _unblock_later(run / name)
    before = snapshot(run)
    err = resume_refused(run, steps=3)
    assert err.startswith(f"proxima resume: error: {run / name}: is not a regular file (a FIFO, device or socket)"), err
    assert "\n" not in err
    assert snapshot(run) == before  # not even TensorBoard's files: both logs are read before any is rewritten


@pytest.mark.parametrize("name, cap", [("config.yaml", "TEXT_MAX_BYTES"), ("samples.jsonl", "LOG_MAX_BYTES")])
def test_a_run_file_over_its_cap_is_one_line(run, name, cap, monkeypatch, capsys):
    """As a sparse file of 30 GB planted there is (a MemoryError before), with the cap lowered to stay fast."""
    with open(run / name, "a") as f:
        f.write("\n" * 3000)
    monkeypatch.setattr(f"proxima.rundir.{cap}", 2000)
    before = snapshot(run)
    err = resume_refused(run, steps=3)
    size = (run / name).stat().st_size
    assert err == (f"proxima resume: error: {run / name}: {size:,} bytes, more than the 2,000 a run writes there; the run "
                   "directory was damaged or edited"), err
    assert snapshot(run) == before


def _huge_safetensors_header(run):
    file = run / "policy" / "model.safetensors"
    data = bytearray(file.read_bytes())
    data[:8] = struct.pack("<Q", 2**62)
    file.write_bytes(bytes(data))


def _index_of_a_number(run):
    (run / "policy" / "model.safetensors.index.json").write_text('{"weight_map": {"lm_head.weight": 5}}')


@pytest.mark.parametrize("damage", [_huge_safetensors_header, _index_of_a_number])
def test_a_damaged_policy_of_a_finished_run_is_written_again_from_its_checkpoint(run, damage, capsys):
    damage(run)
    assert not loop.is_finished(run, 2)
    assert resume(run) == 0
    assert "policy/ or summary.json is missing or incomplete; writing them" in capsys.readouterr().out
    assert loop.is_finished(run, 2)


@pytest.mark.parametrize("reward, command", [("myreward.py:score", "proxima resume --trust-run"),
                                             ("proxima.rlhf.demo:keyword_sentiment", "proxima resume ")])
def test_a_folder_holding_a_run_names_the_resume_that_works(tmp_path, reward, command):
    # a run whose reward imports code resumes only with --trust-run: the advice must say so
    (tmp_path / "meta.json").write_text('{"kind": "rlhf"}')
    (tmp_path / "config.yaml").write_text(f"reward: {reward}\n")
    with pytest.raises(ConfigError) as e:
        rundir.check_new_run_dir(tmp_path)
    assert f"continue it with `{command}" in str(e.value) and str(tmp_path) in str(e.value)
    assert ("--trust-run" in str(e.value)) == (command.endswith("--trust-run"))
