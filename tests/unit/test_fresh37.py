"""Fresh-eyes review 37: a genuine eval.json of large, nearly equal returns was called edited (float32
summary against a float64 recomputation); load_checkpoint(map_location=...) refused every device but
the CPU as damage; check-env on a native env said nothing at --steps 0 and told an env with no time
limit to take more steps; report's Markdown rendered ``__main__:MyEnv`` bold; check-env's step
default and most had several definitions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cli_helpers import FIXTURES, run_main
from proxima import checkpoint as ckpt
from proxima.evaluate import edited_summary, summarize


def _summary(returns) -> dict:
    r = torch.as_tensor(returns, dtype=torch.float32)
    return summarize("X", r, torch.ones(r.shape[0], dtype=torch.int64), True)


def test_a_genuine_eval_of_large_nearly_equal_returns_is_not_called_edited():
    assert edited_summary(_summary([1e5, 100000.0078, 100000.0078])) is None
    rng = np.random.default_rng(37)
    for _ in range(300):  # large magnitudes, spreads down to float32's resolution of them
        n, mag = int(rng.integers(2, 100)), 10 ** rng.uniform(3, 7) * rng.choice([-1, 1])
        returns = rng.normal(mag, abs(mag) * 10 ** rng.uniform(-8, -2), n)
        assert edited_summary(_summary(returns)) is None, returns.tolist()


def test_a_mean_or_std_edited_by_hand_is_still_called_edited():
    data = _summary([10.0, 100.0, 239.2])
    data["mean_return"] = 500.0
    assert edited_summary(data) == ("mean_return 500.00 and std_return 94.29 disagree with its returns "
                                    "(mean 116.40, std 94.29)")
    data = _summary([1e5, 100000.0078, 100000.0078])
    data["std_return"] = 1.0  # far inside rel 1e-4 of the mean, yet no spread these returns have
    assert edited_summary(data).startswith("mean_return 100000.00 and std_return 1.00 disagree")


def _plain_checkpoint(path, tensor):
    torch.save({"format": ckpt.FORMAT, "schema_version": ckpt.SCHEMA_VERSION, "config": {}, "spaces": {},
                "global_step": 0, "agent": {"w": tensor}}, path)


def test_load_checkpoint_places_a_checked_file_where_map_location_asks(tmp_path, monkeypatch):
    monkeypatch.setattr(ckpt, "check_policy_state", lambda state: None)  # a hand-made file: the placement is tested
    path = tmp_path / "step_1.pt"
    _plain_checkpoint(path, torch.ones(3))
    # meta stands in for a GPU this machine lacks: a device other than the CPU, asked for by the caller
    state = ckpt.load_checkpoint(path, map_location="meta")
    assert state["agent"]["w"].device.type == "meta" and state["path"] == str(path)
    for where in ("cpu", torch.device("cpu"), lambda storage, loc: storage):
        assert torch.equal(ckpt.load_checkpoint(path, map_location=where)["agent"]["w"], torch.ones(3))


def test_a_tensor_proxima_never_writes_is_refused_whatever_map_location_asks(tmp_path, monkeypatch):
    monkeypatch.setattr(ckpt, "check_policy_state", lambda state: None)
    path = tmp_path / "step_1.pt"
    _plain_checkpoint(path, torch.ones(3).to_sparse())
    with pytest.raises(ckpt.CheckpointError, match=r"agent\.w is a sparse_coo tensor, not a plain"):
        ckpt.load_checkpoint(path, map_location="meta")


def test_check_env_on_a_native_env_notes_steps_0_and_a_missing_time_limit(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    code, out, _ = run_main(["check-env", "user_native_env:Drift", "--steps", "0"], capsys)
    assert code == 0
    assert out.splitlines()[0] == "NOTE --steps 0: the env was built and reset, never stepped; the checks of step() did not run"
    code, out, _ = run_main(["check-env", "user_native_env:NoLimit", "--steps", "3"], capsys)
    assert code == 0
    note = out.splitlines()[0]
    assert note.startswith("NOTE no episode ended in 3 steps (max_episode_steps = 0)") and "more --steps" not in note
    assert note.endswith("no time limit: set max_episode_steps, or check that terminated can become true")
    code, out, _ = run_main(["check-env", "user_native_env:Drift", "--steps", "3"], capsys)  # 5-step limit
    assert code == 0 and out.splitlines()[0].endswith("give --steps above 5")


def test_report_markdown_shows_a_main_module_env_id_literally():
    from proxima.report import _md

    assert _md("__main__:MyEnv") == "`__main__:MyEnv`"
    assert _md("charts/episodic_return") == "charts/episodic_return"  # an underscore inside a word is literal
    assert _md("~~gone~~") == "`~~gone~~`"


def test_check_env_step_limits_have_one_definition():
    from proxima import check_env_cli
    from proxima.envs import checker, gym_adapter

    assert gym_adapter.CHECK_STEPS is check_env_cli.CHECK_STEPS
    assert checker.MAX_CHECK_STEPS is gym_adapter.MAX_CHECK_STEPS is check_env_cli.MAX_CHECK_STEPS
    assert checker.check_env.__defaults__[0] == check_env_cli.CHECK_STEPS
