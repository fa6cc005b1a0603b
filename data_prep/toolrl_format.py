"""The ToolRL prompt and output format (EXPERIMENTS.md, "Tool calling (ToolRL setup)").

``system_prompt(tools)`` renders ToolRL's system instruction with a numbered tool list, exactly as the rows of
``rlla_rl.json`` hold it (checked against the shared held-out rows in tests); the BFCL renderer and the smoke
set reuse it. ``format_ok`` is a plain regex check of the output format, used where the rewards package is not
available (the real reward lives in ``rewards/toolrl.py``).
"""

from __future__ import annotations

import json
import re

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


def tool_entry(position: int, name: str, description: str, parameters: dict) -> str:
    """One numbered tool of the list: ``N. Name: ...\\nDescription: ...\\nParameters: {json}``."""
    return f"{position}. Name: {name}\nDescription: {description}\nParameters: {json.dumps(parameters)}\n"


def system_prompt(tools: list[dict]) -> str:
    """ToolRL's system instruction listing ``tools`` (each {name, description, parameters})."""
    listing = "".join(
        tool_entry(i + 1, tool["name"], tool.get("description", ""), tool.get("parameters", {}))
        for i, tool in enumerate(tools)
    )
    return SYSTEM_HEADER + listing + SYSTEM_FOOTER


def user_turn(text: str) -> str:
    """ToolRL's user message: the dialogue history with one user turn."""
    return f"**Dialogue Records History**\n<user> {text} </user>"


def tool_call_block(calls: list[dict]) -> str:
    lines = "\n".join(json.dumps({"name": c["name"], "parameters": c["parameters"]}) for c in calls)
    return f"<tool_call>\n{lines}\n</tool_call>"


def render_output(think: str, calls: list[dict] | None = None, response: str | None = None) -> str:
    """A ground-truth output: ``<think> ... </think>`` then the tool_call block and/or the response block."""
    parts = [f"<think> {think} </think>"]
    if calls:
        parts.append(tool_call_block(calls))
    if response is not None:
        parts.append(f"<response> {response} </response>")
    return "\n".join(parts)


_PATTERNS = {
    (True, False): r"^<think>.*?</think>\n<tool_call>\n.*?\n</tool_call>$",
    (False, True): r"^<think>.*?</think>\n<response>.*?</response>$",
    (True, True): r"^<think>.*?</think>\n<tool_call>\n.*?\n</tool_call>\n<response>.*?</response>$",
    (False, False): r"^<think>.*?</think>$",
}


def format_ok(response: str, ground_truth: str) -> bool:
    """EXPERIMENTS.md format rule: the pattern the ground truth requires, DOTALL on the stripped text, and each
    required tag exactly once."""
    wants_call = "<tool_call>" in ground_truth
    wants_response = "<response>" in ground_truth
    text = response.strip()
    if not re.match(_PATTERNS[(wants_call, wants_response)], text, flags=re.DOTALL):
        return False
    tags = ["<think>", "</think>"]
    if wants_call:
        tags += ["<tool_call>", "</tool_call>"]
    if wants_response:
        tags += ["<response>", "</response>"]
    return all(text.count(tag) == 1 for tag in tags)


# ToolRL's own parquet rows carry ability "math" (inherited from its verl data template); kept so that our rows
# equal the official ones field for field.
ABILITY = "math"
