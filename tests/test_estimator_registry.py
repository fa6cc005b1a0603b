"""The registry, `Option`, a user's module of estimators, `python -m dara.estimators list`, RVPO against the
authors' computation, the dead-channel weight (the Hydra, verl and testbed entries: test_estimator_module.py).
"""

from __future__ import annotations

import hashlib
import math
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import dara
from dara.estimators import (
    BUILTIN_ESTIMATORS,
    ESTIMATOR_NAMES,
    ESTIMATORS,
    Aggregate,
    ChannelBatch,
    EstimatorModuleError,
    Option,
    compute_advantages,
    load_estimator_module,
    register,
    unregister,
)
from dara.estimators import registry as registry_module
from dara.estimators.__main__ import main as estimators_main
from tests import reference_estimators as ref
from tests.test_estimators import batches, mask_from

EXAMPLE = dara.PROJECT_ROOT / "examples" / "my_estimator" / "density_power.py"

MODULE = '''
import torch
from dara.estimators import Aggregate, Option, register


@register("NAME", "GDPO whose weights follow a softmax of the densities",
          options=[Option("temperature", float, 1.0, lambda t: t > 0, "> 0"), Option("flip", bool, False)])
def softmax_density(batch):
    weights = torch.softmax(batch.density / batch.options["temperature"], dim=0) * len(batch.density)
    if batch.options["flip"]:
        weights = weights.flip(0)
    terms = batch.advantages * weights
    return Aggregate(terms.sum(dim=1), terms, weights, batch.options["batch_norm"], metrics={"mine/calls": 1.0})
'''


@pytest.fixture
def registry():
    """The registry as it was before the test (a test's registrations and loaded modules are undone)."""
    names, loaded = dict(ESTIMATORS), dict(registry_module._LOADED)
    modules = set(sys.modules)
    yield ESTIMATORS
    ESTIMATORS.clear()
    ESTIMATORS.update(names)
    registry_module._LOADED.clear()
    registry_module._LOADED.update(loaded)
    for name in set(sys.modules) - modules:
        if name.startswith("dara_estimator_module_") or name.startswith("own_estimators"):
            del sys.modules[name]
    binding = sys.modules.get("dara.verl.estimators")
    if binding is not None:  # what register_all put into verl's registry for them
        from verl.trainer.ppo import core_algos
        for name in set(binding._KEYS) - set(names):
            core_algos.ADV_ESTIMATOR_REGISTRY.pop(binding._KEYS.pop(name), None)


def write_module(folder: Path, name: str = "softmax_density", text: str = MODULE, file: str = "mine.py") -> Path:
    path = folder / file
    path.write_text(text.replace("NAME", name))
    return path


