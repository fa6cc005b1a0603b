"""The project's verl plugin: `pip install dara-rl[verl]` declares it in the entry-point group `verl.plugins`.

verl 0.9.1 imports every entry point of that group at `import verl`, in every process (the driver, the
TaskRunner, every worker; `VERL_USE_EXTERNAL_PLUGINS` is verl's switch). verl is still importing then, so this
module imports nothing of verl's: each registration waits for the module it extends (wrapt post-import hooks,
run at once where that module is already loaded):

| when this module is imported        | the project registers                                            |
|-------------------------------------|------------------------------------------------------------------|
| verl.plugin.platform                | the platform "cpu" (dara.verl.cpu.platform; inactive unless chosen or no accelerator answers) |
| verl.trainer.ppo.core_algos         | every library estimator (dara.verl.estimators.register_all)       |
| verl.trainer.ppo.v1                 | the trainer "dara_sync" (dara.verl.trainer.DaraTrainer)          |
| verl.experimental.reward_loop.reward_manager | the reward manager "dara_parallel" (dara.verl.reward_manager) |
| hydra.core.config_store             | the `run.*` and `algorithm.dara` schemas and the `${dara.*:}` resolvers (dara.config), so verl's own `main_ppo` composes conf/train.yaml |
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


def _importer(module: str):
    def hook(_extended_module) -> None:
        importlib.import_module(module)  # each registers on import (idempotent)

    return hook


for _target, _module in HOOKS.items():
    wrapt.register_post_import_hook(_importer(_module), _target)
