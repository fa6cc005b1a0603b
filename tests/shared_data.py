"""Where the shared, read-only test data lies: ../shared beside the checkout (as CI lays it out), or /work/shared."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOTS = (REPO.parent / "shared", Path("/work/shared"))


def shared_path(*parts: str) -> Path:
    """`shared/<parts>`, or skip the calling test module with a reason naming what is missing."""
    for root in ROOTS:
        path = root.joinpath(*parts)
        if path.exists():
            return path
    pytest.skip(f"the shared data shared/{'/'.join(parts)} is not present", allow_module_level=True)
