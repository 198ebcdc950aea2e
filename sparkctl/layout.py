"""Another TP layout of the same Sparks, without editing the inventory.

A layout is named as ``model plan`` names it: ``tp4`` (one group of four Sparks),
``tp2x2`` (two groups at TP=2), ``tp1x4`` (four replicas). Its groups take the Sparks
in node_rank order, ``tp`` GPUs' worth of Sparks each.

The inventory is the operator's and stays untouched. A layout is a second inventory
source, written under the state directory (``layouts/<cluster>/<layout>/``): a
``hosts.yml`` that names the inventory's Sparks, and a ``host_vars/<host>.yml`` for each
with its ``sglang_group`` (and ``sglang_gateway_enabled: true`` when the layout has
several groups: one endpoint in front of them, as serve's groups have). Ansible reads
the sources in order and a later source's host_vars override an earlier one's, so the
roles, the plan, the rules and serve's groups all see the layout through the one
variable they already read (:attr:`sparkctl.inventory.Inventory.sources`). Only ``-e``
ranks above host_vars: a command's ``-e`` that sets either variable is refused with a
layout.

The files hold nothing but those two variables, written by ``yaml.safe_dump`` from
values made here (group names from the layout's name, never from the inventory); a
host name that could not be a file name is refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sparkctl import inventory, rules
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.paths import state_dir

NAME = re.compile(r"^tp([1-9][0-9]{0,3})(?:x([1-9][0-9]{0,3}))?\Z")
# what a host_vars file may be named after (Ansible's host names are wider)
HOST_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}\Z")
# the variables a layout sets; -e would override them on every host
SETS = ("sglang_group", "sglang_gateway_enabled")
# provision's roles that read the groups: the units, ranks, rendezvous, firewall and
# gateway (sglang), and the scrape targets and rules per group (monitoring)
REGROUP_TAGS = ("sglang", "monitoring")
HEADER = (
    "# Written by sparkctl (bench --layouts): the inventory's Sparks in another TP layout.\n"
    "# An inventory source read after the operator's; not for editing.\n"
)

Partition = frozenset[frozenset[str]]


@dataclass(frozen=True)
class Layout:
    """``groups`` TP groups of ``tp`` GPUs each."""

    tp: int
    groups: int

    @property
    def name(self) -> str:
        return f"tp{self.tp}" if self.groups == 1 else f"tp{self.tp}x{self.groups}"

    def group_names(self) -> list[str]:
        if self.groups == 1:
            return [self.name]
        return [f"{self.name}-{i + 1}" for i in range(self.groups)]


def allowed(nodes: int, gpus_per_node: int = 1) -> list[Layout]:
    """Every layout of ``nodes`` Sparks: each TP size that splits them into whole groups."""
    gpus = nodes * gpus_per_node
    return [
        Layout(tp, gpus // tp)
        for tp in range(gpus, 0, -1)
        if gpus % tp == 0 and tp % gpus_per_node == 0
    ]


def parse(text: str, nodes: int, gpus_per_node: int = 1) -> list[Layout]:
    """``tp4,tp2x2``: the layouts in the order given; SparkctlError (exit 2) naming the
    word that is not one of the cluster's layouts."""
    ok = allowed(nodes, gpus_per_node)
    names = ", ".join(x.name for x in ok)
    out: list[Layout] = []
    for raw in text.split(","):
        word = raw.strip()
        m = NAME.match(word)
        if m is None:
            raise SparkctlError(
                f"--layouts: {word!r} is not a layout name",
                ExitCode.BAD_INPUT,
                hint=f"tpN for one group, tpNxG for G groups; this cluster's: {names}",
            )
        tp = int(m.group(1))
        total = nodes * gpus_per_node
        groups = int(m.group(2)) if m.group(2) else total // tp if total % tp == 0 else 0
        found = next((x for x in ok if x.tp == tp and x.groups == groups), None)
        if found is None:
            raise SparkctlError(
                f"--layouts: {word} does not split {nodes} Sparks ({gpus_per_node} GPU"
                f"{'s' if gpus_per_node != 1 else ''} each) into whole TP groups",
                ExitCode.BAD_INPUT,
                hint=f"this cluster's layouts: {names}",
            )
        if found in out:
            raise SparkctlError(f"--layouts: {found.name} is given twice", ExitCode.BAD_INPUT)
        out.append(found)
    return out


