"""Message and docs defects a review found (session 26):

* the commands a line or report suggests for a run of a ``module:Class`` env: resume and eval build
  such an env only when ``--env`` names it (a run's files are data), so a suggested ``proxima resume
  RUN`` or ``proxima eval RUN`` without it was refused with exit 2. Each test runs the command as printed;
* multi-run plot labels spelled a None config value ``None``, population labels ``none``;
* benchmarks/results/bench-CartPole-v1-cpu.md's and docs/performance.md's text quoted numbers its
  table no longer holds.

(A population evaluates only at its end, where a signal already stops it at once: --eval-every is
refused with --seeds, so there is no periodic population evaluation to make stoppable.)"""

from __future__ import annotations

import os
import re
import shlex
import signal
import sys
from pathlib import Path

import pytest
from cli_helpers import TINY_ENV, error_line, fake_run_dir, run_main

ROOT = Path(__file__).resolve().parents[2]
MODULE = "fix26_tiny_env"
ENV = f"{MODULE}:Tiny"
TINY = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1",
        "--no-progress"]


@pytest.fixture
def module_env(tmp_path, monkeypatch):
    """ENV importable as a user's own module is: on sys.path, imported fresh."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / f"{MODULE}.py").write_text(TINY_ENV)
    monkeypatch.syspath_prepend(str(mods))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    return ENV


def _backticked(text: str, prefix: str) -> str:
    """The one `...` command in ``text`` that starts with ``prefix``."""
    [command] = [c for c in re.findall(r"`([^`]+)`", text) if c.startswith(prefix)]
    return command


def _runs(command: str, capsys, *extra: str) -> None:
    code, _, err = run_main(shlex.split(command)[1:] + list(extra), capsys)
    assert code == 0, (command, err)


# ------------------------------------------------------------------------------------ 1. commands for a module env
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX paths")
def test_a_run_directory_holding_a_module_env_run_names_the_resume_that_continues_it(tmp_path, capsys, module_env):
    from proxima.rundir import not_empty_message

    run = tmp_path / "run"
    code, _, err = run_main(["train", ENV, "--total-timesteps", "32", *TINY, "--eval-episodes", "0", "--run-dir", str(run)],
                            capsys)
    assert code == 0, err
    code, _, err = run_main(["train", ENV, "--total-timesteps", "32", *TINY, "--eval-episodes", "0", "--run-dir", str(run)],
                            capsys)
    line = error_line(code, err, "is not empty")
    command = _backticked(line, "proxima resume")
    assert command == f"proxima resume --env {ENV} {run}", line
    # a checkpoint continued into a directory that holds this run: the same command
    assert f"`proxima resume --env {ENV} {run}`" in not_empty_message(run, "resume")
    _runs(command, capsys, "--total-timesteps", "64", "--eval-episodes", "0")


def test_the_report_of_a_stopped_module_env_population_names_the_resume_that_continues_it(tmp_path, capsys, module_env):
    from proxima.config import PPOConfig
    from proxima.population import member_configs
    from proxima.population_run import train_population
    from proxima.signals import TrainingInterrupted

    cfg = PPOConfig(env_id=ENV, num_envs=2, num_steps=16, num_minibatches=2, update_epochs=1, total_timesteps=64,
                    threads=1, progress=False, eval_episodes=0)
    run = tmp_path / "pop"
    with pytest.raises(TrainingInterrupted):  # SIGINT in iteration 1 of 2: checkpointed, then stopped
        train_population(member_configs(cfg, [1, 2]), [1, 2], {}, run_dir=run, quiet=True, stop_after=1)
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    heading = (run / "report.md").read_text().splitlines()[2]
    assert "so far (stopped; " in heading, heading
    command = _backticked(heading, "proxima resume")
    assert command == f"proxima resume --env {ENV} {run}", heading
    _runs(command, capsys, "--eval-episodes", "0")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_signal_in_a_module_env_populations_final_evaluation_names_the_eval_that_evaluates_it(tmp_path, capsys,
                                                                                              module_env, monkeypatch):
    from proxima.population import Population

    real = Population.evaluate_members

    def signalled(self, *args, **kwargs):  # SIGTERM as the end-of-run evaluation starts
        os.kill(os.getpid(), signal.SIGTERM)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Population, "evaluate_members", signalled)
    run = tmp_path / "pop"
    code, _, err = run_main(["train", ENV, "--seeds", "1-2", "--total-timesteps", "32", *TINY, "--eval-episodes", "1",
                             "--run-dir", str(run)], capsys)
    assert code == 143, err
    [stop] = [ln for ln in err.splitlines() if ln.startswith("proxima: stopped by SIGTERM; during the end-of-run evaluation")]
    command = _backticked(stop, "proxima eval")
    assert command == f"proxima eval --env {ENV} {run}", stop
    monkeypatch.undo()
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    _runs(command, capsys, "--episodes", "1")


def test_eval_video_of_a_module_env_population_names_the_member_command_with_its_env(tmp_path, capsys, module_env):
    run = tmp_path / "pop"
    code, _, err = run_main(["train", ENV, "--seeds", "1-2", "--total-timesteps", "32", *TINY, "--eval-episodes", "0",
                             "--run-dir", str(run)], capsys)
    assert code == 0, err
    video = tmp_path / "v.mp4"
    code, _, err = run_main(["eval", str(run), "--video", str(video)], capsys)
    line = error_line(code, err, "is a population")
    assert f"record one member: proxima eval --env {ENV} {run}/<member dir> --video {video}" in line, line
    code, _, err = run_main(["eval", str(run), "--trust-run", "--video", str(video)], capsys)  # as typed, when typed
    line = error_line(code, err, "is a population")
    assert f"record one member: proxima eval --trust-run {run}/<member dir> --video {video}" in line, line
    assert not video.exists()


# ------------------------------------------------------------------------------------ 2. plot labels spell None "none"
def test_multi_run_plot_labels_spell_none_as_population_labels_do(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from proxima.cli import main
    from proxima.plot import group_runs
    from proxima.population_report import setting_label

    figures, real = [], Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (figures.append(self), real(self, *a, **k))[1])
    long = {f"option_{i}": "x" * 12 for i in range(12)}  # a label longer than the panel: the legend's title holds it whole
    off = fake_run_dir(tmp_path, "off", target_kl=None, env_kwargs=long)
    on = fake_run_dir(tmp_path, "on", target_kl=0.01, env_kwargs={**long, "option_0": "y"})
    [label_off, label_on] = group_runs([off, on])
    assert setting_label({"target_kl": None}) in label_off and "target_kl=0.01" in label_on
    assert main(["plot", str(off), str(on), "--out", str(tmp_path / "c.png"), "--panels", "per-setting"]) == 0
    legend_titles = [ax.get_legend().get_title().get_text().replace("\n", " ") for ax in figures[-1].axes]
    assert legend_titles == [label_off, label_on]
    assert "target_kl=none" in legend_titles[0] and "None" not in legend_titles[0]


# ------------------------------------------------------------------------------------ 4. docs quote their tables
def _table_rows(text: str) -> list:
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")]


def _k(cell: str) -> float:
    """``44.0k (43.4k-44.3k)`` -> 44000: a median cell of `proxima bench`'s table."""
    value = cell.split()[0]
    return float(value[:-1]) * {"k": 1e3, "M": 1e6}[value[-1]] if value[-1] in "kM" else float(value)


