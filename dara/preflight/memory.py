"""Per-GPU memory plan of a hybrid-engine run (FSDP actor/reference and vLLM sharing each GPU), in verl 0.9.1's terms.

Three phases, each must fit one card (`run.hardware.gpu_memory_gib`); every line names the verl config key it
comes from (keys under `actor_rollout_ref.`), and the facts below were read in verl 0.9.1's source:
- rollout (vLLM awake): what FSDP keeps on the GPU by offload choice (params and reference in their
  `*.fsdp_config.model_dtype`, fp32 in verl's generated config: `workers/engine/fsdp/transformer_impl.py`
  `_build_module` loads the module in that dtype, the reference too) + vLLM's share (`rollout.
  gpu_memory_utilization` x card: vLLM refuses to start unless that much is free; its own CUDA context, weights,
  workspace and KV cache live in it) + the trainer's CUDA context and runtime overhead.
- weight sync (`workers/engine_workers.py` `update_weights`, `free_cache_engine`): vLLM's weights are resumed
  before its KV cache; the actor's params are on the GPU (loaded even with param offload, offloaded after), and
  `rollout/vllm_rollout/bucketed_weight_transfer.py` allocates a CUDA buffer of `rollout.checkpoint_engine.
  update_weights_bucket_megabytes` (2048 by default) through which each full (gathered) tensor is sent.
- training (vLLM asleep, `free_cache_engine`: sleep level 2 frees its weights and KV cache, `vllm_async_server.py`
  `_resolve_sleep_level`; its worker process keeps a CUDA context and CUDA graphs unless `rollout.enforce_eager`):
  fp32 params + grads + Adam (2 states) sharded over the GPUs (verl's optimizer offload moves Adam back for the
  step), the reference unless offloaded, the FSDP all-gather of the largest unit (current + prefetch, bf16
  compute), checkpointed activations, one recomputed decoder layer (its hidden, attention and MLP tensors at the
  model's real `intermediate_size`) and the logits of a dynamic micro-batch of `actor.ppo_max_token_len_per_gpu`
  tokens, at the bytes per token x vocabulary entry of `logits_bytes` (read in verl's code, below). Under SDPA
  (`run.attention=sdpa`, `model.use_remove_padding=false`) verl pads each micro-batch to its longest sequence
  (`prepare_model_inputs`, `to_padded_tensor`): the token terms are planned at SDPA_PADDING_FACTOR x the budget.
The constants below are estimates (not measured here); each term is printed with its arithmetic, and a phase
that leaves less than HEADROOM of the card free gets a note. `python -m recipes gpu_smoke` measures the phases on
a real GPU next to this plan.

The logits' bytes (`logits_bytes`), from verl 0.9.1's FSDP engine (`workers/engine/fsdp/transformer_impl.py`:
`FSDPEngineWithLMHead.prepare_model_outputs`, `forward_step`) and `utils/torch_functional.py`: the logits are
bf16 (FSDP's mixed-precision param_dtype and `forward_step`'s autocast); a copy when rollout.temperature != 1
(`_scale_logits_by_temperature`). With padding removed (flash_attention_2): `logprobs_from_logits` runs
flash-attn's Triton cross-entropy, whose backward writes the gradient into the logits when `inplace_backward`
(`dlogits = logits if ctx.inplace_backward else torch.empty_like(logits)` in flash_attn/ops/triton/cross_entropy.py);
`prepare_model_outputs` turns that off when the entropy is computed, which the update does when
`actor.entropy_coeff != 0` (`trainer/ppo/v1/trainer_base.py` `_update_actor`): then a bf16 cross-entropy gradient
and the entropy's bf16 gradient sit beside the logits. The entropy (`entropy_from_logits`: softmax, logsumexp)
runs under `torch.compile` (`fsdp_config.use_torch_compile`, true in verl's config), which keeps only its bf16
input for the backward (eager keeps the fp32 softmax: CUDA autocast runs softmax in fp32); its forward may hold
one fp32 softmax buffer, which is the peak of the forward-only log-prob pass (the actor's old log-probs always
compute the entropy: `_compute_old_log_prob`). With padding (sdpa) `prepare_model_outputs` calls the entropy
uncompiled on the padded logits (fp32 input copy and softmax), copies the real tokens out (`logits_rmpad`), and
without flash-attn (sdpa's reason) `logprobs_from_logits_v2` keeps each row's fp32 log-softmax for the backward.
`entropy_from_logits_with_chunking` and `entropy_checkpointing` do not lower the update's peak: chunking keeps
each chunk's fp32 copies for the backward, and checkpointing recomputes the entropy in the backward, where the
peak is. Each pass's bytes are the sum of what can be alive at once (an upper bound).
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
VLLM_ASLEEP_GIB = 1.0  # a sleeping vLLM worker: its CUDA context + CUDA graph pools (0.5 with enforce_eager)
BF16, FP32 = 2, 4  # bytes of the logits' tensors per token x vocabulary entry (`logits_bytes`)
HEADROOM = 0.10  # a phase planned above (1 - HEADROOM) x card gets a note: the plan's constants are estimates
TOKEN_STEP = 1024  # a suggested token budget is a multiple of this
SDPA_PADDING_FACTOR = 2.0  # padded / real tokens of a dynamic micro-batch without remove-padding
ACTIVATION_BYTES = 2  # bf16 compute (FSDP mixed precision param_dtype)
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
    kv_request: float
    kv_per_token: int
    max_model_len: int
    attention: str
    micro_batch_tokens: int  # the token count the training terms are planned at (padded under SDPA)

    @staticmethod
    def total(terms) -> float:
        return sum(t.bytes for t in terms)

    def phases(self) -> tuple[tuple[str, tuple[Term, ...]], ...]:
        return (("rollout phase (vLLM awake)", self.rollout), ("weight sync (vLLM weights resumed)", self.weight_sync),
                ("training phase (vLLM asleep)", self.training))


def _units(facts: ModelFacts) -> tuple[float, float]:
    """(parameters of one decoder layer, of the embedding) from the facts."""
    embeddings = facts.embedding_parameters() * (1 if facts.tie_word_embeddings else 2)
    return (facts.num_parameters - embeddings) / facts.num_hidden_layers, facts.embedding_parameters()


def dtype_bytes(name) -> int:
    if str(name) not in DTYPE_BYTES:
        raise ValueError(f"unknown model dtype {name!r}; known: {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[str(name)]


def layer_width(facts: ModelFacts) -> int:
    """Live bf16 values per token while one decoder layer is recomputed and back-propagated: hidden-sized
    tensors (input, both norms, attention output, residual, their gradients: 6 h), q / k / v and the attention
    output with gradients (2 (q + 2 kv)), and the MLP's gate, up, activation and product with gradients (6 I)."""
    q = facts.num_attention_heads * facts.head_dim
    kv = facts.num_key_value_heads * facts.head_dim
    return 6 * facts.hidden_size + 2 * (q + 2 * kv) + 6 * facts.intermediate_size


