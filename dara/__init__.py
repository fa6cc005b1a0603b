"""DARA: density-aware reward aggregation for multi-reward RL, on verl 0.9.1.

- `dara.estimators`: every advantage estimator of the paper, vectorised (no verl import).
- `dara.verl`: the verl binding (registered estimators, channel-aware trainers, CPU runtime).
- `dara.train`: the Hydra entry, `python -m dara.train`.
- `dara.testbed`: a pure-torch testbed of the paper's mechanism.
"""

from pathlib import Path

from omegaconf import OmegaConf

PROJECT_ROOT = Path(__file__).resolve().parent.parent

# `${dara.root:}` in conf/ files: the checkout's root, so configs name project files portably.
if not OmegaConf.has_resolver("dara.root"):
    OmegaConf.register_new_resolver("dara.root", lambda: str(PROJECT_ROOT))
