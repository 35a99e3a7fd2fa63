"""A population's resume that extends it and is stopped before its first iteration ends, and the
population's progress line (docs/populations.md: Checkpoints and resume; the progress line).

(1) `proxima resume RUN --total-timesteps M` writes M into population.json and the members' config.yaml
before its first iteration; a SIGINT landing before that iteration's checkpoint leaves the checkpoint's
target in the checkpoint. The stop's command carries M, and a plain `proxima resume RUN` says that it
keeps the checkpoint's target (as a single run's resume says of its config.yaml) rather than undoing
the recorded one without a word.
(2) The progress line gives per setting the mean of its members' rolling returns
(charts/episodic_return_100), the number a single run's line and `proxima plot` show.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import signal
import sys
from pathlib import Path

import pytest

import proxima
from cli_helpers import run_main
from proxima import checkpoint as ckpt
from proxima import logger as logger_module
from proxima.logger import ROLLING_RETURN, RollingReturn, return_text
from proxima.signals import TrainingInterrupted

TINY = ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1", "--eval-episodes", "1",
        "--threads", "1", "--backend", "native"]

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _target(run: Path) -> int:
    return json.loads((run / "population.json").read_text())["total_timesteps_per_member"]


def _member_totals(run: Path) -> set:
    return {int(re.search(r"^total_timesteps: (\d+)$", (d / "config.yaml").read_text(), re.M).group(1))
            for d in run.iterdir() if d.is_dir() and d.name.startswith("m0")}


@pytest.fixture
def population(tmp_path, capsys) -> Path:
    """A complete population of 2 members at 64 steps each (one iteration)."""
    run = tmp_path / "P"
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "64", *TINY, "--quiet",
                             "--run-dir", str(run)], capsys)
    assert code == 0, err
    return run


class SigintAsTheLoggersOpen:
    """Once armed, SIGINT sent to this process as the members' loggers are next built: after a resume wrote
    its files, before the loop's guard (the first iteration), where OutsideLoop's handler stops it at once."""

    def __init__(self, monkeypatch):
        self.armed = self.sent = False
        real = logger_module.RunLogger

        def hooked(*args, **kwargs):
            if self.armed and not self.sent:
                self.sent = True
                os.kill(os.getpid(), signal.SIGINT)  # the handler runs here, as it would wherever the signal lands
            return real(*args, **kwargs)

        monkeypatch.setattr(logger_module, "RunLogger", hooked)

    def arm(self) -> None:
        self.armed, self.sent = True, False


@pytest.fixture
def sigint(monkeypatch) -> SigintAsTheLoggersOpen:
    return SigintAsTheLoggersOpen(monkeypatch)


def _stop_an_extending_resume(run: Path, sigint: SigintAsTheLoggersOpen, capsys) -> str:
    """`proxima resume RUN --total-timesteps 128` of the 64-step population, stopped by SIGINT after it wrote its
    files and before its first iteration: its stderr."""
    sigint.arm()
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "128", "--quiet"], capsys)
    assert code == 130 and sigint.sent, err
    sigint.armed = False  # no more signals
    assert ckpt.list_checkpoints(run) == [ckpt.checkpoint_path(run, 64)]  # nothing trained: the checkpoint still says 64
    assert _target(run) == 128 and _member_totals(run) == {128}  # the files say the extension already
    return err


def test_a_stop_before_an_extending_resumes_first_iteration_names_the_command_with_the_extension(population, sigint, capsys):
    run = population
    err = _stop_an_extending_resume(run, sigint, capsys)
    command = f"proxima resume {shlex.quote(str(run))} --total-timesteps 128"
    assert err.strip().splitlines()[-1] == (f"proxima: stopped by SIGINT; outside an iteration; the population is as its last "
                                            f"checkpoint left it; checkpoint: {ckpt.checkpoint_path(run, 64)}; continue with: "
                                            f"{command}")
    code, _, err = run_main(shlex.split(command)[1:] + ["--quiet"], capsys)  # as the line says: on to the extension
    assert code == 0, err
    assert _target(run) == 128 and ckpt.list_checkpoints(run)[-1] == ckpt.checkpoint_path(run, 128)
    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)  # as recorded now: no note
    assert code == 0 and "differs from the checkpoint's" not in err, err


def test_a_plain_resume_after_that_stop_says_it_keeps_the_checkpoints_target(population, sigint, capsys):
    run = population
    _stop_an_extending_resume(run, sigint, capsys)
    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)
    assert code == 0, err
    only = ckpt.checkpoint_path(run, 64)
    assert (f"proxima: note: {run / 'population.json'}: total_timesteps_per_member 128 differs from the checkpoint's 64 "
            f"({only}; a resume stopped before its first checkpoint wrote it, or an edit); resume keeps the checkpoint's "
            f"target and rewrites population.json and the members' config.yaml from it; give it as a flag: proxima resume "
            f"{shlex.quote(str(run))} --total-timesteps 128") in err, err
    assert _target(run) == 64 and _member_totals(run) == {64}  # as the note says


def test_from_python_the_stop_and_the_note_name_the_config_that_extends_it(population, sigint, capsys):
    run = population
    sigint.arm()
    with pytest.raises(TrainingInterrupted) as e:
        proxima.train_population(proxima.PPOConfig(total_timesteps=128), resume=str(run), quiet=True)
    call = f"proxima.train_population(proxima.PPOConfig(total_timesteps=128), resume={str(run)!r})"
    assert str(e.value).endswith(f"continue with: {call} (in a shell: proxima resume {shlex.quote(str(run))} "
                                 "--total-timesteps 128)"), str(e.value)
    assert sigint.sent
    sigint.armed = False
    capsys.readouterr()
    proxima.train_population(None, resume=str(run), quiet=True)
    err = capsys.readouterr().err
    note = next(ln for ln in err.splitlines() if "population.json: total_timesteps_per_member 128" in ln)
    assert "differs from the checkpoint's 64 " in note and note.endswith(f"give it in the config: {call}"), err


def test_a_stop_before_a_plain_resumes_first_iteration_names_the_plain_command(tmp_path, sigint, capsys):
    from proxima.population import member_configs
    from proxima.population_run import train_population

    run = tmp_path / "S"  # stopped at 64 of its 128 steps: its checkpoint holds its target
    cfg = proxima.PPOConfig(env_id="CartPole-v1", total_timesteps=128, num_envs=2, num_steps=32, num_minibatches=2,
                            update_epochs=1, eval_episodes=1, threads=1, backend="native")
    with pytest.raises(TrainingInterrupted):
        train_population(member_configs(cfg, [1, 2], {}), [1, 2], {}, run_dir=run, quiet=True, stop_after=1)
    sigint.arm()
    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)
    assert code == 130 and sigint.sent, err
    assert err.strip().splitlines()[-1].endswith(f"; checkpoint: {ckpt.checkpoint_path(run, 64)}; continue with: "
                                                 f"proxima resume {shlex.quote(str(run))}"), err
    assert "differs from the checkpoint's" not in err and _target(run) == 128, err


# ------------------------------------------------------------------------------ (2) the progress line
def _windows(member: Path) -> list:
    """[(global_step, rolling return, episodes in its window)] of each metrics.csv row of a member."""
    window, out = RollingReturn(), []
    with open(member / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            window.add_row(row)
            out.append((int(row["global_step"]), float(row[ROLLING_RETURN]), window.episodes))
    return out


def test_the_progress_line_gives_each_settings_mean_of_its_members_rolling_returns(tmp_path, capsys):
    run = tmp_path / "P"
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--sweep", "lr=1e-3,3e-4", "--total-timesteps", "256",
                             *TINY, "--run-dir", str(run)], capsys)
    assert code == 0, err
    lines = [ln for ln in err.splitlines() if ln.startswith("population 4 members | step ")]
    assert len(lines) == 4, err  # one per iteration (4 x 64 steps)
    members = {lr: sorted(run.glob(f"m*-lr{lr}")) for lr in ("0.001", "0.0003")}
    expected = []
    for i, line in enumerate(lines):
        step = 64 * (i + 1)
        parts = []
        for lr, dirs in members.items():  # the number first (a line of another label still gives it), then the line
            rows = [next(r for r in _windows(d) if r[0] == step) for d in dirs]
            mean = return_text(sum(r[1] for r in rows) / len(rows))  # the rows' charts/episodic_return_100, as plot reads them
            low, high = min(r[2] for r in rows), max(r[2] for r in rows)
            span = f"{low}" if low == high else f"{low}-{high}"
            assert re.search(rf"lr={lr}: (\S+) ", line).group(1) == mean, (line, mean)
            parts.append(f"lr={lr}: {mean} (2 of 2 members, {span} ep each)")
        expected.append(f"population 4 members | step {step}/member | mean rolling return {'; '.join(parts)} | "
                        + line.rsplit(" | ", 1)[1])
    assert lines == expected
