"""`serve verify`'s reading of the SGLang firewall on every rank, as it is now.

provision loads the chain ``sglang_input`` of table ``inet sparkctl`` and binds
the SGLang unit to the firewall's unit (BindsTo=); but that unit is a oneshot
that reads "active" for ever after, even when something flushed the ruleset
since (nftables.service's start, reload or stop, ``nft flush ruleset`` by hand):
then SGLang serves unfiltered. So verify reads, on every rank, whether its
SGLang unit is bound to the firewall (``systemctl show -p BindsTo``) and, when
it is, the table itself (``nft -j list table inet sparkctl``, libnftables-json(5)),
and fails naming the node when the table or the chain is gone, is not hooked
on input, or no longer drops the API port.

The JSON is read by the role's own parser, ``roles/sglang/filter_plugins/
sglang_firewall.py`` (``sglang_nft_rules``, tested on real ``nft -j`` output in
tests/unit/test_sglang_role.py and tests/unit/test_serve_firewall.py), loaded
here by its path: one reader of that output for the role's verify step and for
serve.
"""

from __future__ import annotations

import shlex
from types import ModuleType
from typing import TYPE_CHECKING, Any

from sparkctl import collection
from sparkctl.report.model import Check

if TYPE_CHECKING:
    from sparkctl.serve.cluster import Cluster

FW_UNIT = "sparkctl-sglang-firewall.service"  # roles/sglang/vars/main.yml _sglang_fw_unit
TABLE = "inet sparkctl"


def parser() -> ModuleType:
    """The sglang role's firewall filters: the collection's filter plugin, imported by
    its module name (the checkout or site-packages holds ansible_collections/)."""
    return collection.plugin("filter", "sglang_firewall")


def judge(node: str, rank: str, nft_rc: int, nft_out: str, api_port: int) -> Check:
    """One rank's firewall from ``nft -j list table inet sparkctl`` (its exit code and
    output, stderr included)."""
    fw = parser()
    chain = fw.CHAIN
    if nft_rc != 0:
        said = " ".join(nft_out.strip().splitlines()[:1]) or f"rc {nft_rc}"
        return Check(
            "firewall",
            node,
            rank,
            "failed",
            f"{node}: the SGLang firewall is gone: table {TABLE} is not loaded "
            f"(nft: {said}); the API and the ranks' ports are unfiltered",
        )
    try:
        live: dict[str, Any] = fw.sglang_nft_rules(nft_out, chain)
    except (fw.AnsibleFilterError, KeyError, TypeError, ValueError) as exc:
        return Check("firewall", node, rank, "failed", f"{node}: {exc}")
    problem = ""
    if live["chain"] is None:
        problem = f"chain {chain} is gone from table {TABLE}"
    elif (live["chain"].get("type"), live["chain"].get("hook")) != ("filter", "input"):
        problem = f"chain {chain} is {live['chain']}, not a filter on the input hook"
    elif not fw.sglang_nft_drops_port(live, api_port):
        problem = f"no rule of chain {chain} drops the API port {api_port}"
    if problem:
        return Check(
            "firewall",
            node,
            rank,
            "failed",
            f"{node}: the SGLang firewall is not in force: {problem}",
        )
    return Check(
        "firewall",
        node,
        rank,
        "passed",
        f"chain {chain} of table {TABLE} on input, {len(live['rules'])} rules; the API "
        f"port {api_port} only from {', '.join(live['sets'].get(fw.API_SET, [])) or '?'}",
    )


def checks(cluster: Cluster) -> list[Check]:
    """Every rank's firewall: skipped where its SGLang unit is not bound to one
    (sglang_firewall_enabled false), read and judged where it is."""
    bound = cluster.each(
        cluster.nodes, f"systemctl show -p BindsTo --value {shlex.quote(cluster.unit)}", 30
    )
    want = [n for n, (rc, out) in bound.items() if rc == 0 and FW_UNIT in out.split()]
    tables = cluster.each(want, "{sudo}nft -j list table inet sparkctl", 30) if want else {}
    out = []
    for node in cluster.nodes:
        rank = cluster.label(node)
        if node not in tables:
            rc, text = bound[node]
            why = (
                f"{cluster.unit} is not bound to {FW_UNIT} (sglang_firewall_enabled false)"
                if rc == 0
                else f"systemctl show: {text.strip()[-200:] or f'rc {rc}'}"
            )
            out.append(Check("firewall", node, rank, "skipped" if rc == 0 else "failed", why))
            continue
        nft_rc, nft_out = tables[node]
        out.append(judge(node, rank, nft_rc, nft_out, cluster.sglang(node).port))
    return out
