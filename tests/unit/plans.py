"""Plans for unit tests, of exactly the shape the roles write (the lab's values).

Every plan built here goes through :meth:`sparkctl.plan.Plan.from_dict`, so a test
plan that drifts from the dataclasses (and so from what tests/contract/test_plan.py
shows the real play writes) fails where it is built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sparkctl.inventory import Inventory, Node
from sparkctl.plan import Plan
from sparkctl.remote import Runner
from sparkctl.serve.cluster import Cluster

NODES = ["spark1", "spark2", "spark3", "spark4"]
TWIN_NETDEV = {"a": "enp1s0f1np1", "b": "enP2p1s0f1np1"}
TWIN_IBDEV = {"a": "rocep1s0f1", "b": "roceP2p1s0f1"}
# nvidia_driver's hold set at its defaults (roles/nvidia_driver/vars/main.yml), written out.
NVIDIA_HOLD = (
    "nvidia-driver-580",
    "nvidia-driver-580-*",
    "nvidia-dkms-580",
    "nvidia-dkms-580-*",
    "nvidia-kernel-common-580",
    "nvidia-kernel-source-580",
    "nvidia-kernel-source-580-*",
    "nvidia-utils-580",
    "nvidia-utils-580-*",
    "nvidia-compute-utils-580",
    "nvidia-compute-utils-580-*",
    "nvidia-firmware-580-*",
    "libnvidia-*-580",
    "xserver-xorg-video-nvidia-580",
    "cuda-drivers-580",
    "cuda-*-13-0",
    "libnccl2",
    "libnccl-dev",
    "linux-nvidia-hwe-24.04",
    "linux-image-nvidia-hwe-24.04",
    "linux-headers-nvidia-hwe-24.04",
    "linux-tools-nvidia-hwe-24.04",
    "linux-modules-nvidia-fs-nvidia-hwe-24.04",
    "linux-modules-nvidia-580-open-*",
)
TWIN_SUBNET = {"a": "192.168.100", "b": "192.168.101"}
GID_PLACEHOLDER = "<detected-on-the-node-at-provision>"
NCCL_ENV = {
    "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
    "NCCL_IB_GID_INDEX": GID_PLACEHOLDER,
    "NCCL_IB_HCA": "rocep1s0f0,rocep1s0f1,roceP2p1s0f0,roceP2p1s0f1",
    "NCCL_IB_SUBNET_AWARE_ROUTING": "1",
    "NCCL_SOCKET_IFNAME": "enp1s0f1np1",
    "OMPI_MCA_btl_tcp_if_include": "enp1s0f1np1",
    "TP_SOCKET_IFNAME": "enp1s0f1np1",
    "UCX_NET_DEVICES": "enp1s0f1np1",
}


def fabric_ip(node: str, twin: str) -> str:
    return f"{TWIN_SUBNET[twin]}.1{node[-1]}"


def node_dict(
    node: str,
    rank: int,
    nodes: Sequence[str],
    *,
    line_rate: Any = 0.125,  # the lab inventory's validate_line_rate_gbytes
    perftest: Any = "auto",
    cluster_user: str = "root",
) -> dict[str, Any]:
    """One node's part of the plan, as validate_plan.yml writes it for inventory/sim.ini."""
    return {
        "base": {
            "chrony_upstream": [],
            "clock_control": False,
            "cluster_user": cluster_user,
            "head": nodes[0],
            "is_head": rank == 0,
            "key_name": "id_sparkctl_cluster",
        },
        "connection": {
            "ansible_host": f"10.77.0.1{node[-1]}",
            "ansible_user": "root",
            "ansible_port": "",
            "ansible_ssh_private_key_file": "",
            "ansible_ssh_common_args": "",
            "sparkctl_known_hosts_file": "~/.ssh/known_hosts",
        },
        "fabric_a_ip": fabric_ip(node, "a"),
        "fabric_b_ip": fabric_ip(node, "b"),
        "mgmt_ip": f"10.77.0.1{node[-1]}",
        "model_cache": {
            "dir": "/var/lib/sparkctl/models",
            "link": "/var/lib/sparkctl/models/current",
            "manifest": "",
            "relay": "/usr/local/bin/sparkctl-model-relay",
            "root": "",
            "source": "none",
            "state": "",
            "user": "root",
        },
        "nccl": {
            "binaries": ["all_reduce_perf", "all_gather_perf", "reduce_scatter_perf"],
            "conf_file": "/etc/nccl.conf",
            "env": dict(NCCL_ENV),
            "env_file": "/etc/sparkctl/nccl.env",
            "gid_placeholder": GID_PLACEHOLDER,
            "impl": "standin",
            "rdma_expected": False,
            "record_file": "/etc/sparkctl/roce-fabric.env",
            "socket_ifname": "enp1s0f1np1",
            "tests_dir": "/opt/nccl-tests/build",
            "version_file": "/etc/sparkctl/nccl-version",
        },
        "node_rank": rank,
        "nvidia_driver": {
            "gpu": "GB10",
            "min_cuda": "13.0",
            "min_driver": "580.0",
            "branch": "580",
            "driver_package": "nvidia-kernel-common-580",
            "hold": list(NVIDIA_HOLD),
            "hold_list": "/etc/sparkctl/nvidia-hold.list",
            "kernel_flavour": "nvidia-hwe-24.04",
            "modules_prefix": "linux-modules-nvidia-580-open-",
            "nvcc": "/usr/local/cuda/bin/nvcc",
            "min_nvcc": "13.0",
            "cuda_release": "13.0",
        },
        "roce_fabric": {
            "mtu": 9000,
            "record_file": "/etc/sparkctl/roce-fabric.env",
            "speed_mbps": 10000,
            "subnets": {"a": "192.168.100.0/24", "b": "192.168.101.0/24"},
            "twins": [
                {
                    "address": f"{fabric_ip(node, t)}/24",
                    "ibdev": TWIN_IBDEV[t],
                    "netdev": TWIN_NETDEV[t],
                    "twin": t,
                }
                for t in ("a", "b")
            ],
        },
        "sglang": {
            "api_allowed_cidrs": ["10.77.0.0/24"],
            "api_key_file": "/root/.local/state/sparkctl/clusters/sim/secrets/sglang-api-key",
            "api_key_env": "SPARKCTL_SGLANG_API_KEY",
            "api_key_required": True,
            "container_name": "sparkctl-sglang",
            "dist_port": 50000,
            "engine": "/usr/bin/docker",
            "env_file": "/etc/sparkctl/sglang.env",
            "gpus_per_node": 1,
            "group": "main",
            "group_head": nodes[0],
            "group_members": list(nodes),
            "gateway_host": "",
            "gateway_port": 30080,
            "gateway_metrics_port": 29000,
            "image": "lmsysorg/sglang:v0.5.17-cu130-runtime",
            "image_digest": "",
            "version_file": "/etc/sparkctl/sglang-version",
            "golden_prompts": [],
            "upgrade_tolerance": 0.5,
            "upgrade_load_concurrency": [1, 2, 8],
            "upgrade_load_requests": 16,
            "upgrade_drain_timeout": 300,
            "mem_fraction_static": 0.75,
            "min_kv_cache_gib": 2.0,
            "kv_cache_dtype": "auto",
            "context_length": 0,
            "group_rank": rank,
            "install_method": "container",
            "model_path": "/var/lib/sparkctl/models/current",
            "nnodes": len(nodes),
            "port": 30000,
            "rdma_expected": False,
            "serve_timeout": 300,
            "served_model_name": "",
            "tls": False,
            "tls_ca_file": "",
            "tp_size": len(nodes),
            "unit": "sparkctl-sglang.service",
            "verify_max_tokens": 64,
            "verify_requests": 3,
        },
        "validate": {
            "baseline_tolerance": 0.1,
            "busbw_floor_ratio": 0.8,
            "busbw_min_fraction": 0.875,
            "clock_max_offset_ms": 100.0,
            "collectives": ["all_reduce", "all_gather"],
            "command_timeout": 30,
            "disk_headroom_mb": 4096,
            "judged_sizes": 2,
            "line_rate_gbytes": line_rate,
            "localise": True,
            "mem_headroom_mb": 8192,
            "nccl_iters": 20,
            "nccl_max_bytes": 4294967296,
            "nccl_mem_fraction": 0.5,
            "nccl_calibrated_bytes": 1073741824,
            "nccl_min_bytes": 1048576,
            "nccl_latency_min_bytes": 8,
            "nccl_timeout": 600,
            "nccl_warmup_iters": 5,
            "perftest": perftest,
        },
    }


