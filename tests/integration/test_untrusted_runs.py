"""A run directory is data: tampered population checkpoints, planted symbolic links, damaged
metrics.csv, YAML aliases, huge --threads, and run directories that --overwrite / --resume auto must
not move. Each is one line (exit 2) or a note, never a traceback, and nothing outside the run is
written, pruned or truncated.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch

from proxima import checkpoint as ckpt
from proxima import cli
from proxima.logger import truncate_csv
from cli_helpers import edit_checkpoint, error_line, run_main, snapshot

#: 4 envs x 16 steps = 64 steps an iteration; 3 iterations; one checkpoint per iteration
SMALL = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", "192",
         "--checkpoint-every", "1", "--eval-episodes", "0", "--no-progress", "--quiet"]




@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("finished")
    assert cli.main(["train", "CartPole-v1", "--run-dir", str(root / "run"), *SMALL]) == 0
    return root / "run"


@pytest.fixture(scope="module")
def population(tmp_path_factory) -> Path:
    """A population of 2 seeds x 2 learning rates, stopped after 3 iterations (a checkpoint each)."""
    root = tmp_path_factory.mktemp("population")
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--sweep", "lr=0.001,0.0003", "--run-dir", str(root / "pop"),
                     *SMALL]) == 0
    return root / "pop"


def copy_run(src: Path, tmp_path: Path, name: str = "run") -> Path:
    dest = tmp_path / name
    shutil.copytree(src, dest, symlinks=True)
    return dest



def victim_run(tmp_path: Path, finished_run: Path) -> tuple:
    """A second run next to the one under test, and a snapshot of its files."""
    victim = copy_run(finished_run, tmp_path, "victim")
    return victim, snapshot(victim)


# ------------------------------------------------------------------------------------ populations
@pytest.mark.parametrize("member_dirs, words", [
    (lambda names: ["../victim"] + names[1:], "member_dirs entry '../victim' is not a member folder of this run"),
    (lambda names: [None] + names[1:], "member_dirs is not a list of folder names"),
    (lambda names: ["/tmp/victim"] + names[1:], "member_dirs entry '/tmp/victim' is not a member folder"),
    (lambda names: ["m000/../../victim"] + names[1:], "is not a member folder"),
    (lambda names: [".."] + names[1:], "member_dirs entry '..' is not a member folder"),
    (lambda names: [names[0]] * len(names), "twice"),
    (lambda names: names[:1], "member_dirs names 1 member folder(s) for 4 members"),
    (lambda names: "m000-seed1", "member_dirs is not a list of folder names (got a str)"),
])
def test_a_population_checkpoint_naming_folders_out_of_the_run_is_refused(population, finished_run, tmp_path, capsys,
                                                                        member_dirs, words):
    run = copy_run(population, tmp_path, "pop")
    victim, before = victim_run(tmp_path, finished_run)
    path = edit_checkpoint(run, lambda s: s.update(member_dirs=member_dirs(list(s["member_dirs"]))))
    mine = snapshot(run)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--quiet"], capsys)
    error_line(code, err, str(path), words, "damaged or edited")
    assert snapshot(victim) == before  # nothing of the other run written, pruned or truncated
    assert snapshot(run) == mine and not (run / ".proxima.lock").exists()


@pytest.mark.parametrize("change, words", [
    (lambda s: s.update(configs="x"), "configs is not a list of member configs (got a str)"),
    (lambda s: s.update(configs=[]), "configs is not a list of member configs (got an empty list)"),
    (lambda s: s.update(configs=s["configs"][:3]), "configs holds 3 member configs, but 2 seed(s) x 2 setting(s) make 4"),
    (lambda s: s.update(seeds=5), "seeds is not a list of integer seeds (got an int)"),
    (lambda s: s.update(seeds=["1", "2"]), "seeds is not a list of integer seeds"),
    (lambda s: s.update(sweep=["lr"]), "sweep is not a mapping of field: [values]"),
    (lambda s: s.pop("member_dirs"), "incomplete population checkpoint (missing 'member_dirs')"),
])
def test_a_tampered_population_checkpoint_is_one_line_naming_the_field(population, tmp_path, capsys, change, words):
    run = copy_run(population, tmp_path, "pop")
    path = edit_checkpoint(run, change)
    mine = snapshot(run)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--quiet"], capsys)
    error_line(code, err, str(path), words)
    assert snapshot(run) == mine  # population.json kept as it was: it still says 4 members


@pytest.mark.parametrize("content, words", [
    ("[1]", "population.json: expected a JSON object, got list"),
    ('{"members": ', "population.json: not readable JSON (JSONDecodeError)"),
    (b"\xff\xfe{}", "population.json: not readable JSON (UnicodeDecodeError)"),
])
def test_a_damaged_population_json_is_one_line_at_resume(population, tmp_path, capsys, content, words):
    run = copy_run(population, tmp_path, "pop")
    target = run / "population.json"
    target.write_bytes(content if isinstance(content, bytes) else content.encode())
    mine = snapshot(run)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--quiet"], capsys)
    error_line(code, err, words)
    assert snapshot(run) == mine


@pytest.mark.parametrize("content, words", [
    ("[1]", "meta.json: expected a JSON object, got list"),
    ('{"kind": ', "meta.json: not readable JSON (JSONDecodeError)"),
    (b"\xff\xfe{}", "meta.json: not readable JSON (UnicodeDecodeError)"),
    (None, "meta.json: not a regular file"),
])
def test_a_damaged_meta_json_is_left_as_it_is_and_the_resume_goes_on(finished_run, tmp_path, capsys, content, words):
    """resume reads meta.json's kind (an RLHF run resumes another way): damaged, a PPO run's resume goes on
    with a note, as train --resume's does, and leaves the file as it is (docs/reliability.md)."""
    run = copy_run(finished_run, tmp_path)
    target = run / "meta.json"
    if content is None:
        target.unlink()
        target.mkdir()
    else:
        target.write_bytes(content if isinstance(content, bytes) else content.encode())
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--quiet"], capsys)
    assert code == 0, err
    assert f"{words}; the run directory's meta.json was damaged or edited; this resume is not recorded in it" in err
    assert target.is_dir() if content is None else target.read_bytes() == (content if isinstance(content, bytes) else content.encode())


