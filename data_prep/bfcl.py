"""BFCL v4 test entries as the evaluation reads them (docs/data.md "bfcl"): read from the data ``bfcl-eval``
bundles (found without importing the package, whose pins clash with verl), prepared as BFCL prepares them, rendered
as ToolRL's BFCL handler does (``tasks.toolrl.bfcl_messages``) into a verl row."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

from data_prep.common import DataPrepError, make_row
from tasks import toolrl as protocol

# BFCL's class -> function doc file of the multi-turn backends
MULTI_TURN_FUNC_DOCS = {
    "GorillaFileSystem": "gorilla_file_system.json", "MathAPI": "math_api.json", "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json", "TicketAPI": "ticket_api.json", "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json", "VehicleControlAPI": "vehicle_control.json",
}
# language -> (hint after every function description, name in the string-parameter notes)
LANGUAGES = {"java": (" Note that the provided function is in Java 8 SDK syntax.", "Java"),
             "javascript": (" Note that the provided function is in JavaScript syntax.", "JavaScript"),
             "python": (" Note that the provided function is in Python 3 syntax.", None)}


def package_data_dir() -> Path:
    """bfcl_eval/data of the installed bfcl-eval package, found without importing it."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise DataPrepError("bfcl-eval is not installed: `.venv/bin/pip install --no-deps bfcl-eval` (its own pins "
                            "clash with verl), or pass --source DIR with BFCL's data folder")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def read_json_lines(path: Path) -> list[dict]:
    if not path.is_file():
        raise DataPrepError(f"BFCL file not found: {path}")
    entries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            entries += [json.loads(line)] if line.strip() else []
        except json.JSONDecodeError as err:
            raise DataPrepError(f"{path}:{number} is not a JSON object: {err}") from err
    if not entries:
        raise DataPrepError(f"{path} holds no entries")
    return entries


def _stringify_parameter(spec: dict, language: str, name: str) -> None:
    """BFCL's Java/JavaScript rule: every parameter is passed as a string; its real type goes in the text."""
    if spec["type"] == "any":
        spec["description"] += f" This parameter can be of any type of {name} object in string representation."
    else:
        spec["description"] += f" This is {name} {spec['type']} type parameter in string representation."
    if spec["type"] in (("ArrayList", "Array") if language == "java" else ("array",)):
        spec["description"] += (f" The list elements are of type {spec.pop('items')['type']}; they are not in string "
                                "representation.")
    if language == "javascript" and spec["type"] == "dict" and "properties" in spec:
        spec["description"] += (" The dictionary entries have the following schema; they are not in string "
                                "representation. " + json.dumps(spec.pop("properties")))
    spec["type"] = "string"


def add_multi_turn_functions(entry: dict, data_dir: Path, docs_cache: dict) -> dict:
    """Function docs of the involved classes; miss_func's held-out functions move to missed_function."""
    entry, functions = copy.deepcopy(entry), []
    for class_name in entry["involved_classes"]:
        if class_name not in MULTI_TURN_FUNC_DOCS:
            raise DataPrepError(f"{entry['id']}: unknown multi-turn class {class_name!r}")
        if class_name not in docs_cache:
            docs_cache[class_name] = read_json_lines(data_dir / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOCS[class_name])
        functions.extend(copy.deepcopy(docs_cache[class_name]))
    if "missed_function" in entry:
        missed = {}
        for turn, names in entry["missed_function"].items():
            missed[turn] = []
            for name in names:
                position = next((i for i, f in enumerate(functions) if f["name"] == name), None)
                if position is None:
                    raise DataPrepError(f"{entry['id']}: missed function {name!r} is not among the involved classes")
                missed[turn].append(functions.pop(position))
        entry["missed_function"] = missed
    entry["function"] = functions
    return entry


def prepare_entry(entry: dict, category: str, data_dir: Path, docs_cache: dict) -> dict:
    """BFCL's preparation: multi-turn function docs, then the language hint (only on the functions offered from
    the start, not the held-out ones) and, for Java/JavaScript, parameters as strings."""
    if category.startswith("multi_turn"):
        entry = add_multi_turn_functions(entry, data_dir, docs_cache)
    language = next((name for name in ("javascript", "java") if category.endswith(name)), "python")
    hint, name = LANGUAGES[language]
    functions = copy.deepcopy(entry["function"])
    for function in functions:
        function["description"] += hint
        for spec in function["parameters"]["properties"].values() if name else ():
            _stringify_parameter(spec, language, name)
    return {**entry, "function": functions}


def entry_row(entry: dict, answer: dict, category: str, index: int) -> dict:
    """The verl row of a prepared entry: its first turn as ToolRL's BFCL handler renders it."""
    group = "multi_turn" if category.startswith("multi_turn") else "live" if category.startswith("live") else "non_live"
    messages = protocol.bfcl_messages(entry["question"][0], entry["function"], multi_turn=group == "multi_turn")
    extra = {"split": "test", "index": index, "id": entry["id"], "category": category, "group": group,
             "turns": len(entry["question"]), "entry": json.dumps(entry)}
    return make_row(f"bfcl_{category}", messages, json.dumps(answer["ground_truth"]), extra, ability="tool_calling")
