"""The TRL tests run in .venv-trl (`make test-trl`), never in verl's .venv, where trl must not be importable
(docs/trl.md "Two environments"): there this folder is left out of collection."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

TRL_MISSING = importlib.util.find_spec("trl") is None
LEFT_OUT_REASON = ("tests/trl left out: trl is not importable in this environment (verl's, which must not have "
                   "it); they run in the TRL environment: make test-trl")
HERE = Path(__file__).resolve().parent
collect_ignore = sorted(path.name for path in HERE.glob("*.py") if path.name != "conftest.py") if TRL_MISSING else []


def pytest_collection_finish(session):
    """Asked for the TRL tests alone without trl: an error naming why, not an empty run (pytest's exit 5)."""
    config = session.config
    paths = [Path(config.invocation_params.dir, arg.split("::")[0]).resolve() for arg in config.args]
    if TRL_MISSING and all(path == HERE or HERE in path.parents for path in paths):
        raise pytest.UsageError(f"{LEFT_OUT_REASON}, or {HERE.parents[1] / '.venv-trl/bin/python'} -m pytest tests/trl")


def pytest_terminal_summary(terminalreporter):
    if TRL_MISSING:
        terminalreporter.write_line(LEFT_OUT_REASON)
