"""Rollout engines: vLLM's CPU engine against transformers `generate`, side by side in one run.

Both generate from the same randomly initialised tiny Qwen2 (saved once, loaded by each engine) with the smoke
run's rollout: 4 prompts x 8 samples = 32 sequences, temperature 1.0, top_p 1, 64 new tokens each (EOS never
stops a sequence, so both generate exactly that many), fp32. Shapes: the smoke model and one 4x larger (head_dim
32 in both: vLLM's CPU attention rejects 16). Each (engine, shape) runs in its own worker process (two vllm.LLM
engines do not share a process well, and each worker's peak RSS is its own); the parent runs them one after
another and prints one table. tokens/s = generated tokens / median wall seconds of `--repeats` timed generates,
after one warm-up; engine-up is the seconds `vllm.LLM(...)` takes to build.

    .venv/bin/python scripts/bench/rollout_engines.py
    .venv/bin/python scripts/bench/rollout_engines.py --shapes smoke --repeats 5 --out /tmp/rollout.md
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from data_prep.tiny_model import SMOKE_SHAPE  # noqa: E402

SHAPES = {
    "smoke": SMOKE_SHAPE,
    "4x": {**SMOKE_SHAPE, "hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
           "num_key_value_heads": 1, "intermediate_size": 384},
}
VOCAB, PROMPTS, SAMPLES, MAX_NEW, PAD, EOS = 800, 4, 8, 64, 0, 1
RESULT = "RESULT "  # the worker's JSON line starts with this (vLLM logs to stdout too)


def prompts(seed: int = 0) -> list[list[int]]:
    """PROMPTS random prompts of 30-60 token ids, each repeated SAMPLES times (the rollout's n=1 requests)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(30, 61, (PROMPTS,), generator=gen).tolist()
    ids = [torch.randint(2, VOCAB, (n,), generator=gen).tolist() for n in lengths]
    return [p for p in ids for _ in range(SAMPLES)]


def save_model(shape: str, directory: Path) -> Path:
    from transformers.utils import logging

    from data_prep.tiny_model import tiny_qwen2

    logging.disable_progress_bar()
    path = directory / shape
    model = tiny_qwen2(VOCAB, shape=SHAPES[shape], seed=0, tie_word_embeddings=True,
                       bos_token_id=0, eos_token_id=EOS, pad_token_id=PAD)
    model.save_pretrained(path)
    return path


def timed_runs(generate, repeats: int) -> dict:
    """Median seconds (gen_s) of `repeats` calls of generate(seed) -> generated tokens (tokens), after a warm-up."""
    generate(-1)
    seconds, tokens = [], set()
    for seed in range(repeats):
        start = time.perf_counter()
        tokens.add(generate(seed))
        seconds.append(time.perf_counter() - start)
    assert len(tokens) == 1, f"generated token counts differ between repeats: {tokens}"
    return {"gen_s": statistics.median(seconds), "tokens": tokens.pop()}


def run_vllm(path: str, repeats: int) -> dict:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    for key, value in {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_TARGET_DEVICE": "cpu",
                       "VLLM_CPU_OMP_THREADS_BIND": "nobind"}.items():
        os.environ.setdefault(key, value)
    from vllm import LLM, SamplingParams

    start = time.perf_counter()
    llm = LLM(model=path, skip_tokenizer_init=True, dtype="float32", enforce_eager=True, max_model_len=512, seed=0)
    up = time.perf_counter() - start
    requests = [{"prompt_token_ids": ids} for ids in prompts()]

    def generate(seed: int) -> int:
        params = SamplingParams(n=1, temperature=1.0, top_p=1.0, max_tokens=MAX_NEW, ignore_eos=True,
                                detokenize=False, seed=seed + 1)
        outputs = llm.generate(requests, params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outputs)

    return {"up_s": up, **timed_runs(generate, repeats)}


def run_hf(path: str, repeats: int) -> dict:
    import torch
    from transformers import Qwen2ForCausalLM

    model = Qwen2ForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None  # like ignore_eos: every row generates MAX_NEW tokens
    rows = prompts()
    width = max(map(len, rows))
    input_ids = torch.tensor([[PAD] * (width - len(r)) + r for r in rows])  # left padding
    attention_mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])

    def generate(seed: int) -> int:
        torch.manual_seed(seed + 1)
        with torch.no_grad():
            out = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=True,
                                 temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=MAX_NEW, pad_token_id=PAD)
        return out[:, width:].numel()

    return timed_runs(generate, repeats)


