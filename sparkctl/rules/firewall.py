"""The sglang role's firewall, judged before contact: its sets, its ports, SSH.

The role (roles/sglang: templates/sglang-firewall.nft.j2, filter_plugins/
sglang_firewall.py) loads one nftables chain on every Spark: the ranks' ports
(``sglang_firewall_fabric_ports``: the rendezvous range and the kernel's ephemeral
range) accept the fabric subnets and the other Sparks only, the API port accepts
``sglang_api_allowed_cidrs`` only, and both drop everything else. What would break it
is refused here, on the controller, instead of on the nodes:

- a fabric or peer set that matches every address (the ranks' ports open to all);
- two overlapping entries of one set: nft refuses them ("conflicting intervals
  specified" for an interval set without auto-merge, nft(8) SETS), so the firewall
  would not load and, bound to it, neither would SGLang;
- the firewall turned off while a list of it is set (the list would filter nothing);
- the API port among the ranks' ports (the filter's own refusal, after contact);
- the SSH port among the dropped ports (the controller locked out).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from typing import Any

from .common import Problem, boolean, is_int
from .connection import ssh_options

# The kernel's default net.ipv4.ip_local_port_range: where NCCL, Gloo and
# torch.distributed's own sockets listen (ip-sysctl.txt,
# https://www.kernel.org/doc/Documentation/networking/ip-sysctl.txt), opened to the
# fabric by the role's default sglang_firewall_fabric_ports.
EPHEMERAL = (32768, 60999)
# The rendezvous port and the ports sglang takes after it (roles/sglang/defaults:
# +1..+6 with --enable-dp-attention; the firewall opens +15).
DIST_SPAN = 15
SSH_PORT = 22
# The sets of the chain: name -> (what it lets in, whether it may match every address).
# The API may be opened to all on purpose (["0.0.0.0/0"]); the ranks' ports never.
CIDR_SETS = {
    "sglang_firewall_fabric_cidrs": ("the ranks' ports", False),
    "sglang_firewall_peer_cidrs": ("the ranks' ports", False),
    "sglang_api_allowed_cidrs": ("the API port", True),
}
FIREWALL_LISTS = (*CIDR_SETS, "sglang_firewall_fabric_ports")
EVERY_ADDRESS = ipaddress.IPv4Network("0.0.0.0/0")

Interval = tuple[int, int]


def port_interval(spec: Any) -> Interval | None:
    """A port (30000, "30000") or a range "a-b" as (low, high); None for anything else
    (its format constraint says what is wrong)."""
    if is_int(spec):
        low = high = spec
    elif isinstance(spec, str):
        first, dash, last = spec.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            return None
        low, high = int(first), int(last) if dash else int(first)
    else:
        return None
    return (low, high) if 1 <= low <= high <= 65535 else None


def _text(interval: Interval) -> str:
    low, high = interval
    return str(low) if low == high else f"{low}-{high}"


def _networks(value: Any) -> list[tuple[int, str, ipaddress.IPv4Network]]:
    """(item, as written, network) of each item of a list that reads as an IPv4 network
    (host bits allowed, as nft takes them); others are the format constraint's."""
    if not isinstance(value, list | tuple):
        return []
    out = []
    for index, item in enumerate(value):
        if not isinstance(item, str):
            continue
        try:
            out.append((index, item, ipaddress.IPv4Network(item.strip(), strict=False)))
        except ValueError:
            continue
    return out


def _covers_all(nets: Iterable[ipaddress.IPv4Network]) -> bool:
    return EVERY_ADDRESS in ipaddress.collapse_addresses(nets)


