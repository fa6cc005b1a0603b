"""The verl 0.9.1 binding: the only package of the project that imports verl internals.

Importing it registers, inside the importing process (the driver, and every Ray actor that runs the
trainer through `DaraTaskRunner`):
- every `dara.estimators` estimator in verl's advantage registry (`dara.verl.estimators`);
- the project's trainers `dara_sync`, `dara_colocate_async`, `dara_separate_async` (`dara.verl.trainer`),
  which feed the reward channels named in `algorithm.reward_channels` into the advantage step.
"""

from dara.verl import estimators, trainer
from dara.verl.estimators import ChannelContext, library_name, verl_estimator_name

__all__ = ["estimators", "trainer", "ChannelContext", "library_name", "verl_estimator_name"]
