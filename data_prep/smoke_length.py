"""The length smoke variant (docs/data.md "smoke_length"), for the length race: synthetic sums, correctness dense;
one problem in 1 / CHECK_SHARE asks for a check and its target adds re-check lines after the boxed answer
(TAIL_LINES), LENGTH_LIMIT between one and two lines: length violations concentrate on that family."""

from __future__ import annotations

import random
from pathlib import Path

from data_prep import smoke
from data_prep.common import DataPrepError, make_row, write_parquet
from data_prep.smoke import group_density
from tasks import math as task

N_TRAIN, N_VAL = 640, 8  # one epoch = 40 steps of 16 prompts (the 162 distinct problems recur)
CHECK_SHARE = 0.25
# Before the question, so the operands sit as far from the answer in both families (the tiny model's attention is
# positional: after the question it made the family less often correct, 0.42 against 0.52).
CHECK_REQUEST = "Check your answer. "
TAIL_LINES = (1, 2)  # re-check lines after the boxed answer, chosen evenly per target
# Targets' response tokens (EOS included): no tail 13-15, one line 25-28, two 37-41 (checked on every row).
LENGTH_LIMIT = 34
MAX_RESPONSE_TOKENS = 64  # the rollout's cap (conf/task/smoke_length.yaml data.max_response_length)
# The template's default system turn: the warm start writes it out (smoke.warm_start); the rows have none.
DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
MAX_OPERAND, WARM_START_STEPS = 9, 300
PROBE_PROMPTS, PROBE_GROUP = 128, 8  # eight steps of 16 prompts; the race's group size
DESCRIPTION = "tiny model warm-started on sums: correctness dense, the length reward sparse (the length race)"


def re_check_tail(a: int, b: int, lines: int) -> str:
    """``lines`` re-check lines: plain text, no boxed answer, so the grader's last box stays the answer."""
    return "".join(f"\nRe-check: {a + b} - {b} = {a}." for _ in range(lines))


