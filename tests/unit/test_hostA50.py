"""Hostile-input review 50: a complete population's resume with --keep-checkpoints K prunes its checkpoints and each
member's to the newest K, with a note (was: exit 0, nothing pruned, nothing said), by the single run's rules; advice
that echoes population.json's recorded command names its program as the plain word ``proxima`` (``python -m
proxima``), never the path recorded (a run directory may come from someone else); a link to a device is "a symbolic
link to /dev/null, which is a device"; a FIFO where a folder is needed is named as one; a reward whose __signature__
raises is called positionally, never a traceback."""

from __future__ import annotations

import os
import shlex
import shutil

import pytest

from cli_helpers import TINY_POP, run_main
from proxima import population_run
from proxima.checkpoint import not_a_file
from proxima.diskspace import path_problem
from proxima.rlhf.data import PromptRow
from proxima.rlhf.rewards import RewardBatch, RewardFunction


def _steps(folder) -> list:
    return sorted(p.name for p in folder.glob("step_*.pt"))


@pytest.fixture
def complete(tmp_path, capsys, monkeypatch):
    """A complete population of seeds 1-2 whose every iteration left a checkpoint (4 each), run from tmp_path."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--total-timesteps", "128", *TINY_POP,
                             "--eval-episodes", "0", "--checkpoint-every", "1", "--keep-checkpoints", "0",
                             "--run-dir", "PK", "--quiet"], capsys)
    assert code == 0, err
    run = tmp_path / "PK"
    for folder in (run, run / "m000-seed1", run / "m001-seed2"):
        assert len(_steps(folder / "checkpoints")) == 4
    return run


def test_keep_checkpoints_on_a_complete_populations_resume_prunes_it_and_each_member_to_the_newest_k(complete, capsys):
    code, _, err = run_main(["resume", "PK", "--keep-checkpoints", "2"], capsys)
    assert code == 0, err
    newest = ["step_000000000096.pt", "step_000000000128.pt"]
    for folder in (complete, complete / "m000-seed1", complete / "m001-seed2"):
        assert _steps(folder / "checkpoints") == newest, folder
    assert ("proxima: note: --keep-checkpoints 2: removed the population's 2 oldest checkpoint(s) from PK/checkpoints "
            "and 4 from its 2 members' checkpoints folders, keeping the newest 2 of each (the population trains "
            "nothing more, and writes no checkpoint)\n") in err
    # nothing more to prune: no note, nothing removed
    code, _, err = run_main(["resume", "PK", "--keep-checkpoints", "2"], capsys)
    assert code == 0 and "removed the population's" not in err, err
    assert _steps(complete / "checkpoints") == newest


def test_a_complete_populations_prune_removes_a_link_not_its_target_and_keeps_best_pt(complete, capsys, tmp_path):
    """The single run's rules: a step_N.pt link is removed as a link (what it points to, outside the run, stays), and
    best.pt is never a checkpoint to prune."""
    member = complete / "m000-seed1" / "checkpoints"
    outside = tmp_path / "elsewhere.pt"
    shutil.copy(member / "step_000000000032.pt", outside)
    (member / "step_000000000032.pt").unlink()
    (member / "step_000000000032.pt").symlink_to(outside)
    shutil.copy(complete / "checkpoints" / "step_000000000032.pt", complete / "checkpoints" / "best.pt")
    code, _, err = run_main(["resume", "PK", "--keep-checkpoints", "1"], capsys)
    assert code == 0, err
    assert not os.path.lexists(member / "step_000000000032.pt") and outside.is_file()
    assert sorted(p.name for p in (complete / "checkpoints").iterdir() if p.suffix == ".pt") == [
        "best.pt", "step_000000000128.pt"]
    assert _steps(member) == ["step_000000000128.pt"]
    assert "removed the population's 3 oldest checkpoint(s) from PK/checkpoints and 6 from its 2 members'" in err


def test_keep_checkpoints_0_on_a_complete_populations_resume_keeps_every_checkpoint(complete, capsys):
    code, _, err = run_main(["resume", "PK", "--keep-checkpoints", "0"], capsys)
    assert code == 0 and "removed" not in err, err
    assert len(_steps(complete / "m001-seed2" / "checkpoints")) == 4


@pytest.mark.parametrize("start, echoed", [
    (["/tmp/attacker/bin/proxima"], ["proxima"]),
    (["/opt/venv/bin/proxima"], ["proxima"]),
    (["/tmp/attacker/python3.11", "-m", "proxima"], ["python", "-m", "proxima"]),
])
def test_train_again_echoes_the_program_as_the_plain_word_never_the_recorded_path(monkeypatch, tmp_path, start, echoed):
    command = [*start, "train", "CartPole-v1", "--seeds", "1-2"]
    monkeypatch.setattr(population_run, "read_population_doc", lambda run_dir: {"command": command})
    line = population_run._train_again(tmp_path)
    assert line.startswith(f"train it again: {shlex.join([*echoed, 'train', 'CartPole-v1', '--seeds', '1-2'])} --run-dir ")
    assert "/tmp/attacker" not in line and "/opt/venv" not in line
    assert population_run.echoed_command(command) == [*echoed, "train", "CartPole-v1", "--seeds", "1-2"]


def test_a_link_to_a_device_is_a_link_to_what_is_a_device(tmp_path, capsys):
    link = tmp_path / "zero"
    link.symlink_to("/dev/null")
    assert not_a_file(link) == "is a symbolic link to /dev/null, which is a device, not a checkpoint file"
    code, out, err = run_main(["resume", str(link)], capsys)
    assert (code, out) == (2, "")
    assert err == f"proxima resume: error: {link}: is a symbolic link to /dev/null, which is a device, not a checkpoint file\n"


def test_a_fifo_where_a_folder_is_needed_is_named_as_a_fifo(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert path_problem(fifo / "x.json") == f"{fifo} is a FIFO (named pipe), not a folder"
    (tmp_path / "afile").write_text("")
    assert path_problem(tmp_path / "afile" / "x.json") == f"{tmp_path / 'afile'} is a file, not a folder"


class _Unreadable:
    """A callable whose signature cannot be read: its __signature__ raises what inspect does not expect."""

    @property
    def __signature__(self):
        raise RuntimeError("boom")

    def __call__(self, prompts, responses):
        return [float(len(r)) for r in responses]


def test_a_reward_whose_signature_raises_is_called_positionally():
    reward = RewardFunction(_Unreadable(), "x.py:badsig", "badsig")
    batch = RewardBatch(rows=[PromptRow("a", {"answer": 1}), PromptRow("b", {"answer": 2})], responses=["xy", "xyz"],
                        texts=["axy", "bxyz"], step=1)
    assert (reward.all_columns, reward.required) == (False, [])
    assert reward(batch) == [2.0, 3.0]
