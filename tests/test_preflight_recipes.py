"""Every run of every recipe passes `dara.preflight --skip-env` on its cluster (CI).

Composed in-process, once per distinct (task, model, cluster, further overrides): the runs sharing one differ
only in estimator and seed, and the test checks that no estimator file sets a key the preflight reads.
"""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from dara.preflight import preflight
from recipes import RECIPES, load
from recipes.runner import CONF_DIR

# the config the preflight reads: anything else cannot change its answer
PREFLIGHT_KEYS = ("trainer", "data", "actor_rollout_ref", "run.hardware", "run.model_facts", "run.checkpoint",
                  "run.max_model_len", "critic")


def flat_keys(node, prefix=""):
    for key, value in node.items():
        path = f"{prefix}{key}"
        if OmegaConf.is_dict(value):
            yield from flat_keys(value, path + ".")
        else:
            yield path


def test_estimator_files_set_nothing_the_preflight_reads():
    for path in sorted((CONF_DIR / "estimator").glob("*.yaml")):
        node = OmegaConf.load(path)
        node.pop("defaults", None)
        touched = [k for k in flat_keys(node) if any(k == p or k.startswith(p + ".") for p in PREFLIGHT_KEYS)]
        assert not touched, f"{path.name} sets {touched}"


def preflight_key(run):
    return (run.task, run.model, run.cluster, run.extra, run.total_steps, run.output_root)


@pytest.mark.slow
def test_every_run_of_every_recipe_passes_preflight_on_its_cluster():
    groups = {}
    for name in RECIPES:
        module = load(name)
        for run in module.runs(module.DEFAULT_SEEDS):
            groups.setdefault(preflight_key(run), []).append(run)
    failures = []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None, job_name="train"):
        for runs in groups.values():
            cfg = compose(config_name="train", overrides=runs[0].overrides())
            OmegaConf.resolve(cfg)
            report = preflight(cfg, skip_env=True)
            assert [s.title for s in report.sections] == ["configuration", "allocation", "memory", "checkpoints",
                                                         "time limit"]
            if not report.ok:
                failures.append(report.text())
    assert sum(len(r) for r in groups.values()) == sum(len(load(n).runs(load(n).DEFAULT_SEEDS)) for n in RECIPES)
    assert not failures, "\n\n".join(failures)
