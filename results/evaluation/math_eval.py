"""Math evaluation with a length constraint: per sample strict (verl's Hendrycks grader), numeq (strict, else the
authors' numeric-equivalence fallback), Exceed and Joint; per benchmark and macro-averaged, with question-level
bootstrap CIs. The rules in full: docs/results.md ("Checkpoint evaluation", math)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from results.paired import percentile_interval
from tasks import math as task
from tasks.math_answers import RULE as ANSWER_RULE
from tasks.math_answers import reference_answer

LENGTH_LIMIT = task.LENGTH_LIMIT
METRICS = ("acc", "acc_strict", "exceed", "joint")
BENCHMARK_ORDER = task.BENCHMARKS
# File stems of the raw benchmark JSONs (sample_data/math_benchmarks) -> data_source names (conventions).
FILE_TO_SOURCE = {"aime": "aime24", "amc": "amc23", "math": "math500", "minerva": "minerva",
                  "olympiad_bench": "olympiad_bench"}


def _reference_answer(raw, where: str) -> str:
    """The one answer string the authors grade against (tasks.math_answers.reference_answer)."""
    try:
        return reference_answer(raw)
    except ValueError as err:
        raise ValueError(f"{where}: no usable reference answer ({err})") from None


def load_math_cases(paths: Sequence[str | Path], limit: int | None = None) -> list[dict]:
    """Questions from raw benchmark JSONs (the training prompt of tasks.math) or verl parquet rows; the first
    ``limit`` of each file."""
    cases: list[dict] = []
    for path in map(Path, paths):
        if path.suffix == ".json":
            source = FILE_TO_SOURCE.get(path.stem, path.stem)
            rows = [(f"{source}_{i}", source, task.prompt_messages(row["problem"]), row.get("answer"))
                    for i, row in enumerate(json.loads(path.read_text()))]
        elif path.suffix == ".parquet":
            rows = [(f"{row.data_source}_{(row.extra_info if isinstance(row.extra_info, dict) else {}).get('index', i)}",
                     row.data_source, [{"role": m["role"], "content": m["content"]} for m in row.prompt],
                     row.reward_model["ground_truth"]) for i, row in enumerate(pd.read_parquet(path).itertuples())]
        else:
            raise ValueError(f"{path}: math benchmarks are .json (raw) or .parquet (verl rows)")
        cases += [{"case_id": case_id, "data_source": source, "messages": messages,
                   "answer": _reference_answer(answer, f"{path}[{i}]")}
                  for i, (case_id, source, messages, answer) in enumerate(rows[:limit])]
    return cases


_UNIT = re.compile(r"\\(?:text|mathrm|mbox|rm|textrm)\s*\{[^{}]*\}")
# Removed in this order (the authors' order: "%" goes before "\\%", which leaves a backslash behind and so
# makes "50\\%" no plain number, as in their evaluation).
_NOISE = ("\\!", "\\,", "\\ ", "\\;", "\\:", "~", "$", ",", "%", "^\\circ", "\\circ", "\\%", "\\left", "\\right")
_TIMES_TEN = re.compile(r"\\(?:times|cdot|ast)\s*10\s*\^\s*\{?\s*([-+]?\d+)\s*\}?")
_POWER_OF_TEN = re.compile(r"^10\^\{?([-+]?\d+)\}?$")
_PLAIN_NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
# The fallback's box: "\\boxed{" then text whose braces nest at most one level deep, then "}" (the
# authors' BOXED pattern). A box with deeper nesting does not match, so the last MATCHING box is read:
# an earlier one when the true last box nests deeper.
_SHALLOW_BOX = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")
NUMEQ_RULE = ("numeq: strict, else the last \\boxed{} whose braces nest at most one level deep and the "
              "reference read as plain numbers are exactly equal (the authors' answer_numeq)")
GRADING = {"acc": "numeq: strict, or the numeric-equivalence fallback", "acc_strict": "verl's Hendrycks grader",
           "exceed_joint": "on generated token ids with EOS", "numeq": NUMEQ_RULE, "reference_answer": ANSWER_RULE}


def plain_number(text: str | None) -> float | None:
    """An answer's value as a plain number (units, separators, LaTeX spacing, x 10^n allowed), else None. Commas
    are removed first, so "69, 84" reads 6984, as in the authors' evaluation."""
    if text is None:
        return None
    value = _UNIT.sub("", str(text).strip())
    for noise in _NOISE:
        value = value.replace(noise, "")
    value = _TIMES_TEN.sub(lambda m: "e" + m.group(1).lstrip("+"), value)
    value = re.sub(r"\s+", "", value).rstrip(".")
    value = _POWER_OF_TEN.sub(lambda m: "1e" + m.group(1).lstrip("+"), value)
    number = float(value) if _PLAIN_NUMBER.match(value) else math.inf
    return number if math.isfinite(number) else None


def numeq_boxed(response: str) -> str | None:
    boxes = _SHALLOW_BOX.findall(response or "")
    return boxes[-1] if boxes else None


def numeric_equal(response: str, answer: str) -> bool:
    predicted, reference = plain_number(numeq_boxed(response)), plain_number(answer)
    return predicted is not None and reference is not None and predicted == reference


def generated_token_ids(sample: dict) -> int:
    """Generated token ids with the EOS the model emitted (the backends leave it out)."""
    return int(sample["n_tokens"]) + (1 if sample["finish_reason"] == "stop" else 0)


