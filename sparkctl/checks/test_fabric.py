"""The fabric from each node: every peer on both twins, with full-size frames.

A DF-bit ping of the full MTU (``ping -M do -s MTU-28``) crosses the switch
only if every hop carries jumbo frames; a switch port left at 1500 drops it
while small pings pass (docs/reference.md, "The network"). A failing case says
which of the two it is. The neighbour's MAC is recorded for the cluster-wide
duplicate-address check sparkctl runs over every node's results.
"""

from __future__ import annotations

import shlex
from typing import Any

from sparkctl.collection import tool_output
from sparkctl.plan import NodePlan, Plan

ICMP_IPV4_OVERHEAD = 28  # 20 bytes IPv4 header + 8 bytes ICMP header


def _ping(host: Any, netdev: str, address: str, size: int, count: int) -> dict[str, Any]:
    argv = [
        "ping",
        "-n",
        "-q",
        "-c",
        str(count),
        "-i",
        "0.2",
        "-W",
        "1",
        "-M",
        "do",
        "-s",
        str(size),
        "-I",
        netdev,
        address,
    ]
    out = host.run(shlex.join(["timeout", "15", *argv]))
    return tool_output.ping(out.stdout, out.stderr)


def test_mesh(
    host: Any,
    plan: Plan,
    nplan: NodePlan,
    twin: str,
    peer: str,
    facts: dict[str, Any],
    seen: Any,
) -> None:
    netdev = nplan.roce_fabric.twin(twin).netdev
    address = plan.node(peer).fabric_ip(twin)
    mtu = nplan.roce_fabric.mtu
    big = _ping(host, netdev, address, mtu - ICMP_IPV4_OVERHEAD, 3)
    mac = tool_output.ip_neigh_mac(
        host.run(f"ip -j neigh show {shlex.quote(address)} dev {shlex.quote(netdev)}").stdout
    )
    facts.setdefault("neigh", {})[address] = mac
    if big["received"] == big["sent"] and big["sent"] > 0:
        seen(f"{mtu}-byte frames to {peer} ({address}) on {netdev}")
        return
    small = _ping(host, netdev, address, 56, 2)
    detail = f" ({big['error']})" if big["error"] else ""
    if small["received"]:
        raise AssertionError(
            f"{peer} ({address}) answers small pings on {netdev} but "
            f"{big['received']}/{big['sent']} "
            f"{mtu}-byte DF pings{detail}: a hop on this path (switch port?) has a smaller MTU"
        )
    raise AssertionError(f"{peer} ({address}) does not answer on {netdev}{detail}")
