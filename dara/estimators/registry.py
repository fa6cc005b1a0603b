"""The registry of estimators (`ESTIMATORS`): the library's own and any a user registers with `register`, also
in a module that `load_estimator_module` imports (a `.py` file, an import path or `pkg://package.module`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")  # a metric key, a run-name part, a verl registry key
PKG_PREFIX = "pkg://"  # verl's form of an import path (reward.custom_reward_function.path takes it too)
VERL_PREFIX = "dara_"  # verl's registry key of a library estimator whose bare name verl owns (grpo, gdpo)
OPTION_TYPES = (float, int, str, bool)


@dataclass(frozen=True)
class Option:
    """An option an estimator declares (`algorithm.dara.options.<name>=...`, `options={name: value}`): `type` is
    float, int, str or bool; `check(value)` is truthy when valid, and `help` says what valid means."""
    name: str
    type: type
    default: Any
    check: Callable[[Any], Any] | None = None
    help: str = ""

    def __post_init__(self) -> None:
        if not NAME.match(self.name):
            raise ValueError(f"option name {self.name!r} must be an identifier (letters, digits, _)")
        if self.type not in OPTION_TYPES:
            raise ValueError(f"option {self.name!r}: type must be one of float, int, str, bool, got {self.type!r}")
        object.__setattr__(self, "default", self.coerce(self.default, "default"))

    def coerce(self, value: Any, what: str = "value") -> Any:
        """`value` as this option's type, checked; a ValueError names the option, the value and the rule."""
        if self.type in (bool, str):
            ok = isinstance(value, self.type)
        else:  # an int is taken for a float, a float with an integral value for an int
            ok = isinstance(value, int | float) and not isinstance(value, bool) and (
                self.type is float or float(value).is_integer())
        if not ok:
            raise ValueError(f"option {self.name}={value!r} ({what}) must be a {self.type.__name__}")
        if self.type in (int, float):
            value = self.type(value)
        if self.type is float and not math.isfinite(value):
            raise ValueError(f"option {self.name}={value!r} ({what}) must be finite")
        if self.check is not None:
            try:
                ok = self.check(value)
            except Exception as error:  # the user's check itself failed: its error, named
                raise ValueError(f"option {self.name}={value!r} ({what}): its check raised "
                                 f"{type(error).__name__}: {error}") from None
            if not ok:
                raise ValueError(f"option {self.name}={value!r} ({what}) fails its check"
                                 + (f": must be {self.help}" if self.help else ""))
        return value

    def describe(self) -> str:
        return f"{self.name} ({self.type.__name__}, default {self.default!r}{', ' + self.help if self.help else ''})"


@dataclass(frozen=True)
class Estimator:
    """A registered estimator. batch_norms: the modes it defines, its default first (() = any, token default);
    uses: the typed options it reads; needs_ranges: it reads `reward_ranges` for every channel."""
    name: str
    fn: Callable
    batch_norms: tuple[str, ...]
    summary: str
    options: tuple[Option, ...] = ()
    uses: tuple[str, ...] = ()
    needs_ranges: bool = False
    module: str = ""

    @property
    def builtin(self) -> bool:
        return self.module == BUILTIN_MODULE


BUILTIN_MODULE = "dara.estimators.methods"
ESTIMATORS: dict[str, Estimator] = {}
def unregister(name: str) -> None:
    """Remove a user's estimator (the library's own cannot be removed): for tests and notebooks."""
    estimator = ESTIMATORS.get(name)
    if estimator is None:
        raise ValueError(f"no estimator {name!r} is registered")
    if estimator.builtin:
        raise ValueError(f"estimator {name!r} is the library's own and cannot be removed")
    del ESTIMATORS[name]
    for key in [key for key, loaded in _LOADED.items() if name in loaded.names]:
        del _LOADED[key]


def get_estimator(name: str) -> Estimator:
    """The registered estimator `name`; a ValueError listing the registered names otherwise."""
    estimator = ESTIMATORS.get(name)
    if estimator is None:
        raise ValueError(f"unknown estimator {name!r}; registered: {', '.join(ESTIMATORS)}")
    return estimator


