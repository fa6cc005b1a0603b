"""The length smoke variant (docs/data.md "smoke_length"): the paper's math regime at toy scale, a dense
correctness reward beside a length reward active in few groups, for the length race.

Synthetic sums through the math task's prompt and its two channels (rewards.math: Hendrycks grader, length =
at most LENGTH_LIMIT response tokens, EOS included). A share CHECK_SHARE of the problems asks "Check your
answer."; their warm-start targets add one or two re-check lines after the boxed answer (TAIL_LINES) and the
limit sits between the two, so length violations concentrate on that family. A re-check line holds no boxed
answer, so correctness is decided before the tail and the channels stay independent. The build is
data_prep.smoke's; the card's ``length_probe`` samples the first ``probe_prompts`` train prompts PROBE_GROUP
times at T = 1.
"""

from __future__ import annotations

import random
from pathlib import Path

from data_prep import smoke
from data_prep.common import DataPrepError, make_row, write_parquet
from data_prep.smoke import group_density
from tasks import math as task

DATA_SOURCE = task.SMOKE_DATA_SOURCE   # the math task's synthetic problems (rewards.math scores them)
N_TRAIN = 640                          # one epoch = 40 steps of 16 prompts (the 162 distinct problems recur)
N_VAL = 8
CHECK_SHARE = 0.25                     # problems that ask for a check: the family whose targets get a tail
# before the question, so the operands sit as far from the answer in both families (the tiny model's attention is
# positional: placed after the question it made the family less often correct, 0.42 against 0.52)
CHECK_REQUEST = "Check your answer. "
TAIL_LINES = (1, 2)                    # re-check lines after the boxed answer, chosen evenly per target
# Response tokens (EOS included) of the targets under this corpus's tokenizer: no tail 13-15, one re-check line
# 25-28, two 37-41 (the build checks the gap on every row); the limit sits in it, so the second line crosses it.
LENGTH_LIMIT = 34
MAX_RESPONSE_TOKENS = 64               # the rollout's cap (conf/task/smoke_length.yaml data.max_response_length)
# The chat template adds Qwen's default system turn to a conversation without one (data_prep.smoke.CHAT_TEMPLATE):
# the warm start, which writes the system turn out (smoke.supervised_batches), gives it explicitly.
DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
# The knobs, chosen with the probe below (correct rate and correctness density at G = 8 over 64 prompts, except
# the first try's 128), before any race run:
# - operands up to 50, 250 steps (the check request after the question): correct 0.03, density 0.20: too hard;
# - up to 20: 200 / 300 / 400 steps: correct 0.07 / 0.10 / 0.13: too slow to learn for a build of a minute;
# - up to 9, request after the question: 150 / 250 / 400 / 600 steps: correct 0.08 / 0.33 / 0.51 / 0.82, and at
#   400 the family 0.42 against 0.52 for the others (hence CHECK_REQUEST before the question);
# - up to 9, request before the question: 200 / 300 / 400 / 500 steps: correct 0.24 / 0.51 / 0.60 / 0.79, density
#   0.86 / 0.92 / 0.83 / 0.61; the family over the limit 0.45 / 0.44 / 0.33 / 0.60 of the time (one token's
#   probability, moved by the warm start's noise); at 300 correct 0.53 over the limit and 0.50 within it.
MAX_OPERAND = 9
WARM_START_STEPS = 300
PROBE_PROMPTS = 128                    # eight steps of 16 prompts
PROBE_GROUP = 8                        # the race's group size


def problem(rng: random.Random, max_operand: int, asks_check: bool) -> dict:
    """One sum: its problem text, answer and warm-start target (with its re-check tail for the family)."""
    a, b = rng.randint(1, max_operand), rng.randint(1, max_operand)
    lines = rng.choice(TAIL_LINES) if asks_check else 0
    answer = str(a + b)
    target = f"{a} + {b} = {answer}.\n\\boxed{{{answer}}}" + re_check_tail(a, b, lines)
    return {"problem": (CHECK_REQUEST if asks_check else "") + f"What is {a} + {b}?", "answer": answer,
            "target": target, "asks_check": asks_check, "tail_lines": lines}


