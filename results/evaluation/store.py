"""Resumable case files: one JSON line per finished case, appended and fsync'ed; a partial last line is repaired on
open; the settings are kept in ``<file>.meta.json`` and reopening with others is refused.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from dara.io import JsonlError, atomic_write_json, atomic_write_jsonl, read_jsonl

log = logging.getLogger(__name__)


class CaseStoreError(ValueError):
    pass


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
            atomic_write_json(self.meta_path, settings, sort_keys=True)

    def _load(self) -> None:
        try:
            records, torn = read_jsonl(self.path)
        except JsonlError as err:
            raise CaseStoreError(f"corrupt case file: {err}") from err
        if torn:  # the partial last line of an interrupted write: repair the file in place
            log.warning("%s: dropping a partial last line left by an interrupted run", self.path)
            atomic_write_jsonl(self.path, records)
        for record in records:
            if "case_id" not in record:
                raise CaseStoreError(f"{self.path}: record without case_id: {str(record)[:80]}")
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