def attention_of(cfg: DictConfig) -> tuple[str, bool]:
    """(attn_implementation, use_remove_padding) of the actor, as verl reads them."""
    model = cfg.actor_rollout_ref.model
    attention = str((model.get("override_config", None) or {}).get("attn_implementation", "flash_attention_2"))
    return attention, bool(model.get("use_remove_padding", False))


def micro_batch_tokens(cfg: DictConfig) -> tuple[int, int]:
    """(real tokens, planned tokens) of one training micro-batch: the dynamic budget (or micro-batch x sequence),
    padded under SDPA."""
    arr, data = cfg.actor_rollout_ref, cfg.data
    tokens = int(arr.actor.ppo_max_token_len_per_gpu) if arr.actor.use_dynamic_bsz else (
        int(arr.actor.ppo_micro_batch_size_per_gpu) * (int(data.max_prompt_length) + int(data.max_response_length)))
    _, remove_padding = attention_of(cfg)
    return tokens, tokens if remove_padding else int(tokens * SDPA_PADDING_FACTOR)


@dataclass(frozen=True)
class LogitsBytes:
    """Bytes per token x vocabulary entry alive at once in a training micro-batch (`update`) and in a forward-only
    log-prob micro-batch (`log_prob`), each as (bytes, what) parts; the plan takes the larger pass."""

    update: tuple[tuple[int, str], ...]
    log_prob: tuple[tuple[int, str], ...]

    @property
    def peak(self) -> int:
        return max(sum(b for b, _ in self.update), sum(b for b, _ in self.log_prob))

    def text(self) -> str:
        return "; ".join(f"{name} {sum(b for b, _ in parts)} B = " + " + ".join(f"{b} {what}" for b, what in parts)
                         for name, parts in (("update", self.update), ("log-prob pass", self.log_prob)))


