"""Edges of `proxima train`'s config: --config FILE and --preset on a resume, --dry-run of a resume,
values a YAML file or a typed flag gets wrong, a run's own config.yaml from elsewhere, and the
Atari family's preset. Each error is one line naming the field, file or flag to change (exit 2)."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from cli_helpers import edit_checkpoint, error_line, run_main, snapshot

from proxima import cli, presets
from proxima.config import RESUME_SAFE, ConfigError, PPOConfig, coerce

#: one iteration of 4 envs x 16 steps; the run below trains two
SMALL = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--eval-episodes", "0",
         "--no-progress", "--threads", "1"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A complete 2-iteration CartPole run trained with --lr 0.001 (not a preset's value)."""
    run_dir = tmp_path_factory.mktemp("edges") / "run"
    assert cli.main(["train", "CartPole-v1", *SMALL, "--total-timesteps", "128", "--lr", "0.001", "--run-dir", str(run_dir),
                     "--quiet"]) == 0
    return run_dir


@pytest.fixture
def run_copy(run, tmp_path):
    """A copy of ``run`` for a test that resumes it (and so writes to it)."""
    return shutil.copytree(run, tmp_path / "copy")


def write(path, text: str):
    path.write_text(text)
    return path


# ------------------------------------------------------------------ 1. --config and --preset on a resume
def test_resume_refuses_a_config_file_value_it_cannot_change_and_names_the_file(run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "ext.yaml", "lr: 0.01\n")
    code, _, err = run_main(["train", "--resume", str(run), "--config", "ext.yaml", "--quiet"], capsys)
    line = error_line(code, err, "proxima train: error: --config ext.yaml: lr 0.01: cannot change when resuming "
                                 "(the run was trained with 0.001)")
    assert "--lr" not in line.split("safe to change")[0]  # never a flag the user did not type


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "resume"])
def test_resume_refuses_a_nan_from_the_config_file_naming_the_file(dry_run, run, tmp_path, monkeypatch, capsys):
    # NaN != NaN: the file's .nan must still be seen as the file's, not silently dropped (exit 0)
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "nan.yaml", "checkpoint_minutes: .nan\n")
    before = snapshot(run)
    code, out, err = run_main(["train", "--resume", str(run), "--config", "nan.yaml", "--total-timesteps", "192", "--quiet"]
                              + (["--dry-run"] if dry_run else []), capsys)
    error_line(code, err, "proxima train: error: --config nan.yaml: checkpoint_minutes nan: must be 0 (off) or a positive number of minutes")
    assert out == "" and snapshot(run) == before


