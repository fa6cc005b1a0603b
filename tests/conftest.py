"""Fixtures shared by the whole test session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def smoke_assets_dir(tmp_path_factory):
    """The folder of the session's one offline smoke build (tiny model, tokenizer, tool-calling parquet)."""
    return tmp_path_factory.getbasetemp() / "data_prep_smoke"


@pytest.fixture(scope="session")
def smoke_assets(smoke_assets_dir):
    """`data_prep.smoke.build`'s paths, built once per session (a complete build is reused, not rebuilt)."""
    from data_prep import smoke

    return smoke.build(smoke_assets_dir, seed=0)