def test_nan_weights_in_a_population_checkpoint_name_the_file_not_the_learning_rate(population, tmp_path, capsys):
    run = copy_run(population, tmp_path, "pop")

    def poison(state):
        name = sorted(state["population"]["params"])[0]
        state["population"]["params"][name][2].view(-1)[0] = float("nan")  # member 2's copy

    path = edit_checkpoint(run, poison)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--quiet"], capsys)
    line = error_line(code, err, str(path), "of member 2", "holds NaN or inf", "the checkpoint is damaged")
    assert "--lr" not in line


def test_a_member_folder_that_links_out_of_the_population_is_refused(population, finished_run, tmp_path, capsys):
    run = copy_run(population, tmp_path, "pop")
    victim, before = victim_run(tmp_path, finished_run)
    member = json.loads((run / "population.json").read_text())["member_dirs"][0]["dir"]
    shutil.rmtree(run / member)
    (run / member).symlink_to(victim, target_is_directory=True)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--quiet"], capsys)
    error_line(code, err, str(run / member), "is a symbolic link", "outside the run directory")
    assert snapshot(victim) == before


# ------------------------------------------------------------------------------------ planted links
@pytest.mark.parametrize("name", ["eval.json", "config.yaml.tmp", "metrics.csv.tmp", "metrics.csv", "checkpoints"])
def test_resume_refuses_a_link_out_of_the_run_and_writes_nothing_through_it(finished_run, tmp_path, capsys, name):
    run = copy_run(finished_run, tmp_path)
    victim, before = victim_run(tmp_path, finished_run)
    target = victim / "checkpoints" if name == "checkpoints" else victim / "eval.json"
    before_target = snapshot(victim)
    if (run / name).is_dir():
        shutil.rmtree(run / name)
    else:
        (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(target)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--keep-checkpoints", "1", "--quiet"], capsys)
    error_line(code, err, str(run / name), "is a symbolic link", "outside the run directory", "remove the link")
    assert snapshot(victim) == before == before_target
    assert not (run / ".proxima.lock").exists()


def test_a_dangling_link_out_of_the_run_is_refused_and_never_created(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path)
    (run / "metrics.csv").unlink()
    (run / "metrics.csv").symlink_to(tmp_path / "created-outside.csv")
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--quiet"], capsys)
    error_line(code, err, str(run / "metrics.csv"), "outside the run directory")
    assert not (tmp_path / "created-outside.csv").exists()


def test_a_link_that_stays_inside_the_run_is_fine(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path)
    (run / "kept").mkdir()
    (run / "eval.json").unlink(missing_ok=True)
    (run / "eval.json").symlink_to(run / "kept" / "eval.json")
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--quiet"], capsys)
    assert code == 0, err


@pytest.mark.parametrize("name", ["report.md", "report.md.tmp", "curve.png", "curve.png.tmp"])
def test_report_and_plot_never_write_through_a_planted_link(finished_run, tmp_path, capsys, name):
    run = copy_run(finished_run, tmp_path)
    victim = tmp_path / "precious.txt"
    victim.write_text("PRECIOUS")
    (run / name).symlink_to(victim)
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err
    code, _, err = run_main(["plot", str(run)], capsys)
    assert code == 0, err
    assert victim.read_text() == "PRECIOUS"
    final = run / name.removesuffix(".tmp")
    assert final.is_file() and not final.is_symlink()  # the link at the target is replaced, not written through
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()]  # no temp file left


