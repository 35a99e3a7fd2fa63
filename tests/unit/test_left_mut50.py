"""Mutation tests of leftovers 50 (7813f37, dacf74e, 1c85e06, 9fa0334): make_env's own-call wording never leaks
into a later run's lines and survives a make_env nested in a factory; train() from Python still names PPOConfig's
fields (a factory's missing arguments, an Atari setting); the missing-package line names the distribution (pyyaml)
and is both a ModuleNotFoundError and a ProximaError; bench's and report's times carry the local UTC offset, not
UTC's; eval's success line and report read a count of 0, a count without episodes and a rate of -0.0 alike."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from datetime import datetime, timedelta

import pytest

from cli_helpers import fake_run_dir
from proxima import PPOConfig, bench, cli
from proxima.envs import EnvError, make_env, own_call

INSTALL = "install it from the repository root with: .venv/bin/pip install -c requirements.lock -e"
TOKYO = timedelta(hours=9)


def _cfg(**fields) -> PPOConfig:
    return PPOConfig(total_timesteps=64, num_envs=2, num_steps=16, progress=False, **fields)


@pytest.fixture
def module_dir(tmp_path, monkeypatch):
    """tmp_path on sys.path, and the modules a test writes there forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("fac_mut50", "nest_mut50"):
        sys.modules.pop(name, None)


@pytest.fixture
def tokyo():
    """Local time 9 hours ahead of UTC (a POSIX TZ string: no zoneinfo needed), as a machine outside UTC has:
    on a UTC machine a time written in UTC and one in local time with its offset look the same."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "JST-9"
    time.tzset()
    try:
        assert datetime.now().astimezone().utcoffset() == TOKYO
        yield
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()


# ------------------------------------------------------------------------------- 1. make_env's own-call wording
def test_own_call_is_false_after_make_env_returns_or_raises(tmp_path):
    """make_env's "own call" mark is reset as it returns or raises: a train() from Python after it still names
    PPOConfig's fields (a mark left set named make_env's arguments in every later run's lines)."""
    from proxima import train

    assert own_call() is False
    env = make_env("CartPole-v1", 1, seed=0)
    env.close()
    assert own_call() is False
    with pytest.raises(EnvError):
        make_env("CartPole-v1", 1, env_kwargs={"foo": 1})
    assert own_call() is False
    with pytest.raises(EnvError) as e:
        train(_cfg(env_id="CartPole-v1", env_kwargs={"foo": 1}), run_dir=str(tmp_path / "run"))
    assert str(e.value) == ("PPOConfig.env_kwargs: env 'CartPole-v1' takes no argument 'foo' (CartPoleEnv.__init__); "
                            "drop it from PPOConfig.env_kwargs")
    assert not (tmp_path / "run").exists()


def test_a_make_env_nested_in_a_factory_of_an_own_call_names_make_envs_arguments(module_dir):
    """A factory that itself calls make_env, built by a script's own make_env: the inner call is the script's too."""
    (module_dir / "nest_mut50.py").write_text(
        "import proxima\n\n\ndef make():\n    return proxima.make_env('CartPole-v1', 1, env_kwargs={'foo': 1})\n")
    with pytest.raises(EnvError) as e:
        make_env("nest_mut50:make", 1)
    assert str(e.value) == "env_kwargs: env 'CartPole-v1' takes no argument 'foo' (CartPoleEnv.__init__); drop it from env_kwargs"


def test_train_from_python_names_ppoconfig_env_kwargs_for_a_factorys_missing_arguments(module_dir):
    (module_dir / "fac_mut50.py").write_text(
        "import gymnasium as gym\n\n\ndef make(a, b):\n    return gym.make('CartPole-v1')\n")
    from proxima import train

    with pytest.raises(EnvError) as e:
        train(_cfg(env_id="fac_mut50:make"), run_dir=str(module_dir / "run"))
    assert str(e.value).endswith("; give the factory its arguments with PPOConfig.env_kwargs (e.g. env_kwargs="
                                 "{'a': ..., 'b': ...})"), str(e.value)


@pytest.mark.parametrize("kwargs, told", [
    ({"frameskip": 2}, "PPOConfig.env_kwargs: the Atari id 'Pong-v5' takes only repeat_action_probability"),
    ({"full_action_space": 1}, "PPOConfig.env_kwargs: full_action_space for the Atari id 'Pong-v5' must be true or false, got 1"),
])
def test_train_from_python_names_ppoconfig_env_kwargs_for_an_atari_setting(tmp_path, kwargs, told):
    from proxima import train

    with pytest.raises(EnvError) as e:  # checked before any Atari package is asked for
        train(_cfg(env_id="Pong-v5", env_kwargs=kwargs), run_dir=str(tmp_path / "run"))
    assert str(e.value).startswith(told), str(e.value)
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------- 2. a missing package
def test_missing_package_error_is_both_a_module_not_found_error_and_a_proxima_error():
    from proxima import ProximaError
    from proxima.missing_package import MissingPackageError

    assert issubclass(MissingPackageError, ModuleNotFoundError)  # `except ModuleNotFoundError` (proxima rlhf's) catches it
    assert issubclass(MissingPackageError, ProximaError)  # `except proxima.ProximaError` in a sweep too