def logits_bytes(cfg: DictConfig) -> LogitsBytes:
    """The logits' bytes per token x vocabulary entry of each pass, read in verl 0.9.1's code (module docstring)."""
    arr = cfg.actor_rollout_ref
    entropy_grads = float(arr.actor.entropy_coeff) != 0 or bool(arr.actor.get("calculate_entropy", False))
    compiled = bool(arr.actor.fsdp_config.get("use_torch_compile", True))
    _, remove_padding = attention_of(cfg)
    logits = [(BF16, "bf16 logits")]
    if float(arr.rollout.temperature) != 1.0:
        logits.append((BF16, "temperature-scaled copy"))
    eager_entropy = (2 * FP32, "fp32 input copy and softmax of the uncompiled entropy")
    if remove_padding:
        update = list(logits)
        if entropy_grads:
            update += [(BF16, f"cross-entropy gradient (not in place: entropy_coeff {arr.actor.entropy_coeff})"),
                       (BF16, "entropy gradient")]
            if not compiled:
                update.append((FP32, "fp32 softmax the uncompiled entropy keeps"))
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
    """The FSDP state on one GPU: actor params (+ grads), Adam, the reference, by offload choice."""
    arr = cfg.actor_rollout_ref
    actor, ref = arr.actor.fsdp_config, arr.ref.fsdp_config
    p, ps = facts.num_parameters, f"{facts.num_parameters / 1e9:.3f}e9"
    use_ref = bool(arr.actor.use_kl_loss) or bool(cfg.algorithm.use_kl_in_reward)
    actor_bytes = dtype_bytes(actor.get("model_dtype", "fp32"))
    terms = []
    if params_always or not actor.param_offload:
        terms.append(Term(f"actor params (actor.fsdp_config.model_dtype {actor.get('model_dtype', 'fp32')})",
                          actor_bytes * p / world, f"{actor_bytes} B x {ps} / {world}"))
    if with_grads:
        terms.append(Term("actor grads (in the params' dtype)", actor_bytes * p / world,
                          f"{actor_bytes} B x {ps} / {world}"))
    if with_grads or not actor.optimizer_offload:
        terms.append(Term("actor Adam, 2 fp32 states (actor.optim)", 8 * p / world, f"8 B x {ps} / {world}"))
    if use_ref and not ref.param_offload:
        ref_bytes = dtype_bytes(ref.get("model_dtype", "fp32"))
        terms.append(Term(f"reference params (ref.fsdp_config.model_dtype {ref.get('model_dtype', 'fp32')})",
                          ref_bytes * p / world, f"{ref_bytes} B x {ps} / {world}"))
    return terms


def _runtime_terms() -> list[Term]:
    return [Term("trainer CUDA context (estimate)", CUDA_CONTEXT_GIB * GIB, f"{CUDA_CONTEXT_GIB} GiB"),
            Term("NCCL buffers, fragmentation (estimate)", RUNTIME_OVERHEAD_GIB * GIB, f"{RUNTIME_OVERHEAD_GIB} GiB")]


