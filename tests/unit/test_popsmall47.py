"""Four small population and report items: a config.yaml too large to parse is refused before the report parses
it; a population trained with the default --backend auto pools with one given the backend auto built; a
population trained into a directory holding one of other seeds is told how to add them (train beside it, then
pool); train_population's sweep refusals name the sweep= entry the script wrote, not a --sweep it never typed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import proxima
import proxima.config
from proxima import ConfigError, PPOConfig, cli, report
from proxima.population import PER_MEMBER_FIELDS
from proxima.rundir import RunDirError
from tests.cli_helpers import TINY_POP, error_line, run_main
from tests.unit.test_report_pool46 import ADDED, FIRST, _population

TAIL = "a run writes there; the run directory was damaged or edited"
#: report.CONFIG_MAX_BYTES: a run's config.yaml is a few kB, and PyYAML parses about a megabyte in 10 s
MIB = 1 << 20


# --- (a) a config.yaml over 1 MiB is refused before it is parsed --------------------------
# parsed: tests/conftest.py's fixture


def _padded(path: Path, size: int) -> Path:
    """``path``'s config.yaml grown to exactly ``size`` bytes by a trailing YAML comment (its fields unchanged)."""
    text = path.read_text()
    path.write_text(text + "#" * (size - len(text.encode()) - 1) + "\n")
    assert path.stat().st_size == size
    return path


def test_a_members_config_over_one_mib_is_refused_naming_it_and_its_size_before_any_parse(tmp_path, capsys, parsed):
    a = _population(tmp_path / "A", FIRST)
    big = _padded(a / "m002-seed3" / "config.yaml", MIB + 1)
    code, out, err = run_main(["report", str(a)], capsys)
    assert error_line(code, err) == (f"proxima report: error: {big}: 1,048,577 bytes, more than the 1,048,576 {TAIL}")
    assert max(parsed, default=0) < 10_000  # the members' small configs at most: the large one never
    assert not (a / "report.md").exists()


def test_a_single_runs_and_a_pools_large_config_are_refused_as_well(tmp_path, capsys, parsed):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    big = _padded(a2 / "m000-seed6" / "config.yaml", MIB + 100)
    line = f"proxima report: error: {big}: 1,048,676 bytes, more than the 1,048,576 {TAIL}"
    code, _, err = run_main(["report", f"{a}+{a2}", "--out", str(tmp_path / "pooled.md")], capsys)
    assert error_line(code, err) == line
    code, _, err = run_main(["report", str(a2 / "m000-seed6")], capsys)  # the member reported as the run it is
    assert error_line(code, err) == line
    assert max(parsed, default=0) < 10_000


def test_a_config_at_the_cap_is_read_and_one_byte_more_is_not(tmp_path, capsys, monkeypatch):
    a = _population(tmp_path / "A", FIRST)
    path = a / "m000-seed1" / "config.yaml"
    assert report.CONFIG_MAX_BYTES == MIB
    monkeypatch.setattr(report, "CONFIG_MAX_BYTES", 4096)  # the comparison, not PyYAML's 10 s a megabyte
    _padded(path, 4096)
    assert report._read_yaml(path)["seed"] == 1
    code, _, err = run_main(["report", str(a)], capsys)
    assert code == 0, err
    _padded(path, 4097)
    with pytest.raises(report.ReportError, match=rf"^{path}: 4,097 bytes, more than the 4,096 {TAIL}$"):
        report._read_yaml(path)  # a file grown since the check is refused by its reader too
    code, _, err = run_main(["report", str(a)], capsys)
    assert error_line(code, err) == f"proxima report: error: {path}: 4,097 bytes, more than the 4,096 {TAIL}"


# --- (b) backend auto pools with the backend it built -------------------------------------------------------
def _built(run: Path, backend: str) -> Path:
    """Each member of the population ``run`` records in its meta.json that its env was built by ``backend``."""
    for member in run.glob("m*"):
        (member / "meta.json").write_text(json.dumps({"kind": "ppo", "env_backend": backend}))
    return run


def test_a_population_of_backend_auto_pools_with_one_given_the_backend_auto_built(tmp_path, capsys):
    a = _built(_population(tmp_path / "A", FIRST, backend="auto"), "native")
    a2 = _built(_population(tmp_path / "A2", ADDED, backend="native"), "native")
    js = tmp_path / "pooled.json"
    code, _, err = run_main(["report", f"{a}+{a2}", "--out", str(tmp_path / "pooled.md"), "--json", str(js)], capsys)
    assert code == 0, err
    (row,) = json.loads(js.read_text())["settings"]
    assert sorted(m["seed"] for m in row["member_dirs"]) == list(range(1, 11))


