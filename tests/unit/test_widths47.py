"""hidden_sizes is capped where a checkpoint's network is rebuilt (checkpoint._MAX_WIDTH / _MAX_LAYERS): a run
wider or deeper than that would train, then refuse to load its own checkpoints."""
import subprocess
import sys

import pytest

from proxima import checkpoint
from proxima.config import MAX_HIDDEN_LAYERS, MAX_HIDDEN_WIDTH, ConfigError, PPOConfig, validate


def test_the_cap_is_the_checkpoint_readers_own():
    assert (checkpoint._MAX_WIDTH, checkpoint._MAX_LAYERS) == (MAX_HIDDEN_WIDTH, MAX_HIDDEN_LAYERS) == (2**20, 64)
    ok, _ = checkpoint._POLICY_FIELDS["hidden_sizes"]
    assert ok([MAX_HIDDEN_WIDTH]) and not ok([MAX_HIDDEN_WIDTH + 1])
    assert ok([8] * MAX_HIDDEN_LAYERS) and not ok([8] * (MAX_HIDDEN_LAYERS + 1))


@pytest.mark.parametrize("sizes", [[MAX_HIDDEN_WIDTH], [8] * MAX_HIDDEN_LAYERS])
def test_a_network_at_the_cap_is_valid(sizes):
    validate(PPOConfig(env_id="CartPole-v1", hidden_sizes=sizes))


@pytest.mark.parametrize("sizes", [[64, MAX_HIDDEN_WIDTH + 1], [8] * (MAX_HIDDEN_LAYERS + 1)])
def test_a_network_past_the_cap_is_refused_naming_it(sizes):
    with pytest.raises(ConfigError, match=r"^--hidden-sizes .*: at most 64 layers of at most 1,048,576 units each"):
        validate(PPOConfig(env_id="CartPole-v1", hidden_sizes=sizes))
    with pytest.raises(ConfigError, match=r"^PPOConfig.hidden_sizes = .*: at most 64 layers of at most 1,048,576"):
        validate(PPOConfig(env_id="CartPole-v1", hidden_sizes=sizes), python=True)


def test_the_cli_refuses_it_in_one_line_with_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "proxima", "train", "CartPole-v1", "--hidden-sizes", "64,1048577",
                        "--run-dir", str(tmp_path / "r")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines[-1] == ("proxima train: error: --hidden-sizes [64, 1048577]: at most 64 layers of at most 1,048,576 "
                         "units each (the largest network a checkpoint loads into)")
    assert not (tmp_path / "r").exists()
