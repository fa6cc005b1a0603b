"""``python -m results.evaluation {math,toolrl,bfcl} {generate,score,aggregate,all} --out DIR ...``: writes
generations.jsonl (+ .meta.json), scores.jsonl, summary.json and summary.md into DIR; every stage is
resumable. Exit status 1 when cases are still missing after retries (docs/results.md, "Checkpoint evaluation").
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from dara.io import atomic_write_json
from results.evaluation import bfcl_eval, math_eval
from results.evaluation.backends import Backend, EngineStartError, SamplingConfig, VLLMBackend
from results.evaluation.benches import Bench, benches
from results.evaluation.runner import run_cases
from results.evaluation.store import CaseStore


def generate(args, bench: Bench, cases: list[dict], backend: Backend | None = None) -> int:
    bench.complete_generation_args(args)
    sampling = SamplingConfig(n=args.samples, temperature=args.temperature, top_p=args.top_p,
                              max_new_tokens=args.max_new_tokens, seed=args.seed, context_window=args.context_window)
    settings = {"bench": args.bench, "model": str(Path(args.model).resolve()), "sampling": sampling.as_dict(),
                "data": sorted(map(str, args.data or [])), "categories": list(args.categories or [])}
    store = CaseStore(Path(args.out) / "generations.jsonl", settings)
    if all(c["case_id"] in store for c in cases):
        print(f"[generate] all {len(cases)} cases already generated", file=sys.stderr)
        return 0
    if backend is None:
        import torch
        try:
            backend = VLLMBackend(args.model, device=args.device or ("cuda" if torch.cuda.is_available() else "cpu"),
                                  tensor_parallel_size=args.tp, gpu_memory_utilization=args.gpu_memory_utilization,
                                  max_model_len=args.context_window)
        except EngineStartError as error:
            raise SystemExit(str(error)) from None
    summary = run_cases(cases, store, bench.producer(backend, sampling), batch_size=args.batch_size,
                        retries=args.retries, backoff_s=args.backoff, label=f"{args.bench} generate")
    return 1 if summary.missing else 0


def score(args, bench: Bench, cases: list[dict]) -> int:
    generations = CaseStore(Path(args.out) / "generations.jsonl")
    scores = CaseStore(Path(args.out) / "scores.jsonl",
                       {"bench": args.bench, "length_limit": args.length_limit, **bench.score_settings(args)})
    by_id = {c["case_id"]: c for c in cases}
    todo = [r for r in generations.records.values() if r["case_id"] not in scores]
    pool = bench.score_pool(args) if todo else None
    try:
        for i, record in enumerate(todo, start=1):
            scores.append(bench.score(record, by_id.get(record["case_id"]), args, pool))
            if i % 50 == 0 or i == len(todo):
                print(f"[{args.bench} score] {i}/{len(todo)}", file=sys.stderr, flush=True)
    finally:
        if pool is not None:
            pool.close()
    print(f"[{args.bench} score] {len(scores)} cases scored ({len(todo)} new)", file=sys.stderr)
    return 0


def aggregate(args, bench: Bench, cases: list[dict]) -> int:
    ids = {c["case_id"] for c in cases}
    scored = [r for r in CaseStore(Path(args.out) / "scores.jsonl").records.values() if r["case_id"] in ids]
    missing = len(cases) - len(scored)
    summary, text = bench.aggregate(scored, args)
    summary.update(missing_cases=missing, bench=args.bench, run=run_identity(args))
    atomic_write_json(Path(args.out) / "summary.json", summary, sort_keys=True)
    (Path(args.out) / "summary.md").write_text(text)
    print(text)
    if missing:
        print(f"warning: {missing} of {len(cases)} cases have no score yet (rerun generate)", file=sys.stderr)
    return 1 if missing else 0


def run_identity(args) -> dict:
    """The run this evaluation scores (``results collect``): --run-dir's run_info.json, then --run-*."""
    info: dict = {}
    if args.run_dir:
        path = Path(args.run_dir) / "run_info.json"
        if not path.exists():
            raise SystemExit(f"--run-dir {args.run_dir}: no run_info.json there")
        info = json.loads(path.read_text())
    return {**info, **{key: getattr(args, f"run_{key}") for key in ("method", "seed", "step", "model")
                       if getattr(args, f"run_{key}") is not None}}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m results.evaluation", description=__doc__)
    parser.add_argument("bench", choices=tuple(benches()))
    parser.add_argument("stage", choices=("generate", "score", "aggregate", "all"))
    parser.add_argument("--out", required=True, help="output folder of this evaluation")
    parser.add_argument("--model", help="HF model folder (checkpoint); needed to generate")
    parser.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when torch sees one; cpu: the "
                        "rollout settings of conf/cluster/cpu.yaml")
    parser.add_argument("--tp", type=int, default=1, help="cuda: tensor-parallel size")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.85, help="cuda: vLLM's share of memory")
    parser.add_argument("--data", nargs="*", help="math: benchmark .json/.parquet files; toolrl: .parquet files")
    parser.add_argument("--categories", nargs="*", default=None, help="bfcl categories (default: the 14 of the paper)")
    parser.add_argument("--limit", type=int, help="first N cases per file/category (smoke runs)")
    for flag, kind in (("--samples", int), ("--temperature", float), ("--top-p", float),
                       ("--max-new-tokens", int)):
        parser.add_argument(flag, type=kind)  # default: the bench's (Bench.defaults)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=512, help="cases per engine call")
    parser.add_argument("--retries", type=int, default=3)
    parser.add_argument("--backoff", type=float, default=5.0, help="seconds before the first retry (doubling)")
    parser.add_argument("--length-limit", type=int, default=math_eval.LENGTH_LIMIT, help="math: Exceed/Joint limit")
    parser.add_argument("--length-max-words", type=int, default=bfcl_eval.THINK_WORD_LIMIT, help="bfcl: think words")
    parser.add_argument("--context-window", type=int, help="bfcl (default: the model's max_position_embeddings)")
    parser.add_argument("--score-workers", type=int, default=2, help="math: verification worker processes")
    parser.add_argument("--score-timeout", type=float, default=10.0, help="math: seconds per verification")
    parser.add_argument("--run-dir", help="training run folder whose run_info.json names the run (method, seed)")
    parser.add_argument("--run-method", help="method label, when there is no run folder (e.g. base)")
    parser.add_argument("--run-seed", type=int)
    parser.add_argument("--run-step", type=int, help="checkpoint step evaluated")
    parser.add_argument("--run-model", help="model name, when there is no run folder (e.g. qwen2.5-1.5b-instruct)")
    parser.add_argument("--boot", type=int, default=2000, help="bootstrap resamples")
    return parser


