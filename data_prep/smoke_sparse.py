"""The sparse-format smoke variant (docs/data.md "smoke_sparse"): the paper's starting regime, a rare and
sparse format reward beside a correctness reward that varies within most groups, for the toy headline race.

Most warm-start targets are the ground truth followed by a short sign-off (SIGN_OFF): the same thinking, calls
and response, but ToolRL's format requires the text to end at its last block. A seeded share ``CLEAN_SHARE``
ends at the block, and sampled at T = 1 the model stops right after its last block about that often; the
decision comes after the calls, so format and correctness stay independent. The parquet rows keep the true
ground truths. The build is data_prep.smoke's: the smoke's tokenizer, 544 train rows (the smoke's 256, then 288
more), its 32 test rows; the card's ``format_probe`` samples the first PROBE_PROMPTS train prompts G = 4 times.
"""

from __future__ import annotations

import random
from pathlib import Path

from data_prep import smoke
from data_prep.common import DataPrepError, write_parquet
from data_prep.smoke import group_density  # noqa: F401 (the variant's probe statistic, used by its tests)
from tasks import toolrl as protocol

N_SMOKE_TRAIN = smoke.N_TRAIN       # the smoke's train rows come first (and train the tokenizer)
N_EXTRA_TRAIN = 288                 # further rows, so 34 steps of 16 prompts see no prompt twice
N_TEST = smoke.N_TEST
SIGN_OFF = "\nDone."               # plain text: no tag the format counts
# The share of warm-start targets without the sign-off (the exact format), and the warm start's length:
# chosen with the probe below so that the step-1 format rate is in the authors' 0.01-0.05.
CLEAN_SHARE = 0.04
WARM_START_STEPS = 250
PROBE_PROMPTS = 96                  # six steps of 16 prompts
# The format race's build (task=smoke_rare, recipes/race_format.py): a rarer format, probed on more prompts.
# Clean shares tried before any race run, with the format rate over 352 prompts x 4 (the card's 96, then 256
# more): 0.04 -> 0.031 (96 only), 0.03 -> 0.015, 0.025 -> 0.003 (96 only), 0.02 -> 0.030, 0.015 -> 0.022. The
# rate is not monotone in the share (which few targets are clean matters); 0.015 sits nearest the race's 0.02.
RARE_CLEAN_SHARE = 0.015
RARE_PROBE_PROMPTS = 256            # eight steps of 32 prompts
PROBE_GROUP = 4                     # the race's group size (ToolRL's G)


def with_sign_off(output: str) -> str:
    """The ground truth with SIGN_OFF after its last block: the same calls and response (correctness reads the
    first tool_call block), the wrong format (ToolRL's format ends at the last required block)."""
    if not output.endswith((protocol.TOOL_CALL_CLOSE, protocol.RESPONSE_CLOSE)):
        raise DataPrepError(f"a synthetic output does not end with its last block: {output[-80:]!r}")
    return output + SIGN_OFF


def warm_start_records(records: list[dict], seed: int, clean_share: float) -> list[dict]:
    """``records`` with SIGN_OFF after each output except a seeded ``clean_share`` of them."""
    rng = random.Random(seed + 1)
    return [record if rng.random() < clean_share else {**record, "output": with_sign_off(record["output"])}
            for record in records]


def probe(model, tokenizer, records: list[dict], seed: int) -> dict:
    """`smoke.measure_format_rate` on ``records`` (G = PROBE_GROUP, T = 1), plus each channel's group density."""
    result = smoke.measure_format_rate(model, tokenizer, records, seed, PROBE_GROUP)
    for channel in result["channels"].values():
        channel["group_density"] = round(channel["groups_with_spread"] / result["groups"], 4)
    result["prompts"] = "the first train prompts (the race's first steps)"
    return result


