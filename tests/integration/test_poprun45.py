"""Review 45 (a power user's populations): a resume missing a member's folder is refused before it
writes anything; a flag typed with lr's other name is named as typed when a sweep sets lr too; a
resume's dry run shows the total it trains to, with the resume's note; a dry run shows the memory and
disk a population takes."""

from __future__ import annotations

import json
import shutil

import pytest

from proxima import checkpoint as ckpt
from proxima import population as population_mod

from tests.cli_helpers import TINY_POP, error_line, run_main, snapshot

MEMBERS = ["m000-seed1", "m001-seed2", "m002-seed3"]


@pytest.fixture(scope="module")
def pop(tmp_path_factory):
    """A finished 3-seed population of 2 iterations (2 envs x 16 steps: 32 steps an iteration, 64 in all),
    --anneal-lr, no evaluation; each test works on its own copy."""
    from proxima import cli

    run = tmp_path_factory.mktemp("pop45") / "pop"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-3", "--run-dir", str(run), "--total-timesteps", "64",
                     "--eval-episodes", "0", "--anneal-lr", "--quiet", *TINY_POP]) == 0
    return run


def _copy(pop, tmp_path, name="copy"):
    return shutil.copytree(pop, tmp_path / name, symlinks=True)


def _targets(run) -> dict:
    """population.json's total per member and each member's config.yaml total_timesteps (None: no file)."""
    import yaml

    out = {"population.json": json.loads((run / "population.json").read_text())["total_timesteps_per_member"]}
    for name in MEMBERS:
        path = run / name / "config.yaml"
        out[name] = yaml.safe_load(path.read_text())["total_timesteps"] if path.is_file() else None
    return out


# ---------------------------------------------------------------- 1: a member's folder missing
def test_a_resume_missing_a_member_folder_is_one_line_naming_it_and_writes_nothing(pop, tmp_path, capsys):
    run = _copy(pop, tmp_path)
    shutil.rmtree(run / "m001-seed2")
    before = snapshot(run)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "128", "--no-progress"], capsys)
    # was: the --anneal-lr note, then "RUN/m001-seed2/config.yaml: could not resume the population (No such file
    # or directory)", with population.json and m000's config.yaml already saying 128 while m002's said 64
    error_line(code, err, f"{run / 'm001-seed2'}: member m001-seed2's folder is missing",
               "restore it from a copy of the run", "train it again")
    assert "--anneal-lr" not in err  # refused before any of the resume's notes
    assert snapshot(run) == before
    assert _targets(run) == {"population.json": 64, "m000-seed1": 64, "m001-seed2": None, "m002-seed3": 64}


def test_once_the_member_is_restored_the_resume_extends_every_member_alike(pop, tmp_path, capsys):
    run = _copy(pop, tmp_path)
    shutil.rmtree(run / "m001-seed2")
    assert run_main(["resume", str(run), "--total-timesteps", "128", "--no-progress"], capsys)[0] == 2
    shutil.copytree(pop / "m001-seed2", run / "m001-seed2")
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "128", "--no-progress", "--quiet"], capsys)
    assert code == 0, err
    assert _targets(run) == {"population.json": 128, **{name: 128 for name in MEMBERS}}
    assert ckpt.list_checkpoints(run)[-1].name == "step_000000000128.pt"


def test_a_resume_dry_run_is_refused_for_a_missing_member_folder_too(pop, tmp_path, capsys):
    run = _copy(pop, tmp_path)
    shutil.rmtree(run / "m002-seed3")
    code, out, err = run_main(["train", "CartPole-v1", "--seeds", "1-3", "--resume", str(run), "--dry-run",
                               *TINY_POP], capsys)
    error_line(code, err, f"{run / 'm002-seed3'}: member m002-seed3's folder is missing")
    assert out == ""


def test_a_member_config_yaml_that_is_a_folder_is_refused_before_anything_is_written(pop, tmp_path, capsys):
    run = _copy(pop, tmp_path)
    (run / "m002-seed3" / "config.yaml").unlink()
    (run / "m002-seed3" / "config.yaml").mkdir()
    before = snapshot(run)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "128", "--no-progress"], capsys)
    error_line(code, err, f"{run / 'm002-seed3' / 'config.yaml'}: not a file")
    assert snapshot(run) == before


def test_a_member_missing_only_its_config_yaml_and_checkpoints_resumes_and_gets_them_back(pop, tmp_path, capsys):
    # what the resume writes into a member's folder it writes again: only the folder itself is needed
    run = _copy(pop, tmp_path)
    (run / "m001-seed2" / "config.yaml").unlink()
    shutil.rmtree(run / "m001-seed2" / "checkpoints")
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "96", "--no-progress", "--quiet"], capsys)
    assert code == 0, err
    assert _targets(run)["m001-seed2"] == 96
    assert [p.name for p in ckpt.list_checkpoints(run / "m001-seed2")] == ["step_000000000096.pt"]


# ---------------------------------------------------------------- 2: the flag as typed
@pytest.mark.parametrize("flag, sweep, said", [
    ("--learning-rate", "lr=1e-3,2e-3", "--learning-rate 0.005 and --sweep lr=... both set lr; drop one"),
    ("--lr", "learning_rate=1e-3,2e-3", "--lr 0.005 and --sweep learning_rate=... both set lr; drop one"),
    ("--lr", "lr=1e-3,2e-3", "--lr 0.005 and --sweep lr=... both set lr; drop one"),
])
def test_a_typed_rate_and_a_swept_lr_are_refused_naming_the_flags_typed(flag, sweep, said, capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--preset", "fast", "--seeds", "1-2", flag, "5e-3", "--sweep", sweep,
                             "--dry-run"], capsys)
    # was: "--lr 0.005 and --sweep lr=..." for --learning-rate, a flag the user never typed
    assert error_line(code, err, said).endswith(said)


