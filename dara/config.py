"""The training configuration in one place: where it lives, how it is composed, what its `run.*` node holds.

    from dara.config import compose
    cfg = compose(["task=deepscaler", "model=deepseek-r1-distill-qwen-1.5b"])   # what dara.train would run

- `CONF_DIR`: the project's conf/ (conf/train.yaml over verl 0.9.1's own `ppo_trainer`).
- `compose(overrides)`: the config `python -m dara.train <overrides>` runs, composed by Hydra exactly as the app
  does (same search path, same schemas, Hydra's own run config set so `${hydra:...}` and
  `${dara.searchpath:...}` resolve), then resolved. A task config of your own is found through Hydra's search
  path: `hydra.searchpath=[file://DIR]` with DIR/task/<name>.yaml (`with_verl_searchpath` keeps verl's own
  config folder in that list, as `python -m dara.train` does).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

import dara

CONF_DIR = dara.PROJECT_ROOT / "conf"
CONFIG_NAME = "train"
JOB_NAME = "train"
# conf/train.yaml's hydra.searchpath: verl's own trainer config (ppo_trainer and its groups)
VERL_SEARCHPATH = "pkg://verl.trainer.config"
SEARCHPATH_KEY = "hydra.searchpath"


def with_verl_searchpath(overrides: Sequence[str]) -> list[str]:
    """The overrides with verl's config folder kept in a `hydra.searchpath=[...]` one: Hydra replaces a list
    on the command line, and `hydra.searchpath=[file://DIR]` (a task of your own) would drop verl's."""
    out = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key.lstrip("+") == SEARCHPATH_KEY and VERL_SEARCHPATH not in value:
            inner = value.strip()
            inner = inner[1:-1].strip() if inner.startswith("[") and inner.endswith("]") else inner
            item = f"{key}=[{VERL_SEARCHPATH}{',' + inner if inner else ''}]"
        out.append(item)
    return out


def search_dirs(overrides: Sequence[str]) -> list[Path]:
    """The folders (file://) a `hydra.searchpath=[...]` override adds, in order, relative ones from this folder."""
    dirs: list[Path] = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key.lstrip("+") == SEARCHPATH_KEY:
            entries = value.strip().strip("[]").split(",")
            dirs = [Path(e.strip()[len("file://"):]).expanduser() for e in entries if e.strip().startswith("file://")]
    return dirs


def register_schemas() -> None:
    """The structured schemas conf/train.yaml's defaults list names (idempotent)."""
    import dara.config_checks  # noqa: F401  (registers dara_algo_schema)


def compose(overrides: Sequence[str] = (), *, resolve: bool = True, conf_dir: str | Path | None = None) -> DictConfig:
    """The config `python -m dara.train <overrides>` would run (nothing started); Hydra's errors propagate."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    register_schemas()
    with initialize_config_dir(config_dir=str(conf_dir or CONF_DIR), version_base=None, job_name=JOB_NAME):
        cfg = hydra_compose(config_name=CONFIG_NAME, overrides=with_verl_searchpath(overrides),
                            return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)  # as Hydra's app runner does: ${hydra:...} and the search path
    with open_dict(cfg):
        del cfg["hydra"]
    if resolve:
        OmegaConf.resolve(cfg)
    return cfg