def plan_dict(
    nodes: Sequence[str] = NODES,
    *,
    edit: Callable[[str, dict[str, Any]], None] | None = None,
    rdma: bool = False,
    **node_values: Any,
) -> dict[str, Any]:
    """The whole plan JSON; ``edit(node, part)`` changes a node's part in place first,
    ``node_values`` go to :func:`node_dict`."""
    hosts = {}
    for rank, node in enumerate(nodes):
        part = node_dict(node, rank, nodes, **node_values)
        if edit is not None:
            edit(node, part)
        hosts[node] = part
    return {
        "schema": 1,
        "cluster": "sim",
        "hw_profile": "dgx_spark" if rdma else "sim",
        "cluster_hw": {
            "clock_control": False,
            "cuda_arch": "none",
            "line_rate_gbytes": node_values.get("line_rate"),
            "link_speed_mbps": 10000,
            "nccl_tests_impl": "prebuilt",
            "netplan_apply": "networkd",
            "rdma": rdma,
            "sglang_impl": "container",
        },
        "hosts": hosts,
    }


def plan(nodes: Sequence[str] = NODES, **kw: Any) -> Plan:
    """:func:`plan_dict`, read as sparkctl reads the real one."""
    return Plan.from_dict(plan_dict(nodes, **kw))


