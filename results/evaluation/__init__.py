"""Checkpoint evaluation: math (Acc/Exceed/Joint with bootstrap CIs), ToolRL held-out, BFCL v4.

Run as ``python -m results.evaluation BENCH STAGE ...`` (see results/evaluation/cli.py, docs/results.md).
"""
