"""Per-GPU memory plan of a hybrid-engine run (FSDP actor/reference and vLLM sharing each GPU), in verl
0.9.1's terms: the rollout, weight-sync and training phases must each fit one card, each term naming its verl
key. The terms, the logits' bytes (`logits_bytes`: verl's `prepare_model_outputs` and `forward_step`) and the
SDPA padding are described in docs/experiments.md ("Preflight", memory); the constants are estimates, which
`python -m recipes gpu_smoke` measures against.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from dara.preflight.facts import ModelFacts
from dara.preflight.report import Section

GIB = 1024**3
CUDA_CONTEXT_GIB = 0.5  # one process's CUDA context (the trainer rank's; vLLM's worker keeps its own)
RUNTIME_OVERHEAD_GIB = 1.5  # NCCL buffers, allocator fragmentation
VLLM_WORKSPACE_GIB = 2.0  # vLLM's activation peak and CUDA graphs, taken from its share before the KV cache
VLLM_ASLEEP_GIB = 1.0  # a sleeping vLLM worker: its CUDA context + graph pools (0.5 with enforce_eager)
BF16, FP32 = 2, 4
HEADROOM = 0.10
TOKEN_STEP = 1024  # a suggested token budget is a multiple of this
SDPA_PADDING_FACTOR = 2.0  # padded / real tokens of a dynamic micro-batch without remove-padding
DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}


@dataclass(frozen=True)
class Term:
    name: str
    bytes: float
    formula: str

    def line(self) -> str:
        return f"{self.name:64s} {self.formula:42s} = {self.bytes / GIB:7.2f} GiB"


@dataclass(frozen=True)
class MemoryPlan:
    card_gib: float
    rollout: tuple[Term, ...]
    weight_sync: tuple[Term, ...]
    training: tuple[Term, ...]
    kv_space: float
    kv_per_token: int
    max_model_len: int
    attention: str
    micro_batch_tokens: int  # the tokens the training terms are planned at (padded under SDPA)

    @staticmethod
    def total(terms) -> float:
        return sum(t.bytes for t in terms)

    def phases(self) -> tuple[tuple[str, tuple[Term, ...]], ...]:
        return (("rollout phase (vLLM awake)", self.rollout), ("weight sync (vLLM weights resumed)", self.weight_sync),
                ("training phase (vLLM asleep)", self.training))


def dtype_bytes(name) -> int:
    if str(name) not in DTYPE_BYTES:
        raise ValueError(f"unknown model dtype {name!r}; known: {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[str(name)]


def layer_width(facts: ModelFacts) -> int:
    """Live bf16 values per token while one decoder layer is recomputed and back-propagated: hidden-sized tensors
    with their gradients (6 h), q / k / v and the attention output with gradients (2 (q + 2 kv)), the MLP's gate,
    up, activation and product with gradients (6 I)."""
    q, kv = facts.num_attention_heads * facts.head_dim, facts.num_key_value_heads * facts.head_dim
    return 6 * facts.hidden_size + 2 * (q + 2 * kv) + 6 * facts.intermediate_size


def attention_of(cfg: DictConfig) -> tuple[str, bool]:
    model = cfg.actor_rollout_ref.model
    attention = str((model.get("override_config", None) or {}).get("attn_implementation", "flash_attention_2"))
    return attention, bool(model.get("use_remove_padding", False))


def micro_batch_tokens(cfg: DictConfig) -> tuple[int, int]:
    """(real, planned) tokens of one training micro-batch (padded under SDPA)."""
    arr, data = cfg.actor_rollout_ref, cfg.data
    tokens = int(arr.actor.ppo_max_token_len_per_gpu) if arr.actor.use_dynamic_bsz else (
        int(arr.actor.ppo_micro_batch_size_per_gpu) * (int(data.max_prompt_length) + int(data.max_response_length)))
    return tokens, tokens if attention_of(cfg)[1] else int(tokens * SDPA_PADDING_FACTOR)


@dataclass(frozen=True)
class LogitsBytes:
    """(bytes, what) alive at once per token x vocabulary entry in an update and in a log-prob pass."""

    update: tuple[tuple[int, str], ...]
    log_prob: tuple[tuple[int, str], ...]

    @property
    def peak(self) -> int:
        return max(sum(b for b, _ in self.update), sum(b for b, _ in self.log_prob))

    def text(self) -> str:
        return "; ".join(f"{name} {sum(b for b, _ in parts)} B = " + " + ".join(f"{b} {what}" for b, what in parts)
                         for name, parts in (("update", self.update), ("log-prob pass", self.log_prob)))


def logits_bytes(cfg: DictConfig) -> LogitsBytes:
    actor = cfg.actor_rollout_ref.actor
    entropy_grads = float(actor.entropy_coeff) != 0 or bool(actor.get("calculate_entropy", False))
    compiled = bool(actor.fsdp_config.get("use_torch_compile", True))
    logits = [(BF16, "bf16 logits")]
    if float(cfg.actor_rollout_ref.rollout.temperature) != 1.0:
        logits.append((BF16, "temperature-scaled copy"))
    eager_entropy = (2 * FP32, "fp32 input copy and softmax of the uncompiled entropy")
    if attention_of(cfg)[1]:  # padding removed
        update = list(logits)
        if entropy_grads:
            update += [(BF16, f"cross-entropy gradient (not in place: entropy_coeff {actor.entropy_coeff})"),
                       (BF16, "entropy gradient")] + ([] if compiled else [(FP32, "fp32 softmax the eager entropy keeps")])
        else:
            update[0] = (BF16, "bf16 logits (the cross-entropy gradient is written into them)")
        log_prob = [*logits, (FP32, "fp32 softmax of the compiled entropy") if compiled else eager_entropy]
    else:
        update = [*logits, (BF16, "unpadded copy"), (FP32, "fp32 log-softmax kept (no flash-attn)"),
                  (BF16, "its gradient")]
        if entropy_grads:
            update += [(FP32, "fp32 softmax the uncompiled entropy keeps"), (BF16, "entropy gradient")]
        log_prob = [*logits, eager_entropy]
    return LogitsBytes(tuple(update), tuple(log_prob))


def _state_terms(cfg: DictConfig, facts: ModelFacts, world: int, *, with_grads: bool, params_always: bool):
    arr = cfg.actor_rollout_ref
    actor, ref = arr.actor.fsdp_config, arr.ref.fsdp_config
    p, ps = facts.num_parameters, f"{facts.num_parameters / 1e9:.3f}e9"

    def term(name: str, per_param: int) -> Term:
        return Term(name, per_param * p / world, f"{per_param} B x {ps} / {world}")

    dtype, ref_dtype = actor.get("model_dtype", "fp32"), ref.get("model_dtype", "fp32")
    terms = []
    if params_always or not actor.param_offload:
        terms.append(term(f"actor params (actor.fsdp_config.model_dtype {dtype})", dtype_bytes(dtype)))
    if with_grads:
        terms.append(term("actor grads (in the params' dtype)", dtype_bytes(dtype)))
    if with_grads or not actor.optimizer_offload:
        terms.append(term("actor Adam, 2 fp32 states (actor.optim)", 8))
    if (arr.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward) and not ref.param_offload:
        terms.append(term(f"reference params (ref.fsdp_config.model_dtype {ref_dtype})", dtype_bytes(ref_dtype)))
    return terms


def plan(cfg: DictConfig, facts: ModelFacts) -> MemoryPlan:
    hardware, rollout = cfg.run.hardware, cfg.actor_rollout_ref.rollout
    card = float(hardware.gpu_memory_gib) * GIB
    world = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)
    runtime = [Term("trainer CUDA context (estimate)", CUDA_CONTEXT_GIB * GIB, f"{CUDA_CONTEXT_GIB} GiB"),
               Term("NCCL buffers, fragmentation (estimate)", RUNTIME_OVERHEAD_GIB * GIB, f"{RUNTIME_OVERHEAD_GIB} GiB")]
    util = float(rollout.gpu_memory_utilization)
    share = Term("vLLM share (rollout.gpu_memory_utilization)", util * card, f"{util} x {hardware.gpu_memory_gib} GiB")
    tp, vllm_dtype = int(rollout.tensor_model_parallel_size), rollout.get("dtype", "bfloat16")
    weights = Term(f"vLLM weights (rollout.dtype {vllm_dtype}) / TP", dtype_bytes(vllm_dtype) * facts.num_parameters
                   / tp, f"{dtype_bytes(vllm_dtype)} B x {facts.num_parameters / 1e9:.3f}e9 / {tp}")
    bucket_mb = int(rollout.get("checkpoint_engine", {}).get("update_weights_bucket_megabytes", 2048))
    embedding = facts.embedding_parameters()
    layer = (facts.num_parameters - embedding * (1 if facts.tie_word_embeddings else 2)) / facts.num_hidden_layers
    sync = (*_state_terms(cfg, facts, world, with_grads=False, params_always=True), weights,
            Term("weight-sync bucket (update_weights_bucket_megabytes)", bucket_mb * 2**20, f"{bucket_mb} MiB"),
            Term("largest gathered tensor (embedding, bf16)", 2 * embedding, f"2 B x {embedding / 1e6:.1f}e6"),
            *runtime)
    _, tokens = micro_batch_tokens(cfg)
    h, L, width, unit = facts.hidden_size, facts.num_hidden_layers, layer_width(facts), max(layer, embedding)
    asleep = VLLM_ASLEEP_GIB / (2 if rollout.get("enforce_eager", False) else 1)
    training = [*_state_terms(cfg, facts, world, with_grads=True, params_always=True),
                Term("FSDP all-gather, 2 units bf16 (fsdp_config)", 2 * 2 * unit, f"2 x 2 B x {unit / 1e6:.1f}e6")]
    if cfg.actor_rollout_ref.model.get("enable_gradient_checkpointing", False):
        training += [Term("checkpointed activations (model.enable_gradient_checkpointing)", tokens * h * BF16 * L,
                          f"{tokens} tok x {h} x 2 B x {L} layers"),
                     Term("one recomputed layer (h, heads, MLP width; estimate)", tokens * width * BF16,
                          f"{tokens} tok x {width} x 2 B")]
    else:
        training.append(Term("activations of every layer (no checkpointing; estimate)", tokens * width * BF16 * L,
                             f"{tokens} tok x {width} x 2 B x {L} layers"))
    per_entry = logits_bytes(cfg).peak
    training += [Term("logits peak (actor.ppo_max_token_len_per_gpu; bytes: below)",
                      tokens * facts.vocab_size * per_entry, f"{tokens} tok x {facts.vocab_size} x {per_entry} B"),
                 Term("vLLM asleep: context + graphs (rollout.free_cache_engine; estimate)", asleep * GIB,
                      f"{asleep} GiB"), *runtime]
    return MemoryPlan(float(hardware.gpu_memory_gib),
                      (*_state_terms(cfg, facts, world, with_grads=False, params_always=False), share, *runtime),
                      sync, tuple(training), share.bytes - weights.bytes - VLLM_WORKSPACE_GIB * GIB,
                      facts.kv_bytes_per_token(tp), int(rollout.max_model_len or facts.max_position_embeddings),
                      attention_of(cfg)[0], tokens)


def token_budget_hint(result: MemoryPlan, cfg: DictConfig) -> str:
    """The token budget per GPU whose training phase fits (the token terms scale linearly with it), at a multiple of
    TOKEN_STEP keeping HEADROOM free, or that none fits."""
    real, planned = micro_batch_tokens(cfg)
    per_token = sum(t.bytes for t in result.training if " tok " in t.formula) / planned
    fixed = result.total(result.training) - per_token * planned

    def fits(free: float) -> int:
        return max(0, int(((1 - free) * result.card_gib * GIB - fixed) / (per_token * planned / real)))

    sequence = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
    if fits(0) < sequence:
        return (f"no token budget per GPU fits: it must hold one prompt + response ({sequence} tokens) and at most "
                f"{fits(0)} fit" + ("; flash_attention_2 (make flash-attn) removes the padding"
                                    if result.attention != "flash_attention_2" else ""))
    keep = fits(HEADROOM) // TOKEN_STEP * TOKEN_STEP
    return (f"actor.ppo_max_token_len_per_gpu and the log-prob budgets <= {fits(0)} fit: run.hardware."
            f"{cfg.run.model_scale}.max_token_len_per_gpu={max(keep, sequence)} sets the three"
            + (f" and keeps {HEADROOM:.0%} free" if keep >= sequence else ""))


def check_memory(cfg: DictConfig, facts: ModelFacts | None, section: Section) -> MemoryPlan | None:
    if cfg.trainer.device != "cuda":
        section.line(f"trainer.device={cfg.trainer.device}: no GPU memory plan")
        return None
    if facts is None:
        section.fail("the model file has no run.model_facts: no memory plan (add them from the model's config.json)")
        return None
    result = plan(cfg, facts)
    real, planned = micro_batch_tokens(cfg)
    card, gpu = result.card_gib * GIB, cfg.run.hardware.gpu
    section.line(f"attention: {result.attention} (run.attention -> model.override_config.attn_implementation; " + (
        "remove padding: micro-batches of real tokens)" if planned == real else "no remove padding: micro-batches "
        f"padded to their longest sequence, planned at {SDPA_PADDING_FACTOR} x {real} = {planned} tokens (estimate))"))
    sp = int(cfg.actor_rollout_ref.actor.get("ulysses_sequence_parallel_size", 1) or 1)
    if planned != real and sp > 1:  # verl's FSDP engine asserts it at start-up
        section.fail(f"Ulysses sequence parallelism (actor.ulysses_sequence_parallel_size={sp}) needs "
                     "model.use_remove_padding, which needs flash_attention_2: run.attention=flash_attention_2")
    for phase, terms in result.phases():
        total, training = MemoryPlan.total(terms), phase.startswith("training")
        free = f"{1 - total / card:.0%} free" if total <= card else f"{(total - card) / GIB:.2f} GiB over"
        section.lines += [f"{phase}, per GPU:", *(f"  {t.line()}" for t in terms),
                          f"  {'total':64s} {'':42s} = {total / GIB:7.2f} GiB of {result.card_gib} GiB ({gpu}), {free}"]
        if training:
            section.line(f"  logits bytes per token x vocabulary entry (verl 0.9.1's prepare_model_outputs): "
                         f"{logits_bytes(cfg).text()}")
        if total > card:
            hint = token_budget_hint(result, cfg) if training else "more GPUs, offloading or a smaller token budget"
            section.fail(f"{phase} needs {total / GIB:.1f} GiB per GPU, more than the {result.card_gib} GiB of a {gpu} "
                         f"({hint})")
        elif total > (1 - HEADROOM) * card:
            section.note(f"{phase} leaves {1 - total / card:.0%} of the card free, less than the {HEADROOM:.0%} margin "
                         "for the plan's estimates" + (f" ({token_budget_hint(result, cfg)})" if training else ""))
    request = result.max_model_len * result.kv_per_token
    weights = next(t for t in result.weight_sync if t.name.startswith("vLLM weights"))
    section.line(f"vLLM KV cache: share {result.rollout[-3].bytes / GIB:.2f} - weights {weights.formula} - workspace "
                 f"{VLLM_WORKSPACE_GIB} GiB = {result.kv_space / GIB:.2f} GiB (TP "
                 f"{cfg.actor_rollout_ref.rollout.tensor_model_parallel_size})")
    section.line(f"  one request of max_model_len {result.max_model_len}: {result.max_model_len} x "
                 f"{result.kv_per_token / 1024:.0f} KiB/token = {request / GIB:.2f} GiB"
                 + (f"; {int(result.kv_space // request)} such requests fit" if result.kv_space > 0 else ""))
    if result.kv_space < request:
        section.fail(f"vLLM's KV cache ({result.kv_space / GIB:.1f} GiB at gpu_memory_utilization "
                     f"{cfg.actor_rollout_ref.rollout.gpu_memory_utilization}) cannot hold one request of max_model_len "
                     f"{result.max_model_len} ({request / GIB:.1f} GiB): vLLM refuses to start; lower "
                     "rollout.max_model_len or raise gpu_memory_utilization")
    return result
