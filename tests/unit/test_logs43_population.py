"""Each population member's TensorBoard events hold its own config as the hyperparameters text, its
swept value and seed included, as a single run's do (test_logs43)."""
from proxima import cli
from tests.cli_helpers import TINY_POP
from tests.unit import test_logs43 as single


def test_each_population_member_writes_its_own_config_table_at_step_0(tmp_path):
    run_dir = tmp_path / "pop"
    assert cli.main(["train", "CartPole-v1", *TINY_POP, "--total-timesteps", "64", "--seeds", "1-2", "--sweep", "lr=0.001,0.002",
                     "--run-dir", str(run_dir), "--quiet"]) == 0
    members = sorted(d for d in run_dir.iterdir() if d.is_dir() and d.name.startswith("m"))
    assert len(members) == 4
    seen = set()
    for d in members:
        [(step, table)] = single._tables(d)
        assert step == 0
        seen.add((table["seed"], table["lr"]))
        assert table["run_dir"] == str(d.resolve())
    assert seen == {("1", "0.001"), ("2", "0.001"), ("1", "0.002"), ("2", "0.002")}
