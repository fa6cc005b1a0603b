"""Reward benchmark: responses per second, serial against the hard-timeout pool, and the cost of adversarial math
(1% power towers and huge factorials, with the evaluation guard on and off), on the sample data's math and ToolRL
responses scored as the dara_parallel reward manager's workers score them (docs/rewards.md).

    python scripts/bench/rewards.py                                  # 8,192 math + 2,048 tool responses
    python scripts/bench/rewards.py --math-count 1024 --tool-count 512 --pool-sizes 1 2   # a quick look
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
from tasks.math_answers import reference_answer  # noqa: E402

# The sample data carried in the repository (sample_data/README.md).
DATA = _HERE.parents[1] / "sample_data"
MATH_SOURCES = {"aime.json": "aime24", "amc.json": "amc23", "math.json": "math500", "minerva.json": "minerva",
                "olympiad_bench.json": "olympiad_bench"}
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
        final = reference_answer(guess)
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


def _toolrl_readable(truth: str) -> bool:
    from rewards.toolrl import reference_calls

    try:
        reference_calls(truth)
    except ValueError:
        return False
    return True


def tool_items(count: int, seed: int = 0) -> list[tuple]:
    """("rlla", response, ground_truth, None): two thirds scored against their own ground truth."""
    rng = random.Random(seed)
    import pandas as pd  # only here: --items runs need no pandas

    outputs = [row["output"] for row in json.loads((DATA / "toolrl" / "rlla_sft.json").read_text())]
    truths = [r["ground_truth"] for r in pd.read_parquet(DATA / "toolrl" / "rlla_4k_test.parquet")["reward_model"]]
    texts = outputs + truths
    # ground truths the original ToolRL scorer can read (17 SFT outputs mention "<tool_call>" in the thinking)
    readable = [t for t in texts if _toolrl_readable(t)]
    items = []
    for index in range(count):
        text = texts[index % len(texts)]
        truth = text if rng.random() < 2 / 3 and _toolrl_readable(text) else rng.choice(readable)
        items.append(("rlla", text + "<|im_end|>", truth, None))
    return items


# ----------------------------------------------------------------------------- timing
def time_serial(items, options) -> float:
    math_reward.clear_answer_caches()
    started = time.perf_counter()
    for source, response, truth, tokens in items:
        score_sample(source, response, truth, tokens, options)
    return time.perf_counter() - started


def clear_worker_caches(pool: HardTimeoutPool) -> None:
    """Empty every worker's answer caches: with all workers idle the pool hands each one of these items."""
    assert all(o.status == OK for o in pool.map(math_reward.clear_answer_caches, [()] * pool.num_processes))