def test_train_without_pyyaml_names_the_distribution_and_the_module(monkeypatch, tmp_path):
    """yaml is the module, pyyaml what pip installs: the line names what to install, ``name`` the module."""
    from proxima import ProximaError, train

    monkeypatch.setitem(sys.modules, "yaml", None)  # as after `pip uninstall -y pyyaml` (the third core module)
    with pytest.raises(ModuleNotFoundError) as e:
        train(_cfg(env_id="CartPole-v1"), run_dir=str(tmp_path / "run"))
    assert str(e.value) == f"pyyaml is not installed, and train() needs it: {INSTALL} ."
    assert e.value.name == "yaml" and isinstance(e.value, ProximaError)
    assert not (tmp_path / "run").exists()


def test_train_rlhf_without_peft_names_it_with_the_rlhf_install_command(monkeypatch, tmp_path):
    import importlib.util

    from proxima.rlhf import RLHFConfig, train_rlhf

    if importlib.util.find_spec("transformers") is None:  # the line names the first one missing
        pytest.skip("transformers is not installed")
    monkeypatch.setitem(sys.modules, "peft", None)  # transformers there, peft (the second rlhf module) not
    with pytest.raises(ModuleNotFoundError) as e:
        train_rlhf(RLHFConfig(policy="gpt2", reward="length", prompts=str(tmp_path / "p.jsonl"), run_dir=str(tmp_path / "run")))
    assert str(e.value) == f"peft is not installed, and train_rlhf() needs it: {INSTALL} '.[rlhf]'"
    assert e.value.name == "peft" and not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------- 3. times with the local UTC offset
def test_bench_json_line_of_its_own_is_stamped_with_the_local_offset(tokyo):
    args = cli.build_parser().parse_args(["bench", "CartPole-v1", "--num-envs", "4", "--json"])
    line = bench.Line("native", 4, samples={"train": [2.0]})
    d = bench.json_line(line, args, bench.bench_config(args, "native", 4), "cpu")  # no run record: it makes one
    assert datetime.fromisoformat(d["timestamp"]).utcoffset() == TOKYO, d["timestamp"]
    assert bench.started_now().utcoffset() == TOKYO


def test_bench_records_its_start_in_local_time_with_its_offset(tokyo, tmp_path, capsys):
    out = tmp_path / "b.md"
    code = cli.main(["bench", "CartPole-v1", "--backend", "native", "--num-envs", "2", "--seconds", "0.01", "--repeats", "1",
                     "--train-only", "--json", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    (row,) = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert row["timestamp"].endswith("+09:00"), row["timestamp"]  # not UTC's +00:00, not a naive time
    recorded = re.search(r"^Recorded (\S+) by:$", out.read_text(), re.M).group(1)
    assert recorded == row["timestamp"]


def test_reports_generated_line_is_local_time_with_its_offset(tokyo, tmp_path, capsys):
    run = fake_run_dir(tmp_path, "a")
    before = datetime.now().astimezone()
    assert cli.main(["report", str(run)]) == 0, capsys.readouterr().err
    when = re.search(r"^Generated (\S+) by `proxima report`", (run / "report.md").read_text(), re.M).group(1)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+09:00", when), when  # local wall clock, not UTC's
    assert abs(datetime.fromisoformat(when) - before) < timedelta(minutes=5)


# ------------------------------------------------------------------------------- 4. success counts
@pytest.mark.parametrize("fields, note", [
    ({"success_episodes": 0, "episodes": 10}, ""),  # no rate is over 0 episodes: edited by hand
    ({"success_episodes": 3}, "; success rate 0.50"),  # a count with no episodes to be below: the rate alone
    ({"success_episodes": 3, "episodes": 10}, "; success rate 0.50 over the 3 episodes that reported info['is_success']"),
    ({"success_episodes": 9, "episodes": 10}, "; success rate 0.50 over the 9 episodes that reported info['is_success']"),
    ({"episodes": 1}, "; success rate 0.50"),
])
def test_success_note_reads_counts_as_report_does(fields, note):
    from proxima.evaluate import success_note

    assert success_note({"success_rate": 0.5, **fields}) == note


def test_report_shows_a_rate_of_minus_zero_as_zero_in_report_md_and_json(tmp_path, capsys):
    run = fake_run_dir(tmp_path, "a")
    (run / "eval.json").write_text(json.dumps({"mean_return": 2.0, "episodes": 10, "success_rate": -0.0}))
    js = tmp_path / "r.json"
    assert cli.main(["report", str(run), "--json", str(js)]) == 0, capsys.readouterr().err
    final = json.loads(js.read_text())["runs"][0]["final_eval"]
    assert str(final["success_rate"]) == "0.0"  # never -0.0
    row = [x for x in (run / "report.md").read_text().splitlines() if x.startswith("| final eval success rate")]
    assert row and "-0.00" not in row[0] and "0.00" in row[0], row


def test_report_keeps_an_eval_without_episodes_or_success_fields(tmp_path, capsys):
    run = fake_run_dir(tmp_path, "a")
    (run / "eval.json").write_text(json.dumps({"mean_return": 2.0, "std_return": 0.5}))
    js = tmp_path / "r.json"
    assert cli.main(["report", str(run), "--json", str(js)]) == 0, capsys.readouterr().err
    final = json.loads(js.read_text())["runs"][0]["final_eval"]
    assert final["mean_return"] == 2.0 and final["success_rate"] is None and final["success_episodes"] is None

