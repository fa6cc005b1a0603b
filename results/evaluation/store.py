"""Resumable case files: one JSON line per finished case, appended and fsync'ed; a partial last line is repaired on
open; the settings are kept in ``<file>.meta.json`` and reopening with others is refused."""

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

    def __init__(self, path: str | Path, settings: dict | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        meta = self.path.with_name(self.path.name + ".meta.json")
        if settings is not None:
            settings = json.loads(json.dumps(settings))  # tuples etc. as JSON stores them
            stored = json.loads(meta.read_text()) if meta.exists() else None
            if stored is None:
                atomic_write_json(meta, settings, sort_keys=True)
            elif stored != settings:
                changed = sorted(k for k in set(stored) | set(settings) if stored.get(k) != settings.get(k))
                raise CaseStoreError(f"{self.path} was generated with other settings (differing: {changed}); "
                                     "use a new output path to evaluate another configuration")
        records = []
        if self.path.exists():
            try:
                records, torn = read_jsonl(self.path)
            except JsonlError as err:
                raise CaseStoreError(f"corrupt case file: {err}") from err
            if torn:  # the partial last line of an interrupted write
                log.warning("%s: dropping a partial last line left by an interrupted run", self.path)
                atomic_write_jsonl(self.path, records)
        if bad := next((r for r in records if "case_id" not in r), None):
            raise CaseStoreError(f"{self.path}: record without case_id: {str(bad)[:80]}")
        self.records: dict[str, dict] = {r["case_id"]: r for r in records}

    def __contains__(self, case_id: str) -> bool:
        return case_id in self.records

    def __len__(self) -> int:
        return len(self.records)

    def append(self, record: dict) -> None:
        with open(self.path, "a") as handle:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.records[record["case_id"]] = record
