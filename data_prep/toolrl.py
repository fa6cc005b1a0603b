"""ToolRL (rlla_4k) -> verl train/test parquet (docs/data.md "toolrl"): ToolRL's own split (seed 31415, the last
2% held out), rows field for field ToolRL's, malformed rows dropped after the split and counted, no length filter."""

from __future__ import annotations

import tempfile
import urllib.request
from pathlib import Path

import numpy as np

from data_prep.common import DataPrepError, FilterLog, make_row, read_json_records, sha256_file, write_build
from tasks import toolrl as protocol

FIELDS = ("instruction", "input", "output")
DEFAULT_SOURCE = "https://raw.githubusercontent.com/qiancheng0/ToolRL/main/dataset/rlla_4k_raw/rlla_rl.json"
FILTERS = {f"bad_{field}": f"'{field}' is not a non-empty string" for field in FIELDS}
# What verl does with long prompts (conf/task/toolrl.yaml): no filter, keep the last 2,048 tokens.
PROMPT_LENGTH_POLICY = {"max_prompt_tokens": 2048, "overlong_filter": False, "truncation": "left"}
DESCRIPTION = "ToolRL rlla JSON -> train/test parquet (seed 31415, last 2 percent held out)"


def official_split(records: list) -> tuple[list, list]:
    """ToolRL's split; a private RandomState(31415) draws the numbers np.random.seed(31415) would."""
    shuffled = list(records)
    np.random.RandomState(31415).shuffle(shuffled)
    held_out = int(len(shuffled) * 0.02)
    if held_out == 0:
        raise DataPrepError(f"{len(records)} rows give an empty held-out split (int(0.02 * n) = 0); need >= 50")
    return shuffled[:-held_out], shuffled[-held_out:]


def to_rows(records: list[dict], split: str, filters: FilterLog) -> list[dict]:
    rows = []
    for record in records:
        bad = next((field for field in FIELDS if not isinstance(record[field], str) or not record[field].strip()), None)
        if bad:
            filters.drop(f"bad_{bad}")
            continue
        messages = [{"role": "system", "content": record["instruction"]}, {"role": "user", "content": record["input"]}]
        extra = {"split": split, "index": len(rows), **{field: record[field] for field in FIELDS}}
        rows.append(make_row(protocol.DATA_SOURCE, messages, record["output"], extra, ability=protocol.ABILITY))
    return rows


def scorer_unreadable(rows: list[dict]) -> int:
    """Rows whose ground truth holds a tool call the original scorer cannot read (it raises on them)."""
    from rewards.toolrl import reference_calls
    count = 0
    for row in rows:
        truth = row["reward_model"]["ground_truth"]
        try:
            if protocol.TOOL_CALL_OPEN in truth:
                reference_calls(truth)
        except ValueError:
            count += 1
    return count


def build(out_dir, source: str | None = None) -> dict:
    """Write train.parquet, test.parquet and data_card.json into ``out_dir`` from a local rlla_rl.json or a URL."""
    source = source or DEFAULT_SOURCE
    with tempfile.TemporaryDirectory() as download_dir:
        path = Path(source)
        if source.startswith(("http://", "https://")):
            path = Path(download_dir) / "rlla_rl.json"
            print(f"[toolrl] downloading {source}", flush=True)
            try:
                urllib.request.urlretrieve(source, path)
            except OSError as err:
                raise DataPrepError(f"could not download {source}: {err}") from err
        records = read_json_records(path, FIELDS)
        input_hash = sha256_file(path)
    train, test = official_split(records)
    filters = FilterLog(FILTERS)
    splits = {"train": to_rows(train, "train", filters), "test": to_rows(test, "test", filters)}
    for name, rows in splits.items():
        if not rows:
            raise DataPrepError(f"no usable rows left in the {name} split of {path}")
    card = write_build(out_dir, splits, filters, {
        "dataset": "toolrl", "data_source": protocol.DATA_SOURCE, "source": source,
        "inputs_sha256": {path.name: input_hash}, "input_rows": len(records),
        "split_rule": "np.random.seed(31415); np.random.shuffle(rows); last int(0.02 * n) held out",
        "split_before_filters": {"train": len(train), "test": len(test)},
        "splits": {name: len(rows) for name, rows in splits.items()}, "prompt_length": PROMPT_LENGTH_POLICY,
        "ground_truths_unreadable_by_scorer": {name: scorer_unreadable(rows) for name, rows in splits.items()},
        "tokenizer": None})
    print(f"[toolrl] {len(records)} rows -> {card['splits']} ({filters.total()} dropped) in {out_dir}", flush=True)
    return card


def add_arguments(parser) -> None:
    parser.add_argument("--source", default=None, help=f"local rlla_rl.json or URL (default {DEFAULT_SOURCE})")


def main(args) -> dict:
    card = build(args.out, args.source)
    return {"out": str(Path(args.out).absolute()), "splits": card["splits"], "filters": card["filters"]}
