"""The offline assets a run builds before Ray starts: `run.model_assets` (the model's, e.g. "tiny_model"), then
`run.assets` (the task's), each a builder a task registered (`tasks.registry.asset_builders()`) or an import path
`FILE.py:FUNCTION` / `package.module:FUNCTION` of your own, called as `fn(run.assets_dir, run.output_root)`.
"""

from __future__ import annotations

from collections.abc import Callable

from omegaconf import DictConfig

from dara.config import ConfigError
from tasks.registry import asset_builders, load_ref

KEYS = ("model_assets", "assets")  # run.<key>, built in this order


def asset_builder(name: str, key: str = "assets") -> Callable:
    builders = asset_builders()
    if (ref := builders.get(name) or (name if ":" in name else None)) is None:
        raise ConfigError(f"run.{key}={name!r} is not known: one of {sorted(builders)}, or a builder of your own "
                          "as FILE.py:FUNCTION or package.module:FUNCTION")
    try:
        builder = load_ref(ref)
    except ValueError as error:
        raise ConfigError(f"run.{key}: {error}") from None
    if not callable(builder):
        raise ConfigError(f"run.{key}={name!r} names {builder!r}, which is not a function")
    return builder


def check_assets(cfg: DictConfig) -> list[tuple[str, str, Callable]]:
    """(run.<key>, name, builder) of each asset the run names; a ConfigError where one is not known."""
    return [(key, str(cfg.run[key]), asset_builder(str(cfg.run[key]), key)) for key in KEYS
            if cfg.run.get(key, None) is not None]


def prepare_assets(cfg: DictConfig) -> None:
    for key, name, builder in check_assets(cfg):
        where = cfg.run.assets_dir if key == "assets" else cfg.actor_rollout_ref.model.path
        print(f"[dara] preparing offline {name} assets in {where}", flush=True)
        builder(str(cfg.run.assets_dir), str(cfg.run.output_root))
