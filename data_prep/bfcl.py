"""BFCL v4 -> verl test parquet, rendered with ToolRL's system prompt and tool list (docs/data.md "bfcl").

The 14 categories of the paper's Average (3,301 cases), read from the data ``bfcl-eval`` bundles (found without
importing the package, whose pins clash with verl) or ``--source DIR`` of the same layout. Entries are prepared
as BFCL prepares them (multi-turn function docs of the involved classes, miss_func's held-out functions under
``missed_function``, language hints, Java/JavaScript parameters as strings), then rendered as ToolRL's BFCL
handler does (``tasks.toolrl.bfcl_messages``). Ground truth: BFCL's possible answer as JSON;
``extra_info["entry"]``: the whole prepared entry as JSON, for the multi-turn driver and BFCL's checker.
"""

from __future__ import annotations

import copy
import importlib.metadata
import importlib.util
import json
import os
from pathlib import Path

from data_prep.common import (
    DataPrepError,
    FilterLog,
    make_row,
    sha256_file,
    write_build,
)
from tasks import toolrl as protocol

VERSION_PREFIX = "BFCL_v4"
ABILITY = "tool_calling"

# category -> (group of the paper's Average, expected cases)
CATEGORIES = {
    "simple_python": ("non_live", 400),
    "simple_java": ("non_live", 100),
    "simple_javascript": ("non_live", 50),
    "multiple": ("non_live", 200),
    "parallel": ("non_live", 200),
    "parallel_multiple": ("non_live", 200),
    "live_simple": ("live", 258),
    "live_multiple": ("live", 1053),
    "live_parallel": ("live", 16),
    "live_parallel_multiple": ("live", 24),
    "multi_turn_base": ("multi_turn", 200),
    "multi_turn_miss_func": ("multi_turn", 200),
    "multi_turn_miss_param": ("multi_turn", 200),
    "multi_turn_long_context": ("multi_turn", 200),
}

# BFCL's class -> function doc file of the multi-turn backends.
MULTI_TURN_FUNC_DOCS = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}

# ----------------------------------------------------------------------------------------------------------
# locating and reading BFCL's files
# ----------------------------------------------------------------------------------------------------------
def package_data_dir() -> Path:
    """bfcl_eval/data of the installed bfcl-eval package, found without importing it."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise DataPrepError(
            "bfcl-eval is not installed: `.venv/bin/pip install --no-deps bfcl-eval` (its own pins clash with "
            "verl), or pass --source DIR with BFCL's data folder"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def package_version() -> str | None:
    try:
        return importlib.metadata.version("bfcl-eval")
    except importlib.metadata.PackageNotFoundError:
        return None


def read_json_lines(path: Path) -> list[dict]:
    if not path.is_file():
        raise DataPrepError(f"BFCL file not found: {path}")
    entries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise DataPrepError(f"{path}:{number} is not a JSON object: {err}") from err
    if not entries:
        raise DataPrepError(f"{path} holds no entries")
    return entries


# ----------------------------------------------------------------------------------------------------------
# BFCL's preparation of test entries
# ----------------------------------------------------------------------------------------------------------
def language_of(category: str) -> str:
    if category.endswith("java"):
        return "java"
    if category.endswith("javascript"):
        return "javascript"
    return "python"


LANGUAGE_HINTS = {
    "java": " Note that the provided function is in Java 8 SDK syntax.",
    "javascript": " Note that the provided function is in JavaScript syntax.",
    "python": " Note that the provided function is in Python 3 syntax.",
}
LANGUAGE_NAMES = {"java": "Java", "javascript": "JavaScript"}


def _stringify_parameter(spec: dict, language: str) -> None:
    """BFCL's Java/JavaScript rule: every parameter is passed as a string; its real type goes in the text."""
    name = LANGUAGE_NAMES[language]
    if spec["type"] == "any":
        spec["description"] += (
            f" This parameter can be of any type of {name} object in string representation."
        )
    else:
        spec["description"] += f" This is {name} {spec['type']} type parameter in string representation."
    list_types = ("ArrayList", "Array") if language == "java" else ("array",)
    if spec["type"] in list_types:
        spec["description"] += (
            f" The list elements are of type {spec['items']['type']}; they are not in string representation."
        )
        del spec["items"]
    if language == "javascript" and spec["type"] == "dict" and "properties" in spec:
        spec["description"] += (
            " The dictionary entries have the following schema; they are not in string representation. "
            + json.dumps(spec["properties"])
        )
        del spec["properties"]
    spec["type"] = "string"


def add_language_hints(functions: list[dict], category: str) -> list[dict]:
    language = language_of(category)
    functions = copy.deepcopy(functions)
    for function in functions:
        function["description"] = function["description"] + LANGUAGE_HINTS[language]
        if language in LANGUAGE_NAMES:
            for spec in function["parameters"]["properties"].values():
                _stringify_parameter(spec, language)
    return functions


def add_multi_turn_functions(entry: dict, data_dir: Path, docs_cache: dict) -> dict:
    """Function docs of the involved classes; miss_func's held-out functions move to missed_function."""
    entry = copy.deepcopy(entry)
    functions = []
    for class_name in entry["involved_classes"]:
        if class_name not in MULTI_TURN_FUNC_DOCS:
            raise DataPrepError(f"{entry['id']}: unknown multi-turn class {class_name!r}")
        if class_name not in docs_cache:
            docs_cache[class_name] = read_json_lines(
                data_dir / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOCS[class_name]
            )
        functions.extend(copy.deepcopy(docs_cache[class_name]))
    missed = {}
    for turn, names in entry.get("missed_function", {}).items():
        missed[turn] = []
        for name in names:
            position = next((i for i, f in enumerate(functions) if f["name"] == name), None)
            if position is None:
                raise DataPrepError(
                    f"{entry['id']}: missed function {name!r} is not among the involved classes"
                )
            missed[turn].append(functions.pop(position))
    entry["function"] = functions
    if "missed_function" in entry:
        entry["missed_function"] = missed
    return entry


