"""docs/rlhf.md's table of TRL's PPOTrainer metric names names only columns a run's metrics.csv has, and every
name TRL logs; the TRL notes of docs/rlhf.md and the README say the missing-EOS penalty is on by default."""

import csv
import os
import re
from pathlib import Path

import pytest

from rlhf_assets import save_gpt2

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[2]
#: what TRL's PPOTrainer (1.12) logs every step
TRL_NAMES = ["objective/kl", "objective/entropy", "objective/non_score_reward", "objective/rlhf_reward",
             "objective/scores", "policy/approxkl_avg", "policy/clipfrac_avg", "loss/policy_avg", "loss/value_avg",
             "val/clipfrac_avg", "policy/entropy_avg", "val/ratio", "val/ratio_var", "val/num_eos_tokens", "lr", "episode"]


def trl_table() -> dict:
    """{TRL name: [Proxima columns]} from the table under docs/rlhf.md's "TRL's metric names"."""
    text = (ROOT / "docs" / "rlhf.md").read_text()
    section = text.split("### TRL's metric names", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    table = {}
    for row in rows:
        trl, proxima = row.split("|")[1:3]
        table[trl.strip().strip("`")] = re.findall(r"`([^`]+)`", proxima)
    return table


@pytest.fixture(scope="module")
def header(tmp_path_factory):
    """The header of a 1-step run's metrics.csv (PPO with a value model: every column the table can name)."""
    from proxima.rlhf import RLHFConfig, train_rlhf

    folder = tmp_path_factory.mktemp("trl_names")
    save_gpt2(folder / "model")
    (folder / "prompts.txt").write_text("the movie was\nthe food was\n")
    run = train_rlhf(RLHFConfig(policy=str(folder / "model"), prompts=str(folder / "prompts.txt"),
                                reward="proxima.rlhf.demo:keyword_sentiment", batch_size=2, num_minibatches=1,
                                update_epochs=1, max_new_tokens=2, steps=1, print_every=0, sample_every=0,
                                checkpoint_every=0, plot=False, run_dir=str(folder / "run")))
    with open(Path(run) / "metrics.csv", newline="") as f:
        return next(csv.reader(f))


def test_the_table_names_every_trl_metric_once():
    assert sorted(trl_table()) == sorted(TRL_NAMES)


def test_every_proxima_column_the_table_names_is_in_a_runs_metrics_csv(header):
    named = {column for columns in trl_table().values() for column in columns if "/" in column or column == "step"}
    assert named, "the table names no Proxima column"
    assert sorted(named - set(header)) == []


def test_trl_names_without_a_counterpart_say_so():
    table = trl_table()
    assert table["val/ratio_var"] == [] and table["episode"] == ["step"]


def test_the_missing_eos_penalty_default_is_said_where_a_trl_user_looks():
    rlhf = (ROOT / "docs" / "rlhf.md").read_text()
    coming = rlhf.split("## Coming from TRL", 1)[1].split("\n## ", 1)[0]
    assert "`--missing-eos-penalty` defaults to 1.0" in coming and "`--missing-eos-penalty 0`" in coming
    readme = (ROOT / "README.md").read_text().split("## RLHF", 1)[1].split("\n## ", 1)[0]
    assert "`--missing-eos-penalty` defaults to 1.0" in readme and "`--missing-eos-penalty 0`" in readme
