"""The estimator library installs alone: `pip install .` in a fresh venv (CPU torch 2.13.0 first, then a copy
of the package) brings torch and numpy, no verl, Ray, Hydra or TRL; advantages are computed there and the verl
side names its extra in one line. The metadata half runs without a venv."""

from __future__ import annotations

import email.parser
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from dara import PROJECT_ROOT as ROOT

PACKAGES = ("dara", "rewards", "data_prep", "recipes", "results", "tasks")  # pyproject's packages.find


def copy_project(target: Path) -> Path:
    target.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, target / name)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, target / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return target


def test_the_metadata_requires_torch_and_numpy_alone_and_puts_the_stacks_in_extras(tmp_path):
    project = copy_project(tmp_path / "project")
    subprocess.run([sys.executable, "-c", "from setuptools import build_meta as b; import sys; "
                    "print(b.prepare_metadata_for_build_wheel(sys.argv[1]))", str(tmp_path)],
                   cwd=project, check=True, capture_output=True, text=True)
    (metadata,) = tmp_path.glob("*.dist-info/METADATA")
    plain, extras = [], {}  # unconditional Requires-Dist names, {extra: names}
    for line in email.parser.Parser().parsestr(metadata.read_text()).get_all("Requires-Dist"):
        requirement = Requirement(line)
        extra = re.search(r"extra == \"([^\"]+)\"", str(requirement.marker or ""))
        (extras.setdefault(extra.group(1), []) if extra else plain).append(requirement.name.lower())
    assert sorted(plain) == ["numpy", "torch"]
    assert {"verl", "ray", "hydra-core", "wandb"} <= set(extras["verl"])
    assert {"trl", "transformers", "datasets"} <= set(extras["trl"]) and "verl" not in extras["trl"]
    assert extras["gpu"] == ["vllm"] and "pytest" in extras["dev"]


CHECK = r"""
import sys, torch
from dara.estimators import BUILTIN_ESTIMATORS, compute_advantages, load_estimator_module
scores = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]] * 2)
index = [0, 0, 1, 1, 2, 2, 3, 3]
ranges = {"reward_ranges": {"c0": [0, 1], "c1": [0, 1]}}
for name in BUILTIN_ESTIMATORS:
    options = {"static": {"weights": [1.0, 5.0]}, "saw": ranges, "sa_mrpo": ranges}.get(name, {})
    advantages, metrics = compute_advantages(name, scores, index, torch.ones(8, 3), **options)
    assert advantages.shape == (8, 3) and torch.isfinite(advantages).all(), name
load_estimator_module(sys.argv[1])
_, metrics = compute_advantages("density_power", scores, index, torch.ones(8, 3))
print("weight", metrics["weight/c1"])
stacks = sorted(m for m in ("verl", "ray", "hydra", "omegaconf", "trl", "transformers") if m in sys.modules)
print("imported", stacks)
"""


@pytest.mark.slow  # a fresh venv: CPU torch (about 30 s), then the project
def test_a_plain_install_brings_no_verl_ray_or_hydra_and_computes_advantages(tmp_path):
    venv.create(tmp_path / "venv", with_pip=True, system_site_packages=False)
    python = str(tmp_path / "venv" / "bin" / "python")

    def run(*args, check=True):
        return subprocess.run([python, *args], cwd=tmp_path, capture_output=True, text=True, timeout=900, check=check)
    run("-m", "pip", "install", "-q", "torch==2.13.0")
    run("-m", "pip", "install", "-q", str(copy_project(tmp_path / "project")))
    out = run("-c", CHECK, str(ROOT / "examples" / "my_estimator" / "density_power.py")).stdout
    assert "weight 1.414" in out and "imported []" in out  # density 1/2 against 1: (1 / 0.5)^0.5
    listing = run("-m", "dara.estimators", "list").stdout
    assert "dara_asym: DARA-Asym" in listing and "rvpo: RVPO" in listing
    # the verl side without its extra (what is not installed: the metadata's extras): one line naming the extra
    train = run("-m", "dara.train", check=False)
    assert train.returncode != 0 and train.stderr.strip().splitlines() == [
        "[dara] python -m dara.train needs the 'verl' extra (verl, ray, hydra, omegaconf not installed): pip install "
        "'dara-rl[verl]' (from a checkout: pip install -e '.[verl]'); the estimator library alone (dara.estimators) "
        "needs neither"]
    imported = run("-c", "import dara.verl", check=False)
    assert imported.returncode != 0
    assert imported.stderr.strip().splitlines()[-1].startswith(
        "ImportError: dara.verl (training through verl) needs the 'verl' extra")
    trl = run("-c", "import dara.trl", check=False)
    assert "needs the 'trl' extra" in trl.stderr.strip().splitlines()[-1]


@pytest.mark.slow  # builds a wheel (~15 s) and composes a run from it (~10 s)
def test_a_non_editable_install_carries_the_hydra_configs_and_composes_a_run_outside_the_checkout(tmp_path):
    import zipfile

    project = copy_project(tmp_path / "project")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", ".",
                            "-w", str(tmp_path / "wheel")], cwd=project, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "wheel").glob("dara_rl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "dara/conf/train.yaml" in names and "dara/conf/task/smoke.yaml" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "dara.train", "estimator=gdpo", "--cfg", "job", "--resolve"],
                         cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    from omegaconf import OmegaConf
    cfg = OmegaConf.create(out.stdout)
    assert cfg.run.name == "smoke-tiny-gdpo-s0" and "gdpo" in str(cfg.algorithm.adv_estimator)
    assert cfg.reward.custom_reward_function.path == str(site / "rewards" / "verl_entry.py")  # the installed one
