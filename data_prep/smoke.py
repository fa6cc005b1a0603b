"""Offline assets of the CPU smoke run (docs/data.md "smoke"): a tiny Qwen2 model with a BPE tokenizer trained on a
synthetic ToolRL-format tool-calling set, warm-started so that it follows the format only part of the time at T = 1
(format and correctness rewards then vary within a prompt group). Deterministic: same seed, machine and library
versions -> byte-identical files. The build steps are shared by data_prep.smoke_sparse and data_prep.smoke_length.
"""

from __future__ import annotations

import hashlib
import random
import time
from pathlib import Path

from data_prep import common
from data_prep.tiny_model import SMOKE_SHAPE, tiny_qwen2
from tasks import toolrl as protocol

DATA_SOURCE = protocol.DATA_SOURCE
N_TRAIN, N_TEST, VOCAB_SIZE = 256, 32, 1024
MAX_PROMPT_TOKENS, MAX_ANSWER_TOKENS = 150, 60
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2's pre-tokenisation split (contractions, letter runs, single digits, punctuation runs, newlines, spaces).
QWEN2_PRETOKENIZE_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
WARM_START = {"steps": 100, "batch_size": 16, "lr": 3e-3, "weight_decay": 0.0, "threads": 1}
FORMAT_PROBE = {"samples_per_prompt": 4, "max_new_tokens": 64, "temperature": 1.0}
DESCRIPTION = "tiny offline Qwen2 model, tokenizer and tool-calling set for the CPU smoke run"

# Qwen2.5-Instruct's chat template for plain messages (no tools), with its default system turn.
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\\n' }}{%- endif %}{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# The synthetic tool world: (name, description, {parameter: type}, request templates, thought template).
TOOLS = [
    ("weather", "Get the weather for a city.", {"city": "string"},
     ["What is the weather in {city}?", "Is it raining in {city} today?", "Weather for {city} please."],
     "The user wants the weather in {city}."),
    ("clock", "Get the time in a city.", {"city": "string"},
     ["What time is it in {city}?", "Tell me the local time in {city}."], "The user wants the time in {city}."),
    ("exchange", "Convert money.", {"amount": "int", "to": "string"},
     ["Convert {amount} dollars to {to}.", "How much is {amount} USD in {to}?"],
     "The user wants {amount} dollars in {to}."),
    ("stocks", "Get a stock price.", {"symbol": "string"},
     ["What is the price of {symbol}?", "How is {symbol} stock doing?"], "The user asks about {symbol} stock."),
    ("alarm", "Set an alarm.", {"time": "string"}, ["Set an alarm for {time}.", "Wake me up at {time}."],
     "The user wants an alarm at {time}."),
    ("recipes", "Find a recipe.", {"dish": "string"}, ["How do I cook {dish}?", "Find me a recipe for {dish}."],
     "The user wants a recipe for {dish}."),
    ("news", "Get news on a topic.", {"topic": "string"},
     ["Any news about {topic}?", "Show me the latest {topic} news."], "The user wants news about {topic}."),
    ("translate", "Translate a word.", {"word": "string", "lang": "string"},
     ["Translate {word} into {lang}.", "How do you say {word} in {lang}?"], "The user wants {word} in {lang}."),
]
VALUES = {
    "city": ["Paris", "London", "Tokyo", "Berlin", "Rome", "Madrid", "Oslo", "Cairo", "Lima", "Seoul"],
    "amount": [5, 10, 20, 50, 100, 250], "to": ["EUR", "GBP", "JPY", "CHF"],
    "symbol": ["AAPL", "MSFT", "TSLA", "AMZN", "NVDA"], "time": ["6am", "7am", "8pm", "noon"],
    "dish": ["pasta", "curry", "soup", "pancakes", "salad"], "topic": ["sports", "science", "music", "travel"],
    "word": ["hello", "water", "friend", "bread"], "lang": ["French", "German", "Spanish", "Italian"],
}
CHITCHAT = [
    ("Hello there!", "Hello! How can I help you today?"), ("Thanks for your help.", "You are welcome!"),
    ("Who are you?", "I am a helpful assistant."), ("Good morning!", "Good morning! What can I do for you?"),
    ("Can you tell me a joke?", "Why did the cat sit on the computer? To keep an eye on the mouse."),
]


