"""Tensor-parallel groups: names, sizes and node counts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkctl.collection import tp_groups

from .common import (
    GROUP_NAME,
    GROUP_NAME_WORDS,
    SPARKS,
    Problem,
    is_int,
    same_everywhere,
    type_name,
)


def sglang_groups(
    sparks: list[str],
    hostvars: Mapping[str, Mapping[str, Any]],
) -> dict[str, list[str]]:
    """The TP groups (``sglang_group``, default ``main``): name -> hosts in node_rank order.

    Groups are ordered by their head (the member with the lowest node_rank). A
    value that is not a string is grouped by its text (its type is reported by
    :func:`check_types`); hosts whose node_rank is not an integer sort last.
    """
    nodes = [
        {
            "name": h,
            "node_rank": hostvars[h].get("node_rank"),
            "group": hostvars[h].get("sglang_group"),
        }
        for h in sparks
    ]
    groups = tp_groups.tp_groups(nodes)
    return {name: [str(n["name"]) for n in members] for name, members in groups.items()}


def _check_group_names(
    sparks: list[str], hostvars: Mapping[str, Mapping[str, Any]]
) -> list[Problem]:
    bad = [
        h
        for h in sparks
        if isinstance(hostvars[h].get("sglang_group"), str)
        and not GROUP_NAME.match(hostvars[h]["sglang_group"])
    ]
    hint = "Sparks with the same sglang_group serve one copy of the model together"

    def problem(host: str | None, value: Any) -> Problem:
        return Problem(
            host,
            "sglang_group",
            f"{value!r} is not a simple word ({GROUP_NAME_WORDS} characters)",
            hint=hint,
        )

    if (
        bad
        and len(bad) == len(sparks)
        and same_everywhere({h: hostvars[h] for h in sparks}, "sglang_group")
    ):
        return [problem(None, hostvars[bad[0]]["sglang_group"])]
    return [problem(h, hostvars[h]["sglang_group"]) for h in bad]


def check_tp(sparks: list[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    """Per TP group: its nodes = sglang_nnodes, and TP = its nodes x GPUs per node.

    ``sglang_tp_size`` and ``sglang_nnodes`` are ``type: raw`` in the sglang role's
    argument spec (their defaults are templates), so their types are checked here.
    A setting every Spark shares, in a cluster of one group (the default), is
    reported once for the cluster; otherwise each Spark is named with its group.
    """
    spark_vars = {h: hostvars[h] for h in sparks}
    problems = _check_group_names(sparks, hostvars)
    for var in ("sglang_nnodes", "sglang_tp_size"):
        wrong = [
            h
            for h in sparks
            if hostvars[h].get(var) is not None
            and (not is_int(hostvars[h][var]) or hostvars[h][var] < 1)
        ]
        everywhere = len(wrong) == len(sparks) and same_everywhere(spark_vars, var)
        for host in wrong[:1] if everywhere else wrong:
            value = hostvars[host][var]
            problems.append(
                Problem(
                    None if everywhere else host,
                    var,
                    f"{value!r} is {type_name(value)}, but sglang needs a positive integer",
                )
            )
    groups = sglang_groups(sparks, hostvars)
    for name, members in groups.items():
        problems += _check_dist_port(name, members, hostvars)
    if len(groups) == 1:
        cluster = _check_tp_cluster(sparks, spark_vars)
        if cluster is not None:
            return problems + cluster
    for name, members in groups.items():
        problems += _check_tp_group(name, members, hostvars)
    return problems


# The sglang role's default rendezvous port (roles/sglang/defaults/main.yml).
DEFAULT_DIST_PORT = 50000


def _check_dist_port(
    name: str, members: list[str], hostvars: Mapping[str, Mapping[str, Any]]
) -> list[Problem]:
    """One rendezvous port per TP group: the head listens on its own sglang_dist_port and
    every other member dials the head at its own (--dist-init-addr HEAD:PORT), so a
    member with another port waits for a rendezvous that never answers.

    The group's port is the one most members have; on a tie, the one of the members that
    leave it unset (the role's default), else the head's. The others are named."""
    ports = {h: hostvars[h].get("sglang_dist_port", DEFAULT_DIST_PORT) for h in members}
    if not all(is_int(p) for p in ports.values()) or len(set(ports.values())) < 2:
        return []  # one port, or a type the schema reports
    unset = {ports[h] for h in members if "sglang_dist_port" not in hostvars[h]}
    counts = {p: list(ports.values()).count(p) for p in ports.values()}
    want = max(counts, key=lambda p: (counts[p], p in unset, p == ports[members[0]]))
    group = f"SGLang group {name!r} ({', '.join(members)})"
    problems = []
    for host in members:
        if ports[host] != want:
            others = [h for h in members if ports[h] == want]
            problems.append(
                Problem(
                    host,
                    "sglang_dist_port",
                    f"{ports[host]} differs from {want}, the port of {', '.join(others)} in "
                    f"{group}: the head ({members[0]}) listens on its sglang_dist_port and "
                    "every other member dials it at its own (--dist-init-addr), so they "
                    "never meet",
                    hint=f"set sglang_dist_port: {want} for every member of the group "
                    "(a group_vars value), or leave it unset everywhere",
                )
            )
    return problems


def _check_tp_cluster(
    sparks: list[str],
    spark_vars: Mapping[str, Mapping[str, Any]],
) -> list[Problem] | None:
    """One group of every Spark with the same settings everywhere: cluster-wide problems.

    None when a setting differs between Sparks (then each Spark is judged).
    """
    if not all(
        same_everywhere(spark_vars, var) or all(var not in hv for hv in spark_vars.values())
        for var in ("sglang_gpus_per_node", "sglang_nnodes", "sglang_tp_size")
    ):
        return None
    first = spark_vars[sparks[0]]
    problems: list[Problem] = []
    gpus = first.get("sglang_gpus_per_node", 1)
    nnodes = first.get("sglang_nnodes")
    if is_int(nnodes) and nnodes >= 1 and nnodes != len(sparks):
        problems.append(
            Problem(
                None,
                "sglang_nnodes",
                f"{nnodes} nodes does not match the {len(sparks)} Sparks in "
                f"[{SPARKS}] (one SGLang process per Spark)",
                hint=f"set sglang_nnodes: {len(sparks)} or change [{SPARKS}]",
            )
        )
    tp = first.get("sglang_tp_size")
    if is_int(tp) and tp >= 1 and is_int(gpus) and tp != len(sparks) * gpus:
        problems.append(
            Problem(
                None,
                "sglang_tp_size",
                f"TP {tp} does not match {len(sparks)} Sparks x {gpus} GPU(s) per node",
                hint=f"set sglang_tp_size: {len(sparks) * gpus} or change [{SPARKS}]",
            )
        )
    return problems


def _check_tp_group(
    name: str, members: list[str], hostvars: Mapping[str, Mapping[str, Any]]
) -> list[Problem]:
    """Each member's sglang_nnodes and sglang_tp_size against its group's size."""
    n = len(members)
    sparks = f"{n} Spark{'s' if n != 1 else ''}"
    group = f"SGLang group {name!r} ({', '.join(members)})"
    unset = "or leave it unset: it defaults to the group's"
    problems: list[Problem] = []
    for host in members:
        hv = hostvars[host]
        nnodes, tp, gpus = (
            hv.get("sglang_nnodes"),
            hv.get("sglang_tp_size"),
            hv.get("sglang_gpus_per_node", 1),
        )
        if is_int(nnodes) and nnodes >= 1 and nnodes != n:
            problems.append(
                Problem(
                    host,
                    "sglang_nnodes",
                    f"{nnodes} nodes does not match the {sparks} of {group} "
                    "(one SGLang process per Spark)",
                    hint=f"set sglang_nnodes: {n} for this group, {unset} size",
                )
            )
        if not (is_int(tp) and tp >= 1 and is_int(gpus)) or tp == n * gpus:
            continue
        if tp % n:
            text = (
                f"TP {tp} is not a multiple of the {sparks} of {group} (--tp-size is the "
                "total degree; each node holds tp/nnodes GPUs)"
            )
        else:
            text = f"TP {tp} does not match the {sparks} of {group} x {gpus} GPU(s) per node"
        problems.append(
            Problem(
                host,
                "sglang_tp_size",
                text,
                hint=f"set sglang_tp_size: {n * gpus} for this group, {unset} "
                "size x sglang_gpus_per_node",
            )
        )
    return problems
