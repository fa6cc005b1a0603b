"""``python -m results <command>``: thresholds, table, plot, collect, report, headline
(see docs/results.md)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import pandas as pd

import dara
from dara.io import atomic_write_text
from results import plots, tables, thresholds
from results.loaders import RunLogError, load_runs


def _csv_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def write_text(text: str, out: str | None) -> None:
    if out is None:
        sys.stdout.write(text)
    else:
        atomic_write_text(Path(out), text)
        print(f"wrote {out}", file=sys.stderr)


# What `thresholds` and `table` read when given no runs: the authors' published files in the repository.
AUTHORS_CURVES = "reference/training_dynamics.csv"
AUTHORS_PER_RUN = "paper_bfcl_v4_20260920/final_per_run.csv"


def authors_default(runs: list[str], relative: str) -> list[str]:
    if runs:
        return runs
    path = dara.AUTHORS_REFERENCE / relative
    print(f"reading the authors' published {path} (no runs given)", file=sys.stderr)
    return [str(path)]


def cmd_thresholds(args) -> None:
    out = thresholds.threshold_steps(load_runs(authors_default(args.runs, AUTHORS_CURVES)), args.metric, args.threshold,
                                     rule=args.rule, group_by=args.group_by, per_seed=args.per_seed,
                                     window=args.window, hold=args.hold)
    if args.seed_summary:  # per run, then over seeds (the paper's math T_0.95 / T_0.99)
        if not args.per_seed:
            raise SystemExit("--seed-summary needs --per-seed (one step per run first)")
        out = thresholds.seed_summary(out, [*args.group_by, "method"])
    write_text(out.to_csv(index=False, lineterminator="\n") if args.format == "csv" else tables.markdown_table(out),
               args.out)


def cmd_table(args) -> None:
    summary = tables.build_table(authors_default(args.runs, AUTHORS_PER_RUN), args.metrics, group_by=args.group_by,
                                 step=args.step, drop_if=args.drop_if or [], attach=args.attach or [],
                                 paper=args.paper)
    write_text(tables.render(summary, args.group_by, args.metrics, args.format, args.digits), args.out)


def cmd_plot(args) -> None:
    if args.kind != "channels" and not args.metrics:
        raise SystemExit(f"plot {args.kind} needs --metrics")
    if args.kind == "curves":
        written = plots.plot_curves(load_runs(args.runs), args.metrics, args.out, group_by=args.group_by,
                                    thresholds=args.threshold or [])
    elif args.kind == "channels":
        written = plots.plot_channels(load_runs(args.runs), args.out, group_by=args.group_by)
    else:
        table = pd.concat([tables.read_paper_table(p) for p in args.runs], ignore_index=True)
        written = plots.plot_checkpoints(table, args.metrics, args.out, group_by=args.group_by)
    for path in written:
        print(f"wrote {path}", file=sys.stderr)


def cmd_collect(args) -> None:
    from results.collect import collect
    write_text(collect(args.folders).to_csv(index=False, lineterminator="\n"), args.out)


def cmd_report(args) -> None:
    from results.report import DEFAULT_REFERENCE, build_report
    page = build_report(args.runs, args.out, reference=args.reference or DEFAULT_REFERENCE, threshold=args.threshold,
                        threshold_metric=args.threshold_metric, source=args.source)
    print(f"wrote {page}", file=sys.stderr)


def cmd_headline(args) -> None:
    from results.headline import write_headline
    write_headline(args.run_root, args.protocol, args.out, methods=args.methods)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m results", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("thresholds", help="first step a metric reaches a threshold (median or sustained rule)")
    p.add_argument("runs", nargs="*", help="runs or curve CSVs (default: reference/dara_authors/" + AUTHORS_CURVES + ")")
    p.add_argument("--metric", required=True)
    p.add_argument("--threshold", type=float, required=True)
    p.add_argument("--rule", choices=thresholds.RULES, default="median")
    p.add_argument("--group-by", type=_csv_list, default=[], help="extra grouping columns, e.g. model_size")
    p.add_argument("--per-seed", action="store_true", help="one step per run instead of the seed-median curve")
    p.add_argument("--seed-summary", action="store_true", help="with --per-seed: a summary over seeds per method")
    p.add_argument("--window", type=int, default=10, help="sustained rule: trailing-mean window (steps)")
    p.add_argument("--hold", type=int, default=20, help="sustained rule: steps the mean must stay above X")
    p.add_argument("--format", choices=("csv", "md"), default="csv")
    p.add_argument("--out")
    p.set_defaults(func=cmd_thresholds)
    p = sub.add_parser("table", help="mean and sample sd over seeds per method and metric")
    p.add_argument("runs", nargs="*", help="per-run CSVs or runs (default: reference/dara_authors/" + AUTHORS_PER_RUN + ")")
    p.add_argument("--metrics", type=_csv_list, required=True)
    p.add_argument("--group-by", type=_csv_list, default=["method"])
    p.add_argument("--step", help="curves: the step to read (an integer or 'last')")
    p.add_argument("--attach", nargs=2, action="append", metavar=("CURVES", "METRIC@STEP"),
                   help="add each run's curve value at a step as column METRIC@STEP")
    p.add_argument("--drop-if", action="append", metavar="COND", help="drop runs where COND holds, e.g. 'val_format@100<0.8'")
    p.add_argument("--paper", help="the paper's per-method table, shown beside ours")
    p.add_argument("--format", choices=("md", "csv", "latex"), default="md")
    p.add_argument("--digits", type=int, default=2)
    p.add_argument("--out")
    p.set_defaults(func=cmd_table)
    p = sub.add_parser("plot", help="training curves, DARA channel curves, checkpoint curves (PNG + PDF)")
    p.add_argument("kind", choices=("curves", "channels", "checkpoints"))
    p.add_argument("runs", nargs="+", help="runs (curves, channels) or summary CSVs (checkpoints)")
    p.add_argument("--metrics", type=_csv_list, default=[])
    p.add_argument("--group-by", type=_csv_list, default=[])
    p.add_argument("--threshold", action="append", metavar="[METRIC=]X",
                   help="horizontal reference line on every panel, or on METRIC's panels only (repeatable)")
    p.add_argument("--out", required=True, help="output prefix; writes PREFIX.png and PREFIX.pdf")
    p.set_defaults(func=cmd_plot)
    p = sub.add_parser("collect", help="evaluation summaries (summary.json) -> one per-run CSV for 'table'")
    p.add_argument("folders", nargs="+", help="evaluation folders (searched for summary.json)")
    p.add_argument("--out", help="CSV path (default: stdout)")
    p.set_defaults(func=cmd_collect)
    p = sub.add_parser("report", help="one static page for a sweep: tables beside the paper's, figures, provenance")
    p.add_argument("runs", nargs="+", help="sweep folders (run folders below them), per-run or curve CSVs")
    p.add_argument("--out", required=True, help="output folder (index.html and PNGs)")
    p.add_argument("--reference", help="the authors' published files (default: reference/dara_authors)")
    p.add_argument("--threshold", type=float, default=0.8, help="threshold of the step table (default 0.8)")
    p.add_argument("--threshold-metric", help="curve metric of the step table (default: reward/format/mean or train_format)")
    p.add_argument("--source", choices=("auto", "jsonl", "wandb"), default="auto",
                   help="a run folder's metrics.jsonl (auto: when present) or its wandb files")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("headline", help="a CPU race's runs.csv, thresholds.csv, statistics.csv, summary.md, figure")
    p.add_argument("run_root", metavar="RUN_ROOT", help="the race's output root (pilot runs left out) or its runs.csv")
    p.add_argument("--protocol", help="the committed protocol (default: OUT/protocol.json)")
    p.add_argument("--methods", type=_csv_list, default=None,
                   help="methods in table order (default: the protocol's, else grpo,gdpo,dara_sym,dara_asym)")
    p.add_argument("--out", required=True, help="output folder, e.g. results/cpu_headline")
    p.set_defaults(func=cmd_headline)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (RunLogError, KeyError, ValueError, OSError) as err:  # OSError: a missing or unreadable file
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