def test_resume_refuses_a_typed_presets_value_it_cannot_change_and_names_the_preset(run, capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--resume", str(run), "--preset", "fast", "--quiet"], capsys)
    # (its backend native is what auto chose for the run: not a change, so the first one is num_envs)
    error_line(code, err, "proxima train: error: --preset fast: num_envs 96: cannot change when resuming")


def test_a_preset_on_a_resume_needs_the_env_id_it_belongs_to(run, capsys):
    # without ENV_ID the preset would be resolved for the default env, whatever env the run trains
    before = snapshot(run)
    code, _, err = run_main(["train", "--resume", str(run), "--preset", "fast", "--quiet"], capsys)
    error_line(code, err, "proxima train: error: --preset fast with --resume: give the run's ENV_ID too")
    code, _, err = run_main(["train", "--resume", "auto", "--run-dir", str(run), "--preset", "fast", "--dry-run"], capsys)
    error_line(code, err, "--preset fast with --resume: give the run's ENV_ID too")
    assert snapshot(run) == before


def test_a_preset_with_resume_auto_and_nothing_to_resume_starts_the_default_env(tmp_path, capsys):
    # a restartable job's first start: no checkpoint yet, so a new run, as `train --preset fast` alone
    code, out, err = run_main(["train", "--resume", "auto", "--run-dir", str(tmp_path / "new"), "--preset", "fast",
                               "--dry-run"], capsys)
    assert code == 0, err
    from proxima import presets

    fast = presets.presets_for("CartPole-v1")["fast"]["config"]["num_envs"]
    assert yaml.safe_load(out)["env_id"] == "CartPole-v1" and yaml.safe_load(out)["num_envs"] == fast != 4


def test_resume_refuses_another_env_id_from_the_config_file(run, tmp_path, capsys):
    config = write(tmp_path / "env.yaml", "env_id: Acrobot-v1\n")
    code, _, err = run_main(["train", "--resume", str(run), "--config", str(config), "--quiet"], capsys)
    error_line(code, err, f"--config {config}: env_id 'Acrobot-v1': cannot change when resuming (the run was trained with 'CartPole-v1')")


def test_a_typed_flag_wins_over_the_config_file_on_resume(run, tmp_path, capsys):
    config = write(tmp_path / "ext.yaml", "lr: 0.01\neval_episodes: 3\n")
    code, out, err = run_main(["train", "--resume", str(run), "--config", str(config), "--lr", "0.001", "--dry-run"], capsys)
    assert code == 0, err
    resumed = yaml.safe_load(out)
    assert (resumed["lr"], resumed["eval_episodes"]) == (0.001, 3)  # eval_episodes: safe to change, from the file


def test_the_envs_default_preset_is_not_applied_to_a_resume(run, capsys):
    # CartPole-v1's default preset says lr 2.5e-4 and 128 steps: the user asked for none of it
    code, out, err = run_main(["train", "CartPole-v1", "--resume", str(run), "--dry-run"], capsys)
    assert code == 0, err
    assert (yaml.safe_load(out)["lr"], yaml.safe_load(out)["num_steps"]) == (0.001, 16)


def test_a_runs_own_config_yaml_resumes_it_from_another_directory(run_copy, tmp_path, monkeypatch, capsys):
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    code, _, err = run_main(["train", "--resume", str(run_copy), "--config", str(run_copy / "config.yaml"),
                             "--total-timesteps", "192", "--quiet"], capsys)
    assert code == 0, err
    assert [p.name for p in sorted((run_copy / "checkpoints").iterdir())][-1] == "step_000000000192.pt"
    # and with nothing typed: the run's own total asks nothing (a note that the run is complete, not an error)
    code, _, err = run_main(["train", "--resume", "auto", "--config", str(run_copy / "config.yaml"), "--quiet"], capsys)
    assert code == 0 and "the run is complete (192 steps)" in err, err


@pytest.fixture(scope="module")
def population(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("edges_pop") / "pop"
    assert cli.main(["train", "CartPole-v1", "--seeds", "1-2", *SMALL, "--total-timesteps", "128", "--lr", "0.001",
                     "--run-dir", str(run_dir), "--quiet"]) == 0
    return run_dir


def test_a_populations_resume_refuses_a_config_file_value_naming_the_file(population, tmp_path, capsys):
    config = write(tmp_path / "ext.yaml", "lr: 0.01\n")
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--resume", str(population), "--config", str(config),
                             "--quiet"], capsys)
    error_line(code, err, f"--config {config}: lr 0.01: cannot change when resuming (the run was trained with 0.001)")


def test_a_populations_resume_dry_run_says_what_it_would_continue_and_writes_nothing(population, capsys):
    before = snapshot(population)
    code, out, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--resume", "auto", "--run-dir", str(population),
                               "--total-timesteps", "256", "--dry-run"], capsys)
    assert code == 0, err
    said = json.loads(out.strip().splitlines()[-1])
    assert (said["members"], said["seeds"], said["global_step"], said["total_timesteps"]) == (2, [1, 2], 128, 256)
    assert said["resume"].endswith("step_000000000128.pt")
    assert snapshot(population) == before


