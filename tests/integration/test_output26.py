"""Output hygiene and env-module defects a review reproduced (session 26):

1. terminal escapes read from a run's files reached the terminal raw in notes (resume's note on an
   edited config.yaml, plot's one-point note) and reached matplotlib ("Glyph 27 missing");
2. commands suggested with an env id or path read from a file were not shell-quoted: pasting
   ``--env evil:Env $(touch X)`` ran ``touch X``;
3. a checkpoint's folder is kept off the import path (a downloaded folder must not supply the code an
   env id names, whatever files it holds), but the user's own env module beside it could not be
   imported even with its folder on PYTHONPATH, and the error did not say which folder was skipped.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import warnings
from pathlib import Path

import pytest
import yaml
import warm_python
from cli_helpers import TINY_ENV, TINY_RUN, edit_checkpoint, error_line, run_main

from proxima import checkpoint as ckpt

MODULE = "out26_user_env"
ENV = f"{MODULE}:Tiny"
PROXIMA = Path(sys.executable).with_name("proxima")
ESC = "\x1b]0;PWNED\x07\x1b[2J"


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished one-iteration CartPole run (one metrics.csv row)."""
    from proxima import cli

    run_dir = tmp_path_factory.mktemp("out26") / "run"
    assert cli.main(["train", "CartPole-v1", *TINY_RUN, "--total-timesteps", "64", "--run-dir", str(run_dir), "--quiet"]) == 0
    return run_dir


