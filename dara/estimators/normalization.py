"""Batch normalisation of a per-response value S (docs/methods.md "Batch normalisation of S").

`token`: verl's masked whitening over every valid token, computed from S and the response lengths (S is constant
within a response); `response`: (S - mean) / (std + eps) over responses; `none`: S. `keep` restricts the
statistics to some responses (GD2PO); the others come out as exactly 0.
"""

from __future__ import annotations

import torch

WHITEN_EPS = 1e-8  # verl's masked_whiten
RESPONSE_EPS = 1e-6
BATCH_NORM_MODES = ("token", "response", "none")


def token_whiten(values: torch.Tensor, lengths: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
    """Masked whitening of S broadcast over tokens, from S [N] and token counts [N]. Under two tokens the
    variance is undefined (verl raises): variance 0 here, and every value maps to exactly 0 (all tokens equal
    the mean)."""
    weights = lengths.to(values.dtype)
    if keep is not None:
        weights = weights * keep
    total = weights.sum()
    # Written without a host-side branch on `total`, so a GPU batch never waits for a sync here.
    mean = (weights * values).sum() / total.clamp(min=1)
    centred = values - mean
    var = (weights * centred * centred).sum() / (total - 1).clamp(min=1)
    out = centred * torch.rsqrt(var + WHITEN_EPS) * (total >= 2)
    return out if keep is None else out * keep


def response_standardize(values: torch.Tensor, keep: torch.Tensor | None = None,
                         eps: float = RESPONSE_EPS) -> torch.Tensor:
    """(S - mean) / (std + eps) over responses (unbiased std; a single response maps to 0)."""
    weights = torch.ones_like(values) if keep is None else keep.to(values.dtype)
    count = weights.sum()
    if count < 2:
        return torch.zeros_like(values)
    mean = (weights * values).sum() / count
    centred = values - mean
    std = ((weights * centred * centred).sum() / (count - 1)).sqrt()
    out = centred / (std + eps)
    return out if keep is None else out * weights


def batch_normalize(values: torch.Tensor, lengths: torch.Tensor, mode: str, keep: torch.Tensor | None = None,
                    eps: float = RESPONSE_EPS) -> torch.Tensor:
    """Apply one of BATCH_NORM_MODES to the per-response values [N]."""
    if mode == "token":
        return token_whiten(values, lengths, keep)
    if mode == "response":
        return response_standardize(values, keep, eps)
    if mode == "none":
        return values if keep is None else values * keep
    raise ValueError(f"unknown batch_norm {mode!r}; expected one of {BATCH_NORM_MODES}")
