"""verl's environment must not have TRL >= 1.13 importable (verl 0.9.1's FSDP workers import trl's value-head
model, which TRL 1.13 removed): `python -m dara.train` refuses to start, in one line, before Ray. TRL itself
lives in .venv-trl (docs/trl.md "Two environments"); these tests use a fake `trl` package, never a real one."""

from __future__ import annotations

import pytest

from dara.config import compose
from dara.config_checks import ConfigError, check_config, importable_trl, trl_conflict


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


def test_check_config_refuses_a_trl_1_16_found_by_its_metadata(tmp_path, monkeypatch):
    """A fake `trl` with pip's metadata of 1.16.0 first on the path (dara.train's one line: test_train_entry.py)."""
    site = tmp_path / "site"
    (site / "trl").mkdir(parents=True)
    (site / "trl" / "__init__.py").write_text("__version__ = '1.16.0'\n")
    (site / "trl-1.16.0.dist-info").mkdir()
    (site / "trl-1.16.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: trl\nVersion: 1.16.0\n")
    monkeypatch.syspath_prepend(str(site))
    assert importable_trl() == ("1.16.0", str(site / "trl" / "__init__.py"))
    with pytest.raises(ConfigError, match=r"^environment: trl 1.16.0 is importable here .*pip uninstall trl"):
        check_config(compose([f"run.output_root={tmp_path / 'runs'}"]))