def plan(cfg: DictConfig, facts: ModelFacts) -> MemoryPlan:
    hardware = cfg.run.hardware
    card = float(hardware.gpu_memory_gib) * GIB
    world = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)
    rollout = cfg.actor_rollout_ref.rollout
    p, ps = facts.num_parameters, f"{facts.num_parameters / 1e9:.3f}e9"

    util = float(rollout.gpu_memory_utilization)
    share = Term("vLLM share (rollout.gpu_memory_utilization)", util * card, f"{util} x {hardware.gpu_memory_gib} GiB")
    rollout_terms = (*_state_terms(cfg, facts, world, with_grads=False, params_always=False), share,
                     *_runtime_terms())

    tp = int(rollout.tensor_model_parallel_size)
    vllm_bytes = dtype_bytes(rollout.get("dtype", "bfloat16"))
    weights = Term(f"vLLM weights (rollout.dtype {rollout.get('dtype', 'bfloat16')}) / TP",
                   vllm_bytes * p / tp, f"{vllm_bytes} B x {ps} / {tp}")
    bucket_mb = int(rollout.get("checkpoint_engine", {}).get("update_weights_bucket_megabytes", 2048))
    layer, embedding = _units(facts)
    sync_terms = (*_state_terms(cfg, facts, world, with_grads=False, params_always=True), weights,
                  Term("weight-sync bucket (update_weights_bucket_megabytes)", bucket_mb * 2**20,
                       f"{bucket_mb} MiB"),
                  Term("largest gathered tensor (embedding, bf16)", 2 * embedding, f"2 B x {embedding / 1e6:.1f}e6"),
                  *_runtime_terms())

    kv_space = share.bytes - weights.bytes - VLLM_WORKSPACE_GIB * GIB
    kv_per_token = facts.kv_bytes_per_token(tp)
    max_model_len = int(rollout.max_model_len or facts.max_position_embeddings)

    real, tokens = micro_batch_tokens(cfg)
    attention, _ = attention_of(cfg)
    h, L, width = facts.hidden_size, facts.num_hidden_layers, layer_width(facts)
    unit = max(layer, embedding)
    asleep = (VLLM_ASLEEP_GIB / 2 if rollout.get("enforce_eager", False) else VLLM_ASLEEP_GIB) * GIB
    training = [*_state_terms(cfg, facts, world, with_grads=True, params_always=True),
                Term("FSDP all-gather, 2 units bf16 (fsdp_config)", 2 * 2 * unit, f"2 x 2 B x {unit / 1e6:.1f}e6")]
    if cfg.actor_rollout_ref.model.get("enable_gradient_checkpointing", False):
        training += [
            Term("checkpointed activations (model.enable_gradient_checkpointing)", tokens * h * ACTIVATION_BYTES * L,
                 f"{tokens} tok x {h} x 2 B x {L} layers"),
            Term("one recomputed layer (h, heads, MLP width; estimate)", tokens * width * ACTIVATION_BYTES,
                 f"{tokens} tok x {width} x 2 B"),
        ]
    else:
        training.append(Term("activations of every layer (no checkpointing; estimate)",
                             tokens * width * ACTIVATION_BYTES * L, f"{tokens} tok x {width} x 2 B x {L} layers"))
    per_entry = logits_bytes(cfg).peak
    training += [
        Term("logits peak (actor.ppo_max_token_len_per_gpu; bytes: below)", tokens * facts.vocab_size * per_entry,
             f"{tokens} tok x {facts.vocab_size} x {per_entry} B"),
        Term("vLLM asleep: context + graphs (rollout.free_cache_engine; estimate)", asleep,
             f"{asleep / GIB} GiB"),
        *_runtime_terms(),
    ]
    return MemoryPlan(float(hardware.gpu_memory_gib), rollout_terms, sync_terms, tuple(training), kv_space,
                      max_model_len * kv_per_token, kv_per_token, max_model_len, attention, tokens)


def token_budget_that_fits(result: MemoryPlan, cfg: DictConfig, free: float = 0.0) -> int:
    """The largest actor.ppo_max_token_len_per_gpu whose training phase fits (1 - free) x the card (the token terms
    scale linearly with the budget)."""
    real, planned = micro_batch_tokens(cfg)
    per_token = sum(t.bytes for t in result.training if " tok " in t.formula) / planned
    fixed = result.total(result.training) - per_token * planned
    scale = planned / real
    return max(0, int(((1 - free) * result.card_gib * GIB - fixed) / (per_token * scale)))


