"""ToolRL held-out evaluation: ``rewards.toolrl.score`` format and correctness per sample, exact = correctness 3;
means over cases with bootstrap CIs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from results.paired import bootstrap_ci

METRICS = ("format", "correctness", "exact")


def load_toolrl_cases(paths: Sequence[str | Path], limit: int | None = None) -> list[dict]:
    """verl parquet rows (data_source "rlla"): prompt messages and the ground-truth assistant text."""
    return [{"case_id": f"{row.data_source}_{row.extra_info.get('index', i) if isinstance(row.extra_info, dict) else i}",
             "data_source": row.data_source, "messages": [{"role": m["role"], "content": m["content"]} for m in row.prompt],
             "ground_truth": str(row.reward_model["ground_truth"])}
            for path in paths for i, row in enumerate(pd.read_parquet(path).head(limit).itertuples())]


def score_record(record: dict) -> dict:
    """Per sample: rewards.toolrl format and correctness, and exact = correctness at its maximum (3)."""
    from rewards import toolrl
    rewards = [toolrl.score(sample["text"], record["ground_truth"]) for sample in record["samples"]]
    corr = [float(r["correctness"]) for r in rewards]
    return {"case_id": record["case_id"], "data_source": record["data_source"],
            "format": [float(r["format"]) for r in rewards], "correctness": corr, "exact": [float(c >= 3.0) for c in corr]}


def summarise_toolrl(scored: Sequence[dict], *, n_boot: int = 2000, seed: int = 0, ci: float = 0.95) -> dict:
    """Means over cases of the per-case sample means, with bootstrap CIs."""
    if not scored:
        raise ValueError("no scored cases")
    rng = np.random.default_rng(seed)
    out: dict[str, float] = {"cases": len(scored)}
    for metric in METRICS:
        per_case = np.array([np.mean(r[metric]) for r in scored])
        out[metric] = float(per_case.mean())
        out[f"{metric}_lo"], out[f"{metric}_hi"] = bootstrap_ci(per_case, rng, n_boot, ci)
    return out