def synthetic_example(rng: random.Random) -> dict:
    """One task {instruction, input, output}: 1-3 offered tools (parameters as {name: type}, ToolRL's full specs
    cost too many tokens); about 70% one call, 10% two calls of one tool, 20% chit-chat answered with a response."""
    offered = rng.sample(TOOLS, rng.randint(1, 3))
    kind = rng.random()
    if kind < 0.2:
        request, reply = rng.choice(CHITCHAT)
        output = protocol.render_output("No tool is needed here, so I reply directly.", response=reply)
    else:
        name, _, parameters, requests, think = rng.choice(offered)
        args = {key: rng.choice(VALUES[key]) for key in parameters}
        request, think = rng.choice(requests).format(**args), think.format(**args)
        calls = [{"name": name, "parameters": args}]
        if kind < 0.3 and len(parameters) == 1:
            second = {key: rng.choice(VALUES[key]) for key in parameters}
            if second != args:
                request = request.rstrip(".?!") + f", and also for {next(iter(second.values()))}."
                think = "The user asks for two things."
                calls.append({"name": name, "parameters": second})
        output = protocol.render_output(think, calls=calls)
    tools = [{"name": name, "description": text, "parameters": parameters} for name, text, parameters, *_ in offered]
    instruction = ("You can call tools.\n**Available Tools**\n" + protocol.tool_listing(tools)
                   + "**Output Format**\n<think> ... </think> then <tool_call> or <response>")
    return {"instruction": instruction, "input": protocol.user_turn(request), "output": output}


def synthetic_records(seed: int, count: int) -> list[dict]:
    return [synthetic_example(rng) for rng in [random.Random(seed)] for _ in range(count)]


def messages(record: dict) -> list[dict]:
    return [{"role": "system", "content": record["instruction"]}, {"role": "user", "content": record["input"]}]


def to_rows(records: list[dict], split: str) -> list[dict]:
    """verl rows in the layout of ToolRL's own parquet files (extra_info keeps instruction, input, output)."""
    return [common.make_row(DATA_SOURCE, messages(r), r["output"], {"split": split, "index": index, **r},
                            ability=protocol.ABILITY) for index, r in enumerate(records)]


def chat_texts(records: list[dict]) -> list[str]:
    return [f"<|im_start|>system\n{r['instruction']}<|im_end|>\n<|im_start|>user\n{r['input']}<|im_end|>\n"
            f"<|im_start|>assistant\n{r['output']}<|im_end|>\n" for r in records]


def train_tokenizer(corpus: list[str]):
    """Byte-level BPE trained on ``corpus`` with Qwen2's NFC normaliser and pre-tokeniser (AutoTokenizer loads the
    folder as a Qwen2Tokenizer, which rebuilds exactly those); returns a PreTrainedTokenizerFast."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(corpus, trainer=trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token=None, bos_token=None, clean_up_tokenization_spaces=False,
                                   model_max_length=SMOKE_SHAPE["max_position_embeddings"])
    fast.chat_template = CHAT_TEMPLATE
    return fast


def new_model(tokenizer, seed: int):
    """The smoke model (data_prep.tiny_model.SMOKE_SHAPE) over ``tokenizer``'s vocabulary and special tokens."""
    return tiny_qwen2(len(tokenizer), seed=seed, bos_token_id=tokenizer.pad_token_id,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)


def prompt_ids(tokenizer, chat: list[dict]) -> list[int]:
    return list(tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False))


