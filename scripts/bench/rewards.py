"""Reward benchmark: responses per second, serial versus the hard-timeout pool, and the cost of adversarial math.

Everything is measured side by side in one process on realistic inputs:
- math: responses built from the DeepScaleR-style train sample and the five evaluation sets (their native
  answer forms), half correct, with a think block; scored by rewards.verl_entry.score_sample, which is
  what each pool worker of the dara_parallel reward manager runs;
- tool calling: the 400 model-written ToolRL outputs and the 80 held-out ground truths, scored against
  their own or another row's ground truth.
The adversarial batch replaces 1% of the math responses with power towers and huge factorials, scored
once with the default evaluation guard and once with the guard off (then each one costs a full time
limit on a worker: the worst case the limit allows).

    python scripts/bench/rewards.py                                  # 8,192 math + 2,048 tool responses
    python scripts/bench/rewards.py --math-count 1024 --tool-count 512 --pool-sizes 1 2   # a quick look

Targets (issue 4): the pool scales with cores; the batch with 1% adversarial responses finishes within
2x the clean batch.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from rewards import math as math_reward  # noqa: E402
from rewards.pool import OK, HardTimeoutPool, available_cpus  # noqa: E402
from rewards.verl_entry import POOL_PRELOAD, RewardOptions, score_sample  # noqa: E402

DATA = Path("/work/shared/data")
MATH_SOURCES = {
    "aime.json": "aime24",
    "amc.json": "amc23",
    "math.json": "math500",
    "minerva.json": "minerva",
    "olympiad_bench.json": "olympiad_bench",
}
ADVERSARIAL_ANSWERS = ["9^{9^{9^{9}}}", "(10^{100})!", "3^{3^{3^{3}}}", "99999999^{99999999}", "10^{10^{10}}"]


# ----------------------------------------------------------------------------- inputs
def math_items(count: int, seed: int = 0) -> list[tuple]:
    """(data_source, response, answer, response_tokens): half right, half another problem's answer."""
    rng = random.Random(seed)
    pool = []
    train = json.loads((DATA / "math_train_sample" / "aime_train.json").read_text())
    pool += [("deepscaler", row["solution"], row["answer"]) for row in train]
    for name, source in MATH_SOURCES.items():
        for row in json.loads((DATA / "math_benchmarks" / name).read_text()):
            pool.append((source, row.get("solution") or row["problem"], row["answer"]))
    items = []
    for index in range(count):
        source, reasoning, answer = pool[index % len(pool)]
        if isinstance(reasoning, list):
            reasoning = "\n".join(reasoning)
        guess = answer if rng.random() < 0.5 else rng.choice(pool)[2]
        final = math_reward.reference_alternatives(guess)[0]
        response = f"{reasoning[:3000]}\n</think>\nSo the final answer is \\boxed{{{final}}}."
        items.append((source, response, answer, rng.randint(300, 8000)))
    rng.shuffle(items)
    return items


def with_adversarial(items: list[tuple], share: float, seed: int = 1) -> tuple[list[tuple], int]:
    rng = random.Random(seed)
    items = list(items)
    chosen = rng.sample(range(len(items)), max(1, round(share * len(items))))
    for k, index in enumerate(chosen):
        source, _, answer, tokens = items[index]
        tower = ADVERSARIAL_ANSWERS[k % len(ADVERSARIAL_ANSWERS)]
        items[index] = (source, f"Thinking...\n</think>\nThe answer is \\boxed{{{tower}}}", answer, tokens)
    return items, len(chosen)


def tool_items(count: int, seed: int = 0) -> list[tuple]:
    """("rlla", response, ground_truth, None): two thirds scored against their own ground truth."""
    rng = random.Random(seed)
    import pandas as pd  # only here: --items runs need no pandas

    outputs = [row["output"] for row in json.loads((DATA / "toolrl" / "rlla_sft.json").read_text())]
    truths = [
        r["ground_truth"] for r in pd.read_parquet(DATA / "toolrl" / "rlla_4k_test.parquet")["reward_model"]
    ]
    texts = outputs + truths
    items = []
    for index in range(count):
        text = texts[index % len(texts)]
        truth = text if rng.random() < 2 / 3 else rng.choice(texts)
        items.append(("rlla", text + "<|im_end|>", truth, None))
    return items


