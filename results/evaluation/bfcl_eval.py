"""BFCL v4 through ToolRL's own BFCL handler (the one the authors ran; prompts and decoding: ``tasks.toolrl``), scored
by ``bfcl-eval``'s checkers (rules: docs/results.md, "Checkpoint evaluation"). bfcl-eval is installed without its
dependencies: when its ``constants.model_config`` fails to import, a stand-in registers the one flag the checker
reads (``underscore_to_dot``, off)."""

from __future__ import annotations

import logging
import sys
import types
import uuid
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from results import bfcl
from results.evaluation.backends import OVER_WINDOW, Backend, SamplingConfig, model_positions
from rewards.toolrl import THINK_WORD_LIMIT
from tasks import toolrl as protocol

log = logging.getLogger(__name__)
MODEL_NAME = "dara-toolrl"
MAX_STEPS = 20  # bfcl_eval.constants.default_prompts.MAXIMUM_STEP_LIMIT
# ground truths selecting the three allowed structures of the format test (the authors' selectors)
_ALLOWED_KINDS = ("<tool_call>", "<response>", "<tool_call><response>")


def _bfcl():
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
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
    # instances: where bfcl-eval caches the executable class instances
    return types.SimpleNamespace(ast_checker=ast_checker, multi_turn_checker=multi_turn_checker, Language=Language,
                                 execute=multi_turn_utils.execute_multi_turn_func_call, instances=vars(multi_turn_utils))


def _forget_instances(bfcl_mod, prefix: str) -> None:
    """Drop bfcl-eval's cached executable instances of one run."""
    for key in [k for k in bfcl_mod.instances if k.startswith(prefix)]:
        del bfcl_mod.instances[key]


def is_multi_turn(category: str) -> bool:
    return category.startswith("multi_turn")


def load_bfcl_cases(categories: Sequence[str] = bfcl.CATEGORIES, limit: int | None = None) -> list[dict]:
    """Test entries and their answers from bfcl-eval's data: ``messages`` the first-turn chat, ``functions`` the
    prompted docs; ``entry`` as BFCL's runner gives it to the checkers (no language hints, multi-turn docs added)."""
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
                          "messages": row["prompt"], "functions": prompted["function"], "entry": checked,
                          "ground_truth": answers[entry["id"]]["ground_truth"]})
    return cases


def is_call_list(decoded) -> bool:
    """BFCL's check of a decoded single-turn output: a list of one-key dicts whose value is a dict."""
    return isinstance(decoded, list) and all(isinstance(item, dict) and len(item) == 1
                                             and isinstance(next(iter(item.values())), dict) for item in decoded)


def step_calls(text: str) -> list[str]:
    """A multi-turn emission's executable calls; [] when decoding is empty or fails."""
    try:
        return protocol.decode_execute(text)
    except protocol.UndecodableCalls:
        return []


def emission_format(text: str) -> float:
    from rewards import toolrl
    content = protocol.assistant_text(text)
    return max(toolrl.format_reward(content, kind) for kind in _ALLOWED_KINDS)


def length_name(max_words: int) -> str:
    return f"length_le_{max_words}"


def think_words(text: str) -> int:
    thought = protocol.last_think_span(protocol.assistant_text(text))
    return 0 if thought is None else len(thought.split())


def emission_length(text: str, max_words: int = THINK_WORD_LIMIT) -> float:
    from rewards import toolrl
    return toolrl.think_length_reward(protocol.assistant_text(text), max_words)


def case_diagnostics(emissions: Sequence[str], max_words: int) -> dict[str, float]:
    def mean(fn, *args):
        return float(np.mean([fn(t, *args) for t in emissions])) if emissions else 0.0

    length = mean(emission_length, max_words)
    return {"format": mean(emission_format), "length": length, length_name(max_words): length,
            "think_words": mean(think_words)}


def model_window(model_dir: str) -> int:
    window = model_positions(model_dir)
    if not isinstance(window, int) or window <= 0:
        raise ValueError(f"{model_dir}: its config names no max_position_embeddings; pass --context-window")
    return window


