"""The verl 0.9.1 binding: the only package of the project that imports verl internals (registered in every verl
process by `dara.verl.plugin`; docs/training.md lists the verl seams each module relies on)."""

from dara import missing_extra as _missing_extra

if _problem := _missing_extra("verl", "dara.verl (training through verl)"):
    raise ImportError(_problem)
