"""Run-file reading defects a review reproduced (docs/reliability.md, "Links stay inside" and "Run
files are data"):

* a link planted in a run (``config.yaml -> ../hosts.yml``) was read through: ``proxima report``
  copied the YAML's token into report.md; a link that stays inside the run (``meta.json ->
  meta.orig.json``) was refused by resume as "not readable (OSError)";
* JSON run files nested thousands deep (eval.json, meta.json, population.json, the lock) and a
  checkpoint or config whose env_kwargs nests thousands of lists ended in RecursionError tracebacks;
* ``proxima train --config RUN/config.yaml --resume auto`` waited forever on a FIFO at config.yaml."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import warm_python
from cli_helpers import edit_checkpoint, error_line, run_main

from proxima import cli, rundir
from proxima.config import ConfigError, coerce

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX links and FIFOs")

SMALL = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", "128",
         "--checkpoint-every", "1", "--eval-episodes", "0", "--no-progress", "--quiet"]
TOKEN = "gho_s3cr3tT0k3nFromHostsYml"
DEEP_JSON = "[" * 200_000
MAX_NESTING = 32  # config.MAX_NESTING: how deeply a field's value may nest
JSON_MAX_DEPTH = 64  # rundir.JSON_MAX_DEPTH: how deeply a run's JSON file may nest


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("finished")
    assert cli.main(["train", "CartPole-v1", "--run-dir", str(root / "run"), *SMALL]) == 0
    return root / "run"


@pytest.fixture(scope="module")
def population(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("population")
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(root / "pop"), *SMALL]) == 0
    return root / "pop"


def copy_run(src: Path, tmp_path: Path, name: str = "run") -> Path:
    dest = tmp_path / name
    shutil.copytree(src, dest, symlinks=True)
    return dest


def nested(depth: int):
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


# ------------------------------------------------------------------------------------ 1. links out of the run
def test_report_refuses_a_config_yaml_linked_out_of_the_run_and_copies_nothing(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path)
    (tmp_path / "hosts.yml").write_text(f"github.com:\n  oauth_token: {TOKEN}\n")
    (run / "config.yaml").unlink()
    (run / "config.yaml").symlink_to("../hosts.yml")
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    error_line(code, err, f"{run / 'config.yaml'}: is a symbolic link to {tmp_path.resolve() / 'hosts.yml'}",
               f"outside the run directory {run}", "remove the link")
    assert TOKEN not in err
    assert not (run / "report.md").exists()


def test_run_file_readers_refuse_links_out_and_read_links_that_stay_inside(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "creds.json").write_text(json.dumps({"kind": "ppo", "token": TOKEN}))
    (run / "meta.orig.json").write_text(json.dumps({"kind": "ppo"}))
    (run / "meta.json").symlink_to("meta.orig.json")
    (run / "eval.json").symlink_to("../creds.json")
    assert json.loads(rundir.read_run_text(run / "meta.json")) == {"kind": "ppo"}
    assert rundir.recorded_kind(run / "meta.json", strict=True) == "ppo"
    with pytest.raises(rundir.RunFileError, match=r"eval\.json: is a symbolic link to .*creds\.json, outside the run directory"):
        rundir.read_run_bytes(run / "eval.json")
    (run / "meta.json").unlink()
    (run / "meta.json").symlink_to("../creds.json")
    with pytest.raises(rundir.RunDirError, match=r"meta\.json: is a symbolic link to .*creds\.json, outside the run directory"):
        rundir.recorded_kind(run / "meta.json", strict=True)


def test_resume_reads_a_meta_json_link_that_stays_inside_the_run(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path)
    (run / "meta.json").rename(run / "meta.orig.json")
    (run / "meta.json").symlink_to("meta.orig.json")
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "192", "--quiet"], capsys)
    assert code == 0, err
    assert "not readable" not in err, err


@pytest.mark.parametrize("command", [["report", "--episodes", "0"], ["plot"], ["eval", "--episodes", "1"]])
def test_a_population_member_folder_linked_out_is_refused_by_eval_plot_and_report(population, finished_run, tmp_path, capsys,
                                                                                   command):
    pop = copy_run(population, tmp_path, "pop")
    outside = copy_run(finished_run, tmp_path, "outside")
    member = json.loads((pop / "population.json").read_text())["member_dirs"][1]["dir"]
    shutil.rmtree(pop / member)
    (pop / member).symlink_to(outside, target_is_directory=True)
    code, _, err = run_main([command[0], str(pop), *command[1:]], capsys)
    error_line(code, err, f"{pop / member}: is a symbolic link to {outside.resolve()}, outside the population directory")


# ------------------------------------------------------------------------------------ 2. nesting past Python's stack
@pytest.mark.parametrize("name, command", [("eval.json", "report"), ("meta.json", "report")])
def test_a_json_run_file_nested_thousands_deep_is_one_line(finished_run, tmp_path, capsys, name, command):
    run = copy_run(finished_run, tmp_path)
    (run / name).write_text(DEEP_JSON)
    argv = [command, str(run)] + (["--episodes", "0"] if command == "report" else ["--total-timesteps", "192", "--quiet"])
    code, _, err = run_main(argv, capsys)
    error_line(code, err, str(run / name), "damaged or edited")


def test_a_meta_json_nested_thousands_deep_is_left_and_the_resume_goes_on(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path)
    (run / "meta.json").write_text(DEEP_JSON)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "192", "--quiet"], capsys)
    assert code == 0, err
    assert "meta.json: not readable JSON (RecursionError); the run directory's meta.json was damaged or edited; this " \
           "resume is not recorded in it" in err
    assert (run / "meta.json").read_text() == DEEP_JSON


@pytest.mark.parametrize("command", [["report", "--episodes", "0"], ["plot"], ["eval", "--episodes", "1"]])
def test_a_population_json_nested_thousands_deep_is_one_line(population, tmp_path, capsys, command):
    pop = copy_run(population, tmp_path, "pop")
    (pop / "population.json").write_text(DEEP_JSON)
    code, _, err = run_main([command[0], str(pop), *command[1:]], capsys)
    error_line(code, err, f"{pop / 'population.json'}: nests arrays or objects more than {JSON_MAX_DEPTH} deep",
               "damaged or edited")


def test_a_lock_nested_thousands_deep_is_an_unreadable_lock(finished_run, tmp_path, capsys):
    run = copy_run(finished_run, tmp_path)
    (run / rundir.LOCK_NAME).write_text(DEEP_JSON[:20_000])
    assert rundir.read_lock(run) == {}
    code, _, err = run_main(["report", str(run), "--episodes", "0"], capsys)
    assert code == 0, err


def _with_deep_stack(fn):
    """Run ``fn`` where pickling a value nested thousands deep does not overflow the stack."""
    limit, result = sys.getrecursionlimit(), {}
    size = threading.stack_size(256 << 20)
    try:
        sys.setrecursionlimit(50_000)
        thread = threading.Thread(target=lambda: result.setdefault("value", fn()))
        thread.start()
        thread.join()
    finally:
        sys.setrecursionlimit(limit)
        threading.stack_size(size)
    return result["value"]


def _deep_env_kwargs_run(finished_run, tmp_path):
    run = copy_run(finished_run, tmp_path)

    def edit(state):
        state["config"]["env_kwargs"] = {"a": nested(5_000)}
    return run, _with_deep_stack(lambda: edit_checkpoint(run, edit))


DEEP_KWARGS = (f"config.env_kwargs is {{'a': [[[[[[...]]]]]]}}, not a mapping nested at most {MAX_NESTING} levels deep, "
               "of at most 1,000,000 values")


def test_eval_of_a_checkpoint_whose_env_kwargs_nests_thousands_deep_is_one_line(finished_run, tmp_path, capsys):
    """Refused where the checkpoint is checked, before json.dumps recurses on it."""
    run, path = _deep_env_kwargs_run(finished_run, tmp_path)
    code, _, err = run_main(["eval", str(run), "--episodes", "1"], capsys)
    error_line(code, err, f"{path}: {DEEP_KWARGS}")


def test_resume_of_a_checkpoint_whose_env_kwargs_nests_thousands_deep_falls_back(finished_run, tmp_path, capsys):
    """A run directory's newest checkpoint that fails its checks is set aside, the one before used."""
    run, path = _deep_env_kwargs_run(finished_run, tmp_path)
    code, _, err = run_main(["resume", str(run), "--total-timesteps", "192", "--quiet"], capsys)
    assert code == 0 and "Traceback" not in err, err
    assert f"{path} is unusable ({DEEP_KWARGS}); resuming from" in err, err
    assert Path(f"{path}.corrupt").is_file()


