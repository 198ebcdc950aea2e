"""SGLang's tensor-parallel groups of a cluster: which Sparks serve together, in what order.

Decided here once, for both sides of the Python/Ansible line:

- the sglang role (its filter ``sglang_tp_group``, through ``_sglang_nodes``) groups
  the nodes for each unit's ``--nnodes``, ``--node-rank`` and ``--dist-init-addr``;
- the inventory rules (``sparkctl/rules/tp.py``) group the same hosts, before any host
  is contacted, to check each group's size, TP degree and rendezvous port.

A group is the Sparks with the same ``sglang_group`` (default :data:`DEFAULT_GROUP`),
in ``node_rank`` order; its head is its first member (the rendezvous and the API).
Groups are ordered by their head. Standard library only: sparkctl imports it through
:mod:`sparkctl.collection`, Ansible through its collection loader.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

# The role's default of sglang_group (roles/sglang/defaults/main.yml says the same).
DEFAULT_GROUP = "main"

# A group name: one word of letters, digits, ``_`` and ``-``, because it becomes a
# directory on the controller (the state dir's clusters/NAME), the title of HTML
# reports, a word of the unit's Description and of ``sparkctl serve``'s output. No
# dot, so no ``..`` and no name that differs from another by a dot only.
GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}\Z")
# What GROUP_NAME says, for messages.
GROUP_NAME_WORDS = "letters, digits, _ and -, starting with a letter or digit, at most 63"

_Node = TypeVar("_Node", bound=Mapping[str, Any])


def _rank_key(node: Mapping[str, Any]) -> tuple[int, int, str]:
    """node_rank order; a node whose node_rank is not an integer sorts last (the
    inventory rules and the filter each name it in their own words)."""
    rank = node.get("node_rank")
    if isinstance(rank, int) and not isinstance(rank, bool):
        return (0, rank, str(node.get("name")))
    return (1, 0, str(node.get("name")))


def group_name(node: Mapping[str, Any]) -> str:
    """The node's group: its ``group`` as text (a value of another type is grouped by
    its text; the rules report its type), else the default."""
    value = node.get("group")
    return DEFAULT_GROUP if value is None else str(value)


def tp_groups(nodes: Iterable[_Node]) -> dict[str, list[_Node]]:
    """The groups of ``nodes`` (mappings with ``name``, ``node_rank``, ``group``):
    name -> members in node_rank order, the groups in the order of their heads."""
    groups: dict[str, list[_Node]] = {}
    for node in sorted(nodes, key=_rank_key):
        groups.setdefault(group_name(node), []).append(node)
    return groups
