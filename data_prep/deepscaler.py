"""DeepScaleR-Preview (the hub, or a local JSON list of its records) -> verl train (and held-out val) parquet
(docs/data.md "deepscaler"): the authors' prompt (tasks.math), filters counted in the data card."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

from data_prep import common
from data_prep.math_eval import FILTERS, usable_problems
from tasks import math as task
from tasks.math_answers import RULE as ANSWER_RULE
from tasks.math_answers import reference_answer

HUB_ID = "agentica-org/DeepScaleR-Preview-Dataset"
DEFAULT_TOKENIZER = "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"
VAL_ROWS = 200  # the authors' held-out monitoring split
VAL_SEED = 0
DESCRIPTION = "DeepScaleR-Preview -> train parquet (prompt template, length filter)"


def build(out_dir, source: str | list[dict] | None = None, tokenizer: str | None = None,
          max_prompt_tokens: int = task.MAX_PROMPT_TOKENS, val_rows: int = 0, data_source: str = task.DATA_SOURCE
          ) -> dict:
    """Write train.parquet (and val.parquet: ``val_rows`` rows drawn with ``random.Random(VAL_SEED)`` among the
    rows that pass the filters) and data_card.json into ``out_dir`` from a JSON file, a hub id or records; returns
    the data card."""
    source, tokenizer = source or HUB_ID, tokenizer or DEFAULT_TOKENIZER
    if isinstance(source, list):
        records, inputs, source = source, {"inputs_sha256": {}}, "synthetic records"
    elif Path(source).exists():
        records = common.read_json_records(source, ("problem", "answer"))
        inputs = {"inputs_sha256": {Path(source).name: common.sha256_file(source)}}
    else:
        records, fingerprint = common.load_hub(source, None, "train", ("problem", "answer"))
        inputs = {"inputs_sha256": {}, "hub_fingerprint": fingerprint}
    too_long = f"prompt longer than {max_prompt_tokens} tokens under the tokenizer"
    filters = common.FilterLog({**FILTERS, "prompt_too_long": too_long})
    candidates = [(position, task.prompt_messages(problem), answer)
                  for position, problem, answer in usable_problems(records, filters, reference_answer)]
    from transformers import AutoTokenizer
    try:
        tok = AutoTokenizer.from_pretrained(tokenizer)
    except Exception as err:  # OSError offline, ValueError for a bad folder
        raise common.DataPrepError(f"could not load tokenizer {tokenizer!r}: {err}") from err
    texts = tok.apply_chat_template([messages for _, messages, _ in candidates], add_generation_prompt=True,
                                    tokenize=False) if candidates else []
    rows = []
    for candidate, ids in zip(candidates, tok(texts, add_special_tokens=False)["input_ids"] if texts else [],
                              strict=True):
        if len(ids) > max_prompt_tokens:
            filters.drop("prompt_too_long")
        else:
            rows.append(candidate)
    if len(rows) <= val_rows:
        raise common.DataPrepError(f"{len(rows)} usable rows, not enough to hold out {val_rows}: {filters.as_list()}")
    held_out = set(random.Random(VAL_SEED).sample(range(len(rows)), val_rows))
    splits = {"train": [], "val": []}
    for number, (position, messages, answer) in enumerate(rows):
        name = "val" if number in held_out else "train"
        extra = {"split": name, "index": len(splits[name]), "source_index": position}
        splits[name].append(common.make_row(data_source, messages, answer, extra, ability="math"))
    if not val_rows:
        del splits["val"]
    card = common.write_build(out_dir, splits, filters, {
        "dataset": "deepscaler", "data_source": data_source, "source": str(source), **inputs,
        "input_rows": len(records), "prompt_template": "{problem.strip()}" + task.PROMPT_SUFFIX,
        "splits": {name: len(split) for name, split in splits.items()}, "val_seed": VAL_SEED if val_rows else None,
        "reward": {"channels": list(task.CHANNELS), "correctness_grader": task.DEFAULT_GRADER,
                   "length_limit": task.LENGTH_LIMIT},
        "answer_rule": ANSWER_RULE,
        "tokenizer": {"name_or_path": str(tokenizer), "class": type(tok).__name__, "max_prompt_tokens": max_prompt_tokens,
                      "vocab_sha256": hashlib.sha256(repr(sorted(tok.get_vocab().items())).encode()).hexdigest()}})
    print(f"[deepscaler] {len(records)} rows -> {card['splits']} ({filters.total()} dropped) in {out_dir}", flush=True)
    return card


def build_smoke(out_dir, tokenizer_dir: str, *, count: int = 64, seed: int = 0, max_prompt_tokens: int = 192) -> dict:
    """The CPU math smoke set (task=smoke_math): ``count`` synthetic "What is a + b?" problems through the same path
    with the tiny model's tokenizer; train.parquet and an 8-row val.parquet."""
    rng = random.Random(seed)
    pairs = [(rng.randint(1, 50), rng.randint(1, 50)) for _ in range(count)]
    records = [{"problem": f"What is {a} + {b}?", "answer": str(a + b), "solution": f"{a + b}"} for a, b in pairs]
    return build(out_dir, records, tokenizer_dir, max_prompt_tokens, val_rows=8, data_source=task.SMOKE_DATA_SOURCE)


def add_arguments(parser) -> None:
    parser.add_argument("--source", default=None, help=f"local JSON file or hub dataset id (default {HUB_ID})")
    parser.add_argument("--tokenizer", default=None, help="tokenizer name or path for the prompt length filter")
    parser.add_argument("--max-prompt-tokens", type=int, default=task.MAX_PROMPT_TOKENS)
    parser.add_argument("--val-rows", type=int, default=VAL_ROWS, help="seeded held-out validation rows")


def main(args) -> dict:
    card = build(args.out, args.source, args.tokenizer, args.max_prompt_tokens, args.val_rows)
    return {"out": str(Path(args.out).absolute()), "splits": card["splits"], "filters": card["filters"]}
