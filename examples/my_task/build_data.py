"""The data of my_task in verl's row schema: "What is A plus B?" with the sum as the ground truth.

`build(assets_dir, output_root)` is the task's asset builder (`run.assets` in task/my_task.yaml): it writes
train.parquet (64 rows) and test.parquet (8 rows) into assets_dir before the run starts. Any rows in verl's
schema work the same way: data_source, prompt (chat messages), ability, reward_model {style, ground_truth},
extra_info.
"""

import os
import random
from pathlib import Path

import pandas as pd

DATA_SOURCE = "my_task"


def rows(count: int, seed: int, split: str) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for index in range(count):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        out.append({
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": f"What is {a} plus {b}? Answer with the number."}],
            "ability": "arithmetic",
            "reward_model": {"style": "rule", "ground_truth": str(a + b)},
            "extra_info": {"split": split, "index": index},
        })
    return out


def write(frame: pd.DataFrame, path: Path) -> None:
    """Write to a temporary name, then rename: a crash never leaves half a file."""
    partial = path.with_name(path.name + ".partial")
    frame.to_parquet(partial, index=False)
    os.replace(partial, path)


def build(assets_dir, output_root) -> None:
    folder = Path(assets_dir)
    folder.mkdir(parents=True, exist_ok=True)
    write(pd.DataFrame(rows(64, seed=0, split="train")), folder / "train.parquet")
    write(pd.DataFrame(rows(8, seed=1, split="test")), folder / "test.parquet")
    print(f"[my_task] 64 train / 8 test rows in {folder}", flush=True)
