"""BFCL as the authors ran it: ToolRL's BFCL handler's rendering, its decoding (last block, bad lines skipped,
"none" dropped, values as parsed), the dialogue driver on real BFCL entries with a scripted model."""

from __future__ import annotations

import pytest

from results.evaluation import bfcl_eval
from results.evaluation.backends import Completion, SamplingConfig
from tasks import toolrl as protocol
from tests.test_eval_metrics import bfcl_record, needs_bfcl, possible_answer, toolrl_text

# The handler's instructions (ToolRL's BFCL handler, "RLLA"); BFCL's own strings are checked against bfcl-eval below.
SINGLE, MULTI = protocol.BFCL_SINGLE_TURN_INSTRUCTION, protocol.BFCL_MULTI_TURN_INSTRUCTION
FOLLOW_UP = f"<user> {protocol.BFCL_FOLLOW_UP_INSTRUCTION} </user>"
FUNCTIONS = [
    {"name": "add", "description": "Add two numbers.",
     "parameters": {"type": "dict", "properties": {"a": {"type": "integer"},
                                                   "b": {"type": "integer", "description": "second"}},
                    "required": ["a", "b"]}},
    {"name": "ping", "description": "Ping.", "parameters": {"type": "dict", "properties": {}}},
]
CALL_ADD = '<think> add them </think>\n<tool_call>\n{"name": "add", "parameters": {"a": 2, "b": 3}}\n</tool_call>'


def test_single_turn_prompt_is_the_handlers():
    history = [{"role": "system", "content": "BFCL's own system prompt is skipped"},
               {"role": "user", "content": "  What is 2 + 3?\n"}]
    system, user = protocol.bfcl_messages(history, FUNCTIONS, multi_turn=False)
    assert user == {"role": "user", "content": f"**Dialogue Records History**\n<user> What is 2 + 3?\n{SINGLE} </user>"}
    # the training instruction (test_data_prep_toolrl.py: the official rows) over BFCL's parameter properties
    assert system == {"role": "system", "content": protocol.system_prompt(protocol.bfcl_tools(FUNCTIONS)) + "\n"}
    assert ('1. Name: add\nDescription: Add two numbers.\nParameters: {"a": {"type": "integer"}, "b": {"type": '
            '"integer", "description": "second"}}\n2. Name: ping\nDescription: Ping.\nParameters: {}\n') in system["content"]


def test_multi_turn_history_with_tool_results_and_a_missed_function_turn():
    held_out = [{"name": "sort", "description": "Sort a file.", "parameters": {"type": "dict", "properties": {}}}]
    history = [
        {"role": "user", "content": "Add 2 and 3."},
        {"role": "assistant", "content": "  " + CALL_ADD + "\n"},
        {"role": "tool", "name": "add(a=2, b=3)", "content": " 5 "},
        {"role": "assistant", "content": "<think> done </think>\n<response> 5 </response>"},
        protocol.bfcl_more_functions_message(held_out),
        {"role": "assistant", "content": '<tool_call>\n{"name": "sort", "parameters": {}}\n</tool_call>'},
        {"role": "tool", "name": "sort()", "content": "Error during execution: no file"},
    ]
    expected = (
        f"**Dialogue Records History**\n<user> Add 2 and 3.\n{MULTI} </user>\n"
        f"\n{CALL_ADD}\n"
        "<obs> You have made the tool call add(a=2, b=3). Execution returns: 5 </obs>\n"
        "\n<think> done </think>\n<response> 5 </response>\n"
        "<user> [{'name': 'sort', 'description': 'Sort a file.', 'parameters': {'type': 'dict', 'properties': {}}}]\n"
        f"I have updated some more functions you can choose from. What about now?\n{MULTI} </user>\n"
        '\n<tool_call>\n{"name": "sort", "parameters": {}}\n</tool_call>\n'
        "<obs> You have made the tool call sort(). Execution returns: Error during execution: no file </obs>\n"
        f"\n{FOLLOW_UP}"
    )
    assert protocol.bfcl_user_prompt(history, multi_turn=True) == expected
    # the follow-up comes only after a tool result that ends the history
    assert FOLLOW_UP not in protocol.bfcl_user_prompt(history[:4], multi_turn=True)
    assert protocol.bfcl_user_prompt(history[:3], multi_turn=True).endswith("5 </obs>\n\n" + FOLLOW_UP)
    with pytest.raises(ValueError, match="unknown role"):
        protocol.bfcl_user_prompt([{"role": "critic", "content": "x"}], multi_turn=True)


