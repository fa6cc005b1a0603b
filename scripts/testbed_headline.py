"""`python scripts/testbed_headline.py [--race cpu_headline|race_format]`: the pure-torch testbed at a CPU race's
setting (batch, groups, starting format rate, methods, seeds): ``testbed_curves.csv`` in the race's results folder,
and per threshold the per-method steps and paired statistics (docs/headline_cpu.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dara.io import atomic_write_text  # noqa: E402
from dara.testbed.task import TaskConfig  # noqa: E402
from dara.testbed.train import RunConfig, estimator_options, train_run  # noqa: E402
from results import headline, race_stats  # noqa: E402

RACES = {
    "cpu_headline": {"prompts": 16, "format_init_rate": 0.03, "seeds": 5, "thresholds": None},
    "race_format": {"prompts": 32, "format_init_rate": 0.02, "seeds": 12,
                    "thresholds": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)},
}
METRIC = "reward/format/mean"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--race", choices=sorted(RACES), default="cpu_headline")
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args(argv)
    race = RACES[args.race]
    out_dir = ROOT / "results" / args.race
    thresholds = race["thresholds"] or (float(headline.load_protocol(out_dir / "protocol.json")["threshold"]),)
    task = TaskConfig(format_init_rate=race["format_init_rate"])
    rows = []
    for method in headline.METHODS:
        for seed in range(race["seeds"]):
            config = RunConfig(estimator=method, seed=seed, num_prompts=race["prompts"], group_size=4,
                               steps=args.steps, options=estimator_options(method, task))
            records, _ = train_run(task, config)
            rows += [{"method": method, "seed": seed, "step": step, **record}
                     for step, record in enumerate(records, 1)]
            print(f"[testbed] {method} seed {seed}: {args.steps} steps, final {METRIC} {records[-1][METRIC]:.3f}",
                  flush=True)
    frame = pd.DataFrame(rows)
    columns = ["method", "seed", "step", *[c for c in frame.columns if c.startswith(("reward/", "density/", "weight/"))]]
    out = out_dir / "testbed_curves.csv"
    atomic_write_text(out, frame[columns].to_csv(index=False, lineterminator="\n"))
    print(f"wrote {out}")
    for threshold in thresholds:
        summary = headline.summary_table(frame, METRIC, threshold)
        print(f"\n{METRIC} >= {threshold:g} (testbed, B={race['prompts']}, G=4, format at init "
              f"{race['format_init_rate']}, {args.steps} steps):")
        print(headline.markdown_table(summary[["method", "median_curve_step", "seed_steps", "reached", "runs"]]))
        steps = race_stats.threshold_endpoint(frame, METRIC, threshold, args.steps)
        print(headline.markdown_table(race_stats.comparisons_table({"threshold step": steps})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
