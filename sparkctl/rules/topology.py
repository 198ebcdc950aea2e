"""Cross-host rules: management and fabric addresses, subnets, ranks, the switch."""

from __future__ import annotations

import difflib
import ipaddress
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .common import (
    GROUP_NAME,
    GROUP_NAME_WORDS,
    SPARKS,
    SWITCH_OSES,
    SWITCHES,
    TWINS,
    Problem,
    in_choices,
    ipv4,
    ipv4_net,
    plain,
    same_everywhere,
    type_name,
)
from .connection import check_connection, check_host_keys, check_passwords
from .tp import check_tp


def check_topology(
    groups: Mapping[str, list[str]], hostvars: Mapping[str, Mapping[str, Any]]
) -> list[Problem]:
    """Cross-host rules: ranks, addresses, subnets, switch ports, TP size, passwords."""
    sparks = list(groups.get(SPARKS, []))
    switches = list(groups.get(SWITCHES, []))
    if not sparks:
        return [
            Problem(
                None,
                None,
                f"no hosts in group [{SPARKS}]",
                hint="list the Sparks under a [sparks] section",
            )
        ]
    problems = check_names(groups)
    # A host in both groups is named by check_names; it does not count as a second switch.
    switches = [h for h in switches if h not in sparks]
    if len(switches) > 1:
        problems.append(
            Problem(
                None,
                None,
                f"[{SWITCHES}] lists {len(switches)} hosts "
                f"({', '.join(switches)}); sparkctl drives one fabric switch",
            )
        )
    first = hostvars[sparks[0]]
    hosts = sparks + switches
    problems += check_passwords(hosts, hostvars)
    problems += check_connection(hosts, hostvars)
    problems += check_host_keys(hosts, hostvars)
    mgmt, found = _check_mgmt(hosts, hostvars)
    problems += found
    nets, found = _check_subnets(first)
    problems += found
    for addr, host in mgmt.items():
        for twin, net in nets.items():
            if addr in net:
                problems.append(
                    Problem(
                        host,
                        "ansible_host",
                        f"management address {addr} lies "
                        f"in the fabric subnet of twin {twin} ({net})",
                    )
                )
    problems += _check_ranks(sparks, hostvars)
    problems += _check_fabric_ips(sparks, hostvars, nets)
    problems += _check_switch(sparks, switches, hostvars)
    problems += check_tp(sparks, hostvars)
    problems += _check_api_sources(sparks, hostvars)
    return problems


# Groups every inventory has (Ansible's) or sparkctl defines: never the cluster's name.
_BUILTIN_GROUPS = frozenset({"all", "ungrouped", SPARKS, SWITCHES})


def cluster_group(groups: Mapping[str, list[str]]) -> str | None:
    """The inventory group that holds every Spark and the switch, whose name is the
    cluster's (the smallest, then the first by name; sparkctl/inventory.py reads it the
    same way), or None when there is none (then the inventory file's name is used)."""
    members = set(groups.get(SPARKS, [])) | set(groups.get(SWITCHES, []))
    candidates = [
        name
        for name, hosts in groups.items()
        if name not in _BUILTIN_GROUPS and members <= set(hosts)
    ]
    return min(candidates, key=lambda n: (len(groups[n]), n)) if candidates else None


def check_names(groups: Mapping[str, list[str]]) -> list[Problem]:
    """Names before they become a path or markup, and hosts with one role each.

    Every inventory group a cluster host is in may become the cluster's name
    (``cluster_name``: the role's default is the host's first group other than [sparks]
    and [switches]; sparkctl takes the smallest that holds every host): a directory
    under the state dir (clusters/NAME: keys, secrets, facts) and the title of the HTML
    reports. So each is one word of GROUP_NAME, never ``..`` or markup. A host listed in
    both [sparks] and [switches] is named (it is one machine with two roles)."""
    sparks = list(groups.get(SPARKS, []))
    switches = list(groups.get(SWITCHES, []))
    hosts = set(sparks) | set(switches)
    problems = [
        Problem(
            host,
            None,
            f"is in both [{SPARKS}] and [{SWITCHES}]; a host has one role",
            hint=f"list {host} under one of them: a Spark, or the fabric switch",
        )
        for host in sparks
        if host in switches
    ]
    cluster = cluster_group(groups)
    for name, members in groups.items():
        if name in _BUILTIN_GROUPS or not hosts & set(members) or GROUP_NAME.match(name):
            continue
        role = "the cluster's name" if name == cluster else "a cluster name"
        problems.append(
            _name_problem(
                name,
                f"inventory group [{name}] would become {role}",
                "rename the group, e.g. [lab:children]",
            )
        )
    return problems


def check_cluster_name(name: str, inventory_file: str) -> Problem | None:
    """The inventory file's stem as the cluster's name (sparkctl/inventory.py takes it when
    no group holds every Spark and the switch), or the problem with it."""
    if GROUP_NAME.match(name):
        return None
    return _name_problem(
        name,
        f"the name of {inventory_file} would become the cluster's name (no group holds "
        f"[{SPARKS}] and [{SWITCHES}])",
        f"add a group of both, e.g. [lab:children] with {SPARKS} and {SWITCHES}",
    )


