"""Reward benchmark: responses per second scored serially against the hard-timeout pool (rewards.pool) at each
size, on the sample data's math and ToolRL responses, scored as the dara_parallel reward manager's workers score
them (docs/rewards.md). Modes are interleaved in rounds so a shared machine's drift hits each alike.

    python scripts/bench/rewards.py                                          # 8,192 math + 2,048 tool responses
    python scripts/bench/rewards.py --math-count 512 --tool-count 512 --pool-sizes 1 2 --rounds 2   # a quick look
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

from rewards.pool import OK, HardTimeoutPool, available_cpus  # noqa: E402
from rewards.toolrl import reference_calls  # noqa: E402
from rewards.verl_entry import POOL_PRELOAD, RewardOptions, score_sample  # noqa: E402
from tasks.math_answers import reference_answer  # noqa: E402

DATA = _HERE.parents[1] / "sample_data"
MATH_SOURCES = {"aime.json": "aime24", "amc.json": "amc23", "math.json": "math500", "minerva.json": "minerva",
                "olympiad_bench.json": "olympiad_bench"}


def math_items(count: int, seed: int = 0) -> list[tuple]:
    """(data_source, response, answer, response_tokens): half right, half another problem's answer."""
    rng = random.Random(seed)
    train = json.loads((DATA / "math_train_sample" / "aime_train.json").read_text())
    pool = [("deepscaler", row["solution"], row["answer"]) for row in train]
    for name, source in MATH_SOURCES.items():
        pool += [(source, row.get("solution") or row["problem"], row["answer"])
                 for row in json.loads((DATA / "math_benchmarks" / name).read_text())]
    items = []
    for index in range(count):
        source, reasoning, answer = pool[index % len(pool)]
        reasoning = "\n".join(reasoning) if isinstance(reasoning, list) else reasoning
        final = reference_answer(answer if rng.random() < 0.5 else rng.choice(pool)[2])
        response = f"{reasoning[:3000]}\n</think>\nSo the final answer is \\boxed{{{final}}}."
        items.append((source, response, answer, rng.randint(300, 8000)))
    rng.shuffle(items)
    return items


def readable(truth: str) -> bool:
    try:
        reference_calls(truth)
    except ValueError:
        return False
    return True


def tool_items(count: int, seed: int = 0) -> list[tuple]:
    """("rlla", response, ground_truth, None): two thirds scored against their own ground truth."""
    import pandas as pd

    rng = random.Random(seed)
    outputs = [row["output"] for row in json.loads((DATA / "toolrl" / "rlla_sft.json").read_text())]
    truths = [r["ground_truth"] for r in pd.read_parquet(DATA / "toolrl" / "rlla_4k_test.parquet")["reward_model"]]
    texts = outputs + truths
    scorable = [t for t in texts if readable(t)]  # ground truths the ToolRL scorer can read
    items = []
    for index in range(count):
        text = texts[index % len(texts)]
        truth = text if rng.random() < 2 / 3 and readable(text) else rng.choice(scorable)
        items.append(("rlla", text + "<|im_end|>", truth, None))
    return items


def rate_serial(items, options) -> float:
    started = time.perf_counter()
    for item in items:
        score_sample(*item, options)
    return len(items) / (time.perf_counter() - started)


def rate_pool(pool: HardTimeoutPool, items, options) -> float:
    started = time.perf_counter()
    outcomes = pool.map(score_sample, [(*item, options) for item in items])
    seconds = time.perf_counter() - started
    failed = [o for o in outcomes if o.status != OK]
    if failed:
        raise SystemExit(f"[bench] {len(failed)} of {len(items)} items failed in the pool: {failed[0].error}")
    return len(items) / seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--math-count", type=int, default=8192)
    parser.add_argument("--tool-count", type=int, default=2048)
    parser.add_argument("--pool-sizes", type=int, nargs="*", default=None, help="default: 1, 2, 4, ... the CPUs")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds (each mode times 1/rounds)")
    parser.add_argument("--timeout-s", type=float, default=RewardOptions().timeout_s, help="per-item limit")
    args = parser.parse_args(argv)

    cpus = available_cpus()
    sizes = args.pool_sizes or sorted({1, cpus} | {2**k for k in range(1, 8) if 2**k < cpus})
    options = RewardOptions(timeout_s=args.timeout_s)
    batches = {"math": math_items(args.math_count), "tool": tool_items(args.tool_count)}
    print(f"[bench] {cpus} CPUs; {args.math_count} math, {args.tool_count} tool responses; pools {sizes}; "
          f"{args.rounds} interleaved rounds", flush=True)
    pools = {size: HardTimeoutPool(size, args.timeout_s, preload=POOL_PRELOAD) for size in sizes}
    try:
        for pool in pools.values():  # started and warm: start-up is not part of any timing
            rate_pool(pool, batches["math"][: 16 * pool.num_processes], options)
        ratios: dict[tuple[str, str], list[float]] = {}
        for task, batch in batches.items():
            size = -(-len(batch) // args.rounds)
            for round_index in range(args.rounds):
                chunk = batch[round_index * size:(round_index + 1) * size]
                serial = rate_serial(chunk, options)
                rates = {"serial": serial, **{f"pool x{n}": rate_pool(pools[n], chunk, options) for n in sizes}}
                for mode, rate in rates.items():
                    ratios.setdefault((task, mode), []).append(rate / serial)
                print(f"[bench] {task} round {round_index + 1}: "
                      + ", ".join(f"{mode} {rate:.0f}/s" for mode, rate in rates.items()), flush=True)
    finally:
        for pool in pools.values():
            pool.close()
    print(f"\n{'task':5s} {'mode':10s} {'x serial':>9s}   (medians over {args.rounds} rounds)")
    for (task, mode), values in ratios.items():
        print(f"{task:5s} {mode:10s} {statistics.median(values):9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
