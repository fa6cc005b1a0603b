"""An estimator of your own: GDPO with density weights (pi_ref / pi_k)^power (DARA-Sym uncapped at 0.5)."""

import torch

from dara.estimators import Aggregate, ChannelBatch, Option, register


@register("density_power", "GDPO with density weights (pi_ref / pi_k)^power; 1 for a dead channel",
          options=[Option("power", float, 0.5, lambda p: p >= 0, ">= 0")], uses=("weights",))
def density_power(batch: ChannelBatch) -> Aggregate:
    density = batch.density  # [K]: share of groups where each channel is active
    ratio = density.max() / density.clamp(min=torch.finfo(density.dtype).tiny)
    weights = torch.where(density > 0, ratio ** batch.options["power"], torch.ones_like(density)) * batch.prior
    terms = batch.advantages * weights  # [N, K]: w_k A_k, each channel's part of S
    return Aggregate(terms.sum(dim=1), terms, weights, batch.options["batch_norm"])
