"""Wiring the lab fabric: veth "cables", the bridge switch and token-bucket shaping.

Each node twin is one veth pair created directly inside the two network
namespaces (node and switch), so nothing is left in the host's namespace and
everything disappears with the containers. The switch bridges the ports of
each twin into its own L2 domain. Every switch port is shaped in both
directions: egress with ``tbf`` on the port, ingress by redirecting to an
``ifb`` device shaped with ``tbf`` too (the kernel here has tbf and ifb, no
netem).

Commands are built by pure functions (unit-tested) and run with
``nsenter -t PID -n`` using the host's iproute2.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sparkctl.collection import tool_output
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.proc import run

# Port 0 of the CX-7 (f0 twins) is not cabled in this setup; the lab gives each
# node the two netdevs as a pair left down, so names and ibdev2netdev match a Spark.
UNCABLED_PAIR = ("enp1s0f0np0", "enP2p1s0f0np0")
DEFAULT_MTU = 1500  # switch ports and node ports out of the box
# Netdev names have at most 15 characters (IFNAMSIZ - 1); a port also names its "ifb-" device.
MAX_PORT_NAME = 15 - len("ifb-")


@dataclass(frozen=True)
class Cable:
    """One node twin cabled to one switch port, in the L2 domain of that twin."""

    node: str
    node_if: str
    port: str
    domain: str  # "a" or "b": one bridge per twin

    @property
    def bridge(self) -> str:
        return f"br-{self.domain}"

    @property
    def ifb(self) -> str:
        return f"ifb-{self.port}"


def burst_bytes(rate_mbit: int) -> int:
    """Token bucket depth: 4 ms at the rate, at least 128 KiB (one GSO frame plus headroom)."""
    return max(rate_mbit * 1_000_000 // 8 // 250, 128 * 1024)


def rate_commands(port: str, ifb: str, rate_mbit: int) -> list[list[str]]:
    """tc commands (run in the switch) that shape ``port`` to ``rate_mbit`` both ways:
    egress on the port itself, ingress on the ifb its ingress is redirected to."""
    if rate_mbit <= 0:
        raise SparkctlError(
            f"link rate must be a positive number of Mbit/s, not {rate_mbit}", ExitCode.BAD_INPUT
        )
    tbf = [
        "tbf",
        "rate",
        f"{rate_mbit}mbit",
        "burst",
        str(burst_bytes(rate_mbit)),
        "latency",
        "25ms",
    ]
    return [["tc", "qdisc", "replace", "dev", dev, "root", *tbf] for dev in (port, ifb)]


def ingress_redirect_commands(port: str, ifb: str) -> list[list[str]]:
    """Send everything arriving on ``port`` through ``ifb`` so it can be shaped.

    u32 with an all-matching key: this kernel has no matchall classifier.
    """
    return [
        ["ip", "link", "add", ifb, "type", "ifb"],
        # The ifb only carries what the port admitted; it must never be the MTU limit.
        ["ip", "link", "set", ifb, "mtu", "65535", "up"],
        ["tc", "qdisc", "add", "dev", port, "handle", "ffff:", "ingress"],
        [
            "tc",
            "filter",
            "add",
            "dev",
            port,
            "parent",
            "ffff:",
            "protocol",
            "all",
            "prio",
            "1",
            "u32",
            "match",
            "u32",
            "0",
            "0",
            "action",
            "mirred",
            "egress",
            "redirect",
            "dev",
            ifb,
        ],
    ]


def nsenter(pid: int, cmd: Sequence[str]) -> list[str]:
    return ["nsenter", "-t", str(pid), "-n", *cmd]


def ns_run(pid: int, cmd: Sequence[str], *, check: bool = True) -> str:
    return run(nsenter(pid, cmd), check=check, what=" ".join(cmd)).stdout


@dataclass(frozen=True)
class PortState:
    """What the switch keeps of one port while the node behind it is away."""

    mtu: int = DEFAULT_MTU
    rate_mbit: int = 0  # 0: the lab's rate
    up: bool = True


def plug(
    cable: Cable,
    node_pid: int,
    switch_pid: int,
    rate_mbit: int,
    *,
    port: PortState | None = None,
    node_up: bool = True,
) -> None:
    """One cable: a veth with an end in the node's namespace and one in the switch's,
    the switch end in its twin's bridge with the port's MTU, shaped both ways, and up
    unless the port was set down. ``node_up=False`` leaves the node's end as a NIC is
    at power-on: down, until the node's own network configuration brings it up."""
    run(
        [
            "ip",
            "link",
            "add",
            cable.node_if,
            "netns",
            str(node_pid),
            "type",
            "veth",
            "peer",
            "name",
            cable.port,
            "netns",
            str(switch_pid),
        ],
        what=f"cabling {cable.node}:{cable.node_if} to {cable.port}",
    )
    port = port or PortState()
    ns_run(
        switch_pid, ["ip", "link", "set", cable.port, "mtu", str(port.mtu), "master", cable.bridge]
    )
    for cmd in [
        *ingress_redirect_commands(cable.port, cable.ifb),
        *rate_commands(cable.port, cable.ifb, port.rate_mbit or rate_mbit),
    ]:
        ns_run(switch_pid, cmd)
    if port.up:
        ns_run(switch_pid, ["ip", "link", "set", cable.port, "up"])
    if node_up:
        ns_run(node_pid, ["ip", "link", "set", cable.node_if, "up"])


