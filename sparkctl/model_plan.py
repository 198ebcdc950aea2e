"""sparkctl model plan: what a model needs per rank in every layout the cluster allows.

The figures come from :mod:`model_memory` (the collection's module_utils, which the
sglang role's preflight uses too): weights per rank, KV cache bytes per token per
rank, KV tokens that fit at ``sglang_mem_fraction_static`` of the node's memory, and
whether a layout fits. The layouts of N Sparks (one GPU each) are every TP size that
divides N into whole groups: for four Sparks one group at TP=4 (``tp4``), two groups
at TP=2 (``tp2x2``) and four replicas at TP=1 (``tp1x4``, behind the gateway).

The advice is the rule every guide on tensor parallelism gives: a model that fits on
one machine is served best by independent replicas (no all-reduce on any token's
path); otherwise by the smallest TP size that fits, with as many groups as the nodes
make. What the plan cannot know is said with it (:data:`UNKNOWNS`).

``serve up`` refuses with :func:`refusal`, from the same figures, a model that cannot
fit its groups, before any rank starts.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from sparkctl.collection import model_memory as mm
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.paths import roles_dir

if TYPE_CHECKING:
    from sparkctl.serve.cluster import Cluster

GIB = mm.GIB
WEIGHT_SUFFIX = ".safetensors"
INDEX_NAME = "model.safetensors.index.json"
# A config.json or index larger than this is not one (the largest public indexes are a few MiB).
MAX_JSON_BYTES = 32 << 20

UNKNOWNS = (
    "activations and CUDA graphs: SGLang takes them from the (1 - mem_fraction_static) "
    "share; their size depends on the batch and the chunked-prefill size",
    "what else holds the node's memory when the server starts (DGX OS, docker, a desktop): "
    "serve up reads MemAvailable on every node before it starts a rank",
    "the fabric's latency at decode's message sizes, which sets what TP costs per token: "
    "validate's all_reduce latency by size shows it",
    "how evenly a MoE model's experts are used (the plan splits every expert over the ranks)",
)


@dataclass(frozen=True)
class Memory:
    """The node's memory as SGLang sizes its pool, and the least KV cache to start with."""

    memory_gib: float
    mem_fraction: float
    min_kv_gib: float
    source: str  # "inventory" or "dgx_spark defaults"

    def fit(self, model: mm.Model, tp: int, kv_dtype: str = "auto") -> mm.Fit:
        """``model`` at TP ``tp`` on a node of this memory."""
        return model.fit(
            tp,
            memory_gib=self.memory_gib,
            mem_fraction=self.mem_fraction,
            min_kv_gib=self.min_kv_gib,
            kv_dtype=kv_dtype,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "memory_gib": self.memory_gib,
            "mem_fraction_static": self.mem_fraction,
            "min_kv_cache_gib": self.min_kv_gib,
            "source": self.source,
        }


@dataclass(frozen=True)
class ModelFiles:
    """What sizes a model: its config.json, its safetensors index, its weights' bytes."""

    where: str  # a path, or node:path
    config: Mapping[str, Any] | None
    index: Mapping[str, Any] | None
    file_bytes: int
    files: int


@dataclass(frozen=True)
class Layout:
    """``groups`` TP groups of ``tp`` ranks."""

    tp: int
    groups: int
    fit: mm.Fit
    context: int

    @property
    def name(self) -> str:
        return f"tp{self.tp}" if self.groups == 1 else f"tp{self.tp}x{self.groups}"

    def to_dict(self, shape: mm.Shape | None) -> dict[str, Any]:
        rounds = 2 * shape.layers if shape and self.tp > 1 else 0
        return {
            "name": self.name,
            "tp": self.tp,
            "groups": self.groups,
            **self.fit.to_dict(),
            "kv_tokens_all_groups": self.fit.kv_tokens * self.groups,
            "full_context_requests": self.fit.kv_tokens // self.context if self.context else None,
            "allreduces_per_token": rounds,
            # one token's hidden state: what each all-reduce of a decode step moves a request
            "allreduce_bytes": shape.hidden * shape.dtype_bytes if rounds and shape else 0,
        }


