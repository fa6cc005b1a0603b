"""Evaluate a checkpoint on the math benchmark family: `python scripts/eval/eval_math.py STAGE --out DIR ...`.

The same as `python -m results.evaluation math STAGE ...` (stages: generate, score, aggregate, all); see
docs/results.md for the options and the files written.
"""

import sys

from results.evaluation.cli import main

if __name__ == "__main__":
    sys.exit(main(["math", *sys.argv[1:]]))
