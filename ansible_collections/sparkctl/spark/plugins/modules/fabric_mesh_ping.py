#!/usr/bin/python
"""Ansible module: full-MTU, don't-fragment pings to every peer on each twin.

A host at MTU 9000 behind a switch port left at 1500 drops large frames
silently; ``ping -M do -s MTU-28`` is the test that catches it
(docs/reference.md, "The network"). Pings run in parallel; the result names the
interface and the peer for every failure.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ansible_collections.sparkctl.spark.plugins.module_utils.tool_output import ping as ping_summary

DOCUMENTATION = r"""
---
module: fabric_mesh_ping
short_description: DF-bit pings of the full MTU to every peer over each fabric twin
description:
  - Runs C(ping -M do -s MTU-28) to every target in parallel, so a host at MTU 9000
    behind a switch port left at 1500, which drops large frames silently, is found.
  - The result names the interface and the peer of every failure. Never changes anything.
options:
  targets:
    description: List of {interface, address, peer, mtu}.
    type: list
    elements: dict
    required: true
  count:
    description: Echo requests per target.
    type: int
    default: 3
author: sparkctl developers
"""


def ping(target: dict[str, Any], count: int) -> dict[str, Any]:
    payload = int(target["mtu"]) - 28  # 20 bytes IPv4 + 8 bytes ICMP header
    cmd = [
        "ping",
        "-n",
        "-q",
        "-M",
        "do",
        "-c",
        str(count),
        "-i",
        "0.2",
        "-W",
        "1",
        "-I",
        str(target["interface"]),
        "-s",
        str(payload),
        str(target["address"]),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    summary = ping_summary(proc.stdout, proc.stderr)
    tx, rx = (summary["sent"], summary["received"]) if summary["sent"] else (count, 0)
    ok = rx == tx and tx > 0
    detail = "" if ok else (summary["error"] or f"{rx}/{tx} replies")
    return {**target, "payload": payload, "sent": tx, "received": rx, "ok": ok, "detail": detail}


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule  # noqa: PLC0415

    module = AnsibleModule(
        argument_spec={
            "targets": {"type": "list", "elements": "dict", "required": True},
            "count": {"type": "int", "default": 3},
        },
        supports_check_mode=True,
    )
    targets = module.params["targets"]
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(targets)))) as pool:
        results = list(pool.map(lambda t: ping(t, module.params["count"]), targets))
    failed = [r for r in results if not r["ok"]]
    if failed:
        module.fail_json(
            msg="full-MTU pings failed: "
            + "; ".join(
                f"{r['interface']} -> {r['peer']} {r['address']} ({r['mtu']} bytes): {r['detail']}"
                for r in failed
            ),
            results=results,
        )
    module.exit_json(changed=False, results=results)


if __name__ == "__main__":
    main()
