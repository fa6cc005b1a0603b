"""The ToolRL protocol: tags, the output format, prompt rendering (training rows and BFCL) and decoding, for
``data_prep``, ``rewards.toolrl`` and the BFCL evaluation. The format is the original scorer's
(``verl.utils.reward_score.rlla``), decided in linear time (``matches_format``); the scorer reads the FIRST call
block, ToolRL's BFCL handler the LAST; BFCL sees the dialogue as that handler renders it (``bfcl_messages``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from tasks.registry import TaskSpec, register_task

# the data_source of ToolRL rows (the name verl's own ToolRL scorer is registered under)
DATA_SOURCE = "rlla"

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
RESPONSE_OPEN, RESPONSE_CLOSE = "<response>", "</response>"

ASSISTANT_START, END_OF_TURN = "<|im_start|>assistant", "<|im_end|>"
ABILITY = "math"  # as ToolRL's own parquet rows (its verl data template's), so ours equal them field for field
SYSTEM_HEADER = (
    "You are a helpful multi-turn dialogue assistant capable of leveraging tool calls to solve user tasks "
    "and provide structured chat responses.\n\n**Available Tools**\nIn your response, you can use the "
    "following tools:\n"
)
SYSTEM_FOOTER = (
    "\n**Steps for Each Turn**\n"
    "1. **Think:** Recall relevant context and analyze the current user goal.\n"
    "2. **Decide on Tool Usage:** If a tool is needed, specify the tool and its parameters.\n"
    "3. **Respond Appropriately:** If a response is needed, generate one while maintaining consistency "
    "across user queries.\n\n"
    "**Output Format**\n```plaintext\n<think> Your thoughts and reasoning </think>\n<tool_call>\n"
    '{"name": "Tool name", "parameters": {"Parameter name": "Parameter content", "... ...": "... ..."}}\n'
    '{"name": "... ...", "parameters": {"... ...": "... ...", "... ...": "... ..."}}\n'
    "...\n</tool_call>\n<response> AI's final response </response>\n```\n\n"
    "**Important Notes**\n"
    "1. You must always include the `<think>` field to outline your reasoning. Provide at least one of "
    "`<tool_call>` or `<response>`. Decide whether to use `<tool_call>` (possibly multiple times), "
    "`<response>`, or both.\n"
    "2. You can invoke multiple tool calls simultaneously in the `<tool_call>` fields. Each tool call should "
    'be a JSON object with a "name" field and an "parameters" field containing a dictionary of parameters. '
    'If no parameters are needed, leave the "parameters" field an empty dictionary.\n'
    "3. Refer to the previous dialogue records in the history, including the user's queries, previous "
    "`<tool_call>`, `<response>`, and any tool feedback noted as `<obs>` (if exists)."
)
HISTORY_HEADER = "**Dialogue Records History**\n"


def tool_listing(tools: Sequence[dict]) -> str:
    """The numbered tools ({name, description, parameters}), each as three lines "N. Name: ...", "Description:
    ...", "Parameters: <json>"."""
    return "".join(f"{i}. Name: {tool['name']}\nDescription: {tool.get('description', '')}\nParameters: "
                   f"{json.dumps(tool.get('parameters', {}))}\n" for i, tool in enumerate(tools, 1))


def system_prompt(tools: Sequence[dict]) -> str:
    """ToolRL's system instruction listing ``tools``, exactly as the rows of ``rlla_rl.json`` hold it."""
    return SYSTEM_HEADER + tool_listing(tools) + SYSTEM_FOOTER


def user_turn(text: str) -> str:
    return f"{HISTORY_HEADER}<user> {text} </user>"


