"""The library's multi-reward advantage estimators, one small function each (docs/methods.md).

Each maps a `ChannelBatch` to an `Aggregate` (S before batch normalisation, its per-channel terms, the weights)
and is entered in the registry by `register`, the decorator a user's estimator takes too. `prior` is the
`weights` option (1 each unset), multiplied onto every method's channel weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields

import torch

from .config import DaraAlgoConfig
from .groups import Groups, constant_groups, group_mean_std, group_zscore
from .normalization import BATCH_NORM_MODES
from .registry import ESTIMATORS, NAME, VERL_PREFIX, Estimator, Option
from .weights import density_weights, saturation_weights, saw_weights

SIGN_EPS = 1e-8  # a per-reward advantage counts as positive/negative beyond this (GD2PO, DVAO)


@dataclass
class ChannelBatch:
    """N responses in B groups with K channels (float64): scores [N, K] raw; advantages [N, K] the group z-scores
    A_k; density [K] pi_k; prior [K] the `weights` option; options: every resolved option (the typed ones,
    `channel_names`, and the estimator's own declared options by name)."""
    scores: torch.Tensor
    groups: Groups
    advantages: torch.Tensor
    density: torch.Tensor
    prior: torch.Tensor
    options: dict


@dataclass
class Aggregate:
    """values [N]: S; channel_terms [N, K]: each channel's part of S (`energy_weighted/<c>`); weights [K]: logged
    as `weight/<c>`; keep [N] 0/1: the responses the normalisation sees (others end at 0); post_scale [N]:
    multiplied in after it; metrics: extra floats logged as named."""
    values: torch.Tensor
    channel_terms: torch.Tensor
    weights: torch.Tensor
    batch_norm: str
    keep: torch.Tensor | None = None
    post_scale: torch.Tensor | None = None
    metrics: dict = field(default_factory=dict)


TYPED_OPTIONS = frozenset(f.name for f in fields(DaraAlgoConfig)) | {"channel_names"}


def register(name: str, summary: str, batch_norms: Sequence[str] = (), *, options: Sequence[Option] = (),
             uses: Sequence[str] = (), needs_ranges: bool = False):
    """Decorator: register `fn(batch: ChannelBatch) -> Aggregate` as estimator `name` (a ValueError for a bad or
    taken name, including `dara_<taken>`, the verl key of grpo and gdpo, an unknown mode, or a bad option)."""
    if not isinstance(name, str) or not NAME.match(name):
        raise ValueError(f"estimator name {name!r} must be an identifier (letters, digits, _; a letter first)")
    options = tuple(options)
    names = [o.name for o in options]
    bad_modes, clash = [m for m in batch_norms if m not in BATCH_NORM_MODES], sorted(set(names) & TYPED_OPTIONS)
    unknown_uses = sorted(set(uses) - TYPED_OPTIONS)
    for problem, text in ((bad_modes, f"batch_norms {bad_modes} are not among {list(BATCH_NORM_MODES)}"),
                          (len(set(names)) != len(names), f"declares an option twice: {names}"),
                          (clash, f"options {clash} are the library's own typed options; choose other names"),
                          (unknown_uses, f"uses {unknown_uses}, not options of the library "
                                         f"({', '.join(sorted(TYPED_OPTIONS))})")):
        if problem:
            raise ValueError(f"estimator {name!r}: {text}")

    def wrap(fn: Callable):
        taken = _taken_by(name)
        if taken:
            raise ValueError(f"estimator name {name!r} is taken ({taken}); choose another name")
        ESTIMATORS[name] = Estimator(name, fn, tuple(batch_norms), summary, options, tuple(uses),
                                     bool(needs_ranges), getattr(fn, "__module__", "") or "")
        return fn
    return wrap


def _taken_by(name: str) -> str | None:
    if name in ESTIMATORS:
        owner = ESTIMATORS[name]
        return "by the library's own estimator" if owner.builtin else f"by module {owner.module}"
    bare = name.removeprefix(VERL_PREFIX)
    if bare != name and bare in ESTIMATORS:
        return f"the verl binding's key of estimator {bare!r}"
    return None


def _weighted_sum(batch: ChannelBatch, terms: torch.Tensor, weights: torch.Tensor) -> Aggregate:
    return Aggregate(terms.sum(dim=1), terms, weights, batch.options["batch_norm"])


def _asymmetric(advantages: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """A~_k = A_k + (w_k - 1) * max(A_k, 0): amplify positive advantages only."""
    return advantages + (weights - 1.0) * advantages.clamp(min=0.0)


@register("grpo", "sum the channels, then group z-score (no batch normalisation)", batch_norms=("none",),
          uses=("weights",))
def grpo(batch: ChannelBatch) -> Aggregate:
    total = (batch.scores * batch.prior).sum(dim=1, keepdim=True)
    eps = batch.options["eps"]
    values = group_zscore(total, batch.groups, eps=eps).squeeze(1)
    # linear in the summed reward: exact channel terms w_k (r_k - mean_k) / (std + eps), for the energies
    groups = batch.groups
    mean, std = group_mean_std(batch.scores, groups, ddof=1)
    _, total_std = group_mean_std(total, groups, ddof=1)
    single = (groups.sizes == 1).unsqueeze(-1)
    mean = torch.where(single, torch.zeros_like(mean), mean)
    total_std = torch.where(single, torch.ones_like(total_std), total_std)
    terms = batch.prior * (batch.scores - groups.gather(mean)) / (groups.gather(total_std) + eps)
    terms = terms.masked_fill(groups.gather(constant_groups(total, groups)), 0.0)
    return Aggregate(values, terms, batch.prior.clone(), "none")


@register("gdpo", "S = sum_k w_k A_k, then batch normalisation", uses=("weights",))
def gdpo(batch: ChannelBatch) -> Aggregate:
    return _weighted_sum(batch, batch.advantages * batch.prior, batch.prior.clone())


@register("static", "GDPO with fixed channel weights (form='sym') or their asymmetric form (form='asym')",
          uses=("weights", "form"))
def static(batch: ChannelBatch) -> Aggregate:  # weights and form checked by DaraAlgoConfig.check_for
    if batch.options["form"] == "sym":
        return gdpo(batch)
    return _weighted_sum(batch, _asymmetric(batch.advantages, batch.prior), batch.prior.clone())


def _density_weights(batch: ChannelBatch) -> torch.Tensor:
    return density_weights(batch.density, batch.options["w_max"], batch.options["dead_channel_weight"]) * batch.prior


@register("dara_sym", "DARA-Sym: A~_k = w_k A_k with density weights w_k = min(w_max, sqrt(pi_ref/pi_k))",
          uses=("weights", "w_max", "dead_channel_weight"))
def dara_sym(batch: ChannelBatch) -> Aggregate:
    weights = _density_weights(batch)
    return _weighted_sum(batch, batch.advantages * weights, weights)


@register("dara_asym", "DARA-Asym (main): A~_k = A_k + (w_k - 1) max(A_k, 0), density weights",
          uses=("weights", "w_max", "dead_channel_weight"))
def dara_asym(batch: ChannelBatch) -> Aggregate:
    weights = _density_weights(batch)
    return _weighted_sum(batch, _asymmetric(batch.advantages, weights), weights)


@register("dvao", "per group: sum_k w_k (r_k - mean_k) / sum_k w_k sigma_k, population std; no batch norm",
          batch_norms=("none",), uses=("weights",))
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
    """GD2PO: drop responses, weight each query by its kept share c_i, whiten over kept tokens (over kept
    responses with `batch_norm="response"`, the math runs)."""
    groups = batch.groups
    norm = "response" if batch.options.get("batch_norm") == "response" else "token"
    keep = (~drop).to(batch.scores.dtype)
    query_weight = groups.gather(groups.sum(keep) / groups.sizes.to(keep.dtype))  # c_i per response
    terms = batch.advantages * batch.prior * keep.unsqueeze(-1)
    metrics = {"gd2po/dropped_fraction": float(drop.double().mean()) if drop.numel() else 0.0}
    before = batch.options["query_weight"] == "before_whiten"
    if before:
        terms = terms * query_weight.unsqueeze(-1)
    # after_whiten, the DARA authors' baseline runs: c_i as a weight on the PPO loss
    return Aggregate(terms.sum(dim=1), terms, batch.prior.clone(), norm, keep=keep,
                     post_scale=None if before else query_weight, metrics=metrics)


@register("gd2po_hard", "GD2PO-Hard: drop conflicting responses, c_i-weighted sum, whiten kept tokens",
          batch_norms=("token", "response"), uses=("weights", "query_weight"))
def gd2po_hard(batch: ChannelBatch) -> Aggregate:
    return _decoupled(batch, _conflicts(batch.advantages))


@register("gd2po_snr", "GD2PO-SNR: drop a conflicting response only when |rho| < tau (default 0.8)",
          batch_norms=("token", "response"), uses=("weights", "tau", "query_weight"))
def gd2po_snr(batch: ChannelBatch) -> Aggregate:
    tau = batch.options["tau"]
    advantages = batch.advantages
    rho = advantages.sum(dim=1) / (advantages.abs().sum(dim=1) + SIGN_EPS)
    return _decoupled(batch, _conflicts(advantages) & (rho.abs() < tau))


@register("saw", "SAW: GDPO with weights K * CV_k / sum CV (CV of r_k - r_min_k over the batch)",
          uses=("weights", "reward_ranges"), needs_ranges=True)
def saw(batch: ChannelBatch) -> Aggregate:
    weights = saw_weights(batch.scores, batch.options["reward_ranges"][:, 0]) * batch.prior  # checked: needs_ranges
    return _weighted_sum(batch, batch.advantages * weights, weights)


@register("sa_mrpo", "SA-MRPO: GDPO with weights (1 - s_k)^gamma, s_k the batch saturation of reward k",
          uses=("weights", "reward_ranges", "gamma"), needs_ranges=True)
def sa_mrpo(batch: ChannelBatch) -> Aggregate:
    ranges = batch.options["reward_ranges"]  # checked: needs_ranges
    weights = saturation_weights(batch.scores, ranges, batch.options["gamma"]) * batch.prior
    return _weighted_sum(batch, batch.advantages * weights, weights)


@register("rvpo", "RVPO: soft-min -(logsumexp(-k A) - log K) / k over the channels' A_k (k = rvpo_k), batch norm",
          uses=("weights", "rvpo_k"))
def rvpo(batch: ChannelBatch) -> Aggregate:
    """S = -(logsumexp_k(-k p_k A_k) - log K) / k (the authors' for K = 2, p = 1). With q = softmax(-k p A),
    term_k = q_k (p_k A_k + (log K - H(q)) / k) splits S exactly; the logged weight is p_k mean(K q_k)."""
    k = batch.options["rvpo_k"]
    scaled = batch.advantages * batch.prior  # [N, K]
    num_channels = scaled.shape[1]
    log_k = math.log(num_channels)
    values = -(torch.logsumexp(-k * scaled, dim=1) - log_k) / k
    soft = torch.softmax(-k * scaled, dim=1)
    entropy = -(soft * torch.log(soft.clamp(min=torch.finfo(soft.dtype).tiny))).sum(dim=1, keepdim=True)
    terms = soft * (scaled + (log_k - entropy) / k)
    weights = num_channels * soft.mean(dim=0) * batch.prior if len(soft) else batch.prior.clone()
    metrics = {"rvpo/k": float(k),
               "rvpo/aggregate_mean": float(values.mean()) if len(values) else 0.0,
               "rvpo/variance_penalty_mean": float((scaled.mean(dim=1) - values).mean()) if len(values) else 0.0}
    return Aggregate(values, terms, weights, batch.options["batch_norm"], metrics=metrics)
