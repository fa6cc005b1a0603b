"""`python -m dara.trl.smoke` (`make smoke-trl`): the tool-calling smoke run through TRL's GRPOTrainer.

The tiny offline model and data of `python -m data_prep smoke` (built or reused in `--assets`), the ToolRL
channels as TRL reward functions, a few GRPO steps on the CPU with one line per step; `SMOKE_SETTINGS` follow
the verl smoke task (conf/task/smoke.yaml).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

DEFAULT_ASSETS = Path("outputs/assets/smoke")

SMOKE_SETTINGS = dict(  # 8 prompts x 4 completions per step
    num_generations=4, per_device_train_batch_size=32, max_completion_length=64, temperature=1.0, top_p=1.0,
    learning_rate=1e-4, beta=0.0, use_cpu=True, bf16=False, gradient_checkpointing=False, logging_steps=1,
    save_strategy="no", report_to="none", disable_tqdm=True, dataloader_num_workers=0)


def smoke_config(output_dir: str | Path, **overrides):
    """A `DaraGRPOConfig` with the smoke settings; `overrides` replace or add fields."""
    from dara.trl import DaraGRPOConfig
    from dara.trl.toolrl import toolrl_reward_ranges
    values = {**SMOKE_SETTINGS, "estimator": "dara_asym", "reward_ranges": toolrl_reward_ranges(), **overrides}
    return DaraGRPOConfig(output_dir=str(output_dir), **values)


def smoke_trainer(assets: dict, config, trainer_class=None, callbacks=None):
    """A trainer (`DaraGRPOTrainer` unless `trainer_class`) of the smoke model on the smoke train set."""
    from transformers import PrinterCallback, ProgressCallback

    from dara.trl import DaraGRPOTrainer
    from dara.trl.toolrl import toolrl_dataset, toolrl_reward_funcs
    from data_prep import smoke
    model, tokenizer = smoke.load(assets["model_dir"])
    model.train()
    trainer = (trainer_class or DaraGRPOTrainer)(model=model, processing_class=tokenizer, reward_funcs=toolrl_reward_funcs(),
                                                 args=config, train_dataset=toolrl_dataset(assets["train"]),
                                                 callbacks=callbacks)
    for quiet in (PrinterCallback, ProgressCallback):  # the step line replaces transformers' log printing
        trainer.remove_callback(quiet)
    return trainer


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(prog="python -m dara.trl.smoke", description=__doc__.splitlines()[0])
    parser.add_argument("--assets", type=Path, default=DEFAULT_ASSETS, help="data_prep smoke folder (built if missing)")
    parser.add_argument("--out", type=Path, default=None, help="TRL output_dir (default outputs/trl-smoke-<estimator>)")
    parser.add_argument("--estimator", default="dara_asym", help="a dara.estimators name")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    from datasets.utils import logging as datasets_logging
    from transformers.utils import logging as hf_logging

    from dara.trl import StepLineCallback
    from data_prep import smoke
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    datasets_logging.disable_progress_bar()
    assets = smoke.build(args.assets, seed=0)
    out = args.out or Path("outputs") / f"trl-smoke-{args.estimator}"
    config = smoke_config(out, estimator=args.estimator, max_steps=args.steps, seed=args.seed)
    progress = StepLineCallback()
    trainer = smoke_trainer(assets, config, callbacks=[progress])
    print(f"[dara.trl] TRL GRPOTrainer, estimator {args.estimator} (batch_norm {config.batch_norm}), reward functions "
          f"{', '.join(trainer.reward_func_names)}, {args.steps} steps of {config.per_device_train_batch_size} "
          f"completions ({config.num_generations} per prompt), output {out}", flush=True)
    trainer.train()
    print(f"[dara.trl] {len(progress.lines)} steps in {time.perf_counter() - started:.0f}s (assets included)", flush=True)
    return progress.lines


if __name__ == "__main__":
    main()