def test_env_kwargs_nested_past_the_limit_is_refused_naming_the_field_and_the_file(tmp_path, capsys):
    with pytest.raises(ConfigError, match=rf"^c\.yaml: field 'env_kwargs' nests lists or mappings more than {MAX_NESTING} levels"):
        coerce("env_kwargs", {"a": nested(MAX_NESTING + 1)}, "c.yaml")
    assert coerce("env_kwargs", {"a": nested(MAX_NESTING - 1)}, "c.yaml") == {"a": nested(MAX_NESTING - 1)}
    config = tmp_path / "c.yaml"
    config.write_text("env_id: CartPole-v1\nenv_kwargs: '{\"a\": " + "[" * 20_000 + "'\n")
    code, _, err = run_main(["train", "--config", str(config), "--run-dir", str(tmp_path / "r")], capsys)
    error_line(code, err, f"{config}: field 'env_kwargs' nests lists or mappings more than {MAX_NESTING} levels deep")
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------------ 3. --config through the run-file reader
def test_train_config_of_a_fifo_with_resume_auto_is_one_line_not_a_hang(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "config.yaml")
    proc = warm_python.run([sys.executable, "-m", "proxima", "train", "--config", str(run / "config.yaml"), "--resume", "auto"],
                           capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (f"proxima train: error: --config {run / 'config.yaml'}: is not a regular file (a FIFO, "
                                   "device or socket); give a YAML file of field: value lines"), proc.stderr


def test_train_config_over_the_size_cap_is_one_line(tmp_path, capsys):
    config = tmp_path / "big.yaml"
    with open(config, "wb") as f:
        f.truncate(rundir.TEXT_MAX_BYTES + 1)  # sparse: a file claiming more than any config holds
    code, _, err = run_main(["train", "--config", str(config)], capsys)
    error_line(code, err, f"--config {config}: {rundir.TEXT_MAX_BYTES + 1:,} bytes, more than the {rundir.TEXT_MAX_BYTES:,} read "
               "from it")


def test_train_config_follows_a_link_the_user_named(tmp_path, capsys):
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "c.yaml").write_text("env_id: CartPole-v1\nnum_envs: 0\n")
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "c.yaml").symlink_to("../shared/c.yaml")
    code, _, err = run_main(["train", "--config", str(tmp_path / "proj" / "c.yaml"), "--run-dir", str(tmp_path / "r")], capsys)
    error_line(code, err, "num_envs")  # read through the link: its value is the one refused


