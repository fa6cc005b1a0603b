"""BFCL v4 with the ToolRL prompt and parser, scored by the ``bfcl-eval`` package's own checkers.

- Prompt: ``data_prep.bfcl``'s rendering of ToolRL's BFCL handler (system = ToolRL's instruction and tool
  list, user = ``**Dialogue Records History**`` with the turn instruction). Multi-turn: each model emission
  is an assistant turn; tool results come back as a user message ``<obs> ... </obs>``; a later user turn,
  or the functions added at a miss_func turn (BFCL's own additional-function message), is a new user turn.
- Parser: ``rewards.toolrl.parse_tool_calls`` (one ``{"name", "parameters"}`` JSON per line of the
  tool_call block). An emission without a parseable block ends the step loop of its turn, as in BFCL's
  prompting handlers; more than 20 steps in a turn force-quits the case (BFCL's MAXIMUM_STEP_LIMIT).
- Accuracy: single-turn categories through ``ast_checker`` (AST match); multi-turn through
  ``multi_turn_checker`` (execution state and responses). Never from the format reward.
- Format: each assistant emission scores 1 if it matches one of the three allowed structures
  (think+tool_call, think+response, think+tool_call+response; rewards.toolrl's format rule), averaged
  per case, then per category; groups and Average as in results.bfcl (EXPERIMENTS.md).

bfcl-eval is installed without its dependencies (they would replace the pinned numpy/pandas). Its
``constants.model_config`` imports every API client only to list model handlers, of which the checker
reads a single flag (``underscore_to_dot``); when that import fails we register that registry with the
flag off for our model (our parser keeps function names as written).
"""

from __future__ import annotations

import json
import sys
import types
import uuid
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from results import bfcl
from results.evaluation.backends import Backend, SamplingConfig
from results.evaluation.runner import case_seed

MODEL_NAME = "dara-toolrl"
MAX_STEPS = 20  # bfcl_eval.constants.default_prompts.MAXIMUM_STEP_LIMIT
_ALLOWED_KINDS = ("<tool_call>", "<response>", "<tool_call>\n<response>")


# ------------------------------------------------------------------------------------------------ bfcl-eval
def _bfcl():
    """Import the pieces of bfcl-eval we use (see the module docstring about model_config)."""
    try:
        import bfcl_eval  # noqa: F401
    except ImportError as err:
        raise ImportError("BFCL evaluation needs the bfcl-eval package: pip install --no-deps bfcl-eval") from err
    try:
        from bfcl_eval.constants import model_config  # noqa: F401
    except ImportError:
        stand_in = types.ModuleType("bfcl_eval.constants.model_config")
        stand_in.MODEL_CONFIG_MAPPING = defaultdict(lambda: types.SimpleNamespace(underscore_to_dot=False))
        sys.modules["bfcl_eval.constants.model_config"] = stand_in
    from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    return types.SimpleNamespace(
        ast_checker=ast_checker,
        multi_turn_checker=multi_turn_checker,
        execute=multi_turn_utils.execute_multi_turn_func_call,
        instances=vars(multi_turn_utils),  # where bfcl-eval caches the executable class instances
        Language=Language,
        more_functions_text=DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC,
    )


def _forget_instances(bfcl_mod, prefix: str) -> None:
    """Drop bfcl-eval's cached executable instances of one run (they live in a module's globals)."""
    for key in [k for k in bfcl_mod.instances if k.startswith(prefix)]:
        del bfcl_mod.instances[key]


def is_multi_turn(category: str) -> bool:
    return category.startswith("multi_turn")


def language_of(category: str) -> str:
    if category == "simple_java":
        return "java"
    if category == "simple_javascript":
        return "javascript"
    return "python"


def load_bfcl_cases(categories: Sequence[str] = bfcl.CATEGORIES, limit: int | None = None) -> list[dict]:
    """Test entries of the categories with their possible answers, from the bfcl-eval package data.

    The prompt is data_prep.bfcl's rendering (ToolRL's BFCL handler: ToolRL instruction, tool list with
    BFCL's language hints, Java/JavaScript parameters as strings, the turn instruction), the same rows as
    ``python -m data_prep bfcl``. The checkers and the multi-turn executor get the entry as BFCL's own
    runner does: function docs of the involved classes added, miss_func functions held out per turn, but
    no language hints (the AST checker types Java/JavaScript values by the original parameter types)."""
    from data_prep import bfcl as bfcl_prep

    data_dir = bfcl_prep.package_data_dir()
    cases, docs_cache = [], {}
    for category in categories:
        if category not in bfcl.CASE_COUNTS:
            raise ValueError(f"unknown BFCL category {category!r}; known: {list(bfcl.CATEGORIES)}")
        entries = bfcl_prep.read_json_lines(data_dir / f"BFCL_v4_{category}.json")
        answers = {a["id"]: a for a in bfcl_prep.read_json_lines(data_dir / "possible_answer" / f"BFCL_v4_{category}.json")}
        for index, entry in enumerate(entries[:limit] if limit else entries):
            checked = bfcl_prep.add_multi_turn_functions(entry, data_dir, docs_cache) if is_multi_turn(category) else entry
            prompted = bfcl_prep.prepare_entry(entry, category, data_dir, docs_cache)
            row = bfcl_prep.entry_row(prompted, answers[entry["id"]], category, index)
            cases.append({"case_id": entry["id"], "category": category, "data_source": row["data_source"],
                          "messages": row["prompt"], "entry": checked,
                          "ground_truth": answers[entry["id"]]["ground_truth"]})
    return cases


