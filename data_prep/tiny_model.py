"""The suite's one tiny-model builder: a randomly initialised Qwen2ForCausalLM of a given shape.

`data_prep.smoke` builds the smoke run's model with it (its tokenizer, then a warm start that sets how often the
model already follows the output format: the data's difficulty); tests that need a model of another shape (a
checkpoint manager's, a rollout's) call `tiny_qwen2` with their own `shape`. Shapes are Qwen2 config fields.
"""

from __future__ import annotations

# The smoke model's shape: small enough for a CPU step in seconds, with grouped-query attention (1 KV head for 2
# query heads) and tied embeddings like the Qwen2.5 models the paper trains. head_dim 32 (64 / 2): vLLM's CPU
# attention rejects head_dim 16 ("Unsupported CPU attention configuration"), and 32 keeps the weight shapes.
SMOKE_SHAPE = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "intermediate_size": 192,
    "max_position_embeddings": 512,
}
SHAPE_KEYS = frozenset(SMOKE_SHAPE)


def model_shape(shape: dict | None = None) -> dict:
    """SMOKE_SHAPE with `shape`'s entries in its place; an unknown key or a head count that does not divide is an
    error naming it."""
    shape = {**SMOKE_SHAPE, **(shape or {})}
    unknown = sorted(set(shape) - SHAPE_KEYS)
    if unknown:
        raise ValueError(f"tiny model shape: unknown keys {unknown} (known: {sorted(SHAPE_KEYS)})")
    if any(not isinstance(v, int) or v <= 0 for v in shape.values()):
        raise ValueError(f"tiny model shape: every value must be a positive integer, got {shape}")
    heads, kv_heads = shape["num_attention_heads"], shape["num_key_value_heads"]
    if shape["hidden_size"] % heads or heads % kv_heads:
        raise ValueError(f"tiny model shape: hidden_size {shape['hidden_size']} must divide into "
                         f"{heads} heads and {heads} heads into {kv_heads} KV heads")
    return shape


def tiny_qwen2(vocab_size: int, *, shape: dict | None = None, seed: int = 0, tie_word_embeddings: bool = True,
               **token_ids):
    """A Qwen2ForCausalLM of `shape` (SMOKE_SHAPE's keys; missing ones as in SMOKE_SHAPE), seeded; `token_ids`
    (bos_token_id, eos_token_id, pad_token_id) go to its config."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=vocab_size, tie_word_embeddings=tie_word_embeddings, rms_norm_eps=1e-6,
                         rope_theta=10000.0, **token_ids, **model_shape(shape))
    config.architectures = ["Qwen2ForCausalLM"]
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)