# ------------------------------------------------------------------------------------ resume reads only, before its lock
def test_the_resume_launcher_sets_nothing_aside_before_the_lock(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path)
    newest = ckpt.list_checkpoints(run)[-1]
    newest.write_bytes(newest.read_bytes()[:1000])  # cut short
    assert cli._written_by(run) == 1
    assert newest.exists() and not list(run.glob("checkpoints/*.corrupt"))
    assert capsys.readouterr().err == ""  # train says it, once, after it took the lock
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--quiet"], capsys)
    assert code == 0, err
    assert err.count("is unusable") == 1


# ------------------------------------------------------------------------------------ metrics.csv is data
def test_truncate_csv_drops_lines_it_cannot_read_with_a_note(tmp_path, capsys):
    path = tmp_path / "metrics.csv"
    path.write_bytes(b"iteration,global_step,time\n1,64,0.1\n\xff\xfe,128,0.2\n2," + b"9" * 200_000 + b",0.3\n3,192,0.4\n4,256,0.5\n")
    truncate_csv(path, 192)
    rows = path.read_text().splitlines()
    assert rows[0].startswith("iteration,global_step,time,") and [r.split(",")[:2] for r in rows[1:]] == [["1", "64"], ["3", "192"]]
    err = capsys.readouterr().err
    assert f"proxima: note: {path}: dropped 2 line(s) that are not rows Proxima wrote" in err


@pytest.mark.parametrize("content", [b"\xff\xfe garbage\n", b"iteration,global_step\n1," + b"9" * 200_000 + b"\n"],
                         ids=["not-utf8", "field-over-the-csv-limit"])
def test_resume_continues_past_a_damaged_metrics_csv(finished_run, tmp_path, capsys, content):
    run = copy_run(finished_run, tmp_path)
    (run / "metrics.csv").write_bytes(content)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--quiet"], capsys)
    assert code == 0 and "Traceback" not in err, err
    assert "metrics.csv: dropped 1 line(s)" in err
    assert (run / "metrics.csv").read_text().splitlines()[-1].split(",")[1] == "256"


