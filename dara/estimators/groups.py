"""Prompt groups as integer codes, and the group z-score every estimator builds on (docs/methods.md):
z(i,j) = (v(i,j) - mean_i) / (std_i + eps), std unbiased, verl's mean 0 / std 1 for a group of one, exact zeros
for a constant group; segment sums (`index_add_`) over [N, K] tensors, never a loop over groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

try:  # hash-based factorisation: faster than sorting the uid strings (np.unique); scripts/bench/estimators.py
    from pandas import factorize as _factorize
except ImportError:  # the library also runs with only torch and numpy
    _factorize = None

GROUP_EPS = 1e-6  # eps of the group z-score (METHODS.md)


@dataclass(frozen=True)
class Groups:
    """Group membership of N responses: `codes[j]` in [0, num_groups), `sizes[g]` responses in group g."""
    codes: torch.Tensor  # [N] int64
    sizes: torch.Tensor  # [B] int64
    num_groups: int

    @property
    def num_responses(self) -> int:
        return int(self.codes.shape[0])

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """Per-group sums of `values` [N, ...] -> [B, ...]."""
        out = values.new_zeros((self.num_groups, *values.shape[1:]))
        return out.index_add_(0, self.codes, values)

    def gather(self, per_group: torch.Tensor) -> torch.Tensor:
        """Broadcast per-group values [B, ...] back to responses [N, ...]."""
        return per_group.index_select(0, self.codes)

    def reduce(self, values: torch.Tensor, op: str) -> torch.Tensor:
        """Per-group 'amax' / 'amin' of `values` [N, K] -> [B, K]."""
        index = self.codes.unsqueeze(-1).expand_as(values)
        out = values.new_zeros((self.num_groups, values.shape[1]))
        return out.scatter_reduce(0, index, values, reduce=op, include_self=False)


def group_codes(index: Sequence | np.ndarray | torch.Tensor, device: torch.device | str = "cpu") -> Groups:
    """Group ids (verl's uid strings, or ints) as dense integer codes, once per batch, in order of first
    appearance (sorted without pandas; no estimator depends on the order)."""
    if isinstance(index, torch.Tensor):
        if index.dtype.is_floating_point or index.dim() != 1:
            raise ValueError(f"index must be a 1-D tensor of integer group ids, got {index.dtype} {tuple(index.shape)}")
        uniques, codes = torch.unique(index.to(device), return_inverse=True)
        codes = codes.to(torch.int64)
        return Groups(codes=codes, sizes=torch.bincount(codes, minlength=len(uniques)), num_groups=len(uniques))
    ids = np.asarray(index)
    if ids.ndim != 1:
        raise ValueError(f"index must be a flat sequence of group ids, got shape {ids.shape}")
    if _factorize is not None:
        inverse, uniques = _factorize(ids, sort=False)  # hashes Python objects as they are
        if (inverse < 0).any():
            position = int(np.flatnonzero(inverse < 0)[0])
            raise ValueError(f"index has a missing group id (None or NaN) at response {position}")
    else:
        if ids.dtype.kind == "O":
            ids = ids.astype(str)  # np.unique sorts: object ids must be comparable, so as text
        uniques, inverse = np.unique(ids, return_inverse=True)
    inverse = np.ascontiguousarray(inverse, dtype=np.int64).reshape(-1)
    # Codes and sizes are built on the host and copied once: no device round trip for the group count.
    sizes = np.bincount(inverse, minlength=len(uniques))
    return Groups(codes=torch.from_numpy(inverse).to(device), sizes=torch.from_numpy(sizes).to(device),
                  num_groups=len(uniques))


def constant_groups(values: torch.Tensor, groups: Groups) -> torch.Tensor:
    """[B, K] bool: the group has >= 2 responses and all of them score the same on that channel."""
    spread = groups.reduce(values, "amax") - groups.reduce(values, "amin")
    return (spread == 0) & (groups.sizes.unsqueeze(-1) > 1)


def group_mean_std(values: torch.Tensor, groups: Groups, ddof: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-group mean and std ([B, K] each) with `ddof` (1 = unbiased, 0 = population); two passes so the
    variance never goes negative by cancellation; std 0 for a group too small for the ddof (callers set their
    convention)."""
    n = groups.sizes.to(values.dtype).unsqueeze(-1)
    mean = groups.sum(values) / n
    deviation = values - groups.gather(mean)
    var = groups.sum(deviation * deviation) / (n - ddof).clamp(min=1)
    return mean, var.sqrt()


def group_zscore(values: torch.Tensor, groups: Groups, eps: float = GROUP_EPS) -> torch.Tensor:
    """Per-reward advantage A_k(i,j): the group z-score of each column of `values` [N, K]. Size-1 groups use
    mean 0 and std 1 (verl's GRPO convention); constant groups give exactly 0."""
    mean, std = group_mean_std(values, groups, ddof=1)
    single = (groups.sizes == 1).unsqueeze(-1)
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    z = (values - groups.gather(mean)) / (groups.gather(std) + eps)
    return z.masked_fill(groups.gather(constant_groups(values, groups)), 0.0)
