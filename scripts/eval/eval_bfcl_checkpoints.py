"""Evaluate every kept checkpoint of a sweep on BFCL, for the checkpoint-dynamics figure.

    python scripts/eval/eval_bfcl_checkpoints.py RUNS... --eval-root EVAL [--base-model M --base-name NAME]
           [--steps 10,20,...] [--dry-run] [-- EVALUATION OPTIONS]

RUNS are run folders or folders of run folders (each holding run_info.json). Every kept HF checkpoint
``<run>/hf_checkpoints/global_step_<N>`` is evaluated into ``EVAL/<run_name>/step_<N>`` with
``python -m results.evaluation bfcl all --run-dir <run> --run-step N``; ``--base-model`` adds the base model
as ``EVAL/base/step_0`` (``--run-method base --run-model NAME``), step 0 of every curve. Options after ``--``
go to each evaluation (e.g. ``--tp 2 --gpu-memory-utilization 0.9``). An evaluation whose summary.json has no missing case
is skipped, an unfinished one resumed (the evaluation itself is resumable). One process per checkpoint, so
each engine's memory is freed. Then: ``python -m results plot dynamics EVAL --out PREFIX`` (results.dynamics).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from dara.run_folder import HF_KEPT, RUN_INFO

STEP = re.compile(r"global_step_(\d+)")


def run_folders(paths: list[str]) -> list[Path]:
    found = set()
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            raise SystemExit(f"{path}: no such run folder")
        found |= {p.parent for p in path.rglob(RUN_INFO)}
    if not found:
        raise SystemExit(f"no run folder (run_info.json) in {paths}")
    return sorted(found)


def checkpoints(run: Path, steps: set[int] | None) -> list[tuple[int, Path]]:
    """The run's kept HF checkpoints, by step."""
    kept = [(int(m[1]), p) for p in (run / HF_KEPT).glob("global_step_*") if (m := STEP.fullmatch(p.name))]
    return sorted((s, p) for s, p in kept if steps is None or s in steps)


def finished(out: Path) -> bool:
    summary = out / "summary.json"
    return summary.exists() and not json.loads(summary.read_text()).get("missing_cases", 1)


def plan(args) -> list[tuple[Path, list[str]]]:
    """(output folder, evaluation arguments) of every checkpoint to evaluate."""
    steps = {int(s) for s in args.steps.split(",")} if args.steps else None
    root = Path(args.eval_root)
    jobs = []
    if args.base_model:
        jobs.append((root / "base" / "step_0", ["--model", args.base_model, "--run-method", "base",
                                                "--run-model", args.base_name, "--run-step", "0"]))
    for run in run_folders(args.runs):
        name = json.loads((run / RUN_INFO).read_text()).get("run_name") or run.name
        for step, model in checkpoints(run, steps):
            jobs.append((root / name / f"step_{step}", ["--model", str(model), "--run-dir", str(run),
                                                        "--run-step", str(step)]))
    return jobs


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--eval-root", required=True)
    parser.add_argument("--base-model", help="the base model's folder: evaluated as step 0")
    parser.add_argument("--base-name", help="the base model's name as run_info.json writes it (--run-model)")
    parser.add_argument("--steps", help="only these steps (comma-separated)")
    parser.add_argument("--dry-run", action="store_true", help="print the evaluations, run none")
    args = parser.parse_args(argv)
    if args.base_model and not args.base_name:
        raise SystemExit("--base-model needs --base-name (e.g. qwen2.5-1.5b-instruct), the model its curves share")
    jobs = plan(args)
    failed = 0
    for i, (out, options) in enumerate(jobs, start=1):
        command = [sys.executable, "-m", "results.evaluation", "bfcl", "all", "--out", str(out), *options, *extra]
        if finished(out):
            print(f"[checkpoints] {i}/{len(jobs)} {out}: done already", flush=True)
            continue
        print(f"[checkpoints] {i}/{len(jobs)} {out}: {' '.join(command)}", flush=True)
        if not args.dry_run:
            failed += subprocess.run(command, check=False).returncode != 0
    print(f"[checkpoints] {len(jobs)} checkpoint evaluations, {failed} unfinished", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
