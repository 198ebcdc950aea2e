"""roles/nccl on two addressed Sparks (hw_profile sim): the state the role leaves.

Each test is one case per Spark (and per variable, twin or binary);
expected values come from the scenario's inventory, the role's defaults and
the node's own GID table.
"""

# testinfra tests assert; pyproject's per-file-ignores cover tests/** only.
# ruff: noqa: S101

from __future__ import annotations

from typing import Any

import pytest
from verify_helpers import DEFAULTS, SPARKS, hostvars, podman, read_env

testinfra_hosts = [podman(name) for name in SPARKS]

ENV_FILE = DEFAULTS["nccl_env_file"]
CONF_FILE = DEFAULTS["nccl_conf_file"]
VERSION_FILE = DEFAULTS["nccl_version_file"]
TESTS_DIR = DEFAULTS["nccl_tests_dir"]
BINARIES = ["all_reduce_perf", "all_gather_perf", "reduce_scatter_perf"]
SOCKET_VARS = [
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "TP_SOCKET_IFNAME",
    "UCX_NET_DEVICES",
    "OMPI_MCA_btl_tcp_if_include",
]


def roce_v2_ipv4_index(host: Any, netdev: str, address: str) -> str:
    """INDEX of the RoCE v2 GID of ``netdev`` that carries ``address`` (show_gids)."""
    rows: list[list[str]] = [line.split() for line in host.check_output("show_gids").splitlines()]
    (index,) = [
        r[2] for r in rows if len(r) == 7 and r[6] == netdev and r[4] == address and r[5] == "v2"
    ]
    return index


@pytest.mark.parametrize("name", SOCKET_VARS)
def test_socket_traffic_on_twin_a(host: Any, name: str) -> None:
    assert read_env(host, ENV_FILE)[name] == hostvars(host)["fabric_a_netdev"]


def test_data_over_both_twins_of_each_port(host: Any) -> None:
    assert read_env(host, ENV_FILE)["NCCL_IB_HCA"] == ",".join(DEFAULTS["nccl_ib_hca"])


def test_subnet_aware_routing(host: Any) -> None:
    assert read_env(host, ENV_FILE)["NCCL_IB_SUBNET_AWARE_ROUTING"] == "1"


@pytest.mark.parametrize("twin", ["a", "b"])
def test_gid_index_is_the_roce_v2_gid_of_the_twins_address(host: Any, twin: str) -> None:
    hv = hostvars(host)
    index = roce_v2_ipv4_index(host, hv[f"fabric_{twin}_netdev"], hv[f"fabric_{twin}_ip"])
    assert read_env(host, ENV_FILE)["NCCL_IB_GID_INDEX"] == index


def test_nccl_conf_holds_the_nccl_variables_only(host: Any) -> None:
    conf = host.file(CONF_FILE)
    assert conf.mode == 0o644
    env = read_env(host, ENV_FILE)
    assert read_env(host, CONF_FILE) == {k: v for k, v in env.items() if k.startswith("NCCL_")}


def test_env_file_holds_exactly_the_roles_variables(host: Any) -> None:
    assert host.file(ENV_FILE).mode == 0o644
    env = read_env(host, ENV_FILE)
    assert set(env) == {
        *SOCKET_VARS,
        "NCCL_IB_HCA",
        "NCCL_IB_GID_INDEX",
        "NCCL_IB_SUBNET_AWARE_ROUTING",
        "NCCL_DEBUG",
        "NCCL_DEBUG_SUBSYS",
    }
    # INFO with INIT,NET: NCCL says which network it chose (serve up and validate read it)
    assert (env["NCCL_DEBUG"], env["NCCL_DEBUG_SUBSYS"]) == (
        DEFAULTS["nccl_debug"],
        DEFAULTS["nccl_debug_subsys"],
    )


def test_version_record_names_a_prebuilt_nccl_tests(host: Any) -> None:
    """The sim profile builds nothing: the lab put its nccl-tests stand-ins at the build's
    paths (lab/sparkctl_lab/standins), and the role found and verified them."""
    assert read_env(host, VERSION_FILE) == {
        "NCCL_VERSION": "none",
        "NCCL_HOME": "none",
        "NVCC_GENCODE": "none",
        "NCCL_TESTS_IMPL": "prebuilt",
        "NCCL_TESTS_VERSION": DEFAULTS["nccl_tests_version"],
        "NCCL_TESTS_DIR": TESTS_DIR,
    }


@pytest.mark.parametrize("binary", BINARIES)
def test_nccl_tests_binary_starts(host: Any, binary: str) -> None:
    path = f"{TESTS_DIR}/build/{binary}"
    assert host.file(path).mode == 0o755
    usage = host.run("%s -h", path)
    assert usage.rc == 0, usage.stderr
    assert f"USAGE: {binary}" in usage.stdout


@pytest.mark.parametrize("package", DEFAULTS["nccl_packages"])
def test_package_is_installed(host: Any, package: str) -> None:
    assert host.package(package).is_installed


def test_mpirun_is_open_mpi(host: Any) -> None:
    assert "Open MPI" in host.check_output("mpirun --version")