def test_a_populations_resume_dry_run_refuses_what_the_resume_refuses(population, tmp_path, capsys):
    before = snapshot(population)
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--resume", str(population), "--lr", "0.01",
                             "--dry-run"], capsys)
    error_line(code, err, "--lr 0.01: cannot change when resuming (the run was trained with 0.001)")
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-3", "--resume", str(population), "--dry-run"], capsys)
    error_line(code, err, "--seeds: ", "trains seeds 1,2, not 1-3")
    assert snapshot(population) == before


def test_a_populations_resume_dry_run_names_a_damaged_newest_checkpoint_and_renames_nothing(population, tmp_path, capsys):
    copy = shutil.copytree(population, tmp_path / "pop")
    newest = sorted((copy / "checkpoints").glob("step_*.pt"))[-1]
    (copy / "checkpoints" / "step_000000000192.pt").write_bytes(newest.read_bytes()[:100])  # a newer one, cut short
    before = snapshot(copy)
    code, out, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--resume", str(copy), "--dry-run"], capsys)
    assert code == 0, err
    assert "step_000000000192.pt is unusable" in err and json.loads(out.strip().splitlines()[-1])["global_step"] == 128
    assert snapshot(copy) == before


def test_a_swept_population_with_a_preset_resumes_with_the_command_that_started_it(tmp_path, capsys):
    # the sweep sets lr per member over --preset fast's lr: the same command, re-run, continues the run
    argv = ["train", "CartPole-v1", "--preset", "fast", "--seeds", "1", "--sweep", "lr=0.001,0.002", *SMALL,
            "--total-timesteps", "128", "--run-dir", str(tmp_path / "pop"), "--resume", "auto", "--quiet"]
    assert run_main(argv, capsys)[0] == 0
    code, _, err = run_main(argv, capsys)
    assert code == 0 and "the run is complete" in err, err


# ------------------------------------------------------------------ 2. --encoder auto on a resume
def test_a_rerun_of_the_same_command_with_encoder_auto_resumes(run_copy, capsys):
    code, _, err = run_main(["train", "CartPole-v1", "--encoder", "auto", "--resume", "auto", "--run-dir", str(run_copy),
                             "--quiet"], capsys)
    assert code == 0, err
    assert yaml.safe_load((run_copy / "config.yaml").read_text())["encoder"] == "mlp"  # the recorded one kept


# ------------------------------------------------------------------ 3. --cudagraphs is an execution switch
def test_a_graphed_run_resumes_on_a_cpu_without_cudagraphs(run_copy, capsys):
    assert "cudagraphs" in RESUME_SAFE
    edit_checkpoint(run_copy, lambda state: state["config"].update(cudagraphs=True))  # as a --cudagraphs run records it
    code, _, err = run_main(["resume", str(run_copy), "--device", "cpu", "--no-cudagraphs", "--total-timesteps", "192",
                             "--quiet"], capsys)
    assert code == 0, err
    assert yaml.safe_load((run_copy / "config.yaml").read_text())["cudagraphs"] is False


def test_a_graphed_run_resumed_on_a_cpu_is_told_to_add_no_cudagraphs(run_copy, capsys):
    edit_checkpoint(run_copy, lambda state: state["config"].update(cudagraphs=True, device="cuda"))
    code, _, err = run_main(["resume", str(run_copy), "--device", "cpu", "--quiet"], capsys)
    error_line(code, err, "proxima resume: error: --device cpu: the run was trained with --cudagraphs, which needs a CUDA "
                          "device; add --no-cudagraphs to resume it on the CPU")


# ------------------------------------------------------------------ 4. env_kwargs that JSON cannot hold
@pytest.mark.parametrize("value, kind", [("2020-01-01", "date"), ("!!binary aGVsbG8=", "bytes"), ("!!set {a, b}", "set")])
def test_an_env_kwargs_value_json_cannot_hold_is_refused_naming_the_key(value, kind, tmp_path, capsys):
    config = write(tmp_path / "kw.yaml", f"env_kwargs: {{start: {value}}}\n")
    code, _, err = run_main(["train", "--config", str(config), "--dry-run"], capsys)
    error_line(code, err, f"{config}: field 'env_kwargs': key 'start' holds {kind} ", "quote the value")


