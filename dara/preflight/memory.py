"""Per-GPU memory plan of a hybrid-engine run (FSDP actor/reference and vLLM sharing each GPU).

Two phases, each must fit one card (`run.hardware.gpu_memory_gib`):
- rollout: what FSDP keeps on the GPU (by offload choice) + vLLM's share (gpu_memory_utilization x card: vLLM
  refuses to start unless that much is free) + runtime overhead. Inside vLLM's share: its bf16 weights (/ TP), a
  workspace, and the KV cache, which must hold at least one request of max_model_len tokens.
- training (vLLM asleep, its cache and weights released): fp32 params + fp32 grads + fp32 Adam (2 states) sharded
  over the GPUs (verl's optimizer offload moves Adam back for the step), the bf16 reference unless offloaded, the
  FSDP all-gather of the largest unit (current + prefetch), checkpointed activations, one recomputed layer and
  the logits of a dynamic micro-batch of `ppo_max_token_len_per_gpu` tokens.
The constants below are estimates (not measured here); each term is printed with its arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from dara.preflight.facts import ModelFacts
from dara.preflight.report import Section

GIB = 1024**3
RUNTIME_OVERHEAD_GIB = 2.0  # CUDA contexts of the trainer and vLLM processes, NCCL buffers, fragmentation
VLLM_WORKSPACE_GIB = 2.0  # vLLM's activation peak and CUDA graphs, taken from its share before the KV cache
LOGITS_BYTES = 10  # per token x vocabulary entry: bf16 logits 2 + fp32 log-softmax 4 + fp32 gradient 4
RECOMPUTE_WIDTH = 16  # one recomputed decoder layer's live tensors, in units of hidden_size x 2 bytes per token


@dataclass(frozen=True)
class Term:
    name: str
    bytes: float
    formula: str

    def line(self) -> str:
        return f"{self.name:38s} {self.formula:44s} = {self.bytes / GIB:7.2f} GiB"


@dataclass(frozen=True)
class MemoryPlan:
    card_gib: float
    rollout: tuple[Term, ...]
    training: tuple[Term, ...]
    kv_space: float
    kv_request: float
    kv_per_token: int
    max_model_len: int

    @staticmethod
    def total(terms) -> float:
        return sum(t.bytes for t in terms)


def _units(facts: ModelFacts) -> tuple[float, float]:
    """(parameters of one decoder layer, of the embedding) from the facts."""
    embeddings = facts.embedding_parameters() * (1 if facts.tie_word_embeddings else 2)
    return (facts.num_parameters - embeddings) / facts.num_hidden_layers, facts.embedding_parameters()


def plan(cfg: DictConfig, facts: ModelFacts) -> MemoryPlan:
    hardware = cfg.run.hardware
    card = float(hardware.gpu_memory_gib) * GIB
    world = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)
    arr = cfg.actor_rollout_ref
    fsdp, ref_fsdp, rollout = arr.actor.fsdp_config, arr.ref.fsdp_config, arr.rollout
    p = facts.num_parameters
    ps = f"{p / 1e9:.3f}e9"
    use_ref = bool(arr.actor.use_kl_loss) or bool(cfg.algorithm.use_kl_in_reward)
    overhead = Term("runtime overhead (estimate)", RUNTIME_OVERHEAD_GIB * GIB, f"{RUNTIME_OVERHEAD_GIB} GiB")

    resident = []
    if not fsdp.param_offload:
        resident.append(Term("actor params fp32 (sharded)", 4 * p / world, f"4 B x {ps} / {world}"))
    if not fsdp.optimizer_offload:
        resident.append(Term("actor Adam states fp32 (sharded)", 8 * p / world, f"8 B x {ps} / {world}"))
    if use_ref and not ref_fsdp.param_offload:
        resident.append(Term("reference params bf16 (sharded)", 2 * p / world, f"2 B x {ps} / {world}"))
    util = float(rollout.gpu_memory_utilization)
    share = Term("vLLM share (gpu_memory_utilization)", util * card, f"{util} x {hardware.gpu_memory_gib} GiB")
    rollout_terms = (*resident, share, overhead)

    tp = int(rollout.tensor_model_parallel_size)
    weights = 2 * p / tp
    kv_space = share.bytes - weights - VLLM_WORKSPACE_GIB * GIB
    kv_per_token = facts.kv_bytes_per_token(tp)
    max_model_len = int(rollout.max_model_len or facts.max_position_embeddings)

    tokens = int(arr.actor.ppo_max_token_len_per_gpu) if arr.actor.use_dynamic_bsz else (
        int(arr.actor.ppo_micro_batch_size_per_gpu) * (int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)))
    layer, embedding = _units(facts)
    h, L = facts.hidden_size, facts.num_hidden_layers
    training = [
        Term("actor params fp32 (sharded)", 4 * p / world, f"4 B x {ps} / {world}"),
        Term("actor grads fp32 (sharded)", 4 * p / world, f"4 B x {ps} / {world}"),
        Term("actor Adam states fp32 (sharded)", 8 * p / world, f"8 B x {ps} / {world}"),
    ]
    if use_ref and not ref_fsdp.param_offload:
        training.append(Term("reference params bf16 (sharded)", 2 * p / world, f"2 B x {ps} / {world}"))
    unit = max(layer, embedding)
    training += [
        Term("FSDP all-gather (2 units bf16)", 2 * 2 * unit, f"2 x 2 B x {unit / 1e6:.1f}e6"),
        Term("checkpointed activations", tokens * h * 2 * L, f"{tokens} tok x {h} x 2 B x {L} layers"),
        Term("one recomputed layer (estimate)", tokens * h * 2 * RECOMPUTE_WIDTH, f"{tokens} tok x {h} x 2 B x {RECOMPUTE_WIDTH}"),
        Term("logits peak", tokens * facts.vocab_size * LOGITS_BYTES, f"{tokens} tok x {facts.vocab_size} x {LOGITS_BYTES} B"),
        overhead,
    ]
    return MemoryPlan(float(hardware.gpu_memory_gib), rollout_terms, tuple(training), kv_space,
                      max_model_len * kv_per_token, kv_per_token, max_model_len)


def check_memory(cfg: DictConfig, facts: ModelFacts | None, section: Section) -> MemoryPlan | None:
    if cfg.trainer.device != "cuda":
        section.line(f"trainer.device={cfg.trainer.device}: no GPU memory plan")
        return None
    if facts is None:
        section.fail("the model file has no run.model_facts: no memory plan (add them from the model's config.json)")
        return None
    result = plan(cfg, facts)
    card = result.card_gib * GIB
    gpu = cfg.run.hardware.gpu
    for phase, terms in (("rollout phase (vLLM awake)", result.rollout), ("training phase (vLLM asleep)", result.training)):
        total = MemoryPlan.total(terms)
        section.line(f"{phase}, per GPU:")
        section.lines += [f"  {t.line()}" for t in terms]
        section.line(f"  {'total':38s} {'':44s} = {total / GIB:7.2f} GiB of {result.card_gib} GiB ({gpu})")
        if total > card:
            section.fail(f"{phase} needs {total / GIB:.1f} GiB per GPU, more than the {result.card_gib} GiB of a {gpu} "
                         "(more GPUs, offloading or a smaller token budget)")
    tp = cfg.actor_rollout_ref.rollout.tensor_model_parallel_size
    section.line(f"vLLM KV cache: share {result.rollout[-2].bytes / GIB:.2f} - weights 2 B x "
                 f"{cfg.run.model_facts.num_parameters / 1e9:.3f}e9 / TP {tp} - workspace {VLLM_WORKSPACE_GIB} GiB "
                 f"= {result.kv_space / GIB:.2f} GiB")
    section.line(f"  one request of max_model_len {result.max_model_len}: {result.max_model_len} x "
                 f"{result.kv_per_token / 1024:.0f} KiB/token = {result.kv_request / GIB:.2f} GiB"
                 + (f"; {int(result.kv_space // result.kv_request)} such requests fit" if result.kv_space > 0 else ""))
    if result.kv_space < result.kv_request:
        section.fail(f"vLLM's KV cache ({result.kv_space / GIB:.1f} GiB at gpu_memory_utilization "
                     f"{cfg.actor_rollout_ref.rollout.gpu_memory_utilization}) cannot hold one request of max_model_len "
                     f"{result.max_model_len} ({result.kv_request / GIB:.1f} GiB): vLLM refuses to start; lower "
                     "rollout.max_model_len or raise gpu_memory_utilization")
    return result
