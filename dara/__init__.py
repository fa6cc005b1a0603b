"""DARA: density-aware reward aggregation for multi-reward RL, on verl 0.9.1.

- `dara.estimators`: every advantage estimator of the paper, vectorised (no verl import).
- `dara.verl`: the verl binding (registered estimators, channel-aware trainers, CPU runtime).
- `dara.train`: the Hydra entry, `python -m dara.train`.
- `dara.testbed`: a pure-torch testbed of the paper's mechanism.
"""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent

try:
    from omegaconf import OmegaConf
except ImportError:  # the estimator library alone needs only torch and numpy (e.g. a bare GPU box)
    OmegaConf = None

# `${dara.root:}` in conf/ files: the checkout's root, so configs name project files portably.
if OmegaConf is not None and not OmegaConf.has_resolver("dara.root"):
    OmegaConf.register_new_resolver("dara.root", lambda: str(PROJECT_ROOT))
# `${dara.sum:a,b}`: integer sum (e.g. vLLM's max_model_len = prompt + response budget).
if OmegaConf is not None and not OmegaConf.has_resolver("dara.sum"):
    OmegaConf.register_new_resolver("dara.sum", lambda *values: sum(int(v) for v in values))


def searchpath_file(name: str) -> str:
    """`${dara.searchpath:NAME}`: the absolute path of NAME in the first `hydra.searchpath` folder (file://)
    that holds it, so a task config in your own folder names the files beside it (its reward, its data builder).
    Needs Hydra's config of the run (python -m dara.train, dara.config.compose)."""
    from hydra.core.hydra_config import HydraConfig

    try:
        entries = list(HydraConfig.get().searchpath)
    except ValueError:
        raise ValueError(f"${{dara.searchpath:{name}}} needs Hydra's run config (compose with dara.config.compose)"
                         ) from None
    for entry in entries:
        if str(entry).startswith("file://"):
            candidate = Path(str(entry)[len("file://"):]).expanduser() / name
            if candidate.exists():
                return str(candidate.resolve())
    raise ValueError(f"${{dara.searchpath:{name}}}: no {name} in the folders of hydra.searchpath {entries}")


if OmegaConf is not None and not OmegaConf.has_resolver("dara.searchpath"):
    OmegaConf.register_new_resolver("dara.searchpath", searchpath_file)
