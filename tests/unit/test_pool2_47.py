"""Pools, second round: a pool whose every member diverged is said once, its first divergence named as the report
names members (``A2/m001-seed7``); report's curve of a pool is plot's pooled panel (one panel, the union of members);
`proxima plot` refuses a config.yaml over report's cap with report's line, before parsing it; `train --seeds` into a
directory holding a single run names what works (another --run-dir, --overwrite), not a --resume auto that refuses
it; a pooled report's shared config shows ``backend: auto`` with the backend it built."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from proxima import report
from proxima.population_report import every_member_diverged, iqm, read_pool
from tests.cli_helpers import error_line, one_error_line, run_main, snapshot, tiny_cartpole_run
from tests.unit.test_popsmall47 import _padded
from tests.unit.test_report_pool46 import ADDED, FIRST, _population

METRIC = "charts/episodic_return"  # what _population's metrics.csv holds
MIB = 1 << 20  # report.CONFIG_MAX_BYTES
TAIL = "a run writes there; the run directory was damaged or edited"


def _all_diverged(run: Path, returns: dict) -> Path:
    """A population of ``returns``'s seeds whose every member diverged at iteration 3 (_population's record)."""
    return _population(run, returns, diverged=tuple(f"m{i:03d}-seed{s}" for i, s in enumerate(returns)))


def _diverged_first(run: Path, member: str, iteration: int, reason: str) -> None:
    """population.json of ``run`` records ``member`` as diverged at ``iteration`` for ``reason``."""
    doc = json.loads((run / "population.json").read_text())
    for e in doc["member_dirs"]:
        if e["dir"] == member:
            e["diverged"] = {"iteration": iteration, "reason": reason}
    (run / "population.json").write_text(json.dumps(doc))


@pytest.fixture
def all_diverged(tmp_path):
    """A and A2, every member diverged; A2's m001-seed7 first (iteration 1, non-finite loss)."""
    a, a2 = _all_diverged(tmp_path / "A", FIRST), _all_diverged(tmp_path / "A2", ADDED)
    _diverged_first(a2, "m001-seed7", 1, "non-finite loss")
    return a, a2


def _every_line(a: Path, a2: Path) -> str:
    return (f"every member diverged (each one's iteration and cause: {a / 'population.json'}, {a2 / 'population.json'}; "
            "the first, A2/m001-seed7, at iteration 1: non-finite loss)")


# --- 1. a pool whose every member diverged ----------------------------------------------------------------------
def test_every_member_diverged_of_a_pool_matches_its_members_by_their_pooled_names(all_diverged):
    a, a2 = all_diverged
    pool = read_pool([a, a2], ["A", "A2"])
    assert pool.settings[0].diverged  # keyed A/m000-seed1 ..., not m000-seed1
    assert every_member_diverged(pool, pool.settings) == _every_line(a, a2)


def test_a_pool_with_a_member_left_is_not_every_member_diverged(tmp_path):
    a, a2 = _all_diverged(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED, diverged=("m000-seed6",))
    pool = read_pool([a, a2], ["A", "A2"])
    assert every_member_diverged(pool, pool.settings) is None


def test_report_of_a_pool_whose_every_member_diverged_says_it_once_naming_the_first_as_a2_m001(all_diverged, tmp_path,
                                                                                              capsys):
    a, a2 = all_diverged
    out = tmp_path / "p.md"
    code, stdout, err = run_main(["report", f"{a}+{a2}", "--out", str(out)], capsys)
    assert code == 0, err
    assert err == ""  # no 'skipping A' note per population: the pool's curve is one, and said in report.md
    text = out.read_text()
    assert f"Final return per member: none, as {_every_line(a, a2)}." in text
    assert text.count("every member diverged (") == 1
    assert "No learning curve: every member diverged, and a diverged member is left out" in text


