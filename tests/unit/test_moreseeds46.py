"""What a report's "## More seeds" and a population's dry-run resume tell a user to paste, pasted: the pooled
report repeats the options that changed the table (--threshold, --episodes, --normalize with its
--score-range), a directory whose name holds a '+' is pooled with --pool (a pool's '+' would split it), and a
population's dry-run resume names the train command that dry-runs it (env, seeds, sweep), not a loop between
`proxima resume RUN --dry-run` and `proxima train --resume RUN --dry-run`."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import error_line, run_main
from tests.unit.test_report_pool46 import FIRST, _population

THREE = dict(list(FIRST.items())[:3])  # seeds 1-3: More seeds advises 4-10
NEXT = {s: 20.0 + s for s in range(4, 11)}


def _train_command(run: Path) -> list:
    return ["proxima", "train", "Fake-v0", "--seeds", "1-3", "--run-dir", str(run)]


def _advised_report(text: str) -> list:
    """The words of the pooled report More seeds advises (after 'pool them with these ...: `...`')."""
    section = text.partition("## More seeds")[2]
    return shlex.split(re.search(r"pool them with these .*?: `proxima (.*?)`\.", section).group(1))


def _settings_rows(text: str) -> list:
    """The rows of a population report's table (under its ``| setting |`` header), as lists of cells."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("| setting |"))
    rows = []
    for line in lines[at + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


# --- 1. the options that change the table -----------------------------------------------------------------
def test_more_seeds_repeats_the_threshold_so_the_pooled_table_counts_members_reaching_it(tmp_path, capsys):
    a = _population(tmp_path / "A", THREE, lrs=(0.1, 0.2), command=_train_command(tmp_path / "A"))
    code, _, err = run_main(["report", str(a), "--threshold", "25"], capsys)
    assert code == 0, err
    words = _advised_report((a / "report.md").read_text())
    new, out = f"{a}-seeds4-10", f"{a}-seeds1-10.md"
    assert words == ["report", f"{a}+{new}", "--out", out, "--threshold", "25"]
    _population(Path(new), NEXT, lrs=(0.1, 0.2))
    code, _, err = run_main(words, capsys)
    assert code == 0, err
    pooled = Path(out).read_text()
    assert "| IQM 95% CI | >= 25.0 |" in pooled  # not '>= threshold' with '—' in every row
    # seed 3's 30 and seeds 5-10's 25-30 (each + lr) reach 25: 7 of 10
    assert [(r[0], r[1], r[-1]) for r in _settings_rows(pooled)] == [("lr=0.1", "10", "70% (7 of 10)"),
                                                                      ("lr=0.2", "10", "70% (7 of 10)")]


def test_more_seeds_repeats_a_negative_threshold_and_episodes_in_a_form_argparse_reads(tmp_path, capsys):
    a = _population(tmp_path / "A", THREE, lrs=(0.1, 0.2), command=_train_command(tmp_path / "A"))
    code, _, err = run_main(["report", str(a), "--threshold", "-1e3", "--episodes", "0"], capsys)
    assert code == 0, err
    words = _advised_report((a / "report.md").read_text())
    assert words[-3:] == ["--threshold=-1000", "--episodes", "0"]
    _population(Path(f"{a}-seeds4-10"), NEXT, lrs=(0.1, 0.2))
    code, _, err = run_main(words, capsys)
    assert code == 0, err
    assert [r[-1] for r in _settings_rows(Path(f"{a}-seeds1-10.md").read_text())] == ["100% (10 of 10)"] * 2


def test_more_seeds_of_a_report_over_tasks_repeats_normalize_and_each_score_range(tmp_path, capsys):
    a = _population(tmp_path / "A", THREE, command=_train_command(tmp_path / "A"))
    b = _population(tmp_path / "B", THREE, env_id="Other-v0")
    ranges = ["--score-range", "Fake-v0=0:100", "--score-range", "Other-v0=0:100"]
    code, _, err = run_main(["report", str(a), str(b), "--normalize", *ranges, "--out", str(tmp_path / "agg.md")], capsys)
    assert code == 0, err
    words = _advised_report((tmp_path / "agg.md").read_text())
    a2, b2 = f"{a}-seeds4-10", f"{b}-seeds4-10"
    assert words == ["report", f"{a}+{a2}", f"{b}+{b2}", "--out", f"{a}-seeds1-10.md", "--normalize", *ranges]
    _population(Path(a2), NEXT), _population(Path(b2), NEXT, env_id="Other-v0")
    code, _, err = run_main(words + ["--json", str(tmp_path / "agg.json")], capsys)
    assert code == 0, err  # without --normalize: "these populations do not measure the same: env id"
    assert json.loads((tmp_path / "agg.json").read_text())["rows"][0]["runs"] == {"Fake-v0": 10, "Other-v0": 10}


# --- 2. a directory named with a '+' -----------------------------------------------------------------------
def test_more_seeds_of_a_plus_named_population_pools_it_with_pool_flag(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _population(tmp_path / "a+b", THREE, lrs=(0.1, 0.2), command=_train_command(Path("a+b")))
    code, _, err = run_main(["report", "a+b"], capsys)
    assert code == 0, err
    text = (tmp_path / "a+b" / "report.md").read_text()
    assert "- `proxima train Fake-v0 --seeds 4-10 --run-dir a+b-seeds4-10`" in text
    words = _advised_report(text)
    assert words == ["report", "a+b", "a+b-seeds4-10", "--pool", "--out", "a+b-seeds1-10.md"]
    _population(tmp_path / "a+b-seeds4-10", NEXT, lrs=(0.1, 0.2))
    code, _, err = run_main(words, capsys)
    assert code == 0, err
    pooled = (tmp_path / "a+b-seeds1-10.md").read_text()
    # the pool's name keeps its two populations apart: a+b+a+b-seeds4-10 would read as a, b, a and b-seeds4-10
    assert pooled.startswith("# Population report: a+b + a+b-seeds4-10\n")
    assert [(r[0], r[1]) for r in _settings_rows(pooled)] == [("lr=0.1", "10"), ("lr=0.2", "10")]


def test_more_seeds_beside_a_plus_named_population_reports_each_pool_on_its_own(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _population(tmp_path / "a+b", THREE, command=_train_command(Path("a+b")))
    _population(tmp_path / "C", {s: v + 1 for s, v in THREE.items()}, command=_train_command(Path("C")))
    code, _, err = run_main(["report", "a+b", "C", "--threshold", "15", "--out", "cmp.md"], capsys)
    assert code == 0, err
    section = (tmp_path / "cmp.md").read_text().partition("## More seeds")[2].partition("Per population")[0]
    assert "`a+b` holds a `+`, where `+` would split it, so no one report of these pools can name it" in section
    each = re.findall(r"`(proxima report [^`]*)`", section)
    assert each == ["proxima report a+b a+b-seeds4-10 --pool --out a+b-seeds1-10.md --threshold 15",
                    "proxima report C C-seeds4-10 --pool --out C-seeds1-10.md --threshold 15"]
    _population(tmp_path / "a+b-seeds4-10", NEXT), _population(tmp_path / "C-seeds4-10", NEXT)
    for command, out in zip(each, ("a+b-seeds1-10.md", "C-seeds1-10.md")):
        code, _, err = run_main(shlex.split(command)[1:], capsys)
        assert code == 0, (command, err)
        assert [r[1] for r in _settings_rows((tmp_path / out).read_text())] == ["10"]


# --- 3. a population's dry-run resume ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pop(tmp_path_factory) -> Path:
    """A population of seeds 1-2 x norm_adv true/false trained to its end, in a folder whose name needs quoting."""
    run = tmp_path_factory.mktemp("moreseeds46") / "my pop"
    code = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--sweep", "norm_adv=true,false", "--total-timesteps", "64",
                     "--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1",
                     "--eval-episodes", "0", "--threads", "1", "--run-dir", str(run), "--quiet"], _NoCapture())[0]
    assert code == 0
    return run


class _NoCapture:
    """capsys for a module fixture (pytest's is function-scoped): nothing to read back."""

    @staticmethod
    def readouterr():
        return "", ""


def _dry_runs(command: str, capsys) -> dict:
    """The JSON line of the pasted dry run, after checking it exits 0."""
    words = shlex.split(command)
    assert words[0] == "proxima" and words[-1] == "--dry-run", command
    code, out, err = run_main(words[1:], capsys)
    assert code == 0, (command, err)
    return json.loads(out.strip().splitlines()[-1])


def test_resume_dry_run_of_a_population_names_the_train_command_that_dry_runs_it(pop, capsys):
    code, _, err = run_main(["resume", str(pop), "--dry-run"], capsys)
    line = error_line(code, err, "unrecognized arguments: --dry-run")
    command = re.search(r"dry-run with its env, seeds and sweep: `(.*?)`", line).group(1)
    assert command == ("proxima train CartPole-v1 --seeds 1,2 --sweep norm_adv=true,false --resume "
                       f"{shlex.quote(str(pop))} --dry-run")
    doc = _dry_runs(command, capsys)
    assert (doc["members"], doc["seeds"], doc["sweep"]) == (4, [1, 2], {"norm_adv": [True, False]})


def test_train_resume_dry_run_of_a_population_names_that_command_not_proxima_resume_again(pop, capsys, monkeypatch):
    typed = ["proxima", "train", "--resume", str(pop), "--dry-run"]
    monkeypatch.setattr(sys, "argv", typed)  # the command line the refusal reads, as the console script has it
    code, _, err = run_main(typed[1:], capsys)
    line = error_line(code, err, "a population checkpoint (--seeds/--sweep)")
    command = re.search(r"dry-run with its env, seeds and sweep: (.*?) \(the resume itself", line).group(1)
    assert command == ("proxima train CartPole-v1 --seeds 1,2 --sweep norm_adv=true,false --resume "
                       f"{shlex.quote(str(pop))} --dry-run")
    assert line.endswith(f"(the resume itself: proxima resume {shlex.quote(str(pop))})")
    assert _dry_runs(command, capsys)["global_step"] == 64


def test_train_resume_of_a_population_without_dry_run_still_names_proxima_resume(pop, capsys, monkeypatch):
    typed = ["proxima", "train", "--resume", str(pop)]
    monkeypatch.setattr(sys, "argv", typed)
    code, _, err = run_main(typed[1:], capsys)
    assert error_line(code, err).endswith(
        f"a population checkpoint (--seeds/--sweep); resume the whole population: proxima resume {shlex.quote(str(pop))}")