def problems(seed: int, count: int, max_operand: int) -> list[dict]:
    """``count`` sums {problem, answer, target, asks_check, tail_lines}; in each block of 1 / CHECK_SHARE problems
    exactly one (at a seeded place) asks for a check."""
    rng, block = random.Random(seed), round(1 / CHECK_SHARE)
    places = [rng.randrange(block) for _ in range(0, count, block)]
    items = []
    for index in range(count):
        asks_check = index % block == places[index // block]
        a, b = rng.randint(1, max_operand), rng.randint(1, max_operand)
        lines = rng.choice(TAIL_LINES) if asks_check else 0
        items.append({"problem": (CHECK_REQUEST if asks_check else "") + f"What is {a} + {b}?", "answer": str(a + b),
                      "target": f"{a} + {b} = {a + b}.\n\\boxed{{{a + b}}}" + re_check_tail(a, b, lines),
                      "asks_check": asks_check, "tail_lines": lines})
    return items


def without_tail(response: str) -> str:
    """The response up to the end of its first boxed answer (all of it when there is none)."""
    start = response.find("\\boxed{")
    end = response.find("}", start) if start >= 0 else -1
    return response if end < 0 else response[:end + 1]


def warm_start_record(item: dict) -> dict:
    """The form data_prep.smoke's tokenizer and warm start read."""
    return {"instruction": DEFAULT_SYSTEM, "input": task.prompt_text(item["problem"]), "output": item["target"]}


def to_rows(items: list[dict], split: str) -> list[dict]:
    """verl rows as data_prep.deepscaler writes them (the math prompt, the answer as ground truth)."""
    return [make_row(task.SMOKE_DATA_SOURCE, task.prompt_messages(item["problem"]), item["answer"],
                     {"split": split, "index": index, "asks_check": item["asks_check"]}, ability="math")
            for index, item in enumerate(items)]


def sample(model, tokenizer, items: list[dict], group: int, seed: int) -> list[dict]:
    """``group`` responses per problem at T = 1, each with its text, tokens and channels (also without the tail)."""
    from rewards import math as math_reward
    texts, counts = smoke.generate(model, tokenizer, [task.prompt_messages(item["problem"]) for item in items], group,
                                   seed, MAX_RESPONSE_TOKENS)
    out = []
    for position, (text, tokens) in enumerate(zip(texts, counts.tolist(), strict=True)):
        answer = items[position // group]["answer"]
        channels = math_reward.score(text, answer, tokens, LENGTH_LIMIT, grader="hendrycks")
        cut = math_reward.score(without_tail(text), answer, tokens, LENGTH_LIMIT, grader="hendrycks")
        out.append({"text": text, "tokens": tokens, "asks_check": items[position // group]["asks_check"], **channels,
                    "correct_without_tail": cut["correctness"]})
    return out


def _rate(values) -> float:
    values = list(values)
    return round(sum(values) / len(values), 4) if values else float("nan")


def summarise(samples: list[dict], group: int) -> dict:
    """Rates and group densities of both channels, overall and per family, and the independence checks."""
    def channels(part: list[dict]) -> dict:
        return {name: {"rate": _rate(s[name] for s in part),
                       "group_density": round(group_density([s[name] for s in part], group), 4)}
                for name in task.CHANNELS}

    family = [s for s in samples if s["asks_check"]]
    others = [s for s in samples if not s["asks_check"]]
    over = [s for s in samples if s["length"] == 0.0]
    within = [s for s in samples if s["length"] == 1.0]
    return {
        "samples": len(samples), "groups": len(samples) // group, "group_size": group,
        "correct_rate": _rate(s["correctness"] for s in samples),
        "length_violation_rate": _rate(1.0 - s["length"] for s in samples),
        "channels": channels(samples),
        "asks_check": {"groups": len(family) // group, "channels": channels(family)},
        "no_check": {"groups": len(others) // group, "channels": channels(others)},
        "independence": {
            "correct_rate_over_limit": _rate(s["correctness"] for s in over),
            "correct_rate_within_limit": _rate(s["correctness"] for s in within),
            "correct_rate_over_limit_asks_check": _rate(s["correctness"] for s in over if s["asks_check"]),
            "correct_rate_within_limit_asks_check": _rate(s["correctness"] for s in within if s["asks_check"]),
            "responses_whose_tail_changes_correctness": sum(s["correctness"] != s["correct_without_tail"]
                                                             for s in samples)},
        # the groups the authors' dynamic sampling would keep (their summed reward varies)
        "informative_group_share": round(group_density([s["correctness"] + s["length"] for s in samples], group), 4),
        "mean_response_tokens": round(sum(s["tokens"] for s in samples) / len(samples), 2),
        "example_samples": [s["text"] for s in samples[:group]],
        "temperature": 1.0, "max_new_tokens": MAX_RESPONSE_TOKENS, "length_limit": LENGTH_LIMIT,
        "prompts": "the first train prompts (the race's first steps)",
    }


def target_tokens(tokenizer, items: list[dict]) -> dict[str, list[int]]:
    """Per number of re-check lines: the fewest and most response tokens (EOS included) of the targets. The limit
    must hold every target with at most one line and no target with two (else DataPrepError)."""
    counts: dict[int, list[int]] = {}
    for item in items:
        counts.setdefault(item["tail_lines"], []).append(
            len(tokenizer(item["target"] + tokenizer.eos_token, add_special_tokens=False)["input_ids"]))
    spans = {str(lines): [min(found), max(found)] for lines, found in sorted(counts.items())}
    within = [n for lines, found in counts.items() if lines < max(TAIL_LINES) for n in found]
    over = counts.get(max(TAIL_LINES), [])
    if max(within) > LENGTH_LIMIT or (over and min(over) <= LENGTH_LIMIT) or max(within + over) > MAX_RESPONSE_TOKENS:
        raise DataPrepError(f"the length limit {LENGTH_LIMIT} does not split the targets by their re-check lines "
                            f"(response tokens per lines: {spans}; rollout cap {MAX_RESPONSE_TOKENS})")
    return spans


def build(out_dir, *, seed: int = 0, force: bool = False, probe_prompts: int = PROBE_PROMPTS) -> dict:
    """Build (or reuse) the length variant's assets in ``out_dir``; returns {"model_dir", "train", "val"}."""
    options = {"max_operand": MAX_OPERAND, "warm_start_steps": WARM_START_STEPS, "probe_prompts": probe_prompts}
    root = Path(__file__).parent.parent
    version = smoke.code_version(Path(__file__), root / "tasks" / "math.py", root / "rewards" / "math.py")
    return smoke.build_variant("smoke_length", out_dir, seed, force, options, version,
                               lambda staging: _build_into(staging, seed, probe_prompts), splits=("train", "val"))


def _build_into(staging: Path, seed: int, probe_prompts: int) -> dict:
    items = problems(seed, N_TRAIN + N_VAL, MAX_OPERAND)
    train, val = items[:N_TRAIN], items[N_TRAIN:]
    records = [warm_start_record(item) for item in train]
    tokenizer = smoke.train_tokenizer(smoke.chat_texts(records))
    lengths = smoke.token_lengths(tokenizer, [warm_start_record(item) for item in items], check=False)
    targets = target_tokens(tokenizer, items)
    model, tokenizer, warm, card = smoke.train_model(staging, tokenizer, records, seed, WARM_START_STEPS)
    card["tokenizer"].update(kind="byte-level BPE trained on this variant's train corpus", **lengths)
    found = summarise(sample(model, tokenizer, train[:probe_prompts], PROBE_GROUP, seed), PROBE_GROUP)
    write_parquet(to_rows(train, "train"), staging / "train.parquet")
    write_parquet(to_rows(val, "val"), staging / "val.parquet")
    return {
        **card, "data_source": task.SMOKE_DATA_SOURCE, "splits": {"train": len(train), "val": len(val)},
        "command": f"data_prep.smoke_length.build(seed={seed})", "prompt_template": "{problem.strip()}" + task.PROMPT_SUFFIX,
        "reward": {"channels": list(task.CHANNELS), "correctness_grader": task.DEFAULT_GRADER,
                   "length_limit": LENGTH_LIMIT},
        "targets": {"asks_check": sum(item["asks_check"] for item in train),
                    "tail_lines": {str(n): sum(item["tail_lines"] == n for item in train) for n in TAIL_LINES},
                    "response_tokens_by_tail_lines": targets},
        "warm_start": {**warm, "max_operand": MAX_OPERAND}, "length_probe": found}


add_arguments = smoke.add_arguments


def main(args) -> dict:
    return build(args.out, seed=args.seed, force=args.force)
