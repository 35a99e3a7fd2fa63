"""A newcomer's path through README.md and the quickstart notebook (review 42): the README's examples
train without the not-whole-iterations note, its "First hour" steps do what it says, its resume claim
names the Gymnasium exception, test-suite internals sit under "Development and tests", and the
notebook reports and plots the rolling training return rather than one iteration's noisy mean."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import re
from pathlib import Path

import pytest

from proxima import PPOConfig, train
from proxima.cli import main
from proxima.logger import RollingReturn
from tests.integration import test_docs as docs

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PYTHON_API = ROOT / "docs" / "python_api.md"  # the README's Python API, moved there
CLI_DOC = ROOT / "docs" / "cli.md"  # the README's command-line details (its train examples), moved there
NOTEBOOK = ROOT / "notebooks" / "quickstart.ipynb"
NOT_WHOLE = "is not a multiple of the batch"


def _section(text: str, title: str) -> str:
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _prose_lines(text: str) -> list[str]:
    """README lines outside fenced code and tables: the ones a reader reads as sentences."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
        elif not fenced and not line.startswith("|"):
            out.append(line)
    return out


def test_the_python_api_example_trains_whole_iterations():
    """total_timesteps=100_000 printed 'not a multiple of the batch (512 steps ...): training 99,840 steps'."""
    block = re.findall(r"^```python\n(.*?)^```", PYTHON_API.read_text(), flags=re.S | re.M)
    api = next(b for b in block if "make_env" in b)
    total = int(re.search(r"total_timesteps=([\d_]+)", api).group(1))
    batch = PPOConfig().num_envs * PPOConfig().num_steps
    assert total % batch == 0, f"{total:,} is not whole iterations of {batch}"


def test_readme_training_examples_print_no_partial_iteration_note(tmp_path, monkeypatch, capsys):
    """Each README `proxima train` example, and each of docs/cli.md (the README's command-line details), trains
    whole iterations (its --dry-run prints the same note); a line that is itself a --dry-run example shows what a
    dry run prints and is left out."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "mymodule.py").write_text(docs.USER_ENV)
    checked, noted = [], []
    for where, argv in docs.COMMANDS:
        if not where.startswith(("README.md", "docs/cli.md")) or argv[:1] != ["train"] or "--dry-run" in argv:
            continue
        if {"--config", "--init-from", "--nproc", "--seeds"} & set(argv):  # need a run first, or many processes
            continue
        code = main(argv + ["--dry-run"])
        err = capsys.readouterr().err
        assert code == 0, f"{where}: exit {code}\n{err[-1000:]}"
        checked.append(where)
        noted += [f"{where}: {line}" for line in err.splitlines() if NOT_WHOLE in line]
    assert len(checked) >= 6 and noted == []


def test_readme_qualifies_exact_resume_for_gymnasium_envs():
    text = " ".join(README.read_text().split())
    assert "exact resume" not in text
    intro = text.split("## Quick start", 1)[0]
    assert "bit-identical to an uninterrupted run for the torch-native envs on CPU" in intro
    assert "Gymnasium-backed envs restart their episodes on resume" in intro
    assert "(bit-identical on CPU with native envs; Gymnasium envs restart their episodes)" in text  # populations
    reliability = " ".join((ROOT / "docs" / "reliability.md").read_text().split())
    assert "Gymnasium-backed envs cannot save their state: the resumed run restarts their episodes" in reliability


def test_quick_start_leaves_test_internals_to_the_development_section():
    text = README.read_text()
    quick, dev = _section(text, "Quick start"), _section(text, "Development and tests")
    assert "make train" in quick and "make test " in quick
    for word in ("PROXIMA_TESTS_COLD", "TEST_JOBS", "warm_python", "pytest-xdist", "make test-slow"):
        assert word not in quick and word in dev, word
    assert text.index("## First hour") < text.index("## Command line")


def test_readme_prose_lines_are_readable_lengths():
    """The report comment (~600 characters) and three paragraphs' lines of 450-820 characters were split."""
    moved = ("cli.md", "python_api.md", "environments.md", "presets.md")  # the README's long parts, moved verbatim
    long = [(page.name, i, len(line)) for page in (README, *(ROOT / "docs" / name for name in moved))
            for i, line in enumerate(_prose_lines(page.read_text()), 1) if len(line) > 200]
    assert long == []
    for page in (README, CLI_DOC):  # the report example: the README's, and docs/cli.md's with its comment
        commands = [line for line in page.read_text().splitlines() if line.startswith("proxima report runs/acro ")]
        assert commands and all(len(line) <= 120 for line in commands), page


def test_first_hour_shows_each_step_as_one_command():
    hour = _section(README.read_text(), "First hour")
    bash = docs.shell_blocks(hour)[0]
    steps = [re.split(r"\s+#", line)[0].strip() for line in bash.splitlines() if re.search(r"# \d\. ", line)]
    assert steps == ["proxima train CartPole-v1 --preset fast --run-dir runs/cartpole",
                     "tensorboard --logdir runs",
                     "proxima eval runs/cartpole --video cartpole.mp4",
                     "python play.py",
                     "proxima resume runs/cartpole --stop-return none --total-timesteps 307200"]