def build(out_dir, *, seed: int = 0, force: bool = False, clean_share: float = CLEAN_SHARE,
          warm_start_steps: int = WARM_START_STEPS, probe_prompts: int = PROBE_PROMPTS) -> dict:
    """Build (or reuse) the sparse-format assets in ``out_dir``; returns {"model_dir", "train", "test"}."""
    if not 0.0 <= clean_share <= 1.0:
        raise DataPrepError(f"clean_share must be in [0, 1], got {clean_share}")
    if warm_start_steps < 0:
        raise DataPrepError(f"warm_start_steps must be >= 0, got {warm_start_steps}")
    if not PROBE_GROUP <= probe_prompts <= N_SMOKE_TRAIN + N_EXTRA_TRAIN:
        raise DataPrepError(f"probe_prompts must be in [{PROBE_GROUP}, {N_SMOKE_TRAIN + N_EXTRA_TRAIN}] (the train "
                            f"rows), got {probe_prompts}")
    options = {"clean_share": clean_share, "warm_start_steps": warm_start_steps}
    if probe_prompts != PROBE_PROMPTS:  # the first race's builds keep their recorded options
        options["probe_prompts"] = probe_prompts

    def summary(card: dict) -> str:
        found = card["format_probe"]
        density = {name: channel["group_density"] for name, channel in found["channels"].items()}
        return f"format rate at T=1 {found['format_rate']:.3f}, group density {density} over {found['groups']} groups"

    return smoke.build_variant(
        "smoke_sparse", out_dir, seed, force, options, smoke.code_version(Path(__file__)),
        lambda staging: _build_into(staging, seed, clean_share, warm_start_steps, probe_prompts), summary)


def _build_into(staging: Path, seed: int, clean_share: float, warm_start_steps: int, probe_prompts: int) -> dict:
    records = smoke.synthetic_records(seed, N_SMOKE_TRAIN + N_TEST + N_EXTRA_TRAIN)
    smoke_train, test = records[:N_SMOKE_TRAIN], records[N_SMOKE_TRAIN:N_SMOKE_TRAIN + N_TEST]
    train = smoke_train + records[N_SMOKE_TRAIN + N_TEST:]
    tokenizer = smoke.train_tokenizer(smoke.chat_texts(smoke_train))
    lengths = smoke.token_lengths(tokenizer, records)
    targets = warm_start_records(train, seed, clean_share)
    kept = sum(target["output"] == record["output"] for target, record in zip(targets, train, strict=True))
    print(f"[smoke_sparse] warm start on {len(train)} rows, {kept} without the sign-off", flush=True)
    model, tokenizer, warm, card = smoke.train_model(staging, tokenizer, targets, seed, warm_start_steps)
    card["tokenizer"].update(kind="byte-level BPE trained on the smoke's 256-row train corpus", **lengths)
    found = probe(model, tokenizer, train[:probe_prompts], seed)
    write_parquet(smoke.to_rows(train, "train"), staging / "train.parquet")
    write_parquet(smoke.to_rows(test, "test"), staging / "test.parquet")
    return {**card, "data_source": smoke.DATA_SOURCE, "splits": {"train": len(train), "test": len(test)},
            "command": f"data_prep.smoke_sparse.build(seed={seed})", "format_probe": found,
            "warm_start": {**warm, "clean_share": clean_share, "targets_without_sign_off": kept}}


DESCRIPTION = "the smoke's tiny model warm-started so that the format reward starts rare and sparse (headline race)"


def add_arguments(parser) -> None:
    smoke.add_build_arguments(parser, WARM_START_STEPS, (PROBE_PROMPTS, PROBE_GROUP))
    parser.add_argument("--clean-share", type=float, default=CLEAN_SHARE,
                        help=f"share of warm-start targets without the sign-off (default {CLEAN_SHARE})")


def main(args) -> dict:
    """``python -m data_prep smoke_sparse --out DIR [--seed N] [--force] [--clean-share X] [--warm-start-steps N]
    [--probe-prompts N]``."""
    return build(args.out, seed=args.seed, force=args.force, clean_share=args.clean_share,
                 warm_start_steps=args.warm_start_steps, probe_prompts=args.probe_prompts)