def render_output(think: str, calls: Sequence[dict] | None = None, response: str | None = None) -> str:
    """A ground-truth output: ``<think> ... </think>`` then the tool_call block and/or the response block."""
    parts = [f"{THINK_OPEN} {think} {THINK_CLOSE}"]
    if calls:
        lines = "\n".join(json.dumps({"name": c["name"], "parameters": c["parameters"]}) for c in calls)
        parts.append(f"{TOOL_CALL_OPEN}\n{lines}\n{TOOL_CALL_CLOSE}")
    if response is not None:
        parts.append(f"{RESPONSE_OPEN} {response} {RESPONSE_CLOSE}")
    return "\n".join(parts)


def assistant_text(solution: str) -> str:
    """The scorer's assistant text (its Qwen branch): after the last "<|im_start|>assistant", before the first
    "<|im_end|>", stripped."""
    start = solution.rfind(ASSISTANT_START)
    if start >= 0:
        solution = solution[start + len(ASSISTANT_START) :]
    end = solution.find(END_OF_TURN)
    return (solution if end < 0 else solution[:end]).strip()


def ground_truth_kind(ground_truth: str) -> tuple[bool, bool]:
    """(has tool call, has response): whether the tags occur anywhere in the ground truth (the scorer's test)."""
    return TOOL_CALL_OPEN in ground_truth, RESPONSE_OPEN in ground_truth


def _think_then(body: str, position: int) -> bool:
    """``^<think>.*?</think>\\n`` ends exactly at ``position``."""
    close = position - len(THINK_CLOSE) - 1
    return body.startswith(THINK_OPEN) and close >= len(THINK_OPEN) and body.startswith(THINK_CLOSE + "\n", close)


def _call_block_at(body: str, start: int, end: int) -> bool:
    """``<tool_call>\\n.*?\\n</tool_call>`` spans exactly body[start:end]."""
    close = end - len(TOOL_CALL_CLOSE)
    return (body.startswith(TOOL_CALL_OPEN + "\n", start) and body.startswith("\n" + TOOL_CALL_CLOSE, close - 1)
            and close - 1 >= start + len(TOOL_CALL_OPEN) + 1)


def matches_format(text: str, ground_truth: str) -> bool:
    """The scorer's format test on ``text`` (the stripped assistant text), in linear time: with each required
    tool_call / response tag present exactly once, the anchored lazy pattern holds exactly when the literals sit at
    fixed places around those tags; the think tags may repeat, so the ``</think>\\n`` before the first block decides."""
    has_call, has_response = ground_truth_kind(ground_truth)
    for tag in (TOOL_CALL_OPEN, TOOL_CALL_CLOSE) * has_call + (RESPONSE_OPEN, RESPONSE_CLOSE) * has_response:
        if text.count(tag) != 1:
            return False
    # `$` without MULTILINE also matches before one final newline; every pattern ends in ">".
    body = text[:-1] if text.endswith("\n") else text
    if not has_call and not has_response:
        return body.startswith(THINK_OPEN) and body.endswith(THINK_CLOSE) and len(body) >= 15
    if has_response:
        opening = body.find(RESPONSE_OPEN)
        if not body.endswith(RESPONSE_CLOSE) or len(body) - len(RESPONSE_CLOSE) < opening + len(RESPONSE_OPEN):
            return False
    call = body.find(TOOL_CALL_OPEN)
    if not has_call:
        return _think_then(body, opening)
    if not _think_then(body, call):
        return False
    call_end = body.find(TOOL_CALL_CLOSE) + len(TOOL_CALL_CLOSE)
    if not has_response:
        return call_end == len(body) and _call_block_at(body, call, call_end)
    return (_call_block_at(body, call, call_end) and body.startswith("\n" + RESPONSE_OPEN, call_end)
            and opening == call_end + 1)


def last_think_span(text: str) -> str | None:
    """The text after the last "<think>" up to the next "</think>" (to the end when none follows), stripped;
    None when either tag is missing anywhere (the three-reward study's length rule)."""
    if THINK_OPEN not in text or THINK_CLOSE not in text:
        return None
    tail = text[text.rfind(THINK_OPEN) + len(THINK_OPEN) :]
    end = tail.find(THINK_CLOSE)
    return (tail if end < 0 else tail[:end]).strip()


