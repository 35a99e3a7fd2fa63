"""Review 29: an inf in metrics.csv was dropped from the drawn curve without a word (the report names it)."""

from __future__ import annotations

import numpy as np

from proxima.plot import load_curve


def test_an_inf_value_is_left_out_of_the_curve_with_a_note(tmp_path, capsys):
    (tmp_path / "metrics.csv").write_text("global_step,time,charts/episodic_return\n"
                                          "128,1.0,10.0\n256,2.0,inf\n384,3.0,-inf\n512,4.0,30.0\n")
    xs, ys = load_curve(tmp_path, "charts/episodic_return")  # named: the default's fallback would add its note
    assert xs.tolist() == [128.0, 512.0] and np.allclose(ys, [10.0, 30.0])
    err = capsys.readouterr().err
    assert err == (f"proxima: note: {tmp_path / 'metrics.csv'}: charts/episodic_return is +inf at global_step 256 "
                   "(and 1 more); left out of the curve\n"), err


def test_finite_curves_say_nothing(tmp_path, capsys):
    (tmp_path / "metrics.csv").write_text("global_step,time,charts/episodic_return\n128,1.0,10.0\n256,2.0,\n")
    xs, _ = load_curve(tmp_path, "charts/episodic_return")
    assert xs.tolist() == [128.0] and capsys.readouterr().err == ""
