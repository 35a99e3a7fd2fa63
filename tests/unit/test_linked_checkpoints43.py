"""A run whose checkpoints/ folder is a symbolic link out of the run is refused alike by every reader
(checkpoint.check_inside_run through resolve_checkpoint): eval, proxima.load, --init-from and resume,
in one line naming the folder and where it leads."""
import pytest

import proxima
from proxima.checkpoint import LinkOutOfRunError
from tests.cli_helpers import error_line, run_main, tiny_cartpole_run


@pytest.fixture
def linked_run(tmp_path_factory):
    run = tiny_cartpole_run(tmp_path_factory, "link43")
    elsewhere = run.parent / "elsewhere43"
    (run / "checkpoints").rename(elsewhere)
    (run / "checkpoints").symlink_to(elsewhere)
    yield run, elsewhere
    (run / "checkpoints").unlink()
    elsewhere.rename(run / "checkpoints")


def _said(run, elsewhere) -> str:
    return (f"{run / 'checkpoints'}: is a symbolic link (or lies under one) to {elsewhere}, outside the run directory "
            f"{run}; Proxima does not read a run through it: remove the link (or copy what it points to into the run) "
            "and try again")


def test_load_refuses_a_checkpoints_folder_linked_out_of_the_run(linked_run):
    run, elsewhere = linked_run
    with pytest.raises(LinkOutOfRunError) as e:
        proxima.load(run)
    assert str(e.value) == _said(run, elsewhere)


@pytest.mark.parametrize("argv", [["eval", "{run}", "--episodes", "1"],
                                  ["train", "CartPole-v1", "--init-from", "{run}", "--total-timesteps", "64",
                                   "--num-envs", "2", "--num-steps", "32", "--run-dir", "{new}"],
                                  ["resume", "{run}"]], ids=["eval", "init_from", "resume"])
def test_the_cli_readers_refuse_it_in_one_line(linked_run, argv, tmp_path, capsys):
    run, elsewhere = linked_run
    argv = [a.format(run=run, new=tmp_path / "new") for a in argv]
    code, _, err = run_main(argv, capsys)
    assert elsewhere.name in error_line(code, err, f"{run / 'checkpoints'}: is a symbolic link")
    assert not (tmp_path / "new").exists()


def test_a_loose_checkpoint_named_through_a_link_loads(tmp_path_factory, tmp_path):
    """A file the user names outside any checkpoints/ folder is theirs to link: only a run's checkpoints/ is held."""
    run = tiny_cartpole_run(tmp_path_factory, "link43b")
    [target] = sorted((run / "checkpoints").glob("step_*.pt"))[-1:]
    link = tmp_path / "best.pt"
    link.symlink_to(target)
    assert proxima.load(link).config["env_id"] == "CartPole-v1"


def test_a_checkpoint_file_linked_out_of_the_run_names_where_it_leads(tmp_path_factory, tmp_path):
    run = tiny_cartpole_run(tmp_path_factory, "link43c")
    [ckpt] = sorted((run / "checkpoints").glob("step_*.pt"))[-1:]
    moved = tmp_path / ckpt.name
    ckpt.rename(moved)
    ckpt.symlink_to(moved)
    try:
        with pytest.raises(LinkOutOfRunError) as e:
            proxima.load(run)
        assert str(e.value).startswith(f"{ckpt}: is a symbolic link to {moved}, outside the run directory {run}; ")
    finally:
        ckpt.unlink()
        moved.rename(ckpt)