def test_plot_of_a_pool_whose_every_member_diverged_names_both_populations_and_the_first(all_diverged, tmp_path,
                                                                                        capsys):
    a, a2 = all_diverged
    code, _, err = run_main(["plot", f"{a}+{a2}", "--metric", METRIC, "--out", str(tmp_path / "p.png")], capsys)
    assert code == 2
    assert one_error_line(err, "proxima plot") == f"{a}+{a2}: no curve to draw: {_every_line(a, a2)}"
    assert not (tmp_path / "p.png").exists()


# --- 2. report's curve of a pool is plot's pooled panel --------------------------------------------------------------
def _panels(figure) -> list:
    return [ax for ax in figure.axes if ax.get_lines()]


def _legend(ax) -> list:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_a_pooled_reports_curve_is_one_panel_over_the_union_of_members_and_its_caption_says_so(tmp_path, capsys, drawn):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    out = tmp_path / "p.md"
    code, _, err = run_main(["report", f"{a}+{a2}", "--out", str(out), "--metric", METRIC], capsys)
    assert code == 0, err
    (ax,) = _panels(drawn[-1])
    assert ax.get_title() == "Fake-v0: A+A2, 2 populations pooled"
    assert "IQM, 95% CI (10 members)" in _legend(ax)
    union = np.array(list(FIRST.values()) + list(ADDED.values()))
    assert ax.get_lines()[0].get_ydata()[-1] == pytest.approx(iqm(union))  # neither A's IQM nor A2's
    text = out.read_text()
    assert ("A pool's curves are drawn as `proxima plot A+A2` draws them: one panel per pool, each setting's curve and "
            "band over the union of its populations' members, as the table above pools them.") in text
    assert "drawn per population" not in text


def test_a_pool_beside_a_population_is_one_pooled_curve_beside_the_populations(tmp_path, capsys, drawn):
    a, a2 = _population(tmp_path / "A", FIRST), _population(tmp_path / "A2", ADDED)
    b = _population(tmp_path / "B", {s: v + 1 for s, v in {**FIRST, **ADDED}.items()})
    code, _, err = run_main(["report", f"{a}+{a2}", str(b), "--out", str(tmp_path / "c.md"), "--metric", METRIC], capsys)
    assert code == 0, err
    (ax,) = _panels(drawn[-1])  # one env: the pool and B overlaid in one panel, as `proxima plot A+A2 B` draws them
    assert ax.get_title() == "Fake-v0"
    assert [t.split(": ")[0] for t in _legend(ax)] == ["A+A2, 2 populations pooled", "B"]


def test_a_pool_of_names_holding_a_plus_draws_its_pooled_panel_not_a_split_of_its_spelling(tmp_path, capsys, drawn):
    a, a2 = _population(tmp_path / "a+b", FIRST), _population(tmp_path / "a+b-seeds6-10", ADDED)
    code, _, err = run_main(["report", str(a), str(a2), "--pool", "--out", str(tmp_path / "p.md"), "--metric", METRIC],
                            capsys)
    assert code == 0, err
    (ax,) = _panels(drawn[-1])
    assert ax.get_title() == "Fake-v0: a+b + a+b-seeds6-10, 2 populations pooled"
    assert "IQM, 95% CI (10 members)" in _legend(ax)


# --- 3. plot applies report's config.yaml cap -----------------------------------------------------------------------
# parsed: tests/conftest.py's fixture; _padded: test_popsmall47's


def test_plot_refuses_a_members_config_over_one_mib_with_reports_line_before_parsing_it(tmp_path, capsys, parsed):
    a = _population(tmp_path / "A", FIRST)
    big = _padded(a / "m000-seed1" / "config.yaml", MIB + 1)
    code, _, err = run_main(["report", str(a)], capsys)
    line = one_error_line(err, "proxima report")
    assert code == 2 and line == f"{big}: 1,048,577 bytes, more than the 1,048,576 {TAIL}"
    for args in ([str(a)], [str(a / "m000-seed1")], [str(tmp_path)]):  # a population, a member, a folder of runs
        code, _, err = run_main(["plot", *args, "--metric", METRIC, "--out", str(tmp_path / "p.png")], capsys)
        assert code == 2 and one_error_line(err, "proxima plot") == line, args
    assert max(parsed, default=0) < 10_000  # the small configs at most: the large one never
    assert not (tmp_path / "p.png").exists()


