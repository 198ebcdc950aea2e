"""roles/roce_fabric on two Sparks cabled back to back: the state the role leaves.

Each test is one case per Spark (and per twin, interface or sysctl); expected
values come from the scenario's inventory and the role's defaults.
"""

# testinfra tests assert; pyproject's per-file-ignores cover tests/** only.
# ruff: noqa: S101

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from verify_helpers import DEFAULTS, INVENTORY, SPARKS, assert_running, hostvars, name_of, podman

testinfra_hosts = [podman(name) for name in SPARKS]

MTU = DEFAULTS["roce_fabric_mtu"]
NETPLAN = DEFAULTS["roce_fabric_netplan_file"]
SYSCTLS: dict[str, int] = DEFAULTS["roce_fabric_sysctls"]
SYSCTL_FILE = "/etc/sysctl.d/60-sparkctl-roce.conf"
GUARD = "/usr/local/sbin/sparkctl-net-guard"
TWINS = ("a", "b")
IBDEV = {"a": DEFAULTS["roce_fabric_ibdev_a"], "b": DEFAULTS["roce_fabric_ibdev_b"]}


def twin(host: Any, name: str) -> tuple[str, str, str]:
    """(netdev, address, prefix length) of twin ``name`` on ``host``."""
    hv = hostvars(host)
    return (
        hv[f"fabric_{name}_netdev"],
        hv[f"fabric_{name}_ip"],
        hv[f"fabric_{name}_subnet"].split("/")[1],
    )


def peer_of(host: Any) -> dict[str, Any]:
    me = name_of(host)
    (peer,) = [h for h in SPARKS if h != me]
    variables: dict[str, Any] = INVENTORY.get_variables(peer)
    return variables


@pytest.mark.parametrize("name", TWINS)
def test_twin_is_up_with_its_address_and_mtu(host: Any, name: str) -> None:
    dev, address, prefix = twin(host, name)
    (link,) = json.loads(host.check_output("ip -j -4 addr show dev %s", dev))
    assert link["operstate"] == "UP"
    assert link["mtu"] == MTU
    assert [f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"]] == [f"{address}/{prefix}"]


@pytest.mark.parametrize("name", TWINS)
def test_netplan_declares_the_twin(host: Any, name: str) -> None:
    dev, address, prefix = twin(host, name)
    netplan = host.file(NETPLAN)
    assert netplan.user == "root"
    assert netplan.mode == 0o600
    assert yaml.safe_load(netplan.content_string)["network"]["ethernets"][dev] == {
        "dhcp4": False,
        "dhcp6": False,
        "link-local": [],
        "mtu": MTU,
        "addresses": [f"{address}/{prefix}"],
    }


def test_staged_netplan_is_what_is_live(host: Any) -> None:
    assert host.file(f"{NETPLAN}.sparkctl-staged").content == host.file(NETPLAN).content


@pytest.mark.parametrize("name", TWINS)
def test_networkd_applies_the_netplan(host: Any, name: str) -> None:
    dev, address, prefix = twin(host, name)
    generated = host.file(f"/run/systemd/network/10-netplan-{dev}.network")
    assert generated.exists, "netplan generate did not run for the twin"
    assert f"Address={address}/{prefix}" in generated.content_string
    status = host.check_output("networkctl status --no-pager %s", dev)
    assert f"10-netplan-{dev}.network" in status


def test_networkd_is_running(host: Any) -> None:
    assert_running(host, "systemd-networkd", enabled=False)


@pytest.mark.parametrize("iface", ["all", "default", "a", "b"])
@pytest.mark.parametrize("key", sorted(SYSCTLS))
def test_sysctl_is_live(host: Any, iface: str, key: str) -> None:
    dev = twin(host, iface)[0] if iface in TWINS else iface
    assert host.sysctl(f"net.ipv4.conf.{dev}.{key}") == SYSCTLS[key]


def test_sysctls_persist_across_reboots(host: Any) -> None:
    hv = hostvars(host)
    conf = host.file(SYSCTL_FILE)
    assert conf.mode == 0o644
    lines = {
        line.strip()
        for line in conf.content_string.splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert lines == {
        f"net.ipv4.conf.{iface}.{key} = {value}"
        for iface in ("all", "default", hv["fabric_a_netdev"], hv["fabric_b_netdev"])
        for key, value in SYSCTLS.items()
    }


def test_change_was_confirmed_not_rolled_back(host: Any) -> None:
    guard = host.file(GUARD)
    assert guard.mode == 0o755
    assert json.loads(host.check_output("%s status", GUARD)) == {
        "armed": False,
        "last_rollback": None,
    }
    assert not host.service("sparkctl-net-rollback.timer").is_running


@pytest.mark.parametrize("name", TWINS)
def test_roce_device_is_up_on_the_twin(host: Any, name: str) -> None:
    dev = twin(host, name)[0]
    assert f"{IBDEV[name]} port 1 ==> {dev} (Up)" in host.check_output("ibdev2netdev").splitlines()


@pytest.mark.parametrize("name", TWINS)
def test_full_mtu_frames_reach_the_peer(host: Any, name: str) -> None:
    dev = twin(host, name)[0]
    peer = peer_of(host)[f"fabric_{name}_ip"]
    ping = host.run("ping -n -q -M do -c 3 -i 0.2 -W 2 -I %s -s %s %s", dev, str(MTU - 28), peer)
    assert ping.rc == 0, ping.stdout + ping.stderr
    assert " 0% packet loss" in ping.stdout
