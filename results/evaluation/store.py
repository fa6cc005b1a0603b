"""Resumable case files: one JSON line per finished case, appended and fsync'ed at once.

A rerun reads the finished case ids and generates only the missing ones. A run killed while writing
leaves at most a partial last line; opening the file repairs it (rewritten atomically without that
line, which is logged). The generation settings are kept beside the cases in ``<file>.meta.json``:
reopening with different settings is refused, so one file never mixes two configurations.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


class CaseStoreError(ValueError):
    pass


def write_json_atomic(path: Path, payload) -> None:
    """Write JSON to a temp file in the same folder, then os.replace (never a half-written file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as handle:
        json.dump(payload, handle, indent=2, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)


def write_jsonl_atomic(path: Path, records) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


class CaseStore:
    """Append-only JSONL of finished cases keyed by ``case_id``."""

    def __init__(self, path: str | Path, settings: dict | None = None):
        self.path = Path(path)
        self.meta_path = self.path.with_name(self.path.name + ".meta.json")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if settings is not None:
            self._check_settings(settings)
        self.records: dict[str, dict] = {}
        if self.path.exists():
            self._load()

    def _check_settings(self, settings: dict) -> None:
        settings = json.loads(json.dumps(settings))  # normalise tuples etc. as JSON would store them
        if self.meta_path.exists():
            stored = json.loads(self.meta_path.read_text())
            if stored != settings:
                changed = sorted(k for k in set(stored) | set(settings) if stored.get(k) != settings.get(k))
                raise CaseStoreError(
                    f"{self.path} was generated with other settings (differing: {changed}); "
                    "use a new output path to evaluate another configuration"
                )
        else:
            write_json_atomic(self.meta_path, settings)

    def _load(self) -> None:
        lines = self.path.read_text().split("\n")
        good: list[str] = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                if number >= len(lines) - 1:  # the last (partial) line of an interrupted write
                    log.warning("%s: dropping a partial last line left by an interrupted run", self.path)
                    write_jsonl_atomic(self.path, [json.loads(g) for g in good])
                    break
                raise CaseStoreError(f"{self.path}:{number}: corrupt line ({err})") from err
            if "case_id" not in record:
                raise CaseStoreError(f"{self.path}:{number}: record without case_id")
            good.append(line)
            self.records[record["case_id"]] = record  # a repeated id (two writers) keeps the last

    def __contains__(self, case_id: str) -> bool:
        return case_id in self.records

    def __len__(self) -> int:
        return len(self.records)

    def append(self, record: dict) -> None:
        """Write one finished case now: append, flush, fsync."""
        line = json.dumps(record, ensure_ascii=False)
        with open(self.path, "a") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.records[record["case_id"]] = record
