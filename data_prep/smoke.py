"""Offline assets of the CPU smoke training run: a tiny Qwen2 model, its tokenizer, a synthetic tool-calling set.

``build(out_dir, seed=0, force=False)`` writes, atomically and deterministically (same seed, machine and library
versions -> byte-identical files): ``model/`` (data_prep.tiny_model's Qwen2ForCausalLM with a byte-level BPE
tokenizer trained on the synthetic corpus, Qwen2.5's ChatML template, eos ``<|im_end|>``), ``train.parquet`` (256
rows) and ``test.parquet`` (32): verl rows, data_source "rlla", in ToolRL's format (a short system instruction
with 1-3 tools, one user request, ground truth ``<think> ... </think>`` + a tool_call and/or response block),
and ``data_card.json`` (seed, code version, hashes, warm-start loss, the format rate measured at T = 1).

The model gets a short seeded supervised warm start so that, sampled at T = 1, it produces the exact format only
part of the time: format and correctness rewards then vary within a prompt group, which the smoke run needs.
The build steps here are shared by the variants (data_prep.smoke_sparse, data_prep.smoke_length).
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from pathlib import Path

from data_prep.common import (
    DataPrepError,
    atomic_folder,
    folder_is_complete,
    make_row,
    write_data_card,
    write_parquet,
)
from data_prep.tiny_model import SMOKE_SHAPE, model_shape, tiny_qwen2
from tasks import toolrl as protocol

DATA_SOURCE = protocol.DATA_SOURCE
N_TRAIN = 256
N_TEST = 32
VOCAB_SIZE = 1024
MAX_PROMPT_TOKENS = 150
MAX_ANSWER_TOKENS = 60
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2's pre-tokenisation split (contractions, letter runs, single digits, punctuation runs, newlines, spaces).
QWEN2_PRETOKENIZE_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


# Warm start: few enough steps that samples at temperature 1.0 follow the format only part of the time.
WARM_START = {"steps": 100, "batch_size": 16, "lr": 3e-3, "weight_decay": 0.0, "threads": 1}
FORMAT_PROBE = {"samples_per_prompt": 4, "max_new_tokens": 64, "temperature": 1.0}

# Qwen2.5-Instruct's chat template restricted to plain messages (no tools): same text for the same messages,
# including the default system turn when the conversation has none.
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# --------------------------------------------------------------------------------------------------------
# synthetic tool world
# --------------------------------------------------------------------------------------------------------
TOOLS = [
    {
        "name": "weather",
        "description": "Get the weather for a city.",
        "parameters": {"city": {"description": "City name", "type": "string"}},
        "requests": [
            "What is the weather in {city}?",
            "Is it raining in {city} today?",
            "Weather for {city} please.",
        ],
        "think": "The user wants the weather in {city}.",
    },
    {
        "name": "clock",
        "description": "Get the time in a city.",
        "parameters": {"city": {"description": "City name", "type": "string"}},
        "requests": ["What time is it in {city}?", "Tell me the local time in {city}."],
        "think": "The user wants the time in {city}.",
    },
    {
        "name": "exchange",
        "description": "Convert money.",
        "parameters": {
            "amount": {"description": "Amount", "type": "int"},
            "to": {"description": "Target currency", "type": "string"},
        },
        "requests": ["Convert {amount} dollars to {to}.", "How much is {amount} USD in {to}?"],
        "think": "The user wants {amount} dollars in {to}.",
    },
    {
        "name": "stocks",
        "description": "Get a stock price.",
        "parameters": {"symbol": {"description": "Ticker symbol", "type": "string"}},
        "requests": ["What is the price of {symbol}?", "How is {symbol} stock doing?"],
        "think": "The user asks about {symbol} stock.",
    },
    {
        "name": "alarm",
        "description": "Set an alarm.",
        "parameters": {"time": {"description": "Alarm time", "type": "string"}},
        "requests": ["Set an alarm for {time}.", "Wake me up at {time}."],
        "think": "The user wants an alarm at {time}.",
    },
    {
        "name": "recipes",
        "description": "Find a recipe.",
        "parameters": {"dish": {"description": "Dish name", "type": "string"}},
        "requests": ["How do I cook {dish}?", "Find me a recipe for {dish}."],
        "think": "The user wants a recipe for {dish}.",
    },
    {
        "name": "news",
        "description": "Get news on a topic.",
        "parameters": {"topic": {"description": "News topic", "type": "string"}},
        "requests": ["Any news about {topic}?", "Show me the latest {topic} news."],
        "think": "The user wants news about {topic}.",
    },
    {
        "name": "translate",
        "description": "Translate a word.",
        "parameters": {
            "word": {"description": "Word", "type": "string"},
            "lang": {"description": "Target language", "type": "string"},
        },
        "requests": ["Translate {word} into {lang}.", "How do you say {word} in {lang}?"],
        "think": "The user wants {word} in {lang}.",
    },
]

VALUES = {
    "city": ["Paris", "London", "Tokyo", "Berlin", "Rome", "Madrid", "Oslo", "Cairo", "Lima", "Seoul"],
    "amount": [5, 10, 20, 50, 100, 250],
    "to": ["EUR", "GBP", "JPY", "CHF"],
    "symbol": ["AAPL", "MSFT", "TSLA", "AMZN", "NVDA"],
    "time": ["6am", "7am", "8pm", "noon"],
    "dish": ["pasta", "curry", "soup", "pancakes", "salad"],
    "topic": ["sports", "science", "music", "travel"],
    "word": ["hello", "water", "friend", "bread"],
    "lang": ["French", "German", "Spanish", "Italian"],
}

CHITCHAT = [
    ("Hello there!", "Hello! How can I help you today?"),
    ("Thanks for your help.", "You are welcome!"),
    ("Who are you?", "I am a helpful assistant."),
    ("Good morning!", "Good morning! What can I do for you?"),
    ("Can you tell me a joke?", "Why did the cat sit on the computer? To keep an eye on the mouse."),
]
CHITCHAT_THINK = "No tool is needed here, so I reply directly."

SHORT_SYSTEM = "You can call tools.\n**Available Tools**\n"
SHORT_FORMAT = "**Output Format**\n<think> ... </think> then <tool_call> or <response>"


def short_system_prompt(tools: list[dict]) -> str:
    """A short ToolRL-style system instruction (the full ToolRL one is ~600 tokens, too long for the smoke run)."""
    return SHORT_SYSTEM + protocol.tool_listing(tools) + SHORT_FORMAT


def _compact_parameters(parameters: dict) -> dict:
    """Parameter specs as {name: type}: ToolRL's {name: {description, type, default}} costs too many tokens."""
    return {name: spec["type"] for name, spec in parameters.items()}


