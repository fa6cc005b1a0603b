"""ToolRL reward: golden cases for every rule of EXPERIMENTS.md, the real held-out ground truths, fuzzing."""

import json

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewards import toolrl
from tests.shared_data import shared_path

TOOLRL_DATA = shared_path("data", "toolrl")


def calls_block(*calls):
    return "<tool_call>\n" + "\n".join(json.dumps(call) for call in calls) + "\n</tool_call>"


def call(name, **parameters):
    return {"name": name, "parameters": parameters}


THINK = "<think> reasoning </think>"
GT_TOOL = THINK + "\n" + calls_block(call("get_weather", city="Paris", days=3))
GT_RESPONSE = THINK + "\n<response> Hello </response>"
GT_BOTH = GT_TOOL + "\n<response> Calling it. </response>"
GT_NEITHER = THINK


def correctness(predicted_calls, reference_calls):
    return toolrl.correctness_reward(
        THINK + "\n" + calls_block(*predicted_calls), THINK + "\n" + calls_block(*reference_calls)
    )


# ----------------------------------------------------------------------------- format
@pytest.mark.parametrize(
    "response, ground_truth, expected",
    [
        (GT_TOOL, GT_TOOL, 1.0),
        ("  \n" + GT_TOOL + "\n<|im_end|>", GT_TOOL, 1.0),  # whitespace and end-of-turn marker stripped
        (GT_TOOL + "<|im_end|><|endoftext|>", GT_TOOL, 1.0),
        ("<think> multi\nline\nthought </think>\n" + calls_block(call("a")), GT_TOOL, 1.0),  # DOTALL
        (THINK + calls_block(call("a")), GT_TOOL, 0.0),  # no newline between the blocks
        (
            THINK + "\n<tool_call>" + json.dumps(call("a")) + "</tool_call>",
            GT_TOOL,
            0.0,
        ),  # call not on its own line
        (GT_TOOL + "\ntrailing text", GT_TOOL, 0.0),
        (GT_TOOL + "\n" + calls_block(call("a")), GT_TOOL, 0.0),  # <tool_call> twice
        ("<think> a <think> b </think>\n" + calls_block(call("a")), GT_TOOL, 0.0),  # <think> twice
        (GT_RESPONSE, GT_TOOL, 0.0),  # the ground truth requires a tool call
        (GT_BOTH, GT_TOOL, 0.0),
        (GT_RESPONSE, GT_RESPONSE, 1.0),
        (GT_TOOL, GT_RESPONSE, 0.0),
        (GT_RESPONSE + "\n<response> again </response>", GT_RESPONSE, 0.0),
        (GT_BOTH, GT_BOTH, 1.0),
        (THINK + "\n<response> x </response>\n" + calls_block(call("a")), GT_BOTH, 0.0),  # wrong order
        (GT_TOOL, GT_BOTH, 0.0),
        ("<think> only thinking </think>", GT_NEITHER, 1.0),
        (GT_RESPONSE, GT_NEITHER, 0.0),
        ("no tags at all", GT_NEITHER, 0.0),
        ("", GT_TOOL, 0.0),
    ],
)
def test_format_reward_golden(response, ground_truth, expected):
    assert toolrl.format_reward(response, ground_truth) == expected


def test_think_that_mentions_tags_keeps_the_ground_truth_kind_and_fails_the_tag_count():
    ground_truth = "<think> no <response> needed yet </think>\n" + calls_block(call("a", x=1))
    assert toolrl.ground_truth_kind(ground_truth) == (True, False)
    # only required tags are counted: a <response> mention inside the think block is allowed
    assert toolrl.format_reward(ground_truth, ground_truth) == 1.0
    mention = "<think> I will emit a <tool_call> block </think>\n" + calls_block(call("a", x=1))
    assert toolrl.format_reward(mention, ground_truth) == 0.0  # <tool_call> twice
    assert toolrl.correctness_reward(mention, ground_truth) == 3.0  # the block after </think> is parsed


# ----------------------------------------------------------------------------- correctness
def test_correctness_zero_when_ground_truth_has_no_tool_call():
    assert toolrl.correctness_reward(GT_TOOL, GT_RESPONSE) == 0.0
    assert toolrl.correctness_reward("garbage", GT_NEITHER) == 0.0


@pytest.mark.parametrize(
    "response",
    [
        GT_RESPONSE,  # missing block
        THINK + "\n<tool_call>\n" + json.dumps(call("get_weather")),  # never closed
        THINK + "\n<tool_call>\n{not json}\n</tool_call>",
        THINK
        + "\n<tool_call>\n"
        + json.dumps(call("a"))
        + "\n\n</tool_call>\n",  # blank line inside the block
        THINK + "\n" + calls_block({"parameters": {}}),  # missing name
        THINK
        + "\n"
        + calls_block({"name": "get_weather", "parameters": "Paris"}),  # parameters not an object
        THINK + "\n" + calls_block({"name": "get_weather"}),  # parameters missing
        THINK + "\n<tool_call>\n[1, 2]\n</tool_call>",  # a line that is not an object
    ],
)
def test_malformed_prediction_scores_minimum(response):
    assert toolrl.correctness_reward(response, GT_TOOL) == -3.0