# ------------------------------------------------------------------------------------ --threads
def test_a_huge_thread_count_is_one_line_typed_or_recorded(finished_run, tmp_path, capsys):
    cap = 4 * (os.cpu_count() or 1)
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(tmp_path / "new"), *SMALL, "--threads", "1000000"], capsys)
    error_line(code, err, f"--threads 1000000: must be at most {cap}")
    assert "resume may change it" not in err  # a new run: the hint is a resume's
    assert not (tmp_path / "new").exists()
    config = tmp_path / "c.yaml"
    config.write_text("threads: 1000000\n")
    code, _, err = run_main(["train", "CartPole-v1", "--config", str(config), "--run-dir", str(tmp_path / "new"), *SMALL], capsys)
    error_line(code, err, str(config), f"must be at most {cap}")
    run = copy_run(finished_run, tmp_path)
    for path in ckpt.list_checkpoints(run):
        state = torch.load(path, weights_only=True)
        state["config"]["threads"] = 1_000_000
        ckpt.atomic_torch_save(state, path)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--quiet"], capsys)
    # the value is the checkpoint's, not a flag the user typed: the line names the file and the field
    line = error_line(code, err, "checkpoints/step_", f".pt: threads 1000000: must be at most {cap}", "resume may change it")
    assert "--threads 1000000" not in line
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--threads", "1", "--quiet"], capsys)
    assert code == 0, err


# ------------------------------------------------------------------------------------ --overwrite, --resume auto
@pytest.mark.parametrize("given", [".", "sub/.."])
def test_overwrite_refuses_to_move_the_current_directory_aside(tmp_path, capsys, monkeypatch, given):
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "notes.txt").write_text("mine")
    monkeypatch.chdir(work)
    before = snapshot(work)
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", given, "--overwrite", *SMALL], capsys)
    error_line(code, err, f"--run-dir {given}: is the current directory, which cannot be moved aside")
    assert snapshot(work) == before and sorted(p.name for p in tmp_path.iterdir()) == ["work"]


def test_overwrite_of_a_folder_holding_the_current_directory_is_refused(tmp_path, capsys, monkeypatch):
    (tmp_path / "run" / "inside").mkdir(parents=True)
    (tmp_path / "run" / "config.yaml").write_text("env_id: CartPole-v1\n")
    monkeypatch.chdir(tmp_path / "run" / "inside")
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(tmp_path / "run"), "--overwrite", *SMALL], capsys)
    error_line(code, err, "holds the current directory, which cannot be moved aside")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_resume_auto_never_moves_aside_a_folder_that_holds_no_run(tmp_path, capsys):
    project = tmp_path / "proj"
    project.mkdir()
    (project / "main.py").write_text("code\n")
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(project), "--resume", "auto", *SMALL], capsys)
    error_line(code, err, f"{project} is not empty (main.py...) and holds no Proxima run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"] and snapshot(project) == {"main.py": b"code\n"}
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(project), "--resume", "auto", *SMALL], capsys)
    error_line(code, err, "holds no Proxima run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"]


def test_resume_auto_still_restarts_a_run_that_never_checkpointed(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path)
    shutil.rmtree(run / "checkpoints")
    code, _, err = run_main(["train", "CartPole-v1", "--run-dir", str(run), "--resume", "auto", *SMALL], capsys)
    assert code == 0, err
    assert "--resume auto found no checkpoint to continue: moved the old" in err
    assert len(list(tmp_path.glob("run.old-*"))) == 1


# ------------------------------------------------------------------------------------ YAML aliases
BOMB = "\n".join(["a0: &a0 [x,x,x,x,x,x,x,x,x]"] + [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
                 + ["env_id: CartPole-v1", ""])


def test_a_yaml_alias_bomb_in_a_run_is_one_line_at_once(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path)
    (run / "config.yaml").write_text(BOMB)
    start = time.monotonic()
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    error_line(code, err, f"{run / 'config.yaml'}: holds a YAML alias (*a0, line 2)")
    assert not (run / "report.md").exists()
    code, _, err = run_main(["train", "--config", str(run / "config.yaml"), "--run-dir", str(tmp_path / "new"), *SMALL], capsys)
    error_line(code, err, f"--config {run / 'config.yaml'}: holds a YAML alias")
    code, _, err = run_main(["plot", str(run)], capsys)  # its env id reads as 'unknown'; the curve is drawn
    assert code == 0, err
    assert time.monotonic() - start < 60
