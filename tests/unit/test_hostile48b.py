"""Hostile input found in session 48: a preset file of nested YAML aliases (a 407-byte file took 5.5 GB),
an env whose observation_space raises or sits under 10,000 wrappers, a stop signal to a command that
trains nothing, a 120,000-character metrics.csv column in an unknown metric's line, and a run-dir
symlink loop."""

import os
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc

import pytest

from proxima import presets
from proxima.config import ConfigError
from proxima.plot import UnknownMetric, resolve_metric
from tests.cli_helpers import run_main

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and symbolic links")

#: 8 levels of 10 aliases each: 10^8 "lol"s once expanded, in 407 bytes
BOMB = "MyEnv-v0: [" + ", ".join(
    ['&a0 [' + ", ".join(['"lol"'] * 10) + ']'] + [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 8)]) + "]\n"
SMALL_TRAIN = ["--total-timesteps", "64", "--num-envs", "1", "--num-steps", "64"]


@pytest.fixture
def preset_dir(tmp_path, monkeypatch):
    """A folder of preset files read in place of proxima/presets' own; the cache is cleared before and after."""
    monkeypatch.setattr(presets, "_DIR", tmp_path)
    presets.all_presets.cache_clear()
    yield tmp_path
    monkeypatch.undo()
    presets.all_presets.cache_clear()


def test_a_preset_file_of_nested_aliases_is_refused_naming_the_file_and_the_alias(preset_dir):
    (preset_dir / "bomb.yaml").write_text(BOMB)
    with pytest.raises(ConfigError) as e:
        presets.all_presets()
    assert str(e.value) == (f"preset file {preset_dir / 'bomb.yaml'}: holds a YAML alias (*a0, line 1), which preset files "
                            "may not; write the value out, or restore the file (every proxima train reads it)")


def test_a_preset_file_nested_deeper_than_the_stack_is_one_line(preset_dir):
    (preset_dir / "deep.yaml").write_text("MyEnv-v0: " + "[" * 20000 + "]" * 20000 + "\n")
    with pytest.raises(ConfigError) as e:
        presets.all_presets()
    assert str(e.value) == (f"preset file {preset_dir / 'deep.yaml'}: not valid YAML (nested too deeply); restore the file "
                            "(every proxima train reads it)")


def test_the_shipped_presets_have_their_shared_settings_written_out():
    presets.all_presets.cache_clear()
    known = presets.all_presets()
    pong = known["Pong-v5"]["default"]["config"]
    assert pong["num_envs"] == 8 and pong["lr"] == 2.5e-4 and pong["encoder"] == "cnn"
    assert known["Breakout-v5"]["default"]["config"] == pong == known[presets.ATARI_FAMILY]["default"]["config"]
    cheetah = known["HalfCheetah-v5"]["default"]["config"]
    assert cheetah["num_steps"] == 2048 and cheetah["norm_reward"] is True
    assert known["Hopper-v5"]["default"]["config"] == cheetah == known["Walker2d-v5"]["default"]["config"]


@pytest.mark.parametrize("value", [[1, "two", 3.5, None, True], {"a": [1, 2], 3: {"b": "c"}}, ("x",), (1, 2), {1, 2},
                                   set(), [], "x y\n  z", list(range(30)), {"k" * 50: 1}, b"raw"])
def test_a_preview_is_the_start_of_the_values_repr(value):
    text = " ".join(repr(value).split())
    assert presets._short(value) == (text if len(text) <= 40 else text[:37] + "...")


def test_a_non_mapping_preset_value_is_previewed_without_writing_out_all_of_it():
    value = ["lol"] * 10
    for _ in range(5):  # one list shared 10 times a level: a full repr is 7 MB of text
        value = [value] * 10
    tracemalloc.start()
    try:
        preview = presets._short(value)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert preview.startswith("[[[[") and preview.endswith("...") and len(preview) == 40, preview
    assert peak < 2**20, f"{peak / 2**20:.1f} MB"


ENVS = '''
import gymnasium as gym
import numpy as np


class BadObsSpace(gym.Env):
    action_space = gym.spaces.Discrete(2)

    @property
    def observation_space(self):
        raise ValueError("boom")

    def reset(self, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}


def deep():
    env = gym.make("CartPole-v1")
    for _ in range(10000):
        env = gym.wrappers.TransformReward(env, lambda r: r)
    return env
'''


