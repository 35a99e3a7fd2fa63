"""Populations as docs/populations.md describes them: --nproc on a population's resume names the one
fix (drop it) instead of a circle between `proxima resume` and `train --resume`; a population says
up front, and records in population.json, whether its members equal their single runs."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from cli_helpers import TINY_POP, one_error_line, run_main, snapshot, tiny_population

from proxima import cli

DOCS = Path(__file__).resolve().parents[2] / "docs" / "populations.md"
POPULATION_NPROC = "--nproc: a population trains in one process; drop --nproc"


@pytest.fixture(scope="module")
def population(tmp_path_factory):
    return tiny_population(tmp_path_factory, "pop41", 128)


@pytest.mark.parametrize("argv", [
    ["resume", "{run}", "--nproc", "2"],
    ["resume", "--nproc", "2", "{run}"],
    ["resume", "{run}/checkpoints/{ckpt}", "--nproc=2"],
    ["train", "--resume", "{run}", "--nproc", "2", "--total-timesteps", "256"],
    ["train", "--resume", "{run}/checkpoints/{ckpt}", "--nproc", "2"],
])
def test_nproc_on_a_population_resume_says_drop_nproc_and_changes_nothing(population, capsys, argv):
    ckpt = sorted(p.name for p in (population / "checkpoints").iterdir())[-1]
    before = snapshot(population)
    code, out, err = run_main([w.format(run=population, ckpt=ckpt) for w in argv], capsys)
    assert code == 2
    # before: resume pointed at `train --resume POP --nproc K`, which pointed back at `proxima resume POP`
    assert one_error_line(err, f"proxima {argv[0]}") == POPULATION_NPROC
    assert snapshot(population) == before


def test_target_kl_help_says_how_to_match_sb3s_one_and_three_halves_threshold():
    from proxima.cli import build_parser

    train = build_parser()._subparsers._group_actions[0].choices["train"]
    help_text = next(a.help for a in train._actions if "--target-kl" in a.option_strings)
    # SB3 stops at approx_kl > 1.5 * target_kl; here the threshold is target_kl itself
    assert "SB3 stops at approx_kl > 1.5 x its target_kl: to match SB3's target_kl T, give 1.5*T" in help_text


def test_the_docs_comparison_example_is_the_reports_own_output(tmp_path, capsys):
    from tests.integration import test_review34_compare as compare

    run = compare._population(tmp_path / "S", compare.SWEEP)  # the sweep docs/populations.md names
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    report = (run / "report.md").read_text().splitlines()
    docs = DOCS.read_text()
    example = docs[docs.index("```markdown\n## Comparison"):].split("```", 2)[1].splitlines()
    verdict = next(line for line in example if line.startswith("Y = "))
    shown = verdict[:verdict.index(" (both one-sided permutation tests ...)")]
    assert any(line.startswith(shown + " (both one-sided permutation tests") for line in report), shown  # p = 0.35, not 0.34
    rows = [line for line in example if line.startswith("| lr=")]
    assert len(rows) == 3 and all(row in report for row in rows)


def _batch_and_end(argv: list, capsys) -> tuple:
    """(steps per iteration, last step) that ``proxima train ARGV`` would train each member to, by its --dry-run."""
    code, out, err = run_main([*argv, "--dry-run"], capsys)
    assert code == 0, err
    cfg = json.loads(out)["config"]
    batch = cfg["num_envs"] * cfg["num_steps"]
    return batch, cfg["total_timesteps"] // batch * batch


def test_the_docs_population_commands_give_the_steps_their_outputs_show(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    docs = DOCS.read_text()
    # the Evaluation example: each member's line says the step its command trains to
    command = re.search(r"\$ proxima (train CartPole-v1 --preset fast .*--run-dir runs/sweep.*)\n", docs).group(1)
    shown = {int(s.replace(",", "")) for s in re.findall(r"at step ([\d,]+) over", docs)}
    assert {_batch_and_end(shlex.split(command), capsys)[1]} == shown  # 548,864: 134 x 4,096 (--num-envs 256)
    # the resume example's checkpoint is one its command's iterations can write
    line = next(x for x in docs.splitlines() if x.startswith("proxima train") and "--resume runs/pop/checkpoints/" in x)
    argv = shlex.split(line.split("#")[0])[1:]
    step = int(re.search(r"step_(\d+)\.pt", line).group(1))
    batch, end = _batch_and_end([w for i, w in enumerate(argv) if "--resume" not in argv[i - 1:i + 1]], capsys)
    assert step % batch == 0 and 0 < step <= end


def test_ppo_notes_says_lunarlanders_training_return_count_is_the_10_iteration_measure():
    notes = (DOCS.parent / "ppo_notes.md").read_text()
    row = next(line for line in notes.splitlines() if line.startswith("| LunarLander |"))
    # the table's header says "mean of the last 100 episodes"; the 4 of 10 is learning-10-seeds.md's `10 it.`
    assert "4 of 10 seeds (measured by benchmarks/results/learning-10-seeds.md's `10 it.` column" in row


NOTE = "proxima: note: each member is a valid run with its seed, not the run `--seed k` trains alone: "
WHAT_A_MEMBER_IS = " (docs/populations.md, What a member is)"


@pytest.mark.parametrize("env, backend, why", [
    ("CartPole-v1", "native", None),
    ("CartPole-v1", "gymnasium", "the gymnasium env (CartPole-v1) draws every member's env randomness from one generator"),
    ("PixelQuadrant-v0", "native", "a cnn agent's actions are sampled under vmap from one generator for all members"),
])
def test_a_population_says_and_records_whether_its_members_equal_their_single_runs(tmp_path, capsys, env, backend, why):
    run = tmp_path / "P"
    code, _, err = run_main(["train", env, "--backend", backend, "--seeds", "1-2", "--total-timesteps", "128",
                             "--num-envs", "2", "--num-steps", "32", "--eval-episodes", "0", "--run-dir", str(run)], capsys)
    assert code == 0, err
    # gymnasium: member seed 2 logs other returns than `--seed 2` alone (one env generator for all rows);
    # a CNN agent: its actions are sampled under vmap from one generator, whatever the env
    assert json.loads((run / "population.json").read_text())["members_equal_single_runs"] is (why is None)
    notes = [line for line in err.splitlines() if "not the run `--seed k` trains alone" in line]
    assert notes == ([] if why is None else [NOTE + why + WHAT_A_MEMBER_IS])


def test_a_population_whose_members_share_one_generator_says_so_on_its_device(monkeypatch):
    from proxima.config import PPOConfig
    from proxima.population import Population

    # as on a GPU, where the stacked MLP members get no generators of their own (one launch per draw each)
    monkeypatch.setattr(Population, "member_generators", property(lambda self: None, lambda self, value: None),
                        raising=False)
    pop = Population([PPOConfig(env_id="CartPole-v1", seed=s, num_envs=2, num_steps=16, threads=1) for s in (1, 2)])
    try:
        assert pop.shared_stream_why == "on cpu the members share one generator"
    finally:
        pop.close()


@pytest.fixture(scope="module")
def single_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("single41") / "S"
    assert cli.main(["train", "CartPole-v1", "--run-dir", str(run), "--total-timesteps", "64", "--eval-episodes", "0",
                     "--quiet", *TINY_POP]) == 0
    return run


@pytest.mark.parametrize("target", ["{run}", "{run}/checkpoints/{ckpt}"])
def test_nproc_on_a_single_runs_resume_is_not_refused_as_a_populations(single_run, capsys, target):
    ckpt = sorted(p.name for p in (single_run / "checkpoints").iterdir())[-1]
    target = target.format(run=single_run, ckpt=ckpt)
    before = snapshot(single_run)
    code, _, err = run_main(["train", "--resume", target, "--nproc", "2", "--total-timesteps", "128", "--dry-run"], capsys)
    assert code == 2
    # the launcher's own check of a single run's checkpoint, not the population's "drop --nproc"
    assert one_error_line(err, "proxima train").startswith(
        f"{single_run}/checkpoints/{ckpt}: written by 1 process(es), resumed with --nproc 2; use the same count "
        f"(proxima resume {single_run} starts 1); to continue with another count")
    assert snapshot(single_run) == before
