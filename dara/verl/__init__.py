"""The verl 0.9.1 binding: the only package of the project that imports verl internals.

`register()` imports, and so registers inside the calling process (the driver, and every Ray actor that
runs the trainer through `DaraTaskRunner`):
- every `dara.estimators` estimator in verl's advantage registry (`dara.verl.estimators`);
- the project's trainers `dara_sync`, `dara_colocate_async`, `dara_separate_async` (`dara.verl.trainer`),
  which feed the reward channels named in `algorithm.reward_channels` into the advantage step.

The package itself imports nothing from verl: `dara.verl.cpu` is loaded by verl while verl is still
importing (as its external platform module), before verl's trainer modules can be imported.
"""


def register() -> None:
    """Register the project's estimators and trainers with verl (idempotent)."""
    from dara.verl import estimators, trainer  # noqa: F401
