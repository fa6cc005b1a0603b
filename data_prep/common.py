"""Shared by every dataset builder: verl's row schema, deterministic parquet, atomic output folders and data
cards (row counts, filters with their drop counts, sha256 of inputs and outputs, tokenizer, command line); the
guarantees are listed in docs/data.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

DATA_CARD = "data_card.json"
ROW_KEYS = ("data_source", "prompt", "ability", "reward_model", "extra_info")


class DataPrepError(ValueError):
    """Bad input for a dataset builder: missing file, wrong schema, empty input or unusable rows."""


# ----------------------------------------------------------------------------------------------------------
# hashing and reading inputs
# ----------------------------------------------------------------------------------------------------------
def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_json_records(path: str | os.PathLike, required: Sequence[str]) -> list[dict]:
    """Read a JSON list (or JSON-lines file) of objects and check each has the ``required`` keys.

    Raises DataPrepError naming the file and the problem: missing file, not JSON, not a list of objects,
    empty list, or the first record that lacks a required key.
    """
    path = Path(path)
    if not path.is_file():
        raise DataPrepError(f"input file not found: {path}")
    text = path.read_text(encoding="utf-8")
    try:
        records = json.loads(text)
    except json.JSONDecodeError:
        try:
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as err:
            raise DataPrepError(f"{path} is neither a JSON list nor JSON lines: {err}") from err
    if isinstance(records, dict):
        # {"data": [...]} style containers hold the list under one key.
        lists = [value for value in records.values() if isinstance(value, list)]
        if len(lists) != 1:
            raise DataPrepError(
                f"{path}: expected a JSON list of records, got an object with keys {sorted(records)}"
            )
        records = lists[0]
    if not isinstance(records, list):
        raise DataPrepError(f"{path}: expected a JSON list of records, got {type(records).__name__}")
    if not records:
        raise DataPrepError(f"{path}: the input holds no records")
    for position, record in enumerate(records):
        if not isinstance(record, dict):
            raise DataPrepError(f"{path}: record {position} is a {type(record).__name__}, not an object")
        missing = [key for key in required if key not in record]
        if missing:
            raise DataPrepError(
                f"{path}: record {position} lacks required field(s) {missing}; it has {sorted(record)}"
            )
    return records


def load_hub(repo: str, config: str | None, split: str, required: Sequence[str] = ()) -> tuple[list[dict], str]:
    """(records, fingerprint) of a hub dataset through `datasets`; offline, a missing repo, a missing column or
    no rows is a DataPrepError naming it."""
    import datasets

    try:
        dataset = datasets.load_dataset(repo, config, split=split)
    except Exception as err:  # offline, missing repo or config: datasets raises many types
        raise DataPrepError(f"could not load hub dataset {repo!r} ({config}, {split}): {err}") from err
    missing = sorted(set(required) - set(dataset.column_names))
    if missing:
        raise DataPrepError(f"hub dataset {repo} lacks column(s) {missing}: has {dataset.column_names}")
    records = dataset.to_list()
    if not records:
        raise DataPrepError(f"hub dataset {repo} is empty")
    return records, dataset._fingerprint


# ----------------------------------------------------------------------------------------------------------
# verl rows and parquet
# ----------------------------------------------------------------------------------------------------------
def make_row(
    data_source: str,
    messages: list[dict],
    ground_truth: str,
    extra_info: dict,
    ability: str,
) -> dict:
    """One verl row: data_source, prompt (chat messages), ability, reward_model {style, ground_truth}, extra_info."""
    for message in messages:
        if set(message) != {"role", "content"} or not isinstance(message["content"], str):
            raise DataPrepError(f"chat message must be {{role, content: str}}, got {message!r}")
    return {
        "data_source": data_source,
        "prompt": [{"role": m["role"], "content": m["content"]} for m in messages],
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": str(ground_truth)},
        "extra_info": extra_info,
    }


def check_rows(rows: list[dict]) -> None:
    """Raise DataPrepError unless every row follows verl's row schema."""
    for position, row in enumerate(rows):
        if tuple(row) != ROW_KEYS:
            raise DataPrepError(f"row {position} has keys {list(row)}, expected {list(ROW_KEYS)}")
        if not row["prompt"]:
            raise DataPrepError(f"row {position} has an empty prompt")
        if set(row["reward_model"]) != {"style", "ground_truth"}:
            raise DataPrepError(f"row {position} reward_model keys {sorted(row['reward_model'])}")
        if "split" not in row["extra_info"] or "index" not in row["extra_info"]:
            raise DataPrepError(f"row {position} extra_info lacks split/index: {sorted(row['extra_info'])}")


