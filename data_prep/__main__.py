"""Command line: ``python -m data_prep <dataset> --out DIR [options]`` (docs/data.md).
Datasets: those the registered tasks name, each module giving `DESCRIPTION`, `add_arguments` and `main(args)`."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from data_prep.common import DataPrepError
from tasks.registry import datasets


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m data_prep", description=__doc__.splitlines()[0])
    commands = top.add_subparsers(dest="dataset", required=True)
    for name, module_path in datasets().items():
        module = importlib.import_module(module_path)
        sub = commands.add_parser(name, help=module.DESCRIPTION, description=module.DESCRIPTION)
        sub.add_argument("--out", required=True, help="output folder (replaced atomically)")
        module.add_arguments(sub)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        result = importlib.import_module(datasets()[args.dataset]).main(args)
    except DataPrepError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