@pytest.fixture
def run(finished, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


def _no_raw_controls(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text, repr(text)


def _proxima(*argv, cwd, pythonpath=None):
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    # the console script as its shebang starts it (sys.path[0] its folder, never cwd): a warm fork of it, whose sys.path
    # (PYTHONPATH's entries made absolute, "." the cwd) is the interpreter's (tests/warm_python.py)
    return warm_python.run([sys.executable, str(PROXIMA), *map(str, argv)], cwd=cwd, env=env, capture_output=True,
                           text=True, timeout=300)


# ------------------------------------------------------------------------------------ 1. escapes
def test_resumes_note_on_an_edited_config_yaml_writes_its_escapes_as_text(run, capsys):
    path = run / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    cfg["device"] = "cpu" + ESC
    path.write_text(yaml.safe_dump(cfg))
    code, _, err = run_main(["resume", str(run), "--quiet"], capsys)
    assert code == 0, err
    _no_raw_controls(err)
    [note] = [ln for ln in err.splitlines() if "differs from the checkpoint's" in ln]
    assert r"--device 'cpu\x1b]0;PWNED\x07\x1b[2J'" in note, note


def test_plots_notes_and_drawn_texts_carry_no_control_characters(run, capsys, recwarn):
    path = run / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    cfg["env_id"] = "CartPole-v1" + ESC
    path.write_text(yaml.safe_dump(cfg))
    warnings.simplefilter("always")
    code, out, err = run_main(["plot", str(run), "--metric", "losses/value_loss", "--title", "t\x1b[31mx"], capsys)
    assert code == 0, err
    _no_raw_controls(out + err)
    assert "only one logged value" in err and r"\x1b]0;PWNED\x07" in err, err
    glyphs = [str(w.message) for w in recwarn if "Glyph" in str(w.message)]
    assert not glyphs, glyphs


def test_drawable_drops_controls_and_keeps_layout_newlines_only_when_asked():
    from proxima.plot import drawable

    assert drawable("Cart" + ESC + "\tx\ny") == "Cart]0;PWNED[2J x y"
    assert drawable("a\nb", lines=True) == "a\nb"
    assert drawable(None) is None


# ------------------------------------------------------------------------------------ 2. suggested commands quoted
EVIL = "evil:Env $(touch PWNED)"


def test_eval_of_a_checkpoint_naming_a_hidden_command_suggests_it_quoted(run, capsys):
    # the file itself: a run directory whose config.yaml names another env is refused first, as not this run's
    path = edit_checkpoint(run, lambda state: state["config"].update(env_id=EVIL))
    code, _, err = run_main(["eval", str(path), "--episodes", "1"], capsys)
    line = error_line(code, err, "would import and run module 'evil'")
    assert f"pass --env {shlex.quote(EVIL)} to `proxima eval`" in line, line


def test_train_config_naming_a_hidden_command_suggests_it_quoted(tmp_path, capsys):
    config = tmp_path / "my conf.yaml"
    config.write_text(yaml.safe_dump({"env_id": EVIL}))
    code, _, err = run_main(["train", "--config", str(config), "--dry-run"], capsys)
    line = error_line(code, err, "would import and run module 'evil'")
    command = line.split("(proxima train ", 1)[1].split(") if you trust", 1)[0]
    assert shlex.split(command) == [EVIL, "--config", str(config)], line


def test_unregistered_and_stop_lines_quote_what_they_suggest():
    from proxima.envs import unregistered_line
    from proxima.signals import checkpoint_line

    line = unregistered_line("My Reg-v0;x", "ck.pt", "--env {env}", "my mod:F")
    assert line.endswith(f"--env {shlex.quote('MODULE:My Reg-v0;x')}"), line
    line = checkpoint_line(Path("/tmp/a $(b)/checkpoints/step_1.pt"))
    assert line.endswith("continue with: proxima resume '/tmp/a $(b)'"), line


# ------------------------------------------------------------------------------------ 3. env modules beside checkpoints
@pytest.fixture(scope="module")
def trained_project(tmp_path_factory):
    """The project below, trained once for the module (each test gets a copy)."""
    base = tmp_path_factory.mktemp("out26proj")
    proj = base / "proj"
    proj.mkdir()
    (proj / f"{MODULE}.py").write_text(TINY_ENV)
    trained = base / "trained"
    code = _proxima("train", ENV, *TINY_RUN, "--total-timesteps", "64", "--run-dir", trained, "--quiet", cwd=proj)
    assert code.returncode == 0, code.stderr
    newest = ckpt.list_checkpoints(trained)[-1]
    shutil.copy(newest, proj / "policy.pt")
    (proj / "checkpoints").mkdir()
    shutil.copy(newest, proj / "checkpoints" / "policy.pt")
    return proj, trained


@pytest.fixture
def project(trained_project, tmp_path):
    """A user's project: their env module, a loose checkpoint of a run of it, and a checkpoints/ folder;
    and the run directory that trained it (copies of the module's, which the tests may change)."""
    proj, trained = tmp_path / "proj", tmp_path / "trained"
    shutil.copytree(trained_project[0], proj)
    shutil.copytree(trained_project[1], trained)
    return proj, trained


@pytest.mark.parametrize("checkpoint", ["policy.pt", "checkpoints/policy.pt"])
def test_a_checkpoints_folder_is_named_as_skipped_and_pythonpath_lets_the_users_module_in(project, checkpoint):
    proj, _ = project
    result = _proxima("eval", checkpoint, "--env", ENV, "--episodes", "1", cwd=proj)
    line = error_line(result.returncode, result.stderr, f"cannot import module '{MODULE}'")
    assert f"not imported from {proj.resolve()}: it is" in line and "run directories are never searched" in line, line
    assert f"PYTHONPATH={proj.resolve()}" in line, line
    result = _proxima("eval", checkpoint, "--env", ENV, "--episodes", "1", "--json", cwd=proj, pythonpath=proj)
    assert result.returncode == 0, result.stderr


def test_a_run_directorys_module_is_skipped_even_without_its_run_files(project):
    """Whoever made the folder decides what it holds: without meta.json it is still the run being read."""
    _, trained = project
    shutil.copy(project[0] / f"{MODULE}.py", trained)
    (trained / "meta.json").unlink()
    result = _proxima("eval", ".", "--env", ENV, "--episodes", "1", cwd=trained)
    line = error_line(result.returncode, result.stderr, f"cannot import module '{MODULE}'")
    assert f"not imported from {trained.resolve()}: it is the folder of the run or checkpoint being read" in line, line
    # "." names no folder (a profile's PYTHONPATH=. holds in every downloaded run too): still skipped
    result = _proxima("eval", ".", "--env", ENV, "--episodes", "1", cwd=trained, pythonpath=".")
    error_line(result.returncode, result.stderr, f"not imported from {trained.resolve()}")
    result = _proxima("eval", ".", "--env", ENV, "--episodes", "1", "--json", cwd=trained, pythonpath=trained)
    assert result.returncode == 0, result.stderr