def sections(**values: Mapping[str, Any]) -> Callable[[str, dict[str, Any]], None]:
    """An ``edit`` for :func:`plan_dict` that updates the same sections of every node:
    ``sections(sglang={"port": 31000})``."""

    def edit(_node: str, part: dict[str, Any]) -> None:
        for name, update in values.items():
            part[name].update(update)

    return edit


def two_sparks(tmp_path: Path, *, user: str = "root", fabric: bool = True) -> Inventory:
    """spark1 and spark2 as inventory.validate gives them (management 10.77.0.11-12, and
    twin a's address unless ``fabric`` is false), reached as ``user``."""
    nodes = tuple(
        Node(NODES[i], i, f"10.77.0.{11 + i}", {"a": fabric_ip(NODES[i], "a")} if fabric else {})
        for i in range(2)
    )
    return Inventory(
        path=tmp_path / "x.ini",
        cluster="sim",
        nodes=nodes,
        switch=None,
        ports=(),
        hostvars={n.name: {"ansible_user": user} for n in nodes},
    )


def cluster(inv: Inventory, sglang: Mapping[str, Any], runner: Runner, run_dir: Path) -> Cluster:
    """A serve Cluster of ``inv``'s nodes as open_cluster builds it, with ``sglang`` in
    every node's plan and commands answered by ``runner``."""

    def edit(node: str, part: dict[str, Any]) -> None:
        part["sglang"].update(sglang)
        # the connection as Ansible resolves it from the inventory's ansible_user
        part["connection"]["ansible_user"] = str(inv.hostvars[node].get("ansible_user", ""))

    return Cluster(
        inv=inv,
        plan=plan([n.name for n in inv.nodes], edit=edit),
        run_dir=run_dir,
        ssh_config=run_dir / "ssh_config",
        runner=runner,
    )