def _fill(rng: random.Random, tool: dict) -> dict:
    return {name: rng.choice(VALUES[name]) for name in tool["parameters"]}


def synthetic_example(rng: random.Random) -> dict:
    """One synthetic task: the tools offered, the user request and the ToolRL ground truth output.

    Mix: about 70% one call, 10% two calls of the same tool, 20% chit-chat answered with a response only.
    """
    n_tools = rng.randint(1, 3)
    offered = rng.sample(TOOLS, n_tools)
    kind = rng.random()
    if kind < 0.2:
        request, reply = rng.choice(CHITCHAT)
        output = protocol.render_output(CHITCHAT_THINK, response=reply)
    else:
        tool = rng.choice(offered)
        args = _fill(rng, tool)
        request = rng.choice(tool["requests"]).format(**args)
        think = tool["think"].format(**args)
        calls = [{"name": tool["name"], "parameters": args}]
        if kind < 0.3 and len(tool["parameters"]) == 1:
            second = _fill(rng, tool)
            if second != args:
                (value,) = second.values()
                request = request.rstrip(".?!") + f", and also for {value}."
                think = "The user asks for two things."
                calls.append({"name": tool["name"], "parameters": second})
        output = protocol.render_output(think, calls=calls)
    public_tools = [
        {
            "name": t["name"],
            "description": t["description"],
            "parameters": _compact_parameters(t["parameters"]),
        }
        for t in offered
    ]
    return {
        "instruction": short_system_prompt(public_tools),
        "input": protocol.user_turn(request),
        "output": output,
    }


