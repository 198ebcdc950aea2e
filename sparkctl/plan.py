"""The plan: what the roles promise about every node, as validate and serve read it.

``playbooks/validate_plan.yml`` runs each role's ``tasks/plan.yml`` and the
validate role writes the result as one JSON file (``roles/validate/tasks/main.yml``).
This module is its one reader: frozen dataclasses with exactly the fields the
roles write, and :meth:`Plan.from_dict`, which refuses a plan whose shape drifted
from them (a missing, unexpected or mistyped field) with the path to the field,
``plan: spark2: sglang.port: expected int, got 'x'``, and exit code 2 (bad input:
the plan comes from the inventory and the roles, and nothing was contacted).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.rules import DEFAULT_SGLANG_GROUP

SCHEMA = 1  # roles/validate/tasks/main.yml writes it with the plan

_T = TypeVar("_T")


# ------------------------------------------------------------------ one role each
@dataclass(frozen=True)
class NvidiaDriverPlan:
    """roles/nvidia_driver/tasks/plan.yml."""

    gpu: str
    min_driver: str
    min_cuda: str
    # The driver branch ("580") and the package whose version every kernel's nvidia.ko
    # must carry (nvidia-kernel-common-580).
    branch: str
    driver_package: str
    # The hold set: shell-style patterns (a-z 0-9 . + - * ?), and the node's list of them.
    hold: tuple[str, ...]
    hold_list: str
    # linux-image-<flavour> moves the kernel; <modules_prefix><kernel release> is its
    # prebuilt nvidia module package.
    kernel_flavour: str
    modules_prefix: str
    # nvcc's path, its minimum version and the CUDA release it must be ("13.0").
    nvcc: str
    min_nvcc: str
    cuda_release: str


@dataclass(frozen=True)
class BasePlan:
    """roles/base/tasks/plan.yml."""

    cluster_user: str
    key_name: str
    is_head: bool
    head: str
    chrony_upstream: tuple[str, ...]
    clock_control: bool


@dataclass(frozen=True)
class Twin:
    """One CX-7 netdev of the fabric port (roce_fabric's _roce_fabric_twins, no routes)."""

    twin: str
    netdev: str
    ibdev: str
    address: str


@dataclass(frozen=True)
class RoceFabricPlan:
    """roles/roce_fabric/tasks/plan.yml."""

    twins: tuple[Twin, ...]
    mtu: int
    speed_mbps: int
    record_file: str
    subnets: Mapping[str, str]

    def twin(self, name: str) -> Twin:
        return next(t for t in self.twins if t.twin == name)


@dataclass(frozen=True)
class NcclPlan:
    """roles/nccl/tasks/plan.yml. ``env`` values as strings, as the env file holds them."""

    env_file: str
    conf_file: str
    env: dict[str, str]  # every scalar as a string (a dict: read apart from subnets' strings)
    gid_placeholder: str
    record_file: str
    tests_dir: str
    binaries: tuple[str, ...]
    impl: str
    version_file: str
    socket_ifname: str
    rdma_expected: bool


@dataclass(frozen=True)
class ModelCachePlan:
    """roles/model_cache/tasks/plan.yml (source none: root, manifest and state empty)."""

    source: str
    relay: str
    root: str
    manifest: str
    state: str
    link: str
    dir: str
    user: str


@dataclass(frozen=True)
class GoldenPrompt:
    """One of sglang_golden_prompts, its defaults filled in (plugins/filter/sglang_golden.py)."""

    prompt: str
    contains: tuple[str, ...]
    same: bool
    max_tokens: int


@dataclass(frozen=True)
class SglangPlan:
    """roles/sglang/tasks/plan.yml: the unit, the split, this node's TP group, the endpoint."""

    unit: str
    install_method: str
    engine: str
    container_name: str
    tp_size: int
    nnodes: int
    gpus_per_node: int
    port: int
    dist_port: int
    model_path: str
    served_model_name: str
    api_key_file: str
    api_key_env: str
    api_key_required: bool
    env_file: str
    serve_timeout: int
    verify_requests: int
    verify_max_tokens: int
    tls: bool
    tls_ca_file: str
    api_allowed_cidrs: tuple[str, ...]
    rdma_expected: bool
    group: str
    group_head: str
    group_rank: int
    group_members: tuple[str, ...]
    gateway_host: str  # "" without a gateway
    gateway_port: int
    gateway_metrics_port: int
    image: str  # repository:tag ("" with the venv method)
    image_digest: str  # the inventory's pin, "" when not pinned
    version_file: str
    golden_prompts: tuple[GoldenPrompt, ...]
    upgrade_tolerance: float
    upgrade_load_concurrency: tuple[int, ...]
    upgrade_load_requests: int
    upgrade_drain_timeout: int
    mem_fraction_static: float
    min_kv_cache_gib: float
    kv_cache_dtype: str  # "auto": the model's dtype
    context_length: int  # 0: the model's own


@dataclass(frozen=True)
class ValidatePlan:
    """roles/validate/tasks/main.yml: the thresholds and the sweep.

    ``line_rate_gbytes`` None: not set (validate refuses to gate without it).
    ``busbw_min_fraction``: one number, or one per collective (None: not gated).
    ``perftest``: auto, or a yes/no as the inventory wrote it."""

    line_rate_gbytes: float | None
    busbw_min_fraction: float | Mapping[str, float | None]
    busbw_floor_ratio: float
    judged_sizes: int
    baseline_tolerance: float
    collectives: tuple[str, ...]
    nccl_min_bytes: int
    nccl_latency_min_bytes: int  # all_reduce's sweep starts here (decode's message sizes)
    nccl_max_bytes: int
    nccl_mem_fraction: float
    nccl_calibrated_bytes: int
    nccl_iters: int
    nccl_warmup_iters: int
    nccl_timeout: int
    localise: bool
    perftest: str | bool
    clock_max_offset_ms: float
    mem_headroom_mb: int
    disk_headroom_mb: int
    command_timeout: int

    def as_mapping(self) -> dict[str, Any]:
        """The settings as the role named them (``validate_*`` without the prefix)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclass(frozen=True)
class ConnectionPlan:
    """How the node is reached, as Ansible resolved it (playbooks/group_vars/all/
    connection.yml, ``sparkctl_connection``): named as the inventory's variables, so
    that a refusal names the variable to fix. "" is not set (ssh's default)."""

    ansible_host: str
    ansible_user: str
    ansible_port: str
    ansible_ssh_private_key_file: str
    ansible_ssh_common_args: str
    sparkctl_known_hosts_file: str

    def as_vars(self) -> dict[str, str]:
        """The variables that are set, by name."""
        return {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name)
        }


# ------------------------------------------------------------------ a node, the cluster
@dataclass(frozen=True)
class NodePlan:
    """Everything the plan says about one node."""

    node_rank: int
    mgmt_ip: str
    fabric_a_ip: str
    fabric_b_ip: str
    connection: ConnectionPlan
    nvidia_driver: NvidiaDriverPlan
    base: BasePlan
    roce_fabric: RoceFabricPlan
    nccl: NcclPlan
    model_cache: ModelCachePlan
    sglang: SglangPlan
    validate: ValidatePlan

    def fabric_ip(self, twin: str) -> str:
        """The node's address on twin ``a`` or ``b``."""
        if twin not in ("a", "b"):
            raise ValueError(f"no twin {twin!r}")
        return self.fabric_a_ip if twin == "a" else self.fabric_b_ip

    @classmethod
    def from_dict(cls, data: object, where: str = "") -> NodePlan:
        return _read(cls, data, where)


@dataclass(frozen=True)
class Plan:
    """The whole plan: the cluster, its hardware profile and every node (the play's order)."""

    schema: int
    cluster: str
    hw_profile: str
    # The hardware profile's table (cluster_defaults' vars, entries overridable through
    # cluster_hw): the roles read it, not this plan's promises, so it stays a mapping.
    cluster_hw: Mapping[str, Any]
    hosts: Mapping[str, NodePlan]

    @property
    def nodes(self) -> list[str]:
        return list(self.hosts)

    def node(self, name: str) -> NodePlan:
        return self.hosts[name]

    @property
    def settings(self) -> ValidatePlan:
        """The validate role's settings (cluster-wide: every node has the same)."""
        return next(iter(self.hosts.values())).validate

    @classmethod
    def from_dict(cls, data: object) -> Plan:
        """The plan JSON as the validate role wrote it; SparkctlError (exit 2) naming the
        field when its shape is not the roles'."""
        top = _mapping(data, "")
        if "hosts" in top:
            hosts = _mapping(top["hosts"], "hosts")
            if not hosts:
                raise _bad("hosts", "at least one node", hosts)
            order = sorted(hosts, key=lambda n: _rank(hosts[n]))
            top = {**top, "hosts": {n: _one_group(n, v, order) for n, v in hosts.items()}}
        return _read(cls, top, "")


def _rank(node: object) -> int:
    rank = node.get("node_rank") if isinstance(node, Mapping) else None
    return rank if isinstance(rank, int) else 0  # a bad node_rank is named by _read


def _one_group(name: str, node: object, names: list[str]) -> object:
    """A node whose sglang part names no TP group (a plan from before groups) is in the one
    default group of every node, in node_rank order."""
    if not isinstance(node, Mapping) or not isinstance(node.get("sglang"), Mapping):
        return node
    s = node["sglang"]
    if any(k in s for k in ("group", "group_head", "group_rank", "group_members")):
        return node
    group = {
        "group": DEFAULT_SGLANG_GROUP,
        "group_head": names[0],
        "group_rank": names.index(name),
        "group_members": list(names),
    }
    return {**node, "sglang": {**s, **group}}


# ------------------------------------------------------------------ the reader
def _bad(at: str, want: str, value: object) -> SparkctlError:
    where = f"{at}: " if at else ""
    return SparkctlError(f"plan: {where}expected {want}, got {value!r}", ExitCode.BAD_INPUT)


def _mapping(value: object, at: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _bad(at, "a mapping", value)
    return value


def _join(where: str, key: str) -> str:
    """``spark2: sglang`` + ``port`` -> ``spark2: sglang.port``; a host opens ``spark2: ``."""
    return f"{where}{key}" if not where or where.endswith(": ") else f"{where}.{key}"


def _read(cls: type[_T], data: object, where: str) -> _T:
    """``cls`` from a mapping with exactly its fields, each converted by its annotation."""
    obj = _mapping(data, where.removesuffix(": "))
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unexpected = sorted(set(obj) - set(fields))
    if unexpected:
        raise SparkctlError(
            f"plan: {_join(where, unexpected[0])}: unexpected field "
            f"(the roles write {', '.join(fields)})",
            ExitCode.BAD_INPUT,
        )
    values: dict[str, Any] = {}
    for name in fields:
        at = _join(where, name)
        if name not in obj:
            raise SparkctlError(f"plan: {at}: missing", ExitCode.BAD_INPUT)
        values[name] = _convert(hints[name], obj[name], at)
    return cls(**values)


_NONE_WORDS = (None, "", "None")  # how an unset value may come out of Jinja


def _str(value: object, at: str) -> str:
    if not isinstance(value, str):
        raise _bad(at, "str", value)
    return value


def _bool(value: object, at: str) -> bool:
    if not isinstance(value, bool):
        raise _bad(at, "bool", value)
    return value


def _int(value: object, at: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(at, "int", value)
    return value


def _float(value: object, at: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(at, "float", value)
    return float(value)


def _number_or_none(value: object, at: str) -> float | None:
    """Not cast by the role (validate_line_rate_gbytes, a fraction per collective): a
    number, a numeric string, or unset."""
    if value in _NONE_WORDS:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _bad(at, "a number or null", value)
    try:
        return float(value)
    except ValueError:
        raise _bad(at, "a number or null", value) from None


def _str_or_bool(value: object, at: str) -> str | bool:
    if not isinstance(value, str | bool):
        raise _bad(at, "str or bool", value)
    return value


def _fraction(value: object, at: str) -> float | Mapping[str, float | None]:
    """One fraction of the line rate, or one per collective."""
    if isinstance(value, Mapping):
        return {str(k): _number_or_none(v, _join(at, str(k))) for k, v in value.items()}
    return _float(value, at)


def _env(value: object, at: str) -> dict[str, str]:
    """An environment: scalars, as the env file spells them."""
    obj = _mapping(value, at)
    for k, v in obj.items():
        if isinstance(v, Mapping | list) or v is None:
            raise _bad(_join(at, str(k)), "a scalar", v)
    return {str(k): str(v) for k, v in obj.items()}


def _any_mapping(value: object, at: str) -> Mapping[str, Any]:
    return dict(_mapping(value, at))


def _str_mapping(value: object, at: str) -> Mapping[str, str]:
    return {str(k): _str(v, _join(at, str(k))) for k, v in _mapping(value, at).items()}


def _hosts(value: object, at: str) -> Mapping[str, NodePlan]:
    """Every node: each opens its own path (``spark2: ``)."""
    return {str(k): _read(NodePlan, v, f"{k}: ") for k, v in _mapping(value, at).items()}


_READERS: dict[Any, Callable[[object, str], Any]] = {
    str: _str,
    bool: _bool,
    int: _int,
    float: _float,
    float | None: _number_or_none,
    str | bool: _str_or_bool,
    float | Mapping[str, float | None]: _fraction,
    Mapping[str, Any]: _any_mapping,
    Mapping[str, str]: _str_mapping,
    dict[str, str]: _env,
    Mapping[str, NodePlan]: _hosts,
}


def _convert(hint: Any, value: object, at: str) -> Any:
    reader = _READERS.get(hint)
    if reader is not None:
        return reader(value, at)
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple and args[1:] == (Ellipsis,):
        if not isinstance(value, list | tuple):
            raise _bad(at, "a list", value)
        return tuple(_convert(args[0], v, f"{at}[{i}]") for i, v in enumerate(value))
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _read(hint, value, at)
    raise TypeError(f"{at}: no reader for {hint}")  # a field type this module forgot