def first_call_block(text: str, *, require_close: bool = True) -> str | None:
    """The scorer's call block: after the first "<tool_call>", up to the next "<tool_call>" or "</tool_call>" (or
    the end). None without a "<tool_call>", or (``require_close``) without a "</tool_call>" anywhere."""
    start = text.find(TOOL_CALL_OPEN)
    if start < 0 or (require_close and TOOL_CALL_CLOSE not in text):
        return None
    start += len(TOOL_CALL_OPEN)
    ends = [i for i in (text.find(TOOL_CALL_OPEN, start), text.find(TOOL_CALL_CLOSE, start)) if i >= 0]
    return text[start : min(ends)] if ends else text[start:]


def last_call_block(text: str) -> str | None:
    """ToolRL's BFCL handler's block: after the last "<tool_call>", up to the next "</tool_call>" (or the end)."""
    start = text.rfind(TOOL_CALL_OPEN)
    if start < 0:
        return None
    start += len(TOOL_CALL_OPEN)
    end = text.find(TOOL_CALL_CLOSE, start)
    return text[start:] if end < 0 else text[start:end]


def block_lines(block: str) -> list[str]:
    return block.strip().split("\n")


BFCL_SINGLE_TURN_INSTRUCTION = (
    "If there's no appropriate tools to apply or required parameters are missing, please directly inform me in "
    "your response without any tool call, or call the tool with the name as 'None'. Otherwise, you should use "
    "one or more necessary tool calls to complete the given task in this turn."
)
BFCL_MULTI_TURN_INSTRUCTION = (
    "Use the one or more necessary tool calls to complete the task. You could perform tool calls for multiple "
    "rounds so you can try and error. Please make a comprehensive plan about how to achieve the goal step by "
    "step, and begin to call the tool step by step. If no tools apply or required parameters are missing, "
    "please also directly state this in your response without tool calls."
)
# Appended after a tool result that ends the history (spelling as in the handler).
BFCL_FOLLOW_UP_INSTRUCTION = (
    "If you think you have completed the current task, or the task cannot be finished, please respond directly "
    "without additional tool calls. If you encounter an error during tool execution or the task remains "
    "unfinished, retry with the one or more necessary tool calls according to your thought and plan until "
    "completion. Based on the tool execution feedback, reflect on if understanding or selectioin of tool is "
    "wrong, what tool calling step is missing, and how to achieve the task goal from now on."
)
# BFCL's miss_func turn in prompting mode (DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING): the held-out
# function docs as Python's str() of the list, then this sentence; they are not added to the tool list.
BFCL_MORE_FUNCTIONS_PROMPT = "{functions}\nI have updated some more functions you can choose from. What about now?"


def bfcl_tools(functions: Sequence[dict]) -> list[dict]:
    """BFCL function docs as ToolRL tools: name, description, parameters = the parameter properties."""
    return [{"name": f["name"], "description": f["description"], "parameters": f["parameters"].get("properties", {})}
            for f in functions]


def bfcl_system_prompt(functions: Sequence[dict]) -> str:
    """The handler's system prompt: ``system_prompt(bfcl_tools(functions)) + "\\n"`` (one more newline before the
    footer for an empty list)."""
    return SYSTEM_HEADER + (tool_listing(bfcl_tools(functions)) or "\n") + SYSTEM_FOOTER + "\n"