def synthetic_records(seed: int, count: int) -> list[dict]:
    rng = random.Random(seed)
    return [synthetic_example(rng) for _ in range(count)]


def to_rows(records: list[dict], split: str) -> list[dict]:
    """verl rows in the layout of ToolRL's own parquet files (extra_info keeps instruction, input, output)."""
    return [make_row(DATA_SOURCE, messages(record), record["output"], {"split": split, "index": index, **record},
                     ability=protocol.ABILITY) for index, record in enumerate(records)]


# --------------------------------------------------------------------------------------------------------
# tokenizer and model
# --------------------------------------------------------------------------------------------------------
def chat_texts(records: list[dict]) -> list[str]:
    return [
        f"<|im_start|>system\n{r['instruction']}<|im_end|>\n<|im_start|>user\n{r['input']}<|im_end|>\n"
        f"<|im_start|>assistant\n{r['output']}<|im_end|>\n"
        for r in records
    ]


def train_tokenizer(corpus: list[str]):
    """Byte-level BPE (Qwen2-style pre-tokenisation) trained on ``corpus``; returns a PreTrainedTokenizerFast."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    # The same normaliser and pre-tokeniser as Qwen2's tokenizer: AutoTokenizer loads this folder as a
    # Qwen2Tokenizer, which rebuilds them from these rules, so training must use them too.
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        model_max_length=SMOKE_SHAPE["max_position_embeddings"],
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def new_model(tokenizer, seed: int, shape: dict | None = None):
    """The smoke model of `shape` (default data_prep.tiny_model.SMOKE_SHAPE) over `tokenizer`'s vocabulary and special tokens."""
    return tiny_qwen2(len(tokenizer), shape=shape, seed=seed, bos_token_id=tokenizer.pad_token_id,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)


def supervised_batches(tokenizer, records: list[dict], rng: random.Random):
    """Endless shuffled batches of (input_ids, labels, attention_mask); loss only on the answer and <|im_end|>."""
    import torch

    examples = []
    for record in records:
        prompt_ids = tokenizer.apply_chat_template(messages(record), add_generation_prompt=True, tokenize=True,
                                                   return_dict=False)
        answer_ids = tokenizer(record["output"] + "<|im_end|>", add_special_tokens=False)["input_ids"]
        examples.append((list(prompt_ids), answer_ids))
    size = WARM_START["batch_size"]
    order: list[int] = []
    while True:
        if len(order) < size:
            fresh = list(range(len(examples)))
            rng.shuffle(fresh)
            order.extend(fresh)
        batch = [examples[i] for i in order[:size]]
        del order[:size]
        width = max(len(p) + len(a) for p, a in batch)
        ids = torch.full((size, width), tokenizer.pad_token_id, dtype=torch.long)
        labels = torch.full((size, width), -100, dtype=torch.long)
        mask = torch.zeros((size, width), dtype=torch.long)
        for row, (prompt, answer) in enumerate(batch):
            sequence = prompt + answer
            ids[row, : len(sequence)] = torch.tensor(sequence)
            labels[row, len(prompt) : len(sequence)] = torch.tensor(answer)
            mask[row, : len(sequence)] = 1
        yield ids, labels, mask


def warm_start(model, tokenizer, records: list[dict], seed: int, steps: int | None = None) -> dict:
    """A short seeded supervised fine-tune on the train outputs (`steps`, default WARM_START's: fewer steps, a
    model that follows the format less often); returns the loss trajectory summary."""
    import torch

    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=WARM_START["lr"], weight_decay=WARM_START["weight_decay"]
    )
    batches = supervised_batches(tokenizer, records, random.Random(seed))
    steps = WARM_START["steps"] if steps is None else steps
    model.train()
    losses = []
    for step in range(1, steps + 1):
        ids, labels, mask = next(batches)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if step % 25 == 0 or step == steps:
            print(
                f"[smoke] warm start step {step}/{steps} loss {sum(losses[-25:]) / len(losses[-25:]):.3f}",
                flush=True,
            )
    model.eval()
    tail = losses[-20:] or [float("nan")]
    return {"first_loss": round(losses[0], 4) if losses else None, "final_loss": round(sum(tail) / len(tail), 4),
            **WARM_START, "steps": steps}