def plug_uncabled_pair(node: str, node_pid: int) -> None:
    """Port 0's twins of the CX-7, not cabled: a veth pair inside the node, left down."""
    a, b = UNCABLED_PAIR
    run(
        [
            "ip",
            "link",
            "add",
            a,
            "netns",
            str(node_pid),
            "type",
            "veth",
            *("peer", "name", b),
            "netns",
            str(node_pid),
        ],
        what=f"uncabled port 0 twins on {node}",
    )


def port_states(
    switch_links: Sequence[dict[str, Any]], rates: dict[str, int], cables: Sequence[Cable]
) -> dict[str, PortState]:
    """The state of each cable's switch port, from :func:`links` and :func:`port_rates` of
    the switch: MTU, shaping rate, and whether it was set down (``lab port --down``: DOWN;
    a port whose node end is down reads LOWERLAYERDOWN and stays up)."""
    by_name = {link["name"]: link for link in switch_links}
    out = {}
    for cable in cables:
        link = by_name.get(cable.port)
        if link is not None:
            out[cable.port] = PortState(
                mtu=int(link["mtu"]),
                rate_mbit=rates.get(cable.port, 0),
                up=link["state"] != "DOWN",
            )
    return out


def unplug_leftovers(switch_pid: int, cables: Sequence[Cable]) -> list[str]:
    """What is left of these cables in the switch once their node's namespace is gone
    (the veth went with it, both ends; the port's ifb stays), removed; returns its names."""
    present = {link["name"] for link in links(switch_pid)}
    gone = [dev for c in cables for dev in (c.port, c.ifb) if dev in present]
    for dev in gone:
        # The kernel may be removing a dead namespace's veth at the same moment.
        ns_run(switch_pid, ["ip", "link", "del", dev], check=False)
    left = {link["name"] for link in links(switch_pid)} & set(gone)
    if left:
        raise SparkctlError(
            f"could not remove {', '.join(sorted(left))} from the lab switch", ExitCode.LAB
        )
    return gone


def wire(
    cables: Sequence[Cable], node_pids: dict[str, int], switch_pid: int, rate_mbit: int
) -> None:
    """Create cables, bridges and shaping. The lab must be freshly created."""
    for bridge in sorted({c.bridge for c in cables}):
        ns_run(switch_pid, ["ip", "link", "add", bridge, "type", "bridge", "stp_state", "0"])
        ns_run(switch_pid, ["ip", "link", "set", bridge, "up"])
    for cable in cables:
        plug(cable, node_pids[cable.node], switch_pid, rate_mbit)
    for node, pid in node_pids.items():
        plug_uncabled_pair(node, pid)


def set_port(
    switch_pid: int,
    cable: Cable,
    *,
    rate_mbit: int | None = None,
    mtu: int | None = None,
    up: bool | None = None,
) -> None:
    """Change one switch port live (rate, MTU, administrative state)."""
    if mtu is not None:
        ns_run(switch_pid, ["ip", "link", "set", cable.port, "mtu", str(mtu)])
    if rate_mbit is not None:
        for cmd in rate_commands(cable.port, cable.ifb, rate_mbit):
            ns_run(switch_pid, cmd)
    if up is not None:
        ns_run(switch_pid, ["ip", "link", "set", cable.port, "up" if up else "down"])


def interfaces(ip_addr_json: str) -> list[dict[str, Any]]:
    """``ip -j addr show`` -> [{name, state, mtu, addresses}] in ip's order, read with
    sparkctl's one parser of ``ip -j`` (tool_output.ip_link and ip_addr): state is the
    operstate, addresses the IPv4 ``a.b.c.d/len`` of the link."""
    addresses = tool_output.ip_addr(ip_addr_json)
    return [
        {
            "name": name,
            "state": link["operstate"],
            "mtu": link["mtu"],
            "addresses": addresses.get(name, []),
        }
        for name, link in tool_output.ip_link(ip_addr_json).items()
    ]


def links(pid: int) -> list[dict[str, Any]]:
    """The links of a namespace, live (:func:`interfaces` of its ``ip -j addr show``)."""
    return interfaces(ns_run(pid, ["ip", "-j", "addr", "show"]))


def port_rates(switch_pid: int) -> dict[str, int]:
    """Egress tbf rate per device in the switch, in Mbit/s, read live from tc."""
    data = json.loads(ns_run(switch_pid, ["tc", "-j", "qdisc", "show"]) or "[]")
    return parse_tbf_rates(data)


def parse_tbf_rates(qdiscs: list[dict[str, Any]]) -> dict[str, int]:
    """Map device -> tbf rate in Mbit/s from ``tc -j qdisc show`` output."""
    rates: dict[str, int] = {}
    for q in qdiscs:
        if q.get("kind") == "tbf" and isinstance(q.get("options"), dict):
            rate = q["options"].get("rate")
            if isinstance(rate, int | float):  # tc -j reports bytes per second
                rates[str(q["dev"])] = round(rate * 8 / 1_000_000)
    return rates
