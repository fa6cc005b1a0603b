"""`python -m tests.vllm_sync_probe DIR tied|untied`: vLLM's CPU engine on dummy weights, then the trainer's weights,
perturbed, synced twice with the project's extension; prints {"max_abs_diff": [after each sync], "dummy_diff": before
any sync} of vLLM's log-probs of fixed sequences against the transformers model's (fp32)."""

from __future__ import annotations

import json
import os
import sys

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process: collective_rpc takes tensors
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

import torch  # noqa: E402

from data_prep.tiny_model import SMOKE_SHAPE, tiny_qwen2  # noqa: E402

SEQUENCES = [list(range(5, 40)), list(range(100, 130)), [7, 300, 12, 299, 4, 4, 4, 150, 8]]


def vllm_logprobs(llm) -> list[torch.Tensor]:
    """log p(token_i | tokens_<i) for every token but the first, as vLLM's prompt log-probs report them."""
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False)
    outputs = llm.generate([{"prompt_token_ids": s} for s in SEQUENCES], params, use_tqdm=False)
    return [torch.tensor([out.prompt_logprobs[i][seq[i]].logprob for i in range(1, len(seq))])
            for out, seq in zip(outputs, SEQUENCES, strict=True)]


@torch.no_grad()
def transformers_logprobs(model) -> list[torch.Tensor]:
    return [model(torch.tensor([seq])).logits[0, :-1].float().log_softmax(-1).gather(1, torch.tensor(seq[1:])[:, None])[:, 0]
            for seq in SEQUENCES]


def max_abs_diff(llm, model) -> float:
    return max((x - y).abs().max().item() for x, y in zip(vllm_logprobs(llm), transformers_logprobs(model), strict=True))


def main(out_dir: str, kind: str) -> None:
    from vllm import LLM

    tied = kind == "tied"
    model = tiny_qwen2(320, shape=SMOKE_SHAPE, seed=0, tie_word_embeddings=tied, bos_token_id=0, eos_token_id=1,
                       pad_token_id=0).eval()
    model.save_pretrained(out_dir)
    llm = LLM(model=out_dir, skip_tokenizer_init=True, load_format="dummy", dtype="float32", enforce_eager=True,
              max_model_len=128, seed=0, worker_extension_cls="dara.verl.cpu.vllm_weights.CPUWeightSyncExtension")
    report = {"dummy_diff": max_abs_diff(llm, model), "max_abs_diff": []}
    for sync in range(2):
        torch.manual_seed(sync + 1)
        with torch.no_grad():  # the trainer's update: new values in every tensor
            for param in model.parameters():
                param.add_(torch.randn_like(param) * 0.05)
        # what verl's trainer sends: the state dict, without the tied head (the checkpoint layout)
        weights = [(name, t.clone()) for name, t in model.state_dict().items()
                   if not (tied and name == "lm_head.weight")]
        llm.collective_rpc("load_weights_in_place", args=(weights,))
        report["max_abs_diff"].append(max_abs_diff(llm, model))
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
