"""The verl seam of wandb's step metric: verl's v1 trainer builds its `Tracking` in `fit` (`self.logger =
Tracking(...)`) and logs every row through it, the validation before training first. `WandbStepMixin` turns
that assignment into a property whose setter replaces the wandb backend by dara.tracking.StepMetricWandb
before anything is logged, so a resumed run's redone steps reach wandb (dara/tracking.py says why).
"""

from __future__ import annotations

from omegaconf import OmegaConf

from dara.tracking import log_by_step_metric


class WandbStepMixin:
    """Goes before verl's trainer class; `self.config` is the trainer's config."""

    @property
    def logger(self):
        return self.__dict__.get("_dara_tracking")

    @logger.setter
    def logger(self, tracking) -> None:
        run_dir = OmegaConf.select(self.config, "run.output_dir", default=None)
        log_by_step_metric(tracking, run_dir)
        self.__dict__["_dara_tracking"] = tracking