def batch_of(seed: int = 0, n_groups: int = 5, size: int = 4, k: int = 2):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, 3, (n_groups * size, k), generator=gen).double()
    scores[size:, k - 1] = 0.0  # the last channel is active in the first group only
    index = [i // size for i in range(n_groups * size)]
    lengths = torch.randint(1, 7, (n_groups * size,), generator=gen)
    mask = (torch.arange(6)[None, :] < lengths[:, None]).float()
    return scores, index, mask


# ----------------------------------------------------------------------------- the registry
def test_a_registered_estimator_is_valid_at_once_and_gets_every_diagnostic(registry):
    @register("prior_only", "S = sum_k p_k A_k, as GDPO", uses=("weights",))
    def prior_only(batch: ChannelBatch) -> Aggregate:
        terms = batch.advantages * batch.prior
        return Aggregate(terms.sum(dim=1), terms, batch.prior.clone(), batch.options["batch_norm"])
    assert list(ESTIMATOR_NAMES)[-1] == "prior_only"  # a live view: read now, not at import
    assert "prior_only" not in BUILTIN_ESTIMATORS
    scores, index, mask = batch_of()
    ours, metrics = compute_advantages("prior_only", scores, index, mask, channel_names=["a", "b"], weights=[1, 2])
    gdpo, gdpo_metrics = compute_advantages("gdpo", scores, index, mask, channel_names=["a", "b"], weights=[1, 2])
    assert torch.equal(ours, gdpo)
    # the library's instruments, with no code of the estimator's own
    for key in ("density/b", "active_groups/b", "energy/b", "weight/b", "energy_weighted/b", "energy_ratio/b",
                "energy_vs_ideal/b", "advantage/response_std", "num_groups"):
        assert metrics[key] == pytest.approx(gdpo_metrics[key]), key
    assert metrics["density/b"] == pytest.approx(0.2) and metrics["weight/b"] == 2.0
    unregister("prior_only")
    assert "prior_only" not in ESTIMATOR_NAMES
    with pytest.raises(ValueError, match=r"unknown estimator 'prior_only'; registered: grpo, gdpo"):
        compute_advantages("prior_only", scores, index, mask)
    with pytest.raises(ValueError, match="'dara_asym' is the library's own"):
        unregister("dara_asym")


@pytest.mark.parametrize(("name", "kwargs", "message"), [
    ("gdpo", {}, r"estimator name 'gdpo' is taken \(by the library's own estimator\)"),
    ("dara_grpo", {}, r"'dara_grpo' is taken \(the verl binding's key of estimator 'grpo'\)"),
    ("2fast", {}, r"estimator name '2fast' must be an identifier"),
    ("my-name", {}, r"must be an identifier"),
    ("mine", {"options": [Option("w_max", float, 2.0)]}, r"options \['w_max'\] are the library's own typed options"),
    ("mine", {"options": [Option("t", float, 1.0), Option("t", float, 2.0)]}, r"declares an option twice"),
    ("mine", {"batch_norms": ("token", "layer")}, r"batch_norms \['layer'\] are not among"),
    ("mine", {"uses": ("w_maxx",)}, r"uses \['w_maxx'\], not options of the library"),
])
def test_a_registration_that_cannot_work_is_refused_naming_why(registry, name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        register(name, "summary", **kwargs)(lambda batch: None)
    assert set(ESTIMATORS) == set(registry)


@pytest.mark.parametrize(("option", "value", "message"), [
    (Option("t", float, 1.0, lambda t: t > 0, "> 0"), -1, r"option t=-1.0 \(x\) fails its check: must be > 0"),
    (Option("t", float, 1.0), "high", r"option t='high' \(x\) must be a float"),
    (Option("t", float, 1.0), True, r"must be a float"),
    (Option("t", float, 1.0), math.inf, r"must be finite"),
    (Option("n", int, 1), 2.5, r"option n=2.5 \(x\) must be a int"),
    (Option("b", bool, False), 1, r"must be a bool"),
    (Option("s", str, "a"), 3, r"must be a str"),
    (Option("t", float, 1.0, lambda t: t == 1.0 or 1 / 0), 2.0, r"its check raised ZeroDivisionError"),
])
def test_an_option_value_is_coerced_or_refused_naming_the_option(option, value, message):
    with pytest.raises(ValueError, match=message):
        option.coerce(value, "x")


def test_option_coercion_and_a_bad_default():
    assert Option("t", float, 1).default == 1.0 and isinstance(Option("t", float, 1).default, float)
    assert Option("n", int, 3.0).coerce(4.0) == 4 and Option("s", str, "a").coerce("b") == "b"
    with pytest.raises(ValueError, match=r"option t=0.0 \(default\) fails its check"):
        Option("t", float, 0.0, lambda t: t > 0)
    with pytest.raises(ValueError, match="type must be one of float, int, str, bool"):
        Option("t", list, [])


def test_declared_options_have_defaults_types_and_checks_in_compute_advantages(registry, tmp_path):
    load_estimator_module(write_module(tmp_path))
    scores, index, mask = batch_of()
    default, metrics = compute_advantages("softmax_density", scores, index, mask)
    explicit, _ = compute_advantages("softmax_density", scores, index, mask, options={"temperature": 1})
    hot, _ = compute_advantages("softmax_density", scores, index, mask, options={"temperature": 0.1, "flip": True})
    assert torch.equal(default, explicit) and not torch.equal(default, hot)
    assert metrics["mine/calls"] == 1.0  # the estimator's own metric, beside the library's
    weights = torch.softmax(torch.tensor([metrics["density/c0"], metrics["density/c1"]]), 0) * 2
    assert [metrics["weight/c0"], metrics["weight/c1"]] == pytest.approx(weights.tolist())
    with pytest.raises(ValueError, match=r"estimator 'softmax_density' has no option\(s\) \['temprature'\] "
                                         r"\(options.<name>\); it declares: temperature \(float, default 1.0, > 0\); "
                                         r"flip \(bool, default False\)"):
        compute_advantages("softmax_density", scores, index, mask, options={"temprature": 2})
    with pytest.raises(ValueError, match=r"option temperature=0.0 \(options.temperature\) fails its check: must be > 0"):
        compute_advantages("softmax_density", scores, index, mask, options={"temperature": 0})


# ----------------------------------------------------------------------------- a module of estimators
def test_a_module_loads_from_a_file_an_import_path_and_pkg_and_is_pinned(registry, tmp_path, monkeypatch):
    path = write_module(tmp_path)
    loaded = load_estimator_module(path)
    assert loaded.names == ("softmax_density",) and loaded.from_file and loaded.path == str(path.resolve())
    assert loaded.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert loaded.record()["estimators"] == ["softmax_density"]
    assert load_estimator_module(str(path)) is loaded  # again in this process: the first load
    package = tmp_path / "own_estimators"
    package.mkdir()
    (package / "__init__.py").write_text("")
    write_module(package, "by_import", file="extra.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    by_import = load_estimator_module("own_estimators.extra")
    assert by_import.names == ("by_import",) and not by_import.from_file
    assert load_estimator_module("pkg://own_estimators.extra") is by_import
    assert {"softmax_density", "by_import"} <= set(ESTIMATOR_NAMES)
    path.write_text(path.read_text() + "\n# edited\n")
    with pytest.raises(EstimatorModuleError, match=r"changed since this process loaded it \(sha256 \w{12} then"):
        load_estimator_module(path)


@pytest.mark.parametrize(("text", "file", "message"), [
    (None, "absent.py", r"estimator module .*absent.py: no such file"),
    (None, "pkg://nowhere.mine", r"no module named 'nowhere.mine' is importable here"),
    (None, "not a module", "neither a .py file nor an import path"),
    ("x = 1\n", "mine.txt", r"a file of estimators must be a .py file"),
    ("import no_such_package_here\n", "mine.py",
     r"estimator module .*mine.py failed to import: ModuleNotFoundError: No module named 'no_such_package_here'"),
    ("x = 1\n", "mine.py", r"registers no estimator: decorate a function with @dara.estimators.register"),
    (MODULE.replace("NAME", "gdpo"), "mine.py", r"failed to import: ValueError: estimator name 'gdpo' is taken"),
])
def test_a_module_that_cannot_be_used_is_one_line_naming_it(registry, tmp_path, text, file, message):
    path = tmp_path / file if file.endswith((".py", ".txt")) else file  # else an import path
    if text is not None:
        path.write_text(text)
    with pytest.raises(EstimatorModuleError, match=message) as error:
        load_estimator_module(path)
    assert "\n" not in str(error.value)
    assert set(ESTIMATORS) == set(registry)


def test_a_module_failing_halfway_leaves_nothing_registered(registry, tmp_path):
    path = write_module(tmp_path, text=MODULE + "\nraise RuntimeError('after registering')\n")
    with pytest.raises(EstimatorModuleError, match="RuntimeError: after registering"):
        load_estimator_module(path)
    assert "NAME" not in ESTIMATORS and "softmax_density" not in ESTIMATORS
    fixed = write_module(tmp_path)  # fixed: loads (a new file content, a new module)
    assert load_estimator_module(fixed).names == ("softmax_density",)


# ----------------------------------------------------------------------------- python -m dara.estimators list
def test_list_prints_every_estimator_with_its_modes_and_options(registry, tmp_path, capsys):
    assert estimators_main(["list"]) == 0
    out = capsys.readouterr().out
    for name in BUILTIN_ESTIMATORS:
        assert f"\n{name}: " in "\n" + out, name
    assert "grpo: sum the channels, then group z-score" in out and "batch_norm: none only" in out
    assert "batch_norm: token (default), response" in out  # gd2po
    assert "reads: weights, rvpo_k (1.0)" in out and "needs: reward_ranges for every channel" in out
    assert estimators_main(["list", "--module", str(write_module(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "softmax_density: GDPO whose weights follow a softmax of the densities" in out
    assert "options: temperature (float, default 1.0, > 0); flip (bool, default False)" in out
    assert "from: dara_estimator_module_mine_" in out
    assert estimators_main(["list", "--module", str(tmp_path / "absent.py")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("[dara.estimators] estimator module") and "no such file" in err[0]


# ----------------------------------------------------------------------------- RVPO
@settings(max_examples=60, deadline=None)
@given(batch=batches(2), k=st.sampled_from([0.25, 1.0, 3.0]))
def test_rvpo_is_the_authors_computation_for_two_channels(batch, k):
    scores, index, lengths = batch
    adv, metrics = compute_advantages("rvpo", torch.tensor(scores), index, mask_from(lengths), rvpo_k=k)
    theirs = ref.authors_rvpo(scores, index, lengths, k)
    for j, row in enumerate(theirs):
        for t, value in enumerate(row):
            assert math.isclose(float(adv[j, t]), value, rel_tol=1e-4, abs_tol=1e-4), (j, t, float(adv[j, t]), value)
    # the authors' diagnostics: k, the mean soft-min and the mean of (channel mean - soft-min) over responses
    adv_k = ref.per_reward_advantages(scores, index)
    soft = [-(math.log(sum(math.exp(-k * a) for a in row)) - math.log(2)) / k for row in adv_k]
    penalty = [sum(row) / 2 - s for row, s in zip(adv_k, soft, strict=True)]
    assert [metrics["rvpo/k"], metrics["rvpo/aggregate_mean"], metrics["rvpo/variance_penalty_mean"]] == pytest.approx(
        [k, sum(soft) / len(soft), sum(penalty) / len(penalty)], abs=1e-9)


# ----------------------------------------------------------------------------- the dead-channel weight
@pytest.mark.parametrize("name", ["dara_sym", "dara_asym"])
def test_a_dead_channels_weight_is_1_or_w_max_and_the_advantage_the_same(name):
    scores = torch.tensor([[1.0, 1.0], [0.0, 1.0], [1.0, 1.0], [1.0, 1.0]])  # channel 1 active in no group
    index, mask = [0, 0, 1, 1], torch.ones(4, 3)
    paper, paper_metrics = compute_advantages(name, scores, index, mask)
    authors, authors_metrics = compute_advantages(name, scores, index, mask, dead_channel_weight="w_max", w_max=4.0)
    assert paper_metrics["weight/c1"] == 1.0 and authors_metrics["weight/c1"] == 4.0
    assert paper_metrics["energy_vs_ideal/c1"] == 0.0 and torch.equal(paper, authors)
    dead, every = compute_advantages(name, torch.zeros(4, 2), index, mask, dead_channel_weight="w_max")
    assert dead.abs().sum() == 0 and every["weight/c0"] == every["weight/c1"] == 5.0  # every channel dead


@pytest.mark.slow  # a pytest process (a few seconds)
def test_the_examples_own_tests_pass_as_documented():
    """docs/estimators.md: `pytest examples/my_estimator/` (its own process: the example registers at import)."""
    import subprocess
    assert len(EXAMPLE.read_text().splitlines()) <= 15  # all of it is in docs/estimators.md
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE.parent)],
                         cwd=dara.PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "5 passed" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
