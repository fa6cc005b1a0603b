"""Evaluate a checkpoint on the bfcl benchmark family: `python scripts/eval/eval_bfcl.py STAGE --out DIR ...`.

The same as `python -m results.evaluation bfcl STAGE ...` (stages: generate, score, aggregate, all, prompts); see
docs/results.md for the options and the files written.
"""

import sys

from results.evaluation.cli import main

if __name__ == "__main__":
    sys.exit(main(["bfcl", *sys.argv[1:]]))
