"""Reward channels of the experiments and their verl entry; the modules are listed in docs/rewards.md."""