def time_pool(pool: HardTimeoutPool, items, options) -> tuple[float, dict]:
    clear_worker_caches(pool)
    started = time.perf_counter()
    outcomes = pool.map(score_sample, [(*item, options) for item in items])
    seconds = time.perf_counter() - started
    return seconds, {"timeouts": sum(o.status == "timeout" for o in outcomes),
                     "finished": [i for i, o in enumerate(outcomes) if o.status == OK],
                     "busy_ms": 1000 * sum(o.seconds for o in outcomes) / max(len(outcomes), 1)}


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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--math-count", type=int, default=8192)
    parser.add_argument("--tool-count", type=int, default=2048)
    parser.add_argument("--pool-sizes", type=int, nargs="*", default=None, help="default: 1, 2, 4, ... the CPUs")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds (each mode times 1/rounds)")
    parser.add_argument("--adversarial-share", type=float, default=0.01)
    parser.add_argument("--timeout-s", type=float, default=RewardOptions().timeout_s, help="per-item limit")
    parser.add_argument("--skip-unguarded", action="store_true", help="skip the pass with the guard off")
    parser.add_argument("--items", help="read the math and tool items from this JSON file (see --export-items)")
    parser.add_argument("--export-items", help="write the items to this JSON file and stop")
    args = parser.parse_args(argv)

    cpus = available_cpus()
    sizes = args.pool_sizes or sorted({1, cpus} | {2**k for k in range(1, 8) if 2**k < cpus})
    largest = sizes[-1]
    options = RewardOptions(timeout_s=args.timeout_s)
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
    print(f"[bench] {cpus} CPUs; {len(math_batch)} math, {len(tool_batch)} tool responses; pools {sizes}; "
          f"{args.rounds} interleaved rounds; limit {args.timeout_s:g} s per item", flush=True)

    def fresh_pass(size, batch, pass_options):
        """One timed pass on a new, started pool (start-up excluded)."""
        pool = warm_pool(size, args.timeout_s)
        try:
            return time_pool(pool, batch, pass_options)
        finally:
            pool.close()

    # 1. The whole batch once at the largest pool size: which responses finish within the limit, and the worst
    # case the limit allows (1% adversarial with the evaluation guard off: each costs a full limit).
    adversarial_batch, adversarial_count = with_adversarial(math_batch, args.adversarial_share)
    clean_seconds, counts = fresh_pass(largest, math_batch, options)
    scalable = [math_batch[i] for i in counts["finished"]]
    print(f"[bench] math batch clean x{largest}: {len(math_batch)} in {clean_seconds:.1f} s, "
          f"timeouts {counts['timeouts']}", flush=True)
    unguarded = None
    if not args.skip_unguarded:
        seconds, counts = fresh_pass(largest, adversarial_batch,
                                     RewardOptions(timeout_s=args.timeout_s, max_answer_digits=None))
        unguarded = (seconds, counts["timeouts"])
        print(f"[bench] math batch {adversarial_count} adversarial, guard off, x{largest}: {seconds:.1f} s, "
              f"timeouts {counts['timeouts']}", flush=True)

    # 2. Serial, each pool size, and the largest pool with 1% adversarial responses, interleaved in rounds so the
    # drift of a shared machine hits every mode alike. Math uses only the responses the first pass finished within
    # the limit (the others would stall the serial scorer). "worker ms/item": a worker's time per response; when
    # it grows with the pool size, the pool is short of free cores. Long-lived pools, as in training, warmed by one
    # untimed pass; every timed pass starts with empty answer caches so repeated answers never flatter a later one.
    rates, ratios, busy = {}, {}, {}
    adversarial_mode = f"x{largest} +1% adv."
    pools = {size: warm_pool(size, args.timeout_s) for size in sizes}
    warm_up = scalable[: 64 * largest]
    time_serial(warm_up, options)
    for pool in pools.values():
        time_pool(pool, warm_up, options)
    for task, batch in (("math", scalable), ("tool", tool_batch)):
        for round_index, chunk in enumerate(chunks(batch, args.rounds)):
            serial_seconds = time_serial(chunk, options)
            round_rates, round_busy = {"serial": len(chunk) / serial_seconds}, {"serial": 1000 * serial_seconds / len(chunk)}
            runs = [(f"pool x{size}", size, chunk) for size in sizes]
            if task == "math":
                runs.append((adversarial_mode, largest, with_adversarial(chunk, args.adversarial_share, seed=round_index)[0]))
            for mode, size, items in runs:
                seconds, counts = time_pool(pools[size], items, options)
                round_rates[mode], round_busy[mode] = len(items) / seconds, counts["busy_ms"]
            for mode, rate in round_rates.items():
                rates.setdefault((task, mode), []).append(rate)
                ratios.setdefault((task, mode), []).append(rate / round_rates["serial"])
                busy.setdefault((task, mode), []).append(round_busy[mode])
            print(f"[bench] {task} round {round_index + 1}: " + ", ".join(f"{m} {r:.0f}/s" for m, r in round_rates.items()),
                  flush=True)
    for pool in pools.values():
        pool.close()

    print(f"\n{'task':5s} {'mode':16s} {'responses/s':>12s} {'x serial':>9s} {'x pool ' + str(sizes[0]):>9s} "
          f"{'worker ms/item':>15s}   (medians over {args.rounds} rounds)")
    for task in ("math", "tool"):
        one = median(rates[(task, f"pool x{sizes[0]}")])
        for mode in ["serial", *(f"pool x{size}" for size in sizes), *([adversarial_mode] if task == "math" else [])]:
            rate = median(rates[(task, mode)])
            print(f"{task:5s} {mode:16s} {rate:12.1f} {median(ratios[(task, mode)]):9.2f} {rate / one:9.2f} "
                  f"{median(busy[(task, mode)]):15.2f}")
    top = rates[("math", f"pool x{largest}")]
    scaling = median(top) / median(rates[("math", f"pool x{sizes[0]}")])
    adversarial_ratio = median([clean / adv for clean, adv in zip(top, rates[("math", adversarial_mode)], strict=True)])
    print(f"\n[bench] math pool scaling: x{largest} is {scaling:.2f}x x{sizes[0]} (ideal {largest / sizes[0]:g}x, "
          f"{cpus} CPUs)")
    print(f"[bench] 1% adversarial math with the guard: {adversarial_ratio:.2f}x the clean time (target <= 2x)")
    if unguarded:
        print(f"[bench] 1% adversarial math with the guard off: {unguarded[0] / clean_seconds:.2f}x the clean "
              f"batch ({unguarded[1]} timeouts of {args.timeout_s:g} s on {largest} workers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
