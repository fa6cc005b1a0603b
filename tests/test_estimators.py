"""The estimator library against METHODS.md: loop references, energy identities, edge cases."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dara.estimators import ESTIMATOR_NAMES, ESTIMATORS, compute_advantages
from tests import reference_estimators as ref

RANGES = [[-3.0, 3.0], [0.0, 1.0], [0.0, 1.0]]


def options_for(name, k):
    """Every option the loop reference takes too: weights, rvpo_k, the authors' dead-channel weight for dara_sym."""
    opts = {"rvpo": {"rvpo_k": 2.0, "weights": [1.0, 2.0, 0.5][:k]}, "dara_sym": {"dead_channel_weight": "w_max"}
            }.get(name, {})
    if name == "static":
        opts["weights"] = [1.0, 5.0, 2.0][:k]
    if name in ("saw", "sa_mrpo"):
        opts["reward_ranges"] = {f"c{c}": RANGES[c] for c in range(k)}  # compute_advantages' default names
    return opts


@st.composite
def batches(draw, k=None):
    """Random grouped batches with ties, uneven lengths, inactive channels and singleton groups."""
    k = k or draw(st.integers(1, 3))
    num_groups = draw(st.integers(1, 5))
    sizes = draw(st.lists(st.integers(1, 5), min_size=num_groups, max_size=num_groups))
    index = [g for g, size in enumerate(sizes) for _ in range(size)]
    n = len(index)
    levels = [[-3.0, -1.0, 0.0, 1.5, 3.0], [0.0, 1.0], [0.0, 1.0]]
    scores = [[draw(st.sampled_from(levels[c])) for c in range(k)] for _ in range(n)]
    if draw(st.booleans()):  # an inactive channel: constant over the whole batch
        for row in scores:
            row[k - 1] = scores[0][k - 1]
    lengths = [draw(st.integers(0, 6)) for _ in range(n)]
    if sum(lengths) < 2:
        lengths[0] = 2
    order = draw(st.permutations(range(n)))
    return [scores[i] for i in order], [index[i] for i in order], [lengths[i] for i in order]


def mask_from(lengths):
    return (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]).float()


@pytest.mark.parametrize("name", ESTIMATOR_NAMES)
@settings(max_examples=40, deadline=None)
@given(batch=batches(), batch_norm=st.sampled_from(["token", "response", "none", None]),
       query_weight=st.sampled_from(["before_whiten", "after_whiten"]), form=st.sampled_from(["sym", "asym"]))
def test_matches_loop_reference(name, batch, batch_norm, query_weight, form):
    scores, index, lengths = batch
    k = len(scores[0])
    opts = options_for(name, k)
    if name.startswith("gd2po"):
        opts["query_weight"] = query_weight
    if name == "static":
        opts["form"] = form
    defined = ESTIMATORS[name].batch_norms
    if batch_norm is not None and defined and batch_norm not in defined:
        # a method that defines its own normalisation rejects another one, naming both
        with pytest.raises(ValueError, match=f"{name}.*batch_norm={batch_norm!r}"):
            compute_advantages(name, torch.tensor(scores), index, mask_from(lengths), batch_norm=batch_norm, **opts)
        return
    adv, metrics = compute_advantages(name, torch.tensor(scores), index, mask_from(lengths),
                                      batch_norm=batch_norm, **opts)
    effective = batch_norm or (defined[0] if defined else "token")
    if "reward_ranges" in opts:  # the plain loop takes the ranges in channel order
        opts["reward_ranges"] = [opts["reward_ranges"][f"c{c}"] for c in range(k)]
    expected = ref.reference(name, scores, index, lengths, batch_norm=effective, **opts)
    for j, length in enumerate(lengths):
        row = adv[j, :length].tolist()
        assert all(math.isclose(v, expected[j], rel_tol=1e-4, abs_tol=1e-4) for v in row), (j, row, expected[j])
        assert adv[j, length:].abs().sum() == 0
    assert all(math.isfinite(v) for v in metrics.values())
    adv = ref.per_reward_advantages(scores, index)  # the instruments, against the loop
    density = ref.densities(adv, index)
    weights = ref.dara_weights(density, 5.0, opts.get("dead_channel_weight", "1")) if name.startswith("dara") else None
    for c in range(k):
        assert metrics[f"density/c{c}"] == pytest.approx(density[c])
        assert metrics[f"energy/c{c}"] == pytest.approx(sum(row[c] ** 2 for row in adv), rel=1e-9, abs=1e-9)
        assert weights is None or metrics[f"weight/c{c}"] == pytest.approx(weights[c])


