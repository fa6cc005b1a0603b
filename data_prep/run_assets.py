"""Offline assets a training run builds before it starts (`run.model_assets`, `run.assets`; registered by
task in `tasks`).

Each builder is `fn(assets_dir, output_root)`: it writes the run's data (`run.assets_dir`) or, for
`tiny_model`, the tiny model under `<output_root>/assets/smoke` (where conf/model/tiny.yaml looks), and reuses
a complete earlier build where it can. `dara.assets` calls the ones a run names; a builder of your own is
`run.assets=FILE.py:FUNCTION`.
"""

from __future__ import annotations

from pathlib import Path


def tiny_model(assets_dir: str | Path | None, output_root: str | Path) -> str:
    """The tiny offline model (and the smoke tool-calling set beside it, which trained it); returns the model
    folder. It is the model's asset (conf/model/tiny.yaml), so any task runs with model=tiny."""
    from data_prep import smoke

    return smoke.build(Path(output_root) / "assets" / "smoke", seed=0)["model_dir"]


def smoke(assets_dir: str | Path, output_root: str | Path) -> None:
    """The CPU smoke run: tiny model + synthetic ToolRL-format tool calls (train 256 / test 32 rows)."""
    from data_prep import smoke as smoke_data

    smoke_data.build(assets_dir, seed=0)


def smoke_math(assets_dir: str | Path, output_root: str | Path) -> None:
    """The CPU math smoke run: the tiny model, then synthetic problems through `data_prep deepscaler`."""
    from data_prep import deepscaler

    deepscaler.build_smoke(assets_dir, tiny_model(None, output_root))


def smoke_sparse(assets_dir: str | Path, output_root: str | Path) -> None:
    """The sparse-format smoke variant (the toy headline race): its model and rows (train 544 / test 32)."""
    from data_prep import smoke_sparse as sparse

    sparse.build(assets_dir, seed=0)


def tiny_sparse_model(assets_dir: str | Path | None, output_root: str | Path) -> str:
    """The sparse variant's tiny model (conf/model/tiny_sparse.yaml), built with its rows under
    `<output_root>/assets/smoke_sparse`; returns the model folder."""
    from data_prep import smoke_sparse as sparse

    return sparse.build(Path(output_root) / "assets" / "smoke_sparse", seed=0)["model_dir"]


def smoke_rare(assets_dir: str | Path, output_root: str | Path) -> None:
    """The format race's rarer-format build of the sparse variant (task=smoke_rare): clean share
    RARE_CLEAN_SHARE, probed on RARE_PROBE_PROMPTS prompts."""
    from data_prep import smoke_sparse as sparse

    sparse.build(assets_dir, seed=0, clean_share=sparse.RARE_CLEAN_SHARE, probe_prompts=sparse.RARE_PROBE_PROMPTS)


def tiny_rare_model(assets_dir: str | Path | None, output_root: str | Path) -> str:
    """The rarer-format build's model (conf/model/tiny_rare.yaml), under `<output_root>/assets/smoke_rare`."""
    from data_prep import smoke_sparse as sparse

    folder = Path(output_root) / "assets" / "smoke_rare"
    return sparse.build(folder, seed=0, clean_share=sparse.RARE_CLEAN_SHARE,
                        probe_prompts=sparse.RARE_PROBE_PROMPTS)["model_dir"]


def smoke_length(assets_dir: str | Path, output_root: str | Path) -> None:
    """The length smoke variant (the length race, task=smoke_length): its model and rows (train 640 / val 8)."""
    from data_prep import smoke_length as length

    length.build(assets_dir, seed=0)


def tiny_length_model(assets_dir: str | Path | None, output_root: str | Path) -> str:
    """The length variant's tiny model (conf/model/tiny_length.yaml), built with its rows under
    `<output_root>/assets/smoke_length`; returns the model folder."""
    from data_prep import smoke_length as length

    return length.build(Path(output_root) / "assets" / "smoke_length", seed=0)["model_dir"]
