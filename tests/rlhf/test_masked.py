"""Masked statistics: only response tokens count, padding never leaks (not even NaN)."""

import torch

from proxima.rlhf.masked import masked_mean, masked_sum, masked_var, masked_whiten

X = torch.tensor([[1.0, 2.0, 3.0, 100.0], [4.0, 5.0, -7.0, -9.0]])
MASK = torch.tensor([[True, True, True, False], [True, True, False, False]])
VALID = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])


def test_masked_mean_and_sum_ignore_padding():
    assert masked_mean(X, MASK).item() == 3.0
    assert masked_sum(X, MASK).item() == 15.0
    torch.testing.assert_close(masked_mean(X, MASK, dim=1), torch.tensor([2.0, 4.5]))
    torch.testing.assert_close(masked_sum(X, MASK, dim=1), torch.tensor([6.0, 9.0]))


def test_masked_var_is_the_variance_of_the_valid_entries():
    torch.testing.assert_close(masked_var(X, MASK), VALID.var())  # unbiased by default
    torch.testing.assert_close(masked_var(X, MASK, unbiased=False), VALID.var(unbiased=False))


def test_masked_whiten_gives_zero_mean_unit_std_and_zero_padding():
    w = masked_whiten(X, MASK)
    torch.testing.assert_close(w[MASK], (VALID - VALID.mean()) / VALID.std(), rtol=1e-5, atol=1e-5)
    assert (w[~MASK] == 0).all()


def test_masked_whiten_without_mean_shift_keeps_the_mean():
    w = masked_whiten(X, MASK, shift_mean=False)
    torch.testing.assert_close(w[MASK].mean(), VALID.mean(), rtol=1e-5, atol=1e-5)


def test_nan_and_inf_in_padding_do_not_leak():
    x = X.clone()
    x[0, 3], x[1, 3] = float("nan"), float("inf")
    assert torch.isfinite(masked_mean(x, MASK)) and torch.isfinite(masked_var(x, MASK))
    assert torch.isfinite(masked_whiten(x, MASK)).all()


def test_empty_mask_gives_zero_not_nan():
    none = torch.zeros_like(MASK)
    assert masked_mean(X, none).item() == 0.0


def test_masked_whiten_without_mean_shift_has_unit_std_over_the_valid_entries():
    """shift_mean=False: (x - mean) / std + mean, so the valid entries keep their mean and have std 1
    (padding still 0). Catches a shift_mean=False that returns x unscaled (its mean is right too)."""
    w = masked_whiten(X, MASK, shift_mean=False)
    torch.testing.assert_close(w[MASK], (VALID - VALID.mean()) / VALID.std() + VALID.mean(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w[MASK].std(), torch.tensor(1.0), rtol=1e-5, atol=1e-5)
    assert (w[~MASK] == 0).all()
