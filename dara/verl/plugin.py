"""The project's verl plugin, declared in the entry-point group `verl.plugins` (pyproject.toml).

verl 0.9.1 imports every entry point of that group at `import verl`, in every process (driver, TaskRunner,
workers), while verl is still importing: so this module imports nothing of verl's, and each registration waits
for the module it extends (a wrapt post-import hook, run at once where that module is loaded already):
the platform "cpu", every library estimator, the trainer "dara_sync", the reward manager "dara_parallel", and
the `run.*` / `algorithm.dara` schemas and `${dara.*:}` resolvers (so verl's own `main_ppo` composes conf/train.yaml).
"""

from __future__ import annotations

import importlib

import wrapt

HOOKS = {
    "verl.plugin.platform": "dara.verl.cpu.platform",
    "verl.trainer.ppo.core_algos": "dara.verl.estimators",
    "verl.trainer.ppo.v1": "dara.verl.trainer",
    "verl.experimental.reward_loop.reward_manager": "dara.verl.reward_manager",
    "hydra.core.config_store": "dara.config",
}


for _target, _module in HOOKS.items():  # each module registers on import (idempotent)
    wrapt.register_post_import_hook(lambda _extended, module=_module: importlib.import_module(module), _target)
