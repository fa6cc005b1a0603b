"""The evaluation benches, named by the tasks (`tasks.registry.TaskSpec.evaluations`; a task of one's own names its
own Bench subclass)."""

from __future__ import annotations

import json
from pathlib import Path

from results.evaluation import bfcl_eval, math_eval, toolrl_eval
from results.evaluation.runner import single_turn_producer
from tasks.registry import evaluations, load_ref


class Bench:
    """`defaults`: the paper's sampling; `carried`: the case fields single-turn records keep. A bench defines
    load_cases(args), score(record, case, args, pool), aggregate(scored, args) -> (summary, markdown) and
    flatten(summary) -> `results collect`'s columns."""

    name: str
    defaults: dict
    needs_data = True
    carried: tuple[str, ...] = ()

    def complete_generation_args(self, args) -> None:
        """Fill what generation needs from the model into args (BFCL: its context window)."""

    def producer(self, backend, sampling):
        return single_turn_producer(backend, sampling, self.carried)

    def score_pool(self, args):
        """A `rewards.pool.HardTimeoutPool` for scoring, or None (the caller closes it)."""
        return None

    def score_settings(self, args) -> dict:
        """Scoring settings stored with the scores (a rerun with others refuses to resume)."""
        return {}


class MathBench(Bench):
    name = "math"
    defaults = {"samples": 16, "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 32768}
    carried = ("answer",)

    def load_cases(self, args):
        return math_eval.load_math_cases(args.data, limit=args.limit)

    def score_pool(self, args):
        from rewards.pool import HardTimeoutPool
        return HardTimeoutPool(args.score_workers, args.score_timeout, preload=["rewards.math"])

    def score(self, record, case, args, pool):
        return math_eval.score_record(record, length_limit=args.length_limit, pool=pool)

    def aggregate(self, scored, args):
        meta = Path(args.out) / "generations.jsonl.meta.json"  # the sample count the generations were made with
        math_eval.check_complete(scored, json.loads(meta.read_text())["sampling"]["n"] if meta.exists() else args.samples)
        table = math_eval.summarise_math(scored, n_boot=args.boot, seed=args.seed)
        summary = {"benchmarks": table.to_dict("records"),
                   "verification_timeouts": int(sum(r.get("timeouts", 0) for r in scored)),
                   "olympiad_bench_copy": math_eval.olympiad_copy(table), "grading": math_eval.GRADING}
        return summary, math_eval.render_math_table(table)

    def flatten(self, summary):
        return {f"{row['benchmark']}_{m}": 100 * row[m] for row in summary["benchmarks"] for m in ("acc", "exceed", "joint")}


class ToolRLBench(Bench):
    name = "toolrl"  # greedy: verl's validation default
    defaults = {"samples": 1, "temperature": 0.0, "top_p": 1.0, "max_new_tokens": 1024}
    carried = ("ground_truth",)

    def load_cases(self, args):
        return toolrl_eval.load_toolrl_cases(args.data, limit=args.limit)

    def score(self, record, case, args, pool):
        return toolrl_eval.score_record(record)

    def aggregate(self, scored, args):
        summary = toolrl_eval.summarise_toolrl(scored, n_boot=args.boot, seed=args.seed)
        return summary, "| metric | mean | 95% CI |\n|---|---|---|\n" + "".join(
            f"| {m} | {summary[m]:.3f} | [{summary[m + '_lo']:.3f}, {summary[m + '_hi']:.3f}] |\n"
            for m in toolrl_eval.METRICS)

    def flatten(self, summary):
        return {metric: summary[metric] for metric in toolrl_eval.METRICS}


class BFCLBench(Bench):
    name = "bfcl"
    defaults = {"samples": 1, "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 8192,
                "categories": list(bfcl_eval.bfcl.CATEGORIES)}
    needs_data = False

    def producer(self, backend, sampling):
        return bfcl_eval.make_producer(backend, sampling)

    def complete_generation_args(self, args) -> None:
        if args.context_window is None:  # new tokens clamped per request to the model's window
            args.context_window = bfcl_eval.model_window(args.model)

    def load_cases(self, args):
        return bfcl_eval.load_bfcl_cases(args.categories, limit=args.limit)

    def score_settings(self, args) -> dict:
        return {"length_max_words": args.length_max_words}

    def score(self, record, case, args, pool):
        return bfcl_eval.score_record(record, case, length_max_words=args.length_max_words)

    def aggregate(self, scored, args):
        summary = bfcl_eval.summarise_bfcl(scored)
        return summary, bfcl_eval.render_bfcl_table(summary)

    def flatten(self, summary):
        row = {}
        for kind in summary.get("kinds", ("accuracy", "format")):
            row.update({f"{group}_{kind}": value for group, value in (summary.get(f"groups_{kind}") or {}).items()})
            row.update({f"{category}_{kind}": values[kind] for category, values in summary.get("categories", {}).items()})
        return {**row, "over_window_cases": summary.get("over_window_cases", 0)}


MATH, TOOLRL, BFCL = MathBench(), ToolRLBench(), BFCLBench()


def benches() -> dict[str, Bench]:
    return {name: load_ref(ref) for name, ref in evaluations().items()}
