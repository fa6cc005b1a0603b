"""`DaraAlgoConfig`: the estimator options of `compute_advantages`, typed, with one home for each default.

In a training config it is the node `algorithm.dara` (its schema, so `--cfg job` shows every default and an
unknown key or a wrong type fails at composition). The channel names are `algorithm.reward_channels`, not a field.
`FIELD_HELP` is also the help of TRL's `DaraGRPOConfig` fields.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List, Optional  # noqa: UP035 - OmegaConf's structured-config typing

from .groups import GROUP_EPS
from .normalization import BATCH_NORM_MODES
from .registry import get_estimator
from .weights import DEAD_CHANNEL_WEIGHTS, DEFAULT_W_MAX

FORMS = ("sym", "asym")
QUERY_WEIGHT_ORDERS = ("before_whiten", "after_whiten")
DEFAULT_BATCH_NORM = "token"  # for the estimators that take any mode
# Fields that are not keyword options of an estimator's formula (compute_advantages leaves them out).
NOT_KEYWORDS = ("estimator_module",)


def _help(text: str) -> dict:
    return {"help": text}


@dataclass
class DaraAlgoConfig:
    """Estimator options (see `compute_advantages`). None means "not used" (weights: 1 each; batch_norm:
    the estimator's own, `token` where it takes any); reward_ranges holds the channels that have a range."""
    weights: Optional[List[float]] = field(  # noqa: UP006, UP045 - OmegaConf schema types
        default=None, metadata=_help("Fixed prior weight per channel (1 each when unset); required for static."))
    w_max: float = field(default=DEFAULT_W_MAX, metadata=_help("Cap of DARA's density weights (>= 1)."))
    batch_norm: Optional[str] = field(  # noqa: UP045
        default=None, metadata=_help("Batch normalisation of the aggregated advantage: token, response or none; "
                                     "unset: the estimator's own (token where it takes any)."))
    reward_ranges: Dict[str, List[float]] = field(  # noqa: UP006
        default_factory=dict, metadata=_help("Per channel name its [min, max] score range (saw, sa_mrpo read "
                                             "them; a score outside a given range is an error)."))
    tau: float = field(default=0.8, metadata=_help("GD2PO-SNR's |rho| threshold, in [0, 1]."))
    gamma: float = field(default=0.5, metadata=_help("SA-MRPO's saturation exponent (>= 0)."))
    form: str = field(default="sym", metadata=_help("static: 'sym' or 'asym'."))
    query_weight: str = field(default="before_whiten",
                              metadata=_help("GD2PO: 'before_whiten' or 'after_whiten' (the DARA authors' runs)."))
    eps: float = field(default=GROUP_EPS, metadata=_help(
        "Added to the std of the group z-score and of response-level batch normalisation (the library's 1e-6; "
        "TRL's own advantages use 1e-4)."))
    rvpo_k: float = field(default=1.0, metadata=_help(
        "RVPO's risk coefficient k of its soft-min -(logsumexp(-k A) - log K) / k (finite, > 0)."))
    dead_channel_weight: str = field(default="1", metadata=_help(
        "The weight DARA applies (and logs) for a channel active in no group: '1' (the paper's text) or "
        "'w_max' (the authors' code); its advantage is 0 either way."))
    options: Dict[str, Any] = field(  # noqa: UP006
        default_factory=dict, metadata=_help("The options the estimator declares for itself "
                                             "(python -m dara.estimators list shows them)."))
    estimator_module: Optional[str] = field(  # noqa: UP045
        default=None, metadata=_help("A module of estimators of your own to load first: a .py file, an import "
                                     "path or pkg://package.module."))

    def __post_init__(self) -> None:
        if self.weights is not None:
            self.weights = [float(w) for w in self.weights]
        self.w_max, self.tau, self.gamma = float(self.w_max), float(self.tau), float(self.gamma)
        self.eps, self.rvpo_k = float(self.eps), float(self.rvpo_k)
        dead = self.dead_channel_weight  # a command line gives 1 or 1.0 for '1'
        numeric_one = isinstance(dead, int | float) and not isinstance(dead, bool) and float(dead) == 1.0
        self.dead_channel_weight = "1" if numeric_one else str(dead).strip()
        if self.estimator_module is not None:
            self.estimator_module = str(self.estimator_module)
        rules = (  # (holds, what the error says)
            (self.weights is None or all(map(math.isfinite, self.weights)), f"weights must be finite, got {self.weights}"),
            (self.dead_channel_weight in DEAD_CHANNEL_WEIGHTS, f"dead_channel_weight must be one of "
             f"{list(DEAD_CHANNEL_WEIGHTS)}, got {self.dead_channel_weight!r}"),
            (math.isfinite(self.rvpo_k) and self.rvpo_k > 0,
             f"rvpo_k must be a finite number > 0 (RVPO's risk coefficient), got {self.rvpo_k}"),
            (isinstance(self.options, Mapping),
             f"options maps an estimator's own option names to values, got {self.options!r}"),
            (math.isfinite(self.eps) and self.eps > 0, f"eps must be a finite number > 0 (added to a std), got {self.eps}"),
            (self.w_max >= 1, f"w_max must be >= 1 (it caps an up-weighting), got {self.w_max}"),
            (self.batch_norm in (None, *BATCH_NORM_MODES),
             f"batch_norm must be one of {BATCH_NORM_MODES} or null, got {self.batch_norm!r}"),
            (0 <= self.tau <= 1, f"tau must be in [0, 1] (a |rho| threshold), got {self.tau}"),
            (self.gamma >= 0, f"gamma must be >= 0, got {self.gamma}"),
            (self.form in FORMS, f"form must be one of {FORMS}, got {self.form!r}"),
            (self.query_weight in QUERY_WEIGHT_ORDERS,
             f"query_weight must be one of {QUERY_WEIGHT_ORDERS}, got {self.query_weight!r}"),
        )
        for holds, error in rules:
            if not holds:
                raise ValueError(error)
        self.options = {str(k): v for k, v in dict(self.options).items()}
        self.reward_ranges = ranges_by_name(self.reward_ranges)

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
        """What depends on the estimator and the channels: a registered name, lengths, required options, the
        estimator's own options, batch_norm."""
        registered = get_estimator(estimator)
        k = len(channels)
        if self.weights is not None and len(self.weights) != k:
            raise ValueError(f"weights has {len(self.weights)} entries for {k} reward channels {list(channels)}")
        if estimator == "static" and self.weights is None:
            raise ValueError("estimator 'static' needs fixed channel weights (weights=[...], e.g. [1, 5])")
        self.check_range_names(channels)
        missing = [name for name in channels if name not in self.reward_ranges]
        if registered.needs_ranges and missing:
            raise ValueError(f"estimator {estimator!r} needs reward_ranges: a [min, max] for every channel, "
                             f"missing {missing}")
        self.resolved_batch_norm(estimator)
        self.estimator_options(estimator)

    def estimator_options(self, estimator: str) -> dict[str, Any]:
        """The estimator's own options (`options`) with its declared defaults, each coerced and checked; an
        option it does not declare is an error listing those it does."""
        declared = get_estimator(estimator).options
        unknown = sorted(set(self.options) - {o.name for o in declared})
        if unknown:
            accepted = "; ".join(o.describe() for o in declared) or "none"
            raise ValueError(f"estimator {estimator!r} has no option(s) {unknown} (options.<name>); it declares: "
                             f"{accepted}")
        return {o.name: o.coerce(self.options[o.name], f"options.{o.name}") if o.name in self.options
                else o.default for o in declared}

    def check_range_names(self, channels: Sequence[str]) -> None:
        """Every `reward_ranges` name is one of `channels` (a range for no channel is a misspelt name)."""
        unknown = [name for name in self.reward_ranges if name not in channels]
        if unknown:
            raise ValueError(f"reward_ranges names {unknown}, not among the reward channels {list(channels)}")

    def resolved_batch_norm(self, estimator: str) -> str:
        """The batch normalisation `estimator` applies under this config; a mode it does not define raises."""
        own = get_estimator(estimator).batch_norms
        allowed = own or BATCH_NORM_MODES
        if self.batch_norm is None:
            return allowed[0] if own else DEFAULT_BATCH_NORM
        if self.batch_norm not in allowed:
            raise ValueError(f"estimator {estimator!r} does not take batch_norm={self.batch_norm!r}: its definition "
                             f"allows {list(allowed)} (leave batch_norm null for the estimator's own)")
        return self.batch_norm

    def keywords(self) -> dict:
        """`compute_advantages` keyword arguments (channel_names excepted); unset options are left out, and so
        is `estimator_module` (the entry point loads it)."""
        return {key: value for key, value in asdict(self).items()
                if value is not None and value != {} and key not in NOT_KEYWORDS}


FIELD_HELP: dict[str, str] = {f.name: f.metadata.get("help", "") for f in fields(DaraAlgoConfig)}


def ranges_by_name(ranges: Mapping | None) -> dict[str, list[float]]:
    """{channel: [min, max]} with float bounds, min < max; anything else is an error naming it."""
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
