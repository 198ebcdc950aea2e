"""What every command that reaches the nodes shares: the plan, SSH, the hosts.

validate, serve and trust all go through here, none through another command's
package: :mod:`.plan_cache` computes and caches an inventory's plan
(validate_plan.yml, with each node's connection as Ansible resolves it),
:mod:`.sshconfig` turns that connection into a strict per-run ssh_config (and
names each host's known_hosts file), :mod:`.ssh` runs commands over it, and
:func:`connect` puts the three together for the inventory's Sparks, in node_rank
order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkctl import inventory
from sparkctl.plan import Plan
from sparkctl.remote import sshconfig
from sparkctl.remote.plan_cache import load_plan
from sparkctl.remote.ssh import OUTPUT_LIMIT, Runner, ssh_runner

__all__ = [
    "OUTPUT_LIMIT",
    "Remote",
    "Runner",
    "connect",
    "load_plan",
    "node_names",
    "ssh_runner",
    "sshconfig",
    "sudo_prefix",
]


def sudo_prefix(plan: Plan, node: str) -> str:
    """Root on the node: "" for a root connection, else ``sudo -n `` (the connection user,
    as Ansible resolved it, may be an admin with sudo, Ansible's become)."""
    user = plan.node(node).connection.ansible_user or "root"
    return "" if user == "root" else "sudo -n "


def node_names(inv: inventory.Inventory) -> list[str]:
    """The hosts a command reaches: every Spark of the inventory, in node_rank order."""
    return [n.name for n in inv.nodes]


@dataclass(frozen=True)
class Remote:
    """One run's way to the nodes: their plan, the ssh_config written for them, a runner."""

    plan: Plan
    nodes: list[str]
    ssh_config: Path
    runner: Runner


def connect(
    inv: inventory.Inventory, run_dir: Path, extravars: Mapping[str, Any] | None = None
) -> Remote:
    """The plan loaded (run_dir/plan.json), run_dir/ssh_config written for every node
    from the plan's connections (what Ansible resolved, -e included)."""
    plan = load_plan(inv, run_dir, extravars)
    nodes = node_names(inv)
    connections = {n: plan.node(n).connection.as_vars() for n in nodes}
    cfg = sshconfig.write(run_dir / "ssh_config", connections, nodes)
    return Remote(plan=plan, nodes=nodes, ssh_config=cfg, runner=ssh_runner(cfg))