class _Dialogue:

    def __init__(self, case: dict, run_tag: str):
        self.case, self.entry, self.multi = case, case["entry"], is_multi_turn(case["category"])
        self.history: list[dict] = [dict(m) for m in self.entry["question"][0]]
        self.turn = self.step = 0
        self.turns, self.tokens, self.finish = [[]], [[]], [[]]  # per turn: texts, token counts, finish reasons
        self.force_quit = self.over_window = self.done = False
        self.model_name = f"{run_tag}_{uuid.uuid4().hex[:8]}"

    @property
    def messages(self) -> list[dict]:
        return protocol.bfcl_messages(self.history, self.case["functions"], self.multi)

    def advance(self, completion, mod) -> None:
        """One emission: a single-turn case ends; a multi-turn one executes its calls or moves on."""
        if completion.finish_reason == OVER_WINDOW:
            log.warning("BFCL case %s: the prompt leaves no room in the context window; the case fails",
                        self.case["case_id"])
            self.over_window = self.done = True
            return
        self.turns[-1].append(completion.text)
        self.tokens[-1].append(completion.n_tokens)
        self.finish[-1].append(completion.finish_reason)
        self.history.append({"role": "assistant", "content": completion.text})
        if not self.multi:
            self.done = True
            return
        if not (calls := step_calls(completion.text)):
            self.next_turn()
            return
        results, _ = mod.execute(calls, self.entry.get("initial_config", {}), self.entry["involved_classes"],
                                 self.model_name, self.entry["id"], is_evaL_run=False,
                                 long_context="long_context" in self.case["category"])
        for call, result in zip(calls, results, strict=True):
            self.history.append({"role": "tool", "name": call, "content": result})
        self.step += 1
        self.force_quit = self.done = self.step > MAX_STEPS

    def next_turn(self) -> None:
        self.turn, self.step = self.turn + 1, 0
        questions = self.entry["question"]
        if self.turn >= len(questions):
            self.done = True
            return
        for kept in (self.turns, self.tokens, self.finish):
            kept.append([])
        if held_out := self.entry.get("missed_function", {}).get(str(self.turn)):
            self.history.append(protocol.bfcl_more_functions_message(held_out))
        else:
            self.history.extend(dict(m) for m in questions[self.turn])

    def record(self) -> dict:
        return {"case_id": self.case["case_id"], "category": self.case["category"], "turns": self.turns,
                "n_tokens": self.tokens, "finish_reason": self.finish, "force_quit": self.force_quit,
                "over_window": self.over_window}


def make_producer(backend: Backend, sampling: SamplingConfig):
    """Batch of cases -> records, every case stepped in lockstep (one backend call per round)."""
    if sampling.n != 1:
        raise ValueError("BFCL is evaluated with one sample per case")

    def produce(batch: list[dict]) -> list[dict]:
        mod = _bfcl()
        run_tag = f"dara_gen_{uuid.uuid4().hex[:8]}"
        dialogues = [_Dialogue(c, run_tag) for c in batch]
        try:
            while active := [d for d in dialogues if not d.done]:
                # the authors' handler sent every request with the same seed
                outputs = backend.chat([d.messages for d in active], sampling, [sampling.seed] * len(active))
                for dialogue, samples in zip(active, outputs, strict=True):
                    dialogue.advance(samples[0], mod)
        finally:
            _forget_instances(mod, run_tag)
        return [d.record() for d in dialogues]

    return produce


def score_record(record: dict, case: dict, *, length_max_words: int = THINK_WORD_LIMIT) -> dict:
    """Accuracy from bfcl-eval's checker and the format and length diagnostics; a case over the context window
    fails with all 0 (the authors' handler put its error text in place of the emissions)."""
    category = record["category"]
    emissions = [text for turn in record["turns"] for text in turn]
    if record.get("over_window"):
        return {"case_id": record["case_id"], "category": category, "valid": False, "over_window": True,
                **case_diagnostics([], length_max_words),
                "error": "a prompt left no room in the context window: the case failed"}
    mod = _bfcl()
    if is_multi_turn(category):
        valid, error = _check_multi_turn(record, case, mod)
    else:
        valid, error = _check_single_turn(emissions[0], case, mod)
    return {"case_id": record["case_id"], "category": category, "valid": bool(valid),
            **case_diagnostics(emissions, length_max_words), "error": error}


