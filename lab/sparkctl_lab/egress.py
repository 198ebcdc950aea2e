"""The lab's egress guard: what lab nodes may reach outside the lab, enforced on the host.

A lab node sends everything it has no better route for to its management
default route, the podman bridge, and podman NATs it into the controller's own
network. A node without fabric addresses (a lab that is up but not
provisioned, a netplan that did not apply) therefore sends fabric traffic -
an SSH to ``192.168.100.12`` - into the user's real network, where such an
address may well exist and answer. A rehearsal must never do that.

Why the host, and not the nodes: lab nodes run with ``NET_ADMIN`` (the roles
configure their links, routes and nftables as on a real Spark), so a route or
firewall rule inside a node is one ``ip route del`` away from gone, and
provisioning itself rewrites both. A table in the host's own ruleset, on the
forward path of the lab's bridge, is out of the nodes' reach, holds whatever
state the nodes are in, and goes with ``lab down``. Matching the bridge by
interface (``iifname``), not by source address, also holds when a node sends
from an address that is not its own.

What may leave the lab (a new connection from the bridge, in rule order):

1. anything to the lab's management network, and replies of connections
   already allowed (``ct state established,related``);
2. DNS (port 53) to the resolvers the nodes are configured with;
3. the package mirror the nodes' apt uses: each address its host name
   resolves to, on the URL's port - even in a private range, where a site
   mirror or caching proxy is an explicit choice;
4. nothing else to the user's networks: private (RFC 1918), shared/CGNAT
   (RFC 6598), link-local (RFC 3927), loopback, "this network", multicast,
   reserved, and the inventory's fabric subnets, which exist only on the lab
   switch's bridges;
5. HTTP and HTTPS to every other (public) address: the package indexes
   (pip's index for ``model_cache_source=hf``; apt mirrors behind a CDN whose
   addresses change between the resolution here and a node's own) are named
   by the tools on the nodes, not by sparkctl;
6. nothing else, IPv6 included.

Refused traffic is rejected (ICMP administratively prohibited), not dropped,
so a connection fails at once with "No route to host" instead of hanging
until a timeout.

The plan is a typed value (:class:`EgressPlan`); :meth:`EgressPlan.verdict`
is the same rule list as a function, and the unit tests load
:meth:`EgressPlan.ruleset` into a throwaway network namespace and check that
the kernel decides as :meth:`~EgressPlan.verdict` does.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.proc import require_tool, run

log = logging.getLogger(__name__)

TABLE = "sparkctl_lab"  # in the inet family: one table for IPv4 and IPv6
FAMILY = "inet"

# Address ranges of a user's own networks, and ranges no package mirror is on
# (IANA IPv4 Special-Purpose Address Registry, RFC 6890).
USER_NETWORKS: tuple[ipaddress.IPv4Network, ...] = tuple(
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8",  # "this network" (RFC 1122 3.2.1.3)
        "10.0.0.0/8",  # private (RFC 1918)
        "100.64.0.0/10",  # shared address space, carrier-grade NAT (RFC 6598)
        "127.0.0.0/8",  # loopback (RFC 1122)
        "169.254.0.0/16",  # link-local (RFC 3927)
        "172.16.0.0/12",  # private (RFC 1918)
        "192.168.0.0/16",  # private (RFC 1918)
        "224.0.0.0/4",  # multicast (RFC 5771)
        "240.0.0.0/4",  # reserved, and the limited broadcast (RFC 1112, RFC 919)
    )
)
WEB_PORTS = (80, 443)  # http and https: how package indexes are fetched
DNS_PORT = 53
SCHEME_PORTS = {"http": 80, "https": 443}

Verdict = Literal["accept", "reject"]


@dataclass(frozen=True, order=True)
class Endpoint:
    """One TCP destination the nodes may open connections to."""

    address: ipaddress.IPv4Address
    port: int


@dataclass(frozen=True)
class EgressPlan:
    """What may leave the lab's bridge for the world outside it."""

    bridge: str  # the host side of the lab's management network (podman's bridge)
    lab_network: ipaddress.IPv4Network
    fabric_networks: tuple[ipaddress.IPv4Network, ...] = ()
    resolvers: tuple[ipaddress.IPv4Address, ...] = ()
    mirrors: tuple[Endpoint, ...] = ()
    web_ports: tuple[int, ...] = field(default=WEB_PORTS)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,15}", self.bridge):
            raise SparkctlError(
                f"{self.bridge!r} is not a network interface name", ExitCode.INTERNAL
            )

    @property
    def closed(self) -> tuple[ipaddress.IPv4Network, ...]:
        """The ranges nothing but the mirror and the resolvers may reach, without overlaps."""
        return tuple(ipaddress.collapse_addresses([*USER_NETWORKS, *self.fabric_networks]))

    def verdict(self, destination: str, port: int, protocol: str = "tcp") -> Verdict:
        """What the rules do with a new connection from a node to ``destination:port``:
        the rules of :meth:`ruleset`, in their order; the first that matches decides."""
        addr = ipaddress.ip_address(destination)
        tcp = protocol == "tcp"
        rules: tuple[tuple[bool, Verdict], ...] = (
            (addr.version == 6, "reject"),
            (addr in self.lab_network, "accept"),
            (addr in self.resolvers and port == DNS_PORT and protocol in {"tcp", "udp"}, "accept"),
            (tcp and any(e.address == addr and e.port == port for e in self.mirrors), "accept"),
            (any(addr in net for net in self.closed), "reject"),
            (tcp and port in self.web_ports, "accept"),
        )
        return next((v for hit, v in rules if hit), "reject")

    def ruleset(self) -> str:
        """The nft script that (re)creates the table in one transaction: an existing
        table of the same name is replaced, never merged into."""
        reject = "reject with icmpx type admin-prohibited"
        sets = [
            _set("closed", "ipv4_addr", [str(n) for n in self.closed], interval=True),
        ]
        rules = [
            f'iifname != "{self.bridge}" accept',
            "ct state established,related accept",
            f"meta nfproto ipv6 counter {reject}",
            f"ip daddr {self.lab_network} accept",
        ]
        if self.resolvers:
            sets.append(_set("resolvers", "ipv4_addr", sorted(map(str, set(self.resolvers)))))
            rules.append(
                f"ip daddr @resolvers meta l4proto {{ tcp, udp }} th dport {DNS_PORT} accept"
            )
        if self.mirrors:
            sets.append(
                _set(
                    "mirrors",
                    "ipv4_addr . inet_service",
                    [f"{e.address} . {e.port}" for e in sorted(set(self.mirrors))],
                )
            )
            rules.append("ip daddr . tcp dport @mirrors accept")
        rules.append(f"ip daddr @closed counter {reject}")
        if self.web_ports:
            ports = ", ".join(str(p) for p in sorted(set(self.web_ports)))
            rules.append(f"tcp dport {{ {ports} }} accept")
        rules.append(f"counter {reject}")
        body = "\n".join(
            [
                *sets,
                "\tchain forward {",
                # Before podman's own forward rules (iptables-nft, priority filter):
                # an accept here only hands the packet on to them; a reject is final.
                "\t\ttype filter hook forward priority filter - 10; policy accept;",
                *(f"\t\t{r}" for r in rules),
                "\t}",
            ]
        )
        return f"{_remove_script()}table {FAMILY} {TABLE} {{\n{body}\n}}\n"


