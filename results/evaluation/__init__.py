"""Checkpoint evaluation (``python -m results.evaluation BENCH STAGE``, docs/results.md): math, ToolRL, BFCL v4."""
