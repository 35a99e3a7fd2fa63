"""Mutation survivors of review 48's logs and report changes (98dcbb0, 66a0350, 41ac31b): the progress line's
episode count written with commas and a non-finite return's text; the hyperparameters table's strings as
written, long lists on one line, dicts in their own order, built in a fresh process; the quickstart notebook's
comma and its line before any episode ended; a tty of 0 columns or a Jupyter stream; report's
--env/--trust-run not outliving their report, the not-filled note only for what could not be evaluated (not
--episodes 0, not the Python API's quiet report), no did-nothing note for a report that failed, a registered
id's --env named as eval names it; plot's dagger only for a CI band."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import pytest

from proxima import logger as run_logging
from proxima.logger import CSV_COLUMNS, ROLLING_RETURN, RunLogger, hyperparameters_table
from proxima.plot import collect_panels
from proxima.report import build_report
from tests.cli_helpers import TINY_ENV, TINY_RUN, fake_run_dir, module_written_in, run_main

ROOT = Path(__file__).resolve().parents[2]
ENV = "tinymut48env:Tiny"


def _cells(config: dict) -> dict:
    return dict(line.strip("|").split("|", 1) for line in hyperparameters_table(config).splitlines()[2:])


# ------------------------------------------------------------------------ the progress line
def test_a_window_of_thousands_of_episodes_is_counted_with_commas(tmp_path, monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    monkeypatch.setattr("proxima.logger.LINE_SECONDS", 0.0)
    logger = RunLogger(tmp_path, 100, progress=True, rolling=True)
    try:
        logger.log(1, 100, {"episodes": 1200, "charts/episodic_return": 9.5, "charts/SPS": 100.0})
    finally:
        logger.close()
    assert stream.getvalue().splitlines()[-1].endswith("| return (1,200 ep) 9.5"), stream.getvalue()


@pytest.mark.parametrize("value, shown", [(math.inf, "inf"), (-math.inf, "-inf"), (math.nan, "nan"),
                                          (9.87, "9.87"), (-9.87, "-9.87"), (10.0, "10.0"), (12.345, "12.3")])
def test_return_text_of_a_non_finite_or_near_ten_return(value, shown):
    assert run_logging.return_text(value) == shown


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_tty_of_zero_columns_is_no_terminal_and_one_without_a_descriptor_is(monkeypatch):
    monkeypatch.setattr(run_logging.os, "get_terminal_size", lambda fd: __import__("os").terminal_size((0, 40)))
    stream = Terminal()
    stream.fileno = lambda: 2
    assert run_logging._is_terminal(stream) is False
    monkeypatch.setattr(run_logging.os, "get_terminal_size", lambda fd: __import__("os").terminal_size((80, 24)))
    assert run_logging._is_terminal(stream) is True
    assert run_logging._is_terminal(Terminal()) is True  # no descriptor (io.UnsupportedOperation): tqdm draws unsized


def test_a_jupyter_stream_is_a_terminal():
    Stream = type("OutStream", (io.StringIO,), {"__module__": "ipykernel.iostream"})
    assert run_logging._is_terminal(Stream()) is True


# ------------------------------------------------------------------------ the hyperparameters table
def test_a_string_value_is_quoted_as_config_yaml_quotes_it():
    cells = _cells({"env_id": "CartPole-v1", "note": "true", "tag": "1e-5", "when": "1:30"})
    assert (cells["env_id"], cells["note"], cells["tag"], cells["when"]) == ("CartPole-v1", "'true'", "'1e-5'", "'1:30'")


def test_a_long_list_and_a_dict_stay_on_one_line_in_their_order():
    sizes = list(range(100, 160))
    cells = _cells({"hidden_sizes": sizes, "env_kwargs": {"zeta": 1, "alpha": [1, 2], "mid": None}})
    assert cells["hidden_sizes"] == "[" + ", ".join(map(str, sizes)) + "]"
    assert cells["env_kwargs"] == "{zeta: 1, alpha: [1, 2], mid: null}"


def test_the_table_is_built_in_a_process_that_wrote_no_config_yaml_yet():
    code = "from proxima.logger import hyperparameters_table as t; print(t({'a': True, 'b': None, 'c': '08', 'd': 1e-05}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout == "|param|value|\n|-|-|\n|a|true|\n|b|null|\n|c|08|\n|d|1.0e-05|\n"


def _tables(run_dir) -> list:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    tag = "hyperparameters/text_summary"
    return [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(tag)] if tag in acc.Tags()["tensors"] else []


def test_a_resume_of_an_unchanged_yaml_spelled_table_writes_no_second_table(tmp_path):
    config = {"env_id": "CartPole-v1", "anneal_lr": True, "target_kl": None, "hidden_sizes": [64, 64]}
    logger = RunLogger(tmp_path, 128, progress=False, config=config)
    logger.log(1, 64, {"charts/SPS": 1.0})
    logger.close()
    logger = RunLogger(tmp_path, 128, resume_step=64, progress=False, config=config)
    logger.log(2, 128, {"charts/SPS": 1.0})
    logger.close()
    assert _tables(tmp_path) == [(0, "|param|value|\n|-|-|\n|env_id|CartPole-v1|\n|anneal_lr|true|\n|target_kl|null|\n"
                                     "|hidden_sizes|[64, 64]|")]


# ------------------------------------------------------------------------ the quickstart notebook
def _notebook_line(tmp_path, capsys, rows) -> str:
    with open(tmp_path / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for row in rows:
            w.writerow(row)
    cells = json.loads((ROOT / "notebooks" / "quickstart.ipynb").read_text())["cells"]
    source = next("".join(c["source"]) for c in cells if c["cell_type"] == "code" and "metrics.csv" in "".join(c["source"]))
    exec(source, {"run_dir": tmp_path})
    return capsys.readouterr().out.splitlines()[-1]


def test_the_notebook_counts_thousands_of_episodes_with_commas(tmp_path, capsys):
    line = _notebook_line(tmp_path, capsys, [{"iteration": 1, "global_step": 2048, "time": 3.0, "episodes": 1500,
                                              "charts/episodic_return": 9.0, ROLLING_RETURN: 9.0}])
    assert line == "1 iterations, 2,048 steps in 3.0 s; training return (mean of the last 1,500 episodes): 9.0"


def test_the_notebooks_window_is_the_logs_100_episode_one(tmp_path, capsys):
    rows = [{"iteration": i, "global_step": 512 * i, "time": float(i), "episodes": 60, "charts/episodic_return": 10.0 * i,
             ROLLING_RETURN: 25.0} for i in (1, 2, 3)]  # 60 + 60 + 60: the oldest 60 go, 120 >= 100 stay
    line = _notebook_line(tmp_path, capsys, rows)
    assert line == "3 iterations, 1,536 steps in 3.0 s; training return (mean of the last 120 episodes): 25.0"


def test_the_notebook_says_no_episode_has_ended_before_one_has(tmp_path, capsys):
    line = _notebook_line(tmp_path, capsys, [{"iteration": 1, "global_step": 512, "time": 1.0, "episodes": 0}])
    assert line == "1 iterations, 512 steps in 1.0 s; no training episode has ended yet"


# ------------------------------------------------------------------------ report --env / --trust-run
@pytest.fixture
def env_module(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "tinymut48env", TINY_ENV)


@pytest.fixture
def run(env_module, tmp_path, capsys):
    """A finished 64-step run of the module env, with no eval.json."""
    run_dir = tmp_path / "runs" / "m1"
    code, _, err = run_main(["train", ENV, *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(run_dir), "--quiet"],
                            capsys)
    assert code == 0, err
    return run_dir


def _cell(run_dir) -> str:
    [line] = [ln for ln in (run_dir / "report.md").read_text().splitlines() if ln.startswith("| final eval return |")]
    return line


def test_trust_run_lasts_for_its_own_report_only(run, capsys):
    code, _, err = run_main(["report", str(run), "--trust-run"], capsys)
    assert code == 0 and "over 10 episodes" in _cell(run), err
    build_report([run], out=run / "api.md")  # the Python API's report after it: as untrusting, and quiet
    assert "pass --env tinymut48env:Tiny to `proxima report`" in (run / "api.md").read_text()
    assert "not filled" not in capsys.readouterr().err
    code, _, err = run_main(["report", str(run)], capsys)
    assert code == 0, err
    assert "pass --env tinymut48env:Tiny to `proxima report`" in _cell(run)
    assert "not filled in the report" in err


def test_episodes_0_leaves_the_cell_empty_without_a_not_filled_note(run, capsys):
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    assert "no eval.json and --episodes 0" in _cell(run)
    assert "not filled" not in err, err


def test_a_failed_report_has_no_did_nothing_note(run, capsys):
    code, _, err = run_main(["report", str(run), "--env", "tinymut48env:Other", "--episodes", "-1"], capsys)
    assert code == 2
    assert err == "proxima report: error: --episodes -1: must be 0 or more\n"


REG_MODULE, REG_ID = "regmut48_envs", "RegMut48-v0"
REG_CODE = textwrap.dedent(f"""
    import numpy as np
    import gymnasium as gym
    from gymnasium import spaces


    class Walk(gym.Env):
        observation_space = spaces.Box(-1, 1, (2,), np.float32)
        action_space = spaces.Discrete(2)

        def __init__(self, length=10):
            self.length = length

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.zeros(2, np.float32), {{}}

        def step(self, a):
            self.t += 1
            return np.zeros(2, np.float32), 1.0, self.t >= self.length, False, {{}}


    gym.register("{REG_ID}", entry_point="{REG_MODULE}:Walk", max_episode_steps=7)