# ----------------------------------------------------------------------------- timing
def clear_answer_caches() -> None:
    """Empty this process's parse caches (math-verify's and sympy's), as a fresh pool worker has them."""
    import sympy.core.cache
    from math_verify import parser

    parser.parse_latex_cached.cache_clear()
    parser.parse_expr_cached.cache_clear()
    sympy.core.cache.clear_cache()


def time_serial(items, options) -> float:
    clear_answer_caches()
    started = time.perf_counter()
    for source, response, truth, tokens in items:
        score_sample(source, response, truth, tokens, options)
    return time.perf_counter() - started


def time_pool(pool: HardTimeoutPool, items, options) -> tuple[float, dict]:
    started = time.perf_counter()
    outcomes = pool.map(score_sample, [(*item, options) for item in items])
    seconds = time.perf_counter() - started
    counts = {
        "timeouts": sum(o.status == "timeout" for o in outcomes),
        "errors": sum(o.status == "error" for o in outcomes),
        "finished": [i for i, o in enumerate(outcomes) if o.status == OK],
    }
    return seconds, counts


def warm_pool(size: int, timeout_s: float) -> HardTimeoutPool:
    """A pool whose workers have all started and warmed up (start-up is not part of any timing)."""
    pool = HardTimeoutPool(size, timeout_s, preload=POOL_PRELOAD)
    assert all(o.status == OK for o in pool.map(time.sleep, [(0.05,)] * (4 * size)))
    return pool


