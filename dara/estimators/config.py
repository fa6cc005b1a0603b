"""`DaraAlgoConfig`: the estimator options of `compute_advantages`, typed, with one home for each default.

Its field names are `compute_advantages`' keyword names; in a training config it is the node
`algorithm.dara` (registered as the node's schema by `dara.config_checks`, so `--cfg job` shows every
default and an unknown key or a wrong type fails at composition). The channel names are not a field:
they are `algorithm.reward_channels`, which the reward spec of the task declares. `reward_ranges` maps a
channel's name to its [min, max]: in training every channel's range comes from the reward's declaration,
and `algorithm.dara.reward_ranges.<channel>=[min,max]` overrides one.

An instance validates itself (`__post_init__`); `check_for(estimator, channels)` adds what depends on
the estimator and the number of channels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Dict, List, Optional  # noqa: UP035 - OmegaConf's structured-config typing

from .groups import GROUP_EPS
from .methods import ESTIMATORS
from .normalization import BATCH_NORM_MODES
from .weights import DEFAULT_W_MAX

FORMS = ("sym", "asym")
QUERY_WEIGHT_ORDERS = ("before_whiten", "after_whiten")
DEFAULT_BATCH_NORM = "token"  # for the estimators that take any mode
ESTIMATORS_NEEDING_RANGES = ("saw", "sa_mrpo")  # they shift or scale by each channel's range


@dataclass
class DaraAlgoConfig:
    """Estimator options (see `compute_advantages`). None means "not used" (weights: 1 each; batch_norm:
    the estimator's own, `token` where it takes any); reward_ranges holds the channels that have a range."""

    weights: Optional[List[float]] = None  # noqa: UP006, UP045 - OmegaConf schema types
    w_max: float = DEFAULT_W_MAX
    batch_norm: Optional[str] = None  # noqa: UP045
    reward_ranges: Dict[str, List[float]] = field(default_factory=dict)  # noqa: UP006
    tau: float = 0.8
    gamma: float = 0.5
    form: str = "sym"
    query_weight: str = "before_whiten"
    # The eps added to the std of the group z-score and of the response-level batch normalisation
    # (METHODS.md: 1e-6; TRL's GRPOTrainer uses 1e-4, which dara.trl's equality test with TRL sets).
    eps: float = GROUP_EPS

    def __post_init__(self) -> None:
        if self.weights is not None:
            self.weights = [float(w) for w in self.weights]
            if not all(math.isfinite(w) for w in self.weights):
                raise ValueError(f"weights must be finite, got {self.weights}")
        self.w_max, self.tau, self.gamma = float(self.w_max), float(self.tau), float(self.gamma)
        self.eps = float(self.eps)
        if not (math.isfinite(self.eps) and self.eps > 0):
            raise ValueError(f"eps must be a finite number > 0 (added to a std), got {self.eps}")
        if not self.w_max >= 1:
            raise ValueError(f"w_max must be >= 1 (it caps an up-weighting), got {self.w_max}")
        if self.batch_norm is not None and self.batch_norm not in BATCH_NORM_MODES:
            raise ValueError(f"batch_norm must be one of {BATCH_NORM_MODES} or null, got {self.batch_norm!r}")
        self.reward_ranges = ranges_by_name(self.reward_ranges)
        if not 0 <= self.tau <= 1:
            raise ValueError(f"tau must be in [0, 1] (a |rho| threshold), got {self.tau}")
        if not self.gamma >= 0:
            raise ValueError(f"gamma must be >= 0, got {self.gamma}")
        if self.form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {self.form!r}")
        if self.query_weight not in QUERY_WEIGHT_ORDERS:
            raise ValueError(f"query_weight must be one of {QUERY_WEIGHT_ORDERS}, got {self.query_weight!r}")

    @classmethod
    def from_mapping(cls, mapping: Mapping | None) -> DaraAlgoConfig:
        """From a dict or DictConfig node; an unknown key is an error naming it and the known ones."""
        values = dict(mapping or {})
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"unknown option(s) {unknown}; known: {', '.join(known)}")
        return cls(**values)

    def check_for(self, estimator: str, channels: Sequence[str]) -> None:
        """What depends on the estimator and the channels: lengths, required options, batch_norm."""
        k = len(channels)
        if self.weights is not None and len(self.weights) != k:
            raise ValueError(f"weights has {len(self.weights)} entries for {k} reward channels {list(channels)}")
        if estimator == "static" and self.weights is None:
            raise ValueError("estimator 'static' needs fixed channel weights (weights=[...], e.g. [1, 5])")
        self.check_range_names(channels)
        missing = [name for name in channels if name not in self.reward_ranges]
        if estimator in ESTIMATORS_NEEDING_RANGES and missing:
            raise ValueError(f"estimator {estimator!r} needs reward_ranges: a [min, max] for every channel, "
                             f"missing {missing}")
        self.resolved_batch_norm(estimator)

    def check_range_names(self, channels: Sequence[str]) -> None:
        """Every `reward_ranges` name is one of `channels` (a range for no channel is a misspelt name)."""
        unknown = [name for name in self.reward_ranges if name not in channels]
        if unknown:
            raise ValueError(f"reward_ranges names {unknown}, not among the reward channels {list(channels)}")

    def resolved_batch_norm(self, estimator: str) -> str:
        """The batch normalisation `estimator` applies under this config; a mode it does not define raises."""
        # A method whose definition fixes the normalisation (METHODS.md) lists its modes in the registry;
        # a `batch_norm` it does not define is rejected, never silently ignored.
        allowed = ESTIMATORS[estimator].batch_norms or BATCH_NORM_MODES
        if self.batch_norm is None:
            return allowed[0] if ESTIMATORS[estimator].batch_norms else DEFAULT_BATCH_NORM
        if self.batch_norm not in allowed:
            raise ValueError(f"estimator {estimator!r} does not take batch_norm={self.batch_norm!r}: its definition "
                             f"allows {list(allowed)} (leave batch_norm null for the estimator's own)")
        return self.batch_norm

    def options(self) -> dict:
        """`compute_advantages` keyword arguments (channel_names excepted); unset options are left out."""
        return {key: value for key, value in asdict(self).items() if value is not None and value != {}}


def ranges_by_name(ranges: Mapping | None) -> dict[str, list[float]]:
    """{channel: [min, max]} with float bounds, min < max; a list (the old positional form) or a bad pair is
    an error naming it."""
    if ranges is None:
        return {}
    if not isinstance(ranges, Mapping):
        raise ValueError(f"reward_ranges maps channel names to [min, max] (e.g. {{'format': [0, 1]}}), "
                         f"got {type(ranges).__name__} {ranges!r}")
    out = {}
    for name, pair in ranges.items():
        try:
            low, high = (float(v) for v in pair)
        except (TypeError, ValueError):
            raise ValueError(f"reward_ranges[{name!r}] must be [min, max], got {pair!r}") from None
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValueError(f"reward_ranges[{name!r}] must be finite [min, max] with min < max, got {[low, high]}")
        out[str(name)] = [low, high]
    return out