def assignment(inv: inventory.Inventory, layout: Layout, gpus_per_node: int = 1) -> dict[str, str]:
    """Spark -> its group in ``layout``: node_rank order, tp/gpus_per_node Sparks a group."""
    per = layout.tp // gpus_per_node
    names = layout.group_names()
    return {node.name: names[i // per] for i, node in enumerate(inv.nodes)}


def partition_of(inv: inventory.Inventory) -> Partition:
    """The inventory's groups as sets of Sparks (names aside: what the units differ by)."""
    sparks = [n.name for n in inv.nodes]
    groups = rules.sglang_groups(sparks, inv.hostvars)
    return frozenset(frozenset(members) for members in groups.values())


def partition(assigned: Mapping[str, str]) -> Partition:
    by: dict[str, set[str]] = {}
    for host, group in assigned.items():
        by.setdefault(group, set()).add(host)
    return frozenset(frozenset(members) for members in by.values())


def refuse_extra(extra: Mapping[str, Any]) -> None:
    """-e outranks every inventory source: one that sets a layout's variables would
    undo the layout on every host."""
    clash = [name for name in SETS if name in extra]
    if clash:
        raise SparkctlError(
            f"-e {clash[0]}: --layouts sets {' and '.join(SETS)} per Spark; "
            "-e would override them on every host",
            ExitCode.BAD_INPUT,
            hint="leave them to the layout (or to the inventory for its own layout)",
        )


def overlay_dir(cluster: str, layout: Layout) -> Path:
    return state_dir() / "layouts" / cluster / layout.name


def write_overlay(inv: inventory.Inventory, layout: Layout, gpus_per_node: int = 1) -> Path | None:
    """The layout's inventory source (its hosts.yml); None when the inventory's own
    groups are the layout's (the inventory serves it as it is)."""
    assigned = assignment(inv, layout, gpus_per_node)
    if partition(assigned) == partition_of(inv):
        return None
    bad = [h for h in assigned if not HOST_FILE.match(h)]
    if bad:
        raise inventory.bad_input(
            inv.path,
            bad[0],
            None,
            "cannot name a host_vars file (letters, digits, '.', '_' and '-' only): "
            "--layouts cannot give it another group",
        )
    top = overlay_dir(inv.cluster, layout)
    host_vars = top / "host_vars"
    host_vars.mkdir(parents=True, exist_ok=True)
    for stale in host_vars.glob("*.yml"):
        if stale.stem not in assigned:
            stale.unlink()
    for host, group in assigned.items():
        data: dict[str, Any] = {"sglang_group": group}
        if layout.groups > 1:
            data["sglang_gateway_enabled"] = True
        (host_vars / f"{host}.yml").write_text(HEADER + yaml.safe_dump(data, sort_keys=True))
    hosts = top / "hosts.yml"
    doc = {"all": {"hosts": dict.fromkeys(assigned)}}
    hosts.write_text(HEADER + yaml.safe_dump(doc, sort_keys=True))
    return hosts


def apply(
    inv: inventory.Inventory,
    layout: Layout,
    extra: Mapping[str, Any] | None = None,
    gpus_per_node: int = 1,
) -> inventory.Inventory:
    """The inventory as ``layout`` serves it, checked by every rule as the inventory is
    (exit 2 on a problem, before any host is contacted); ``inv`` itself when its own
    groups are the layout's."""
    refuse_extra(extra or {})
    source = write_overlay(inv, layout, gpus_per_node)
    if source is None:
        return inv
    return inventory.validate(inv.path, extra, overlay=source)


def describe(inv: inventory.Inventory) -> str:
    """The inventory's groups, e.g. ``a: spark1, spark2; b: spark3, spark4``."""
    sparks = [n.name for n in inv.nodes]
    groups = rules.sglang_groups(sparks, inv.hostvars)
    return "; ".join(f"{name}: {', '.join(members)}" for name, members in groups.items())


def names(layouts: Sequence[Layout]) -> str:
    return ",".join(x.name for x in layouts)
