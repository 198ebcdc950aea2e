"""The lab's egress guard against real containers: a node reaches nothing outside the lab
but the package mirror provisioning needs (lab/sparkctl_lab/egress.py).

What leaked before: a node with no fabric addresses (a lab up but not provisioned,
or a netplan that did not apply) sent its SSH to a fabric address out through the
management default route and podman's NAT into the controller's own network. The
probes here leave through the management interface on purpose (``SO_BINDTODEVICE``
to ``enP7s7``): that is the path such a node's fabric traffic takes, whatever state
the shared lab is in; and from the lab switch, which never has a fabric address, they
leave that way with no option at all. So the test needs no fabric address flushed and
restores nothing.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import subprocess

import pytest

from sparkctl_lab import egress
from sparkctl_lab.lab import MGMT_IF
from sparkctl_lab.lab import NETWORK as LAB_NETWORK
from sparkctl_lab.podman import CONTAINERS_CONF
from tests.conftest import LabSession, sparkctl
from tests.labhost import ssh

pytestmark = pytest.mark.lab

# Run on a lab node: connect to each (address, port), optionally bound to a device;
# print what happened to each: "connected", "timeout" or the errno's name.
_PROBE = r"""
import errno, json, socket, sys
out = []
for addr, port, dev in json.loads(sys.argv[1]):
    s = socket.socket()
    s.settimeout(10)
    if dev:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, dev.encode())
    try:
        s.connect((addr, port))
        out.append("connected")
    except socket.timeout:
        out.append("timeout")
    except OSError as exc:
        out.append(errno.errorcode.get(exc.errno, str(exc.errno)))
    finally:
        s.close()
print(json.dumps(out))
"""

_FETCH = r"""
import sys, urllib.request
req = urllib.request.Request(sys.argv[1], method="HEAD")
with urllib.request.urlopen(req, timeout=60) as resp:
    print(resp.status)
"""


def _probe(node_ip: str, probes: list[tuple[str, int, str | None]]) -> list[str]:
    arg = json.dumps(probes).replace("'", "'\\''")
    script = _PROBE.replace("'", "'\\''")
    out = ssh(node_ip, f"python3 -c '{script}' '{arg}'", timeout=120).stdout
    result: list[str] = json.loads(out)
    return result


def _controller_gateway() -> str | None:
    """The controller's own default gateway: a host of the user's real network."""
    routes = json.loads(
        subprocess.run(
            ["ip", "-j", "-4", "route", "show", "default"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        or "[]"
    )
    return next((str(r["gateway"]) for r in routes if r.get("gateway")), None)


def _lab_bridge() -> str:
    proc = subprocess.run(
        ["podman", "network", "inspect", LAB_NETWORK],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)},
    )
    return str(json.loads(proc.stdout)[0]["network_interface"])


def test_the_guard_is_on_the_labs_bridge(lab: LabSession) -> None:
    table = subprocess.run(
        ["nft", "list", "table", egress.FAMILY, egress.TABLE],
        capture_output=True,
        text=True,
        check=False,
    )
    assert table.returncode == 0, table.stderr
    assert f'iifname != "{_lab_bridge()}" accept' in table.stdout
    status = json.loads(sparkctl("lab", "status", "--json", check=True).stdout)
    assert status["egress_guard"] is True


def test_a_node_reaches_nothing_outside_the_lab(lab: LabSession) -> None:
    node = lab.inventory.node("spark1")
    peer = lab.inventory.node("spark2")
    probes: list[tuple[str, int, str | None]] = [
        # the leak: the relay chain's SSH to a peer's fabric addresses, leaving as it
        # does from a node without fabric addresses - through the management side
        (peer.fabric_ips["a"], 22, MGMT_IF),
        (peer.fabric_ips["b"], 22, MGMT_IF),
        (peer.fabric_ips["a"], 443, MGMT_IF),
        # a public address, not a web port
        ("1.1.1.1", 22, None),
    ]
    gateway = _controller_gateway()
    if gateway is not None and not ipaddress.IPv4Address(gateway).is_loopback:
        probes.append((gateway, 22, None))  # the controller's real gateway
    results = _probe(node.mgmt_ip, probes)
    refused = errno.errorcode[errno.EHOSTUNREACH]
    # refused at once by the host ("No route to host"), neither connected nor left to hang
    assert results == [refused] * len(probes), list(zip(probes, results, strict=True))


def test_a_host_without_fabric_addresses_sends_fabric_traffic_nowhere(lab: LabSession) -> None:
    """The lab switch never has a fabric address (it bridges the fabric, provisioned or
    not): from it, fabric traffic takes the management default route as an unprovisioned
    node's does, with no socket option."""
    assert lab.inventory.switch is not None
    switch = lab.inventory.switch.mgmt_ip
    peer = lab.inventory.node("spark2")
    for twin in ("a", "b"):
        route = json.loads(ssh(switch, f"ip -j route get {peer.fabric_ips[twin]}").stdout)[0]
        assert route["dev"] == MGMT_IF, route  # the precondition: out the management side
    probes: list[tuple[str, int, str | None]] = [
        (peer.fabric_ips["a"], 22, None),
        (peer.fabric_ips["b"], 22, None),
    ]
    assert _probe(switch, probes) == [errno.errorcode[errno.EHOSTUNREACH]] * 2


def test_the_lab_itself_and_the_package_mirror_stay_reachable(lab: LabSession) -> None:
    node = lab.inventory.node("spark1")
    peer = lab.inventory.node("spark2")
    # lab-internal: the management network (the fabric is the lab switch's, not the host's)
    assert _probe(node.mgmt_ip, [(peer.mgmt_ip, 22, None)]) == ["connected"]
    # the mirror the node's apt uses, by name through the node's own resolver
    sources = ssh(node.mgmt_ip, "cat /etc/apt/sources.list").stdout
    mirror = egress.apt_uris(sources)[0].rstrip("/")
    script = _FETCH.replace("'", "'\\''")
    got = ssh(
        node.mgmt_ip,
        f"python3 -c '{script}' '{mirror}/dists/bookworm/Release'",
        timeout=120,
    )
    assert got.stdout.strip() == "200", got.stdout + got.stderr
    # and apt itself gets its package lists through the guard
    update = ssh(node.mgmt_ip, "apt-get -q update", timeout=600, check=False)
    assert update.returncode == 0, update.stdout[-2000:] + update.stderr[-2000:]
    assert "Err:" not in update.stdout, update.stdout[-2000:]
