"""torchrun: two CPU processes (gloo), each with its own prompts, finish with identical parameters; and
`proxima resume` of such a run starts as many processes (through the --nproc launcher)."""

import json
import os
import shutil
import sys
from types import SimpleNamespace

import pytest
import yaml
from distributed_helpers import RecordingPopen, record_launches
import warm_python


def test_two_processes_train_data_parallel_and_stay_in_sync(assets, ddp_run):
    summary = json.loads((ddp_run / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 2
    checksums = summary["param_checksums"]
    assert len(checksums) == 2 and checksums[0] == checksums[1] and summary["ranks_in_sync"]
    # each process drew its own prompts: rank 0 logs its samples, which come from its even-indexed shard
    prompts = (assets / "prompts.txt").read_text().splitlines()
    logged = [json.loads(line)["prompt"] for line in (ddp_run / "samples.jsonl").read_text().splitlines()]
    assert all(prompts.index(p) % 2 == 0 for p in logged)


# --- `proxima resume` of a multi-process RLHF run starts as many processes ----------------------------
@pytest.fixture
def rlhf_run(assets, tmp_path, monkeypatch, two_processes):
    """An RLHF run directory as 2 processes left it (its config.yaml and meta.json), a launcher whose Popen
    only records, and an in-process resume that records instead of training."""
    from proxima import rlhf

    _, two_process_config, _ = two_processes
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)

    def write(world=2, **overrides):
        (run_dir / "config.yaml").write_text(yaml.safe_dump(two_process_config(assets, run_dir, **overrides)))
        (run_dir / "meta.json").write_text(json.dumps({"kind": "rlhf", "world_size": world}))

    write()
    for name in ("TORCHELASTIC_RUN_ID", "WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    record_launches(monkeypatch)
    in_process = []
    monkeypatch.setattr(rlhf, "resume", lambda path, **kw: in_process.append((str(path), kw)) or 0)
    return SimpleNamespace(path=run_dir, write=write, in_process=in_process)


def _resume(monkeypatch, *args):
    from proxima.cli import main

    argv = ["resume", *map(str, args)]
    monkeypatch.setattr(sys, "argv", ["proxima", *argv])
    return main(argv)


def test_resume_of_a_two_process_rlhf_run_starts_two_processes(rlhf_run, monkeypatch, capsys):
    assert _resume(monkeypatch, rlhf_run.path, "--steps", "3") == 0
    assert RecordingPopen.started == [[sys.executable, "-m", "proxima.torchrun", "--nproc-per-node", "2", "--standalone",
                               "-m", "proxima", "resume", str(rlhf_run.path), "--steps", "3"]]
    assert rlhf_run.in_process == []
    assert (f"proxima resume: {rlhf_run.path} is an RLHF run of 2 processes: resuming with 2 processes on this machine"
            in capsys.readouterr().err)


def test_the_ranks_and_a_one_process_run_resume_in_process(rlhf_run, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")  # a rank the launcher started: it resumes, never launches again
    monkeypatch.setenv("RANK", "1")
    assert _resume(monkeypatch, rlhf_run.path, "--quiet") == 0
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.delenv("RANK")
    rlhf_run.write(world=1)
    assert _resume(monkeypatch, rlhf_run.path) == 0
    assert [kw for _, kw in rlhf_run.in_process] == [{"steps": None, "trust_run": False, "quiet": True},
                                                     {"steps": None, "trust_run": False, "quiet": False}]
    assert RecordingPopen.started == []


def test_what_every_rank_would_refuse_is_one_line_before_any_starts(rlhf_run, monkeypatch, capsys):
    rlhf_run.write(reward="my_rewards:score")  # a recorded reward that imports code: only with --trust-run
    assert _resume(monkeypatch, rlhf_run.path) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("proxima resume: error: ") and "pass --trust-run" in err[0], err
    rlhf_run.write(steps=2)
    assert _resume(monkeypatch, rlhf_run.path, "--steps", "0") == 2
    assert capsys.readouterr().err.splitlines() == ["proxima resume: error: --steps 0: must be at least 1"]
    monkeypatch.setattr(os, "cpu_count", lambda: 1)  # a count recorded in meta.json is data
    assert _resume(monkeypatch, rlhf_run.path) == 2
    assert "an RLHF run of 2 processes, more than this machine's 1 CPU; resume it under the torchrun command" in \
        capsys.readouterr().err
    assert RecordingPopen.started == [] and rlhf_run.in_process == []


def test_the_advice_and_the_refusal_name_a_resume_that_works(monkeypatch, tmp_path):
    from proxima.rlhf import loop
    from proxima.rlhf.config import ConfigError

    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert loop.resume_advice(tmp_path) == f"`proxima resume {tmp_path}`"
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # one machine: `proxima resume` starts the 2 processes
    assert loop.resume_advice(tmp_path) == f"`proxima resume {tmp_path}`"
    monkeypatch.setenv("WORLD_SIZE", "4")  # two machines: only their own torchrun command starts them
    assert loop.resume_advice(tmp_path) == f"`proxima resume {tmp_path}` under the same torchrun command (4 processes)"
    one = SimpleNamespace(dist=SimpleNamespace(world_size=1))
    file = tmp_path / "checkpoints" / "step_000001.pt"
    with pytest.raises(ConfigError) as info:
        loop.load_checkpoint(one, file, {"format": loop.CHECKPOINT_FORMAT, "ranks": [{}, {}]})
    assert str(info.value) == (f"{file}: written by 2 process(es), resumed with 1; use the same count "
                               f"(`proxima resume {tmp_path}` starts 2 on this machine)")


@pytest.mark.slow
def test_proxima_resume_continues_a_two_process_run_with_two(ddp_run, tmp_path):
    """The real launcher: `proxima resume RUN --steps 3` of the 2-process run trains step 3 with 2 processes."""
    run_dir = shutil.copytree(ddp_run, tmp_path / "ddp")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    res = warm_python.run([sys.executable, "-m", "proxima", "resume", str(run_dir), "--steps", "3"], capture_output=True,
                         text=True, timeout=180, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "is an RLHF run of 2 processes: resuming with 2 processes" in res.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["final_step"] == 3 and summary["ranks_in_sync"]
    assert (run_dir / "checkpoints" / "step_000003.pt").is_file()