def write_parquet(rows: list[dict], path: str | os.PathLike) -> None:
    """Write verl rows to parquet deterministically (no pandas metadata, fixed writer options)."""
    if not rows:
        raise DataPrepError(f"refusing to write an empty parquet file: {path}")
    check_rows(rows)
    table = pa.Table.from_pylist(rows)
    pq.write_table(table, path, compression="snappy", write_statistics=True, use_dictionary=True)


# ----------------------------------------------------------------------------------------------------------
# data cards and atomic folders
# ----------------------------------------------------------------------------------------------------------
class FilterLog:
    """A build's filters ({name: reason}) and how many rows each dropped, for the data card."""

    def __init__(self, reasons: dict[str, str]):
        self.drops = {name: {"reason": reason, "dropped": 0} for name, reason in reasons.items()}

    def drop(self, name: str) -> None:
        self.drops[name]["dropped"] += 1

    def as_list(self) -> list[dict]:
        return [{"name": name, **info} for name, info in self.drops.items()]

    def total(self) -> int:
        return sum(info["dropped"] for info in self.drops.values())


def command_line() -> str:
    """The command that produced the output, as typed (module form when run with ``python -m``)."""
    argv = list(sys.argv)
    if argv and argv[0].endswith(os.path.join("data_prep", "__main__.py")):
        argv[0] = "python -m data_prep"
    return " ".join(argv)


def write_json(obj: Any, path: str | os.PathLike) -> None:
    Path(path).write_text(
        json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
    )


def output_hashes(folder: str | os.PathLike) -> dict[str, str]:
    """sha256 of every file in ``folder`` (recursively, relative paths), except the data card itself."""
    folder = Path(folder)
    hashes = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name != DATA_CARD:
            hashes[path.relative_to(folder).as_posix()] = sha256_file(path)
    return hashes


def write_data_card(folder: str | os.PathLike, card: dict) -> dict:
    """Complete ``card`` with the sha256 of every output file and write it as the folder's data_card.json."""
    card = dict(card)
    card["outputs_sha256"] = output_hashes(folder)
    write_json(card, Path(folder) / DATA_CARD)
    return card


def read_data_card(folder: str | os.PathLike) -> dict | None:
    path = Path(folder) / DATA_CARD
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None


def folder_is_complete(folder: str | os.PathLike, expect: dict) -> bool:
    """True when ``folder`` holds a data card whose fields equal ``expect`` and whose output hashes still match."""
    card = read_data_card(folder)
    if card is None or any(card.get(key) != value for key, value in expect.items()):
        return False
    return card.get("outputs_sha256") == output_hashes(folder)


def write_build(out_dir: str | os.PathLike, splits: dict[str, list[dict]], filters: FilterLog, card: dict) -> dict:
    """Each split's rows as ``<split>.parquet`` and the data card (``card`` with the filters and the command line)
    written atomically into ``out_dir``; returns the card."""
    with atomic_folder(out_dir) as staging:
        for name, rows in splits.items():
            write_parquet(rows, staging / f"{name}.parquet")
        return write_data_card(staging, {**card, "filters": filters.as_list(), "command": command_line()})


@contextlib.contextmanager
def atomic_folder(out_dir: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty staging folder; on success it replaces ``out_dir`` in one rename.

    The staging folder sits next to ``out_dir`` (same file system, so the rename is atomic). On any error the
    staging folder is deleted and ``out_dir`` is left as it was. An existing ``out_dir`` is replaced only if it
    is empty or holds a data card (a previous build): this never deletes a folder of unrelated files.
    """
    out_dir = Path(out_dir).absolute()
    if out_dir.exists() and not out_dir.is_dir():
        raise DataPrepError(f"output path exists and is not a folder: {out_dir}")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / DATA_CARD).exists():
        raise DataPrepError(
            f"output folder {out_dir} is not empty and holds no {DATA_CARD}: refusing to replace it"
        )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.staging-", dir=out_dir.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)  # mkdtemp makes 0700; the output folder gets ordinary permissions
    try:
        yield staging
        retired = None
        if out_dir.exists():
            retired = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
            os.replace(out_dir, retired / "old")
        os.replace(staging, out_dir)
        if retired is not None:
            shutil.rmtree(retired, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
