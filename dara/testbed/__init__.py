"""A CPU testbed for multi-reward advantage estimators: `python -m dara.testbed` trains a tiny policy once per
estimator on a task with a dense and a sparse channel; it reports energy, speed and quality (docs/testbed.md).
"""
