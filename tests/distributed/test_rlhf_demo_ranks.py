"""`proxima rlhf --demo` under torchrun (2 CPU processes, gloo): rank 0 alone picks the run directory and builds the
demo's model and prompts; the other rank waits for them, trains on them, and ends with its own line when rank 0 fails
while building. Every rank once built its own: a second directory (RUN-2/demo/) and the demo lines twice."""

import json
import sys
from pathlib import Path

import pytest
from distributed_helpers import run

TORCHRUN = [sys.executable, "-m", "proxima.torchrun", "--standalone", "--nproc-per-node", "2"]
#: as short as the flags allow: 2 pretraining steps, 2 PPO steps of 4 responses per rank
TINY_DEMO = ["--demo", "--steps", "2", "--demo-pretrain-steps", "2", "--batch-size", "4", "--max-new-tokens", "4",
             "--update-epochs", "1", "--threads", "1", "--no-plot", "--print-every", "0", "--sample-every", "0"]
LOST = "proxima rlhf: error: rank 1 stopped: lost contact with another rank ("  # then why and the error


def launch(cmd, cwd: Path):
    return run(cmd, cwd, HF_HUB_OFFLINE=1, TRANSFORMERS_OFFLINE=1, TOKENIZERS_PARALLELISM="false")


def demo_lines(text: str) -> list:
    return [line for line in text.splitlines() if line.startswith("demo: ")]


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_a_two_rank_demo_writes_one_run_directory_and_pretrains_once(tmp_path):
    res = launch([*TORCHRUN, "-m", "proxima.rlhf", *TINY_DEMO], tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    runs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    # the old rank 1 claimed runs/NAME-2 and wrote its own demo/ model and prompts.txt there
    assert len(runs) == 1 and runs[0].startswith("rlhf-demo__1__"), runs
    run_dir = tmp_path / "runs" / runs[0]
    assert sorted(p.name for p in (run_dir / "demo").iterdir()) == ["model", "prompts.txt"]
    assert len(demo_lines(res.stdout)) == 2, res.stdout  # "pretraining a 2-layer ..." and "pretraining loss ...", once
    assert res.stdout.count("done: 2 steps") == 1 and f"run directory runs/{runs[0]}" in res.stdout, res.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert json.loads((run_dir / "meta.json").read_text())["world_size"] == 2
    checksums = summary["param_checksums"]  # both ranks trained the one model rank 0 wrote, in step
    assert len(checksums) == 2 and checksums[0] == checksums[1], summary


FAIL_BUILD = '''import sys
from proxima.rlhf import demo
from proxima.rlhf.config import ConfigError


def broken(folder, *args, **kwargs):
    folder.mkdir(parents=True)
    (folder / "model.partial").write_text("half")  # a half-built model, which rank 1 must never load
    raise ConfigError("demo build failed on purpose")


if __import__("os").environ["RANK"] == "0":
    demo.build_assets = broken
from proxima.distributed import exit_process
from proxima.rlhf.__main__ import main

exit_process(lambda: main(sys.argv[1:]))
'''


@pytest.mark.slow  # a multi-process job of 10-40 s: the slow tier (README)
def test_when_rank_0_fails_building_the_demo_the_other_rank_ends_with_its_line_and_nothing_is_kept(tmp_path):
    (tmp_path / "ranks.py").write_text(FAIL_BUILD)
    res = launch([*TORCHRUN, str(tmp_path / "ranks.py"), *TINY_DEMO], tmp_path)
    # rank 1, waiting for the files, ends as rank 0 leaves the process group (not at the group's timeout)
    assert res.returncode == 2, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "stopped by" not in res.stderr, res.stderr
    said = sorted(line for line in res.stderr.splitlines() if line.startswith("proxima"))
    assert said[0] == "proxima rlhf: error: demo build failed on purpose" and said[1].startswith(LOST), said
    assert len(said) == 2, said
    assert demo_lines(res.stdout) == [], res.stdout  # the old rank 1 pretrained a model of its own
    assert not (tmp_path / "runs").exists()  # rank 0 took back what it made, runs/ included
