"""Statistics over the valid (response) tokens of a padded batch.

``mask`` is a bool tensor of the same shape as ``x``; padded positions never enter a statistic,
even when they hold NaN or inf (``torch.where``, not a multiply by the mask).
"""

from __future__ import annotations

from typing import Optional

import torch


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    """Sum of ``x`` where ``mask``; over all elements, or along ``dim``."""
    x = torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))
    return x.sum() if dim is None else x.sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
    """Mean of ``x`` over the masked elements (0 where nothing is masked in)."""
    count = mask.sum() if dim is None else mask.sum(dim)
    return masked_sum(x, mask, dim) / count.clamp_min(1)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``x`` over all masked elements (Bessel-corrected when ``unbiased`` and n > 1)."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    if unbiased:
        n = mask.sum()
        var = torch.where(n > 1, var * n / (n - 1).clamp_min(1), var)
    return var


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over the masked elements; masked-out positions come back as 0.

    ``shift_mean=False`` keeps the mean (TRL whitens rewards that way, so their sign survives).
    """
    mean, var = masked_mean(x, mask), masked_var(x, mask)
    whitened = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(mask, whitened, torch.zeros((), dtype=x.dtype, device=x.device))
