"""report.md shows the recorded command quoted as a shell reads it: copied and pasted, a run
directory with a space or an --env-kwargs JSON runs as it was typed."""
import json
import shlex

from tests.cli_helpers import fake_run_dir, run_main


def test_the_recorded_command_is_shown_shell_quoted(tmp_path, capsys):
    run = fake_run_dir(tmp_path, "run")
    typed = ["proxima", "train", "CartPole-v1", "--run-dir", "runs/my run ünï", "--env-kwargs", '{"a": 1}']
    (run / "meta.json").write_text(json.dumps({"kind": "ppo", "command": typed}))
    code, _, err = run_main(["report", str(run)], capsys)
    assert code == 0, err
    text = (run / "report.md").read_text()
    shown = "proxima train CartPole-v1 --run-dir 'runs/my run ünï' --env-kwargs '{\"a\": 1}'"
    assert shown in text
    assert shlex.split(shown) == typed
