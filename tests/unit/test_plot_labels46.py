"""Session 46's fresh-eyes review: a run that does not anneal has no total_timesteps in its setting (any total
groups), and its legend label said total_timesteps=(unset), though the run set one."""

from __future__ import annotations

from cli_helpers import fake_run_dir
from proxima.cli import main
from tests.unit.test_plot46 import _axes, _labels


def test_a_run_without_annealing_is_not_labelled_with_an_unset_total(tmp_path, drawn):
    s1 = fake_run_dir(tmp_path, "s1", anneal_lr=True, total_timesteps=2048)
    s2 = fake_run_dir(tmp_path, "s2", anneal_lr=False, total_timesteps=2048)
    assert main(["plot", str(s1), str(s2), "--out", str(tmp_path / "c.png")]) == 0
    (ax,) = _axes(drawn[-1])
    labels = _labels(ax)
    assert labels == ["anneal_lr=true, total_timesteps=2048", "anneal_lr=false"]  # was 'total_timesteps=(unset)'

