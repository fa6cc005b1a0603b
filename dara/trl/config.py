"""`DaraGRPOConfig`: TRL's `GRPOConfig` plus the estimator and its options (those of `dara.estimators`).

The estimator is a field of its own (TRL's `multi_objective_aggregation` rejects unknown values); `weights` is
TRL's `reward_weights`; the channels are the reward functions, named as TRL names them. The scalar options
(`DERIVED_FIELDS`) take `DaraAlgoConfig`'s types, defaults and help texts.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, make_dataclass

from trl import GRPOConfig

from dara.estimators import ESTIMATOR_NAMES, ESTIMATORS, DaraAlgoConfig, load_estimator_module
from dara.estimators.config import FIELD_HELP, ranges_by_name

# DaraAlgoConfig's fields that DaraGRPOConfig takes as they are (name, type, default, help).
DERIVED_FIELDS = ("w_max", "tau", "gamma", "form", "query_weight", "eps", "rvpo_k", "dead_channel_weight")
# TRL's loss takes one advantage per completion (`token` needs the lengths, which the trainer gathers)
DEFAULT_BATCH_NORM = "response"


def _derived_base() -> type:
    """GRPOConfig with DaraAlgoConfig's scalar option fields (their types, defaults and help texts)."""
    hints = typing.get_type_hints(DaraAlgoConfig)
    return make_dataclass("_GRPOConfigWithDaraOptions", [
        (item.name, hints[item.name], field(default=item.default, metadata={"help": FIELD_HELP[item.name]}))
        for item in fields(DaraAlgoConfig) if item.name in DERIVED_FIELDS], bases=(GRPOConfig,))


def _as_mapping(value, what: str):
    """A dict given as JSON text (a command line) or as a mapping; None stays None."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(f"{what} must be a JSON object, got {value!r} ({error})") from None
    if value is not None and not isinstance(value, Mapping):
        raise ValueError(f"{what} must map names to values, got {value!r}")
    return None if value is None else dict(value)


@dataclass
class DaraGRPOConfig(_derived_base()):
    """`GRPOConfig` with `estimator` and its options. `batch_norm=None` resolves to `response` where the
    estimator takes it, else to its own; `estimator_module` is loaded first. TRL's `scale_rewards` and
    `multi_objective_aggregation` shape only TRL's own advantages, which the estimator's replace."""
    _VALID_DICT_FIELDS = [*GRPOConfig._VALID_DICT_FIELDS, "reward_ranges", "estimator_options"]
    estimator: str = field(default="dara_asym", metadata={"help": (
        "Advantage estimator: a registered dara.estimators name (python -m dara.estimators list), or one a "
        "module given as estimator_module registers.")})
    estimator_module: str | None = field(default=None, metadata={"help": FIELD_HELP["estimator_module"]})
    estimator_options: dict | str | None = field(
        default=None, metadata={"help": FIELD_HELP["options"] + " E.g. '{\"power\": 0.5}'."})
    batch_norm: str | None = field(default=None, metadata={"help": (
        "Batch normalisation of the aggregated advantage: 'response', 'token' or 'none'; unset: 'response' "
        "where the estimator takes it, else the estimator's own.")})
    reward_ranges: dict | str | None = field(default=None, metadata={"help": (
        "Per reward function name, its [min, max] score range (saw, sa_mrpo), e.g. "
        "'{\"format\": [0, 1], \"correctness\": [-3, 3]}'.")})

    def __post_init__(self):
        super().__post_init__()
        if self.estimator_module:
            load_estimator_module(self.estimator_module)  # EstimatorModuleError: a ValueError, one line
        if self.estimator not in ESTIMATOR_NAMES:
            raise ValueError(f"estimator={self.estimator!r} is not a dara.estimators name; registered: "
                             f"{', '.join(ESTIMATOR_NAMES)} (one of your own: estimator_module=PATH)")
        if isinstance(self.reward_ranges, str):
            self.reward_ranges = _as_mapping(self.reward_ranges, "reward_ranges")
        if self.reward_ranges is not None:
            self.reward_ranges = ranges_by_name(self.reward_ranges)  # the library's {name: [min, max]} check
        self.estimator_options = _as_mapping(self.estimator_options, "estimator_options") or {}
        if self.batch_norm is None:
            own = ESTIMATORS[self.estimator].batch_norms
            self.batch_norm = DEFAULT_BATCH_NORM if not own or DEFAULT_BATCH_NORM in own else own[0]
        if self.estimator == "static" and self.reward_weights is None:
            raise ValueError("estimator='static' needs fixed channel weights: set reward_weights=[...]")
        # every option checked now, not at step 1
        config = self.algo_config()
        config.resolved_batch_norm(self.estimator)
        config.estimator_options(self.estimator)

    def algo_config(self, channel_names: Sequence[str] | None = None,
                    weights: Sequence[float] | None = None) -> DaraAlgoConfig:
        """The library's options for these reward functions and `weights` (the trainer's, which TRL extends by
        1 for an environment's own reward); a `reward_ranges` name not among `channel_names` is an error."""
        config = DaraAlgoConfig(weights=self.reward_weights if weights is None else weights,
                                batch_norm=self.batch_norm, reward_ranges=self.reward_ranges,
                                options=dict(self.estimator_options or {}),
                                estimator_module=self.estimator_module,
                                **{name: getattr(self, name) for name in DERIVED_FIELDS})
        if channel_names is not None:
            config.check_range_names(channel_names)
        return config
