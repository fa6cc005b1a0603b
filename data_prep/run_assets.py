"""Offline assets a training run builds before it starts (`run.assets`, `run.model_assets`; registered by task):
each builder `fn(assets_dir, output_root)` writes the run's data into `assets_dir`, or a model variant under
`<output_root>/assets/<folder>` (where conf/model/tiny*.yaml look) and returns its folder; complete builds are
reused."""

from __future__ import annotations

import importlib
from pathlib import Path


def _builder(variant: str, model_folder: str | None = None, rare: bool = False):
    """`data_prep.<variant>.build(seed=0)` into the run's assets_dir or `<output_root>/assets/<model_folder>`;
    `rare`: the format race's rarer-format build of the sparse variant."""

    def build(assets_dir: str | Path | None, output_root: str | Path) -> str:
        module = importlib.import_module(f"data_prep.{variant}")
        options = {"clean_share": module.RARE_CLEAN_SHARE, "probe_prompts": module.RARE_PROBE_PROMPTS} if rare else {}
        folder = assets_dir if model_folder is None else Path(output_root) / "assets" / model_folder
        return module.build(folder, seed=0, **options)["model_dir"]

    return build


tiny_model = _builder("smoke", "smoke")  # conf/model/tiny.yaml: any task runs with model=tiny
smoke = _builder("smoke")  # the CPU smoke run (train 256 / test 32)
smoke_sparse = _builder("smoke_sparse")  # the toy headline race (train 544 / test 32)
tiny_sparse_model = _builder("smoke_sparse", "smoke_sparse")
smoke_rare = _builder("smoke_sparse", rare=True)  # the format race (task=smoke_rare)
tiny_rare_model = _builder("smoke_sparse", "smoke_rare", rare=True)
smoke_length = _builder("smoke_length")  # the length race (train 640 / val 8)
tiny_length_model = _builder("smoke_length", "smoke_length")


def smoke_math(assets_dir: str | Path, output_root: str | Path) -> None:
    """The CPU math smoke run: the tiny model, then synthetic problems through `data_prep deepscaler`."""
    from data_prep import deepscaler
    deepscaler.build_smoke(assets_dir, tiny_model(None, output_root))