def test_coerce_refuses_env_kwargs_json_cannot_hold():
    import datetime

    with pytest.raises(ConfigError, match=r"^x.yaml: field 'env_kwargs': key 'day' holds date datetime.date\(2020, 1, 1\), "
                                          r"which JSON cannot hold; quote the value in the YAML file to pass a string \(day: '2020-01-01'\)$"):
        coerce("env_kwargs", {"day": datetime.date(2020, 1, 1)}, source="x.yaml")
    assert coerce("env_kwargs", {"day": "2020-01-01", "n": [1, 2.5, None]}, source="x.yaml") == {"day": "2020-01-01", "n": [1, 2.5, None]}


# ------------------------------------------------------------------ 5. the evaluation's envs are sized up front
def test_an_eval_episode_count_that_cannot_fit_is_refused_before_training(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "CartPole-v1", "--eval-episodes", "100000000000", "--dry-run"], capsys)
    error_line(code, err, "--eval-episodes 100,000,000,000: the evaluation builds one env per episode", "lower --eval-episodes")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ 6. --dry-run of a resume
def test_a_resume_dry_run_prints_the_resumed_config_and_writes_nothing(run, capsys):
    before = snapshot(run)
    code, out, err = run_main(["train", "--resume", str(run), "--total-timesteps", "640", "--dry-run"], capsys)
    assert code == 0, err
    resumed = yaml.safe_load(out)
    assert (resumed["lr"], resumed["num_steps"], resumed["total_timesteps"]) == (0.001, 16, 640)
    assert snapshot(run) == before  # no lock file, nothing set aside or rewritten


def test_a_resume_dry_run_refuses_what_the_resume_refuses(run, tmp_path, capsys):
    code, _, err = run_main(["train", "--resume", str(run), "--lr", "0.5", "--dry-run"], capsys)
    error_line(code, err, "--lr 0.5: cannot change when resuming (the run was trained with 0.001)")
    code, _, err = run_main(["train", "--resume", str(tmp_path / "nope"), "--dry-run"], capsys)
    error_line(code, err, f"proxima train: error: {tmp_path / 'nope'}: no such file or directory")


def test_a_resume_auto_dry_run_without_a_checkpoint_dry_runs_a_new_run(tmp_path, capsys):
    code, out, err = run_main(["train", "Acrobot-v1", "--resume", "auto", "--run-dir", str(tmp_path / "new"), "--dry-run"], capsys)
    assert code == 0, err
    assert yaml.safe_load(out)["env_id"] == "Acrobot-v1" and not (tmp_path / "new").exists()


# ------------------------------------------------------------------ 7. --hidden-sizes with spaces
@pytest.mark.parametrize("text", ["64 32", "64, 32", " 64,32 ", "64\t32"])
def test_hidden_sizes_split_on_commas_and_spaces(text):
    assert coerce("hidden_sizes", text, source="flag") == [64, 32]


def test_hidden_sizes_with_a_space_in_a_flag_and_in_yaml(tmp_path, capsys):
    code, out, err = run_main(["train", "--hidden-sizes", "64 64", "--dry-run"], capsys)
    assert code == 0 and yaml.safe_load(out)["hidden_sizes"] == [64, 64], err
    config = write(tmp_path / "h.yaml", "hidden_sizes: 32 16\n")
    code, out, err = run_main(["train", "--config", str(config), "--dry-run"], capsys)
    assert code == 0 and yaml.safe_load(out)["hidden_sizes"] == [32, 16], err


# ------------------------------------------------------------------ 8. an empty env id
def test_an_empty_env_id_is_refused_not_read_as_the_default(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["train", "", "--dry-run"], capsys)
    error_line(code, err, "proxima train: error: ENV_ID '': empty; name an env")
    assert out == "" and list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ 9. --checkpoint-every 0