@dataclass(frozen=True)
class ModelPlan:
    """The model, the memory, every layout and the advice."""

    files: ModelFiles
    model: mm.Model
    memory: Memory
    nodes: int
    layouts: tuple[Layout, ...]
    kv_dtype: str
    context: int
    serving: str = ""  # the inventory's layout, "" without an inventory
    advice: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return any(layout.fit.fits for layout in self.layouts)

    def layout(self, name: str) -> Layout | None:
        return next((x for x in self.layouts if x.name == name), None)

    def failure(self) -> SparkctlError | None:
        """Exit 1 when no layout fits, or the inventory's own layout does not."""
        if not self.ok:
            return SparkctlError(f"model plan: {self.advice}")
        now = self.layout(self.serving) if self.serving else None
        if now is not None and not now.fit.fits:
            return SparkctlError(
                f"model plan: the inventory's layout {now.name} does not fit: "
                + "; ".join(now.fit.problems),
                hint=f"advice: {self.advice}",
            )
        return None

    def to_dict(self) -> dict[str, Any]:
        shape = self.model.shape
        model: dict[str, Any] = {
            "where": self.files.where,
            "weight_bytes": self.model.weight_bytes,
            "weight_gib": round(self.model.weight_bytes / GIB, 3),
            "bytes_from": self.model.bytes_source,
            "weight_files": self.files.files,
            "params": self.model.param_count or None,
            "bytes_per_param": round(self.model.bytes_per_param, 4) or None,
            "context": self.context,
            "kv_cache_dtype": self.kv_dtype,
        }
        if shape:
            model.update(
                architecture=shape.architecture,
                dtype=shape.dtype,
                layers=shape.layers,
                hidden_size=shape.hidden,
                heads=shape.heads,
                kv_heads=shape.kv_heads,
                head_dim=shape.head_dim,
                mla=shape.mla,
                experts=shape.experts,
                quantization=shape.quantization or None,
            )
        return {
            "model": model,
            "memory": self.memory.to_dict(),
            "nodes": self.nodes,
            "serving": self.serving or None,
            "layouts": [x.to_dict(shape) for x in self.layouts],
            "advice": self.advice,
            "unknowns": list(UNKNOWNS),
            "notes": list(self.notes),
            "ok": self.ok,
        }