def _name_problem(name: str, what: str, hint: str) -> Problem:
    return Problem(
        None,
        "cluster_name",
        f"{what} (a directory under the state dir and the title of the reports), but "
        f"{name!r} is not one word ({GROUP_NAME_WORDS})",
        hint=hint,
    )


def _network(value: Any) -> bool:
    """An IPv4 address or network, host bits allowed (nft takes 10.77.0.5/24 as the /24)."""
    try:
        ipaddress.IPv4Network(str(value).strip(), strict=False)
    except ValueError:
        return False
    return isinstance(value, str)


def _check_api_sources(
    sparks: list[str], hostvars: Mapping[str, Mapping[str, Any]]
) -> list[Problem]:
    """sglang_api_allowed_cidrs, where the inventory sets it: IPv4 networks, never empty.

    The API is never open by omission (the sglang role's firewall refuses [] too, but only
    once provision has reached it): ``["0.0.0.0/0"]`` opens it on purpose."""
    problems: list[Problem] = []
    var = "sglang_api_allowed_cidrs"
    hint = (
        'list the networks the API may be reached from, or ["0.0.0.0/0"] for every '
        "address; leave it unset for the Sparks' management networks"
    )
    for host in sparks:
        if var not in hostvars[host]:
            continue
        value = plain(hostvars[host][var])
        if isinstance(value, str) and "{{" in value:
            continue  # a template, left to the role
        if not isinstance(value, list) or not value:
            what = (
                "an empty list: the API would answer from anywhere"
                if value == []
                else f"{value!r}, not a list of IPv4 networks"
            )
            problems.append(Problem(host, var, f"is {what}", hint=hint))
            continue
        bad = [v for v in value if not _network(v)]
        if bad:
            problems.append(
                Problem(host, var, f"{bad!r} are not IPv4 networks or addresses", hint=hint)
            )
    if problems and same_everywhere({h: hostvars[h] for h in sparks}, var):
        return [replace(problems[0], host=None)]
    return problems


def _check_mgmt(
    hosts: list[str],
    hostvars: Mapping[str, Mapping[str, Any]],
) -> tuple[dict[ipaddress.IPv4Address, str], list[Problem]]:
    problems: list[Problem] = []
    mgmt: dict[ipaddress.IPv4Address, str] = {}
    for host in hosts:
        raw = hostvars[host].get("ansible_host", host)
        addr = ipv4(raw)
        if addr is None:
            if "ansible_host" in hostvars[host]:
                problems.append(Problem(host, "ansible_host", f"{raw!r} is not an IPv4 address"))
            continue
        if addr in mgmt:
            problems.append(
                Problem(host, "ansible_host", f"{addr} is also the address of {mgmt[addr]}")
            )
        mgmt.setdefault(addr, host)
    return mgmt, problems


def _check_subnets(
    first: Mapping[str, Any],
) -> tuple[dict[str, ipaddress.IPv4Network], list[Problem]]:
    problems: list[Problem] = []
    nets: dict[str, ipaddress.IPv4Network] = {}
    for twin in TWINS:
        var = f"fabric_{twin}_subnet"
        raw = first.get(var)
        net = ipv4_net(raw)
        if raw is None:
            problems.append(
                Problem(
                    None,
                    var,
                    f"missing (the IPv4 subnet of twin {twin}, in CIDR form like 192.168.100.0/24)",
                )
            )
        elif net is None:
            problems.append(
                Problem(
                    None,
                    var,
                    f"{raw!r} is not an IPv4 network in CIDR form "
                    "(like 192.168.100.0/24, host bits zero)",
                )
            )
        else:
            nets[twin] = net
    if len(nets) == 2 and nets["a"].overlaps(nets["b"]):
        problems.append(
            Problem(
                None,
                "fabric_b_subnet",
                f"twins a and b share a subnet ({nets['a']} / {nets['b']}); "
                "each twin needs its own",
                hint="one subnet for both twins causes NCCL communication "
                "failures (NVIDIA multi-sparks-through-switch)",
            )
        )
    return nets, problems


