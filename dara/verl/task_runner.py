"""verl's v1 TaskRunner, made to import the project's registrations inside its Ray actor.

verl's `run_ppo(config, task_runner_class)` takes the TaskRunner class as an argument precisely so a
recipe can change it; ours only makes sure `dara.verl` (estimators, trainers) and the modules named in
`run.import_modules` (e.g. a reward manager) are imported where the trainer runs, and so is the module of
estimators of your own that `algorithm.dara.estimator_module` names (loaded, then registered with verl, in
this actor: the trainer computes the advantages here). On the CPU platform
(`trainer.device=cpu`) it picks the trainer's variant with the CPU worker classes (`dara_<mode>_cpu`).
"""

from __future__ import annotations

import importlib

import ray
from omegaconf import OmegaConf, open_dict
from verl.trainer.main_ppo import TaskRunnerV1

from dara.verl.placement import PlacementRecorderMixin  # writes ray_nodes.json (where each worker ran)


@ray.remote
class DaraTaskRunner(PlacementRecorderMixin, TaskRunnerV1.__ray_actor_class__):
    def run(self, config):
        from dara.estimators import load_estimator_module
        from dara.verl import register

        module = OmegaConf.select(config, "algorithm.dara.estimator_module", default=None)
        if module:  # checked before Ray (dara.config_checks); its path is absolute by now
            load_estimator_module(module)
        register()  # registrations take effect in this actor
        from dara.verl.trainer import trainer_mode_for_device

        with open_dict(config):
            config.trainer.v1.trainer_mode = trainer_mode_for_device(str(config.trainer.v1.trainer_mode),
                                                                     str(config.trainer.device))

        for module in (config.get("run", {}) or {}).get("import_modules", None) or []:
            importlib.import_module(module)
        return super().run(config)
