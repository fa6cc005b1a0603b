"""DARA: density-aware reward aggregation for multi-reward RL, on verl 0.9.1. `pip install .` brings the estimator
library alone (torch, numpy); the verl side needs the `verl` extra, `dara.trl` the `trl` extra."""

import importlib.util
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# small real data in the repository (each folder's README: source, licence, sha256)
SAMPLE_DATA = PROJECT_ROOT / "sample_data"
AUTHORS_REFERENCE = PROJECT_ROOT / "reference" / "dara_authors"

DISTRIBUTION = "dara-rl"
# What each extra brings that its side imports first (pyproject.toml's optional dependencies).
EXTRA_MODULES = {"verl": ("verl", "ray", "hydra", "omegaconf"), "trl": ("trl", "transformers")}


def missing_extra(extra: str, what: str) -> str | None:
    if not (missing := [name for name in EXTRA_MODULES[extra] if importlib.util.find_spec(name) is None]):
        return None
    return (f"{what} needs the '{extra}' extra ({', '.join(missing)} not installed): pip install "
            f"'{DISTRIBUTION}[{extra}]' (from a checkout: pip install -e '.[{extra}]'); the estimator library "
            "alone (dara.estimators) needs neither")


RESOLVERS = {  # `${dara.<name>:...}` in conf/ files
    "dara.root": lambda: str(PROJECT_ROOT),  # the checkout's root: configs name project files portably
    "dara.sum": lambda *values: sum(int(v) for v in values),  # e.g. vLLM's max_model_len = prompt + response
    "dara.if_eq": lambda a, b, then, otherwise: then if a == b else otherwise,  # a key derived from a mode
}
try:
    from omegaconf import OmegaConf
except ImportError:  # the estimator library alone needs only torch and numpy (e.g. a bare GPU box)
    OmegaConf = None
for _name, _resolver in RESOLVERS.items():
    if OmegaConf is not None and not OmegaConf.has_resolver(_name):
        OmegaConf.register_new_resolver(_name, _resolver)