# ----------------------------------------------------------------------------- a user's module
class EstimatorModuleError(ValueError):
    """A module of estimators that cannot be used: one line naming the module and the problem."""


@dataclass(frozen=True)
class EstimatorModule:
    """A loaded module of estimators."""
    spec: str
    path: str
    sha256: str
    module: str
    names: tuple[str, ...] = field(default_factory=tuple)
    from_file: bool = True  # given as a .py file (else an import path)

    def record(self) -> dict:
        """What a run's run_info.json records."""
        return {"spec": self.spec, "path": self.path, "sha256": self.sha256, "estimators": list(self.names)}


_LOADED: dict[str, EstimatorModule] = {}  # by file


def _locate(spec: str) -> tuple[str | None, str]:
    """(the file of `spec`, the import name of an import path or None for a file)."""
    dotted = spec.removeprefix(PKG_PREFIX)
    if dotted == spec and (spec.endswith(".py") or "/" in spec or "\\" in spec or spec.startswith(("~", "."))):
        path = Path(spec).expanduser()
        if not path.is_file():
            raise EstimatorModuleError(f"estimator module {spec}: no such file")
        if path.suffix != ".py":
            raise EstimatorModuleError(f"estimator module {spec}: a file of estimators must be a .py file")
        return str(path.resolve()), ""
    if not all(part.isidentifier() for part in dotted.split(".")):
        raise EstimatorModuleError(f"estimator module {spec}: neither a .py file nor an import path "
                                   "(package.module or pkg://package.module)")
    try:
        found = importlib.util.find_spec(dotted)
    except ModuleNotFoundError:  # a parent package is missing
        found = None
    except (ImportError, ValueError) as error:
        raise EstimatorModuleError(f"estimator module {spec}: {type(error).__name__}: {error}") from None
    if found is None or not found.origin or found.origin in ("built-in", "frozen"):
        raise EstimatorModuleError(f"estimator module {spec}: no module named {dotted!r} is importable here "
                                   "(install it, put it on PYTHONPATH, or give its .py file)")
    return str(Path(found.origin).resolve()), dotted


def load_estimator_module(spec: str | Path) -> EstimatorModule:
    """Import the module `spec` and return what it registered (the first load again for the same file). One
    EstimatorModuleError line when it does not exist, fails to import (its registrations are undone), registers
    nothing, or its file changed since this process loaded it."""
    spec = str(spec).strip()
    if not spec:
        raise EstimatorModuleError("estimator module: empty path")
    path, dotted = _locate(spec)
    sha = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    loaded = _LOADED.get(path)
    if loaded is not None:
        if loaded.sha256 != sha:
            raise EstimatorModuleError(f"estimator module {spec}: {path} changed since this process loaded it "
                                       f"(sha256 {loaded.sha256[:12]} then, {sha[:12]} now)")
        return loaded
    module_name = dotted or f"dara_estimator_module_{re.sub(r'[^A-Za-z0-9_]', '_', Path(path).stem)}_{sha[:12]}"
    before = set(ESTIMATORS)
    try:
        if dotted:
            importlib.import_module(dotted)
        elif module_name not in sys.modules:
            file_spec = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(file_spec)
            sys.modules[module_name] = module
            try:
                file_spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(module_name, None)
                raise
    except Exception as error:
        for name in set(ESTIMATORS) - before:  # a half-imported module leaves nothing registered
            del ESTIMATORS[name]
        text = " ".join(str(error).split()) or "(no message)"
        raise EstimatorModuleError(f"estimator module {spec} failed to import: {type(error).__name__}: {text}"
                                   ) from None
    names = tuple(n for n, e in ESTIMATORS.items() if e.module == module_name)
    if not names:
        raise EstimatorModuleError(f"estimator module {spec} registers no estimator: decorate a function with "
                                   "@dara.estimators.register('name', 'summary') in it")
    loaded = EstimatorModule(spec, path, sha, module_name, names, from_file=not dotted)
    _LOADED[path] = loaded
    return loaded
