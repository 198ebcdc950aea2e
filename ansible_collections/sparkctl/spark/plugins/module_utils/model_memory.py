"""What a model needs on each tensor-parallel rank: its weights, its KV cache, and what fits.

Decided here once, for both sides of the Python/Ansible line:

- the sglang role's preflight (filter ``sglang_memory_problems``) refuses, at provision,
  a model whose weights per rank and least KV cache do not fit;
- ``sparkctl serve up`` refuses the same before it starts any rank, from the model's own
  ``config.json`` and safetensors index as the head node holds them;
- ``sparkctl model plan`` lays the figures out for every layout the cluster allows.

The figures follow SGLang 0.5.17 (the release the sglang role pins), read in its wheel:

- **KV cache per token per rank** (``cell_size``, srt/model_executor/pool_configurator.py
  ``DefaultPoolConfigurator._compute_cell_size``): ``get_num_kv_heads(tp) x (head_dim +
  v_head_dim) x layers x kv element size``, where ``get_num_kv_heads`` is
  ``max(1, kv_heads // tp)`` (srt/configs/model_config.py: a KV head is replicated when
  there are fewer of them than ranks). With MLA (DeepSeek V2/V3, Kimi K2, GLM-4.7-Flash)
  every rank keeps the whole latent, ``(kv_lora_rank + qk_rope_head_dim) x layers x kv
  element size`` (``calculate_mla_kv_cache_dim``), whatever the TP size.
- **The pool** (srt/mem_cache/kv_cache_configurator.py ``_profile_available_bytes``):
  what is free after the weights load, less ``(1 - mem_fraction_static)`` of what was free
  before: ``mem_fraction_static x memory - weights per rank``; tokens = pool // cell_size.
  SGLang stops ("Loaded weights leave no GPU memory for the KV cache") when that is <= 0.
- **Weights per rank:** tensor parallelism splits every projection (attention heads,
  the MLP, each expert's MLP) and the vocabulary (VocabParallelEmbedding, ParallelLMHead)
  over the ranks; norms, MoE routers and MLA's down-projections (``q_a_proj``,
  ``kv_a_proj_with_mqa``: ReplicatedLinear in srt/models/deepseek_v2.py) are whole on
  every rank, and K/V projections are replicated with their heads.

Bytes come from what is on disk (the safetensors index's ``metadata.total_size``, else
the files' sizes); the parameter count from ``config.json``. Their ratio is the bytes a
parameter takes, so a quantized checkpoint is counted as stored. Without either file the
figures fall back to the other (and say so). Standard library only: sparkctl imports it
through :mod:`sparkctl.collection`, Ansible through its collection loader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GIB = 1 << 30

# torch_dtype names -> bytes of one element (config.json's torch_dtype / dtype).
DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "fp8": 1,
}
# --kv-cache-dtype (server_args.py's choices) -> bytes of one element; "auto" is the
# model's dtype.
KV_DTYPE_BYTES = {
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8": 1,
}


class ModelConfigError(ValueError):
    """config.json does not describe a decoder this module can size."""


def _int(cfg: Mapping[str, Any], *names: str, default: int | None = None) -> int:
    for name in names:
        value = cfg.get(name)
        if isinstance(value, bool):
            continue
        if isinstance(value, int) and value >= 0:
            return value
    if default is not None:
        return default
    raise ModelConfigError(f"config.json has no {' or '.join(names)} (a non-negative integer)")


def _text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """A multimodal model keeps its language model's shape under ``text_config``
    (transformers' convention; SGLang's ``hf_text_config``)."""
    text = cfg.get("text_config")
    if isinstance(text, Mapping) and "hidden_size" in text:
        merged = dict(text)
        for key in ("torch_dtype", "dtype", "quantization_config"):
            if key not in merged and key in cfg:
                merged[key] = cfg[key]
        return merged
    return cfg


@dataclass(frozen=True)
class Shape:
    """The decoder's shape, from config.json."""

    architecture: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    context: int
    dtype: str
    # MoE: routed experts, each expert's MLP width, shared experts' total width, the
    # layers that are MoE (the rest are dense).
    experts: int = 0
    expert_intermediate: int = 0
    shared_intermediate: int = 0
    moe_layers: int = 0
    # MLA (kv_lora_rank > 0): the latent and its RoPE part, the query's LoRA rank.
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    q_lora_rank: int = 0
    quantization: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 2)


