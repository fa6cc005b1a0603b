"""`python scripts/testbed_headline.py`: the pure-torch testbed's answer for the toy headline race's setting.

The race's batch and groups (16 prompts x G = 4, 2 updates per step), its starting format rate (0.03, the
sparse variant's probe), its four methods and five seeds, and its protocol's metric and threshold
(results/cpu_headline/protocol.json), with the testbed's own policy, task, learning rate and a longer horizon
(the testbed learns slower per step). Writes results/cpu_headline/testbed_curves.csv (one row per run and step)
and prints, per method, the median-curve step and the per-seed steps, as the race's summary does.
"""

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
from results import headline  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--format-init-rate", type=float, default=0.03)
    parser.add_argument("--out", default=str(ROOT / "results" / "cpu_headline" / "testbed_curves.csv"))
    args = parser.parse_args(argv)
    protocol = headline.load_protocol()
    task = TaskConfig(format_init_rate=args.format_init_rate)
    rows = []
    for method in headline.METHODS:
        for seed in range(args.seeds):
            config = RunConfig(estimator=method, seed=seed, num_prompts=int(protocol["prompts_per_step"]),
                               group_size=int(protocol["group_size"]), steps=args.steps,
                               options=estimator_options(method, task))
            records, _ = train_run(task, config)
            rows += [{"method": method, "seed": seed, "step": step, **record}
                     for step, record in enumerate(records, 1)]
            last = records[-1][protocol["metric"]]
            print(f"[testbed] {method} seed {seed}: {args.steps} steps, final {protocol['metric']} {last:.3f}",
                  flush=True)
    frame = pd.DataFrame(rows)
    columns = ["method", "seed", "step", *[c for c in frame.columns if c.startswith(("reward/", "density/",
                                                                                      "weight/"))]]
    atomic_write_text(Path(args.out), frame[columns].to_csv(index=False, lineterminator="\n"))
    summary = headline.summary_table(frame, protocol["metric"], float(protocol["threshold"]))
    print(f"wrote {args.out}\n{protocol['metric']} >= {protocol['threshold']} (testbed, B=16, G=4, "
          f"format at init {args.format_init_rate}):")
    print(headline.markdown_table(summary[["method", "median_curve_step", "seed_steps", "reached", "runs"]]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
