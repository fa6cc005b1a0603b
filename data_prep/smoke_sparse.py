"""The sparse-format smoke variant (docs/data.md "smoke_sparse"), for the toy headline race: warm-start targets
end in SIGN_OFF (the wrong format) except a seeded ``clean_share``, decided after the calls so that format and
correctness stay independent; the parquet rows keep the true ground truths."""

from __future__ import annotations

import random
from pathlib import Path

from data_prep import smoke
from data_prep.common import DataPrepError, write_parquet
from data_prep.smoke import group_density  # noqa: F401 (the variant's probe statistic, used by its tests)
from tasks import toolrl as protocol

N_EXTRA_TRAIN = 288  # so 34 steps of 16 prompts see no prompt twice
SIGN_OFF = "\nDone."  # plain text: no tag the format counts
# Chosen with the probe so that the step-1 format rate is in the authors' 0.01-0.05.
CLEAN_SHARE, WARM_START_STEPS = 0.04, 250
PROBE_PROMPTS, PROBE_GROUP = 96, 4  # six steps of 16 prompts; the race's group size (ToolRL's G)
# The format race's build (task=smoke_rare): a rarer format, probed on eight steps of 32 prompts (the shares tried:
# docs/data.md).
RARE_CLEAN_SHARE, RARE_PROBE_PROMPTS = 0.015, 256
DESCRIPTION = "the smoke's tiny model warm-started so that the format reward starts rare and sparse (headline race)"


def with_sign_off(output: str) -> str:
    """The ground truth with SIGN_OFF after its last block: the same calls and response, the wrong format."""
    if not output.endswith((protocol.TOOL_CALL_CLOSE, protocol.RESPONSE_CLOSE)):
        raise DataPrepError(f"a synthetic output does not end with its last block: {output[-80:]!r}")
    return output + SIGN_OFF


def warm_start_records(records: list[dict], seed: int, clean_share: float) -> list[dict]:
    """``records`` with SIGN_OFF after each output except a seeded ``clean_share`` of them."""
    rng = random.Random(seed + 1)
    return [record if rng.random() < clean_share else {**record, "output": with_sign_off(record["output"])}
            for record in records]


def build(out_dir, *, seed: int = 0, force: bool = False, clean_share: float = CLEAN_SHARE,
          probe_prompts: int = PROBE_PROMPTS) -> dict:
    """Build (or reuse) the sparse-format assets in ``out_dir``; returns {"model_dir", "train", "test"}."""
    options = {"clean_share": clean_share, "warm_start_steps": WARM_START_STEPS}
    if probe_prompts != PROBE_PROMPTS:  # the first race's builds keep their recorded options
        options["probe_prompts"] = probe_prompts
    return smoke.build_variant("smoke_sparse", out_dir, seed, force, options, smoke.code_version(Path(__file__)),
                               lambda staging: _build_into(staging, seed, clean_share, probe_prompts))


def _build_into(staging: Path, seed: int, clean_share: float, probe_prompts: int) -> dict:
    records = smoke.synthetic_records(seed, smoke.N_TRAIN + smoke.N_TEST + N_EXTRA_TRAIN)
    test = records[smoke.N_TRAIN:smoke.N_TRAIN + smoke.N_TEST]
    train = records[:smoke.N_TRAIN] + records[smoke.N_TRAIN + smoke.N_TEST:]
    tokenizer = smoke.train_tokenizer(smoke.chat_texts(records[:smoke.N_TRAIN]))
    lengths = smoke.token_lengths(tokenizer, records)
    targets = warm_start_records(train, seed, clean_share)
    kept = sum(target["output"] == record["output"] for target, record in zip(targets, train, strict=True))
    model, tokenizer, warm, card = smoke.train_model(staging, tokenizer, targets, seed, WARM_START_STEPS)
    card["tokenizer"].update(kind="byte-level BPE trained on the smoke's 256-row train corpus", **lengths)
    probe = smoke.measure_format_rate(model, tokenizer, train[:probe_prompts], seed, PROBE_GROUP)
    for channel in probe["channels"].values():
        channel["group_density"] = round(channel["groups_with_spread"] / probe["groups"], 4)
    probe["prompts"] = "the first train prompts (the race's first steps)"
    write_parquet(smoke.to_rows(train, "train"), staging / "train.parquet")
    write_parquet(smoke.to_rows(test, "test"), staging / "test.parquet")
    return {**card, "data_source": smoke.DATA_SOURCE, "splits": {"train": len(train), "test": len(test)},
            "command": f"data_prep.smoke_sparse.build(seed={seed})", "format_probe": probe,
            "warm_start": {**warm, "clean_share": clean_share, "targets_without_sign_off": kept}}


add_arguments = smoke.add_arguments


def main(args) -> dict:
    return build(args.out, seed=args.seed, force=args.force)
