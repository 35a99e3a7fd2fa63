"""A first day with Proxima, as an SB3 user meets it: ``from proxima import evaluate`` is the
function; train names its run directory at the start and ends with the commands that evaluate and
continue the run (--env for a module:Class env, which eval and resume never import on their own);
its eval line says the step as ``proxima eval`` does; README's step 5 says what a resume's total does."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

import warm_python
from tests.cli_helpers import TINY_ENV, TINY_RUN, module_written_in, run_main

REPO = Path(__file__).resolve().parents[2]

#: tiny runs with an end-of-run evaluation of 2 episodes (TINY_RUN skips it)
EVAL_RUN = [*TINY_RUN, "--eval-episodes", "2", "--total-timesteps", "128"]


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("first_day") / "run"
    from proxima import cli

    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "128", "--run-dir", str(run_dir), "--quiet"]) == 0
    return run_dir


#: the user's line, ``from proxima import evaluate; evaluate(proxima.load(RUN))``, after ``first`` (nothing, or
#: ``import proxima.evaluate``, which binds the package's attribute to the module): what it gives, and the function's
CALL = """
import inspect, json, sys
{first}
import proxima
from proxima import evaluate
policy = proxima.load(sys.argv[1])
from proxima.evaluate import evaluate as function
print(json.dumps({{"callable": callable(evaluate), "signature": str(inspect.signature(evaluate)),
                  "function_signature": str(inspect.signature(function)),
                  "result": evaluate(policy, episodes=2, seed=7), "function_result": function(policy, episodes=2, seed=7),
                  "in_all": "evaluate" in proxima.__all__}}))
"""


@pytest.mark.parametrize("first", ["", "import proxima.evaluate"], ids=["fresh", "module_imported_first"])
def test_from_proxima_import_evaluate_is_the_function_whichever_import_came_first(cartpole, first):
    # a new process each, none of Proxima imported (warm_python's forks): whether the submodule was imported
    # before is the point
    proc = warm_python.run([sys.executable, "-c", CALL.format(first=first), str(cartpole)], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got["callable"] and got["in_all"]
    assert got["signature"] == got["function_signature"] and got["signature"].startswith("(policy, episodes: ")
    assert got["result"] == got["function_result"] and got["result"]["episodes"] == 2 and got["result"]["seed"] == 7


def test_a_monkeypatched_proxima_evaluate_evaluate_is_what_the_callable_module_calls(monkeypatch):
    import proxima.evaluate
    from proxima import evaluate

    monkeypatch.setattr(proxima.evaluate, "evaluate", lambda policy, **kw: {"policy": policy, **kw})
    assert evaluate("P", episodes=3) == {"policy": "P", "episodes": 3}


def _lines(text: str, prefix: str) -> list:
    return [ln for ln in text.splitlines() if ln.startswith(prefix)]


@pytest.fixture
def tiny_module(tmp_path, monkeypatch):
    yield from module_written_in(tmp_path, monkeypatch, "tinyenv44", TINY_ENV)


def test_train_of_a_module_env_ends_with_eval_and_resume_commands_that_work(tiny_module, capsys):
    code, out, err = run_main(["train", "tinyenv44:Tiny", *EVAL_RUN, "--run-dir", "my run"], capsys)
    assert code == 0, err
    assert out.splitlines()[-3:] == ["evaluate: proxima eval --env tinyenv44:Tiny 'my run'",
                                     "train on: proxima resume --env tinyenv44:Tiny 'my run' --total-timesteps 256",
                                     "run directory: my run"]
    # the commands as printed, shell words and all: eval's score is train's own evaluation
    code, eval_out, err = run_main(shlex.split(out.splitlines()[-3].removeprefix("evaluate: proxima ")), capsys)
    assert code == 0, err
    assert _lines(out, "eval ") == [f"eval {eval_out.strip()}"]
    code, resume_out, err = run_main(shlex.split(out.splitlines()[-2].removeprefix("train on: proxima ")), capsys)
    assert code == 0, err
    assert re.search(r"^eval tinyenv44:Tiny: [\d.]+ \+- [\d.]+ at step 256 over 2 episodes", resume_out, re.M), resume_out


def test_train_of_a_registered_env_names_its_run_directory_at_the_start_and_no_env_flag_at_the_end(tmp_path, capsys):
    run = tmp_path / "r"
    code, out, err = run_main(["train", "CartPole-v1", *EVAL_RUN, "--run-dir", str(run)], capsys)
    assert code == 0, err
    # the first line the run prints (SB3's "Logging to ..."), before the spaces line: on stderr, as the notes
    assert err.splitlines()[0] == f"proxima: run directory: {run}"
    assert err.splitlines()[1].startswith("proxima: spaces: ")
    assert out.splitlines()[-3:] == [f"evaluate: proxima eval {shlex.quote(str(run))}",
                                     f"train on: proxima resume {shlex.quote(str(run))} --total-timesteps 256",
                                     f"run directory: {run}"]
    # train's eval line is proxima eval's, "at step N" included
    (line,) = _lines(out, "eval ")
    assert re.fullmatch(r"eval CartPole-v1: [\d.]+ \+- [\d.]+ at step 128 over 2 episodes \(deterministic\)", line), line
    code, eval_out, _ = run_main(["eval", str(run)], capsys)
    assert code == 0 and line == f"eval {eval_out.strip()}"
    # a resume of the complete run shows eval.json's evaluation in the same words
    code, again, err = run_main(["train", "CartPole-v1", "--resume", str(run), "--run-dir", str(run)], capsys)
    assert code == 0, err
    assert _lines(again, "eval ") == [f"{line} (eval.json)"]
    assert "proxima: run directory: " not in err  # a resume's directory is the one the user named


def test_quiet_train_prints_the_run_directory_alone(tmp_path, capsys):
    code, out, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir",
                               str(tmp_path / "q"), "--quiet"], capsys)
    assert code == 0 and out == f"run directory: {tmp_path / 'q'}\n" and err == ""


def test_readme_step_5_says_its_total_is_below_the_fast_presets_plan_and_the_lr_is_replanned():
    from proxima import presets
    from proxima.config import batch_size, num_iterations

    readme = " ".join((REPO / "README.md").read_text().split())
    cfg = presets.resolve("CartPole-v1", "fast")
    planned = num_iterations(cfg) * batch_size(cfg)
    given = int(re.search(r"proxima resume runs/cartpole --stop-return none --total-timesteps (\d+)", readme).group(1))
    assert given < planned and f"(the fast preset plans {planned:,})" in readme
    assert "below it the run ends earlier" in readme and "raises the total" not in readme
    assert cfg.anneal_lr and "the learning rate is re-planned over the new total" in readme
