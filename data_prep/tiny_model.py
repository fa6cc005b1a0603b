"""The suite's one tiny-model builder: a randomly initialised, seeded Qwen2ForCausalLM of a given shape (the smoke
model's, SMOKE_SHAPE, unless `shape` overrides some fields)."""

from __future__ import annotations

# Small enough for a CPU step in seconds, with grouped-query attention and tied embeddings like the Qwen2.5 models
# of the paper. head_dim 32 (64 / 2): vLLM's CPU attention rejects head_dim 16.
SMOKE_SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
               "intermediate_size": 192, "max_position_embeddings": 512}


def tiny_qwen2(vocab_size: int, *, shape: dict | None = None, seed: int = 0, tie_word_embeddings: bool = True,
               **token_ids):
    """A Qwen2ForCausalLM of `shape`, seeded; `token_ids` (bos/eos/pad_token_id) go to its config."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    config = Qwen2Config(vocab_size=vocab_size, tie_word_embeddings=tie_word_embeddings, rms_norm_eps=1e-6,
                         rope_theta=10000.0, **token_ids, **{**SMOKE_SHAPE, **(shape or {})})
    config.architectures = ["Qwen2ForCausalLM"]
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)