def main(argv: list[str] | None = None, backend: Backend | None = None) -> int:
    """``backend``: an engine already started for ``--model`` (the tests share one)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    bench = benches()[args.bench]
    for key, value in bench.defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if bench.needs_data and not args.data:
        raise SystemExit(f"{args.bench} needs --data")
    if missing := [p for p in args.data or [] if not os.path.exists(p)]:  # one line, not a pyarrow traceback
        raise SystemExit(f"--data {missing[0]} does not exist")
    if args.model and args.model.startswith(("/", ".", "~")) and not os.path.exists(os.path.expanduser(args.model)):
        raise SystemExit(f"--model {args.model} does not exist")
    try:
        cases = bench.load_cases(args)
    except (OSError, ValueError, KeyError) as error:  # a malformed file: name it, no traceback
        raise SystemExit(f"cannot read the {args.bench} cases from {args.data}: {error}") from None
    if args.stage in ("generate", "all") and not args.model:
        raise SystemExit("generate needs --model")
    status = generate(args, bench, cases, backend) if args.stage in ("generate", "all") else 0
    status |= score(args, bench, cases) if args.stage in ("score", "all") else 0
    return status | (aggregate(args, bench, cases) if args.stage in ("aggregate", "all") else 0)


if __name__ == "__main__":
    sys.exit(main())