@pytest.fixture
def env_module(tmp_path, monkeypatch):
    (tmp_path / "hostile48b_envs.py").write_text(ENVS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield "hostile48b_envs"
    sys.modules.pop("hostile48b_envs", None)


def test_an_observation_space_that_raises_is_one_line_naming_the_read_with_exit_2(env_module, capsys):
    code, out, err = run_main(["train", f"{env_module}:BadObsSpace", *SMALL_TRAIN, "--run-dir", "r"], capsys)
    assert code == 2, err
    assert err.strip().splitlines() == [f"proxima train: error: building env '{env_module}:BadObsSpace' raised ValueError: "
                                        f"boom ({env_module}.py:11) reading observation_space"]


def test_a_wrapper_chain_deeper_than_the_stack_is_one_line_with_exit_2(env_module, capsys):
    code, out, err = run_main(["train", f"{env_module}:deep", *SMALL_TRAIN, "--run-dir", "r"], capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"proxima train: error: building env '{env_module}:deep' raised "
                                                   "RecursionError: maximum recursion depth exceeded"), err
    assert lines[0].endswith(" reading observation_space"), err


#: `proxima ARGV` as the console script starts it (_startup's handler installed first), sent SIGTERM as it reads
#: its command line: where BeforeTraining's handler was in place for every command
STOPPED_WHILE_READING = textwrap.dedent('''
    import os, signal, sys
    sys.argv = ["proxima"] + sys.argv[1:]
    from proxima import _startup
    _startup.install()
    from proxima import cli
    read = cli._read
    def stopped(*a):
        os.kill(os.getpid(), signal.SIGTERM)
        return read(*a)
    cli._read = stopped
    cli.entry()
''')


def _stopped(argv, cwd):
    return subprocess.run([sys.executable, "-c", STOPPED_WHILE_READING, *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})


@posix_only
@pytest.mark.parametrize("argv", [["report", "r1"], ["plot", "r1", "--out", "sig.png"]])
def test_a_stopped_report_or_plot_says_nothing_of_training_and_ends_by_the_signal(tmp_path, argv):
    done = _stopped(argv, tmp_path)
    assert done.returncode == -signal.SIGTERM, (done.returncode, done.stderr)  # a shell says 143
    assert done.stderr == "" and done.stdout == ""
    assert not (tmp_path / "sig.png").exists()


@posix_only
def test_a_stopped_train_still_says_nothing_was_kept(tmp_path):
    done = _stopped(["train", "CartPole-v1", "--run-dir", "r"], tmp_path)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert done.stderr.splitlines() == ["proxima: stopped by SIGTERM; before training started; nothing was kept"]


def test_an_unknown_metrics_line_cuts_each_column_name_and_lists_at_most_60():
    huge = "x" * 120_000
    columns = ["global_step", huge] + [f"custom/metric_{i}" for i in range(100)]
    started = time.perf_counter()
    with pytest.raises(UnknownMetric) as e:
        resolve_metric("nope", columns)
    line = str(e.value)
    assert time.perf_counter() - started < 5
    assert line.startswith(f"unknown metric 'nope'; available: global_step, {'x' * 77}..., custom/metric_0, ")
    assert line.endswith("custom/metric_57 (+42 more)"), line[-80:]
    assert len(line) < 2000


def test_a_did_you_mean_of_a_long_column_is_cut_too():
    long_name = "losses/" + "v" * 5000
    with pytest.raises(UnknownMetric) as e:
        resolve_metric("losses/" + "v" * 4999, ["global_step", long_name])
    assert str(e.value).endswith(f"; did you mean 'losses/{'v' * 70}...'?"), str(e.value)[-120:]


@posix_only
def test_a_run_dir_symlink_loop_is_named_as_a_loop_with_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    os.symlink("loopb", "loopa")
    os.symlink("loopa", "loopb")
    code, out, err = run_main(["train", "CartPole-v1", *SMALL_TRAIN, "--run-dir", "loopa"], capsys)
    assert code == 2, err
    assert err.strip().splitlines() == ["proxima train: error: --run-dir loopa: is a symbolic link to loopb, and the links it "
                                        "leads through form a loop; remove or fix them, or choose another --run-dir"]
