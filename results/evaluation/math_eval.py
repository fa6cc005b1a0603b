"""Math evaluation with a length constraint (EXPERIMENTS.md, DeepScaleR setup, "Evaluation").

Per benchmark, over 16 samples per question (T=0.6, top-p 0.95, up to 32,768 tokens):
- Acc    = mean pass@1 over the samples; a truncated response (no eos within the budget) is wrong;
- Exceed = share of responses longer than 4,000 tokens;
- Joint  = share of responses both correct and within 4,000 tokens;
then the macro-average over the benchmarks, and 95% CIs from 2,000 question-level bootstrap
resamples (seeded; each benchmark's questions resampled with replacement, the macro-average
recomputed from the same resample index of every benchmark).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from results.evaluation.backends import Backend, SamplingConfig
from results.evaluation.runner import single_turn_producer

PROMPT_SUFFIX = " Let's think step by step and output the final answer within \\boxed{}."
LENGTH_LIMIT = 4000
METRICS = ("acc", "exceed", "joint")
BENCHMARK_ORDER = ("aime24", "amc23", "math500", "minerva", "olympiad_bench")
# File stems of the raw benchmark JSONs (shared/data/math_benchmarks) -> data_source names (conventions).
FILE_TO_SOURCE = {"aime": "aime24", "amc": "amc23", "math": "math500", "minerva": "minerva",
                  "olympiad_bench": "olympiad_bench"}


def _reference_answer(raw, where: str):
    """The benchmark's answer in its native form (string, number, list of alternatives): rewards.math
    reads them all. Only a missing or empty answer is refused here."""
    if raw is None or raw == "" or raw == []:
        raise ValueError(f"{where}: no reference answer")
    return raw


def load_math_cases(paths: Sequence[str | Path], limit: int | None = None) -> list[dict]:
    """Questions from raw benchmark JSONs (``problem``/``answer``; prompt = problem + the DeepScaleR
    suffix as the user turn) or verl parquet files (``prompt`` messages, ``reward_model.ground_truth``).
    ``limit`` keeps the first N questions of each file (smoke runs)."""
    cases: list[dict] = []
    for raw_path in paths:
        path = Path(raw_path)
        if path.suffix == ".json":
            source = FILE_TO_SOURCE.get(path.stem, path.stem)
            rows = json.loads(path.read_text())
            for i, row in enumerate(rows[:limit]):
                messages = [{"role": "user", "content": row["problem"] + PROMPT_SUFFIX}]
                cases.append({"case_id": f"{source}_{i}", "data_source": source, "messages": messages,
                              "answer": _reference_answer(row.get("answer"), f"{path}[{i}]")})
        elif path.suffix == ".parquet":
            frame = pd.read_parquet(path)
            for i, row in enumerate(frame.head(limit).itertuples() if limit else frame.itertuples()):
                messages = [{"role": m["role"], "content": m["content"]} for m in row.prompt]
                extra = row.extra_info if isinstance(row.extra_info, dict) else {}
                # data_prep's math sets keep every accepted form of the answer beside the ground truth
                alternatives = extra.get("answer_alternatives")
                answer = [str(a) for a in alternatives] if alternatives is not None and len(alternatives) else None
                cases.append({"case_id": f"{row.data_source}_{extra.get('index', i)}", "data_source": row.data_source,
                              "messages": messages, "answer": answer or str(row.reward_model["ground_truth"])})
        else:
            raise ValueError(f"{path}: math benchmarks are .json (raw) or .parquet (verl rows)")
    return cases


def make_producer(backend: Backend, sampling: SamplingConfig):
    """Batch of cases -> finished records with every sample's text, token count and finish reason."""
    return single_turn_producer(backend, sampling, carried=("answer",))


def score_record(record: dict, *, length_limit: int = LENGTH_LIMIT, pool=None) -> dict:
    """Per sample: correct (rewards.math correctness, forced to 0 when truncated), exceed, joint.

    With ``pool`` (a rewards.pool.HardTimeoutPool) every sample is verified in a worker with a hard time
    limit; a verification that times out scores the sample wrong and is counted in ``timeouts``. A worker
    error raises (the case stays unscored and a rerun retries it), never a silent zero."""
    from rewards import math as math_reward

    items = [(s["text"], record["answer"], s["n_tokens"], length_limit) for s in record["samples"]]
    timeouts = 0
    if pool is None:
        rewards = [math_reward.score(*item) for item in items]
    else:
        rewards = []
        for outcome in pool.map(math_reward.score, items):
            if outcome.status == "ok":
                rewards.append(outcome.value)
            elif outcome.status == "timeout":
                timeouts += 1
                rewards.append({"correctness": 0.0})
            else:
                raise RuntimeError(f"case {record['case_id']}: scoring failed: {outcome.error}")
    correct, exceed = [], []
    for sample, reward in zip(record["samples"], rewards, strict=True):
        truncated = sample["finish_reason"] == "length"
        correct.append(0 if truncated else int(reward["correctness"] >= 1))
        exceed.append(int(sample["n_tokens"] > length_limit))
    joint = [int(c and not e) for c, e in zip(correct, exceed, strict=True)]
    return {"case_id": record["case_id"], "data_source": record["data_source"], "correct": correct,
            "exceed": exceed, "joint": joint, "n_tokens": [s["n_tokens"] for s in record["samples"]],
            "timeouts": timeouts}


