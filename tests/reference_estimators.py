"""Plain-Python loops of docs/methods.md, written to be obviously correct, not fast."""

from __future__ import annotations

import math
from statistics import mean, pstdev, stdev

EPS = 1e-6


def groups_of(index):
    out = {}
    for j, gid in enumerate(index):
        out.setdefault(gid, []).append(j)
    return list(out.values())


def zscore(values, members):
    """Group z-score of one channel: {response: A}."""
    vals = [values[j] for j in members]
    if len(vals) == 1:
        return {members[0]: (vals[0] - 0.0) / (1.0 + EPS)}
    if max(vals) == min(vals):
        return {j: 0.0 for j in members}
    m, s = mean(vals), stdev(vals)
    return {j: (values[j] - m) / (s + EPS) for j in members}


def per_reward_advantages(scores, index):
    n, k = len(scores), len(scores[0])
    adv = [[0.0] * k for _ in range(n)]
    for members in groups_of(index):
        for c in range(k):
            for j, a in zscore([row[c] for row in scores], members).items():
                adv[j][c] = a
    return adv


def densities(adv, index):
    groups = groups_of(index)
    k = len(adv[0])
    return [sum(1 for g in groups if sum(abs(adv[j][c]) for j in g) > 1e-8) / len(groups) for c in range(k)]


def dara_weights(density, w_max=5.0, dead_channel_weight="1"):
    ref = max(density)
    dead = 1.0 if dead_channel_weight == "1" else w_max
    return [min(w_max, math.sqrt(ref / p)) if p > 0 else dead for p in density]


def token_whiten(values, lengths, keep=None):
    keep = keep or [True] * len(values)
    tokens = []
    for v, n, kept in zip(values, lengths, keep, strict=True):
        if kept:
            tokens += [v] * int(n)
    if len(tokens) < 2:
        return [0.0] * len(values)
    m = sum(tokens) / len(tokens)
    var = sum((t - m) ** 2 for t in tokens) / (len(tokens) - 1)
    return [(v - m) / math.sqrt(var + 1e-8) if kept else 0.0 for v, kept in zip(values, keep, strict=True)]


def response_standardize(values, keep=None):
    keep = keep or [True] * len(values)
    kept = [v for v, k in zip(values, keep, strict=True) if k]
    if len(kept) < 2:
        return [0.0] * len(values)
    m, s = mean(kept), stdev(kept)
    return [(v - m) / (s + 1e-6) if k else 0.0 for v, k in zip(values, keep, strict=True)]


def normalize(values, lengths, mode):
    if mode == "token":
        return token_whiten(values, lengths)
    if mode == "response":
        return response_standardize(values)
    return list(values)


def reference(name, scores, index, lengths, batch_norm="token", weights=None, w_max=5.0, reward_ranges=None,
              tau=0.8, gamma=0.5, form="sym", query_weight="before_whiten", rvpo_k=1.0, dead_channel_weight="1"):
    """Per-response advantage (the value broadcast over each response's tokens)."""
    n, k = len(scores), len(scores[0])
    prior = list(weights) if weights is not None else [1.0] * k
    adv = per_reward_advantages(scores, index)
    if name == "grpo":
        total = [sum(p * r for p, r in zip(prior, row, strict=True)) for row in scores]
        out = [0.0] * n
        for members in groups_of(index):
            for j, a in zscore(total, members).items():
                out[j] = a
        return out
    if name == "dvao":
        w = prior if weights is not None else [1.0 / k] * k
        out = [0.0] * n
        for members in groups_of(index):
            if len(members) == 1:
                continue
            means = [mean(scores[j][c] for j in members) for c in range(k)]
            sig = [pstdev([scores[j][c] for j in members]) for c in range(k)]
            den = sum(w[c] * sig[c] for c in range(k))
            if den <= 1e-8:
                continue
            for j in members:
                out[j] = sum(w[c] * (scores[j][c] - means[c]) for c in range(k)) / den
        return out
    if name in ("gd2po_hard", "gd2po_snr"):
        return _gd2po(name, adv, index, lengths, prior, tau, query_weight, batch_norm)
    if name in ("gdpo", "static") and not (name == "static" and form == "asym"):
        w = prior
        s = [sum(w[c] * adv[j][c] for c in range(k)) for j in range(n)]
        return normalize(s, lengths, batch_norm)
    if name == "static":
        s = [sum(adv[j][c] + (prior[c] - 1) * max(adv[j][c], 0.0) for c in range(k)) for j in range(n)]
        return normalize(s, lengths, batch_norm)
    if name in ("dara_sym", "dara_asym"):
        w = [a * b for a, b in zip(dara_weights(densities(adv, index), w_max, dead_channel_weight), prior, strict=True)]
        if name == "dara_sym":
            s = [sum(w[c] * adv[j][c] for c in range(k)) for j in range(n)]
        else:
            s = [sum(adv[j][c] + (w[c] - 1) * max(adv[j][c], 0.0) for c in range(k)) for j in range(n)]
        return normalize(s, lengths, batch_norm)
    if name == "saw":
        w = _saw(scores, [r[0] for r in reward_ranges])
        s = [sum(w[c] * prior[c] * adv[j][c] for c in range(k)) for j in range(n)]
        return normalize(s, lengths, batch_norm)
    if name == "sa_mrpo":
        w = []
        for c in range(k):
            lo, hi = reward_ranges[c]
            sat = (mean(row[c] for row in scores) - lo) / (hi - lo)
            w.append((1 - min(max(sat, 0.0), 1.0)) ** gamma)
        s = [sum(w[c] * prior[c] * adv[j][c] for c in range(k)) for j in range(n)]
        return normalize(s, lengths, batch_norm)
    if name == "rvpo":
        s = []
        for j in range(n):
            terms = [-rvpo_k * prior[c] * adv[j][c] for c in range(k)]
            top = max(terms)
            lse = top + math.log(sum(math.exp(t - top) for t in terms))
            s.append(-(lse - math.log(k)) / rvpo_k)
        return normalize(s, lengths, batch_norm)
    raise KeyError(name)


