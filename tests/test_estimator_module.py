"""A module of estimators of one's own in every entry: the Hydra checks before Ray, dara.train's run info and
resume, the preflight, verl's registry and advantage step, the recipes, the testbed, the report (training with
one: test_training.py's `variant` stage; TRL: tests/trl/test_trl_own_estimator.py)."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

import dara
from dara.config import compose
from dara.config_checks import ConfigError, check_config, estimator_module
from dara.estimators import ESTIMATORS, compute_advantages
from dara.run_folder import METRICS_FILE, RUN_INFO, RunFolderError, check_same_estimator_module
from tests.test_estimator_registry import EXAMPLE, MODULE, registry, write_module  # noqa: F401 - a fixture


def composed(tmp_path: Path, *overrides: str):
    return compose([f"run.output_root={tmp_path / 'out'}", *overrides], resolve=False)


def own(module: Path | str, name: str = "softmax_density", *extra: str) -> list[str]:
    return [f"algorithm.dara.estimator_module={module}", f"algorithm.adv_estimator={name}", *extra]


# ----------------------------------------------------------------------------- the checks before Ray
@pytest.mark.usefixtures("registry")
def test_a_module_given_relative_loads_is_pinned_absolute_and_its_options_are_checked(tmp_path, monkeypatch):
    write_module(tmp_path)
    monkeypatch.chdir(tmp_path)
    cfg = composed(tmp_path, *own("mine.py", "softmax_density", "algorithm.dara.options.temperature=2"))
    check_config(cfg)
    assert cfg.algorithm.dara.estimator_module == str((tmp_path / "mine.py").resolve())
    assert estimator_module(cfg).names == ("softmax_density",)
    assert OmegaConf.to_container(cfg.algorithm.dara.options) == {"temperature": 2}
    bad = composed(tmp_path, *own("mine.py", "softmax_density", "algorithm.dara.options.temprature=2"))
    with pytest.raises(ConfigError, match=r"algorithm.dara: estimator 'softmax_density' has no option\(s\) "
                                          r"\['temprature'\] \(options.<name>\); it declares: temperature"):
        check_config(bad)


def test_a_misspelt_estimator_is_one_line_naming_the_librarys_and_verls(tmp_path):
    with pytest.raises(ConfigError) as error:
        check_config(composed(tmp_path, "algorithm.adv_estimator=dara_asymm"))
    line = str(error.value)
    assert "\n" not in line and line.startswith("algorithm.adv_estimator=dara_asymm is no estimator: the library has ")
    assert "dara_asym, dvao" in line and "rvpo" in line and "verl has gae" in line and "rloo" in line
    assert "algorithm.dara.estimator_module=PATH" in line
    check_config(composed(tmp_path, "algorithm.adv_estimator=rvpo"))  # the library's own passes


@pytest.mark.usefixtures("registry")
@pytest.mark.parametrize(("text", "message"), [
    (MODULE.replace("NAME", "rloo"), r"registers 'rloo', a name verl already has"),
    ("raise ImportError('no torch here')\n", r"failed to import: ImportError: no torch here"),  # the rest: registry
])
def test_a_module_that_cannot_be_used_is_one_config_error_naming_it(tmp_path, text, message):
    path = write_module(tmp_path, text=text)
    with pytest.raises(ConfigError, match=r"^algorithm.dara.estimator_module: .*" + message) as error:
        check_config(composed(tmp_path, *own(path, "rloo")))
    assert "\n" not in str(error.value)


@pytest.mark.usefixtures("registry")
def test_the_preflight_names_a_bad_module_in_its_configuration_section(tmp_path, capsys):
    from dara.preflight.__main__ import main
    assert main([*own(tmp_path / "absent.py"), f"run.output_root={tmp_path}", "--skip-env"]) == 1
    out = capsys.readouterr().out
    assert "algorithm.dara.estimator_module: estimator module" in out and "absent.py: no such file" in out


# ----------------------------------------------------------------------------- run info and resume
@pytest.mark.usefixtures("registry")
def test_the_run_info_records_the_module_and_a_changed_module_is_refused_on_resume(tmp_path):
    from dara.train import _claim_run_folder, _write_run_info
    path = write_module(tmp_path)
    cfg = composed(tmp_path, *own(path))
    OmegaConf.resolve(cfg)
    check_config(cfg)
    run_dir = Path(cfg.run.output_dir)
    run_dir.mkdir(parents=True)
    _write_run_info(cfg)
    info = json.loads((run_dir / RUN_INFO).read_text())
    assert info["estimator_module"] == estimator_module(cfg).record()
    assert info["estimator_module"]["path"] == str(path.resolve())
    assert info["config"]["algorithm.dara.estimator_module"] == str(path.resolve())
    (run_dir / METRICS_FILE).write_text('{"step": 1}\n')  # the folder holds a step: a resume
    with ExitStack() as stack:  # the same module: resumes
        _claim_run_folder(cfg, stack)
    recorded = dict(info, estimator_module={**info["estimator_module"], "sha256": "0" * 64})
    (run_dir / RUN_INFO).write_text(json.dumps(recorded))
    with ExitStack() as stack, pytest.raises(SystemExit) as refused:
        _claim_run_folder(cfg, stack)
    line = str(refused.value.code)
    assert "\n" not in line and f"the estimator module {path.resolve()} changed since this folder's run started" in line
    assert "(sha256 000000000000 there," in line and "run.name=" in line


def test_check_same_estimator_module_only_where_results_are(tmp_path):
    record = {"path": "/m.py", "sha256": "a" * 64}
    check_same_estimator_module(tmp_path, record, "x-s0", 0)  # an empty folder
    (tmp_path / RUN_INFO).write_text(json.dumps({"estimator_module": {"path": "/m.py", "sha256": "b" * 64}}))
    check_same_estimator_module(tmp_path, record, "x-s0", 0)  # no logged step, no checkpoint: free to take
    (tmp_path / METRICS_FILE).write_text('{"step": 1}\n')
    check_same_estimator_module(tmp_path, None, "x-s0", 0)  # no module here: a configuration difference instead
    with pytest.raises(RunFolderError, match=r"changed since this folder's run started.*run.name=x-modulea"):
        check_same_estimator_module(tmp_path, record, "x-s0", 0)
    check_same_estimator_module(tmp_path, {"path": "/m.py", "sha256": "b" * 64}, "x-s0", 0)


# ----------------------------------------------------------------------------- verl
@pytest.mark.usefixtures("registry")
def test_a_users_estimator_is_registered_with_verl_and_runs_its_advantage_step(tmp_path, monkeypatch):
    from verl.trainer.ppo import core_algos

    from dara.estimators import load_estimator_module
    from dara.verl.estimators import EstimatorNameTaken, register_all, verl_estimator_name
    from dara.verl.trainer import DaraTrainer
    from tests.test_verl_advantage_seam import CHANNELS, RESPONSE_LEN, run_step, trainer_config
    load_estimator_module(write_module(tmp_path))
    register_all()  # what the trainer does after loading the module
    assert verl_estimator_name("softmax_density") == "softmax_density"
    assert core_algos.get_adv_estimator_fn("softmax_density").__module__ == "dara.verl.estimators"
    config = trainer_config("softmax_density")
    config.algorithm.dara.options = {"temperature": 0.5}
    ours, batch, metrics = run_step(DaraTrainer, config, 2, monkeypatch, padding=2)
    real = [k for k, tag in zip(batch.keys, batch.tags, strict=True) if not tag["is_padding"]]
    scores = torch.tensor([[ours.rows[k]["extra_fields"]["reward_extra_info"][c] for c in CHANNELS] for k in real])
    lengths = [len(ours.rows[k]["response_mask"]) for k in real]
    mask = (torch.arange(RESPONSE_LEN)[None, :] < torch.tensor(lengths)[:, None]).float()
    expected, library = compute_advantages("softmax_density", scores, [ours.rows[k]["uid"] for k in real], mask,
                                           channel_names=CHANNELS, options={"temperature": 0.5},
                                           reward_ranges={"correctness": [-3.0, 3.0], "format": [0.0, 1.0]})
    for j, key in enumerate(real):
        torch.testing.assert_close(ours.rows[key]["advantages"], expected[j, :lengths[j]])
    for key in ("density/format", "weight/format", "energy_weighted/correctness", "mine/calls"):
        assert metrics[f"dara/{key}"] == pytest.approx(library[key]), key
    # a user's name that verl already has is never registered over verl's own
    ESTIMATORS.pop("softmax_density")
    load_estimator_module(write_module(tmp_path, "rloo", file="taken.py"))
    with pytest.raises(EstimatorNameTaken, match="'rloo' .* takes a name verl already has"):
        register_all()
    assert core_algos.get_adv_estimator_fn("rloo").__module__ == "verl.trainer.ppo.core_algos"


# ----------------------------------------------------------------------------- recipes, testbed, report
@pytest.mark.usefixtures("registry")
def test_a_recipe_run_of_ones_own_estimator_composes_to_its_name(tmp_path, monkeypatch):
    from recipes.runner import Run
    monkeypatch.chdir(EXAMPLE.parent)
    run = Run(task="smoke", model="tiny", estimator="density_power", cluster="cpu", seed=1,
              estimator_module="density_power.py")
    assert run.estimator_module == str(EXAMPLE)  # pinned absolute: a Slurm job starts in the project root
    assert {f"algorithm.dara.estimator_module={EXAMPLE}", "algorithm.adv_estimator=density_power"} <= set(
        run.overrides()) and not any(item.startswith("estimator=") for item in run.overrides())
    assert compose(run.overrides()).run.name == run.name == "smoke-tiny-density_power-s1"
    from recipes import load
    [rvpo_run, *_] = load("rvpo").runs(load("rvpo").DEFAULT_SEEDS)
    rvpo = compose(rvpo_run.overrides())
    assert (rvpo.algorithm.adv_estimator, rvpo.algorithm.dara.rvpo_k, rvpo.run.name) == ("rvpo", 1.0, rvpo_run.name)


@pytest.mark.usefixtures("registry")
def test_the_testbed_selects_studies_and_runs_a_modules_estimators_in_every_study():
    from dara.testbed.cli import parse_args, select_studies
    from dara.testbed.task import TaskConfig
    from dara.testbed.train import RunConfig, train_run
    studies = select_studies(parse_args(["--quick", "--estimator-module", str(EXAMPLE)]))
    assert all(study.estimators[-1] == "density_power" for study in studies)
    only = select_studies(parse_args(["--studies", "main,dense", "--estimators", "gdpo,density_power", "--seeds", "3",
                                      "--estimator-module", str(EXAMPLE)]))
    assert [s.name for s in only] == ["main", "dense"] and only[0].seeds == 3
    assert all(study.estimators == ("gdpo", "density_power") for study in only)
    for argv, message in ((["--studies", "nope"], "^unknown studies"),
                          (["--estimators", "dara_asymm"], r"^testbed: unknown estimator\(s\) \['dara_asymm'\]; registered"),
                          (["--estimator-module", "absent.py"], r"^testbed: estimator module .*absent.py: no such file")):
        with pytest.raises(SystemExit, match=message):
            select_studies(parse_args(argv))
    records, final = train_run(TaskConfig(), RunConfig("density_power", num_prompts=4, group_size=4, steps=2))
    assert len(records) == 2 and "energy_vs_ideal/format" in records[0] and isinstance(final, dict) and final


def test_the_report_says_which_dead_channel_weight_and_which_module_each_run_used(tmp_path):
    from results.report import run_provenance
    for name, dead, module in (("a-s0", "1", None), ("b-s0", "w_max", None), ("c-s0", None, "/own/m.py")):
        folder = tmp_path / name
        folder.mkdir()
        config = {"algorithm": {"adv_estimator": "dara_asym", "dara": {} if dead is None else
                                {"dead_channel_weight": dead}}}
        OmegaConf.save(OmegaConf.create(config), folder / "verl_config.yaml")
        record = {"path": module, "sha256": "f" * 64, "estimators": ["mine"]} if module else None
        (folder / RUN_INFO).write_text(json.dumps({"estimator_module": record}))
    lines = run_provenance([tmp_path / n for n in ("a-s0", "b-s0", "c-s0")])
    dead_lines = [line for line in lines if line.startswith("dead-channel weight")]
    assert len(dead_lines) == 2
    assert "1 (the paper's text) in 2 run(s): a-s0, c-s0" in dead_lines[0]  # unset: the default, 1
    assert "w_max (the authors' code) in 1 run(s): b-s0" in dead_lines[1]
    assert "estimator module: /own/m.py (sha256 ffffffffffff, estimators mine) in run c-s0" in lines


def test_rvpo_is_ours_too_and_our_rows_sit_beside_the_authors():
    from results.tables import AUTHORS_ONLY, with_paper
    assert "rvpo" not in AUTHORS_ONLY and {"dara", "gdpo_saw"} <= AUTHORS_ONLY
    paper = pd.read_csv(dara.AUTHORS_REFERENCE / "reference" / "all_seeds.csv", dtype={"model_size": str})
    assert {"rvpo"} <= set(paper["method"])
    metric = next(c[: -len("_mean")] for c in paper.columns if c.endswith("_mean"))
    ours = pd.DataFrame({"model_size": ["1.5B"], "method": ["rvpo"], "n": [3], "seeds": ["0,1,2"],
                         f"{metric}_mean": [1.0], f"{metric}_sd": [0.1]})
    table = with_paper(ours, paper, ["model_size", "method"], [metric]).set_index(["model_size", "method"])
    their = paper.set_index(["model_size", "method"]).loc[("1.5B", "rvpo"), f"{metric}_mean"]
    assert table.loc[("1.5B", "rvpo"), f"paper_{metric}_mean"] == pytest.approx(their)
