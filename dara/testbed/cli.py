"""Command line of the testbed: run the studies, write the outputs, print the summary tables."""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from dara.io import atomic_write_json
from dara.testbed import report
from dara.testbed.experiments import RunResult, Study, full_studies, quick_studies, run_study

DEFAULT_OUT = Path("results/testbed")
DEFAULT_QUICK_OUT = Path("outputs/testbed_quick")  # outputs/ is git-ignored: CI never dirties results/


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m dara.testbed", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few seeds and steps (CI size; timing in docs/measured.md)")
    parser.add_argument("--out", type=Path, help=f"output folder (default {DEFAULT_OUT}, --quick: {DEFAULT_QUICK_OUT})")
    parser.add_argument("--studies", help="comma-separated subset of the studies (default: all)")
    parser.add_argument("--estimators", help="comma-separated subset of each study's estimators (registered names)")
    parser.add_argument("--estimator-module", action="append", default=[], metavar="PATH",
                        help="a module of estimators of your own (a .py file, an import path or pkg://module), "
                             "loaded first: every study also runs its estimators (those of them --estimators "
                             "names, when given); repeatable")
    parser.add_argument("--seeds", type=int, help="seeds of the main study (default 8; --quick 2)")
    parser.add_argument("--steps", type=int, help="training steps per run")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: the runs are tiny)")
    return parser.parse_args(argv)


def load_modules(specs: list[str]) -> list[str]:
    """Load each module of estimators; the names they registered, in order. A bad module exits in one line."""
    from dara.estimators import EstimatorModuleError, load_estimator_module
    names: list[str] = []
    for spec in specs:
        try:
            names += [n for n in load_estimator_module(spec).names if n not in names]
        except EstimatorModuleError as error:
            raise SystemExit(f"testbed: {error}") from None
    return names


def select_studies(args: argparse.Namespace) -> list[Study]:
    from dara.estimators import ESTIMATOR_NAMES
    own = load_modules(getattr(args, "estimator_module", None) or [])
    chosen = args.estimators.split(",") if args.estimators else None
    if chosen and (unknown := [e for e in chosen if e not in ESTIMATOR_NAMES]):
        raise SystemExit(f"testbed: unknown estimator(s) {unknown}; registered: {', '.join(ESTIMATOR_NAMES)}"
                         + ("" if own else " (one of your own: --estimator-module PATH)"))
    if args.quick:
        studies = [replace(s, seeds=args.seeds or s.seeds, steps=args.steps or s.steps)
                   for s in quick_studies()]
    else:
        studies = full_studies(**{k: v for k, v in (("seeds", args.seeds), ("steps", args.steps)) if v})
    if args.studies:
        wanted = args.studies.split(",")
        unknown = set(wanted) - {s.name for s in studies}
        if unknown:
            raise SystemExit(f"unknown studies {sorted(unknown)}; choose from {[s.name for s in studies]}")
        studies = [s for s in studies if s.name in wanted]
    # every study also runs the estimators of --estimator-module; --estimators keeps those it names
    studies = [replace(s, estimators=tuple(e for e in dict.fromkeys((*s.estimators, *own))
                                           if not chosen or e in chosen)) for s in studies]
    if chosen and not any(s.estimators for s in studies):
        raise SystemExit(f"no study runs any of the estimators {chosen}")
    return [s for s in studies if s.estimators]


def write_outputs(out: Path, studies: list[Study], results: dict[str, list[RunResult]]) -> list[dict[str, object]]:
    """Every file of a testbed run; returns the summary rows."""
    out.mkdir(parents=True, exist_ok=True)
    everything = [r for name in results for r in results[name]]
    rows = report.summary_rows(everything)
    report.write_summary(out / "summary.csv", rows)
    report.write_runs(out / "runs.csv", everything)
    report.write_run_logs(out / "runs", everything)
    for study in studies:
        report.write_steps(out / f"steps_{study.name}.csv", study, results[study.name])
        for g in study.group_sizes:
            report.plot_curves(out / f"curves_{study.name}_G{g}.png", study, results[study.name], g)
    config = {s.name: {**asdict(s), "task": asdict(s.task)} for s in studies}
    atomic_write_json(out / "config.json", config, default=str)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    studies = select_studies(args)
    out = args.out or (DEFAULT_QUICK_OUT if args.quick else DEFAULT_OUT)
    total = sum(s.num_runs for s in studies)
    print(f"testbed: {len(studies)} studies, {total} runs -> {out}", flush=True)
    start = time.perf_counter()
    results = {}
    for study in studies:
        print(f"== study {study.name}: {study.description}", flush=True)
        results[study.name] = run_study(study, log=lambda line: print(line, flush=True))
    rows = write_outputs(out, studies, results)
    for study in studies:
        print(f"\n### {study.name}: {study.description}\n{report.format_table(rows, study.name)}")
    print(f"\ntestbed: {total} runs in {time.perf_counter() - start:.0f}s; outputs in {out}/")
    return 0