def test_a_population_whose_auto_built_another_backend_is_refused_naming_the_built_one(tmp_path, capsys):
    a = _built(_population(tmp_path / "A", FIRST, backend="auto"), "gymnasium")
    a2 = _built(_population(tmp_path / "A2", ADDED, backend="native"), "native")
    code, _, err = run_main(["report", f"{a}+{a2}", "--out", str(tmp_path / "pooled.md")], capsys)
    assert error_line(code, err).startswith("proxima report: error: backend: gymnasium in A, native in A2; a pool")


# --- (c) a population into a directory holding one of other seeds -------------------------------------------
ARGS = ["--total-timesteps", "32", "--eval-episodes", "0", "--quiet", *TINY_POP]


def _config(**fields) -> PPOConfig:
    """ARGS as PPOConfig fields."""
    return PPOConfig(**{"env_id": "CartPole-v1", "total_timesteps": 32, "eval_episodes": 0, "num_envs": 2, "num_steps": 16,
                        "num_minibatches": 2, "update_epochs": 1, "threads": 1, "progress": False, **fields})


@pytest.fixture(scope="module")
def pop(tmp_path_factory) -> Path:
    """A finished population of seeds 1 and 2 (one 32-step iteration each) trained by the command line."""
    run = tmp_path_factory.mktemp("popsmall47") / "P"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(run), *ARGS]) == 0
    return run


def test_training_other_seeds_into_a_population_names_the_directory_beside_it_and_the_pooling_report(
        pop, tmp_path, capsys):
    line = (f"proxima train: error: {pop} is not empty (checkpoints, m000-seed1, m001-seed2, population.json...): it "
            "holds a population of seeds 1,2, which --resume auto continues with those seeds only; to add seed 3, train "
            f"it into a new directory (--seeds 3 --run-dir {pop}-seeds3) and pool the two: `proxima report "
            f"{pop}+{pop}-seeds3 --out {pop}-seeds1-3.md` (docs/populations.md, More seeds); or start over with "
            "--overwrite (the old directory is moved aside)")
    for dry in ([], ["--dry-run"]):  # the dry run refuses what the run refuses, in its words
        code, _, err = run_main(["train", "CartPole-v1", "--seeds", "3", "--run-dir", str(pop), *ARGS, *dry], capsys)
        assert error_line(code, err) == line
    assert not Path(f"{pop}-seeds3").exists() and sorted(p.name for p in pop.glob("m*")) == ["m000-seed1", "m001-seed2"]
    # the advice works: the seed trained beside it, then the two reported as one population of seeds 1-3
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "3", "--run-dir", f"{pop}-seeds3", *ARGS], capsys)
    assert code == 0, err
    js = tmp_path / "pooled.json"
    code, _, err = run_main(["report", f"{pop}+{pop}-seeds3", "--out", f"{pop}-seeds1-3.md", "--json", str(js)], capsys)
    assert code == 0, err
    (row,) = json.loads(js.read_text())["settings"]
    assert sorted(m["seed"] for m in row["member_dirs"]) == [1, 2, 3]


def test_seeds_it_holds_already_another_sweep_or_the_same_members_get_their_own_advice(pop, capsys):
    def line(*argv) -> str:
        code, _, err = run_main(["train", "CartPole-v1", *argv, "--run-dir", str(pop), *ARGS, "--dry-run"], capsys)
        return error_line(code, err).split("...): ", 1)[1]

    # 2-3: only seed 3 is new, so only seed 3 trains beside it
    assert "to add seed 3, train it into a new directory (--seeds 3 --run-dir" in line("--seeds", "2-3")
    assert line("--seeds", "2") == (f"it holds a population of seeds 1,2, 2 among them (`proxima report {pop}` reports "
                                    "it); to train them again, start over with --overwrite (the old directory is moved "
                                    "aside)")
    assert line("--seeds", "1-2", "--sweep", "lr=0.001,0.002") == (
        "it holds a population of another setting (no sweep), which a resume continues as it is; choose another "
        f"--run-dir for this one (`proxima report {pop} NEW_DIR --out FILE.md` then compares the two), or start over "
        "with --overwrite (the old directory is moved aside)")
    # its own members: --resume auto continues them, and the line says so as before
    assert line("--seeds", "1-2").startswith("it holds another run; continue it with --resume auto")