def test_malformed_ground_truth_is_a_clear_error():
    with pytest.raises(ValueError, match="ground truth has a malformed tool_call block"):
        toolrl.correctness_reward(GT_TOOL, THINK + "\n<tool_call>\nnot json\n</tool_call>")


@pytest.mark.parametrize(
    "predicted, reference, expected",
    [
        # identical call lists, and key order does not matter
        ([call("a", x=1, y="b")], [call("a", x=1, y="b")], 3.0),
        ([{"name": "a", "parameters": {"y": "b", "x": 1}}], [call("a", x=1, y="b")], 3.0),
        # one wrong value: names 1 + keys 1 + one equal value = 3 of S_max 4 -> 6 * 3/4 - 3
        ([call("a", x=1, y="c")], [call("a", x=1, y="b")], 1.5),
        # strict equality: 1.0, "1" and true are not 1
        ([call("a", x=1.0, y="b")], [call("a", x=1, y="b")], 1.5),
        ([call("a", x="1", y="b")], [call("a", x=1, y="b")], 1.5),
        ([call("a", x=True, y="b")], [call("a", x=1, y="b")], 1.5),
        # wrong name: nothing matches
        ([call("b", x=1, y="b")], [call("a", x=1, y="b")], -3.0),
        # an extra predicted call: names 1/2 + call 2 = 2.5 of S_max 3
        ([call("a", x=1), call("b")], [call("a", x=1)], 2.0),
        # the same calls in another order: each ground-truth call finds its own best match
        ([call("a", x=2), call("a", x=1)], [call("a", x=1), call("a", x=2)], 3.0),
        # ties go to the first best not-yet-used call: names 1/2 + keys 1 = 1.5 of S_max 3
        ([call("a", x=2), call("a", x=3)], [call("a", x=1)], 0.0),
        # multiset name match: [a, a, b] vs [a, b] = 2/3; calls: a(x=1) 2, a(y=1) none left, b 1; S_max 6
        (
            [call("a", x=1), call("b")],
            [call("a", x=1), call("a", y=1), call("b")],
            6 * (2 / 3 + 2 + 1) / 6 - 3,
        ),
        # empty parameters: equal lists match 1, one empty side 0
        ([call("a")], [call("a")], 3.0),
        ([call("a", z=1)], [call("a")], 0.0),
        # extra predicted key: keys [x] vs [x, z] = 1/2, value 1 -> names 1 + 1.5 of S_max 3
        ([call("a", x=1, z=2)], [call("a", x=1)], 6 * 2.5 / 3 - 3),
    ],
)
def test_correctness_golden(predicted, reference, expected):
    assert correctness(predicted, reference) == pytest.approx(expected)


def test_match_score_definition():
    assert toolrl.match_score(["a", "b"], ["a", "b"]) == 1.0
    assert toolrl.match_score([], ["a"]) == 0.0
    assert toolrl.match_score(["a"], []) == 0.0
    assert toolrl.match_score([], []) == 1.0  # equal
    assert toolrl.match_score(["a", "a", "b"], ["a", "c"]) == pytest.approx(1 / 4)
    assert toolrl.match_score(["b", "a"], ["a", "b"]) == 1.0  # multiset, order-free


def reference_call_score(reference, predicted):
    """EXPERIMENTS.md's formula written again, plainly, with Python's == on canonical JSON."""

    def same(a, b):
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)

    def match(a, b):
        a = [json.dumps(x, sort_keys=True) for x in a]
        b = [json.dumps(x, sort_keys=True) for x in b]
        if a == b:
            return 1.0
        if not a or not b:
            return 0.0
        remaining, overlap = list(b), 0
        for x in a:
            if x in remaining:
                remaining.remove(x)
                overlap += 1
        return overlap / (len(a) + len(b) - overlap)

    if same(reference, predicted):
        return 3.0
    total = match([c["name"] for c in reference], [c["name"] for c in predicted])
    s_max, used = 1.0, []
    for gt in reference:
        s_max += 1 + len(gt["parameters"])
        values = [
            (
                match(list(gt["parameters"]), list(p["parameters"]))
                + sum(
                    1
                    for k, v in gt["parameters"].items()
                    if k in p["parameters"] and same(p["parameters"][k], v)
                ),
                i,
            )
            for i, p in enumerate(predicted)
            if i not in used and p["name"] == gt["name"]
        ]
        best = max((v for v in values), key=lambda vi: (vi[0], -vi[1]), default=(0.0, -1))
        if best[0] > 0:
            used.append(best[1])
            total += best[0]
    return 6 * total / s_max - 3