def prepare_entry(entry: dict, category: str, data_dir: Path, docs_cache: dict) -> dict:
    if category.startswith("multi_turn"):
        # BFCL hints only the functions offered from the start, not the held-out ones.
        entry = add_multi_turn_functions(entry, data_dir, docs_cache)
    entry = dict(entry)
    entry["function"] = add_language_hints(entry["function"], category)
    return entry


# ----------------------------------------------------------------------------------------------------------
# ToolRL rendering
# ----------------------------------------------------------------------------------------------------------
def first_turn_messages(entry: dict, category: str) -> list[dict]:
    """The chat the model receives for an entry's first turn (ToolRL's BFCL handler)."""
    group = CATEGORIES[category][0]
    return protocol.bfcl_messages(entry["question"][0], entry["function"], multi_turn=group == "multi_turn")


def entry_row(entry: dict, answer: dict, category: str, index: int) -> dict:
    group = CATEGORIES[category][0]
    messages = first_turn_messages(entry, category)
    extra = {
        "split": "test",
        "index": index,
        "id": entry["id"],
        "category": category,
        "group": group,
        "turns": len(entry["question"]),
        "entry": json.dumps(entry),
    }
    return make_row(f"bfcl_{category}", messages, json.dumps(answer["ground_truth"]), extra, ability=ABILITY)


# ----------------------------------------------------------------------------------------------------------
# build
# ----------------------------------------------------------------------------------------------------------
def category_rows(
    category: str, data_dir: Path, filters: FilterLog, docs_cache: dict
) -> tuple[list[dict], dict]:
    test_path = data_dir / f"{VERSION_PREFIX}_{category}.json"
    answer_path = data_dir / "possible_answer" / f"{VERSION_PREFIX}_{category}.json"
    entries = read_json_lines(test_path)
    answers = {a["id"]: a for a in read_json_lines(answer_path)}
    rows = []
    for entry in entries:
        if entry.get("id") not in answers:
            filters.drop("no_possible_answer")
            continue
        if not entry.get("question") or not entry["question"][0]:
            filters.drop("empty_question")
            continue
        prepared = prepare_entry(entry, category, data_dir, docs_cache)
        rows.append(entry_row(prepared, answers[entry["id"]], category, len(rows)))
    hashes = {
        f"{VERSION_PREFIX}_{category}.json": sha256_file(test_path),
        f"possible_answer/{VERSION_PREFIX}_{category}.json": sha256_file(answer_path),
    }
    return rows, hashes


def build(out_dir: str | os.PathLike, source: str | None = None, categories: list[str] | None = None) -> dict:
    """Write test.parquet and data_card.json into ``out_dir``; returns the data card."""
    categories = categories or list(CATEGORIES)
    unknown = [c for c in categories if c not in CATEGORIES]
    if unknown:
        raise DataPrepError(f"unknown BFCL categories {unknown}; known: {list(CATEGORIES)}")
    data_dir = Path(source) if source else package_data_dir()
    if not data_dir.is_dir():
        raise DataPrepError(f"BFCL data folder not found: {data_dir}")
    filters = FilterLog({"no_possible_answer": "test entry without a possible answer",
                         "empty_question": "test entry without a first turn"})
    rows, inputs, counts, unexpected, docs_cache = [], {}, {}, {}, {}
    for category in categories:
        category_rows_, hashes = category_rows(category, data_dir, filters, docs_cache)
        inputs.update(hashes)
        counts[category] = len(category_rows_)
        if len(category_rows_) != CATEGORIES[category][1]:
            unexpected[category] = {"rows": len(category_rows_), "expected": CATEGORIES[category][1]}
        rows.extend(category_rows_)
        print(f"[bfcl] {category}: {len(category_rows_)} cases", flush=True)
    for class_name in sorted(docs_cache):
        name = f"multi_turn_func_doc/{MULTI_TURN_FUNC_DOCS[class_name]}"
        inputs[name] = sha256_file(data_dir / name)

    card = write_build(out_dir, {"test": rows}, filters, {
        "dataset": "bfcl",
        "data_source": [f"bfcl_{c}" for c in categories],
        "source": str(source) if source else "bfcl-eval package data",
        "bfcl_eval_version": None if source else package_version(),
        "inputs_sha256": inputs,
        "splits": {"test": len(rows)},
        "rows_per_category": counts,
        "unexpected_row_counts": unexpected,
        "tokenizer": None,
    })
    print(f"[bfcl] {len(rows)} cases ({filters.total()} dropped) in {out_dir}", flush=True)
    return card


# `python -m data_prep bfcl`: its one-line help and its options besides --out
DESCRIPTION = "BFCL v4 categories of the paper's Average -> test parquet"


def add_arguments(parser) -> None:
    parser.add_argument("--source", default=None, help="local file/folder or hub dataset id (default: hub)")
    parser.add_argument("--categories", default=None, help="comma-separated BFCL categories (default: paper's)")


def main(args) -> dict:
    categories = args.categories.split(",") if args.categories else None
    card = build(args.out, args.source, categories)
    return {"out": str(Path(args.out).absolute()), "rows_per_category": card["rows_per_category"]}
