"""Filters of the sglang role: the firewall it wants, and the one the node has.

The role owns one chain, ``sglang_input``, and its sets in the nftables table
``inet sparkctl``. What the node has is read with ``nft -j list table inet
sparkctl`` (libnftables-json(5)) and reduced here to a canonical form: the
chain's hook and policy, each set's elements as networks, and each rule as
one line of text (``ip saddr @sglang_fabric_v4 tcp dport 32768-60999 accept``)
with port sets merged the way nft merges anonymous interval sets (it stores
``{ 50000-50015, 32768-60999 }`` as ``32768-60999``). What the role wants is
built by :func:`sglang_nft_expected` in the same form, so the verify step
compares like with like and reports each difference.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # unit tests import this file without Ansible installed

    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """Stand-in for ansible.errors.AnsibleFilterError."""


CHAIN = "sglang_input"
FABRIC_SET = "sglang_fabric_v4"
PEERS_SET = "sglang_peers_v4"
API_SET = "sglang_api_v4"

Interval = tuple[int, int]


def _ports(spec: Any) -> list[Interval]:
    """'30000', 30000, '32768-60999' or [a, b] -> [(lo, hi)]."""
    if isinstance(spec, (list, tuple)) and len(spec) == 2:
        lo, hi = int(spec[0]), int(spec[1])
    else:
        text = str(spec).strip()
        lo_s, sep, hi_s = text.partition("-")
        try:
            lo = int(lo_s)
            hi = int(hi_s) if sep else lo
        except ValueError:
            raise AnsibleFilterError(f"{spec!r} is not a port or a port range a-b") from None
    if not 1 <= lo <= hi <= 65535:
        raise AnsibleFilterError(f"{spec!r} is not a port range within 1-65535")
    return [(lo, hi)]


def merge_intervals(intervals: list[Interval]) -> list[Interval]:
    """Sorted, overlapping or adjacent intervals joined."""
    merged: list[Interval] = []
    for lo, hi in sorted(intervals):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


def _port_text(intervals: list[Interval]) -> str:
    parts = [str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in merge_intervals(intervals)]
    return parts[0] if len(parts) == 1 else "{ " + ", ".join(parts) + " }"


def _networks(items: list[Any]) -> list[str]:
    out = []
    for item in items:
        try:
            out.append(str(ipaddress.IPv4Network(str(item), strict=False)))
        except ValueError:
            raise AnsibleFilterError(f"{item!r} is not an IPv4 address or CIDR") from None
    return sorted(set(out), key=ipaddress.IPv4Network)


def sglang_nft_expected(
    fabric_cidrs: list[Any],
    fabric_ports: list[Any],
    api_port: Any,
    api_cidrs: list[Any] | None = None,
    peer_cidrs: list[Any] | None = None,
    *,
    gateway_ports: list[Any] | None = None,
) -> dict[str, Any]:
    """The chain, sets and rules the role installs (canonical form).

    ``gateway_ports``: on the gateway's host, its API and metrics ports, open to the
    same sources as the API (sglang_api_allowed_cidrs)."""
    fabric = _networks(list(fabric_cidrs))
    if not fabric:
        raise AnsibleFilterError(
            "sglang_firewall_fabric_cidrs is empty: no rank could reach another"
        )
    port_ranges = [iv for spec in fabric_ports for iv in _ports(spec)]
    api = _ports(api_port)
    for port in [api_port, *(gateway_ports or [])]:
        if any(lo <= _ports(port)[0][0] <= hi for lo, hi in merge_intervals(port_ranges)):
            raise AnsibleFilterError(
                f"the API port {port} lies inside "
                f"sglang_firewall_fabric_ports {list(fabric_ports)}: it would "
                "only accept the fabric"
            )
    api += [iv for port in gateway_ports or [] for iv in _ports(port)]
    fabric_text = _port_text(port_ranges)
    rules = [
        'iif "lo" accept',
        "ct state established,related accept",
        f"ip saddr @{FABRIC_SET} tcp dport {fabric_text} accept",
    ]
    sets = {FABRIC_SET: fabric}
    peers = _networks(list(peer_cidrs or []))
    if peers:
        sets[PEERS_SET] = peers
        rules.append(f"ip saddr @{PEERS_SET} tcp dport {fabric_text} accept")
    rules.append(f"tcp dport {fabric_text} drop")
    # The API is never open by omission: an empty list is a mistake, and
    # 0.0.0.0/0 says "from anywhere" on purpose.
    api_nets = _networks(list(api_cidrs or []))
    if not api_nets:
        raise AnsibleFilterError(
            "sglang_api_allowed_cidrs is empty: list the networks the API "
            "may be reached from (by default the management subnets of the "
            "Sparks), or [0.0.0.0/0] to open it to every address"
        )
    sets[API_SET] = api_nets
    rules += [
        f"ip saddr @{API_SET} tcp dport {_port_text(api)} accept",
        f"tcp dport {_port_text(api)} drop",
    ]
    return {
        "chain": {"type": "filter", "hook": "input", "policy": "accept"},
        "sets": sets,
        "rules": rules,
        # the API's ports as the rules write them (the template's text)
        "api_ports": _port_text(api),
        "dropped_ports": [
            list(iv) for iv in merge_intervals(port_ranges + (api if api_nets else []))
        ],
    }


def sglang_mgmt_subnets(addresses: list[Any], prefix: Any = 24) -> list[str]:
    """The /``prefix`` networks around the Sparks' management addresses, sorted, once each.

    The inventory gives each Spark's ``ansible_host`` but not its netmask; the
    API's default sources are the networks those addresses imply, where the
    controller that provisions them (and runs ``sparkctl serve verify``) usually is."""
    try:
        bits = int(prefix)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"prefix {prefix!r} is not an integer") from None
    if not 8 <= bits <= 32:
        raise AnsibleFilterError(f"prefix {bits} is not within 8-32")
    nets = set()
    for address in addresses:
        try:
            nets.add(
                ipaddress.IPv4Network(f"{ipaddress.IPv4Address(str(address))}/{bits}", strict=False)
            )
        except ValueError:
            raise AnsibleFilterError(f"{address!r} is not an IPv4 management address") from None
    return [str(n) for n in sorted(nets)]


def _value(right: Any) -> str:
    if isinstance(right, str):
        return right if right.startswith("@") else f'"{right}"'
    return json.dumps(right, sort_keys=True)


def _right_ports(right: Any) -> list[Interval]:
    if isinstance(right, int):
        return [(right, right)]
    if isinstance(right, dict) and "range" in right:
        return [(int(right["range"][0]), int(right["range"][1]))]
    if isinstance(right, dict) and "set" in right:
        return [iv for item in right["set"] for iv in _right_ports(item)]
    raise AnsibleFilterError(f"unexpected port expression {right!r}")


def _rule_text(exprs: list[dict[str, Any]]) -> tuple[str, list[Interval], str]:
    words: list[str] = []
    ports: list[Interval] = []
    verdict = ""
    for expr in exprs:
        if "match" in expr:
            left, right = expr["match"]["left"], expr["match"]["right"]
            if "meta" in left:
                words.append(f"{left['meta']['key']} {_value(right)}")
            elif "ct" in left:
                states = right if isinstance(right, list) else [right]
                words.append(f"ct {left['ct']['key']} {','.join(states)}")
            elif "payload" in left:
                proto, field = left["payload"]["protocol"], left["payload"]["field"]
                if field == "dport":
                    ports = _right_ports(right)
                    words.append(f"{proto} dport {_port_text(ports)}")
                elif isinstance(right, dict) and "prefix" in right:
                    net = f"{right['prefix']['addr']}/{right['prefix']['len']}"
                    words.append(f"{proto} {field} {net}")
                else:
                    words.append(f"{proto} {field} {right}")
            else:
                words.append(json.dumps(expr["match"], sort_keys=True))
        elif "counter" in expr:
            continue  # packet counts change; they are not configuration
        elif any(v in expr for v in ("accept", "drop", "reject", "jump", "goto", "return")):
            verdict = next(iter(expr))
            words.append(verdict)
        else:
            words.append(json.dumps(expr, sort_keys=True))
    return " ".join(words), ports, verdict


def _set_elements(elems: list[Any]) -> list[str]:
    out = []
    for elem in elems:
        if isinstance(elem, str):
            out.append(elem)
        elif isinstance(elem, dict) and "prefix" in elem:
            out.append(f"{elem['prefix']['addr']}/{elem['prefix']['len']}")
        elif isinstance(elem, dict) and "range" in elem:
            lo, hi = (ipaddress.IPv4Address(a) for a in elem["range"])
            out += [str(n) for n in ipaddress.summarize_address_range(lo, hi)]
        else:
            out.append(json.dumps(elem, sort_keys=True))
    return _networks(out)


def sglang_nft_rules(text: str, chain: str = CHAIN) -> dict[str, Any]:
    """``nft -j list table ...`` output -> {chain, sets, rules, dropped_ports} (canonical)."""
    try:
        items = json.loads(text)["nftables"]
    except (ValueError, KeyError, TypeError) as err:
        raise AnsibleFilterError(f"not nft -j output: {err}") from None
    result: dict[str, Any] = {"chain": None, "sets": {}, "rules": [], "dropped_ports": []}
    dropped: list[Interval] = []
    for item in items:
        if "chain" in item and item["chain"]["name"] == chain:
            c = item["chain"]
            result["chain"] = {k: c.get(k) for k in ("type", "hook", "policy")}
        elif "set" in item and item["set"]["name"].startswith("sglang_"):
            result["sets"][item["set"]["name"]] = _set_elements(item["set"].get("elem", []))
        elif "rule" in item and item["rule"]["chain"] == chain:
            line, ports, verdict = _rule_text(item["rule"]["expr"])
            result["rules"].append(line)
            if verdict in ("drop", "reject"):
                dropped += ports
    result["dropped_ports"] = [list(iv) for iv in merge_intervals(dropped)]
    return result


def sglang_nft_diff(actual: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """Differences between the live chain (sglang_nft_rules) and the wanted one."""
    if actual.get("chain") is None:
        return [f"chain {CHAIN} is missing from table inet sparkctl"]
    diff = []
    if actual["chain"] != expected["chain"]:
        diff.append(f"chain is {actual['chain']}, expected {expected['chain']}")
    for name in sorted(set(actual["sets"]) | set(expected["sets"])):
        have, want = actual["sets"].get(name), expected["sets"].get(name)
        if have != want:
            diff.append(f"set {name} holds {have}, expected {want}")
    if actual["rules"] != expected["rules"]:
        diff.append(f"rules are {actual['rules']}, expected {expected['rules']}")
    return diff


def sglang_nft_drops_port(actual: dict[str, Any], port: Any) -> bool:
    """Whether a drop rule of the chain covers ``port`` (e.g. SSH must not be covered)."""
    p = int(port)
    return any(lo <= p <= hi for lo, hi in actual.get("dropped_ports", []))


class FilterModule:
    """nftables filters of the sglang role."""

    def filters(self) -> dict[str, Any]:
        return {
            "sglang_nft_expected": sglang_nft_expected,
            "sglang_nft_rules": sglang_nft_rules,
            "sglang_nft_diff": sglang_nft_diff,
            "sglang_nft_drops_port": sglang_nft_drops_port,
            "sglang_mgmt_subnets": sglang_mgmt_subnets,
        }
