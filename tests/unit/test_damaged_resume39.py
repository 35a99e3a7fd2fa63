"""A damaged newest checkpoint names the newest one that loads (an older step_*.pt, else best.pt), with
its step, as the one command to copy; only when none loads, the start-over advice. A bad flag given to a
resume of a finished run is refused before the note that the run is complete."""

import os
import shlex
import shutil

import pytest

from tests.cli_helpers import TINY_RUN, cli, error_line, run_main


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 3-iteration (192-step) CartPole run keeping 2 step checkpoints (128, 192) and a best.pt
    (an eval every iteration)."""
    return _train_finished(tmp_path_factory.mktemp("damaged39") / "run")


def _train_finished(run, *extra):
    flags = [f for f in TINY_RUN if f not in ("--eval-episodes", "0")]
    assert cli.main(["train", "CartPole-v1", *flags, "--eval-episodes", "1", "--eval-every", "1", "--total-timesteps", "192",
                     "--keep-checkpoints", "2", "--checkpoint-every", "1", *extra, "--run-dir", str(run), "--quiet"]) == 0
    return run


def _copied(src, tmp_path):
    """A test's own copy of a module's finished run (or population), ``src``'s name kept, to damage."""
    return shutil.copytree(src, tmp_path / src.name)


@pytest.fixture
def run(finished, tmp_path):
    return _copied(finished, tmp_path)


def _truncate(path) -> None:
    os.truncate(path, 100000)


def _best_step(run) -> int:
    import torch

    return int(torch.load(run / "checkpoints" / "best.pt", weights_only=True)["global_step"])


def _advised(line: str, command: str) -> list:
    """The arguments of the ``proxima COMMAND ...`` the line advises (up to its ' (step')."""
    rest = line.split(f"proxima {command} ", 1)[1]
    return [command, *shlex.split(rest.split(" (step")[0].split(",")[0])]


def test_a_named_damaged_newest_names_the_older_step_file_and_the_advised_resume_continues_from_it(run, capsys):
    ckpts = run / "checkpoints"
    _truncate(ckpts / "step_000000000192.pt")
    code, _, err = run_main(["resume", str(ckpts / "step_000000000192.pt")], capsys)
    line = error_line(code, err)
    assert line.endswith(f"; resuming the run directory instead (proxima resume {run}) continues from its newest sound "
                         f"checkpoint, {ckpts / 'step_000000000128.pt'}"), line
    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)  # exactly the command advised
    assert code == 0, err
    assert f"resuming from {ckpts / 'step_000000000128.pt'} instead" in err


def test_only_best_pt_good_resume_names_it_with_its_step_and_the_advised_command_resumes(run, capsys):
    ckpts = run / "checkpoints"
    for name in ("step_000000000192.pt", "step_000000000128.pt"):
        _truncate(ckpts / name)
    step = _best_step(run)
    code, _, err = run_main(["resume", str(run)], capsys)
    line = error_line(code, err)
    assert line == (f"proxima resume: error: {ckpts / 'step_000000000192.pt'}: truncated checkpoint (100000 bytes, the end "
                    "of the archive is missing); none of the 1 older checkpoint(s) loads either; resume from the newest "
                    f"good one: proxima resume {ckpts / 'best.pt'} (step {step:,})")
    assert sorted(p.name for p in ckpts.iterdir()) == ["best.pt", "step_000000000128.pt", "step_000000000192.pt"]  # nothing renamed
    code, _, err = run_main([*_advised(line, "resume"), "--quiet"], capsys)
    assert code == 0, err
    assert [p.name for p in ckpts.glob("abandoned-*/step_*.pt")] != []  # the damaged ones set aside by the resume
    assert (ckpts / "step_000000000192.pt").is_file()  # trained again to the run's end


def test_only_best_pt_good_a_named_damaged_file_names_best_pt(run, capsys):
    ckpts = run / "checkpoints"
    for name in ("step_000000000192.pt", "step_000000000128.pt"):
        _truncate(ckpts / name)
    code, _, err = run_main(["resume", str(ckpts / "step_000000000128.pt")], capsys)
    assert error_line(code, err).endswith(f"; no step_*.pt of {run} loads either: resume from the newest good one: "
                                          f"proxima resume {ckpts / 'best.pt'} (step {_best_step(run):,})")