def _check_single_turn(text: str, case: dict, mod) -> tuple[bool, str | None]:
    decoded = protocol.decode_ast(text)
    if not is_call_list(decoded):
        return False, "decoded calls are not [{name: {parameter: value}}] (BFCL's format check)"
    language = {"simple_java": "java", "simple_javascript": "javascript"}.get(case["category"], "python")
    result = mod.ast_checker(case["entry"]["function"], decoded, case["ground_truth"],
                             mod.Language(language), case["category"], MODEL_NAME)
    return result["valid"], None if result["valid"] else str(result.get("error"))


def _check_multi_turn(record: dict, case: dict, mod) -> tuple[bool, str | None]:
    ground_truth = case["ground_truth"]
    if record["force_quit"] or len(record["turns"]) != len(ground_truth):
        return False, "force-terminated (step limit) or turn count differs from the ground truth"
    # empty or undecodable emissions are skipped, as bfcl-eval's runner does
    decoded = [[calls for text in turn if (calls := step_calls(text))] for turn in record["turns"]]
    name = f"dara_eval_{uuid.uuid4().hex[:8]}"
    try:
        result = mod.multi_turn_checker(decoded, ground_truth, case["entry"], case["category"], name)
    finally:
        _forget_instances(mod, name)
    return result["valid"], None if result["valid"] else str(result.get("error_type", result))


def summarise_bfcl(scored: Sequence[dict]) -> dict:
    """Per-category scores (percent; think_words in words), then results.bfcl's groups over the counts scored."""
    by_cat: dict[str, list[dict]] = defaultdict(list)
    for rec in scored:
        by_cat[rec["category"]].append(rec)
    # the length diagnostics when scored (score files written before they existed have none)
    names = [k for k in scored[0] if k == "length" or k.startswith("length_le_")] if scored else []
    kinds = ["accuracy", "format"] + ([*names, "think_words"] if names and "think_words" in scored[0] else [])
    categories = {c: {"cases": len(rows), **{k: (1.0 if k == "think_words" else 100.0) * float(
        np.mean([r["valid" if k == "accuracy" else k] for r in rows])) for k in kinds}} for c, rows in by_cat.items()}
    out = {"categories": categories, "kinds": kinds,
           "over_window_cases": sum(bool(r.get("over_window")) for r in scored)}
    counts = {c: v["cases"] for c, v in categories.items()}
    for kind in kinds:
        try:
            groups = bfcl.aggregate({c: v[kind] for c, v in categories.items()}, counts)
            out[f"groups_{kind}"] = groups
            out[f"average_{kind}"] = groups["average"]
        except KeyError as err:  # a partial run (e.g. smoke): report what is complete
            out[f"groups_{kind}"], out[f"note_{kind}"] = None, str(err)
    return out


def render_bfcl_table(summary: dict) -> str:
    kinds = summary.get("kinds", ["accuracy", "format"])
    lines = ["| category | cases | " + " | ".join(kinds) + " |", "|---|---|" + "---|" * len(kinds)]
    lines += [f"| {c} | {v['cases']} | " + " | ".join(f"{v[k]:.2f}" for k in kinds) + " |"
              for c, v in summary["categories"].items()]
    averages = [f"{summary[f'average_{k}']:.2f}" if f"average_{k}" in summary else "" for k in kinds]
    if any(averages):
        lines.append("| **average** | | " + " | ".join(averages) + " |")
    lines.append(f"\n{summary.get('over_window_cases', 0)} case(s) failed because a prompt left no room in the "
                 "context window.")
    return "\n".join(lines) + "\n"
