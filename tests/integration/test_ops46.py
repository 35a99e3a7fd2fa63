"""Session 46's operations review: train's --video (eval's flag) gets eval's command, not 'did you mean --vector'."""

from __future__ import annotations

import pytest

from tests.cli_helpers import error_line, run_main


@pytest.mark.parametrize("command", [["train", "CartPole-v1"], ["resume", "runs/none"]])
@pytest.mark.parametrize("flag", [["--video", "x.mp4"], ["--video=x.mp4"]])
def test_video_on_train_or_resume_names_evals_video(command, flag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main([*command, *flag, "--total-timesteps", "1024"], capsys)
    line = error_line(code, err, "; to record an episode of the trained policy: proxima eval RUN_DIR --video FILE.mp4")
    assert "--vector" not in line
    assert not (tmp_path / "runs").exists()
