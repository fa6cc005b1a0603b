"""The five math evaluation sets -> one verl test parquet (docs/data.md "math_eval").

AIME 2024, AMC 2022/23, MATH-500, Minerva, OlympiadBench (1,560 rows from DeepScaleR's local copy); data_source
names the benchmark. Prompt: the training prompt (tasks.math). Ground truth: the first accepted answer by the
rule data prep, reward and evaluation share (tasks.math_answers); every listed form is in
``extra_info["answer_alternatives"]``. Sources: ``--source DIR`` with DeepScaleR's files, or the hub (BENCHMARKS).
"""

from __future__ import annotations

import os
from pathlib import Path

from data_prep.common import (
    DataPrepError,
    FilterLog,
    load_hub,
    make_row,
    read_json_records,
    sha256_file,
    write_build,
)
from tasks.math import prompt_messages
from tasks.math_answers import RULE as ANSWER_RULE
from tasks.math_answers import answer_alternatives

# data_source -> local file name, hub (dataset id, config, split), accepted row counts
BENCHMARKS = {
    "aime24": {"file": "aime.json", "hub": ("HuggingFaceH4/aime_2024", None, "train"), "rows": (30,)},
    "amc23": {"file": "amc.json", "hub": ("AI-MO/aimo-validation-amc", None, "train"), "rows": (83,)},
    "math500": {"file": "math.json", "hub": ("HuggingFaceH4/MATH-500", None, "test"), "rows": (500,)},
    "minerva": {"file": "minerva.json", "hub": ("math-ai/minervamath", None, "test"), "rows": (272,)},
    "olympiad_bench": {
        "file": "olympiad_bench.json",
        "hub": ("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train"),
        "rows": (674, 675),
    },
}
FILTERS = {"no_problem": "problem missing or empty",
           "no_answer": "answer missing, empty or not a usable math answer"}
PROBLEM_COLUMNS = ("problem", "question")
ANSWER_COLUMNS = ("answer", "final_answer")


def _pick(record: dict, names: tuple[str, ...], what: str, origin: str) -> str:
    for name in names:
        if name in record:
            return name
    raise DataPrepError(f"{origin}: no {what} column (looked for {list(names)}; has {sorted(record)})")


def load_local(folder: Path, benchmark: str) -> tuple[list[dict], dict]:
    path = folder / BENCHMARKS[benchmark]["file"]
    records = read_json_records(path, ())
    return records, {path.name: sha256_file(path)}


def usable_problems(records: list[dict], filters: FilterLog, read_answer, problem_key: str = "problem",
                    answer_key: str = "answer"):
    """(position, problem, read_answer(answer)) of each record with a problem and a usable answer; the others are
    dropped and counted (FILTERS)."""
    for position, record in enumerate(records):
        problem = record.get(problem_key)
        if not isinstance(problem, str) or not problem.strip():
            filters.drop("no_problem")
            continue
        try:
            yield position, problem, read_answer(record.get(answer_key))
        except ValueError:
            filters.drop("no_answer")


def benchmark_rows(benchmark: str, records: list[dict], origin: str, filters: FilterLog) -> list[dict]:
    problem_key = _pick(records[0], PROBLEM_COLUMNS, "problem", origin)
    answer_key = _pick(records[0], ANSWER_COLUMNS, "answer", origin)
    rows = []
    for position, problem, alternatives in usable_problems(records, filters, answer_alternatives, problem_key,
                                                           answer_key):
        extra = {
            "split": "test",
            "index": len(rows),
            "benchmark": benchmark,
            "source_index": position,
            "answer_alternatives": alternatives,
        }
        messages = prompt_messages(problem)
        rows.append(make_row(benchmark, messages, alternatives[0], extra, ability="math"))
    return rows


def build(out_dir: str | os.PathLike, source: str | None = None) -> dict:
    """Write test.parquet and data_card.json into ``out_dir``; returns the data card."""
    filters = FilterLog(FILTERS)
    if source is not None and not Path(source).is_dir():
        raise DataPrepError(
            f"math_eval --source must be a folder holding {[b['file'] for b in BENCHMARKS.values()]}"
        )
    rows, inputs, counts, unexpected = [], {}, {}, {}
    for benchmark, spec in BENCHMARKS.items():
        if source is None:
            origin = spec["hub"][0]
            records, fingerprint = load_hub(*spec["hub"])
            hashes = {f"hub:{origin}": fingerprint}
        else:
            records, hashes = load_local(Path(source), benchmark)
            origin = str(Path(source) / spec["file"])
        inputs.update(hashes)
        bench_rows = benchmark_rows(benchmark, records, origin, filters)
        counts[benchmark] = len(bench_rows)
        if len(bench_rows) not in spec["rows"]:
            unexpected[benchmark] = {"rows": len(bench_rows), "expected": list(spec["rows"])}
            print(
                f"[math_eval] warning: {benchmark} has {len(bench_rows)} rows, expected {spec['rows']}",
                flush=True,
            )
        rows.extend(bench_rows)
        print(f"[math_eval] {benchmark}: {len(bench_rows)} rows from {origin}", flush=True)

    card = write_build(out_dir, {"test": rows}, filters, {
        "dataset": "math_eval",
        "data_source": list(BENCHMARKS),
        "source": str(source) if source is not None else "hub",
        "inputs_sha256": inputs,
        "splits": {"test": len(rows)},
        "rows_per_benchmark": counts,
        "answer_rule": ANSWER_RULE,
        "unexpected_row_counts": unexpected,
        "tokenizer": None,
    })
    print(f"[math_eval] {len(rows)} rows ({filters.total()} dropped) in {out_dir}", flush=True)
    return card


# `python -m data_prep math_eval`: its one-line help and its options besides --out
DESCRIPTION = "AIME24, AMC, MATH-500, Minerva, OlympiadBench -> one test parquet"


def add_arguments(parser) -> None:
    parser.add_argument("--source", default=None, help="local file/folder or hub dataset id (default: hub)")


def main(args) -> dict:
    card = build(args.out, args.source)
    return {"out": str(Path(args.out).absolute()), "rows_per_benchmark": card["rows_per_benchmark"]}
