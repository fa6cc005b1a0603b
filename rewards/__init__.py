"""Reward channels of the experiments (EXPERIMENTS.md) and their verl entry; see docs/rewards.md.

- `rewards.toolrl`: ToolRL format, correctness (and think-length) channels.
- `rewards.math`: math correctness (math-verify) and length channels.
- `rewards.pool`: a process pool with a hard per-item time limit.
- `rewards.verl_entry`: verl's `compute_score`, options and per-step metrics.
- `rewards.task_rewards`: the registered tasks' scorers (channels with ranges by name, score, fallback).
- `rewards.spec`: a reward module's declaration (REWARD_CHANNELS), the check of its results, the probe.
"""