def score_record(record: dict, *, length_limit: int = LENGTH_LIMIT, pool=None) -> dict:
    """Per sample: strict (verl's Hendrycks grader), correct (numeq), exceed (ids with EOS > length_limit), joint.
    With ``pool`` (rewards.pool.HardTimeoutPool) a timeout scores wrong and is counted; a worker error raises."""
    from rewards import math as math_reward
    answer = _reference_answer(record["answer"], record["case_id"])
    items = [(s["text"], answer, generated_token_ids(s), length_limit) for s in record["samples"]]
    if pool is None:
        rewards, timeouts = [math_reward.score(*item) for item in items], 0
    else:
        outcomes = pool.map(math_reward.score, items)
        if failed := next((o for o in outcomes if o.status not in ("ok", "timeout")), None):
            raise RuntimeError(f"case {record['case_id']}: scoring failed: {failed.error}")
        timeouts = sum(o.status == "timeout" for o in outcomes)
        rewards = [o.value if o.status == "ok" else {"correctness": 0.0} for o in outcomes]
    strict = [int(reward["correctness"] >= 1) for reward in rewards]
    correct = [s or int(numeric_equal(sample["text"], answer)) for s, sample in zip(strict, record["samples"],
                                                                                    strict=True)]
    n_tokens = [generated_token_ids(sample) for sample in record["samples"]]
    exceed = [int(n > length_limit) for n in n_tokens]
    return {"case_id": record["case_id"], "data_source": record["data_source"], "correct": correct,
            "strict": strict, "exceed": exceed, "joint": [int(c and not e) for c, e in zip(correct, exceed, strict=True)],
            "n_tokens": n_tokens, "timeouts": timeouts}


def summarise_math(scored: Sequence[dict], *, n_boot: int = 2000, seed: int = 0, ci: float = 0.95) -> pd.DataFrame:
    """Rows = benchmarks + "macro"; per metric the mean over questions of the per-question sample mean and its CI
    (``<m>_lo``, ``<m>_hi``). One set of resample indices per benchmark; macro's resamples average the benchmarks'."""
    by_source: dict[str, dict[str, list[float]]] = {}
    for rec in scored:
        if not rec["correct"]:
            raise ValueError(f"case {rec['case_id']} has no samples")
        slot = by_source.setdefault(rec["data_source"], {m: [] for m in METRICS})
        for metric, key in zip(METRICS, ("correct", "strict", "exceed", "joint"), strict=True):
            slot[metric].append(float(np.mean(rec.get(key, rec["correct"]))))
    if not by_source:
        raise ValueError("no scored cases")
    order = [b for b in BENCHMARK_ORDER if b in by_source] + sorted(set(by_source) - set(BENCHMARK_ORDER))
    rng = np.random.default_rng(seed)
    rows, boots = [], {m: [] for m in METRICS}
    for bench in order:
        n_questions = len(by_source[bench]["acc"])
        resamples = rng.integers(0, n_questions, size=(n_boot, n_questions))
        row = {"benchmark": bench, "questions": n_questions}
        for m in METRICS:
            values = np.asarray(by_source[bench][m])
            boots[m].append(values[resamples].mean(axis=1))
            row[m] = float(values.mean())
            row[f"{m}_lo"], row[f"{m}_hi"] = percentile_interval(boots[m][-1], ci)
        rows.append(row)
    macro = {"benchmark": "macro", "questions": sum(r["questions"] for r in rows)}
    for m in METRICS:
        macro[m] = float(np.mean([r[m] for r in rows]))
        macro[f"{m}_lo"], macro[f"{m}_hi"] = percentile_interval(np.mean(boots[m], axis=0), ci)
    return pd.DataFrame([*rows, macro])


def olympiad_copy(summary: pd.DataFrame) -> str | None:
    rows = summary[summary["benchmark"] == "olympiad_bench"]
    if rows.empty:
        return None
    count = int(rows["questions"].iloc[0])
    if count == task.BENCHMARK_ROWS["olympiad_bench"]:
        return f"OlympiadBench: the hub copy the authors used ({count} questions)"
    if count == task.OLYMPIAD_LOCAL_ROWS:
        return f"OlympiadBench: DeepScaleR's local copy ({count} questions; the authors' hub copy has 674)"
    return f"OlympiadBench: {count} questions (neither the authors' 674 nor DeepScaleR's 675)"


def render_math_table(summary: pd.DataFrame) -> str:
    lines = ["| benchmark | questions | Acc | Acc strict | Exceed | Joint |", "|---|---|---|---|---|---|"]
    for row in summary.to_dict("records"):
        cells = [f"{100 * row[m]:.1f} [{100 * row[f'{m}_lo']:.1f}, {100 * row[f'{m}_hi']:.1f}]" for m in METRICS]
        lines.append(f"| {row['benchmark']} | {row['questions']} | " + " | ".join(cells) + " |")
    notes = [olympiad_copy(summary), f"Reference answers: {ANSWER_RULE}.", f"Acc is {NUMEQ_RULE}."]
    return "\n".join(lines) + "\n\n" + "\n\n".join(n for n in notes if n) + "\n"


def check_complete(scored: Sequence[dict], samples_per_question: int) -> None:
    """Every case carries the same number of samples (a short one would bias pass@1)."""
    if bad := [r["case_id"] for r in scored if len(r["correct"]) != samples_per_question]:
        raise ValueError(f"{len(bad)} case(s) without {samples_per_question} samples, e.g. {bad[:3]}")
    if any(math.isnan(v) for r in scored for v in r["n_tokens"]):
        raise ValueError("a sample has no token count")