def re_check_tail(a: int, b: int, lines: int) -> str:
    """``lines`` re-check lines: plain text, no boxed answer, so the grader's last box stays the answer."""
    return "".join(f"\nRe-check: {a + b} - {b} = {a}." for _ in range(lines))


def problems(seed: int, count: int, max_operand: int) -> list[dict]:
    """``count`` sums; in each block of 1 / CHECK_SHARE consecutive problems exactly one (at a seeded place) asks
    for a check, so any run of prompts holds the family's share up to one block."""
    rng, block = random.Random(seed), round(1 / CHECK_SHARE)
    places = [rng.randrange(block) for _ in range(0, count, block)]
    return [problem(rng, max_operand, index % block == places[index // block]) for index in range(count)]


def without_tail(response: str) -> str:
    """The response up to the end of its first boxed answer (all of it when there is none): what is left when the
    re-check tail is cut off."""
    start = response.find("\\boxed{")
    end = response.find("}", start) if start >= 0 else -1
    return response if end < 0 else response[:end + 1]


def warm_start_record(item: dict) -> dict:
    """The form data_prep.smoke's tokenizer and warm start read (instruction = the template's default system)."""
    return {"instruction": DEFAULT_SYSTEM, "input": task.prompt_text(item["problem"]), "output": item["target"]}


def to_rows(items: list[dict], split: str) -> list[dict]:
    """verl rows as data_prep.deepscaler writes them (the math prompt, the answer as ground truth)."""
    return [make_row(DATA_SOURCE, task.prompt_messages(item["problem"]), item["answer"],
                     {"split": split, "index": index, "asks_check": item["asks_check"]}, ability="math")
            for index, item in enumerate(items)]


# ----------------------------------------------------------------------------------- the probe
def score(text: str, answer: str, tokens: int) -> dict[str, float]:
    """The math task's two channels of one response (rewards.math, the Hendrycks grader, LENGTH_LIMIT)."""
    from rewards import math as math_reward

    return math_reward.score(text, answer, tokens, LENGTH_LIMIT, grader="hendrycks")


def sample(model, tokenizer, items: list[dict], group: int, seed: int) -> list[dict]:
    """``group`` responses per problem at T = 1 (top-p 1), each with its text, token count and channels."""
    texts, counts = smoke.generate(model, tokenizer, [task.prompt_messages(item["problem"]) for item in items], group,
                                   seed, MAX_RESPONSE_TOKENS)
    out = []
    for position, (text, tokens) in enumerate(zip(texts, counts.tolist(), strict=True)):
        item = items[position // group]
        channels = score(text, item["answer"], tokens)
        out.append({"text": text, "tokens": tokens, "asks_check": item["asks_check"], **channels,
                    "correct_without_tail": score(without_tail(text), item["answer"], tokens)["correctness"]})
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


def probe(model, tokenizer, items: list[dict], seed: int, group: int = PROBE_GROUP) -> dict:
    return summarise(sample(model, tokenizer, items, group, seed), group)


# ----------------------------------------------------------------------------------- the build
def build(out_dir, *, seed: int = 0, force: bool = False, max_operand: int = MAX_OPERAND,
          warm_start_steps: int = WARM_START_STEPS, probe_prompts: int = PROBE_PROMPTS) -> dict:
    """Build (or reuse) the length variant's assets in ``out_dir``; returns {"model_dir", "train", "val"}."""
    if max_operand < 1 or warm_start_steps < 0:
        raise DataPrepError(f"max_operand must be >= 1 and warm_start_steps >= 0, got {max_operand}, "
                            f"{warm_start_steps}")
    if not 1 <= probe_prompts <= N_TRAIN:
        raise DataPrepError(f"probe_prompts must be in [1, {N_TRAIN}] (the train rows), got {probe_prompts}")
    options = {"max_operand": max_operand, "warm_start_steps": warm_start_steps, "probe_prompts": probe_prompts}
    here = Path(__file__).parent
    version = smoke.code_version(Path(__file__), here.parent / "tasks" / "math.py", here.parent / "rewards" / "math.py")

    def summary(card: dict) -> str:
        found = card["length_probe"]
        density = {name: channel["group_density"] for name, channel in found["channels"].items()}
        return (f"at T=1 correct {found['correct_rate']:.3f}, over the length limit "
                f"{found['length_violation_rate']:.3f}, group density {density} over {found['groups']} groups of "
                f"{found['group_size']}")

    return smoke.build_variant(
        "smoke_length", out_dir, seed, force, options, version,
        lambda staging: _build_into(staging, seed, max_operand, warm_start_steps, probe_prompts), summary,
        splits=("train", "val"))


def target_tokens(tokenizer, items: list[dict]) -> dict[str, list[int]]:
    """Per number of re-check lines: the fewest and most response tokens (EOS included) of the targets. The limit
    must hold every target with at most one line and no target with two (else DataPrepError)."""
    counts: dict[int, list[int]] = {}
    for item in items:
        ids = tokenizer(item["target"] + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
        counts.setdefault(item["tail_lines"], []).append(len(ids))
    spans = {str(lines): [min(found), max(found)] for lines, found in sorted(counts.items())}
    within = [n for lines, found in counts.items() if lines < max(TAIL_LINES) for n in found]
    over = counts.get(max(TAIL_LINES), [])
    if max(within) > LENGTH_LIMIT or (over and min(over) <= LENGTH_LIMIT) or max(within + over) > MAX_RESPONSE_TOKENS:
        raise DataPrepError(f"the length limit {LENGTH_LIMIT} does not split the targets by their re-check lines "
                            f"(response tokens per lines: {spans}; rollout cap {MAX_RESPONSE_TOKENS})")
    return spans


def _build_into(staging: Path, seed: int, max_operand: int, warm_start_steps: int, probe_prompts: int) -> dict:
    items = problems(seed, N_TRAIN + N_VAL, max_operand)
    train, val = items[:N_TRAIN], items[N_TRAIN:]
    records = [warm_start_record(item) for item in train]
    tokenizer = smoke.train_tokenizer(smoke.chat_texts(records))
    lengths = smoke.token_lengths(tokenizer, [warm_start_record(item) for item in items], check=False)
    targets = target_tokens(tokenizer, items)
    model, tokenizer, warm, card = smoke.train_model(staging, tokenizer, records, seed, warm_start_steps)
    card["tokenizer"].update(kind="byte-level BPE trained on this variant's train corpus", **lengths)
    found = probe(model, tokenizer, train[:probe_prompts], seed)
    write_parquet(to_rows(train, "train"), staging / "train.parquet")
    write_parquet(to_rows(val, "val"), staging / "val.parquet")
    return {
        **card,
        "data_source": DATA_SOURCE,
        "splits": {"train": len(train), "val": len(val)},
        "command": f"data_prep.smoke_length.build(seed={seed})",
        "prompt_template": "{problem.strip()}" + task.PROMPT_SUFFIX,
        "reward": {"channels": list(task.CHANNELS), "correctness_grader": task.DEFAULT_GRADER,
                   "length_limit": LENGTH_LIMIT},
        "targets": {"asks_check": sum(item["asks_check"] for item in train),
                    "tail_lines": {str(n): sum(item["tail_lines"] == n for item in train) for n in TAIL_LINES},
                    "response_tokens_by_tail_lines": targets},
        "warm_start": {**warm, "max_operand": max_operand},
        "length_probe": found,
    }


DESCRIPTION = "tiny model warm-started on sums: correctness dense, the length reward sparse (the length race)"


def add_arguments(parser) -> None:
    smoke.add_build_arguments(parser, WARM_START_STEPS, (PROBE_PROMPTS, PROBE_GROUP))
    parser.add_argument("--max-operand", type=int, default=MAX_OPERAND,
                        help=f"largest operand of a sum (default {MAX_OPERAND})")


def main(args) -> dict:
    """``python -m data_prep smoke_length --out DIR [--seed N] [--force] [--max-operand N] [--warm-start-steps N]
    [--probe-prompts N]``."""
    return build(args.out, seed=args.seed, force=args.force, max_operand=args.max_operand,
                 warm_start_steps=args.warm_start_steps, probe_prompts=args.probe_prompts)
