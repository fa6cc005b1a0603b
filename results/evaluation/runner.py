"""The resumable generation loop: batches of the cases the store lacks, each record appended at once; an
infrastructure error is retried with doubling backoff, then the batch stays missing (a rerun fills it)."""

from __future__ import annotations

import logging
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from results.evaluation.store import CaseStore

log = logging.getLogger(__name__)
# Errors of the machinery rather than of the answer; ValueError/KeyError (bad inputs) stop the run.
INFRA_ERRORS: tuple[type[BaseException], ...] = (RuntimeError, OSError, TimeoutError, ConnectionError, MemoryError)


@dataclass
class RunSummary:
    total: int
    already_done: int
    generated: int
    missing: list[str]
    retries: int
    seconds: float


def case_seed(base_seed: int, case_id: str) -> int:
    """A per-case seed independent of order and resumption: base seed + CRC32 of the case id."""
    return (base_seed + zlib.crc32(case_id.encode())) % (2**31 - 1)


def single_turn_producer(backend, sampling, carried: Sequence[str]) -> Callable[[list[dict]], list[dict]]:
    """Batch of single-turn cases -> records with the `carried` case fields and every sample."""

    def produce(batch: list[dict]) -> list[dict]:
        outputs = backend.chat([c["messages"] for c in batch], sampling,
                               [case_seed(sampling.seed, c["case_id"]) for c in batch])
        return [{**{key: c[key] for key in ("case_id", "data_source", *carried)},
                 "samples": [asdict(s) for s in samples]} for c, samples in zip(batch, outputs, strict=True)]

    return produce


def run_cases(cases: Sequence[dict], store: CaseStore, produce: Callable[[list[dict]], list[dict]], *,
              batch_size: int = 8, retries: int = 3, backoff_s: float = 5.0, label: str = "generate") -> RunSummary:
    start = time.monotonic()
    if len({c["case_id"] for c in cases}) != len(cases):
        raise ValueError(f"{label}: duplicated case ids in the input")
    todo = [c for c in cases if c["case_id"] not in store]
    summary = RunSummary(len(cases), len(cases) - len(todo), 0, [], 0, 0.0)
    for offset in range(0, len(todo), batch_size):
        batch, records = todo[offset: offset + batch_size], []
        for attempt in range(retries + 1):
            try:
                records = produce(batch)
                break
            except INFRA_ERRORS as err:
                if attempt == retries:
                    log.error("%s: batch at %d failed %d times (%s); its cases stay missing", label, offset,
                              retries + 1, err)
                    summary.missing.extend(c["case_id"] for c in batch)
                    break
                summary.retries += 1
                log.warning("%s: infrastructure error (%s: %s); retry %d/%d", label, type(err).__name__, err,
                            attempt + 1, retries)
                time.sleep(backoff_s * (2**attempt))
        for record in records:
            store.append(record)
        summary.generated += len(records)
        done = summary.already_done + summary.generated + len(summary.missing)
        print(f"[{label}] {done}/{len(cases)} cases ({time.monotonic() - start:.0f}s)", file=sys.stderr, flush=True)
    summary.seconds = time.monotonic() - start
    print(f"[{label}] {summary.total} cases: {summary.already_done} already done, {summary.generated} generated now, "
          f"{len(summary.missing)} missing after retries, {summary.retries} retries, {summary.seconds:.1f}s",
          file=sys.stderr, flush=True)
    return summary
