"""ToolRL rewards against verl's original scorer (verl.utils.reward_score.rlla) on ground truths and thousands of
variants; length: the authors' last-think rule."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import random
import re

import pandas as pd
import pytest
from verl.utils.reward_score import rlla

from dara import SAMPLE_DATA
from rewards import toolrl

TOOLRL_DATA = SAMPLE_DATA / "toolrl"


def scorer_text(solution: str) -> str:
    """rlla.compute_score's extraction for Qwen models."""
    return solution.split("<|im_start|>assistant")[-1].split("<|im_end|>")[0].strip()


def reference(solution: str, ground_truth: str) -> dict[str, float]:
    """verl's scorer functions, quiet (do_print=False, stdout captured all the same); length: the authors'
    customize_length_reward_func with length_max_words=16, written plainly."""
    text = scorer_text(solution)
    completions = [[{"role": "assistant", "content": text}]]
    with contextlib.redirect_stdout(io.StringIO()):
        fmt = rlla.customize_format_reward_func(completions, [ground_truth], 0, 1.0, 0.0, False)[0]
        correct = rlla.customize_correctness_reward_tool(completions, [ground_truth], 0, 3.0, -3.0, False)[0]
    last_think = text.split("<think>")[-1].split("</think>")[0].split()
    length = float("<think>" in text and "</think>" in text and len(last_think) <= 16)
    return {"format": float(fmt), "correctness": float(correct), "length": length}


def assert_agrees(solution: str, ground_truth: str) -> None:
    expected = reference(solution, ground_truth)
    ours = toolrl.score(solution, ground_truth, length_channel=True)
    assert ours == pytest.approx(expected, abs=1e-12), (solution[:400], ground_truth[:400])


def held_out_truths() -> list[str]:
    return [r["ground_truth"] for r in pd.read_parquet(TOOLRL_DATA / "rlla_4k_test.parquet")["reward_model"]]


def readable(ground_truth: str) -> bool:
    try:
        reference(ground_truth, ground_truth)
    except ValueError:
        return False
    return True


def sft_truths() -> list[str]:
    return [row["output"] for row in json.loads((TOOLRL_DATA / "rlla_sft.json").read_text())]


def test_ground_truths_score_full_marks_and_unreadable_ones_raise_like_the_scorer():
    unreadable = 0
    for truth in held_out_truths() + sft_truths():
        try:
            reference(truth, truth)
        except ValueError:  # a "<tool_call>" mentioned in the thinking: the scorer's json.loads of the gt fails too
            unreadable += 1
            with pytest.raises(ValueError, match="ground truth has a tool_call line that is not JSON"):
                toolrl.score(truth, truth)
        else:  # agreement with the scorer: the first of each truth's variants (below)
            assert toolrl.score(truth, truth) == {"format": 1.0, "correctness": 3.0 * ("<tool_call>" in truth)}
    assert unreadable == 17


# ----------------------------------------------------------------------------- generated variants
def mutate_value(value, rng: random.Random):  # another value Python may or may not call equal
    if isinstance(value, bool):
        return rng.choice([int(value), float(value), str(value).lower(), not value])
    if isinstance(value, int):
        return rng.choice([float(value), str(value), value + 1, bool(value)])
    if isinstance(value, float):
        return rng.choice([int(value) if value.is_integer() else value * 2, str(value), value])
    if isinstance(value, str):
        return rng.choice([value.upper(), value + " ", int(value) if value.isdigit() else value, [value]])
    if isinstance(value, list):
        return rng.choice([list(reversed(value)), value + value, value[:1]])
    if isinstance(value, dict):
        return rng.choice([dict(reversed(list(value.items()))), {}, {**value, "extra": 1}])
    return rng.choice([0, "", None])


def mutate_calls(calls: list, rng: random.Random) -> list:
    calls = copy.deepcopy(calls)
    target = rng.randrange(len(calls))
    call, params = calls[target], calls[target].get("parameters", {})
    key = rng.choice(list(params)) if params else None
    rng.choice([
        lambda: key and params.update({key: mutate_value(params[key], rng)}),  # another type or value
        lambda: params.pop(key, None),  # a parameter dropped
        lambda: params.update(unexpected=rng.choice([1, "x", None])),  # a parameter added
        lambda: call.update(name=call["name"] + "_v2"),  # renamed call
        lambda: calls.append({"name": "not_a_tool"}),  # an extra call, unmatched name (costs only the name match)
        lambda: calls.append({"name": call["name"]}),  # an extra call, matched name, no parameters (scores -3)
        lambda: calls.append(copy.deepcopy(call)),  # duplicated call
        calls.reverse,  # reversed order
        lambda: call.pop("parameters", None),  # parameters missing
        lambda: call.update(parameters=rng.choice([[1, 2], "text", 3])),  # parameters not an object
        lambda: call.update(name=rng.choice([{"n": 1}, ["a"], 7])),  # a name that is not a string (unhashable)
        lambda: call.update(parameters=dict(reversed(list(params.items())))),  # key order changed (dicts equal)
        lambda: calls.__setitem__(target, rng.choice([[1, 2], "call", 3])),  # a line that is not an object
        lambda: calls.__delitem__(slice(1, None)),  # all calls dropped but one
    ])()
    return calls


def block(lines: list[str]) -> str:
    return "<tool_call>\n" + "\n".join(lines) + "\n</tool_call>"