def warm_start(model, tokenizer, records: list[dict], seed: int, steps: int) -> dict:
    """Seeded supervised fine-tune on the outputs (loss on the answer and <|im_end|> only; shuffled batches of
    WARM_START's size, reshuffled each pass); returns the loss summary for the data card."""
    import torch
    examples = [(prompt_ids(tokenizer, messages(r)),
                 tokenizer(r["output"] + "<|im_end|>", add_special_tokens=False)["input_ids"]) for r in records]
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=WARM_START["lr"], weight_decay=WARM_START["weight_decay"])
    rng, size, order, losses = random.Random(seed), WARM_START["batch_size"], [], []
    model.train()
    for _ in range(steps):
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
            ids[row, :len(prompt) + len(answer)] = torch.tensor(prompt + answer)
            labels[row, len(prompt):len(prompt) + len(answer)] = torch.tensor(answer)
            mask[row, :len(prompt) + len(answer)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    tail = losses[-20:] or [float("nan")]
    return {"first_loss": round(losses[0], 4) if losses else None, "final_loss": round(sum(tail) / len(tail), 4),
            **WARM_START, "steps": steps}


def groups_with_spread(values: list[float], group: int) -> int:
    return sum(len(set(values[start:start + group])) > 1 for start in range(0, len(values), group))


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
    """``group`` samples per prompt at T = 1 (top-p 1, no top-k): (texts, response tokens)."""
    import torch
    tokenizer.padding_side = "left"  # the probe's tokenizer, loaded after the model folder was written
    batch = tokenizer.apply_chat_template(prompts, add_generation_prompt=True, padding=True, return_tensors="pt",
                                          return_dict=True)
    torch.manual_seed(seed)
    with torch.no_grad():
        generated = model.generate(**batch, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                   max_new_tokens=max_new_tokens, num_return_sequences=group)
    responses = generated[:, batch["input_ids"].shape[1]:]
    texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
    return texts, response_tokens(responses, model.generation_config.eos_token_id)


def measure_format_rate(model, tokenizer, records: list[dict], seed: int,
                        group: int = FORMAT_PROBE["samples_per_prompt"]) -> dict:
    """Sample each prompt ``group`` times at T = 1, score with rewards.toolrl.score: the format rate and, per
    channel, how many prompt groups hold differing rewards (only those carry a learning signal)."""
    from rewards.toolrl import score
    texts, counts = generate(model, tokenizer, [messages(r) for r in records], group, seed,
                             FORMAT_PROBE["max_new_tokens"])
    scores = [{key: float(value) for key, value in score(text, records[i // group]["output"]).items()}
              for i, text in enumerate(texts)]
    channels = {channel: {"mean": round(sum(s[channel] for s in scores) / len(scores), 4),
                          "groups_with_spread": groups_with_spread([s[channel] for s in scores], group)}
                for channel in scores[0]}
    compliant = sum(s["format"] >= 1.0 for s in scores)
    return {"checker": "rewards.toolrl.score", "samples": len(texts), "format_compliant": compliant,
            "format_rate": round(compliant / len(texts), 4),
            "groups_with_mixed_format": channels["format"]["groups_with_spread"], "groups": len(records),
            "channels": channels, "example_sample": texts[0],
            "mean_response_tokens": round(float(counts.float().mean()), 2),  # verl's response_length/mean
            **FORMAT_PROBE, "samples_per_prompt": group}


def token_lengths(tokenizer, records: list[dict], check: bool = True) -> dict:
    """The longest prompt and answer in tokens; with ``check``, reaching MAX_PROMPT_TOKENS / MAX_ANSWER_TOKENS is
    an error."""
    lengths = {"max_prompt_tokens": max(len(prompt_ids(tokenizer, messages(r))) for r in records),
               "max_answer_tokens": max(len(tokenizer(r["output"], add_special_tokens=False)["input_ids"])
                                        for r in records)}
    if check and (lengths["max_prompt_tokens"] >= MAX_PROMPT_TOKENS or lengths["max_answer_tokens"] >= MAX_ANSWER_TOKENS):
        raise common.DataPrepError(f"synthetic rows exceed the smoke length limits: {lengths}")
    return lengths


def load(model_dir):
    """(model, tokenizer) from a smoke model folder, offline, the way the training run loads them."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    return AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval(), tokenizer


def code_version(*more: Path) -> str:
    """sha256 of the source files that decide the output (and a variant's ``more``): a code change forces a rebuild."""
    here = Path(__file__).parent
    digest = hashlib.sha256()
    for path in (here / "smoke.py", here / "common.py", here.parent / "tasks" / "toolrl.py",
                 here.parent / "rewards" / "toolrl.py", *more):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build_variant(name: str, out_dir, seed: int, force: bool, options: dict, version: str, build_into,
                  splits: tuple[str, ...] = ("train", "test")) -> dict:
    """{"model_dir", <split>: parquet path} of a variant's assets in ``out_dir``: a complete build with the same seed,
    options and code version is reused unless ``force``; else ``build_into(staging)`` (-> the data card's fields)
    runs in an atomic staging folder, torch on WARM_START's threads and deterministic ops (restored after)."""
    import torch
    out_dir = Path(out_dir).absolute()
    paths = {"model_dir": str(out_dir / "model"), **{split: str(out_dir / f"{split}.parquet") for split in splits}}
    expect = {"dataset": name, "seed": seed, "code_version": version, "build_options": options}
    if not force and common.folder_is_complete(out_dir, expect):
        print(f"[{name}] reusing complete build in {out_dir}", flush=True)
        return paths
    started, previous = time.perf_counter(), (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
    torch.set_num_threads(WARM_START["threads"])
    torch.use_deterministic_algorithms(True)
    try:
        with common.atomic_folder(out_dir) as staging:
            common.write_data_card(staging, {**build_into(staging), **expect})
    finally:
        torch.set_num_threads(previous[0])
        torch.use_deterministic_algorithms(previous[1])
    print(f"[{name}] built {out_dir} in {time.perf_counter() - started:.1f}s", flush=True)
    return paths


def train_model(staging: Path, tokenizer, records: list[dict], seed: int, steps: int) -> tuple:
    """A new model warm-started on ``records``, saved with ``tokenizer`` in staging/model; returns the (model,
    tokenizer) loaded back as a run loads them, the warm start's summary and the data card's common fields."""
    import tokenizers
    import torch
    import transformers
    model = new_model(tokenizer, seed)
    warm = warm_start(model, tokenizer, records, seed, steps)
    end_of_text = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=end_of_text, eos_token_id=[tokenizer.eos_token_id, end_of_text], pad_token_id=end_of_text)
    model.save_pretrained(staging / "model")
    tokenizer.save_pretrained(staging / "model")
    fields = {"filters": [], "inputs_sha256": {},
              "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                           "tokenizers": tokenizers.__version__},
              "tokenizer": {"vocab_size": len(tokenizer), "special_tokens": SPECIAL_TOKENS},
              "model": {"architecture": "Qwen2ForCausalLM", "parameters": sum(p.numel() for p in model.parameters()),
                        **SMOKE_SHAPE}}
    return (*load(staging / "model"), warm, fields)


def build(out_dir, *, seed: int = 0, force: bool = False) -> dict:
    """Build (or reuse) the smoke assets in ``out_dir``; returns {"model_dir", "train", "test"} as paths."""
    options = {"shape": dict(SMOKE_SHAPE), "warm_start_steps": WARM_START["steps"]}
    return build_variant("smoke", out_dir, seed, force, options, code_version(),
                         lambda staging: _build_into(staging, seed))


def _build_into(staging: Path, seed: int) -> dict:
    records = synthetic_records(seed, N_TRAIN + N_TEST)
    train, test = records[:N_TRAIN], records[N_TRAIN:]
    tokenizer = train_tokenizer(chat_texts(train))
    lengths = token_lengths(tokenizer, records)
    model, tokenizer, warm, card = train_model(staging, tokenizer, train, seed, WARM_START["steps"])
    card["tokenizer"].update(kind="byte-level BPE trained on the synthetic train corpus", **lengths)
    probe = measure_format_rate(model, tokenizer, test, seed)
    common.write_parquet(to_rows(train, "train"), staging / "train.parquet")
    common.write_parquet(to_rows(test, "test"), staging / "test.parquet")
    return {**card, "data_source": DATA_SOURCE, "splits": {"train": len(train), "test": len(test)},
            "command": f"data_prep.smoke.build(seed={seed})", "warm_start": warm, "format_probe": probe}


def add_arguments(parser) -> None:
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="rebuild even if a complete build is there")


def main(args) -> dict:
    return build(args.out, seed=args.seed, force=args.force)