# ------------------------------------------------------------------ reading a model
def _json(text: str | bytes, what: str) -> Mapping[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SparkctlError(f"{what} is not JSON: {exc}", ExitCode.BAD_INPUT) from None
    if not isinstance(data, Mapping):
        raise SparkctlError(f"{what} is not a JSON object", ExitCode.BAD_INPUT)
    return data


def read_local(path: Path) -> ModelFiles:
    """A model directory on this machine (``model plan --model PATH``)."""
    if not path.is_dir():
        raise SparkctlError(f"{path}: not a directory", ExitCode.BAD_INPUT)
    config = index = None
    cfg = path / "config.json"
    if cfg.is_file() and cfg.stat().st_size <= MAX_JSON_BYTES:
        config = _json(cfg.read_bytes(), str(cfg))
    idx = path / INDEX_NAME
    if idx.is_file() and idx.stat().st_size <= MAX_JSON_BYTES:
        index = _json(idx.read_bytes(), str(idx))
    weights = [f for f in path.iterdir() if f.is_file() and f.name.endswith(WEIGHT_SUFFIX)]
    return ModelFiles(
        str(path), config, index, sum(f.stat().st_size for f in weights), len(weights)
    )


def reading_command(model_path: str) -> str:
    """One shell command that prints what sizes the model at ``model_path`` on a node:
    config.json, a ``@@`` line, the index, a ``@@`` line, one weight file size a line.
    A missing file prints nothing in its place (no model yet)."""
    p = shlex.quote(model_path.rstrip("/") or "/")
    cap = MAX_JSON_BYTES
    return (
        f"head -c {cap} -- {p}/config.json 2>/dev/null; echo; echo @@; "
        f"head -c {cap} -- {p}/{INDEX_NAME} 2>/dev/null; echo; echo @@; "
        f"find -L {p} -maxdepth 1 -name '*{WEIGHT_SUFFIX}' -printf '%s\\n' 2>/dev/null; true"
    )


def parse_reading(where: str, text: str) -> ModelFiles:
    """What :func:`reading_command` printed."""
    parts = text.split("\n@@\n")
    if len(parts) != 3:
        raise SparkctlError(f"{where}: could not read the model ({text[:200]!r})")
    config_text, index_text, sizes = (p.strip() for p in parts)
    config = _json(config_text, f"{where}/config.json") if config_text else None
    index = _json(index_text, f"{where}/{INDEX_NAME}") if index_text else None
    numbers = [int(x) for x in sizes.split() if x.isdigit()]
    return ModelFiles(where, config, index, sum(numbers), len(numbers))


def read_remote(cluster: Cluster, node: str, model_path: str) -> ModelFiles:
    rc, out = cluster.run(node, reading_command(model_path), 60)
    if rc != 0:
        raise SparkctlError(f"{node}: could not read {model_path} (exit {rc}): {out[-300:]}")
    return parse_reading(f"{node}:{model_path}", out)


# ------------------------------------------------------------------ the plan
def spark_memory() -> Memory:
    """The dgx_spark profile's memory and fraction, and the sglang role's least KV cache:
    what a cluster of Sparks gets unless its inventory says otherwise."""
    hw = yaml.safe_load((roles_dir() / "cluster_defaults" / "vars" / "main.yml").read_text())
    spark = hw["_cluster_defaults_hw_profiles"]["dgx_spark"]
    defaults = yaml.safe_load((roles_dir() / "sglang" / "defaults" / "main.yml").read_text())
    return Memory(
        float(spark["gpu_memory_gib"]),
        float(spark["sglang_mem_fraction_static"]),
        float(defaults["sglang_min_kv_cache_gib"]),
        "dgx_spark defaults",
    )


def tp_sizes(nodes: int, gpus_per_node: int = 1) -> list[int]:
    """TP sizes that split ``nodes`` into whole groups, largest first."""
    return [d * gpus_per_node for d in range(nodes, 0, -1) if nodes % d == 0]


def advise(layouts: Sequence[Layout], shape: mm.Shape | None) -> str:
    """The rule: replicas when one node holds the model, else the smallest TP that fits."""
    fitting = [x for x in layouts if x.fit.fits]
    if not fitting:
        least = min(layouts, key=lambda x: x.fit.weight_bytes_per_rank)
        return (
            f"no layout fits: even {least.name} needs "
            f"{least.fit.weight_bytes_per_rank / GIB:.1f} GiB of weights per rank in a budget "
            f"of {least.fit.budget_bytes / GIB:.1f} GiB; serve a smaller or more quantized model"
        )
    best = min(fitting, key=lambda x: x.tp)
    if best.tp == 1 and best.groups > 1:
        text = (
            f"{best.name}: the model fits on one Spark, so {best.groups} independent replicas "
            "behind the gateway serve without any all-reduce on a token's path (the simpler "
            "and usually faster choice)"
        )
    elif best.tp == 1:
        text = f"{best.name}: the model fits on one Spark"
    else:
        rounds = f", {2 * shape.layers} all-reduces per token" if shape else ""
        text = (
            f"{best.name}: the smallest TP size that fits ({best.tp} ranks a group{rounds}), "
            f"{best.groups} group{'s' if best.groups > 1 else ''} of it"
        )
    if best.context and best.fit.kv_tokens < best.context:
        text += (
            f"; its KV cache holds {best.fit.kv_tokens} tokens a group, less than one request "
            f"at the full context ({best.context}): set --context-length, or use a larger TP"
        )
    return text


def make_plan(
    files: ModelFiles,
    memory: Memory,
    nodes: int,
    *,
    gpus_per_node: int = 1,
    kv_dtype: str = "auto",
    context: int = 0,
    serving: str = "",
) -> ModelPlan:
    """Every layout of ``nodes`` Sparks for the model in ``files``."""
    try:
        model = mm.model_from(files.config, index=files.index, file_bytes=files.file_bytes)
    except mm.ModelConfigError as exc:
        raise SparkctlError(f"{files.where}: {exc}", ExitCode.BAD_INPUT) from None
    shape = model.shape
    ctx = context or (shape.context if shape else 0)
    layouts = tuple(
        Layout(
            tp,
            nodes * gpus_per_node // tp,
            memory.fit(model, tp, kv_dtype),
            ctx,
        )
        for tp in tp_sizes(nodes, gpus_per_node)
    )
    notes = list(shape.notes) if shape else ["no config.json: weights split evenly, no KV figures"]
    if shape and model.bytes_source != "config":
        implied = model.param_count * shape.dtype_bytes
        ratio = model.weight_bytes / implied if implied else 1.0
        if not 0.8 <= ratio <= 1.25:
            notes.append(
                f"the weights on disk ({model.weight_bytes / GIB:.2f} GiB, from the "
                f"{model.bytes_source}) are {ratio:.2f}x what config.json implies in "
                f"{shape.dtype} ({implied / GIB:.2f} GiB): quantized, partial or another "
                "model; the per-rank figures scale the disk's bytes"
            )
    return ModelPlan(
        files=files,
        model=model,
        memory=memory,
        nodes=nodes,
        layouts=layouts,
        kv_dtype=kv_dtype or "auto",
        context=ctx,
        serving=serving,
        advice=advise(layouts, shape),
        notes=tuple(notes),
    )


def node_memory(cluster: Cluster, node: str) -> Memory:
    """The inventory's figures for ``node``: its hardware profile's memory, its
    sglang_mem_fraction_static and sglang_min_kv_cache_gib."""
    s = cluster.sglang(node)
    hw = cluster.plan.cluster_hw
    memory = hw.get("gpu_memory_gib")
    return Memory(
        float(memory) if isinstance(memory, (int, float)) else spark_memory().memory_gib,
        s.mem_fraction_static,
        s.min_kv_cache_gib,
        "inventory",
    )


def serving_layout(cluster: Cluster) -> str:
    """The inventory's layout by :class:`Layout`'s names (``mixed``: groups of several sizes)."""
    groups = cluster.groups()
    sizes = {len(g.members) * g.sglang().gpus_per_node for g in groups}
    if len(sizes) != 1:
        return "mixed"
    tp = sizes.pop()
    return f"tp{tp}" if len(groups) == 1 else f"tp{tp}x{len(groups)}"


def plan_cluster(cluster: Cluster) -> ModelPlan:
    """``model plan INVENTORY``: the model as the first group's head holds it."""
    head = cluster.head
    s = cluster.sglang(head)
    files = read_remote(cluster, head, s.model_path)
    if files.config is None and not files.file_bytes:
        raise SparkctlError(
            f"{head}: no model at {cluster.sglang(head).model_path} (no config.json, no "
            "*.safetensors)",
            hint="sparkctl model sync INVENTORY puts it there; or plan a local copy with "
            "sparkctl model plan --model PATH",
        )
    return make_plan(
        files,
        node_memory(cluster, head),
        len(cluster.nodes),
        gpus_per_node=s.gpus_per_node,
        kv_dtype=s.kv_cache_dtype,
        context=s.context_length,
        serving=serving_layout(cluster),
    )


def refusal(cluster: Cluster) -> None:
    """``serve up``'s check before it starts any rank: every group's TP size fits the
    model its head holds (the same figures as ``model plan``). A head without the
    model, or one that cannot be read, is not judged here (the start names it).
    SparkctlError (exit 1) with the numbers otherwise."""
    problems = []
    seen: dict[str, ModelFiles] = {}
    for g in cluster.groups():
        path = g.sglang().model_path
        try:
            files = seen.get(g.head) or read_remote(cluster, g.head, path)
        except SparkctlError:
            continue  # a head that cannot be read: serve up's own start names it
        seen[g.head] = files
        if files.config is None and not files.file_bytes:
            continue
        try:
            model = mm.model_from(files.config, index=files.index, file_bytes=files.file_bytes)
        except mm.ModelConfigError:
            continue
        s = g.sglang()
        tp = len(g.members) * s.gpus_per_node
        fit = node_memory(cluster, g.head).fit(model, tp, s.kv_cache_dtype)
        if not fit.fits:
            problems.append(f"group {g.name} (tp {tp}): {'; '.join(fit.problems)}")
    if problems:
        raise SparkctlError(
            "the model does not fit: " + " | ".join(problems),
            ExitCode.CHECKS_FAILED,
            hint="sparkctl model plan INVENTORY shows every layout; use more Sparks a group "
            "(sglang_group), a smaller or quantized model, or raise sglang_mem_fraction_static "
            "if the nodes have room",
        )
