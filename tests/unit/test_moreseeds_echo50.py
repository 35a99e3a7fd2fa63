"""More seeds echoes population.json's recorded command with its program as the plain word ``proxima`` (``python
-m proxima``), never the recorded path: a run directory may come from someone else (hostile review 50; "train it
again" got the same rule in 752d7e0)."""

import pytest

from proxima import population_report as pr
from tests.unit.test_hostB50 import _pop


@pytest.mark.parametrize("start, echoed", [
    (["/tmp/attacker/bin/proxima"], "proxima"),
    (["/tmp/attacker/python3.11", "-m", "proxima"], "python -m proxima"),
])
def test_more_seeds_names_the_program_as_the_plain_word_never_the_recorded_path(tmp_path, start, echoed):
    run = tmp_path / "A"
    command = [*start, "train", "Fake-v0", "--seeds", "1-2", "--total-timesteps", "400", "--run-dir", str(run)]
    _pop(run, command=command)
    assert pr._train_more(run, [3], tmp_path / "new") == (
        f"`{echoed} train Fake-v0 --total-timesteps 400 --seeds 3 --run-dir {tmp_path / 'new'}`")
