"""DeepScaleR-Preview -> verl train (and held-out val) parquet (docs/data.md "deepscaler").

Source: the hub's ``agentica-org/DeepScaleR-Preview-Dataset`` or a local JSON / JSON-lines file of the same
records. Prompt: the authors' template (tasks.math). Filters, counted in the data card: no problem, no usable
answer, prompts over 1,024 tokens as verl's filter_overlong_prompts counts them.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from pathlib import Path

from data_prep.common import (
    DataPrepError,
    FilterLog,
    load_hub,
    make_row,
    read_json_records,
    sha256_file,
    sha256_text,
    write_build,
)
from data_prep.math_eval import FILTERS, usable_problems
from tasks import math as task
from tasks.math import prompt_messages
from tasks.math_answers import RULE as ANSWER_RULE
from tasks.math_answers import reference_answer

DATA_SOURCE = task.DATA_SOURCE
HUB_ID = "agentica-org/DeepScaleR-Preview-Dataset"
DEFAULT_TOKENIZER = "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"
MAX_PROMPT_TOKENS = task.MAX_PROMPT_TOKENS
TOKENIZE_BATCH = 512
VAL_ROWS = 200  # the authors' held-out monitoring split
VAL_SEED = 0


def load_records(source: str | None) -> tuple[list[dict], dict]:
    """Records {problem, answer, ...} and a description of the input for the data card."""
    source = source or HUB_ID
    if Path(source).exists():
        records = read_json_records(source, ("problem", "answer"))
        return records, {"source": str(source), "inputs_sha256": {Path(source).name: sha256_file(source)}}
    records, fingerprint = load_hub(source, None, "train", ("problem", "answer"))
    return records, {"source": source, "inputs_sha256": {}, "hub_fingerprint": fingerprint}


def load_tokenizer(name_or_path: str | None):
    from transformers import AutoTokenizer

    name_or_path = name_or_path or DEFAULT_TOKENIZER
    try:
        return AutoTokenizer.from_pretrained(name_or_path)
    except Exception as err:  # OSError offline, ValueError for a bad folder
        raise DataPrepError(f"could not load tokenizer {name_or_path!r}: {err}") from err


def prompt_token_counts(tokenizer, prompts: list[list[dict]]) -> list[int]:
    """Token count of each prompt: chat-templated with the generation prompt when the tokenizer has a template
    (what verl's filter_overlong_prompts measures), else the plain text of the messages."""
    counts = []
    for start in range(0, len(prompts), TOKENIZE_BATCH):
        batch = prompts[start : start + TOKENIZE_BATCH]
        if tokenizer.chat_template:
            texts = tokenizer.apply_chat_template(batch, add_generation_prompt=True, tokenize=False)
        else:
            texts = ["\n".join(m["content"] for m in messages) for messages in batch]
        encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
        counts.extend(len(ids) for ids in encoded)
        print(
            f"[deepscaler] measured {min(start + TOKENIZE_BATCH, len(prompts))}/{len(prompts)} prompts",
            flush=True,
        )
    return counts


def build(
    out_dir: str | os.PathLike,
    source: str | None = None,
    tokenizer: str | None = None,
    max_prompt_tokens: int = MAX_PROMPT_TOKENS,
    val_rows: int = 0,
    data_source: str = DATA_SOURCE,
) -> dict:
    """Write train.parquet (and val.parquet with ``val_rows`` held-out rows) and data_card.json into
    ``out_dir``; returns the data card.

    The held-out rows (the authors validate every 10 steps on 200 seeded DeepScaleR rows) are a
    seeded random choice (``VAL_SEED``) among the rows that pass the filters, removed from train."""
    records, input_info = load_records(source)
    filters = FilterLog({**FILTERS,
                         "prompt_too_long": f"prompt longer than {max_prompt_tokens} tokens under the tokenizer"})
    candidates = [(position, prompt_messages(problem), answer)
                  for position, problem, answer in usable_problems(records, filters, reference_answer)]

    tok = load_tokenizer(tokenizer)
    counts = prompt_token_counts(tok, [messages for _, messages, _ in candidates])
    rows = []
    for (position, messages, answer), count in zip(candidates, counts, strict=True):
        if count > max_prompt_tokens:
            filters.drop("prompt_too_long")
            continue
        rows.append((position, messages, answer))
    if len(rows) <= val_rows:
        raise DataPrepError(f"{len(rows)} usable rows, not enough to hold out {val_rows}: {filters.as_list()}")
    held_out = set(random.Random(VAL_SEED).sample(range(len(rows)), val_rows)) if val_rows else set()
    splits = {"train": [], "val": []}
    for number, (position, messages, answer) in enumerate(rows):
        split = "val" if number in held_out else "train"
        extra = {"split": split, "index": len(splits[split]), "source_index": position}
        splits[split].append(make_row(data_source, messages, answer, extra, ability="math"))

    written = {name: split for name, split in splits.items() if name == "train" or val_rows}
    card = write_build(out_dir, written, filters, {
        "dataset": "deepscaler",
        "data_source": data_source,
        **input_info,
        "input_rows": len(records),
        "prompt_template": "{problem.strip()}" + task.PROMPT_SUFFIX,
        "splits": {name: len(split) for name, split in splits.items() if split or name == "train"},
        "val_seed": VAL_SEED if val_rows else None,
        "reward": {"channels": list(task.CHANNELS), "correctness_grader": task.DEFAULT_GRADER,
                   "length_limit": task.LENGTH_LIMIT},
        "answer_rule": ANSWER_RULE,
        "tokenizer": {
            "name_or_path": str(tokenizer or DEFAULT_TOKENIZER),
            "class": type(tok).__name__,
            "vocab_sha256": sha256_text(repr(sorted(tok.get_vocab().items()))),
            "chat_template_used": bool(tok.chat_template),
            "max_prompt_tokens": max_prompt_tokens,
        },
    })
    print(
        f"[deepscaler] {len(records)} rows -> train {len(splits['train'])}, val {len(splits['val'])} "
        f"({filters.total()} dropped: "
        + ", ".join(f"{f['name']} {f['dropped']}" for f in filters.as_list())
        + f") in {out_dir}",
        flush=True,
    )
    return card


def smoke_records(count: int, seed: int) -> list[dict]:
    """Synthetic arithmetic problems in DeepScaleR's record form, for the CPU math smoke run."""
    rng = random.Random(seed)
    records = []
    for _ in range(count):
        a, b = rng.randint(1, 50), rng.randint(1, 50)
        records.append({"problem": f"What is {a} + {b}?", "answer": str(a + b), "solution": f"{a + b}"})
    return records


def build_smoke(out_dir: str | os.PathLike, tokenizer_dir: str, *, count: int = 64, seed: int = 0,
                max_prompt_tokens: int = 192) -> dict:
    """The math smoke set: synthetic problems through the real DeepScaleR path (prompt, filters, card)
    with the tiny model's tokenizer; train.parquet and an 8-row val.parquet."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir.parent) as scratch:
        source = Path(scratch) / "smoke_math.json"
        source.write_text(json.dumps(smoke_records(count, seed)))
        return build(out_dir, str(source), tokenizer_dir, max_prompt_tokens, val_rows=8,
                     data_source=task.SMOKE_DATA_SOURCE)


# `python -m data_prep deepscaler`: its one-line help and its options besides --out
DESCRIPTION = "DeepScaleR-Preview -> train parquet (prompt template, length filter)"


def add_arguments(parser) -> None:
    parser.add_argument("--source", default=None, help="local file/folder or hub dataset id (default: hub)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer name or path for the prompt length filter")
    parser.add_argument("--max-prompt-tokens", type=int, default=1024)
    parser.add_argument("--val-rows", type=int, default=VAL_ROWS, help="seeded held-out validation rows")


def main(args) -> dict:
    card = build(args.out, args.source, args.tokenizer, args.max_prompt_tokens, args.val_rows)
    return {"out": str(Path(args.out).absolute()), "splits": card["splits"], "filters": card["filters"]}