def _check_ranks(sparks: list[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    problems: list[Problem] = []
    ranks: dict[int, str] = {}
    for host in sparks:
        rank = hostvars[host].get("node_rank")
        if rank is None:
            problems.append(Problem(host, "node_rank", "missing (the Spark's TP rank, 0..N-1)"))
        elif isinstance(rank, bool) or not isinstance(rank, int):
            problems.append(Problem(host, "node_rank", f"{rank!r} is not an integer"))
        elif rank in ranks:
            problems.append(Problem(host, "node_rank", f"rank {rank} is also {ranks[rank]}'s"))
        else:
            ranks[rank] = host
    if ranks and len(ranks) == len(sparks) and sorted(ranks) != list(range(len(sparks))):
        problems.append(
            Problem(
                None,
                "node_rank",
                f"ranks must be 0..{len(sparks) - 1}, one per Spark; got {sorted(ranks)}",
            )
        )
    return problems


def _check_fabric_ips(
    sparks: list[str],
    hostvars: Mapping[str, Mapping[str, Any]],
    nets: Mapping[str, ipaddress.IPv4Network],
) -> list[Problem]:
    problems: list[Problem] = []
    used: dict[ipaddress.IPv4Address, str] = {}
    for host in sparks:
        hv = hostvars[host]
        for twin in TWINS:
            var = f"fabric_{twin}_ip"
            if var not in hv:
                problems.append(Problem(host, var, f"missing (address on twin {twin})"))
                continue
            addr = ipv4(hv[var])
            if addr is None:
                problems.append(Problem(host, var, f"{hv[var]!r} is not an IPv4 address"))
                continue
            net = nets.get(twin)
            if net is not None and (
                addr not in net or addr in {net.network_address, net.broadcast_address}
            ):
                problems.append(
                    Problem(
                        host, var, f"{addr} is not a host address of fabric_{twin}_subnet {net}"
                    )
                )
            if addr in used:
                problems.append(Problem(host, var, f"{addr} is also used by {used[addr]}"))
            used.setdefault(addr, f"{host} ({var})")
    return problems


def _check_switch(
    sparks: list[str], switches: list[str], hostvars: Mapping[str, Mapping[str, Any]]
) -> list[Problem]:
    problems: list[Problem] = []
    for sw in switches:
        os_name = hostvars[sw].get("switch_os")
        if os_name is None:
            problems.append(
                Problem(sw, "switch_os", f"missing (the switch's OS: {', '.join(SWITCH_OSES)})")
            )
        elif not in_choices(os_name, SWITCH_OSES):
            close = difflib.get_close_matches(str(os_name).lower(), SWITCH_OSES, n=1)
            problems.append(
                Problem(
                    sw,
                    "switch_os",
                    f"{os_name!r} is not a supported switch OS ({', '.join(SWITCH_OSES)})",
                    hint=f"did you mean {close[0]}?" if close else None,
                )
            )
    ports = hostvars[sparks[0]].get("switch_ports", {})
    if not isinstance(ports, Mapping):
        return [
            *problems,
            Problem(
                None,
                "switch_ports",
                "must be a mapping of port name -> {node: NAME, twin: a|b|both}",
            ),
        ]
    cabled: dict[tuple[str, str], str] = {}
    for port, spec in ports.items():
        var = f"switch_ports.{port}"
        if not isinstance(spec, Mapping) or "node" not in spec:
            problems.append(Problem(None, var, "needs `node:` (and `twin: a|b|both`)"))
            continue
        node, twin = spec.get("node"), spec.get("twin", "both")
        if not isinstance(node, str) or not isinstance(twin, str):
            which, value = ("node", node) if not isinstance(node, str) else ("twin", twin)
            problems.append(
                Problem(
                    None,
                    "switch_ports",
                    f"{port}: {which} {value!r} is {type_name(value)}: one cable joins one "
                    + ("port to one host" if which == "node" else "port to a, b or both"),
                )
            )
            continue
        if node not in sparks:
            close = difflib.get_close_matches(str(node), sparks, n=1)
            problems.append(
                Problem(
                    None,
                    f"{var}.node",
                    f"{node!r} is not a host in [{SPARKS}]",
                    hint=f"did you mean {close[0]}?" if close else None,
                )
            )
            continue
        if twin not in (*TWINS, "both"):
            problems.append(Problem(None, f"{var}.twin", f"{twin!r} is not a, b or both"))
            continue
        for t in TWINS if twin == "both" else (twin,):
            if (node, t) in cabled:
                problems.append(
                    Problem(None, var, f"{node} twin {t} is already cabled to {cabled[(node, t)]}")
                )
            cabled[(node, t)] = str(port)
    return problems


def uncabled(sparks: list[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    ports = hostvars[sparks[0]].get("switch_ports")
    if not isinstance(ports, Mapping):
        return []  # _check_switch says so
    cabled = set()
    for spec in ports.values():
        if isinstance(spec, Mapping):
            node, twin = spec.get("node"), spec.get("twin", "both")
            if not isinstance(node, str) or not isinstance(twin, str):
                continue  # check_switch says so
            cabled |= {(node, t) for t in (TWINS if twin == "both" else (twin,))}
    if not cabled:
        return []  # no ports at all: a fabric cabled without a managed switch
    problems = []
    for host in sparks:
        missing = [t for t in TWINS if (host, t) not in cabled]
        if missing:
            problems.append(
                Problem(
                    host,
                    "switch_ports",
                    f"no port for {host} twin "
                    f"{' and '.join(missing)}: every Spark's two twins are "
                    "cabled to the switch (NVIDIA's guide), or validate finds "
                    "a fabric that cannot pass",
                    hint="add the port, or twin: a|b on a port that carries one twin",
                )
            )
    return problems