def test_the_cartpole_bench_text_quotes_the_native_training_range_its_table_holds():
    text = (ROOT / "benchmarks" / "results" / "bench-CartPole-v1-cpu.md").read_text()
    table, reading = text.split("## Reading the table")
    native = [_k(r[4]) for r in _table_rows(table) if r[0] == "native" and int(r[1].replace(",", "")) >= 256]
    [train] = [item for item in reading.split("\n- ") if item.startswith("**Train**")]
    low, high = (float(v) for v in re.search(r"at (\d+)-(\d+)k steps/s native", train).groups())
    assert low * 1e3 <= min(native) < (low + 1) * 1e3 and (high - 1) * 1e3 < max(native) <= high * 1e3, (native, train)


def test_performance_md_quotes_the_learning_tables_pendulum_row_as_it_is():
    rows = _table_rows((ROOT / "benchmarks" / "results" / "learning-10-seeds.md").read_text())
    [pendulum] = [r for r in rows if r[0] == "Pendulum-v1"]
    worst = f"{min(float(v.split(': ')[1]) for v in pendulum[3].split(', ')):.1f}"
    passed = pendulum[5]
    doc = (ROOT / "docs" / "performance.md").read_text()
    paragraphs = [p for p in doc.split("\n\n") if "learning-10-seeds.md" in p and "Pendulum" in p]
    assert paragraphs
    for p in paragraphs:  # each paragraph citing the table says what its Pendulum row says
        flat = " ".join(p.split())
        assert f"{passed} each" in flat and f"worst {worst}" in flat, flat
