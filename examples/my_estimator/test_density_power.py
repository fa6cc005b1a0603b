"""Tests of examples/my_estimator/density_power.py: `python -m pytest examples/my_estimator`.

Each compares the estimator with a plain loop of its formula, or with a library estimator it must equal."""

import math
from pathlib import Path

import pytest
import torch

from dara.estimators import compute_advantages, load_estimator_module

load_estimator_module(Path(__file__).with_name("density_power.py"))  # registers "density_power" (once)


def loop_reference(scores, index, power, tokens=3):
    """Per response: S = sum_k w_k A_k with w_k = (pi_ref / pi_k)^power, then verl's token whitening (every
    response `tokens` long: mean and unbiased variance over all tokens)."""
    groups = {}
    for row, gid in enumerate(index):
        groups.setdefault(gid, []).append(row)
    n, k = len(scores), len(scores[0])
    adv = [[0.0] * k for _ in range(n)]
    for rows in groups.values():
        for c in range(k):
            values = [scores[r][c] for r in rows]
            if len(rows) > 1 and max(values) != min(values):
                mean = sum(values) / len(values)
                std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
                for r in rows:
                    adv[r][c] = (scores[r][c] - mean) / (std + 1e-6)
    density = [sum(any(abs(adv[r][c]) > 0 for r in rows) for rows in groups.values()) / len(groups) for c in range(k)]
    weights = [(max(density) / d) ** power if d > 0 else 1.0 for d in density]
    s = [sum(weights[c] * adv[r][c] for c in range(k)) for r in range(n)]
    every_token = [v for v in s for _ in range(tokens)]
    mean = sum(every_token) / len(every_token)
    var = sum((v - mean) ** 2 for v in every_token) / (len(every_token) - 1)
    return [(v - mean) / math.sqrt(var + 1e-8) for v in s], weights


@pytest.mark.parametrize("power", [0.0, 0.5, 2.0])
def test_matches_a_plain_loop(power):
    gen = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 3, (24, 2), generator=gen).double()
    scores[4:, 1] = 1.0  # the second channel is active in one group of six: a sparse channel
    index = [i // 4 for i in range(24)]
    adv, metrics = compute_advantages("density_power", scores, index, torch.ones(24, 3),
                                      channel_names=["dense", "sparse"], options={"power": power})
    expected, weights = loop_reference(scores.tolist(), index, power)
    torch.testing.assert_close(adv[:, 0].double(), torch.tensor(expected, dtype=torch.float64), rtol=1e-5, atol=1e-5)
    assert metrics["weight/sparse"] == pytest.approx(weights[1]) and metrics["density/sparse"] == pytest.approx(1 / 6)


def test_power_one_half_is_dara_sym_without_its_cap():
    scores = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    mask = torch.ones(6, 2)
    ours, _ = compute_advantages("density_power", scores, [0, 0, 1, 1, 2, 2], mask)
    theirs, _ = compute_advantages("dara_sym", scores, [0, 0, 1, 1, 2, 2], mask, w_max=100.0)
    torch.testing.assert_close(ours, theirs)


def test_a_bad_power_is_one_line_naming_the_option():
    with pytest.raises(ValueError, match=r"option power=-1.0 \(options.power\) fails its check: must be >= 0"):
        compute_advantages("density_power", torch.ones(4, 2), [0, 0, 1, 1], torch.ones(4, 1), options={"power": -1})