def worker(engine: str, path: str, repeats: int) -> None:
    result = (run_vllm if engine == "vllm" else run_hf)(path, repeats)
    result["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(RESULT + json.dumps(result), flush=True)


def measure(engine: str, path: Path, repeats: int) -> dict:
    """Run one worker of this script and return its result line."""
    env = {**os.environ, "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "WARNING")}
    proc = subprocess.run([sys.executable, __file__, "--worker", engine, str(path), "--repeats", str(repeats)],
                          capture_output=True, text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
    if proc.returncode or not lines:
        sys.stderr.write((proc.stdout + proc.stderr)[-4000:])
        raise RuntimeError(f"{engine} worker on {path} failed (exit {proc.returncode})")
    return json.loads(lines[-1][len(RESULT):])


def table(rows: dict) -> str:
    lines = ["| shape | vLLM up s | transformers tok/s | vLLM tok/s | vLLM / transformers | "
             "transformers RSS MiB | vLLM RSS MiB |", "|---|---:|---:|---:|---:|---:|---:|"]
    for shape, r in rows.items():
        hf, vl = r["hf"], r["vllm"]
        hf_tps, vl_tps = hf["tokens"] / hf["gen_s"], vl["tokens"] / vl["gen_s"]
        lines.append(f"| {shape} | {vl['up_s']:.1f} | {hf_tps:,.0f} | {vl_tps:,.0f} | {vl_tps / hf_tps:.2f} | "
                     f"{hf['rss_mib']:,.0f} | {vl['rss_mib']:,.0f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="timed generates per measurement (median)")
    parser.add_argument("--shapes", default="smoke,4x", help="comma-separated, of: " + ",".join(SHAPES))
    parser.add_argument("--out", type=Path, help="also write the table here (.json: JSON, else markdown)")
    parser.add_argument("--worker", nargs=2, metavar=("ENGINE", "MODEL_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(*args.worker, args.repeats)
        return 0
    shapes = [s for s in args.shapes.split(",") if s]
    if unknown := sorted(set(shapes) - set(SHAPES)):
        parser.error(f"unknown shapes {unknown} (known: {sorted(SHAPES)})")
    print(f"{PROMPTS} prompts x {SAMPLES} samples, {MAX_NEW} new tokens, temperature 1.0, fp32, "
          f"median of {args.repeats}, {os.cpu_count()} CPUs", flush=True)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="rollout_engines_") as tmp:
        for shape in shapes:
            path = save_model(shape, Path(tmp))
            rows[shape] = {}
            for engine in ("hf", "vllm"):
                r = rows[shape][engine] = measure(engine, path, args.repeats)
                up = f"up {r['up_s']:.1f} s, " if "up_s" in r else ""
                print(f"  {f'[{shape}]':<8} {engine:<5} {up}{r['tokens']} tokens in {r['gen_s']:.2f} s = "
                      f"{r['tokens'] / r['gen_s']:,.0f} tok/s, peak RSS {r['rss_mib']:,.0f} MiB", flush=True)
    text = table(rows)
    print("\n" + text)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) if args.out.suffix == ".json" else text + "\n")
    ratios = {s: (r["vllm"]["tokens"] / r["vllm"]["gen_s"]) / (r["hf"]["tokens"] / r["hf"]["gen_s"])
              for s, r in rows.items()}
    print("\nsummary: " + "; ".join(f"{s}: vLLM {x:.2f}x transformers tokens/s" for s, x in ratios.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
