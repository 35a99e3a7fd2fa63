"""How train and resume end, for one run and a population: the commands that go on from the run, then
``run directory: D`` as stdout's last line (what a script's ``proxima train ... | tail -1`` reads), and
under --quiet that line alone. report.md's code spans keep an all-space text as it is."""
from __future__ import annotations

import shlex

import pytest

from proxima.report import _code
from tests.cli_helpers import TINY_POP, TINY_RUN, run_main


def _closing(out: str, count: int) -> list:
    return out.splitlines()[-count:]


def test_train_ends_with_its_commands_then_the_run_directory_last(tmp_path, capsys):
    run = tmp_path / "r"
    code, out, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(run)], capsys)
    assert code == 0, err
    quoted = shlex.quote(str(run))
    assert _closing(out, 3) == [f"evaluate: proxima eval {quoted}",
                                f"train on: proxima resume {quoted} --total-timesteps 128",
                                f"run directory: {run}"]


def test_resume_ends_as_train_does_with_the_doubled_total_and_alone_under_quiet(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", "a", "--quiet"],
                    capsys)[0] == 0
    code, out, err = run_main(["resume", "a", "--total-timesteps", "128"], capsys)
    assert code == 0, err
    assert _closing(out, 3) == ["evaluate: proxima eval a", "train on: proxima resume a --total-timesteps 256",
                                "run directory: a"]
    code, out, err = run_main(["resume", "a/checkpoints/step_000000000128.pt", "--total-timesteps", "192", "--quiet"], capsys)
    assert code == 0 and out == "run directory: a\n", (out, err)


def test_a_run_stopped_by_stop_return_gets_no_train_on_line(tmp_path, capsys):
    run = tmp_path / "s"
    code, out, err = run_main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "6400", "--stop-return", "1",
                               "--stop-episodes", "1", "--run-dir", str(run)], capsys)
    assert code == 0, err
    assert "proxima: stopped at global step 64 " in err
    assert _closing(out, 2) == [f"evaluate: proxima eval {shlex.quote(str(run))}", f"run directory: {run}"]


def test_a_population_ends_with_eval_report_and_train_on_commands_that_work(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", *TINY_POP, "--eval-episodes", "0",
                               "--total-timesteps", "64", "--run-dir", "pop"], capsys)
    assert code == 0, err
    assert _closing(out, 4) == ["evaluate: proxima eval pop", "report: proxima report pop",
                                "train on: proxima resume pop --total-timesteps 128", "run directory: pop"]
    # each command as printed: eval evaluates every member, report writes the population's report
    code, eval_out, err = run_main(shlex.split(_closing(out, 4)[0].removeprefix("evaluate: proxima ")) + ["--episodes", "1"],
                                   capsys)
    assert code == 0, err
    assert [ln.split(":")[0] for ln in eval_out.splitlines()[:2]] == ["m000-seed1", "m001-seed2"]
    code, report_out, err = run_main(shlex.split(_closing(out, 4)[1].removeprefix("report: proxima ")), capsys)
    assert code == 0 and report_out.splitlines()[-1] == "wrote pop/report.md", (report_out, err)
    code, out, err = run_main(shlex.split(_closing(out, 4)[2].removeprefix("train on: proxima ")), capsys)
    assert code == 0, err
    assert _closing(out, 4) == ["evaluate: proxima eval pop", "report: proxima report pop",
                                "train on: proxima resume pop --total-timesteps 256", "run directory: pop"]
    code, out, err = run_main(["resume", "pop", "--quiet"], capsys)
    assert code == 0 and out == "run directory: pop\n", (out, err)


@pytest.mark.parametrize("text", [" ", "   "])
def test_an_all_space_code_span_is_left_unpadded(text):
    # CommonMark strips one space each side only of a span that is not all spaces: padding would show 3
    assert _code(text) == f"`{text}`"
    markdown_it = pytest.importorskip("markdown_it")
    assert markdown_it.MarkdownIt("commonmark").renderInline(_code(text)) == f"<code>{text}</code>"
    assert _code(" a ") == "`  a  `"  # a span with other text still gets the space CommonMark strips
