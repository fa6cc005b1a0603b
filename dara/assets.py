"""The offline assets a run builds before Ray starts: a registry lookup, or a builder of your own.

`run.model_assets` (the model's, e.g. model=tiny: "tiny_model") and then `run.assets` (the task's) each name a
builder a task registered (`tasks.registry.asset_builders()`: "smoke", "smoke_math", "tiny_model", "smoke_sparse",
"tiny_sparse_model"), or an import path `FILE.py:FUNCTION` / `package.module:FUNCTION` of your own. A builder is called as
`fn(assets_dir, output_root)` with the run's `run.assets_dir` and `run.output_root` and writes the files the
config reads (e.g. `${run.assets_dir}/train.parquet`).
"""

from __future__ import annotations

from collections.abc import Callable

from omegaconf import DictConfig

from dara.config import ConfigError
from tasks.registry import asset_builders, load_ref

KEYS = ("model_assets", "assets")  # run.<key>, built in this order


def asset_builder(name: str, key: str = "assets") -> Callable:
    """The builder `run.<key>` names; an unknown name or a bad import path is a ConfigError naming it."""
    builders = asset_builders()
    ref = builders.get(name) or (name if ":" in name else None)
    if ref is None:
        raise ConfigError(f"run.{key}={name!r} is not known: one of {sorted(builders)}, or a builder of your own "
                          "as FILE.py:FUNCTION or package.module:FUNCTION")
    try:
        builder = load_ref(ref)
    except ValueError as error:
        raise ConfigError(f"run.{key}: {error}") from None
    if not callable(builder):
        raise ConfigError(f"run.{key}={name!r} names {builder!r}, which is not a function")
    return builder


def _named(cfg: DictConfig) -> list[tuple[str, str]]:
    return [(key, str(cfg.run[key])) for key in KEYS if cfg.run.get(key, None) is not None]


def check_assets(cfg: DictConfig) -> None:
    """The run's asset builders load (a config check: before anything is built or started)."""
    for key, name in _named(cfg):
        asset_builder(name, key)


def prepare_assets(cfg: DictConfig) -> None:
    """Build the model's, then the task's offline assets, where the run names any."""
    for key, name in _named(cfg):
        builder = asset_builder(name, key)
        where = cfg.run.assets_dir if key == "assets" else cfg.actor_rollout_ref.model.path
        print(f"[dara] preparing offline {name} assets in {where}", flush=True)
        builder(str(cfg.run.assets_dir), str(cfg.run.output_root))