# ------------------------------------------------------------------------------------------------ prompt
def user_message(turn: list[dict]) -> str:
    """A later multi-turn user turn, rendered like the first (data_prep.bfcl.user_message)."""
    from data_prep import bfcl as bfcl_prep

    return bfcl_prep.user_message(turn, multi_turn=True)


def more_functions_message(functions: list[dict], text: str) -> str:
    """miss_func's turn: BFCL's additional-function prompt with the functions as ToolRL tool entries."""
    from data_prep import bfcl as bfcl_prep
    from data_prep import toolrl_format

    listing = "".join(
        toolrl_format.tool_entry(i + 1, t["name"], t["description"], t["parameters"])
        for i, t in enumerate(bfcl_prep.toolrl_tools(functions))
    )
    return f"**Dialogue Records History**\n<user> {listing}\n{text} </user>"


# ------------------------------------------------------------------------------------------------ parsing
def parse_calls(text: str) -> list[dict] | None:
    """ToolRL tool calls of one emission, or None when there is no parseable tool_call block."""
    from rewards import toolrl

    try:
        return toolrl.parse_tool_calls(toolrl.strip_assistant_text(text))
    except toolrl.MalformedToolCalls:
        return None


def _as_source(value, language: str):
    """Java/JavaScript cases are checked on source-text values (bfcl-eval's prompting decoders produce
    strings there): JSON values become their JSON text; strings stay."""
    if language == "python" or isinstance(value, str):
        return value
    return json.dumps(value)


def to_ast(calls: list[dict], language: str) -> list[dict]:
    """[{name, parameters}] -> bfcl-eval's decoded form [{name: {param: value}}]."""
    return [{c["name"]: {k: _as_source(v, language) for k, v in c["parameters"].items()}} for c in calls]


def to_execution(calls: list[dict]) -> list[str]:
    """[{name, parameters}] -> executable call strings ``name(key=repr(value), ...)``."""
    return [f"{c['name']}(" + ", ".join(f"{k}={v!r}" for k, v in c["parameters"].items()) + ")" for c in calls]


def emission_format(text: str) -> float:
    """1.0 when the emission matches any of the three allowed structures (rewards.toolrl format rule)."""
    from rewards import toolrl

    return max(toolrl.format_reward(text, kind) for kind in _ALLOWED_KINDS)


# ------------------------------------------------------------------------------------------------ generation
class _Dialogue:
    """The state of one case during generation: messages so far, the current turn and step."""

    def __init__(self, case: dict, run_tag: str):
        self.case = case
        self.entry = case["entry"]
        self.multi = is_multi_turn(case["category"])
        self.messages = [dict(m) for m in case["messages"]]
        self.turn, self.step = 0, 0
        self.turns: list[list[str]] = [[]]
        self.tokens: list[list[int]] = [[]]
        self.finish: list[list[str]] = [[]]
        self.force_quit = False
        self.done = False
        self.model_name = f"{run_tag}_{uuid.uuid4().hex[:8]}"

    def record_emission(self, completion) -> None:
        self.turns[-1].append(completion.text)
        self.tokens[-1].append(completion.n_tokens)
        self.finish[-1].append(completion.finish_reason)
        self.messages.append({"role": "assistant", "content": completion.text})

    def advance(self, completion, mod) -> None:
        """Consume one emission: single-turn cases end; multi-turn cases execute calls or move on."""
        self.record_emission(completion)
        if not self.multi:
            self.done = True
            return
        calls = parse_calls(completion.text)
        if calls:
            results, _ = mod.execute(
                to_execution(calls), self.entry.get("initial_config", {}), self.entry["involved_classes"],
                self.model_name, self.entry["id"], long_context="long_context" in self.case["category"],
                is_evaL_run=False,
            )
            self.messages.append({"role": "user", "content": "<obs> " + "\n".join(map(str, results)) + " </obs>"})
            self.step += 1
            if self.step > MAX_STEPS:
                self.force_quit = True
                self.done = True
            return
        self.next_turn()

    def next_turn(self) -> None:
        self.turn += 1
        self.step = 0
        questions = self.entry["question"]
        if self.turn >= len(questions):
            self.done = True
            return
        self.turns.append([])
        self.tokens.append([])
        self.finish.append([])
        held_out = self.entry.get("missed_function", {}).get(str(self.turn))
        if held_out:
            text = more_functions_message(held_out, _bfcl().more_functions_text)
        else:
            text = user_message(questions[self.turn])
        self.messages.append({"role": "user", "content": text})

    def record(self) -> dict:
        return {"case_id": self.case["case_id"], "category": self.case["category"], "turns": self.turns,
                "n_tokens": self.tokens, "finish_reason": self.finish, "force_quit": self.force_quit}


