"""Multi-reward advantage estimators: DARA and every baseline of the paper, vectorised in torch.

One public entry::

    from dara.estimators import compute_advantages
    advantages, metrics = compute_advantages("dara_asym", scores, index, response_mask,
                                             channel_names=["correctness", "format"])

An estimator of your own is one decorated function (docs/estimators.md, "An estimator of your own")::

    from dara.estimators import Aggregate, ChannelBatch, Option, register

    @register("my_method", "what it does", options=[Option("temperature", float, 1.0, lambda t: t > 0, "> 0")])
    def my_method(batch: ChannelBatch) -> Aggregate: ...

`python -m dara.estimators list` prints every registered estimator with its summary, batch-norm modes and
options. The registry is read when a check runs (`ESTIMATOR_NAMES` is a live view of it), so a name
registered later, or by a module `load_estimator_module` loads, is valid everywhere.

Where each formula of ``docs/methods.md`` lives:

================  ===========================================  ================================
name              definition                                   code
================  ===========================================  ================================
(building block)  group z-score A_k, eps 1e-6, size-1 groups    ``groups.group_zscore``
(building block)  batch normalisation token / response / none  ``normalization.batch_normalize``
(building block)  active group, density pi_k, energy E_k       ``api.compute_advantages``, ``api._diagnostics``
grpo              sum channels, then group z-score              ``methods.grpo``
gdpo              S = sum_k w_k A_k, batch norm                 ``methods.gdpo``
dara_sym          w_k A_k, w_k = min(w_max, sqrt(pi_ref/pi_k))  ``methods.dara_sym``, ``weights.density_weights``
dara_asym         A_k + (w_k - 1) max(A_k, 0)                   ``methods.dara_asym``
dvao              per-group sum w (r - mean) / sum w sigma      ``methods.dvao``
gd2po_hard        drop conflicts, c_i, whiten kept tokens        ``methods.gd2po_hard``
gd2po_snr         drop conflicts with abs(rho) < tau             ``methods.gd2po_snr``
static            GDPO with fixed weights (sym or asym form)    ``methods.static``
saw               weights K CV_k / sum CV                       ``methods.saw``, ``weights.saw_weights``
sa_mrpo           weights (1 - s_k)^gamma                       ``methods.sa_mrpo``, ``weights.saturation_weights``
rvpo              soft-min -(logsumexp(-k A) - log K) / k       ``methods.rvpo``
================  ===========================================  ================================

Documented edge cases: a constant group gives exactly 0 for that channel; a size-1 group uses
mean 0 and std 1 (verl's GRPO convention), so it counts as active when its score is non-zero; a
channel active in no group has density 0, weight 1 under DARA (w_max with `dead_channel_weight="w_max"`,
the authors' code), and `energy_vs_ideal` 0; token
whitening over fewer than two tokens returns zeros; DVAO gives 0 to size-1 groups and to groups whose
weighted std is <= 1e-8; GD2PO with nothing kept gives all zeros.
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
