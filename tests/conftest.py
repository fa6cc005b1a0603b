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


@pytest.fixture(autouse=True)
def no_ray_left_in_the_test_process(request):
    """A test that builds verl objects in-process can start Ray there (verl's actors auto-initialise it).

    Left running, that Ray instance is what a later test's `ray.init` or verl's `run_ppo` would attach to
    (no logical GPU, its object store holding memory): every test ends with none, and the one that left it
    is named in a warning.
    """
    yield
    import sys
    import warnings

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
        warnings.warn(f"{request.node.nodeid} left Ray initialised in the test process: shut down", stacklevel=1)
