"""ToolRL (rlla_4k) -> verl train/test parquet with the official split (docs/data.md "toolrl").

Split rule of ToolRL's own preprocessing: ``np.random.seed(31415)``, ``np.random.shuffle``, the last
``int(0.02 * n)`` rows held out (4,000 -> 3,920 / 80). Rows are field for field ToolRL's (ability "math" too).
Rows whose fields are not non-empty strings are dropped AFTER the split and counted. No length filter, as the
authors ran it (conf/task/toolrl.yaml truncates from the left); the card counts ground truths the original
scorer cannot read.
"""

from __future__ import annotations

import os
import tempfile
import urllib.request
from pathlib import Path

import numpy as np

from data_prep.common import (
    DataPrepError,
    FilterLog,
    make_row,
    read_json_records,
    sha256_file,
    write_build,
)
from tasks import toolrl as protocol

DATA_SOURCE = protocol.DATA_SOURCE
SPLIT_SEED = 31415
HELD_OUT_FRACTION = 0.02
FIELDS = ("instruction", "input", "output")
DEFAULT_SOURCE = "https://raw.githubusercontent.com/qiancheng0/ToolRL/main/dataset/rlla_4k_raw/rlla_rl.json"
CHECKOUT_PATH = Path("dataset") / "rlla_4k_raw" / "rlla_rl.json"
# What verl does with long prompts (conf/task/toolrl.yaml): no filter, keep the last 2,048 tokens.
FILTERS = {f"bad_{field}": f"'{field}' is not a non-empty string" for field in FIELDS}
PROMPT_LENGTH_POLICY = {"max_prompt_tokens": 2048, "overlong_filter": False, "truncation": "left"}


def official_split(records: list) -> tuple[list, list]:
    """ToolRL's split: seed numpy's global-state generator with 31415, shuffle the list in place, hold out the
    last int(0.02 * n) rows. A private RandomState(31415) draws the same numbers without touching the global
    state."""
    shuffled = list(records)
    np.random.RandomState(SPLIT_SEED).shuffle(shuffled)
    held_out = int(len(shuffled) * HELD_OUT_FRACTION)
    if held_out == 0:
        raise DataPrepError(
            f"{len(records)} rows give an empty held-out split (int(0.02 * n) = 0); need >= 50"
        )
    return shuffled[:-held_out], shuffled[-held_out:]


def resolve_source(source: str | None, download_dir: str) -> Path:
    """A local JSON file, a ToolRL checkout (folder holding dataset/rlla_4k_raw/rlla_rl.json) or a URL."""
    source = source or DEFAULT_SOURCE
    if source.startswith(("http://", "https://")):
        target = Path(download_dir) / "rlla_rl.json"
        print(f"[toolrl] downloading {source}", flush=True)
        try:
            urllib.request.urlretrieve(source, target)
        except OSError as err:
            raise DataPrepError(f"could not download {source}: {err}") from err
        return target
    path = Path(source)
    if path.is_dir():
        path = path / CHECKOUT_PATH
    if not path.is_file():
        raise DataPrepError(
            f"ToolRL source not found: {path} (give rlla_rl.json, a ToolRL checkout, or a URL)"
        )
    return path


def usable(record: dict, filters: FilterLog) -> bool:
    for field in FIELDS:
        value = record[field]
        if not isinstance(value, str) or not value.strip():
            filters.drop(f"bad_{field}")
            return False
    return True


def to_rows(records: list[dict], split: str, filters: FilterLog) -> list[dict]:
    rows = []
    for record in records:
        if not usable(record, filters):
            continue
        messages = [
            {"role": "system", "content": record["instruction"]},
            {"role": "user", "content": record["input"]},
        ]
        extra = {
            "split": split,
            "index": len(rows),
            "instruction": record["instruction"],
            "input": record["input"],
            "output": record["output"],
        }
        rows.append(make_row(DATA_SOURCE, messages, record["output"], extra, ability=protocol.ABILITY))
    return rows


def scorer_unreadable(rows: list[dict]) -> int:
    """Rows whose ground truth the original scorer cannot read (it raises on them)."""
    from rewards.toolrl import reference_calls

    count = 0
    for row in rows:
        truth = row["reward_model"]["ground_truth"]
        if protocol.TOOL_CALL_OPEN in truth:
            try:
                reference_calls(truth)
            except ValueError:
                count += 1
    return count


def build(out_dir: str | os.PathLike, source: str | None = None) -> dict:
    """Write train.parquet, test.parquet and data_card.json into ``out_dir``; returns the data card."""
    with tempfile.TemporaryDirectory() as download_dir:
        path = resolve_source(source, download_dir)
        records = read_json_records(path, FIELDS)
        input_hash = sha256_file(path)
        train, test = official_split(records)
        filters = FilterLog(FILTERS)
        splits = {"train": to_rows(train, "train", filters), "test": to_rows(test, "test", filters)}
        for name, rows in splits.items():
            if not rows:
                raise DataPrepError(f"no usable rows left in the {name} split of {path}")
        card = write_build(out_dir, splits, filters, {
            "dataset": "toolrl",
            "data_source": DATA_SOURCE,
            "source": str(source or DEFAULT_SOURCE),
            "inputs_sha256": {path.name: input_hash},
            "input_rows": len(records),
            "split_rule": "np.random.seed(31415); np.random.shuffle(rows); last int(0.02 * n) held out",
            "split_before_filters": {"train": len(train), "test": len(test)},
            "splits": {name: len(rows) for name, rows in splits.items()},
            "prompt_length": PROMPT_LENGTH_POLICY,
            "ground_truths_unreadable_by_scorer": {name: scorer_unreadable(rows) for name, rows in splits.items()},
            "tokenizer": None,
        })
    print(
        f"[toolrl] {len(records)} rows -> train {card['splits']['train']} / test {card['splits']['test']} "
        f"({filters.total()} dropped) in {out_dir}",
        flush=True,
    )
    return card


# `python -m data_prep toolrl`: its one-line help and its options besides --out
DESCRIPTION = "ToolRL rlla JSON -> train/test parquet (seed 31415, last 2 percent held out)"


def add_arguments(parser) -> None:
    parser.add_argument("--source", default=None, help="local file/folder or hub dataset id (default: hub)")


def main(args) -> dict:
    card = build(args.out, args.source)
    return {"out": str(Path(args.out).absolute()), "splits": card["splits"], "filters": card["filters"]}
