"""`proxima eval RUN/policy` on an RLHF run's released policy: one line saying what the folder is and how
to use it, exit 2 (before: "not a Proxima run directory (no checkpoints/step_*.pt inside)")."""

import json

from tests.cli_helpers import error_line, run_main


def test_eval_of_an_rlhf_runs_policy_folder_says_to_load_it_with_transformers(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "policy").mkdir(parents=True)
    (run / "meta.json").write_text(json.dumps({"kind": "rlhf"}))
    (run / "config.yaml").write_text("steps: 1\n")
    (run / "policy" / "config.json").write_text("{}")
    code, _, err = run_main(["eval", str(run / "policy")], capsys)
    line = error_line(code, err)
    policy = run / "policy"
    assert line == (f"proxima eval: error: {policy}: the policy an RLHF run released, a Hugging Face model folder, not a "
                    f"PPO run: load it with transformers (AutoModelForCausalLM.from_pretrained('{policy}'), or peft's "
                    f"PeftModel for a LoRA adapter); the run's numbers are in {run / 'summary.json'} and "
                    f"{run / 'metrics.csv'}, its curve {run / 'curve.png'}")


def test_eval_of_another_hugging_face_folder_says_what_it_is(tmp_path, capsys):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    code, _, err = run_main(["eval", str(tmp_path / "m")], capsys)
    assert error_line(code, err).endswith(f"{tmp_path / 'm'}: a Hugging Face model folder, not a Proxima run directory: "
                                          "proxima eval evaluates PPO runs (checkpoints/step_*.pt); load it with transformers")


def test_a_plain_folder_is_still_no_run_directory(tmp_path, capsys):
    code, _, err = run_main(["eval", str(tmp_path)], capsys)
    assert "not a Proxima run directory (no checkpoints/step_*.pt inside)" in error_line(code, err)