def test_only_best_pt_good_eval_names_it_and_the_advised_eval_works(run, capsys):
    ckpts = run / "checkpoints"
    for name in ("step_000000000192.pt", "step_000000000128.pt"):
        _truncate(ckpts / name)
    code, _, err = run_main(["eval", str(run), "--episodes", "1"], capsys)
    line = error_line(code, err)
    best = ckpts / "best.pt"
    assert line.endswith(f"; none of the 1 older checkpoint(s) loads either; resume from the newest good one: proxima resume "
                         f"{best} (step {_best_step(run):,}), or evaluate it: proxima eval {best}"), line
    code, out, err = run_main([*_advised(line.split(", or evaluate it: ")[1], "eval"), "--episodes", "1"], capsys)
    assert code == 0, err
    assert "over 1 episode (" in out


def test_a_damaged_best_pt_is_never_advised_the_start_over_is(run, capsys):
    ckpts = run / "checkpoints"
    for name in ("step_000000000192.pt", "step_000000000128.pt", "best.pt"):
        _truncate(ckpts / name)
    start_over = (f"restore a copy of {ckpts} if you have one, or start over with proxima train --config "
                  f"{run / 'config.yaml'} --run-dir {run} --overwrite (the old run is moved aside)")
    for command in ("resume", "eval"):
        code, _, err = run_main([command, str(run)], capsys)
        line = error_line(code, err)
        assert line.endswith(f"; none of the 1 older checkpoint(s) loads either; {start_over}"), line
        assert "best.pt" not in line


def test_a_best_pt_that_is_only_header_sound_is_not_advised(run, capsys):
    """A best.pt whose archive is whole but whose zip entries do not check out (a flipped byte) is damaged too."""
    ckpts = run / "checkpoints"
    for name in ("step_000000000192.pt", "step_000000000128.pt"):
        _truncate(ckpts / name)
    data = bytearray((ckpts / "best.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (ckpts / "best.pt").write_bytes(bytes(data))
    code, _, err = run_main(["resume", str(run)], capsys)
    line = error_line(code, err, "restore a copy of")
    assert "best.pt" not in line


@pytest.mark.parametrize("flag", [["--keep-checkpoints", "-1"], ["--checkpoint-every", "-1"]])
def test_a_bad_flag_on_a_finished_run_is_refused_before_any_note(finished, tmp_path, capsys, flag):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    code, _, err = run_main(["resume", str(run), *flag], capsys)
    error_line(code, err, f"{flag[0]} {flag[1]}: must be")
    assert err.strip().splitlines()[0].startswith("proxima resume: error: "), err
    assert "note" not in err, err


def test_a_best_pt_that_unpickles_but_would_not_resume_is_not_advised(run, capsys):
    """best.pt is advised only when it loads as the resume loads it (load_sound): a global_step that
    disagrees with its iteration would fail the advised resume."""
    import torch

    ckpts = run / "checkpoints"
    for name in ("step_000000000192.pt", "step_000000000128.pt"):
        _truncate(ckpts / name)
    state = torch.load(ckpts / "best.pt", weights_only=False)
    state["global_step"] += 64
    torch.save(state, ckpts / "best.pt")
    code, _, err = run_main(["resume", str(run)], capsys)
    line = error_line(code, err, "restore a copy of")
    assert line.endswith(f"restore a copy of {ckpts} if you have one, or start over with proxima train --config "
                         f"{run / 'config.yaml'} --run-dir {run} --overwrite (the old run is moved aside)"), line


def test_a_finished_run_with_its_stop_return_reached_says_complete_only(run, capsys):
    code, _, err = run_main(["resume", str(run), "--stop-return", "1", "--stop-episodes", "1"], capsys)
    assert code == 0, err
    assert "the run is complete (192 steps)" in err and "the run stopped at --stop-return" not in err, err


def test_one_more_iteration_allowed_but_stop_return_reached_says_stopped_not_complete(run, capsys):
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "256", "--stop-return", "1",
                             "--stop-episodes", "1"], capsys)
    assert code == 0, err
    assert "the run stopped at --stop-return 1 (its last 1+ training episodes averaged" in err, err
    assert "the run is complete" not in err, err


@pytest.fixture(scope="module")
def population(tmp_path_factory):
    """A finished 2-iteration (128-step) population of two CartPole seeds."""
    run = tmp_path_factory.mktemp("damaged39pop") / "pop"
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "128", "--seeds", "1-2",
                     "--run-dir", str(run), "--quiet"]) == 0
    return run


@pytest.fixture
def pop(population, tmp_path):
    return _copied(population, tmp_path)