def token_budget_hint(result: MemoryPlan, cfg: DictConfig) -> str:
    """The token budget per GPU to set when the training phase does not fit (or keeps less than HEADROOM free):
    the cluster key that sets the PPO and both log-prob budgets, at a multiple of TOKEN_STEP keeping HEADROOM free
    (else one prompt + response), or that no budget holds one sequence."""
    sequence = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
    fits = token_budget_that_fits(result, cfg)
    if fits < sequence:
        return (f"no token budget per GPU fits: it must hold one prompt + response ({sequence} tokens) and at most "
                f"{fits} fit" + ("; flash_attention_2 (make flash-attn) removes the padding" if
                                 result.attention != "flash_attention_2" else ""))
    keep = token_budget_that_fits(result, cfg, HEADROOM) // TOKEN_STEP * TOKEN_STEP
    key = f"run.hardware.{cfg.run.model_scale}.max_token_len_per_gpu"
    return (f"actor.ppo_max_token_len_per_gpu and the log-prob budgets <= {fits} fit: {key}="
            f"{max(keep, sequence)} sets the three" + (f" and keeps {HEADROOM:.0%} free" if keep >= sequence else ""))


def check_memory(cfg: DictConfig, facts: ModelFacts | None, section: Section) -> MemoryPlan | None:
    if cfg.trainer.device != "cuda":
        section.line(f"trainer.device={cfg.trainer.device}: no GPU memory plan")
        return None
    if facts is None:
        section.fail("the model file has no run.model_facts: no memory plan (add them from the model's config.json)")
        return None
    result = plan(cfg, facts)
    real, planned = micro_batch_tokens(cfg)
    card = result.card_gib * GIB
    gpu = cfg.run.hardware.gpu
    padding = ("remove padding: micro-batches of real tokens" if planned == real else
               f"no remove padding: micro-batches padded to their longest sequence, planned at {SDPA_PADDING_FACTOR}"
               f" x {real} = {planned} tokens (estimate)")
    section.line(f"attention: {result.attention} (run.attention -> model.override_config.attn_implementation; "
                 f"{padding})")
    sp = int(cfg.actor_rollout_ref.actor.get("ulysses_sequence_parallel_size", 1) or 1)
    if planned != real and sp > 1:  # verl's FSDP engine asserts it at start-up
        section.fail(f"Ulysses sequence parallelism (actor.ulysses_sequence_parallel_size={sp}) needs "
                     "model.use_remove_padding, which needs flash_attention_2: run.attention=flash_attention_2")
    for phase, terms in result.phases():
        total = MemoryPlan.total(terms)
        training = phase.startswith("training")
        section.line(f"{phase}, per GPU:")
        section.lines += [f"  {t.line()}" for t in terms]
        free = f"{1 - total / card:.0%} free" if total <= card else f"{(total - card) / GIB:.2f} GiB over"
        section.line(f"  {'total':64s} {'':42s} = {total / GIB:7.2f} GiB of {result.card_gib} GiB ({gpu}), {free}")
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
    tp = cfg.actor_rollout_ref.rollout.tensor_model_parallel_size
    weights = next(t for t in result.weight_sync if t.name.startswith("vLLM weights"))
    share = next(t for t in result.rollout if t.name.startswith("vLLM share"))
    section.line(f"vLLM KV cache: share {share.bytes / GIB:.2f} - weights {weights.formula} "
                 f"- workspace {VLLM_WORKSPACE_GIB} GiB = {result.kv_space / GIB:.2f} GiB (TP {tp})")
    section.line(f"  one request of max_model_len {result.max_model_len}: {result.max_model_len} x "
                 f"{result.kv_per_token / 1024:.0f} KiB/token = {result.kv_request / GIB:.2f} GiB"
                 + (f"; {int(result.kv_space // result.kv_request)} such requests fit" if result.kv_space > 0 else ""))
    if result.kv_space < result.kv_request:
        section.fail(f"vLLM's KV cache ({result.kv_space / GIB:.1f} GiB at gpu_memory_utilization "
                     f"{cfg.actor_rollout_ref.rollout.gpu_memory_utilization}) cannot hold one request of max_model_len "
                     f"{result.max_model_len} ({result.kv_request / GIB:.1f} GiB): vLLM refuses to start; lower "
                     "rollout.max_model_len or raise gpu_memory_utilization")
    return result
