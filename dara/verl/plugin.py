"""The project's verl plugin, declared in the entry-point group `verl.plugins` (pyproject.toml).

verl 0.9.1 imports it at `import verl`, in every process, while verl is still importing: so each registration waits
for the module it extends (a wrapt post-import hook).
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