def test_train_config_reads_the_users_own_stream_process_substitution_and_stdin(tmp_path):
    """A pipe the user's shell made (`--config <(...)`, /dev/stdin) is read; a FIFO at a file's name is not (above)."""
    yaml_text = "env_id: CartPole-v1\nnum_envs: 3\n"
    proxima = str(Path(sys.executable).parent / "proxima")
    (tmp_path / "c.yaml").write_text(yaml_text)
    sub = subprocess.run(["bash", "-c", f"{proxima} train --config <(cat c.yaml) --dry-run"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert sub.returncode == 0 and "num_envs: 3" in sub.stdout, sub.stderr
    piped = warm_python.run([sys.executable, proxima, "train", "--config", "/dev/stdin", "--dry-run"], input=yaml_text,
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert piped.returncode == 0 and "num_envs: 3" in piped.stdout, piped.stderr


def test_a_large_but_flat_env_kwargs_from_a_file_is_accepted(tmp_path):
    """The value count guards pickled checkpoints (shared lists); text shares nothing: a 1000 x 1000
    grid nests 3 deep and is a legitimate keyword argument."""
    grid = [[0] * 1000 for _ in range(1000)]
    assert coerce("env_kwargs", {"grid": grid}, source=str(tmp_path / "c.yaml")) == {"grid": grid}
