"""ToolRL rewards against the original scorer (verl.utils.reward_score.rlla): speed on real responses and on
degenerate outputs that repeat a tag, side by side in one process.

    python scripts/bench/toolrl_scorer.py [--repeats 1000 4000 16000]

Rows: responses/s of ``rewards.toolrl.score`` and of verl's two scorer functions (prints suppressed), and
their ratio; then seconds per degenerate output as the repeat count grows (the scorer's lazy anchored regex
search is quadratic there, ours linear). Values are checked equal on every item timed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from verl.utils.reward_score import rlla  # noqa: E402

from rewards import toolrl  # noqa: E402
from tasks import toolrl as protocol  # noqa: E402

DATA = ROOT / "sample_data"  # carried in the repository (sample_data/README.md)


def reference(text: str, truth: str) -> tuple[float, float]:
    content = [[{"role": "assistant", "content": protocol.assistant_text(text)}]]
    with contextlib.redirect_stdout(io.StringIO()):
        return (rlla.customize_format_reward_func(content, [truth], 0, 1.0, 0.0, False)[0],
                rlla.customize_correctness_reward_tool(content, [truth], 0, 3.0, -3.0, False)[0])


def ours(text: str, truth: str) -> tuple[float, float]:
    scores = toolrl.score(text, truth)
    return scores["format"], scores["correctness"]


def timed(function, items) -> tuple[float, list]:
    started = time.perf_counter()
    values = [function(text, truth) for text, truth in items]
    return time.perf_counter() - started, values


def real_items() -> list[tuple[str, str]]:
    import pandas as pd

    truths = [r["ground_truth"] for r in pd.read_parquet(DATA / "toolrl" / "rlla_4k_test.parquet")["reward_model"]]
    outputs = [r["output"] for r in json.loads((DATA / "toolrl" / "rlla_sft.json").read_text())]
    items = [(t, t) for t in truths]
    items += [(o, truths[i % len(truths)]) for i, o in enumerate(outputs)]
    return items


def degenerate(repeats: int) -> list[tuple[str, str]]:
    truth = '<think> t </think>\n<tool_call>\n{"name": "a", "parameters": {"x": 1}}\n</tool_call>'
    return [
        ("<think>" + "</think>\n" * repeats + "<tool_call>\n" + "x" * 10, truth),
        ("<think>" * repeats, truth),
        ("<think> t </think>\n" + "<response>" * repeats, truth + "\n<response> r </response>"),
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, nargs="*", default=[1000, 4000, 16000])
    args = parser.parse_args(argv)
    items = real_items()
    print("| batch | items | ours: items/s | rlla: items/s | ours / rlla time |\n|---|---:|---:|---:|---:|")
    ours_s, ours_v = timed(ours, items)
    ref_s, ref_v = timed(reference, items)
    assert ours_v == ref_v, "values differ from the scorer"
    print(f"| real responses | {len(items)} | {len(items) / ours_s:,.0f} | {len(items) / ref_s:,.0f} | "
          f"{ours_s / ref_s:.2f} |")
    for repeats in args.repeats:
        batch = degenerate(repeats)
        ours_s, ours_v = timed(ours, batch)
        ref_s, ref_v = timed(reference, batch)
        assert ours_v == ref_v, "values differ from the scorer"
        print(f"| degenerate, {repeats:,} repeated tags | {len(batch)} | {len(batch) / ours_s:,.0f} | "
              f"{len(batch) / ref_s:,.1f} | {ours_s / ref_s:.5f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
