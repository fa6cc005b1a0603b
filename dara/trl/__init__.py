"""DARA and every estimator of `dara.estimators` as a drop-in for Hugging Face TRL's `GRPOTrainer`
(`DaraGRPOTrainer(..., args=DaraGRPOConfig(estimator="dara_asym", ...))`): the reward functions are the
channels, named as TRL names them. Usage and how this maps to the verl binding: docs/trl.md. Nothing here
imports verl or Ray.
"""

try:
    import trl  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the install
    raise ImportError("dara.trl needs the 'trl' extra (trl>=1.16,<1.17), in an environment without verl (verl 0.9.1 "
                      "breaks with TRL >= 1.13 importable): pip install 'dara-rl[trl]', or the project's .venv-trl "
                      "(make install-trl), docs/trl.md") from error

from .advantages import completion_advantages, fill_missing_scores
from .config import DaraGRPOConfig
from .progress import StepLineCallback
from .trainer import SUPPORTED_TRL, DaraGRPOTrainer, TrlSeamError, check_trl_batch

__all__ = ["DaraGRPOConfig", "DaraGRPOTrainer", "StepLineCallback", "SUPPORTED_TRL", "TrlSeamError",
           "check_trl_batch", "completion_advantages", "fill_missing_scores"]