""")


@pytest.fixture
def registered_run(tmp_path, monkeypatch):
    """A run trained from Python on an id its own module registered (no eval.json), the module then forgotten."""
    from proxima import PPOConfig, train

    (tmp_path / f"{REG_MODULE}.py").write_text(REG_CODE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    try:
        __import__(REG_MODULE)
        cfg = PPOConfig(env_id=REG_ID, env_kwargs={"length": 3}, num_envs=2, num_steps=32, total_timesteps=64,
                        num_minibatches=2, update_epochs=1, progress=False, checkpoint_every=0, eval_episodes=0,
                        threads=1, run_dir=str(tmp_path / "runs" / "reg"))
        run_dir, _ = train(cfg, quiet=True)
    finally:
        sys.modules.pop(REG_MODULE, None)
        gym.registry.pop(REG_ID, None)
    yield Path(run_dir)
    sys.modules.pop(REG_MODULE, None)
    gym.registry.pop(REG_ID, None)


def test_report_of_a_registered_id_names_the_module_to_give_as_eval_does(registered_run, capsys):
    code, _, err = run_main(["report", str(registered_run)], capsys)
    assert code == 0, err
    checkpoint = sorted((registered_run / "checkpoints").glob("step_*.pt"))[-1]
    line = (f"{checkpoint}: env id '{REG_ID}' is not registered in this process (the code that trained the run registered "
            f"it, entry point {REG_MODULE}:Walk); name the module whose import registers it, most likely: "
            f"--env {REG_MODULE}:{REG_ID} (the run's env kwargs are kept)")
    assert line in _cell(registered_run)
    assert [ln for ln in err.splitlines() if "not filled" in ln] == [f"proxima: note: {registered_run}: final eval return not filled in the report "
                                f"(could not evaluate: {line})"]
    code, _, err = run_main(["report", str(registered_run), "--env", f"{REG_MODULE}:{REG_ID}"], capsys)
    assert code == 0, err
    assert "| final eval return | 3.00 \u00b1 0.00 over 10 episodes" in _cell(registered_run)  # length 3, as trained


# ------------------------------------------------------------------------ plot's dagger
@pytest.mark.parametrize("band", ["std", "minmax"])
def test_a_band_other_than_a_ci_of_few_runs_has_no_dagger(tmp_path, band):
    runs = [fake_run_dir(tmp_path, f"r{s}", returns=(s, 2.0 * s), seed=s) for s in (1, 2, 3)]
    [(_, _, [curve])] = collect_panels(runs, band=band, stat="mean")
    assert "\u2020" not in (curve.band_label or "") and curve.note is None, (curve.band_label, curve.note)
