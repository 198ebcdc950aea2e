#!/usr/bin/python
"""Ansible module: full-MTU, don't-fragment pings to every peer on each twin.

A host at MTU 9000 behind a switch port left at 1500 drops large frames
silently; ``ping -M do -s MTU-28`` is the test that catches it
(dgx-spark.md, "The network"). Pings run in parallel; the result names the
interface and the peer for every failure.
"""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

DOCUMENTATION = r"""
---
module: fabric_mesh_ping
short_description: DF-bit pings of the full MTU to every peer over each fabric twin
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

_STATS = re.compile(r"(?P<tx>\d+) packets transmitted, (?P<rx>\d+) (?:packets )?received")


def parse_ping(text: str) -> tuple[int, int]:
    """(transmitted, received) from iputils ping's summary line."""
    m = _STATS.search(text)
    if m is None:
        raise ValueError("no ping summary line")
    return int(m.group("tx")), int(m.group("rx"))


def ping(target: dict[str, Any], count: int) -> dict[str, Any]:
    payload = int(target["mtu"]) - 28  # 20 bytes IPv4 + 8 bytes ICMP header
    cmd = ["ping", "-n", "-q", "-M", "do", "-c", str(count), "-i", "0.2", "-W", "1",
           "-I", str(target["interface"]), "-s", str(payload), str(target["address"])]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    try:
        tx, rx = parse_ping(proc.stdout)
    except ValueError:
        tx, rx = count, 0
    ok = rx == tx and tx > 0
    detail = "" if ok else (proc.stderr.strip().splitlines()[-1] if proc.stderr.strip()
                            else f"{rx}/{tx} replies")
    return {**target, "payload": payload, "sent": tx, "received": rx, "ok": ok,
            "detail": detail}


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule  # noqa: PLC0415

    module = AnsibleModule(argument_spec={
        "targets": {"type": "list", "elements": "dict", "required": True},
        "count": {"type": "int", "default": 3}}, supports_check_mode=True)
    targets = module.params["targets"]
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(targets)))) as pool:
        results = list(pool.map(lambda t: ping(t, module.params["count"]), targets))
    failed = [r for r in results if not r["ok"]]
    if failed:
        module.fail_json(msg="full-MTU pings failed: " + "; ".join(
            f"{r['interface']} -> {r['peer']} {r['address']} ({r['mtu']} bytes): {r['detail']}"
            for r in failed), results=results)
    module.exit_json(changed=False, results=results)


if __name__ == "__main__":
    main()
