"""Variants (docs/results.md, "Variants"): runs of one task, model and method whose recorded configurations differ
in more than the seed get their own ``method`` label (``dara_asym w_max=2``), ``base_method`` and ``config_id``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from dara.run_folder import config_differences, without_seed

IDENTITY = ("task", "model", "method")
BASE_METHOD = "base_method"
CONFIG_ID = "config_id"
MAX_LABEL_KEYS = 4


def _identity(frame: pd.DataFrame) -> tuple:
    return tuple(str(frame[c].iloc[0]) if c in frame.columns and len(frame) else None for c in IDENTITY)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def short_names(keys: Sequence[str]) -> dict[str, str]:
    names = {}
    for key in keys:
        parts = key.split(".")
        for size in range(1, len(parts) + 1):
            tail = ".".join(parts[-size:])
            if not any(other != key and (other == tail or other.endswith("." + tail)) for other in keys):
                break
        names[key] = tail
    return names


def variant_labels(method: str, configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """One label per configuration of one method: the method and ``key=value`` of the first MAX_LABEL_KEYS keys
    that differ (path-valued keys last)."""
    keys = {k for i, config in enumerate(configs) for other in configs[i + 1:] for k in config_differences(config, other)}
    # keys holding paths (assets of another output root or checkout) last: the settings a user changed first
    ordered = sorted(keys, key=lambda k: (any(isinstance(c.get(k), str) and "/" in c.get(k) for c in configs), k))
    names = short_names(ordered)
    more = [f"(+{len(ordered) - MAX_LABEL_KEYS} keys)"] if len(ordered) > MAX_LABEL_KEYS else []
    labels = [" ".join([method, *(f"{names[k]}={v if isinstance(v := config.get(k), str) else _canonical(v)}"
                                  for k in ordered[:MAX_LABEL_KEYS]), *more]) for config in configs]
    seen: dict[str, int] = {}
    for i, label in enumerate(labels):  # labels cut short could read alike: number them apart
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            labels[i] = f"{label} #{seen[label]}"
    return labels


def _keys_taken_as_unchanged(runs) -> dict[tuple, set[str]]:
    """Per identity, the keys some runs lack (added to the code later) that every run recording them has at one value:
    taken as unchanged, as dara.train does, so they tell nothing apart."""
    runs_of: dict[tuple, int] = {}
    seen: dict[tuple, dict[str, tuple[set[str], int]]] = {}  # identity -> key -> (values, runs recording it)
    for frame, config in runs:
        if config is None or "method" not in frame.columns:
            continue
        identity = _identity(frame)
        runs_of[identity] = runs_of.get(identity, 0) + 1
        keys = seen.setdefault(identity, {})
        for key, value in without_seed(config).items():
            found, count = keys.get(key, (set(), 0))
            keys[key] = (found | {_canonical(value)}, count + 1)
    return {identity: {key for key, (found, count) in keys.items() if len(found) == 1 and count < runs_of[identity]}
            for identity, keys in seen.items()}


def name_variants(runs: Sequence[tuple[pd.DataFrame, Mapping[str, Any] | None]]) -> list[pd.DataFrame]:
    unrecorded = _keys_taken_as_unchanged(runs)
    groups: dict[tuple, dict[str, Mapping[str, Any]]] = {}
    keyed = []
    for frame, config in runs:
        if config is None or "method" not in frame.columns:
            keyed.append((frame, None, None))
            continue
        identity = _identity(frame)
        variant = {key: value for key, value in without_seed(config).items() if key not in unrecorded[identity]}
        text = _canonical(variant)
        groups.setdefault(identity, {})[text] = variant
        keyed.append((frame, identity, text))
    labels = {}
    for identity, variants in groups.items():
        texts = sorted(variants)
        for text, label in zip(texts, variant_labels(identity[-1], [variants[t] for t in texts]), strict=True):
            digest = hashlib.sha256(_canonical({"identity": identity, "config": text}).encode()).hexdigest()[:12]
            labels[(identity, text)] = (label, digest)
    out = []
    for frame, identity, text in keyed:
        if identity is not None:
            label, digest = labels[(identity, text)]
            frame = frame.assign(**{BASE_METHOD: frame["method"], "method": label, CONFIG_ID: digest})
        out.append(frame)
    return out


def check_one_configuration(frame: pd.DataFrame, group_cols: Sequence[str], what: str) -> None:
    """Refuse a grouping that would pool runs of different configurations as if they were seeds."""
    if CONFIG_ID not in frame.columns or not len(frame):
        return
    recorded = frame.dropna(subset=[CONFIG_ID])
    for key, part in recorded.groupby(list(group_cols), sort=False, dropna=False):
        if part[CONFIG_ID].nunique() > 1:
            varying = [c for c in ("task", "model") if c in part.columns and part[c].nunique() > 1]
            raise ValueError(f"{what}: the group {dict(zip(group_cols, key, strict=True))} holds runs of "
                             f"{part[CONFIG_ID].nunique()} configurations (they differ in "
                             f"{', '.join(varying) or 'their configuration'}); add "
                             f"{', '.join(varying) or 'model'} to --group-by")
