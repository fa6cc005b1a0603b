"""DARA: density-aware reward aggregation for multi-reward RL, on verl 0.9.1.

- `dara.estimators`: every advantage estimator of the paper, vectorised (no verl import).
- `dara.verl`: the verl binding (registered estimators, channel-aware trainers, CPU runtime).
- `dara.train`: the Hydra entry, `python -m dara.train`.
- `dara.testbed`: a pure-torch testbed of the paper's mechanism.

A plain `pip install .` brings the estimator library alone (torch, numpy); the verl side needs the `verl`
extra and `dara.trl` the `trl` extra (`missing_extra` names the one to install).
"""

import importlib.util
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Small real data carried in the repository (each folder has a README: source, licence, sha256):
# the ToolRL and math samples the tests, examples and default commands use, and the authors' published results.
SAMPLE_DATA = PROJECT_ROOT / "sample_data"
AUTHORS_REFERENCE = PROJECT_ROOT / "reference" / "dara_authors"

DISTRIBUTION = "dara-rl"
# What each extra brings that its side imports first (pyproject.toml's optional dependencies).
EXTRA_MODULES = {"verl": ("verl", "ray", "hydra", "omegaconf"), "trl": ("trl", "transformers")}


def missing_extra(extra: str, what: str) -> str | None:
    """One line naming the extra to install when a module of `extra` is not importable here, else None."""
    missing = [name for name in EXTRA_MODULES[extra] if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return (f"{what} needs the '{extra}' extra ({', '.join(missing)} not installed): pip install "
            f"'{DISTRIBUTION}[{extra}]' (from a checkout: pip install -e '.[{extra}]'); the estimator library "
            "alone (dara.estimators) needs neither")


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
# `${dara.if_eq:a,b,then,else}`: `then` when a == b, else `else` (a config key derived from a mode, e.g. verl's
# replay-buffer filter on only in `run.dynamic_sampling.mode=replay`).
if OmegaConf is not None and not OmegaConf.has_resolver("dara.if_eq"):
    OmegaConf.register_new_resolver("dara.if_eq", lambda a, b, then, otherwise: then if a == b else otherwise)
