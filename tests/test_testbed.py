"""The CPU testbed: task scoring, the policy's distribution, PPO loss, statistics; end to end (slow), `python -m
dara.testbed --quick` writes every output and the GDPO energy identity holds."""

from __future__ import annotations

import csv
import itertools
import json
import math
import statistics

import pytest
import torch

from dara.testbed import stats, task
from dara.testbed.cli import main
from dara.testbed.experiments import ALL_ESTIMATORS, quick_studies
from dara.testbed.policy import TinyPolicy
from dara.testbed.report import SUMMARY_COLUMNS
from dara.testbed.task import CLOSE, EOS, NUM_SPECIAL, OPEN, TaskConfig, build_prompts, response_mask
from dara.testbed.train import RunConfig, clipped_surrogate_loss, estimator_options, ppo_update, train_run


def random_tokens(config: TaskConfig, n: int, seed: int) -> torch.Tensor:
    """Random responses biased towards the structure the rewards look for (tags, EOS, targets)."""
    gen = torch.Generator().manual_seed(seed)
    weights = torch.ones(config.vocab_size)
    weights[EOS], weights[OPEN], weights[CLOSE] = 2.0, 3.0, 3.0
    tokens = torch.multinomial(weights.expand(n, -1), config.max_len, replacement=True, generator=gen)
    tokens[: n // 4, 0] = OPEN
    return tokens


def score_loop(tokens: torch.Tensor, targets: torch.Tensor, config: TaskConfig) -> torch.Tensor:
    """Plain per-response reference implementation of `score`."""
    rows = []
    for seq, target in zip(tokens.tolist(), targets.tolist(), strict=True):
        response = seq[: seq.index(EOS) + 1] if EOS in seq else seq
        ended = EOS in seq
        content = [t for t in response if t >= NUM_SPECIAL]
        correct = sum(1 for i, t in enumerate(target) if i < len(content) and content[i] == t)
        formatted = ended and len(response) >= 3 and response[0] == OPEN and response[-2] == CLOSE
        row = [correct / len(target), float(formatted)]
        if config.length_channel:
            row.append(float(ended and len(response) <= config.length_budget))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float32)


@pytest.mark.parametrize("length_channel", [False, True])
def test_score_matches_loop_reference(length_channel):
    config = TaskConfig(length_channel=length_channel)
    prompts = build_prompts(config)
    tokens = random_tokens(config, 4000, seed=1)
    rows = torch.randint(0, prompts.targets.shape[0], (4000,), generator=torch.Generator().manual_seed(2))
    targets = prompts.targets[rows]
    # put the target in the first content positions of some rows, so correctness takes every value
    tokens[:500, 1 : 1 + config.answer_slots] = targets[:500]
    fast = task.score(tokens, targets, config)
    assert fast.shape == (4000, len(config.channel_names)) and torch.equal(fast, score_loop(tokens, targets, config))
    assert len(set(fast[:, 0].tolist())) == config.answer_slots + 1  # every partial-credit level occurs
    assert 0 < fast[:, 1].mean() < 1


def test_response_lengths_and_mask():
    tokens = torch.tensor([[5, 6, EOS, 7, EOS], [EOS, 5, 5, 5, 5], [5, 5, 5, 5, 5]])
    assert task.response_lengths(tokens).tolist() == [3, 1, 5]
    assert response_mask(tokens).tolist() == [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]]


def test_prompts_targets_are_per_slot_permutations_and_split_is_disjoint():
    config = TaskConfig()
    prompts = build_prompts(config)
    assert prompts.digits.shape == (config.num_content**config.answer_slots, config.answer_slots)
    for slot in range(config.answer_slots):
        mapping = {}
        for d, t in zip(prompts.digits[:, slot].tolist(), prompts.targets[:, slot].tolist(), strict=True):
            assert mapping.setdefault(d, t) == t  # the target of a slot depends on that slot's digit only
        assert sorted(mapping.values()) == list(range(NUM_SPECIAL, NUM_SPECIAL + config.num_content))
    train, held_out = set(prompts.train_ids.tolist()), set(prompts.eval_ids.tolist())
    assert not train & held_out and len(train | held_out) == prompts.digits.shape[0]