def authors_rvpo(scores, index, lengths, k=1.0):
    """The DARA authors' RVPO as their code computes it, token by token (zhaihaotian/DARA,
    vendor/verl/verl/trainer/ppo/multi_reward_algos.py): each channel's verl GRPO advantage (group mean and
    unbiased std + 1e-6; a group of one: mean 0, std 1) on every valid token, the per-token soft-min
    -(log(sum_c exp(-k A_c)) - log K) / k over all K channels (0 on padding), then verl's masked whitening over
    the valid tokens (mean, unbiased variance, (x - mean) / sqrt(var + 1e-8)) times the mask. Returns the
    [N][T] token advantages (T = max length)."""
    n, num_channels, width = len(scores), len(scores[0]), max(lengths)
    mask = [[1.0 if t < lengths[j] else 0.0 for t in range(width)] for j in range(n)]
    adv = per_reward_advantages(scores, index)  # verl's GRPO advantage (zscore's eps, its group of one)
    combined = [[-(math.log(sum(math.exp(-k * a * mask[j][t]) for a in adv[j])) - math.log(num_channels)) / k
                 for t in range(width)] for j in range(n)]
    valid = [combined[j][t] for j in range(n) for t in range(width) if mask[j][t]]
    mean_ = sum(valid) / len(valid)
    var = sum((v - mean_) ** 2 for v in valid) / (len(valid) - 1)
    return [[(combined[j][t] - mean_) / math.sqrt(var + 1e-8) * mask[j][t] for t in range(width)] for j in range(n)]


def _saw(scores, lower):
    k = len(scores[0])
    if len(scores) < 2:
        return [1.0] * k
    cv = []
    for c in range(k):
        col = [row[c] - lower[c] for row in scores]
        cv.append(0.0 if max(col) == min(col) else stdev(col) / (abs(mean(col)) + 1e-8))
    total = sum(cv)
    return [1.0] * k if total <= 0 else [k * v / total for v in cv]


def _gd2po(name, adv, index, lengths, prior, tau, query_weight, batch_norm="token"):
    n, k = len(adv), len(adv[0])
    keep = []
    for j in range(n):
        conflict = any(a > 1e-8 for a in adv[j]) and any(a < -1e-8 for a in adv[j])
        if name == "gd2po_snr":
            rho = sum(adv[j]) / (sum(abs(a) for a in adv[j]) + 1e-8)
            conflict = conflict and abs(rho) < tau
        keep.append(not conflict)
    c_of = {}
    for members in groups_of(index):
        c = sum(keep[j] for j in members) / len(members)
        for j in members:
            c_of[j] = c
    raw = [sum(prior[c] * adv[j][c] for c in range(k)) if keep[j] else 0.0 for j in range(n)]
    # GD2PO whitens kept tokens; batch_norm "response" (math) standardises the kept responses instead
    def whiten(values):
        if batch_norm == "response":
            return response_standardize(values, keep)
        return token_whiten(values, lengths, keep)
    if query_weight == "before_whiten":
        return whiten([c_of[j] * raw[j] for j in range(n)])
    return [c_of[j] * v for j, v in enumerate(whiten(raw))]
