"""`proxima train` / `proxima eval` end to end: the run directory a user gets, and one-line errors."""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from proxima import checkpoint as ckpt
from proxima import cli
from proxima.config import FIELDS
from proxima.logger import CSV_COLUMNS
import warm_python

TAGS = ["charts/episodic_return", "charts/SPS", "charts/learning_rate", "losses/policy_loss", "losses/value_loss",
        "losses/entropy", "losses/approx_kl", "losses/clipfrac", "losses/explained_variance",
        "losses/minibatch_updates", "losses/old_approx_kl", "losses/grad_norm", "losses/vf_clipfrac"]


def help_text(command: str, capsys) -> str:
    """``proxima COMMAND --help`` (exit 0) as one line of words (argparse wraps at the terminal width)."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"])
    assert exit_info.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def proxima_cmd(*args: str, cwd: Path, timeout: int = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return warm_python.run([sys.executable, "-m", "proxima", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    """One real training run through the CLI, shared by the tests that read its run directory."""
    cwd = tmp_path_factory.mktemp("cli")
    result = proxima_cmd("train", "CartPole-v1", "--total-timesteps", "2048", "--run-dir", "D", "--no-progress", cwd=cwd)
    return cwd / "D", result


def test_train_exits_0_and_writes_config_and_meta(cartpole_run):
    run_dir, result = cartpole_run
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "run directory: D" in result.stdout
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["env_id"] == "CartPole-v1" and config["total_timesteps"] == 2048 and config["progress"] is False
    assert set(config) == set(FIELDS)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert "train" in meta["command"] and "--total-timesteps" in meta["command"]
    assert meta["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert meta["versions"]["torch"] == str(torch.__version__)
    assert meta["versions"]["gymnasium"]
    assert meta["device"] == "cpu"
    assert "git_commit" in meta


def test_train_writes_one_csv_row_per_iteration(cartpole_run):
    run_dir, _ = cartpole_run
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
        header = list(rows[0].keys()) if rows else []
    assert header == CSV_COLUMNS
    assert all(tag in header for tag in TAGS)
    # CartPole default preset: 4 envs x 128 steps = 512 per iteration -> 4 iterations
    assert [int(r["iteration"]) for r in rows] == [1, 2, 3, 4]
    assert [int(r["global_step"]) for r in rows] == [512, 1024, 1536, 2048]
    assert all(float(r["losses/value_loss"]) > 0 for r in rows)
    assert float(rows[0]["charts/learning_rate"]) == pytest.approx(2.5e-4)  # annealed from the preset's lr
    assert float(rows[-1]["charts/learning_rate"]) == pytest.approx(2.5e-4 / 4)


def test_train_writes_tensorboard_tags(cartpole_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, _ = cartpole_run
    assert list(run_dir.glob("events.out.tfevents.*"))
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    scalars = acc.Tags()["scalars"]
    missing = [t for t in TAGS if t not in scalars]
    assert not missing, f"missing TensorBoard tags: {missing}"
    assert [e.step for e in acc.Scalars("losses/policy_loss")] == [512, 1024, 1536, 2048]
    assert all(e.value > 0 for e in acc.Scalars("charts/episodic_return"))


def test_train_writes_a_loadable_checkpoint_and_eval_json(cartpole_run):
    run_dir, _ = cartpole_run
    ckpts = sorted((run_dir / "checkpoints").glob("step_*.pt"))
    assert [p.name for p in ckpts] == ["step_000000002048.pt"]
    from proxima.checkpoint import load_checkpoint

    assert load_checkpoint(ckpts[0])["global_step"] == 2048
    result = json.loads((run_dir / "eval.json").read_text())
    assert result["env_id"] == "CartPole-v1" and result["episodes"] == 10


def test_eval_json_prints_one_object(cartpole_run):
    run_dir, _ = cartpole_run
    result = proxima_cmd("eval", str(run_dir), "--json", "--episodes", "3", cwd=run_dir.parent)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    out = json.loads(lines[0])
    assert out["env_id"] == "CartPole-v1" and out["episodes"] == 3
    assert isinstance(out["mean_return"], float) and isinstance(out["std_return"], float)
    assert len(out["returns"]) == 3 and out["mean_return"] == pytest.approx(sum(out["returns"]) / 3)
    assert all(r >= 8 for r in out["returns"])  # CartPole gives at least ~8 steps of +1


def test_help_lists_a_flag_for_every_config_field(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    missing = [name for name in FIELDS if name != "env_id" and f"--{name.replace('_', '-')}" not in text]
    assert not missing, f"flags missing from `proxima train --help`: {missing}"
    assert "ENV_ID" in text
    assert "--no-anneal-lr" in text and "--no-norm-adv" in text


# ------------------------------------------------------------------------------------ errors
def run_main(argv: list, capsys) -> tuple[int, str, str]:
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse reports usage errors by exiting
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2
    assert "Traceback" not in err
    lines = err.rstrip("\n").split("\n")
    assert len(lines) == 1, err
    assert "error:" in lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


TRAIN = ["train", "CartPole-v1", "--run-dir", "D", "--no-progress"]
BAD_TRAIN = {
    "unknown env": (["train", "CartPol-v1", "--run-dir", "D"], ["unknown env id 'CartPol-v1'", "CartPole-v1"]),
    # not a prefix of a real flag: argparse accepts abbreviations (--learning-rat would mean --learning-rate)
    "unknown flag": (TRAIN + ["--learning-rte", "1e-3"], ["unrecognized arguments: --learning-rte"]),
    "minibatches not dividing": (TRAIN + ["--num-minibatches", "3"], ["--num-minibatches", "divide", "512"]),
    "minibatch of one": (TRAIN + ["--num-envs", "1", "--num-steps", "4", "--num-minibatches", "4", "--total-timesteps", "8"],
                         ["--num-minibatches", "at least 2"]),
    "gamma 0": (TRAIN + ["--gamma", "0"], ["--gamma", "(0, 1]"]),
    "gamma 1.5": (TRAIN + ["--gamma", "1.5"], ["--gamma", "(0, 1]"]),
    "lambda -0.1": (TRAIN + ["--gae-lambda", "-0.1"], ["--gae-lambda", "[0, 1]"]),
    "lambda 1.1": (TRAIN + ["--gae-lambda", "1.1"], ["--gae-lambda", "[0, 1]"]),
    "lr 0": (TRAIN + ["--lr", "0"], ["--lr", "positive"]),
    "lr -1": (TRAIN + ["--lr=-1"], ["--lr", "positive"]),
    "clip 0": (TRAIN + ["--clip-coef", "0"], ["--clip-coef", "positive"]),
    "steps below a batch": (TRAIN + ["--total-timesteps", "100"], ["one batch (--num-envs 4 x --num-steps 128 = 512 steps) is larger than --total-timesteps 100"]),
    "not a number": (TRAIN + ["--num-envs", "four"], ["--num-envs 'four': expected an integer"]),
    "unknown preset": (TRAIN + ["--preset", "nope"], ["--preset 'nope'", "fast"]),
    "bad device": (TRAIN + ["--device", "meta"], ["--device 'meta'"]),
    "negative seed": (TRAIN + ["--seed=-1"], ["--seed -1", "from 0 to 2,147,483,647"]),
    "huge seed": (TRAIN + ["--seed", str(2**40)], [f"--seed {2**40}", "from 0 to 2,147,483,647"]),
    "stop return inf": (TRAIN + ["--stop-return", "inf"], ["--stop-return inf", "finite number or none"]),
    "stop return word": (TRAIN + ["--stop-return", "high"], ["--stop-return 'high': expected a number or none"]),
    "stop episodes 0": (TRAIN + ["--stop-return", "400", "--stop-episodes", "0"], ["--stop-episodes 0", "at least 1"]),
    # refused by the size estimate before any env or buffer is allocated (~51 TB for CartPole, most of it
    # one minibatch's activations)
    "a billion envs": (TRAIN + ["--num-envs", "1000000000", "--total-timesteps", str(10**12)],
                       ["(--num-envs 1000000000 x --num-steps 128 / --num-minibatches 4 = 32,000,000,000 rows) needs ~",
                        " TiB of activations on cpu (~", " free; lower --num-envs or --num-steps: the rollout buffers alone need ~", " TiB (at any --num-minibatches)"]),
    # 2 x 10^10 weights: their memory (with gradients and Adam's) is refused before torch tries to allocate it
    "huge network": (TRAIN + ["--hidden-sizes", "100000,100000", "--total-timesteps", "2048"],
                     ["--hidden-sizes 100000,100000: the actor and critic need ~", " GiB on cpu", "lower --hidden-sizes"]),
}


@pytest.mark.parametrize("argv, needles", BAD_TRAIN.values(), ids=list(BAD_TRAIN))
def test_bad_train_input_exits_2_with_one_line_and_creates_nothing(argv, needles, tmp_path, monkeypatch, capsys):
    from proxima.trainer import Trainer

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(Trainer, "run", lambda *a, **k: pytest.fail(f"bad input started training: {argv}"))
    code, out, err = run_main(argv, capsys)
    assert_one_line_error(code, err, *needles)
    assert list(tmp_path.iterdir()) == [], "a failed start must not leave a run directory"


def test_bad_input_in_a_real_process_exits_2_without_traceback(tmp_path):
    result = proxima_cmd("train", "CartPol-v1", "--gamma", "0.5", "--run-dir", "D", cwd=tmp_path, timeout=120)
    assert_one_line_error(result.returncode, result.stderr, "did you mean CartPole-v1")
    assert list(tmp_path.iterdir()) == []


def test_eval_and_report_refuse_more_episodes_than_memory_holds(cartpole_run, tmp_path, capsys):
    """One env per episode: 10**13 of them is one line naming --episodes (and the report's evaluation
    row), not an allocator traceback; nothing is written into the run by eval."""
    import shutil

    run_dir, _ = cartpole_run
    code, _, err = run_main(["eval", str(run_dir), "--episodes", str(10**13)], capsys)
    assert_one_line_error(code, err, "--episodes 10,000,000,000,000: the evaluation builds one env per episode", "free; lower --episodes")
    copy = tmp_path / "R"
    shutil.copytree(run_dir, copy)
    (copy / "eval.json").unlink()  # so that the report evaluates
    code, _, err = run_main(["report", str(copy), "--episodes", str(10**13)], capsys)
    assert code == 0, err
    assert "could not evaluate: --episodes 10,000,000,000,000: the evaluation builds one env per episode" in (copy / "report.md").read_text()


def test_eval_refuses_a_negative_seed(tmp_path, capsys):
    code, _, err = run_main(["eval", str(tmp_path), "--seed=-5"], capsys)
    assert_one_line_error(code, err, "--seed -5", "from 0 to")


def test_eval_of_a_missing_path(tmp_path, capsys):
    code, _, err = run_main(["eval", str(tmp_path / "nowhere")], capsys)
    assert_one_line_error(code, err, "nowhere", "no such file or directory")


def test_eval_of_a_directory_that_is_not_a_run(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("hello")
    code, _, err = run_main(["eval", str(tmp_path / "notes")], capsys)
    assert_one_line_error(code, err, "notes", "not a Proxima run directory")


@pytest.mark.parametrize("content", [b"not a checkpoint at all\n", b"PK\x03\x04truncated zip"], ids=["text", "truncated"])
def test_eval_of_a_file_that_is_not_a_checkpoint(tmp_path, capsys, content):
    path = tmp_path / "model.pt"
    path.write_bytes(content)
    code, _, err = run_main(["eval", str(path)], capsys)
    assert_one_line_error(code, err, "model.pt")


def test_eval_of_a_foreign_torch_file(tmp_path, capsys):
    path = tmp_path / "weights.pt"
    torch.save({"state_dict": {"w": torch.zeros(2)}}, path)
    code, _, err = run_main(["eval", str(path)], capsys)
    assert_one_line_error(code, err, "weights.pt", "not a Proxima checkpoint")


# ------------------------------------------------------------------------------------ user env
USER_ENV = textwrap.dedent('''
    import gymnasium as gym
    import numpy as np


    class Corridor(gym.Env):
        """Five steps of +1 reward whatever the action; obs counts the steps."""

        def __init__(self):
            self.observation_space = gym.spaces.Box(0.0, 5.0, (1,), np.float32)
            self.action_space = gym.spaces.Discrete(2)
            self.t = 0

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.array([0.0], np.float32), {}

        def step(self, action):
            self.t += 1
            return np.array([self.t], np.float32), 1.0, self.t >= 5, False, {}
''')


def test_user_env_module_class_trains_from_the_current_directory(tmp_path):
    (tmp_path / "my_corridor.py").write_text(USER_ENV)
    result = proxima_cmd("train", "my_corridor:Corridor", "--total-timesteps", "128", "--num-envs", "2", "--num-steps", "32",
                         "--num-minibatches", "2", "--eval-episodes", "2", "--run-dir", "D", "--no-progress", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "D"
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["env_id"] == "my_corridor:Corridor"
    assert [p.name for p in (run_dir / "checkpoints").glob("step_*.pt")] == ["step_000000000128.pt"]
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and float(rows[0]["charts/episodic_return"]) == 5.0
    result = json.loads((run_dir / "eval.json").read_text())
    assert result["env_id"] == "my_corridor:Corridor" and result["returns"] == [5.0, 5.0]


def test_a_ctrl_c_while_torch_imports_or_the_flags_are_read_exits_130_without_a_traceback(monkeypatch, capsys):
    """Importing torch takes seconds: a Ctrl-C then, before main() runs a command, is a stop."""
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "broken_import", interrupted)
    monkeypatch.setattr(sys, "argv", ["proxima", "train", "CartPole-v1"])
    with pytest.raises(SystemExit) as e:
        cli.entry()
    assert e.value.code == 130
    monkeypatch.undo()
    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["train", "CartPole-v1"]) == 130
    assert capsys.readouterr().err == ""


def test_output_into_a_closed_pipe_is_quiet():
    """`proxima presets | head -1`: the reader leaves early; no BrokenPipeError traceback, SIGPIPE's status."""
    import subprocess
    import sys

    proc = warm_python.Popen([sys.executable, "-m", "proxima", "presets"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the table is written (start-up takes a second)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err


@pytest.mark.parametrize("run_dir, needle", [("afile", "--run-dir afile: exists and is not a directory"),
                                             ("afile/sub", "--run-dir afile/sub: afile is a file, not a folder")])
def test_a_run_dir_that_is_or_sits_under_a_file_is_one_line(run_dir, needle, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("notes")
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", run_dir, "--no-progress"], capsys)
    assert_one_line_error(code, err, needle)
    assert [p.name for p in tmp_path.iterdir()] == ["afile"] and (tmp_path / "afile").read_text() == "notes"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (a folder nothing can be created in)")
def test_a_run_dir_that_cannot_be_created_names_the_reason_not_free_space(capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", "/proc/proxima-nope", "--no-progress"], capsys)
    assert_one_line_error(code, err, ("--run-dir /proc/proxima-nope: cannot create it (No such file or directory in /proc); "
                                      "choose another --run-dir"))
    assert "free there" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusals")
@pytest.mark.parametrize("flags, needle", [(["--cudagraphs"], "--cudagraphs needs a CUDA device"),
                                           (["--amp", "fp16"], "--amp fp16 needs a CUDA device")])
def test_dry_run_refuses_what_train_refuses_on_this_device(flags, needle, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["train", "CartPole-v1", "--dry-run", *flags], capsys)
    assert_one_line_error(code, err, needle)
    assert out == "" and list(tmp_path.iterdir()) == []


def test_whole_iterations_a_note_then_resume_extends_only_by_whole_ones(tmp_path, monkeypatch, capsys):
    import yaml

    monkeypatch.chdir(tmp_path)
    small = ["--num-envs", "4", "--num-steps", "16", "--no-progress", "--eval-episodes", "0", "--threads", "1"]
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", "R", "--total-timesteps", "150", *small], capsys)
    assert code == 0, err
    assert "proxima: note: --total-timesteps 150 is not a multiple of the batch (64 steps = num_envs x num_steps): " \
           "training 128 steps (2 iterations)" in err
    code, _, err = run_main(["resume", "R", "--total-timesteps", "191"], capsys)  # 191 < 128 + 64: no iteration fits
    assert_one_line_error(code, err, "--total-timesteps 191: the run is already at step 128 and trains whole iterations "
                          "of 64 steps; give at least 192 to extend it")
    code, _, err = run_main(["resume", "R"], capsys)
    assert code == 0 and "the run is complete (128 steps)" in err
    code, _, err = run_main(["resume", "R", "--total-timesteps", "192"], capsys)
    assert code == 0, err
    assert ckpt.list_checkpoints(tmp_path / "R")[-1].name.endswith("192.pt")
    assert yaml.safe_load((tmp_path / "R" / "config.yaml").read_text())["total_timesteps"] == 192  # says what ran


@pytest.mark.parametrize("flags, needle", [
    # the minibatch's activations are what does not fit first (the bootstrap pass counts one chunk: sizing.py)
    (["--num-envs", "1000000000"], "(--num-envs 1000000000 x --num-steps 128 / --num-minibatches 4 = 32,000,000,000 rows) needs ~"),
    (["--num-envs", "1,1000000000"], "(--num-envs 1000000000 x --num-steps 128 / --num-minibatches 4 = 32,000,000,000 rows) needs ~"),
    (["--num-envs", "4", "--num-steps", "0"], "--num-steps 0: must be at least 1"),
    (["--num-envs", "1,,2"], "--num-envs '1,,2': expected a comma-separated list"),
    (["--num-envs", "4", "--max-gym-envs", "-1"], "--max-gym-envs -1: must be 0 or more"),
    (["--num-envs", "4", "--out", "."], "--out .: is a directory"),
])
def test_bench_refuses_what_train_refuses_before_measuring(flags, needle, capsys):
    code, _, err = run_main(["bench", "CartPole-v1", "--backend", "native", "--repeats", "1", "--seconds", "0.1", *flags], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and "Traceback" not in err and needle in lines[-1], err
    assert not any("envs ..." in line for line in lines), "a line was measured before the refusal"


def test_bench_json_records_the_switches(capsys):
    code, out, err = run_main(["bench", "CartPole-v1", "--backend", "native", "--num-envs", "4", "--repeats", "1",
                               "--seconds", "0.05", "--json", "--preset", "fast"], capsys)
    assert code == 0, err
    row = json.loads(out.strip().splitlines()[-1])
    assert (row["preset"], row["compile"], row["cudagraphs"], row["amp"]) == ("fast", False, False, "none")


def test_presets_of_an_unknown_env_is_one_line_and_json_steps_are_numbers(capsys):
    code, _, err = run_main(["presets", "Nope-v1"], capsys)
    assert_one_line_error(code, err, "no presets for 'Nope-v1'; envs with presets: ", "CartPole-v1")
    code, out, _ = run_main(["presets", "CartPole-v1", "--json"], capsys)
    rows = json.loads(out)
    assert code == 0 and {r["preset"] for r in rows} >= {"default", "fast"}
    assert all(isinstance(r["steps"], int) for r in rows) and rows[0]["steps"] == 500_000


def test_an_unknown_flag_is_named_with_its_command(capsys):
    code, _, err = run_main(["eval", "somewhere", "--nope"], capsys)
    assert_one_line_error(code, err, "proxima eval: error: unrecognized arguments: --nope")


@pytest.mark.parametrize("argv, needle", [
    (["CartPole-v1", "--cudagraphs"], "--cudagraphs needs a CUDA device"),
    (["NoSuchEnv-v9"], "unknown env id 'NoSuchEnv-v9'"),
    (["CartPole-v1", "--hidden-sizes", "100000,100000"], "--hidden-sizes 100000,100000: the actor and critic need ~"),
    (["CartPole-v1", "--nproc", "-1"], "--nproc -1: must be at least 1"),
    (["CartPole-v1", "--run-dir", "taken"], "taken is not empty"),
])
def test_nproc_refuses_once_in_the_launcher_what_every_rank_would(argv, needle, tmp_path, monkeypatch, capsys):
    from proxima import launch

    monkeypatch.chdir(tmp_path)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "config.yaml").write_text("seed: 1\n")
    monkeypatch.setattr(launch, "torchrun_command", lambda *a, **k: pytest.fail("torchrun was started"))
    full = ["train", *argv, "--total-timesteps", "4096"] + ([] if "--nproc" in argv else ["--nproc", "2"])
    monkeypatch.setattr(sys, "argv", ["proxima", *full])  # the launcher passes on the command line it was given
    code, _, err = run_main(full, capsys)
    assert_one_line_error(code, err, needle)
    if "taken" not in argv:
        assert [p.name for p in tmp_path.iterdir()] == ["taken"]


def test_nproc_resume_with_a_flag_it_may_not_change_is_refused_before_torchrun(cartpole_run, monkeypatch, capsys):
    from proxima import launch

    run_dir, _ = cartpole_run
    monkeypatch.setattr(launch, "torchrun_command", lambda *a, **k: pytest.fail("torchrun was started"))
    full = ["train", "--resume", str(run_dir), "--nproc", "2", "--lr", "0.1"]
    monkeypatch.setattr(sys, "argv", ["proxima", *full])
    code, _, err = run_main(full, capsys)
    assert_one_line_error(code, err, "--lr 0.1: cannot change when resuming")


def test_nproc_dry_run_prints_the_config_once_and_starts_nothing(tmp_path, monkeypatch, capsys):
    from proxima import launch

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(launch, "torchrun_command", lambda *a, **k: pytest.fail("torchrun was started"))
    code, out, err = run_main(["train", "CartPole-v1", "--nproc", "2", "--dry-run"], capsys)
    assert code == 0, err
    assert yaml.safe_load(out)["env_id"] == "CartPole-v1" and out.count("env_id:") == 1
    assert list(tmp_path.iterdir()) == []


def test_ranks_record_the_command_the_user_typed(monkeypatch):
    from proxima.launch import COMMAND_ENV

    monkeypatch.setenv(COMMAND_ENV, json.dumps(["proxima", "train", "CartPole-v1", "--nproc", "2"]))
    assert cli.recorded_argv() == ["proxima", "train", "CartPole-v1", "--nproc", "2"]
    monkeypatch.setenv(COMMAND_ENV, "{not json")
    assert cli.recorded_argv() == sys.argv


# ------------------------------------------------------------------------------------ eval --env / --env-kwargs
KWARGS_ENV = textwrap.dedent('''
    import gymnasium as gym
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv
    from gymnasium.wrappers import TimeLimit


    class Sized(gym.Wrapper):
        """CartPole whose constructor takes one keyword argument."""

        def __init__(self, size=1):
            super().__init__(TimeLimit(CartPoleEnv(), 50))


    class Plain(gym.Wrapper):
        """CartPole whose constructor takes none."""

        def __init__(self):
            super().__init__(TimeLimit(CartPoleEnv(), 50))


    def init_without_kwargs(self):
        """Sized.__init__ as edited after the run was trained: it takes no keyword argument any more."""
        gym.Wrapper.__init__(self, TimeLimit(CartPoleEnv(), 50))
''')


@pytest.fixture
def kwargs_run(tmp_path, monkeypatch, capsys):
    """A run of kwargs_env:Sized trained with --env-kwargs '{"size": 3}' (recorded in its config.yaml)."""
    (tmp_path / "kwargs_env.py").write_text(KWARGS_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "kwargs_env", raising=False)
    run_dir = tmp_path / "run"
    assert cli.main(["train", "kwargs_env:Sized", "--env-kwargs", '{"size": 3}', "--total-timesteps", "64", "--num-envs", "2",
                     "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1", "--eval-episodes", "0",
                     "--threads", "1", "--quiet", "--no-progress", "--run-dir", str(run_dir)]) == 0
    capsys.readouterr()
    return run_dir


def test_eval_with_another_env_does_not_pass_it_the_runs_env_kwargs(kwargs_run, capsys):
    code, out, err = run_main(["eval", str(kwargs_run), "--env", "kwargs_env:Plain", "--episodes", "1", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["env_id"] == "kwargs_env:Plain"
    # given for it, they are passed: its own error, not one about the run's config.yaml
    code, _, err = run_main(["eval", str(kwargs_run), "--env", "kwargs_env:Plain", "--env-kwargs", '{"size": 3}'], capsys)
    assert_one_line_error(code, err, "takes no argument 'size'")
    assert "config.yaml" not in err


def test_eval_env_kwargs_replace_the_recorded_ones_and_are_parsed_as_trains(kwargs_run, monkeypatch, capsys):
    import kwargs_env

    code, out, err = run_main(["eval", str(kwargs_run), "--env", "kwargs_env:Sized", "--env-kwargs", '{"size": 5}', "--json"], capsys)
    assert code == 0, err
    code, _, err = run_main(["eval", str(kwargs_run), "--env-kwargs", '{"size": '], capsys)
    assert err == ("proxima eval: error: --env-kwargs '{\"size\": ': not valid JSON (Expecting value at column 10); "
                   "e.g. --env-kwargs '{\"size\": 8, \"continuous\": false}'\n")
    # the env's code changed since training: the recorded kwargs no longer fit, and the line says where they come from
    monkeypatch.setattr(kwargs_env.Sized, "__init__", kwargs_env.init_without_kwargs)
    code, _, err = run_main(["eval", str(kwargs_run), "--env", "kwargs_env:Sized"], capsys)
    assert_one_line_error(code, err, "takes no argument 'size'",
                          "(env kwargs {\"size\": 3} recorded in "
                          f"{kwargs_run}/checkpoints/step_000000000064.pt; give others with --env-kwargs JSON, "
                          "or --env-kwargs '{}' for none)")
    code, out, err = run_main(["eval", str(kwargs_run), "--env", "kwargs_env:Sized", "--env-kwargs", "{}", "--episodes", "1"], capsys)
    assert code == 0, err


def test_eval_help_says_how_env_and_env_kwargs_combine(capsys):
    text = help_text("eval", capsys)
    assert ("another env id than the run's, or than MODULE:ID of the run's ID, is built without the run's --env-kwargs; "
            "give its own with --env-kwargs") in text
    assert "--env-kwargs JSON" in text


def test_no_help_text_shows_an_escaped_percent_sign(capsys):
    """argparse %-formats a flag's help but prints a description or epilog as written."""
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    shown = {name: sub.format_help() for name, sub in commands.items()}
    assert not [name for name, text in shown.items() if "%%" in text]
    assert "95% bootstrap CIs" in " ".join(shown["eval"].split())


# ------------------------------------------------------------------------------------ --dry-run checks the encoder
@pytest.mark.parametrize("population", [[], ["--seeds", "1-2"]], ids=["run", "population"])
def test_dry_run_refuses_an_encoder_the_env_cannot_take(population, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["train", "CartPole-v1", "--encoder", "cnn", "--dry-run", *population], capsys)
    assert_one_line_error(code, err, "proxima train: error: --encoder cnn needs an image observation")
    assert out == "" and list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------ --config RUN/config.yaml
def test_train_from_a_runs_config_yaml_starts_a_new_run_directory(cartpole_run):
    """README: `proxima train --config runs/acro/config.yaml --seed 3`. The file records run_dir: D,
    its own directory; the new run must not target D (which is not empty)."""
    run_dir, _ = cartpole_run
    before = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    result = proxima_cmd("train", "--config", "D/config.yaml", "--seed", "3", "--total-timesteps", "512",
                         "--eval-episodes", "0", cwd=run_dir.parent)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == ("proxima train: note: --config D/config.yaml: run_dir D is that run's own "
                                             "directory; this run gets a new one (choose it with --run-dir DIR)")
    named = [ln for ln in result.stdout.splitlines() if ln.startswith("run directory: ")]
    new = Path(named[-1].removeprefix("run directory: "))
    assert new.parts[0] == "runs" and new.name.startswith("CartPole-v1__3__")
    assert yaml.safe_load((run_dir.parent / new / "config.yaml").read_text())["seed"] == 3
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == before  # the old run is untouched


def test_config_run_dir_is_kept_from_a_hand_written_file_and_for_resume_auto(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text("run_dir: X\nenv_id: CartPole-v1\n")
    code, out, err = run_main(["train", "--config", "mine.yaml", "--dry-run"], capsys)
    assert code == 0, err
    assert yaml.safe_load(out)["run_dir"] == "X" and err == ""
    (tmp_path / "R").mkdir()
    (tmp_path / "R" / "config.yaml").write_text("run_dir: R\nenv_id: CartPole-v1\n")
    code, out, err = run_main(["train", "--config", "R/config.yaml", "--dry-run"], capsys)
    assert code == 0, err
    assert yaml.safe_load(out)["run_dir"] is None
    assert err == ("proxima train: note: --config R/config.yaml: run_dir R is that run's own directory; this run gets "
                   "a new one (choose it with --run-dir DIR)\n")
    # --run-dir given: no note, the flag wins
    code, out, err = run_main(["train", "--config", "R/config.yaml", "--run-dir", "Y", "--dry-run"], capsys)
    assert code == 0 and yaml.safe_load(out)["run_dir"] == "Y" and err == ""
    # --resume auto continues the run the file names: its run_dir stays (a run's folder: meta.json marks it one;
    # a folder holding only a config.yaml is no run, and the real command refuses it, as the dry run now does)
    (tmp_path / "R" / "meta.json").write_text('{"kind": "ppo"}')
    code, out, err = run_main(["train", "--config", "R/config.yaml", "--resume", "auto", "--dry-run"], capsys)
    assert code == 0 and yaml.safe_load(out)["run_dir"] == "R" and err == ""


# ------------------------------------------------------------------------------------ help texts, did you mean
def test_resume_help_says_the_runs_values_are_the_defaults(capsys):
    text = help_text("resume", capsys)
    assert "--total-timesteps TOTAL_TIMESTEPS" in text and "(default: 500000)" not in text
    assert "--num-envs NUM_ENVS Parallel environments N (per process). (default: the run's)" in text
    assert "--seed SEED Random seed (envs, network init, sampling). (default: the run's)" in text
    assert "--quiet no progress bar or summary lines" in text
    assert "(default: 4)" in help_text("train", capsys)  # train keeps its defaults


def test_presets_help_explains_env_id_and_json(capsys):
    text = help_text("presets", capsys)
    assert "ENV_ID list only this env's presets (default: every env's; ALE/<Game>-v5 has <Game>-v5's)" in text
    assert ("--json print one JSON list of {env_id, preset, steps, description, config} (steps as a number; config: "
            "the fields the preset sets)") in text
    assert "NAME print this preset's settings (its config: block) as YAML, a --config file" in text


@pytest.mark.parametrize("argv, line", [
    (["train", "CartPole-v1", "--num-env", "8"],
     "proxima train: error: unrecognized arguments: --num-env 8; did you mean --num-envs? (see proxima train --help)\n"),
    (["train", "CartPole-v1", "--num-env=8"],
     "proxima train: error: unrecognized arguments: --num-env=8; did you mean --num-envs? (see proxima train --help)\n"),
    (["resume", "R", "--totl-timesteps", "5"],
     "proxima resume: error: unrecognized arguments: --totl-timesteps 5; did you mean --total-timesteps? "
     "(see proxima resume --help)\n"),
    (["presets", "--jsno"], "proxima presets: error: unrecognized arguments: --jsno; did you mean --json? (see proxima presets --help)\n"),
    (["train", "CartPole-v1", "--zzzzz"], "proxima train: error: unrecognized arguments: --zzzzz (see proxima train --help)\n"),
])
def test_an_unknown_flag_close_to_a_known_one_is_suggested(argv, line, capsys):
    code, out, err = run_main(argv, capsys)
    assert (code, out, err) == (2, "", line)


def test_resuming_a_complete_run_keeps_its_evaluation_and_logs(tmp_path, monkeypatch, capsys):
    """Nothing to train: the same end-of-run evaluation is on disk (same step, episodes and seed), so it
    is shown, not recomputed and rewritten, and no empty TensorBoard file is added per resume."""
    monkeypatch.chdir(tmp_path)
    small = ["--num-envs", "4", "--num-steps", "16", "--total-timesteps", "128", "--eval-episodes", "2", "--threads", "1"]
    code, out, err = run_main(["train", "CartPole-v1", "--run-dir", "R", "--no-progress", *small], capsys)
    assert code == 0, err
    run = tmp_path / "R"
    before = {p.name: p.stat().st_mtime_ns for p in run.iterdir() if p.is_file()}
    evaluated = json.loads((run / "eval.json").read_text())
    code, out, err = run_main(["resume", "R"], capsys)
    assert code == 0 and "the run is complete (128 steps)" in err
    assert "at step 128 over 2 episodes (deterministic) (eval.json)" in out
    assert f"{evaluated['mean_return']:.2f}" in out
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir() if p.is_file()} == before
    edited = {**evaluated, "unfinished": 1, "max_steps": "lots"}  # a field a line is made from, edited by hand
    (run / "eval.json").write_text(json.dumps(edited))
    code, _, err = run_main(["report", "R", "--episodes", "0"], capsys)
    assert_one_line_error(code, err, "eval.json: max_steps is not a number of steps ('lots')")
    code, out, err = run_main(["resume", "R"], capsys)  # not this evaluation: made and written again
    assert code == 0 and "Traceback" not in err and json.loads((run / "eval.json").read_text()) == evaluated
    code, out, err = run_main(["resume", "R", "--eval-episodes", "3"], capsys)  # another evaluation: made and written
    assert code == 0, err
    assert json.loads((run / "eval.json").read_text())["episodes"] == 3
    assert len(list(run.glob("events.out.tfevents.*"))) == 1
    # a row logged past the last checkpoint (a resume that extended the run, killed before its next
    # checkpoint): a resume with nothing to train still drops it
    lines = (run / "metrics.csv").read_text().splitlines()
    (run / "metrics.csv").write_text("\n".join([*lines, lines[-1].replace("128", "192", 1)]) + "\n")
    code, out, err = run_main(["resume", "R"], capsys)
    assert code == 0, err
    assert (run / "metrics.csv").read_text().splitlines() == lines