def test_decode_ast_reads_the_last_block_skips_bad_lines_and_drops_none():
    text = (
        '<think> maybe <tool_call>\n{"name": "wrong", "parameters": {}}\n</tool_call> </think>\n<tool_call>\n'
        '{"name": "add", "parameters": {"a": 2, "b": 3.0}}\n'
        "not json\n"
        '{"name": "add", "parameters": {"a": 1}\n'  # truncated line
        '{"parameters": {"a": 1}}\n'  # no name
        '{"name": "None", "parameters": {}}\n'
        '{"name": " none ", "parameters": {"x": 1}}\n'
        '{"name": 7, "parameters": {}}\n'  # a name that is not a string
        '{"name": "ping", "parameters": {}}\n'
        '{"name": "odd", "parameters": [1, 2]}\n'  # kept as parsed: BFCL's format check fails it
        "</tool_call>"
    )
    assert protocol.decode_ast(text) == [{"add": {"a": 2, "b": 3.0}}, {"ping": {}}, {"odd": [1, 2]}]
    assert not bfcl_eval.is_call_list(protocol.decode_ast(text))
    assert bfcl_eval.is_call_list(protocol.decode_ast(text.replace('\n{"name": "odd", "parameters": [1, 2]}', "")))
    assert protocol.decode_ast("<think> x </think>\n<response> none </response>") == []
    assert protocol.decode_ast('<tool_call>\n{"name": "ping", "parameters": {}}') == [{"ping": {}}]  # unclosed
    # values stay as parsed: a Java boolean is True, not the source text "true"
    java = '<tool_call>\n{"name": "Util.join", "parameters": {"flag": true, "n": 5, "s": "x"}}\n</tool_call>'
    assert protocol.decode_ast(java) == [{"Util.join": {"flag": True, "n": 5, "s": "x"}}]


def test_decode_execute_follows_the_handler():
    text = (
        "<tool_call>\n"
        '{"name": "cd", "parameters": {"folder": "doc"}}\n'
        "garbage\n"
        "[1, 2]\n"  # not an object: skipped
        '{"name": "NONE", "parameters": "ignored"}\n'  # dropped before its parameters are read
        '{"name": "ls"}\n'  # parameters default to {}
        '{"parameters": {"a": true}}\n'  # name defaults to ""
        '{"name": "echo", "parameters": {"content": "it\'s", "n": null, "f": 1.5}}\n'
        "</tool_call>"
    )
    assert protocol.decode_execute(text) == [
        "cd(folder='doc')", "ls()", "(a=True)", "echo(content=\"it's\", n=None, f=1.5)"
    ]
    assert protocol.decode_execute("no call") == []
    with pytest.raises(protocol.UndecodableCalls, match="not a string"):
        protocol.decode_execute('<tool_call>\n{"name": 3}\n</tool_call>')
    with pytest.raises(protocol.UndecodableCalls, match="not an object"):
        protocol.decode_execute('<tool_call>\n{"name": "cd", "parameters": [1]}\n</tool_call>')
    assert bfcl_eval.step_calls('<tool_call>\n{"name": "cd", "parameters": [1]}\n</tool_call>') == []


@needs_bfcl
@pytest.mark.parametrize("category", ["simple_java", "simple_javascript"])
def test_java_and_javascript_values_are_checked_as_parsed(category):
    """Source-text values pass BFCL's checker; the same values parsed as JSON booleans or numbers fail, as
    they did for the authors (no conversion to source text)."""
    passed = failed = 0
    for case in bfcl_eval.load_bfcl_cases([category], limit=30):
        source, parsed = possible_answer(case["ground_truth"], source_text=True), possible_answer(case["ground_truth"])
        if source in (None, parsed) or not bfcl_eval.score_record(bfcl_record(case, toolrl_text(source)), case)["valid"]:
            continue
        passed += 1
        failed += not bfcl_eval.score_record(bfcl_record(case, toolrl_text(parsed)), case)["valid"]
    assert passed >= 4 and failed == passed


def test_emission_format_uses_the_original_format_test():
    texts = (CALL_ADD, "<think> a </think>\n<think> b </think>\n<response> c </response>",
             CALL_ADD + "\n<response> 5 </response>", "<response> c </response>")
    assert [bfcl_eval.emission_format(t) for t in texts] == [1.0, 1.0, 1.0, 0.0]