def test_checkpoint_every_help_says_checkpoint_minutes_still_writes(capsys):
    code, out, _ = run_main(["train", "--help"], capsys)
    text = " ".join(out.split())
    entry = text[text.index("--checkpoint-every CHECKPOINT_EVERY "):]
    entry = entry[:entry.index("(default: 50)")]
    assert code == 0 and "only at the end" not in entry
    assert "(0: none by iteration count; --checkpoint-minutes and the end of the run still write them)" in entry


# ------------------------------------------------------------------ 10. a run's own config.yaml from elsewhere
def fake_run(root, name: str = "x", run_dir: str = "runs/x"):
    """RUN/config.yaml and meta.json as a run started with --run-dir runs/x (a relative path) leaves them."""
    folder = root / "runs" / name
    folder.mkdir(parents=True)
    write(folder / "meta.json", json.dumps({"kind": "ppo"}))
    return write(folder / "config.yaml", f"env_id: CartPole-v1\nrun_dir: {run_dir}\n")


def test_a_runs_own_config_yaml_is_recognised_from_another_working_directory(tmp_path, monkeypatch, capsys):
    config = fake_run(tmp_path / "project")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    code, out, err = run_main(["train", "--config", str(config), "--dry-run"], capsys)
    assert code == 0, err
    assert yaml.safe_load(out)["run_dir"] is None  # a new directory, not elsewhere/runs/x
    assert "run_dir runs/x is that run's own directory; this run gets a new one" in err


def test_a_copied_runs_config_yaml_is_its_own_though_it_names_the_original(tmp_path, monkeypatch, capsys):
    config = fake_run(tmp_path, name="copy", run_dir=str(tmp_path / "original"))
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["train", "--config", str(config), "--dry-run"], capsys)
    assert code == 0 and yaml.safe_load(out)["run_dir"] is None, err
    assert f"run_dir {tmp_path / 'original'} is that run's own directory; this run gets a new one" in err


def test_a_config_yaml_outside_a_run_directory_keeps_its_run_dir(tmp_path, monkeypatch, capsys):
    write(tmp_path / "config.yaml", "run_dir: runs/mine\n")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    code, out, err = run_main(["train", "--config", str(tmp_path / "config.yaml"), "--dry-run"], capsys)
    assert code == 0 and yaml.safe_load(out)["run_dir"] == "runs/mine" and err == "", err
    (tmp_path / "checkpoints").mkdir()  # a project's own checkpoints/ (another tool's) does not make it a run
    code, out, err = run_main(["train", "--config", str(tmp_path / "config.yaml"), "--dry-run"], capsys)
    assert code == 0 and yaml.safe_load(out)["run_dir"] == "runs/mine" and err == "", err


# ------------------------------------------------------------------ 11. YAML nested too deeply
def test_a_deeply_nested_yaml_config_is_one_line(tmp_path, capsys):
    config = write(tmp_path / "deep.yaml", "seed: " + "[" * 5000 + "\n")
    code, _, err = run_main(["train", "--config", str(config), "--dry-run"], capsys)
    error_line(code, err, f"--config {config}: not valid YAML (nested too deeply)")


# ------------------------------------------------------------------ 12. a value after a boolean flag
@pytest.mark.parametrize("argv, want", [
    (["train", "--anneal-lr", "no"], "--anneal-lr takes no value (got 'no'); write --no-anneal-lr"),
    (["train", "CartPole-v1", "--anneal-lr", "false"], "--anneal-lr takes no value (got 'false'); write --no-anneal-lr"),
    (["train", "--anneal-lr=off", "--dry-run"], "--anneal-lr takes no value (got 'off'); write --no-anneal-lr"),
    (["train", "--norm-obs", "true"], "--norm-obs takes no value (got 'true'); write just --norm-obs"),
    (["train", "--no-norm-adv", "0"], "--no-norm-adv takes no value (got '0'); write --norm-adv"),
    (["resume", "R", "--progress", "off"], "--progress takes no value (got 'off'); write --no-progress"),
])
def test_a_true_or_false_word_after_a_boolean_flag_names_the_flag_to_write(argv, want, capsys):
    code, _, err = run_main(argv, capsys)
    error_line(code, err, f"proxima {argv[0]}: error: {want}")