def test_energy_identities_gdpo_at_the_ideal_dara_sym_equalised():
    """64 groups of 8: channel 0 varies in every group, channel 1 (one success) in a quarter of them."""
    b, g = 64, 8
    scores = torch.stack([torch.randn(b * g, generator=torch.Generator().manual_seed(1)), torch.zeros(b * g)], 1)
    scores[:b * g // 4:g, 1] = 1.0
    _, m = compute_advantages("gdpo", scores, torch.arange(b).repeat_interleave(g), torch.ones(b * g, 3))
    assert [m["energy/c0"], m["energy/c1"]] == pytest.approx([b * (g - 1), b / 4 * (g - 1)], rel=1e-5)
    assert [m["energy_vs_ideal/c0"], m["energy_vs_ideal/c1"], m["energy_ratio/c1"]] == pytest.approx([1, 1, 0.25], rel=1e-5)
    assert m["active_groups/c1"] == b / 4
    _, m = compute_advantages("dara_sym", scores, torch.arange(b).repeat_interleave(g), torch.ones(b * g, 3))
    assert m["weight/c1"] == pytest.approx(2.0)  # sqrt(1 / 0.25) < w_max: the cap does not bind
    assert m["energy_weighted/c1"] == pytest.approx(m["energy_weighted/c0"], rel=1e-5)


def test_string_and_int_ids_agree():
    gen = torch.Generator().manual_seed(7)
    scores = torch.rand(30, 2, generator=gen)
    ints = torch.randint(0, 6, (30,), generator=gen)
    strings = [f"{v:08x}-uid" for v in (ints * 7919).tolist()]
    for name in ESTIMATOR_NAMES:
        a, b, c = (compute_advantages(name, scores, ids, torch.ones(30, 4), **options_for(name, 2))[0]
                   for ids in (ints, strings, ints.tolist()))
        assert torch.equal(a, b) and torch.equal(a, c)


@pytest.mark.parametrize("name", ESTIMATOR_NAMES)
def test_degenerate_batches_are_finite(name):
    k3 = torch.tensor([[1.0, 0.0, 1.0]] * 6)  # every group constant, K = 3
    cases = [
        (k3, [0, 0, 0, 1, 1, 1]),
        (torch.tensor([[1.0, 1.0], [0.0, 1.0], [2.0, 0.0]]), ["a", "b", "c"]),  # single-response groups
        (torch.tensor([[0.0], [1.0], [1.0], [0.0]]), [0, 0, 1, 1]),  # one channel
    ]
    for scores, index in cases:
        k = scores.shape[1]
        adv, metrics = compute_advantages(name, scores, index, torch.ones(len(index), 3), **options_for(name, k))
        assert torch.isfinite(adv).all() and adv.dtype == torch.float32
        assert all(math.isfinite(v) for v in metrics.values())
    adv, _ = compute_advantages(name, k3, [0, 0, 0, 1, 1, 1], torch.ones(6, 3), **options_for(name, 3))
    assert torch.count_nonzero(adv) == 0  # nothing to learn from constant groups


def _param(message, id, **call):
    return pytest.param(call, message, id=id)


ONES_4x2 = {"scores": torch.ones(4, 2), "index": [0, 0, 1, 1], "mask": torch.ones(4, 1)}


@pytest.mark.parametrize("call, message", [
    _param("unknown estimator", "unknown-estimator", name="nope"),
    _param("group ids", "fewer-group-ids-than-rows", scores=torch.zeros(3, 1), mask=torch.ones(3, 1)),
    _param("rows", "mask-rows", mask=torch.ones(3, 1)),
    _param("NaN", "nan-score", scores=torch.tensor([[0.0], [math.nan]])),
    _param("NaN or inf", "inf-score", scores=torch.tensor([[0.0], [math.inf]])),
    _param("weights", "weights-count", scores=torch.zeros(2, 2), weights=[1.0]),
    _param("batch_norm", "batch-norm-mode", batch_norm="x"),
    _param("unknown option", "misspelt-option", wmax=2),
    _param("fixed channel weights", "static-without-weights", name="static"),
    _param("reward_ranges", "saw-without-ranges", name="saw"),
    _param("outside its reward_range", "score-outside-range", name="sa_mrpo", scores=torch.full((2, 1), 2.0),
           reward_ranges={"c0": [0, 1]}),
    _param("missing ['c1']", "range-missing-channel", name="saw", scores=torch.zeros(2, 2),
           reward_ranges={"c0": [0, 1]}),
    _param("not among the reward channels", "range-unknown-channel", reward_ranges={"format": [0, 1]}),
    _param("maps channel names", "ranges-not-a-mapping", name="saw", reward_ranges=[[0, 1]]),
    _param("[N, K]", "scores-3d", scores=torch.zeros(2, 1, 1)),
    _param("missing group id", "none-group-id", index=["a", None]),
    *[_param("rvpo_k must be a finite number > 0", f"rvpo_k-{k}", name="rvpo", rvpo_k=k, **ONES_4x2)
      for k in (0.0, -1.0, math.inf, math.nan)],
    _param("dead_channel_weight must be one of ['1', 'w_max']", "dead-channel-weight", name="dara_asym",
           dead_channel_weight="max", **ONES_4x2),
    _param("w_max must be >= 1", "w_max-below-1", w_max=0.5),
    _param("form must be one of", "form", form="x"),
    _param("tau", "tau-out-of-range", tau=2),
    _param("query_weight must be one of", "query-weight", query_weight="x"),
    _param("min < max", "range-reversed", reward_ranges={"c0": [1, 0]}),
    _param("must be [min, max]", "range-not-a-pair", reward_ranges={"c0": [0]}),
    _param("dead_channel_weight must be one of ['1', 'w_max'], got '5'", "dead-channel-number", dead_channel_weight=5),
    _param("estimator 'gdpo' has no option(s) ['temperature'] (options.<name>); it declares: none",
           "undeclared-module-option", options={"temperature": 2}),
    _param("unknown option(s) ['estimator_module']", "estimator-module-not-an-option", estimator_module="m.py"),
])
def test_bad_input_raises_named_error(call, message):
    call = {"name": "gdpo", "scores": torch.zeros(2, 1), "index": [0, 0], "mask": torch.ones(2, 1), **call}
    with pytest.raises(ValueError, match=re.escape(message)):
        compute_advantages(call.pop("name"), call.pop("scores"), call.pop("index"), call.pop("mask"), **call)


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.float64])
def test_any_mask_dtype_gives_float32_zero_outside_the_mask(dtype):
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 1, 1]], dtype=dtype)
    adv, _ = compute_advantages("dara_asym", torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]]),
                                [0, 0, 1, 1], mask)
    assert adv.dtype == torch.float32 and torch.all(adv[mask == 0] == 0) and adv.abs().sum() > 0


