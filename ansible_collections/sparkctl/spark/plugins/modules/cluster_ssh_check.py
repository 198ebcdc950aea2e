#!/usr/bin/python
"""Ansible module: prove node-to-node SSH works with the cluster key and strict host keys.

Runs ``ssh PEER hostname`` as the cluster user to every peer name given, with
BatchMode and StrictHostKeyChecking=yes, and reports per peer whether it
answered with the expected hostname. Never changes anything.
"""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

DOCUMENTATION = r"""
---
module: cluster_ssh_check
short_description: Check node-to-node SSH with the cluster key
description:
  - Runs C(ssh PEER hostname) as the cluster user to every peer given, with
    BatchMode and StrictHostKeyChecking=yes, and reports per peer whether it
    answered with the expected hostname.
  - Never changes anything.
options:
  peers:
    description: List of {name, address} to reach; the answer must be C(name).
    type: list
    elements: dict
    required: true
  user:
    description: Run ssh as this user (via runuser when it is not the current one).
    type: str
    required: true
author: sparkctl developers
"""


# A peer's address comes from the inventory (ansible_host): the rules refuse what is
# not a host name or an address, and this module again, before it becomes an ssh word.
ADDRESS = re.compile(r"[A-Za-z0-9][A-Za-z0-9.:_-]{0,252}")


def check_peer(user: str, current: str, peer: dict[str, str]) -> dict[str, Any]:
    address = str(peer.get("address", ""))
    if not ADDRESS.fullmatch(address):
        return {
            "name": peer.get("name"),
            "address": address,
            "ok": False,
            "reason": f"{address!r} is not a host name or an address; not contacted",
        }
    ssh = [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "ConnectTimeout=5",
        "--",
        address,
        "hostname",
    ]
    cmd = ssh if user == current else ["runuser", "-u", user, "--", *ssh]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    answer = proc.stdout.strip()
    ok = proc.returncode == 0 and answer == peer["name"]
    reason = (
        ""
        if ok
        else (
            proc.stderr.strip().splitlines()[-1]
            if proc.stderr.strip()
            else f"answered {answer!r}, expected {peer['name']!r}"
        )
    )
    return {"name": peer["name"], "address": peer["address"], "ok": ok, "reason": reason}


def main() -> None:
    import getpass  # noqa: PLC0415

    from ansible.module_utils.basic import AnsibleModule  # noqa: PLC0415

    module = AnsibleModule(
        argument_spec={
            "peers": {"type": "list", "elements": "dict", "required": True},
            "user": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    current = getpass.getuser()
    peers = module.params["peers"]
    with ThreadPoolExecutor(max_workers=max(1, len(peers))) as pool:
        results = list(pool.map(lambda p: check_peer(module.params["user"], current, p), peers))
    failed = [r for r in results if not r["ok"]]
    if failed:
        module.fail_json(
            msg="node-to-node SSH failed: "
            + "; ".join(f"{r['address']} ({r['name']}): {r['reason']}" for r in failed),
            results=results,
        )
    module.exit_json(changed=False, results=results)


if __name__ == "__main__":
    main()
