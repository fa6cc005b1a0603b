"""Per-channel weights that adaptive estimators recompute on every batch (METHODS.md).

Each function returns a float [K] tensor, one weight per reward channel.
"""

from __future__ import annotations

import torch

DEFAULT_W_MAX = 5.0
SAW_EPS = 1e-8
DEAD_CHANNEL_WEIGHTS = ("1", "w_max")  # a dead channel's weight: density_weights' `dead`


def density_weights(density: torch.Tensor, w_max: float = DEFAULT_W_MAX, dead: str = "1") -> torch.Tensor:
    """DARA: w_k = min(w_max, sqrt(pi_ref / pi_k)) with pi_ref = max_k pi_k; where pi_k = 0, w_k = 1
    (`dead="1"`, the paper's text) or w_max (`dead="w_max"`, the authors' code).

    Uncapped, every active channel's weighted energy w_k^2 * E_k then equals B * pi_ref * (G - 1).
    """
    if w_max < 1:
        raise ValueError(f"w_max must be >= 1 (it caps an up-weighting), got {w_max}")
    if dead not in DEAD_CHANNEL_WEIGHTS:
        raise ValueError(f"dead must be one of {list(DEAD_CHANNEL_WEIGHTS)}, got {dead!r}")
    pi_ref = density.max()
    active = density > 0
    ratio = torch.where(active, pi_ref / density.clamp(min=torch.finfo(density.dtype).tiny), torch.ones_like(density))
    dead_weight = torch.full_like(density, 1.0 if dead == "1" else float(w_max))
    return torch.where(active, ratio.sqrt().clamp(max=w_max), dead_weight)


def saw_weights(scores: torch.Tensor, lower_bounds: torch.Tensor) -> torch.Tensor:
    """SAW: coefficient of variation of each reward over the batch, shifted by its known lower bound.

    CV_k = std_batch(r_k - r_min_k) / (|mean_batch(r_k - r_min_k)| + 1e-8), w_k = K * CV_k / sum CV.
    A channel constant over the batch gets 0; when every channel is constant, equal weights (1).
    """
    shifted = scores - lower_bounds
    num_channels = scores.shape[1]
    if scores.shape[0] < 2:
        return torch.ones(num_channels, dtype=scores.dtype, device=scores.device)
    cv = shifted.std(dim=0) / (shifted.mean(dim=0).abs() + SAW_EPS)
    constant = scores.amax(dim=0) == scores.amin(dim=0)
    cv = cv.masked_fill(constant, 0.0)
    total = cv.sum()
    if total <= 0:
        return torch.ones(num_channels, dtype=scores.dtype, device=scores.device)
    return num_channels * cv / total


def saturation_weights(scores: torch.Tensor, ranges: torch.Tensor, gamma: float = 0.5) -> torch.Tensor:
    """SA-MRPO: s_k = (mean_batch r_k - r_min_k) / (r_max_k - r_min_k); w_k = (1 - s_k)^gamma."""
    low, high = ranges[:, 0], ranges[:, 1]
    saturation = (scores.mean(dim=0) - low) / (high - low)
    # Rounding can push a mean a hair outside its range; the range itself was validated upstream.
    return (1.0 - saturation.clamp(0.0, 1.0)).pow(gamma)
