"""The inventory rules, in one place for the CLI and for the playbooks.

``sparkctl`` runs :func:`check` on the controller before any host is contacted; the
``preflight`` role runs the very same function as the filter
``sparkctl_inventory_problems`` (:mod:`.filter`), so plain ``ansible-playbook`` is just
as safe.

One module per concern:

- :mod:`.schema`: every role variable's type, choices and constraint (the roles'
  ``meta/argument_specs.yml`` and ``meta/constraints.yml``), and unknown names;
- :mod:`.formats`: the value formats a constraint names;
- :mod:`.connection`: how the controller reaches a host (passwords, host keys, ssh);
- :mod:`.secrets`: one secret rule for every hiding place;
- :mod:`.risks`: hardening switches, refused unless ``preflight_accepted_risks`` lists
  them;
- :mod:`.topology`: addresses, subnets, ranks and the switch;
- :mod:`.tp`: the tensor-parallel groups;
- :mod:`.relations`: rules between variables (:mod:`.firewall`: the firewall's address
  lists and ports);
- :mod:`.data`: values are data (no template runs) and :mod:`.jsonschema_core`, the
  schema itself;
- :mod:`.filter`: the rules as an Ansible filter.

This package must stay importable by Ansible on its own: standard library, PyYAML and
jsonschema only, no other part of sparkctl.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from sparkctl.ansible_compat import origin_of

from .common import (
    DEFAULT_SGLANG_GROUP,
    SPARKS,
    SWITCH_OSES,
    SWITCHES,
    TWINS,
    Problem,
    is_secret_name,
    load_yaml,
    plain,
)
from .connection import ssh_options
from .relations import check_relations
from .risks import accepted_risks, check_risks
from .schema import check_types, load_specs
from .secrets import check_secrets, plaintext_secret, secret_problem
from .topology import check_topology
from .tp import sglang_groups

__all__ = [
    "DEFAULT_SGLANG_GROUP",
    "SPARKS",
    "SWITCHES",
    "SWITCH_OSES",
    "TWINS",
    "Problem",
    "accepted_risks",
    "check",
    "check_risks",
    "check_secrets",
    "check_types",
    "is_secret_name",
    "load_specs",
    "load_yaml",
    "origin_of",
    "plain",
    "plaintext_secret",
    "secret_problem",
    "sglang_groups",
    "ssh_options",
]


def check(
    groups: Mapping[str, list[str]],
    hostvars: Mapping[str, Mapping[str, Any]],
    roles_dir: Path,
    user_vars: Mapping[str, Iterable[str]] | None = None,
    *,
    in_play: bool = False,
) -> list[Problem]:
    """All rules: topology first, then types of role variables.

    A variable the topology rules already reported (``node_rank: one``) is not
    reported again as a wrong type. Cluster-wide problems (no host) say which hosts
    they concern.
    """
    problems = check_topology(groups, hostvars)
    problems += check_risks(groups, hostvars)
    reported = {(p.host, p.var) for p in problems}
    problems += [
        p
        for p in check_types(hostvars, load_specs(roles_dir), user_vars, in_play=in_play)
        if (p.host, p.var) not in reported
    ]
    if not any(p.var is None and p.host is None for p in problems):  # a topology at all
        reported = {(p.host, p.var) for p in problems} | {(None, p.var) for p in problems}
        problems += [
            p
            for p in check_relations(groups, hostvars, roles_dir)
            if (p.host, p.var) not in reported
        ]
    return [
        replace(p, scope=_scope(hostvars, p.var)) if p.host is None and p.var else p
        for p in problems
    ]


def _scope(hostvars: Mapping[str, Mapping[str, Any]], var: str | None) -> str:
    top = (var or "").split(".", 1)[0]
    having = [host for host, hv in hostvars.items() if top in hv]
    if not having or len(having) == len(hostvars):
        return "all hosts"
    return f"hosts {', '.join(having)}"