def test_gd2po_orders_differ_and_drop_conflicts():
    # group 0: both responses conflict (up on one channel, down on the other) -> dropped, c_0 = 0;
    # group 1: response 4 conflicts, responses 3 and 5 are kept -> c_1 = 2/3; group 2: nothing dropped.
    scores = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    index, mask = [0, 0, 1, 1, 1, 2, 2], torch.ones(7, 3)
    before, m = compute_advantages("gd2po_hard", scores, index, mask)
    after, _ = compute_advantages("gd2po_hard", scores, index, mask, query_weight="after_whiten")
    assert before[:2].abs().sum() == 0 and after[:2].abs().sum() == 0 and before[3].abs().sum() == 0
    assert m["gd2po/dropped_fraction"] == pytest.approx(3 / 7)
    # c_1 < 1 scales group 1 before whitening in one order and after it in the other: the results differ
    assert not torch.allclose(before, after, atol=1e-3)


@pytest.mark.parametrize("name", ESTIMATOR_NAMES)
def test_channel_terms_sum_to_the_aggregate(name, monkeypatch):
    """The per-channel terms (energy_weighted/<k> is their sum of squares) add up to the aggregate advantage."""
    estimator, seen = ESTIMATORS[name], []
    recording = replace(estimator, fn=lambda batch: seen.append(estimator.fn(batch)) or seen[0])
    monkeypatch.setitem(ESTIMATORS, name, recording)
    gen = torch.Generator().manual_seed(8)
    scores, index = torch.randint(0, 2, (32, 3), generator=gen).double(), torch.arange(8).repeat_interleave(4)
    _, m = compute_advantages(name, scores, index, torch.ones(32, 1), **options_for(name, 3))
    torch.testing.assert_close(seen[0].channel_terms.sum(dim=1), seen[0].values)
    assert m["energy_weighted/c0"] == pytest.approx(float((seen[0].channel_terms[:, 0] ** 2).sum()))


def test_dara_algo_config_validates_itself_naming_the_problem():
    from dara.estimators import DaraAlgoConfig
    from dara.estimators.normalization import BATCH_NORM_MODES
    assert DaraAlgoConfig(dead_channel_weight=1).dead_channel_weight == "1" == DaraAlgoConfig(
        dead_channel_weight=1.0).dead_channel_weight  # a command line gives a number
    config = DaraAlgoConfig()
    for name in ESTIMATOR_NAMES:  # every estimator honours batch_norm, or rejects a mode it does not define
        own = ESTIMATORS[name].batch_norms
        assert config.resolved_batch_norm(name) == (own[0] if own else "token")
        for mode in BATCH_NORM_MODES:
            explicit = DaraAlgoConfig(batch_norm=mode)
            if own and mode not in own:
                with pytest.raises(ValueError, match=f"'{name}' does not take batch_norm='{mode}'"):
                    explicit.resolved_batch_norm(name)
            else:
                assert explicit.resolved_batch_norm(name) == mode
    # compute_advantages' defaults are DaraAlgoConfig's: w_max binds at the dataclass default
    scores = torch.tensor([[1.0, 1.0]] + [[0.0, 0.0]] * 3 + [[1.0, 0.0], [0.0, 0.0]] * 30)
    index = [0] * 4 + [g for g in range(1, 31) for _ in range(2)]
    _, metrics = compute_advantages("dara_sym", scores, index, torch.ones(len(scores), 1), channel_names=["a", "b"])
    assert metrics["weight/b"] == pytest.approx(config.w_max)