# ---------------------------------------------------------------- 3: the resume dry run's total
def test_a_resume_dry_run_shows_the_whole_iterations_the_resume_trains_to_with_its_note(pop, tmp_path, capsys):
    run = _copy(pop, tmp_path)
    code, out, err = run_main(["train", "CartPole-v1", "--seeds", "1-3", "--resume", str(run), "--total-timesteps", "100",
                               "--dry-run", *TINY_POP], capsys)
    assert code == 0, err
    shown = json.loads(out)
    # was: "total_timesteps": 100, and no note; the resume trains to 96 (3 iterations of 32)
    assert shown["total_timesteps"] == 96 and shown["global_step"] == 64
    note = ("proxima: note: --total-timesteps 100 is not a multiple of the batch (32 steps = num_envs x num_steps): "
            "the run trains to step 96 (3 iterations)")
    assert note in err.splitlines()
    code, _, real = run_main(["resume", str(run), "--total-timesteps", "100", "--no-progress"], capsys)
    assert code == 0, real
    assert note in real.splitlines()
    assert json.loads((run / "population.json").read_text())["total_timesteps_per_member"] == shown["total_timesteps"]


# ---------------------------------------------------------------- 4: the dry run's estimate
def test_a_dry_run_shows_memory_and_disk_and_the_disk_is_what_the_run_writes(tmp_path, capsys):
    run = tmp_path / "p4"
    args = ["train", "CartPole-v1", "--seeds", "1-4", "--run-dir", str(run), "--total-timesteps", "64",
            "--eval-episodes", "0", "--keep-checkpoints", "1", *TINY_POP]
    code, out, err = run_main([*args, "--dry-run"], capsys)
    assert code == 0, err
    estimate = json.loads(out)["estimate"]
    assert estimate["device"] == "cpu" and estimate["memory_bytes"] > 4 * population_mod.MEMBER_HOST_BYTES
    assert estimate["memory_free_bytes"] is None or estimate["memory_free_bytes"] > estimate["memory_bytes"]
    assert estimate["checkpoints_kept"] == 1 and estimate["kept_checkpoint_bytes"] == estimate["checkpoint_bytes"]
    assert estimate["disk_free_bytes"] > 0
    lines = [line for line in err.splitlines() if line.startswith("proxima: estimate: 4 members need at least ~")]
    assert len(lines) == 1 and "(--keep-checkpoints 1)" in lines[0], err
    assert not run.exists()
    assert run_main([*args, "--quiet"], capsys)[0] == 0
    folders = [run, *(run / f"m00{i}-seed{i + 1}" for i in range(4))]
    files = [p for folder in folders for p in ckpt.list_checkpoints(folder)]
    assert len(files) == 5  # the population's one checkpoint and each member's
    written = sum(p.stat().st_size for p in files)
    assert abs(estimate["checkpoint_bytes"] - written) < 0.15 * written, (estimate["checkpoint_bytes"], written)


def test_a_dry_run_under_quiet_keeps_the_estimate_in_its_json_and_off_stderr(capsys):
    code, out, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "64", "--quiet", "--dry-run",
                               *TINY_POP], capsys)
    assert code == 0, err
    assert json.loads(out)["estimate"]["checkpoint_bytes"] > 0
    assert "estimate" not in err


def test_the_dry_runs_memory_is_the_number_the_fit_check_refuses_on(monkeypatch, capsys):
    args = ["train", "CartPole-v1", "--seeds", "1-8", "--total-timesteps", "64", "--quiet", "--dry-run", *TINY_POP]
    monkeypatch.setattr("proxima.sizing.free_memory", lambda device: 10**12)
    need = json.loads(run_main(args, capsys)[1])["estimate"]["memory_bytes"]
    monkeypatch.setattr("proxima.sizing.free_memory", lambda device: need)
    assert run_main(args, capsys)[0] == 0
    monkeypatch.setattr("proxima.sizing.free_memory", lambda device: need - 1)
    code, _, err = run_main(args, capsys)
    error_line(code, err, "--seeds/--sweep: 8 members x 2 envs x 16 steps needs")


def test_a_resume_dry_run_shows_the_estimate_of_the_population_it_continues(pop, tmp_path, capsys):
    run = _copy(pop, tmp_path)
    code, out, err = run_main(["train", "CartPole-v1", "--seeds", "1-3", "--resume", str(run), "--total-timesteps", "96",
                               "--dry-run", *TINY_POP], capsys)
    assert code == 0, err
    estimate = json.loads(out)["estimate"]
    assert "proxima: estimate: 3 members need at least ~" in err
    # the population it continues is the one this command would start: the same sizes
    code, out, err = run_main(["train", "CartPole-v1", "--seeds", "1-3", "--total-timesteps", "96", "--dry-run",
                               "--eval-episodes", "0", "--anneal-lr", *TINY_POP], capsys)
    assert code == 0, err
    new = json.loads(out)["estimate"]
    assert (estimate["checkpoint_bytes"], estimate["memory_bytes"]) == (new["checkpoint_bytes"], new["memory_bytes"])
    assert estimate["disk_free_bytes"] > 0
