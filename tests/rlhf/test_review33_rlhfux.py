"""What a user reviewing the RLHF docs found (session 33): a resume said nothing when it trained,
the required-field errors quoted an empty default ('' or []) as if it were the user's value,
`proxima rlhf --nproc` suggested --policy, and the Python API left transformers' progress bars on
(and, in resume, switched them off for good)."""
import shutil

import pytest
from transformers.utils import logging as hf_logging

from proxima.cli import main as proxima_main
from proxima.rlhf import RLHFConfig, train_rlhf
from proxima.rlhf import resume as rlhf_resume
from proxima.rlhf.__main__ import main
from proxima.rlhf.config import ConfigError
from tests.rlhf.test_cli import finished_rlhf_run  # noqa: F401 - the fixture: a 2-step run


def test_a_resume_that_trains_says_where_it_starts_and_ends_with_the_done_line(finished_rlhf_run, tmp_path, capsys):  # noqa: F811
    run = tmp_path / "run"
    shutil.copytree(finished_rlhf_run, run)
    capsys.readouterr()
    assert proxima_main(["resume", str(run), "--steps", "3"]) == 0
    out, err = capsys.readouterr()
    assert f"proxima: resuming {run} at step 2 of 3" in err.splitlines()
    done = out.strip().splitlines()[-1]
    assert done.startswith("done: 3 steps in ") and done.endswith(f"; run directory {run}"), out
    # --quiet: no resuming line and no progress lines; the closing line (the run directory) still prints
    assert proxima_main(["resume", str(run), "--steps", "4", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert "resuming" not in err, err
    assert len(out.strip().splitlines()) == 1 and out.startswith("done: 4 steps in "), out


def test_a_resume_with_a_hand_broken_summary_ends_without_a_traceback(finished_rlhf_run, tmp_path, capsys):  # noqa: F811
    run = tmp_path / "run"
    shutil.copytree(finished_rlhf_run, run)
    (run / "summary.json").write_text('{"final_step": 2, "steps": 2}')  # complete, but not the keys of the done line
    capsys.readouterr()
    assert proxima_main(["resume", str(run)]) == 0
    out = capsys.readouterr().out
    assert "already at step 2 of 2; nothing to do" in out and "done:" not in out


@pytest.mark.parametrize("missing, words", [
    ("reward", "--reward is required (a reward model folder, file.py:function or module:function); give --reward SPEC"),
    ("prompts", "--prompts is required (a .jsonl, .json or text file of prompts); give --prompts PATH (or --config "
                "FILE.yaml with prompts:), or try the offline demo: proxima rlhf --demo"),
])
def test_a_missing_required_field_is_named_not_quoted(missing, words, tmp_path, capsys):
    given = {"policy": str(tmp_path / "model"), "prompts": str(tmp_path / "p.txt"), "reward": "proxima.rlhf.demo:keyword_sentiment"}
    del given[missing]
    with pytest.raises(ConfigError) as e:  # the Python API's words are the command line's
        train_rlhf(RLHFConfig(**given, run_dir=str(tmp_path / "r")))
    assert str(e.value).startswith(words) and "''" not in str(e.value) and "[]" not in str(e.value)
    argv = [w for k, v in given.items() for w in (f"--{k}", v)] + ["--run-dir", str(tmp_path / "r")]
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == f"proxima rlhf: error: {str(e.value)}"
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("bars", [True, False])
def test_the_python_api_quiets_transformers_for_the_run_and_puts_the_callers_setting_back(bars, finished_rlhf_run, tmp_path,  # noqa: F811
                                                                                         monkeypatch, capsys):
    seen = []
    import proxima.rlhf.trainer as trainer_module

    real = trainer_module.RLHFTrainer.__init__

    def spy(self, *a, **k):  # what the run's loads see
        seen.append((hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()))
        return real(self, *a, **k)

    monkeypatch.setattr(trainer_module.RLHFTrainer, "__init__", spy)
    (hf_logging.enable_progress_bar if bars else hf_logging.disable_progress_bar)()
    hf_logging.set_verbosity_warning()
    try:
        run = tmp_path / "run"
        shutil.copytree(finished_rlhf_run, run)
        assert rlhf_resume(run, steps=3) == 0
        assert seen == [(False, hf_logging.ERROR)]
        assert hf_logging.is_progress_bar_enabled() is bars and hf_logging.get_verbosity() == hf_logging.WARNING
    finally:
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()  # as tests/rlhf/conftest.py leaves them
