"""A reward module's declaration (its channels and their ranges, by name) and the check of what it returns. A module
of your own (`reward.custom_reward_function.path` / `.name`; docs/own_experiment.md) defines verl's `compute_score`
and declares `REWARD_CHANNELS = {name: (low, high)}`, or `reward_channels(data_source, reward_kwargs)`: the run's
`algorithm.reward_channels` and `algorithm.dara.reward_ranges`; `check_result` holds every scored item to it."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.registry import load_module_file

DECLARATION = "REWARD_CHANNELS"
DECLARE_FUNCTION = "reward_channels"
PKG_PREFIX = "pkg://"  # a module path verl loads by import (reward.custom_reward_function.path)
SCORE_KEY = "score"
# Per-item flags the project's reward manager adds to reward_extra_info (counts, not channels).
TIMEOUT_KEY, ERROR_KEY = "reward_timeout", "reward_error"
RESERVED = frozenset({SCORE_KEY, TIMEOUT_KEY, ERROR_KEY})  # no channel may take these names
CHANNEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# reward_kwargs that are the reward manager's pool's own (`RewardOptions` fields), never passed to your module
POOL_OPTIONS = ("timeout_s", "num_processes")

Ranges = dict[str, tuple[float, float]]


class RewardSpecError(ValueError):
    """A reward module that cannot be used: it names the module and what is wrong."""


class RewardContractError(ValueError):
    """compute_score broke its declaration: not a dict, or a channel missing or not declared."""


@dataclass(frozen=True)
class RewardSpec:
    """A reward module as a run uses it: where it is, its function, its channels (in order) with ranges."""

    path: str
    function: str
    channels: Ranges

    @property
    def names(self) -> list[str]:
        return list(self.channels)

    def fallback(self) -> dict[str, float]:
        """What an item scores when its scoring failed or timed out: each channel's low, "score" their sum."""
        lows = {name: float(low) for name, (low, _) in self.channels.items()}
        return {SCORE_KEY: float(sum(lows.values())), **lows}


def merged_reward_kwargs(manager_kwargs: Mapping, function_kwargs: Mapping) -> dict[str, Any]:
    """`reward.reward_kwargs` and `reward.custom_reward_function.reward_kwargs` as one mapping; a key set to
    different values in both is an error naming it."""
    clashes = sorted(k for k in manager_kwargs.keys() & function_kwargs.keys() if manager_kwargs[k] != function_kwargs[k])
    if clashes:
        raise ValueError(f"reward option(s) {clashes} differ between reward.reward_kwargs and "
                         "custom_reward_function.reward_kwargs")
    return {**manager_kwargs, **function_kwargs}


def split_pool_options(kwargs: Mapping) -> tuple[dict[str, Any], dict[str, Any]]:
    """reward_kwargs as (the pool's own `POOL_OPTIONS`, what a reward module of your own is called with)."""
    return ({k: v for k, v in kwargs.items() if k in POOL_OPTIONS}, {k: v for k, v in kwargs.items() if k not in POOL_OPTIONS})


def check_declaration(declared: Any, where: str) -> Ranges:
    """{name: (low, high)} with identifier names (not "score" or the manager's flags) and finite low < high."""
    if not isinstance(declared, Mapping) or not declared:
        raise RewardSpecError(f"{where}: {DECLARATION} must be a non-empty dict {{'name': (low, high), ...}}, "
                              f"got {declared!r}")
    ranges: Ranges = {}
    for name, bounds in declared.items():
        if not isinstance(name, str) or not CHANNEL_NAME.match(name) or name in RESERVED:
            raise RewardSpecError(f"{where}: channel name {name!r} must be an identifier other than "
                                  f"{sorted(RESERVED)}")
        try:
            low, high = (float(value) for value in bounds)
        except (TypeError, ValueError):
            raise RewardSpecError(f"{where}: channel {name!r} needs a range (low, high), got {bounds!r}") from None
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise RewardSpecError(f"{where}: channel {name!r} range must be finite with low < high, got {bounds!r}")
        ranges[name] = (low, high)
    return ranges


def declared_channels(module: Any, data_source: str | None, reward_kwargs: Mapping | None, where: str) -> Ranges:
    """The module's declaration: `reward_channels(data_source, reward_kwargs)` where it defines one, else
    `REWARD_CHANNELS`; neither is an error saying what to add."""
    declare = getattr(module, DECLARE_FUNCTION, None)
    if callable(declare):
        try:
            declared = declare(data_source, dict(reward_kwargs or {}))
        except (TypeError, ValueError) as error:
            raise RewardSpecError(f"{where} (data_source {data_source!r}): {error}") from None
    elif hasattr(module, DECLARATION):
        declared = getattr(module, DECLARATION)
    else:
        raise RewardSpecError(f"{where} declares no reward channels: add a module-level "
                              f"{DECLARATION} = {{'name': (low, high), ...}} naming every key compute_score "
                              "returns besides 'score'")
    return check_declaration(declared, where)


def module_file(path: str | Path) -> str:
    """The file of `reward.custom_reward_function.path` (a `pkg://package.module` path too, as verl takes it)."""
    text = str(path)
    if not text.startswith(PKG_PREFIX):
        return text
    found = importlib.util.find_spec(text[len(PKG_PREFIX):])
    return found.origin if found is not None and found.origin else text


