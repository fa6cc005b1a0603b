"""The offline assets a run builds before Ray starts (`run.assets`): a registry lookup, or a builder of your own.

`run.assets` names a builder a task registered (`tasks.registry.asset_builders()`: "smoke", "smoke_math"), or is
an import path `FILE.py:FUNCTION` / `package.module:FUNCTION` of your own. A builder is called as
`fn(assets_dir, output_root)` with the run's `run.assets_dir` and `run.output_root` and writes the files the
task config reads (e.g. `${run.assets_dir}/train.parquet`).
"""

from __future__ import annotations

from collections.abc import Callable

from omegaconf import DictConfig

from dara.config_checks import ConfigError
from tasks.registry import asset_builders, load_ref


def asset_builder(name: str) -> Callable:
    """The builder `run.assets` names; an unknown name or a bad import path is a ConfigError naming it."""
    builders = asset_builders()
    ref = builders.get(name) or (name if ":" in name else None)
    if ref is None:
        raise ConfigError(f"run.assets={name!r} is not known: one of {sorted(builders)}, or a builder of your own "
                          "as FILE.py:FUNCTION or package.module:FUNCTION")
    try:
        builder = load_ref(ref)
    except ValueError as error:
        raise ConfigError(f"run.assets: {error}") from None
    if not callable(builder):
        raise ConfigError(f"run.assets={name!r} names {builder!r}, which is not a function")
    return builder


def check_assets(cfg: DictConfig) -> None:
    """`run.assets` names a loadable builder (a config check: before anything is built or started)."""
    name = cfg.run.get("assets", None)
    if name is not None:
        asset_builder(str(name))


def prepare_assets(cfg: DictConfig) -> None:
    """Build the run's offline assets, if it names any."""
    name = cfg.run.get("assets", None)
    if name is None:
        return
    builder = asset_builder(str(name))
    print(f"[dara] preparing offline {name} assets in {cfg.run.assets_dir}", flush=True)
    builder(str(cfg.run.assets_dir), str(cfg.run.output_root))
