"""Shared by every dataset builder: verl's row schema, deterministic parquet, atomic output folders and data cards
(row counts, filters with their drop counts, sha256 of inputs and outputs, tokenizer, command line; docs/data.md).
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

import pyarrow as pa
import pyarrow.parquet as pq

DATA_CARD = "data_card.json"


class DataPrepError(ValueError):
    """Bad input for a dataset builder: missing file, wrong schema, empty input or unusable rows."""


def sha256_file(path: str | os.PathLike) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def read_json_records(path: str | os.PathLike, required: Sequence[str]) -> list[dict]:
    """A JSON list of objects, each with the ``required`` keys; anything else is a DataPrepError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise DataPrepError(f"input file not found: {path}")
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DataPrepError(f"{path} is not JSON: {err}") from err
    if not isinstance(records, list):
        raise DataPrepError(f"{path}: expected a JSON list of records, got {type(records).__name__}")
    if not records:
        raise DataPrepError(f"{path}: the input holds no records")
    for position, record in enumerate(records):
        if not isinstance(record, dict):
            raise DataPrepError(f"{path}: record {position} is a {type(record).__name__}, not an object")
        if missing := [key for key in required if key not in record]:
            raise DataPrepError(f"{path}: record {position} lacks required field(s) {missing}; it has {sorted(record)}")
    return records


def load_hub(repo: str, config: str | None, split: str, required: Sequence[str] = ()) -> tuple[list[dict], str]:
    """(records, fingerprint) of a hub dataset; offline, a missing repo or column or no rows is a DataPrepError."""
    import datasets
    try:
        dataset = datasets.load_dataset(repo, config, split=split)
    except Exception as err:  # offline, missing repo or config: datasets raises many types
        raise DataPrepError(f"could not load hub dataset {repo!r} ({config}, {split}): {err}") from err
    missing = sorted(set(required) - set(dataset.column_names))
    if missing or not len(dataset):
        raise DataPrepError(f"hub dataset {repo} is empty or lacks column(s) {missing}: has {dataset.column_names}")
    return dataset.to_list(), dataset._fingerprint


def make_row(data_source: str, messages: list[dict], ground_truth: str, extra_info: dict, ability: str) -> dict:
    """One verl row: data_source, prompt (chat messages), ability, reward_model {style, ground_truth}, extra_info
    (with split and index)."""
    return {"data_source": data_source, "prompt": messages, "ability": ability,
            "reward_model": {"style": "rule", "ground_truth": str(ground_truth)}, "extra_info": extra_info}


def write_parquet(rows: list[dict], path: str | os.PathLike) -> None:
    """verl rows to parquet, deterministically (no pandas metadata, fixed writer options)."""
    if not rows:
        raise DataPrepError(f"refusing to write an empty parquet file: {path}")
    pq.write_table(pa.Table.from_pylist(rows), path, compression="snappy", write_statistics=True, use_dictionary=True)


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


def output_hashes(folder: str | os.PathLike) -> dict[str, str]:
    """sha256 of every file under ``folder`` (relative paths) except the data card."""
    folder = Path(folder)
    return {path.relative_to(folder).as_posix(): sha256_file(path) for path in sorted(folder.rglob("*"))
            if path.is_file() and path.name != DATA_CARD}


def write_data_card(folder: str | os.PathLike, card: dict) -> dict:
    """``card`` with the sha256 of every output file, written as the folder's data_card.json (sorted keys)."""
    card = {**card, "outputs_sha256": output_hashes(folder)}
    (Path(folder) / DATA_CARD).write_text(json.dumps(card, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
                                          encoding="utf-8")
    return card


def read_data_card(folder: str | os.PathLike) -> dict | None:
    try:
        return json.loads((Path(folder) / DATA_CARD).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def folder_is_complete(folder: str | os.PathLike, expect: dict) -> bool:
    """True when ``folder``'s data card holds ``expect``'s fields and its output hashes still match."""
    card = read_data_card(folder) or {}
    return all(card.get(key) == value for key, value in expect.items()) and card.get("outputs_sha256") == output_hashes(folder)


def write_build(out_dir: str | os.PathLike, splits: dict[str, list[dict]], filters: FilterLog, card: dict) -> dict:
    """Each split as ``<split>.parquet`` and the data card (with the filters and the command line), written
    atomically into ``out_dir``; returns the card."""
    with atomic_folder(out_dir) as staging:
        for name, rows in splits.items():
            write_parquet(rows, staging / f"{name}.parquet")
        module_form = sys.argv[0].endswith(os.path.join("data_prep", "__main__.py"))  # run as python -m data_prep
        command = " ".join(["python -m data_prep", *sys.argv[1:]] if module_form else sys.argv)
        return write_data_card(staging, {**card, "filters": filters.as_list(), "command": command})


@contextlib.contextmanager
def atomic_folder(out_dir: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty staging folder beside ``out_dir`` (same file system) that replaces it in one rename on
    success and is deleted on any error. An existing ``out_dir`` is replaced only when empty or holding a data card:
    never a folder of unrelated files."""
    out_dir = Path(out_dir).absolute()
    if out_dir.exists() and not (out_dir.is_dir() and (not any(out_dir.iterdir()) or (out_dir / DATA_CARD).exists())):
        raise DataPrepError(f"output path {out_dir} is not empty and holds no {DATA_CARD}: refusing to replace it")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.staging-", dir=out_dir.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)  # mkdtemp makes 0700; the output gets ordinary permissions
    try:
        yield staging
        retired = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        if out_dir.exists():
            os.replace(out_dir, retired / "old")
        os.replace(staging, out_dir)
        shutil.rmtree(retired, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