def chunks(items: list, rounds: int) -> list[list]:
    size = -(-len(items) // rounds)
    return [items[k * size : (k + 1) * size] for k in range(rounds) if items[k * size : (k + 1) * size]]


def median(values):
    return statistics.median(values) if values else float("nan")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--math-count", type=int, default=8192)
    parser.add_argument("--tool-count", type=int, default=2048)
    parser.add_argument(
        "--pool-sizes", type=int, nargs="*", default=None, help="default: 1, 2, 4, ... the CPUs"
    )
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds (each mode times 1/rounds)")
    parser.add_argument("--adversarial-share", type=float, default=0.01)
    parser.add_argument("--timeout-s", type=float, default=RewardOptions().timeout_s, help="per-item limit")
    parser.add_argument("--skip-unguarded", action="store_true", help="skip the pass with the guard off")
    parser.add_argument(
        "--items", help="read the math and tool items from this JSON file (see --export-items)"
    )
    parser.add_argument("--export-items", help="write the items to this JSON file and stop")
    args = parser.parse_args(argv)

    cpus = available_cpus()
    sizes = args.pool_sizes or sorted({1, cpus} | {2**k for k in range(1, 8) if 2**k < cpus})
    largest = sizes[-1]
    options = RewardOptions(timeout_s=args.timeout_s)
    unguarded = RewardOptions(timeout_s=args.timeout_s, max_answer_digits=None)
    if args.items:
        saved = json.loads(Path(args.items).read_text())
        math_batch = [tuple(item) for item in saved["math"]][: args.math_count]
        tool_batch = [tuple(item) for item in saved["tool"]][: args.tool_count]
    else:
        math_batch, tool_batch = math_items(args.math_count), tool_items(args.tool_count)
    if args.export_items:
        Path(args.export_items).write_text(json.dumps({"math": math_batch, "tool": tool_batch}))
        print(f"[bench] wrote {len(math_batch)} math and {len(tool_batch)} tool items to {args.export_items}")
        return 0
    print(
        f"[bench] {cpus} CPUs; {len(math_batch)} math, {len(tool_batch)} tool responses; pools {sizes}; "
        f"{args.rounds} interleaved rounds; limit {args.timeout_s:g} s per item",
        flush=True,
    )

    def fresh_pass(size, batch, pass_options):
        """One timed pass on a new, started and warmed pool: math-verify's caches start empty in every
        measured pass, so a later pass never looks faster only because it repeats answers."""
        pool = warm_pool(size, args.timeout_s)
        try:
            return time_pool(pool, batch, pass_options)
        finally:
            pool.close()

    # 1. The whole clean batch and the batch with adversarial responses, at the largest pool size.
    adversarial_batch, adversarial_count = with_adversarial(math_batch, args.adversarial_share)
    batch_rows = []
    passes = [("clean", math_batch, options), ("adversarial, guard on", adversarial_batch, options)]
    if not args.skip_unguarded:
        passes.append(("adversarial, guard off", adversarial_batch, unguarded))
    finished = None
    for name, batch, pass_options in passes:
        seconds, counts = fresh_pass(largest, batch, pass_options)
        finished = counts["finished"] if finished is None else finished
        batch_rows.append((name, seconds, counts["timeouts"]))
        print(
            f"[bench] math batch {name:24s} x{largest}: {len(batch)} in {seconds:.1f} s, "
            f"timeouts {counts['timeouts']}",
            flush=True,
        )

    # 2. Serial versus each pool size on the same responses, interleaved in rounds so that the drift of a
    # shared machine hits every mode alike. Math uses only responses the clean pass finished within the
    # limit: the others would stall the serial scorer for as long as they run (minutes, or forever).
    rates: dict[tuple[str, str], list[float]] = {}
    ratios: dict[tuple[str, str], list[float]] = {}
    scalable = [math_batch[i] for i in finished]
    for task, batch in (("math", scalable), ("tool", tool_batch)):
        for round_index, chunk in enumerate(chunks(batch, args.rounds)):
            serial_seconds = time_serial(chunk, options)
            round_rates = {"serial": len(chunk) / serial_seconds}
            for size in sizes:
                seconds, _ = fresh_pass(size, chunk, options)
                round_rates[f"pool x{size}"] = len(chunk) / seconds
            for mode, rate in round_rates.items():
                rates.setdefault((task, mode), []).append(rate)
                ratios.setdefault((task, mode), []).append(rate / round_rates["serial"])
            print(
                f"[bench] {task} round {round_index + 1}: "
                + ", ".join(f"{m} {r:.0f}/s" for m, r in round_rates.items()),
                flush=True,
            )

    print(
        f"\n{'task':5s} {'mode':10s} {'responses/s':>12s} {'x serial':>9s} {'x pool 1':>9s}   (medians over rounds)"
    )
    for task in ("math", "tool"):
        one = median(rates[(task, f"pool x{sizes[0]}")])
        for mode in ["serial"] + [f"pool x{size}" for size in sizes]:
            rate = median(rates[(task, mode)])
            print(f"{task:5s} {mode:10s} {rate:12.1f} {median(ratios[(task, mode)]):9.2f} {rate / one:9.2f}")
    clean_seconds = batch_rows[0][1]
    print(
        f"\nmath batch of {len(math_batch)} at x{largest}, {adversarial_count} adversarial responses "
        f"({args.adversarial_share:.0%}):"
    )
    for name, seconds, timeouts in batch_rows:
        print(f"  {name:24s} {seconds:8.1f} s  {seconds / clean_seconds:5.2f}x clean  timeouts {timeouts}")
    print(
        f"\n[bench] math pool scaling: x{largest} is {median(rates[('math', f'pool x{largest}')]) / median(rates[('math', f'pool x{sizes[0]}')]):.2f}x "
        f"x{sizes[0]} (ideal {largest / sizes[0]:g}x, {cpus} CPUs); 1% adversarial with the guard: "
        f"{batch_rows[1][1] / clean_seconds:.2f}x clean (target <= 2x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