def groups_with_spread(values: list[float], group: int) -> int:
    return sum(len(set(values[start : start + group])) > 1 for start in range(0, len(values), group))


def group_density(values: list[float], group: int) -> float:
    """The share of consecutive groups of ``group`` values that hold differing values."""
    groups = len(values) // group
    return groups_with_spread(values, group) / groups if groups else float("nan")


def response_tokens(responses, eos_token_id):
    """Tokens per sampled response [N], up to and including its first stop token (generate pads after it)."""
    import torch

    stops = torch.isin(responses, torch.tensor(eos_token_id if isinstance(eos_token_id, list) else [eos_token_id]))
    first = stops.int().argmax(1) + 1
    return torch.where(stops.any(1), first, torch.full_like(first, responses.shape[1]))


def generate(model, tokenizer, prompts: list[list[dict]], group: int, seed: int, max_new_tokens: int):
    """``group`` samples per prompt at T = 1 (top-p 1, no top-k): (texts, response tokens as `response_tokens`)."""
    import torch

    side, tokenizer.padding_side = tokenizer.padding_side, "left"  # generation continues after the prompt
    try:
        batch = tokenizer.apply_chat_template(prompts, add_generation_prompt=True, padding=True, return_tensors="pt",
                                              return_dict=True)
    finally:
        tokenizer.padding_side = side
    torch.manual_seed(seed)
    with torch.no_grad():
        generated = model.generate(**batch, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                   max_new_tokens=max_new_tokens, num_return_sequences=group)
    responses = generated[:, batch["input_ids"].shape[1] :]
    texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
    return texts, response_tokens(responses, model.generation_config.eos_token_id)


def messages(record: dict) -> list[dict]:
    return [{"role": "system", "content": record["instruction"]}, {"role": "user", "content": record["input"]}]


