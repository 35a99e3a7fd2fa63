"""train --seeds ... --dry-run showed a config its members do not train with: a preset's or typed
--stop-return (and --stop-episodes), which a population never applies and each member's config.yaml
records as null (20), and encoder auto where each member records the one built; and it left out the
note the real run prints on them. Its config is now what each member's config.yaml records, apart
from the per-member fields, and its stderr notes are the real run's."""

import json

import pytest
import yaml

from tests.cli_helpers import TINY_POP, run_main

DRY = ["train", "CartPole-v1", "--seeds", "1-2", "--dry-run"]


def notes(err: str) -> list:
    return [line for line in err.splitlines() if line.startswith("proxima: note:")]


@pytest.mark.parametrize("flags, asked", [
    (["--preset", "fast"], "--stop-return 500 applies"),
    (["--stop-return", "100"], "--stop-return 100 applies"),
    (["--preset", "fast", "--stop-episodes", "5"], "--stop-return 500 and --stop-episodes 5 apply"),
])
def test_a_population_dry_run_shows_no_stop_return_and_says_why(flags, asked, capsys):
    code, out, err = run_main([*DRY, *flags], capsys)
    assert code == 0, err
    config = json.loads(out)["config"]
    assert (config["stop_return"], config["stop_episodes"]) == (None, 20)  # what each member's config.yaml records
    assert notes(err) == [f"proxima: note: {asked} to single runs; each member of the population trains for --total-timesteps"]


def test_a_population_dry_run_under_quiet_drops_the_note_as_the_run_does(capsys):
    code, out, err = run_main([*DRY, "--stop-return", "100", "--quiet"], capsys)
    assert code == 0 and err == ""
    assert json.loads(out)["config"]["stop_return"] is None


def test_a_population_dry_run_shows_what_each_member_records_and_notes_what_the_run_notes(tmp_path, capsys):
    run = tmp_path / "pop"
    argv = ["train", "CartPole-v1", "--seeds", "1-2", "--sweep", "lr=1e-3,2e-3", "--preset", "fast", "--stop-episodes", "5",
            *TINY_POP, "--total-timesteps", "32", "--eval-episodes", "0", "--run-dir", str(run)]
    code, out, dry_err = run_main([*argv, "--dry-run"], capsys)
    assert code == 0, dry_err
    shown = json.loads(out)["config"]
    assert not run.exists()
    code, _, err = run_main(argv, capsys)
    assert code == 0, err
    assert notes(dry_err) == notes(err) and any("apply to single runs" in n for n in notes(err)), (dry_err, err)
    per_member = {"seed", "run_dir", "lr"}  # the dry run gives these as "seeds", "sweep" and the population's --run-dir
    for member in sorted(run.glob("m*/config.yaml")):
        recorded = yaml.safe_load(member.read_text())
        assert sorted(set(recorded) - per_member) == sorted(set(shown) - {"run_dir"})
        differ = {k: (shown[k], recorded[k]) for k in set(recorded) - per_member if shown[k] != recorded[k]}
        assert differ == {}, member
    assert len(list(run.glob("m*/config.yaml"))) == 4
