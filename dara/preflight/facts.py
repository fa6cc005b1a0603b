"""Model facts (`run.model_facts` in conf/model/*.yaml): the numbers the preflight's arithmetic needs.

Each model file copies them from the model's config.json on the hub (the file's comment names the source);
`facts_from_config_json` reads the same numbers from a config.json so a local copy can be checked against them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from omegaconf import DictConfig, OmegaConf


@dataclass(frozen=True)
class ModelFacts:
    num_parameters: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int  # the MLP's width (gate / up projections), for the recompute term of the memory plan
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool

    def kv_bytes_per_token(self, tensor_parallel: int = 1, dtype_bytes: int = 2) -> int:
        """K and V of every layer for one token on one GPU (KV heads split over TP, replicated when fewer)."""
        heads_per_gpu = max(1, self.num_key_value_heads // max(1, tensor_parallel))
        return 2 * self.num_hidden_layers * heads_per_gpu * self.head_dim * dtype_bytes

    def embedding_parameters(self) -> int:
        return self.vocab_size * self.hidden_size


FACT_KEYS = tuple(f.name for f in fields(ModelFacts))


def facts_from_mapping(values: Mapping, where: str = "run.model_facts") -> ModelFacts:
    missing = [key for key in FACT_KEYS if values.get(key) is None]
    if missing:
        raise ValueError(f"{where} lacks {missing}")
    return ModelFacts(**{key: (bool(values[key]) if key == "tie_word_embeddings" else int(values[key]))
                         for key in FACT_KEYS})


def model_facts(cfg: DictConfig) -> ModelFacts | None:
    """The composed run's model facts, or None when the model file keeps none."""
    node = OmegaConf.select(cfg, "run.model_facts", default=None)
    if node is None:
        return None
    return facts_from_mapping(OmegaConf.to_container(node, resolve=True))


def facts_from_config_json(config: Mapping, num_parameters: int) -> ModelFacts:
    """The facts of a transformers config.json (head_dim defaults to hidden_size / heads, as transformers does)."""
    values = dict(config)
    if values.get("head_dim") is None:
        values["head_dim"] = values["hidden_size"] // values["num_attention_heads"]
    values.setdefault("num_key_value_heads", values["num_attention_heads"])
    values.setdefault("tie_word_embeddings", True)
    values["num_parameters"] = num_parameters
    return facts_from_mapping(values, "config.json")


def parameters_of_qwen(facts: ModelFacts, *, qkv_bias: bool, qk_norm: bool) -> int:
    """Parameter count of a Qwen2/Qwen3 decoder from its shape (checks the facts' num_parameters)."""
    intermediate_size = facts.intermediate_size
    h, q = facts.hidden_size, facts.num_attention_heads * facts.head_dim
    kv = facts.num_key_value_heads * facts.head_dim
    attention = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if qkv_bias else 0) + (2 * facts.head_dim if qk_norm else 0)
    layer = attention + 3 * h * intermediate_size + 2 * h
    embeddings = facts.embedding_parameters() * (1 if facts.tie_word_embeddings else 2)
    return facts.num_hidden_layers * layer + embeddings + h