def make_producer(backend: Backend, sampling: SamplingConfig):
    """Batch of cases -> records, stepping every case of the batch in lockstep (one backend call per round)."""
    if sampling.n != 1:
        raise ValueError("BFCL is evaluated with one sample per case")

    def produce(batch: list[dict]) -> list[dict]:
        mod = _bfcl()
        run_tag = f"dara_gen_{uuid.uuid4().hex[:8]}"
        dialogues = [_Dialogue(c, run_tag) for c in batch]
        try:
            round_index = 0
            while active := [d for d in dialogues if not d.done]:
                seeds = [case_seed(sampling.seed + round_index, d.case["case_id"]) for d in active]
                outputs = backend.chat([d.messages for d in active], sampling, seeds)
                for dialogue, samples in zip(active, outputs, strict=True):
                    dialogue.advance(samples[0], mod)
                round_index += 1
        finally:
            _forget_instances(mod, run_tag)
        return [d.record() for d in dialogues]

    return produce


# ------------------------------------------------------------------------------------------------ scoring
def score_record(record: dict, case: dict) -> dict:
    """Accuracy from bfcl-eval's checker and the per-case format score."""
    mod = _bfcl()
    category = record["category"]
    emissions = [text for turn in record["turns"] for text in turn]
    fmt = float(np.mean([emission_format(t) for t in emissions])) if emissions else 0.0
    if is_multi_turn(category):
        valid, error = _check_multi_turn(record, case, mod)
    else:
        valid, error = _check_single_turn(emissions[0], case, mod)
    return {"case_id": record["case_id"], "category": category, "valid": bool(valid), "format": fmt, "error": error}


def _check_single_turn(text: str, case: dict, mod) -> tuple[bool, str | None]:
    calls = parse_calls(text)
    if calls is None:
        return False, "no parseable tool_call block"
    language = language_of(case["category"])
    result = mod.ast_checker(case["entry"]["function"], to_ast(calls, language), case["ground_truth"],
                             mod.Language(language), case["category"], MODEL_NAME)
    return result["valid"], None if result["valid"] else str(result.get("error"))


def _check_multi_turn(record: dict, case: dict, mod) -> tuple[bool, str | None]:
    ground_truth = case["ground_truth"]
    if record["force_quit"] or len(record["turns"]) != len(ground_truth):
        return False, "force-terminated (step limit) or turn count differs from the ground truth"
    decoded = []
    for turn in record["turns"]:
        steps = []
        for text in turn:
            calls = parse_calls(text)
            if calls:  # empty or undecodable emissions are skipped, as bfcl-eval's runner does
                steps.append(to_execution(calls))
        decoded.append(steps)
    name = f"dara_eval_{uuid.uuid4().hex[:8]}"
    try:
        result = mod.multi_turn_checker(decoded, ground_truth, case["entry"], case["category"], name)
    finally:
        _forget_instances(mod, name)
    return result["valid"], None if result["valid"] else str(result.get("error_type", result))


def summarise_bfcl(scored: Sequence[dict]) -> dict:
    """Per-category accuracy and format (percent), then the groups and Averages of results.bfcl. Live's
    micro mean uses the case counts actually scored (the official counts on a full run)."""
    by_cat: dict[str, list[dict]] = defaultdict(list)
    for rec in scored:
        by_cat[rec["category"]].append(rec)
    categories = {
        c: {"cases": len(rows), "accuracy": 100 * float(np.mean([r["valid"] for r in rows])),
            "format": 100 * float(np.mean([r["format"] for r in rows]))}
        for c, rows in by_cat.items()
    }
    out = {"categories": categories}
    counts = {c: v["cases"] for c, v in categories.items()}
    for kind in ("accuracy", "format"):
        scores = {c: v[kind] for c, v in categories.items()}
        try:
            groups = bfcl.aggregate(scores, counts)
        except KeyError as err:  # a partial run (e.g. smoke): report what is complete
            out[f"groups_{kind}"] = None
            out[f"note_{kind}"] = str(err)
            continue
        out[f"groups_{kind}"] = groups
    if out.get("groups_accuracy"):
        out["average_accuracy"] = out["groups_accuracy"]["average"]
    if out.get("groups_format"):
        out["average_format"] = out["groups_format"]["average"]
    return out