def test_plots_cap_is_reports_one_constant(tmp_path, capsys, monkeypatch):
    a = _population(tmp_path / "A", FIRST)
    path = a / "m000-seed1" / "config.yaml"
    monkeypatch.setattr(report, "CONFIG_MAX_BYTES", 4096)
    _padded(path, 4096)
    code, _, err = run_main(["plot", str(path.parent), "--metric", METRIC, "--out", str(tmp_path / "p.png")], capsys)
    assert code == 0, err
    _padded(path, 4097)
    code, _, err = run_main(["plot", str(path.parent), "--metric", METRIC, "--out", str(tmp_path / "q.png")], capsys)
    assert code == 2 and one_error_line(err, "proxima plot") == f"{path}: 4,097 bytes, more than the 4,096 {TAIL}"


# --- 4. train --seeds into a directory holding a single run ------------------------------------------------------
ARGS = ["--total-timesteps", "32", "--eval-episodes", "0", "--quiet", "--num-envs", "2", "--num-steps", "16",
        "--num-minibatches", "2", "--update-epochs", "1", "--threads", "1", "--no-progress"]


def test_train_seeds_into_a_single_run_names_another_run_dir_or_overwrite_and_overwrite_works(tmp_path_factory,
                                                                                             capsys):
    run = tiny_cartpole_run(tmp_path_factory, "single47")
    before = snapshot(run)
    listed = ", ".join(sorted(p.name for p in run.iterdir())[:4])
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(run), *ARGS], capsys)
    assert error_line(code, err) == (
        f"proxima train: error: {run} is not empty ({listed}...): it holds a single run, which --resume auto does not "
        f"continue as a population (`proxima resume {run}` continues it alone); choose another --run-dir for the "
        "population, or start over with --overwrite (the old directory is moved aside)")
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(run), "--resume", "auto", *ARGS],
                            capsys)
    assert error_line(code, err).endswith("drop --seeds/--sweep to resume it, or choose another --run-dir for the "
                                          "population (or start over there with --overwrite in place of --resume auto: "
                                          "the run is moved aside)")
    assert snapshot(run) == before
    # the advice works: --overwrite trains the population there, the run moved aside
    code, _, err = run_main(["train", "CartPole-v1", "--seeds", "1-2", "--run-dir", str(run), "--overwrite", *ARGS],
                            capsys)
    assert code == 0, err
    assert sorted(p.name for p in run.glob("m*")) == ["m000-seed1", "m001-seed2"]
    (moved,) = run.parent.glob("run.old-*")
    assert snapshot(moved) == before


# --- 5. a pool's shared config shows backend auto with the backend it built ---------------------------------------
def _built(run: Path, backend: str) -> Path:
    for member in run.glob("m*"):
        (member / "meta.json").write_text(json.dumps({"kind": "ppo", "env_backend": backend}))
    return run


def test_a_pools_shared_config_shows_backend_auto_with_the_backend_built_and_notes_the_other_spelling(tmp_path, capsys):
    a = _built(_population(tmp_path / "A", FIRST, backend="auto"), "native")
    a2 = _built(_population(tmp_path / "A2", ADDED, backend="native"), "native")
    out = tmp_path / "p.md"
    code, _, err = run_main(["report", f"{a}+{a2}", "--out", str(out)], capsys)
    assert code == 0, err
    text = out.read_text()
    assert "| backend | auto (native) |" in text
    assert ("- note: backend: auto in A, native in A2; each member built native (its `meta.json` `env_backend`), "
            "one setting.") in text
    code, _, err = run_main(["report", str(a), "--out", str(tmp_path / "a.md")], capsys)
    assert code == 0, err
    assert "| backend | auto |" in (tmp_path / "a.md").read_text()  # one population's report: its config as written
