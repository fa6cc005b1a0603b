"""Atomic writes (a temporary file moved into place: never half a file) and the torn-line-tolerant JSONL reader."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dara.run_folder import METRICS_FILE  # a run folder's per-step log (dara.run_log writes it)

log = logging.getLogger(__name__)


class JsonlError(ValueError):
    pass


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; outputs get ordinary permissions
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_json(path: str | Path, payload, **dump_options) -> None:
    atomic_write_text(path, json.dumps(payload, **{"indent": 2, **dump_options}) + "\n")


def atomic_write_jsonl(path: str | Path, records) -> None:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


def read_jsonl(path: str | Path, tolerate_torn_last_line: bool = True) -> tuple[list[dict], bool]:
    """(records, torn): whether a truncated last line (a writer killed mid-line) was dropped, with a warning; any
    other bad line is a JsonlError naming the file and line."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    last = max((n for n, line in enumerate(lines, start=1) if line.strip()), default=0)
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            if tolerate_torn_last_line and number == last:
                log.warning("%s: dropped a truncated last line (%s)", path, err)
                return records, True
            raise JsonlError(f"{path}:{number}: not valid JSON ({err})") from err
        if not isinstance(record, dict):
            raise JsonlError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        records.append(record)
    return records, False


def run_finished(run_dir: str | Path, total_steps: int | None) -> bool:
    if not total_steps or not (path := Path(run_dir) / METRICS_FILE).exists():
        return False
    records, _ = read_jsonl(path)
    return any(r.get("step") == int(total_steps) for r in records)