def variants(truth: str, rng: random.Random) -> list[str]:
    """Responses derived from a ground truth: layout, tags, partial and mutated calls."""
    out = [
        truth, truth + "\n", "  \n" + truth + "\n<|im_end|>", "<|im_start|>assistant\n" + truth + "<|im_end|>trailing text",
        truth.replace("\n", "", 1), truth + "\ntrailing text",
        "<think> an earlier thought </think>\n" + truth,  # two think blocks: think tags are not counted
        truth.replace("<think>", "<think> I will use <tool_call> now,", 1),  # the first <tool_call> is in the think
        truth.replace("<think>", "<think> no </tool_call> yet,", 1),
        truth.replace("</think>", "</think>\n<response> hi </response>", 1), truth + "\n<response> done </response>",
        truth + "\n" + truth, truth + "<tool_call>", "<tool_call>\n" + truth,
        *(truth.replace(old, new, 1) for old, new in [("<think>", ""), ("</think>", ""), ("</tool_call>", ""),
                                                      ("<tool_call>\n", "<tool_call>"), ("\n</tool_call>", "</tool_call>"),
                                                      ("<response>", "<response><response>"), ("</response>", "")]),
        truth[: rng.randrange(len(truth) + 1)],  # cut anywhere: partial calls, unclosed blocks
        "<think></think>\n<tool_call>\n\n</tool_call>", "<think></think>\n<response></response>", "<think></think>", "",
    ]
    if "<tool_call>" in truth:
        calls, head = toolrl.reference_calls(truth), truth.split("<tool_call>")[0]
        lines = [json.dumps(c) for c in calls]
        out += [head + block(lines[:-1] + [lines[-1][: rng.randrange(len(lines[-1]))]]),  # partial last call
                head + block(lines + ["not json"]), head + block(lines + [""]), head + block([]),
                head + "<tool_call>\n" + "\n".join(lines),  # never closed
                head + block(lines) + "\n" + block(lines), head + "<response> first </response>\n" + block(lines),
                *(head + block([json.dumps(c) for c in mutate_calls(calls, rng)]) for _ in range(12))]
    return out


def test_generated_variants_of_every_ground_truth_agree_with_the_scorer():
    rng, checked = random.Random(0), 0
    for truth in held_out_truths() + [t for t in sft_truths()[:120] if readable(t)]:
        for response in variants(truth, rng):
            assert_agrees(response, truth)
            checked += 1
    assert checked > 5000


SOUP = [
    "<think>", "</think>", "<tool_call>", "</tool_call>", "<response>", "</response>", "\n", "\n", " ",
    '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}',
    '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3.0}}',
    '{"name": "a"}', "{", "}", "word", "<|im_end|>", "<|im_start|>assistant",
]
GT_TOOL = '<think> t </think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}\n</tool_call>'
GT_RESPONSE = "<think> t </think>\n<response> Hello </response>"
GT_BOTH = GT_TOOL + "\n<response> Calling. </response>"
GT_NEITHER = "<think> t </think>"


def test_tag_soup_agrees_with_the_scorer_for_every_ground_truth_kind():
    rng = random.Random(1)
    for _ in range(4000):
        response = "".join(rng.choice(SOUP) for _ in range(rng.randrange(14)))
        for truth in (GT_TOOL, GT_RESPONSE, GT_BOTH, GT_NEITHER):
            assert_agrees(response, truth)


THINK = "<think>" + " w" * 16 + " </think>\n"
LONG = "<think>" + " w" * 17 + " </think>\n"


@pytest.mark.parametrize("response, expected", [
    (THINK + "<response> x </response>", {"format": 1.0, "correctness": 0.0, "length": 1.0}),  # 16 words
    (LONG + "<response> x </response>", {"format": 1.0, "correctness": 0.0, "length": 0.0}),
    ("<think> </think>\n<response> x </response>", {"format": 1.0, "correctness": 0.0, "length": 1.0}),
    ("<response> x </response>", {"format": 0.0, "correctness": 0.0, "length": 0.0}),  # a think tag missing
    (LONG + THINK + "<response> x </response>", {"format": 1.0, "correctness": 0.0, "length": 1.0}),  # the last
    (THINK + LONG + "<response> x </response>", {"format": 1.0, "correctness": 0.0, "length": 0.0}),  # think counts
])
def test_think_length_reads_the_last_think_span_of_sixteen_words_at_most(response, expected):
    assert toolrl.score(response, GT_RESPONSE, length_channel=True) == expected == reference(response, GT_RESPONSE)


def test_channels():
    assert toolrl.channel_names(True) == ("format", "correctness", "length")
    assert set(toolrl.score(GT_TOOL, GT_TOOL)) == set(toolrl.channel_names()) == {"format", "correctness"}
    with pytest.raises(TypeError, match="must be str"):
        toolrl.score(None, GT_TOOL)


def test_degenerate_outputs_score_like_the_scorer_without_a_regex(monkeypatch):
    """Repeated tags score as the scorer (on small copies) with no regex (the scorer's lazy search degenerates)."""
    small = ["<think>" * 50, "<tool_call>\n" * 50, "<think> </think>\n" + "<response>" * 50,
             "<think>" + "</think>\n" * 50 + "<tool_call>\n{}\n</tool_call>", "[" * 5000]
    for response in small:
        for truth in (GT_TOOL, GT_BOTH):
            assert_agrees(response, truth)

    def no_regex(*args, **kwargs):
        raise AssertionError("a regex ran on model output")

    for name in ("search", "match", "fullmatch", "findall", "finditer", "compile"):
        monkeypatch.setattr(re, name, no_regex)
    for response in ("<think>" * 20_000, "<tool_call>\n" * 20_000, "<think>" + "</think>\n" * 20_000 + "<x>"):
        scores = toolrl.score(response, GT_BOTH, length_channel=True)
        assert scores["format"] == 0.0 and scores["correctness"] == -3.0
    deep = "<think> </think>\n<tool_call>\n" + "[" * 100_000 + "\n</tool_call>"
    assert toolrl.score(deep, GT_TOOL)["correctness"] == -3.0
