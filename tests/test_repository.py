"""The repository stands alone: its data folders list every file with its sha256, no tracked file reads a folder
beside the checkout, and the licence files exist."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from dara import AUTHORS_REFERENCE, PROJECT_ROOT, SAMPLE_DATA

DATA_FOLDERS = {SAMPLE_DATA: "README.md", AUTHORS_REFERENCE: "SOURCE.md"}
SHA_ROW = re.compile(r"^\| `([^`]+)` \| `([0-9a-f]{64})` \|$", re.MULTILINE)
# the folder beside the checkout that the repository must never read, spelled in pieces so this file does not name it
SHARED = "shared"
OUTSIDE = re.compile("|".join([r"\.\./" + SHARED, "/work/" + SHARED, SHARED + "/(data|reference|paper|notes)"]))


@pytest.mark.parametrize("folder", list(DATA_FOLDERS), ids=lambda p: p.name)
def test_every_data_file_is_listed_with_its_sha256(folder: Path):
    readme = folder / DATA_FOLDERS[folder]
    listed = dict(SHA_ROW.findall(readme.read_text()))
    files = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p != readme}
    assert files and set(listed) == files, f"{readme}: unlisted {files - set(listed)}, missing {set(listed) - files}"
    for name, digest in listed.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, f"{folder / name}: sha256 differs"


def test_no_tracked_file_reads_a_folder_beside_the_checkout():
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=PROJECT_ROOT, capture_output=True, check=True).stdout
    offenders = []
    for name in filter(None, tracked.decode().split("\0")):
        path = PROJECT_ROOT / name
        if path.suffix in {".parquet", ".csv"} or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(f"{name}:{number}")
    assert not offenders, f"tracked lines that read outside the repository: {offenders[:10]}"


def test_licence_notice_and_citation():
    assert "Apache License" in (PROJECT_ROOT / "LICENSE").read_text().splitlines()[0]
    notice = (PROJECT_ROOT / "NOTICE").read_text()
    assert "reference/dara_authors" in notice and "zhaihaotian/DARA" in notice
    citation = yaml.safe_load((PROJECT_ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["license"] == "Apache-2.0"
    assert any("arXiv:2610.00574" == i["value"] for ref in citation["references"] for i in ref.get("identifiers", []))
