"""A CPU testbed for multi-reward advantage estimators (docs/testbed.md).

`python -m dara.testbed` trains a tiny autoregressive policy with group sampling and a PPO-style
clipped update, on a task with a dense correctness channel and a sparse format channel, once per
estimator of `dara.estimators`, and reports energy, speed and final quality over seeds.
"""
