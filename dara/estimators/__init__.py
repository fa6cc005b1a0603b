"""Multi-reward advantage estimators: DARA and every baseline of the paper, vectorised in torch.

One public entry, `compute_advantages("dara_asym", scores, index, response_mask, channel_names=[...])`; an
estimator of your own is one function decorated with `register` (docs/estimators.md, "An estimator of your
own"). `python -m dara.estimators list` prints every registered estimator. The registry is read when a check
runs (`ESTIMATOR_NAMES` is a live view of it), so a name registered later is valid everywhere. docs/methods.md
states each formula and names the function that holds it.
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
