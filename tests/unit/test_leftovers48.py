"""Leftovers of review 48 (docs/cli.md, docs/migrating.md):

(1) a single run's `proxima resume RUN --total-timesteps M` stopped by SIGINT after it wrote M into config.yaml
and before its first checkpoint names the command that carries M (as a population's stop line does);
(2) train_population refuses a switch populations do not run (init_from=...) in the field's words, not the CLI's flag;
(3) the note on 1-sample minibatches under --no-norm-adv reaches a Python caller too, in its fields' words, once;
(4) a broken preset file's line is the one PyYAML read: a duplicate key's last, a key read as a bool or a number;
(5) a module:Class population's closing 'report:' command carries --env, which report needs to evaluate its members;
(6) bench given a training flag it has not (--lr, SB3's --n-epochs) says it trains a preset and names train's flag.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import sys
from pathlib import Path

import pytest

import proxima
from cli_helpers import TINY_ENV, TINY_POP, module_written_in, run_main
from proxima import checkpoint as ckpt
from proxima import logger as logger_module
from proxima import presets
from proxima.signals import TrainingInterrupted

TINY = ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1", "--eval-episodes", "1",
        "--threads", "1", "--backend", "native"]

posix = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


# ------------------------------------------------------------------ (1) a single run's extending resume, stopped
class SigintAsTheLoggerOpens:
    """Once armed, SIGINT sent to this process as the run's logger is next built: after the resume wrote
    config.yaml (train_state.open_run_dir), before the loop's guard, where OutsideLoop's handler stops it."""

    def __init__(self, monkeypatch):
        self.armed = self.sent = False
        real = logger_module.RunLogger

        def hooked(*args, **kwargs):
            if self.armed and not self.sent:
                self.sent = True
                os.kill(os.getpid(), signal.SIGINT)
            return real(*args, **kwargs)

        monkeypatch.setattr(logger_module, "RunLogger", hooked)


def _total(run: Path) -> int:
    return int(re.search(r"^total_timesteps: (\d+)$", (run / "config.yaml").read_text(), re.M).group(1))


@pytest.fixture
def run64(tmp_path, capsys) -> Path:
    """A complete single run of 64 steps (one iteration)."""
    run = tmp_path / "R"
    code, _, err = run_main(["train", "CartPole-v1", "--total-timesteps", "64", *TINY, "--quiet", "--run-dir", str(run)],
                            capsys)
    assert code == 0, err
    return run


@posix
def test_a_stop_before_an_extending_resumes_first_checkpoint_names_the_command_with_the_extension(run64, monkeypatch,
                                                                                                   capsys):
    run = run64
    sigint = SigintAsTheLoggerOpens(monkeypatch)
    sigint.armed = True
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "128", "--quiet"], capsys)
    assert code == 130 and sigint.sent, err
    sigint.armed = False
    assert ckpt.list_checkpoints(run) == [ckpt.checkpoint_path(run, 64)] and _total(run) == 128, err
    command = f"proxima resume {shlex.quote(str(run))} --total-timesteps 128"
    assert err.strip().splitlines()[-1] == (f"proxima: stopped by SIGINT; outside an iteration; the run is as its last "
                                            f"checkpoint left it; checkpoint: {ckpt.checkpoint_path(run, 64)}; continue "
                                            f"with: {command}"), err
    code, _, err = run_main(shlex.split(command)[1:] + ["--quiet"], capsys)  # as the line says: on to the extension
    assert code == 0, err
    assert ckpt.list_checkpoints(run)[-1] == ckpt.checkpoint_path(run, 128) and _total(run) == 128


@posix
def test_from_python_the_stop_names_the_config_that_extends_it(run64, monkeypatch):
    run = run64
    sigint = SigintAsTheLoggerOpens(monkeypatch)
    sigint.armed = True
    with pytest.raises(TrainingInterrupted) as e:
        proxima.train(proxima.PPOConfig(total_timesteps=128), resume=str(run), quiet=True)
    assert sigint.sent
    call = f"proxima.train(proxima.PPOConfig(total_timesteps=128), resume={str(run)!r})"
    assert str(e.value).endswith(f"continue with: {call} (in a shell: proxima resume {shlex.quote(str(run))} "
                                 "--total-timesteps 128)"), str(e.value)


@posix
def test_a_stop_before_a_plain_resumes_first_checkpoint_names_the_plain_command(tmp_path, monkeypatch, capsys):
    run = tmp_path / "S"  # stopped at 64 of its 128 steps: its checkpoint holds its target
    cfg = proxima.PPOConfig(env_id="CartPole-v1", total_timesteps=128, num_envs=2, num_steps=32, num_minibatches=2,
                            update_epochs=1, eval_episodes=1, threads=1, backend="native", run_dir=str(run))
    proxima.train(cfg, quiet=True, callback=lambda row: False)  # stops after its first iteration, checkpointed
    assert ckpt.list_checkpoints(run) == [ckpt.checkpoint_path(run, 64)]
    sigint = SigintAsTheLoggerOpens(monkeypatch)
    sigint.armed = True
    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)
    assert code == 130 and sigint.sent, err
    assert err.strip().splitlines()[-1].endswith(f"; checkpoint: {ckpt.checkpoint_path(run, 64)}; continue with: "
                                                 f"proxima resume {shlex.quote(str(run))}"), err


# ------------------------------------------------------------------ (2) train_population's refusal in Python words
def test_train_population_refuses_init_from_naming_the_field_not_the_flag(tmp_path):
    with pytest.raises(proxima.ConfigError) as e:
        proxima.train_population(proxima.PPOConfig(init_from=str(tmp_path), num_envs=2, num_steps=16, total_timesteps=64),
                                 seeds=[0, 1], run_dir=tmp_path / "P")
    assert str(e.value) == (f"PPOConfig.init_from = {str(tmp_path)!r}: not supported with train_population's seeds/sweep "
                            "(not wired for populations yet: members start from fresh networks); leave it at None")
    assert not (tmp_path / "P").exists()


def test_train_population_refuses_plot_naming_the_field(tmp_path):
    with pytest.raises(proxima.ConfigError) as e:
        proxima.train_population(proxima.PPOConfig(plot=True, num_envs=2, num_steps=16, total_timesteps=64), seeds=[0, 1],
                                 run_dir=tmp_path / "P")
    assert str(e.value).startswith("PPOConfig.plot = True: not supported with train_population's seeds/sweep (")
    assert str(e.value).endswith("); leave it at False")


def test_the_cli_still_names_the_flag(tmp_path, capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "0-1", "--plot", "--total-timesteps", "64", *TINY,
                             "--run-dir", str(tmp_path / "P")], capsys)
    assert code == 2 and err.strip().splitlines()[-1] == (
        "proxima train: error: --plot is not supported with --seeds/--sweep (`proxima plot RUN` or `proxima report RUN` "
        "draws the members' curves); drop it"), err


# ------------------------------------------------------------------ (3) the 1-sample minibatch note from Python
ONE_SAMPLE = dict(num_minibatches=64, norm_adv=False, num_envs=4, num_steps=16, update_epochs=1, eval_episodes=0,
                  threads=1, backend="native", progress=False)
PY_NOTE = ("proxima: note: num_minibatches=64 with norm_adv=False: each minibatch is 1 sample (the batch is num_envs 4 x "
           "num_steps 16 = 64), 64 gradient steps an epoch; SB3's batch_size copied as num_minibatches does this: "
           "num_minibatches = num_envs x num_steps / batch_size (num_minibatches=1 for SB3's batch_size 64); keep it if "
           "1-sample minibatches are meant")


def test_python_train_notes_one_sample_minibatches_once_and_a_resume_does_not(tmp_path, capsys):
    run = tmp_path / "R"
    proxima.train(proxima.PPOConfig(total_timesteps=64, run_dir=str(run), **ONE_SAMPLE))
    err = capsys.readouterr().err
    assert [ln for ln in err.splitlines() if "each minibatch is 1 sample" in ln] == [PY_NOTE], err
    proxima.train(proxima.PPOConfig(total_timesteps=128), resume=str(run))
    assert "each minibatch is 1 sample" not in capsys.readouterr().err


def test_python_train_population_notes_it_once(tmp_path, capsys):
    proxima.train_population(proxima.PPOConfig(total_timesteps=64, **ONE_SAMPLE), seeds=[0, 1], run_dir=tmp_path / "P")
    err = capsys.readouterr().err
    assert [ln for ln in err.splitlines() if "each minibatch is 1 sample" in ln] == [PY_NOTE], err


def test_the_cli_notes_it_once_in_its_flags_words(tmp_path, capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--num-minibatches", "64", "--no-norm-adv", "--num-envs", "4",
                             "--num-steps", "16", "--update-epochs", "1", "--eval-episodes", "0", "--threads", "1",
                             "--total-timesteps", "64", "--no-progress", "--run-dir", str(tmp_path / "R")], capsys)
    assert code == 0, err
    notes = [ln for ln in err.splitlines() if "each minibatch is 1 sample" in ln]
    assert len(notes) == 1 and notes[0].startswith("proxima train: note: --num-minibatches 64 with --no-norm-adv: "), err


# ------------------------------------------------------------------ (4) the line of a broken preset file's value
# preset_dir: tests/conftest.py's (the shipped preset files in a folder of the test's own)


GOOD = "Good-v0:\n  default:\n    config: {}\n"  # lines 1-3

#: (file text, the line PyYAML's value is on, what the line says it is)
KEYS_AS_READ = [
    ("Broken-v0:\n  default:\n    config: {}\nBroken-v0: 3\n", 4, "the entry of Broken-v0 is an int (3)"),
    (GOOD + "on:\n  default: fast\n", 5, "preset True/default is a str ('fast')"),
    (GOOD + "yes: [1]\n", 4, "the entry of True is a list ([1])"),
    (GOOD + "0x10: 3\n", 4, "the entry of 16 is an int (3)"),
    (GOOD + "Broken-v0:\n  default:\n    config: [1]\n  default:\n    config: [2]\n", 8,
     "the config of preset Broken-v0/default is a list ([2])"),
]


@pytest.mark.parametrize("text, lineno, says", KEYS_AS_READ, ids=["duplicate-env", "on", "yes", "hex", "duplicate-preset"])
def test_a_broken_preset_files_line_is_where_pyyaml_read_the_value(preset_dir, text, lineno, says):
    broken = preset_dir / "zz_broken.yaml"
    broken.write_text(text)
    with pytest.raises(presets.ConfigError) as e:
        presets.resolve("CartPole-v1")
    assert str(e.value).startswith(f"preset file {broken} at line {lineno}: {says}, not a mapping of "), str(e.value)


# ------------------------------------------------------------------ (5) a module env population's report command
@pytest.fixture
def env_module(tmp_path, monkeypatch):
    """tiny48lo.py (a module:Class env) in tmp_path, the current directory, importable."""
    yield from module_written_in(tmp_path, monkeypatch, "tiny48lo", TINY_ENV)


def test_a_module_env_populations_report_command_carries_env_and_evaluates_its_members(env_module, capsys):
    code, out, err = run_main(["train", "tiny48lo:Tiny", "--seeds", "1-2", *TINY_POP, "--eval-episodes", "0",
                               "--total-timesteps", "64", "--run-dir", "pop"], capsys)
    assert code == 0, err
    closing = out.splitlines()[-4:]
    assert closing[:2] == ["evaluate: proxima eval --env tiny48lo:Tiny pop",
                           "report: proxima report --env tiny48lo:Tiny pop"], out
    assert not list(Path("pop").glob("*/eval.json"))
    code, out, err = run_main(shlex.split(closing[1].removeprefix("report: proxima ")), capsys)  # as printed
    assert code == 0 and out.splitlines()[-1] == "wrote pop/report.md", (out, err)
    assert "not filled" not in err and "would import" not in Path("pop/report.md").read_text(), err


# ------------------------------------------------------------------ (6) bench given a training flag it has not
PRESETS = "--preset NAME picks another preset (`proxima presets ENV_ID` lists them)"
BENCH_HINTS = [
    (["--lr", "0.1"], f"--lr: bench trains its preset's settings and takes no --lr: {PRESETS}; proxima train takes it"),
    (["--learning-rate", "0.1"], f"--learning-rate: bench trains its preset's settings and takes no --learning-rate: {PRESETS}; "
                                 "proxima train takes --lr"),
    (["--update-epochs", "4"], f"--update-epochs: bench trains its preset's settings and takes no --update-epochs: {PRESETS}; "
                               "proxima train takes it"),
    (["--n-epochs", "4"], "--n-epochs: proxima train's --update-epochs stands for it; bench trains its preset's settings and "
                          f"takes no --update-epochs: {PRESETS}"),
    (["--no-norm-adv"], f"--no-norm-adv: bench trains its preset's settings and takes no --no-norm-adv: {PRESETS}; proxima "
                        "train takes it"),
    (["--total-timesteps", "1000"], "--total-timesteps: bench measures each size for --seconds S, not a number of steps; "
                                    "proxima train takes it"),
]


@pytest.mark.parametrize("flags, says", BENCH_HINTS, ids=lambda v: v[0] if isinstance(v, list) else "")
def test_bench_given_a_training_flag_says_it_trains_a_preset_and_names_trains_flag(flags, says, capsys):
    code, out, err = run_main(["bench", "CartPole-v1", *flags], capsys)
    assert code == 2 and out == ""
    assert err.strip().splitlines()[-1] == (f"proxima bench: error: unrecognized arguments: {' '.join(flags)}; {says} "
                                            "(see proxima bench --help)"), err


def test_bench_keeps_its_other_hints(capsys):
    code, _, err = run_main(["bench", "CartPole-v1", "--cuda"], capsys)  # a flag bench has: SB3's word's own hint
    assert code == 2 and "did you mean --device cuda?" in err and "takes no" not in err, err
    code, _, err = run_main(["bench", "CartPole-v1", "--batch-size", "64"], capsys)  # the minibatch hint stands
    assert code == 2 and "proxima train's --num-minibatches stands for it" in err and "takes no" not in err, err
