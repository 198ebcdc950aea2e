"""The roce_fabric role's modules: the RoCE v2 GID index and the live link/sysctl reader.

The GID-table parser is tested on real ``show_gids`` output copied from public
sources (tests/fixtures/show_gids/, read below with where they come from), on the lab's own
``show_gids`` stand-in run against a fake node, and on a fake sysfs tree.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl.collection import tool_output as TO
from tests.unit.pathload import load_file

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "ansible_collections" / "sparkctl" / "spark" / "roles" / "roce_fabric"

gid = load_file("roce_gid_index", ROLE.parents[1] / "plugins" / "modules" / "roce_gid_index.py")
links = load_file("roce_link_facts", ROLE.parents[1] / "plugins" / "modules" / "roce_link_facts.py")

# --- Real show_gids output (tests/fixtures/show_gids/, SOURCES.md names each source)
SHOW_GIDS = REPO / "tests" / "fixtures" / "show_gids"
# Two NVIDIA GB10 machines (ConnectX-7, the four DGX Spark RoCE devices), from
# the write-up "RoCEv2 Hands-on: Parameters, rping Testing, and Packet
# Capture" (2026-06-03, "sean@gb10-1"); as published: columns space-aligned,
# the MAC part of the link-local GIDs masked with x. Its author concludes
# "For RoCEv2, pick the v2 entry with IPv4 mapping -- on this machine, that's
# index 3"; ib_write_bw there auto-selected GID index 3.
GB10_SHOW_GIDS = (SHOW_GIDS / "gb10-port0-spaces-redacted.txt").read_text()
# MLNX_OFED's show_gids with its tabs intact, three ConnectX ports; quoted in
# a public RDMA example's header (ib.h, "IB PORT and GID INDEX", which pins
# IB_GID_INDEX 3: "INDEX `3` means a RoCE V2 device based on IPv4").
MLNX_SHOW_GIDS = (SHOW_GIDS / "mlx5-three-ports-tabs.txt").read_text()
# An InfiniBand port next to a RoCE port (no IPv4, no netdev on the IB row),
# as printed in a public ConnectX notes page ("show_gids can view the GID and
# ROCE version of each HCA").
MIXED_IB_SHOW_GIDS = (SHOW_GIDS / "mlx5-ib-and-roce-ports.txt").read_text()


# ------------------------------------------------------- show_gids parser
def test_parse_gb10_show_gids() -> None:
    rows = TO.show_gids(GB10_SHOW_GIDS)
    assert len(rows) == 12
    assert rows[3] == {
        "dev": "rocep1s0f0",
        "port": 1,
        "index": 3,
        "gid": "0000:0000:0000:0000:0000:ffff:c0a8:640a",
        "ipv4": "192.168.100.10",
        "ver": "v2",
        "ndev": "enp1s0f0np0",
    }
    assert rows[0]["ipv4"] is None and rows[0]["ver"] == "v1"


def test_gb10_twins_give_index_3() -> None:
    rows = TO.show_gids(GB10_SHOW_GIDS)
    index, chosen = gid.select_index(
        rows,
        ["enp1s0f0np0", "enP2p1s0f0np0"],
        {"enp1s0f0np0": "192.168.100.10", "enP2p1s0f0np0": "192.168.100.14"},
    )
    assert index == 3
    assert chosen["enP2p1s0f0np0"] == {
        "ibdev": "roceP2p1s0f0",
        "port": 1,
        "index": 3,
        "gid": "0000:0000:0000:0000:0000:ffff:c0a8:640e",
        "ipv4": "192.168.100.14",
    }


def test_gb10_twin_without_address_points_at_the_fabric_role() -> None:
    rows = TO.show_gids(GB10_SHOW_GIDS)
    with pytest.raises(gid.GidError) as err:
        gid.select_index(rows, ["enp1s0f1np1", "enP2p1s0f1np1"])
    message = str(err.value)
    assert "enp1s0f1np1 (rocep1s0f1): no RoCE v2 GID with an IPv4 address" in message
    assert "enP2p1s0f1np1" in message
    assert "roce_fabric role first" in message


def test_tab_separated_mlnx_output() -> None:
    rows = TO.show_gids(MLNX_SHOW_GIDS)
    assert [r["index"] for r in rows if r["ndev"] == "eth02"] == [0, 1, 2, 3]
    assert rows[6]["ipv4"] == "26.110.177.29"
    assert gid.select_index(rows, ["eth02", "eth03"])[0] == 3


def test_address_the_node_does_not_carry_is_an_error() -> None:
    rows = TO.show_gids(MLNX_SHOW_GIDS)
    with pytest.raises(gid.GidError, match=r"eth02 \(mlx5_1\): no RoCE v2 GID for 10\.0\.0\.1"):
        gid.select_index(rows, ["eth02"], {"eth02": "10.0.0.1"})


def test_twins_with_different_indexes_are_refused() -> None:
    extra = (
        "mlx5_1\t1\t4\t0000:0000:0000:0000:0000:ffff:0a00:0001\t10.0.0.1  \tv1\teth02\n"
        "mlx5_1\t1\t5\t0000:0000:0000:0000:0000:ffff:0a00:0001\t10.0.0.1  \tv2\teth02\n"
    )
    rows = TO.show_gids(MLNX_SHOW_GIDS + extra)
    with pytest.raises(gid.GidError, match=r"differ \(eth02=5, eth03=3\)"):
        gid.select_index(rows, ["eth02", "eth03"], {"eth02": "10.0.0.1"})


def test_infiniband_rows_without_netdev_parse() -> None:
    rows = TO.show_gids(MIXED_IB_SHOW_GIDS)
    assert rows[-1] == {
        "dev": "mlx5_1",
        "port": 1,
        "index": 0,
        "gid": "fe80:0000:0000:0000:248a:0703:00b1:bc05",
        "ipv4": None,
        "ver": "v1",
        "ndev": None,
    }
    with pytest.raises(gid.GidError, match="no GID at all"):
        gid.select_index(rows, ["enp1s0f1np1"])


def test_gid_to_ipv4() -> None:
    assert TO.gid_to_ipv4("0000:0000:0000:0000:0000:ffff:c0a8:640b") == "192.168.100.11"
    assert TO.gid_to_ipv4("fe80:0000:0000:0000:5cc1:04ff:fee8:7c71") is None


def test_lab_show_gids_standin_output_parses(tmp_path: Path) -> None:
    """The lab's show_gids stand-in (what the role reads in the lab) gives index 3."""
    assets = REPO / "lab" / "sparkctl_lab" / "standins"
    hw = {
        "roce": [
            {"ibdev": "rocep1s0f1", "port": 1, "netdev": "enp1s0f1np1"},
            {"ibdev": "roceP2p1s0f1", "port": 1, "netdev": "enP2p1s0f1np1"},
        ]
    }
    (tmp_path / "hardware.json").write_text(json.dumps(hw))
    for i, dev in enumerate(("enp1s0f1np1", "enP2p1s0f1np1")):
        (tmp_path / "sys" / "class" / "net" / dev).mkdir(parents=True)
        (tmp_path / "sys" / "class" / "net" / dev / "address").write_text(f"4c:bb:47:2d:1a:1{i}\n")
    (tmp_path / "ip.json").write_text(
        json.dumps(
            [
                {
                    "ifname": "enp1s0f1np1",
                    "addr_info": [{"family": "inet", "local": "192.168.100.11"}],
                },
                {
                    "ifname": "enP2p1s0f1np1",
                    "addr_info": [{"family": "inet", "local": "192.168.101.11"}],
                },
            ]
        )
    )
    env = {
        "SPARKCTL_LAB_HW": str(tmp_path / "hardware.json"),
        "SPARKCTL_LAB_SYSFS": str(tmp_path / "sys"),
        "SPARKCTL_LAB_IP_JSON": str(tmp_path / "ip.json"),
        "PATH": "/usr/bin:/bin",
    }
    proc = subprocess.run(
        [sys.executable, str(assets / "show_gids")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    rows = TO.show_gids(proc.stdout)
    assert len(rows) == 8
    index, chosen = gid.select_index(
        rows,
        ["enp1s0f1np1", "enP2p1s0f1np1"],
        {"enp1s0f1np1": "192.168.100.11", "enP2p1s0f1np1": "192.168.101.11"},
    )
    assert index == 3
    assert chosen["enp1s0f1np1"]["ibdev"] == "rocep1s0f1"


def _sysfs_gid(
    root: Path, dev: str, index: int, value: str, *, kind: str | None, ndev: str | None
) -> None:
    port = root / "class" / "infiniband" / dev / "ports" / "1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (port / sub).mkdir(parents=True, exist_ok=True)
    (port / "gids" / str(index)).write_text(value + "\n")
    if kind is not None:
        (port / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")
    if ndev is not None:
        (port / "gid_attrs" / "ndevs" / str(index)).write_text(ndev + "\n")


def test_sysfs_gid_table_is_preferred_and_parsed(tmp_path: Path) -> None:
    for dev, ndev, mapped in (
        ("rocep1s0f1", "enp1s0f1np1", "c0a8:640b"),
        ("roceP2p1s0f1", "enP2p1s0f1np1", "c0a8:650b"),
    ):
        link_local = "fe80:0000:0000:0000:5cc1:04ff:fee8:7c71"
        _sysfs_gid(tmp_path, dev, 0, link_local, kind="IB/RoCE v1", ndev=ndev)
        _sysfs_gid(tmp_path, dev, 1, link_local, kind="RoCE v2", ndev=ndev)
        mapped_gid = f"0000:0000:0000:0000:0000:ffff:{mapped}"
        _sysfs_gid(tmp_path, dev, 2, mapped_gid, kind="IB/RoCE v1", ndev=ndev)
        _sysfs_gid(tmp_path, dev, 3, mapped_gid, kind="RoCE v2", ndev=ndev)
        # unused slot: zero GID, and attrs that cannot be read
        _sysfs_gid(
            tmp_path, dev, 4, "0000:0000:0000:0000:0000:0000:0000:0000", kind=None, ndev=None
        )
    source, rows = gid.read_table(tmp_path, "show_gids-that-does-not-exist")
    assert source == "sysfs"
    assert len(rows) == 8
    index, chosen = gid.select_index(
        rows,
        ["enp1s0f1np1", "enP2p1s0f1np1"],
        {"enp1s0f1np1": "192.168.100.11", "enP2p1s0f1np1": "192.168.101.11"},
    )
    assert index == 3
    assert chosen["enP2p1s0f1np1"]["ipv4"] == "192.168.101.11"


def test_no_rdma_and_no_show_gids_is_explained(tmp_path: Path) -> None:
    with pytest.raises(gid.GidError, match="mlx5_ib"):
        gid.read_table(tmp_path, "show_gids-that-does-not-exist")


# --------------------------------------------------- roce_link_facts: sysctls
def test_sysctl_keys_map_to_proc_paths() -> None:
    assert links.sysctl_path("net.ipv4.conf.all.arp_ignore") == Path(
        "/proc/sys/net/ipv4/conf/all/arp_ignore"
    )
    # A netdev with a dot (VLAN) keeps it, as sysctl(8) does.
    assert links.sysctl_path("net.ipv4.conf.eth0.100.rp_filter") == Path(
        "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"
    )


def test_sysctls_read_as_sysctl_prints_them(tmp_path: Path) -> None:
    conf = tmp_path / "proc" / "sys" / "net" / "ipv4" / "conf" / "all"
    conf.mkdir(parents=True)
    (conf / "arp_ignore").write_text("1\n")
    (conf / "rp_filter").write_text("2\n")
    got = links.read_sysctls(
        [
            "net.ipv4.conf.all.arp_ignore",
            "net.ipv4.conf.all.rp_filter",
            "net.ipv4.conf.all.missing",
        ],
        root=tmp_path,
    )
    assert got == {
        "net.ipv4.conf.all.arp_ignore": "1",
        "net.ipv4.conf.all.rp_filter": "2",
        "net.ipv4.conf.all.missing": None,
    }


def test_this_machines_live_sysctl_is_read() -> None:
    key = "net.ipv4.ip_forward"
    want = Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()
    assert links.read_sysctls([key]) == {key: want}
