"""Review 45 (a statistician's, of the comparison of settings and populations): each X is tested against
Y both ways, so a complete separation reads the same whichever of the two is Y, and a p of the other
direction is never printed as the evidence; a (population, setting) row is named ``p3 (seeds only)``
or ``p3: lr=0.008``."""

from __future__ import annotations

import numpy as np

from proxima import population_report as pr

WEAK = [1.0, 2.0, 3.0, 4.0, 5.0]
STRONG = [100.0, 101.0, 102.0, 103.0, 104.0]


def _row(returns: list, settings: dict | None = None) -> dict:
    """A table row as summarize_settings gives it, of eval returns ``returns``, no member left out."""
    a = np.asarray(returns, dtype=np.float64)
    return {"settings": settings or {}, "returns": list(returns), "kind": "eval", "iqm": pr.iqm(a), "n": len(returns),
            "members": len(returns), "left_out": [], "diverged": [], "sources": {"eval": len(returns)}}


def test_a_complete_separation_is_told_apart_whichever_side_is_y():
    # Y the weak one: the test that Y scores higher gives p = 1; the one that X does, 1/252 (5 vs 5, all apart)
    up = pr.compare_rows(_row(STRONG), _row(WEAK))
    assert (up["better"], up["direction"], up["perm_p"]) == ("X", "X > Y", 1 / 252)
    down = pr.compare_rows(_row(WEAK), _row(STRONG))
    assert (down["better"], down["direction"], down["perm_p"]) == ("Y", "Y > X", 1 / 252)
    assert pr.told_apart(up, pr.claim_pairs(2)) and pr.told_apart(down, pr.claim_pairs(2))


def test_the_verdict_says_x_is_better_than_y_with_the_p_of_that_direction():
    line = pr.verdict("weak (seeds only)", [("strong (seeds only)", pr.compare_rows(_row(STRONG), _row(WEAK)))],
                      "the first population's highest IQM", 2)
    assert line == ("Y = weak (seeds only): the first population's highest IQM; strong (seeds only) is better than Y "
                    f"(P(X > Y) 1.00, p = 0.004, at most 0.05/2). ({pr.CLAIM_METHOD}.)")
    line = pr.verdict("strong (seeds only)", [("weak (seeds only)", pr.compare_rows(_row(WEAK), _row(STRONG)))],
                      "the first population's highest IQM", 2)
    assert line == ("Y = strong (seeds only): the first population's highest IQM, and better than every other setting "
                    f"compared at these seeds (weak (seeds only): p = 0.004, each at most 0.05/2). ({pr.CLAIM_METHOD}.)")


def test_a_pair_told_apart_neither_way_gives_the_smaller_one_sided_p():
    x, y = [10.0, 20.0, 30.0, 41.0, 50.0], [12.0, 22.0, 28.0, 40.0, 49.0]
    c = pr.compare_rows(_row(y), _row(x))
    p_y, p_x = pr.permutation_p(y, x), pr.permutation_p(x, y)
    assert c["better"] is None and c["perm_p"] == min(p_y, p_x) > 0.05 / 2
    assert c["direction"] == ("Y > X" if p_y <= p_x else "X > Y")
    # all returns equal: neither way, p = 1, and more seeds cannot help
    tied = pr.compare_rows(_row([500.0] * 5), _row([500.0] * 5))
    assert (tied["better"], tied["perm_p"]) == (None, 1.0)
    line = pr.verdict("A (seeds only)", [("B (seeds only)", tied)], settings=2)
    assert "not distinguishable from B (seeds only) (P(X > Y) 0.50, p = 1, above 0.05/2) at these seeds." in line
    assert "The settings' returns are identical, which more seeds cannot tell apart." in line


def test_claim_direction_reads_the_two_one_sided_p_values_at_the_corrected_level():
    assert pr.claim_direction(0.004, 0.999, 2) == ("Y", "Y > X", 0.004)
    assert pr.claim_direction(0.999, 0.004, 2) == ("X", "X > Y", 0.004)
    assert pr.claim_direction(0.03, 0.98, 2) == (None, "Y > X", 0.03)  # above 0.05/2: the smaller p, not told apart
    assert pr.claim_direction(0.98, 0.03, 2) == (None, "X > Y", 0.03)


def test_a_setting_of_lower_iqm_that_wins_most_pairs_is_better_than_the_best():
    """Y's 8 highest of 30 returns are huge, one of them inside its IQM: Y's IQM (638) is the highest, yet
    X (100-129) beats 22 of Y's 30 members, p = 0.00081 that X scores higher (the docs' example)."""
    y = [float(i) for i in range(22)] + [10000.0 + i for i in range(8)]
    x = [100.0 + i for i in range(30)]
    rows = [_row(y, {"lr": 0.1}), _row(x, {"lr": 0.3})]
    comparison = pr.settings_comparison(rows)
    assert comparison["best"] == 0
    assert comparison["verdict"] == ("Y = lr=0.1: the highest IQM; lr=0.3 is better than Y (P(X > Y) 0.73, p = 0.00081, "
                                     f"at most 0.05/2). ({pr.CLAIM_METHOD}.)")
    (_, _, c), = comparison["compared"]
    assert pr._compare_json(c) == {"p_improvement": 22 / 30, "p_improvement_ci": list(c["ci"]), "few": False,
                                   "permutation_p": pr.permutation_p(y, x), "direction": "X > Y", "better": "X",
                                   "not_compared": None}


def test_a_row_is_named_population_colon_setting_or_population_seeds_only():
    assert pr.row_label("p3", {}) == "p3 (seeds only)"
    assert pr.row_label("p3", {"lr": 0.008}) == "p3: lr=0.008"
    comparison = pr.populations_comparison(["p3", "p10"], [[_row(STRONG)], [_row(WEAK), _row(WEAK, {"lr": 0.008})]])
    assert comparison["reference"] == "p3 (seeds only)"
    assert comparison["labels"] == ["p3 (seeds only)", "p10 (seeds only)", "p10: lr=0.008"]
    assert comparison["verdict"].startswith("Y = p3 (seeds only): the first population's highest IQM, and better than "
                                            "every other setting compared at these seeds (p10 (seeds only): p = 0.004, "
                                            "p10: lr=0.008: p = 0.004, each at most 0.05/6).")


def test_after_an_x_better_than_y_clause_ys_own_claims_name_y():
    """One row beats Y and Y beats another: 'Y is better than lo', never a bare 'better than lo' that reads
    as hi's claim over lo, which was never tested."""
    mid = [50.0, 51.0, 52.0, 53.0, 54.0]
    line = pr.verdict("A (seeds only)", [("hi", pr.compare_rows(_row(STRONG), _row(mid))),
                                         ("lo", pr.compare_rows(_row(WEAK), _row(mid)))], "the highest IQM", 3)
    assert "hi is better than Y (P(X > Y) 1.00" in line and "; Y is better than lo (p = 0.004)" in line, line
    assert "; better than lo" not in line