@pytest.mark.parametrize("knob, value", [("format_init_rate", 0.5), ("eos_init_prob", 1.0), ("max_len", 4)])
def test_bad_task_knobs_are_rejected_with_the_knob_named(knob, value):
    with pytest.raises(ValueError, match=knob):
        TaskConfig(**{knob: value})


def all_responses(config: TaskConfig) -> torch.Tensor:
    """Every distinct response: n non-EOS tokens then EOS (padded with EOS), or max_len non-EOS tokens."""
    non_eos = range(1, config.vocab_size)
    return torch.tensor([list(body) + [EOS] * (config.max_len - n) for n in range(config.max_len + 1)
                         for body in itertools.product(non_eos, repeat=n)])


def perturbed_policy(config: TaskConfig, seed: int) -> TinyPolicy:
    torch.manual_seed(seed)
    policy = TinyPolicy(config, hidden=16, embed=4)
    with torch.no_grad():
        policy.head.weight.normal_(0.0, 1.0)  # a prompt- and prefix-dependent policy, not the flat start
    return policy


def test_policy_is_a_distribution_over_responses_and_sampling_follows_it():
    config = TaskConfig(num_content=2, answer_slots=1, max_len=4, format_init_rate=0.05, eos_init_prob=0.2)
    policy = perturbed_policy(config, seed=3)
    responses = all_responses(config)
    digits = torch.zeros(responses.shape[0], 1, dtype=torch.long)
    with torch.no_grad():
        log_probs, _ = policy.token_log_probs(digits, responses)
    seq_log_prob = (log_probs * response_mask(responses)).sum(dim=1)
    assert seq_log_prob.exp().sum().item() == pytest.approx(1.0, abs=1e-5)
    n = 40000
    samples = policy.sample(torch.zeros(n, 1, dtype=torch.long), torch.Generator().manual_seed(4))
    lookup = {tuple(r): i for i, r in enumerate(responses.tolist())}
    counts = torch.bincount(torch.tensor([lookup[tuple(s)] for s in samples.tolist()]), minlength=len(lookup))
    expected = seq_log_prob.exp() * n
    common = expected > 200
    assert common.sum() >= 5
    # each frequent response within 5 binomial standard deviations of its probability
    sd = (expected[common] * (1 - expected[common] / n)).sqrt()
    assert ((counts[common] - expected[common]).abs() < 5 * sd).all()


def test_initial_policy_samples_the_calibrated_distribution_and_format_rate():
    config = TaskConfig(format_init_rate=0.04)
    torch.manual_seed(0)
    policy = TinyPolicy(config)
    prompts = build_prompts(config)
    ids = torch.randint(0, prompts.digits.shape[0], (30000,), generator=torch.Generator().manual_seed(5))
    digits = prompts.digits[ids]
    with torch.no_grad():
        previous, count = policy.prefix_summaries(torch.randint(0, config.vocab_size, (5, config.max_len)))
        probs = torch.softmax(policy.logits(digits[:5], previous, count), dim=-1)
    assert torch.allclose(probs, task.initial_distribution(config).float().expand_as(probs), atol=1e-6)
    q_tag = task.initial_distribution(config)[OPEN].item()
    end_mass = 1.0 - (1.0 - config.eos_init_prob) ** (config.max_len - 2)  # task.py: P(format) = q_t^2 * end mass
    assert q_tag * q_tag * end_mass == pytest.approx(0.04)
    tokens = policy.sample(digits, torch.Generator().manual_seed(6))
    rate = task.score(tokens, prompts.targets[ids], config)[:, 1].mean().item()
    assert abs(rate - 0.04) < 5 * math.sqrt(0.04 * 0.96 / 30000)