@pytest.mark.parametrize("flag", [["--keep-checkpoints", "-1"], ["--checkpoint-every", "-1"]])
def test_a_bad_flag_on_a_finished_population_is_refused_before_any_note(pop, capsys, flag):
    code, _, err = run_main(["resume", str(pop), *flag], capsys)
    error_line(code, err, f"{flag[0]} {flag[1]}: must be")
    assert err.strip().splitlines()[0].startswith("proxima resume: error: "), err
    assert "note" not in err, err


def test_a_population_with_one_more_iteration_to_train_is_not_called_complete(pop, capsys):
    code, _, err = run_main(["resume", str(pop), "--total-timesteps", "192", "--quiet"], capsys)
    assert code == 0, err
    assert "complete" not in err, err
    assert (pop / "checkpoints" / "step_000000000192.pt").is_file()


@pytest.mark.parametrize("source", ["checkpoints", "m000-seed1/checkpoints"])
def test_a_population_or_member_checkpoint_as_best_pt_is_never_advised(pop, capsys, source):
    """A population resumes as a whole from its own step_*.pt; a best.pt holding a population's (or a
    member's) state is no single run's checkpoint to resume."""
    ckpts = pop / "checkpoints"
    shutil.copy(pop / source / "step_000000000128.pt", ckpts / "best.pt")
    _truncate(ckpts / "step_000000000128.pt")
    code, _, err = run_main(["resume", str(pop)], capsys)
    line = error_line(code, err, f"restore a copy of {ckpts} if you have one, or train the population again")
    assert "best.pt" not in line


@pytest.mark.parametrize("key", ["optimizer", "rng"])
def test_a_named_best_pt_missing_what_restore_reads_is_refused_before_the_newer_checkpoints_are_set_aside(run, capsys, key):
    """Found only at restore, `proxima resume RUN/checkpoints/best.pt` had first moved step_*.pt newer than
    best.pt into abandoned-*, then failed: the run was left without its newest checkpoints."""
    import torch

    ckpts = run / "checkpoints"
    before = sorted(p.name for p in ckpts.iterdir())
    state = torch.load(ckpts / "best.pt", weights_only=False)
    assert _best_step(run) < 192  # so that a resume from it sets newer files aside
    del state[key]
    torch.save(state, ckpts / "best.pt")
    _refused_with_nothing_moved(run, key, before, capsys)


def _refused_with_nothing_moved(run, key: str, before: list, capsys) -> None:
    """`proxima resume RUN/checkpoints/best.pt` of a best.pt missing ``key``: one line naming the run's newest
    sound checkpoint, and the checkpoints folder as it was (``before``: its names)."""
    ckpts = run / "checkpoints"
    code, _, err = run_main(["resume", str(ckpts / "best.pt"), "--total-timesteps", "256"], capsys)
    line = error_line(code, err, f"incomplete checkpoint (missing '{key}')")
    assert line.endswith(f"resuming the run directory instead (proxima resume {run}) continues from its newest sound "
                         f"checkpoint, {ckpts / 'step_000000000192.pt'}"), line
    assert sorted(p.name for p in ckpts.iterdir()) == before


@pytest.fixture(scope="module")
def finished_normed(tmp_path_factory):
    """The `finished` run with --norm-obs --norm-reward: restore reads both statistics of its checkpoints."""
    return _train_finished(tmp_path_factory.mktemp("damaged39norm") / "run", "--norm-obs", "--norm-reward")


@pytest.mark.parametrize("key, stored", [("obs_normalizer", "deleted"), ("reward_scaler", "deleted"),
                                         ("obs_normalizer", None), ("optimizer", None)])
def test_a_named_best_pt_of_a_normalized_run_missing_a_statistic_or_holding_none_is_refused_with_nothing_moved(
        finished_normed, tmp_path, capsys, key, stored):
    """check_consistent asks a --norm-obs / --norm-reward run's checkpoint for its statistics, and takes a
    field stored as None (a hand-edited file) as missing: restore would read neither, after the resume had
    set the newer step_*.pt aside."""
    import torch

    run = tmp_path / "run"
    shutil.copytree(finished_normed, run)
    ckpts = run / "checkpoints"
    before = sorted(p.name for p in ckpts.iterdir())
    # a best.pt of step 128 (this run's best evaluation may be its last): a resume from it sets step 192 aside
    state = torch.load(ckpts / "step_000000000128.pt", weights_only=False)
    assert state["global_step"] == 128 and state[key] is not None
    if stored == "deleted":
        del state[key]
    else:
        state[key] = None
    torch.save(state, ckpts / "best.pt")
    _refused_with_nothing_moved(run, key, before, capsys)