def question_table(scored: Sequence[dict]) -> dict[str, dict[str, np.ndarray]]:
    """{benchmark: {metric: per-question mean over samples}} in BENCHMARK_ORDER, then others sorted."""
    by_source: dict[str, dict[str, list[float]]] = {}
    for rec in scored:
        if not rec["correct"]:
            raise ValueError(f"case {rec['case_id']} has no samples")
        slot = by_source.setdefault(rec["data_source"], {m: [] for m in METRICS})
        slot["acc"].append(float(np.mean(rec["correct"])))
        slot["exceed"].append(float(np.mean(rec["exceed"])))
        slot["joint"].append(float(np.mean(rec["joint"])))
    order = [b for b in BENCHMARK_ORDER if b in by_source] + sorted(set(by_source) - set(BENCHMARK_ORDER))
    return {b: {m: np.asarray(by_source[b][m]) for m in METRICS} for b in order}


def bootstrap_means(values: np.ndarray, resamples: np.ndarray) -> np.ndarray:
    """Mean of ``values`` under each row of resample indices [B, Q] -> [B]."""
    return values[resamples].mean(axis=1)


def summarise_math(
    scored: Sequence[dict], *, n_boot: int = 2000, seed: int = 0, ci: float = 0.95
) -> pd.DataFrame:
    """Rows = benchmarks + "macro"; columns: questions, and per metric the point value and CI bounds
    (``<m>``, ``<m>_lo``, ``<m>_hi``). The same bootstrap indices serve the three metrics."""
    table = question_table(scored)
    if not table:
        raise ValueError("no scored cases")
    rng = np.random.default_rng(seed)
    lo_q, hi_q = 100 * (1 - ci) / 2, 100 * (1 + ci) / 2
    rows, boot_by_metric = [], {m: [] for m in METRICS}
    for bench, metrics in table.items():
        n_questions = len(metrics["acc"])
        resamples = rng.integers(0, n_questions, size=(n_boot, n_questions))
        row = {"benchmark": bench, "questions": n_questions}
        for m in METRICS:
            boot = bootstrap_means(metrics[m], resamples)
            boot_by_metric[m].append(boot)
            row[m] = float(metrics[m].mean())
            row[f"{m}_lo"], row[f"{m}_hi"] = (float(x) for x in np.percentile(boot, [lo_q, hi_q]))
        rows.append(row)
    macro = {"benchmark": "macro", "questions": sum(r["questions"] for r in rows)}
    for m in METRICS:
        boot = np.mean(boot_by_metric[m], axis=0)
        macro[m] = float(np.mean([r[m] for r in rows]))
        macro[f"{m}_lo"], macro[f"{m}_hi"] = (float(x) for x in np.percentile(boot, [lo_q, hi_q]))
    rows.append(macro)
    return pd.DataFrame(rows)


def render_math_table(summary: pd.DataFrame) -> str:
    """Markdown: percent values with their 95% CI."""
    lines = ["| benchmark | questions | Acc | Exceed | Joint |", "|---|---|---|---|---|"]
    for row in summary.to_dict("records"):
        cells = [f"{100 * row[m]:.1f} [{100 * row[f'{m}_lo']:.1f}, {100 * row[f'{m}_hi']:.1f}]" for m in METRICS]
        lines.append(f"| {row['benchmark']} | {row['questions']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def check_complete(scored: Sequence[dict], samples_per_question: int) -> None:
    """Every case must carry the same number of samples; a short one would bias pass@1."""
    bad = [r["case_id"] for r in scored if len(r["correct"]) != samples_per_question]
    if bad:
        raise ValueError(f"{len(bad)} case(s) without {samples_per_question} samples, e.g. {bad[:3]}")
    if any(math.isnan(v) for r in scored for v in r["n_tokens"]):
        raise ValueError("a sample has no token count")
