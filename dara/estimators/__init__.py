"""Multi-reward advantage estimators: DARA and every baseline of the paper, vectorised in torch.

One public entry::

    from dara.estimators import compute_advantages
    advantages, metrics = compute_advantages("dara_asym", scores, index, response_mask,
                                             channel_names=["correctness", "format"])

An estimator of your own is one decorated function (docs/estimators.md, "An estimator of your own")::

    from dara.estimators import Aggregate, ChannelBatch, Option, register

    @register("my_method", "what it does", options=[Option("temperature", float, 1.0, lambda t: t > 0, "> 0")])
    def my_method(batch: ChannelBatch) -> Aggregate: ...

`python -m dara.estimators list` prints every registered estimator. The registry is read when a check runs
(`ESTIMATOR_NAMES` is a live view of it), so a name registered later is valid everywhere. docs/methods.md states
each formula and names the function that holds it.
"""

from .api import OPTIONS, compute_advantages, diagnose
from .config import DaraAlgoConfig
from .methods import Aggregate, ChannelBatch, register
from .registry import (
    ESTIMATORS,
    Estimator,
    EstimatorModule,
    EstimatorModuleError,
    Option,
    get_estimator,
    load_estimator_module,
    unregister,
)

ESTIMATOR_NAMES = ESTIMATORS.keys()  # every registered name, a live view of the registry
BUILTIN_ESTIMATORS = tuple(name for name, e in ESTIMATORS.items() if e.builtin)  # the library's own

__all__ = ["Aggregate", "BUILTIN_ESTIMATORS", "ChannelBatch", "DaraAlgoConfig", "ESTIMATORS", "ESTIMATOR_NAMES",
           "Estimator", "EstimatorModule", "EstimatorModuleError", "OPTIONS", "Option", "compute_advantages",
           "diagnose", "get_estimator", "load_estimator_module", "register", "unregister"]
