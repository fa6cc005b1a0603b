"""verl's environment must not have TRL >= 1.13 importable (verl 0.9.1's FSDP workers import trl's value-head
model, which TRL 1.13 removed): `python -m dara.train` refuses to start, in one line, before Ray. TRL itself
lives in .venv-trl (docs/trl.md "Two environments"); these tests use a fake `trl` package, never a real one."""

from __future__ import annotations

import os

import pytest

import dara
from dara.config_checks import importable_trl, trl_conflict


@pytest.mark.parametrize("version, refused", [
    ("0.19.1", False), ("1.12.0", False), ("1.12.2", False), ("1.13.0.dev0", False),  # it has the value-head model
    ("1.13.0", True), ("1.14.2", True), ("1.16.0", True), ("2.0.0", True),
    (None, True), ("not-a-version", True),  # verl imports whatever `trl` it finds: no readable version, no trust
])
def test_trl_from_1_13_or_of_unknown_version_names_its_version_why_and_the_fix(version, refused):
    problem = trl_conflict(version, "/site-packages/trl/__init__.py")
    assert (problem is not None) == refused
    if refused:
        assert "\n" not in problem and "is importable here (/site-packages/trl/__init__.py)" in problem
    if refused and version and version[0].isdigit():
        assert f"trl {version} is importable" in problem and "AutoModelForCausalLMWithValueHead" in problem
        assert "removed in 1.13" in problem and ".venv-trl" in problem and "pip uninstall trl" in problem


def test_the_verl_environment_of_these_tests_has_no_trl_from_1_13():
    found = importable_trl()
    assert found is None or trl_conflict(*found) is None, trl_conflict(*found)


@pytest.mark.slow  # a dara.train process (~9 s of imports)
def test_dara_train_refuses_to_start_next_to_trl_1_16(tmp_path, python_module):
    """A `trl` package with pip's metadata of 1.16.0 first on the path: importable_trl reads its version."""
    site = tmp_path / "site"
    (site / "trl").mkdir(parents=True)
    (site / "trl" / "__init__.py").write_text("__version__ = '1.16.0'\n")
    (site / "trl-1.16.0.dist-info").mkdir()
    (site / "trl-1.16.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: trl\nVersion: 1.16.0\n")
    paths = [str(site), str(dara.PROJECT_ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    out = python_module("dara.train", f"run.output_root={tmp_path / 'runs'}", env=env, timeout=180)
    assert out.returncode != 0
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr[-2000:]
    assert lines[0].startswith("[dara] invalid configuration: environment: trl 1.16.0 is importable here"), lines[0]
    assert "removed in 1.13" in lines[0] and "pip uninstall trl" in lines[0]
    assert "Traceback" not in out.stdout + out.stderr
    assert not list((tmp_path / "runs").rglob("ray")) and not list((tmp_path / "runs").rglob("run_info.json"))
