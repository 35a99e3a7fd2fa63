"""Mutation review of s45's config, CLI and distributed commits, the fast parts: what the surviving
mutants changed, pinned.

1. a stop without a checkpoint has no run directory (not '.');
2. a stopped run's 'run directory: D' is said by rank 0 only;
3. rl-zoo's batch_size in --hyperparams is advised as --num-minibatches X with what X counts, not its size;
4. one thread in each of several processes is never noted as too many threads;
9. CleanRL's --capture-video False / --track=false say there is nothing to turn off, and drop it;
10. presets.unapplied_note: none for a config resolve built, and the total is never among what it sets;
11. distributed.init() and DistContext.wrap() each claim Proxima's inductor cache on their own;
13. eval and report given rl-zoo's --hyperparams are not told to type train's flags."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from proxima import PPOConfig, cli, cpuinfo
from proxima.presets import resolve, unapplied_note
from proxima.signals import TrainingInterrupted, stopped_run_dir
from proxima.trainer import threads_note
from tests.cli_helpers import error_line, run_main

ROOT = Path(__file__).resolve().parents[2]


# -- 1. and 2. a stop's run directory -------------------------------------------------------------------------------

def test_a_stop_without_a_checkpoint_has_no_run_directory(capsys):
    e = TrainingInterrupted(signal.SIGTERM, None)
    assert stopped_run_dir(e) is None  # was Path('.'): 'run directory: .' printed for a run that kept nothing
    assert cli.say_run_stopped(e) == 128 + signal.SIGTERM
    assert "run directory" not in capsys.readouterr().out


def test_a_stopped_runs_directory_is_said_by_rank_0_only(tmp_path, monkeypatch, capsys):
    e = TrainingInterrupted(signal.SIGTERM, tmp_path / "r" / "checkpoints" / "step_64.pt")
    assert stopped_run_dir(e) == tmp_path / "r"
    monkeypatch.setenv("RANK", "1")
    assert cli.say_run_stopped(e) == 128 + signal.SIGTERM
    assert capsys.readouterr().out == ""  # rank 1 of a torchrun job: rank 0 says it, once
    monkeypatch.setenv("RANK", "0")
    cli.say_run_stopped(e)
    assert capsys.readouterr().out == f"run directory: {tmp_path / 'r'}\n"


# -- 3. --hyperparams batch_size:N -----------------------------------------------------------------------------------

def test_zoo_batch_size_is_advised_as_a_minibatch_count_not_its_size(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--hyperparams", "batch_size:64", "--dry-run"], capsys)
    line = error_line(code, err, "--hyperparams is rl-zoo's")
    assert "--num-minibatches X (it counts minibatches: --num-envs x --num-steps / your minibatch size)" in line
    assert "--num-minibatches 64" not in line  # 64 is a minibatch's size; as a count it trains another run


# -- 4. threads_note of one thread per process ---------------------------------------------------------------------

@pytest.fixture
def two_cpus(monkeypatch):
    monkeypatch.setattr(cpuinfo, "usable_cpus", lambda root=None: 2)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)


def test_one_thread_in_each_of_more_processes_than_cpus_is_not_noted(two_cpus):
    assert threads_note(1, 3) == ""  # one thread is the least a process runs: nothing fewer to advise
    assert threads_note(2, 3) == ("--threads 2 in each of 3 processes (6 threads) is more than this machine's 2 CPUs: the "
                                  "threads take turns on them, which is usually slower than --threads 1")
    assert threads_note(3) != "" and threads_note(2) == ""


# -- 9. CleanRL's switches given false ---------------------------------------------------------------------------

def test_capture_video_false_says_no_video_is_recorded_and_to_drop_it(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--capture-video", "False", "--dry-run"], capsys)
    line = error_line(code, err, "unrecognized arguments: --capture-video False")
    assert line.endswith("; --capture-video False: no video is recorded while training; drop it (see proxima train --help)")


def test_track_false_says_nothing_is_sent_to_wandb(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--track=false", "--dry-run"], capsys)
    line = error_line(code, err, "unrecognized arguments: --track=false")
    assert "nothing is sent to Weights & Biases; drop it" in line
    assert "--wandb" not in line  # not the advice for turning tracking on


# -- 10. presets.unapplied_note ------------------------------------------------------------------------------------

def test_unapplied_note_is_none_for_a_config_resolve_built_then_edited():
    cfg = resolve("Pendulum-v1")
    cfg.num_envs = 4  # the caller's own field after the preset: the preset was applied, nothing to say
    assert unapplied_note(cfg) is None


def test_unapplied_note_does_not_list_the_total_among_the_presets_fields():
    note = unapplied_note(PPOConfig(env_id="Pendulum-v1"))
    sets = note.split(" it sets ", 1)[1].split(", where", 1)[0]
    assert sets == ("num_envs=32, lr=0.0005, gamma=0.95, update_epochs=10, num_minibatches=16, ent_coef=0.0, norm_obs=True, "
                    "norm_reward=True")
    assert "total_timesteps=" not in sets  # the total is in the call, cfg.total_timesteps = N


# -- 11. the inductor cache, claimed by init() and by wrap() each --------------------------------------------------

#: in a fresh interpreter (torch._dynamo not yet imported); prints the variable after the step named by argv[1]
CACHE_SETUP = """
import json, os, sys
import torch
import torch.distributed as dist
from proxima import distributed
if sys.argv[1] == "init":  # init() alone, no wrap
    ctx = distributed.init()
else:  # a context built by hand (no init()), then wrapped as a rank of two would be
    dist.init_process_group("gloo", rank=0, world_size=1)
    ctx = distributed.DistContext(0, 2, 0, torch.device("cpu"))
    assert type(ctx.wrap(torch.nn.Linear(2, 2))).__name__ == "DistributedDataParallel"
print(json.dumps({"var": os.environ.get("TORCHINDUCTOR_CACHE_DIR")}))
"""


@pytest.mark.parametrize("step", ["init", "wrap"])
def test_init_and_wrap_each_claim_proximas_inductor_cache(tmp_path, step):
    (tmp_path / "home").mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(tmp_path / "home"), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1",
               LOCAL_RANK="0", OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", CACHE_SETUP, step], env=env, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["var"] == str(tmp_path / "home" / ".cache" / "proxima" / "inductor")


# -- 13. --hyperparams to eval and report ----------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["eval", "report"])
def test_eval_and_report_given_zoo_hyperparams_are_not_told_trains_flags(command, tmp_path, capsys):
    code, _, err = run_main([command, str(tmp_path), "--hyperparams", "batch_size:64"], capsys)
    line = error_line(code, err, "unrecognized arguments: --hyperparams batch_size:64")
    assert line == f"proxima {command}: error: unrecognized arguments: --hyperparams batch_size:64 (see proxima {command} --help)"
    assert "--num-minibatches" not in err and "rl-zoo" not in err