def authors_think_words(text: str) -> tuple[bool, int]:
    """The authors' diagnostics read plainly: the assistant text; valid when both think tags occur; the
    words of what follows the last "<think>" up to the next "</think>"."""
    text = text.split("<|im_start|>assistant")[-1].split("<|im_end|>")[0].strip()
    valid = "<think>" in text and "</think>" in text
    return valid, len(text.split("<think>")[-1].split("</think>")[0].strip().split()) if valid else 0


@pytest.mark.parametrize("text", [
    CALL_ADD,
    "<think> " + "w " * 16 + "</think>\n<response> r </response>",
    "<think> " + "w " * 17 + "</think>\n<response> r </response>",
    "<think> a b </think>\n<think> " + "w " * 20 + "</think>",  # the LAST span counts
    "<think> never closed",
    "no tags at all",
    "</think> closed first <think> one two",  # after the last <think> there is no </think>: to the end
    "<|im_start|>assistant\n<think> x y z </think>\n<response> r </response><|im_end|>",
])
def test_length_diagnostics_follow_the_authors_definitions(text):
    valid, words = authors_think_words(text)
    assert bfcl_eval.think_words(text) == words
    for limit in (2, 16):
        assert bfcl_eval.emission_length(text, limit) == float(valid and words <= limit)
    assert bfcl_eval.length_name(16) == "length_le_16"


def test_token_budget_is_the_authors_clamp():
    sampling = SamplingConfig(max_new_tokens=12, context_window=100)
    assert [sampling.token_budget(p) for p in (10, 90, 97, 98, 150)] == [12, 8, 1, 0, -52]
    assert SamplingConfig(max_new_tokens=12).token_budget(10**6) == 12  # no window: no clamp
    assert "context_window" not in SamplingConfig().as_dict()  # settings stored as before without a window


class ScriptedBackend:
    """A model that answers from a script and keeps every chat it received (and the seeds)."""

    def __init__(self, replies):
        self.replies, self.received, self.seeds = list(replies), [], []

    def chat(self, conversations, sampling, seeds):
        self.seeds.extend(seeds)
        self.received.extend(conversations)
        done = "<think> ok </think>\n<response> done </response>"
        return [[Completion(self.replies.pop(0) if self.replies else done, 5, "stop")] for _ in conversations]


@needs_bfcl
def test_miss_func_dialogue_renders_the_handlers_history():
    (case,) = bfcl_eval.load_bfcl_cases(["multi_turn_miss_func"], limit=1)
    held_out_turn, held_out = next(iter(case["entry"]["missed_function"].items()))
    backend = ScriptedBackend([
        '<think> where am I </think>\n<tool_call>\n{"name": "pwd", "parameters": {}}\n'
        '{"name": "none", "parameters": {}}\n</tool_call>',
        "<think> fine </think>\n<response> done </response>",
        '<think> nothing </think>\n<tool_call>\n{"name": "None", "parameters": {}}\n</tool_call>',
    ])
    (record,) = bfcl_eval.make_producer(backend, SamplingConfig(n=1, seed=0))([case])
    first, after_tool, next_turn = backend.received[:3]
    question = case["entry"]["question"]
    assert first == case["messages"]
    assert after_tool[0] == first[0]  # the tool list never changes
    assert after_tool[1]["content"].startswith(first[1]["content"] + "\n\n<think> where am I </think>")
    assert "<obs> You have made the tool call pwd(). Execution returns: " in after_tool[1]["content"]
    assert after_tool[1]["content"].endswith(FOLLOW_UP)
    assert next_turn[1]["content"].endswith(f"<response> done </response>\n<user> {question[1][0]['content']}\n{MULTI} </user>")
    # a "none" call alone decodes to nothing: the turn ends without a tool result
    assert len(record["turns"][1]) == 1
    assert backend.received[3][1]["content"].endswith(f"</tool_call>\n<user> {question[2][0]['content']}\n{MULTI} </user>")
    # the miss_func turn (turn 0 took two requests): BFCL's message, the functions not in the tool list
    from bfcl_eval.constants import default_prompts

    more = default_prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING.format(functions=held_out)
    missed_request = backend.received[1 + int(held_out_turn)]
    assert missed_request[1]["content"].endswith(f"<user> {more}\n{MULTI} </user>")
    assert all(f"Name: {f['name']}\n" not in missed_request[0]["content"] for f in held_out)
    assert len(record["turns"]) == len(question) and not record["force_quit"]
    assert set(backend.seeds) == {0}  # every request with the same seed, as the authors' handler
