#!/usr/bin/python
"""Ansible module nvidia_held_updates: which held packages have updates waiting.

The hold set keeps driver, CUDA, NCCL and kernel still; their updates (security
ones among them) then wait for a rolling update (docs/operate.md). This module
runs ``apt list --upgradable`` (apt's package lists as they are: no refresh),
keeps the packages named in ``held`` and returns them security pocket first,
with one warning naming them, so that provision says so without failing. The
listing is read by sparkctl's one parser of tool output
(the collection's module_utils tool_output); unit tests in
tests/unit/test_nvidia_driver.py on a real noble listing
(tests/fixtures/apt), never shell in a task.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.tool_output import (
    ToolOutputError,
    apt_upgradable,
)

DOCUMENTATION = r"""
---
module: nvidia_held_updates
short_description: Held packages with a newer candidate, security pocket first
description:
  - Runs C(apt list --upgradable) with C(LC_ALL=C) and returns the entries of
    the packages in I(held), those from a C(-security) pocket first.
  - Adds one warning naming them when there are any; never fails on them.
  - Fails only when apt cannot list (not a Debian system).
  - Reads only; check mode is supported.
options:
  held:
    description: Names of the packages on hold (the installed part of the hold set).
    type: list
    elements: str
    required: true
  node_name:
    description: Name of the node in messages; the host name when not given.
    type: str
author: sparkctl developers
"""

EXAMPLES = r"""
- name: Held packages with updates waiting
  nvidia_held_updates:
    held: "{{ nvidia_driver_held_packages }}"
    node_name: "{{ inventory_hostname }}"
  register: waiting
"""

RETURN = r"""
updates:
  description: >-
    One entry per held package with a candidate: name, version,
    installed, arch, pockets, security.
  type: list
  elements: dict
  returned: success
security:
  description: How many of them come from a security pocket.
  type: int
  returned: success
"""

RunCommand = Callable[[list[str]], tuple[int, str, str]]


class HeldUpdatesError(Exception):
    """apt could not list the upgradable packages."""


def held_updates(held: list[str], run: RunCommand, node: str) -> list[dict[str, Any]]:
    """The held packages' candidates, security first (apt's order within each group)."""
    rc, out, err = run(["apt", "list", "--upgradable"])
    if rc != 0:
        said = " ".join((err or out).split())[:200]
        raise HeldUpdatesError(f"{node}: apt list --upgradable failed (exit {rc}): {said}")
    try:
        rows = apt_upgradable(out)
    except ToolOutputError as exc:
        raise HeldUpdatesError(f"{node}: {exc}") from exc
    names = set(held)
    return [r for r in rows if r["name"] in names]


def warning(updates: list[dict[str, Any]], node: str) -> str | None:
    """One sentence for the operator, or None when nothing waits."""
    if not updates:
        return None
    security = sum(1 for u in updates if u["security"])
    shown = ", ".join(
        f"{u['name']} {u['installed']} -> {u['version']} ({','.join(u['pockets'])})"
        for u in updates[:8]
    )
    more = f" and {len(updates) - 8} more" if len(updates) > 8 else ""
    return (
        f"{node}: {len(updates)} held package(s) have updates waiting, {security} from a "
        f"security pocket (listed first): {shown}{more}. They stay held; update the nodes one "
        "at a time (docs/operate.md, Rolling update of one node)."
    )


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "held": {"type": "list", "elements": "str", "required": True},
            "node_name": {"type": "str"},
        },
        supports_check_mode=True,
    )
    node = module.params["node_name"] or socket.gethostname()

    def run(argv: list[str]) -> tuple[int, str, str]:
        rc, out, err = module.run_command(
            argv, environ_update={"LC_ALL": "C"}, handle_exceptions=False
        )
        return rc, out, err

    try:
        updates = held_updates(module.params["held"], run, node)
    except (HeldUpdatesError, OSError) as exc:
        module.fail_json(msg=str(exc))
    said = warning(updates, node)
    if said:
        module.warn(said)
    module.exit_json(
        changed=False, updates=updates, security=sum(1 for u in updates if u["security"])
    )


if __name__ == "__main__":
    main()
