"""`DaraGRPOConfig`: TRL's `GRPOConfig` plus the estimator and its options (those of `dara.estimators`).

TRL's `multi_objective_aggregation` rejects values it does not know, so the estimator is a field of its
own. The library's `weights` option is TRL's `reward_weights`; the channels are the reward functions, in
their order, named as TRL names them (a function's `__name__`, a reward model's model id).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from trl import GRPOConfig

from dara.estimators import ESTIMATOR_NAMES, ESTIMATORS, DaraAlgoConfig
from dara.estimators.config import ranges_by_name

_DEFAULTS = DaraAlgoConfig()
# TRL's loss takes one advantage per completion; response-level batch normalisation is the natural default
# (`token` needs the completions' lengths, which the trainer gathers; see docs/trl.md).
DEFAULT_BATCH_NORM = "response"


@dataclass
class DaraGRPOConfig(GRPOConfig):
    """`GRPOConfig` with `estimator` and the estimator options of `dara.estimators.compute_advantages`.

    `batch_norm=None` resolves to `response` for the estimators that take it, else to the estimator's own
    (GRPO and DVAO define none). `reward_ranges` maps reward-function names to [min, max] (saw, sa_mrpo).
    TRL's `scale_rewards` and `multi_objective_aggregation` shape only TRL's own advantages, which the
    estimator's replace.
    """

    _VALID_DICT_FIELDS = [*GRPOConfig._VALID_DICT_FIELDS, "reward_ranges"]

    estimator: str = field(
        default="dara_asym",
        metadata={"help": f"Advantage estimator of dara.estimators: one of {', '.join(ESTIMATOR_NAMES)}."},
    )
    w_max: float = field(default=_DEFAULTS.w_max, metadata={"help": "Cap of DARA's density weights."})
    batch_norm: str | None = field(
        default=None,
        metadata={"help": "Batch normalisation of the aggregated advantage: 'response', 'token' or 'none'; "
                          "unset: 'response' where the estimator takes it, else the estimator's own."},
    )
    reward_ranges: dict | str | None = field(
        default=None,
        metadata={"help": "Per reward function name, its [min, max] score range (saw, sa_mrpo), e.g. "
                          "'{\"format\": [0, 1], \"correctness\": [-3, 3]}'."},
    )
    tau: float = field(default=_DEFAULTS.tau, metadata={"help": "GD2PO-SNR's |rho| threshold."})
    gamma: float = field(default=_DEFAULTS.gamma, metadata={"help": "SA-MRPO's saturation exponent."})
    form: str = field(default=_DEFAULTS.form, metadata={"help": "static: 'sym' or 'asym'."})
    query_weight: str = field(
        default=_DEFAULTS.query_weight, metadata={"help": "GD2PO: 'before_whiten' or 'after_whiten'."}
    )
    eps: float = field(
        default=_DEFAULTS.eps,
        metadata={"help": "Added to the std of the group z-score and of response-level batch normalisation "
                          "(the library's 1e-6; TRL's own advantages use 1e-4)."},
    )

    def __post_init__(self):
        super().__post_init__()
        if self.estimator not in ESTIMATOR_NAMES:
            raise ValueError(f"estimator={self.estimator!r} is not a dara.estimators name; "
                             f"available: {', '.join(ESTIMATOR_NAMES)}")
        if isinstance(self.reward_ranges, str):
            self.reward_ranges = json.loads(self.reward_ranges)
        if self.reward_ranges is not None:
            self.reward_ranges = ranges_by_name(self.reward_ranges)  # the library's {name: [min, max]} check
        if self.batch_norm is None:
            own = ESTIMATORS[self.estimator].batch_norms
            self.batch_norm = DEFAULT_BATCH_NORM if not own or DEFAULT_BATCH_NORM in own else own[0]
        if self.estimator == "static" and self.reward_weights is None:
            raise ValueError("estimator='static' needs fixed channel weights: set reward_weights=[...]")
        # Validates every option now (types, ranges, the batch_norm the estimator allows), not at step 1.
        self.algo_config().resolved_batch_norm(self.estimator)

    def algo_config(self, channel_names: Sequence[str] | None = None,
                    weights: Sequence[float] | None = None) -> DaraAlgoConfig:
        """The library's options for these reward functions and weights (the trainer's `reward_weights`,
        which TRL extends by 1 for an environment's own reward). `reward_ranges` keys are reward-function
        names: with `channel_names`, one that is not among them is an error now; what depends on the
        estimator (for saw and sa_mrpo, a function without a range) is the library's `check_for`."""
        if weights is None and self.reward_weights is not None:
            weights = self.reward_weights
        config = DaraAlgoConfig(
            weights=weights, w_max=self.w_max, batch_norm=self.batch_norm, reward_ranges=self.reward_ranges,
            tau=self.tau, gamma=self.gamma, form=self.form, query_weight=self.query_weight, eps=self.eps,
        )
        if channel_names is not None:
            config.check_range_names(channel_names)
        return config
