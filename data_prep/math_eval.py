"""The five math evaluation sets (AIME 2024, AMC 2022/23, MATH-500, Minerva, OlympiadBench) -> one verl test
parquet, data_source naming the benchmark, every accepted answer in ``extra_info["answer_alternatives"]``
(docs/data.md "math_eval")."""

from __future__ import annotations

from pathlib import Path

from data_prep import common
from tasks.math import prompt_messages
from tasks.math_answers import RULE as ANSWER_RULE
from tasks.math_answers import answer_alternatives

# data_source -> local file name, hub (dataset id, config, split), accepted row counts
BENCHMARKS = {
    "aime24": {"file": "aime.json", "hub": ("HuggingFaceH4/aime_2024", None, "train"), "rows": (30,)},
    "amc23": {"file": "amc.json", "hub": ("AI-MO/aimo-validation-amc", None, "train"), "rows": (83,)},
    "math500": {"file": "math.json", "hub": ("HuggingFaceH4/MATH-500", None, "test"), "rows": (500,)},
    "minerva": {"file": "minerva.json", "hub": ("math-ai/minervamath", None, "test"), "rows": (272,)},
    "olympiad_bench": {"file": "olympiad_bench.json", "hub": ("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train"),
                       "rows": (674, 675)},
}
FILTERS = {"no_problem": "problem missing or empty",
           "no_answer": "answer missing, empty or not a usable math answer"}
DESCRIPTION = "AIME24, AMC, MATH-500, Minerva, OlympiadBench -> one test parquet"


def usable_problems(records: list[dict], filters: common.FilterLog, read_answer, problem_key: str = "problem",
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


def benchmark_rows(benchmark: str, records: list[dict], origin: str, filters: common.FilterLog) -> list[dict]:
    """The rows of one benchmark (problem column "problem" or "question", answer "answer" or "final_answer")."""
    keys = [next((name for name in names if name in records[0]), None)
            for names in (("problem", "question"), ("answer", "final_answer"))]
    if None in keys:
        raise common.DataPrepError(f"{origin}: no problem/answer column (has {sorted(records[0])})")
    rows = []
    for position, problem, alternatives in usable_problems(records, filters, answer_alternatives, *keys):
        extra = {"split": "test", "index": len(rows), "benchmark": benchmark, "source_index": position,
                 "answer_alternatives": alternatives}
        rows.append(common.make_row(benchmark, prompt_messages(problem), alternatives[0], extra, ability="math"))
    return rows


def build(out_dir, source: str | None = None) -> dict:
    """Write test.parquet and data_card.json into ``out_dir``; returns the data card."""
    if source is not None and not Path(source).is_dir():
        raise common.DataPrepError(f"math_eval --source must be a folder holding {[b['file'] for b in BENCHMARKS.values()]}")
    filters = common.FilterLog(FILTERS)
    rows, inputs, counts, unexpected = [], {}, {}, {}
    for benchmark, spec in BENCHMARKS.items():
        if source is None:
            origin = spec["hub"][0]
            records, inputs[f"hub:{origin}"] = common.load_hub(*spec["hub"])
        else:
            path = Path(source) / spec["file"]
            records, origin = common.read_json_records(path, ()), str(path)
            inputs[path.name] = common.sha256_file(path)
        found = benchmark_rows(benchmark, records, origin, filters)
        counts[benchmark] = len(found)
        if len(found) not in spec["rows"]:
            unexpected[benchmark] = {"rows": len(found), "expected": list(spec["rows"])}
        rows.extend(found)
        print(f"[math_eval] {benchmark}: {len(found)} rows from {origin}", flush=True)
    return common.write_build(out_dir, {"test": rows}, filters, {
        "dataset": "math_eval", "data_source": list(BENCHMARKS), "source": str(source) if source else "hub",
        "inputs_sha256": inputs, "splits": {"test": len(rows)}, "rows_per_benchmark": counts,
        "answer_rule": ANSWER_RULE, "unexpected_row_counts": unexpected, "tokenizer": None})


def add_arguments(parser) -> None:
    parser.add_argument("--source", default=None, help="folder of DeepScaleR's benchmark files (default: the hub)")


def main(args) -> dict:
    card = build(args.out, args.source)
    return {"out": str(Path(args.out).absolute()), "rows_per_benchmark": card["rows_per_benchmark"]}