def bfcl_user_prompt(history: Sequence[dict], multi_turn: bool) -> str:
    """The handler's one user message holding the whole dialogue: BFCL's messages so far (user / system (skipped)
    turns, assistant emissions, tool results ``{"role": "tool", "name": <the executed call>, "content": ...}``)."""
    instruction = BFCL_MULTI_TURN_INSTRUCTION if multi_turn else BFCL_SINGLE_TURN_INSTRUCTION
    text = HISTORY_HEADER
    for index, message in enumerate(history):
        role = message["role"]
        if role == "system":
            continue
        if role == "user":
            text += f"<user> {message['content'].strip()}\n{instruction} </user>\n"
        elif role == "tool":
            text += (f"<obs> You have made the tool call {message['name'].strip()}. "
                     f"Execution returns: {message['content'].strip()} </obs>\n")
            if index == len(history) - 1:
                text += f"\n<user> {BFCL_FOLLOW_UP_INSTRUCTION} </user>\n"
        elif role == "assistant":
            text += f"\n{message['content'].strip()}\n"
        else:
            raise ValueError(f"BFCL history holds a message of unknown role {role!r}")
    return text.strip()


def bfcl_messages(history: Sequence[dict], functions: Sequence[dict], multi_turn: bool) -> list[dict]:
    return [{"role": "system", "content": bfcl_system_prompt(functions)},
            {"role": "user", "content": bfcl_user_prompt(history, multi_turn)}]


def bfcl_more_functions_message(functions: Sequence[dict]) -> dict:
    return {"role": "user", "content": BFCL_MORE_FUNCTIONS_PROMPT.format(functions=list(functions))}


def decode_ast(text: str) -> list[dict]:
    """The handler's single-turn decoding: ``[{name: parameters}, ...]`` from the LAST tool_call block; unreadable
    lines skipped, calls named "none" dropped, values as parsed."""
    decoded = []
    for line in block_lines(last_call_block(text) or ""):  # an empty block's one line does not parse
        try:
            call = json.loads(line)
            name = call["name"]
            if name.strip().lower() == "none":
                continue
            decoded.append({name: call["parameters"]})
        except Exception:  # the handler skips any line it cannot read
            continue
    return decoded


class UndecodableCalls(ValueError):
    """A call the handler's execution decoding fails on (BFCL ends the turn and skips the step when checking)."""


def decode_execute(text: str) -> list[str]:
    """The handler's multi-turn decoding: ``name(key=repr(value), ...)`` strings from the LAST tool_call block;
    unreadable and non-object lines skipped, calls named "none" dropped, a missing name "" and parameters {}."""
    calls = []
    for line in block_lines(last_call_block(text) or ""):
        try:
            call = json.loads(line)
        except Exception:
            call = None
        if not isinstance(call, dict):
            continue
        name, parameters = call.get("name", ""), call.get("parameters", {})
        if not isinstance(name, str):
            raise UndecodableCalls(f"a call's name is {type(name).__name__}, not a string: {line[:200]!r}")
        if name.strip().lower() == "none":
            continue
        if not isinstance(parameters, dict):
            raise UndecodableCalls(f"a call's parameters are not an object: {line[:200]!r}")
        arguments = ", ".join(f"{key}={value!r}" for key, value in parameters.items())
        calls.append(f"{name}({arguments})")
    return calls


SPEC = register_task(TaskSpec(
    name="toolrl", data_sources=(DATA_SOURCE,), reward="rewards.task_rewards:TOOLRL",
    datasets={"toolrl": "data_prep.toolrl", "smoke": "data_prep.smoke", "smoke_sparse": "data_prep.smoke_sparse"},
    assets={"smoke": "data_prep.run_assets:smoke", "tiny_model": "data_prep.run_assets:tiny_model",
            "smoke_sparse": "data_prep.run_assets:smoke_sparse",
            "tiny_sparse_model": "data_prep.run_assets:tiny_sparse_model",
            "smoke_rare": "data_prep.run_assets:smoke_rare", "tiny_rare_model": "data_prep.run_assets:tiny_rare_model"},
    evaluations={"toolrl": "results.evaluation.benches:TOOLRL", "bfcl": "results.evaluation.benches:BFCL"},
    description="tool calling, ToolRL setup (rlla_4k; BFCL v4 evaluation)"))
