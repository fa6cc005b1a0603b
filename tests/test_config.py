"""dara.config: the run.* schema, the run-name rule, the estimator-name lookup, and every estimator's batch
normalisation on every task as composed."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from dara.config import CONF_DIR, RunConfig, compose, library_estimator, run_name
from dara.estimators import ESTIMATOR_NAMES, ESTIMATORS, DaraAlgoConfig

TASKS = sorted(path.stem for path in (CONF_DIR / "task").glob("*.yaml"))
ESTIMATOR_FILES = sorted(path.stem for path in (CONF_DIR / "estimator").glob("*.yaml"))


def test_gd2po_takes_the_math_tasks_response_level_like_every_method_without_its_own():
    for estimator in ("gd2po_snr", "gd2po_hard", "dara_asym"):
        dara = compose(["task=deepscaler", f"estimator={estimator}"], resolve=False).algorithm.dara
        assert dara.batch_norm == "response"
        assert DaraAlgoConfig.from_mapping(dara).resolved_batch_norm(estimator) == "response"


@pytest.mark.slow  # 60 compositions (~5 s per task)
@pytest.mark.parametrize("task", TASKS)
def test_every_estimator_on_every_task_normalises_as_its_definition_says(task):
    """A method that defines one normalisation (grpo, dvao: none) applies it; every other method takes the task's
    level (token for tool calling, response for math), gd2po_snr included, and --cfg job shows that level."""
    task_level = compose([f"task={task}"], resolve=False).algorithm.dara.batch_norm
    assert task_level in ("token", "response")
    for estimator_file in ESTIMATOR_FILES:
        cfg = compose([f"task={task}", f"estimator={estimator_file}"], resolve=False)
        name = library_estimator(str(cfg.algorithm.adv_estimator))
        own = ESTIMATORS[name].batch_norms
        resolved = DaraAlgoConfig.from_mapping(cfg.algorithm.dara).resolved_batch_norm(name)
        expected = own[0] if len(own) == 1 else task_level
        assert resolved == expected, f"task={task} estimator={estimator_file}: {resolved}, expected {expected}"
        if len(own) != 1:
            assert cfg.algorithm.dara.batch_norm == task_level, estimator_file


def test_every_run_node_of_conf_fits_the_schema():
    schema = OmegaConf.structured(RunConfig)
    nodes = 0
    for path in sorted(CONF_DIR.rglob("*.yaml")):
        node = OmegaConf.load(path)
        if "run" in node:
            OmegaConf.merge(schema, node.run)  # what Hydra does: an unknown key or a wrong type raises
            nodes += 1
    assert nodes >= 15
    with pytest.raises(ConfigKeyError, match="sed"):
        OmegaConf.merge(schema, {"sed": 1})
    with pytest.raises(ValidationError, match="keep_last"):
        OmegaConf.merge(schema, {"checkpoint": {"keep_last": "two"}})


def test_the_run_name_rule_is_one_function_for_the_config_and_the_recipes():
    from recipes import load

    assert run_name("toolrl", "m", "gdpo", 3) == "toolrl-m-gdpo-s3"
    assert run_name("toolrl", "m", "gdpo", 3, "g8") == "toolrl-m-gdpo-g8-s3"
    module = load("group_size")
    with_variant = next(run for run in module.runs((2,)) if run.variant)
    assert compose(with_variant.overrides()).run.name == with_variant.name
    plain = load("smoke").runs((5,))[0]
    assert compose(plain.overrides()).run.name == plain.name == "smoke-tiny-dara_asym-s5"


def test_library_estimator_maps_verls_names_back():
    assert all(library_estimator(name) == name for name in ESTIMATOR_NAMES)
    assert library_estimator("dara_grpo") == "grpo" and library_estimator("dara_gdpo") == "gdpo"
    assert library_estimator("gae") is None and library_estimator("dara_nope") is None


def test_a_cluster_file_of_ones_own_without_a_signal_lead_gets_the_sbatch_default(tmp_path):
    """A user's cluster file (own folder, hydra.searchpath) that leaves out run.hardware.signal_lead_minutes:
    the schema's default reaches the batch script's environment instead of "None"."""
    from hydra.errors import ConfigCompositionException

    from recipes.slurm import job_env

    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "my_cluster.yaml").write_text(
        "# @package _global_\nrun:\n  cluster: my_cluster\n  hardware:\n    gpu: my-gpu\n    job_time_limit_minutes: 90\n")
    cfg = compose([f"hydra.searchpath=[file://{tmp_path}]", "cluster=my_cluster", "task=smoke", "model=tiny"])
    assert cfg.run.hardware.job_time_limit_minutes == 90
    assert job_env(cfg)["SIGNAL_LEAD_MINUTES"] == "5.0"
    with pytest.raises(ConfigCompositionException, match="signal_lead_minutes"):
        compose(["run.hardware.signal_lead_minutes=null"])
