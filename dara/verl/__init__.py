"""The verl 0.9.1 binding: the only package of the project that imports verl internals.

`register()` imports, and so registers inside the calling process (the driver, and every Ray actor that
runs the trainer through `DaraTaskRunner`):
- every `dara.estimators` estimator in verl's advantage registry (`dara.verl.estimators`), those of the
  module `algorithm.dara.estimator_module` names included once it is loaded (`load_estimator_module`);
- the project's trainers `dara_sync`, `dara_colocate_async`, `dara_separate_async` (`dara.verl.trainer`),
  which feed the reward channels named in `algorithm.reward_channels` into the advantage step.

The package itself imports nothing from verl: `dara.verl.cpu` is loaded by verl while verl is still
importing (as its external platform module), before verl's trainer modules can be imported.
"""

from dara import missing_extra as _missing_extra

_problem = _missing_extra("verl", "dara.verl (training through verl)")
if _problem:
    raise ImportError(_problem)


def register() -> None:
    """Register the project's estimators (those a loaded module of your own registered included) and trainers
    with verl (idempotent)."""
    from dara.verl import estimators, trainer  # noqa: F401

    estimators.register_all()