call_strategy = st.builds(
    (lambda name, parameters: {"name": name, "parameters": parameters}),
    st.sampled_from(["a", "b", "c"]),
    st.dictionaries(
        st.sampled_from(["x", "y", "z"]), st.sampled_from([0, 1, 1.0, "1", True, None]), max_size=3
    ),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(call_strategy, min_size=1, max_size=4), st.lists(call_strategy, min_size=0, max_size=4))
def test_call_list_score_matches_a_plain_reimplementation(reference, predicted):
    expected = reference_call_score(reference, predicted)
    assert toolrl.call_list_score(reference, predicted) == pytest.approx(expected)
    assert -3.0 <= expected <= 3.0


# ----------------------------------------------------------------------------- length channel
@pytest.mark.parametrize(
    "think, expected",
    [(" ".join(["w"] * 16), 1.0), (" ".join(["w"] * 17), 0.0), ("", 1.0), ("a\n\tb", 1.0)],
)
def test_think_length_channel(think, expected):
    response = f"<think>{think}</think>\n<response> x </response>"
    assert toolrl.think_length_reward(response) == expected
    assert toolrl.score(response, GT_RESPONSE, length_channel=True)["length"] == expected


def test_length_channel_without_think_block_is_zero_and_optional():
    assert toolrl.think_length_reward("<response> x </response>") == 0.0
    assert set(toolrl.score(GT_TOOL, GT_TOOL)) == {"format", "correctness"}
    assert set(toolrl.score(GT_TOOL, GT_TOOL, length_channel=True)) == {"format", "correctness", "length"}


# ----------------------------------------------------------------------------- real data
def test_every_held_out_ground_truth_scores_full_marks_against_itself():
    rows = pd.read_parquet(TOOLRL_DATA / "rlla_4k_test.parquet")
    assert len(rows) == 80
    kinds = set()
    for reward_model in rows["reward_model"]:
        ground_truth = reward_model["ground_truth"]
        has_tool_call, _ = toolrl.ground_truth_kind(ground_truth)
        kinds.add(toolrl.ground_truth_kind(ground_truth))
        scores = toolrl.score(ground_truth + "<|im_end|>", ground_truth)
        assert scores == {"format": 1.0, "correctness": 3.0 if has_tool_call else 0.0}
    assert kinds == {(True, False), (False, True)}  # both kinds occur in the held-out rows


def test_model_written_outputs_score_full_correctness_against_themselves():
    rows = json.loads((TOOLRL_DATA / "rlla_sft.json").read_text())
    for row in rows:
        output = row["output"]
        scores = toolrl.score(output, output, length_channel=True)
        has_tool_call = toolrl.ground_truth_kind(output)[0]
        assert scores["correctness"] == (3.0 if has_tool_call else 0.0)
        # format fails exactly when the think block repeats a required tag
        required = ["<think>", "</think>"] + (["<tool_call>", "</tool_call>"] if has_tool_call else [])
        assert scores["format"] == float(all(output.count(tag) == 1 for tag in required))


# ----------------------------------------------------------------------------- fuzzing
TAGGY_TEXT = st.lists(
    st.sampled_from(
        [
            "<think>",
            "</think>",
            "<tool_call>",
            "</tool_call>",
            "<response>",
            "</response>",
            "\n",
            " ",
            '{"name": "a", "parameters": {"x": 1}}',
            "{",
            "}",
            '"',
            "<|im_end|>",
            "word",
        ]
    ),
    max_size=25,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(st.text(max_size=300), TAGGY_TEXT), st.sampled_from([GT_TOOL, GT_RESPONSE, GT_BOTH, GT_NEITHER])
)
def test_arbitrary_text_never_raises_and_stays_in_range(response, ground_truth):
    scores = toolrl.score(response, ground_truth, length_channel=True)
    assert scores["format"] in (0.0, 1.0)
    assert scores["length"] in (0.0, 1.0)
    assert -3.0 <= scores["correctness"] <= 3.0


def test_deeply_nested_json_is_malformed_not_a_crash():
    response = THINK + "\n<tool_call>\n" + "[" * 100_000 + "\n</tool_call>"
    assert toolrl.correctness_reward(response, GT_TOOL) == -3.0


def test_degenerate_repetition_is_scored_quickly():
    import time

    started = time.monotonic()
    for response in (
        "<think>" * 20_000,
        "<tool_call>\n" * 20_000,
        "<think> </think>\n" + "<response>" * 20_000,
    ):
        scores = toolrl.score(response, GT_BOTH, length_channel=True)
        assert scores["format"] == 0.0
    assert time.monotonic() - started < 2