# ------------------------------------------------------------------ 13. every Atari game gets the Atari preset
@pytest.mark.parametrize("env_id", ["SpaceInvaders-v5", "ALE/Seaquest-v5"])
def test_an_atari_game_without_its_own_entry_gets_the_atari_familys_preset(env_id):
    cfg = presets.resolve(env_id, None, PPOConfig())
    pong = presets.resolve("Pong-v5", None, PPOConfig())
    assert cfg.env_id == env_id
    assert {k: v for k, v in cfg.to_dict().items() if k != "env_id"} == {k: v for k, v in pong.to_dict().items() if k != "env_id"}
    assert (cfg.num_envs, cfg.clip_coef, cfg.encoder, cfg.total_timesteps) == (8, 0.1, "cnn", 10_000_000)


def test_a_v5_id_that_is_no_atari_game_keeps_the_defaults():
    assert presets.resolve("Ant-v5", None, PPOConfig()).num_envs == PPOConfig().num_envs
    with pytest.raises(ConfigError, match="no such preset for SpaceInvaders-v5 \\(available: default;"):
        presets.resolve("SpaceInvaders-v5", "fast", PPOConfig())


def test_presets_command_shows_the_atari_familys_preset_for_a_game(capsys):
    code, out, err = run_main(["presets", "ALE/SpaceInvaders-v5", "--json"], capsys)
    assert code == 0, err
    assert [(r["env_id"], r["preset"], r["steps"]) for r in json.loads(out)] == [("<Game>-v5", "default", 10_000_000)]


@pytest.mark.parametrize("command", ["plot", "report"])
def test_a_runs_config_yaml_nested_too_deeply_is_one_line_for_plot_and_report(command, tmp_path, capsys):
    run = tmp_path / "run"
    code, _, err = run_main(["train", "CartPole-v1", "--total-timesteps", "512", "--run-dir", str(run), "--threads", "1",
                             "--eval-episodes", "0", "--quiet"], capsys)
    assert code == 0, err
    # block style: a flow '[' per level costs PyYAML's scanner time quadratic in the depth (~5 s a read on
    # 2 cores, and plot reads config.yaml 3 times); the reader's RecursionError is the same (flow style:
    # test_a_deeply_nested_yaml_config_is_one_line, through the same config.load_yaml)
    (run / "config.yaml").write_text("a:\n  " + "- " * 20000 + "x\n")
    out = ["--out", str(tmp_path / ("c.png" if command == "plot" else "r.md")), "--episodes", "0"][: 2 if command == "plot" else 4]
    code, _, err = run_main([command, str(run), *out], capsys)
    assert "Traceback" not in err and "RecursionError" not in err, err
    if command == "report":  # it shows config.yaml: one line naming why it cannot (plot draws without it)
        assert code == 2 and "nested too deeply" in err and err.count("\n") == 1, err


# ------------------------------------------------------------------ 7. negative numbers argparse takes for flags
@pytest.mark.parametrize("value, expected", [("-1e3", -1000.0), ("-2.5E+2", -250.0), ("-7", -7.0), ("-.5", -0.5)])
def test_a_negative_number_in_scientific_notation_is_a_flags_value(value, expected, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(["train", "CartPole-v1", "--stop-return", value, "--dry-run"], capsys)
    assert code == 0, err
    assert yaml.safe_load(out)["stop_return"] == expected


def test_a_negative_infinity_reaches_the_fields_own_check(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "CartPole-v1", "--stop-return", "-inf", "--dry-run"], capsys)
    error_line(code, err, "--stop-return -inf: must be a finite number or none")


def test_a_negative_number_after_a_flag_without_a_value_is_still_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # --dry-run takes no value: -1e3 stays an unknown argument
    code, _, err = run_main(["train", "CartPole-v1", "--dry-run", "-1e3"], capsys)
    assert code == 2 and "-1e3" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