def load_reward_spec(path: str | Path, function: str = "compute_score", data_source: str | None = None,
                     reward_kwargs: Mapping | None = None) -> RewardSpec:
    """Load the reward module at `path` and read its declaration; each problem is one RewardSpecError line."""
    where = f"reward module {path}"
    try:
        path = module_file(path)
        module = load_module_file(path)
    except FileNotFoundError:
        raise RewardSpecError(f"{where}: no such file (reward.custom_reward_function.path)") from None
    except Exception as error:  # the user's module failed to import: its error, in one line
        raise RewardSpecError(f"{where} failed to import: {type(error).__name__}: {error}") from None
    scorer = getattr(module, function, None)
    if not callable(scorer):
        raise RewardSpecError(f"{where} has no function {function!r} (reward.custom_reward_function.name)")
    try:
        signature = inspect.signature(scorer)
    except (TypeError, ValueError):  # no signature to check (a builtin)
        signature = None
    try:
        if signature is not None:
            signature.bind("data_source", "solution_str", "ground_truth", extra_info=None)
    except TypeError:
        raise RewardSpecError(f"{where}: {function}{signature} cannot be called as verl calls it, "
                              f"{function}(data_source, solution_str, ground_truth, extra_info=None)") from None
    channels = declared_channels(module, data_source, reward_kwargs, where)
    return RewardSpec(str(Path(path).expanduser().resolve()), function, channels)


def check_result(result: Any, channels: Ranges) -> dict[str, float]:
    """The item's {"score", <channels>} as floats. Not a dict, or a key missing or undeclared, raises
    RewardContractError; a value that is not a finite number inside its declared range, ValueError."""
    if not isinstance(result, Mapping):
        raise RewardContractError(f"compute_score returned {type(result).__name__} {result!r}, not a dict with "
                         f"'score' and the channels {list(channels)}")
    if undeclared := sorted(set(result) - set(channels) - {SCORE_KEY}):
        raise RewardContractError(f"compute_score returned key(s) {undeclared} that {DECLARATION} does not declare "
                         f"(declared: {list(channels)})")
    if missing := [key for key in (SCORE_KEY, *channels) if key not in result]:
        raise RewardContractError(f"compute_score returned no {missing} (returned {sorted(result)})")
    out = {}
    for key in (SCORE_KEY, *channels):
        try:
            value = float(result[key])
        except (TypeError, ValueError):
            raise ValueError(f"compute_score returned {key}={result[key]!r}, not a number") from None
        if not math.isfinite(value):
            raise ValueError(f"compute_score returned {key}={value}")
        if key in channels and not channels[key][0] <= value <= channels[key][1]:
            raise ValueError(f"compute_score returned {key}={value}, outside its declared range "
                             f"[{channels[key][0]}, {channels[key][1]}]")
        out[key] = value
    return out


def score_item(path: str, function: str, kwargs: Mapping, channels: Ranges, data_source: str, solution_str: str,
               ground_truth: Any, extra_info: Mapping | None) -> dict[str, float]:
    """One item scored by the module at `path` (loaded once per process) and checked against its declaration:
    what a pool worker runs for a reward of your own."""
    scorer = getattr(load_module_file(path), function)
    result = scorer(data_source=data_source, solution_str=solution_str, ground_truth=ground_truth,
                    extra_info=extra_info, **dict(kwargs))
    if inspect.iscoroutine(result):  # an async compute_score (verl accepts those too)
        result = asyncio.run(result)
    return check_result(result, channels)


# ----------------------------------------------------------------------------- the probe before Ray starts
PROBE_ROWS = 4


def probe_item(*args) -> tuple[str, str]:
    """("ok", ""), ("contract", message) or ("error", "Type: message") of one probe item (in a pool worker)."""
    try:
        score_item(*args)
    except RewardContractError as error:
        return "contract", str(error)
    except Exception as error:  # the user's function raised: counted, reported if every item does
        return "error", f"{type(error).__name__}: {error}"
    return "ok", ""


def probe(spec: RewardSpec, kwargs: Mapping, rows: list[tuple[str, Any, Mapping | None]], timeout_s: float) -> int:
    """Score each row twice (the ground truth as the response, and an empty response) in a one-worker pool with
    the run's time limit. A broken declaration on any item, or a failure on every item, raises RewardSpecError
    naming the module; returns the number of items that scored."""
    from rewards.pool import OK, HardTimeoutPool
    items = [(source, response, truth, extra) for source, truth, extra in rows
             for response in (truth if isinstance(truth, str) else str(truth), "")]
    with HardTimeoutPool(1, timeout_s, preload=("rewards.spec",)) as pool:
        outcomes = pool.map(probe_item, [
            (spec.path, spec.function, dict(kwargs), spec.channels, source, response, truth,
             {**dict(extra or {}), "response_tokens": len(response.split())})
            for source, response, truth, extra in items])
    failures = []
    for (source, response, _, _), outcome in zip(items, outcomes, strict=True):
        kind, message = outcome.value if outcome.status == OK else ("error", outcome.error or outcome.status)
        if kind == "contract":
            raise RewardSpecError(f"reward module {spec.path}: {message} (probe item: data_source {source!r}, "
                                  f"{'the ground truth' if response else 'an empty response'} as the response)")
        if kind == "error":
            failures.append(message.strip().splitlines()[-1])
    if items and len(failures) == len(items):
        raise RewardSpecError(f"reward module {spec.path} failed on every probe item ({len(items)}: the first "
                              f"{len(rows)} training rows, with their ground truth and with an empty response as "
                              f"the response): {failures[0]}")
    return len(items) - len(failures)
