"""The filter ``sparkctl_play_hosts``: a play's host pattern over the named groups that
the inventory has, e.g. ``groups | sparkctl.spark.sparkctl_play_hosts('sparks',
'monitoring')`` is ``sparks:monitoring``, or ``sparks`` where the inventory has no
``[monitoring]`` group (it is optional, docs/monitoring.md).

The entry playbooks' first play (playbooks/preflight.yml) names its hosts with it, and
that has a second purpose: speed. A play's ``hosts`` is templated in the controller's
own process, before any task's worker is forked. ansible-core loads every filter file
of a collection whenever a template names one of its filters (Jinja2Loader walks the
collection's ``plugins/filter`` package, ansible/plugins/loader.py), compiling each from
source (the collection loader keeps no bytecode cache). Loaded there once, the filters
are inherited by every forked worker; otherwise each worker of each task and host
compiles all of them again: about 4 000 lines, half of a render's CPU time
(docs/benchmarks.md, "Render").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

# An Ansible group name: letters, digits and underscores (the inventory rules refuse others).
_GROUP = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


def sparkctl_play_hosts(groups: Mapping[str, Any], *names: str) -> str:
    """``names`` that are groups of the inventory, joined into one host pattern. With
    none of them present, the first name, so that Ansible says no host matched."""
    if not isinstance(groups, Mapping):
        kind = type(groups).__name__
        raise AnsibleFilterError(f"sparkctl_play_hosts: expects the groups mapping, got {kind}")
    if not names:
        raise AnsibleFilterError("sparkctl_play_hosts: name at least one group")
    bad = [n for n in names if not isinstance(n, str) or not _GROUP.match(n)]
    if bad:
        raise AnsibleFilterError(f"sparkctl_play_hosts: not group names: {bad!r}")
    return ":".join(n for n in names if n in groups) or names[0]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"sparkctl_play_hosts": sparkctl_play_hosts}
