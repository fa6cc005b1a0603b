"""The registry of multi-reward advantage estimators, one small function each (METHODS.md).

Every estimator maps a `ChannelBatch` (raw channel scores, their group z-scores A_k, densities)
to an `Aggregate`: the per-response value S before batch normalisation, the per-channel terms
that S sums (their energies are the `energy_weighted/<c>` diagnostic), and the weights applied.
`dara.estimators.api.compute_advantages` then batch-normalises S and broadcasts it over tokens.

`prior` is the user's `weights` option (1 per channel when not given): the channel weights of
GRPO/GDPO/static, multiplied onto the adaptive weights of DARA, SAW and SA-MRPO. With the default
every method is exactly its METHODS.md definition.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .groups import Groups, constant_groups, group_mean_std, group_zscore
from .weights import density_weights, saturation_weights, saw_weights

SIGN_EPS = 1e-8  # a per-reward advantage counts as positive/negative beyond this (GD2PO, DVAO)


@dataclass
class ChannelBatch:
    scores: torch.Tensor  # [N, K] raw channel scores (float64)
    groups: Groups
    advantages: torch.Tensor  # [N, K] per-reward group z-scores A_k
    density: torch.Tensor  # [K] share of groups where the channel is active
    prior: torch.Tensor  # [K] user channel weights
    options: dict


@dataclass
class Aggregate:
    values: torch.Tensor  # [N] S, before batch normalisation
    channel_terms: torch.Tensor  # [N, K] what S sums, per channel
    weights: torch.Tensor  # [K] the weight actually applied to each channel
    batch_norm: str  # normalisation to apply to S
    keep: torch.Tensor | None = None  # [N] 0/1, responses that take part (GD2PO)
    post_scale: torch.Tensor | None = None  # [N] applied after normalisation (GD2PO order option)
    metrics: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Estimator:
    name: str
    fn: Callable[[ChannelBatch], Aggregate]
    batch_norms: tuple[str, ...]  # the batch_norm modes the method defines, first = its own; () = any
    summary: str


ESTIMATORS: dict[str, Estimator] = {}


def register(name: str, summary: str, batch_norms: tuple[str, ...] = ()):
    def wrap(fn: Callable[[ChannelBatch], Aggregate]):
        if name in ESTIMATORS:
            raise ValueError(f"estimator {name!r} is already registered")
        ESTIMATORS[name] = Estimator(name, fn, tuple(batch_norms), summary)
        return fn

    return wrap


def _weighted_sum(batch: ChannelBatch, terms: torch.Tensor, weights: torch.Tensor) -> Aggregate:
    return Aggregate(terms.sum(dim=1), terms, weights, batch.options["batch_norm"])


def _asymmetric(advantages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """A~_k = A_k + (w_k - 1) * max(A_k, 0): amplify positive advantages only."""
    return advantages + (weights - 1.0) * advantages.clamp(min=0.0)


@register("grpo", "sum the channels, then group z-score (no batch normalisation)", batch_norms=("none",))
def grpo(batch: ChannelBatch) -> Aggregate:
    total = (batch.scores * batch.prior).sum(dim=1, keepdim=True)
    eps = batch.options["eps"]
    values = group_zscore(total, batch.groups, eps=eps).squeeze(1)
    # The z-score is linear in the summed reward, so it splits exactly into channel terms
    # w_k (r_k - mean_k) / (std + eps); these give the per-channel energies.
    groups = batch.groups
    mean, std = group_mean_std(batch.scores, groups, ddof=1)
    _, total_std = group_mean_std(total, groups, ddof=1)
    single = (groups.sizes == 1).unsqueeze(-1)
    mean = torch.where(single, torch.zeros_like(mean), mean)
    total_std = torch.where(single, torch.ones_like(total_std), total_std)
    terms = batch.prior * (batch.scores - groups.gather(mean)) / (groups.gather(total_std) + eps)
    terms = terms.masked_fill(groups.gather(constant_groups(total, groups)), 0.0)
    return Aggregate(values, terms, batch.prior.clone(), "none")


@register("gdpo", "S = sum_k w_k A_k, then batch normalisation")
def gdpo(batch: ChannelBatch) -> Aggregate:
    return _weighted_sum(batch, batch.advantages * batch.prior, batch.prior.clone())


@register("static", "GDPO with fixed channel weights (form='sym') or their asymmetric form (form='asym')")
def static(batch: ChannelBatch) -> Aggregate:
    if batch.options.get("weights") is None:
        raise ValueError("estimator 'static' needs fixed channel weights: pass weights=[w_1, ..., w_K]")
    form = batch.options["form"]
    if form == "sym":
        return gdpo(batch)
    if form == "asym":
        return _weighted_sum(batch, _asymmetric(batch.advantages, batch.prior), batch.prior.clone())
    raise ValueError(f"static: form must be 'sym' or 'asym', got {form!r}")


@register("dara_sym", "DARA-Sym: A~_k = w_k A_k with density weights w_k = min(w_max, sqrt(pi_ref/pi_k))")
def dara_sym(batch: ChannelBatch) -> Aggregate:
    weights = density_weights(batch.density, batch.options["w_max"]) * batch.prior
    return _weighted_sum(batch, batch.advantages * weights, weights)


@register("dara_asym", "DARA-Asym (main): A~_k = A_k + (w_k - 1) max(A_k, 0), density weights")
def dara_asym(batch: ChannelBatch) -> Aggregate:
    weights = density_weights(batch.density, batch.options["w_max"]) * batch.prior
    return _weighted_sum(batch, _asymmetric(batch.advantages, weights), weights)


@register("dvao", "per group: sum_k w_k (r_k - mean_k) / sum_k w_k sigma_k, population std; no batch norm",
          batch_norms=("none",))
def dvao(batch: ChannelBatch) -> Aggregate:
    groups = batch.groups
    num_channels = batch.scores.shape[1]
    weights = batch.prior if batch.options.get("weights") is not None else batch.prior / num_channels
    mean, sigma = group_mean_std(batch.scores, groups, ddof=0)
    denominator = (sigma * weights).sum(dim=1)  # [B]
    valid = (groups.sizes > 1) & (denominator > SIGN_EPS)
    safe = torch.where(valid, denominator, torch.ones_like(denominator))
    terms = weights * (batch.scores - groups.gather(mean)) / groups.gather(safe).unsqueeze(-1)
    terms = terms * groups.gather(valid).unsqueeze(-1)
    return Aggregate(terms.sum(dim=1), terms, weights.clone(), "none")


def _conflicts(advantages: torch.Tensor) -> torch.Tensor:
    """[N] bool: some channel pushes the response up (A > 1e-8) and another pushes it down (< -1e-8)."""
    return (advantages > SIGN_EPS).any(dim=1) & (advantages < -SIGN_EPS).any(dim=1)


def _decoupled(batch: ChannelBatch, drop: torch.Tensor) -> Aggregate:
    """GD2PO: drop responses, weight each query by its kept share c_i, whiten over kept tokens.

    With `batch_norm="response"` (the math experiments) the whitening is the response-level
    normalisation over the kept responses instead (METHODS.md, GD2PO-Hard); any other mode keeps
    GD2PO's own token whitening."""
    groups = batch.groups
    norm = "response" if batch.options.get("batch_norm") == "response" else "token"
    keep = (~drop).to(batch.scores.dtype)
    query_weight = groups.gather(groups.sum(keep) / groups.sizes.to(keep.dtype))  # c_i per response
    terms = batch.advantages * batch.prior * keep.unsqueeze(-1)
    order = batch.options["query_weight"]
    metrics = {"gd2po/dropped_fraction": float(drop.double().mean()) if drop.numel() else 0.0}
    if order == "before_whiten":
        terms = terms * query_weight.unsqueeze(-1)
        return Aggregate(terms.sum(dim=1), terms, batch.prior.clone(), norm, keep=keep, metrics=metrics)
    if order == "after_whiten":  # the DARA authors' baseline runs: c_i as a weight on the PPO loss
        return Aggregate(terms.sum(dim=1), terms, batch.prior.clone(), norm, keep=keep,
                         post_scale=query_weight, metrics=metrics)
    raise ValueError(f"gd2po: query_weight must be 'before_whiten' or 'after_whiten', got {order!r}")