def measure_format_rate(model, tokenizer, records: list[dict], seed: int,
                        group: int = FORMAT_PROBE["samples_per_prompt"]) -> dict:
    """Sample each prompt ``group`` times at T = 1 and score the samples with the ToolRL reward
    (rewards.toolrl.score): the share of format-compliant samples and, per channel, how many prompt groups hold
    differing rewards (only those groups carry a learning signal for that channel)."""
    from rewards.toolrl import score

    texts, counts = generate(model, tokenizer, [messages(r) for r in records], group, seed,
                             FORMAT_PROBE["max_new_tokens"])
    scores = [{key: float(value) for key, value in score(text, records[i // group]["output"]).items()}
              for i, text in enumerate(texts)]
    channels = {}
    for channel in scores[0]:
        values = [s[channel] for s in scores]
        channels[channel] = {"mean": round(sum(values) / len(values), 4),
                             "groups_with_spread": groups_with_spread(values, group)}
    compliant = sum(s["format"] >= 1.0 for s in scores)
    return {
        "checker": "rewards.toolrl.score",
        "samples": len(texts),
        "format_compliant": compliant,
        "format_rate": round(compliant / len(texts), 4),
        "groups_with_mixed_format": channels["format"]["groups_with_spread"],
        "groups": len(records),
        "channels": channels,
        "example_sample": texts[0],
        # what a rollout of the same model and settings should give (verl's response_length/mean)
        "mean_response_tokens": round(float(counts.float().mean()), 2),
        **FORMAT_PROBE,
        "samples_per_prompt": group,
    }


def token_lengths(tokenizer, records: list[dict], check: bool = True) -> dict:
    """The longest prompt and answer in tokens; with ``check``, over MAX_PROMPT_TOKENS / MAX_ANSWER_TOKENS is an
    error."""
    prompts = [len(tokenizer.apply_chat_template(messages(r), add_generation_prompt=True, tokenize=True,
                                                 return_dict=False)) for r in records]
    answers = [len(tokenizer(r["output"], add_special_tokens=False)["input_ids"]) for r in records]
    lengths = {"max_prompt_tokens": max(prompts), "max_answer_tokens": max(answers)}
    if check and (lengths["max_prompt_tokens"] >= MAX_PROMPT_TOKENS or lengths["max_answer_tokens"] >= MAX_ANSWER_TOKENS):
        raise DataPrepError(f"synthetic rows exceed the smoke length limits: {lengths}")
    return lengths


def load(model_dir: str | os.PathLike):
    """(model, tokenizer) from a smoke model folder, offline, the way the training run loads it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)
    model.eval()
    return model, tokenizer


def generation_config(tokenizer):
    from transformers import GenerationConfig

    end_of_text = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    return GenerationConfig(bos_token_id=end_of_text, eos_token_id=[tokenizer.eos_token_id, end_of_text],
                            pad_token_id=end_of_text)


# --------------------------------------------------------------------------------------------------------
# build (shared by the smoke variants, data_prep.smoke_sparse and data_prep.smoke_length)
# --------------------------------------------------------------------------------------------------------
def code_version(*more: Path) -> str:
    """sha256 over the source files that decide the output (this module's, then a variant's ``more``): a code
    change forces a rebuild."""
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for path in (here / "smoke.py", here / "common.py", here.parent / "tasks" / "toolrl.py",
                 here.parent / "rewards" / "toolrl.py", *more):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build_variant(name: str, out_dir, seed: int, force: bool, options: dict, version: str, build_into, summary,
                  splits: tuple[str, ...] = ("train", "test")) -> dict:
    """Build (or reuse) a variant's assets in ``out_dir``; returns {"model_dir", <split>: parquet path}.

    A complete earlier build with the same seed, options and code version is reused unless ``force``. Else
    ``build_into(staging)`` (the data card's fields) runs in an atomic staging folder that replaces ``out_dir``,
    with torch on WARM_START's threads and deterministic ops (restored after); ``summary(card)`` is printed."""
    import torch

    out_dir = Path(out_dir).absolute()
    paths = {"model_dir": str(out_dir / "model"), **{split: str(out_dir / f"{split}.parquet") for split in splits}}
    expect = {"dataset": name, "seed": seed, "code_version": version, "build_options": options}
    if not force and folder_is_complete(out_dir, expect):
        print(f"[{name}] reusing complete build in {out_dir}", flush=True)
        return paths
    started = time.perf_counter()
    previous = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
    torch.set_num_threads(WARM_START["threads"])
    torch.use_deterministic_algorithms(True)
    try:
        with atomic_folder(out_dir) as staging:
            card = build_into(staging)
            card.update(expect)
            card = write_data_card(staging, card)
    finally:
        torch.set_num_threads(previous[0])
        torch.use_deterministic_algorithms(previous[1])
    print(f"[{name}] built {out_dir} in {time.perf_counter() - started:.1f}s: {summary(card)}", flush=True)
    return paths


def train_model(staging: Path, tokenizer, records: list[dict], seed: int, steps: int | None,
                shape: dict | None = None) -> tuple:
    """A new model of ``shape`` warm-started on ``records``, saved with ``tokenizer`` in staging/model; returns
    the (model, tokenizer) loaded back from that folder as a run loads them, the warm start's summary and the
    data card's fields of the build (the caller adds the tokenizer's kind and lengths)."""
    shape = model_shape(shape)
    model = new_model(tokenizer, seed, shape)
    warm = warm_start(model, tokenizer, records, seed, steps)
    model_dir = staging / "model"
    model.generation_config = generation_config(tokenizer)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    fields = {"filters": [], "inputs_sha256": {}, "versions": _versions(),
              "tokenizer": {"vocab_size": len(tokenizer), "special_tokens": SPECIAL_TOKENS},
              "model": {"architecture": "Qwen2ForCausalLM", "parameters": sum(p.numel() for p in model.parameters()),
                        **shape}}
    return (*load(model_dir), warm, fields)


def build(out_dir: str | os.PathLike, *, seed: int = 0, force: bool = False, shape: dict | None = None,
          warm_start_steps: int | None = None) -> dict:
    """Build (or reuse) the smoke assets in ``out_dir``; returns {"model_dir", "train", "test"} as paths.

    ``shape`` (Qwen2 config fields, data_prep.tiny_model.SMOKE_SHAPE by default) sets the model's size and
    ``warm_start_steps`` (WARM_START's by default) the data's difficulty for it: how often, sampled at T = 1, it
    already follows the output format."""
    shape = model_shape(shape)
    steps = WARM_START["steps"] if warm_start_steps is None else warm_start_steps
    if steps < 0:
        raise DataPrepError(f"warm_start_steps must be >= 0, got {steps}")

    def summary(card: dict) -> str:
        probe = card["format_probe"]
        return (f"train {card['splits']['train']} rows, test {card['splits']['test']} rows, format rate at T=1.0 "
                f"{probe['format_rate']:.2f} ({probe['groups_with_mixed_format']}/{probe['groups']} groups mixed)")

    return build_variant("smoke", out_dir, seed, force, {"shape": shape, "warm_start_steps": steps}, code_version(),
                         lambda staging: _build_into(staging, seed, shape, steps), summary)


def _build_into(staging: Path, seed: int, shape: dict, warm_start_steps: int) -> dict:
    records = synthetic_records(seed, N_TRAIN + N_TEST)
    train_records, test_records = records[:N_TRAIN], records[N_TRAIN:]
    print(f"[smoke] {len(train_records)} train / {len(test_records)} test synthetic tool-calling rows", flush=True)
    tokenizer = train_tokenizer(chat_texts(train_records))
    lengths = token_lengths(tokenizer, records)
    model, tokenizer, warm, card = train_model(staging, tokenizer, train_records, seed, warm_start_steps, shape)
    card["tokenizer"].update(kind="byte-level BPE trained on the synthetic train corpus", **lengths)
    probe = measure_format_rate(model, tokenizer, test_records, seed)
    write_parquet(to_rows(train_records, "train"), staging / "train.parquet")
    write_parquet(to_rows(test_records, "test"), staging / "test.parquet")
    return {**card, "data_source": DATA_SOURCE, "splits": {"train": len(train_records), "test": len(test_records)},
            "command": f"data_prep.smoke.build(seed={seed})", "warm_start": warm, "format_probe": probe}


def _versions() -> dict:
    import tokenizers
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__}


# `python -m data_prep smoke`: its one-line help and its options besides --out
DESCRIPTION = "tiny offline Qwen2 model, tokenizer and tool-calling set for the CPU smoke run"


def shape_argument(text: str) -> dict:
    """``hidden_size=128,num_hidden_layers=4`` -> {"hidden_size": 128, "num_hidden_layers": 4}."""
    import argparse

    shape = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        if not value.strip().isdigit():
            raise argparse.ArgumentTypeError(f"{item!r}: expected KEY=INTEGER")
        shape[key.strip()] = int(value)
    try:
        return model_shape(shape) and shape
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_build_arguments(parser, warm_start_steps: int, probe: tuple[int, int] | None = None) -> None:
    """--seed, --force, --warm-start-steps and (``probe``: default prompts, group size) --probe-prompts."""
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="rebuild even if a complete build is there")
    parser.add_argument("--warm-start-steps", type=int, default=warm_start_steps,
                        help=f"supervised warm-start steps (default {warm_start_steps})")
    if probe:
        parser.add_argument("--probe-prompts", type=int, default=probe[0],
                            help=f"train prompts the data card's probe samples G = {probe[1]} times (default "
                                 f"{probe[0]})")


def add_arguments(parser) -> None:
    add_build_arguments(parser, WARM_START["steps"])
    parser.add_argument("--shape", type=shape_argument, default=None,
                        help="the model's shape as Qwen2 config fields, e.g. hidden_size=128,num_hidden_layers=4 "
                             f"(default {','.join(f'{k}={v}' for k, v in SMOKE_SHAPE.items())})")


def main(args) -> dict:
    """``python -m data_prep smoke --out DIR [--seed N] [--force] [--shape K=V,...] [--warm-start-steps N]``."""
    return build(args.out, seed=args.seed, force=args.force, shape=args.shape,
                 warm_start_steps=args.warm_start_steps)
