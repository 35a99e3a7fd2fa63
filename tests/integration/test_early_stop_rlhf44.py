"""`proxima rlhf` gets the early stop handling train and resume have (signals.BeforeTraining): a stop
while it starts (torch and transformers importing, seconds) died with no line (SIGTERM: 143) or printed
a KeyboardInterrupt traceback (Ctrl-C), its handler removed as the command line was read."""

import os

import pytest

from tests.integration.test_early_stop_import44 import _run_stopped_at_torch


@pytest.mark.parametrize("name, code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_stop_during_torchs_import_as_rlhf_starts_is_one_line_and_no_run(tmp_path, name, code):
    got, out, err, work = _run_stopped_at_torch(["rlhf", "--demo", "--steps", "1", "--run-dir", "run"], tmp_path, name)
    assert (got, out) == (code, ""), err
    assert err == f"proxima: stopped by {name}; before training started; nothing was kept\n"
    assert os.listdir(work) == []