@register("gd2po_hard", "GD2PO-Hard: drop conflicting responses, c_i-weighted sum, whiten kept tokens",
          batch_norms=("token", "response"))
def gd2po_hard(batch: ChannelBatch) -> Aggregate:
    return _decoupled(batch, _conflicts(batch.advantages))


@register("gd2po_snr", "GD2PO-SNR: drop a conflicting response only when |rho| < tau (default 0.8)",
          batch_norms=("token", "response"))
def gd2po_snr(batch: ChannelBatch) -> Aggregate:
    tau = batch.options["tau"]
    advantages = batch.advantages
    rho = advantages.sum(dim=1) / (advantages.abs().sum(dim=1) + SIGN_EPS)
    return _decoupled(batch, _conflicts(advantages) & (rho.abs() < tau))


@register("saw", "SAW: GDPO with weights K * CV_k / sum CV (CV of r_k - r_min_k over the batch)")
def saw(batch: ChannelBatch) -> Aggregate:
    ranges = batch.options["reward_ranges"]
    if ranges is None:
        raise ValueError("estimator 'saw' needs reward_ranges={channel: [min, max], ...} for every channel "
                         "(it shifts by each lower bound)")
    weights = saw_weights(batch.scores, ranges[:, 0]) * batch.prior
    return _weighted_sum(batch, batch.advantages * weights, weights)


@register("sa_mrpo", "SA-MRPO: GDPO with weights (1 - s_k)^gamma, s_k the batch saturation of reward k")
def sa_mrpo(batch: ChannelBatch) -> Aggregate:
    ranges = batch.options["reward_ranges"]
    if ranges is None:
        raise ValueError("estimator 'sa_mrpo' needs reward_ranges={channel: [min, max], ...} for every channel")
    weights = saturation_weights(batch.scores, ranges, batch.options["gamma"]) * batch.prior
    return _weighted_sum(batch, batch.advantages * weights, weights)
