"""The verl 0.9.1 binding: the only package of the project that imports verl internals.

`dara.verl.plugin` (the `verl.plugins` entry point) registers it in every process verl runs: the estimators
(`dara.verl.estimators`), the trainer `dara_sync` (`dara.verl.trainer`), the reward manager `dara_parallel`
(`dara.verl.reward_manager`) and the CPU runtime (`dara.verl.cpu`). docs/training.md lists the verl seams each
relies on.
"""

from dara import missing_extra as _missing_extra

_problem = _missing_extra("verl", "dara.verl (training through verl)")
if _problem:
    raise ImportError(_problem)