def cidr_problems(host: str | None, var: str, value: Any) -> list[Problem]:
    """One set of the chain (CIDR_SETS): every address where it may not, overlaps."""
    lets_in, may_be_all = CIDR_SETS[var]
    items = _networks(value)
    problems: list[Problem] = []
    nets = [net for _, _, net in items]
    if not may_be_all and nets and _covers_all(nets):
        wide = [text for _, text, net in items if net.prefixlen == 0]
        what = f"{wide[0]!r} matches" if wide else "its items together match"
        problems.append(
            Problem(
                host,
                var,
                f"{what} every IPv4 address: {lets_in} (NCCL, Gloo and the rendezvous) "
                "would accept the whole Internet",
                hint="list the fabric subnets and the Sparks' own addresses only "
                "(the default: fabric_a_subnet, fabric_b_subnet and each ansible_host)",
            )
        )
    for left, (i, a, net_a) in enumerate(items):
        for j, b, net_b in items[left + 1 :]:
            if net_a != net_b and net_a.overlaps(net_b):
                wider = a if net_a.prefixlen <= net_b.prefixlen else b
                problems.append(
                    Problem(
                        host,
                        var,
                        f"item {i} ({a}) and item {j} ({b}) overlap: nft refuses "
                        "overlapping elements of one set (conflicting intervals), so the "
                        "firewall would not load and SGLang, bound to it, would not start",
                        hint=f"keep one of them ({wider} holds the other) or list networks "
                        "that do not overlap",
                    )
                )
                return problems  # one pair says it; the next run shows the next
    return problems


def _fabric_ports(v: Callable[[str], Any], is_set: Callable[[str], bool]) -> list[Interval]:
    """The ranks' ports the chain opens to the fabric and drops for everyone else: the
    inventory's sglang_firewall_fabric_ports, or the role's default (the rendezvous
    range and the ephemeral range)."""
    if is_set("sglang_firewall_fabric_ports"):
        value = v("sglang_firewall_fabric_ports")
        specs = value if isinstance(value, list | tuple) else []
        return [iv for spec in specs if (iv := port_interval(spec)) is not None]
    dist = v("sglang_dist_port")
    rendezvous = [(dist, dist + DIST_SPAN)] if is_int(dist) else []
    return [*rendezvous, EPHEMERAL]


def _api_port_problem(
    host: str, v: Callable[[str], Any], is_set: Callable[[str], bool], enabled: bool
) -> Problem | None:
    """The API port among the ranks' ports: the role's filter (sglang_nft_expected)
    refuses it with the same words, but only on the nodes. The rendezvous range and the
    ephemeral range are refused with the firewall off too: there the port collides
    with the ranks' own sockets."""
    api, dist = v("sglang_port"), v("sglang_dist_port")
    if not is_int(api):
        return None
    # (ports, what they are, the variable that put them there)
    fixed: list[tuple[Interval, str, str]] = []
    if is_int(dist):
        fixed.append(
            (
                (dist, dist + DIST_SPAN),
                f"the ranks' port range {dist}-{dist + DIST_SPAN} (sglang_dist_port and the "
                "ports torch.distributed and NCCL take after it)",
                "sglang_dist_port",
            )
        )
    fixed.append(
        (
            EPHEMERAL,
            f"the kernel's ephemeral port range {_text(EPHEMERAL)} "
            "(net.ipv4.ip_local_port_range), where NCCL and Gloo listen",
            "sglang_port",
        )
    )
    if enabled and is_set("sglang_firewall_fabric_ports"):
        fixed += [
            (iv, f"sglang_firewall_fabric_ports' {_text(iv)}", "sglang_firewall_fabric_ports")
            for iv in _fabric_ports(v, is_set)
        ]
    for (low, high), where, var in fixed:
        if low <= api <= high:
            # The role's default API port is fine: the variable that moved a range onto
            # it is the one to change.
            blame = "sglang_port" if is_set("sglang_port") else var
            return Problem(
                host,
                blame,
                # Named by its own variable, the value comes first (as in every message).
                f"{'' if blame == 'sglang_port' else 'the API port '}{api} lies in {where}"
                + (
                    ", which the firewall opens to the fabric alone: it would only accept "
                    "the fabric"
                    if enabled
                    else ": the ranks' own sockets take these ports, so the API's could be "
                    "taken before SGLang binds it"
                ),
                hint="choose an API port (sglang_port) outside them and below 32768, such "
                f"as the default 30000, or move {var}"
                if var != "sglang_port"
                else "choose an API port outside them and below 32768, such as the default 30000",
            )
    return None


# Where the inventory may give the SSH port besides ansible_port: ``-o Port=N`` in the
# ssh argument variables (the connection rules allow Port among the -o options).
SSH_ARG_VARS = ("ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args")