def test_clipped_surrogate_matches_loop_reference():
    gen = torch.Generator().manual_seed(7)
    ratio = torch.rand(6, 5, generator=gen) * 1.2 + 0.4
    adv = torch.randn(6, 5, generator=gen)
    mask = (torch.rand(6, 5, generator=gen) > 0.3).float()
    flat = zip(ratio.flatten().tolist(), adv.flatten().tolist(), mask.flatten().tolist(), strict=True)
    terms = [max(-a * r, -a * min(max(r, 0.8), 1.2)) for r, a, m in flat if m]
    assert clipped_surrogate_loss(ratio, adv, mask, 0.2).item() == pytest.approx(sum(terms) / len(terms), rel=1e-5)


def test_ppo_update_raises_the_probability_of_a_positively_advantaged_response():
    config = TaskConfig()
    policy = perturbed_policy(config, seed=8)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    digits = torch.zeros(16, config.answer_slots, dtype=torch.long)
    tokens = policy.sample(digits, torch.Generator().manual_seed(9))
    mask = response_mask(tokens)
    advantages = torch.zeros(16, 1).expand(-1, config.max_len).clone()
    advantages[0] = 1.0  # only response 0 is reinforced
    before = (policy.token_log_probs(digits[:1], tokens[:1])[0] * mask[:1]).sum()
    run = RunConfig(estimator="gdpo", num_prompts=2, group_size=8, mini_batches=1)
    ppo_update(policy, optimizer, digits, tokens, mask, advantages * mask, run, torch.Generator().manual_seed(1))
    after = (policy.token_log_probs(digits[:1], tokens[:1])[0] * mask[:1]).sum()
    assert after > before


def test_runs_are_reproducible_and_record_the_library_diagnostics():
    config = TaskConfig()
    run = RunConfig(estimator="dara_asym", seed=3, steps=3, num_prompts=8, group_size=4)
    first, final = train_run(config, run)
    second, _ = train_run(config, run)
    for record in first + second:
        record.pop("step_seconds")
    assert first == second
    assert {"density/format", "weight/format", "energy_vs_ideal/correctness", "reward/format/mean"} <= set(first[0])
    assert set(final) == {"eval/correctness", "eval/format"}


def test_a_custom_advantage_function_receives_the_batch_and_drives_training():
    """The hook a researcher uses to probe a new estimator before it enters the library."""
    from dara.estimators import compute_advantages
    calls = []

    def probe(name, scores, index, mask, **options):
        calls.append((name, tuple(scores.shape), len(index), tuple(mask.shape), options["channel_names"]))
        return compute_advantages("gdpo", scores, index, mask, **options)
    config = TaskConfig()
    train_run(config, RunConfig(estimator="my_estimator", steps=2, num_prompts=4, group_size=4), advantage_fn=probe)
    assert calls == [("my_estimator", (16, 2), 16, (16, config.max_len), ["correctness", "format"])] * 2


def test_estimator_options_cover_the_estimators_that_need_them():
    config = TaskConfig(length_channel=True)
    assert estimator_options("static", config)["weights"] == [1.0, 3.0, 3.0]
    assert estimator_options("saw", config)["reward_ranges"] == {name: [0.0, 1.0] for name in config.channel_names}
    assert estimator_options("gdpo", config) == {}


def test_mean_ci_matches_the_t_interval_formula():
    values = [3.0, 5.0, 4.0, 8.0, 6.0]
    mean, low, high = stats.mean_ci(values)
    half = 2.776 * statistics.stdev(values) / math.sqrt(5)
    assert (mean, low, high) == pytest.approx((statistics.mean(values), mean - half, mean + half))
    assert stats.mean_ci([2.0, math.nan]) == (2.0, 2.0, 2.0)
    assert stats.t_quantile_975(500) == 1.96
    with pytest.raises(ValueError, match="no finite value"):
        stats.mean_ci([math.nan])


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """`--quick` trains 24 testbed runs (timing: docs/measured.md): the tests that read them are slow."""
    out = tmp_path_factory.mktemp("testbed_quick")
    assert main(["--quick", "--out", str(out)]) == 0
    return out