def _tiny_stopped_cartpole(tmp_path: Path) -> Path:
    """runs/cartpole as step 1 leaves it, in miniature: the fast preset stopped by --stop-return."""
    code = main(["train", "CartPole-v1", "--preset", "fast", "--run-dir", "runs/cartpole", "--num-envs", "8",
                 "--total-timesteps", "2048", "--stop-return", "1", "--stop-episodes", "1", "--eval-episodes", "1",
                 "--quiet", "--no-progress"])
    assert code == 0
    return tmp_path / "runs" / "cartpole"


def _last_step(run: Path) -> int:
    with open(run / "metrics.csv", newline="") as f:
        return int(list(csv.DictReader(f))[-1]["global_step"])


def test_first_hour_play_script_and_resume_do_what_the_readme_says(tmp_path, monkeypatch, capsys):
    """Step 4's play.py drives a Gymnasium CartPole with the saved policy (numpy actions accepted, one
    episode's return printed); step 5 trains a --stop-return-stopped run on to the new total. ~5 s: a
    training, a resume and two episodes, each a README step."""
    monkeypatch.chdir(tmp_path)
    run = _tiny_stopped_cartpole(tmp_path)
    stopped_at = _last_step(run)
    assert stopped_at < 2048  # the stop fired: there is something to train on past
    capsys.readouterr()

    play = re.findall(r"^```python\n(.*?)^```", _section(README.read_text(), "First hour"), flags=re.S | re.M)[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(play, {})
    printed = re.fullmatch(r"return (\d+)\n", out.getvalue())
    assert printed, out.getvalue()

    import gymnasium as gym
    from proxima import load

    policy, env = load(str(run)), gym.make("CartPole-v1")  # the same episode with int actions, as the notebook does
    obs, _ = env.reset(seed=0)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(int(policy.act(obs)))
        total += reward
        done = terminated or truncated
    assert int(printed.group(1)) == total > 0

    step5 = _section(README.read_text(), "First hour").split("python play.py", 1)[1]
    argv = re.search(r"^proxima (resume runs/cartpole [^#\n]*?)\s+#", step5, flags=re.M).group(1).split()
    argv[argv.index("--total-timesteps") + 1] = "3072"  # the README's 307200, shrunk
    assert main(argv + ["--no-progress"]) == 0
    assert _last_step(run) == 3072


def _cells() -> list[dict]:
    return json.loads(NOTEBOOK.read_text())["cells"]


def test_notebook_prints_and_plots_the_rolling_training_return(tmp_path, monkeypatch, capsys):
    """The metrics cell printed 'last episodic return: 164.33333333333334' (one iteration's mean, raw);
    it prints charts/episodic_return_100 with one decimal, and the curve is of that column."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    run_dir, _ = train(PPOConfig(env_id="CartPole-v1", total_timesteps=1024, num_envs=4, seed=1, eval_episodes=0,
                                 progress=False, run_dir=str(tmp_path / "q")), quiet=True)
    code = [("".join(c["source"])) for c in _cells() if c["cell_type"] == "code"]
    plot_cell = next(c for c in code if "plot_runs(" in c)
    metrics_cell = next(c for c in code if "metrics.csv" in c)

    import proxima.plot

    drawn = []
    real = proxima.plot.plot_runs
    monkeypatch.setattr(proxima.plot, "plot_runs",  # the metric drawn: the notebook's, else the default's
                        lambda *a, **k: drawn.append(k.get("metric") or proxima.plot.default_metric(a[0])) or real(*a, **k))
    capsys.readouterr()
    exec(plot_cell, {"run_dir": run_dir})
    exec(metrics_cell, {"run_dir": run_dir})
    printed = capsys.readouterr().out.splitlines()[-1]

    assert drawn == ["charts/episodic_return_100"]
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    last = rows[-1]
    rolling = float(last["charts/episodic_return_100"])
    assert math.isfinite(rolling)
    window = RollingReturn()  # the episodes that mean is over (a 1,024-step run ends ~45: no "100+")
    for row in rows:
        window.add_row(row)
    assert printed.endswith(f"; training return (mean of the last {window.episodes:,} episodes): {rolling:.1f}")


def test_notebook_explains_training_against_evaluation_returns_and_names_tensorboard():
    text = " ".join(" ".join("".join(c["source"]) for c in _cells() if c["cell_type"] == "markdown").split())
    assert "`tensorboard --logdir runs`" in text
    assert "The evaluation's return is usually higher than the training return above, and that is no bug" in text
    assert "samples its actions from the policy's distribution" in text


@pytest.mark.parametrize("field", ["PROXIMA_NB_STEPS", "PROXIMA_NB_RUN_DIR"])
def test_notebook_keeps_its_knobs_and_self_check(field):
    code = "\n".join("".join(c["source"]) for c in _cells() if c["cell_type"] == "code")
    assert f'os.environ.get("{field}"' in code
    assert 'assert result["lengths"] == json.loads((run_dir / "eval.json").read_text())["lengths"]' in code
