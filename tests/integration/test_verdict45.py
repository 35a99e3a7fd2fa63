"""Review 45 (a statistician's): ``proxima report A B --out F.md`` tests each row against Y both ways, so
`report weak strong` and `report strong weak` reach one conclusion; its last section says how the
populations differ (the config fields whose values differ, each one's command); rows are named
``p3 (seeds only)`` / ``p3: lr=0.008``. Hand-made populations: nothing is trained."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from proxima import population_report as pr
from tests.cli_helpers import run_main
from tests.integration import test_review34_compare as cmp

WEAK = [1.0, 2.0, 3.0, 4.0, 5.0]
STRONG = [100.0, 101.0, 102.0, 103.0, 104.0]


def _verdict(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("Y = "))


def _report(capsys, tmp_path: Path, *pops: Path) -> tuple:
    """(report.md's text, its --json) of ``proxima report POPS... --out``, exit 0."""
    stem = "_".join(p.name for p in pops)
    md, js = tmp_path / f"{stem}.md", tmp_path / f"{stem}.json"
    code, _, err = run_main(["report", *map(str, pops), "--out", str(md), "--json", str(js), "--episodes", "0"], capsys)
    assert code == 0, err
    return md.read_text(), json.loads(js.read_text())


def _with_config(run: Path, command: list | None = None, **fields) -> Path:
    """Record ``fields`` in every member's config.yaml and ``command`` in population.json, as train does."""
    doc = json.loads((run / "population.json").read_text())
    for e in doc["member_dirs"]:
        path = run / e["dir"] / "config.yaml"
        path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), **fields}, sort_keys=False))
    if command is not None:
        doc["command"] = command
    (run / "population.json").write_text(json.dumps(doc))
    return run


def test_a_complete_separation_reads_the_same_in_both_argument_orders(tmp_path, capsys):
    weak = cmp._population(tmp_path / "weak", {None: WEAK})
    strong = cmp._population(tmp_path / "strong", {None: STRONG})
    text, doc = _report(capsys, tmp_path, weak, strong)
    # before: "not better than strong (...: it wins most pairs). Run more seeds to tell them apart.", permutation_p 1.0
    assert _verdict(text) == ("Y = weak (seeds only): the first population's highest IQM; strong (seeds only) is better "
                              f"than Y (P(X > Y) 1.00, p = 0.004, at most 0.05/2). ({pr.CLAIM_METHOD}.)")
    row = doc["rows"][1]
    assert (row["population"], row["permutation_p"], row["direction"], row["better"]) == ("strong", 1 / 252, "X > Y", "X")
    text, doc = _report(capsys, tmp_path, strong, weak)
    assert _verdict(text) == ("Y = strong (seeds only): the first population's highest IQM, and better than every other "
                              "setting compared at these seeds (weak (seeds only): p = 0.004, each at most 0.05/2). "
                              f"({pr.CLAIM_METHOD}.)")
    row = doc["rows"][1]
    assert (row["population"], row["permutation_p"], row["direction"], row["better"]) == ("weak", 1 / 252, "Y > X", "Y")
    assert "Run more seeds" not in text


def test_a_toss_up_stays_not_distinguishable_in_both_orders(tmp_path, capsys):
    x, y = [10.0, 20.0, 30.0, 41.0, 50.0], [12.0, 22.0, 28.0, 40.0, 49.0]  # IQMs 30.3 and 30.0
    a = cmp._population(tmp_path / "a", {None: x})
    b = cmp._population(tmp_path / "b", {None: y})
    p = min(pr.permutation_p(x, y), pr.permutation_p(y, x))
    for first, second, xs, ys in ((a, b, y, x), (b, a, x, y)):
        text, doc = _report(capsys, tmp_path, first, second)
        assert _verdict(text) == (f"Y = {first.name} (seeds only): the first population's highest IQM; not distinguishable "
                                  f"from {second.name} (seeds only) (P(X > Y) {pr.probability_of_improvement(xs, ys):.2f}, "
                                  f"p = {p:.2g}, above 0.05/2) at these seeds. Run more seeds to tell them apart. "
                                  f"({pr.CLAIM_METHOD}.)")
        assert (doc["rows"][1]["permutation_p"], doc["rows"][1]["better"]) == (p, None)


def test_the_report_says_which_config_fields_and_commands_differ(tmp_path, capsys):
    p3 = _with_config(cmp._population(tmp_path / "p3", {None: WEAK}), ["proxima", "train", "CartPole-v1", "--num-envs", "2"],
                      num_envs=2, hidden_sizes=[64, 64], gamma=0.99)
    p10 = _with_config(cmp._population(tmp_path / "p10", {0.008: STRONG, 0.001: WEAK}), None,
                       num_envs=4, hidden_sizes=[32, 32], gamma=0.99)
    doc = json.loads((p10 / "population.json").read_text())
    (p10 / "population.json").write_text(json.dumps({**doc, "sweep": {"lr": [0.008, 0.001]}}))
    _with_config(p3, lr=0.00025)  # lr not swept in p3: its shared value against p10's sweep
    text, _ = _report(capsys, tmp_path, p3, p10)
    section = text[text.index("## How they differ"):].splitlines()
    table = [line for line in section if line.startswith("| ")]
    # gamma and env_id are shared, the seed is each member's own: none is a difference
    assert table == ["| field | p3 | p10 |", "| num_envs | 2 | 4 |", "| hidden_sizes | 64, 64 | 32, 32 |",
                     "| lr | 0.00025 | swept |"]
    assert "- p3: `proxima train CartPole-v1 --num-envs 2`" in section
    assert "- p10: command not recorded in population.json" in section
    # the labels: one colon for a setting, none for seeds only
    assert _verdict(text).startswith("Y = p3 (seeds only): the first population's highest IQM; p10: lr=0.008 is better "
                                     "than Y (P(X > Y) 1.00, p = 0.004, at most 0.05/6); Y is not distinguishable from "
                                     f"p10: lr=0.001 (P(X > Y) 0.50, p = {pr.permutation_p(WEAK, WEAK):.2g}, above "
                                     "0.05/6) at these seeds.")
    assert ": (seeds only)" not in text


def test_populations_of_one_config_say_nothing_differs(tmp_path, capsys):
    a = cmp._population(tmp_path / "a", {None: WEAK})
    b = cmp._population(tmp_path / "b", {None: STRONG})
    text, _ = _report(capsys, tmp_path, a, b)
    assert ("No config field differs between the populations (their members' `config.yaml`, less the seed, `run_dir` and "
            "swept fields).") in text