def shape_from_config(raw: Mapping[str, Any]) -> Shape:
    """The shape of a Hugging Face ``config.json`` (a decoder-only LM, dense or MoE, with
    GQA or MLA attention). ModelConfigError when a field it needs is missing."""
    if not isinstance(raw, Mapping):
        raise ModelConfigError("config.json is not a JSON object")
    cfg = _text_config(raw)
    arch = cfg.get("architectures") or raw.get("architectures") or ["unknown"]
    architecture = str(arch[0]) if isinstance(arch, list) and arch else "unknown"
    hidden = _int(cfg, "hidden_size", "d_model", "n_embd")
    layers = _int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    heads = _int(cfg, "num_attention_heads", "n_head")
    if not (hidden and layers and heads):
        raise ModelConfigError("config.json: hidden_size, num_hidden_layers and heads must be > 0")
    kv_heads = _int(cfg, "num_key_value_heads", default=heads) or heads
    kv_lora_rank = _int(cfg, "kv_lora_rank", default=0)
    notes: list[str] = []
    if kv_lora_rank:
        nope = _int(cfg, "qk_nope_head_dim", default=0)
        rope = _int(cfg, "qk_rope_head_dim", default=0)
        head_dim = nope + rope
        v_head_dim = _int(cfg, "v_head_dim", default=head_dim)
    else:
        nope = rope = 0
        head_dim = _int(cfg, "head_dim", default=hidden // heads)
        v_head_dim = head_dim
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    if dtype not in DTYPE_BYTES:
        notes.append(f"dtype {dtype} unknown here: 2 bytes an element assumed")
    experts = _int(cfg, "n_routed_experts", "num_local_experts", "num_experts", default=0)
    expert_inter = _int(cfg, "moe_intermediate_size", default=0) if experts else 0
    if experts and not expert_inter:
        expert_inter = _int(cfg, "intermediate_size")
    shared = 0
    moe_layers = 0
    if experts:
        shared = _int(cfg, "n_shared_experts", default=0) * expert_inter + _int(
            cfg, "shared_expert_intermediate_size", default=0
        )
        moe_layers = sum(1 for i in range(layers) if _is_moe_layer(cfg, i))
    quant = cfg.get("quantization_config")
    quantization = str(quant.get("quant_method", "")) if isinstance(quant, Mapping) else ""
    if "linear_attention" in str(cfg.get("layer_types", "")):
        notes.append("linear-attention layers: the KV cache is sized as if every layer kept one")
    return Shape(
        architecture=architecture,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        intermediate=_int(cfg, "intermediate_size", "n_inner", default=4 * hidden),
        vocab=_int(cfg, "vocab_size"),
        tied=bool(cfg.get("tie_word_embeddings", False)),
        context=_int(cfg, "max_position_embeddings", "n_positions", default=0),
        dtype=dtype,
        experts=experts,
        expert_intermediate=expert_inter,
        shared_intermediate=shared,
        moe_layers=moe_layers,
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=rope,
        qk_nope_head_dim=nope,
        q_lora_rank=_int(cfg, "q_lora_rank", default=0) if kv_lora_rank else 0,
        quantization=quantization,
        notes=tuple(notes),
    )


@dataclass(frozen=True)
class Params:
    """Parameters, split into what tensor parallelism shards and what every rank keeps."""

    sharded: int  # divided over the ranks
    replicated: int  # whole on every rank (norms, routers, MLA down-projections)
    kv_proj: int  # K and V projections: split by heads, replicated below one head a rank

    @property
    def total(self) -> int:
        return self.sharded + self.replicated + self.kv_proj


def _is_moe_layer(cfg: Mapping[str, Any], i: int) -> bool:
    """Layer ``i`` has experts: after DeepSeek's ``first_k_dense_replace`` dense layers,
    every ``moe_layer_freq``-th (DeepSeek) or ``decoder_sparse_step``-th (Qwen MoE)
    layer, and not in Qwen's ``mlp_only_layers``."""
    if i < _int(cfg, "first_k_dense_replace", default=0):
        return False
    dense = cfg.get("mlp_only_layers")
    if isinstance(dense, list) and i in dense:
        return False
    freq = _int(cfg, "moe_layer_freq", default=1) or 1
    step = _int(cfg, "decoder_sparse_step", default=1) or 1
    return i % freq == 0 and (i + 1) % step == 0


def params(s: Shape) -> Params:
    """The parameter count the config implies (Llama/Qwen/Mistral/DeepSeek layouts:
    gated MLPs, no biases)."""
    h = s.hidden
    sharded = s.vocab * h * (1 if s.tied else 2)  # embedding (+ LM head)
    replicated = h  # the final norm
    kv_proj = 0
    for i in range(s.layers):
        replicated += 2 * h  # input and post-attention norms
        if s.mla:
            q_in = s.q_lora_rank or 0
            if q_in:
                replicated += h * q_in + q_in  # q_a_proj + its norm
                sharded += q_in * s.heads * s.head_dim  # q_b_proj
            else:
                sharded += h * s.heads * s.head_dim
            replicated += h * (s.kv_lora_rank + s.qk_rope_head_dim) + s.kv_lora_rank
            sharded += s.kv_lora_rank * s.heads * (s.qk_nope_head_dim + s.v_head_dim)
            sharded += s.heads * s.v_head_dim * h  # o_proj
        else:
            sharded += 2 * h * s.heads * s.head_dim  # q_proj and o_proj
            kv_proj += 2 * h * s.kv_heads * s.head_dim
        moe = s.experts and i >= s.layers - s.moe_layers
        if moe:
            sharded += s.experts * 3 * h * s.expert_intermediate
            sharded += 3 * h * s.shared_intermediate
            replicated += h * s.experts  # the router
        else:
            sharded += 3 * h * s.intermediate
    return Params(sharded=sharded, replicated=replicated, kv_proj=kv_proj)


def kv_heads_per_rank(s: Shape, tp: int) -> int:
    """SGLang's ``get_num_kv_heads``."""
    return max(1, s.kv_heads // max(1, tp))


def kv_cell_bytes(s: Shape, tp: int, kv_dtype: str = "auto") -> int:
    """KV cache bytes one token takes on one rank (SGLang's ``cell_size``)."""
    size = s.dtype_bytes if kv_dtype in ("", "auto") else KV_DTYPE_BYTES.get(kv_dtype, 2)
    if s.mla:
        return (s.kv_lora_rank + s.qk_rope_head_dim) * s.layers * size
    return kv_heads_per_rank(s, tp) * (s.head_dim + s.v_head_dim) * s.layers * size


def tp_problems(s: Shape, tp: int) -> list[str]:
    """Why SGLang refuses this TP size for the model, or []: attention heads split evenly
    (srt/layers/linear.py QKVParallelLinear, ``divide(total_num_heads, tp_size)``), and KV
    heads either split evenly or replicated a whole number of times."""
    out = []
    if s.heads % tp:
        out.append(f"{s.heads} attention heads do not split over {tp} ranks")
    if not s.mla and (s.kv_heads % tp if s.kv_heads >= tp else tp % s.kv_heads):
        out.append(f"{s.kv_heads} KV heads neither split over nor repeat evenly on {tp} ranks")
    return out


@dataclass(frozen=True)
class Fit:
    """One TP size on one node's memory."""

    tp: int
    weight_bytes_per_rank: int
    budget_bytes: int  # mem_fraction_static x memory
    kv_pool_bytes: int  # budget - weights (may be negative)
    kv_cell_bytes: int
    kv_tokens: int
    min_kv_bytes: int
    problems: tuple[str, ...]

    @property
    def fits(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "tp": self.tp,
            "weight_gib_per_rank": round(self.weight_bytes_per_rank / GIB, 3),
            "budget_gib": round(self.budget_bytes / GIB, 3),
            "kv_pool_gib": round(self.kv_pool_bytes / GIB, 3),
            "kv_bytes_per_token": self.kv_cell_bytes,
            "kv_tokens": self.kv_tokens,
            "fits": self.fits,
            "problems": list(self.problems),
        }


@dataclass(frozen=True)
class Model:
    """A model as sparkctl sizes it: its shape (None: no config.json) and its bytes."""

    shape: Shape | None
    weight_bytes: int  # on disk (index total, else files), else parameters x dtype
    bytes_source: str  # "index", "files" or "config"
    param_count: int  # from the config (0 without one)

    @property
    def bytes_per_param(self) -> float:
        return self.weight_bytes / self.param_count if self.param_count else 0.0

    def weights_per_rank(self, tp: int) -> int:
        """Bytes of weights one rank holds at this TP size."""
        tp = max(1, tp)
        if self.shape is None or not self.param_count:
            return self.weight_bytes // tp  # no shape: an even split
        p = params(self.shape)
        kv_share = kv_heads_per_rank(self.shape, tp) / self.shape.kv_heads if p.kv_proj else 0.0
        per_rank = p.sharded / tp + p.replicated + p.kv_proj * kv_share
        return int(per_rank * self.bytes_per_param)

    def fit(
        self,
        tp: int,
        *,
        memory_gib: float,
        mem_fraction: float,
        min_kv_gib: float,
        kv_dtype: str = "auto",
    ) -> Fit:
        """Whether one rank of a TP group of ``tp`` holds its weights and at least
        ``min_kv_gib`` of KV cache in ``mem_fraction`` of ``memory_gib``."""
        weights = self.weights_per_rank(tp)
        budget = int(mem_fraction * memory_gib * GIB)
        pool = budget - weights
        cell = kv_cell_bytes(self.shape, tp, kv_dtype) if self.shape else 0
        tokens = max(0, pool) // cell if cell else 0
        min_kv = int(min_kv_gib * GIB)
        problems = tp_problems(self.shape, tp) if self.shape else []
        if weights + min_kv > budget:
            problems.append(
                f"weights {weights / GIB:.1f} GiB per rank + minimum KV {min_kv_gib:g} GiB > "
                f"{budget / GIB:.1f} GiB ({mem_fraction:g} of {memory_gib:g} GiB)"
            )
        return Fit(tp, weights, budget, pool, cell, tokens, min_kv, tuple(problems))


def model_from(
    config: Mapping[str, Any] | None,
    *,
    index: Mapping[str, Any] | None = None,
    file_bytes: int = 0,
) -> Model:
    """The model from its config.json (parsed), its ``model.safetensors.index.json``
    (parsed) and the total size of its weight files. ModelConfigError when there is
    nothing to size it by."""
    shape = shape_from_config(config) if config is not None else None
    count = params(shape).total if shape else 0
    total = 0
    if isinstance(index, Mapping):
        meta = index.get("metadata")
        size = meta.get("total_size") if isinstance(meta, Mapping) else None
        if isinstance(size, (int, float)) and not isinstance(size, bool) and size > 0:
            total = int(size)
    if total:
        return Model(shape, total, "index", count)
    if file_bytes > 0:
        return Model(shape, file_bytes, "files", count)
    if shape:
        return Model(shape, count * shape.dtype_bytes, "config", count)
    raise ModelConfigError("no config.json, safetensors index or weight files to size the model by")