def read_csv(path):
    return list(csv.DictReader(path.read_text().splitlines()))


@pytest.mark.slow
def test_quick_run_writes_every_output_and_the_documented_summary(quick_run):
    studies = quick_studies()
    names = {p.name for p in quick_run.iterdir()}
    assert {"summary.csv", "runs.csv", "config.json"} | {f"steps_{s.name}.csv" for s in studies} <= names
    assert all((quick_run / f"curves_{s.name}_G{g}.png").stat().st_size > 10_000 for s in studies for g in s.group_sizes)
    assert not [n for n in names if n.endswith(".tmp") or ".tmp." in n]  # no half-written file left
    assert set(json.loads((quick_run / "config.json").read_text())) == {s.name for s in studies}
    assert len(read_csv(quick_run / "runs.csv")) == sum(s.num_runs for s in studies)
    assert len(read_csv(quick_run / "steps_main.csv")) == studies[0].num_runs * studies[0].steps
    rows = read_csv(quick_run / "summary.csv")
    assert tuple(rows[0]) == SUMMARY_COLUMNS
    for estimator in ALL_ESTIMATORS:
        metrics = {r["metric"] for r in rows if r["study"] == "main" and r["estimator"] == estimator}
        assert {"steps_to_0.8", "steps_to_0.99", "final_correctness", "energy_vs_ideal/format"} <= metrics, estimator
    assert all(float(r["ci_low"]) <= float(r["mean"]) <= float(r["ci_high"]) for r in rows)
    assert {int(r["group_size"]) for r in rows if r["study"] == "group_size"} == set(studies[1].group_sizes)


@pytest.mark.slow
def test_energy_identities_hold_at_every_step(quick_run):
    """GDPO: E_k = B pi_k (G - 1) for every channel (up to the eps of the group std); DARA-Sym scales A_k by w_k,
    so its weighted energy is w_k^2 times that ideal."""
    rows = read_csv(quick_run / "steps_main.csv")
    checked, weights_above_one = 0, 0
    for r in rows:
        for channel in ("correctness", "format"):
            if r[f"energy_vs_ideal/{channel}"] == "":  # no active group this step: no ideal energy
                assert float(r[f"density/{channel}"]) == 0.0
                continue
            w = float(r[f"weight/{channel}"]) if r["estimator"] == "dara_sym" else 1.0
            if r["estimator"] in ("gdpo", "dara_sym"):
                assert float(r[f"energy_vs_ideal/{channel}"]) == pytest.approx(1.0, abs=1e-4)
                assert float(r[f"weighted_energy_vs_ideal/{channel}"]) == pytest.approx(w * w, rel=1e-3, abs=1e-4)
                checked += 1
                weights_above_one += w > 1.01
    assert checked > len(rows) / 5 and weights_above_one > 0  # the sparse channel was up-weighted at some step


@pytest.mark.slow
def test_steps_to_is_consistent_with_the_per_step_curves(quick_run):
    """runs.csv's steps_to_0.8 is the first step whose 5-step mean of format compliance reaches 0.8."""
    steps = read_csv(quick_run / "steps_main.csv")
    runs = [r for r in read_csv(quick_run / "runs.csv") if r["study"] == "main"]
    study = quick_studies()[0]
    for run in runs:
        curve = [float(r["reward/format/mean"]) for r in steps if (r["estimator"], r["seed"]) == (run["estimator"],
                                                                                                  run["seed"])]
        expected = next((i + 1 for i in range(4, len(curve)) if sum(curve[i - 4 : i + 1]) / 5 >= 0.8), study.steps)
        # the per-step CSV rounds to 5 digits; a tie at exactly 0.8 could flip by one step
        assert math.isclose(float(run["steps_to_0.8"]), expected, abs_tol=1)
