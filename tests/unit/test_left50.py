"""Leftovers 50: make_env's refusals name its own arguments (env_kwargs, seed=), not PPOConfig's fields; an Atari
refusal from Python names backend='envpool' and env_kwargs, not the flags; train(), train_population() and
train_rlhf() without a package they need are one ImportError line with the CLI's install command; bench's and
report's times carry their UTC offset, as meta.json's; eval.json's success counts are read alike by report.md,
report.json and eval's line (an impossible one refused or left out, a rate of -0.0 never shown as -0.00)."""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime

import pytest

from cli_helpers import FIXTURES, error_line, fake_run_dir, run_main
from proxima import PPOConfig, cli
from proxima.envs import EnvError, atari, make_env

INSTALL = "install it from the repository root with: .venv/bin/pip install -c requirements.lock -e"


@pytest.fixture
def fixture_envs(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))


@pytest.fixture
def factory(tmp_path, monkeypatch):
    """A module 'fac50' whose make(a, b) needs two arguments only env_kwargs can give."""
    (tmp_path / "fac50.py").write_text("import gymnasium as gym\n\n\ndef make(a, b):\n    return gym.make('CartPole-v1')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "fac50:make"
    sys.modules.pop("fac50", None)


# ------------------------------------------------------------------------------- 1. make_env's own arguments
@pytest.mark.parametrize("kwargs, told", [
    ({"seed": 5}, "env_kwargs: 'seed' of env 'user_native_env:Drift' is set by Proxima; drop it: use make_env's seed= argument"),
    ({"device": "cpu", "num_envs": 2}, "env_kwargs: 'num_envs', 'device' of env 'user_native_env:Drift' are set by "
                                      "Proxima; drop them: use make_env's num_envs= argument; use make_env's device= argument"),
])
def test_make_env_names_its_own_arguments_for_what_proxima_sets(fixture_envs, kwargs, told):
    with pytest.raises(EnvError) as e:
        make_env("user_native_env:Drift", 2, seed=0, env_kwargs=kwargs)
    assert str(e.value) == told  # was "PPOConfig.env_kwargs: ... set PPOConfig.seed": no PPOConfig in this call


def test_make_env_names_env_kwargs_for_an_argument_the_constructor_lacks():
    with pytest.raises(EnvError) as e:
        make_env("CartPole-v1", 1, env_kwargs={"foo": 1})
    assert str(e.value) == "env_kwargs: env 'CartPole-v1' takes no argument 'foo' (CartPoleEnv.__init__); drop it from env_kwargs"


def test_make_env_names_env_kwargs_for_a_factorys_missing_arguments(factory):
    with pytest.raises(EnvError) as e:
        make_env(factory, 1)
    assert str(e.value).endswith("make() missing 2 required positional arguments: 'a' and 'b'; give the factory its "
                                 "arguments with env_kwargs (e.g. env_kwargs={'a': ..., 'b': ...})"), str(e.value)


def test_train_from_python_still_names_ppoconfigs_fields(fixture_envs, tmp_path):
    from proxima import train

    with pytest.raises(EnvError) as e:
        train(PPOConfig(env_id="user_native_env:Drift", env_kwargs={"seed": 3}, total_timesteps=64, num_envs=2,
                        num_steps=16, progress=False), run_dir=str(tmp_path / "run"))
    assert str(e.value) == ("PPOConfig.env_kwargs: 'seed' of env 'user_native_env:Drift' is set by Proxima; drop it: "
                            "set PPOConfig.seed")


def test_the_command_line_still_names_its_flags(fixture_envs, capsys):
    code, _, err = run_main(["train", "user_native_env:Drift", "--env-kwargs", '{"seed": 5}', "--num-envs", "2",
                             "--num-steps", "32", "--total-timesteps", "64", "--dry-run"], capsys)
    line = error_line(code, err, "--env-kwargs: 'seed' of env 'user_native_env:Drift' is set by Proxima; drop it: use --seed")
    assert "make_env" not in line and "PPOConfig" not in line


# ------------------------------------------------------------------------------- 2. Atari from Python
def test_make_env_of_an_atari_game_without_envpool_names_the_backend_argument(monkeypatch):
    monkeypatch.setattr(atari, "has_envpool", lambda: False)
    with pytest.raises(EnvError) as e:
        make_env("Pong-v5", 2, backend="envpool")
    assert str(e.value) == f"backend='envpool' needs EnvPool, which is not installed; {INSTALL} '.[atari]'"


def test_make_env_of_an_atari_game_names_env_kwargs_for_a_setting_it_lacks():
    with pytest.raises(EnvError) as e:
        make_env("Pong-v5", 2, env_kwargs={"frameskip": 2})
    assert str(e.value).startswith("env_kwargs: the Atari id 'Pong-v5' takes only repeat_action_probability")
    with pytest.raises(EnvError) as e:
        make_env("Pong-v5", 2, env_kwargs={"repeat_action_probability": 1.5})
    assert str(e.value) == "env_kwargs: repeat_action_probability for the Atari id 'Pong-v5' must be a number from 0 to 1, got 1.5"


def test_the_command_line_still_names_backend_envpool(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(atari, "has_envpool", lambda: False)
    monkeypatch.setattr(atari, "has_ale", lambda: False)
    code, _, err = run_main(["train", "Pong-v5", "--backend", "envpool", "--dry-run", "--run-dir", str(tmp_path / "r")], capsys)
    error_line(code, err, "proxima train: error: --backend envpool needs EnvPool, which is not installed; install it")


# ------------------------------------------------------------------------------- 3. a missing package from Python
def test_train_without_tensorboard_is_one_import_error_line_with_the_install_command(monkeypatch, tmp_path):
    from proxima import ProximaError, train

    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as after `pip uninstall -y tensorboard`
    with pytest.raises(ImportError) as e:  # was a bare ModuleNotFoundError from deep in the run's setup
        train(PPOConfig(env_id="CartPole-v1", total_timesteps=64, num_envs=2, num_steps=16, progress=False),
              run_dir=str(tmp_path / "run"))
    assert str(e.value) == f"tensorboard is not installed, and train() needs it: {INSTALL} ."
    assert isinstance(e.value, (ModuleNotFoundError, ProximaError)) and e.value.name == "tensorboard"
    assert not (tmp_path / "run").exists()


def test_train_population_without_tensorboard_is_the_same_line(monkeypatch, tmp_path):
    from proxima import train_population

    monkeypatch.setitem(sys.modules, "tensorboard", None)
    with pytest.raises(ImportError, match=re.escape(f"tensorboard is not installed, and train_population() needs it: {INSTALL} .")):
        train_population(PPOConfig(env_id="CartPole-v1", total_timesteps=64, num_envs=2, num_steps=16, progress=False),
                         seeds=[1, 2], run_dir=str(tmp_path / "pop"))
    assert not (tmp_path / "pop").exists()


def test_train_rlhf_without_transformers_is_one_import_error_line_with_the_rlhf_install_command(monkeypatch, tmp_path):
    from proxima.rlhf import RLHFConfig, train_rlhf

    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError) as e:
        train_rlhf(RLHFConfig(policy="gpt2", reward="length", prompts=str(tmp_path / "p.jsonl"), run_dir=str(tmp_path / "run")))
    assert str(e.value) == f"transformers is not installed, and train_rlhf() needs it: {INSTALL} '.[rlhf]'"
    assert e.value.name == "transformers" and not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------- 4. times with their UTC offset
def test_bench_records_its_start_with_its_utc_offset(tmp_path, capsys):
    out = tmp_path / "b.md"
    code = cli.main(["bench", "CartPole-v1", "--backend", "native", "--num-envs", "2", "--seconds", "0.01", "--repeats", "1",
                     "--train-only", "--json", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    (row,) = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    stamp = datetime.fromisoformat(row["timestamp"])
    assert stamp.utcoffset() == datetime.now().astimezone().utcoffset()  # was a naive local time
    recorded = re.search(r"^Recorded (\S+) by:$", out.read_text(), re.M).group(1)
    assert datetime.fromisoformat(recorded) == stamp


def test_reports_generated_line_carries_its_utc_offset(tmp_path, capsys):
    run = fake_run_dir(tmp_path, "a")
    assert cli.main(["report", str(run)]) == 0, capsys.readouterr().err
    when = re.search(r"^Generated (\S+) by `proxima report`", (run / "report.md").read_text(), re.M).group(1)
    assert datetime.fromisoformat(when).utcoffset() == datetime.now().astimezone().utcoffset()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", when), when  # meta.json's form


# ------------------------------------------------------------------------------- 5. success counts
def _line(**fields) -> str:
    from proxima.evaluate import format_result

    return format_result({"env_id": "CartPole-v1", "mean_return": 9.0, "std_return": 1.0, "episodes": 10,
                          "deterministic": True, **fields})


def test_a_success_rate_of_minus_zero_is_shown_as_zero():
    from proxima.evaluate import success_note

    assert success_note({"success_rate": -0.0}) == "; success rate 0.00"
    assert _line(success_rate=-0.0, success_episodes=4).endswith(
        "; success rate 0.00 over the 4 episodes that reported info['is_success']")


@pytest.mark.parametrize("fields", [{"success_episodes": 10}, {"success_episodes": 11}, {"episodes": 0}])
def test_eval_line_leaves_out_a_rate_the_report_refuses(fields, tmp_path, capsys):
    """success_episodes is written only when fewer than all episodes reported: 10 of 10 is refused by report as 11 is."""
    assert _line(success_rate=0.5, **fields) == "CartPole-v1: 9.00 +- 1.00 over 10 episodes (deterministic)".replace(
        "over 10", f"over {fields.get('episodes', 10)}")
    run = fake_run_dir(tmp_path, "a")
    (run / "eval.json").write_text(json.dumps({"mean_return": 9.0, "episodes": 10, "success_rate": 0.5, **fields}))
    code, _, err = run_main(["report", str(run)], capsys)
    error_line(code, err, f"{run / 'eval.json'}: success_")


def test_a_success_count_without_episodes_is_left_out_of_report_json_and_the_eval_line(tmp_path, capsys):
    run = fake_run_dir(tmp_path, "a")
    (run / "eval.json").write_text(json.dumps({"mean_return": 2.0, "success_rate": 0.25, "success_episodes": 10 ** 30}))
    js = tmp_path / "r.json"
    assert cli.main(["report", str(run), "--json", str(js)]) == 0, capsys.readouterr().err
    final = json.loads(js.read_text())["runs"][0]["final_eval"]
    assert (final["success_rate"], final["success_episodes"]) == (0.25, None)  # was 10**30 in report.json
    from proxima.evaluate import success_note

    assert success_note({"success_rate": 0.25, "success_episodes": 10 ** 30}) == "; success rate 0.25"  # as report.md's cell