def _set(name: str, kind: str, elements: Sequence[str], *, interval: bool = False) -> str:
    lines = [f"\tset {name} {{", f"\t\ttype {kind}"]
    if interval:
        lines.append("\t\tflags interval")
    if elements:
        lines.append(f"\t\telements = {{ {', '.join(elements)} }}")
    lines.append("\t}")
    return "\n".join(lines)


def _remove_script() -> str:
    # Declaring the table first makes the delete succeed whether it existed or not
    # (nft has no "delete if exists" before 1.0.8's destroy).
    return f"table {FAMILY} {TABLE} {{}}\ndelete table {FAMILY} {TABLE}\n"


# ------------------------------------------------------------------ inputs
def apt_uris(sources: str) -> list[str]:
    """The URIs apt fetches from, in order: ``deb``/``deb-src`` lines of the one-line
    format and ``URIs:`` fields of deb822 stanzas (sources.list(5))."""
    uris: list[str] = []
    for line in sources.splitlines():
        one_line = re.match(r"\s*deb(?:-src)?\s+(?:\[[^]]*\]\s+)?(\S+)\s", line)
        deb822 = re.match(r"URIs:\s*(.*)", line)
        found = [one_line.group(1)] if one_line else deb822.group(1).split() if deb822 else []
        uris += [u for u in found if u not in uris]
    return uris


def resolvers(resolv_conf: str) -> list[ipaddress.IPv4Address]:
    """The IPv4 ``nameserver`` entries of a resolv.conf, in order."""
    found = []
    for line in resolv_conf.splitlines():
        m = re.match(r"\s*nameserver\s+(\S+)", line)
        if m:
            try:
                found.append(ipaddress.IPv4Address(m.group(1)))
            except ValueError:
                continue  # IPv6 resolvers: the lab has no IPv6 way out
    return found


def url_target(url: str) -> tuple[str, int]:
    """(host, port) a package URL is fetched from; only http and https."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEME_PORTS or not parts.hostname:
        raise SparkctlError(
            f"the lab's nodes fetch packages over http or https only, not from {url!r}",
            ExitCode.BAD_INPUT,
        )
    return parts.hostname, parts.port or SCHEME_PORTS[parts.scheme]


def resolve(host: str, port: int) -> list[Endpoint]:
    """Every IPv4 address ``host`` has here (the nodes resolve through this host).

    A name that does not resolve gives nothing, with a warning: the mirror is then
    unreachable for the nodes too, and an offline lab with a cached image still
    comes up (sealed all the same)."""
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        log.warning(
            "the lab's package mirror %s does not resolve here (%s): not allowed", host, exc
        )
        return []
    return sorted({Endpoint(ipaddress.IPv4Address(info[4][0]), port) for info in infos})


def mirror_endpoints(urls: Iterable[str]) -> tuple[Endpoint, ...]:
    found: set[Endpoint] = set()
    for url in urls:
        found.update(resolve(*url_target(url)))
    return tuple(sorted(found))


# ------------------------------------------------------------------ apply
def apply(plan: EgressPlan) -> None:
    """Install (or replace) the guard in the host's ruleset, atomically."""
    nft = require_tool("nft", package="nftables")
    run(
        [nft, "-f", "-"], input_text=plan.ruleset(), code=ExitCode.LAB, what="nft: lab egress guard"
    )


def remove() -> bool:
    """Remove the guard; True when there was one."""
    nft = require_tool("nft", package="nftables")
    present = installed()
    run([nft, "-f", "-"], input_text=_remove_script(), code=ExitCode.LAB, what="nft: remove guard")
    return present


def installed() -> bool:
    nft = require_tool("nft", package="nftables")
    return run([nft, "list", "table", FAMILY, TABLE], check=False).returncode == 0
