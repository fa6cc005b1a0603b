"""Estimator benchmark: every estimator next to verl's GRPO + whitening and the floor `adv[:, None] * mask` (one
read of the mask, one write: the least a token-level estimator does), timed side by side in one process.

    python scripts/bench/estimators.py [--shapes 256x128] [--device cuda [--compare-cpu]]"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import numpy as np
import torch

from dara.estimators import ESTIMATOR_NAMES, compute_advantages

PAPER_SHAPES = {"tool-calling": (2048, 1024, 4), "math": (8192, 8000, 16)}  # N, T, G
RANGES = {"correctness": [-3, 3], "format": [0, 1]}
OPTIONS = {"static": {"weights": [1.0, 5.0]}, "saw": {"reward_ranges": RANGES}, "sa_mrpo": {"reward_ranges": RANGES}}


def make_batch(n: int, t: int, group_size: int, device: str, seed: int = 0):
    """uid strings as verl makes them, ragged response lengths, a dense and a sparse channel."""
    gen = torch.Generator().manual_seed(seed)
    uids = np.array([str(uuid.UUID(int=int(g) + 1)) for g in range(n // group_size)], dtype=object)
    index = np.repeat(uids, group_size)
    correctness = torch.randint(-3, 4, (n,), generator=gen).double()
    fmt = (torch.rand(n, generator=gen) < 0.1).double()
    scores = torch.stack([correctness, fmt], dim=1).to(device)
    lengths = torch.randint(t // 8, t + 1, (n,), generator=gen)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float().to(device)
    return scores, index, mask


def paired(fn, floor_fn, repeats: int, device: str) -> tuple[float, float]:
    """Median time of `fn` and of its per-round ratio to the floor, timed in alternation (against drift)."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    fn(), floor_fn()  # warm-up (allocator, lazy imports, kernels)
    times, ratios = [], []
    for _ in range(repeats):
        pair = []
        for f in (floor_fn, fn):
            sync()
            start = time.perf_counter()
            f()
            sync()
            pair.append(time.perf_counter() - start)
        times.append(pair[1])
        ratios.append(pair[1] / pair[0])
    return statistics.median(times), statistics.median(ratios)


def verl_grpo_fn(scores, index, mask):
    try:
        from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
        from verl.utils.torch_functional import masked_whiten
    except ImportError:
        return None
    token_rewards = torch.zeros_like(mask)
    lengths = mask.sum(-1).long()
    token_rewards[torch.arange(mask.shape[0]), (lengths - 1).clamp(min=0)] = scores.sum(1).float()

    def run():
        adv, _ = compute_grpo_outcome_advantage(token_rewards, mask, index)
        return masked_whiten(adv, mask) * mask

    return run


def bench_shape(label, n, t, group_size, device, repeats):
    scores, index, mask = make_batch(n, t, group_size, device)
    adv = scores.sum(1).float()

    def floor():
        return adv[:, None] * mask

    rows = [("floor: adv[:, None] * mask", *paired(floor, floor, repeats, device))]
    verl_fn = verl_grpo_fn(scores, index, mask)
    if verl_fn is not None:
        rows.append(("verl 0.9.1 GRPO + masked_whiten", *paired(verl_fn, floor, max(1, repeats // 3), device)))
    for name in ESTIMATOR_NAMES:
        opts = dict(OPTIONS.get(name, {}), channel_names=["correctness", "format"])
        seconds, ratio = paired(lambda name=name, opts=opts: compute_advantages(name, scores, index, mask, **opts),
                                floor, repeats, device)
        rows.append((name, seconds, ratio))
        print(f"  [{label}] {name:<12} {seconds * 1e3:9.2f} ms  {ratio:5.2f}x floor", flush=True)
    return rows


def compare_with_cpu(shapes, device) -> int:
    """Every estimator on `device` against the same inputs on the CPU; returns how many differ by 1e-4 or more."""
    worst = []
    for label, (n, t, g) in shapes.items():
        for name in ESTIMATOR_NAMES:
            opts = dict(OPTIONS.get(name, {}), channel_names=["correctness", "format"])
            (adv, metrics), (cpu_adv, cpu_metrics) = (
                compute_advantages(name, *make_batch(n, t, g, d, seed=n), **opts) for d in (device, "cpu"))
            if set(metrics) != set(cpu_metrics):
                raise AssertionError(f"{name}: metric names differ on {device} and the CPU")
            worst.append((float((adv.cpu() - cpu_adv).abs().max()),
                          max(abs(metrics[k] - cpu_metrics[k]) for k in metrics), name, label))
    for adv_diff, metric_diff, name, label in sorted(worst, reverse=True)[:5]:
        print(f"  {label} {name:<12} advantages {adv_diff:.2e}  metrics {metric_diff:.2e}")
    off = sum(a >= 1e-4 or m >= 1e-4 for a, m, _, _ in worst)
    print(f"{len(worst)} comparisons on {device} against the CPU, {off} differ by 1e-4 or more")
    return off


def print_table(label, n, t, rows):
    verl = next((r for r in rows if r[0].startswith("verl")), None)
    print(f"\n### {label}: {n} responses x {t} tokens, K = 2\n")
    print("| estimator | median ms | x floor | x verl GRPO |\n|---|---:|---:|---:|")
    # x floor: median of per-round paired ratios; x verl: ratio of the two medians (verl's long Python loop slows
    # the floor runs paired with it, so its paired ratio understates its cost)
    for name, seconds, ratio in rows:
        print(f"| {name} | {seconds * 1e3:.2f} | {ratio:.2f} | {f'{seconds / verl[1]:.3f}' if verl else 'n/a'} |")
    return verl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--shapes", nargs="*", help="NxT[xG] shapes instead of the paper's two")
    parser.add_argument("--compare-cpu", action="store_true", help="compare with the CPU instead of timing")
    args = parser.parse_args()
    shapes = {spec: (*map(int, spec.split("x")), 4)[:3] for spec in args.shapes} if args.shapes else PAPER_SHAPES
    if args.compare_cpu:
        raise SystemExit(1 if compare_with_cpu(shapes, args.device) else 0)
    print(f"device {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"median of {args.repeats}", flush=True)
    summary = []
    for label, (n, t, g) in shapes.items():
        print(f"shape {label}: {n} x {t}, G = {g}", flush=True)
        rows = bench_shape(label, n, t, g, args.device, args.repeats)
        verl = print_table(label, n, t, rows)
        asym = next(r for r in rows if r[0] == "dara_asym")
        summary.append(f"{label}: dara_asym {asym[2]:.2f}x floor"
                       + (f", {asym[1] / verl[1]:.3f}x verl GRPO" if verl else ""))
    print("\nsummary: " + "; ".join(summary))


if __name__ == "__main__":
    main()
