"""Command line: ``python -m data_prep <dataset> --out DIR [--source PATH_OR_HUB_ID] [--tokenizer NAME_OR_PATH]``.

Datasets: toolrl, deepscaler, math_eval, bfcl, smoke. Each writes verl parquet files and data_card.json into
``--out`` (atomically: the folder appears complete or not at all). See docs/data.md for the expected counts.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from data_prep.common import DataPrepError

# dataset name -> (module, one-line help)
DATASETS = {
    "toolrl": (
        "data_prep.toolrl",
        "ToolRL rlla JSON -> train/test parquet (seed 31415, last 2 percent held out)",
    ),
    "deepscaler": (
        "data_prep.deepscaler",
        "DeepScaleR-Preview -> train parquet (prompt template, length filter)",
    ),
    "math_eval": ("data_prep.math_eval", "AIME24, AMC, MATH-500, Minerva, OlympiadBench -> one test parquet"),
    "bfcl": ("data_prep.bfcl", "BFCL v4 categories of the paper's Average -> test parquet"),
    "smoke": (
        "data_prep.smoke",
        "tiny offline Qwen2 model, tokenizer and tool-calling set for the CPU smoke run",
    ),
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m data_prep", description=__doc__.splitlines()[0])
    commands = top.add_subparsers(dest="dataset", required=True)
    for name, (_, help_text) in DATASETS.items():
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("--out", required=True, help="output folder (replaced atomically)")
        if name == "smoke":
            sub.add_argument("--seed", type=int, default=0)
            sub.add_argument("--force", action="store_true", help="rebuild even if a complete build is there")
        else:
            sub.add_argument(
                "--source", default=None, help="local file/folder or hub dataset id (default: hub)"
            )
        if name in ("deepscaler",):
            sub.add_argument(
                "--tokenizer", default=None, help="tokenizer name or path for the prompt length filter"
            )
        if name in ("deepscaler",):
            sub.add_argument("--max-prompt-tokens", type=int, default=1024)
            sub.add_argument("--val-rows", type=int, default=200, help="seeded held-out validation rows")
        if name == "bfcl":
            sub.add_argument(
                "--categories", default=None, help="comma-separated BFCL categories (default: paper's)"
            )
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    module = importlib.import_module(DATASETS[args.dataset][0])
    try:
        result = module.main(args)
    except DataPrepError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