def _ssh_ports(v: Callable[[str], Any], is_set: Callable[[str], bool]) -> list[tuple[int, str]]:
    """(port, the variable that gives it) of every port ssh may use for the host:
    ansible_port (22 when unset) and each ``-o Port=`` of the ssh arguments."""
    ports: list[tuple[int, str]] = []
    port = v("ansible_port") if is_set("ansible_port") else SSH_PORT
    if is_int(port):
        ports.append((port, "ansible_port"))
    for var in SSH_ARG_VARS:
        text = v(var) if is_set(var) else None
        if not isinstance(text, str):
            continue
        try:
            options = ssh_options(text)
        except ValueError:
            continue  # the connection rules say what is wrong with it
        ports += [
            (int(value), var)
            for key, value in options
            if key.lower() == "port" and value.isdigit() and 1 <= int(value) <= 65535
        ]
    return ports


def _ssh_problem(
    host: str, v: Callable[[str], Any], is_set: Callable[[str], bool]
) -> Problem | None:
    """The SSH port among the ports the chain drops: once the firewall loads, the
    controller (not on the fabric) could not reach the node."""
    dropped: list[tuple[Interval, str]] = []
    if is_set("sglang_firewall_fabric_ports"):
        dropped += [(iv, "sglang_firewall_fabric_ports") for iv in _fabric_ports(v, is_set)]
    else:
        dist = v("sglang_dist_port")
        if is_int(dist):
            dropped.append(((dist, dist + DIST_SPAN), "sglang_dist_port"))
        dropped.append((EPHEMERAL, "sglang_firewall_fabric_ports"))
    api = v("sglang_port")
    if is_int(api):
        dropped.append(((api, api), "sglang_port"))
    for ssh, source in _ssh_ports(v, is_set):
        for (low, high), var in dropped:
            if low <= ssh <= high:
                ranges = _text((low, high))
                # The role's default port 22 is fine: the variable that moved a range
                # onto it is the one to change.
                blame = source if is_set(source) else var
                return Problem(
                    host,
                    blame,
                    f"the SSH port {ssh} lies in {ranges} ({var}), which the firewall drops "
                    "for every source but the fabric and the allow-list: once it loads, the "
                    "controller could not reach the node",
                    hint=f"keep sshd's port ({source}) outside {ranges}, or move {var}",
                )
    return None


def firewall_problems(
    host: str, v: Callable[[str], Any], is_set: Callable[[str], bool]
) -> list[Problem]:
    """One Spark's firewall: its switch, its sets, the API port and SSH against its ports.

    ``v`` reads a value (the inventory's over the roles' literal defaults), ``is_set``
    whether the inventory itself sets it (the role's templated defaults are safe)."""
    problems: list[Problem] = []
    enabled = boolean(v("sglang_firewall_enabled")) is not False
    if not enabled:
        lists = [name for name in FIREWALL_LISTS if is_set(name)]
        if lists:
            problems.append(
                Problem(
                    host,
                    "sglang_firewall_enabled",
                    f"false while {', '.join(lists)} {'is' if len(lists) == 1 else 'are'} "
                    "set: without the firewall no list filters anything, and the API and "
                    "the ranks' ports answer every address",
                    hint=f"remove {', '.join(lists)}, or turn the firewall on "
                    "(sglang_firewall_enabled: true, the default)",
                )
            )
    for var in CIDR_SETS:
        if is_set(var):
            problems += cidr_problems(host, var, v(var))
    if not is_set("sglang_firewall_fabric_cidrs"):
        for var in ("fabric_a_subnet", "fabric_b_subnet"):
            net = _networks([v(var)])
            if net and net[0][2].prefixlen == 0:
                problems.append(
                    Problem(
                        host,
                        var,
                        f"{net[0][1]!r} matches every IPv4 address: the firewall opens the "
                        "ranks' ports (NCCL, Gloo, the rendezvous) to the fabric subnets",
                        hint="give the twin's own subnet, such as 192.168.100.0/24",
                    )
                )
    api = _api_port_problem(host, v, is_set, enabled)
    if api is not None:
        problems.append(api)
    if enabled and (ssh := _ssh_problem(host, v, is_set)) is not None:
        problems.append(ssh)
    return problems
