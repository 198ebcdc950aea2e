"""``sparkctl model sync``: the model_cache role through the one runner, with transfer progress.

The transfer itself is the role's (roles/model_cache): the holder streams the
model along a chain of nodes over the fabric. The role's progress task reads
the sender's progress file once per retry; each retry reaches the controller
as a runner event, and :func:`sparkctl.model_progress.transfer_progress` turns
its result into one line per node for the terminal.

An interrupted sync (Ctrl-C) stops the chain on every node without anything
here: the runner cancels by killing ansible-playbook's process group, so no
task of the play runs afterwards, and the sender on the head runs detached
under Ansible's async wrapper, beyond the reach of that kill. Each progress
reading renews a lease the sender checks; when readings stop (Ctrl-C, a killed
controller, a lost connection to the head alike) the sender ends its ssh
sessions, each hop then loses its upstream and ends its own next hop, within
the role's model_cache_lease_timeout (a minute by default). A cleanup run
started from here on interrupt was the other way, and it would need the very
controller and connection whose loss it must cover.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sparkctl import inventory
from sparkctl.playbook import PlaybookRun, run


def sync(
    inv: inventory.Inventory,
    *,
    full_verify: bool = False,
    extravars: Mapping[str, Any] | None = None,
    limit: str | None = None,
    tags: Sequence[str] = (),
) -> PlaybookRun:
    """Run playbooks/model_cache.yml (validated inventory, cluster lock, live progress)."""
    extra = dict(extravars or {})
    source = extra.get("model_cache_source", inv.cluster_var("model_cache_source", "none"))
    if str(source) == "none":
        raise inventory.bad_input(
            inv.path,
            None,
            "model_cache_source",
            "names no model to sync (none); nothing was contacted",
            hint="set model_cache_source to hf, head or controller in group_vars (with "
            "model_cache_hf_repo and model_cache_hf_revision, model_cache_head_dir or "
            "model_cache_controller_dir), or pass -e model_cache_source=...",
        )
    if full_verify:
        extra["model_cache_full_verify"] = True
    return run(
        inv,
        limit=limit,
        tags=tags,
        playbook="model_cache.yml",
        extravars=extra,
        command="model-sync",
    )