def test_from_python_the_line_names_train_populations_arguments(pop):
    with pytest.raises(RunDirError) as e:
        proxima.train_population(_config(), seeds=[3, 4], run_dir=pop, quiet=True)
    assert str(e.value) == (
        f"{pop} is not empty (checkpoints, m000-seed1, m001-seed2, population.json...): it holds a population of seeds "
        "[1, 2], which resume='auto' continues with those seeds only; to add seeds=[3, 4], train them into a new "
        f"directory (train_population(..., seeds=[3, 4], run_dir={str(pop) + '-seeds3,4'!r})) and pool the two: "
        f"`proxima report {pop}+{pop}-seeds3,4 --out {pop}-seeds1-4.md` (docs/populations.md, More seeds); or start "
        "over with train_population(..., overwrite=True) (the old directory is moved aside)")


# --- (d) train_population's sweep refusals name the sweep entry ---------------------------------------------
@pytest.mark.parametrize("sweep, line", [
    ({"lr": [1e-3, 1e-3]}, "sweep={'lr': [0.001, 0.001]}: a value is repeated"),
    ({"norm_adv": [True, True]}, "sweep={'norm_adv': [True, True]}: a value is repeated"),
    ({"lr": [1e-3, 1.0000001e-3]}, "sweep={'lr': [0.001, 0.0010000001]}: 0.001 and 0.0010000001 print the same "
                                   "(lr=0.001); give values that differ in 6 significant digits"),
    ({"gamma": [0.9, 2.0]}, "sweep={'gamma': [0.9, 2.0]}: value 2.0: must be in (0, 1]"),
    ({"lr": [float("nan")]}, "sweep={'lr': [nan]}: value nan: must be a finite number"),
    ({"learning_rate": [1e-3, 1e-3]}, "sweep={'learning_rate': [0.001, 0.001]}: a value is repeated"),
    ({"lr": [1e-3], "learning_rate": [2e-3]}, "sweep: 'lr' and 'learning_rate' both name lr; give all its values "
                                              "under one key, sweep={'lr': [...]}"),
    ({"seed": [1, 2]}, "sweep={'seed': [1, 2]}: give seeds with seeds= (e.g. seeds=range(1, 9)), not in the sweep"),
    ({"bogus": [1]}, "sweep={'bogus': [1]}: not a config field; sweepable: " + ", ".join(PER_MEMBER_FIELDS)),
    ({"num_envs": [2, 4]}, "sweep={'num_envs': [2, 4]}: changes the shapes or the env of the batched program; "
                           "sweepable: " + ", ".join(PER_MEMBER_FIELDS)
                           + "; run one population per value of num_envs"),
    ({"lr": [1e-3] * 10}, "sweep={'lr': [0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, ..., 0.001]}: a value is "
                          "repeated"),
])
def test_a_refused_sweep_from_python_names_the_sweep_entry_the_script_wrote(tmp_path, sweep, line):
    with pytest.raises(ConfigError) as e:
        proxima.train_population(_config(), seeds=[1], sweep=sweep,
                                 run_dir=tmp_path / "pop", quiet=True)
    assert str(e.value) == line
    assert not (tmp_path / "pop").exists()


def test_a_swept_value_a_shared_field_refuses_names_the_field_not_its_flag(tmp_path):
    with pytest.raises(ConfigError) as e:
        proxima.train_population(_config(clip_vloss=False), seeds=[1],
                                 sweep={"vf_clip_coef": [1.0, 2.0]}, run_dir=tmp_path / "pop", quiet=True)
    assert str(e.value) == ("sweep={'vf_clip_coef': [1.0, 2.0]}: value 1.0: sets the value clip range, but "
                            "clip_vloss=False turns value clipping off; give only one of them")


@pytest.mark.parametrize("item, line", [("lr=1e-3,1e-3", "--sweep lr: a value is repeated"),
                                        ("gamma=0.9,2", "--sweep gamma: value 2.0: must be in (0, 1]")])
def test_the_command_line_keeps_its_sweep_words(tmp_path, capsys, item, line):
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1", "--sweep", item, "--run-dir", str(tmp_path / "p"),
                             *ARGS, "--dry-run"], capsys)
    assert error_line(code, err) == f"proxima train: error: {line}"

